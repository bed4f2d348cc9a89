/**
 * Datastore benchmark: create / update (compare-and-swap) / get operations per second on the
 * SQLite datastore, against raw better-sqlite3 doing the equivalent statements in the same run.
 *
 *   node --import tsx bench/datastore.ts [--round-ms 300] [--rounds 10]
 *
 * Writes bench/results/datastore.json. Each figure is timed in interleaved rounds (ours, raw,
 * then the context subjects; raw before ours every other round) so that a burst of noise on the
 * shared machine hits every side; ratios are medians of per-round ratios.
 *
 * - ours: `openSqliteDatastore(file)` (WAL, synchronous=NORMAL), one awaited call per operation,
 *   as the API server uses it; update is `update(key, value, expectedModRevision)`.
 * - raw: better-sqlite3 v12 on the same schema, WAL, synchronous=NORMAL, prepared statements and
 *   a transaction function prepared once; a write is a log-table insert plus a current-table
 *   upsert in one transaction; a get is the same indexed join select.
 *
 * Context (each against raw in the same round):
 * - raw, synchronous=FULL: an fsync per commit (durable across power loss).
 * - raw, ours' statements: what ours runs in its transaction (CAS select, insert, upsert), with
 *   `db.transaction()` built per call as ours does, synchronously and without a Promise: splits
 *   ours' gap to raw into SQL work and JavaScript overhead.
 * - raw, locking_mode=EXCLUSIVE / no AUTOINCREMENT / 16 writes per transaction: what SQLite
 *   settings, schema and group commit would give.
 * - ours and raw with 1.6 KB values: the size of a whole stored Node, which a status PATCH
 *   rewrites.
 * - compaction: how long `compact()` holds the (single) event loop for 30,000 revisions.
 */
import Database from 'better-sqlite3';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { openSqliteDatastore, type SqliteDatastore } from '../src/datastore/sqlite.js';
import { fmtInt, machineInfo, median, nodeStatusValue, printMachine, round, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    'round-ms': { type: 'string', default: '300' },
    rounds: { type: 'string', default: '10' },
  },
});
const ROUND_MS = Number(args['round-ms']);
const ROUNDS = Number(args.rounds);
/** Keys that updates and gets cycle over (all created in the first create round). */
const HOT_KEYS = 1000;
/** Distinct values rotated through, so writes do not all carry the same bytes. */
const VALUES = Array.from({ length: 64 }, (_, i) => nodeStatusValue(i + 1));
const keyOf = (i: number): string => `/registry/core/nodes/node-${String(i).padStart(6, '0')}`;
/** A fixed pseudo-random sequence of hot-key indices for gets. */
const GET_ORDER = (() => {
  const order = new Uint32Array(1 << 16);
  let x = 2463534242;
  for (let i = 0; i < order.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    order[i] = (x >>> 0) % HOT_KEYS;
  }
  return order;
})();

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS kv (
    revision INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    value BLOB NOT NULL
  );
  CREATE INDEX IF NOT EXISTS kv_key_revision ON kv(key, revision);
  CREATE TABLE IF NOT EXISTS current (
    key TEXT PRIMARY KEY,
    revision INTEGER NOT NULL
  ) WITHOUT ROWID;
