import { createHash } from 'node:crypto';
import { isIPv4 } from 'node:net';
import { unroutable } from '../apiserver/kinds/endpoints.js';
import type { KubeObject } from '../apiserver/objects.js';

/**
 * What the endpoints controller computes, as pure functions tests call without a server: from a
 * Service with a selector and the pods of its namespace, its v1 Endpoints and its
 * discovery.k8s.io/v1 EndpointSlices, as kube-controller-manager's endpoints and endpointslice
 * controllers do. A pod counts when its labels match the selector and it has not ended; it is
 * ready when its Ready condition is True, it is not being deleted, and its node is not lost
 * (`nodeUsable`, from the node lifecycle's view). Named target ports are resolved per pod from
 * its containers' ports (a pod without the name is left out for that port). A pod without
 * status.podIP yet has no address to list (the pod network comes later): it is left out, but the
 * objects are still made.
 */

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const MANAGED_BY_LABEL = 'endpointslice.kubernetes.io/managed-by';
export const MANAGED_BY = 'endpointslice-controller.k8s.io';

type Obj = Record<string, unknown>;

interface ResolvedPort {
  name: string;
  port: number;
  protocol: string;
  appProtocol?: string;
}

interface Backend {
  pod: KubeObject;
  ip: string;
  ready: boolean;
  terminating: boolean;
  ports: ResolvedPort[];
}

export interface DesiredEndpoints {
  endpoints: KubeObject;
  slices: KubeObject[];
}

export function selectorOf(svc: KubeObject): Record<string, string> | undefined {
  const spec = (svc.spec ?? {}) as Obj;
  if (spec.type === 'ExternalName') return undefined;
  const selector = spec.selector as Record<string, string> | undefined;
  return selector && Object.keys(selector).length > 0 ? selector : undefined;
}

