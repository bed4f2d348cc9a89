/**
 * The API server's watch cache and one-transaction updates (docs/datastore.md, "The watch cache"):
 * reads by resourceVersion as Kubernetes defines them, on a real `drover server` over SQLite, on
 * two servers sharing one real etcd (a write through one, a read through the other), and on an
 * in-process server whose datastore can be compacted and made to fail on purpose.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServerPairOnEtcd, type ServerPair } from '../helpers/agent.js';
import { type InProcessApiServer, startInProcessApiServer } from '../helpers/api-server.js';
import { cleanup, eventually, request, type ServerProcess, startServer } from '../helpers/server.js';

type Target = Pick<ServerProcess, 'port' | 'token' | 'caPem'>;
interface Obj {
  metadata: { name: string; namespace?: string; resourceVersion: string; labels?: Record<string, string> };
  data?: Record<string, string>;
}
interface List {
  metadata: { resourceVersion: string; continue?: string };
  items: Obj[];
}
interface Status {
  code: number;
  reason: string;
  message: string;
}

const q = (params: Record<string, string>): string => new URLSearchParams(params).toString();
const cms = (ns: string): string => `/api/v1/namespaces/${ns}/configmaps`;

/** PATCHes are JSON merge patches. */
const bodyOptions = (method: string, body: unknown): Parameters<typeof request>[3] =>
  body === undefined ? {} : { body, ...(method === 'PATCH' ? { headers: { 'Content-Type': 'application/merge-patch+json' } } : {}) };

async function ok<T>(target: Target, method: string, path: string, body?: unknown, code = 200): Promise<T> {
  const res = await request(target, method, path, bodyOptions(method, body));
  assert.equal(res.status, code, `${method} ${path}: ${res.text}`);
  return res.json as T;
}

async function failure(target: Target, method: string, path: string, code: number, body?: unknown): Promise<Status> {
  const res = await request(target, method, path, bodyOptions(method, body));
  assert.equal(res.status, code, `${method} ${path}: ${res.text}`);
  return res.json as Status;
}

async function namespace(target: Target, name: string): Promise<void> {
  await ok(target, 'POST', '/api/v1/namespaces', { metadata: { name } }, 201);
}

function configMap(name: string, data: Record<string, string> = {}, labels?: Record<string, string>): unknown {
  return { metadata: { name, ...(labels ? { labels } : {}) }, data };
}

const names = (list: List): string[] => list.items.map((i) => i.metadata.name);

/**
 * The consistency rules a reader can check from outside, on servers `writer` and `reader` (the same
 * server, or two on one etcd).
 */
