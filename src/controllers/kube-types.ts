import type { V1LeaseSpec, V1NodeCondition, V1NodeSpec, V1NodeStatus, V1PodSpec, V1PodStatus } from '@kubernetes/client-node';
import type { KubeObject } from '../apiserver/objects.js';

/**
 * Typed views of the spec and status of stored objects, from @kubernetes/client-node's model
 * types (type-only: nothing of that package is loaded at run time). Objects are kept as plain
 * JSON, so every date is the RFC 3339 string it is on the wire, not the Date the package's
 * deserializer would make: `Wire<T>` says so. A view is a reading aid, not a validation: an object
 * written by a client may lack any field, so every field is read as possibly absent.
 */
export type Wire<T> = T extends Date
  ? string
  : T extends readonly (infer U)[]
    ? Wire<U>[]
    : T extends object
      ? { [K in keyof T]?: Wire<T[K]> }
      : T;

export type NodeSpec = Wire<V1NodeSpec>;
export type NodeStatus = Wire<V1NodeStatus>;
export type NodeCondition = Wire<V1NodeCondition>;
export type PodSpec = Wire<V1PodSpec>;
export type PodStatus = Wire<V1PodStatus>;
export type LeaseSpec = Wire<V1LeaseSpec>;

function view<T>(value: unknown): T {
  return (typeof value === 'object' && value !== null ? value : {}) as T;
}

export const nodeSpec = (node: KubeObject | undefined): NodeSpec => view<NodeSpec>(node?.spec);
export const nodeStatus = (node: KubeObject | undefined): NodeStatus => view<NodeStatus>(node?.status);
export const podSpec = (pod: KubeObject | undefined): PodSpec => view<PodSpec>(pod?.spec);
export const podStatus = (pod: KubeObject | undefined): PodStatus => view<PodStatus>(pod?.status);
export const leaseSpec = (lease: KubeObject | undefined): LeaseSpec => view<LeaseSpec>(lease?.spec);

/** The node's condition of `type` (Ready, ClockSkew …), if it has one. */
export function nodeCondition(node: KubeObject | undefined, type: string): NodeCondition | undefined {
  const conditions = nodeStatus(node).conditions;
  return Array.isArray(conditions) ? conditions.find((c) => c?.type === type) : undefined;
}
