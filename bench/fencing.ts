/**
 * Fencing: how soon a singleton's supervisor kills its workload once its node's lease renewals
 * stop being confirmed, measured against the fencing timeout it must wait out. The figures that
 * test/e2e/pod-fencing.test.ts only holds to generous ceilings.
 *
 *   node --import tsx bench/fencing.ts [--trials 5] [--timeout-ms 3000]
 *
 * Real pod supervisors (launchSupervisor, as the agent starts them) run a `sleep` workload marked
 * atMostOne. The script plays the agent: it rewrites the pod's fencing file every 100 ms, as the
 * agent does after each confirmed renewal, then stops. Fake peer agents on 127.0.0.1 (HTTPS,
 * certificates from a CA made for the run) answer the peer question with a chosen age. The
 * workload's PID is polled every 5 ms; times are on the monotonic clock the supervisor uses.
 * Scenarios, interleaved in each trial:
 *
 *   isolated     3 nodes, no peers listed: fenced once the timeout has passed.
 *   unreachable  2 peers, one refusing connections, one that never answers: fenced after the
 *                timeout plus one peer query (400 ms timeout).
 *   outage-over  2 peers report themselves cut off too (a control-plane outage): the workload
 *                keeps running; then the peers report fresh renewals: time from that switch to
 *                the kill (the supervisor re-asks every 500 ms during an outage, and waits one
 *                fencing timeout from the last round that found the outage for its own renewal).
 *   peer-query   queryPeers() against the two unreachable peers: time to give up.
 *
 * Writes bench/results/fencing.json. Nothing is asserted on the figures; an outage that was not
 * recognised, or a workload fenced before the timeout, is reported as an error (exit code 1).
 * Every process started here is killed by PID, and the temp dir removed, on every exit path.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { monoNowMs, PEER_QUERY_TIMEOUT_MS, queryPeers, writeFencingState, type FencingPeer, type FencingState } from '../src/agent/pods/fencing.js';
import { killPodProcesses, launchSupervisor, podDir, processAlive, readRunState, writeRunSpec } from '../src/agent/pods/launch.js';
import type { PodRunSpec, PodRunState } from '../src/agent/pods/run-spec.js';
import { createCertificateAuthority, issueCertificate } from '../src/security/pki.js';
import { benchTempDir, installCleanup, machineInfo, onCleanup, percentile, printMachine, removeBenchTempDir, round, sleep, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    trials: { type: 'string', default: '5' },
    'timeout-ms': { type: 'string', default: '3000' },
  },
});
const TRIALS = Number(args.trials);
const TIMEOUT_MS = Number(args['timeout-ms']);
for (const [name, value] of [['trials', TRIALS], ['timeout-ms', TIMEOUT_MS]] as const) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`);
}
const PEER_TOKEN = 'bench-peer-token';
const FEED_MS = 100;
const POLL_MS = 5;
/** The supervisor starts from the TypeScript source under tsx: slow to start on a loaded machine. */
const LAUNCH_CEILING_MS = 60_000;
/** A pod not fenced this long after the timeout is reported as an error, not waited for. */
const GIVE_UP_MS = 30_000;

installCleanup();
const root = benchTempDir('drover-bench-fencing-');
const podDirs: string[] = [];
onCleanup(() => {
  for (const dir of podDirs) killPodProcesses(dir);
});

// ---------------------------------------------------------------------------------------------

