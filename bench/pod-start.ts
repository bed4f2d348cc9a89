/**
 * Pod start latency with the image present: from the pod's creation already bound to a node (the
 * create carries spec.nodeName, as the scheduler's binding would) until a watch on the API shows
 * it Running with its container ready, for the runc runtime and the process runtime in one run,
 * interleaved so the machine's noise falls on both.
 *
 *   npm run build && node --import tsx bench/pod-start.ts [--runs 20] [--keep-agent-log FILE]
 *
 * One `drover server --disable-agent` and one `drover agent` (root needed for runc), in temporary
 * data dirs. The test image (Debian's static busybox, test/helpers/images.ts) is imported into the
 * agent's image store first, and one runc pod is started and removed before timing (the layers
 * are unpacked once per node, not per pod). A runc pod runs the image's default command (`sleep`);
 * a process pod runs `sleep` from the host. Each pod is deleted (grace 0) and gone before the
 * next is created. Writes bench/results/pod-start.json: every sample, p50/p99 per runtime, the
 * runc/process ratio of the p50s, the load average before and after, and where each pod's start
 * went (its phases, read from the pod's files and the agent's log before the pod is deleted).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { DNS_DEVICE } from '../src/agent/dns/address.js';
import { PROXY_TABLE } from '../src/agent/network/service-rules.js';
import { VXLAN_DEVICE } from '../src/agent/network/overlay.js';
import { BRIDGE_NAME, MASQUERADE_TABLE } from '../src/agent/network/pod-network.js';
import { ImageStore } from '../src/images/store.js';
import { buildTestImage, writeOciArchive } from '../test/helpers/images.js';
import { reapPods } from '../test/helpers/pods.js';
import {
  BenchApi,
  type BenchServer,
  benchTempDir,
  checkBuild,
  fileTail,
  installCleanup,
  machineInfo,
  onCleanup,
  percentile,
  printMachine,
  round,
  sleep,
  spawnBenchAgent,
  startBenchServer,
  writeResult,
} from './common.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string', default: '20' }, 'keep-agent-log': { type: 'string' } } });
const RUNS = Number(args.runs);
if (!Number.isInteger(RUNS) || RUNS < 1) throw new Error('--runs must be a positive integer');
const NODE = 'bench-start';
const IMAGE = 'drover.test/pod-start:1';
const GOAL_RATIO = 2;
const GOAL_RUNC_P50_MS = 300;

type Runtime = 'runc' | 'process';

interface PodEvent {
  type: string;
  object: { metadata: { name: string }; status?: { phase?: string; containerStatuses?: { ready?: boolean }[] } };
}

/** A watch on the node's pods: calls `onPod` for every event, until closed. */
function watchPods(server: BenchServer, onPod: (event: PodEvent) => void): { close(): void } {
  const req = https.get(
    `${server.url}/api/v1/namespaces/default/pods?watch=1&fieldSelector=spec.nodeName%3D${NODE}`,
    { ca: server.caPem, headers: { Authorization: `Bearer ${server.adminToken}` } },
    (res) => {
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let at: number;
        while ((at = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, at).trim();
          buffer = buffer.slice(at + 1);
          if (line) onPod(JSON.parse(line) as PodEvent);
        }
      });
    },
  );
  req.on('error', () => undefined);
  return { close: () => req.destroy() };
}

function podBody(name: string, runtime: Runtime): unknown {
  const container =
    runtime === 'runc' ? { name: 'main', image: IMAGE } : { name: 'main', image: IMAGE, command: ['sleep', '1000000'] };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: { nodeName: NODE, runtimeClassName: runtime, terminationGracePeriodSeconds: 0, containers: [container] },
  };
}

function linkExists(name: string): boolean {
  return spawnSync('ip', ['link', 'show', 'dev', name], { stdio: 'ignore' }).status === 0;
}

