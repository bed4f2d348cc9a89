/**
 * Conformance suite for the {@link Datastore} seam. Any backend (SQLite today, etcd later) must
 * pass it unchanged: it encodes the etcd-like semantics documented in src/datastore/types.ts.
 *
 * Usage, from a `*.test.ts` file:
 *
 *     runDatastoreConformance('sqlite', async () => ({ store, cleanup, reopen }));
 *
 * Every test gets a fresh, empty store from `open`. The suite closes every store it was handed
 * (including the ones returned by `reopen`) before calling `cleanup`, so `cleanup` only has to
 * release the backing storage (delete files, drop a key namespace, stop a server...).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it, type TestContext } from 'node:test';

import {
  CompactedError,
  ConflictError,
  FutureRevisionError,
  GuardFailedError,
  KeyExistsError,
  KeyNotFoundError,
  type Datastore,
  type KeyValue,
  type ListResult,
  type Watch,
  type WatchEvent,
} from '../../src/datastore/types.js';

export interface DatastoreFixture {
  /** A fresh, empty store. */
  store: Datastore;
  /** Release the backing storage. Called after the suite has closed every store it holds. */
  cleanup: () => Promise<void>;
  /**
   * Open another store over the same backing data. Only called after the previous store was
   * closed. Without it, the durability tests are skipped.
   */
  reopen?: () => Promise<Datastore>;
}

export type OpenDatastore = () => Promise<DatastoreFixture>;

/** Generous ceiling for anything asynchronous (watch delivery, progress, errors). */
const WAIT_MS = 15_000;
const TEST_TIMEOUT_MS = 120_000;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const buf = (s: string): Buffer => Buffer.from(s, 'utf8');

/** etcd orders keys by their bytes; for strings that is UTF-8 byte order, not UTF-16 order. */
const byteOrder = (a: string, b: string): number => Buffer.compare(buf(a), buf(b));

async function waitFor(
  condition: () => boolean,
  what: string | (() => string),
  timeoutMs = WAIT_MS,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

interface KvView {
  key: string;
  value: string;
  createRevision: number;
  modRevision: number;
}

function kvView(kv: KeyValue): KvView {
  assert.ok(Buffer.isBuffer(kv.value), `value of ${kv.key} must be a Buffer`);
  return {
    key: kv.key,
    value: kv.value.toString('base64'),
    createRevision: kv.createRevision,
    modRevision: kv.modRevision,
  };
}

interface EventView {
  type: string;
  kv: KvView;
  prevKv?: KvView;
}

function eventView(e: WatchEvent): EventView {
  const v: EventView = { type: e.type, kv: kvView(e.kv) };
  if (e.prevKv !== undefined) v.prevKv = kvView(e.prevKv);
  return v;
}

function describeEvents(events: WatchEvent[]): string {
  return events.map((e) => `${e.type} ${e.kv.key}@${e.kv.modRevision}`).join(', ');
}

function keysOf(result: ListResult | KeyValue[]): string[] {
  const items = Array.isArray(result) ? result : result.items;
  return items.map((kv) => kv.key);
}

async function expectError<E extends Error>(
  promise: Promise<unknown>,
  ctor: new (...args: never[]) => E,
  check?: (error: E) => void,
): Promise<E> {
  let caught: unknown;
  try {
    const value = await promise;
    assert.fail(`expected ${ctor.name}, but the call resolved with ${JSON.stringify(value)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    caught = error;
  }
  assert.ok(
    caught instanceof ctor,
    `expected ${ctor.name}, got ${caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught)}`,
  );
  check?.(caught);
  return caught;
}

/** Records everything one watch delivers, and the protocol violations it commits. */
class WatchRecorder {
  readonly events: WatchEvent[] = [];
  readonly errors: Error[] = [];
  readonly progress: { revision: number; delivered: number; maxDelivered: number }[] = [];
  readonly violations: string[] = [];
  batches = 0;
  cancelled = false;
  readonly watch: Watch;

  constructor(
    store: Datastore,
    readonly prefix: string,
    readonly fromRevision: number,
  ) {
    this.watch = store.watch(prefix, fromRevision, {
      onEvents: (events) => {
        if (this.cancelled) this.violations.push(`onEvents after cancel: ${describeEvents(events)}`);
        if (this.errors.length > 0) this.violations.push(`onEvents after onError: ${describeEvents(events)}`);
        if (!Array.isArray(events) || events.length === 0) this.violations.push('onEvents with no events');
        this.batches++;
        for (const e of events) this.events.push(e);
      },
      onProgress: (revision) => {
        if (this.cancelled) this.violations.push(`onProgress(${revision}) after cancel`);
        this.progress.push({ revision, delivered: this.events.length, maxDelivered: this.maxDelivered() });
      },
      onError: (error) => {
        if (this.cancelled) this.violations.push(`onError after cancel: ${error.message}`);
        if (this.errors.length > 0) this.violations.push(`second onError: ${error.message}`);
        this.errors.push(error);
      },
    });
  }

  maxDelivered(): number {
    return this.events.reduce((max, e) => Math.max(max, e.kv.modRevision), 0);
  }

  cancel(): void {
    if (this.cancelled) return;
    this.watch.cancel();
    this.cancelled = true;
  }

  hasEventAt(key: string, modRevision: number): boolean {
    return this.events.some((e) => e.kv.key === key && e.kv.modRevision === modRevision);
  }

  async waitForEventAt(key: string, modRevision: number): Promise<void> {
    await waitFor(
      () => this.hasEventAt(key, modRevision) || this.errors.length > 0,
      () => `event ${key}@${modRevision} on watch ${this.prefix} (got: ${describeEvents(this.events)})`,
    );
    this.assertNoError();
  }

  async waitForCount(n: number): Promise<void> {
    await waitFor(
      () => this.events.length >= n || this.errors.length > 0,
      () => `${n} events on watch ${this.prefix}, got ${this.events.length}: ${describeEvents(this.events)}`,
    );
    this.assertNoError();
  }

  assertNoError(): void {
    assert.deepEqual(
      this.errors.map((e) => `${e.name}: ${e.message}`),
      [],
      `watch ${this.prefix} from ${this.fromRevision} reported an error`,
    );
  }

  /** No errors, no protocol violations, every event under the prefix, strictly in revision order. */
  assertHealthy(): void {
    this.assertNoError();
    assert.deepEqual(this.violations, [], 'watch protocol violations');
    let last = 0;
    for (const e of this.events) {
      assert.ok(e.kv.key.startsWith(this.prefix), `event for ${e.kv.key} outside prefix ${this.prefix}`);
      assert.ok(
        e.kv.modRevision > last,
        `events out of order or duplicated: ${describeEvents(this.events)}`,
      );
      assert.ok(
        e.kv.modRevision >= this.fromRevision,
        `event ${e.kv.key}@${e.kv.modRevision} is before the start revision ${this.fromRevision}`,
      );
      last = e.kv.modRevision;
    }
  }
}

/**
 * Performs writes and keeps a model of the store, so tests can derive the exact events a watch
 * must deliver and the exact state a list at an old revision must return. It also checks the
 * returned KeyValues of every write against the interface.
 */
class Tracker {
  readonly live = new Map<string, KeyValue>();
  readonly log: WatchEvent[] = [];
  lastRevision = 0;

  constructor(private readonly h: Harness) {}

  private advance(kv: KeyValue): void {
    assert.ok(
      Number.isSafeInteger(kv.modRevision) && kv.modRevision > this.lastRevision,
      `write to ${kv.key} got revision ${kv.modRevision}, not above the previous write's ${this.lastRevision}`,
    );
    this.lastRevision = kv.modRevision;
  }

  async create(key: string, value: Buffer): Promise<KeyValue> {
    const kv = await this.h.store.create(key, value);
    assert.equal(kv.key, key);
    assert.ok(kv.value.equals(value), `create(${key}) returned a different value`);
    assert.equal(kv.createRevision, kv.modRevision, `create(${key}): createRevision must equal modRevision`);
    this.advance(kv);
    this.live.set(key, kv);
    this.log.push({ type: 'put', kv });
    return kv;
  }

  async update(key: string, value: Buffer): Promise<KeyValue> {
    const prev = this.live.get(key);
    assert.ok(prev, `tracker: ${key} is not live`);
    const kv = await this.h.store.update(key, value, prev.modRevision);
    assert.equal(kv.key, key);
    assert.ok(kv.value.equals(value), `update(${key}) returned a different value`);
    assert.equal(kv.createRevision, prev.createRevision, `update(${key}) must keep createRevision`);
    this.advance(kv);
    this.live.set(key, kv);
    this.log.push({ type: 'put', kv, prevKv: prev });
    return kv;
  }

  async delete(key: string, withExpected = true): Promise<KeyValue> {
    const prev = this.live.get(key);
    assert.ok(prev, `tracker: ${key} is not live`);
    const kv = await this.h.store.delete(key, withExpected ? prev.modRevision : undefined);
    this.advance(kv);
    const expected: KeyValue = { ...prev, modRevision: kv.modRevision };
    assert.deepEqual(
      kvView(kv),
      kvView(expected),
      `delete(${key}) must return the old value with the delete's revision as modRevision`,
    );
    this.live.delete(key);
    this.log.push({ type: 'delete', kv: expected, prevKv: prev });
    return kv;
  }

  /** Events a watch on `prefix` from `fromRevision` must deliver, given the writes so far. */
  expectedEvents(prefix: string, fromRevision: number): WatchEvent[] {
    return this.log.filter((e) => e.kv.key.startsWith(prefix) && e.kv.modRevision >= fromRevision);
  }

  /** The live keys under `prefix` as of `revision`, in key (byte) order. */
  stateAt(prefix: string, revision: number): KeyValue[] {
    const state = new Map<string, KeyValue>();
    for (const e of this.log) {
      if (e.kv.modRevision > revision) break;
      if (e.type === 'put') state.set(e.kv.key, e.kv);
      else state.delete(e.kv.key);
    }
    return [...state.values()].filter((kv) => kv.key.startsWith(prefix)).sort((a, b) => byteOrder(a.key, b.key));
  }
}

