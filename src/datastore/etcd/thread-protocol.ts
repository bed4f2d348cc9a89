/**
 * The messages between the etcd datastore's own thread (./thread-worker.ts) and the server's main
 * thread (../etcd-thread.ts), and how the values in them cross: structured clone keeps plain data
 * but not classes, so a `Buffer` arrives as a `Uint8Array` and an error as a plain object; the
 * helpers here turn them back into what the {@link Datastore} contract promises.
 */

import {
  CompactedError,
  ConflictError,
  type Datastore,
  DatastoreError,
  FutureRevisionError,
  GuardFailedError,
  KeyExistsError,
  KeyNotFoundError,
  type KeyValue,
  type ListResult,
  type WatchEvent,
  type WriteGuard,
} from '../types.js';

/** The datastore calls that are one request and one answer. */
export type CallMethod = 'currentRevision' | 'compactRevision' | 'get' | 'list' | 'create' | 'update' | 'delete' | 'compact';
export type CallArgs<M extends CallMethod> = Parameters<Datastore[M]>;

/** Main thread → datastore thread. */
export type Request =
  | { kind: 'call'; id: number; method: CallMethod; args: unknown[] }
  | { kind: 'watch'; id: number; prefix: string; fromRevision: number }
  | { kind: 'progress'; id: number }
  | { kind: 'cancel'; id: number }
  | { kind: 'close'; id: number };

/** Datastore thread → main thread. */
export type Reply =
  | { kind: 'opened' }
  | { kind: 'open-failed'; error: WireError }
  | { kind: 'result'; id: number; value: unknown }
  | { kind: 'failed'; id: number; error: WireError }
  | { kind: 'events'; id: number; events: WatchEvent[] }
  | { kind: 'watch-progress'; id: number; revision: number }
  | { kind: 'watch-failed'; id: number; error: WireError };

/** An error as it crosses: its class name and the fields that class carries. */
export interface WireError {
  name: string;
  message: string;
  fields: Record<string, unknown>;
}

const ERROR_FIELDS = ['key', 'expectedModRevision', 'actualModRevision', 'current', 'guard', 'requestedRevision', 'compactRevision', 'currentRevision'];

export function toWireError(error: unknown, transfer: ArrayBuffer[]): WireError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error), fields: {} };
  const fields: Record<string, unknown> = {};
  for (const field of ERROR_FIELDS) {
    const value = (error as unknown as Record<string, unknown>)[field];
    if (value !== undefined) fields[field] = field === 'current' ? detachKeyValues([value as KeyValue], transfer)[0] : value;
  }
  return { name: error.name, message: error.message, fields };
}

/** The error class the datastore threw, rebuilt; anything that is not a datastore error becomes a {@link DatastoreError} with its message. */
export function fromWireError(wire: WireError): Error {
  const f = wire.fields;
  const n = (name: string): number => Number(f[name] ?? 0);
  const key = String(f.key ?? '');
  switch (wire.name) {
    case 'KeyExistsError':
      return new KeyExistsError(key);
    case 'KeyNotFoundError':
      return new KeyNotFoundError(key);
    case 'ConflictError':
      return new ConflictError(key, n('expectedModRevision'), n('actualModRevision'), f.current ? reviveKeyValue(f.current as KeyValue) : undefined);
    case 'GuardFailedError':
      return new GuardFailedError(key, f.guard as WriteGuard, n('actualModRevision'));
    case 'CompactedError':
      return new CompactedError(n('requestedRevision'), n('compactRevision'));
    case 'FutureRevisionError':
      return new FutureRevisionError(n('requestedRevision'), n('currentRevision'));
    default:
      return new DatastoreError(wire.message);
  }
}

/**
 * Copies of `kvs` whose values are views into one new buffer holding exactly their bytes; that
 * buffer is added to `transfer` (moved to the other thread, not copied again). Why not send the
 * values as they are: a value decoded from a gRPC message is a view into the whole message's
 * buffer (a small `Buffer`, into an 8 KiB pool), and structured clone copies a view's entire
 * buffer, so one event of a 1 MiB watch message would carry the megabyte across.
 */
