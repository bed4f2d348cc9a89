/**
 * The etcd datastore on a thread of its own. The server is one event loop, and on etcd that loop
 * spent more than half of each write in the gRPC client (grpc-js, HTTP/2, protobuf) and in the
 * watch event every write comes back as (docs/benchmarks.md, "Why etcd / SQLite stays near
 * 0.5"). Here the whole {@link EtcdDatastore} runs in a worker thread (./etcd/thread-worker.ts)
 * and the main thread only passes messages: a call is one message each way, a batch of watch
 * events one message, the values moved (not copied) across (./etcd/thread-protocol.ts).
 *
 * The contract is the datastore's (types.ts), unchanged: the same results and error classes,
 * each watch's events in order and exactly once. If the thread dies, every pending call fails
 * with a {@link DatastoreError} naming why, every watch ends with onError, and later calls fail
 * at once, as after close().
 */

import { Worker } from 'node:worker_threads';

import { type EtcdOptions } from './etcd.js';
import { type CallArgs, type CallMethod, fromWireError, Outbox, type Reply, type Request, reviveEvent, reviveResult } from './etcd/thread-protocol.js';
import { WatchDelivery } from './watch-delivery.js';
import {
  type Datastore,
  DatastoreError,
  type KeyValue,
  type ListOptions,
  type ListResult,
  type Watch,
  type WatchCallbacks,
  type WriteGuard,
} from './types.js';

/**
 * The worker's entry. Built code runs ./etcd/thread-worker.js as it is; from the TypeScript
 * sources (tests, benches: `node --import tsx`) a worker does not inherit tsx's loader, so a
 * small ES module loads tsx first and imports the .ts file through it.
 */
function startWorker(options: EtcdOptions): Worker {
  const fromSources = import.meta.url.endsWith('.ts');
  const entry = new URL(fromSources ? './etcd/thread-worker.ts' : './etcd/thread-worker.js', import.meta.url);
  const workerOptions = { workerData: options, name: 'etcd-datastore' };
  if (!fromSources) return new Worker(entry, workerOptions);
  const tsx = import.meta.resolve('tsx/esm/api');
  const loader = `import(${JSON.stringify(tsx)}).then((tsx) => tsx.tsImport(${JSON.stringify(entry.href)}, ${JSON.stringify(import.meta.url)}))`;
  return new Worker(loader, { ...workerOptions, eval: true });
}

interface ThreadWatch {
  delivery: WatchDelivery;
  /** The revision of the thread's last progress report, handed on after the events before it. */
  progressRevision: number | undefined;
  /** The revision of the last event received for this watch. */
  lastEventRevision: number;
}

interface Pending {
  method: CallMethod | 'close';
  resolve(value: unknown): void;
  reject(error: Error): void;
}

export class ThreadedEtcdDatastore implements Datastore {
  readonly name = 'etcd';
  private readonly pending = new Map<number, Pending>();
  private readonly watches = new Map<number, ThreadWatch>();
  private nextId = 1;
  /** Why calls fail from now on: closed, or the thread died. */
  private ended: Error | undefined;
  private readonly outbox: Outbox<Request>;

  /** @internal Use {@link openEtcdDatastoreInThread}. */
  constructor(private readonly worker: Worker) {
    this.outbox = new Outbox((requests, transfer) => {
      if (!this.ended) worker.postMessage(requests, transfer);
    });
    worker.on('message', (replies: Reply[]) => {
      for (const reply of replies) this.receive(reply);
    });
    worker.on('error', (error) => this.end(new DatastoreError(`the etcd datastore's thread failed: ${error.message}`, { cause: error })));
    worker.on('exit', (code) => this.end(new DatastoreError(`the etcd datastore's thread exited (code ${code})`)));
  }

  private receive(reply: Reply): void {
    switch (reply.kind) {
      case 'result': {
        const call = this.pending.get(reply.id);
        this.pending.delete(reply.id);
        call?.resolve(call.method === 'close' ? undefined : reviveResult(call.method, reply.value));
        return;
      }
      case 'failed': {
        const call = this.pending.get(reply.id);
        this.pending.delete(reply.id);
        call?.reject(fromWireError(reply.error));
        return;
      }
      case 'events': {
        const watch = this.watches.get(reply.id);
        if (!watch) return;
        for (const event of reply.events) watch.delivery.push(reviveEvent(event));
        const last = reply.events[reply.events.length - 1];
        if (last) watch.lastEventRevision = last.kv.modRevision;
        return;
      }
      case 'watch-progress': {
        const watch = this.watches.get(reply.id);
        if (watch) {
          watch.progressRevision = reply.revision;
          watch.delivery.progress();
        }
        return;
      }
      case 'watch-failed':
        this.watches.get(reply.id)?.delivery.fail(fromWireError(reply.error));
        return;
      default:
        return; // 'opened' and 'open-failed' are handled by openEtcdDatastoreInThread
    }
  }

  /** Every pending call and watch fails with `error`; the thread is stopped. */
  private end(error: Error): void {
    if (this.ended) return;
    this.ended = error;
    const calls = [...this.pending.values()];
    this.pending.clear();
    for (const call of calls) {
      if (call.method === 'close') call.resolve(undefined);
      else call.reject(error);
    }
    for (const watch of [...this.watches.values()]) watch.delivery.fail(error);
    void this.worker.terminate();
  }

