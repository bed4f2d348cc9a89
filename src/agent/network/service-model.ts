import { isIPv4 } from 'node:net';
import type { KubeObject } from '../../apiserver/objects.js';
import { SERVICE_NAME_LABEL } from '../../controllers/endpoints-logic.js';
import { ipv4ToNumber } from '../../node-protocol/service-network.js';

/**
 * What the Service datapath needs to know, read out of Services and EndpointSlices (pure): one
 * entry per Service port that has a ClusterIP, with the ready endpoints its EndpointSlices list
 * for that port, as kube-proxy's service and endpoint change trackers derive them. The rule
 * writer (service-rules.ts) turns these into nftables rules.
 */

type Obj = Record<string, unknown>;

export type L4Protocol = 'tcp' | 'udp' | 'sctp';

export interface ServiceEndpoint {
  ip: string;
  port: number;
  /** The endpoint's pod runs on this node (the slice's `nodeName`). */
  local: boolean;
}

export interface ServicePortModel {
  namespace: string;
  name: string;
  /** The Service port's name ('' when the Service has one unnamed port). */
  portName: string;
  protocol: L4Protocol;
  clusterIP: string;
  port: number;
  /** Set for NodePort and LoadBalancer Services. */
  nodePort?: number;
  /** sessionAffinity ClientIP: how long a client sticks to its endpoint, in seconds. */
  affinitySeconds?: number;
  externalLocal: boolean;
  internalLocal: boolean;
  /** Ready, not terminating endpoints, sorted by address then port, without duplicates. */
  endpoints: ServiceEndpoint[];
}

const DEFAULT_AFFINITY_SECONDS = 10800;

const PROTOCOLS: Record<string, L4Protocol> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp' };

/** The IPv4 slices of each Service (`namespace/name`), by their service-name label, in input order. */
export function slicesByService(slices: readonly KubeObject[]): Map<string, KubeObject[]> {
  const out = new Map<string, KubeObject[]>();
  for (const slice of slices) {
    const service = slice.metadata.labels?.[SERVICE_NAME_LABEL];
    if (!service || slice.addressType !== 'IPv4') continue;
    const key = `${slice.metadata.namespace ?? ''}/${service}`;
    const list = out.get(key);
    if (list) list.push(slice);
    else out.set(key, [slice]);
  }
  return out;
}

/**
 * Whether a slice endpoint may take new connections: `conditions.ready` unset counts as ready
 * (the API says consumers treat nil as ready); a terminating endpoint is left out even when it
 * still serves (Drover does not fall back to terminating endpoints, kube-proxy's
 * ProxyTerminatingEndpoints).
 */
function endpointReady(endpoint: Obj): boolean {
  const conditions = (endpoint.conditions ?? {}) as { ready?: boolean; terminating?: boolean };
  return conditions.ready !== false && conditions.terminating !== true;
}

/** The ready endpoints of one Service port, its number taken from each slice's port of that name. */
function endpointsFor(slices: readonly KubeObject[], portName: string, protocol: string, nodeName: string): ServiceEndpoint[] {
  const seen = new Map<string, ServiceEndpoint>();
  for (const slice of slices) {
    const port = ((slice.ports ?? []) as Obj[]).find((p) => String(p.name ?? '') === portName && String(p.protocol ?? 'TCP') === protocol);
    const number = Number(port?.port);
    if (!port || !Number.isInteger(number) || number < 1 || number > 65535) continue;
    for (const endpoint of (slice.endpoints ?? []) as Obj[]) {
      if (!endpointReady(endpoint)) continue;
      // kube-proxy uses an endpoint's first address: the others are the same pod's.
      const ip = ((endpoint.addresses ?? []) as unknown[])[0];
      if (typeof ip !== 'string' || !isIPv4(ip)) continue;
      const key = `${ip}:${number}`;
      const local = endpoint.nodeName === nodeName;
      const had = seen.get(key);
      if (!had) seen.set(key, { ip, port: number, local });
      else if (local) had.local = true;
    }
  }
  return [...seen.values()]
    .map((ep) => ({ ep, key: ipv4ToNumber(ep.ip) * 65536 + ep.port }))
    .sort((a, b) => a.key - b.key)
    .map(({ ep }) => ep);
}

/** `namespace/name`, the order Services are programmed in. */
export function serviceKey(svc: KubeObject): string {
  return `${svc.metadata.namespace ?? 'default'}/${svc.metadata.name ?? ''}`;
}

/**
 * The ports of one Service with a ClusterIP, in the Service's order, with their ready endpoints
 * from `slices` (the Service's own). ExternalName and headless Services have no ClusterIP and get
 * nothing; neither does a Service whose ClusterIP is the cluster DNS address (the agent answers
 * there itself).
 */
export function servicePorts(svc: KubeObject, slices: readonly KubeObject[], nodeName: string, clusterDns: string): ServicePortModel[] {
  const spec = (svc.spec ?? {}) as Obj;
  const type = String(spec.type ?? 'ClusterIP');
  const clusterIP = spec.clusterIP;
  if (type === 'ExternalName' || typeof clusterIP !== 'string' || !isIPv4(clusterIP)) return [];
  if (clusterIP === clusterDns) return [];
  const namespace = svc.metadata.namespace ?? 'default';
  const name = svc.metadata.name ?? '';
  const affinity = spec.sessionAffinity === 'ClientIP';
  const timeout = Number(((spec.sessionAffinityConfig as Obj | undefined)?.clientIP as Obj | undefined)?.timeoutSeconds);
  const exposesNodePorts = type === 'NodePort' || type === 'LoadBalancer';
  const out: ServicePortModel[] = [];
  for (const port of (spec.ports ?? []) as Obj[]) {
    const protocolName = String(port.protocol ?? 'TCP');
    const protocol = PROTOCOLS[protocolName];
    const number = Number(port.port);
    if (!protocol || !Number.isInteger(number)) continue;
    const portName = String(port.name ?? '');
    const nodePort = Number(port.nodePort);
    out.push({
      namespace,
      name,
      portName,
      protocol,
      clusterIP,
      port: number,
      ...(exposesNodePorts && Number.isInteger(nodePort) && nodePort > 0 ? { nodePort } : {}),
      ...(affinity ? { affinitySeconds: Number.isInteger(timeout) && timeout > 0 ? timeout : DEFAULT_AFFINITY_SECONDS } : {}),
      externalLocal: exposesNodePorts && spec.externalTrafficPolicy === 'Local',
      internalLocal: spec.internalTrafficPolicy === 'Local',
      endpoints: endpointsFor(slices, portName, protocolName, nodeName),
    });
  }
  return out;
}

/** What a Service or EndpointSlice informer keeps: the fields the datapath and the cluster DNS read (a cluster holds many slices). */
export function slimServiceObject(obj: KubeObject): KubeObject {
  const { name, namespace, resourceVersion, labels } = obj.metadata;
  const kept: KubeObject = { metadata: { name, namespace, resourceVersion, ...(labels ? { labels } : {}) } };
  for (const key of ['spec', 'addressType', 'endpoints', 'ports'] as const) if (obj[key] !== undefined) kept[key] = obj[key];
  return kept;
}