export function detachKeyValues(kvs: KeyValue[], transfer: ArrayBuffer[]): KeyValue[] {
  let total = 0;
  for (const kv of kvs) total += kv.value.length;
  const buffer = new ArrayBuffer(total);
  transfer.push(buffer);
  let offset = 0;
  return kvs.map((kv) => {
    const view = new Uint8Array(buffer, offset, kv.value.length);
    view.set(kv.value);
    offset += kv.value.length;
    return { ...kv, value: view as Buffer };
  });
}

/**
 * `events` made ready to cross. `sent`: the events already detached for the message being built,
 * by the event they copy. The watches of one prefix get the same event objects, and a message
 * that holds the same copy for each of them carries it once (structured clone keeps shared
 * references), so on the main thread every watch gets the same event object too, as from the
 * backend itself, and its previous value is decoded once for all of them (watch-events.ts).
 */
export function detachEvents(events: WatchEvent[], transfer: ArrayBuffer[], sent = new Map<WatchEvent, WatchEvent>()): WatchEvent[] {
  const fresh = events.filter((event) => !sent.has(event));
  const kvs: KeyValue[] = [];
  for (const event of fresh) {
    kvs.push(event.kv);
    if (event.prevKv) kvs.push(event.prevKv);
  }
  const copies = detachKeyValues(kvs, transfer);
  let next = 0;
  for (const event of fresh) {
    const kv = copies[next++]!;
    sent.set(event, event.prevKv ? { ...event, kv, prevKv: copies[next++]! } : { ...event, kv });
  }
  return events.map((event) => sent.get(event)!);
}

/** The same key-value with its value a `Buffer` again (a view of the arrived bytes, no copy). */
export function reviveKeyValue(kv: KeyValue): KeyValue {
  if (Buffer.isBuffer(kv.value)) return kv; // one object shared by several watches' events: revived already
  const bytes = kv.value as Uint8Array;
  kv.value = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return kv;
}

export function reviveEvent(event: WatchEvent): WatchEvent {
  reviveKeyValue(event.kv);
  if (event.prevKv) reviveKeyValue(event.prevKv);
  return event;
}

/** What a call answers with: one key-value (or none), a list of them, or plain data (revisions, nothing). */
function answerShape(method: CallMethod): 'key-value' | 'list' | 'plain' {
  if (method === 'list') return 'list';
  return method === 'get' || method === 'create' || method === 'update' || method === 'delete' ? 'key-value' : 'plain';
}

/** A call's answer made ready to cross (values detached into `transfer`). */
export function detachResult(method: CallMethod, value: unknown, transfer: ArrayBuffer[]): unknown {
  if (value === undefined) return undefined;
  const shape = answerShape(method);
  if (shape === 'key-value') return detachKeyValues([value as KeyValue], transfer)[0];
  if (shape === 'list') return { ...(value as ListResult), items: detachKeyValues((value as ListResult).items, transfer) };
  return value;
}

/** A call's answer as the contract types it (values `Buffer`s again). */
export function reviveResult(method: CallMethod, value: unknown): unknown {
  if (value === undefined) return undefined;
  const shape = answerShape(method);
  if (shape === 'key-value') return reviveKeyValue(value as KeyValue);
  if (shape === 'list') for (const item of (value as ListResult).items) reviveKeyValue(item);
  return value;
}

/**
 * Messages to the other thread, sent together once per turn of the event loop: each message
 * costs both threads a fixed amount (the post, its event on the other side), and under load one
 * turn completes many calls, whose answers (and the requests of the many API requests a turn
 * handles) then cross as one message.
 */
export class Outbox<T> {
  private items: T[] = [];
  private transfer: ArrayBuffer[] = [];
  private scheduled = false;

  constructor(private readonly post: (items: T[], transfer: ArrayBuffer[]) => void) {}

  add(item: T, transfer?: ArrayBuffer[]): void {
    this.items.push(item);
    if (transfer) for (const buffer of transfer) this.transfer.push(buffer);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** Sends what is queued now (also called before the port closes). */
  flush(): void {
    this.scheduled = false;
    if (this.items.length === 0) return;
    const items = this.items;
    const transfer = this.transfer;
    this.items = [];
    this.transfer = [];
    this.post(items, transfer);
  }
}
