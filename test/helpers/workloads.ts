import fs from 'node:fs';
import { processAlive } from '../../src/agent/pods/launch.js';
import type { ApiTarget } from './agent.js';
import { eventually, request } from './server.js';

/**
 * Workload helpers for tests with real agents: manifests with real commands, pod queries, and the
 * singleton journal — a file each copy of a singleton appends `<pod uid> <epoch ms>` to every
 * 50 ms, from which a test proves two copies never ran at once.
 */

export interface PodView {
  name: string;
  uid: string;
  node: string;
  phase: string;
  ready: boolean;
  terminating: boolean;
  owner?: string;
  containerIds: string[];
  restarts: number;
}

interface RawPod {
  metadata: { name: string; uid: string; deletionTimestamp?: string; ownerReferences?: { uid: string; controller?: boolean }[] };
  spec: { nodeName?: string };
  status?: { phase?: string; containerStatuses?: { ready?: boolean; containerID?: string; restartCount?: number }[] };
}

function view(pod: RawPod): PodView {
  const statuses = pod.status?.containerStatuses ?? [];
  const owner = pod.metadata.ownerReferences?.find((r) => r.controller)?.uid;
  return {
    name: pod.metadata.name,
    uid: pod.metadata.uid,
    node: pod.spec.nodeName ?? '',
    phase: pod.status?.phase ?? 'Pending',
    ready: pod.status?.phase === 'Running' && statuses.length > 0 && statuses.every((s) => s.ready === true),
    terminating: Boolean(pod.metadata.deletionTimestamp),
    ...(owner ? { owner } : {}),
    containerIds: statuses.map((s) => s.containerID ?? ''),
    restarts: statuses.reduce((sum, s) => sum + (s.restartCount ?? 0), 0),
  };
}

export async function listPods(server: ApiTarget, labelSelector?: string, namespace = 'default'): Promise<PodView[]> {
  const query = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : '';
  const res = await request(server, 'GET', `/api/v1/namespaces/${namespace}/pods${query}`);
  if (res.status !== 200) throw new Error(`list pods: HTTP ${res.status} ${res.text}`);
  return (res.json as { items: RawPod[] }).items.map(view);
}

/** Pods of `selector` that are Running and Ready and not being deleted. */
export async function readyPods(server: ApiTarget, selector: string): Promise<PodView[]> {
  return (await listPods(server, selector)).filter((p) => p.ready && !p.terminating);
}

export function waitForReadyPods(server: ApiTarget, selector: string, count: number, timeoutMs = 30_000): Promise<PodView[]> {
  return eventually(
    async () => {
      const pods = await readyPods(server, selector);
      return pods.length === count ? pods : undefined;
    },
    `${count} ready pods matching ${selector}`,
    timeoutMs,
  );
}

export async function createObject(server: ApiTarget, path: string, body: unknown): Promise<unknown> {
  const res = await request(server, 'POST', path, { body });
  if (res.status !== 201) throw new Error(`POST ${path}: HTTP ${res.status} ${res.text}`);
  return res.json;
}

export function deployment(name: string, replicas: number, command: string[]): Record<string, unknown> {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: { terminationGracePeriodSeconds: 5, containers: [{ name: 'main', image: 'busybox', command }] },
      },
    },
  };
}

/** A one-replica StatefulSet (the singleton of the failover tests) running `podSpec`. */
export function singletonStatefulSet(name: string, podSpec: Record<string, unknown>): Record<string, unknown> {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name },
    spec: {
      replicas: 1,
      serviceName: name,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: podSpec },
    },
  };
}

/** The environment variable a journaling container writes its pod's UID from. */
export const POD_UID_ENV = [{ name: 'POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } }];

/** A one-replica StatefulSet whose process journals `<pod uid> <epoch ms>` every 50 ms. */
export function journalingSingleton(name: string, journal: string): Record<string, unknown> {
  return singletonStatefulSet(name, {
    terminationGracePeriodSeconds: 5,
    containers: [
      {
        name: 'main',
        command: ['sh', '-c', `while :; do echo "$POD_UID $(date +%s%3N)" >> ${journal}; sleep 0.05; done`],
        env: POD_UID_ENV,
      },
    ],
  });
}

export interface JournalCopy {
  uid: string;
  first: number;
  last: number;
  lines: number;
}

/** Each copy's first and last write, in order of first write. */
export function readJournal(journal: string): JournalCopy[] {
  const copies = new Map<string, JournalCopy>();
  for (const line of fs.readFileSync(journal, 'utf8').split('\n')) {
    const [uid, ms] = line.trim().split(' ');
    const at = Number(ms);
    if (!uid || !Number.isFinite(at)) continue;
    const copy = copies.get(uid);
    if (!copy) copies.set(uid, { uid, first: at, last: at, lines: 1 });
    else {
      copy.first = Math.min(copy.first, at);
      copy.last = Math.max(copy.last, at);
      copy.lines++;
    }
  }
  return [...copies.values()].sort((a, b) => a.first - b.first);
}

/** The longest time two copies both wrote (0 when they never overlapped), and the handover gaps. */
export function journalOverlap(copies: JournalCopy[]): { maxOverlapMs: number; gapsMs: number[] } {
  let maxOverlapMs = 0;
  const gapsMs: number[] = [];
  for (let i = 1; i < copies.length; i++) {
    for (let j = 0; j < i; j++) maxOverlapMs = Math.max(maxOverlapMs, copies[j]!.last - copies[i]!.first);
    gapsMs.push(copies[i]!.first - copies[i - 1]!.last);
  }
  return { maxOverlapMs: Math.max(0, maxOverlapMs), gapsMs };
}

export interface EventView {
  name: string;
  reason: string;
  type: string;
  object: string;
  message: string;
}

export async function listEvents(server: ApiTarget): Promise<EventView[]> {
  const res = await request(server, 'GET', '/api/v1/events');
  const items = (res.json as { items: { metadata: { name: string }; reason: string; type: string; message: string; involvedObject: { kind: string; name: string } }[] }).items;
  return items.map((e) => ({ name: e.metadata.name, reason: e.reason, type: e.type, object: `${e.involvedObject.kind}/${e.involvedObject.name}`, message: e.message }));
}

/** Events recorded after `before` (a list taken earlier). */
export async function eventsSince(server: ApiTarget, before: EventView[]): Promise<EventView[]> {
  const seen = new Set(before.map((e) => e.name));
  return (await listEvents(server)).filter((e) => !seen.has(e.name));
}

/** Events that only a failover produces: none may appear after a planned shutdown. */
export const FAILOVER_REASONS = new Set(['NodeUnavailable', 'Failover', 'TaintManagerEviction', 'SingletonFailover']);

/** Whether a process runs (not a zombie): the runtime's own check. */
export const alive = processAlive;

/**
 * The container PIDs a pod's status names (`drover://<pid>`). Throws when it names none: every
 * caller loops over them to prove processes alive or dead, and a loop over nothing proves nothing.
 */
export function containerPids(pod: PodView): number[] {
  const pids = pod.containerIds.map((id) => Number(id.replace('drover://', ''))).filter((pid) => Number.isInteger(pid) && pid > 0);
  if (pids.length === 0) throw new Error(`pod ${pod.name} (${pod.uid}) names no container PID in its status: ${JSON.stringify(pod.containerIds)}`);
  return pids;
}