function consistencyTests(servers: () => { writer: Target; reader: Target }, ns: string): void {
  it('a write, then a list or get with resourceVersion unset, sees it (20 write-read pairs back to back)', async () => {
    const { writer, reader } = servers();
    await namespace(writer, ns);
    // A first list starts the reader's cache; the pairs below then read from it.
    await ok<List>(reader, 'GET', cms(ns));
    for (let i = 0; i < 20; i++) {
      const created = await ok<Obj>(writer, 'POST', cms(ns), configMap(`cm-${i}`, { round: '0' }), 201);
      const list = await ok<List>(reader, 'GET', cms(ns));
      assert.ok(names(list).includes(`cm-${i}`), `list after create ${i}: ${names(list).join(',')}`);
      assert.ok(Number(list.metadata.resourceVersion) >= Number(created.metadata.resourceVersion));
      const patched = await ok<Obj>(writer, 'PATCH', `${cms(ns)}/cm-${i}`, { data: { round: '1' } });
      const got = await request(reader, 'GET', `${cms(ns)}/cm-${i}`);
      assert.equal((got.json as Obj).data?.round, '1', got.text);
      const relisted = await ok<List>(reader, 'GET', cms(ns));
      const item = relisted.items.find((o) => o.metadata.name === `cm-${i}`);
      assert.equal(item?.data?.round, '1', `list after patch ${i}`);
      assert.equal(item?.metadata.resourceVersion, patched.metadata.resourceVersion);
    }
  });

  it('resourceVersion=0 is served (eventually holding the latest write); NotOlderThan a revision seen is served at it or later', async () => {
    const { writer, reader } = servers();
    const created = await ok<Obj>(writer, 'POST', cms(ns), configMap('rv0'), 201);
    const rv = created.metadata.resourceVersion;
    const anyList = await ok<List>(reader, 'GET', `${cms(ns)}?resourceVersion=0`);
    assert.ok(Number(anyList.metadata.resourceVersion) > 0);
    const notOlder = await ok<List>(reader, 'GET', `${cms(ns)}?${q({ resourceVersion: rv, resourceVersionMatch: 'NotOlderThan' })}`);
    assert.ok(Number(notOlder.metadata.resourceVersion) >= Number(rv), `NotOlderThan ${rv} answered ${notOlder.metadata.resourceVersion}`);
    assert.ok(names(notOlder).includes('rv0'));
    // A resourceVersion without a match is NotOlderThan for a list, as in Kubernetes.
    const legacy = await ok<List>(reader, 'GET', `${cms(ns)}?${q({ resourceVersion: rv })}`);
    assert.ok(names(legacy).includes('rv0'));
    const getAny = await ok<Obj>(reader, 'GET', `${cms(ns)}/rv0?resourceVersion=0`);
    assert.equal(getAny.metadata.name, 'rv0');
  });

  it('Exact reads the state at that revision; a future revision is 504 Too large; bad combinations are 400', async () => {
    const { writer, reader } = servers();
    const before = await ok<List>(reader, 'GET', cms(ns));
    await ok<Obj>(writer, 'POST', cms(ns), configMap('after-exact'), 201);
    const exact = await ok<List>(reader, 'GET', `${cms(ns)}?${q({ resourceVersion: before.metadata.resourceVersion, resourceVersionMatch: 'Exact' })}`);
    assert.equal(exact.metadata.resourceVersion, before.metadata.resourceVersion);
    assert.deepEqual(names(exact), names(before));
    assert.ok(!names(exact).includes('after-exact'));

    const started = Date.now();
    const future = await failure(reader, 'GET', `${cms(ns)}?${q({ resourceVersion: '999999999', resourceVersionMatch: 'NotOlderThan' })}`, 504);
    assert.equal(future.reason, 'Timeout');
    assert.match(future.message, /Too large resource version: 999999999/);
    // It waited for the cache first (a bound of 3 s), as kube-apiserver does.
    assert.ok(Date.now() - started >= 2500, `answered after ${Date.now() - started} ms`);

    assert.match((await failure(reader, 'GET', `${cms(ns)}?resourceVersionMatch=Exact`, 400)).message, /resourceVersionMatch is forbidden unless resourceVersion is provided/);
    assert.match((await failure(reader, 'GET', `${cms(ns)}?${q({ resourceVersion: '0', resourceVersionMatch: 'Exact' })}`, 400)).message, /forbidden for resourceVersion "0"/);
  });

  it('limit and continue page through a consistent snapshot, with and without a label selector', async () => {
    const { writer, reader } = servers();
    const pns = `${ns}-pages`;
    await namespace(writer, pns);
    for (let i = 0; i < 7; i++) await ok(writer, 'POST', cms(pns), configMap(`p-${i}`, {}, { set: 'pages', parity: i % 2 ? 'odd' : 'even' }), 201);
    // A controller adds kube-root-ca.crt to every namespace: page once it is there.
    await eventually(async () => (await request(reader, 'GET', `${cms(pns)}/kube-root-ca.crt`)).status === 200, 'kube-root-ca.crt');
    const collect = async (extra: Record<string, string>, writeBetween: boolean): Promise<string[]> => {
      const seen: string[] = [];
      let token: string | undefined;
      let first: string | undefined;
      for (let page = 0; page < 10; page++) {
        const list = await ok<List>(reader, 'GET', `${cms(pns)}?${q({ limit: '3', ...extra, ...(token ? { continue: token } : {}) })}`);
        first ??= list.metadata.resourceVersion;
        assert.equal(list.metadata.resourceVersion, first, 'every page is at the first page\'s revision');
        assert.ok(list.items.length <= 3);
        seen.push(...names(list));
        if (writeBetween && page === 0) await ok(writer, 'POST', cms(pns), configMap(`p-late-${Date.now()}`, {}, { set: 'pages', parity: 'even' }), 201);
        token = list.metadata.continue;
        if (!token) return seen;
      }
      assert.fail('paging did not end');
    };
    assert.deepEqual(await collect({}, false), ['kube-root-ca.crt', 'p-0', 'p-1', 'p-2', 'p-3', 'p-4', 'p-5', 'p-6']);
    assert.deepEqual(await collect({ labelSelector: 'set=pages,parity=odd' }, false), ['p-1', 'p-3', 'p-5']);
    // A write between pages is not in the snapshot the pages belong to (the later pages come from the store's history).
    assert.deepEqual(await collect({ labelSelector: 'set=pages,parity=even' }, true), ['p-0', 'p-2', 'p-4', 'p-6']);
    const all = await ok<List>(reader, 'GET', `${cms(pns)}?labelSelector=${encodeURIComponent('set=pages,parity=even')}`);
    assert.equal(all.items.length, 5, 'the write is there for the next list');
  });

  it('an update with a stale resourceVersion is 409 as before; without one it applies to the latest object', async () => {
    const { writer, reader } = servers();
    const created = await ok<Obj>(writer, 'POST', cms(ns), configMap('conflict', { v: '1' }), 201);
    // Through the other server (whose last knowledge of the object may lag): applies to the stored object.
    const second = await ok<Obj>(reader, 'PUT', `${cms(ns)}/conflict`, { metadata: { name: 'conflict', resourceVersion: created.metadata.resourceVersion }, data: { v: '2' } });
    assert.equal(second.data?.v, '2');
    const stale = await failure(writer, 'PUT', `${cms(ns)}/conflict`, 409, { metadata: { name: 'conflict', resourceVersion: created.metadata.resourceVersion }, data: { v: 'stale' } });
    assert.equal(stale.reason, 'Conflict');
    assert.match(stale.message, /the object has been modified; please apply your changes to the latest version and try again/);
    // A patch naming the stale version is refused too; one naming the current version applies.
    await failure(writer, 'PATCH', `${cms(ns)}/conflict`, 409, { metadata: { resourceVersion: created.metadata.resourceVersion }, data: { v: 'x' } });
    const third = await ok<Obj>(writer, 'PATCH', `${cms(ns)}/conflict`, { metadata: { resourceVersion: second.metadata.resourceVersion }, data: { v: '3' } });
    assert.equal(third.data?.v, '3');
    // Plain patches through both servers in turn always land on the latest value.
    for (let i = 0; i < 6; i++) {
      const target = i % 2 ? reader : writer;
      await ok(target, 'PATCH', `${cms(ns)}/conflict`, { data: { [`k${i}`]: String(i) } });
    }
    const final = await ok<Obj>(reader, 'GET', `${cms(ns)}/conflict`);
    assert.deepEqual(final.data, { v: '3', k0: '0', k1: '1', k2: '2', k3: '3', k4: '4', k5: '5' });
  });
}

