/**
 * API benchmark: Node status heartbeats (strategic merge PATCH of /api/v1/nodes/<name>/status)
 * per second and their latency, through HTTPS, against a real `drover server` child process,
 * compared with a trivial Node HTTPS server (same ECDSA P-256 certificate) in a child process
 * driven by the same client: the ceiling of this client, TLS and node:http on this machine.
 * A second trivial server (`ceiling-big`) answers as many bytes as drover does, for context.
 *
 *   npm run build && node --import tsx bench/api.ts [--seconds 10] [--warmup 2] [--rounds 2] [--clients 50] [--nodes 200]
 *   node --import tsx bench/api.ts --cpu-prof [--only ceiling]  # profile one server; prints hot spots
 *   node --import tsx bench/api.ts --only drover|ceiling|ceiling-big  # one target, no ratio
 *
 * Writes bench/results/api.json (or api-profile[-<target>].json with --cpu-prof).
 *
 * The client is this process: `--clients` concurrent request loops over one node:https Agent
 * (keepAlive, maxSockets = clients). Each loop owns `nodes / clients` nodes and patches them in
 * turn, as kubelets would, each PATCH moving every condition's lastHeartbeatTime forward, in the
 * shape kubelet sends (`$setElementOrder/conditions` plus the four conditions). The measured
 * time is split into rounds alternating between the two servers, so noise hits both.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  benchTempDir,
  captureOutput,
  checkBuild,
  createNodes,
  DROVER_BIN,
  droverReadyPort,
  fmtInt,
  heartbeatLoad,
  heartbeatPatch,
  installCleanup,
  machineInfo,
  nodeName,
  parseBenchArgs,
  type PatchTarget,
  percentile,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  REPO_ROOT,
  round,
  send,
  stopChild,
  track,
  waitForLine,
  writeResult,
} from './common.js';

// --only measures just one target (diagnostics; the ratio needs both).
const { n, only: ONLY, flags } = parseBenchArgs(
  { seconds: 10, warmup: 2, rounds: { default: 2, min: 1 }, clients: 50, nodes: 200 },
  { only: ['drover', 'ceiling', 'ceiling-big'], flags: { 'cpu-prof': { type: 'boolean', default: false } } },
);
const { seconds: SECONDS, warmup: WARMUP_SECONDS, rounds: ROUNDS, clients: CLIENTS, nodes: NODES } = n;
const PROFILE = flags['cpu-prof'] === true;
const GOAL = { patchesPerSec: 5000, p99Ms: 25 };

// ---------------------------------------------------------------------------------------------
// Child processes

/** A server child process, tracked so that every exit path stops it. */
interface Child {
  process: ChildProcess;
  port: number;
}

const stopServer = (child: Child): Promise<void> => stopChild(child.process, 'SIGTERM', 10_000);

