import type { V1OwnerReference } from '@kubernetes/client-node';
import { AT_MOST_ONE_ANNOTATION, STATE_LABEL } from './names.js';

/**
 * What agents and controllers both decide about pods and nodes: when a pod is ready, when a node
 * is, and which pods are singletons. One definition each, so a drain, an eviction and a
 * controller never disagree.
 */

/** The parts of a stored object (apiserver's KubeObject) these rules read; this module imports no layer. */
export interface ObjectView {
  metadata: {
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: readonly V1OwnerReference[];
  };
  status?: unknown;
}

interface Condition {
  type?: string;
  status?: string;
}

function conditionTrue(obj: ObjectView, type: string): boolean {
  const conditions = (obj.status as { conditions?: unknown } | undefined)?.conditions;
  return Array.isArray(conditions) && (conditions as (Condition | null)[]).some((c) => c?.type === type && c.status === 'True');
}

/** Kubernetes' definition (podutil.IsPodReady): the Ready condition is True. */
export function isPodReady(pod: ObjectView): boolean {
  return conditionTrue(pod, 'Ready');
}

/** Running and Ready: what a disruption budget counts as healthy and a drain waits for. */
export function isPodRunningAndReady(pod: ObjectView): boolean {
  return (pod.status as { phase?: string } | undefined)?.phase === 'Running' && isPodReady(pod);
}

/** Ready by the lifecycle controller's verdict (STATE_LABEL); by the Ready condition only when there is none. */
export function isNodeReady(node: ObjectView): boolean {
  const state = node.metadata.labels?.[STATE_LABEL];
  if (state !== undefined) return state === 'Ready';
  return conditionTrue(node, 'Ready');
}

export function controllerOf(obj: ObjectView): V1OwnerReference | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}

/**
 * Whether a pod must never run in two places at once: pods of a StatefulSet, and pods that ask
 * for it. These are fenced on their node and replaced only once fencing is certain.
 */
export function isAtMostOne(pod: ObjectView): boolean {
  if (pod.metadata.annotations?.[AT_MOST_ONE_ANNOTATION] === 'true') return true;
  return controllerOf(pod)?.kind === 'StatefulSet';
}
