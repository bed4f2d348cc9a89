/**
 * What one compare-and-swap write costs on the etcd path besides the server's own work, and what
 * of it the server could still choose: the etcd3 client (grpc-js) doing the update transaction
 * Drover's etcd datastore sends (two compares, a put and a keys-only range; a failure range; a
 * 30 s deadline), 50 at a time, against one fresh etcd member, with
 *
 * - `no watch`       (the baseline: writes only),
 * - `watch`          a prefix watch over the written keys, as Drover's shared watch, without prev_kv,
 * - `watch+prev_kv`  the same watch asking for each event's previous value, as Drover's does,
 * - `no retry/channelz` the baseline with grpc-js's retry machinery and channelz turned off
 *                    (`grpc.enable_retries: 0`, `grpc.enable_channelz: 0`).
 *
 * Each variant has its own client (its own HTTP/2 connection) and its own keys; rounds alternate
 * the order. It prints, per variant, writes a second, this process's CPU per write (the client and
 * the watch decoding) and etcd's CPU per write (from /proc), each as a ratio to the baseline
 * measured in the same rounds, and writes `results/etcd-client-cost.json`. (Issue 18: what would
 * move the etcd / SQLite node-status PATCH ratio of bench/etcd.ts; docs/benchmarks.md.)
 *
 *   node --import tsx bench/etcd-client-cost.ts [--rounds 6] [--round-s 3] [--concurrency 50]
 *        [--keys 200] [--value-bytes 2048]
 */
import { Etcd3, type IOptions, type Watcher } from 'etcd3';

import { ETCD_GRPC_OPTIONS } from '../src/datastore/etcd/client.js';

import {
  benchTempDir,
  installCleanup,
  machineInfo,
  median,
  parseBenchArgs,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  sleep,
  writeResult,
} from './common.js';
import { startEtcd } from './etcd-process.js';
import { rawOps } from './etcd-raw-ops.js';

const { n } = parseBenchArgs({
  rounds: { default: 6, min: 1 },
  'round-s': { default: 3, min: 1 },
  concurrency: { default: 50, min: 1 },
  keys: { default: 200, min: 1 },
  'value-bytes': { default: 2048, min: 1 },
});
const { rounds: ROUNDS, 'round-s': ROUND_S, concurrency: CONCURRENCY, keys: KEYS, 'value-bytes': VALUE_BYTES } = n;

interface Variant {
  name: string;
  grpc: NonNullable<IOptions['grpcOptions']>;
  watch: 'none' | 'plain' | 'prev_kv';
}
const VARIANTS: Variant[] = [
  { name: 'no watch', grpc: ETCD_GRPC_OPTIONS, watch: 'none' },
  { name: 'watch', grpc: ETCD_GRPC_OPTIONS, watch: 'plain' },
  { name: 'watch+prev_kv', grpc: ETCD_GRPC_OPTIONS, watch: 'prev_kv' },
  { name: 'no retry/channelz', grpc: { ...ETCD_GRPC_OPTIONS, 'grpc.enable_retries': 0, 'grpc.enable_channelz': 0 }, watch: 'none' },
];
const BASELINE = VARIANTS[0]!;

interface Round {
  writesPerSecond: number;
  clientCpuUsPerWrite: number;
  etcdCpuUsPerWrite: number;
  eventsSeen: number;
}

installCleanup();
printMachine(machineInfo());
const tmp = benchTempDir('drover-bench-etcd-client-');
const etcd = await startEtcd(tmp);
const value = Buffer.alloc(VALUE_BYTES, 'x');
const clients = new Map(VARIANTS.map((v) => [v, new Etcd3({ hosts: [etcd.endpoint], grpcOptions: v.grpc })]));
// Each variant's update is the transaction Drover's etcd datastore sends.
const ops = new Map([...clients].map(([v, client]) => [v, rawOps(client, true)]));
const modRevision = new Map<string, number>();
const keyOf = (v: Variant, i: number): string => `/bench/${VARIANTS.indexOf(v)}/${String(i).padStart(5, '0')}`;

for (const [v, op] of ops) {
  for (let i = 0; i < KEYS; i++) modRevision.set(keyOf(v, i), await op.create(keyOf(v, i), value));
}

