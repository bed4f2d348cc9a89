import fs from 'node:fs';
import path from 'node:path';
import { type ApiTarget, freePort, NodeSampler, nodeState, type NodeObject } from './agent.js';
import { aliveWith, type ClusterServer, clusterTempDir, etcdPidOf, startClusterServer, url } from './cluster.js';
import { reapPods } from './pods.js';
import { eventually, request } from './server.js';
import { deployment, journalingSingleton, journalOverlap, listPods, type PodView, readJournal } from './workloads.js';

/**
 * The loss of a whole host in an all-in-one cluster of three servers on managed etcd, for the
 * leader-failover test and bench: each server runs its etcd member, the API, a candidate for the
 * controller lease and its embedded agent (with its pods' supervisors). "Losing the host" is
 * SIGKILL to all of those at once. A trial measures, from the kill, when another server holds the
 * controller lease, when the host's node is Unavailable, when its Deployment pods and its
 * singleton run Ready elsewhere, whether two copies of the singleton ever ran at once, and whether
 * any other node was ever judged anything but Ready.
 *
 * Servers listen on every address (no --bind-address) on their own ports, with node IPs 127.0.0.N,
 * so the test reaches each on 127.0.0.1.
 */

export const CONTROLLER_LEASE_PATH = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/drover-controllers';
export const WEB = 'web';
export const SOLO = 'solo';
const REQUEST_TIMEOUT_MS = 3000;

export interface HaMember extends ClusterServer {
  clientPort: number;
  peerPort: number;
}

export async function newMember(prefix: string, n: number): Promise<HaMember> {
  return {
    name: `${prefix}${n}`,
    ip: `127.0.0.${n}`,
    dataDir: clusterTempDir(`${prefix}${n}`),
    httpsPort: await freePort(),
    clientPort: await freePort(),
    peerPort: await freePort(),
    runs: [],
  };
}

/** The flags a member needs at every start (a restart on its data dir needs nothing else). */
export function memberArgs(m: HaMember): string[] {
  return [
    'server',
    '--data-dir', m.dataDir,
    '--https-listen-port', String(m.httpsPort),
    '--node-ip', m.ip,
    '--node-name', m.name,
    '--agent-port', '0',
    '--etcd-client-port', String(m.clientPort),
    '--etcd-peer-port', String(m.peerPort),
  ];
}

/** The first member with --cluster-init, the others joining through it one after the other. */
export async function startHaCluster(prefix: string, count = 3): Promise<HaMember[]> {
  const members: HaMember[] = [];
  for (let n = 1; n <= count; n++) members.push(await newMember(prefix, n));
  const [first, ...rest] = members;
  await startClusterServer(first!, [...memberArgs(first!), '--cluster-init']);
  const token = fs.readFileSync(path.join(first!.dataDir, 'token'), 'utf8').trim();
  for (const m of rest) await startClusterServer(m, [...memberArgs(m), '--server', url(first!), '--token', token]);
  return members;
}

export function target(m: HaMember): ApiTarget {
  return {
    port: m.httpsPort,
    token: fs.readFileSync(path.join(m.dataDir, 'server/cred/admin.token'), 'utf8').trim(),
    caPem: fs.readFileSync(path.join(m.dataDir, 'server/tls/server-ca.crt'), 'utf8'),
  };
}

/** `<node name>-<first 8 characters of the server id>`: the server's identity in the controller lease. */
export function identityOf(m: HaMember): string {
  return `${m.name}-${fs.readFileSync(path.join(m.dataDir, 'server/server-id'), 'utf8').trim().slice(0, 8)}`;
}

export interface LeaseView {
  holder: string;
  resourceVersion: string;
  transitions: number;
}

export async function controllerLease(via: ApiTarget): Promise<LeaseView | undefined> {
  const res = await request(via, 'GET', CONTROLLER_LEASE_PATH, { timeoutMs: REQUEST_TIMEOUT_MS });
  if (res.status !== 200) return undefined;
  const lease = res.json as { metadata: { resourceVersion: string }; spec?: { holderIdentity?: string; leaseTransitions?: number } };
  return { holder: lease.spec?.holderIdentity ?? '', resourceVersion: lease.metadata.resourceVersion, transitions: lease.spec?.leaseTransitions ?? 0 };
}

/** The member holding the controller lease, once one does. */
export async function leaderOf(members: HaMember[], via: ApiTarget, ceilingMs = 60_000): Promise<HaMember> {
  return eventually(
    async () => {
      const lease = await controllerLease(via).catch(() => undefined);
      return members.find((m) => !m.proc?.hasExited && lease?.holder === identityOf(m));
    },
    'a controller lease holder among the running servers',
    ceilingMs,
    100,
  );
}

async function nodes(via: ApiTarget): Promise<NodeObject[]> {
  const res = await request(via, 'GET', '/api/v1/nodes', { timeoutMs: REQUEST_TIMEOUT_MS });
  if (res.status !== 200) throw new Error(`list nodes: HTTP ${res.status} ${res.text}`);
  return (res.json as { items: NodeObject[] }).items;
}