/** Per-test wrapper around the fixture: tracks stores and watches so everything is released. */
class Harness {
  private readonly stores: Datastore[] = [];
  private readonly closed = new Set<Datastore>();
  private readonly recorders: WatchRecorder[] = [];
  store: Datastore;

  constructor(private readonly fixture: DatastoreFixture) {
    this.store = fixture.store;
    this.stores.push(fixture.store);
  }

  get canReopen(): boolean {
    return this.fixture.reopen !== undefined;
  }

  tracker(): Tracker {
    return new Tracker(this);
  }

  watch(prefix: string, fromRevision: number): WatchRecorder {
    const rec = new WatchRecorder(this.store, prefix, fromRevision);
    this.recorders.push(rec);
    return rec;
  }

  async close(): Promise<void> {
    for (const rec of this.recorders) rec.cancel();
    if (!this.closed.has(this.store)) {
      this.closed.add(this.store);
      await this.store.close();
    }
  }

  /** Close the current store and open another over the same backing data. */
  async reopen(): Promise<Datastore> {
    const reopen = this.fixture.reopen;
    assert.ok(reopen, 'backend has no reopen');
    await this.close();
    this.store = await reopen();
    this.stores.push(this.store);
    return this.store;
  }

  async dispose(): Promise<void> {
    for (const rec of this.recorders) {
      try {
        rec.cancel();
      } catch {
        // Best effort: the test itself reports what matters.
      }
    }
    for (const store of this.stores) {
      if (this.closed.has(store)) continue;
      this.closed.add(store);
      try {
        await store.close();
      } catch {
        // Best effort.
      }
    }
    await this.fixture.cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------------

export function runDatastoreConformance(backendName: string, open: OpenDatastore): void {
  /** Registers a test that runs against a fresh store. */
  function test(name: string, body: (h: Harness, t: TestContext) => Promise<void>): void {
    it(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
      const h = new Harness(await open());
      try {
        await body(h, t);
      } finally {
        await h.dispose();
      }
    });
  }

  describe(`Datastore conformance: ${backendName}`, () => {
    describe('revisions', () => {
      test('a fresh store is empty, at a non-negative revision, never compacted', async (h) => {
        const { store } = h;
        assert.equal(typeof store.name, 'string');
        assert.ok(store.name.length > 0, 'name must be non-empty');
        const rev = await store.currentRevision();
        assert.ok(Number.isSafeInteger(rev) && rev >= 0, `currentRevision() = ${rev}`);
        assert.equal(await store.compactRevision(), 0);
        const all = await store.list('');
        assert.deepEqual(all.items, []);
        assert.equal(all.more, false);
        assert.equal(all.revision, rev);
        assert.equal(await store.get('/nothing'), undefined);
      });

      test('every write strictly increases the revision; create/mod revisions are set', async (h) => {
        const { store } = h;
        const r0 = await store.currentRevision();

        const a1 = await store.create('/r/a', buf('a1'));
        assert.ok(a1.modRevision > r0, `create got ${a1.modRevision}, store was at ${r0}`);
        assert.equal(a1.createRevision, a1.modRevision);
        assert.equal(await store.currentRevision(), a1.modRevision);

        const b1 = await store.create('/r/b', buf('b1'));
        assert.ok(b1.modRevision > a1.modRevision);
        assert.equal(b1.createRevision, b1.modRevision);
        assert.equal(await store.currentRevision(), b1.modRevision);

        const a2 = await store.update('/r/a', buf('a2'), a1.modRevision);
        assert.ok(a2.modRevision > b1.modRevision);
        assert.equal(a2.createRevision, a1.createRevision, 'update keeps createRevision');
        assert.equal(await store.currentRevision(), a2.modRevision);

        const a3 = await store.update('/r/a', buf('a3'), a2.modRevision);
        assert.ok(a3.modRevision > a2.modRevision);
        assert.equal(a3.createRevision, a1.createRevision);

        const bDel = await store.delete('/r/b');
        assert.ok(bDel.modRevision > a3.modRevision, 'delete gets a new revision');
        assert.equal(await store.currentRevision(), bDel.modRevision);

        // get returns exactly what the writes returned.
        assert.deepEqual(kvView((await store.get('/r/a'))!), kvView(a3));
        assert.equal(await store.get('/r/b'), undefined);
      });

      test('reads do not change the revision', async (h) => {
        const { store } = h;
        const t = h.tracker();
        await t.create('/r/a', buf('a'));
        await t.create('/r/b', buf('b'));
        const rev = await store.currentRevision();
        await store.get('/r/a');
        await store.get('/r/missing');
        await store.list('/r/');
        await store.list('/r/', { limit: 1 });
        await store.list('/r/', { revision: rev });
        await store.compactRevision();
        const rec = h.watch('/r/', rev + 1);
        rec.watch.requestProgress();
        rec.cancel();
        assert.equal(await store.currentRevision(), rev);
        const next = await t.create('/r/c', buf('c'));
        assert.ok(next.modRevision > rev);
      });

      test('failed writes do not consume a revision; the next success gets the next one', async (h) => {
        const { store } = h;
        const a = await store.create('/r/a', buf('a'));
        const rev = await store.currentRevision();
        assert.equal(rev, a.modRevision);

        await expectError(store.create('/r/a', buf('again')), KeyExistsError);
        await expectError(store.update('/r/a', buf('x'), a.modRevision + 100), ConflictError);
        await expectError(store.update('/r/missing', buf('x'), a.modRevision), KeyNotFoundError);
        await expectError(store.delete('/r/a', a.modRevision + 100), ConflictError);
        await expectError(store.delete('/r/missing'), KeyNotFoundError);
        await expectError(store.list('/r/', { revision: rev + 10 }), FutureRevisionError);

        assert.equal(await store.currentRevision(), rev, 'failed writes changed currentRevision');
        assert.deepEqual(kvView((await store.get('/r/a'))!), kvView(a), 'failed writes changed the key');
        const b = await store.create('/r/b', buf('b'));
        // etcd: "every successful write gets the next value of one global revision".
        assert.equal(b.modRevision, rev + 1, 'a failed write consumed a revision (gap in revisions)');
      });

      test('successful writes get consecutive revisions', async (h) => {
        const { store } = h;
        const r0 = await store.currentRevision();
        const revs: number[] = [];
        revs.push((await store.create('/r/a', buf('1'))).modRevision);
        revs.push((await store.create('/r/b', buf('1'))).modRevision);
        revs.push((await store.update('/r/a', buf('2'), revs[0]!)).modRevision);
        revs.push((await store.delete('/r/b')).modRevision);
        revs.push((await store.create('/r/b', buf('2'))).modRevision);
        revs.push((await store.delete('/r/a', revs[2]!)).modRevision);
        assert.deepEqual(revs, [1, 2, 3, 4, 5, 6].map((i) => r0 + i));
        assert.equal(await store.currentRevision(), r0 + 6);
      });
    });

    describe('get / create / update / delete', () => {
      test('get returns undefined for missing keys and is exact-match (no prefix)', async (h) => {
        const { store } = h;
        await store.create('/g/abc', buf('x'));
        assert.equal(await store.get('/g/ab'), undefined);
        assert.equal(await store.get('/g/abcd'), undefined);
        assert.equal(await store.get('/g/'), undefined);
        assert.equal((await store.get('/g/abc'))?.value.toString(), 'x');
      });

      test('create on an existing key fails with KeyExistsError and changes nothing', async (h) => {
        const { store } = h;
        const kv = await store.create('/c/k', buf('v1'));
        const err = await expectError(store.create('/c/k', buf('v2')), KeyExistsError);
        assert.equal(err.key, '/c/k');
        assert.deepEqual(kvView((await store.get('/c/k'))!), kvView(kv));
      });

      test('a write guard on another key: each write happens only while that key is at the given revision, in the same transaction', async (h) => {
        const { store } = h;
        const term = await store.create('/term/lease', buf('held by a'));
        const guard = { key: '/term/lease', modRevision: term.modRevision };
        // While the guard holds, every kind of write goes through.
        const created = await store.create('/guarded/k', buf('v1'), guard);
        const updated = await store.update('/guarded/k', buf('v2'), created.modRevision, guard);
        await store.create('/guarded/gone', buf('x'), guard);
        await store.delete('/guarded/gone', undefined, guard);
        // The guard key moves (another writer took the lease): every guarded write is refused, nothing is written.
        const taken = await store.update('/term/lease', buf('held by b'), term.modRevision);
        const before = await store.currentRevision();
        const refusedCreate = await expectError(store.create('/guarded/new', buf('late'), guard), GuardFailedError);
        assert.equal(refusedCreate.key, '/guarded/new');
        assert.equal(refusedCreate.actualModRevision, taken.modRevision);
        assert.deepEqual(refusedCreate.guard, guard);
        await expectError(store.update('/guarded/k', buf('late'), updated.modRevision, guard), GuardFailedError);
        await expectError(store.delete('/guarded/k', updated.modRevision, guard), GuardFailedError);
        await expectError(store.delete('/guarded/k', undefined, guard), GuardFailedError);
        // Reported before the write's own condition: the key exists, and the revision is stale, too.
        await expectError(store.create('/guarded/k', buf('late'), guard), GuardFailedError);
        await expectError(store.update('/guarded/k', buf('late'), created.modRevision, guard), GuardFailedError);
        assert.equal(await store.currentRevision(), before, 'a refused write takes no revision');
        assert.equal(await store.get('/guarded/new'), undefined);
        assert.equal((await store.get('/guarded/k'))?.value.toString(), 'v2');
        // With the new revision the writes go through again; a guard key that is gone never holds.
        const next = { key: '/term/lease', modRevision: taken.modRevision };
        await store.update('/guarded/k', buf('v3'), updated.modRevision, next);
        await store.delete('/term/lease');
        const missing = await expectError(store.create('/guarded/other', buf('x'), next), GuardFailedError);
        assert.equal(missing.actualModRevision, 0);
      });

      test('a guarded write issued beside a change of the guard key lands before that change or not at all', async (h) => {
        const { store } = h;
        for (let round = 0; round < 20; round++) {
          const term = await store.create(`/term/${round}`, buf('a'));
          const guard = { key: `/term/${round}`, modRevision: term.modRevision };
          // Issued in the same turn, in either order: whichever the store orders first decides.
          const writes = round % 2 === 0
            ? [store.update(`/term/${round}`, buf('b'), term.modRevision), store.create(`/guarded/${round}`, buf('x'), guard)]
            : [store.create(`/guarded/${round}`, buf('x'), guard), store.update(`/term/${round}`, buf('b'), term.modRevision)];
          const [first, second] = await Promise.allSettled(writes);
          const takeover = round % 2 === 0 ? first! : second!;
          const guarded = round % 2 === 0 ? second! : first!;
          assert.equal(takeover.status, 'fulfilled');
          const takenAt = (takeover as PromiseFulfilledResult<KeyValue>).value.modRevision;
          if (guarded.status === 'fulfilled') {
            assert.ok(guarded.value.modRevision < takenAt, `round ${round}: the guarded write (${guarded.value.modRevision}) landed after the guard key changed (${takenAt})`);
          } else {
            assert.ok(guarded.reason instanceof GuardFailedError, `round ${round}: ${String(guarded.reason)}`);
            assert.equal(await store.get(`/guarded/${round}`), undefined);
          }
        }
      });

      test('create after delete succeeds with a new createRevision', async (h) => {
        const { store } = h;
        const first = await store.create('/c/k', buf('v1'));
        const del = await store.delete('/c/k');
        assert.equal(await store.get('/c/k'), undefined);
        const second = await store.create('/c/k', buf('v2'));
        assert.ok(second.createRevision > del.modRevision, 'new incarnation must have a new createRevision');
        assert.equal(second.createRevision, second.modRevision);
        assert.notEqual(second.createRevision, first.createRevision);
        assert.deepEqual(kvView((await store.get('/c/k'))!), kvView(second));
        // CAS against the previous incarnation's revision must fail.
        const err = await expectError(store.update('/c/k', buf('v3'), first.modRevision), ConflictError);
        assert.equal(err.expectedModRevision, first.modRevision);
        assert.equal(err.actualModRevision, second.modRevision);
      });

      test('update is compare-and-swap on modRevision', async (h) => {
        const { store } = h;
        const v1 = await store.create('/u/k', buf('v1'));
        const v2 = await store.update('/u/k', buf('v2'), v1.modRevision);
        assert.equal(v2.value.toString(), 'v2');
        assert.deepEqual(kvView((await store.get('/u/k'))!), kvView(v2));

        // Stale revision.
        const err = await expectError(store.update('/u/k', buf('stale'), v1.modRevision), ConflictError);
        assert.equal(err.key, '/u/k');
        assert.equal(err.expectedModRevision, v1.modRevision);
        assert.equal(err.actualModRevision, v2.modRevision);
        // The conflict carries the value it found, read in the same step (a retry needs no read).
        assert.ok(err.current, 'a conflict carries the current value');
        assert.deepEqual(kvView(err.current), kvView(v2));
        // Revision from the future.
        const err2 = await expectError(store.update('/u/k', buf('future'), v2.modRevision + 5), ConflictError);
        assert.equal(err2.expectedModRevision, v2.modRevision + 5);
        assert.equal(err2.actualModRevision, v2.modRevision);
        // The createRevision is not the modRevision.
        await store.create('/u/other', buf('o'));
        const v3 = await store.update('/u/k', buf('v3'), v2.modRevision);
        await expectError(store.update('/u/k', buf('x'), v3.createRevision), ConflictError);

        assert.deepEqual(kvView((await store.get('/u/k'))!), kvView(v3), 'failed CAS changed the key');
      });

      test('update of a missing or deleted key fails with KeyNotFoundError', async (h) => {
        const { store } = h;
        const err = await expectError(store.update('/u/never', buf('x'), 1), KeyNotFoundError);
        assert.equal(err.key, '/u/never');
        const kv = await store.create('/u/gone', buf('x'));
        await store.delete('/u/gone');
        await expectError(store.update('/u/gone', buf('y'), kv.modRevision), KeyNotFoundError);
        assert.equal(await store.get('/u/gone'), undefined, 'failed update must not resurrect the key');
      });

      test('delete without expectedModRevision returns the old value at the delete revision', async (h) => {
        const { store } = h;
        const c = await store.create('/d/k', buf('v1'));
        const u = await store.update('/d/k', buf('v2'), c.modRevision);
        const d = await store.delete('/d/k');
        assert.equal(d.key, '/d/k');
        assert.equal(d.value.toString(), 'v2', 'delete returns the value just before the delete');
        assert.equal(d.createRevision, c.createRevision);
        assert.ok(d.modRevision > u.modRevision);
        assert.equal(d.modRevision, await store.currentRevision(), 'modRevision is the revision of the delete');
        assert.equal(await store.get('/d/k'), undefined);
        assert.deepEqual(keysOf(await store.list('/d/')), []);
      });

      test('delete with expectedModRevision is compare-and-delete', async (h) => {
        const { store } = h;
        const c = await store.create('/d/k', buf('v1'));
        const u = await store.update('/d/k', buf('v2'), c.modRevision);
        const err = await expectError(store.delete('/d/k', c.modRevision), ConflictError);
        assert.equal(err.key, '/d/k');
        assert.equal(err.expectedModRevision, c.modRevision);
        assert.equal(err.actualModRevision, u.modRevision);
        assert.deepEqual(err.current && kvView(err.current), kvView(u));
        assert.deepEqual(kvView((await store.get('/d/k'))!), kvView(u), 'failed delete removed the key');

        const d = await store.delete('/d/k', u.modRevision);
        assert.equal(d.value.toString(), 'v2');
        assert.ok(d.modRevision > u.modRevision);
        assert.equal(await store.get('/d/k'), undefined);
      });

      test('delete of a missing key fails with KeyNotFoundError', async (h) => {
        const { store } = h;
        const err = await expectError(store.delete('/d/never'), KeyNotFoundError);
        assert.equal(err.key, '/d/never');
        const kv = await store.create('/d/k', buf('v'));
        await store.delete('/d/k');
        await expectError(store.delete('/d/k'), KeyNotFoundError);
        await expectError(store.delete('/d/k', kv.modRevision), KeyNotFoundError);
      });

      test('values are copied: mutating input or output buffers does not change the store', async (h) => {
        const { store } = h;
        const input = buf('original');
        await store.create('/m/k', input);
        input.fill(0x41);
        const got = await store.get('/m/k');
        assert.equal(got?.value.toString(), 'original');
        got!.value.fill(0x42);
        const listed = await store.list('/m/');
        assert.equal(listed.items[0]?.value.toString(), 'original');
        listed.items[0]!.value.fill(0x43);
        assert.equal((await store.get('/m/k'))?.value.toString(), 'original');
      });

      test('empty values round-trip', async (h) => {
        const { store } = h;
        const kv = await store.create('/e/k', Buffer.alloc(0));
        assert.equal(kv.value.length, 0);
        const got = await store.get('/e/k');
        assert.ok(got, 'key with an empty value must exist');
        assert.ok(Buffer.isBuffer(got.value));
        assert.equal(got.value.length, 0);
        const listed = await store.list('/e/');
        assert.equal(listed.items.length, 1);
        assert.equal(listed.items[0]!.value.length, 0);
        const d = await store.delete('/e/k');
        assert.ok(Buffer.isBuffer(d.value) && d.value.length === 0);
      });
    });

    describe('list', () => {
      const prefixKeys = [
        '/a',
        '/a/',
        '/a/x',
        '/a/y/z',
        '/ab',
        '/ab/x',
        '/b/x',
        '/A/x',
        '/a_/x',
        '/a%/x',
        '/g*/x',
        '/g?/x',
        '/g[/x',
        '/gz/x',
        '/registry/pods/default/x',
        '/registry/pods/kube-system/y',
        '/registry/podsx/default/z',
        '/registry/podtemplates/default/t',
        '/registry/pod',
        '/h/\u00ff',
        '/h/\uffff',
        '/h/\u{1F600}',
        '/h/\u{10FFFF}',
        '/h0/x',
      ];

      test('prefix is a plain string prefix (no wildcards, case-sensitive)', async (h) => {
        const { store } = h;
        // Create in a scrambled order so ordering is not an accident of insertion order.
        const scrambled = [...prefixKeys].sort((a, b) => byteOrder(b + 'z', a + 'z'));
        for (const key of scrambled) await store.create(key, buf(`v:${key}`));

        const expectFor = (prefix: string): string[] =>
          prefixKeys.filter((k) => k.startsWith(prefix)).sort(byteOrder);
        const cases = [
          '/a/',
          '/a',
          '/ab/',
          '/ab',
          '/a_/',
          '/a_',
          '/a%',
          '/A/',
          '/g*',
          '/g?',
          '/g[',
          '/registry/pods/',
          '/registry/pods',
          '/registry/pod',
          '/h/',
          '/h',
          '/a/y/z',
          '/nope',
          '',
        ];
        for (const prefix of cases) {
          const result = await store.list(prefix);
          assert.deepEqual(keysOf(result), expectFor(prefix), `list(${JSON.stringify(prefix)})`);
          assert.equal(result.more, false);
          for (const kv of result.items) assert.equal(kv.value.toString(), `v:${kv.key}`);
        }
        // A few spelled out, so the intent is obvious.
        assert.deepEqual(keysOf(await store.list('/a/')), ['/a/', '/a/x', '/a/y/z']);
        assert.deepEqual(keysOf(await store.list('/registry/pods/')), [
          '/registry/pods/default/x',
          '/registry/pods/kube-system/y',
        ]);
        assert.deepEqual(keysOf(await store.list('/a_/')), ['/a_/x']);
      });

      test('items come back in key order with correct metadata', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const keys = ['/o/b', '/o/a/c', '/o/a', '/o/a-', '/o/a0', '/o/B', '/o/aa', '/o/a/b', '/o/~', '/o/ä'];
        for (const key of keys) await t.create(key, buf(key));
        await t.update('/o/a', buf('new'));
        const result = await store.list('/o/');
        assert.deepEqual(keysOf(result), [...keys].sort(byteOrder));
        assert.deepEqual(result.items.map(kvView), t.stateAt('/o/', t.lastRevision).map(kvView));
        assert.equal(result.revision, await store.currentRevision());
        assert.equal(result.revision, t.lastRevision);
      });

      test('list reports the current revision, including writes outside the prefix', async (h) => {
        const { store } = h;
        await store.create('/p/a', buf('a'));
        const other = await store.create('/q/a', buf('a'));
        const result = await store.list('/p/');
        assert.equal(result.revision, other.modRevision);
        const empty = await store.list('/nothing/');
        assert.equal(empty.revision, other.modRevision);
      });

      test('limit and continue page through keys with `more`', async (h) => {
        const { store } = h;
        const keys = Array.from({ length: 7 }, (_, i) => `/p/k${i}`);
        for (const key of [...keys].reverse()) await store.create(key, buf(key));
        await store.create('/p0', buf('outside'));
        await store.create('/o', buf('outside'));

        const pages: string[][] = [];
        const mores: boolean[] = [];
        let cont: string | undefined;
        for (let i = 0; i < 10; i++) {
          const page = await store.list('/p/', { limit: 3, ...(cont === undefined ? {} : { continue: cont }) });
          assert.ok(page.items.length <= 3, 'page larger than limit');
          pages.push(keysOf(page));
          mores.push(page.more);
          if (!page.more) break;
          cont = page.items[page.items.length - 1]!.key;
        }
        assert.deepEqual(pages, [
          ['/p/k0', '/p/k1', '/p/k2'],
          ['/p/k3', '/p/k4', '/p/k5'],
          ['/p/k6'],
        ]);
        assert.deepEqual(mores, [true, true, false]);

        // Exactly filling the limit: no more.
        const exact = await store.list('/p/', { limit: 7 });
        assert.equal(exact.items.length, 7);
        assert.equal(exact.more, false);
        const exactTail = await store.list('/p/', { limit: 2, continue: '/p/k4' });
        assert.deepEqual(keysOf(exactTail), ['/p/k5', '/p/k6']);
        assert.equal(exactTail.more, false);
        // One short of all: more.
        const short = await store.list('/p/', { limit: 6 });
        assert.equal(short.more, true);
        // Limit above the count, and limit 0 meaning no limit.
        assert.deepEqual(keysOf(await store.list('/p/', { limit: 100 })), keys);
        const unlimited = await store.list('/p/', { limit: 0 });
        assert.deepEqual(keysOf(unlimited), keys);
        assert.equal(unlimited.more, false);
        // continue is exclusive and need not be an existing key.
        assert.deepEqual(keysOf(await store.list('/p/', { continue: '/p/k3' })), ['/p/k4', '/p/k5', '/p/k6']);
        assert.deepEqual(keysOf(await store.list('/p/', { continue: '/p/k3x', limit: 2 })), ['/p/k4', '/p/k5']);
        assert.deepEqual(keysOf(await store.list('/p/', { continue: '/p/k6' })), []);
        assert.equal((await store.list('/p/', { continue: '/p/k6' })).more, false);
        // limit 1 walks one by one.
        const one = await store.list('/p/', { limit: 1, continue: '/p/k0' });
        assert.deepEqual(keysOf(one), ['/p/k1']);
        assert.equal(one.more, true);
      });

      test('list at an older revision returns the state as of then', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const r1 = (await t.create('/o/a', buf('a1'))).modRevision;
        const r2 = (await t.create('/o/b', buf('b1'))).modRevision;
        const r3 = (await t.update('/o/a', buf('a2'))).modRevision;
        const r4 = (await t.create('/o/c', buf('c1'))).modRevision;
        await t.create('/other/x', buf('x'));
        const r5 = (await t.delete('/o/b')).modRevision;
        const r6 = (await t.update('/o/c', buf('c2'))).modRevision;
        await t.create('/o/d', buf('d1'));
        await t.delete('/o/a');
        const r9 = (await t.create('/o/a', buf('a3'))).modRevision;

        for (const rev of [r1, r2, r3, r4, r4 + 1, r5, r6, r9]) {
          const result = await store.list('/o/', { revision: rev });
          assert.equal(result.revision, rev, `list at ${rev} must report revision ${rev}`);
          assert.equal(result.more, false);
          assert.deepEqual(result.items.map(kvView), t.stateAt('/o/', rev).map(kvView), `list at revision ${rev}`);
        }
        // Spelled out for r4: a (second value), b (deleted since), c (changed since).
        const at4 = await store.list('/o/', { revision: r4 });
        assert.deepEqual(
          at4.items.map((kv) => [kv.key, kv.value.toString(), kv.createRevision, kv.modRevision]),
          [
            ['/o/a', 'a2', r1, r3],
            ['/o/b', 'b1', r2, r2],
            ['/o/c', 'c1', r4, r4],
          ],
        );
        // Current state: a was recreated.
        const now = await store.list('/o/');
        assert.deepEqual(
          now.items.map((kv) => [kv.key, kv.value.toString(), kv.createRevision]),
          [
            ['/o/a', 'a3', r9],
            ['/o/c', 'c2', r4],
            ['/o/d', 'd1', t.live.get('/o/d')!.createRevision],
          ],
        );
        // Paging at an old revision.
        const p1 = await store.list('/o/', { revision: r4, limit: 2 });
        assert.deepEqual(keysOf(p1), ['/o/a', '/o/b']);
        assert.equal(p1.more, true);
        assert.equal(p1.revision, r4);
        const p2 = await store.list('/o/', { revision: r4, limit: 2, continue: '/o/b' });
        assert.deepEqual(keysOf(p2), ['/o/c']);
        assert.equal(p2.more, false);
        assert.equal(p2.revision, r4);
      });

      test('paging at a fixed revision is consistent while writes happen between pages', async (h) => {
        const { store } = h;
        const t = h.tracker();
        for (let i = 0; i < 6; i++) await t.create(`/c/k${i}`, buf(`v${i}`));
        const first = await store.list('/c/', { limit: 2 });
        const rev = first.revision;
        assert.deepEqual(keysOf(first), ['/c/k0', '/c/k1']);
        // Mutate all around the next pages.
        await t.delete('/c/k2');
        await t.update('/c/k3', buf('changed'));
        await t.create('/c/k3a', buf('new'));
        await t.create('/c/k9', buf('new'));
        const seen = [...first.items];
        let cont = first.items[first.items.length - 1]!.key;
        let more = first.more;
        while (more) {
          const page = await store.list('/c/', { limit: 2, continue: cont, revision: rev });
          assert.equal(page.revision, rev);
          seen.push(...page.items);
          more = page.more;
          cont = page.items[page.items.length - 1]!.key;
        }
        assert.deepEqual(seen.map(kvView), t.stateAt('/c/', rev).map(kvView));
        assert.deepEqual(keysOf(seen), ['/c/k0', '/c/k1', '/c/k2', '/c/k3', '/c/k4', '/c/k5']);
      });

      test('list at a future revision fails with FutureRevisionError', async (h) => {
        const { store } = h;
        await store.create('/f/a', buf('a'));
        const rev = await store.currentRevision();
        const err = await expectError(store.list('/f/', { revision: rev + 1 }), FutureRevisionError);
        assert.equal(err.requestedRevision, rev + 1);
        assert.equal(err.currentRevision, rev);
        await expectError(store.list('/f/', { revision: rev + 1000 }), FutureRevisionError);
        // The current revision itself is fine.
        assert.deepEqual(keysOf(await store.list('/f/', { revision: rev })), ['/f/a']);
      });

      test('list at a compacted revision fails with CompactedError', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const r1 = (await t.create('/k/a', buf('a1'))).modRevision;
        const r2 = (await t.update('/k/a', buf('a2'))).modRevision;
        const r3 = (await t.create('/k/b', buf('b1'))).modRevision;
        await t.update('/k/a', buf('a3'));
        await store.compact(r3);
        for (const rev of [r1, r2]) {
          const err = await expectError(store.list('/k/', { revision: rev }), CompactedError);
          assert.equal(err.requestedRevision, rev);
          assert.equal(err.compactRevision, r3);
        }
        // Latest still works.
        assert.deepEqual(keysOf(await store.list('/k/')), ['/k/a', '/k/b']);
      });
    });

