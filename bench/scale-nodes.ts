/**
 * The simulated nodes of bench/scale.ts and bench/scale-overload.ts, in a process of their own so that their CPU is not the
 * server's. Each node is a Node and a Lease in kube-node-lease, and renews its Lease as the agent
 * does (src/agent/lease-renewal.ts): a blind merge PATCH of the holder, the duration, renewTime and
 * the health annotation, the next one `renew-ms` after the previous one ended; the first renewals
 * are spread evenly over one interval.
 *
 *   node --import tsx bench/scale-nodes.ts <url> <ca file> <token file> <nodes> <renew-ms> <first index> [<connections>] [<credentials file>]
 *
 * Without a credentials file every request is the admin's (its token); with one (JSON:
 * `{"nodes": [{cert, key}, …], "lister": {cert, key}}`, certificates of the cluster's client CA),
 * each node renews as itself (`system:node:<name>` in `system:nodes`, over a connection of its own,
 * as an agent does), and the bulk lister lists as its own user. The setup stays the admin's.
 *
 * Commands on stdin, one per line; answers on stdout as one JSON line each:
 *   setup            create the Nodes and Leases → {"ready": true, "ms": …}
 *   start            begin renewing → {"started": true}
 *   renewed          how many nodes have had a renewal answered 200, and when the last of them
 *                    first had (epoch ms, null until all have) → {"renewed": n, "allAt": …}
 *   report           renewals since the last report: count, 2xx, 429, other errors, latencies → {...}
 *   silence i,j,…    those nodes stop renewing (a host lost) → {"silenced": n, "at": <epoch ms>}
 *   history i,j,…    those nodes' last renewals as sent (due, sent, answered; epoch ms)
 *                    → {"history": {"<i>": [RenewalRecord, …]}} (bench/verdict-attribution.ts)
 *   bulk <per-s> <max-outstanding>
 *                    start the bulk lister: a list of all Nodes every 1/<per-s> s whatever the
 *                    answers (open loop), at most <max-outstanding> unanswered; `bulk 0 0` stops it
 *                    → {"bulk": <per-s>}; `report` then also has the lists since the last report
 *   stop             end → {"stopped": true}, exit
 */
import fs from 'node:fs';
import https from 'node:https';
import readline from 'node:readline';
import { performance } from 'node:perf_hooks';
import { kubeMicroTime } from '../src/apiserver/objects.js';
import { HEALTH_ANNOTATION, leaseHolderIdentity, NODE_LEASE_NAMESPACE, RELEASED_ANNOTATION } from '../src/node-protocol/names.js';
import { nodeName, nodeObject, percentile, type PatchTarget, send } from './common.js';
import type { RenewalRecord } from './verdict-attribution.js';

const [url, caFile, tokenFile, countText, renewText, firstText, connectionsText, credentialsFile] = process.argv.slice(2);
if (!url || !caFile || !tokenFile) throw new Error('usage: scale-nodes.ts <url> <ca file> <token file> <nodes> <renew-ms> <first index>');
const COUNT = Number(countText);
const RENEW_MS = Number(renewText);
const FIRST = Number(firstText ?? 0);
const LEASE_SECONDS = 4;
/** Requests answered later than this count as failed (the agent's request timeout is of this order). */
const REQUEST_TIMEOUT_MS = 10_000;

const target: PatchTarget = {
  port: Number(new URL(url).port),
  ca: fs.readFileSync(caFile, 'utf8'),
  token: fs.readFileSync(tokenFile, 'utf8').trim(),
  // By default a connection per node, as each agent has its own (a small shared pool queues
  // renewals here, where the server cannot see them, but costs the server less per renewal).
  agent: new https.Agent({ keepAlive: true, maxSockets: Number(connectionsText) > 0 ? Number(connectionsText) : Math.max(64, COUNT), ca: fs.readFileSync(caFile, 'utf8') }),
};

interface Credential {
  cert: string;
  key: string;
}
const credentials = credentialsFile ? (JSON.parse(fs.readFileSync(credentialsFile, 'utf8')) as { nodes: Credential[]; lister: Credential }) : undefined;
/**
 * With credentials, each node its own connection (its certificate is the connection's identity;
 * the agent keys its pool by certificate, so one socket per node), and the lister its own pool.
 */
const nodeAgent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: target.ca });
const renewalTargets = credentials
  ? credentials.nodes.map((c): PatchTarget => ({ port: target.port, ca: target.ca, token: '', agent: nodeAgent, cert: c.cert, key: c.key }))
  : undefined;

const HEALTH = JSON.stringify({ ready: true, reason: 'AgentReady', message: 'simulated by bench/scale-nodes.ts' });
const uids = new Map<number, string>();
const silenced = new Set<number>();
let running = false;