`;

type Op = 'create' | 'update' | 'get';

/** One store under test: an operation runs `n` times back to back. */
interface Subject {
  name: string;
  run(op: Op, n: number): Promise<void> | void;
  close(): Promise<void> | void;
}

/** Per-store bookkeeping: how many keys exist and each hot key's revisions. */
class Keys {
  constructor(private readonly values: readonly Buffer[] = VALUES) {}
  created = 0;
  readonly modRevision = new Float64Array(HOT_KEYS);
  readonly createRevision = new Float64Array(HOT_KEYS);
  nextUpdate = 0;
  nextGet = 0;
  valueIndex = 0;
  value(): Buffer {
    this.valueIndex = (this.valueIndex + 1) % this.values.length;
    return this.values[this.valueIndex]!;
  }
}

function ours(file: string, name = 'ours', values: readonly Buffer[] = VALUES): Subject {
  const store: SqliteDatastore = openSqliteDatastore(file);
  const keys = new Keys(values);
  return {
    name,
    async run(op, n) {
      for (let i = 0; i < n; i++) {
        if (op === 'create') {
          const index = keys.created++;
          const kv = await store.create(keyOf(index), keys.value());
          if (index < HOT_KEYS) keys.modRevision[index] = kv.modRevision;
        } else if (op === 'update') {
          const index = keys.nextUpdate;
          keys.nextUpdate = (index + 1) % HOT_KEYS;
          const kv = await store.update(keyOf(index), keys.value(), keys.modRevision[index]!);
          keys.modRevision[index] = kv.modRevision;
        } else {
          const kv = await store.get(keyOf(GET_ORDER[keys.nextGet++ & 0xffff]!));
          if (!kv) throw new Error('missing key');
        }
      }
    },
    close: () => store.close(),
  };
}

interface RawOptions {
  synchronous: 'NORMAL' | 'FULL';
  /** `PRAGMA locking_mode = EXCLUSIVE`: one process owns the file, no per-transaction locks. */
  exclusive?: boolean;
  /** The log table's revision as a plain INTEGER PRIMARY KEY (no sqlite_sequence row to update). */
  noAutoincrement?: boolean;
  /** Writes per transaction (group commit); 1 is one transaction per write. */
  batch?: number;
}

interface RawStatements {
  db: Database.Database;
  insert: Database.Statement<[number, string, number, number, number, Buffer]>;
  upsert: Database.Statement<[string, number]>;
  get: Database.Statement<[string], { revision: number; create_revision: number; value: Buffer }>;
}

function openRaw(file: string, options: RawOptions): RawStatements {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${options.synchronous}`);
  if (options.exclusive) db.pragma('locking_mode = EXCLUSIVE');
  db.exec(options.noAutoincrement ? SCHEMA.replace(' AUTOINCREMENT', '') : SCHEMA);
  return {
    db,
    insert: db.prepare(
      `INSERT INTO kv (revision, key, create_revision, prev_revision, deleted, value) VALUES (?, ?, ?, ?, ?, ?)`,
    ),
    upsert: db.prepare(
      `INSERT INTO current (key, revision) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET revision = excluded.revision`,
    ),
    get: db.prepare(`SELECT kv.* FROM current JOIN kv ON kv.revision = current.revision WHERE current.key = ?`),
  };
}

/**
 * Raw better-sqlite3: insert + upsert in one prepared transaction (or `batch` of them per
 * transaction); the indexed select for gets.
 */
function raw(file: string, name: string, options: RawOptions, values: readonly Buffer[] = VALUES): Subject {
  const s = openRaw(file, options);
  const keys = new Keys(values);
  const batch = options.batch ?? 1;
  let revision = 0;
  const writeOne = (key: string, createRevision: number, prevRevision: number, value: Buffer): number => {
    revision++;
    s.insert.run(revision, key, createRevision || revision, prevRevision, 0, value);
    s.upsert.run(key, revision);
    return revision;
  };
  const write = s.db.transaction(writeOne);
  const writeMany = s.db.transaction((op: 'create' | 'update', n: number) => {
    for (let i = 0; i < n; i++) writeNext(op, writeOne);
  });
  function writeNext(op: 'create' | 'update', w: typeof writeOne): void {
    if (op === 'create') {
      const index = keys.created++;
      const rev = w(keyOf(index), 0, 0, keys.value());
      if (index < HOT_KEYS) {
        keys.modRevision[index] = rev;
        keys.createRevision[index] = rev;
      }
    } else {
      const index = keys.nextUpdate;
      keys.nextUpdate = (index + 1) % HOT_KEYS;
      keys.modRevision[index] = w(keyOf(index), keys.createRevision[index]!, keys.modRevision[index]!, keys.value());
    }
  }
  return {
    name,
    run(op, n) {
      if (op === 'get') {
        for (let i = 0; i < n; i++) {
          const row = s.get.get(keyOf(GET_ORDER[keys.nextGet++ & 0xffff]!));
          if (!row) throw new Error('missing key');
        }
      } else if (batch > 1) {
        for (let done = 0; done < n; done += batch) writeMany(op, Math.min(batch, n - done));
      } else {
        for (let i = 0; i < n; i++) writeNext(op, write);
      }
    },
    close: () => void s.db.close(),
  };
}

/**
 * Ours' SQL, synchronously: the CAS select, insert and upsert inside a `db.transaction()`
 * wrapper created per call, returning the same KeyValue objects, but no async function.
 */
