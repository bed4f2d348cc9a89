/**
 * The datastore conformance suite on the etcd backend, each test against its own fresh etcd
 * process (revisions are global in etcd, and several tests expect exact revisions), plus checks
 * that only make sense for etcd: key namespaces sharing one etcd, replays older than the watch
 * cache, a restart of etcd under a live watch, and an unreachable etcd.
 *
 * Needs the `etcd` binary (Debian: etcd-server). Run:
 *   node --import tsx --test test/e2e/datastore-etcd.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { openEtcdDatastore, type EtcdDatastore, type EtcdOptions } from '../../src/datastore/etcd.js';
import {
  CompactedError,
  DatastoreError,
  type Datastore,
  type KeyValue,
  type WatchEvent,
} from '../../src/datastore/types.js';
import { runDatastoreConformance } from '../datastore/conformance.js';
import { startEtcd, type EtcdServer, writeEtcdTls } from '../helpers/etcd.js';

const buf = (s: string): Buffer => Buffer.from(s, 'utf8');

runDatastoreConformance('etcd', async () => {
  const etcd = await startEtcd();
  try {
    const store = await openEtcdDatastore({ endpoints: [etcd.endpoint] });
    return {
      store,
      // Durability across both a new client and a restart of the etcd process on its data dir.
      reopen: async () => {
        await etcd.restart();
        return openEtcdDatastore({ endpoints: [etcd.endpoint] });
      },
      cleanup: () => etcd.stop(),
    };
  } catch (error) {
    await etcd.stop();
    throw error;
  }
});

// The same suite through a key namespace (nothing else writes to this etcd, so exact revisions
// still hold): every key, range and watch goes through the prefixing.
runDatastoreConformance('etcd (namespaced)', async () => {
  const etcd = await startEtcd();
  const options: EtcdOptions = { endpoints: [etcd.endpoint], prefix: '/drover-ns/' };
  try {
    const store = await openEtcdDatastore(options);
    return {
      store,
      reopen: () => openEtcdDatastore(options),
      cleanup: () => etcd.stop(),
    };
  } catch (error) {
    await etcd.stop();
    throw error;
  }
});

// ---------------------------------------------------------------------------------------------
// etcd specifics
// ---------------------------------------------------------------------------------------------

async function waitFor(condition: () => boolean, what: () => string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

interface Recorded {
  events: WatchEvent[];
  errors: Error[];
  progress: number[];
  /** Each progress report with the number of events delivered before it. */
  checks: { revision: number; delivered: number }[];
  cancel(): void;
  requestProgress(): void;
}

function record(store: Datastore, prefix: string, from: number): Recorded {
  const events: WatchEvent[] = [];
  const errors: Error[] = [];
  const progress: number[] = [];
  const checks: { revision: number; delivered: number }[] = [];
  const watch = store.watch(prefix, from, {
    onEvents: (batch) => events.push(...batch),
    onProgress: (revision) => {
      progress.push(revision);
      checks.push({ revision, delivered: events.length });
    },
    onError: (error) => errors.push(error),
  });
  return {
    events,
    errors,
    progress,
    checks,
    cancel: () => watch.cancel(),
    requestProgress: () => watch.requestProgress(),
  };
}

const view = (e: WatchEvent): string =>
  `${e.type} ${e.kv.key}@${e.kv.modRevision}=${e.kv.value.toString()}` +
  (e.prevKv ? ` (prev ${e.prevKv.modRevision}=${e.prevKv.value.toString()})` : '');

/** A model of the writes, to derive the events a watch must deliver. */
class Model {
  readonly log: WatchEvent[] = [];
  readonly live = new Map<string, KeyValue>();

  constructor(private readonly store: Datastore) {}

  async write(key: string, i: number): Promise<void> {
    const prev = this.live.get(key);
    if (prev === undefined) {
      const kv = await this.store.create(key, buf(`c${i}`));
      this.live.set(key, kv);
      this.log.push({ type: 'put', kv });
    } else if (i % 5 === 0) {
      const kv = await this.store.delete(key, prev.modRevision);
      this.live.delete(key);
      this.log.push({ type: 'delete', kv: { ...prev, modRevision: kv.modRevision }, prevKv: prev });
    } else {
      const kv = await this.store.update(key, buf(`u${i}`), prev.modRevision);
      this.live.set(key, kv);
      this.log.push({ type: 'put', kv, prevKv: prev });
    }
  }