async function startDrover(dataDir: string, profileDir?: string): Promise<Child> {
  const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const child = track(
    spawn(
      process.execPath,
      [...nodeArgs, DROVER_BIN, 'server', '--data-dir', dataDir, '--https-listen-port', '0', '--bind-address', '127.0.0.1'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
  const port = await waitForLine(child, 'drover server', droverReadyPort, captureOutput(child));
  return { process: child, port };
}

/**
 * The ceiling: node:https answering every request with a fixed JSON body once it has read it,
 * by default a small Status; `bodyBytes` pads it to the size of drover's answer for context.
 */
const TRIVIAL_SERVER = `
const https = require('node:https');
const fs = require('node:fs');
const server = https.createServer(
  { cert: fs.readFileSync(process.env.CERT), key: fs.readFileSync(process.env.KEY) },
  (req, res) => {
    req.on('data', () => {});
    req.on('end', () => {
      const body = process.env.BODY;
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
    });
  },
);
server.keepAliveTimeout = 65000;
server.listen(0, '127.0.0.1', () => console.log('listening ' + server.address().port));
process.on('SIGTERM', () => process.exit(0));
`;

function trivialBody(bytes: number): string {
  const base = { kind: 'Status', apiVersion: 'v1', status: 'Success', code: 200 };
  const small = JSON.stringify(base);
  return bytes <= small.length ? small : JSON.stringify({ ...base, message: 'x'.repeat(bytes - small.length - 14) });
}

async function startTrivial(tlsDir: string, profileDir?: string, bodyBytes = 0): Promise<Child> {
  const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const child = track(
    spawn(process.execPath, [...nodeArgs, '-e', TRIVIAL_SERVER], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        CERT: path.join(tlsDir, 'serving.crt'),
        KEY: path.join(tlsDir, 'serving.key'),
        BODY: trivialBody(bodyBytes),
      },
    }),
  );
  const port = await waitForLine(
    child,
    'trivial server',
    (line) => {
      const m = /^listening (\d+)$/.exec(line.trim());
      return m ? Number(m[1]) : undefined;
    },
    captureOutput(child),
  );
  return { process: child, port };
}

interface LoadResult {
  target: string;
  seconds: number;
  requests: number;
  perSecond: number;
  errors: number;
  statuses: Record<string, number>;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  serverCpuCores: number;
  clientCpuCores: number;
  firstError?: string;
}

/** Keeps the heartbeat counters across rounds so that every PATCH changes the node. */
const beats = new Uint32Array(NODES);

/** Every latency sample of each target, pooled over its measured rounds. */
const samplesByTarget = new Map<string, number[]>();

async function load(name: string, server: Child, target: PatchTarget, ms: number, keep = false): Promise<LoadResult> {
  const cpu0 = processCpuSeconds(server.process.pid!);
  const clientCpu0 = process.cpuUsage();
  const { seconds, latencies, statuses, errors, firstError } = await heartbeatLoad(target, beats, CLIENTS, ms);
  const cpu1 = processCpuSeconds(server.process.pid!);
  const clientCpu = process.cpuUsage(clientCpu0);
  if (keep) {
    const pooled = samplesByTarget.get(name) ?? [];
    for (const l of latencies) pooled.push(l);
    samplesByTarget.set(name, pooled);
  }
  const sorted = Float64Array.from(latencies).sort();
  const mean = latencies.reduce((a, b) => a + b, 0) / (latencies.length || 1);
  return {
    target: name,
    seconds,
    requests: latencies.length,
    perSecond: latencies.length / seconds,
    errors,
    statuses,
    latencyMs: {
      p50: percentile(sorted, 50),
      p90: percentile(sorted, 90),
      p99: percentile(sorted, 99),
      max: sorted.length ? sorted[sorted.length - 1]! : NaN,
      mean,
    },
    serverCpuCores: (cpu1 - cpu0) / seconds,
    clientCpuCores: (clientCpu.user + clientCpu.system) / 1e6 / seconds,
    ...(firstError ? { firstError } : {}),
  };
}

/** Pool rounds: total requests over total time; percentiles recomputed from the pooled samples. */
function combine(name: string, rounds: LoadResult[], pooled: Float64Array): LoadResult {
  const seconds = rounds.reduce((a, r) => a + r.seconds, 0);
  const requests = rounds.reduce((a, r) => a + r.requests, 0);
  const statuses: Record<string, number> = {};
  for (const r of rounds) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
  const firstError = rounds.find((r) => r.firstError)?.firstError;
  return {
    target: name,
    seconds,
    requests,
    perSecond: requests / seconds,
    errors: rounds.reduce((a, r) => a + r.errors, 0),
    statuses,
    latencyMs: {
      p50: percentile(pooled, 50),
      p90: percentile(pooled, 90),
      p99: percentile(pooled, 99),
      max: pooled.length ? pooled[pooled.length - 1]! : NaN,
      mean: rounds.reduce((a, r) => a + r.latencyMs.mean * r.requests, 0) / (requests || 1),
    },
    serverCpuCores: rounds.reduce((a, r) => a + r.serverCpuCores * r.seconds, 0) / seconds,
    clientCpuCores: rounds.reduce((a, r) => a + r.clientCpuCores * r.seconds, 0) / seconds,
    ...(firstError ? { firstError } : {}),
  };
}

/** Server CPU time per request, in microseconds. */
function cpuMicrosPerRequest(r: LoadResult): number {
  return (r.serverCpuCores / r.perSecond) * 1e6;
}

function describe(r: LoadResult): string {
  return (
    `${r.target.padEnd(11)} ${fmtInt(r.perSecond).padStart(6)} req/s  ` +
    `p50 ${r.latencyMs.p50.toFixed(1).padStart(5)} ms  p90 ${r.latencyMs.p90.toFixed(1).padStart(5)} ms  ` +
    `p99 ${r.latencyMs.p99.toFixed(1).padStart(5)} ms  max ${r.latencyMs.max.toFixed(0).padStart(4)} ms  ` +
    `server CPU ${r.serverCpuCores.toFixed(2)} cores (${cpuMicrosPerRequest(r).toFixed(0)} us/req)  client CPU ${r.clientCpuCores.toFixed(2)} cores` +
    (r.errors ? `  ERRORS ${r.errors}` : '')
  );
}

function roundLatencies(r: LoadResult): LoadResult & { serverCpuMicrosPerRequest: number } {
  return {
    ...r,
    seconds: round(r.seconds, 2),
    perSecond: round(r.perSecond, 0),
    serverCpuCores: round(r.serverCpuCores, 2),
    serverCpuMicrosPerRequest: round(cpuMicrosPerRequest(r), 0),
    clientCpuCores: round(r.clientCpuCores, 2),
    latencyMs: Object.fromEntries(Object.entries(r.latencyMs).map(([k, v]) => [k, round(v, 2)])) as LoadResult['latencyMs'],
  };
}

// ---------------------------------------------------------------------------------------------
// CPU profile summary

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  hitCount?: number;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

function shortUrl(url: string): string {
  if (!url) return '(native)';
  const clean = url.replace(/^file:\/\//, '');
  const nm = clean.lastIndexOf('node_modules/');
  if (nm >= 0) return clean.slice(nm + 'node_modules/'.length);
  if (clean.startsWith(REPO_ROOT)) return path.relative(REPO_ROOT, clean);
  return clean;
}

/** Where a frame belongs, for the per-area breakdown. */
function area(frame: ProfileNode['callFrame']): string {
  const url = shortUrl(frame.url);
  const name = frame.functionName;
  if (name === '(garbage collector)') return 'garbage collection';
  if (name === '(idle)') return 'idle';
  if (name === '(program)') return '(program: native, outside JS)';
  if (url.startsWith('dist/')) return url.replace(/^dist\//, 'src/').replace(/\.js$/, '.ts');
  if (url.startsWith('better-sqlite3')) return 'better-sqlite3 (SQLite)';
  if (url.startsWith('pino')) return 'pino';
  if (url.startsWith('node:_tls') || url.startsWith('node:tls') || url.includes('_tls_')) return 'node: TLS';
  if (url.startsWith('node:_http') || url.startsWith('node:http')) return 'node: HTTP';
  if (url.startsWith('node:net') || url.startsWith('node:stream') || url.startsWith('node:internal/stream')) return 'node: net/streams';
  if (url.startsWith('node:')) return 'node: other';
  if (url === '(native)') {
    if (/^(JSON\.|stringify|parse)/.test(name)) return 'JSON (native)';
    return `native: ${name || '(anonymous)'}`;
  }
  return url.split('/')[0] ?? url;
}

interface ProfileSummary {
  totalMs: number;
  byFunction: { function: string; location: string; selfMs: number; selfPercent: number }[];
  byArea: { area: string; selfMs: number; selfPercent: number }[];
  /** Total (inclusive) time of interesting src/ functions: the cost of each step of a PATCH. */
  inclusive: { function: string; location: string; totalMs: number; totalPercent: number }[];
}

function summarize(profile: CpuProfile): ProfileSummary {
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) byId.set(node.id, node);
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!;
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  }
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const c of node.children ?? []) parent.set(c, node.id);
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const idle = [...self.entries()]
    .filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)')
    .reduce((a, [, v]) => a + v, 0);
  const busy = total - idle;

  const fnKey = (f: ProfileNode['callFrame']): string =>
    `${f.functionName || '(anonymous)'}\t${shortUrl(f.url)}${f.url ? `:${f.lineNumber + 1}` : ''}`;
  const byFn = new Map<string, number>();
  const byArea = new Map<string, number>();
  for (const [id, ms] of self) {
    const frame = byId.get(id)!.callFrame;
    if (frame.functionName === '(idle)') continue;
    byFn.set(fnKey(frame), (byFn.get(fnKey(frame)) ?? 0) + ms);
    byArea.set(area(frame), (byArea.get(area(frame)) ?? 0) + ms);
  }
  // Inclusive time per function: each sample counts once for every distinct function on its stack.
  const inclusive = new Map<string, number>();
  for (const [id, ms] of self) {
    const seen = new Set<string>();
    for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
      const frame = byId.get(n)!.callFrame;
      if (!frame.url.includes('/dist/') && !/^node:(_http|https|_tls|tls)/.test(frame.url.replace('file://', ''))) continue;
      const key = fnKey(frame);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusive.set(key, (inclusive.get(key) ?? 0) + ms);
    }
  }
  const pct = (ms: number): number => round((ms / busy) * 100, 1);
  const heaviest = (byKey: Map<string, number>): [string, number][] => [...byKey.entries()].sort((a, b) => b[1] - a[1]);
  /** The 30 heaviest functions, keyed by fnKey. */
  const heaviestFunctions = (byKey: Map<string, number>): { function: string; location: string; ms: number }[] =>
    heaviest(byKey)
      .slice(0, 30)
      .map(([k, ms]) => {
        const [fn, location] = k.split('\t');
        return { function: fn!, location: location!, ms };
      });
  return {
    totalMs: round(busy, 0),
    byFunction: heaviestFunctions(byFn).map(({ ms, ...f }) => ({ ...f, selfMs: round(ms, 0), selfPercent: pct(ms) })),
    byArea: heaviest(byArea).map(([a, ms]) => ({ area: a, selfMs: round(ms, 0), selfPercent: pct(ms) })),
    inclusive: heaviestFunctions(inclusive).map(({ ms, ...f }) => ({ ...f, totalMs: round(ms, 0), totalPercent: pct(ms) })),
  };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const dataDir = benchTempDir('drover-bench-api-');
  const profileDir = PROFILE ? fs.mkdtempSync(path.join(os.tmpdir(), 'drover-bench-profile-')) : undefined;
  const children: Child[] = [];
  const agent = new https.Agent({ keepAlive: true, maxSockets: CLIENTS });
  try {
    const drover = await startDrover(dataDir, profileDir);
    children.push(drover);
    const token = fs.readFileSync(path.join(dataDir, 'server/cred/admin.token'), 'utf8').trim();
    const ca = fs.readFileSync(path.join(dataDir, 'server/tls/server-ca.crt'), 'utf8');
    const droverTarget: PatchTarget = { port: drover.port, ca, token, agent };

    // The nodes, created concurrently in batches.
    const t0 = performance.now();
    await createNodes(droverTarget, NODES, CLIENTS, 'drover');
    const sample = await send(droverTarget, 'GET', `/api/v1/nodes/${nodeName(0)}`, undefined);
    const nodeBytes = Buffer.byteLength(sample.text);
    console.log(
      `# created ${NODES} nodes in ${Math.round(performance.now() - t0)} ms (a node is ${nodeBytes} bytes of JSON; a patch ${heartbeatPatch(1).length} bytes); ` +
        `${CLIENTS} clients, keep-alive, ${ROUNDS} x ${SECONDS / ROUNDS} s measured per server after ${WARMUP_SECONDS} s warm-up`,
    );

    if (PROFILE) {
      // Profile one server (drover unless --only ceiling) under the same load.
      let profiled = drover;
      let target = droverTarget;
      if (ONLY === 'ceiling' || ONLY === 'ceiling-big') {
        profiled = await startTrivial(path.join(dataDir, 'server/tls'), profileDir, ONLY === 'ceiling' ? 0 : nodeBytes);
        children.push(profiled);
        target = { port: profiled.port, ca, token, agent };
      }
      const name = ONLY ?? 'drover';
      await load(name, profiled, target, WARMUP_SECONDS * 1000);
      const result = await load(name, profiled, target, SECONDS * 1000);
      console.log(describe(result));
      agent.destroy();
      await stopServer(profiled);
      const file = fs.readdirSync(profileDir!).find((f) => f.endsWith('.cpuprofile'));
      if (!file) throw new Error(`no .cpuprofile written in ${profileDir}`);
      const summary = summarize(JSON.parse(fs.readFileSync(path.join(profileDir!, file), 'utf8')) as CpuProfile);
      const us = cpuMicrosPerRequest(result);
      console.log(
        `\n${name} CPU profile (${path.join(profileDir!, file)}), ${fmtInt(summary.totalMs)} ms of samples off idle (warm-up included).` +
          `\nShares are of those samples; "us/req" applies them to the ${us.toFixed(0)} us of server CPU measured per request.`,
      );
      const line = (percent: number, label: string): string =>
        `  ${percent.toFixed(1).padStart(5)}%  ${((percent / 100) * us).toFixed(0).padStart(4)} us/req  ${label}`;
      console.log('\nself time by area:');
      for (const a of summary.byArea.slice(0, 20)) console.log(line(a.selfPercent, a.area));
      console.log('\nself time by function:');
      for (const f of summary.byFunction.slice(0, 25)) console.log(line(f.selfPercent, `${f.function}  ${f.location}`));
      console.log('\ninclusive time (src/ and node HTTP/TLS functions):');
      for (const f of summary.inclusive.slice(0, 25)) console.log(line(f.totalPercent, `${f.function}  ${f.location}`));
      const out = writeResult(name === 'drover' ? 'api-profile' : `api-profile-${name}`, {
        benchmark: `api --cpu-prof${ONLY ? ` --only ${ONLY}` : ''}`,
        machine,
        settings: { seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, clients: CLIENTS, nodes: NODES },
        load: roundLatencies(result),
        serverCpuMicrosPerRequest: round(us, 0),
        profileFile: path.join(profileDir!, file),
        summary,
      });
      console.log(`\nwrote ${path.relative(process.cwd(), out)}`);
      return;
    }

    const trivial = await startTrivial(path.join(dataDir, 'server/tls'));
    children.push(trivial);
    const trivialTarget: PatchTarget = { port: trivial.port, ca, token, agent };
    // Context: the same trivial server answering as many bytes as drover does (the patched Node).
    const trivialBig = await startTrivial(path.join(dataDir, 'server/tls'), undefined, nodeBytes);
    children.push(trivialBig);
    const trivialBigTarget: PatchTarget = { port: trivialBig.port, ca, token, agent };
    const targets = [
      { name: 'drover', child: drover, target: droverTarget },
      { name: 'ceiling', child: trivial, target: trivialTarget },
      { name: 'ceiling-big', child: trivialBig, target: trivialBigTarget },
    ].filter((t) => ONLY === undefined || t.name === ONLY);

    for (const t of targets) await load(t.name, t.child, t.target, WARMUP_SECONDS * 1000);
    const perRound: Record<string, LoadResult[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const result = await load(t.name, t.child, t.target, (SECONDS / ROUNDS) * 1000, true);
        perRound[t.name]!.push(result);
        console.log(`  round ${r + 1}: ${describe(result)}`);
      }
    }
    // Percentiles over every sample of every round.
    const results: Record<string, LoadResult> = {};
    for (const t of targets) {
      results[t.name] = combine(t.name, perRound[t.name]!, Float64Array.from(samplesByTarget.get(t.name) ?? []).sort());
    }
    if (ONLY !== undefined) {
      console.log(`\n${describe(results[ONLY]!)}`);
      return;
    }
    const ours = results.drover!;
    const ceiling = results.ceiling!;
    const ceilingBig = results['ceiling-big']!;
    const fraction = ours.perSecond / ceiling.perSecond;
    const fractionBig = ours.perSecond / ceilingBig.perSecond;
    console.log('');
    for (const r of [ours, ceiling, ceilingBig]) console.log(describe(r));
    console.log(
      `\ndrover = ${(fraction * 100).toFixed(1)}% of the ceiling (trivial HTTPS server, same client, same cert)` +
        `; p99 ${ours.latencyMs.p99.toFixed(1)} ms vs ceiling ${ceiling.latencyMs.p99.toFixed(1)} ms` +
        `\n       ${(fractionBig * 100).toFixed(1)}% of ceiling-big (the trivial server answering ${nodeBytes} bytes, as drover does)`,
    );
    const meets = ours.perSecond >= GOAL.patchesPerSec && ours.latencyMs.p99 < GOAL.p99Ms && ours.errors === 0;
    console.log(
      `goal (>= ${fmtInt(GOAL.patchesPerSec)} patches/s, p99 < ${GOAL.p99Ms} ms): ${meets ? 'met' : 'NOT met'} on this run`,
    );
    if (ours.firstError) console.log(`first error: ${ours.firstError}`);

    const out = writeResult('api', {
      benchmark: 'api',
      machine,
      settings: { seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, rounds: ROUNDS, clients: CLIENTS, nodes: NODES, nodeBytes, patchBytes: heartbeatPatch(1).length },
      drover: roundLatencies(ours),
      ceiling: roundLatencies(ceiling),
      ceilingBig: { ...roundLatencies(ceilingBig), bodyBytes: nodeBytes },
      rounds: Object.fromEntries(Object.entries(perRound).map(([k, v]) => [k, v.map(roundLatencies)])),
      droverFractionOfCeiling: round(fraction, 3),
      droverFractionOfCeilingBig: round(fractionBig, 3),
      goal: { ...GOAL, met: meets },
    });
    console.log(`\nwrote ${path.relative(process.cwd(), out)}`);
  } finally {
    agent.destroy();
    for (const child of children) await stopServer(child);
    removeBenchTempDir(dataDir);
  }
}

await main();