    describe('watch', () => {
      test('a watch from currentRevision+1 gets later events, in order, with prevKv', async (h) => {
        const { store } = h;
        const t = h.tracker();
        await t.create('/w/before', buf('old'));
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/w/', from);
        await t.create('/w/a', buf('a1'));
        await t.update('/w/a', buf('a2'));
        await t.create('/w/b', buf('b1'));
        await t.update('/w/before', buf('new'));
        await t.delete('/w/a');
        await t.delete('/w/b', false);
        const expected = t.expectedEvents('/w/', from);
        assert.equal(expected.length, 6);
        await rec.waitForCount(expected.length);
        assert.deepEqual(rec.events.map(eventView), expected.map(eventView));
        rec.assertHealthy();

        // Spelled out: a create has no prevKv; a delete carries the old value at the delete's
        // revision and prevKv with the value before.
        const [createA, updateA, , , deleteA] = rec.events;
        assert.equal(createA!.prevKv, undefined, 'create event must not carry prevKv');
        assert.equal(updateA!.prevKv?.value.toString(), 'a1');
        assert.equal(deleteA!.type, 'delete');
        assert.equal(deleteA!.kv.value.toString(), 'a2');
        assert.equal(deleteA!.kv.modRevision, t.log.find((e) => e.type === 'delete')!.kv.modRevision);
        assert.equal(deleteA!.prevKv?.modRevision, updateA!.kv.modRevision);
      });

      test('a watch from a future revision delivers nothing before that revision', async (h) => {
        const { store } = h;
        const t = h.tracker();
        await t.create('/fw/a', buf('0'));
        const from = (await store.currentRevision()) + 3;
        const rec = h.watch('/fw/', from);
        await t.update('/fw/a', buf('1'));
        await t.create('/fw/b', buf('1'));
        await t.update('/fw/a', buf('2'));
        await t.delete('/fw/b');
        const sentinel = await t.create('/fw/~', buf('s'));
        await rec.waitForEventAt('/fw/~', sentinel.modRevision);
        rec.assertHealthy();
        assert.deepEqual(rec.events.map(eventView), t.expectedEvents('/fw/', from).map(eventView));
      });

      test('watch events carry the value as written, even if the caller reuses its buffer', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/reuse/', from);
        const scratch = Buffer.alloc(8);
        const revs: number[] = [];
        for (let i = 0; i < 3; i++) {
          scratch.fill(0x30 + i); // '0', '1', '2'
          const kv = i === 0
            ? await store.create('/reuse/k', scratch)
            : await store.update('/reuse/k', scratch, revs[i - 1]!);
          revs.push(kv.modRevision);
        }
        scratch.fill(0x58); // 'X'
        await rec.waitForCount(3);
        rec.assertHealthy();
        assert.deepEqual(
          rec.events.map((e) => [e.kv.value.toString(), e.prevKv?.value.toString()]),
          [
            ['00000000', undefined],
            ['11111111', '00000000'],
            ['22222222', '11111111'],
          ],
        );
      });

      test('only keys under the prefix are delivered', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/w/', from);
        const recA = h.watch('/a', from);
        const keys = ['/w', '/wx/a', '/w/a', '/W/a', '/w_/a', '/a', '/ab/c', '/a/b', '/b/c', '/w/z'];
        for (const key of keys) await store.create(key, buf('v'));
        await rec.waitForEventAt('/w/z', (await store.get('/w/z'))!.modRevision);
        await recA.waitForEventAt('/a/b', (await store.get('/a/b'))!.modRevision);
        // Flush recA past the last write.
        const sentinel = await store.create('/a~', buf('s'));
        await recA.waitForEventAt('/a~', sentinel.modRevision);
        assert.deepEqual(keysOf(rec.events.map((e) => e.kv)), ['/w/a', '/w/z']);
        assert.deepEqual(keysOf(recA.events.map((e) => e.kv)), ['/a', '/ab/c', '/a/b', '/a~']);
        rec.assertHealthy();
        recA.assertHealthy();
      });

