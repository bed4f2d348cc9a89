/**
 * The names agents, servers and controllers agree on about a node: the labels, annotations and
 * taint keys they write on Node and Lease objects, and the values of the state label. This module
 * (src/node-protocol/) is a leaf: it imports nothing from the layers but types, so the agent, the
 * cluster endpoints, the API server's printers and the controllers can all share it without
 * importing one another. See docs/node-lifecycle.md for what each one means over time.
 */

/** What the node lifecycle controller says about a node (node-state.ts explains each). */
export type NodeState = 'Ready' | 'NotReady' | 'Unknown' | 'Down' | 'Unavailable';

export const NODE_STATES: readonly NodeState[] = ['Ready', 'NotReady', 'Unknown', 'Down', 'Unavailable'];

/**
 * The lifecycle controller's verdict on a Node, one of NODE_STATES. Only the controller writes it
 * (node restriction refuses it from the node's own credential); kubectl's STATUS column shows it.
 */
export const STATE_LABEL = 'drover.io/state';

/** On a Node: the agent's JSON ShutdownRecord (records.ts), written before a planned stop. */
export const SHUTDOWN_ANNOTATION = 'drover.io/shutdown';
/** On a node's Lease: the agent's JSON AgentHealth (records.ts), sent with every renewal. */
export const HEALTH_ANNOTATION = 'drover.io/health';
/** On a node's Lease: `"true"` once the agent released it on a graceful exit. */
export const RELEASED_ANNOTATION = 'drover.io/released';
/** On a Node: the node id (`<data-dir>/agent/node-id`), also its providerID. */
export const NODE_ID_ANNOTATION = 'drover.io/node-id';
/** `"true"` on a pod: never run two copies at once (StatefulSet pods are singletons anyway). */
export const AT_MOST_ONE_ANNOTATION = 'drover.io/at-most-one';

/** Role labels: `node-role.kubernetes.io/<role>`; the server writes its own node's. */
export const ROLE_LABEL_PREFIX = 'node-role.kubernetes.io/';
export const CONTROL_PLANE_ROLE_LABEL = `${ROLE_LABEL_PREFIX}control-plane`;
export const ETCD_ROLE_LABEL = `${ROLE_LABEL_PREFIX}etcd`;

/** The taint (NoSchedule and NoExecute) on a node the lifecycle controller found Unavailable. */
export const UNREACHABLE_TAINT = 'node.kubernetes.io/unreachable';

/** Where each node's heartbeat Lease lives, named after the node. */
export const NODE_LEASE_NAMESPACE = 'kube-node-lease';

/**
 * The holder of a node's Lease: its name and the Node object's uid. A lease held by a deleted
 * incarnation of the same name is therefore never mistaken for a heartbeat of the current one.
 */
export function leaseHolderIdentity(nodeName: string, nodeUid: string): string {
  return `${nodeName}/${nodeUid}`;
}
