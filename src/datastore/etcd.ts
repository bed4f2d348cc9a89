import {
  type Etcd3,
  type ICompare,
  type IEvent,
  type IKeyValue,
  type IRangeRequest,
  type IRangeResponse,
  type ITxnRequest,
  type ITxnResponse,
} from 'etcd3';

import { createEtcdClient, type EtcdOptions } from './etcd/client.js';
import { num, prefixRange, utf8, ZERO_KEY } from './etcd/encoding.js';
import { errorText, isCompactedError, isFutureRevisionError, isTransient, neverSent, wrap } from './etcd/errors.js';
import { EtcdWatch, Hub } from './etcd/shared-watch.js';
import { WatchStream } from './etcd/watch-stream.js';
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

export type { EtcdOptions } from './etcd/client.js';

/**
 * The etcd datastore: the {@link Datastore} seam over an etcd v3 cluster (gRPC, via the `etcd3`
 * client). Keys, values and revisions map one to one onto etcd's, so revisions are etcd's global
 * revisions and compaction is etcd's compaction.
 *
 * Writes are single transactions: create compares `create_revision == 0`, update and delete
 * compare `mod_revision` (and `create_revision > 0`, so a missing key is never "at revision 0"),
 * and the failure branch reads the key so the error can tell a missing key from a conflict, with
 * the actual revision, atomically.
 *
 * Watches: all watches of one datastore share one etcd watcher and its ring of recent events,
 * and progress is proved by reading the revision; see ./etcd/shared-watch.ts. That watcher and
 * the temporary ones travel on one gRPC stream (./etcd/watch-stream.ts). The connection's set-up
 * (options, TLS, the client's fault handling) is ./etcd/client.ts.
 *
 * compactRevision(). etcd has no call that returns it, but a read at revision r fails exactly
 * when r < compact revision, so it is found by a binary search between the last known compact
 * revision and the current revision (one read when nothing changed since this client compacted).
 *
 * Failures. Every unary call has a deadline. Reads retry briefly on transient failures; writes
 * retry only when the request provably never left this process (no connection), because a
 * retried write whose first attempt committed would report a conflict for its own success. The
 * watch stream reconnects with backoff and resumes every watcher after its last event; if it
 * stays down past `watchRetryTimeoutMs`, every watch ends with onError. gRPC and etcd errors
 * surface as {@link DatastoreError}s.
 *
 * Known limits: etcd attaches prevKv to a watch event by reading the previous revision when it
 * sends the event, so an event sent after that revision was compacted lacks it (a delete event
 * then has an empty value and createRevision 0). A watch that lags behind a compaction ends with
 * {@link CompactedError}, like SQLite's.
 */

export class EtcdDatastore implements Datastore {
  readonly name = 'etcd';
  /** @internal */
  readonly stream: WatchStream;
  /** @internal */
  readonly namespaceRange: { key: Buffer; rangeEnd: Buffer };
  /** @internal */
  readonly cacheLimits: { maxEvents: number; maxBytes: number };
  private readonly client: Etcd3;
  private readonly ns: Buffer;
  private readonly timeoutMs: number;
  private knownCompact = 0;
  private hub: Hub | undefined;
  private hubStarting: Promise<Hub> | undefined;
  private readonly watches = new Set<EtcdWatch>();
  private closed = false;

  constructor(options: EtcdOptions) {
    this.client = createEtcdClient(options);
    this.ns = utf8(options.prefix ?? '');
    this.namespaceRange = prefixRange(this.ns);
    this.timeoutMs = options.requestTimeoutMs ?? 30_000;
    this.cacheLimits = {
      maxEvents: Math.max(1, options.watchCacheEvents ?? 10_000),
      maxBytes: Math.max(1, options.watchCacheBytes ?? 64 * 1024 * 1024),
    };
    this.stream = new WatchStream(this.client, options.watchRetryTimeoutMs ?? 30_000);
  }

  /** @internal */
  get namespaced(): boolean {
    return this.ns.length > 0;
  }

  // --- keys --------------------------------------------------------------------------------------

  private fullKey(key: string): Buffer {
    return this.ns.length === 0 ? utf8(key) : Buffer.concat([this.ns, utf8(key)]);
  }

  /** @internal */
  inNamespace(key: Buffer): boolean {
    return this.ns.length === 0 || (key.length >= this.ns.length && key.subarray(0, this.ns.length).equals(this.ns));
  }

  private userKey(key: Buffer): string {
    return key.subarray(this.ns.length).toString('utf8');
  }

  private toKeyValue(raw: IKeyValue): KeyValue {
    return {
      key: this.userKey(raw.key),
      value: raw.value ?? Buffer.alloc(0),
      createRevision: num(raw.create_revision),
      modRevision: num(raw.mod_revision),
    };
  }

