/**
 * The etcd datastore on its own thread (src/datastore/etcd-thread.ts), as the server uses it: the
 * whole datastore conformance suite through the thread against a real etcd, then what only the
 * thread can get wrong: values that arrive as Buffers owning only their bytes, the caller's buffer
 * free to reuse, a wrong endpoint refused at open, and a thread that dies (every pending call and
 * watch fails with a DatastoreError, later calls too; nothing hangs).
 *
 * Needs the `etcd` binary (Debian: etcd-server). Run:
 *   node --import tsx --test test/e2e/datastore-etcd-thread.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { openEtcdDatastoreInThread, type ThreadedEtcdDatastore } from '../../src/datastore/etcd-thread.js';
import { ConflictError, DatastoreError, type WatchEvent } from '../../src/datastore/types.js';
import { runDatastoreConformance } from '../datastore/conformance.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';

runDatastoreConformance('etcd (own thread)', async () => {
  const etcd = await startEtcd();
  try {
    const store = await openEtcdDatastoreInThread({ endpoints: [etcd.endpoint] });
    return {
      store,
      reopen: async () => {
        await etcd.restart();
        return openEtcdDatastoreInThread({ endpoints: [etcd.endpoint] });
      },
      cleanup: () => etcd.stop(),
    };
  } catch (error) {
    await etcd.stop();
    throw error;
  }
});

async function waitFor(condition: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('etcd datastore thread specifics', { timeout: 120_000 }, () => {
  let etcd: EtcdServer;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd?.stop();
  });

  it('hands back Buffers that own only their bytes, in results, conflicts and watch events', async () => {
    const store = await openEtcdDatastoreInThread({ endpoints: [etcd.endpoint], prefix: '/buffers/' });
    try {
      const events: WatchEvent[] = [];
      const start = (await store.currentRevision()) + 1;
      const watch = store.watch('k', start, { onEvents: (batch) => events.push(...batch), onError: (error) => assert.fail(error) });
      // The caller's buffer is a view into a larger one and is reused at once: the stored value
      // must be the bytes at call time, and nothing of the rest of the big buffer.
      const big = Buffer.alloc(64 * 1024, 'x');
      big.write('first', 100);
      const input = big.subarray(100, 105);
      const pending = store.create('k1', input);
      input.write('XXXXX');
      const created = await pending;
      assert.ok(Buffer.isBuffer(created.value));
      assert.equal(created.value.toString(), 'first');
      const got = await store.get('k1');
      assert.ok(got && Buffer.isBuffer(got.value));
      assert.equal(got.value.toString(), 'first');
      assert.equal(got.value.buffer.byteLength < 1024, true, `a 5-byte value crossed with a ${got.value.buffer.byteLength}-byte buffer`);
      const listed = await store.list('k');
      assert.deepEqual(listed.items.map((kv) => [kv.key, Buffer.isBuffer(kv.value), kv.value.toString()]), [['k1', true, 'first']]);
      const stale = await store.update('k1', Buffer.from('second'), created.modRevision);
      const conflict = await store.update('k1', Buffer.from('third'), created.modRevision).then(
        () => assert.fail('a stale compare-and-swap succeeded'),
        (error: unknown) => error,
      );
      assert.ok(conflict instanceof ConflictError, `expected a ConflictError, got ${String(conflict)}`);
      assert.equal(conflict.actualModRevision, stale.modRevision);
      assert.ok(conflict.current && Buffer.isBuffer(conflict.current.value));
      assert.equal(conflict.current.value.toString(), 'second');
      await waitFor(() => events.length >= 2, 'the two watch events');
      assert.deepEqual(
        events.map((e) => [e.type, e.kv.key, Buffer.isBuffer(e.kv.value), e.kv.value.toString(), e.kv.modRevision]),
        [
          ['put', 'k1', true, 'first', created.modRevision],
          ['put', 'k1', true, 'second', stale.modRevision],
        ],
      );
      watch.cancel();
    } finally {
      await store.close();
    }
  });

  it('hands the watches of one prefix the same event objects, as the backend itself does (one copy crosses)', async () => {
    const store = await openEtcdDatastoreInThread({ endpoints: [etcd.endpoint], prefix: '/shared/' });
    try {
      const start = (await store.currentRevision()) + 1;
      const seen = Array.from({ length: 3 }, () => [] as WatchEvent[]);
      const watches = seen.map((events) => store.watch('s/', start, { onEvents: (batch) => events.push(...batch), onError: (error) => assert.fail(error) }));
      // Let the three watches join the shared watcher before the writes.
      const probe = await store.create('s/probe', Buffer.from('0'));
      await waitFor(() => seen.every((events) => events.length >= 1), 'the probe event on every watch');
      const written = [];
      for (let i = 0; i < 20; i++) written.push(await store.create(`s/k${i}`, Buffer.from(`v${i}`)));
      await waitFor(() => seen.every((events) => events.length >= 21), 'the 20 events on every watch');
      for (const events of seen) {
        assert.deepEqual(events.map((e) => e.kv.modRevision), [probe.modRevision, ...written.map((kv) => kv.modRevision)]);
      }
      // The probe may reach a watch that was still joining by its replay; the 20 after it are live on all three.
      const shared = seen[0]!.slice(1, 21).filter((event, i) => seen[1]![i + 1] === event && seen[2]![i + 1] === event).length;
      assert.equal(shared, 20, `${shared} of 20 events were the same object on all three watches`);
      for (const watch of watches) watch.cancel();
    } finally {
      await store.close();
    }
  });

  it('refuses an endpoint where no etcd answers, at open, and leaves no thread behind', async () => {
    const error = await openEtcdDatastoreInThread({ endpoints: ['http://127.0.0.1:1'], requestTimeoutMs: 2_000 }).then(
      () => assert.fail('opened a datastore on a closed port'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof DatastoreError, `expected a DatastoreError, got ${String(error)}`);
    assert.match(error.message, /cannot reach etcd at http:\/\/127\.0\.0\.1:1/);
  });

  it('fails every pending call and watch, and every later call, when the thread dies', async () => {
    const store: ThreadedEtcdDatastore = await openEtcdDatastoreInThread({ endpoints: [etcd.endpoint], prefix: '/dies/' });
    const errors: Error[] = [];
    store.watch('w', (await store.currentRevision()) + 1, { onEvents: () => undefined, onError: (error) => errors.push(error) });
    // Many calls in flight when the thread is stopped from outside (as a crash of it would).
    const calls = Array.from({ length: 50 }, (_, i) => store.create(`k${i}`, Buffer.from('v')).then(() => undefined, (error: unknown) => error));
    await (store as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    const outcomes = await Promise.all(calls);
    // Some creates may have been answered before the thread stopped; every other one failed.
    const failed = outcomes.filter((o): o is DatastoreError => o instanceof DatastoreError);
    assert.equal(failed.length + outcomes.filter((o) => o === undefined).length, 50, `unexpected outcomes: ${outcomes.map(String).join(', ')}`);
    for (const error of failed) assert.match(error.message, /the etcd datastore's thread exited/);
    await waitFor(() => errors.length === 1, 'the watch to end');
    assert.ok(errors[0] instanceof DatastoreError);
    await assert.rejects(store.get('k0'), /the etcd datastore's thread exited/);
    await store.close(); // nothing to close any more, and it must not hang
  });
});
