/**
 * The Service datapath (table `ip drover-proxy`, src/agent/network/service-rules.ts) in a real
 * kernel, in network namespaces built for the run (test/helpers/netns-lab.ts; root needed):
 *
 * 1. Rebuild time at `--services` Services x `--endpoints` endpoints (default 1,000 x 10): the
 *    pure builder, the first apply into an empty table, a full rewrite over the existing table
 *    (every chain flushed and re-added, what a periodic resync or an agent restart does), and the
 *    partial sync one endpoint's change causes (only its Service's chains and the maps).
 * 2. Requests/s through a ClusterIP against the same pod's IP directly, same client, with that
 *    large table loaded: one pod runs a small Node HTTP server, the client pod runs `--concurrency`
 *    request loops for `--seconds` per round, a new TCP connection per request (the NAT's worst
 *    case: every request is a new conntrack entry through the Service's chains) and, in a second
 *    pair, over kept-alive connections. Rounds alternate which goes first so noise falls on both;
 *    the client's namespace reuses TIME_WAIT ports (else new connections to one address cap near 500/s).
 *
 *   node --import tsx bench/service-datapath.ts [--services 1000] [--endpoints 10] [--rebuilds 3]
 *                                              [--rounds 3] [--seconds 5] [--concurrency 8]
 *
 * Writes bench/results/service-datapath.json. Nothing here asserts a timing.
 */
import { performance } from 'node:perf_hooks';
import { Nft } from '../src/agent/network/nftables.js';
import { PROXY_TABLE, planServiceRules, type ServiceRulesInput } from '../src/agent/network/service-rules.js';
import type { KubeObject } from '../src/apiserver/objects.js';
import { defaultServiceNetwork } from '../src/node-protocol/service-network.js';
import { createNetnsLab, LAB_NODE_IP, type NetnsLab, netnsLabUnavailable } from '../test/helpers/netns-lab.js';
import { serviceObject, sliceObject } from '../test/helpers/service-objects.js';
import { installCleanup, machineInfo, median, onCleanup, parseBenchArgs, printMachine, round, sleep, writeResult } from './common.js';

const { n } = parseBenchArgs({
  services: { default: 1000, min: 1 },
  endpoints: { default: 10, min: 1 },
  rebuilds: { default: 3, min: 1 },
  rounds: { default: 3, min: 1 },
  seconds: { default: 5, min: 1 },
  concurrency: { default: 8, min: 1 },
  'shared-ports': { default: 0, min: 0 },
});
const GOAL_RATIO = 0.9;
const BENCH_IP = '10.43.200.1';

const why = netnsLabUnavailable();
if (why) throw new Error(`bench/service-datapath.ts ${why}`);
installCleanup();
const info = machineInfo();
printMachine(info);

/** `count` Services (ClusterIP + NodePort) with `endpoints` ready endpoints each, spread over 10 nodes. */
function bigCluster(count: number, endpoints: number): { services: KubeObject[]; slices: KubeObject[] } {
  const services: KubeObject[] = [];
  const slices: KubeObject[] = [];
  for (let i = 0; i < count; i++) {
    const name = `svc-${i}`;
    services.push(
      serviceObject(name, { type: 'NodePort', clusterIP: `10.43.${1 + (i >> 8)}.${i & 255}`, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30000 + (i % 2700) }] }, `ns-${i % 20}`),
    );
    const eps = Array.from({ length: endpoints }, (_, j) => ({ ip: `10.42.${(i * endpoints + j) >> 8 & 255}.${((i * endpoints + j) & 255) || 1}`, node: `node-${j % 10}` }));
    slices.push(sliceObject(name, eps, [{ name: 'http', port: 8080 }], { namespace: `ns-${i % 20}` }));
  }
  return { services, slices };
}

async function timed<T>(fn: () => Promise<T> | T): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - started };
}

interface RebuildSamples {
  ms: { build: number[]; applyEmpty: number[]; readNames: number[]; fullRewrite: number[]; partialOneEndpoint: number[] };
  rules: number;
  chains: number;
}

