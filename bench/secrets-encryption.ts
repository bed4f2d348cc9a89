/**
 * Secrets encryption benchmark: what `secrets-encryption: true` costs, as a ratio against the
 * same work with it off, measured in the same run (goal: encrypted ≥ 0.8 × plain).
 *
 *   npm run build && node --import tsx bench/secrets-encryption.ts [--round-ms 300] [--rounds 10]
 *        [--seconds 12] [--warmup 2] [--api-rounds 4] [--clients 16] [--secrets 200] [--bytes 1024]
 *        [--only datastore|api]
 *
 * Writes bench/results/secrets-encryption.json.
 *
 * Part 1, the datastore in this process: a SQLite datastore with the EncryptingDatastore over it
 * (one active key) against a plain SQLite datastore, each in its own file, the same Secret-shaped
 * values (JSON, `--bytes` of base64 data): create, update (CAS), get, and a list of `--secrets`
 * Secrets, one awaited call at a time, in interleaved rounds of `--round-ms` (order alternating).
 * Ratios are medians of per-round ratios; CPU per operation (this process) is pooled.
 *
 * Part 2, the API: two `drover server --disable-agent` processes on SQLite, one with
 * `--secrets-encryption`, each with `--secrets` Secrets; `--clients` keep-alive HTTPS clients
 * send, for `--seconds` per server in `--api-rounds` rounds alternating between the servers:
 * - write: merge PATCHes of a Secret's data (read, decrypt, patch, encrypt, compare-and-swap);
 * - read: GETs of one Secret;
 * - list: GETs of all Secrets in the namespace (every one decrypted), 4 clients.
 * Ratio encrypted / plain, pooled over the rounds, with p50 and p99 latencies, and the server's
 * CPU per request (from /proc), whose ratio plain / encrypted is the throughput ratio of a
 * saturated server and is less disturbed by other jobs on the machine than the rates.
 */
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { EncryptingDatastore, generateEncryptionKey, SECRETS_PREFIX } from '../src/datastore/encryption.js';
import { openSqliteDatastore } from '../src/datastore/sqlite.js';
import type { Datastore } from '../src/datastore/types.js';
import {
  BenchApi,
  type BenchServer,
  benchTempDir,
  checkBuild,
  fmtInt,
  installCleanup,
  machineInfo,
  median,
  parseBenchArgs,
  type PatchTarget,
  percentile,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  send,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';

const { n, only: ONLY } = parseBenchArgs(
  {
    'round-ms': 300,
    rounds: { default: 10, min: 1 },
    seconds: 12,
    warmup: 2,
    'api-rounds': { default: 4, min: 1 },
    clients: 16,
    secrets: 200,
    bytes: 1024,
  },
  { only: ['datastore', 'api'] },
);
const { 'round-ms': ROUND_MS, rounds: ROUNDS, seconds: API_SECONDS, warmup: WARMUP_SECONDS } = n;
const { 'api-rounds': API_ROUNDS, clients: CLIENTS, secrets: SECRETS, bytes: BYTES } = n;
const GOAL = 0.8;
const LIST_CLIENTS = 4;

/** `n` bytes of base64 (what a Secret's data holds), different for each `seed`. */
function secretData(seed: number, n = BYTES): string {
  const raw = Buffer.alloc(Math.ceil((n * 3) / 4));
  for (let i = 0; i < raw.length; i++) raw[i] = (seed * 31 + i * 7) & 0xff;
  return raw.toString('base64').slice(0, n);
}

function secretObject(name: string, seed: number): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: 'bench' }, type: 'Opaque', data: { value: secretData(seed) } };
}

// ---------------------------------------------------------------------------------------------
// Part 1: the datastore

type Op = 'create' | 'update' | 'get' | 'list';
const OPS: readonly Op[] = ['create', 'update', 'get', 'list'];

interface Store {
  name: 'encrypted' | 'plain';
  datastore: Datastore;
  created: number;
  revisions: Map<string, number>;
  seed: number;
}

const keyOf = (i: number): string => `${SECRETS_PREFIX}bench/s-${String(i).padStart(6, '0')}`;
const valueOf = (i: number, seed: number): Buffer => Buffer.from(JSON.stringify(secretObject(`s-${i}`, seed)));