      test('a watch from an old revision replays history, then continues live without gaps or duplicates', async (h) => {
        const t = h.tracker();
        const keys = Array.from({ length: 8 }, (_, i) => `/w/k${i}`);
        // Some history: creates, updates, deletes, recreates, plus noise outside the prefix.
        const write = async (i: number): Promise<void> => {
          const key = keys[i % keys.length]!;
          const live = t.live.get(key);
          if (i % 5 === 4) await t.create(`/wx/noise${i}`, buf(`n${i}`));
          else if (live === undefined) await t.create(key, buf(`c${i}`));
          else if (i % 7 === 3) await t.delete(key, i % 2 === 0);
          else await t.update(key, buf(`u${i}`));
        };
        for (let i = 0; i < 120; i++) await write(i);
        const from = t.log[30]!.kv.modRevision;

        // Keep writing while the watch starts and replays: the watch is opened in the middle of
        // a stream of writes, and the writer keeps yielding so replay and live writes interleave.
        let rec: WatchRecorder | undefined;
        for (let i = 120; i < 400; i++) {
          if (i === 200) rec = h.watch('/w/', from);
          await write(i);
          if (i % 10 === 0) await new Promise((resolve) => setImmediate(resolve));
          if (i % 50 === 0) await new Promise((resolve) => setTimeout(resolve, 1));
        }
        assert.ok(rec);

        const sentinel = await t.create('/w/~sentinel', buf('done'));
        await rec.waitForEventAt('/w/~sentinel', sentinel.modRevision);
        const expected = t.expectedEvents('/w/', from);
        rec.assertHealthy();
        assert.equal(rec.events.length, expected.length, 'number of delivered events');
        assert.deepEqual(rec.events.map(eventView), expected.map(eventView));
      });

