/**
 * etcd benchmark: the etcd datastore (`openEtcdDatastore`) against the raw `etcd3` client doing
 * the same operations in the same run, then node-status PATCHes through the API on etcd against
 * the same server on SQLite.
 *
 *   npm run build && node --import tsx bench/etcd.ts [--round-ms 300] [--rounds 10] [--concurrency 50]
 *        [--seconds 12] [--warmup 2] [--api-rounds 4] [--clients 50] [--nodes 200]
 *        [--only datastore|api] [--cpu-prof-dir DIR] [--baseline-dir DIR]
 *
 * Writes bench/results/etcd.json. Needs Debian's etcd 3.4 on PATH (apt-get install etcd-server).
 *
 * Part 1, datastore operations, sequential (one awaited call at a time) and with `--concurrency`
 * concurrent callers (each owning its own hot keys, so no CAS ever conflicts), against a fresh
 * single-member etcd whose data dir is on /dev/shm when writable (tmpfs: etcd's fsync of each
 * commit costs nothing there; on a disk etcd fsyncs its WAL on every commit, see the context line):
 * - ours: `openEtcdDatastore({ endpoints })`, keys /registry/a/...; create, update(CAS), get;
 * - raw: `new Etcd3({ hosts })` (default options), `client.kv.txn` / `client.kv.range` with the
 *   same operations: create = txn(create_revision == 0 → put), update = txn(mod_revision ==
 *   expected → put), get = range; keys /registry/b/... in the same etcd;
 * - context: ours on SQLite (`openSqliteDatastore`, file in the temp dir); raw with ours' exact
 *   update request (two compares, a put and a keys-only range, a failure range, a deadline); raw on a disk-backed
 *   etcd (fsync per commit).
 * Each figure is timed in interleaved rounds (ours/raw order alternating); ratios are medians of
 * per-round ratios. CPU per operation: this process (client) and the etcd process.
 *
 * Part 2, node-status PATCHes through the API: `drover server` on a second fresh etcd (tmpfs when
 * writable) and the same server on SQLite, both `--disable-agent --node-monitor-grace-period 1h`,
 * each with 200 Nodes; 50 concurrent keep-alive clients send kubelet-shaped strategic-merge
 * PATCHes to /status, in rounds alternating between the two servers. Ratio etcd / SQLite. Watch
 * delay: meanwhile a probe node is patched every 50 ms and watched through the API; the delay is
 * from each write's answer to its event (./etcd-watch-probe.ts).
 * With --baseline-dir (a built checkout of another commit), that build's server on a third fresh
 * etcd joins the rounds (order rotated), for this build / that build on etcd under the same load.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { openEtcdDatastore } from '../src/datastore/etcd.js';
import { openSqliteDatastore } from '../src/datastore/sqlite.js';
import type { Datastore } from '../src/datastore/types.js';
import { startEtcd } from './etcd-process.js';
import { WatchProbe } from './etcd-watch-probe.js';
import {
  benchTempDir,
  captureOutput,
  checkBuild,
  createNodes,
  DROVER_BIN,
  droverReadyPort,
  fmtInt,
  heartbeatLoad,
  installCleanup,
  machineInfo,
  median,
  nodeStatusValue,
  parseBenchArgs,
  type PatchTarget,
  percentile,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  stopChild,
  track,
  waitForLine,
  writeResult,
} from './common.js';
import { type Ops, rawOps } from './etcd-raw-ops.js';

// Diagnostics: --only runs one part only (no result file); --cpu-prof-dir writes a V8 CPU profile
// of the server on etcd into that directory, and one of the server on SQLite into DIR/sqlite.
const { n, only: ONLY, flags } = parseBenchArgs(
  {
    'round-ms': 300,
    rounds: 10,
    concurrency: 50,
    seconds: 12,
    warmup: 2,
    'api-rounds': { default: 4, min: 1 },
    clients: 50,
    nodes: 200,
  },
  { only: ['datastore', 'api'], flags: { 'cpu-prof-dir': { type: 'string' }, 'baseline-dir': { type: 'string' } } },
);
const { 'round-ms': ROUND_MS, rounds: ROUNDS, concurrency: CONCURRENCY, seconds: API_SECONDS, warmup: WARMUP_SECONDS } = n;
const { 'api-rounds': API_ROUNDS, clients: CLIENTS, nodes: NODES } = n;
const PROFILE_DIR = flags['cpu-prof-dir'];
// A built checkout of another commit (its dist/cli/main.js): part 2 then also runs that build's
// server on its own fresh etcd, in the same alternating rounds, so a change is measured against
// the code before it under the same load (this shared machine's load moves the absolute figures
// by 2x within minutes, and even etcd / SQLite between runs).
const BASELINE_DIR = flags['baseline-dir'];
const BASELINE_BIN = BASELINE_DIR ? path.resolve(BASELINE_DIR, 'dist/cli/main.js') : undefined;
if (BASELINE_BIN && !fs.existsSync(BASELINE_BIN)) throw new Error(`${BASELINE_BIN} is missing: build the baseline first`);

const HOT_KEYS = 1000;
const VALUES = Array.from({ length: 64 }, (_, i) => nodeStatusValue(i + 1));

// ---------------------------------------------------------------------------------------------
// Processes (only ever stopped by their own PID)

/** /dev/shm when writable (tmpfs), else undefined. */
function shmDir(): string | undefined {
  try {
    fs.accessSync('/dev/shm', fs.constants.W_OK);
    if (fs.statSync('/dev/shm').isDirectory()) return '/dev/shm';
  } catch {
    // Not available.
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Part 1: datastore operations

type Op = 'create' | 'update' | 'get';

class Subject {
  created = 0;
  readonly modRevision = new Float64Array(HOT_KEYS);
  valueIndex = 0;
  constructor(
    readonly name: string,
    readonly ops: Ops,
    readonly keyPrefix: string,
    /** PID of the etcd serving it, for server CPU per op. */
    readonly etcdPid?: number,
  ) {}
  key(i: number): string {
    return `${this.keyPrefix}node-${String(i).padStart(6, '0')}`;
  }
  value(): Buffer {
    this.valueIndex = (this.valueIndex + 1) % VALUES.length;
    return VALUES[this.valueIndex]!;
  }
}

function datastoreOps(store: Datastore): Ops {
  return {
    create: async (key, value) => (await store.create(key, value)).modRevision,
    update: async (key, value, expected) => (await store.update(key, value, expected)).modRevision,
    get: async (key) => (await store.get(key)) !== undefined,
    close: () => store.close(),
  };
}

/** Creates the hot keys (sequentially). */
async function seed(s: Subject): Promise<void> {
  for (let i = 0; i < HOT_KEYS; i++) s.modRevision[i] = await s.ops.create(s.key(i), s.value());
  s.created = HOT_KEYS;
}

interface Rate {
  opsPerSec: number;
  clientCpuUsPerOp: number;
  etcdCpuUsPerOp: number;
}

/** `op` for about `ms` with `concurrency` callers; worker w owns the hot keys k with k % c == w. */
async function timed(s: Subject, op: Op, ms: number, concurrency: number): Promise<Rate> {
  let ops = 0;
  const cpu0 = process.cpuUsage();
  const etcd0 = s.etcdPid !== undefined ? processCpuSeconds(s.etcdPid) : NaN;
  const start = performance.now();
  const deadline = start + ms;
  let seedGet = 0x9e3779b9;
  const worker = async (w: number): Promise<void> => {
    let next = w;
    let x = (seedGet ^ (w * 2654435761)) >>> 0 || 1;
    seedGet++;
    while (performance.now() < deadline) {
      if (op === 'create') {
        const i = s.created++;
        await s.ops.create(s.key(i), s.value());
      } else if (op === 'update') {
        const i = next;
        next += concurrency;
        if (next >= HOT_KEYS) next = w;
        s.modRevision[i] = await s.ops.update(s.key(i), s.value(), s.modRevision[i]!);
      } else {
        x ^= x << 13;
        x ^= x >>> 17;
        x ^= x << 5;
        if (!(await s.ops.get(s.key((x >>> 0) % HOT_KEYS)))) throw new Error('missing key');
      }
      ops++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsed = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  const etcd1 = s.etcdPid !== undefined ? processCpuSeconds(s.etcdPid) : NaN;
  return {
    opsPerSec: (ops / elapsed) * 1000,
    clientCpuUsPerOp: (cpu.user + cpu.system) / ops,
    etcdCpuUsPerOp: ((etcd1 - etcd0) * 1e6) / ops,
  };
}

interface Figure {
  mode: 'sequential' | 'concurrent';
  op: Op;
  ours: Rate[];
  raw: Rate[];
  ratios: number[];
  context: Record<string, { rates: Rate[]; vsRaw: number[] }>;
}

// ---------------------------------------------------------------------------------------------
// Part 2: API PATCHes (client as bench/api.ts)

interface Server extends PatchTarget {
  name: string;
  child: ChildProcess;
  probe?: WatchProbe;
}

async function startDrover(name: string, dataDir: string, extra: string[], profileDir?: string, bin = DROVER_BIN): Promise<Server> {
  const child = track(
    spawn(
      process.execPath,
      [
        ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(profileDir)}`] : []),
        bin, 'server',
        ...extra,
        '--disable-agent',
        '--https-listen-port', '0',
        '--bind-address', '127.0.0.1',
        '--data-dir', dataDir,
        '--node-monitor-grace-period', '1h',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
  const port = await waitForLine(child, name, droverReadyPort, captureOutput(child), 60_000);
  return {
    name,
    child,
    port,
    ca: fs.readFileSync(path.join(dataDir, 'server/tls/server-ca.crt'), 'utf8'),
    token: fs.readFileSync(path.join(dataDir, 'server/cred/admin.token'), 'utf8').trim(),
    agent: new https.Agent({ keepAlive: true, maxSockets: CLIENTS }),
  };
}

interface Load {
  seconds: number;
  requests: number;
  perSecond: number;
  errors: number;
  firstError?: string;
  latencies: number[];
  serverCpuUsPerReq: number;
  etcdCpuUsPerReq: number;
  /** Watch delay (ms) of each probe write (see ./etcd-watch-probe.ts), and probe events that never came. */
  watchDelays: number[];
  watchMissing: number;
}

async function load(server: Server, beats: Uint32Array, ms: number, etcdPid?: number): Promise<Load> {
  const cpu0 = processCpuSeconds(server.child.pid!);
  const etcd0 = etcdPid !== undefined ? processCpuSeconds(etcdPid) : NaN;
  const [{ seconds, latencies, errors, firstError }, watch] = await Promise.all([
    heartbeatLoad(server, beats, CLIENTS, ms),
    server.probe ? server.probe.run(ms) : { delays: [], missing: 0 },
  ]);
  const cpu1 = processCpuSeconds(server.child.pid!);
  const etcd1 = etcdPid !== undefined ? processCpuSeconds(etcdPid) : NaN;
  return {
    seconds,
    requests: latencies.length,
    perSecond: latencies.length / seconds,
    errors,
    ...(firstError ? { firstError } : {}),
    latencies,
    serverCpuUsPerReq: ((cpu1 - cpu0) * 1e6) / (latencies.length || 1),
    etcdCpuUsPerReq: ((etcd1 - etcd0) * 1e6) / (latencies.length || 1),
    watchDelays: watch.delays,
    watchMissing: watch.missing,
  };
}

interface Pooled {
  perSecond: number;
  requests: number;
  errors: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  serverCpuUsPerReq: number;
  etcdCpuUsPerReq: number;
  watchDelayP50: number;
  watchDelayP99: number;
  watchMissing: number;
  firstError?: string;
}

function pool(rounds: Load[]): Pooled {
  const seconds = rounds.reduce((a, r) => a + r.seconds, 0);
  const requests = rounds.reduce((a, r) => a + r.requests, 0);
  const sorted = Float64Array.from(rounds.flatMap((r) => r.latencies)).sort();
  const weighted = (f: (r: Load) => number): number => rounds.reduce((a, r) => a + f(r) * r.requests, 0) / (requests || 1);
  const firstError = rounds.find((r) => r.firstError)?.firstError;
  const delays = Float64Array.from(rounds.flatMap((r) => r.watchDelays)).sort();
  return {
    perSecond: requests / seconds,
    requests,
    errors: rounds.reduce((a, r) => a + r.errors, 0),
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1]! : NaN,
    serverCpuUsPerReq: weighted((r) => r.serverCpuUsPerReq),
    etcdCpuUsPerReq: weighted((r) => r.etcdCpuUsPerReq),
    watchDelayP50: percentile(delays, 50),
    watchDelayP99: percentile(delays, 99),
    watchMissing: rounds.reduce((a, r) => a + r.watchMissing, 0),
    ...(firstError ? { firstError } : {}),
  };
}

// ---------------------------------------------------------------------------------------------

interface Dirs {
  shm: string | undefined;
  etcdParent: string;
  tmp: string;
}

/** Part 1: datastore operations, ours vs raw etcd3 (and context). */
async function runDatastore({ shm, etcdParent, tmp }: Dirs): Promise<Figure[]> {
  const cleanup: (() => Promise<void>)[] = [];
  try {
    // --- Part 1 ---------------------------------------------------------------------------------
    const etcd = await startEtcd(etcdParent);
    cleanup.push(etcd.stop);
    const diskEtcd = shm ? await startEtcd(os.tmpdir()) : undefined;
    if (diskEtcd) cleanup.push(diskEtcd.stop);
    const ours = new Subject('ours', datastoreOps(await openEtcdDatastore({ endpoints: [etcd.endpoint] })), '/registry/a/nodes/', etcd.pid);
    const raw = new Subject('raw', rawOps(new Etcd3({ hosts: [etcd.endpoint] })), '/registry/b/nodes/', etcd.pid);
    const rawOursReq = new Subject("raw, ours' update request", rawOps(new Etcd3({ hosts: [etcd.endpoint] }), true), '/registry/c/nodes/', etcd.pid);
    const sqlite = new Subject('ours on SQLite', datastoreOps(openSqliteDatastore(path.join(tmp, 'state.db'))), '/registry/a/nodes/');
    const rawDisk = diskEtcd
      ? new Subject('raw, disk-backed etcd', rawOps(new Etcd3({ hosts: [diskEtcd.endpoint] })), '/registry/b/nodes/', diskEtcd.pid)
      : undefined;
    const subjects = [ours, raw, rawOursReq, sqlite, ...(rawDisk ? [rawDisk] : [])];
    cleanup.push(async () => {
      for (const s of subjects) await s.ops.close();
    });
    for (const s of subjects) await seed(s);
    const contextFor = (op: Op): Subject[] => [
      sqlite,
      ...(op === 'update' ? [rawOursReq] : []),
      ...(rawDisk && op !== 'get' ? [rawDisk] : []),
    ];
    console.log(
      `# part 1: ${ROUNDS} interleaved rounds of ${ROUND_MS} ms per figure; values ${VALUES[0]!.length} bytes; ${HOT_KEYS} hot keys; ` +
        `concurrent = ${CONCURRENCY} callers`,
    );
    const figures: Figure[] = [];
    for (const mode of ['sequential', 'concurrent'] as const) {
      const c = mode === 'sequential' ? 1 : CONCURRENCY;
      for (const op of ['create', 'update', 'get'] as const) {
        const f: Figure = { mode, op, ours: [], raw: [], ratios: [], context: {} };
        await timed(ours, op, ROUND_MS / 2, c); // warm-up
        await timed(raw, op, ROUND_MS / 2, c);
        for (let r = 0; r < ROUNDS; r++) {
          const order = r % 2 === 0 ? [ours, raw] : [raw, ours];
          const rates = new Map<Subject, Rate>();
          for (const s of order) rates.set(s, await timed(s, op, ROUND_MS, c));
          f.ours.push(rates.get(ours)!);
          f.raw.push(rates.get(raw)!);
          f.ratios.push(rates.get(ours)!.opsPerSec / rates.get(raw)!.opsPerSec);
          for (const s of contextFor(op)) {
            const rate = await timed(s, op, ROUND_MS, c);
            const entry = (f.context[s.name] ??= { rates: [], vsRaw: [] });
            entry.rates.push(rate);
            entry.vsRaw.push(rate.opsPerSec / rates.get(raw)!.opsPerSec);
          }
        }
        figures.push(f);
        const med = (rates: Rate[], k: keyof Rate): number => median(rates.map((x) => x[k]));
        console.log(
          `  ${mode.padEnd(10)} ${op.padEnd(6)}  ours ${fmtInt(med(f.ours, 'opsPerSec')).padStart(6)}/s  raw ${fmtInt(med(f.raw, 'opsPerSec')).padStart(6)}/s  ` +
            `ours/raw ${median(f.ratios).toFixed(2)} (${f.ratios.map((x) => x.toFixed(2)).join(' ')})  ` +
            `client CPU ${med(f.ours, 'clientCpuUsPerOp').toFixed(0)} vs ${med(f.raw, 'clientCpuUsPerOp').toFixed(0)} us/op, ` +
            `etcd CPU ${med(f.ours, 'etcdCpuUsPerOp').toFixed(0)} vs ${med(f.raw, 'etcdCpuUsPerOp').toFixed(0)} us/op`,
        );
        for (const [name, e] of Object.entries(f.context)) {
          console.log(`      ${name.padEnd(28)} ${fmtInt(med(e.rates, 'opsPerSec')).padStart(7)}/s  ${median(e.vsRaw).toFixed(2)} x raw`);
        }
      }
    }
    return figures;
  } finally {
    for (const fn of cleanup.reverse()) await fn().catch((error: unknown) => console.error(`cleanup: ${String(error)}`));
  }
}

interface ApiResult {
  etcd: Pooled;
  sqlite: Pooled;
  /** With --baseline-dir: that build's server on etcd, and etcd (this build) / etcd (baseline) per round. */
  baseline?: { etcd: Pooled; roundRatios: number[]; ratio: number };
  perRound: Record<string, number[]>;
  roundRatios: number[];
  ratio: number;
}

/** Part 2: node-status PATCHes through the API, server on etcd vs on SQLite. */
async function runApi({ etcdParent, tmp }: Dirs): Promise<ApiResult> {
  const cleanup: (() => Promise<void>)[] = [];
  try {
    // --- Part 2 ---------------------------------------------------------------------------------
    const apiEtcd = await startEtcd(etcdParent);
    cleanup.push(apiEtcd.stop);
    const etcdDir = fs.mkdtempSync(path.join(tmp, 'server-etcd-'));
    const sqliteDir = fs.mkdtempSync(path.join(tmp, 'server-sqlite-'));
    const servers: Server[] = [];
    cleanup.push(async () => {
      for (const s of servers) {
        s.agent.destroy();
        await stopChild(s.child, 'SIGTERM', 10_000);
      }
    });
    const onEtcd = await startDrover('etcd', etcdDir, ['--datastore-endpoint', `etcd://${apiEtcd.endpoint.replace(/^http:\/\//, '')}`], PROFILE_DIR);
    servers.push(onEtcd);
    const onSqlite = await startDrover('sqlite', sqliteDir, [], PROFILE_DIR ? path.join(PROFILE_DIR, 'sqlite') : undefined);
    servers.push(onSqlite);
    let onBaseline: Server | undefined;
    let baselineEtcd: Awaited<ReturnType<typeof startEtcd>> | undefined;
    if (BASELINE_BIN) {
      baselineEtcd = await startEtcd(etcdParent);
      cleanup.push(baselineEtcd.stop);
      const baseDir = fs.mkdtempSync(path.join(tmp, 'server-baseline-'));
      const endpoint = `etcd://${baselineEtcd.endpoint.replace(/^http:\/\//, '')}`;
      onBaseline = await startDrover('baseline', baseDir, ['--datastore-endpoint', endpoint], undefined, BASELINE_BIN);
      servers.push(onBaseline);
    }
    for (const s of servers) await createNodes(s, NODES, CLIENTS, s.name);
    for (const s of servers) s.probe = await WatchProbe.start(s, NODES);
    cleanup.push(async () => {
      for (const s of servers) s.probe?.stop();
    });
    const beats = new Map(servers.map((s) => [s, new Uint32Array(NODES)]));
    const etcdPidOf = (s: Server): number | undefined =>
      s === onEtcd ? apiEtcd.pid : s === onBaseline ? baselineEtcd!.pid : undefined;
    console.log(
      `# part 2: ${NODES} nodes per server, ${CLIENTS} keep-alive clients, ${WARMUP_SECONDS} s warm-up, ` +
        `${API_ROUNDS} x ${(API_SECONDS / API_ROUNDS).toFixed(1)} s per server in alternating order`,
    );
    for (const s of servers) await load(s, beats.get(s)!, WARMUP_SECONDS * 1000, etcdPidOf(s));
    const rounds = new Map<Server, Load[]>(servers.map((s) => [s, []]));
    const roundRatios: number[] = [];
    const baselineRatios: number[] = [];
    for (let r = 0; r < API_ROUNDS; r++) {
      // Alternating order; with a baseline, also rotated, so each server takes each position.
      const turned = servers.map((_, i) => servers[(i + r) % servers.length]!);
      const order = servers.length === 2 ? (r % 2 === 0 ? servers : [...servers].reverse()) : turned;
      const got = new Map<Server, Load>();
      for (const s of order) {
        const result = await load(s, beats.get(s)!, (API_SECONDS / API_ROUNDS) * 1000, etcdPidOf(s));
        got.set(s, result);
        rounds.get(s)!.push(result);
      }
      roundRatios.push(got.get(onEtcd)!.perSecond / got.get(onSqlite)!.perSecond);
      if (onBaseline) baselineRatios.push(got.get(onEtcd)!.perSecond / got.get(onBaseline)!.perSecond);
      console.log(
        `  round ${r + 1}: etcd ${fmtInt(got.get(onEtcd)!.perSecond)}/s, SQLite ${fmtInt(got.get(onSqlite)!.perSecond)}/s, ratio ${roundRatios[r]!.toFixed(2)}` +
          (onBaseline ? `; baseline on etcd ${fmtInt(got.get(onBaseline)!.perSecond)}/s, etcd / baseline ${baselineRatios[r]!.toFixed(2)}` : ''),
      );
    }
    const api = Object.fromEntries(servers.map((s) => [s.name, pool(rounds.get(s)!)])) as Record<'etcd' | 'sqlite' | 'baseline', Pooled>;
    const apiRatio = api.etcd.perSecond / api.sqlite.perSecond;
    for (const s of servers) {
      const p = api[s.name as 'etcd' | 'sqlite' | 'baseline'];
      console.log(
        `  ${s.name.padEnd(8)} ${fmtInt(p.perSecond).padStart(6)} PATCH/s  p50 ${p.p50.toFixed(1)} ms  p90 ${p.p90.toFixed(1)} ms  p99 ${p.p99.toFixed(1)} ms  max ${p.max.toFixed(0)} ms  ` +
          `server CPU ${p.serverCpuUsPerReq.toFixed(0)} us/req  watch delay p50 ${p.watchDelayP50.toFixed(1)} ms p99 ${p.watchDelayP99.toFixed(1)} ms` +
          (p.watchMissing ? ` (${p.watchMissing} events missing)` : '') +
          (s !== onSqlite ? `  etcd CPU ${p.etcdCpuUsPerReq.toFixed(0)} us/req` : '') +
          (p.errors ? `  ERRORS ${p.errors}: ${p.firstError}` : ''),
      );
    }
    console.log(`  etcd / SQLite: ${apiRatio.toFixed(2)} (pooled), median of rounds ${median(roundRatios).toFixed(2)}`);
    const baselineRatio = onBaseline ? api.etcd.perSecond / api.baseline.perSecond : NaN;
    if (onBaseline) {
      console.log(
        `  etcd / baseline on etcd: ${baselineRatio.toFixed(2)} (pooled), median of rounds ${median(baselineRatios).toFixed(2)}; ` +
          `baseline / SQLite ${(api.baseline.perSecond / api.sqlite.perSecond).toFixed(2)} (pooled)`,
      );
    }

    return {
      etcd: api.etcd,
      sqlite: api.sqlite,
      perRound: Object.fromEntries(servers.map((s) => [s.name, rounds.get(s)!.map((l) => round(l.perSecond, 0))])),
      roundRatios,
      ratio: apiRatio,
      ...(onBaseline ? { baseline: { etcd: api.baseline, roundRatios: baselineRatios, ratio: baselineRatio } } : {}),
    };
  } finally {
    for (const fn of cleanup.reverse()) await fn().catch((error: unknown) => console.error(`cleanup: ${String(error)}`));
  }
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const shm = shmDir();
  const dirs: Dirs = { shm, etcdParent: shm ?? os.tmpdir(), tmp: benchTempDir('drover-bench-etcd-') };
  console.log(
    `# etcd data dirs on ${shm ? '/dev/shm (tmpfs: fsync is free; a disk-backed etcd fsyncs its WAL on every commit)' : `${os.tmpdir()} (/dev/shm not writable; disk-backed: etcd fsyncs every commit)`}; ` +
      `SQLite in ${os.tmpdir()} (WAL, synchronous=NORMAL: no fsync per commit)`,
  );
  try {
    const figures = ONLY === 'api' ? [] : await runDatastore(dirs);
    const apiResult = ONLY === 'datastore' ? undefined : await runApi(dirs);
    if (ONLY !== undefined || !apiResult) {
      console.log('\n(--only: no result file written)');
      return;
    }
    const r0 = (x: number): number => round(x, 0);
    const pooledJson = (p: Pooled): Pooled => ({
      ...p,
      perSecond: r0(p.perSecond),
      p50: round(p.p50, 2),
      p90: round(p.p90, 2),
      p99: round(p.p99, 2),
      max: round(p.max, 1),
      serverCpuUsPerReq: r0(p.serverCpuUsPerReq),
      etcdCpuUsPerReq: r0(p.etcdCpuUsPerReq),
      watchDelayP50: round(p.watchDelayP50, 1),
      watchDelayP99: round(p.watchDelayP99, 1),
    });
    const rateJson = (rates: Rate[]) => ({
      opsPerSec: rates.map((x) => r0(x.opsPerSec)),
      medianOpsPerSec: r0(median(rates.map((x) => x.opsPerSec))),
      clientCpuUsPerOp: round(median(rates.map((x) => x.clientCpuUsPerOp)), 1),
      ...(Number.isFinite(rates[0]!.etcdCpuUsPerOp) ? { etcdCpuUsPerOp: round(median(rates.map((x) => x.etcdCpuUsPerOp)), 1) } : {}),
    });
    const file = writeResult('etcd', {
      benchmark: 'etcd',
      machine,
      settings: {
        etcdDataDir: dirs.shm ? '/dev/shm (tmpfs)' : os.tmpdir(),
        etcd: spawnSync('etcd', ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0],
        sqliteDir: os.tmpdir(),
        roundMs: ROUND_MS,
        rounds: ROUNDS,
        concurrency: CONCURRENCY,
        hotKeys: HOT_KEYS,
        valueBytes: VALUES[0]!.length,
        api: { seconds: API_SECONDS, warmupSeconds: WARMUP_SECONDS, rounds: API_ROUNDS, clients: CLIENTS, nodes: NODES },
      },
      datastore: figures.map((f) => ({
        mode: f.mode,
        op: f.op,
        ours: rateJson(f.ours),
        raw: rateJson(f.raw),
        ratios: f.ratios.map((x) => round(x, 3)),
        medianRatio: round(median(f.ratios), 3),
        context: Object.fromEntries(
          Object.entries(f.context).map(([name, e]) => [name, { ...rateJson(e.rates), vsRaw: round(median(e.vsRaw), 3) }]),
        ),
      })),
      api: {
        etcd: pooledJson(apiResult.etcd),
        sqlite: { ...pooledJson(apiResult.sqlite), etcdCpuUsPerReq: undefined },
        perRound: apiResult.perRound,
        roundRatios: apiResult.roundRatios.map((x) => round(x, 3)),
        ratioEtcdOverSqlite: round(apiResult.ratio, 3),
        ...(apiResult.baseline
          ? {
              baseline: {
                dir: path.basename(path.resolve(BASELINE_DIR!)),
                etcd: pooledJson(apiResult.baseline.etcd),
                roundRatios: apiResult.baseline.roundRatios.map((x) => round(x, 3)),
                ratioEtcdOverBaseline: round(apiResult.baseline.ratio, 3),
              },
            }
          : {}),
      },
    });
    console.log(`\nwrote ${path.relative(process.cwd(), file)}`);
  } finally {
    removeBenchTempDir(dirs.tmp);
  }
}

await main();