async function rebuilds(nft: Nft, input: Omit<ServiceRulesInput, 'existing'>): Promise<RebuildSamples> {
  const ms: RebuildSamples['ms'] = { build: [], applyEmpty: [], readNames: [], fullRewrite: [], partialOneEndpoint: [] };
  const out: RebuildSamples = { ms, rules: 0, chains: 0 };
  for (let r = 0; r < n.rebuilds; r++) {
    await nft.deleteTable('ip', PROXY_TABLE);
    const built = await timed(() => planServiceRules(input));
    ms.build.push(built.ms);
    out.rules = built.value.rules;
    out.chains = built.value.chains.length;
    ms.applyEmpty.push((await timed(() => nft.apply(built.value.script))).ms);
    // A full rewrite as the runner does it after a restart: read the names, build, apply.
    const full = await timed(async () => {
      const names = await nft.readNames('ip', PROXY_TABLE);
      const plan = planServiceRules({ ...input, existing: names });
      await nft.apply(plan.script);
      return plan;
    });
    const names = await timed(() => nft.readNames('ip', PROXY_TABLE));
    ms.readNames.push(names.ms);
    ms.fullRewrite.push(full.ms);
    // One endpoint of one Service replaced: build with what the kernel holds, apply (the old chain is emptied; deleted by the next sync).
    const slices = [...input.endpointSlices];
    const changed = structuredClone(slices[r % slices.length]!) as KubeObject & { endpoints: { addresses: string[] }[] };
    changed.endpoints[0]!.addresses = [`10.41.0.${r + 1}`];
    slices[r % slices.length] = changed;
    const partial = await timed(async () => {
      const plan = planServiceRules({ ...input, endpointSlices: slices, existing: { ...names.value, contents: full.value.contents, elements: full.value.elements } });
      await nft.apply(plan.script);
      return plan;
    });
    ms.partialOneEndpoint.push(partial.ms);
    console.log(
      `rebuild ${r + 1}/${n.rebuilds}: build ${round(built.ms, 0)} ms, apply into empty ${round(ms.applyEmpty.at(-1)!, 0)} ms, full rewrite ${round(full.ms, 0)} ms, ` +
        `one endpoint changed ${round(partial.ms, 0)} ms (${partial.value.writtenChains} chains written), read names ${round(names.ms, 0)} ms`,
    );
  }
  return out;
}

const SERVER = "require('http').createServer((q, s) => s.end('ok')).listen(8080, () => console.log('listening'))";
/** Runs request loops for `seconds`; prints {requests, errors, seconds}. argv: url seconds concurrency keepalive */
const CLIENT = `
const http = require('http');
const [url, seconds, concurrency, keepAlive] = process.argv.slice(1);
const agent = keepAlive === '1' ? new http.Agent({ keepAlive: true, maxSockets: Number(concurrency) }) : false;
const end = Date.now() + Number(seconds) * 1000;
let requests = 0, errors = 0;
function one() {
  return new Promise((resolve) => {
    const req = http.get(url, { agent }, (res) => { res.resume(); res.on('end', () => { requests++; resolve(); }); });
    req.on('error', () => { errors++; resolve(); });
  });
}
async function loop() { while (Date.now() < end) await one(); }
const started = Date.now();
Promise.all(Array.from({ length: Number(concurrency) }, loop)).then(() => {
  console.log(JSON.stringify({ requests, errors, seconds: (Date.now() - started) / 1000 }));
  if (agent) agent.destroy();
});
`;

/** The client namespace's count of retransmitted SYNs (a connection that waited 1 s for its second try). */
async function synRetransmits(lab: NetnsLab): Promise<number> {
  const { stdout } = await lab.exec(lab.client.netns, ['cat', '/proc/net/netstat']);
  const [names, values] = stdout.split('\n').filter((l) => l.startsWith('TcpExt:')).map((l) => l.split(/\s+/));
  const at = names?.indexOf('TCPSynRetrans') ?? -1;
  return at > 0 ? Number(values![at]) : Number.NaN;
}

/**
 * Each target gets its own half of the client's ports. With one range, a port used for the pod's
 * address is soon reused for the ClusterIP: the server still holds that 4-tuple in TIME_WAIT from
 * the direct run, and the client's TCP timestamps (offset per destination address, so unrelated
 * between the two targets) may look older, so the SYN is dropped and retried a second later; the
 * node's conntrack also holds the direct flow's reply tuple, which the DNAT'd flow clashes with.
 * A real client does not alternate between a pod's address and its Service's thousands of times
 * a second, so the bench keeps the two apart rather than measure that artefact.
 */
const PORT_RANGES = { direct: '1024 33279', service: '33280 65535' } as const;

async function load(lab: NetnsLab, url: string, keepAlive: boolean): Promise<{ rps: number; errors: number; synRetransmits: number }> {
  const range = n['shared-ports'] ? '1024 65535' : url.includes(BENCH_IP) ? PORT_RANGES.service : PORT_RANGES.direct;
  await lab.exec(lab.client.netns, ['sysctl', '-qw', `net.ipv4.ip_local_port_range=${range}`]);
  const synBefore = await synRetransmits(lab);
  const { code, stdout, stderr } = await lab.exec(lab.client.netns, [process.execPath, '-e', CLIENT, url, String(n.seconds), String(n.concurrency), keepAlive ? '1' : '0'], (n.seconds + 60) * 1000);
  if (code !== 0) throw new Error(`client failed (${code}): ${stderr}`);
  const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as { requests: number; errors: number; seconds: number };
  return { rps: result.requests / result.seconds, errors: result.errors, synRetransmits: (await synRetransmits(lab)) - synBefore };
}