/** Plays the agent: writes the fencing file after each "confirmed renewal", until stopped. */
class Feeder {
  lastConfirmedMono = 0;
  private timer: NodeJS.Timeout | undefined;
  constructor(
    readonly file: string,
    private readonly base: Omit<FencingState, 'confirmedAtMonoMs'>,
  ) {}
  private renew(): void {
    this.lastConfirmedMono = monoNowMs();
    writeFencingState(this.file, { ...this.base, confirmedAtMonoMs: this.lastConfirmedMono });
  }
  start(): void {
    this.renew();
    this.timer = setInterval(() => this.renew(), FEED_MS);
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

interface FakePeer extends FencingPeer {
  close(): Promise<void>;
}

const servers: https.Server[] = [];

async function fakePeer(name: string, tls: { cert: string; key: string }, age: () => number | 'hang'): Promise<FakePeer> {
  const server = https.createServer(tls, (req, res) => {
    if (req.headers.authorization !== `Bearer ${PEER_TOKEN}`) {
      res.writeHead(401).end();
      return;
    }
    const value = age();
    if (value === 'hang') return;
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ node: name, confirmedAgeMs: value }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return {
    name,
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function runningPid(state: PodRunState | undefined): number | undefined {
  const c = state?.containers[0];
  return c && 'running' in c.state ? c.state.running.pid : undefined;
}

async function poll<T>(check: () => T | undefined, what: string, ceilingMs: number): Promise<T> {
  const deadline = Date.now() + ceilingMs;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ceilingMs} ms waiting for ${what}`);
    await sleep(POLL_MS);
  }
}

/** A fresh atMostOne pod under a real supervisor; resolves with its workload's PID. */
async function startPod(name: string, fencingFile: string): Promise<{ dir: string; pid: number }> {
  const spec: PodRunSpec = {
    uid: randomUUID(),
    namespace: 'default',
    name,
    containers: [{ name: 'main', command: ['sh', '-c', 'sleep 600 & wait'], args: [], env: {} }],
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 1,
    atMostOne: true,
    fencingFile,
  };
  const dir = podDir(path.join(root, name, 'agent', 'pods'), spec.uid);
  fs.mkdirSync(dir, { recursive: true });
  writeRunSpec(dir, spec);
  podDirs.push(dir);
  await launchSupervisor(dir, LAUNCH_CEILING_MS);
  const pid = await poll(() => runningPid(readRunState(dir)), `${name} running`, 30_000);
  return { dir, pid };
}

/** The monotonic time the PID was first seen gone. */
async function deathMono(pid: number, what: string): Promise<number> {
  await poll(() => (processAlive(pid) ? undefined : true), what, TIMEOUT_MS + GIVE_UP_MS);
  return monoNowMs();
}

// ---------------------------------------------------------------------------------------------

interface Figures {
  n: number;
  p50: number;
  max: number;
  min: number;
}

function figures(values: number[]): Figures {
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: round(percentile(sorted, 50), 0), max: round(sorted.at(-1) ?? NaN, 0), min: round(sorted[0] ?? NaN, 0) };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  printMachine(machine);
  console.log(`# fencing timeout ${TIMEOUT_MS} ms, ${TRIALS} trials per scenario, fencing file every ${FEED_MS} ms, PID polled every ${POLL_MS} ms`);

  const ca = await createCertificateAuthority('bench-fencing-ca');
  const leaf = await issueCertificate(ca, { commonName: 'peer', subjectAltNames: ['127.0.0.1'], usage: 'server' });
  const caFile = path.join(root, 'ca.crt');
  fs.writeFileSync(caFile, ca.certificatePem);
  const tls = { cert: leaf.certificatePem, key: leaf.privateKeyPem };

  // A port that refuses connections, and a peer that never answers.
  const closed = https.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  const silent = await fakePeer('peer-silent', tls, () => 'hang');
  const unreachable: FencingPeer[] = [{ name: 'peer-gone', url: `https://127.0.0.1:${closedPort}` }, { name: silent.name, url: silent.url }];
  let peerAge = 10_000;
  const reporting = [await fakePeer('peer-b', tls, () => peerAge), await fakePeer('peer-c', tls, () => peerAge)];

  const base = (peers: FencingPeer[]): Omit<FencingState, 'confirmedAtMonoMs'> => ({
    nodeName: 'self',
    fencingTimeoutMs: TIMEOUT_MS,
    peers: peers.map(({ name, url }) => ({ name, url })),
    peerToken: PEER_TOKEN,
    caFile,
    nodeCount: 3,
  });

  const isolated: number[] = [];
  const unreachableMs: number[] = [];
  const outageOver: number[] = [];
  const peerQuery: number[] = [];
  const errors: string[] = [];

  /** Renewals confirmed, the pod started, renewals stop: ms from the last confirmed renewal to the kill. */
  async function silenced(label: string, peers: FencingPeer[]): Promise<{ feed: Feeder; pod: { dir: string; pid: number } }> {
    const feed = new Feeder(path.join(root, `${label}.json`), base(peers));
    feed.start();
    const pod = await startPod(label, feed.file);
    await sleep(200 + Math.random() * 300); // a few confirmed renewals with the pod running
    feed.stop();
    return { feed, pod };
  }

  for (let trial = 1; trial <= TRIALS; trial++) {
    {
      const { feed, pod } = await silenced(`isolated-${trial}`, []);
      const ms = (await deathMono(pod.pid, 'the isolated pod fenced')) - feed.lastConfirmedMono;
      if (ms <= TIMEOUT_MS) errors.push(`isolated trial ${trial}: fenced ${ms} ms after the last renewal, before the timeout`);
      isolated.push(ms);
    }
    {
      const { feed, pod } = await silenced(`unreachable-${trial}`, unreachable);
      const ms = (await deathMono(pod.pid, 'the pod with unreachable peers fenced')) - feed.lastConfirmedMono;
      if (ms <= TIMEOUT_MS) errors.push(`unreachable trial ${trial}: fenced ${ms} ms after the last renewal, before the timeout`);
      unreachableMs.push(ms);
    }
    {
      peerAge = 10_000;
      const { pod } = await silenced(`outage-${trial}`, reporting);
      await poll(() => readRunState(pod.dir)?.outage, 'the outage recorded', TIMEOUT_MS + GIVE_UP_MS);
      await sleep(500 + Math.random() * 500); // into the outage, at a random point of the re-ask cycle
      if (!processAlive(pod.pid)) errors.push(`outage trial ${trial}: the workload was killed during a control-plane outage`);
      peerAge = 100;
      const switched = monoNowMs();
      outageOver.push((await deathMono(pod.pid, 'the pod fenced once the peers are fine')) - switched);
    }
    {
      const started = monoNowMs();
      const answers = await queryPeers({ ...base(unreachable), confirmedAtMonoMs: 0 });
      peerQuery.push(monoNowMs() - started);
      if (answers.some((a) => a !== undefined)) errors.push(`peer-query trial ${trial}: an unreachable peer answered`);
    }
    console.log(
      `  trial ${trial}: isolated ${isolated.at(-1)} ms, unreachable peers ${unreachableMs.at(-1)} ms after the last renewal; ` +
        `outage over → fenced ${outageOver.at(-1)} ms; peer query gave up after ${peerQuery.at(-1)} ms`,
    );
  }

  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }

  const summary = {
    isolated: { ...figures(isolated), p50OverTimeoutMs: round(percentile([...isolated].sort((a, b) => a - b), 50) - TIMEOUT_MS, 0) },
    unreachablePeers: { ...figures(unreachableMs), p50OverTimeoutMs: round(percentile([...unreachableMs].sort((a, b) => a - b), 50) - TIMEOUT_MS, 0) },
    outageOver: figures(outageOver),
    peerQuery: { ...figures(peerQuery), queryTimeoutMs: PEER_QUERY_TIMEOUT_MS },
  };
  console.log(`\n## ms (from the last confirmed renewal unless said otherwise), fencing timeout ${TIMEOUT_MS} ms`);
  const line = (label: string, f: Figures, extra = ''): void =>
    console.log(`  ${label.padEnd(38)} n=${f.n}  p50 ${f.p50}  max ${f.max}  min ${f.min}${extra}`);
  line('isolated: fenced', summary.isolated, `  (p50 ${(summary.isolated.p50 / TIMEOUT_MS).toFixed(3)} × timeout)`);
  line('unreachable peers: fenced', summary.unreachablePeers, `  (p50 ${(summary.unreachablePeers.p50 / TIMEOUT_MS).toFixed(3)} × timeout)`);
  line('outage over: fenced after the switch', summary.outageOver);
  line('peer query, unreachable peers: gave up', summary.peerQuery, `  (query timeout ${PEER_QUERY_TIMEOUT_MS} ms)`);
  if (errors.length) console.error(`\nERRORS:\n  ${errors.join('\n  ')}`);

  const file = writeResult('fencing', {
    benchmark: 'fencing of atMostOne pods by their supervisor',
    command: `node --import tsx bench/fencing.ts --trials ${TRIALS} --timeout-ms ${TIMEOUT_MS}`,
    machine,
    settings: { trials: TRIALS, fencingTimeoutMs: TIMEOUT_MS, feedMs: FEED_MS, pollMs: POLL_MS, nodeCount: 3 },
    notes: [
      'isolated / unreachablePeers: monotonic ms from the last confirmed renewal written to the fencing file to the workload PID first seen gone (polled every 5 ms).',
      'outageOver: ms from the fake peers switching to fresh renewals (end of a control-plane outage) to the workload PID first seen gone.',
      'peerQuery: ms for queryPeers() to give up on a refused and a silent peer.',
    ],
    trialsMs: { isolated, unreachablePeers: unreachableMs, outageOver, peerQuery },
    summary,
    errors,
  });
  console.log(`\nwrote ${path.relative(process.cwd(), file)}`);
  if (errors.length) process.exitCode = 1;
}

try {
  await main();
} finally {
  for (const dir of podDirs) killPodProcesses(dir);
  removeBenchTempDir(root);
}
