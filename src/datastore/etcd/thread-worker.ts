/**
 * The etcd datastore's own thread: it runs {@link EtcdDatastore} (the gRPC client, its HTTP/2
 * connection, protobuf, the shared watch) and answers the main thread's requests
 * (./thread-protocol.ts). Started by ../etcd-thread.ts with the options as `workerData`.
 */

import { parentPort, workerData } from 'node:worker_threads';

import { type Watch, type WatchEvent } from '../types.js';
import { type EtcdOptions, openEtcdDatastore } from '../etcd.js';
import { type CallMethod, detachEvents, detachResult, Outbox, type Reply, type Request, toWireError } from './thread-protocol.js';

const port = parentPort;
if (!port) throw new Error('thread-worker.ts runs only as a worker thread (see src/datastore/etcd-thread.ts)');

/** The watch events detached for the next message, by the event they copy (see detachEvents). */
const eventsInMessage = new Map<WatchEvent, WatchEvent>();
const outbox = new Outbox<Reply>((replies, transfer) => {
  port!.postMessage(replies, transfer);
  eventsInMessage.clear(); // their buffers went with that message
});

function send(reply: Reply, transfer?: ArrayBuffer[]): void {
  outbox.add(reply, transfer);
}

/** The last replies, then the port closes (the thread then ends once the datastore has). */
function closePort(): void {
  outbox.flush();
  port!.close();
}

function failure(error: unknown): { error: ReturnType<typeof toWireError>; transfer: ArrayBuffer[] } {
  const transfer: ArrayBuffer[] = [];
  return { error: toWireError(error, transfer), transfer };
}

async function main(): Promise<void> {
  let store;
  try {
    store = await openEtcdDatastore(workerData as EtcdOptions);
  } catch (error) {
    const { error: wire, transfer } = failure(error);
    send({ kind: 'open-failed', error: wire }, transfer);
    closePort();
    return;
  }
  const datastore = store;
  const watches = new Map<number, Watch>();

  const call = async (id: number, method: CallMethod, args: unknown[]): Promise<void> => {
    try {
      const value = await (datastore[method] as (...a: unknown[]) => Promise<unknown>).apply(datastore, args);
      const transfer: ArrayBuffer[] = [];
      send({ kind: 'result', id, value: detachResult(method, value, transfer) }, transfer);
    } catch (error) {
      const { error: wire, transfer } = failure(error);
      send({ kind: 'failed', id, error: wire }, transfer);
    }
  };

  const handle = (request: Request): void => {
    switch (request.kind) {
      case 'call':
        void call(request.id, request.method, request.args);
        return;
      case 'watch': {
        const { id } = request;
        const watch = datastore.watch(request.prefix, request.fromRevision, {
          onEvents: (events) => {
            const transfer: ArrayBuffer[] = [];
            send({ kind: 'events', id, events: detachEvents(events, transfer, eventsInMessage) }, transfer);
          },
          onProgress: (revision) => send({ kind: 'watch-progress', id, revision }),
          onError: (error) => {
            watches.delete(id);
            const { error: wire, transfer } = failure(error);
            send({ kind: 'watch-failed', id, error: wire }, transfer);
          },
        });
        watches.set(id, watch);
        return;
      }
      case 'progress':
        watches.get(request.id)?.requestProgress();
        return;
      case 'cancel':
        watches.get(request.id)?.cancel();
        watches.delete(request.id);
        return;
      case 'close':
        void datastore.close().then(
          () => {
            send({ kind: 'result', id: request.id, value: undefined });
            closePort();
          },
          (error: unknown) => {
            const { error: wire, transfer } = failure(error);
            send({ kind: 'failed', id: request.id, error: wire }, transfer);
            closePort();
          },
        );
        return;
    }
  };
  port!.on('message', (requests: Request[]) => {
    for (const request of requests) handle(request);
  });
  send({ kind: 'opened' });
}

void main();
