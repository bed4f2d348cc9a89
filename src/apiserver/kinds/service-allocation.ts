import { type Datastore, KeyExistsError } from '../../datastore/types.js';
import { errors, type StatusCause } from '../errors.js';
import type { KubeObject } from '../objects.js';
import { cidrContains, ipv4ToNumber, numberToIpv4, type ServiceNetwork } from '../../node-protocol/service-network.js';

/**
 * ClusterIP and NodePort allocation, shared by every server of the cluster through the datastore:
 * one reservation key per address (`/registry/ranges/serviceips/<ip>`) and per node port
 * (`/registry/ranges/servicenodeports/<port>`), created with the datastore's create-if-absent, so
 * two servers racing for one address cannot both win (etcd's and SQLite's create are each a
 * compare-and-swap on the key not existing). A key names the Service that holds it; a Service
 * asking again for what it already holds gets it (a retried create, an update that keeps it).
 *
 * Reservations are released when the Service is deleted (its delete hook) and by the repair pass
 * (`repairReservations`, run by the leader), which frees every key whose Service no longer holds
 * it: after a namespace's deletion, a type change, or a create that failed after reserving.
 */

export const SERVICE_IP_PREFIX = '/registry/ranges/serviceips/';
export const NODE_PORT_PREFIX = '/registry/ranges/servicenodeports/';

interface Reservation {
  /** `<namespace>/<name>` of the Service holding it. */
  owner: string;
  /** When it was made (the repair pass leaves young ones alone: their create may be under way). */
  at: string;
}

export const ownerOf = (svc: KubeObject): string => `${svc.metadata.namespace ?? ''}/${svc.metadata.name ?? ''}`;

