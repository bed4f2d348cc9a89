/**
 * Which priority level a request belongs to, and which flow within it: the part of kube-apiserver's
 * API Priority and Fairness that its FlowSchemas express, here as one ordered list of rules (the
 * first that matches wins). Pure: tests call it without a server.
 *
 * Why these rules: a node's heartbeat (its Lease renewal, its Node status) is what the lifecycle
 * controller judges it by, so it must never wait behind anyone's bulk reads; leader election comes
 * next, since a lost leader lease stops every controller; then the cluster's own controllers and
 * everyone's writes; reads by everyone else (lists above all) get what is left.
 */

import type { RequestAttributes } from '../auth.js';
import { NODE_LEASE_NAMESPACE } from '../../node-protocol/names.js';

/** The priority levels, from the most protected to the least (docs/flow-control.md). */
export const PRIORITY_LEVELS = ['exempt', 'node-high', 'leader-election', 'workload-high', 'workload-low', 'global-default'] as const;
export type PriorityLevel = (typeof PRIORITY_LEVELS)[number];

/** What the classifier needs of a request: who sent it and what it asks for (the authorizer's attributes). */
export interface RequestDescription extends RequestAttributes {
  user: string;
  groups: readonly string[];
  /** A followed log (`follow=true`): long-running, as a watch is. */
  follow?: boolean;
  /** A list's page size (its `limit`), when it asks for one. */
  limit?: number;
  /** How many objects of the resource the server holds (its watch cache), when known: what a list may return. */
  storedObjects?: number;
}

export interface Classification {
  level: PriorityLevel;
  /**
   * Requests of one flow compete with each other first: one noisy client fills its own queues, not
   * those of its level's other clients (kube: the FlowSchema's distinguisher, by user or by namespace).
   */
  flow: string;
  /** The rule that matched, for logs and tests. */
  rule: string;
  /**
   * Watches, followed logs, exec/attach/port-forward: they hold a connection for as long as the
   * client likes, so they take no seat (kube-apiserver exempts them likewise once started); the
   * long-running limits (max-watches, max-watches-per-user) bound them instead.
   */
  longRunning: boolean;
  /** Seats it takes while it runs: one, or listSeats() for a list. */
  seats: number;
}

const MASTERS = 'system:masters';
const NODES = 'system:nodes';
const KUBE_SYSTEM_SERVICE_ACCOUNT = 'system:serviceaccount:kube-system:';
const READ_VERBS = new Set(['get', 'list', 'watch']);
const STREAMING_SUBRESOURCES = new Set(['exec', 'attach', 'portforward']);
const CONTROL_PLANE_USERS = new Set(['system:kube-controller-manager', 'system:kube-scheduler']);

/** Most seats one request takes (kube-apiserver's work estimator: 10). */
export const MAX_SEATS_PER_REQUEST = 10;

/**
 * Seats a list takes: one per hundred objects it may return, 1 to MAX_SEATS_PER_REQUEST, as
 * kube-apiserver's work estimator charges lists. On one thread this is what keeps a level's
 * lists from filling the event loop: twenty seats of `global-default` admit twenty small reads,
 * or two lists of a thousand Nodes. `storedObjects`: how many of the resource the server holds
 * (its watch cache), undefined when unknown (then the most); `limit`: the request's page size.
 */
export function listSeats(storedObjects: number | undefined, limit: number | undefined): number {
  const objects = Math.min(storedObjects ?? Infinity, limit && limit > 0 ? limit : Infinity);
  if (!Number.isFinite(objects)) return MAX_SEATS_PER_REQUEST;
  return Math.min(MAX_SEATS_PER_REQUEST, Math.max(1, Math.ceil(objects / 100)));
}

export function isLongRunning(request: Pick<RequestDescription, 'verb' | 'subresource' | 'follow'>): boolean {
  if (request.verb === 'watch') return true;
  if (request.subresource === 'log' && request.follow) return true;
  return request.subresource !== undefined && STREAMING_SUBRESOURCES.has(request.subresource);
}

export function classify(request: RequestDescription): Classification {
  const longRunning = isLongRunning(request);
  const byUser = request.user;
  const byUserAndNamespace = `${request.user}\u0000${request.namespace ?? ''}`;
  const seats = request.verb === 'list' ? listSeats(request.storedObjects, request.limit) : 1;
  const result = (level: PriorityLevel, rule: string, flow: string): Classification => ({ level, rule, flow, longRunning, seats });

  // The admin (and anyone in system:masters) is never queued: the way in when all else is full.
  if (request.groups.includes(MASTERS)) return result('exempt', 'system-masters', byUser);

  const isNode = request.groups.includes(NODES);
  const isLease = request.group === 'coordination.k8s.io' && request.resource === 'leases';
  const isNodeObject = request.group === '' && request.resource === 'nodes';
  if (isNode && ((isLease && request.namespace === NODE_LEASE_NAMESPACE) || isNodeObject)) {
    return result('node-high', 'node-heartbeats', byUser);
  }

  const serviceAccount = byUser.startsWith('system:serviceaccount:');
  const kubeSystemAccount = byUser.startsWith(KUBE_SYSTEM_SERVICE_ACCOUNT);
  if (isLease && request.namespace !== NODE_LEASE_NAMESPACE && request.verb !== 'list' && !longRunning && (serviceAccount || CONTROL_PLANE_USERS.has(byUser))) {
    return result('leader-election', 'leader-election', byUser);
  }

  // The cluster's own components: its nodes' other traffic, kube-system's service accounts.
  if (isNode) return result('workload-high', 'system-nodes', byUser);
  if (kubeSystemAccount || CONTROL_PLANE_USERS.has(byUser)) return result('workload-high', 'kube-system-service-accounts', byUserAndNamespace);

  // Everyone's writes ahead of everyone's reads: a write is one object, a list may be thousands.
  if (!READ_VERBS.has(request.verb)) return result('workload-low', 'writes', byUserAndNamespace);
  return result('global-default', 'reads', byUserAndNamespace);
}
