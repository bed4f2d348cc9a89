/**
 * Endpoint propagation: a pod turning Ready (`--from pod`, the default: its status write, then the
 * leader's endpoints controller writing the slice) or an EndpointSlice write (`--from slice`)
 * through the API until the endpoint's rule is in the kernel of every node, with `--nodes` ServiceProxy runners (default 3, each its own process
 * as agents are, each programming its own network namespace) following one `drover server
 * --disable-agent`, and `--services` Services (default 1,000) of 10 endpoints each in the cluster.
 *
 * `--from pod`: one more Service selects pods `app=prop`; each trial creates such a pod (bound to
 * a node by name, no agent behind it), then, timed, writes its status Running with an address and
 * Ready, as its agent would, until each runner's sync put the endpoint's chain in its table (the
 * runner's `onSync`, right after `nft` returned). `--from slice`: each trial adds one endpoint to
 * one Service's hand-written slice (a PUT), timed the same way.
 *
 *   npm run build && node --import tsx bench/service-propagation.ts [--from pod|slice] [--services 1000] [--nodes 3] [--trials 20]
 *
 * Writes bench/results/service-propagation.json. Root needed (network namespaces, nft).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { KubeObject } from '../src/apiserver/objects.js';
import { netnsLabUnavailable } from '../test/helpers/netns-lab.js';
import { serviceObject, sliceObject } from '../test/helpers/service-objects.js';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  installCleanup,
  machineInfo,
  onCleanup,
  parseBenchArgs,
  percentile,
  printMachine,
  REPO_ROOT,
  round,
  sleep,
  startBenchServer,
  track,
  writeResult,
} from './common.js';

const FROM = process.argv.includes('--from') ? process.argv[process.argv.indexOf('--from') + 1] : 'pod';
if (FROM !== 'pod' && FROM !== 'slice') throw new Error('--from must be pod or slice');
const argv = process.argv.filter((a, i, all) => a !== '--from' && all[i - 1] !== '--from');
process.argv.splice(0, process.argv.length, ...argv);
const { n } = parseBenchArgs({
  services: { default: 1000, min: 1 },
  nodes: { default: 3, min: 1 },
  trials: { default: 20, min: 1 },
  endpoints: { default: 10, min: 1 },
});
const GOAL_P99_MS = 1000;
const why = netnsLabUnavailable();
if (why) throw new Error(`bench/service-propagation.ts ${why}`);
checkBuild();
installCleanup();
const info = machineInfo();
printMachine(info);

const DIST = pathToFileURL(path.join(REPO_ROOT, 'dist')).href;
/** One node's runner: a ServiceProxy on the admin client, nft in its namespace; prints {ip, at} for new 10.41.x.y endpoints. */
const RUNNER = `
const { ServiceProxy } = await import('${DIST}/agent/network/service-proxy.js');
const { HttpClient } = await import('${DIST}/client/http.js');
const { createLogger } = await import('${DIST}/logging/logger.js');
const { defaultServiceNetwork } = await import('${DIST}/node-protocol/service-network.js');
const env = process.env;
const client = new HttpClient({ server: env.BENCH_URL, caPem: env.BENCH_CA, token: env.BENCH_TOKEN });
const seen = new Set();
const proxy = new ServiceProxy({
  client: () => client, nodeName: env.BENCH_NODE, nodeAddresses: () => ['192.168.77.1'], network: defaultServiceNetwork(),
  logger: createLogger('warn'), nft: ['ip', 'netns', 'exec', env.BENCH_NETNS, 'nft'],
  onSync: (sync) => {
    const at = Date.now();
    for (const chain of sync.chains) {
      const m = /__(10\\.41\\.\\d+\\.\\d+)\\//.exec(chain);
      if (m && !seen.has(m[1])) { seen.add(m[1]); console.log(JSON.stringify({ ip: m[1], at })); }
    }
    console.log(JSON.stringify({ sync: sync.servicePorts, ms: sync.ms, written: sync.written }));
  },
});
await proxy.start();
`;

interface Runner {
  child: ChildProcess;
  netns: string;
  /** When each watched endpoint reached this node's kernel (epoch ms). */
  arrived: Map<string, number>;
  firstFull: Promise<number>;
  syncs: { servicePorts: number; ms: number; written: number }[];
}

const work = benchTempDir('drover-bench-propagation-');
// Hand-made Nodes (no agents): a grace period so long the lifecycle never judges them lost.
const server = await startBenchServer(path.join(work, 'server'), path.join(work, 'server.log'), ['--node-monitor-grace-period', '1h']);
const api = new BenchApi(server, 16);
const netnsNames: string[] = [];
onCleanup(() => {
  for (const netns of netnsNames) {
    try {
      execFileSync('ip', ['netns', 'del', netns], { stdio: 'ignore' });
    } catch {
      // gone
    }
  }
});