describe('watch cache on SQLite (one server)', () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await cleanup(server?.dataDir ?? '');
  });
  consistencyTests(() => ({ writer: server, reader: server }), 'wc-sqlite');
});

describe('watch cache on etcd (two servers: writes through one, reads through the other)', () => {
  let pair: ServerPair;
  before(async () => {
    pair = await startServerPairOnEtcd('wc');
  });
  after(async () => {
    await pair?.stop();
  });
  consistencyTests(() => ({ writer: pair.a, reader: pair.b }), 'wc-etcd');

  it('the same holds with the roles swapped', async () => {
    await namespace(pair.b, 'wc-swap');
    await ok<List>(pair.a, 'GET', cms('wc-swap'));
    for (let i = 0; i < 10; i++) {
      await ok(pair.b, 'POST', cms('wc-swap'), configMap(`s-${i}`), 201);
      assert.ok(names(await ok<List>(pair.a, 'GET', cms('wc-swap'))).includes(`s-${i}`));
    }
  });
});

describe('watch cache in-process: served from memory, 410 from compacted history', () => {
  let server: InProcessApiServer;
  before(async () => {
    server = await startInProcessApiServer({ prefix: 'watch-cache' });
  });
  after(async () => {
    await server?.close();
    await cleanup(server?.dir ?? '');
  });

  it('once the cache is ready, lists (unset, 0, NotOlderThan) and first pages are served without a datastore list', async () => {
    const { target, store, registry, datastore } = server;
    await namespace(target, 'mem');
    for (let i = 0; i < 4; i++) await ok(target, 'POST', cms('mem'), configMap(`m-${i}`), 201);
    const def = registry.lookup('', 'v1', 'configmaps')!;
    await ok<List>(target, 'GET', cms('mem'));
    const cache = await waitForReady(() => store.watchCache(def));
    assert.ok(cache.size >= 4);
    const realList = datastore.list.bind(datastore);
    const realGet = datastore.get.bind(datastore);
    let storeLists = 0;
    let storeGets = 0;
    datastore.list = (...args) => {
      storeLists++;
      return realList(...args);
    };
    datastore.get = (...args) => {
      storeGets++;
      return realGet(...args);
    };
    try {
      const rv = (await ok<Obj>(target, 'POST', cms('mem'), configMap('m-new'), 201)).metadata.resourceVersion;
      assert.ok(names(await ok<List>(target, 'GET', cms('mem'))).includes('m-new'));
      assert.ok(names(await ok<List>(target, 'GET', `${cms('mem')}?resourceVersion=0`)).length >= 5);
      assert.ok(names(await ok<List>(target, 'GET', `${cms('mem')}?${q({ resourceVersion: rv, resourceVersionMatch: 'NotOlderThan' })}`)).includes('m-new'));
      const page = await ok<List>(target, 'GET', `${cms('mem')}?limit=2`);
      assert.deepEqual(names(page), ['m-0', 'm-1']);
      // Nothing changed since the first page: the next one comes from the cache too.
      const next = await ok<List>(target, 'GET', `${cms('mem')}?${q({ limit: '2', continue: page.metadata.continue! })}`);
      assert.deepEqual(names(next), ['m-2', 'm-3']);
      assert.equal(storeLists, 0, 'no list reached the datastore');
      // Gets: "0" and NotOlderThan from the cache; unset (the latest) from the datastore, as kube-apiserver.
      const gets = storeGets;
      assert.equal((await ok<Obj>(target, 'GET', `${cms('mem')}/m-new?resourceVersion=0`)).metadata.resourceVersion, rv);
      assert.equal((await ok<Obj>(target, 'GET', `${cms('mem')}/m-new?resourceVersion=${rv}`)).metadata.resourceVersion, rv);
      await failure(target, 'GET', `${cms('mem')}/absent?resourceVersion=0`, 404);
      assert.equal(storeGets, gets, 'no get reached the datastore');
      await ok<Obj>(target, 'GET', `${cms('mem')}/m-new`);
      assert.equal(storeGets, gets + 1);
      // Exact is history: it is read from the datastore.
      await ok<List>(target, 'GET', `${cms('mem')}?${q({ resourceVersion: rv, resourceVersionMatch: 'Exact' })}`);
      assert.equal(storeLists, 1);
    } finally {
      datastore.list = realList;
      datastore.get = realGet;
    }
  });

  it('Exact and continue at a compacted revision are 410 Expired, while the cache still serves the latest', async () => {
    const { target, datastore } = server;
    await namespace(target, 'gone');
    for (let i = 0; i < 4; i++) await ok(target, 'POST', cms('gone'), configMap(`g-${i}`), 201);
    const page = await ok<List>(target, 'GET', `${cms('gone')}?limit=2`);
    await ok(target, 'PATCH', `${cms('gone')}/g-3`, { data: { changed: 'yes' } });
    await datastore.compact(await datastore.currentRevision());
    const exact = await failure(target, 'GET', `${cms('gone')}?${q({ resourceVersion: page.metadata.resourceVersion, resourceVersionMatch: 'Exact' })}`, 410);
    assert.equal(exact.reason, 'Expired');
    const cont = await failure(target, 'GET', `${cms('gone')}?${q({ limit: '2', continue: page.metadata.continue! })}`, 410);
    assert.equal(cont.reason, 'Expired');
    const latest = await ok<List>(target, 'GET', cms('gone'));
    assert.equal(latest.items.find((o) => o.metadata.name === 'g-3')?.data?.changed, 'yes');
  });
});

async function waitForReady<T>(get: () => T | undefined): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = get();
    if (value) return value;
    if (Date.now() > deadline) assert.fail('the watch cache did not become ready within 20 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}