function rawOursStatements(file: string): Subject {
  const s = openRaw(file, { synchronous: 'NORMAL' });
  const keys = new Keys();
  let revision = 0;
  return {
    name: "raw, ours' statements",
    run(op, n) {
      for (let i = 0; i < n; i++) {
        if (op === 'create') {
          const index = keys.created++;
          const key = keyOf(index);
          const value = keys.value();
          const kv = s.db.transaction(() => {
            if (s.get.get(key)) throw new Error('exists');
            const rev = revision + 1;
            s.insert.run(rev, key, rev, 0, 0, value);
            s.upsert.run(key, rev);
            return { key, value, createRevision: rev, modRevision: rev };
          })();
          revision = kv.modRevision;
          if (index < HOT_KEYS) keys.modRevision[index] = kv.modRevision;
        } else if (op === 'update') {
          const index = keys.nextUpdate;
          keys.nextUpdate = (index + 1) % HOT_KEYS;
          const key = keyOf(index);
          const value = keys.value();
          const expected = keys.modRevision[index]!;
          const { kv } = s.db.transaction(() => {
            const existing = s.get.get(key);
            if (!existing) throw new Error('missing');
            if (existing.revision !== expected) throw new Error('conflict');
            const rev = revision + 1;
            s.insert.run(rev, key, existing.create_revision, existing.revision, 0, value);
            s.upsert.run(key, rev);
            return {
              kv: { key, value, createRevision: existing.create_revision, modRevision: rev },
              prevKv: { key, value: existing.value, createRevision: existing.create_revision, modRevision: existing.revision },
            };
          })();
          revision = kv.modRevision;
          keys.modRevision[index] = kv.modRevision;
        } else {
          const row = s.get.get(keyOf(GET_ORDER[keys.nextGet++ & 0xffff]!));
          if (!row) throw new Error('missing key');
        }
      }
    },
    close: () => void s.db.close(),
  };
}

/** Run `op` for about `ms` milliseconds in batches; answers operations per second. */
async function timed(subject: Subject, op: Op, ms: number): Promise<number> {
  const batch = op === 'get' ? 512 : 64;
  let ops = 0;
  const start = performance.now();
  const deadline = start + ms;
  let now = start;
  do {
    await subject.run(op, batch);
    ops += batch;
    now = performance.now();
  } while (now < deadline);
  return (ops / (now - start)) * 1000;
}

interface OpResult {
  op: Op;
  oursOpsPerSec: number[];
  rawOpsPerSec: number[];
  ratios: number[];
  medianOurs: number;
  medianRaw: number;
  medianRatio: number;
}

/**
 * How long `compact()` blocks the event loop: `updates` writes over the hot keys, then compact
 * everything but the last 1000 revisions, as the server's compactor does.
 */