/** Runs `op` back to back for `ms`; the number of operations done. */
async function runFor(store: Store, op: Op, ms: number): Promise<number> {
  const deadline = performance.now() + ms;
  let n = 0;
  while (performance.now() < deadline) {
    if (op === 'create') {
      const i = store.created++;
      const kv = await store.datastore.create(keyOf(i), valueOf(i, store.seed++));
      store.revisions.set(kv.key, kv.modRevision);
    } else if (op === 'update') {
      const key = keyOf(n % SECRETS);
      const kv = await store.datastore.update(key, valueOf(n, store.seed++), store.revisions.get(key)!);
      store.revisions.set(key, kv.modRevision);
    } else if (op === 'get') {
      if (!(await store.datastore.get(keyOf((n * 7) % SECRETS)))) throw new Error('missing Secret');
    } else {
      const { items } = await store.datastore.list(SECRETS_PREFIX, { limit: SECRETS });
      if (items.length !== SECRETS) throw new Error(`listed ${items.length} Secrets`);
    }
    n++;
  }
  return n;
}

interface DatastoreFigure {
  encrypted: number;
  plain: number;
  ratio: number;
  /** This process's CPU per operation: steadier than the rates on a shared machine. */
  cpuUs: { encrypted: number; plain: number };
  cpuRatio: number;
  perRound: number[];
}

