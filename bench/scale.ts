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
 * counts as an error), 429s, errors, and the CPU of the server and of etcd (cores = CPU seconds
 * per second); then --silent-percent of the nodes (spread over the index range) stop renewing, and
 * it reports how many the controller called Unavailable within --detect-ceiling-s, and when
 * (seconds from the silence), and the false verdicts: any state other than Ready on a node that
 * was never silenced, at any time after all were Ready.
 *
 * The baseline is the SQLite run: the etcd figures are also printed as ratios to it (CPU per
 * renewal, p99). Writes bench/results/scale.json. Every process started here is stopped by PID
 * and every temp dir removed, also on errors and Ctrl-C.
 *
 * --overload (docs/flow-control.md): the same nodes on SQLite, each renewing as itself (a client
 * certificate `system:node:<name>` in `system:nodes`, one connection each, as agents do), plus a
 * bulk lister (its own user, allowed to list Nodes) sending lists of every Node in an open loop at
 * a rate that, with the renewals, asks about twice one thread's worth of server CPU (calibrated in
 * the first pass: server CPU of the renewals alone, and of 10 lists one after the other; or
 * --list-rate). Two passes under the same load, on a fresh server each: flow control off (the
 * baseline: DROVER_BENCH_FLOW_CONTROL=off, the bench's hidden switch) and on (the defaults, or
 * --max-requests-inflight). Each reports renewals and lists answered, 429s and timeouts (no answer
 * within 10 s), renewal latency, and, with the overload going on, how fast the silenced nodes are
 * called Unavailable and the false verdicts. Writes bench/results/scale-overload.json.
 *
 *   npm run build && node --import tsx bench/scale.ts --overload 1 [--nodes 500] [--list-rate 0]
 *        [--max-outstanding-lists 200] [--max-requests-inflight 0] [--measure-s 15]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import {
  BENCH_DIR,
  BenchApi,
  benchTempDir,
  checkBuild,
  installCleanup,
  machineInfo,
  nodeName,
  onCleanup,
  parseBenchArgs,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  sleep,
  startBenchServer,
  stopChild,
  track,
  writeResult,
} from './common.js';
import { type EtcdProc, startEtcd } from './etcd-process.js';
import { issueCertificate } from '../src/security/pki.js';

