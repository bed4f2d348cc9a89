/**
 * Scale: N simulated nodes renewing their Leases every second against one real server, on SQLite
 * and on etcd in the same run; then a minority goes silent, and the bench times how long the
 * controller takes to call each of them Unavailable, and whether it ever misjudges a healthy one.
 *
 *   npm run build && node --import tsx bench/scale.ts [--nodes 2000] [--datastores sqlite,etcd]
 *        [--silent-percent 5] [--warmup-s 10] [--measure-s 15] [--detect-ceiling-s 20]
 *        [--renew-ms 1000] [--etcd-data disk|tmpfs] [--connections 0]
 *
 * Per datastore: one `drover server --disable-agent` (default timings: a 1 s renew interval and
 * a 4 s grace, so a silent node is Unavailable 4-5 s after its last renewal), on a fresh SQLite
 * file or a fresh single-member etcd (on disk by default: etcd fsyncs each commit, as it would on
 * a real host). The nodes live in a second process (bench/scale-nodes.ts) so that their CPU is not
 * counted as the server's: each is a Node and a Lease, renewed as the agent renews (a blind merge
 * PATCH, the next one a renew interval after the previous one ended), their phases spread over
 * one interval. The bench watches the Nodes and reads each one's `drover.io/state` label.
 *
 * Phases: all nodes Ready (the controller heard from every one); --warmup-s; --measure-s, over which
 * it reports renewals per second, their latency (p50, p99, max; a request not answered within 10 s
 * counts as an error), 429s, errors, and the CPU of the server, of etcd and of the simulated nodes (cores = CPU seconds
 * per second); then --silent-percent of the nodes (spread over the index range) stop renewing, and
 * it reports how many the controller called Unavailable within --detect-ceiling-s, and when
 * (seconds from the silence), and the false verdicts: any state other than Ready on a node that
 * was never silenced, at any time after every node had renewed once and all were Ready, each put
 * down to the simulator's lateness, a late answer, or the server's view of a node that renewed on
 * time on the wire (bench/verdict-attribution.ts).
 *
 * The baseline is the SQLite run: the etcd figures are also printed as ratios to it (CPU per
 * renewal, p99). Writes bench/results/scale.json. Every process started here is stopped by PID
 * and every temp dir removed, also on errors and Ctrl-C.
 *
 * The same nodes under about twice the load one server thread can take, with flow control off and
 * on, are bench/scale-overload.ts (it was `--overload` here). What the two share is in
 * bench/scale-harness.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  installCleanup,
  machineInfo,
  onCleanup,
  parseBenchArgs,
  printMachine,
  removeBenchTempDir,
  round,
  sleep,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';
import { type EtcdProc, startEtcd } from './etcd-process.js';
import { cpu, describeDetection, NodeStates, type RenewalReport, SIMULATION_OPTIONS, SimulatedNodes, silenceAndDetect, untilAllReady } from './scale-harness.js';

// The overload mode moved to a bench of its own: say which, rather than "unknown option".
const argv = process.argv.slice(2);
const overloadAt = argv.findIndex((arg) => arg === '--overload' || arg.startsWith('--overload='));
if (overloadAt >= 0) {
  const rest = [...argv];
  rest.splice(overloadAt, argv[overloadAt]!.includes('=') ? 1 : 2);
  throw new Error(`--overload is a bench of its own now: node --import tsx bench/scale-overload.ts ${rest.join(' ')}`.trimEnd());
}

const { n, flags: args } = parseBenchArgs(
  {
    ...SIMULATION_OPTIONS,
    connections: { default: 0, min: 0 },
  },
  { flags: { datastores: { type: 'string', default: 'sqlite,etcd' }, 'etcd-data': { type: 'string', default: 'disk' } } },
);
const NODES = n.nodes;
const DATASTORES = String(args.datastores).split(',').map((d) => d.trim());
const SILENT_PERCENT = n['silent-percent'];
const WARMUP_S = n['warmup-s'];
const MEASURE_S = n['measure-s'];
const DETECT_CEILING_S = n['detect-ceiling-s'];
const RENEW_MS = n['renew-ms'];
/** HTTPS connections the simulated nodes share; 0: one per node, as real agents have. */
const CONNECTIONS = n.connections;
for (const d of DATASTORES) if (d !== 'sqlite' && d !== 'etcd') throw new Error(`--datastores takes sqlite and/or etcd, not ${d}`);
if (args['etcd-data'] !== 'disk' && args['etcd-data'] !== 'tmpfs') throw new Error('--etcd-data takes disk or tmpfs');

