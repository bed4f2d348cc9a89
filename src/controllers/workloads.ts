import type { OwnerReference } from '../apiserver/objects.js';

/**
 * The labels that tie pods to their owners, as Kubernetes' workload controllers set them. What
 * makes a pod a singleton, and its owner, are shared with the agent: src/node-protocol/pods.ts.
 */

/** Set by the Deployment controller on its ReplicaSets and their pods, as Kubernetes does. */
export const POD_TEMPLATE_HASH_LABEL = 'pod-template-hash';
/** Set by the StatefulSet controller on each pod: its stable name. */
export const STATEFULSET_POD_NAME_LABEL = 'statefulset.kubernetes.io/pod-name';
export const CONTROLLER_REVISION_HASH_LABEL = 'controller-revision-hash';

export type { OwnerReference };