  private send(request: Request, transfer?: ArrayBuffer[]): void {
    this.outbox.add(request, transfer);
  }

  private call<M extends CallMethod>(method: M, args: CallArgs<M>, transfer: ArrayBuffer[] = []): Promise<Awaited<ReturnType<Datastore[M]>>> {
    if (this.ended) return Promise.reject(this.ended);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { method, resolve: resolve as (value: unknown) => void, reject });
      this.send({ kind: 'call', id, method, args }, transfer);
    });
  }

  currentRevision(): Promise<number> {
    return this.call('currentRevision', []);
  }

  compactRevision(): Promise<number> {
    return this.call('compactRevision', []);
  }

  get(key: string): Promise<KeyValue | undefined> {
    return this.call('get', [key]);
  }

  list(prefix: string, options?: ListOptions): Promise<ListResult> {
    return this.call('list', options === undefined ? [prefix] : [prefix, options]);
  }

  create(key: string, value: Buffer, guard?: WriteGuard): Promise<KeyValue> {
    const { own, transfer } = ownCopy(value);
    return this.call('create', guard ? [key, own, guard] : [key, own], transfer);
  }

  update(key: string, value: Buffer, expectedModRevision: number, guard?: WriteGuard): Promise<KeyValue> {
    const { own, transfer } = ownCopy(value);
    return this.call('update', guard ? [key, own, expectedModRevision, guard] : [key, own, expectedModRevision], transfer);
  }

  delete(key: string, expectedModRevision?: number, guard?: WriteGuard): Promise<KeyValue> {
    return this.call('delete', guard ? [key, expectedModRevision, guard] : expectedModRevision === undefined ? [key] : [key, expectedModRevision]);
  }

  compact(revision: number): Promise<void> {
    return this.call('compact', [revision]);
  }

  watch(prefix: string, fromRevision: number, callbacks: WatchCallbacks): Watch {
    const id = this.nextId++;
    // Events and progress go to the consumer through the same delivery as every backend's (a
    // later turn of the loop; a consumer that throws ends only its own watch).
    const watch: ThreadWatch = {
      progressRevision: undefined,
      lastEventRevision: 0,
      // A report goes out after every event queued by then, which may include events the thread
      // sent after it (one message can carry a report and then events): it says at least the last
      // of them, as every event of the watch up to that one has then been delivered, in order.
      delivery: new WatchDelivery(
        callbacks,
        () => (watch.progressRevision === undefined ? undefined : Math.max(watch.progressRevision, watch.lastEventRevision)),
        () => {
          // Released once, on cancel or failure: the thread stops the watch too (after a failure
          // reported by the thread it is already gone there, and the message is ignored).
          this.watches.delete(id);
          if (!this.ended) this.send({ kind: 'cancel', id });
        },
      ),
    };
    if (this.ended) {
      watch.delivery.fail(this.ended);
      return { requestProgress: () => undefined, cancel: () => watch.delivery.cancel() };
    }
    this.watches.set(id, watch);
    this.send({ kind: 'watch', id, prefix, fromRevision });
    return {
      requestProgress: () => {
        if (this.watches.has(id) && !this.ended) this.send({ kind: 'progress', id });
      },
      cancel: () => watch.delivery.cancel(),
    };
  }

  async close(): Promise<void> {
    if (this.ended) return;
    const id = this.nextId++;
    await new Promise<void>((resolve, reject) => {
      this.pending.set(id, { method: 'close', resolve: () => resolve(), reject });
      this.send({ kind: 'close', id });
    });
    this.end(new DatastoreError('the datastore was closed'));
  }
}

/**
 * The caller's bytes in a buffer of their own, moved to the thread: the caller may reuse its
 * buffer as soon as the call returns, and a small `Buffer` is a view into an 8 KiB pool that
 * structured clone would copy whole.
 */
function ownCopy(value: Buffer): { own: Buffer; transfer: ArrayBuffer[] } {
  const own = new Uint8Array(value);
  return { own: own as Buffer, transfer: [own.buffer] };
}

/**
 * Starts the thread, which connects to etcd and checks that it answers (so a wrong endpoint fails
 * here, with the error {@link openEtcdDatastore} gives, not on first use).
 */
export async function openEtcdDatastoreInThread(options: EtcdOptions): Promise<ThreadedEtcdDatastore> {
  const worker = startWorker(options);
  await new Promise<void>((resolve, reject) => {
    const onMessage = (replies: Reply[]): void => {
      const reply = replies.find((r) => r.kind === 'opened' || r.kind === 'open-failed');
      if (!reply) return;
      cleanup();
      if (reply.kind === 'opened') resolve();
      else reject(fromWireError(reply.error));
    };
    const onError = (error: Error): void => {
      cleanup();
      reject(new DatastoreError(`the etcd datastore's thread failed to start: ${error.message}`, { cause: error }));
    };
    const onExit = (code: number): void => {
      cleanup();
      reject(new DatastoreError(`the etcd datastore's thread exited during start-up (code ${code})`));
    };
    const cleanup = (): void => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  }).catch(async (error: unknown) => {
    await worker.terminate();
    throw error;
  });
  return new ThreadedEtcdDatastore(worker);
}