interface Window {
  sent: number;
  ok: number;
  tooMany: number;
  errors: number;
  latencies: number[];
  firstError?: string;
}
let window: Window = { sent: 0, ok: 0, tooMany: 0, errors: 0, latencies: [] };

/** Each node's last renewals (due, sent, answered), for telling its own lateness from the server's. */
const HISTORY_LENGTH = 120;
const history = new Map<number, RenewalRecord[]>();
const epochNow = (): number => performance.timeOrigin + performance.now();
/**
 * Nodes with a renewal answered. Until a node's first one, its last word is the Lease that setup
 * created, seconds before, so a verdict on it then says nothing of the server (the bench counts
 * false verdicts only once every node has renewed).
 */
const renewedOnce = new Set<number>();
let allRenewedAt: number | null = null;

function say(message: unknown): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

function leaseSpec(index: number): Record<string, unknown> {
  return {
    holderIdentity: leaseHolderIdentity(nodeName(index), uids.get(index)!),
    leaseDurationSeconds: LEASE_SECONDS,
    renewTime: kubeMicroTime(),
  };
}

async function setup(): Promise<void> {
  const started = performance.now();
  const indices = Array.from({ length: COUNT }, (_, k) => FIRST + k);
  for (let k = 0; k < indices.length; k += 50) {
    await Promise.all(
      indices.slice(k, k + 50).map(async (index) => {
        const created = await send(target, 'POST', '/api/v1/nodes', JSON.stringify(nodeObject(index)));
        if (created.status !== 201) throw new Error(`creating ${nodeName(index)}: ${created.status} ${created.text.slice(0, 300)}`);
        const uid = (JSON.parse(created.text) as { metadata: { uid: string } }).metadata.uid;
        uids.set(index, uid);
        const lease = {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: nodeName(index), namespace: NODE_LEASE_NAMESPACE, annotations: { [HEALTH_ANNOTATION]: HEALTH }, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: nodeName(index), uid }] },
          spec: leaseSpec(index),
        };
        const leased = await send(target, 'POST', `/apis/coordination.k8s.io/v1/namespaces/${NODE_LEASE_NAMESPACE}/leases`, JSON.stringify(lease));
        if (leased.status !== 201) throw new Error(`creating the lease of ${nodeName(index)}: ${leased.status} ${leased.text.slice(0, 300)}`);
      }),
    );
  }
  say({ ready: true, ms: Math.round(performance.now() - started) });
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

async function renew(index: number, dueAt: number): Promise<void> {
  const record: RenewalRecord = { dueAt, sentAt: epochNow() };
  const records = history.get(index) ?? [];
  if (records.length >= HISTORY_LENGTH) records.shift();
  records.push(record);
  history.set(index, records);
  const body = JSON.stringify({ metadata: { annotations: { [HEALTH_ANNOTATION]: HEALTH, [RELEASED_ANNOTATION]: null } }, spec: leaseSpec(index) });
  const path = `/apis/coordination.k8s.io/v1/namespaces/${NODE_LEASE_NAMESPACE}/leases/${nodeName(index)}`;
  const counted = window;
  counted.sent++;
  const t0 = performance.now();
  try {
    const res = await withTimeout(send(renewalTargets?.[index - FIRST] ?? target, 'PATCH', path, body, 'application/merge-patch+json'), REQUEST_TIMEOUT_MS);
    counted.latencies.push(performance.now() - t0);
    record.answeredAt = epochNow();
    if (!res.reusedSocket) record.waitedForConnection = true;
    if (res.status === 200 && !renewedOnce.has(index)) {
      renewedOnce.add(index);
      if (renewedOnce.size === COUNT) allRenewedAt = record.answeredAt;
    }
    if (res.status === 200) counted.ok++;
    else if (res.status === 429) counted.tooMany++;
    else {
      counted.errors++;
      counted.firstError ??= `${res.status} ${res.text.slice(0, 200)}`;
    }
  } catch (error) {
    counted.errors++;
    counted.firstError ??= String(error);
  }
}

function loop(index: number, delayMs: number): void {
  const dueAt = epochNow() + delayMs;
  setTimeout(() => {
    if (!running || silenced.has(index)) return;
    void renew(index, dueAt).finally(() => loop(index, RENEW_MS));
  }, delayMs);
}

/**
 * The bulk lister: an open loop of lists of every Node (the most a list costs the server here),
 * as a dashboard or a misbehaving controller without an informer would send them. The answers
 * are drained, not parsed: the cost is the server's. Not answered within REQUEST_TIMEOUT_MS: a
 * timeout (the request is abandoned, its connection closed).
 */
interface ListWindow extends Window {
  timeouts: number;
  skipped: number;
}
const listWindow = (): ListWindow => ({ sent: 0, ok: 0, tooMany: 0, errors: 0, timeouts: 0, skipped: 0, latencies: [] });
let lists = listWindow();
let bulkTimer: NodeJS.Timeout | undefined;
let listerAgent: https.Agent | undefined;