try {
  // The cluster: selector-less Services with hand-written slices (the endpoints controller leaves them alone).
  const started = Date.now();
  const slices = new Map<string, KubeObject>();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= n.services) return;
      const name = `svc-${i}`;
      await api.json('POST', '/api/v1/namespaces/default/services', serviceObject(name, { ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
      const eps = Array.from({ length: n.endpoints }, (_, j) => ({ ip: `10.42.${(i * n.endpoints + j) >> 8 & 255}.${((i * n.endpoints + j) & 255) || 1}`, node: `node-${j % n.nodes}` }));
      const slice = sliceObject(name, eps, [{ name: 'http', port: 8080 }]);
      slices.set(name, slice);
      await api.json('POST', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', slice);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  if (FROM === 'pod') {
    // The endpoints controller lists a pod as ready only on a Node it knows and has not lost.
    for (let i = 0; i < n.nodes; i++) await api.json('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: `node-${i}` } });
    await api.json('POST', '/api/v1/namespaces/default/services', { ...serviceObject('prop', { ports: [{ name: 'http', port: 80, targetPort: 8080 }] }), spec: { selector: { app: 'prop' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] } });
  }
  console.log(`created ${n.services} Services and slices (${n.endpoints} endpoints each) in ${round((Date.now() - started) / 1000, 1)} s`);

  const runners: Runner[] = [];
  for (let i = 0; i < n.nodes; i++) {
    const netns = `drover-t${process.pid}-prop${i}`;
    execFileSync('ip', ['netns', 'add', netns]);
    netnsNames.push(netns);
    const child = track(
      spawn(process.execPath, ['--input-type=module', '-e', RUNNER], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, BENCH_URL: server.url, BENCH_CA: server.caPem, BENCH_TOKEN: server.adminToken, BENCH_NODE: `node-${i}`, BENCH_NETNS: netns },
      }),
    );
    const runner: Runner = { child, netns, arrived: new Map(), syncs: [], firstFull: Promise.resolve(0) };
    runner.firstFull = new Promise((resolve, reject) => {
      let buffered = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        const lines = buffered.split('\n');
        buffered = lines.pop()!;
        for (const line of lines) {
          const event = JSON.parse(line) as { ip?: string; at?: number; sync?: number; ms?: number; written?: number };
          if (event.ip) runner.arrived.set(event.ip, event.at!);
          if (event.sync !== undefined) {
            runner.syncs.push({ servicePorts: event.sync, ms: event.ms!, written: event.written! });
            if (event.sync >= n.services) resolve(event.ms!);
          }
        }
      });
      child.stderr!.on('data', (chunk: Buffer) => process.stderr.write(chunk));
      child.once('exit', (code) => reject(new Error(`runner ${i} exited ${code}`)));
    });
    runners.push(runner);
  }
  const firstSyncMs = await Promise.all(runners.map((r) => r.firstFull));
  console.log(`first full syncs (ms): ${firstSyncMs.join(', ')}`);

  const latencies: number[] = [];
  const perNode: number[] = [];
  for (let t = 0; t < n.trials; t++) {
    const ip = `10.41.${t >> 8}.${(t & 255) + 1}`;
    let name: string;
    let t0: number;
    if (FROM === 'pod') {
      name = `prop-${t}`;
      const pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, labels: { app: 'prop' } },
        spec: { nodeName: 'node-0', containers: [{ name: 'c', image: 'prop', command: ['sleep', '1'] }] },
      };
      const created = await api.json<KubeObject>('POST', '/api/v1/namespaces/default/pods', pod);
      const now = new Date().toISOString();
      const status = {
        phase: 'Running',
        podIP: ip,
        podIPs: [{ ip }],
        conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: now }, { type: 'ContainersReady', status: 'True', lastTransitionTime: now }],
        containerStatuses: [{ name: 'c', ready: true, restartCount: 0, image: 'prop', imageID: '', state: { running: { startedAt: now } } }],
      };
      t0 = Date.now();
      await api.json('PUT', `/api/v1/namespaces/default/pods/${name}/status`, { ...created, status });
    } else {
      name = `svc-${(t * 37) % n.services}`;
      const slice = slices.get(name)!;
      slice.endpoints = [...(slice.endpoints as unknown[]), { addresses: [ip], conditions: { ready: true }, nodeName: 'node-0' }];
      t0 = Date.now();
      // A PUT without resourceVersion: unconditional, as the only writer of these slices.
      await api.json('PUT', `/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/${name}-a`, slice);
    }
    const deadline = Date.now() + 60_000;
    while (runners.some((r) => !r.arrived.has(ip))) {
      if (Date.now() > deadline) throw new Error(`endpoint ${ip} did not reach every node in 60 s`);
      await sleep(10);
    }
    const each = runners.map((r) => r.arrived.get(ip)! - t0);
    perNode.push(...each);
    latencies.push(Math.max(...each));
    console.log(`trial ${t + 1}/${n.trials}: ${name} +${ip}: ${each.join(' / ')} ms (all nodes ${Math.max(...each)} ms)`);
    await sleep(300);
  }
  const sorted = [...latencies].sort((a, b) => a - b);
  const sortedNode = [...perNode].sort((a, b) => a - b);
  const summary = {
    allNodesP50Ms: percentile(sorted, 50),
    allNodesP99Ms: percentile(sorted, 99),
    allNodesMaxMs: sorted.at(-1),
    perNodeP50Ms: percentile(sortedNode, 50),
    perNodeP99Ms: percentile(sortedNode, 99),
    goalP99Ms: GOAL_P99_MS,
  };
  console.log(`\n${FROM === 'pod' ? 'pod Ready' : 'slice PUT'} -> rule on all ${n.nodes} nodes: p50 ${summary.allNodesP50Ms} ms, p99 ${summary.allNodesP99Ms} ms (goal <= ${GOAL_P99_MS} ms); per node p50 ${summary.perNodeP50Ms} ms, p99 ${summary.perNodeP99Ms} ms`);
  const file = writeResult(FROM === 'pod' ? 'service-propagation-pod' : 'service-propagation', {
    machine: info,
    loadAverageAfter: machineInfo().loadAverage,
    options: { ...n, from: FROM },
    summary,
    firstFullSyncMs: firstSyncMs,
    trialsMs: latencies,
    perNodeMs: perNode,
    syncs: runners.map((r) => r.syncs.slice(-n.trials * 2)),
  });
  console.log(`wrote ${file}`);
  for (const r of runners) r.child.kill('SIGTERM');
} finally {
  api.destroy();
}
// The exit hook (installCleanup) kills the server and the runners and removes the namespaces and temp dir.
process.exit(0);