function nftTableExists(name: string): boolean {
  return spawnSync('nft', ['list', 'table', 'ip', name], { stdio: 'ignore' }).status === 0;
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  if (process.getuid?.() !== 0) throw new Error('pod-start needs root (runc)');
  const machine = machineInfo();
  printMachine(machine);
  const loadBefore = os.loadavg();
  const root = benchTempDir('drover-bench-pod-start-');
  const serverDir = path.join(root, 'server');
  const agentDir = path.join(root, 'agent');
  // The agent runs in this host's network namespace: what its node network makes there (the
  // bridge, the overlay and DNS devices, two nftables tables) goes at the end, unless it was
  // there before (another agent's, not ours to remove).
  const hostNetwork = { links: [BRIDGE_NAME, VXLAN_DEVICE, DNS_DEVICE].filter((name) => !linkExists(name)), tables: [MASQUERADE_TABLE, PROXY_TABLE].filter((name) => !nftTableExists(name)) };
  onCleanup(() => {
    if (args['keep-agent-log']) fs.copyFileSync(path.join(root, 'agent.log'), args['keep-agent-log']);
    // Pods, their containers and mounts, and the agent's spare sandbox.
    reapPods(agentDir);
    for (const name of hostNetwork.links) spawnSync('ip', ['link', 'del', name], { stdio: 'ignore' });
    for (const name of hostNetwork.tables) spawnSync('nft', ['delete', 'table', 'ip', name], { stdio: 'ignore' });
  });
  const server = await startBenchServer(serverDir, path.join(root, 'server.log'));
  const archive = path.join(root, 'image.tar');
  writeOciArchive(buildTestImage({ name: IMAGE, entrypoint: ['/bin/sleep'], cmd: ['1000000'] }), archive);
  await new ImageStore(path.join(agentDir, 'agent', 'image-store')).importArchive(archive);
  spawnBenchAgent({ server, name: NODE, dataDir: agentDir, logFile: path.join(root, 'agent.log') });
  const api = new BenchApi(server);

  const waiters = new Map<string, { ready: (at: number) => void; gone: () => void }>();
  const watch = watchPods(server, (event) => {
    const waiter = waiters.get(event.object.metadata.name);
    if (!waiter) return;
    if (event.type === 'DELETED') waiter.gone();
    const status = event.object.status;
    if (status?.phase === 'Running' && (status.containerStatuses ?? []).every((c) => c.ready)) waiter.ready(performance.now());
  });

  const deadline = Date.now() + 60_000;
  for (;;) {
    const nodes = await api.json<{ items: { metadata: { name: string; labels?: Record<string, string> } }[] }>('GET', '/api/v1/nodes');
    if (nodes.items.some((n) => n.metadata.name === NODE && n.metadata.labels?.['drover.io/state'] === 'Ready')) break;
    if (Date.now() > deadline) throw new Error(`the agent did not become Ready:\n${fileTail(path.join(root, 'agent.log'))}`);
    await sleep(100);
  }

  const phases: Record<Runtime, Phases[]> = { runc: [], process: [] };
  const agentLog = path.join(root, 'agent.log');
  const podsDir = path.join(agentDir, 'agent', 'pods');

  /** One pod: created bound, Running and ready, then deleted and gone. Milliseconds to Running. */
  async function once(name: string, runtime: Runtime, record = false): Promise<number> {
    let startedAt = 0;
    let onReady: (ms: number) => void = () => undefined;
    let onGone: () => void = () => undefined;
    const ready = new Promise<number>((resolve) => (onReady = (at) => resolve(at - startedAt)));
    const gone = new Promise<void>((resolve) => (onGone = resolve));
    waiters.set(name, { ready: (at) => onReady(at), gone: () => onGone() });
    startedAt = performance.now();
    const createdAtWall = Date.now();
    const created = await api.json<{ metadata: { uid: string } }>('POST', '/api/v1/namespaces/default/pods', podBody(name, runtime));
    const ms = await Promise.race([ready, sleep(60_000).then(() => Number.NaN)]);
    if (Number.isNaN(ms)) throw new Error(`pod ${name} (${runtime}) not Running within 60 s:\n${fileTail(path.join(root, 'agent.log'))}`);
    if (record) phases[runtime].push(podPhases(path.join(podsDir, created.metadata.uid), created.metadata.uid, agentLog, createdAtWall, ms));
    await api.request('DELETE', `/api/v1/namespaces/default/pods/${name}?gracePeriodSeconds=0`);
    await Promise.race([gone, sleep(60_000)]);
    waiters.delete(name);
    return ms;
  }

  // Warm-up: the layers are unpacked on the first use; the agent's informers and TLS are warm after.
  await once('warm-runc', 'runc');
  await once('warm-process', 'process');

  const samples: Record<Runtime, number[]> = { runc: [], process: [] };
  for (let i = 0; i < RUNS; i++) {
    const order: Runtime[] = i % 2 === 0 ? ['runc', 'process'] : ['process', 'runc'];
    for (const runtime of order) {
      const ms = await once(`${runtime}-${i}`, runtime, true);
      samples[runtime].push(round(ms, 1));
      process.stdout.write(`${runtime} ${i + 1}/${RUNS}: ${ms.toFixed(1)} ms\n`);
    }
  }
  watch.close();
  api.destroy();

  const stats = (values: number[]): { p50: number; p99: number; min: number; max: number } => {
    const sorted = [...values].sort((a, b) => a - b);
    return { p50: round(percentile(sorted, 50), 1), p99: round(percentile(sorted, 99), 1), min: sorted[0]!, max: sorted.at(-1)! };
  };
  const runc = stats(samples.runc);
  const proc = stats(samples.process);
  const ratio = round(runc.p50 / proc.p50, 2);
  const phaseMedians = { runc: medianPhases(phases.runc), process: medianPhases(phases.process) };
  const loadAfter = os.loadavg();
  const result = {
    machine,
    runs: RUNS,
    loadBefore: loadBefore.map((l) => round(l, 2)),
    loadAfter: loadAfter.map((l) => round(l, 2)),
    runc,
    process: proc,
    runcOverProcessP50: ratio,
    goals: { ratio: { goal: GOAL_RATIO, met: ratio <= GOAL_RATIO }, runcP50Ms: { goal: GOAL_RUNC_P50_MS, met: runc.p50 < GOAL_RUNC_P50_MS } },
    phaseMedians,
    samples,
    phases,
  };
  console.log(`\nbind → Running, ${RUNS} pods each (ms):`);
  console.log(`  runc     p50 ${runc.p50}  p99 ${runc.p99}  (min ${runc.min}, max ${runc.max})`);
  console.log(`  process  p50 ${proc.p50}  p99 ${proc.p99}  (min ${proc.min}, max ${proc.max})`);
  console.log(`  runc/process p50: ${ratio} (goal ≤ ${GOAL_RATIO}); runc p50 < ${GOAL_RUNC_P50_MS} ms: ${runc.p50 < GOAL_RUNC_P50_MS ? 'yes' : 'no'}`);
  for (const runtime of ['runc', 'process'] as const) {
    console.log(`  ${runtime} phases, median ms after the create: ${Object.entries(phaseMedians[runtime]).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  }
  console.log(`  load average before ${result.loadBefore.join(' ')}, after ${result.loadAfter.join(' ')}`);
  console.log(`wrote ${writeResult('pod-start', result)}`);
}

/**
 * Where one pod's start went, in ms after the create was sent (wall clock, as the logs have it):
 * the agent wrote pod.json; the supervisor's first line (and how long its process had run by
 * then: Node's start and its imports); its container spawned; the container running (runc: once
 * runc has started it); the agent saw the supervisor up; the watch saw the pod Running. Read
 * from the pod's files and the agent's log before the pod is deleted; a phase not found is left out.
 */
type Phases = Record<string, number>;

function podPhases(dir: string, uid: string, agentLog: string, createdAtWall: number, runningMs: number): Phases {
  const out: Phases = {};
  const at = (wallMs: number): number => round(wallMs - createdAtWall, 1);
  try {
    out.podJson = at(fs.statSync(path.join(dir, 'pod.json')).mtimeMs);
  } catch {
    // no pod.json
  }
  const lines = (file: string): { msg?: string; time?: string; uid?: string; bootMs?: number }[] => {
    try {
      return fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { msg?: string; time?: string });
    } catch {
      return [];
    }
  };
  for (const line of lines(path.join(dir, 'supervisor.log'))) {
    const t = line.time ? at(Date.parse(line.time)) : undefined;
    if (t === undefined) continue;
    if (line.msg === 'supervisor started' && out.supervisorLog === undefined) {
      out.supervisorLog = t;
      if (typeof line.bootMs === 'number') out.supervisorBootMs = round(line.bootMs, 1);
    }
    if (line.msg === 'container started' && out.containerSpawned === undefined) out.containerSpawned = t;
    if (line.msg === 'container running' && out.containerRunning === undefined) out.containerRunning = t;
  }
  for (const line of lines(agentLog)) {
    if (line.uid === uid && line.msg === 'started pod' && line.time) out.agentSawSupervisor = at(Date.parse(line.time));
  }
  out.running = round(runningMs, 1);
  return out;
}

function medianPhases(all: Phases[]): Phases {
  const keys = [...new Set(all.flatMap((p) => Object.keys(p)))];
  const out: Phases = {};
  for (const key of keys) {
    const values = all.map((p) => p[key]).filter((v): v is number => v !== undefined);
    if (values.length) out[key] = round(percentile([...values].sort((a, b) => a - b), 50), 1);
  }
  return out;
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