async function measureCompaction(file: string, updates: number): Promise<{ revisions: number; ms: number; usPerRevision: number }> {
  const store = openSqliteDatastore(file);
  const rev = new Float64Array(HOT_KEYS);
  for (let i = 0; i < HOT_KEYS; i++) rev[i] = (await store.create(keyOf(i), VALUES[i & 63]!)).modRevision;
  for (let i = 0; i < updates; i++) {
    const k = i % HOT_KEYS;
    rev[k] = (await store.update(keyOf(k), VALUES[i & 63]!, rev[k]!)).modRevision;
  }
  const target = (await store.currentRevision()) - 1000;
  const t0 = performance.now();
  await store.compact(target);
  const ms = performance.now() - t0;
  await store.close();
  return { revisions: target, ms, usPerRevision: (ms * 1000) / target };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  printMachine(machine);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-bench-datastore-'));
  const bigValues = Array.from({ length: 16 }, (_, i) => {
    // A whole stored Node object (what a status PATCH rewrites) is about 1.6 KB.
    const json = JSON.parse(nodeStatusValue(i + 1).toString()) as Record<string, unknown>;
    json.padding = 'x'.repeat(1600 - VALUES[0]!.length);
    return Buffer.from(JSON.stringify(json));
  });
  console.log(
    `# data in ${dir}; ${ROUNDS} interleaved rounds of ${ROUND_MS} ms per figure; values ${VALUES[0]!.length} bytes; ${HOT_KEYS} hot keys`,
  );
  const db = (name: string): string => path.join(dir, `${name}.db`);
  const a = ours(db('ours'));
  const b = raw(db('raw'), 'raw', { synchronous: 'NORMAL' });
  // Context: durability, a split of ours' gap, and what SQLite settings or group commit would give.
  const context: { subject: Subject; ops: Op[] }[] = [
    { subject: raw(db('raw-full'), 'raw, synchronous=FULL', { synchronous: 'FULL' }), ops: ['create', 'update'] },
    { subject: rawOursStatements(db('raw-ours-statements')), ops: ['create', 'update', 'get'] },
    { subject: raw(db('raw-exclusive'), 'raw, locking_mode=EXCLUSIVE', { synchronous: 'NORMAL', exclusive: true }), ops: ['create', 'update', 'get'] },
    { subject: raw(db('raw-noautoinc'), 'raw, no AUTOINCREMENT', { synchronous: 'NORMAL', noAutoincrement: true }), ops: ['create', 'update'] },
    { subject: raw(db('raw-batch'), 'raw, 16 writes per transaction', { synchronous: 'NORMAL', batch: 16 }), ops: ['create', 'update'] },
    { subject: ours(db('ours-big'), 'ours, 1.6 KB values', bigValues), ops: ['update', 'get'] },
    { subject: raw(db('raw-big'), 'raw, 1.6 KB values', { synchronous: 'NORMAL' }, bigValues), ops: ['update', 'get'] },
  ];
  const all = [a, b, ...context.map((c) => c.subject)];
  const results: OpResult[] = [];
  const extra: Record<string, Partial<Record<Op, number[]>>> = {};
  /** Each context figure over raw's figure of the same round. */
  const extraRatios: Record<string, Partial<Record<Op, number[]>>> = {};
  let compaction: Awaited<ReturnType<typeof measureCompaction>>;
  try {
    // Seed the hot keys everywhere so that updates and gets have something to work on.
    for (const s of all) await s.run('create', HOT_KEYS);

    for (const op of ['create', 'update', 'get'] as const) {
      const r: OpResult = { op, oursOpsPerSec: [], rawOpsPerSec: [], ratios: [], medianOurs: 0, medianRaw: 0, medianRatio: 0 };
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? [a, b] : [b, a];
        const rates: Record<string, number> = {};
        for (const s of order) rates[s.name] = await timed(s, op, ROUND_MS);
        r.oursOpsPerSec.push(rates.ours!);
        r.rawOpsPerSec.push(rates.raw!);
        r.ratios.push(rates.ours! / rates.raw!);
        for (const { subject, ops } of context) {
          if (!ops.includes(op)) continue;
          const rate = await timed(subject, op, ROUND_MS);
          ((extra[subject.name] ??= {})[op] ??= []).push(rate);
          ((extraRatios[subject.name] ??= {})[op] ??= []).push(rate / rates.raw!);
        }
      }
      r.medianOurs = median(r.oursOpsPerSec);
      r.medianRaw = median(r.rawOpsPerSec);
      r.medianRatio = median(r.ratios);
      results.push(r);
    }
  } finally {
    for (const s of all) await s.close();
  }
  compaction = await measureCompaction(db('compaction'), 30_000);

  console.log('');
  console.log('operation   ours ops/s    raw ops/s   ours/raw   (per round: ours/raw)');
  for (const r of results) {
    console.log(
      `${r.op.padEnd(8)} ${fmtInt(r.medianOurs).padStart(12)} ${fmtInt(r.medianRaw).padStart(12)} ${r.medianRatio.toFixed(2).padStart(10)}   (${r.ratios.map((x) => x.toFixed(2)).join(' ')})`,
    );
  }
  console.log('\ncontext (medians; "x raw" is the median over rounds of this / raw with 335-byte values, same round):');
  const ratioOf = (name: string, op: Op): number => median(extraRatios[name]![op]!);
  for (const [name, ops] of Object.entries(extra)) {
    for (const [op, rates] of Object.entries(ops) as [Op, number[]][]) {
      console.log(
        `  ${`${name}: ${op}`.padEnd(42)} ${fmtInt(median(rates)).padStart(9)} ops/s  ${ratioOf(name, op).toFixed(2)} x raw`,
      );
    }
  }
  console.log(
    `  ${'ours: compact(rev - 1000)'.padEnd(42)} ${fmtInt(compaction.revisions)} revisions in ${fmtInt(compaction.ms)} ms ` +
      `(${compaction.usPerRevision.toFixed(1)} us per revision, one synchronous transaction)`,
  );

  const file = writeResult('datastore', {
    benchmark: 'datastore',
    machine,
    settings: { roundMs: ROUND_MS, rounds: ROUNDS, hotKeys: HOT_KEYS, valueBytes: VALUES[0]!.length, bigValueBytes: bigValues[0]!.length },
    results: results.map((r) => ({
      ...r,
      oursOpsPerSec: r.oursOpsPerSec.map((x) => round(x, 0)),
      rawOpsPerSec: r.rawOpsPerSec.map((x) => round(x, 0)),
      ratios: r.ratios.map((x) => round(x, 3)),
      medianOurs: round(r.medianOurs, 0),
      medianRaw: round(r.medianRaw, 0),
      medianRatio: round(r.medianRatio, 3),
    })),
    context: Object.fromEntries(
      Object.entries(extra).map(([name, ops]) => [
        name,
        Object.fromEntries(
          (Object.entries(ops) as [Op, number[]][]).map(([op, rates]) => [
            op,
            {
              opsPerSec: rates.map((x) => round(x, 0)),
              median: round(median(rates), 0),
              vsRawPerRound: extraRatios[name]![op]!.map((x) => round(x, 3)),
              vsRaw: round(ratioOf(name, op), 3),
            },
          ]),
        ),
      ]),
    ),
    compaction: { revisions: compaction.revisions, ms: round(compaction.ms, 1), usPerRevision: round(compaction.usPerRevision, 2) },
  });
  console.log(`\nwrote ${path.relative(process.cwd(), file)}`);
  fs.rmSync(dir, { recursive: true, force: true });
}

await main();
