/**
 * The watch cache's pure parts: which read is served from where (read-plan.ts), the bounded
 * waits for a revision (revision-waiters.ts, with mocked timers), and one ResourceCache over a
 * real SQLite file without a server (filled, kept current, caught up by a progress report, failed
 * by compaction while it lagged).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it, mock } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import { ObjectCodec } from '../../src/apiserver/object-codec.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { WatchCaches } from '../../src/apiserver/watch-cache/caches.js';
import { getReadRevision, listReadRevision, planRead } from '../../src/apiserver/watch-cache/read-plan.js';
import { ResourceCache } from '../../src/apiserver/watch-cache/resource-cache.js';
import { RevisionWaiters } from '../../src/apiserver/watch-cache/revision-waiters.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';

function badRequest(fn: () => unknown, message: RegExp): void {
  assert.throws(fn, (error: unknown) => error instanceof ApiError && error.code === 400 && message.test(error.message));
}

describe('read plan: resourceVersion and resourceVersionMatch as Kubernetes defines them', () => {
  it('maps the query to a ReadRevision', () => {
    assert.deepEqual(listReadRevision(undefined, undefined), { kind: 'latest' });
    assert.deepEqual(listReadRevision('0', undefined), { kind: 'any' });
    assert.deepEqual(listReadRevision('0', 'NotOlderThan'), { kind: 'any' });
    assert.deepEqual(listReadRevision('42', undefined), { kind: 'notOlderThan', revision: 42 });
    assert.deepEqual(listReadRevision('42', 'NotOlderThan'), { kind: 'notOlderThan', revision: 42 });
    assert.deepEqual(listReadRevision('42', 'Exact'), { kind: 'exact', revision: 42 });
    assert.deepEqual(listReadRevision('42', undefined, true), { kind: 'latest' }, 'a continue token decides');
    assert.deepEqual(getReadRevision(undefined), { kind: 'latest' });
    assert.deepEqual(getReadRevision('0'), { kind: 'any' });
    assert.deepEqual(getReadRevision('7'), { kind: 'notOlderThan', revision: 7 });
  });

  it('refuses what kube-apiserver refuses, with its message', () => {
    badRequest(() => listReadRevision('1', 'Foo'), /invalid resourceVersionMatch "Foo"/);
    badRequest(() => listReadRevision(undefined, 'Exact'), /forbidden unless resourceVersion is provided/);
    badRequest(() => listReadRevision('0', 'Exact'), /forbidden for resourceVersion "0"/);
    badRequest(() => listReadRevision('1', 'Exact', true), /forbidden when continue is provided/);
    badRequest(() => listReadRevision('-1', undefined), /invalid resource version/);
  });

  it('serves from the cache only when the cache can give what was asked for', () => {
    const ready = { ready: true, revision: 100, lastChange: 90 };
    const starting = { ready: false, revision: 0, lastChange: 0 };
    assert.deepEqual(planRead({ kind: 'any' }, ready), { from: 'cache' });
    assert.deepEqual(planRead({ kind: 'latest' }, ready), { from: 'cache-after-progress' });
    assert.deepEqual(planRead({ kind: 'notOlderThan', revision: 100 }, ready), { from: 'cache' });
    assert.deepEqual(planRead({ kind: 'notOlderThan', revision: 101 }, ready), { from: 'cache-after', revision: 101 });
    assert.deepEqual(planRead({ kind: 'exact', revision: 100 }, ready), { from: 'store', revision: 100 });
    for (const read of [{ kind: 'any' }, { kind: 'latest' }, { kind: 'notOlderThan', revision: 1 }] as const) {
      assert.deepEqual(planRead(read, starting), { from: 'store' }, `${read.kind} without a ready cache`);
      assert.deepEqual(planRead(read, undefined), { from: 'store' });
    }
    // A continue token: from the cache only while it holds exactly the token's state.
    assert.deepEqual(planRead({ kind: 'latest' }, ready, 95), { from: 'cache' });
    assert.deepEqual(planRead({ kind: 'latest' }, ready, 85), { from: 'store', revision: 85 }, 'changed since the token');
    assert.deepEqual(planRead({ kind: 'latest' }, ready, 120), { from: 'store', revision: 120 }, 'the cache is behind the token');
    assert.deepEqual(planRead({ kind: 'latest' }, starting, 95), { from: 'store', revision: 95 });
  });
});

describe('revision waiters', () => {
  it('release waiters in revision order once reached; time out the rest after their bound', async () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      const waiters = new RevisionWaiters();
      const outcomes: string[] = [];
      const a = waiters.wait(10, 1000).then((ok) => outcomes.push(`10:${ok}`));
      const b = waiters.wait(5, 1000).then((ok) => outcomes.push(`5:${ok}`));
      const c = waiters.wait(20, 500).then((ok) => outcomes.push(`20:${ok}`));
      waiters.reached(9);
      await b;
      assert.deepEqual(outcomes, ['5:true']);
      mock.timers.tick(499);
      waiters.reached(10);
      await a;
      assert.deepEqual(outcomes, ['5:true', '10:true']);
      mock.timers.tick(1);
      await c;
      assert.deepEqual(outcomes, ['5:true', '10:true', '20:false']);
      assert.equal(waiters.size, 0);
      const d = waiters.wait(30, 1000);
      waiters.failAll();
      assert.equal(await d, false);
    } finally {
      mock.timers.reset();
    }
  });
});

describe('ResourceCache over a real SQLite datastore', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-watch-cache-unit-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const def = new ResourceRegistry().lookup('', 'v1', 'configmaps')!;
  const prefix = '/registry/core/configmaps/';
  const value = (name: string, v: string): Buffer =>
    Buffer.from(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'ns' }, data: { v } }));

  it('fills from a list, follows writes, and catches up with the store through a progress report', async () => {
    const store = openSqliteDatastore(path.join(dir, 'a.db'));
    const failures: Error[] = [];
    try {
      await store.create(`${prefix}ns/b`, value('b', '1'));
      await store.create(`${prefix}ns/a`, value('a', '1'));
      await store.create('/registry/core/secrets/ns/elsewhere', value('x', '1'));
      const cache = new ResourceCache(def, prefix, store, new ObjectCodec(), (_c, e) => failures.push(e));
      await cache.start();
      assert.ok(cache.ready);
      // Deletes before the fill left nothing behind: the fill counts as the last change.
      assert.equal(cache.lastChange, cache.revision);
      assert.deepEqual(cache.keysFrom(`${prefix}ns/`), [`${prefix}ns/a`, `${prefix}ns/b`]);
      assert.deepEqual(cache.keysFrom(`${prefix}ns/`, `${prefix}ns/a`), [`${prefix}ns/b`]);
      assert.equal(cache.get(`${prefix}ns/a`)!.obj.metadata.resourceVersion, String(cache.get(`${prefix}ns/a`)!.modRevision));

      const updated = await store.update(`${prefix}ns/a`, value('a', '2'), cache.get(`${prefix}ns/a`)!.modRevision);
      // The write is acknowledged; the cache has it only once a progress report proved it caught up.
      assert.equal(await cache.waitForProgress(5000), true);
      assert.equal(cache.get(`${prefix}ns/a`)!.modRevision, updated.modRevision);
      assert.deepEqual((cache.get(`${prefix}ns/a`)!.obj as { data?: unknown }).data, { v: '2' });
      // Writes elsewhere move the store's revision: progress moves the cache's with it, but not its last change.
      const other = await store.create('/registry/core/secrets/ns/other', value('y', '1'));
      assert.equal(await cache.waitForProgress(5000), true);
      assert.ok(cache.revision >= other.modRevision);
      assert.equal(cache.lastChange, updated.modRevision);
      const removed = await store.delete(`${prefix}ns/b`);
      assert.equal(await cache.waitFor(removed.modRevision, 5000), true);
      assert.equal(cache.get(`${prefix}ns/b`), undefined);
      assert.deepEqual(cache.keysFrom(`${prefix}ns/`), [`${prefix}ns/a`]);
      assert.equal(await cache.waitFor(removed.modRevision + 1000, 50), false, 'a revision never reached times out');
      assert.deepEqual(failures, []);
      cache.stop();
      assert.ok(cache.failed);
      assert.equal(await cache.waitForProgress(100), false);
    } finally {
      await store.close();
    }
  });

  it('a replaced definition of the same resource (a CRD changed) replaces its cache and stops the old one', async () => {
    const store = openSqliteDatastore(path.join(dir, 'c.db'));
    try {
      await store.create(`${prefix}ns/a`, value('a', '1'));
      const caches = new WatchCaches(store, new ObjectCodec(), () => prefix, true);
      const first = caches.cacheFor(def)!;
      assert.equal(caches.cacheFor(def), first, 'the same definition keeps its cache');
      const replaced = { ...def };
      const second = caches.cacheFor(replaced)!;
      assert.notEqual(second, first);
      assert.ok(first.failed, 'the old cache was stopped');
      for (let i = 0; i < 100 && !second.ready; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(caches.existing(replaced), second);
      assert.equal(caches.existing(def), undefined, 'the old definition is served by no cache');
      caches.stopAll();
    } finally {
      await store.close();
    }
  });

  it('fails (and says so) when its watch ends: the owner then reads from the store', async () => {
    const store = openSqliteDatastore(path.join(dir, 'b.db'));
    const failures: Error[] = [];
    await store.create(`${prefix}ns/a`, value('a', '1'));
    const cache = new ResourceCache(def, prefix, store, new ObjectCodec(), (_c, e) => failures.push(e));
    await cache.start();
    assert.ok(cache.ready);
    const waiting = cache.waitFor(1_000_000, 20_000);
    await store.close();
    assert.equal(await waiting, false);
    assert.ok(cache.failed);
    assert.equal(cache.get(`${prefix}ns/a`), undefined, 'a failed cache serves nothing');
    assert.equal(failures.length, 1);
  });
});

describe('lists from the watch cache for a caller that only serializes', () => {
  it('hand out the cached objects themselves (the same JSON as the copies), and copies to everyone else', async () => {
    const { inProcessApi } = await import('../helpers/in-process.js');
    const { CONFIGMAPS } = await import('../../src/client/types.js');
    const api = await inProcessApi();
    try {
      for (const name of ['a', 'b', 'c']) {
        await api.client.create(CONFIGMAPS, 'default', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, labels: { tier: name === 'b' ? 'x' : 'y' } }, data: { k: name } });
      }
      const def = api.registry.lookup('', 'v1', 'configmaps')!;
      const all = { labelSelector: [], fieldSelector: [] };
      await api.store.list(def, 'default', all); // makes the cache
      for (let i = 0; i < 500 && !api.store.watchCache(def)?.ready; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.ok(api.store.watchCache(def)?.ready, 'the cache serves');
      const shared = await api.store.list(def, 'default', { ...all, sharedItems: true });
      const again = await api.store.list(def, 'default', { ...all, sharedItems: true });
      const copies = await api.store.list(def, 'default', all);
      assert.deepEqual(shared.items.map((o) => o.metadata.name), ['a', 'b', 'c']);
      assert.equal(JSON.stringify(shared), JSON.stringify(copies), 'the same answer');
      shared.items.forEach((obj, i) => {
        assert.equal(obj, again.items[i], 'the cached object itself, each time');
        assert.notEqual(obj, copies.items[i], 'a private copy without the option');
      });
      // Written since: the list has the new object, still with its resourceVersion.
      const updated = await api.client.update(CONFIGMAPS, 'default', { ...copies.items[0]!, data: { k: 'a2' } });
      await api.store.watchCache(def)!.waitFor(Number(updated.metadata.resourceVersion), 5000);
      const after = await api.store.list(def, 'default', { ...all, sharedItems: true });
      assert.equal(after.items[0]!.metadata.resourceVersion, updated.metadata.resourceVersion);
      assert.deepEqual(after.items[0]!.data, { k: 'a2' });
    } finally {
      await api.close();
    }
  });
});