const { n, flags: args } = parseBenchArgs(
  {
    nodes: { default: 2000, min: 1 },
    'silent-percent': { default: 5, min: 0 },
    'warmup-s': { default: 10, min: 0 },
    'measure-s': { default: 15, min: 1 },
    'detect-ceiling-s': { default: 20, min: 1 },
    'renew-ms': { default: 1000, min: 100 },
    connections: { default: 0, min: 0 },
    overload: { default: 0, min: 0 },
    'list-rate': { default: 0, min: 0 },
    'max-outstanding-lists': { default: 200, min: 1 },
    'max-requests-inflight': { default: 0, min: 0 },
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
const STATE_LABEL = 'drover.io/state';

interface RenewalReport {
  sent: number;
  ok: number;
  tooMany: number;
  errors: number;
  firstError?: string;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

/** The simulated nodes' process: one command at a time, each answered by one JSON line. */
class SimulatedNodes {
  private readonly answers: ((line: Record<string, unknown>) => void)[] = [];
  private constructor(readonly child: ChildProcess) {
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const answer = JSON.parse(line) as Record<string, unknown>;
      this.answers.shift()?.(answer);
    });
  }

  static spawn(url: string, caFile: string, tokenFile: string, count: number, logFile: string, credentialsFile?: string): SimulatedNodes {
    const log = fs.openSync(logFile, 'a');
    try {
      const child = track(
        spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, 'scale-nodes.ts'), url, caFile, tokenFile, String(count), String(RENEW_MS), '0', String(CONNECTIONS), ...(credentialsFile ? [credentialsFile] : [])], {
          stdio: ['pipe', 'pipe', log],
        }),
      );
      return new SimulatedNodes(child);
    } finally {
      fs.closeSync(log);
    }
  }

  ask(command: string, timeoutMs = 600_000): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the simulated nodes did not answer ${command.split(' ')[0]} within ${timeoutMs} ms`)), timeoutMs);
      this.answers.push((answer) => {
        clearTimeout(timer);
        if (typeof answer.error === 'string') reject(new Error(`simulated nodes: ${answer.error}`));
        else resolve(answer);
      });
      this.child.stdin!.write(`${command}\n`);
    });
  }
}

interface NodeSummary {
  metadata: { name: string; resourceVersion?: string; labels?: Record<string, string> };
}

/** Each node's state label as a watch on the Nodes delivers it, with the time of every change. */
class NodeStates {
  readonly state = new Map<string, string>();
  readonly changes: { node: string; state: string; at: number }[] = [];
  private request: ReturnType<typeof https.get> | undefined;

  private stopped = false;

  /** A list, then a watch from its revision; when the server ends the watch, a new one from the last event seen (as an informer does). */
  async start(api: BenchApi, url: string, token: string, ca: string): Promise<void> {
    const list = await api.json<{ metadata: { resourceVersion: string }; items: NodeSummary[] }>('GET', '/api/v1/nodes');
    for (const node of list.items) this.note(node.metadata.name, node.metadata.labels?.[STATE_LABEL] ?? '');
    this.watch(url, token, ca, list.metadata.resourceVersion, api);
  }

  private watch(url: string, token: string, ca: string, from: string, api: BenchApi): void {
    let resourceVersion = from;
    let restarted = false;
    const restart = (): void => {
      if (restarted || this.stopped) return;
      restarted = true;
      // Watched from the last event; a 410 (history compacted) would show as a watch that ends at once, so re-list then.
      setTimeout(() => this.watch(url, token, ca, resourceVersion, api), 100).unref();
    };
    this.request = https.get(`${url}/api/v1/nodes?watch=1&resourceVersion=${resourceVersion}`, { ca, headers: { Authorization: `Bearer ${token}` } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        if (!this.stopped) void this.start(api, url, token, ca).catch(restart);
        return;
      }
      const lines = readline.createInterface({ input: res });
      lines.on('line', (line) => {
        const event = JSON.parse(line) as { type: string; object: NodeSummary };
        if (event.type === 'ERROR') return;
        resourceVersion = event.object.metadata.resourceVersion ?? resourceVersion;
        if (event.type === 'ADDED' || event.type === 'MODIFIED') this.note(event.object.metadata.name, event.object.metadata.labels?.[STATE_LABEL] ?? '');
      });
      lines.on('error', restart);
      lines.on('close', restart);
      res.on('error', restart);
    });
    this.request.on('error', restart);
  }

  private note(node: string, state: string): void {
    if (this.state.get(node) === state) return;
    this.state.set(node, state);
    this.changes.push({ node, state, at: Date.now() });
  }

  count(state: string): number {
    let n = 0;
    for (const value of this.state.values()) if (value === state) n++;
    return n;
  }

  stop(): void {
    this.stopped = true;
    this.request?.destroy();
  }
}

async function until(what: string, ceilingMs: number, check: () => boolean): Promise<void> {
  const deadline = Date.now() + ceilingMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ceilingMs / 1000} s`);
    await sleep(100);
  }
}