function bulk(perSecond: number, maxOutstanding: number): void {
  clearInterval(bulkTimer);
  bulkTimer = undefined;
  listerAgent?.destroy();
  listerAgent = undefined;
  if (perSecond <= 0) return;
  const agent = new https.Agent({ keepAlive: true, maxSockets: maxOutstanding, ca: target.ca });
  listerAgent = agent;
  const lister = credentials?.lister;
  let outstanding = 0;
  const started = performance.now();
  let sent = 0;
  const one = (): void => {
    const counted = lists;
    if (outstanding >= maxOutstanding) {
      counted.skipped++;
      return;
    }
    outstanding++;
    counted.sent++;
    const t0 = performance.now();
    let settled = false;
    const finish = (what: 'ok' | 'tooMany' | 'errors' | 'timeouts', error?: string): void => {
      if (settled) return;
      settled = true;
      outstanding--;
      clearTimeout(timer);
      counted[what]++;
      if (what !== 'timeouts') counted.latencies.push(performance.now() - t0);
      if (error) counted.firstError ??= error;
    };
    const req = https.request(
      { host: '127.0.0.1', port: target.port, method: 'GET', path: '/api/v1/nodes', agent, ca: target.ca, ...(lister ? { cert: lister.cert, key: lister.key } : {}), headers: { Accept: 'application/json', ...(lister ? {} : { Authorization: `Bearer ${target.token}` }) } },
      (res) => {
        res.resume();
        res.on('end', () => finish(res.statusCode === 200 ? 'ok' : res.statusCode === 429 ? 'tooMany' : 'errors', res.statusCode === 200 || res.statusCode === 429 ? undefined : `list: HTTP ${res.statusCode}`));
        res.on('error', (error) => finish('errors', String(error)));
      },
    );
    const timer = setTimeout(() => {
      finish('timeouts');
      req.destroy();
    }, REQUEST_TIMEOUT_MS);
    req.on('error', (error) => finish('errors', String(error)));
    req.end();
  };
  // Catch up on the schedule every 10 ms, so the rate holds however late this process runs.
  bulkTimer = setInterval(() => {
    const due = Math.floor(((performance.now() - started) / 1000) * perSecond);
    while (sent < due) {
      sent++;
      one();
    }
  }, 10);
}

function summary(done: Window): Record<string, unknown> {
  const sorted = Float64Array.from(done.latencies).sort();
  return {
    sent: done.sent,
    ok: done.ok,
    tooMany: done.tooMany,
    errors: done.errors,
    ...(done.firstError ? { firstError: done.firstError } : {}),
    p50: sorted.length ? percentile(sorted, 50) : null,
    p99: sorted.length ? percentile(sorted, 99) : null,
    max: sorted.length ? sorted[sorted.length - 1] : null,
  };
}

function report(): void {
  const done = window;
  window = { sent: 0, ok: 0, tooMany: 0, errors: 0, latencies: [] };
  const listed = lists;
  lists = listWindow();
  say({ ...summary(done), lists: { ...summary(listed), timeouts: listed.timeouts, skipped: listed.skipped } });
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const [command, ...rest] = line.trim().split(/\s+/);
  const argument = rest.join(' ');
  switch (command) {
    case 'setup':
      setup().catch((error: unknown) => {
        say({ error: String(error) });
        process.exit(1);
      });
      break;
    case 'start':
      running = true;
      for (let k = 0; k < COUNT; k++) loop(FIRST + k, (k * RENEW_MS) / COUNT);
      say({ started: true });
      break;
    case 'renewed':
      say({ renewed: renewedOnce.size, allAt: allRenewedAt });
      break;
    case 'report':
      report();
      break;
    case 'silence': {
      const indices = (argument ?? '').split(',').filter(Boolean).map(Number);
      for (const index of indices) silenced.add(index);
      say({ silenced: indices.length, at: Date.now() });
      break;
    }
    case 'history': {
      const indices = (argument ?? '').split(',').filter(Boolean).map(Number);
      say({ history: Object.fromEntries(indices.map((index) => [String(index), history.get(index) ?? []])) });
      break;
    }
    case 'bulk': {
      const [perSecond, maxOutstanding] = (argument ?? '').split(/\s+/).map(Number);
      bulk(perSecond ?? 0, maxOutstanding ?? 0);
      say({ bulk: perSecond });
      break;
    }
    case 'stop':
      running = false;
      bulk(0, 0);
      say({ stopped: true });
      target.agent.destroy();
      process.exit(0);
      break;
    default:
      say({ error: `unknown command ${line}` });
  }
});
lines.on('close', () => process.exit(0));
