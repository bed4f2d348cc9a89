import path from 'node:path';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { HttpClient } from '../client/http.js';
import { NODES, PODS } from '../client/types.js';
import { SHUTDOWN_ANNOTATION, STATE_LABEL } from '../node-protocol/names.js';
import { controllerOf, isPodRunningAndReady } from '../node-protocol/pods.js';
import type { ShutdownRecord } from '../node-protocol/records.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import type { PodManager } from './pod-manager.js';
import { nodeSpec, podSpec } from '../controllers/kube-types.js';

/**
 * The two halves of a planned stop that come before the lease is released: the shutdown record
 * (on the Node and in `<agent dir>/shutdown.json`, with the cordon), and the drain that evicts
 * this node's pods and waits for their replacements. The agent is the only source of truth about
 * planned stops: the record goes first, so that whatever happens after it, the control plane knows
 * this stop was planned (Down, not Unavailable).
 */

/** Where the agent keeps its shutdown record, for when the Node cannot be written or is gone. */
export function shutdownFile(agentDir: string): string {
  return path.join(agentDir, 'shutdown.json');
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const isDaemonPod = (pod: KubeObject): boolean => controllerOf(pod)?.kind === 'DaemonSet';

export interface DrainContext {
  nodeName: string;
  agentDir: string;
  /** The agent's current API client (it moves between servers). */
  client: () => HttpClient | undefined;
  pods: PodManager | undefined;
  logger: Logger;
}

/**
 * Record the planned stop, locally and on the Node, and cordon the node with it. The record says
 * whether this stop did the cordon, so that coming back undoes only our own.
 */
export async function recordShutdown(context: DrainContext, reason: string): Promise<void> {
  const name = context.nodeName;
  const node = await context.client()!.get(NODES, undefined, name);
  const alreadyCordoned = nodeSpec(node).unschedulable === true;
  const record: ShutdownRecord = { reason, time: new Date().toISOString(), cordoned: !alreadyCordoned };
  writeFileAtomic(shutdownFile(context.agentDir), JSON.stringify(record), 0o644);
  await context.client()!.patch(NODES, undefined, name, 'merge', {
    metadata: { annotations: { [SHUTDOWN_ANNOTATION]: JSON.stringify(record) } },
    spec: { unschedulable: true },
  });
  context.logger.info({ reason, cordoned: record.cordoned }, 'planned shutdown: recorded and cordoned');
}

/**
 * Evict every pod bound here (its owner starts a replacement elsewhere; a singleton's replacement
 * waits until this copy is stopped and gone); wait until they are gone and their owners have them
 * running elsewhere, until `deadline`. `started` is when the shutdown began (for the log).
 */
export async function drainNode(context: DrainContext, deadline: number, started: number): Promise<void> {
  const pods = context.pods;
  const client = context.client();
  if (!pods || !client) return;
  pods.beginDrain();
  // Daemon pods stay (as `kubectl drain --ignore-daemonsets` leaves them): their DaemonSet would
  // only bind a new copy to this node again, and they stop with the node.
  const bound = pods.boundPods().filter((p) => !p.metadata.deletionTimestamp && !isDaemonPod(p));
  if (!bound.length) return;
  // For each owner: how many of its pods run elsewhere now, and how many leave this node.
  const owners = new Map<string, { before: number; leaving: number }>();
  for (const pod of bound) {
    const owner = controllerOf(pod)?.uid;
    if (owner) owners.set(owner, { before: 0, leaving: (owners.get(owner)?.leaving ?? 0) + 1 });
  }
  const readyElsewhere = async (): Promise<Map<string, number>> => {
    const counts = new Map<string, number>();
    const { items } = await context.client()!.list(PODS, undefined);
    for (const pod of items) {
      const owner = controllerOf(pod)?.uid;
      if (!owner || !owners.has(owner) || pod.metadata.deletionTimestamp) continue;
      if (podSpec(pod).nodeName === context.nodeName) continue;
      if (isPodRunningAndReady(pod)) counts.set(owner, (counts.get(owner) ?? 0) + 1);
    }
    return counts;
  };
  for (const [owner, count] of await readyElsewhere()) owners.get(owner)!.before = count;
  // Evict everything; a pod its disruption budget protects right now (429) is asked again until
  // the deadline, as kubectl drain does: another pod's replacement may free the budget.
  let pending = [...bound];
  while (pending.length) {
    const blocked: KubeObject[] = [];
    for (const pod of pending) {
      try {
        await client.evict(pod.metadata.namespace!, pod.metadata.name!);
      } catch (error) {
        if (error instanceof ApiError && error.code === 429) blocked.push(pod);
        else if (!(error instanceof ApiError && error.code === 404)) {
          context.logger.warn({ err: error, pod: pod.metadata.name }, 'eviction failed; the pod will be stopped with the node');
        }
      }
    }
    pending = blocked;
    if (!pending.length) break;
    if (Date.now() + 500 >= deadline) {
      context.logger.warn(
        { pods: pending.map((p) => `${p.metadata.namespace}/${p.metadata.name}`) },
        'disruption budgets still block these evictions at the deadline; they stop with the node',
      );
      break;
    }
    await sleep(500);
  }
  context.logger.info({ pods: bound.length, blocked: pending.length }, 'draining: evicted the pods on this node');
  const emptied = await pods.waitUntilEmpty(deadline, isDaemonPod);
  // Replacements need somewhere to run: with no other Ready, schedulable node (a one-node
  // cluster, or the last node standing) waiting for them would only delay the shutdown.
  const { items: nodes } = await client.list(NODES, undefined).catch(() => ({ items: [] as KubeObject[] }));
  const elsewhere = nodes.some(
    (n) =>
      n.metadata.name !== context.nodeName &&
      n.metadata.labels?.[STATE_LABEL] === 'Ready' &&
      nodeSpec(n).unschedulable !== true,
  );
  if (!elsewhere && owners.size) context.logger.info('no other Ready node to run replacements; not waiting for them');
  let replaced = owners.size === 0 || !elsewhere;
  while (!replaced && Date.now() < deadline) {
    const counts = await readyElsewhere().catch(() => new Map<string, number>());
    replaced = [...owners].every(([owner, { before, leaving }]) => (counts.get(owner) ?? 0) >= before + leaving);
    if (!replaced) await new Promise((resolve) => setTimeout(resolve, 100));
  }
  context.logger.info(
    { emptied, replaced, ms: Date.now() - started },
    emptied && replaced ? 'drained: pods gone and running elsewhere' : 'drain incomplete at the deadline; stopping what is left',
  );
}