function parseReservation(value: Buffer): Reservation | undefined {
  try {
    const parsed = JSON.parse(value.toString('utf8')) as Partial<Reservation>;
    return typeof parsed.owner === 'string' ? { owner: parsed.owner, at: typeof parsed.at === 'string' ? parsed.at : '' } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Takes `key` for `owner`: true when taken now or already held by it, false when someone else
 * holds it. Keys taken now are added to `made`, so a later failure of the same write gives them back.
 */
async function reserve(datastore: Datastore, key: string, owner: string, made: string[]): Promise<boolean> {
  const value = Buffer.from(JSON.stringify({ owner, at: new Date().toISOString() } satisfies Reservation));
  try {
    await datastore.create(key, value);
    made.push(key);
    return true;
  } catch (error) {
    if (!(error instanceof KeyExistsError)) throw error;
  }
  const existing = await datastore.get(key);
  if (!existing) return reserve(datastore, key, owner, made); // released meanwhile
  return parseReservation(existing.value)?.owner === owner;
}

/** Removes `key` if `owner` holds it (at the revision read, so a new holder is never removed). */
async function release(datastore: Datastore, key: string, owner: string): Promise<void> {
  const existing = await datastore.get(key);
  if (!existing || parseReservation(existing.value)?.owner !== owner) return;
  try {
    await datastore.delete(key, existing.modRevision);
  } catch {
    // Changed or gone meanwhile: no longer ours to remove.
  }
}

/** Addresses at the start of the range kept for addresses asked for by name (kube-apiserver's lower band). */
function staticBand(size: number): number {
  return size < 64 ? 0 : Math.min(Math.max(16, Math.floor(size / 16)), 256);
}

const invalid = (svc: KubeObject, causes: StatusCause[]) => errors.invalid('Service', svc.metadata.name ?? '', '', causes);

/** A ClusterIP asked for by the Service, or a free one, reserved for it. */
async function allocateClusterIp(datastore: Datastore, network: ServiceNetwork, svc: KubeObject, spec: Record<string, unknown>, made: string[]): Promise<void> {
  const owner = ownerOf(svc);
  const cidr = network.serviceCidr;
  const requested = typeof spec.clusterIP === 'string' ? spec.clusterIP : '';
  if (requested) {
    const field = { field: 'spec.clusterIPs', reason: 'FieldValueInvalid' as const };
    const quoted = `[]string{${JSON.stringify(requested)}}`;
    const n = cidrContains(cidr, requested) ? ipv4ToNumber(requested) : -1;
    if (n <= cidr.base || n >= cidr.base + cidr.size - 1) {
      throw invalid(svc, [{ ...field, message: `Invalid value: ${quoted}: failed to allocate IP ${requested}: the provided IP (${requested}) is not in the valid range. The range of valid IPs is ${cidr.text}` }]);
    }
    if (!(await reserve(datastore, SERVICE_IP_PREFIX + requested, owner, made))) {
      throw invalid(svc, [{ ...field, message: `Invalid value: ${quoted}: failed to allocate IP ${requested}: provided IP is already allocated` }]);
    }
    return;
  }
  // Dynamic: a random start above the static band, then the band itself; never the network and
  // broadcast addresses, the kubernetes Service's first address or the cluster DNS address.
  const band = staticBand(cidr.size);
  const upper = cidr.size - 1 - band;
  const dns = ipv4ToNumber(network.clusterDns) - cidr.base;
  const start = Math.floor(Math.random() * upper);
  for (let i = 0; i < upper + band; i++) {
    const offset = i < upper ? band + ((start + i) % upper) : 2 + (i - upper);
    if (offset < 2 || offset > cidr.size - 2 || offset === dns) continue;
    const ip = numberToIpv4(cidr.base + offset);
    if (await reserve(datastore, SERVICE_IP_PREFIX + ip, owner, made)) {
      spec.clusterIP = ip;
      spec.clusterIPs = [ip];
      return;
    }
  }
  throw invalid(svc, [{ field: 'spec.clusterIPs', reason: 'FieldValueInvalid', message: `Internal error: failed to allocate a serviceIP: range is full (service-cidr ${cidr.text})` }]);
}

/** The node ports asked for, checked and reserved; ports left at 0 get free ones. */
async function allocateNodePorts(datastore: Datastore, network: ServiceNetwork, svc: KubeObject, ports: Record<string, unknown>[], made: string[]): Promise<void> {
  const owner = ownerOf(svc);
  const range = network.nodePortRange;
  const taken = new Set<number>();
  for (const [i, port] of ports.entries()) {
    const nodePort = typeof port.nodePort === 'number' ? port.nodePort : 0;
    if (!nodePort) continue;
    const field = { field: `spec.ports[${i}].nodePort`, reason: 'FieldValueInvalid' as const };
    if (nodePort < range.first || nodePort > range.last) {
      throw invalid(svc, [{ ...field, message: `Invalid value: ${nodePort}: provided port is not in the valid range. The range of valid ports is ${range.text}` }]);
    }
    // One Service may use one node port for several protocols of the same port.
    if (taken.has(nodePort)) continue;
    if (!(await reserve(datastore, NODE_PORT_PREFIX + nodePort, owner, made))) {
      throw invalid(svc, [{ ...field, message: `Invalid value: ${nodePort}: provided port is already allocated` }]);
    }
    taken.add(nodePort);
  }
  const span = range.last - range.first + 1;
  for (const port of ports) {
    if (typeof port.nodePort === 'number' && port.nodePort) continue;
    const start = Math.floor(Math.random() * span);
    let found = false;
    for (let i = 0; i < span && !found; i++) {
      const candidate = range.first + ((start + i) % span);
      if (taken.has(candidate)) continue;
      if (await reserve(datastore, NODE_PORT_PREFIX + candidate, owner, made)) {
        port.nodePort = candidate;
        taken.add(candidate);
        found = true;
      }
    }
    if (!found) {
      throw invalid(svc, [{ field: 'spec.ports', reason: 'FieldValueInvalid', message: `Internal error: failed to allocate a nodePort: range is full (service-node-port-range ${range.text})` }]);
    }
  }
}

/** Whether a Service of this spec holds a ClusterIP (not headless, not ExternalName). */
export function holdsClusterIp(spec: Record<string, unknown>): boolean {
  return spec.type !== 'ExternalName' && spec.clusterIP !== 'None';
}

/** Whether a Service of this spec holds node ports. */
export function holdsNodePorts(spec: Record<string, unknown>): boolean {
  return spec.type === 'NodePort' || (spec.type === 'LoadBalancer' && spec.allocateLoadBalancerNodePorts !== false);
}

/** Reserves what a defaulted, valid Service needs and writes it into the Service. */
export async function allocateForService(datastore: Datastore, network: ServiceNetwork, svc: KubeObject): Promise<void> {
  const spec = svc.spec as Record<string, unknown>;
  const made: string[] = [];
  try {
    if (holdsClusterIp(spec)) await allocateClusterIp(datastore, network, svc, spec, made);
    if (holdsNodePorts(spec) && Array.isArray(spec.ports)) await allocateNodePorts(datastore, network, svc, spec.ports as Record<string, unknown>[], made);
  } catch (error) {
    // Refused: what this write took is given back (what the Service held before stays).
    for (const key of made) await release(datastore, key, ownerOf(svc));
    throw error;
  }
}

/** The keys a stored Service holds. */
export function reservationKeys(svc: KubeObject): string[] {
  const spec = (svc.spec ?? {}) as Record<string, unknown>;
  const keys: string[] = [];
  if (holdsClusterIp(spec) && typeof spec.clusterIP === 'string' && spec.clusterIP) keys.push(SERVICE_IP_PREFIX + spec.clusterIP);
  if (Array.isArray(spec.ports)) {
    for (const port of spec.ports as Record<string, unknown>[]) {
      if (typeof port.nodePort === 'number' && port.nodePort) keys.push(NODE_PORT_PREFIX + port.nodePort);
    }
  }
  return [...new Set(keys)];
}

/** Frees what a deleted Service held. */
export async function releaseForService(datastore: Datastore, svc: KubeObject): Promise<void> {
  for (const key of reservationKeys(svc)) await release(datastore, key, ownerOf(svc));
}

/**
 * Frees every reservation no stored Service holds, once older than `minAgeMs` (a younger one may
 * belong to a create still under way). `services` are all stored Services. Answers the keys freed.
 */
export async function repairReservations(datastore: Datastore, services: readonly KubeObject[], minAgeMs: number, now = Date.now()): Promise<string[]> {
  const held = new Map<string, string>();
  for (const svc of services) for (const key of reservationKeys(svc)) held.set(key, ownerOf(svc));
  const freed: string[] = [];
  for (const prefix of [SERVICE_IP_PREFIX, NODE_PORT_PREFIX]) {
    const { items } = await datastore.list(prefix);
    for (const kv of items) {
      const reservation = parseReservation(kv.value);
      if (reservation && held.get(kv.key) === reservation.owner) continue;
      const at = reservation ? Date.parse(reservation.at) : Number.NaN;
      if (!Number.isNaN(at) && now - at < minAgeMs) continue;
      try {
        await datastore.delete(kv.key, kv.modRevision);
        freed.push(kv.key);
      } catch {
        // Taken again meanwhile: leave it.
      }
    }
  }
  return freed;
}