/** One variant for ROUND_S seconds: CONCURRENCY writers, each taking the next key in turn. */
async function measure(v: Variant): Promise<Round> {
  const client = clients.get(v)!;
  const op = ops.get(v)!;
  let eventsSeen = 0;
  let watcher: Watcher | undefined;
  if (v.watch !== 'none') {
    const builder = client.watch().prefix(`/bench/${VARIANTS.indexOf(v)}/`);
    watcher = await (v.watch === 'prev_kv' ? builder.withPreviousKV() : builder).create();
    watcher.on('data', (response) => {
      eventsSeen += response.events.length;
    });
  }
  let writes = 0;
  const end = Date.now() + ROUND_S * 1000;
  const cpuBefore = process.cpuUsage();
  const etcdBefore = processCpuSeconds(etcd.pid);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, worker) => {
      for (let i = worker; Date.now() < end; i += CONCURRENCY) {
        const key = keyOf(v, i % KEYS);
        modRevision.set(key, await op.update(key, value, modRevision.get(key)!));
        writes++;
      }
    }),
  );
  // The watch's last events are the same round's work.
  if (watcher) {
    const ceiling = Date.now() + 5000;
    while (eventsSeen < writes && Date.now() < ceiling) await sleep(20);
  }
  const cpu = process.cpuUsage(cpuBefore);
  const etcdSeconds = processCpuSeconds(etcd.pid) - etcdBefore;
  await watcher?.cancel();
  return {
    writesPerSecond: writes / ROUND_S,
    clientCpuUsPerWrite: (cpu.user + cpu.system) / writes,
    etcdCpuUsPerWrite: (etcdSeconds * 1e6) / writes,
    eventsSeen,
  };
}

console.log(
  `# ${CONCURRENCY} writers, ${KEYS} keys of ${VALUE_BYTES} bytes per variant, ${ROUNDS} rounds x ${ROUND_S} s, order alternating`,
);
for (const v of VARIANTS) await measure(v); // warm-up: connections, JIT
const results = new Map<Variant, Round[]>(VARIANTS.map((v) => [v, []]));
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? VARIANTS : [...VARIANTS].reverse();
  for (const v of order) results.get(v)!.push(await measure(v));
}

/** Per-round ratio to the baseline of the same round, then the median. */
const ratio = (v: Variant, pick: (r: Round) => number): number =>
  median(results.get(v)!.map((r, i) => pick(r) / pick(results.get(BASELINE)![i]!)));
const summary = VARIANTS.map((v) => {
  const rs = results.get(v)!;
  return {
    variant: v.name,
    writesPerSecond: round(median(rs.map((r) => r.writesPerSecond)), 0),
    clientCpuUsPerWrite: round(median(rs.map((r) => r.clientCpuUsPerWrite)), 0),
    etcdCpuUsPerWrite: round(median(rs.map((r) => r.etcdCpuUsPerWrite)), 0),
    vsBaseline: {
      writesPerSecond: round(ratio(v, (r) => r.writesPerSecond), 3),
      clientCpu: round(ratio(v, (r) => r.clientCpuUsPerWrite), 3),
      etcdCpu: round(ratio(v, (r) => r.etcdCpuUsPerWrite), 3),
    },
    eventsMissing: v.watch === 'none' ? 0 : rs.reduce((sum, r) => sum + Math.max(0, Math.round(r.writesPerSecond * ROUND_S) - r.eventsSeen), 0),
  };
});
for (const s of summary) {
  console.log(
    `  ${s.variant.padEnd(18)} ${String(s.writesPerSecond).padStart(6)} writes/s (x${s.vsBaseline.writesPerSecond.toFixed(2)})  ` +
      `client ${s.clientCpuUsPerWrite} us/write (x${s.vsBaseline.clientCpu.toFixed(2)})  ` +
      `etcd ${s.etcdCpuUsPerWrite} us/write (x${s.vsBaseline.etcdCpu.toFixed(2)})` +
      (s.eventsMissing ? `  (${s.eventsMissing} watch events missing)` : ''),
  );
}
console.log('  (medians of rounds; x: median of the per-round ratios to "no watch")');
const file = writeResult('etcd-client-cost', {
  machine: machineInfo(),
  options: { rounds: ROUNDS, roundSeconds: ROUND_S, concurrency: CONCURRENCY, keys: KEYS, valueBytes: VALUE_BYTES },
  baseline: BASELINE.name,
  variants: summary,
});
console.log(`wrote ${file}`);
for (const client of clients.values()) client.close();
await etcd.stop();
removeBenchTempDir(tmp);