const lab = createNetnsLab('bench', 1);
onCleanup(() => lab.destroy());
try {
  const nft = new Nft(lab.nft);
  const network = defaultServiceNetwork();
  const { services, slices } = bigCluster(n.services, n.endpoints);
  const pod = lab.pods[0]!;
  // The measured Service: one endpoint, the pod the direct runs reach.
  services.push(serviceObject('bench', { clusterIP: BENCH_IP, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
  slices.push(sliceObject('bench', [{ ip: pod.ip, node: 'lab-node' }], [{ name: 'http', port: 8080 }]));
  const input = { services, endpointSlices: slices, nodeName: 'lab-node', nodeAddresses: [LAB_NODE_IP], network };
  console.log(`# ${n.services} Services x ${n.endpoints} endpoints`);
  const rebuild = await rebuilds(nft, input);

  const server = lab.spawn(pod.netns, [process.execPath, '-e', SERVER]);
  await new Promise<void>((resolve, reject) => {
    server.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('listening') && resolve());
    server.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  const direct = `http://${pod.ip}:8080/`;
  const viaService = `http://${BENCH_IP}/`;
  const samples: Record<string, number[]> = { directNew: [], serviceNew: [], directKeepAlive: [], serviceKeepAlive: [] };
  const synRetransmitted: Record<string, number[]> = { directNew: [], serviceNew: [], directKeepAlive: [], serviceKeepAlive: [] };
  let errors = 0;
  // A new connection per request leaves one TIME_WAIT per request on the client: without reuse
  // and a wide port range, the 4-tuples to one address run out near 500/s and cap both targets.
  await lab.exec(lab.client.netns, ['sysctl', '-qw', 'net.ipv4.tcp_tw_reuse=1']);
  for (const url of [direct, viaService]) for (const keep of [false, true]) await load(lab, url, keep); // warm-up
  for (let r = 0; r < n.rounds; r++) {
    const pairs = [
      [
        ['directNew', direct, false],
        ['serviceNew', viaService, false],
      ],
      [
        ['directKeepAlive', direct, true],
        ['serviceKeepAlive', viaService, true],
      ],
    ] as const;
    // Odd rounds go ClusterIP first, so neither target always runs on a warmer machine.
    const order = pairs.flatMap((pair) => (r % 2 === 0 ? [...pair] : [...pair].reverse()));
    for (const [key, url, keep] of order) {
      const result = await load(lab, url, keep);
      samples[key]!.push(result.rps);
      synRetransmitted[key]!.push(result.synRetransmits);
      errors += result.errors;
      await sleep(200);
    }
    console.log(
      `round ${r + 1}/${n.rounds}: new connection per request: direct ${round(samples.directNew!.at(-1)!, 0)}/s, ClusterIP ${round(samples.serviceNew!.at(-1)!, 0)}/s; ` +
        `kept alive: direct ${round(samples.directKeepAlive!.at(-1)!, 0)}/s, ClusterIP ${round(samples.serviceKeepAlive!.at(-1)!, 0)}/s; ` +
        `SYNs retransmitted (new connections): direct ${synRetransmitted.directNew!.at(-1)}, ClusterIP ${synRetransmitted.serviceNew!.at(-1)}`,
    );
  }
  const med = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, round(median(v), 0)]));
  // Each round runs its two targets back to back, so their ratio shares the machine's state of
  // the moment; the median of those paired ratios holds even when a neighbour's load changes the
  // machine's speed from round to round (a ratio of medians does not: it pairs unrelated rounds).
  const pairedRatios = (over: number[], base: number[]): number[] => over.map((v, i) => round(v / base[i]!, 3));
  const roundRatiosNew = pairedRatios(samples.serviceNew!, samples.directNew!);
  const roundRatiosKeepAlive = pairedRatios(samples.serviceKeepAlive!, samples.directKeepAlive!);
  const ratioNew = round(median(roundRatiosNew), 3);
  const ratioKeepAlive = round(median(roundRatiosKeepAlive), 3);
  const rebuildMedians = Object.fromEntries(Object.entries(rebuild.ms).map(([k, v]) => [k, round(median(v), 0)]));
  console.log(`\nrequests/s (median of ${n.rounds} rounds of ${n.seconds} s, ${n.concurrency} loops): ${JSON.stringify(med)}`);
  console.log(
    `ratio ClusterIP / direct, median of the rounds' ratios: new connections ${ratioNew} (${roundRatiosNew.join(' ')}), ` +
      `kept alive ${ratioKeepAlive} (${roundRatiosKeepAlive.join(' ')}) (goal >= ${GOAL_RATIO}); request errors ${errors}`,
  );
  console.log(`rebuild at ${n.services} x ${n.endpoints} (${rebuild.rules} rules, ${rebuild.chains} chains), median ms: ${JSON.stringify(rebuildMedians)}`);
  const loadAfter = machineInfo().loadAverage;
  const file = writeResult('service-datapath', {
    machine: info,
    loadAverageAfter: loadAfter,
    options: n,
    throughput: { medians: med, samples, synRetransmitted, sharedPorts: n['shared-ports'] === 1, ratioNewConnections: ratioNew, ratioKeepAlive, roundRatiosNew, roundRatiosKeepAlive, goalRatio: GOAL_RATIO, errors },
    rebuild: { services: n.services, endpointsPerService: n.endpoints, rules: rebuild.rules, chains: rebuild.chains, mediansMs: rebuildMedians, samplesMs: rebuild.ms },
  });
  console.log(`wrote ${file}`);
} finally {
  lab.destroy();
}