async function datastorePart(dir: string): Promise<Record<Op, DatastoreFigure>> {
  const encryptedInner = openSqliteDatastore(path.join(dir, 'encrypted.db'));
  const key = generateEncryptionKey('bench-key');
  const stores: Store[] = [
    { name: 'encrypted', datastore: new EncryptingDatastore(encryptedInner, { prefixes: [SECRETS_PREFIX], keySet: { active: key.name, keys: [key] } }), created: 0, revisions: new Map(), seed: 0 },
    { name: 'plain', datastore: openSqliteDatastore(path.join(dir, 'plain.db')), created: 0, revisions: new Map(), seed: 0 },
  ];
  try {
    // The Secrets that update, get and list work on (create adds more after them).
    for (const store of stores) {
      for (let i = 0; i < SECRETS; i++) {
        const kv = await store.datastore.create(keyOf(i), valueOf(i, store.seed++));
        store.revisions.set(kv.key, kv.modRevision);
      }
      store.created = SECRETS;
      for (const op of OPS) await runFor(store, op, 100); // warm-up
    }
    const result = {} as Record<Op, DatastoreFigure>;
    for (const op of OPS) {
      const perSecond = { encrypted: [] as number[], plain: [] as number[] };
      const cpu = { encrypted: { us: 0, ops: 0 }, plain: { us: 0, ops: 0 } };
      const ratios: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const order = r % 2 === 0 ? stores : [...stores].reverse();
        const rates = new Map<string, number>();
        for (const store of order) {
          const started = performance.now();
          const cpuBefore = process.cpuUsage();
          const n = await runFor(store, op, ROUND_MS);
          const used = process.cpuUsage(cpuBefore);
          cpu[store.name].us += used.user + used.system;
          cpu[store.name].ops += n;
          rates.set(store.name, n / ((performance.now() - started) / 1000));
        }
        perSecond.encrypted.push(rates.get('encrypted')!);
        perSecond.plain.push(rates.get('plain')!);
        ratios.push(rates.get('encrypted')! / rates.get('plain')!);
      }
      const cpuUs = { encrypted: round(cpu.encrypted.us / cpu.encrypted.ops, 1), plain: round(cpu.plain.us / cpu.plain.ops, 1) };
      result[op] = {
        encrypted: round(median(perSecond.encrypted), 0),
        plain: round(median(perSecond.plain), 0),
        ratio: round(median(ratios)),
        cpuUs,
        cpuRatio: round(cpuUs.plain / cpuUs.encrypted),
        perRound: ratios.map((x) => round(x)),
      };
      console.log(
        `  ${op.padEnd(6)} encrypted ${fmtInt(result[op].encrypted).padStart(7)}/s ${String(cpuUs.encrypted).padStart(7)} µs CPU | ` +
          `plain ${fmtInt(result[op].plain).padStart(7)}/s ${String(cpuUs.plain).padStart(7)} µs CPU | ratio ${result[op].ratio.toFixed(2)} (CPU plain/encrypted ${result[op].cpuRatio.toFixed(2)})`,
      );
    }
    return result;
  } finally {
    for (const store of stores) await store.datastore.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Part 2: the API

type ApiOp = 'write' | 'read' | 'list';

interface Load {
  seconds: number;
  latencies: number[];
  /** The server process's CPU time over the round (from /proc). */
  cpuSeconds: number;
  errors: number;
  firstError?: string;
}

interface Target extends PatchTarget {
  name: 'encrypted' | 'plain';
  server: BenchServer;
  seed: number;
}

const secretPath = (i: number): string => `/api/v1/namespaces/bench/secrets/s-${String(i).padStart(4, '0')}`;

async function apiLoad(target: Target, op: ApiOp, ms: number): Promise<Load> {
  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const pid = target.server.child.pid!;
  const cpuBefore = processCpuSeconds(pid);
  const started = performance.now();
  const deadline = started + ms;
  const clients = op === 'list' ? LIST_CLIENTS : CLIENTS;
  const worker = async (w: number): Promise<void> => {
    for (let k = 0; performance.now() < deadline; k++) {
      const i = (w + k * clients) % SECRETS;
      const t0 = performance.now();
      try {
        const res =
          op === 'write'
            ? await send(target, 'PATCH', secretPath(i), JSON.stringify({ data: { value: secretData(target.seed++) } }), 'application/merge-patch+json')
            : op === 'read'
              ? await send(target, 'GET', secretPath(i), undefined)
              : await send(target, 'GET', '/api/v1/namespaces/bench/secrets', undefined);
        latencies.push(performance.now() - t0);
        if (res.status !== 200) {
          errors++;
          firstError ??= `${res.status} ${res.text.slice(0, 300)}`;
        }
      } catch (error) {
        errors++;
        firstError ??= String(error);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
  return {
    seconds: (performance.now() - started) / 1000,
    latencies,
    cpuSeconds: processCpuSeconds(pid) - cpuBefore,
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

interface Pooled {
  perSecond: number;
  /** Server CPU per request: what the load costs, less sensitive to other jobs than a rate. */
  cpuUsPerRequest: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  errors: number;
  firstError?: string;
}

function pooled(loads: Load[]): Pooled {
  const seconds = loads.reduce((a, l) => a + l.seconds, 0);
  const sorted = Float64Array.from(loads.flatMap((l) => l.latencies)).sort();
  const firstError = loads.find((l) => l.firstError)?.firstError;
  return {
    perSecond: round(sorted.length / seconds, 0),
    cpuUsPerRequest: round((loads.reduce((a, l) => a + l.cpuSeconds, 0) / (sorted.length || 1)) * 1e6, 0),
    p50Ms: round(percentile(sorted, 50)),
    p99Ms: round(percentile(sorted, 99)),
    requests: sorted.length,
    errors: loads.reduce((a, l) => a + l.errors, 0),
    ...(firstError ? { firstError } : {}),
  };
}

async function apiPart(dir: string): Promise<Record<ApiOp, Record<string, unknown>>> {
  const targets: Target[] = [];
  try {
    for (const name of ['encrypted', 'plain'] as const) {
      const dataDir = path.join(dir, name);
      fs.mkdirSync(dataDir, { recursive: true });
      const server = await startBenchServer(dataDir, path.join(dir, `${name}.log`), name === 'encrypted' ? ['--secrets-encryption'] : []);
      const url = new URL(server.url);
      targets.push({
        name,
        server,
        seed: 0,
        port: Number(url.port),
        ca: server.caPem,
        token: server.adminToken,
        agent: new https.Agent({ keepAlive: true, maxSockets: CLIENTS, ca: server.caPem }),
      });
      const api = new BenchApi(server, 8);
      await api.json('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bench' } });
      for (let i = 0; i < SECRETS; i += 8) {
        await Promise.all(
          Array.from({ length: Math.min(8, SECRETS - i) }, (_, j) =>
            api.json('POST', '/api/v1/namespaces/bench/secrets', secretObject(`s-${String(i + j).padStart(4, '0')}`, i + j)),
          ),
        );
      }
      api.destroy();
    }
    const result = {} as Record<ApiOp, Record<string, unknown>>;
    for (const op of ['write', 'read', 'list'] as const) {
      for (const target of targets) await apiLoad(target, op, WARMUP_SECONDS * 1000);
      const loads = new Map<string, Load[]>(targets.map((t) => [t.name, []]));
      const roundRatios: number[] = [];
      for (let r = 0; r < API_ROUNDS; r++) {
        const order = r % 2 === 0 ? targets : [...targets].reverse();
        const rates = new Map<string, number>();
        for (const target of order) {
          const load = await apiLoad(target, op, (API_SECONDS / API_ROUNDS) * 1000);
          loads.get(target.name)!.push(load);
          rates.set(target.name, load.latencies.length / load.seconds);
        }
        roundRatios.push(rates.get('encrypted')! / rates.get('plain')!);
      }
      const encrypted = pooled(loads.get('encrypted')!);
      const plain = pooled(loads.get('plain')!);
      const ratio = round(encrypted.perSecond / plain.perSecond);
      // The throughput a saturated server reaches goes as the inverse of its CPU per request.
      const cpuRatio = round(plain.cpuUsPerRequest / encrypted.cpuUsPerRequest);
      result[op] = { encrypted, plain, ratio, medianOfRounds: round(median(roundRatios)), cpuRatio, perRound: roundRatios.map((x) => round(x)) };
      console.log(
        `  ${op.padEnd(5)} encrypted ${fmtInt(encrypted.perSecond).padStart(6)}/s p50 ${encrypted.p50Ms} ms p99 ${encrypted.p99Ms} ms ${fmtInt(encrypted.cpuUsPerRequest)} µs CPU | ` +
          `plain ${fmtInt(plain.perSecond).padStart(6)}/s p50 ${plain.p50Ms} ms p99 ${plain.p99Ms} ms ${fmtInt(plain.cpuUsPerRequest)} µs CPU | ` +
          `ratio ${ratio.toFixed(2)} (median of rounds ${median(roundRatios).toFixed(2)}; CPU plain/encrypted ${cpuRatio.toFixed(2)})` +
          `${encrypted.errors + plain.errors ? `  ERRORS ${encrypted.errors}/${plain.errors}: ${encrypted.firstError ?? plain.firstError}` : ''}`,
      );
    }
    return result;
  } finally {
    for (const target of targets) {
      target.agent.destroy();
      await stopChild(target.server.child, 'SIGTERM', 10_000);
    }
  }
}

// ---------------------------------------------------------------------------------------------

installCleanup();
const machine = machineInfo();
printMachine(machine);
const dir = benchTempDir('secrets-encryption');
try {
  const output: Record<string, unknown> = {
    machine,
    options: { roundMs: ROUND_MS, rounds: ROUNDS, apiSeconds: API_SECONDS, warmupSeconds: WARMUP_SECONDS, apiRounds: API_ROUNDS, clients: CLIENTS, listClients: LIST_CLIENTS, secrets: SECRETS, bytes: BYTES },
    goal: `encrypted >= ${GOAL} x plain`,
  };
  if (ONLY !== 'api') {
    console.log(`# part 1: datastore (SQLite, in process), ${ROUNDS} interleaved rounds of ${ROUND_MS} ms per figure, ${SECRETS} Secrets of ${BYTES} bytes of data`);
    output.datastore = await datastorePart(dir);
  }
  if (ONLY !== 'datastore') {
    checkBuild();
    console.log(`# part 2: API (drover server on SQLite), ${CLIENTS} clients (list: ${LIST_CLIENTS}), ${API_ROUNDS} x ${(API_SECONDS / API_ROUNDS).toFixed(1)} s per server per figure, alternating`);
    output.api = await apiPart(dir);
  }
  console.log(`# wrote ${writeResult('secrets-encryption', output)}`);
} finally {
  removeBenchTempDir(dir);
}