export async function allReady(via: ApiTarget, names: string[], ceilingMs = 60_000): Promise<void> {
  await eventually(
    async () => {
      const list = await nodes(via).catch(() => []);
      return names.every((name) => list.some((n) => n.metadata.name === name && nodeState(n) === 'Ready'));
    },
    `nodes ${names.join(', ')} Ready`,
    ceilingMs,
    200,
  );
}

async function cordon(via: ApiTarget, node: string, unschedulable: boolean): Promise<void> {
  const res = await request(via, 'PATCH', `/api/v1/nodes/${node}`, {
    body: { spec: { unschedulable } },
    headers: { 'Content-Type': 'application/merge-patch+json' },
    timeoutMs: REQUEST_TIMEOUT_MS,
  });
  if (res.status !== 200) throw new Error(`cordon ${node}: HTTP ${res.status} ${res.text}`);
}

async function deletePod(via: ApiTarget, name: string): Promise<void> {
  const res = await request(via, 'DELETE', `/api/v1/namespaces/default/pods/${name}`, { timeoutMs: REQUEST_TIMEOUT_MS });
  if (res.status !== 200 && res.status !== 404) throw new Error(`delete pod ${name}: HTTP ${res.status} ${res.text}`);
}

/** The web Deployment (one replica per node) and the journaling singleton. */
export async function createWorkloads(via: ApiTarget, replicas: number, journal: string): Promise<void> {
  for (const [p, body] of [
    ['/apis/apps/v1/namespaces/default/deployments', deployment(WEB, replicas, ['sh', '-c', 'while :; do sleep 1; done'])],
    ['/apis/apps/v1/namespaces/default/statefulsets', journalingSingleton(SOLO, journal)],
  ] as const) {
    const res = await request(via, 'POST', p, { body, timeoutMs: REQUEST_TIMEOUT_MS });
    if (res.status !== 201) throw new Error(`POST ${p}: HTTP ${res.status} ${res.text}`);
  }
}

/** Settled: exactly the desired pods, all Running and Ready, none terminating. */
async function settledPods(via: ApiTarget, replicas: number): Promise<{ web: PodView[]; solo: PodView[] } | undefined> {
  const web = await listPods(via, `app=${WEB}`);
  const solo = await listPods(via, `app=${SOLO}`);
  const good = (pods: PodView[], n: number): boolean => pods.length === n && pods.every((p) => p.ready && !p.terminating);
  return good(web, replicas) && good(solo, 1) ? { web, solo } : undefined;
}

/** Waits until the workloads are settled (exactly the desired pods, all Running and Ready, none terminating). */
export async function waitSettled(via: ApiTarget, replicas: number, ceilingMs = 90_000): Promise<void> {
  await eventually(() => settledPods(via, replicas), 'the workloads settled', ceilingMs, 200);
}

/**
 * Puts the singleton and at least one web pod on `victim` (cordoning the other nodes while their
 * misplaced pods are replaced), and waits until everything is settled again.
 */
export async function placeOn(via: ApiTarget, victim: string, others: string[], replicas: number, ceilingMs = 90_000): Promise<{ web: PodView[]; solo: PodView }> {
  let pods = await eventually(() => settledPods(via, replicas), 'the workloads settled', ceilingMs, 200);
  const soloMisplaced = pods.solo[0]!.node !== victim;
  const webMisplaced = !pods.web.some((p) => p.node === victim);
  if (soloMisplaced || webMisplaced) {
    for (const node of others) await cordon(via, node, true);
    try {
      if (soloMisplaced) await deletePod(via, pods.solo[0]!.name);
      if (webMisplaced) await deletePod(via, pods.web[0]!.name);
      pods = await eventually(
        async () => {
          const settled = await settledPods(via, replicas);
          return settled && settled.solo[0]!.node === victim && settled.web.some((p) => p.node === victim) ? settled : undefined;
        },
        `the singleton and a web pod on ${victim}`,
        ceilingMs,
        200,
      );
    } finally {
      for (const node of others) await cordon(via, node, false);
    }
  }
  return { web: pods.web, solo: pods.solo[0]! };
}

/** SIGKILL everything the member's host runs: the server (and its embedded agent), its etcd member, its pods' supervisors and their processes. */
export function killHost(m: HaMember): number {
  const etcdPid = etcdPidOf(m);
  const killedAt = Date.now();
  process.kill(m.proc!.pid, 'SIGKILL');
  if (etcdPid !== undefined && aliveWith(etcdPid, m.dataDir)) process.kill(etcdPid, 'SIGKILL');
  reapPods(m.dataDir);
  return killedAt;
}

export async function restartMember(m: HaMember): Promise<void> {
  await m.proc?.exited;
  await startClusterServer(m, memberArgs(m));
}

