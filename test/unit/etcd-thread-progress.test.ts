/**
 * The main thread's side of the etcd datastore thread, given the thread's messages as they can
 * arrive: one message may carry a watch's progress report and then events after it. The report
 * reaches the consumer after those events, so it must cover them (a revision below an event it
 * follows would tell a watch-cache or bookmark reader that it missed nothing when it had more).
 * The conformance suite through a real thread caught this once in CI (progress 27 after event 28).
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { Worker } from 'node:worker_threads';

import { ThreadedEtcdDatastore } from '../../src/datastore/etcd-thread.js';
import type { Reply } from '../../src/datastore/etcd/thread-protocol.js';
import type { WatchEvent } from '../../src/datastore/types.js';
import { eventually } from '../helpers/server.js';

/** Stands in for the thread: the test says what it sends; what it is sent is dropped. */
function threadStandIn(): EventEmitter & { postMessage(): void } {
  return Object.assign(new EventEmitter(), { postMessage: () => undefined });
}

function put(key: string, revision: number): WatchEvent {
  return { type: 'put', kv: { key, value: Buffer.from('v'), createRevision: revision, modRevision: revision } };
}

describe('etcd thread: progress reports on the main thread', () => {
  it('a report followed by events in the same message is delivered after them, at a revision covering them', async () => {
    const thread = threadStandIn();
    const store = new ThreadedEtcdDatastore(thread as unknown as Worker);
    const seen: string[] = [];
    store.watch('/p/', 20, {
      onEvents: (events) => seen.push(...events.map((e) => `event ${e.kv.modRevision}`)),
      onProgress: (revision) => seen.push(`progress ${revision}`),
      onError: (error) => seen.push(`error ${error.message}`),
    });
    const id = 1; // the first watch of this store
    const message: Reply[] = [
      { kind: 'events', id, events: [put('/p/a', 26)] },
      { kind: 'watch-progress', id, revision: 27 },
      { kind: 'events', id, events: [put('/p/b', 28)] },
    ];
    thread.emit('message', message);
    await eventually(() => seen.some((s) => s.startsWith('progress')), 'the progress report', 2000, 5);
    assert.deepEqual(seen, ['event 26', 'event 28', 'progress 28']);
    // A later report below the last event is raised to it as well; one above it stands.
    thread.emit('message', [{ kind: 'watch-progress', id, revision: 27 }] satisfies Reply[]);
    await eventually(() => seen.length === 4, 'the second report', 2000, 5);
    thread.emit('message', [{ kind: 'watch-progress', id, revision: 31 }] satisfies Reply[]);
    await eventually(() => seen.length === 5, 'the third report', 2000, 5);
    assert.deepEqual(seen.slice(3), ['progress 28', 'progress 31']);
  });
});