async function runOne(datastore: 'sqlite' | 'etcd'): Promise<Record<string, unknown>> {
  const dir = benchTempDir(`drover-bench-scale-${datastore}-`);
  let etcd: EtcdProc | undefined;
  if (datastore === 'etcd') {
    etcd = await startEtcd(args['etcd-data'] === 'tmpfs' && fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir());
    onCleanup(() => fs.rmSync(etcd!.root, { recursive: true, force: true }));
  }
  const flags = etcd ? ['--datastore-endpoint', `etcd://${etcd.endpoint.replace(/^http:\/\//, '')}`] : [];
  const server = await startBenchServer(path.join(dir, 'server'), path.join(dir, 'server.log'), flags);
  const api = new BenchApi(server);
  const caFile = path.join(dir, 'ca.crt');
  const tokenFile = path.join(dir, 'admin.token');
  fs.writeFileSync(caFile, server.caPem);
  fs.writeFileSync(tokenFile, server.adminToken, { mode: 0o600 });
  const nodes = SimulatedNodes.spawn({ url: server.url, caFile, tokenFile, count: NODES, renewMs: RENEW_MS, connections: CONNECTIONS, logFile: path.join(dir, 'nodes.log') });
  const states = new NodeStates();
  try {
    const setup = await nodes.ask('setup');
    console.log(`  ${datastore}: ${NODES} Nodes and Leases created in ${String(setup.ms)} ms`);
    await states.start(server);
    await nodes.ask('start');
    await untilAllReady(nodes, states, NODES);
    const allReadyAt = Date.now();
    console.log(`  ${datastore}: all nodes Ready; warming up ${WARMUP_S} s`);
    await sleep(WARMUP_S * 1000);
    await nodes.ask('report');
    const cpu0 = { server: cpu(server.child.pid), etcd: cpu(etcd?.pid), nodes: cpu(nodes.child.pid), at: performance.now() };
    await sleep(MEASURE_S * 1000);
    const steady = (await nodes.ask('report')) as unknown as RenewalReport;
    const seconds = (performance.now() - cpu0.at) / 1000;
    const serverCores = (cpu(server.child.pid) - cpu0.server) / seconds;
    const etcdCores = etcd ? (cpu(etcd.pid) - cpu0.etcd) / seconds : undefined;
    // The simulated nodes share the machine's cores with the server (and etcd): what they take is
    // what the server cannot have, so it bounds the rate this machine can measure at all.
    const nodesCores = (cpu(nodes.child.pid) - cpu0.nodes) / seconds;
    const renewalsPerSecond = steady.ok / seconds;

    const { during, detection } = await silenceAndDetect({
      nodes,
      states,
      api,
      count: NODES,
      silentCount: Math.round((NODES * SILENT_PERCENT) / 100),
      allReadyAt,
      detectCeilingS: DETECT_CEILING_S,
      during: async () => (await nodes.ask('report')) as unknown as RenewalReport,
    });
    return {
      datastore,
      ...(etcd ? { etcdData: args['etcd-data'] } : {}),
      nodes: NODES,
      renewalsPerSecond: round(renewalsPerSecond, 1),
      renewalP50Ms: steady.p50 === null ? null : round(steady.p50, 1),
      renewalP99Ms: steady.p99 === null ? null : round(steady.p99, 1),
      renewalMaxMs: steady.max === null ? null : round(steady.max, 1),
      tooMany: steady.tooMany,
      errors: steady.errors,
      ...(steady.firstError ? { firstError: steady.firstError } : {}),
      serverCores: round(serverCores, 2),
      ...(etcdCores !== undefined ? { etcdCores: round(etcdCores, 2) } : {}),
      serverCpuPerRenewalUs: round((serverCores * 1e6) / Math.max(1, renewalsPerSecond), 0),
      nodesCores: round(nodesCores, 2),
      nodesCpuPerRenewalUs: round((nodesCores * 1e6) / Math.max(1, renewalsPerSecond), 0),
      ...detection,
      duringDetection: { renewalP99Ms: during.p99 === null ? null : round(during.p99, 1), tooMany: during.tooMany, errors: during.errors },
    };
  } finally {
    states.stop();
    await nodes.stop();
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 15_000);
    await etcd?.stop();
    removeBenchTempDir(dir);
  }
}

function describe(r: Record<string, unknown>): string {
  return [
    `${String(r.datastore)}${r.etcdData ? ` (${String(r.etcdData)})` : ''}: ${String(r.renewalsPerSecond)} renewals/s, p50 ${String(r.renewalP50Ms)} ms, p99 ${String(r.renewalP99Ms)} ms, max ${String(r.renewalMaxMs)} ms, 429s ${String(r.tooMany)}, errors ${String(r.errors)}`,
    `    server ${String(r.serverCores)} cores (${String(r.serverCpuPerRenewalUs)} µs per renewal)${r.etcdCores !== undefined ? `, etcd ${String(r.etcdCores)} cores` : ''}, ` +
      `simulated nodes ${String(r.nodesCores)} cores (${String(r.nodesCpuPerRenewalUs)} µs per renewal)`,
    describeDetection(r, DETECT_CEILING_S),
    ...(r.controlPlaneDisruptions as string[]).map((m) => `    the controller said: ${m}`),
  ].join('\n');
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const runs: Record<string, unknown>[] = [];
  for (const datastore of DATASTORES as ('sqlite' | 'etcd')[]) {
    const result = await runOne(datastore);
    runs.push(result);
    console.log(describe(result));
  }
  const base = runs.find((r) => r.datastore === 'sqlite');
  const ratios = base
    ? runs
        .filter((r) => r !== base)
        .map((r) => ({
          datastore: r.datastore,
          cpuPerRenewalVsSqlite: round(Number(r.serverCpuPerRenewalUs) / Number(base.serverCpuPerRenewalUs), 2),
          p99VsSqlite: round(Number(r.renewalP99Ms) / Number(base.renewalP99Ms), 2),
        }))
    : [];
  for (const ratio of ratios) console.log(`${String(ratio.datastore)} / sqlite: server CPU per renewal ${ratio.cpuPerRenewalVsSqlite}×, renewal p99 ${ratio.p99VsSqlite}×`);
  const file = writeResult('scale', {
    benchmark: 'scale',
    machine,
    options: { nodes: NODES, connections: CONNECTIONS, datastores: DATASTORES, silentPercent: SILENT_PERCENT, warmupS: WARMUP_S, measureS: MEASURE_S, detectCeilingS: DETECT_CEILING_S, renewMs: RENEW_MS, etcdData: args['etcd-data'] },
    runs,
    ratios,
  });
  console.log(`wrote ${file}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
