import type { KubeObject, OwnerReference } from '../apiserver/objects.js';

/**
 * Names shared by the agent, the workload controllers and the failover logic: what makes a pod a
 * singleton, and the labels that tie pods to their owners.
 */

/** `"true"` on a pod: never run two copies at once (StatefulSet pods are singletons anyway). */
export const AT_MOST_ONE_ANNOTATION = 'drover.io/at-most-one';
/** Set by the Deployment controller on its ReplicaSets and their pods, as Kubernetes does. */
export const POD_TEMPLATE_HASH_LABEL = 'pod-template-hash';
/** Set by the StatefulSet controller on each pod: its stable name. */
export const STATEFULSET_POD_NAME_LABEL = 'statefulset.kubernetes.io/pod-name';
export const CONTROLLER_REVISION_HASH_LABEL = 'controller-revision-hash';

export type { OwnerReference };

export function controllerOf(obj: KubeObject): OwnerReference | undefined {
  const refs = obj.metadata.ownerReferences as OwnerReference[] | undefined;
  return refs?.find((r) => r.controller === true);
}

/**
 * Whether a pod must never run in two places at once: pods of a StatefulSet, and pods that ask
 * for it. These are fenced on their node and replaced only once fencing is certain.
 */
export function isAtMostOne(pod: KubeObject): boolean {
  if (pod.metadata.annotations?.[AT_MOST_ONE_ANNOTATION] === 'true') return true;
  return controllerOf(pod)?.kind === 'StatefulSet';
}