export interface HostLossTrial {
  victim: string;
  /** Whether the victim held the controller lease when it was killed. */
  wasLeader: boolean;
  /** From the kill, in ms; undefined when it did not happen within the ceiling. */
  handoverMs?: number;
  unavailableMs?: number;
  deploymentMs?: number;
  singletonMs?: number;
  /** The longest time two copies of the singleton both wrote their journal. */
  overlapMs: number;
  /**
   * Other nodes judged lost or not ready after the kill: seen in any state but Ready or Unknown, or
   * named by a NodeUnavailable event. Unknown (a suspect: a renewal late by more than grace/2) has
   * no consequence and is counted apart: an etcd leader election after the kill can delay every
   * renewal by a second or two.
   */
  wronglyMarked: string[];
  /** Other nodes seen Unknown for a moment after the kill. */
  suspected: string[];
  /** Each node's sampled states from the kill on (consecutive repeats folded). */
  transitions: Record<string, string>;
}

/**
 * Kill `victim`'s host and follow the cluster through `observer` (a survivor) every `pollMs` until
 * everything has happened or `ceilingMs` has passed.
 */
export async function hostLossTrial(
  members: HaMember[],
  victim: HaMember,
  observer: HaMember,
  options: { replicas: number; journal: string; pollMs?: number; ceilingMs?: number },
): Promise<HostLossTrial> {
  const via = target(observer);
  const pollMs = options.pollMs ?? 100;
  const ceilingMs = options.ceilingMs ?? 60_000;
  const before = await placeOn(
    via,
    victim.name,
    members.filter((m) => m !== victim).map((m) => m.name),
    options.replicas,
  );
  await allReady(via, members.map((m) => m.name));
  const lease = await controllerLease(via);
  const wasLeader = lease?.holder === identityOf(victim);
  const sampler = new NodeSampler(via, pollMs).start();
  // A random phase against the renewals (theirs every second, the controller lease's every 500 ms).
  await new Promise((r) => setTimeout(r, Math.random() * 1000));
  const killedAt = killHost(victim);
  const trial: HostLossTrial = { victim: victim.name, wasLeader, overlapMs: 0, wronglyMarked: [], suspected: [], transitions: {} };
  const since = (): number => Date.now() - killedAt;
  try {
    while (since() < ceilingMs) {
      if (trial.handoverMs === undefined) {
        const now = await controllerLease(via).catch(() => undefined);
        if (now && now.holder !== identityOf(victim) && (wasLeader ? now.holder !== '' : true)) trial.handoverMs = wasLeader ? since() : 0;
      }
      if (trial.unavailableMs === undefined) {
        const node = (await nodes(via).catch(() => [])).find((n) => n.metadata.name === victim.name);
        if (node && nodeState(node) === 'Unavailable') trial.unavailableMs = since();
      }
      if (trial.deploymentMs === undefined) {
        const web = (await listPods(via, `app=${WEB}`).catch(() => [])).filter((p) => p.ready && !p.terminating && p.node !== victim.name);
        if (web.length >= options.replicas) trial.deploymentMs = since();
      }
      if (trial.singletonMs === undefined) {
        const solo = (await listPods(via, `app=${SOLO}`).catch(() => [])).find((p) => p.ready && !p.terminating && p.node !== victim.name && p.uid !== before.solo.uid);
        if (solo) trial.singletonMs = since();
      }
      if ([trial.handoverMs, trial.unavailableMs, trial.deploymentMs, trial.singletonMs].every((v) => v !== undefined)) break;
      await new Promise((r) => setTimeout(r, pollMs));
    }
    // A little more sampling, so that a late wrong verdict on another node is seen too.
    await new Promise((r) => setTimeout(r, 1000));
  } finally {
    await sampler.stop();
  }
  const end = Date.now();
  const others = members.filter((m) => m !== victim).map((m) => m.name);
  const wrong = new Set<string>();
  for (const node of others) {
    const states = sampler.statesOf(node, killedAt, end);
    if (states.some((s) => s !== 'Ready' && s !== 'Unknown')) wrong.add(node);
    if (states.includes('Unknown')) trial.suspected.push(node);
  }
  for (const m of members) {
    trial.transitions[m.name] = sampler
      .statesOf(m.name, killedAt, end)
      .filter((s, i, all) => i === 0 || s !== all[i - 1])
      .join(' → ');
  }
  const events = await request(via, 'GET', '/api/v1/events', { timeoutMs: REQUEST_TIMEOUT_MS });
  for (const e of (events.json as { items: { reason: string; involvedObject: { kind: string; name: string }; lastTimestamp?: string }[] }).items) {
    if (e.reason === 'NodeUnavailable' && others.includes(e.involvedObject.name) && Date.parse(e.lastTimestamp ?? '') >= killedAt - 1000) wrong.add(e.involvedObject.name);
  }
  trial.wronglyMarked = [...wrong];
  trial.overlapMs = journalOverlap(readJournal(options.journal)).maxOverlapMs;
  return trial;
}