function cpu(pid: number | undefined): number {
  return pid === undefined ? NaN : processCpuSeconds(pid);
}

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
  const nodes = SimulatedNodes.spawn(server.url, caFile, tokenFile, NODES, path.join(dir, 'nodes.log'));
  const states = new NodeStates();
  try {
    const setup = await nodes.ask('setup');
    console.log(`  ${datastore}: ${NODES} Nodes and Leases created in ${String(setup.ms)} ms`);
    await states.start(api, server.url, server.adminToken, server.caPem);
    await nodes.ask('start');
    await until(`all ${NODES} nodes Ready`, 60_000 + NODES * 20, () => states.count('Ready') === NODES).catch(async (error: unknown) => {
      const counts: Record<string, number> = {};
      for (const value of states.state.values()) counts[value || '(none)'] = (counts[value || '(none)'] ?? 0) + 1;
      const renewals = await nodes.ask('report');
      throw new Error(`${(error as Error).message}; states ${JSON.stringify(counts)}; renewals meanwhile ${JSON.stringify(renewals)}`);
    });
    const allReadyAt = Date.now();
    console.log(`  ${datastore}: all nodes Ready; warming up ${WARMUP_S} s`);
    await sleep(WARMUP_S * 1000);
    await nodes.ask('report');
    const cpu0 = { server: cpu(server.child.pid), etcd: cpu(etcd?.pid), at: performance.now() };
    await sleep(MEASURE_S * 1000);
    const steady = (await nodes.ask('report')) as unknown as RenewalReport;
    const seconds = (performance.now() - cpu0.at) / 1000;
    const serverCores = (cpu(server.child.pid) - cpu0.server) / seconds;
    const etcdCores = etcd ? (cpu(etcd.pid) - cpu0.etcd) / seconds : undefined;

    const silentCount = Math.round((NODES * SILENT_PERCENT) / 100);
    const silent = Array.from({ length: silentCount }, (_, k) => Math.floor((k * NODES) / silentCount));
    const silentNames = new Set(silent.map(nodeName));
    const silenced = await nodes.ask(`silence ${silent.join(',')}`);
    const silencedAt = Number(silenced.at);
    const detected = (): number => [...silentNames].filter((name) => states.state.get(name) === 'Unavailable').length;
    await until('every silent node Unavailable', DETECT_CEILING_S * 1000, () => detected() === silentCount).catch(() => undefined);
    const during = (await nodes.ask('report')) as unknown as RenewalReport;
    const detectionS = [...silentNames]
      .map((name) => states.changes.find((c) => c.node === name && c.state === 'Unavailable' && c.at >= silencedAt))
      .filter((c) => c !== undefined)
      .map((c) => (c.at - silencedAt) / 1000)
      .sort((a, b) => a - b);
    // What the controller said about its own view (docs/node-lifecycle.md, "When the control plane is slow").
    const disruptions = (await api.json<{ items: { message?: string; count?: number }[] }>('GET', '/api/v1/namespaces/kube-node-lease/events').catch(() => ({ items: [] }))).items
      .filter((e) => /ControlPlaneDisruption/.test(JSON.stringify(e)))
      .map((e) => e.message ?? '');
    const falseVerdicts = states.changes.filter((c) => c.at >= allReadyAt && !silentNames.has(c.node) && c.state !== 'Ready');
    return {
      datastore,
      ...(etcd ? { etcdData: args['etcd-data'] } : {}),
      nodes: NODES,
      renewalsPerSecond: round(steady.ok / seconds, 1),
      renewalP50Ms: steady.p50 === null ? null : round(steady.p50, 1),
      renewalP99Ms: steady.p99 === null ? null : round(steady.p99, 1),
      renewalMaxMs: steady.max === null ? null : round(steady.max, 1),
      tooMany: steady.tooMany,
      errors: steady.errors,
      ...(steady.firstError ? { firstError: steady.firstError } : {}),
      serverCores: round(serverCores, 2),
      ...(etcdCores !== undefined ? { etcdCores: round(etcdCores, 2) } : {}),
      serverCpuPerRenewalUs: round((serverCores * 1e6) / Math.max(1, steady.ok / seconds), 0),
      ...detectionFigures(silentCount, detectionS, falseVerdicts, disruptions),
      duringDetection: { renewalP99Ms: during.p99 === null ? null : round(during.p99, 1), tooMany: during.tooMany, errors: during.errors },
    };
  } finally {
    states.stop();
    await nodes.ask('stop', 10_000).catch(() => undefined);
    await stopChild(nodes.child, 'SIGTERM', 5000);
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 15_000);
    await etcd?.stop();
    removeBenchTempDir(dir);
  }
}