  expected(prefix: string, from: number): string[] {
    return this.log.filter((e) => e.kv.key.startsWith(prefix) && e.kv.modRevision >= from).map(view);
  }
}

describe('etcd datastore specifics', () => {
  let etcd: EtcdServer;
  const stores: EtcdDatastore[] = [];
  const open = async (options: Partial<EtcdOptions> = {}): Promise<EtcdDatastore> => {
    const store = await openEtcdDatastore({ endpoints: [etcd.endpoint], ...options });
    stores.push(store);
    return store;
  };

  before(async () => {
    etcd = await startEtcd();
  });

  after(async () => {
    for (const store of stores) await store.close().catch(() => undefined);
    await etcd?.stop();
  });

  it('namespaces share one etcd without seeing each other', async () => {
    const a = await open({ prefix: '/tenant-a/' });
    const b = await open({ prefix: '/tenant-b/' });
    const raw = await open();
    const fromA = (await a.currentRevision()) + 1;
    const watchA = record(a, '', fromA);
    await a.create('/k', buf('a'));
    await b.create('/k', buf('b'));
    await b.create('/only-b', buf('b'));
    assert.equal((await a.get('/k'))?.value.toString(), 'a');
    assert.equal((await b.get('/k'))?.value.toString(), 'b');
    assert.deepEqual((await a.list('')).items.map((kv) => kv.key), ['/k']);
    assert.deepEqual((await b.list('')).items.map((kv) => kv.key), ['/k', '/only-b']);
    assert.deepEqual(
      (await raw.list('/tenant-')).items.map((kv) => kv.key),
      ['/tenant-a//k', '/tenant-b//k', '/tenant-b//only-b'],
    );
    // Progress in a namespace reaches the store's revision although the last writes were
    // another tenant's (the hub proves there is nothing for it in between).
    const last = await b.create('/later', buf('b'));
    await waitFor(
      () => {
        if (watchA.progress.some((p) => p >= last.modRevision)) return true;
        watchA.requestProgress();
        return false;
      },
      () => `progress to reach ${last.modRevision}; got ${watchA.progress.join(',')}`,
    );
    assert.deepEqual(watchA.events.map((e) => e.kv.key), ['/k']);
    assert.deepEqual(watchA.errors, []);
    // And it keeps working: a new event in the namespace after the proof.
    const again = await a.create('/k2', buf('a'));
    await waitFor(() => watchA.events.some((e) => e.kv.modRevision === again.modRevision), () => 'the next event');
    watchA.cancel();
  });

  it('replays older than the watch cache come from etcd, then join the live stream exactly', async () => {
    // A tiny cache forces most watches below through the catch-up path.
    const store = await open({ prefix: '/small-cache/', watchCacheEvents: 3 });
    const model = new Model(store);
    const keys = Array.from({ length: 6 }, (_, i) => `/w/k${i}`);
    for (let i = 0; i < 60; i++) await model.write(keys[i % keys.length]!, i);
    const first = model.log[0]!.kv.modRevision;
    // The first watch starts the hub; later ones are older than its 3-event ring.
    const liveFrom = (await store.currentRevision()) + 1;
    const watches: { rec: Recorded; prefix: string; from: number }[] = [
      { rec: record(store, '/w/', liveFrom), prefix: '/w/', from: liveFrom },
    ];
    for (let i = 60; i < 160; i++) {
      if (i % 10 === 0) {
        // From anywhere in the history: most are older than the ring, the last ones are in it.
        const back = i % 30 === 0 ? 2 : Math.floor(((i * 37) % 100) / 100 * model.log.length);
        const from = model.log[model.log.length - 1 - back]!.kv.modRevision;
        const prefix = i % 20 === 0 ? '/w/' : '/w/k1';
        watches.push({ rec: record(store, prefix, from), prefix, from });
      }
      await model.write(keys[i % keys.length]!, i);
      if (i % 7 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    watches.push({ rec: record(store, '/w/', first), prefix: '/w/', from: first });
    const sentinel = await store.create('/w/~', buf('end'));
    model.log.push({ type: 'put', kv: sentinel });
    for (const { rec, prefix, from } of watches) {
      const expected = model.expected(prefix, from);
      await waitFor(
        () => rec.events.length >= expected.length || rec.errors.length > 0,
        () => `watch ${prefix} from ${from}: ${rec.events.length} of ${expected.length} events`,
      );
      await new Promise((resolve) => setTimeout(resolve, 20));
      assert.deepEqual(rec.errors, []);
      assert.deepEqual(rec.events.map(view), expected, `watch ${prefix} from ${from}`);
      rec.cancel();
    }
  });

  it('randomized: concurrent writers, watches from random revisions, progress requests', async () => {
    // A namespace with another tenant writing beside it, and a small watch cache, so replays from
    // etcd, ring replays, live joins and namespace progress proofs all interleave.
    const store = await open({ prefix: '/rand/', watchCacheEvents: 40 });
    const other = await open({ prefix: '/rand-other/' });
    const log: WatchEvent[] = [];
    const live = new Map<string, KeyValue>();
    const keys = Array.from({ length: 24 }, (_, i) => `/${['a', 'b', 'ab'][i % 3]}/k${i}`);
    const busy = new Set<string>();
    let stop = false;
    const writer = async (seed: number): Promise<void> => {
      for (let i = seed; !stop; i += 7) {
        const key = keys[(i * 13) % keys.length]!;
        if (busy.has(key)) {
          await new Promise((resolve) => setImmediate(resolve));
          continue;
        }
        busy.add(key);
        try {
          const prev = live.get(key);
          if (!prev) {
            const kv = await store.create(key, buf(`c${i}`));
            live.set(key, kv);
            log.push({ type: 'put', kv });
          } else if (i % 4 === 0) {
            const kv = await store.delete(key, prev.modRevision);
            live.delete(key);
            log.push({ type: 'delete', kv: { ...prev, modRevision: kv.modRevision }, prevKv: prev });
          } else {
            const kv = await store.update(key, buf(`u${i}`), prev.modRevision);
            live.set(key, kv);
            log.push({ type: 'put', kv, prevKv: prev });
          }
        } finally {
          busy.delete(key);
        }
        if (i % 3 === 0) await other.create(`/f${i}`, buf('x'));
      }
    };
    const watches: (Recorded & { prefix: string; from: number })[] = [];
    const watchFrom = (prefix: string, from: number): void => {
      watches.push({ ...record(store, prefix, from), prefix, from });
    };
    const writers = Array.from({ length: 5 }, (_, i) => writer(i * 1000));
    const started = Date.now();
    for (let n = 0; Date.now() - started < 3000; n++) {
      await new Promise((resolve) => setTimeout(resolve, 15));
      const current = await store.currentRevision();
      const prefix = ['/a/', '/b/', '/a', ''][n % 4]!;
      watchFrom(prefix, n % 5 === 0 ? current + 1 + (n % 3) : Math.max(1, current - ((n * 37) % 300)));
      for (const rec of watches) if ((n + watches.indexOf(rec)) % 3 === 0) rec.requestProgress();
    }
    stop = true;
    await Promise.all(writers);
    const last = await other.create('/last', buf('x')); // the newest write is another tenant's
    log.sort((a, b) => a.kv.modRevision - b.kv.modRevision);
    for (const rec of watches) {
      const expected = log.filter((e) => e.kv.key.startsWith(rec.prefix) && e.kv.modRevision >= rec.from);
      await waitFor(
        () => {
          if (rec.errors.length > 0) return true;
          if (rec.events.length >= expected.length && rec.checks.some((c) => c.revision >= last.modRevision)) return true;
          rec.requestProgress();
          return false;
        },
        () => `watch ${rec.prefix} from ${rec.from}: ${rec.events.length}/${expected.length} events, progress ${rec.checks.map((c) => c.revision).join(',')}`,
      );
      assert.deepEqual(rec.errors, []);
      assert.deepEqual(rec.events.map(view), expected.map(view), `watch ${rec.prefix} from ${rec.from}`);
      let previous = 0;
      for (const check of rec.checks) {
        const due = expected.filter((e) => e.kv.modRevision <= check.revision).length;
        assert.ok(check.delivered >= due, `progress ${check.revision} with ${check.delivered} of ${due} due events delivered`);
        assert.ok(check.revision >= previous, 'progress went backwards');
        previous = check.revision;
      }
      rec.cancel();
    }
  });

  it('a watch survives an etcd restart without gaps or duplicates', async () => {
    const store = await open({ prefix: '/restart/' });
    const model = new Model(store);
    await model.write('/a', 0);
    const from = model.log[0]!.kv.modRevision;
    const rec = record(store, '/', from);
    for (let i = 1; i < 10; i++) await model.write(`/k${i % 3}`, i);
    await waitFor(() => rec.events.length >= 10, () => `10 events, got ${rec.events.length}`);
    await etcd.restart();
    for (let i = 10; i < 20; i++) await model.write(`/k${i % 3}`, i);
    await waitFor(() => rec.events.length >= 20 || rec.errors.length > 0, () => `20 events, got ${rec.events.length}`);
    assert.deepEqual(rec.errors, []);
    assert.deepEqual(rec.events.map(view), model.expected('/', from));
    rec.cancel();
  });

  it('compactRevision sees compactions made by another client', async () => {
    const store = await open({ prefix: '/compact/' });
    const other = await open();
    const base = await store.currentRevision();
    for (let i = 0; i < 9; i++) await store.create(`/k${i}`, buf('x'));
    await other.compact(base + 5);
    assert.equal(await store.compactRevision(), base + 5);
    await other.compact(base + 8);
    assert.equal(await store.compactRevision(), base + 8);
    const rec = record(store, '/', base + 8);
    await waitFor(() => rec.errors.length > 0, () => 'CompactedError');
    assert.ok(rec.errors[0] instanceof CompactedError);
    assert.equal((rec.errors[0] as CompactedError).compactRevision, base + 8);
    const ok = record(store, '/', base + 9);
    await waitFor(() => ok.events.length === 1 || ok.errors.length > 0, () => 'the event at the compact revision + 1');
    assert.deepEqual(ok.errors, []);
    ok.cancel();
  });

  it('an unreachable etcd fails calls and watches with errors instead of hanging', async () => {
    const lonely = await startEtcd();
    try {
      const store = await openEtcdDatastore({
        endpoints: [lonely.endpoint],
        requestTimeoutMs: 2000,
        watchRetryTimeoutMs: 1500,
      });
      stores.push(store);
      await store.create('/k', buf('v'));
      const rec = record(store, '/', (await store.currentRevision()) + 1);
      await store.create('/k2', buf('v'));
      await waitFor(() => rec.events.length === 1, () => 'the live event');
      await lonely.stop();
      const started = Date.now();
      await assert.rejects(store.get('/k'), DatastoreError);
      await assert.rejects(store.create('/k3', buf('v')), DatastoreError);
      assert.ok(Date.now() - started < 10_000, `calls took ${Date.now() - started} ms to fail`);
      await waitFor(() => rec.errors.length > 0, () => 'onError on the watch', 20_000);
      assert.ok(rec.errors[0] instanceof DatastoreError, String(rec.errors[0]));
    } finally {
      await lonely.stop();
    }
    await assert.rejects(
      openEtcdDatastore({ endpoints: [lonely.endpoint], requestTimeoutMs: 2000 }),
      DatastoreError,
    );
  });

  it('connects over mutual TLS, with files or PEM strings', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-etcd-tls-'));
    let secure: EtcdServer | undefined;
    try {
      const tls = await writeEtcdTls(dir, 'etcd-test-ca');
      secure = await startEtcd({ tls });
      assert.match(secure.endpoint, /^https:/);
      const viaFiles = await openEtcdDatastore({
        endpoints: [secure.endpoint],
        caFile: tls.caFile,
        certFile: tls.clientCertFile,
        keyFile: tls.clientKeyFile,
      });
      stores.push(viaFiles);
      const kv = await viaFiles.create('/tls', buf('secret'));
      const rec = record(viaFiles, '/', kv.modRevision);
      await waitFor(() => rec.events.length === 1 || rec.errors.length > 0, () => 'the event over TLS');
      assert.deepEqual(rec.errors, []);
      rec.cancel();
      const viaPem = await openEtcdDatastore({
        endpoints: [secure.endpoint],
        ca: tls.caPem,
        cert: tls.clientCertPem,
        key: tls.clientKeyPem,
      });
      stores.push(viaPem);
      assert.equal((await viaPem.get('/tls'))?.value.toString(), 'secret');
      // Without a client certificate etcd refuses the connection.
      await assert.rejects(
        openEtcdDatastore({ endpoints: [secure.endpoint], caFile: tls.caFile, requestTimeoutMs: 3000 }),
        DatastoreError,
      );
    } finally {
      await secure?.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