  /** @internal An etcd event as a {@link WatchEvent}, or undefined when outside the namespace. */
  toWatchEvent(e: IEvent): WatchEvent | undefined {
    if (!this.inNamespace(e.kv.key)) return undefined;
    const prevKv = e.prev_kv ? this.toKeyValue(e.prev_kv) : undefined;
    if (e.type === 'Delete') {
      return {
        type: 'delete',
        kv: {
          key: this.userKey(e.kv.key),
          // etcd's delete event carries only the key; the value and createRevision are the
          // previous ones (absent only if that history was compacted before etcd sent the event).
          value: prevKv?.value ?? Buffer.alloc(0),
          createRevision: prevKv?.createRevision ?? 0,
          modRevision: num(e.kv.mod_revision),
        },
        ...(prevKv ? { prevKv } : {}),
      };
    }
    return { type: 'put', kv: this.toKeyValue(e.kv), ...(prevKv ? { prevKv } : {}) };
  }

  // --- calls ---------------------------------------------------------------------------------------

  private callOptions(): { deadline: Date } {
    return { deadline: new Date(Date.now() + this.timeoutMs) };
  }

  private checkOpen(): void {
    if (this.closed) throw new DatastoreError('the datastore was closed');
  }

  /**
   * Runs a call, retrying briefly (each attempt may pick another endpoint): reads on any
   * transient failure, writes only when the request provably never left this process.
   */
  private async call<T>(kind: 'read' | 'write', op: () => Promise<T>): Promise<T> {
    this.checkOpen();
    for (let attempt = 0; ; attempt++) {
      try {
        return await op();
      } catch (error) {
        const retry = kind === 'read' ? isTransient(error) : neverSent(error);
        // 100 + 300 + 900 ms: longer than the per-host breaker's one second, so a member that
        // just came back (or the next one) gets a real chance before the caller sees an error.
        if (attempt >= 3 || !retry || this.closed) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100 * 3 ** attempt));
      }
    }
  }

  private range(request: IRangeRequest): Promise<IRangeResponse> {
    return this.call('read', () => this.client.kv.range(request, this.callOptions()));
  }

  /** A write transaction; its failures surface as DatastoreErrors naming `what`. */
  private async txn(what: string, request: ITxnRequest): Promise<ITxnResponse> {
    try {
      return await this.call('write', () => this.client.kv.txn(request, this.callOptions()));
    } catch (error) {
      throw wrap(error, what);
    }
  }

  async currentRevision(): Promise<number> {
    try {
      const response = await this.range({ key: ZERO_KEY, count_only: true });
      return num(response.header.revision);
    } catch (error) {
      throw wrap(error, 'read');
    }
  }

  /** True when a read at `revision` works, false when that revision is compacted. */
  private async readableAt(revision: number): Promise<boolean> {
    try {
      await this.range({ key: ZERO_KEY, count_only: true, revision });
      return true;
    } catch (error) {
      if (isCompactedError(error)) return false;
      if (isFutureRevisionError(error)) return true;
      throw wrap(error, 'read');
    }
  }

  async compactRevision(): Promise<number> {
    const current = await this.currentRevision();
    // A read at r fails exactly when r < the compact revision C, so C is the smallest readable
    // revision (when it is at least 2; revision 1 holds no data, so C <= 1 reads as "never").
    const lo = Math.min(Math.max(1, this.knownCompact), Math.max(1, current));
    let good: number;
    if (await this.readableAt(lo)) {
      good = lo;
    } else {
      let bad = lo;
      good = current;
      while (good - bad > 1) {
        const mid = Math.floor((bad + good) / 2);
        if (await this.readableAt(mid)) good = mid;
        else bad = mid;
      }
    }
    const compact = good <= 1 ? this.knownCompact : good;
    this.knownCompact = Math.max(this.knownCompact, compact);
    return compact;
  }

  async get(key: string): Promise<KeyValue | undefined> {
    if (key === '' && this.ns.length === 0) return undefined; // etcd has no empty key
    let response: IRangeResponse;
    try {
      response = await this.range({ key: this.fullKey(key) });
    } catch (error) {
      throw wrap(error, 'get');
    }
    const raw = response.kvs[0];
    return raw ? this.toKeyValue(raw) : undefined;
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ListResult> {
    const prefixBytes = this.fullKey(prefix);
    const { key: rangeStart, rangeEnd } = prefixRange(prefixBytes);
    let start = rangeStart;
    if (options.continue !== undefined) {
      // `continue` is exclusive; appending the smallest byte makes it an inclusive start.
      const after = Buffer.concat([this.fullKey(options.continue), ZERO_KEY]);
      if (Buffer.compare(after, start) > 0) start = after;
    }
    const limit = options.limit && options.limit > 0 ? options.limit : 0;
    const revision = options.revision && options.revision > 0 ? options.revision : 0;
    if (rangeEnd.length > 0 && !rangeEnd.equals(ZERO_KEY) && Buffer.compare(start, rangeEnd) >= 0) {
      // Past the end of the prefix: nothing, but still the revision (and its errors) of a read.
      start = rangeEnd;
    }
    let response: IRangeResponse;
    try {
      response = await this.range({ key: start, range_end: rangeEnd, limit, revision });
    } catch (error) {
      throw await this.readError(error, revision);
    }
    const items = response.kvs.map((raw) => this.toKeyValue(raw));
    return {
      items,
      revision: revision > 0 ? revision : num(response.header.revision),
      more: limit > 0 && Boolean(response.more),
    };
  }

  private async readError(error: unknown, revision: number): Promise<Error> {
    if (isCompactedError(error)) {
      return new CompactedError(revision, await this.compactRevision().catch(() => this.knownCompact));
    }
    if (isFutureRevisionError(error)) {
      return new FutureRevisionError(revision, await this.currentRevision().catch(() => 0));
    }
    return wrap(error, 'list');
  }

  async create(key: string, input: Buffer, guard?: WriteGuard): Promise<KeyValue> {
    // Our own copy, taken now: the caller may reuse its buffer as soon as we return.
    const value = Buffer.from(input);
    const fullKey = this.fullKey(key);
    const response = await this.txn('create', {
      compare: [...this.guardCompare(guard), { key: fullKey, target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key: fullKey, value } }],
      failure: this.guardRead(guard),
    });
    if (!response.succeeded) throw this.guardFailure(key, guard, response.responses, 0) ?? new KeyExistsError(key);
    const revision = num(response.header.revision);
    return { key, value, createRevision: revision, modRevision: revision };
  }

  async update(key: string, input: Buffer, expectedModRevision: number, guard?: WriteGuard): Promise<KeyValue> {
    const value = Buffer.from(input);
    const fullKey = this.fullKey(key);
    const response = await this.txn('update', {
      compare: [
        ...this.guardCompare(guard),
        { key: fullKey, target: 'Create', result: 'Greater', create_revision: 0 },
        { key: fullKey, target: 'Mod', result: 'Equal', mod_revision: expectedModRevision },
      ],
      // The key's createRevision for the result comes from a keys-only read after the put, in
      // the same transaction: prev_kv would bring back (and make us decode) the whole old value.
      success: [{ request_put: { key: fullKey, value } }, { request_range: { key: fullKey, keys_only: true } }],
      failure: [{ request_range: { key: fullKey } }, ...this.guardRead(guard)],
    });
    if (!response.succeeded) throw this.guardFailure(key, guard, response.responses, 1) ?? this.casFailure(key, expectedModRevision, response.responses);
    const written = response.responses[1]?.response_range?.kvs?.[0];
    const revision = num(response.header.revision);
    return { key, value, createRevision: written ? num(written.create_revision) : revision, modRevision: revision };
  }

  async delete(key: string, expectedModRevision?: number, guard?: WriteGuard): Promise<KeyValue> {
    const fullKey = this.fullKey(key);
    const compare: ICompare[] = [
      ...this.guardCompare(guard),
      { key: fullKey, target: 'Create', result: 'Greater', create_revision: 0 },
    ];
    if (expectedModRevision !== undefined) {
      compare.push({ key: fullKey, target: 'Mod', result: 'Equal', mod_revision: expectedModRevision });
    }
    const response = await this.txn('delete', {
      compare,
      success: [{ request_delete_range: { key: fullKey, prev_kv: true } }],
      failure: [{ request_range: { key: fullKey } }, ...this.guardRead(guard)],
    });
    if (!response.succeeded) throw this.guardFailure(key, guard, response.responses, 1) ?? this.casFailure(key, expectedModRevision, response.responses);
    const prev = response.responses[0]?.response_delete_range?.prev_kvs?.[0];
    if (!prev) throw new KeyNotFoundError(key); // cannot happen: the compare saw the key
    return {
      key,
      value: prev.value ?? Buffer.alloc(0),
      createRevision: num(prev.create_revision),
      modRevision: num(response.header.revision),
    };
  }

  /** The guard as one more compare of the write's transaction (a missing key's mod revision is 0: never equal). */
  private guardCompare(guard: WriteGuard | undefined): ICompare[] {
    return guard ? [{ key: this.fullKey(guard.key), target: 'Mod', result: 'Equal', mod_revision: guard.modRevision }] : [];
  }

  /** On failure, the guard key is read too (its revision only), to tell a failed guard from the write's own condition. */
  private guardRead(guard: WriteGuard | undefined): { request_range: IRangeRequest }[] {
    return guard ? [{ request_range: { key: this.fullKey(guard.key), keys_only: true } }] : [];
  }

  private guardFailure(key: string, guard: WriteGuard | undefined, responses: { response_range?: IRangeResponse }[], at: number): GuardFailedError | undefined {
    if (!guard) return undefined;
    const found = responses[at]?.response_range?.kvs?.[0];
    const revision = found ? num(found.mod_revision) : 0;
    return revision === guard.modRevision ? undefined : new GuardFailedError(key, guard, revision);
  }

  private casFailure(
    key: string,
    expected: number | undefined,
    responses: { response_range?: IRangeResponse }[],
  ): Error {
    const current = responses[0]?.response_range?.kvs?.[0];
    if (!current) return new KeyNotFoundError(key);
    return new ConflictError(key, expected ?? 0, num(current.mod_revision), this.toKeyValue(current));
  }

  async compact(revision: number): Promise<void> {
    this.checkOpen();
    if (revision <= this.knownCompact) return;
    try {
      // Compaction is idempotent (a repeat fails as "compacted", handled below): retry like a read.
      await this.call('read', () => this.client.kv.compact({ revision, physical: true }, this.callOptions()));
    } catch (error) {
      if (isCompactedError(error)) return; // already compacted at or past it
      if (isFutureRevisionError(error)) {
        throw new FutureRevisionError(revision, await this.currentRevision().catch(() => 0));
      }
      throw wrap(error, 'compact');
    }
    this.knownCompact = Math.max(this.knownCompact, revision);
  }

  // --- watches ---------------------------------------------------------------------------------------

  watch(prefix: string, fromRevision: number, callbacks: WatchCallbacks): Watch {
    const start = Math.max(1, Math.floor(fromRevision) || 1);
    const watch = new EtcdWatch(this, prefix, start, callbacks);
    if (this.closed) {
      watch.fail(new DatastoreError('the datastore was closed'));
      return watch;
    }
    this.watches.add(watch);
    void this.startWatch(watch);
    return watch;
  }

  private async startWatch(watch: EtcdWatch): Promise<void> {
    try {
      // History at or below the compact revision is gone (etcd itself would still serve a watch
      // from exactly the compact revision, with whatever the compaction kept).
      if (watch.start >= 2 && !(await this.readableAt(watch.start - 1))) {
        watch.fail(new CompactedError(watch.start, await this.compactRevision()));
        return;
      }
      const hub = await this.ensureHub(watch.start);
      if (!watch.active) return;
      if (watch.start >= hub.ringFrom || hub.ringFrom - 1 <= 1) {
        hub.attach(watch, watch.start);
      } else {
        watch.beginCatchUp(hub, hub.ringFrom - 1);
      }
    } catch (error) {
      watch.fail(wrap(error, 'watch'));
    }
  }

  private ensureHub(startHint: number): Promise<Hub> {
    if (this.hub && !this.hub.dead) return Promise.resolve(this.hub);
    if (!this.hubStarting) {
      const starting = (async () => {
        const current = await this.currentRevision();
        this.checkOpen();
        // Start where the first watch needs it (its history then comes from the hub itself).
        const hub = new Hub(this, Math.max(1, Math.min(startHint, current + 1)));
        this.hub = hub;
        return hub;
      })();
      this.hubStarting = starting;
      const clear = (): void => {
        if (this.hubStarting === starting) this.hubStarting = undefined;
      };
      starting.then(clear, clear);
    }
    return this.hubStarting;
  }

  /** @internal */
  hubDied(hub: Hub): void {
    if (this.hub === hub) this.hub = undefined;
  }

  /** @internal */
  forget(watch: EtcdWatch): void {
    this.watches.delete(watch);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const error = new DatastoreError('the datastore was closed');
    this.hub?.die(error);
    for (const watch of [...this.watches]) watch.fail(error);
    this.stream.close();
    this.client.close();
  }
}


/**
 * Connects to etcd and checks that it answers (so a wrong endpoint fails here, not on first use).
 */
export async function openEtcdDatastore(options: EtcdOptions): Promise<EtcdDatastore> {
  const store = new EtcdDatastore(options);
  try {
    await store.currentRevision();
  } catch (error) {
    await store.close();
    throw new DatastoreError(
      `cannot reach etcd at ${options.endpoints.join(', ')}: ${errorText(error)}`,
      { cause: error },
    );
  }
  return store;
}