function describe(r: Record<string, unknown>): string {
  const detection = r.detected === r.silenced ? `${String(r.detected)}/${String(r.silenced)} detected, p50 ${String(r.detectionP50S)} s, max ${String(r.detectionMaxS)} s` : `only ${String(r.detected)}/${String(r.silenced)} detected within ${DETECT_CEILING_S} s`;
  return [
    `${String(r.datastore)}${r.etcdData ? ` (${String(r.etcdData)})` : ''}: ${String(r.renewalsPerSecond)} renewals/s, p50 ${String(r.renewalP50Ms)} ms, p99 ${String(r.renewalP99Ms)} ms, max ${String(r.renewalMaxMs)} ms, 429s ${String(r.tooMany)}, errors ${String(r.errors)}`,
    `    server ${String(r.serverCores)} cores (${String(r.serverCpuPerRenewalUs)} µs per renewal)${r.etcdCores !== undefined ? `, etcd ${String(r.etcdCores)} cores` : ''}`,
    `    ${detection}; false verdicts ${String(r.falseVerdicts)}`,
    ...(r.controlPlaneDisruptions as string[]).map((m) => `    the controller said: ${m}`),
  ].join('\n');
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  if (n.overload) {
    await overloadMain(machine);
    return;
  }
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

// ---- --overload -------------------------------------------------------------------------------

const LISTER = 'bench-lister';

interface ListReport extends RenewalReport {
  timeouts: number;
  skipped: number;
}

/** A certificate of the cluster's client CA for every simulated node and for the lister, in a file for the simulator. */
async function issueCredentials(dataDir: string, file: string): Promise<void> {
  const tls = path.join(dataDir, 'server', 'tls');
  const ca = { certificatePem: fs.readFileSync(path.join(tls, 'client-ca.crt'), 'utf8'), privateKeyPem: fs.readFileSync(path.join(tls, 'client-ca.key'), 'utf8') };
  const nodes: { cert: string; key: string }[] = [];
  for (let k = 0; k < NODES; k += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, NODES - k) }, (_, j) => issueCertificate(ca, { commonName: `system:node:${nodeName(k + j)}`, organization: 'system:nodes', usage: 'client' })),
    );
    nodes.push(...batch.map((c) => ({ cert: c.certificatePem, key: c.privateKeyPem })));
  }
  const lister = await issueCertificate(ca, { commonName: LISTER, organization: 'bench-listers', usage: 'client' });
  fs.writeFileSync(file, JSON.stringify({ nodes, lister: { cert: lister.certificatePem, key: lister.privateKeyPem } }), { mode: 0o600 });
}

/** Server CPU (cores) of the renewals alone, over 5 s. */
async function renewalCores(server: { child: ChildProcess }): Promise<number> {
  const c0 = cpu(server.child.pid);
  const t0 = performance.now();
  await sleep(5000);
  return (cpu(server.child.pid) - c0) / ((performance.now() - t0) / 1000);
}

/** Server CPU seconds per list of every Node: 10 lists, one after the other, as the lister, with nothing else going on. */
async function listCpu(server: { child: ChildProcess; url: string; caPem: string }, credentialsFile: string): Promise<{ listCpuS: number; listMs: number }> {
  const { lister } = JSON.parse(fs.readFileSync(credentialsFile, 'utf8')) as { lister: { cert: string; key: string } };
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  const list = (): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      https
        .get(`${server.url}/api/v1/nodes`, { agent, ca: server.caPem, cert: lister.cert, key: lister.key }, (res) => {
          if (res.statusCode !== 200) reject(new Error(`calibration list: HTTP ${res.statusCode}`));
          res.resume();
          res.on('end', () => resolve());
        })
        .on('error', reject);
    });
  await list(); // the connection, and the watch cache of Nodes
  const c0 = cpu(server.child.pid);
  const t0 = performance.now();
  for (let k = 0; k < 10; k++) await list();
  agent.destroy();
  return { listCpuS: Math.max(0.0005, (cpu(server.child.pid) - c0) / 10), listMs: (performance.now() - t0) / 10 };
}

