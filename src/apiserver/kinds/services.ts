import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { errors } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { generateNameSuffix } from '../storage.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { defaultServiceNetwork, type ServiceNetwork } from '../../node-protocol/service-network.js';
import { allocateForService, releaseForService } from './service-allocation.js';
import {
  applyServiceDefaults,
  keepAllocatedValues,
  prepareServiceForCreate,
  validateService,
  validateServiceUpdate,
} from './service-validation.js';

/**
 * v1 Service: defaults and validation as kube-apiserver's (./service-validation.ts), a ClusterIP
 * from the cluster's `service-cidr` and node ports from `service-node-port-range` reserved in the
 * datastore at create and update (./service-allocation.ts), released at delete. LoadBalancer
 * Services are accepted and get their ClusterIP and node ports, but no load balancer: their
 * status stays empty, so kubectl shows EXTERNAL-IP <pending> (docs/networking.md).
 */

const KIND = 'Service';

let fallbackNetwork: ServiceNetwork | undefined;
/** The cluster's Service network, or the settings' defaults for contexts that do not say. */
export function serviceNetworkOf(context: KindContext): ServiceNetwork {
  return context.serviceNetwork ?? (fallbackNetwork ??= defaultServiceNetwork());
}

type Spec = Record<string, unknown>;
const specOf = (svc: KubeObject): Spec => (isJsonObject(svc.spec) ? (svc.spec as Spec) : {});

function portsCell(spec: Spec): string {
  const ports = Array.isArray(spec.ports) ? (spec.ports as Record<string, unknown>[]) : [];
  if (ports.length === 0) return '<none>';
  return ports
    .map((p) => (p.nodePort ? `${String(p.port)}:${String(p.nodePort)}/${String(p.protocol ?? 'TCP')}` : `${String(p.port)}/${String(p.protocol ?? 'TCP')}`))
    .join(',');
}

function externalIpCell(svc: KubeObject): string {
  const spec = specOf(svc);
  const externalIPs = Array.isArray(spec.externalIPs) ? (spec.externalIPs as string[]) : [];
  switch (spec.type) {
    case 'ExternalName':
      return typeof spec.externalName === 'string' ? spec.externalName : '<none>';
    case 'LoadBalancer': {
      const status = svc.status as { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } } | undefined;
      const ingress = (status?.loadBalancer?.ingress ?? []).map((i) => i.ip || i.hostname || '').filter(Boolean);
      const all = [...ingress, ...externalIPs];
      return all.length ? all.join(',') : '<pending>';
    }
    default:
      return externalIPs.length ? externalIPs.join(',') : '<none>';
  }
}

function selectorCell(spec: Spec): string {
  if (!isJsonObject(spec.selector)) return '<none>';
  const entries = Object.entries(spec.selector).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return entries.length ? entries.map(([k, v]) => `${k}=${String(v)}`).join(',') : '<none>';
}

const SERVICE_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Type', 'type determines how the Service is exposed.'),
    column('Cluster-IP', 'clusterIP is the IP address of the service and is usually assigned randomly.'),
    column('External-IP', 'externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.'),
    column('Port(s)', 'The list of ports that are exposed by this service.'),
    AGE_COLUMN,
    column('Selector', 'Route service traffic to pods with label keys and values matching this selector.', { priority: 1 }),
  ],
  cells: (svc, now) => {
    const spec = specOf(svc);
    const clusterIP = typeof spec.clusterIP === 'string' && spec.clusterIP ? spec.clusterIP : '<none>';
    return [svc.metadata.name ?? '', String(spec.type ?? ''), clusterIP, externalIpCell(svc), portsCell(spec), ageOf(svc.metadata.creationTimestamp, now), selectorCell(spec)];
  },
};

/** Defaults, then validation (a 422 before anything is reserved), then the reservations. */
async function admitService(context: KindContext, svc: KubeObject): Promise<void> {
  const datastore = context.store.datastore;
  if (!datastore) throw errors.internal('the Service allocator has no datastore');
  // The reservations name their Service, so its name must be known now (the store would pick it later).
  if (!svc.metadata.name && typeof svc.metadata.generateName === 'string' && svc.metadata.generateName) {
    svc.metadata.name = svc.metadata.generateName + generateNameSuffix();
  }
  applyServiceDefaults(svc);
  const causes = validateService(svc);
  if (causes.length) throw errors.invalid(KIND, svc.metadata.name ?? '', '', causes);
  await allocateForService(datastore, serviceNetworkOf(context), svc);
}

export const SERVICE_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: KIND,
  plural: 'services',
  singular: 'service',
  namespaced: true,
  shortNames: ['svc'],
  categories: ['all'],
  subresources: ['status'],
  printer: SERVICE_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'core/services',
  nameRule: 'dns-label',
  prepareForCreate: prepareServiceForCreate,
  prepareForUpdate: keepAllocatedValues,
  applyDefaults: applyServiceDefaults,
  validate: validateService,
  validateUpdate: validateServiceUpdate,
  admitCreate: async (context, svc, namespace) => {
    // The namespace is the request's; the body may leave it out, but the reservations name it.
    if (namespace) svc.metadata.namespace = namespace;
    await admitService(context, svc);
  },
  admitUpdate: async (context, next, current) => {
    // The reservations name the stored Service; the body may leave its namespace out.
    next.metadata.namespace = current.metadata.namespace;
    keepAllocatedValues(next, current);
    // A change the update may not make is refused before anything is reserved for it.
    applyServiceDefaults(next);
    const causes = validateServiceUpdate(next, current);
    if (causes.length) throw errors.invalid(KIND, next.metadata.name ?? '', '', causes);
    await admitService(context, next);
  },
  delete: async (context, name, options, namespace) => {
    const result = await context.store.delete(SERVICE_DEFINITION, namespace, name, options);
    const datastore = context.store.datastore;
    if (!options.dryRun && datastore) {
      await releaseForService(datastore, result.object).catch((error: unknown) =>
        context.logger?.warn({ err: error, service: `${namespace}/${name}` }, 'could not release a deleted Service’s addresses; the repair pass will'),
      );
    }
    return result;
  },
};