export function podMatches(selector: Record<string, string>, pod: KubeObject): boolean {
  const labels = pod.metadata.labels ?? {};
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

function podReady(pod: KubeObject): boolean {
  const conditions = ((pod.status as Obj | undefined)?.conditions ?? []) as { type?: string; status?: string }[];
  return conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

/** The container port a named target port names, or undefined. */
function namedPort(pod: KubeObject, name: string, protocol: string): number | undefined {
  const containers = (((pod.spec ?? {}) as Obj).containers ?? []) as { ports?: { name?: string; containerPort?: number; protocol?: string }[] }[];
  for (const container of containers) {
    for (const port of container.ports ?? []) {
      if (port.name === name && (port.protocol ?? 'TCP') === protocol && typeof port.containerPort === 'number') return port.containerPort;
    }
  }
  return undefined;
}

function resolvePorts(svc: KubeObject, pod: KubeObject): ResolvedPort[] {
  const ports = (((svc.spec ?? {}) as Obj).ports ?? []) as Obj[];
  const resolved: ResolvedPort[] = [];
  for (const port of ports) {
    const protocol = String(port.protocol ?? 'TCP');
    const target = port.targetPort ?? port.port;
    const number = typeof target === 'string' ? namedPort(pod, target, protocol) : Number(target);
    if (number === undefined || !Number.isInteger(number)) continue;
    resolved.push({
      name: typeof port.name === 'string' ? port.name : '',
      port: number,
      protocol,
      ...(typeof port.appProtocol === 'string' ? { appProtocol: port.appProtocol } : {}),
    });
  }
  return resolved;
}

/** The pods a Service sends traffic to, with their state. `nodeUsable(name)` is false for a lost node. */
function backends(svc: KubeObject, selector: Record<string, string>, pods: readonly KubeObject[], nodeUsable: (node: string) => boolean): Backend[] {
  const out: Backend[] = [];
  const publishNotReady = ((svc.spec ?? {}) as Obj).publishNotReadyAddresses === true;
  for (const pod of pods) {
    if (pod.metadata.namespace !== svc.metadata.namespace || !podMatches(selector, pod)) continue;
    const status = (pod.status ?? {}) as Obj;
    if (status.phase === 'Succeeded' || status.phase === 'Failed') continue;
    const ip = typeof status.podIP === 'string' ? status.podIP : '';
    // No address yet (no pod network), or one no Endpoints may list (a process pod's loopback).
    if (!ip || !isIPv4(ip) || unroutable(ip)) continue;
    const node = String(((pod.spec ?? {}) as Obj).nodeName ?? '');
    const terminating = Boolean(pod.metadata.deletionTimestamp);
    const ready = publishNotReady || (podReady(pod) && !terminating && (!node || nodeUsable(node)));
    out.push({ pod, ip, ready, terminating, ports: resolvePorts(svc, pod) });
  }
  return out.sort((a, b) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0));
}

const portsKey = (ports: readonly ResolvedPort[]): string => JSON.stringify(ports);

function ownerReference(svc: KubeObject): Obj {
  return { apiVersion: 'v1', kind: 'Service', name: svc.metadata.name, uid: svc.metadata.uid, controller: true, blockOwnerDeletion: true };
}

const targetRef = (pod: KubeObject): Obj => ({ kind: 'Pod', namespace: pod.metadata.namespace, name: pod.metadata.name, uid: pod.metadata.uid });

/**
 * A pod's `hostname` when its `subdomain` names this Service (as a StatefulSet's pods name their
 * governing Service), as Kubernetes' controllers set it: the cluster DNS answers
 * `<hostname>.<service>.<ns>.svc.<domain>` from it.
 */
function hostnameOf(svc: KubeObject, pod: KubeObject): Obj {
  const spec = (pod.spec ?? {}) as Obj;
  return typeof spec.hostname === 'string' && spec.hostname && spec.subdomain === svc.metadata.name ? { hostname: spec.hostname } : {};
}

/** The Endpoints and EndpointSlices a selector Service should have now; undefined for a Service without a selector. */
export function desiredEndpoints(svc: KubeObject, pods: readonly KubeObject[], nodeUsable: (node: string) => boolean = () => true): DesiredEndpoints | undefined {
  const selector = selectorOf(svc);
  if (!selector) return undefined;
  const found = backends(svc, selector, pods, nodeUsable);
  // Pods whose named ports resolve alike share a subset (and a slice), as kube groups them.
  const groups = new Map<string, { ports: ResolvedPort[]; members: Backend[] }>();
  for (const backend of found) {
    if (backend.ports.length === 0 && (((svc.spec ?? {}) as Obj).ports as unknown[] | undefined)?.length) continue;
    const key = portsKey(backend.ports);
    const group = groups.get(key) ?? { ports: backend.ports, members: [] };
    group.members.push(backend);
    groups.set(key, group);
  }
  const namespace = svc.metadata.namespace!;
  const name = svc.metadata.name!;
  const subsets: Obj[] = [];
  for (const { ports, members } of groups.values()) {
    const address = (b: Backend): Obj => ({
      ip: b.ip,
      ...hostnameOf(svc, b.pod),
      ...(b.pod.spec && (b.pod.spec as Obj).nodeName ? { nodeName: (b.pod.spec as Obj).nodeName } : {}),
      targetRef: targetRef(b.pod),
    });
    const ready = members.filter((b) => b.ready).map(address);
    const notReady = members.filter((b) => !b.ready && !b.terminating).map(address);
    if (ready.length === 0 && notReady.length === 0) continue;
    subsets.push({
      ...(ready.length ? { addresses: ready } : {}),
      ...(notReady.length ? { notReadyAddresses: notReady } : {}),
      ports: ports.map((p) => ({ ...(p.name ? { name: p.name } : {}), port: p.port, protocol: p.protocol, ...(p.appProtocol ? { appProtocol: p.appProtocol } : {}) })),
    });
  }
  const labels = { ...(svc.metadata.labels ?? {}) };
  const endpoints: KubeObject = { apiVersion: 'v1', kind: 'Endpoints', metadata: { name, namespace, labels }, ...(subsets.length ? { subsets } : {}) };
  // One slice per port group; a Service with no backends still has one slice with its ports.
  const serviceGroups = groups.size > 0 ? [...groups.values()] : [{ ports: [] as ResolvedPort[], members: [] as Backend[] }];
  const slices = serviceGroups.map(({ ports, members }) => {
    const hash = createHash('sha256').update(`${name}/${portsKey(ports)}`).digest('hex').slice(0, 5);
    return {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: `${name}-${hash}`,
        namespace,
        labels: { ...labels, [SERVICE_NAME_LABEL]: name, [MANAGED_BY_LABEL]: MANAGED_BY },
        ownerReferences: [ownerReference(svc)],
      },
      addressType: 'IPv4',
      endpoints: members.map((b) => ({
        addresses: [b.ip],
        ...hostnameOf(svc, b.pod),
        conditions: { ready: b.ready, serving: b.ready || (b.terminating && podReady(b.pod)), terminating: b.terminating },
        ...((b.pod.spec as Obj | undefined)?.nodeName ? { nodeName: (b.pod.spec as Obj).nodeName } : {}),
        targetRef: targetRef(b.pod),
      })),
      ports: ports.map((p) => ({ name: p.name, port: p.port, protocol: p.protocol, ...(p.appProtocol ? { appProtocol: p.appProtocol } : {}) })),
    } as unknown as KubeObject;
  });
  return { endpoints, slices };
}

/** The parts of an Endpoints or EndpointSlice the controller owns, for "does it need a write". */
export function sameEndpointContent(a: KubeObject, b: KubeObject): boolean {
  const pick = (o: KubeObject): string => JSON.stringify([o.subsets ?? null, o.endpoints ?? null, o.ports ?? null, o.addressType ?? null, o.metadata.labels ?? {}]);
  return pick(a) === pick(b);
}