async function runOverload(flowControl: boolean, listRate: number | undefined): Promise<Record<string, unknown>> {
  const dir = benchTempDir(`drover-bench-overload-${flowControl ? 'on' : 'off'}-`);
  const inflight = n['max-requests-inflight'];
  // The hidden switch is read once, at the server's start: set for the baseline's server only.
  if (!flowControl) process.env.DROVER_BENCH_FLOW_CONTROL = 'off';
  // supervisor-metrics: the priority levels' figures (seats, executing, queued, refused) are read from /metrics.
  const server = await startBenchServer(path.join(dir, 'server'), path.join(dir, 'server.log'), ['--supervisor-metrics', ...(inflight ? ['--max-requests-inflight', String(inflight)] : [])]).finally(
    () => delete process.env.DROVER_BENCH_FLOW_CONTROL,
  );
  const api = new BenchApi(server);
  const caFile = path.join(dir, 'ca.crt');
  const tokenFile = path.join(dir, 'admin.token');
  const credentialsFile = path.join(dir, 'credentials.json');
  fs.writeFileSync(caFile, server.caPem);
  fs.writeFileSync(tokenFile, server.adminToken, { mode: 0o600 });
  await issueCredentials(server.dataDir, credentialsFile);
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  await api.json('POST', `${rbac}/clusterroles`, { metadata: { name: LISTER }, rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['list'] }] });
  await api.json('POST', `${rbac}/clusterrolebindings`, {
    metadata: { name: LISTER },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: LISTER },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: LISTER }],
  });
  const nodes = SimulatedNodes.spawn(server.url, caFile, tokenFile, NODES, path.join(dir, 'nodes.log'), credentialsFile);
  // The lister in a process of its own (the simulator with no nodes): reading its answers must not
  // delay the renewals' timers and sockets, which would count as the server's latency.
  const lister = SimulatedNodes.spawn(server.url, caFile, tokenFile, 0, path.join(dir, 'lister.log'), credentialsFile);
  const states = new NodeStates();
  const label = `flow control ${flowControl ? 'on' : 'off'}`;
  try {
    const setup = await nodes.ask('setup');
    console.log(`  ${label}: ${NODES} Nodes and Leases created in ${String(setup.ms)} ms`);
    // A list's cost before the renewals start, so that theirs is not counted in it.
    const listCost = listRate === undefined ? await listCpu(server, credentialsFile) : undefined;
    await states.start(api, server.url, server.adminToken, server.caPem);
    await nodes.ask('start');
    await until(`all ${NODES} nodes Ready`, 60_000 + NODES * 20, () => states.count('Ready') === NODES);
    const allReadyAt = Date.now();
    await sleep(WARMUP_S * 1000);
    let calibration: { renewalCores: number; listCpuS: number; listMs: number } | undefined;
    let rate = listRate;
    if (rate === undefined) {
      calibration = { ...listCost!, renewalCores: await renewalCores(server) };
      // Renewals plus lists asking for two threads' worth of the server's CPU.
      rate = round(Math.max(1, (2 - calibration.renewalCores) / calibration.listCpuS), 1);
      console.log(
        `  calibration: renewals ${round(calibration.renewalCores, 2)} cores; a list of ${NODES} Nodes ${round(calibration.listCpuS * 1000, 1)} ms of server CPU (${round(calibration.listMs, 1)} ms answered); lists at ${rate}/s`,
      );
    }
    await lister.ask(`bulk ${rate} ${n['max-outstanding-lists']}`);
    console.log(`  ${label}: lists at ${rate}/s; overload for 5 s, then measured for ${MEASURE_S} s`);
    await sleep(5000);
    await nodes.ask('report');
    await lister.ask('report');
    const cpu0 = { server: cpu(server.child.pid), at: performance.now() };
    await sleep(MEASURE_S * 1000);
    const steady = { ...((await nodes.ask('report')) as unknown as RenewalReport), lists: ((await lister.ask('report')) as unknown as { lists: ListReport }).lists };
    const seconds = (performance.now() - cpu0.at) / 1000;
    const serverCores = (cpu(server.child.pid) - cpu0.server) / seconds;

    const silentCount = Math.max(1, Math.round((NODES * SILENT_PERCENT) / 100));
    const silent = Array.from({ length: silentCount }, (_, k) => Math.floor((k * NODES) / silentCount));
    const silentNames = new Set(silent.map(nodeName));
    const silencedAt = Number((await nodes.ask(`silence ${silent.join(',')}`)).at);
    const detected = (): number => [...silentNames].filter((name) => states.state.get(name) === 'Unavailable').length;
    await until('every silent node Unavailable', DETECT_CEILING_S * 1000, () => detected() === silentCount).catch(() => undefined);
    const during = { ...((await nodes.ask('report')) as unknown as RenewalReport), lists: ((await lister.ask('report')) as unknown as { lists: ListReport }).lists };
    const detectionS = [...silentNames]
      .map((name) => states.changes.find((c) => c.node === name && c.state === 'Unavailable' && c.at >= silencedAt))
      .filter((c) => c !== undefined)
      .map((c) => (c.at - silencedAt) / 1000)
      .sort((a, b) => a - b);
    const disruptions = (await api.json<{ items: { message?: string }[] }>('GET', '/api/v1/namespaces/kube-node-lease/events').catch(() => ({ items: [] }))).items
      .filter((e) => /ControlPlaneDisruption/.test(JSON.stringify(e)))
      .map((e) => e.message ?? '');
    const falseVerdicts = states.changes.filter((c) => c.at >= allReadyAt && !silentNames.has(c.node) && c.state !== 'Ready');
    // Last, the overload still on, in both passes alike: a scrape of /metrics costs the server a read
    // of every Node (its node-state gauge) and is suspected of delaying renewals into false suspicions.
    const scraped = await flowControlFigures(server);
    const levels = flowControl ? scraped : undefined;
    await lister.ask('bulk 0 0');
    const renewalTimeouts = (r: RenewalReport): number => r.errors; // every renewal error here was a missing answer, see firstError
    return {
      flowControl,
      ...(flowControl ? { maxRequestsInflight: inflight || 'default (200)' } : {}),
      nodes: NODES,
      listsPerSecondAsked: rate,
      ...(calibration ? { calibration: { renewalCores: round(calibration.renewalCores, 2), listCpuMs: round(calibration.listCpuS * 1000, 1), listMs: round(calibration.listMs, 1) } } : {}),
      serverCores: round(serverCores, 2),
      renewals: {
        perSecond: round(steady.ok / seconds, 1),
        sent: steady.sent,
        ok: steady.ok,
        tooMany: steady.tooMany,
        errors: renewalTimeouts(steady),
        ...(steady.firstError ? { firstError: steady.firstError } : {}),
        p50Ms: steady.p50 === null ? null : round(steady.p50, 1),
        p99Ms: steady.p99 === null ? null : round(steady.p99, 1),
        maxMs: steady.max === null ? null : round(steady.max, 1),
      },
      lists: {
        sent: steady.lists.sent,
        ok: steady.lists.ok,
        okPerSecond: round(steady.lists.ok / seconds, 1),
        tooMany: steady.lists.tooMany,
        timeouts: steady.lists.timeouts,
        errors: steady.lists.errors,
        skipped: steady.lists.skipped,
        ...(steady.lists.firstError ? { firstError: steady.lists.firstError } : {}),
        p99Ms: steady.lists.p99 === null ? null : round(steady.lists.p99, 1),
      },
      ...(levels ? { levelsAtEnd: levels } : {}),
      ...detectionFigures(silentCount, detectionS, falseVerdicts, disruptions),
      duringDetection: {
        renewalP99Ms: during.p99 === null ? null : round(during.p99, 1),
        renewalsOk: during.ok,
        renewalTooMany: during.tooMany,
        renewalErrors: during.errors,
        listsOk: during.lists.ok,
        listTooMany: during.lists.tooMany,
        listTimeouts: during.lists.timeouts,
      },
    };
  } finally {
    states.stop();
    for (const simulator of [lister, nodes]) {
      await simulator.ask('stop', 10_000).catch(() => undefined);
      await stopChild(simulator.child, 'SIGTERM', 5000);
    }
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 15_000);
    removeBenchTempDir(dir);
  }
}