      test('a watch from a compacted revision reports CompactedError', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const r1 = (await t.create('/w/a', buf('1'))).modRevision;
        await t.update('/w/a', buf('2'));
        const r3 = (await t.update('/w/a', buf('3'))).modRevision;
        await t.create('/w/b', buf('1'));
        await store.compact(r3);
        const rec = h.watch('/w/', r1);
        await waitFor(() => rec.errors.length > 0, 'onError for a watch from a compacted revision');
        const err = rec.errors[0]!;
        assert.ok(err instanceof CompactedError, `expected CompactedError, got ${err.name}: ${err.message}`);
        assert.equal(err.compactRevision, r3);
        assert.equal(err.requestedRevision, r1);
        assert.deepEqual(rec.events, [], 'no events from a compacted watch');
        // After onError, nothing more, even on new writes (checked via a healthy second watch).
        const live = h.watch('/w/', r3 + 1);
        const c = await t.update('/w/b', buf('2'));
        await live.waitForEventAt('/w/b', c.modRevision);
        assert.deepEqual(rec.events, []);
        assert.deepEqual(rec.violations, []);
        live.assertHealthy();
      });

      test('requestProgress reports a revision covering every delivered event', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/p/', from);

        // Progress on an idle watch.
        rec.watch.requestProgress();
        await waitFor(() => rec.progress.length >= 1, 'onProgress on an idle watch');
        assert.ok(rec.progress[0]!.revision >= from - 1, `idle progress ${rec.progress[0]!.revision} < ${from - 1}`);

        // Progress requested while events are in flight.
        for (let i = 0; i < 20; i++) {
          await t.create(`/p/k${i}`, buf(`${i}`));
          await t.create(`/q/k${i}`, buf(`${i}`));
          if (i % 4 === 0) rec.watch.requestProgress();
        }
        rec.watch.requestProgress();
        const lastP = t.live.get('/p/k19')!.modRevision;
        await rec.waitForEventAt('/p/k19', lastP);
        // Backends may coalesce requests; re-ask until a report covers the last event.
        await waitFor(
          () => {
            if (rec.progress.some((p) => p.revision >= lastP)) return true;
            rec.watch.requestProgress();
            return false;
          },
          () => `progress to reach ${lastP}; got ${rec.progress.map((p) => p.revision).join(',')}`,
        );
        assert.ok(rec.progress.length >= 2);

        const expected = t.expectedEvents('/p/', from);
        let prev = 0;
        for (const p of rec.progress) {
          assert.ok(p.revision >= p.maxDelivered, `progress ${p.revision} below delivered event ${p.maxDelivered}`);
          const due = expected.filter((e) => e.kv.modRevision <= p.revision).length;
          assert.ok(
            p.delivered >= due,
            `progress(${p.revision}) reported with only ${p.delivered} of the ${due} events at or below it delivered`,
          );
          assert.ok(p.revision >= prev, `progress went backwards: ${prev} then ${p.revision}`);
          prev = p.revision;
        }
        rec.assertHealthy();
        assert.deepEqual(rec.events.map(eventView), expected.map(eventView));

        // Progress eventually reaches the store's revision, even when the latest writes were
        // outside the prefix (Kubernetes bookmarks and consistent reads from cache rely on it).
        const outside = await store.create('/q/last', buf('x'));
        await waitFor(
          () => {
            if (rec.progress.some((p) => p.revision >= outside.modRevision)) return true;
            rec.watch.requestProgress();
            return false;
          },
          () => `progress to reach ${outside.modRevision}; got ${rec.progress.map((p) => p.revision).join(',')}`,
        );
        assert.equal(rec.events.length, expected.length, 'no events for writes outside the prefix');
      });

      test('cancel stops delivery', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/c/', from);
        const control = h.watch('/c/', from);
        const first = await store.create('/c/a', buf('1'));
        await rec.waitForEventAt('/c/a', first.modRevision);
        rec.cancel();
        rec.watch.cancel(); // cancelling twice is harmless
        const second = await store.update('/c/a', buf('2'), first.modRevision);
        const third = await store.create('/c/b', buf('1'));
        await control.waitForEventAt('/c/b', third.modRevision);
        assert.ok(control.hasEventAt('/c/a', second.modRevision));
        assert.deepEqual(
          rec.events.map((e) => e.kv.modRevision),
          [first.modRevision],
          'a cancelled watch must not deliver more events',
        );
        assert.deepEqual(rec.violations, []);
        rec.assertNoError();
        control.assertHealthy();
      });

      test('a consumer that throws gets onError and its watch ends; other watches go on', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const control = h.watch('/t/', from);
        const delivered: number[] = [];
        const errors: Error[] = [];
        const faulty = store.watch('/t/', from, {
          onEvents: (events) => {
            for (const e of events) delivered.push(e.kv.modRevision);
            throw new Error('consumer bug');
          },
          onError: (error) => errors.push(error),
        });
        try {
          const first = await store.create('/t/a', buf('1'));
          await waitFor(() => errors.length > 0, 'onError for a consumer that threw');
          assert.equal(errors[0]!.message, 'consumer bug');
          const second = await store.create('/t/b', buf('1'));
          await control.waitForEventAt('/t/b', second.modRevision);
          assert.ok(control.hasEventAt('/t/a', first.modRevision));
          assert.deepEqual(delivered, [first.modRevision], 'a watch whose consumer threw must deliver no more');
          assert.equal(errors.length, 1, 'onError exactly once');
          control.assertHealthy();
        } finally {
          faulty.cancel();
        }
      });

      test('cancelling a watch while its close error is pending silences that onError', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/cc/', from);
        const witness = h.watch('/cc/', from);
        const closing = store.close();
        rec.cancel();
        await closing;
        await waitFor(() => witness.errors.length > 0, 'onError for a watch of a closed store');
        await new Promise((resolve) => setImmediate(resolve));
        assert.deepEqual(rec.violations, []);
        rec.assertNoError();
      });

      test('several watches on overlapping prefixes each get their own events', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const from = (await store.currentRevision()) + 1;
        const all = h.watch('', from);
        const ns = h.watch('/registry/pods/', from);
        const one = h.watch('/registry/pods/default/', from);
        await t.create('/registry/pods/default/a', buf('1'));
        await t.create('/registry/pods/other/b', buf('1'));
        await t.create('/registry/podsx/default/c', buf('1'));
        await t.update('/registry/pods/default/a', buf('2'));
        await t.delete('/registry/pods/other/b');
        const sentinel = await t.create('/registry/pods/default/~', buf('s'));
        for (const rec of [all, ns, one]) {
          await rec.waitForEventAt('/registry/pods/default/~', sentinel.modRevision);
          rec.assertHealthy();
          assert.deepEqual(
            rec.events.map(eventView),
            t.expectedEvents(rec.prefix, from).map(eventView),
            `watch on ${JSON.stringify(rec.prefix)}`,
          );
        }
      });
    });

    describe('compaction', () => {
      test('compact keeps the latest value of every live key and drops older history', async (h) => {
        const { store } = h;
        const t = h.tracker();
        await t.create('/x/a', buf('a1'));
        await t.update('/x/a', buf('a2'));
        await t.create('/x/b', buf('b1'));
        await t.create('/x/gone', buf('g1'));
        const a3 = await t.update('/x/a', buf('a3'));
        await t.delete('/x/gone');
        await t.create('/x/c', buf('c1'));
        const compactAt = (await t.update('/x/c', buf('c2'))).modRevision;
        await t.update('/x/b', buf('b2'));
        await t.create('/x/d', buf('d1'));
        const after = t.lastRevision;

        assert.equal(await store.compactRevision(), 0);
        await store.compact(compactAt);
        assert.equal(await store.compactRevision(), compactAt);

        // Latest values all survive, with their revisions.
        assert.deepEqual(kvView((await store.get('/x/a'))!), kvView(a3));
        assert.equal(await store.get('/x/gone'), undefined);
        const now = await store.list('/x/');
        assert.deepEqual(now.items.map(kvView), t.stateAt('/x/', after).map(kvView));
        assert.deepEqual(keysOf(now), ['/x/a', '/x/b', '/x/c', '/x/d']);
        assert.deepEqual(keysOf(await store.list('/x/', { limit: 2, continue: '/x/a' })), ['/x/b', '/x/c']);

        // History after the compaction point is intact.
        for (let rev = compactAt + 1; rev <= after; rev++) {
          const r = await store.list('/x/', { revision: rev });
          assert.deepEqual(r.items.map(kvView), t.stateAt('/x/', rev).map(kvView), `list at ${rev} after compaction`);
        }
        // History before it is gone.
        const err = await expectError(store.list('/x/', { revision: compactAt - 1 }), CompactedError);
        assert.equal(err.compactRevision, compactAt);
        const rec = h.watch('/x/', compactAt - 1);
        await waitFor(() => rec.errors.length > 0, 'CompactedError on watch below the compacted revision');
        assert.ok(rec.errors[0] instanceof CompactedError);

        // Watching right after the compaction point replays what is left.
        const replay = h.watch('/x/', compactAt + 1);
        const last = t.log[t.log.length - 1]!;
        await replay.waitForEventAt(last.kv.key, last.kv.modRevision);
        replay.assertHealthy();
        assert.deepEqual(replay.events.map(eventView), t.expectedEvents('/x/', compactAt + 1).map(eventView));

        // Writes carry on: CAS against retained revisions, revisions keep increasing.
        const a4 = await t.update('/x/a', buf('a4'));
        assert.ok(a4.modRevision > after);
        assert.equal(a4.createRevision, a3.createRevision);
        await t.delete('/x/b');
        const again = await t.create('/x/gone', buf('g2'));
        assert.ok(again.createRevision > after);
        assert.equal(await store.compactRevision(), compactAt);
      });

      test('list at exactly the compacted revision still reflects the state then (etcd)', async (h) => {
        const { store } = h;
        const t = h.tracker();
        await t.create('/y/a', buf('a1'));
        await t.create('/y/b', buf('b1'));
        await t.update('/y/a', buf('a2'));
        await t.create('/y/c', buf('c1'));
        const compactAt = (await t.delete('/y/c')).modRevision;
        await t.update('/y/a', buf('a3'));
        await t.delete('/y/b');
        await store.compact(compactAt);
        const r = await store.list('/y/', { revision: compactAt });
        assert.equal(r.revision, compactAt);
        assert.deepEqual(r.items.map(kvView), t.stateAt('/y/', compactAt).map(kvView));
        assert.deepEqual(
          r.items.map((kv) => kv.value.toString()),
          ['a2', 'b1'],
        );
      });

      test('compacting everything keeps live keys and the revision', async (h) => {
        const { store } = h;
        const t = h.tracker();
        for (let i = 0; i < 10; i++) await t.create(`/z/k${i}`, buf(`${i}`));
        for (let i = 0; i < 10; i += 2) await t.update(`/z/k${i}`, buf(`${i}b`));
        for (let i = 0; i < 10; i += 3) await t.delete(`/z/k${i}`);
        const rev = await store.currentRevision();
        await store.compact(rev);
        assert.equal(await store.compactRevision(), rev);
        assert.ok((await store.currentRevision()) >= rev, 'compaction must not move the revision backwards');
        const result = await store.list('/z/');
        assert.deepEqual(result.items.map(kvView), t.stateAt('/z/', rev).map(kvView));
        const next = await t.create('/z/new', buf('n'));
        assert.ok(next.modRevision > rev);
        // A watch from just after the compaction sees the new write.
        const rec = h.watch('/z/', rev + 1);
        await rec.waitForEventAt('/z/new', next.modRevision);
        rec.assertHealthy();
      });
    });

    describe('concurrency', () => {
      test('20 workers doing CAS increments with retry lose no update', async (h) => {
        const { store } = h;
        const key = '/cc/counter';
        await store.create(key, buf('0'));
        const workers = 20;
        const perWorker = 10;
        let successes = 0;
        let conflicts = 0;
        const revisions: number[] = [];
        const worker = async (): Promise<void> => {
          for (let i = 0; i < perWorker; i++) {
            for (let attempt = 0; ; attempt++) {
              assert.ok(attempt < 10_000, 'worker starved');
              const cur = await store.get(key);
              assert.ok(cur, 'counter vanished');
              const n = Number(cur.value.toString());
              try {
                const kv = await store.update(key, buf(String(n + 1)), cur.modRevision);
                successes++;
                revisions.push(kv.modRevision);
                break;
              } catch (error) {
                if (error instanceof ConflictError) {
                  assert.equal(error.expectedModRevision, cur.modRevision);
                  assert.ok(error.actualModRevision > cur.modRevision, 'conflict must report a newer revision');
                  conflicts++;
                  continue;
                }
                throw error;
              }
            }
          }
        };
        await Promise.all(Array.from({ length: workers }, () => worker()));
        const final = await store.get(key);
        assert.equal(successes, workers * perWorker);
        assert.equal(final?.value.toString(), String(successes), `conflicts seen: ${conflicts}`);
        assert.equal(new Set(revisions).size, revisions.length, 'two successful updates share a revision');
        assert.equal(final?.modRevision, Math.max(...revisions));
      });

      test('parallel updates with the same expected revision: exactly one wins', async (h) => {
        const { store } = h;
        const kv = await store.create('/cc/k', buf('0'));
        const results = await Promise.allSettled(
          Array.from({ length: 25 }, (_, i) => store.update('/cc/k', buf(`w${i}`), kv.modRevision)),
        );
        const won = results.filter((r): r is PromiseFulfilledResult<KeyValue> => r.status === 'fulfilled');
        assert.equal(won.length, 1, 'exactly one CAS must succeed');
        const winner = won[0]!.value;
        for (const r of results) {
          if (r.status === 'fulfilled') continue;
          assert.ok(r.reason instanceof ConflictError, `loser failed with ${String(r.reason)}`);
          assert.equal(r.reason.expectedModRevision, kv.modRevision);
          assert.equal(r.reason.actualModRevision, winner.modRevision);
        }
        assert.deepEqual(kvView((await store.get('/cc/k'))!), kvView(winner));
        assert.equal(await store.currentRevision(), winner.modRevision);
      });

      test('parallel creates of one key: exactly one wins', async (h) => {
        const { store } = h;
        const results = await Promise.allSettled(
          Array.from({ length: 25 }, (_, i) => store.create('/cc/once', buf(`w${i}`))),
        );
        const won = results.filter((r): r is PromiseFulfilledResult<KeyValue> => r.status === 'fulfilled');
        assert.equal(won.length, 1);
        for (const r of results) {
          if (r.status === 'rejected') assert.ok(r.reason instanceof KeyExistsError, String(r.reason));
        }
        assert.deepEqual(kvView((await store.get('/cc/once'))!), kvView(won[0]!.value));
      });

      test('parallel deletes with the same expected revision: exactly one wins', async (h) => {
        const { store } = h;
        const kv = await store.create('/cc/del', buf('x'));
        const results = await Promise.allSettled(
          Array.from({ length: 10 }, () => store.delete('/cc/del', kv.modRevision)),
        );
        const won = results.filter((r) => r.status === 'fulfilled');
        assert.equal(won.length, 1);
        for (const r of results) {
          if (r.status === 'rejected') {
            assert.ok(
              r.reason instanceof KeyNotFoundError || r.reason instanceof ConflictError,
              String(r.reason),
            );
          }
        }
        assert.equal(await store.get('/cc/del'), undefined);
      });

      test('many parallel creates of distinct keys get distinct revisions', async (h) => {
        const { store } = h;
        const r0 = await store.currentRevision();
        const n = 200;
        const created = await Promise.all(
          Array.from({ length: n }, (_, i) => store.create(`/cc/many/${String(i).padStart(3, '0')}`, buf(`${i}`))),
        );
        const revs = created.map((kv) => kv.modRevision);
        assert.equal(new Set(revs).size, n, 'revisions must be distinct');
        for (const kv of created) {
          assert.ok(kv.modRevision > r0);
          assert.equal(kv.createRevision, kv.modRevision);
        }
        const current = await store.currentRevision();
        assert.equal(current, Math.max(...revs));
        const listed = await store.list('/cc/many/');
        assert.equal(listed.items.length, n);
        assert.deepEqual(
          listed.items.map(kvView),
          [...created].sort((a, b) => byteOrder(a.key, b.key)).map(kvView),
        );
      });

      test('a watch sees every one of many parallel writes exactly once, in revision order', async (h) => {
        const { store } = h;
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/cc/w/', from);
        const created = await Promise.all(
          Array.from({ length: 100 }, (_, i) => store.create(`/cc/w/${i}`, buf(`${i}`))),
        );
        await Promise.all(created.map((kv) => store.update(kv.key, buf('u'), kv.modRevision)));
        await rec.waitForCount(200);
        const sentinel = await store.create('/cc/w/~', buf('s'));
        await rec.waitForEventAt('/cc/w/~', sentinel.modRevision);
        rec.assertHealthy();
        assert.equal(rec.events.length, 201);
        for (const kv of created) {
          const forKey = rec.events.filter((e) => e.kv.key === kv.key);
          assert.deepEqual(
            forKey.map((e) => [e.type, e.kv.value.toString(), e.prevKv?.value.toString()]),
            [
              ['put', kv.value.toString(), undefined],
              ['put', 'u', kv.value.toString()],
            ],
          );
        }
      });
    });

    describe('values and keys', () => {
      test('large values (1.5 MiB, 3 MiB) round-trip byte-exact', async (h) => {
        const { store } = h;
        const big1 = randomBytes(1.5 * 1024 * 1024);
        const big2 = randomBytes(3 * 1024 * 1024);
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/big/', from);
        const c = await store.create('/big/a', big1);
        assert.ok((await store.get('/big/a'))!.value.equals(big1), '1.5 MiB value corrupted on get');
        const u = await store.update('/big/a', big2, c.modRevision);
        const got = await store.get('/big/a');
        assert.equal(got!.value.length, big2.length);
        assert.ok(got!.value.equals(big2), '3 MiB value corrupted on get');
        await store.create('/big/b', big1);
        const listed = await store.list('/big/');
        assert.ok(listed.items[0]!.value.equals(big2));
        assert.ok(listed.items[1]!.value.equals(big1));
        const old = await store.list('/big/', { revision: c.modRevision });
        assert.ok(old.items[0]!.value.equals(big1), '1.5 MiB value corrupted in history');
        const d = await store.delete('/big/a', u.modRevision);
        assert.ok(d.value.equals(big2));

        await rec.waitForCount(4);
        rec.assertHealthy();
        const [e1, e2, e3, e4] = rec.events;
        assert.ok(e1!.kv.value.equals(big1));
        assert.ok(e2!.kv.value.equals(big2) && e2!.prevKv!.value.equals(big1));
        assert.ok(e3!.kv.value.equals(big1));
        assert.equal(e4!.type, 'delete');
        assert.ok(e4!.kv.value.equals(big2));
      });

      test('binary values (every byte value) round-trip', async (h) => {
        const { store } = h;
        const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
        const reversed = Buffer.from(all).reverse();
        const nulls = Buffer.alloc(64); // all zero bytes
        const invalidUtf8 = Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x28, 0x8c, 0xbc, 0x00]);
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/bin/', from);
        for (const [key, value] of [
          ['/bin/all', all],
          ['/bin/nulls', nulls],
          ['/bin/invalid', invalidUtf8],
        ] as const) {
          await store.create(key, value);
          assert.ok((await store.get(key))!.value.equals(value), `${key} corrupted`);
        }
        const allKv = (await store.get('/bin/all'))!;
        await store.update('/bin/all', reversed, allKv.modRevision);
        assert.ok((await store.get('/bin/all'))!.value.equals(reversed));
        const listed = await store.list('/bin/');
        assert.deepEqual(
          listed.items.map((kv) => kv.value.toString('hex')),
          [reversed, invalidUtf8, nulls].map((b) => b.toString('hex')),
        );
        await rec.waitForCount(4);
        rec.assertHealthy();
        assert.deepEqual(
          rec.events.map((e) => e.kv.value.toString('hex')),
          [all, nulls, invalidUtf8, reversed].map((b) => b.toString('hex')),
        );
        assert.equal(rec.events[3]!.prevKv?.value.toString('hex'), all.toString('hex'));
      });

      test('unicode keys work everywhere and are not normalized', async (h) => {
        const { store } = h;
        const t = h.tracker();
        const nfc = '/ü/caf\u00e9';
        const nfd = '/ü/cafe\u0301';
        const keys = [nfc, nfd, '/ü/日本語/キー', '/ü/ключ', '/ü/😀/x', '/ü/\u{10FFFF}', '/ü/\uFF5E', '/ü/a b\tc'];
        const from = (await store.currentRevision()) + 1;
        const rec = h.watch('/ü/', from);
        const noise = h.watch('/u/', from);
        await store.create('/u/plain', buf('x'));
        for (const key of keys) await t.create(key, buf(`value of ${key}`));
        for (const key of keys) {
          assert.equal((await store.get(key))?.value.toString(), `value of ${key}`, `get(${key})`);
        }
        assert.notDeepEqual((await store.get(nfc))?.createRevision, (await store.get(nfd))?.createRevision);
        const listed = await store.list('/ü/');
        assert.deepEqual(keysOf(listed), [...keys].sort(byteOrder), 'keys in UTF-8 byte order');
        assert.deepEqual(keysOf(await store.list('/ü/caf\u00e9')), [nfc]);
        assert.deepEqual(keysOf(await store.list('/ü/cafe')), [nfd]);
        // Paging with a non-ASCII continue key.
        const sorted = [...keys].sort(byteOrder);
        const page = await store.list('/ü/', { continue: sorted[2]!, limit: 2 });
        assert.deepEqual(keysOf(page), sorted.slice(3, 5));
        await t.update('/ü/😀/x', buf('changed'));
        await t.delete(nfd);
        await rec.waitForCount(keys.length + 2);
        rec.assertHealthy();
        assert.deepEqual(rec.events.map(eventView), t.expectedEvents('/ü/', from).map(eventView));
        const plain = (await store.get('/u/plain'))!;
        await noise.waitForEventAt('/u/plain', plain.modRevision);
        assert.equal(noise.events.length, 1);
      });
    });

    describe('durability', () => {
      test('data, revisions and compaction survive close and reopen', async (h, t) => {
        if (!h.canReopen) {
          t.skip('backend fixture has no reopen');
          return;
        }
        const tr = h.tracker();
        await tr.create('/dur/a', buf('a1'));
        await tr.create('/dur/b', buf('b1'));
        await tr.update('/dur/a', buf('a2'));
        const compactAt = tr.lastRevision;
        await tr.create('/dur/c', Buffer.from([0, 1, 2, 255]));
        await tr.delete('/dur/b');
        await tr.update('/dur/a', buf('a3'));
        await h.store.compact(compactAt);
        const rev = await h.store.currentRevision();
        assert.equal(rev, tr.lastRevision);

        const store = await h.reopen();
        assert.equal(await store.currentRevision(), rev, 'revision after reopen');
        assert.equal(await store.compactRevision(), compactAt, 'compact revision after reopen');
        const listed = await store.list('/dur/');
        assert.deepEqual(listed.items.map(kvView), tr.stateAt('/dur/', rev).map(kvView));
        assert.equal(listed.revision, rev);
        for (let r = compactAt + 1; r <= rev; r++) {
          const old = await store.list('/dur/', { revision: r });
          assert.deepEqual(old.items.map(kvView), tr.stateAt('/dur/', r).map(kvView), `list at ${r} after reopen`);
        }
        await expectError(store.list('/dur/', { revision: compactAt - 1 }), CompactedError);

        // History survives for watches too.
        const rec = h.watch('/dur/', compactAt + 1);
        const last = tr.log[tr.log.length - 1]!;
        await rec.waitForEventAt(last.kv.key, last.kv.modRevision);
        rec.assertHealthy();
        assert.deepEqual(rec.events.map(eventView), tr.expectedEvents('/dur/', compactAt + 1).map(eventView));

        // CAS against pre-reopen revisions works; the next revision is new.
        const a4 = await tr.update('/dur/a', buf('a4'));
        assert.ok(a4.modRevision > rev, `write after reopen got ${a4.modRevision}, store had reached ${rev}`);
        await expectError(store.create('/dur/c', buf('x')), KeyExistsError);
        await rec.waitForEventAt('/dur/a', a4.modRevision);
      });

      test('revisions are never reused, even when the latest writes were deletes that got compacted', async (h, t) => {
        if (!h.canReopen) {
          t.skip('backend fixture has no reopen');
          return;
        }
        let store = h.store;
        const keep = await store.create('/never/keep', buf('k'));
        const x = await store.create('/never/x', buf('x1'));
        const x2 = await store.update('/never/x', buf('x2'), x.modRevision);
        await store.create('/never/y', buf('y1'));
        await store.delete('/never/x', x2.modRevision);
        const lastDelete = await store.delete('/never/y');
        const high = lastDelete.modRevision;
        assert.equal(await store.currentRevision(), high);
        await store.compact(high);
        assert.ok((await store.currentRevision()) >= high, 'revision went backwards after compaction');

        store = await h.reopen();
        const after = await store.currentRevision();
        assert.ok(after >= high, `revision went backwards across reopen: ${after} < ${high}`);
        const next = await store.create('/never/x', buf('x3'));
        assert.ok(next.modRevision > high, `revision ${next.modRevision} reused (store had reached ${high})`);
        assert.ok(next.createRevision > high);
        assert.deepEqual(kvView((await store.get('/never/keep'))!), kvView(keep));

        // Once more: compact everything including the newest write, delete it, reopen.
        const del = await store.delete('/never/x');
        await store.compact(del.modRevision);
        store = await h.reopen();
        const again = await store.create('/never/z', buf('z'));
        assert.ok(again.modRevision > del.modRevision, `revision ${again.modRevision} reused after second reopen`);
      });
    });
  });
}
