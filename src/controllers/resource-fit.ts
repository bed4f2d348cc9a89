import type { KubeObject } from '../apiserver/objects.js';
import { milliCpu, QuantityError, wholeValue } from '../node-protocol/quantity.js';
import { nodeStatus, podSpec } from './kube-types.js';

/**
 * Requests against allocatable, as kube-scheduler's NodeResourcesFit filter does it (pure): what a
 * pod asks for (its containers' requests, the largest init container's, its RuntimeClass
 * overhead), what a node can give (`status.allocatable`), and in kube-scheduler's words which
 * resources fall short (`Insufficient cpu`, `Insufficient memory`, `Too many pods`).
 */

export interface Requests {
  cpuMilli: number;
  memoryBytes: number;
  ephemeralStorageBytes: number;
}

/** What a node offers; a resource its status does not state is not limited (hand-made Nodes, older agents). */
export interface Allocatable {
  cpuMilli?: number;
  memoryBytes?: number;
  ephemeralStorageBytes?: number;
  pods?: number;
}

type ResourceMap = Record<string, unknown> | undefined;

const RESOURCES: [keyof Requests, string, (value: unknown) => number][] = [
  ['cpuMilli', 'cpu', milliCpu],
  ['memoryBytes', 'memory', wholeValue],
  ['ephemeralStorageBytes', 'ephemeral-storage', wholeValue],
];

const zero = (): Requests => ({ cpuMilli: 0, memoryBytes: 0, ephemeralStorageBytes: 0 });

/** A quantity the API let through but that does not parse counts as nothing, rather than stopping the scheduler. */
function amount(read: (value: unknown) => number, value: unknown): number {
  try {
    return value === undefined || value === null ? 0 : Math.max(0, read(value));
  } catch (error) {
    if (error instanceof QuantityError) return 0;
    throw error;
  }
}

function fromList(list: ResourceMap): Requests {
  const out = zero();
  for (const [field, name, read] of RESOURCES) out[field] = amount(read, list?.[name]);
  return out;
}

/** A container's requests; a limit without a request is the request, as the API defaults it. */
function containerRequests(container: unknown): Requests {
  const resources = (container as { resources?: { requests?: ResourceMap; limits?: ResourceMap } } | null)?.resources;
  const requests = resources?.requests ?? {};
  const limits = resources?.limits ?? {};
  const merged: Record<string, unknown> = { ...limits, ...requests };
  return fromList(merged);
}

const add = (a: Requests, b: Requests): Requests => ({
  cpuMilli: a.cpuMilli + b.cpuMilli,
  memoryBytes: a.memoryBytes + b.memoryBytes,
  ephemeralStorageBytes: a.ephemeralStorageBytes + b.ephemeralStorageBytes,
});
const max = (a: Requests, b: Requests): Requests => ({
  cpuMilli: Math.max(a.cpuMilli, b.cpuMilli),
  memoryBytes: Math.max(a.memoryBytes, b.memoryBytes),
  ephemeralStorageBytes: Math.max(a.ephemeralStorageBytes, b.ephemeralStorageBytes),
});

/**
 * A pod's effective requests (Kubernetes' PodRequests): the sum over its containers, or more if an
 * init container (plus the sidecars started before it, init containers with `restartPolicy:
 * Always`, which keep running) needs more; sidecars also add to the sum; then the overhead.
 */
export function podRequests(pod: KubeObject): Requests {
  const spec = podSpec(pod);
  let total = zero();
  for (const c of spec.containers ?? []) total = add(total, containerRequests(c));
  let sidecars = zero();
  let initPeak = zero();
  for (const c of spec.initContainers ?? []) {
    const own = containerRequests(c);
    if ((c as { restartPolicy?: string } | null)?.restartPolicy === 'Always') {
      sidecars = add(sidecars, own);
      initPeak = max(initPeak, sidecars);
    } else {
      initPeak = max(initPeak, add(sidecars, own));
    }
  }
  total = max(add(total, sidecars), initPeak);
  return add(total, fromList(spec.overhead as ResourceMap));
}

/** What a node's status says it can give pods. */
export function nodeAllocatable(node: KubeObject): Allocatable {
  const list = nodeStatus(node).allocatable as ResourceMap;
  const out: Allocatable = {};
  for (const [field, name, read] of RESOURCES) {
    if (list?.[name] !== undefined) out[field] = amount(read, list[name]);
  }
  if (list?.pods !== undefined) out.pods = amount(wholeValue, list.pods);
  return out;
}

/**
 * The NodeResourcesFit reasons this pod would fail on this node, given the pods already there
 * (their requests are counted; finished pods must be left out by the caller), in kube-scheduler's
 * words. A resource the pod does not request never blocks it.
 */
export function insufficientResources(pod: KubeObject, allocatable: Allocatable, podsOnNode: readonly KubeObject[]): string[] {
  const reasons: string[] = [];
  if (allocatable.pods !== undefined && podsOnNode.length + 1 > allocatable.pods) reasons.push('Too many pods');
  const wanted = podRequests(pod);
  let used = zero();
  for (const other of podsOnNode) used = add(used, podRequests(other));
  for (const [field, name] of RESOURCES) {
    const free = allocatable[field];
    if (free !== undefined && wanted[field] > 0 && wanted[field] > free - used[field]) reasons.push(`Insufficient ${name}`);
  }
  return reasons;
}