/** The server's flow-control series from /metrics, per level: seats, executing, queued, refused. */
async function flowControlFigures(server: { url: string; adminToken: string; caPem: string }): Promise<Record<string, Record<string, number>>> {
  const text = await new Promise<string>((resolve, reject) => {
    https
      .get(`${server.url}/metrics`, { ca: server.caPem, headers: { Authorization: `Bearer ${server.adminToken}` } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
  const levels: Record<string, Record<string, number>> = {};
  for (const match of text.matchAll(/^drover_apiserver_flowcontrol_(\w+)\{level="([^"]+)"(?:,reason="([^"]+)")?\} (\S+)$/gm)) {
    const [, series, level, reason, value] = match;
    (levels[level!] ??= {})[reason ? `${series}_${reason}` : series!] = Number(value);
  }
  return levels;
}

function describeOverload(r: Record<string, unknown>): string {
  const renewals = r.renewals as Record<string, unknown>;
  const lists = r.lists as Record<string, unknown>;
  const detection = r.detected === r.silenced ? `${String(r.detected)}/${String(r.silenced)} detected, p50 ${String(r.detectionP50S)} s, max ${String(r.detectionMaxS)} s` : `only ${String(r.detected)}/${String(r.silenced)} detected within ${DETECT_CEILING_S} s`;
  return [
    `flow control ${r.flowControl ? 'on' : 'off'}: server ${String(r.serverCores)} cores`,
    `    renewals ${String(renewals.perSecond)}/s (${String(renewals.ok)}/${String(renewals.sent)} answered 200), 429s ${String(renewals.tooMany)}, timeouts and errors ${String(renewals.errors)}, p50 ${String(renewals.p50Ms)} ms, p99 ${String(renewals.p99Ms)} ms, max ${String(renewals.maxMs)} ms`,
    `    lists asked ${String(r.listsPerSecondAsked)}/s: ${String(lists.ok)} answered (${String(lists.okPerSecond)}/s), 429s ${String(lists.tooMany)}, timeouts ${String(lists.timeouts)}, errors ${String(lists.errors)}, not sent (${n['max-outstanding-lists']} unanswered) ${String(lists.skipped)}`,
    `    ${detection}; false verdicts ${String(r.falseVerdicts)}`,
    ...Object.entries((r.levelsAtEnd ?? {}) as Record<string, Record<string, number>>).map(([level, f]) => `    ${level}: ${JSON.stringify(f)}`),
    ...(r.controlPlaneDisruptions as string[]).map((m) => `    the controller said: ${m}`),
  ].join('\n');
}

async function overloadMain(machine: ReturnType<typeof machineInfo>): Promise<void> {
  const off = await runOverload(false, n['list-rate'] || undefined);
  console.log(describeOverload(off));
  const on = await runOverload(true, Number(off.listsPerSecondAsked));
  console.log(describeOverload(on));
  const r = (x: Record<string, unknown>, key: string): number => Number((x.renewals as Record<string, unknown>)[key]);
  const ratios = {
    renewalP99OnVsOff: round(r(on, 'p99Ms') / r(off, 'p99Ms'), 3),
    renewalsAnsweredOnVsOff: round(r(on, 'ok') / Math.max(1, r(off, 'ok')), 2),
  };
  console.log(`on / off: renewal p99 ${ratios.renewalP99OnVsOff}×, renewals answered ${ratios.renewalsAnsweredOnVsOff}×`);
  const file = writeResult('scale-overload', {
    benchmark: 'scale-overload',
    machine,
    options: { nodes: NODES, silentPercent: SILENT_PERCENT, warmupS: WARMUP_S, measureS: MEASURE_S, detectCeilingS: DETECT_CEILING_S, renewMs: RENEW_MS, listRate: n['list-rate'] || 'calibrated', maxOutstandingLists: n['max-outstanding-lists'], maxRequestsInflight: n['max-requests-inflight'] || 'default' },
    runs: [off, on],
    ratios,
  });
  console.log(`wrote ${file}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});

/** What a pass found of the silenced nodes and of false verdicts (`detectionS` sorted). */
function detectionFigures(silenced: number, detectionS: readonly number[], falseVerdicts: readonly unknown[], disruptions: readonly string[]): Record<string, unknown> {
  return {
    silenced,
    detected: detectionS.length,
    detectionP50S: detectionS.length ? round(detectionS[Math.floor(detectionS.length / 2)]!, 2) : null,
    detectionMaxS: detectionS.length ? round(detectionS[detectionS.length - 1]!, 2) : null,
    falseVerdicts: falseVerdicts.length,
    ...(falseVerdicts.length ? { firstFalseVerdicts: falseVerdicts.slice(0, 5) } : {}),
    controlPlaneDisruptions: disruptions.slice(0, 3),
  };
}
