/**
 * Cluster DNS: queries/s and latency for a Service name answered by the cluster DNS from its
 * informers' snapshot, against an outside name answered from its cache of upstream answers (what
 * a node's caching resolver gives), the forwarded path proper (a fresh name each query: the
 * upstream is asked every time) and the stand-in upstream asked directly (the floor: a Node DNS
 * server with nothing to look up), in one run, interleaved so the machine's noise falls on all.
 *
 *   npm run build && node --import tsx bench/dns.ts [--rounds 3] [--seconds 3] [--window 8] [--services 200]
 *
 * Root (it makes a network namespace `drover-b<pid>-dns`, removed on every exit path). One
 * `drover server --disable-agent` (reached from the namespace through a veth pair) holding
 * `--services` ClusterIP Services; inside the namespace: the ClusterDns process of the tests
 * (test/helpers/cluster-dns-node.ts) on 10.43.0.10, the stand-in upstream
 * (test/helpers/fake-dns-upstream.ts) on the namespace's veth address, and the load generator
 * (bench/dns-load.ts: `--window` queries in flight on one UDP socket for `--seconds`). Writes
 * bench/results/dns.json: every sample, the medians per mode, the ratios, the load average before
 * and after. `DNS_BENCH_PROFILE=<dir>` writes a CPU profile of the cluster DNS process there.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { createTestNetwork, type TestNetwork } from '../test/helpers/netns.js';
import {
  BenchApi,
  benchTempDir,
  captureOutput,
  checkBuild,
  installCleanup,
  machineInfo,
  median,
  onCleanup,
  parseBenchArgs,
  printMachine,
  REPO_ROOT,
  round,
  sleep,
  startBenchServer,
  stopChild,
  track,
  writeResult,
} from './common.js';

const { n } = parseBenchArgs({ rounds: { default: 3, min: 1 }, seconds: { default: 3, min: 1 }, window: { default: 8, min: 1 }, services: { default: 200, min: 1 } });
// The node's namespace (test/helpers/netns.ts, no default route), made in main() once root is checked.
let net: TestNetwork | undefined;
const node = (): { netns: string; ip: string; hostIp: string } => ({ ...net!.hosts[0]!, hostIp: net!.hostIp });
const CLUSTER_DNS = '10.43.0.10';
const TSX = ['--import', 'tsx'];

interface LoadResult {
  answered: number;
  lost: number;
  seconds: number;
  qps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  rcodes: Record<string, number>;
}

const MODES = {
  service: { server: CLUSTER_DNS, name: 'web.default.svc.cluster.local', unique: false, what: 'a Service name, from the cluster DNS snapshot' },
  cached: { server: CLUSTER_DNS, name: 'www.example.test', unique: false, what: 'an outside name, from the cluster DNS cache of upstream answers' },
  forwarded: { server: CLUSTER_DNS, name: 'example.test', unique: true, what: 'a fresh outside name each query, forwarded to the upstream' },
  upstream: { server: 'the node', name: 'www.example.test', unique: false, what: 'the stand-in upstream asked directly (floor)' },
} as const;
type Mode = keyof typeof MODES;

function inNetns(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  return track(spawn('ip', ['netns', 'exec', node().netns, process.execPath, ...TSX, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } }));
}

async function waitFor(child: ChildProcess, output: () => string, marker: string, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!output().includes(marker)) {
    if (child.exitCode !== null) throw new Error(`${what} exited ${child.exitCode}:\n${output()}`);
    if (Date.now() > deadline) throw new Error(`${what} not ready in ${timeoutMs} ms:\n${output()}`);
    await sleep(50);
  }
}

async function load(mode: Mode): Promise<LoadResult> {
  const { name, unique } = MODES[mode];
  const server = MODES[mode].server === 'the node' ? node().ip : MODES[mode].server;
  const child = inNetns(['bench/dns-load.ts', JSON.stringify({ server, name, type: 'A', seconds: n.seconds, window: n.window, unique })]);
  const output = captureOutput(child);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`load generator (${mode}) exited ${code}:\n${output()}`);
  return JSON.parse(output().trim().split('\n').pop()!) as LoadResult;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/dns.ts needs root (it makes a network namespace)');
  checkBuild();
  installCleanup();
  net = createTestNetwork(1, { tag: 'b', defaultRoute: false });
  onCleanup(() => net?.remove());
  const before = machineInfo();
  printMachine(before);


  const work = benchTempDir('drover-bench-dns-');
  const server = await startBenchServer(path.join(work, 'server'), path.join(work, 'server.log'), ['--bind-address', '0.0.0.0', '--tls-san', node().hostIp]);
  const api = new BenchApi(server);
  await api.json('POST', '/api/v1/namespaces/default/services', { metadata: { name: 'web' }, spec: { ports: [{ name: 'http', port: 80 }] } });
  for (let i = 1; i < n.services; i++) {
    await api.json('POST', '/api/v1/namespaces/default/services', { metadata: { name: `svc-${i}` }, spec: { ports: [{ name: 'http', port: 80 }] } });
  }
  api.destroy();
  console.log(`# ${n.services} Services created`);

  const upstream = inNetns(['test/helpers/fake-dns-upstream.ts', node().ip, '53'], { FAKE_DNS_QUIET: '1' });
  const upstreamOutput = captureOutput(upstream);
  await waitFor(upstream, upstreamOutput, '"ready":true', 'the stand-in upstream');
  const dns = inNetns(
    [...(process.env.DNS_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.DNS_BENCH_PROFILE}`] : []), 'test/helpers/cluster-dns-node.ts', JSON.stringify({ server: `https://${node().hostIp}:${server.url.split(':').pop()}`, caPem: server.caPem, token: server.adminToken, upstreams: [`${node().ip}:53`] })],
    { DROVER_DNS_LOG_LEVEL: 'warn' },
  );
  const dnsOutput = captureOutput(dns);
  await waitFor(dns, dnsOutput, '"ready":true', 'the cluster DNS process');

  const samples: Record<Mode, LoadResult[]> = { service: [], cached: [], forwarded: [], upstream: [] };
  // One short warm-up of each path (JIT, the cache's first fill), not counted.
  for (const mode of Object.keys(MODES) as Mode[]) await load(mode);
  for (let r = 1; r <= n.rounds; r++) {
    for (const mode of Object.keys(MODES) as Mode[]) {
      const result = await load(mode);
      samples[mode].push(result);
      console.log(`round ${r} ${mode.padEnd(9)} ${String(result.qps).padStart(6)} q/s  p50 ${result.p50Ms} ms  p99 ${result.p99Ms} ms  lost ${result.lost}  ${JSON.stringify(result.rcodes)}`);
    }
  }
  await stopChild(dns);
  await stopChild(upstream);
  await stopChild(server.child);

  const summary = Object.fromEntries(
    (Object.keys(MODES) as Mode[]).map((mode) => [
      mode,
      {
        what: MODES[mode].what,
        qps: median(samples[mode].map((s) => s.qps)),
        p50Ms: median(samples[mode].map((s) => s.p50Ms)),
        p99Ms: median(samples[mode].map((s) => s.p99Ms)),
        lost: samples[mode].reduce((sum, s) => sum + s.lost, 0),
      },
    ]),
  ) as Record<Mode, { what: string; qps: number; p50Ms: number; p99Ms: number; lost: number }>;
  const ratios = {
    serviceVsCachedQps: round(summary.service.qps / summary.cached.qps),
    serviceVsCachedP99: round(summary.service.p99Ms / summary.cached.p99Ms),
    serviceVsForwardedQps: round(summary.service.qps / summary.forwarded.qps),
    serviceVsUpstreamFloorQps: round(summary.service.qps / summary.upstream.qps),
  };
  const after = machineInfo();
  console.log('\nmedians over rounds:');
  for (const [mode, s] of Object.entries(summary)) console.log(`  ${mode.padEnd(9)} ${String(s.qps).padStart(6)} q/s  p50 ${s.p50Ms} ms  p99 ${s.p99Ms} ms  lost ${s.lost}  (${s.what})`);
  console.log(`ratios: ${JSON.stringify(ratios)}`);
  console.log(`# load before ${before.loadAverage.join(' ')}, after ${after.loadAverage.join(' ')}`);
  const file = writeResult('dns', {
    machine: before,
    loadAfter: after.loadAverage,
    options: { rounds: n.rounds, seconds: n.seconds, window: n.window, services: n.services },
    summary,
    ratios,
    samples,
  });
  console.log(`# wrote ${file}`);
  net.remove();
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
