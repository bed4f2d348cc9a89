import Database from 'better-sqlite3';
import {
  CompactedError,
  ConflictError,
  type Datastore,
  DatastoreError,
  FutureRevisionError,
  GuardFailedError,
  KeyExistsError,
  type KeyValue,
  KeyNotFoundError,
  type ListOptions,
  type ListResult,
  type Watch,
  type WatchCallbacks,
  type WatchEvent,
  type WriteGuard,
} from './types.js';
import { WatchDelivery } from './watch-delivery.js';

/**
 * The embedded default datastore: a log-structured table in one SQLite file, in the manner of
 * kine. Every write appends a row whose rowid is the global revision; a delete appends a
 * tombstone. `current` maps each live key to its latest row so reads at the head are one index
 * lookup. History is kept until compacted, which is what lets watches resume from an old
 * revision and lists read a consistent older revision.
 *
 * Only one process may open the file (the server holds a lock on its data dir), so the latest
 * revision is kept in memory and watch events are fanned out in-process right after commit.
 */

export interface SqliteOptions {
  /**
   * `NORMAL` (default) survives a crash or kill of the process, since committed WAL frames are
   * already in the OS; only a power loss can drop the last transactions. `FULL` also survives
   * power loss at about a quarter of the write rate.
   */
  synchronous?: 'NORMAL' | 'FULL';
}

/** Memory for cached latest values; past it the cache starts over. */
const LATEST_CACHE_BYTES = 64 * 1024 * 1024;

interface PendingWrite {
  apply: () => { kv: KeyValue; event: WatchEvent };
  resolve: (kv: KeyValue) => void;
  reject: (error: unknown) => void;
}

interface Row {
  revision: number;
  key: string;
  create_revision: number;
  prev_revision: number;
  deleted: number;
  value: Buffer;
}

interface RowWithPrev extends Row {
  prev_value: Buffer | null;
  prev_create_revision: number | null;
}

/**
 * The smallest string above every string that starts with `prefix`: the prefix with its last code
 * point incremented. SQLite compares text as UTF-8 bytes, which orders like code points.
 * Undefined when no such string exists (an empty prefix, or one of only U+10FFFF).
 */
export function rangeEnd(prefix: string): string | undefined {
  const codePoints = [...prefix].map((c) => c.codePointAt(0)!);
  while (codePoints.length && codePoints[codePoints.length - 1] === 0x10ffff) codePoints.pop();
  if (!codePoints.length) return undefined;
  let last = codePoints.pop()! + 1;
  if (last === 0xd800) last = 0xe000; // skip the surrogate range, which UTF-8 cannot hold
  return String.fromCodePoint(...codePoints, last);
}

/** No key is above this: U+10FFFF repeated is past any realistic key. */
const BEYOND_ALL_KEYS = '\u{10FFFF}'.repeat(64);

function upperBound(prefix: string): string {
  return rangeEnd(prefix) ?? BEYOND_ALL_KEYS;
}

function toKeyValue(row: Row): KeyValue {
  return {
    key: row.key,
    value: row.value,
    createRevision: row.create_revision,
    modRevision: row.revision,
  };
}

function rowToEvent(row: RowWithPrev): WatchEvent {
  const prevKv: KeyValue | undefined =
    row.prev_value === null
      ? undefined
      : {
          key: row.key,
          value: row.prev_value,
          createRevision: row.prev_create_revision ?? row.create_revision,
          modRevision: row.prev_revision,
        };
  if (row.deleted) {
    return {
      type: 'delete',
      kv: {
        key: row.key,
        value: row.prev_value ?? Buffer.alloc(0),
        createRevision: row.create_revision,
        modRevision: row.revision,
      },
      ...(prevKv ? { prevKv } : {}),
    };
  }
  return { type: 'put', kv: toKeyValue(row), ...(prevKv ? { prevKv } : {}) };
}

class SqliteWatch implements Watch {
  private readonly delivery: WatchDelivery;

  constructor(
    readonly prefix: string,
    callbacks: WatchCallbacks,
    store: SqliteDatastore,
    /** Highest revision whose events (if any) are already queued for this watch. */
    private queuedThrough: number,
    /** Events before this revision were not asked for (a watch from a future revision). */
    private readonly startRevision: number,
  ) {
    this.delivery = new WatchDelivery(callbacks, () => this.queuedThrough, () => store.forget(this));
  }

  enqueue(events: WatchEvent[], throughRevision: number): void {
    for (const event of events) {
      if (event.kv.modRevision >= this.startRevision && event.kv.key.startsWith(this.prefix)) {
        this.delivery.push(event);
      }
    }
    this.queuedThrough = throughRevision;
  }

  requestProgress(): void {
    this.delivery.progress();
  }

  fail(error: Error): void {
    this.delivery.fail(error);
  }

  cancel(): void {
    this.delivery.cancel();
  }
}

export class SqliteDatastore implements Datastore {
  readonly name = 'sqlite';
  private readonly db: Database.Database;
  private revision: number;
  private compacted: number;
  private readonly watches = new Set<SqliteWatch>();
  private closed = false;
  private pendingWrites: PendingWrite[] = [];
  /** Latest row of each recently used key (see lookup). */
  private readonly latest = new Map<string, Row>();
  private latestBytes = 0;
  /** The current write batch's own writes, until it commits. */
  private batchOverlay: Map<string, Row | null> | undefined;
  private readonly batchTransaction: Database.Transaction<(run: () => void) => void>;

  private readonly stmts: {
    get: Database.Statement<[string], Row>;
    listHead: Database.Statement<[string, string, number], Row>;
    listAt: Database.Statement<[string, string, number, number], Row>;
    insert: Database.Statement<[number, string, number, number, number, Buffer]>;
    upsertCurrent: Database.Statement<[string, number]>;
    deleteCurrent: Database.Statement<[string]>;
    history: Database.Statement<[number, string, string], RowWithPrev>;
    compact: Database.Statement<[number, number]>;
    setMeta: Database.Statement<[string, number]>;
  };

  constructor(file: string, options: SqliteOptions = {}) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma(`synchronous = ${options.synchronous ?? 'NORMAL'}`);
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
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
      CREATE TABLE IF NOT EXISTS meta (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
      ) WITHOUT ROWID;
    `);
    // sqlite_sequence keeps the highest revision ever handed out, even after compaction deleted
    // the row, which is what guarantees a revision is never reused.
    const seq = this.db
      .prepare<[], { seq: number }>(`SELECT seq FROM sqlite_sequence WHERE name = 'kv'`)
      .get();
    this.revision = seq?.seq ?? 0;
    const compact = this.db
      .prepare<[], { value: number }>(`SELECT value FROM meta WHERE name = 'compact_revision'`)
      .get();
    this.compacted = compact?.value ?? 0;

    this.batchTransaction = this.db.transaction((run: () => void) => run());
    const selectWithPrev = `
      SELECT kv.*, p.value AS prev_value, p.create_revision AS prev_create_revision
      FROM kv LEFT JOIN kv AS p ON p.revision = kv.prev_revision AND kv.prev_revision > 0`;
    this.stmts = {
      get: this.db.prepare(
        `SELECT kv.* FROM current JOIN kv ON kv.revision = current.revision WHERE current.key = ?`,
      ),
      listHead: this.db.prepare(
        `SELECT kv.* FROM current JOIN kv ON kv.revision = current.revision
         WHERE current.key >= ? AND current.key < ? ORDER BY current.key LIMIT ?`,
      ),
      listAt: this.db.prepare(
        `SELECT kv.* FROM kv JOIN (
           SELECT MAX(revision) AS revision FROM kv
           WHERE key >= ? AND key < ? AND revision <= ? GROUP BY key
         ) AS latest ON kv.revision = latest.revision
         WHERE kv.deleted = 0 ORDER BY kv.key LIMIT ?`,
      ),
      insert: this.db.prepare(
        `INSERT INTO kv (revision, key, create_revision, prev_revision, deleted, value)
         VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      upsertCurrent: this.db.prepare(
        `INSERT INTO current (key, revision) VALUES (?, ?)
         ON CONFLICT(key) DO UPDATE SET revision = excluded.revision`,
      ),
      deleteCurrent: this.db.prepare(`DELETE FROM current WHERE key = ?`),
      history: this.db.prepare(
        `${selectWithPrev} WHERE kv.revision >= ? AND kv.key >= ? AND kv.key < ? ORDER BY kv.revision`,
      ),
      // A row at or below the compaction point goes when it is a tombstone or when a newer row
      // at or below that point supersedes it; the newest surviving row of each key stays.
      compact: this.db.prepare(
        `DELETE FROM kv WHERE revision <= ? AND (deleted = 1 OR revision < (
           SELECT MAX(newer.revision) FROM kv AS newer
           WHERE newer.key = kv.key AND newer.revision <= ?))`,
      ),
      setMeta: this.db.prepare(
        `INSERT INTO meta (name, value) VALUES (?, ?)
         ON CONFLICT(name) DO UPDATE SET value = excluded.value`,
      ),
    };
  }

  async currentRevision(): Promise<number> {
    return this.revision;
  }

  async compactRevision(): Promise<number> {
    return this.compacted;
  }

  async get(key: string): Promise<KeyValue | undefined> {
    const row = this.lookup(key);
    // A copy: what the caller does with its buffer must not reach the cache.
    return row ? { ...toKeyValue(row), value: Buffer.from(row.value) } : undefined;
  }

  /**
   * The latest row of a key. Only this process writes the file, so the latest rows can be kept in
   * memory, exactly: a read is then a map lookup instead of two B-tree searches. Inside a write
   * batch, the batch's own uncommitted writes come first; they reach the cache only on commit.
   */
  private lookup(key: string): Row | undefined {
    if (this.batchOverlay) {
      const pending = this.batchOverlay.get(key);
      if (pending !== undefined) return pending ?? undefined;
    }
    const cached = this.latest.get(key);
    if (cached) return cached;
    const row = this.stmts.get.get(key);
    if (row && !this.batchOverlay) this.remember(key, row);
    return row;
  }

  private remember(key: string, row: Row): void {
    const previous = this.latest.get(key);
    this.latestBytes += row.value.length - (previous?.value.length ?? 0);
    // The cache keeps its own bytes, apart from any buffer handed out with a write or an event.
    this.latest.set(key, { ...row, value: Buffer.from(row.value) });
    if (this.latestBytes > LATEST_CACHE_BYTES) {
      // Beyond the budget, start over rather than track recency: correctness never depends on it.
      this.latest.clear();
      this.latestBytes = 0;
    }
  }

  private forgetLatest(key: string): void {
    const previous = this.latest.get(key);
    if (previous) this.latestBytes -= previous.value.length;
    this.latest.delete(key);
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ListResult> {
    const limit = options.limit && options.limit > 0 ? options.limit : -1;
    // Ask for one extra row to learn whether there is another page.
    const sqlLimit = limit > 0 ? limit + 1 : -1;
    // `continue` is exclusive; appending the smallest character turns it into an inclusive bound.
    const from =
      options.continue !== undefined && options.continue >= prefix ? `${options.continue}\0` : prefix;
    const end = upperBound(prefix);
    let rows: Row[];
    let revision: number;
    if (options.revision && options.revision > 0 && options.revision !== this.revision) {
      this.checkReadableRevision(options.revision);
      revision = options.revision;
      rows = this.stmts.listAt.all(from, end, revision, sqlLimit);
    } else {
      revision = this.revision;
      rows = this.stmts.listHead.all(from, end, sqlLimit);
    }
    const more = limit > 0 && rows.length > limit;
    if (more) rows.pop();
    return { items: rows.map(toKeyValue), revision, more };
  }

  async create(key: string, input: Buffer, guard?: WriteGuard): Promise<KeyValue> {
    // Keep our own copy: watchers see the value as written even if the caller reuses its buffer.
    const value = Buffer.from(input);
    return this.write(() => {
      this.checkGuard(key, guard);
      if (this.lookup(key)) throw new KeyExistsError(key);
      const revision = this.revision + 1;
      this.stmts.insert.run(revision, key, revision, 0, 0, value);
      this.stmts.upsertCurrent.run(key, revision);
      this.revision = revision;
      this.batchOverlay!.set(key, { revision, key, create_revision: revision, prev_revision: 0, deleted: 0, value });
      const kv: KeyValue = { key, value, createRevision: revision, modRevision: revision };
      return { kv, event: { type: 'put', kv } };
    });
  }

  async update(key: string, input: Buffer, expectedModRevision: number, guard?: WriteGuard): Promise<KeyValue> {
    const value = Buffer.from(input);
    return this.write(() => {
      this.checkGuard(key, guard);
      const existing = this.lookup(key);
      if (!existing) throw new KeyNotFoundError(key);
      if (existing.revision !== expectedModRevision) {
        throw new ConflictError(key, expectedModRevision, existing.revision, { ...toKeyValue(existing), value: Buffer.from(existing.value) });
      }
      const revision = this.revision + 1;
      this.stmts.insert.run(revision, key, existing.create_revision, existing.revision, 0, value);
      this.stmts.upsertCurrent.run(key, revision);
      this.revision = revision;
      this.batchOverlay!.set(key, {
        revision,
        key,
        create_revision: existing.create_revision,
        prev_revision: existing.revision,
        deleted: 0,
        value,
      });
      const kv: KeyValue = { key, value, createRevision: existing.create_revision, modRevision: revision };
      return { kv, event: { type: 'put', kv, prevKv: toKeyValue(existing) } };
    });
  }

  async delete(key: string, expectedModRevision?: number, guard?: WriteGuard): Promise<KeyValue> {
    return this.write(() => {
      this.checkGuard(key, guard);
      const existing = this.lookup(key);
      if (!existing) throw new KeyNotFoundError(key);
      if (expectedModRevision !== undefined && existing.revision !== expectedModRevision) {
        throw new ConflictError(key, expectedModRevision, existing.revision, { ...toKeyValue(existing), value: Buffer.from(existing.value) });
      }
      const revision = this.revision + 1;
      this.stmts.insert.run(revision, key, existing.create_revision, existing.revision, 1, Buffer.alloc(0));
      this.stmts.deleteCurrent.run(key);
      this.revision = revision;
      this.batchOverlay!.set(key, null);
      const kv: KeyValue = { key, value: existing.value, createRevision: existing.create_revision, modRevision: revision };
      return { kv, event: { type: 'delete', kv, prevKv: toKeyValue(existing) } };
    });
  }

  /** Inside the write's transaction, after the writes before it in the batch: the guard key must be where the writer saw it. */
  private checkGuard(key: string, guard: WriteGuard | undefined): void {
    if (!guard) return;
    const found = this.lookup(guard.key)?.revision ?? 0;
    if (found !== guard.modRevision) throw new GuardFailedError(key, guard, found);
  }

  /**
   * Group commit: writes issued in the same turn of the event loop are applied in order inside
   * one transaction, and each caller is answered only after that transaction committed. One
   * commit (one WAL sync) then carries many writes, which is most of the cost of a write. Every
   * write still sees the ones before it, so compare-and-swap works exactly as if they were alone,
   * and a write that fails its check changes nothing and takes no revision.
   */
  private write(apply: () => { kv: KeyValue; event: WatchEvent }): Promise<KeyValue> {
    if (this.closed) return Promise.reject(new DatastoreError('the datastore is closed'));
    return new Promise((resolve, reject) => {
      this.pendingWrites.push({ apply, resolve, reject });
      if (this.pendingWrites.length === 1) setImmediate(() => this.flushWrites());
    });
  }

  private flushWrites(): void {
    const batch = this.pendingWrites;
    this.pendingWrites = [];
    if (this.closed) {
      for (const op of batch) op.reject(new DatastoreError('the datastore is closed'));
      return;
    }
    const outcomes: ({ kv: KeyValue; event: WatchEvent } | Error)[] = [];
    const revisionBefore = this.revision;
    const overlay = new Map<string, Row | null>();
    this.batchOverlay = overlay;
    try {
      this.batchTransaction(() => {
        for (const op of batch) {
          try {
            outcomes.push(op.apply());
          } catch (error) {
            if (!(error instanceof DatastoreError)) throw error;
            outcomes.push(error);
          }
        }
      });
    } catch (error) {
      // The transaction rolled back as a whole: nobody's write happened.
      this.batchOverlay = undefined;
      this.revision = revisionBefore;
      for (const op of batch) op.reject(error);
      return;
    }
    this.batchOverlay = undefined;
    for (const [key, row] of overlay) {
      if (row) this.remember(key, row);
      else this.forgetLatest(key);
    }
    const events = outcomes.flatMap((o) => (o instanceof Error ? [] : [o.event]));
    if (events.length) this.publish(events);
    batch.forEach((op, i) => {
      const outcome = outcomes[i]!;
      if (outcome instanceof Error) op.reject(outcome);
      else op.resolve(outcome.kv);
    });
  }

  watch(prefix: string, fromRevision: number, callbacks: WatchCallbacks): Watch {
    const start = Math.max(1, fromRevision);
    const watch = new SqliteWatch(prefix, callbacks, this, Math.min(start - 1, this.revision), start);
    if (start <= this.compacted) {
      watch.fail(new CompactedError(start, this.compacted));
      return watch;
    }
    // Reading history and subscribing happen in one synchronous step, and writes commit on this
    // same thread, so no event can fall between the replay and the live stream.
    if (start <= this.revision) {
      const history = this.stmts.history.all(start, prefix, upperBound(prefix)).map(rowToEvent);
      watch.enqueue(history, this.revision);
    } else {
      watch.enqueue([], this.revision);
    }
    this.watches.add(watch);
    return watch;
  }

  async compact(revision: number): Promise<void> {
    if (revision <= this.compacted) return;
    if (revision > this.revision) throw new FutureRevisionError(revision, this.revision);
    this.db.transaction(() => {
      this.stmts.compact.run(revision, revision);
      this.stmts.setMeta.run('compact_revision', revision);
    })();
    this.compacted = revision;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const watch of [...this.watches]) watch.fail(new DatastoreError('the datastore was closed'));
    this.db.close();
  }

  /** Called by a watch when it is cancelled. */
  forget(watch: SqliteWatch): void {
    this.watches.delete(watch);
  }

  private publish(events: WatchEvent[]): void {
    for (const watch of this.watches) watch.enqueue(events, this.revision);
  }

  private checkReadableRevision(revision: number): void {
    if (revision > this.revision) throw new FutureRevisionError(revision, this.revision);
    if (revision < this.compacted) throw new CompactedError(revision, this.compacted);
  }
}

export function openSqliteDatastore(file: string, options?: SqliteOptions): SqliteDatastore {
  return new SqliteDatastore(file, options);
}
