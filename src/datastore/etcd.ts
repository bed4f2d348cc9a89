import fs from 'node:fs';

import { circuitBreaker, ConsecutiveBreaker, handleWhen } from 'cockatiel';
import {
  Etcd3,
  isRecoverableError,
  type ICompare,
  type IDuplexStream,
  type IEvent,
  type IKeyValue,
  type IOptions,
  type IRangeRequest,
  type IRangeResponse,
  type ITxnRequest,
  type ITxnResponse,
  type IWatchRequest,
  type IWatchResponse,
} from 'etcd3';

import {
  CompactedError,
  ConflictError,
  type Datastore,
  DatastoreError,
  FutureRevisionError,
  KeyExistsError,
  type KeyValue,
  KeyNotFoundError,
  type ListOptions,
  type ListResult,
  type Watch,
  type WatchCallbacks,
  type WatchEvent,
} from './types.js';
import { WatchDelivery } from './watch-delivery.js';

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
 * Watches. All watches of one datastore share one etcd watcher over the datastore's whole key
 * range (the "hub"), in the manner of the API server's watch cache. The hub keeps a bounded ring
 * of recent events, so a watch from a recent revision replays from memory and joins the live
 * stream in one synchronous step: no gap, no duplicate. A watch from further back first replays
 * from etcd with a temporary watcher over the whole keyspace, up to the ring's first revision,
 * then switches to the ring. Because every etcd revision (from 2 on) is the revision of at least
 * one event somewhere in the keyspace, that temporary watcher is certain to reach the switch
 * point; a watcher over the prefix alone could stay silent forever and never prove it is done.
 *
 * Progress. etcd 3.4's `progress_request` answers with the store revision on a control channel
 * that is not ordered with the event channel (and regardless of unsynced watchers), so its
 * revision can be ahead of events not yet sent (etcd-io/etcd#15220; fixed by #15237 and, for new
 * watchers, #17557, in later 3.4/3.5 patch releases than Debian's 3.4.23). The etcd3 client does
 * not expose it either. It is therefore not used. Instead a watch asks the hub: the hub reads the
 * current revision R (a linearizable read) and reports progress once it has itself received
 * every event up to R. Without a key namespace the hub sees every revision, so that is simply
 * "an event at R or later arrived". With a namespace, writes outside it leave no trace in the
 * hub, so the hub proves there is nothing left for it below R with a short-lived watcher over
 * the whole keyspace from the hub's last revision up to R.
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

export interface EtcdOptions {
  /** Client URLs, e.g. `http://127.0.0.1:2379` or `https://10.0.0.1:2379`. */
  endpoints: string[];
  /** CA bundle for the server certificates: a file path (`caFile`) or PEM (`ca`). */
  caFile?: string;
  ca?: string | Buffer;
  /** Client certificate and key for mutual TLS. */
  certFile?: string;
  cert?: string | Buffer;
  keyFile?: string;
  key?: string | Buffer;
  /**
   * Key namespace: every key is stored under this prefix in etcd, so several datastores can share
   * one etcd. Progress notifications and replays from old revisions then also read keys outside
   * the namespace (their revisions), so the client needs read access to the whole keyspace.
   */
  prefix?: string;
  /** Deadline of every unary call (reads, writes, compaction). Default 30 s. */
  requestTimeoutMs?: number;
  /** How long the shared watch stream may stay broken before every watch fails. Default 30 s. */
  watchRetryTimeoutMs?: number;
  /** Most events kept in memory for watches resuming from a recent revision. Default 10 000. */
  watchCacheEvents?: number;
  /** Most bytes (keys and values) kept in that cache. Default 64 MiB. */
  watchCacheBytes?: number;
}

const ZERO_KEY = Buffer.from([0]);
/** etcd keys are bytes; a string key is stored as its UTF-8, which also orders like etcd's. */
const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');
const num = (value: string | number | undefined | null): number => Number(value ?? 0);

/** The smallest key above every key starting with `prefix`, or undefined when there is none. */
function prefixEnd(prefix: Buffer): Buffer | undefined {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  return undefined;
}

/** etcd's [key, range_end) for all keys starting with `prefix` (`\0` as range_end: no end). */
function prefixRange(prefix: Buffer): { key: Buffer; rangeEnd: Buffer } {
  if (prefix.length === 0) return { key: ZERO_KEY, rangeEnd: ZERO_KEY };
  return { key: prefix, rangeEnd: prefixEnd(prefix) ?? ZERO_KEY };
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isCompactedError(error: unknown): boolean {
  return /required revision has been compacted/.test(errorText(error));
}

function isFutureRevisionError(error: unknown): boolean {
  return /required revision is a future revision/.test(errorText(error));
}

/** Transient cluster conditions worth another try for a read (reads are idempotent). */
function isTransient(error: unknown): boolean {
  const name = error instanceof Error ? error.constructor.name : '';
  return (
    name === 'GRPCUnavailableError' ||
    neverSent(error) ||
    /leader changed|no leader|request timed out|UNAVAILABLE/i.test(errorText(error))
  );
}

/**
 * Failures that prove the request never reached etcd (no connection, or the client's circuit
 * breaker refused it), so even a write can be retried, on another endpoint if there is one.
 */
function neverSent(error: unknown): boolean {
  return /No connection established|ECONNREFUSED|circuit breaker is open/i.test(errorText(error));
}

function wrap(error: unknown, what: string): Error {
  if (error instanceof DatastoreError) return error;
  return new DatastoreError(`etcd ${what} failed: ${errorText(error)}`, { cause: error });
}

function valueSize(event: WatchEvent): number {
  return (
    event.kv.key.length * 2 +
    event.kv.value.length +
    (event.prevKv ? event.prevKv.value.length + event.prevKv.key.length * 2 : 0) +
    100
  );
}

// -----------------------------------------------------------------------------------------------
// The shared gRPC watch stream
// -----------------------------------------------------------------------------------------------

interface RawHandler {
  /** Events for this watcher, in revision order. */
  events(events: IEvent[]): void;
  /** etcd cancelled the watcher because its next revision was compacted. No further calls. */
  compacted(compactRevision: number): void;
  /** The watcher cannot go on (stream down too long, permission denied...). No further calls. */
  failed(error: Error): void;
}

/** One etcd watcher on the shared stream. It resumes from `nextRevision` after a reconnect. */
class RawWatcher {
  id = 0;
  /** The stream the create request was written to (a cancel goes to the same stream). */
  sentOn: IDuplexStream<IWatchRequest, IWatchResponse> | undefined;

  constructor(
    readonly key: Buffer,
    readonly rangeEnd: Buffer,
    readonly prevKv: boolean,
    public nextRevision: number,
    readonly handler: RawHandler,
  ) {}
}

/**
 * One bidirectional etcd Watch stream carrying every etcd watcher of the datastore, each under a
 * watch ID chosen here (etcd >= 3.4 accepts client-chosen IDs). When the stream breaks it is
 * re-established with backoff and every watcher is re-created from the revision after the last
 * event it received, so nothing is lost or repeated; after `retryTimeoutMs` without a working
 * stream, every watcher fails.
 */
class WatchStream {
  private stream: IDuplexStream<IWatchRequest, IWatchResponse> | undefined;
  private connecting = false;
  private readonly watchers = new Map<number, RawWatcher>();
  /** IDs cancelled on the current stream whose cancel confirmation has not arrived yet. */
  private cancelled = new Set<number>();
  private nextId = 1;
  private closed = false;
  private backoffMs = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private brokenSince: number | undefined;

  constructor(
    private readonly client: Etcd3,
    private readonly retryTimeoutMs: number,
  ) {}

  add(watcher: RawWatcher): void {
    if (this.closed) {
      const error = new DatastoreError('the datastore was closed');
      setImmediate(() => watcher.handler.failed(error));
      return;
    }
    watcher.id = this.nextId++;
    this.watchers.set(watcher.id, watcher);
    if (this.stream) this.sendCreate(this.stream, watcher);
    else this.connect();
  }

  remove(watcher: RawWatcher): void {
    if (this.watchers.get(watcher.id) !== watcher) return;
    this.watchers.delete(watcher.id);
    if (this.stream && watcher.sentOn === this.stream) {
      this.cancelled.add(watcher.id);
      this.write(this.stream, { cancel_request: { watch_id: watcher.id } });
    }
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.watchers.clear();
    const stream = this.stream;
    this.stream = undefined;
    if (stream) {
      try {
        stream.cancel();
      } catch {
        // Already gone.
      }
    }
  }

  private write(stream: IDuplexStream<IWatchRequest, IWatchResponse>, request: IWatchRequest): void {
    try {
      stream.write(request);
    } catch (error) {
      this.broken(stream, error instanceof Error ? error : new Error(String(error)));
    }
  }

  private sendCreate(stream: IDuplexStream<IWatchRequest, IWatchResponse>, watcher: RawWatcher): void {
    watcher.sentOn = stream;
    this.write(stream, {
      create_request: {
        key: watcher.key,
        range_end: watcher.rangeEnd,
        start_revision: Math.max(1, watcher.nextRevision),
        prev_kv: watcher.prevKv,
        watch_id: watcher.id,
      },
    });
  }

  private connect(): void {
    if (this.closed || this.stream || this.connecting) return;
    this.connecting = true;
    this.client.watchClient.watch().then(
      (stream) => {
        this.connecting = false;
        if (this.closed) {
          stream.cancel();
          return;
        }
        this.stream = stream;
        this.cancelled = new Set();
        stream.on('data', (response) => this.onResponse(stream, response));
        stream.on('error', (error) => this.broken(stream, error));
        stream.on('end', () => this.broken(stream, new Error('the etcd watch stream ended')));
        for (const watcher of [...this.watchers.values()]) {
          if (this.stream === stream) this.sendCreate(stream, watcher);
        }
      },
      (error: unknown) => {
        this.connecting = false;
        this.broken(undefined, error instanceof Error ? error : new Error(String(error)));
      },
    );
  }

  private broken(stream: IDuplexStream<IWatchRequest, IWatchResponse> | undefined, error: Error): void {
    if (stream !== undefined && stream !== this.stream) return; // an old stream's last words
    if (stream) {
      this.stream = undefined;
      try {
        stream.cancel();
      } catch {
        // Already gone.
      }
    }
    if (this.closed) return;
    const now = Date.now();
    this.brokenSince ??= now;
    if (now - this.brokenSince >= this.retryTimeoutMs) {
      const failure = new DatastoreError(`the etcd watch stream is unavailable: ${error.message}`, { cause: error });
      const watchers = [...this.watchers.values()];
      this.watchers.clear();
      this.brokenSince = undefined;
      this.backoffMs = 0;
      for (const watcher of watchers) watcher.handler.failed(failure);
      return;
    }
    if (this.watchers.size === 0) {
      // Nobody to resume; the next watcher reconnects.
      this.brokenSince = undefined;
      return;
    }
    this.backoffMs = Math.min(2000, Math.max(50, this.backoffMs * 2));
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connect();
    }, this.backoffMs);
  }

  private onResponse(stream: IDuplexStream<IWatchRequest, IWatchResponse>, response: IWatchResponse): void {
    if (stream !== this.stream) return;
    this.brokenSince = undefined;
    this.backoffMs = 0;
    const id = num(response.watch_id);
    if (id === -1) return; // a progress broadcast; not used (see the module comment)
    const watcher = this.watchers.get(id);
    if (!watcher || watcher.sentOn !== stream) {
      if (this.cancelled.has(id)) {
        if (response.canceled) this.cancelled.delete(id);
      } else if (!response.canceled && !watcher) {
        // Not ours (any more): make sure etcd stops sending it.
        this.cancelled.add(id);
        this.write(stream, { cancel_request: { watch_id: id } });
      }
      return;
    }
    try {
      if (response.canceled) {
        this.watchers.delete(id);
        const compactRevision = num(response.compact_revision);
        if (compactRevision > 0) watcher.handler.compacted(compactRevision);
        else {
          watcher.handler.failed(
            new DatastoreError(`etcd cancelled the watch: ${response.cancel_reason || 'no reason given'}`),
          );
        }
        return;
      }
      const events = response.events ?? [];
      if (events.length > 0) {
        watcher.nextRevision = num(events[events.length - 1]!.kv.mod_revision) + 1;
        watcher.handler.events(events);
      }
    } catch (error) {
      // A handler bug must not take the shared stream down; fail just that watcher.
      this.watchers.delete(id);
      this.cancelled.add(id);
      this.write(stream, { cancel_request: { watch_id: id } });
      try {
        watcher.handler.failed(error instanceof Error ? error : new Error(String(error)));
      } catch {
        // Nothing more to do.
      }
    }
  }
}

// -----------------------------------------------------------------------------------------------
// Watches
// -----------------------------------------------------------------------------------------------

interface RingEntry {
  revision: number;
  event: WatchEvent;
  size: number;
}

/**
 * The datastore-wide watcher and its ring of recent events. Invariants:
 * - every event of the datastore's key range with a revision <= `through` has been received and
 *   handed to every live subscriber (in revision order);
 * - the ring holds every such event with a revision >= `ringFrom`.
 */
class Hub {
  through: number;
  ringFrom: number;
  dead = false;
  private deathError: Error | undefined;
  private ring: RingEntry[] = [];
  private ringHead = 0;
  private ringBytes = 0;
  private readonly subscribers = new Set<EtcdWatch>();
  /** Watches replaying from etcd; each keeps the ring from its switch-over revision on. */
  private readonly pins = new Map<EtcdWatch, number>();
  private readonly raw: RawWatcher;

  // Progress: watches waiting for the next current-revision read, and those waiting for `through`.
  private progressAsked = new Set<EtcdWatch>();
  private progressReading = false;
  private progressWaiting: { revision: number; watches: Set<EtcdWatch> }[] = [];
  // Namespace mode: proving that no event of the namespace is missing up to a revision.
  private confirmTarget = 0;
  private confirming: RawWatcher | undefined;
  private confirmed: { upTo: number; needs: number } | undefined;

  constructor(
    private readonly store: EtcdDatastore,
    start: number,
  ) {
    this.through = start - 1;
    this.ringFrom = start;
    const range = store.namespaceRange;
    this.raw = new RawWatcher(range.key, range.rangeEnd, true, start, {
      events: (events) => this.onEvents(events),
      compacted: (compactRevision) => this.die(new CompactedError(this.through + 1, compactRevision)),
      failed: (error) => this.die(error),
    });
    store.stream.add(this.raw);
  }

  /** Replays the ring from `from` and subscribes, in one synchronous step. */
  attach(watch: EtcdWatch, from: number): void {
    if (this.dead) {
      watch.fail(this.deathError ?? new DatastoreError('the watch stream failed'));
      return;
    }
    const replay: WatchEvent[] = [];
    for (let i = this.firstIndexAtOrAfter(from); i < this.ring.length; i++) {
      const event = this.ring[i]!.event;
      if (watch.accepts(event)) replay.push(event);
    }
    this.pins.delete(watch);
    this.subscribers.add(watch);
    watch.goLive(this, replay);
  }

  detach(watch: EtcdWatch): void {
    this.subscribers.delete(watch);
    this.pins.delete(watch);
  }

  /** Keeps ring entries from `revision` on while `watch` replays older history from etcd. */
  pin(watch: EtcdWatch, revision: number): void {
    this.pins.set(watch, revision);
  }

  requestProgress(watch: EtcdWatch): void {
    if (this.dead) return;
    this.progressAsked.add(watch);
    if (!this.progressReading) this.readProgressRevision();
  }

  die(error: Error): void {
    if (this.dead) return;
    this.dead = true;
    this.deathError = error;
    this.store.stream.remove(this.raw);
    if (this.confirming) this.store.stream.remove(this.confirming);
    this.confirming = undefined;
    const watches = new Set([...this.subscribers, ...this.pins.keys()]);
    this.subscribers.clear();
    this.pins.clear();
    this.progressWaiting = [];
    this.progressAsked.clear();
    this.ring = [];
    this.ringHead = 0;
    this.store.hubDied(this);
    for (const watch of watches) watch.fail(error);
  }

  private firstIndexAtOrAfter(revision: number): number {
    let lo = this.ringHead;
    let hi = this.ring.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.ring[mid]!.revision < revision) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private onEvents(raw: IEvent[]): void {
    if (this.dead) return;
    const events: WatchEvent[] = [];
    for (const e of raw) {
      const event = this.store.toWatchEvent(e);
      if (!event) continue;
      events.push(event);
      const entry = { revision: event.kv.modRevision, event, size: valueSize(event) };
      this.ring.push(entry);
      this.ringBytes += entry.size;
    }
    const last = num(raw[raw.length - 1]!.kv.mod_revision);
    this.through = Math.max(this.through, last);
    if (events.length > 0) for (const watch of this.subscribers) watch.offer(events);
    this.trim();
    this.checkConfirmed();
    this.resolveProgress();
  }

  private trim(): void {
    const { maxEvents, maxBytes } = this.store.cacheLimits;
    let minPin = Infinity;
    for (const revision of this.pins.values()) minPin = Math.min(minPin, revision);
    while (
      this.ring.length - this.ringHead > 0 &&
      (this.ring.length - this.ringHead > maxEvents || this.ringBytes > maxBytes)
    ) {
      const first = this.ring[this.ringHead]!;
      if (first.revision >= minPin) break;
      // Drop every event of that revision together, so the ring starts at a revision boundary.
      while (this.ringHead < this.ring.length && this.ring[this.ringHead]!.revision === first.revision) {
        this.ringBytes -= this.ring[this.ringHead]!.size;
        this.ringHead++;
      }
      this.ringFrom = first.revision + 1;
    }
    if (this.ringHead > 1024 && this.ringHead * 2 > this.ring.length) {
      this.ring = this.ring.slice(this.ringHead);
      this.ringHead = 0;
    }
  }

  private readProgressRevision(): void {
    const watches = this.progressAsked;
    this.progressAsked = new Set();
    this.progressReading = true;
    this.store.currentRevision().then(
      (revision) => {
        this.progressReading = false;
        if (this.dead) return;
        this.progressWaiting.push({ revision, watches });
        this.progressWaiting.sort((a, b) => a.revision - b.revision);
        this.resolveProgress();
        if (revision > this.through && this.store.namespaced) this.confirm(revision);
        if (this.progressAsked.size > 0) this.readProgressRevision();
      },
      () => {
        // The store is unreachable: report what is certain, which is `through`.
        this.progressReading = false;
        if (this.dead) return;
        for (const watch of watches) watch.progressReady();
        if (this.progressAsked.size > 0) this.readProgressRevision();
      },
    );
  }

  private resolveProgress(): void {
    while (this.progressWaiting.length > 0 && this.progressWaiting[0]!.revision <= this.through) {
      const { watches } = this.progressWaiting.shift()!;
      for (const watch of watches) watch.progressReady();
    }
  }

  /**
   * Namespace mode: proves that the namespace has no event between `through` and `target` that
   * the hub has not received yet, by watching the whole keyspace (where every revision has an
   * event) from `through + 1` until it reaches `target`.
   */
  private confirm(target: number): void {
    this.confirmTarget = Math.max(this.confirmTarget, target);
    if (this.confirming || this.dead) return;
    const upTo = this.confirmTarget;
    let needs = 0;
    const store = this.store;
    const finish = (raw: RawWatcher): void => {
      store.stream.remove(raw);
      if (this.confirming === raw) this.confirming = undefined;
    };
    const fallback = (raw: RawWatcher): void => {
      // Cannot prove more than `through`: answer the waiters with that, which is still true.
      finish(raw);
      for (const waiting of this.progressWaiting) for (const watch of waiting.watches) watch.progressReady();
      this.progressWaiting = [];
    };
    const raw: RawWatcher = new RawWatcher(ZERO_KEY, ZERO_KEY, false, this.through + 1, {
      events: (events) => {
        if (this.confirming !== raw) return;
        let reached = false;
        for (const e of events) {
          const revision = num(e.kv.mod_revision);
          if (revision <= upTo && store.inNamespace(e.kv.key)) needs = Math.max(needs, revision);
          if (revision >= upTo) reached = true;
        }
        if (!reached) return;
        finish(raw);
        this.confirmed = { upTo, needs };
        this.checkConfirmed();
        this.resolveProgress();
        // A later progress request may have raised the target meanwhile.
        if (this.confirmTarget > upTo && !this.dead) this.confirm(this.confirmTarget);
      },
      compacted: () => fallback(raw),
      failed: () => fallback(raw),
    });
    this.confirming = raw;
    store.stream.add(raw);
  }

  private checkConfirmed(): void {
    const confirmed = this.confirmed;
    if (!confirmed || this.through < confirmed.needs) return;
    this.confirmed = undefined;
    if (confirmed.upTo > this.through) {
      this.through = confirmed.upTo;
      // Resume from there after a reconnect: nothing of the namespace lies in between.
      this.raw.nextRevision = Math.max(this.raw.nextRevision, this.through + 1);
    }
  }
}

/** The {@link Watch} handed to callers. */
class EtcdWatch implements Watch {
  private readonly delivery: WatchDelivery;
  /** Progress asked for before the watch went live; forwarded to the hub then. */
  private progressWanted = false;
  /** The hub once live. */
  private hub: Hub | undefined;
  /** The hub while replaying older history from etcd (it holds the ring for us). */
  private pendingHub: Hub | undefined;
  private catchUp: RawWatcher | undefined;

  constructor(
    private readonly store: EtcdDatastore,
    readonly prefix: string,
    /** First revision asked for. */
    readonly start: number,
    callbacks: WatchCallbacks,
  ) {
    this.delivery = new WatchDelivery(
      callbacks,
      () => (this.hub ? Math.max(this.hub.through, 0) : undefined),
      () => this.release(),
    );
  }

  get active(): boolean {
    return this.delivery.active;
  }

  accepts(event: WatchEvent): boolean {
    return event.kv.modRevision >= this.start && event.kv.key.startsWith(this.prefix);
  }

  requestProgress(): void {
    if (!this.active) return;
    if (this.hub) this.hub.requestProgress(this);
    else this.progressWanted = true;
  }

  cancel(): void {
    this.delivery.cancel();
  }

  fail(error: Error): void {
    this.delivery.fail(error);
  }

  /**
   * Replays [start, target] from etcd with a watcher over the whole keyspace, then switches to
   * the hub's ring, which holds everything after `target`.
   */
  beginCatchUp(hub: Hub, target: number): void {
    if (!this.active) return;
    hub.pin(this, target + 1);
    this.hub = undefined;
    const store = this.store;
    const raw: RawWatcher = new RawWatcher(ZERO_KEY, ZERO_KEY, true, this.start, {
      events: (events) => {
        if (!this.active || this.catchUp !== raw) return;
        let reached = false;
        for (const e of events) {
          const revision = num(e.kv.mod_revision);
          if (revision <= target && store.inNamespace(e.kv.key)) {
            const event = store.toWatchEvent(e);
            if (event && this.accepts(event)) this.delivery.push(event);
          }
          if (revision >= target) reached = true;
        }
        if (!reached) return;
        store.stream.remove(raw);
        this.catchUp = undefined;
        hub.attach(this, target + 1);
      },
      compacted: (compactRevision) => this.fail(new CompactedError(this.start, compactRevision)),
      failed: (error) => this.fail(error),
    });
    this.catchUp = raw;
    this.pendingHub = hub;
    store.stream.add(raw);
  }

  /** Called by the hub: from now on, events arrive through {@link offer}. */
  goLive(hub: Hub, replay: WatchEvent[]): void {
    this.hub = hub;
    this.pendingHub = undefined;
    for (const event of replay) this.delivery.push(event);
    if (this.progressWanted) {
      this.progressWanted = false;
      hub.requestProgress(this);
    }
  }

  offer(events: WatchEvent[]): void {
    for (const event of events) if (this.accepts(event)) this.delivery.push(event);
  }

  /** Every event up to the hub's `through` is queued: report it after delivering them. */
  progressReady(): void {
    this.delivery.progress();
  }

  private release(): void {
    this.hub?.detach(this);
    this.pendingHub?.detach(this);
    if (this.catchUp) this.store.stream.remove(this.catchUp);
    this.catchUp = undefined;
    this.store.forget(this);
  }
}

// -----------------------------------------------------------------------------------------------
// The datastore
// -----------------------------------------------------------------------------------------------

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
    if (!options.endpoints || options.endpoints.length === 0) {
      throw new DatastoreError('etcd: at least one endpoint is required');
    }
    const read = (file: string | undefined, pem: string | Buffer | undefined): Buffer | undefined => {
      if (pem !== undefined) return Buffer.isBuffer(pem) ? pem : Buffer.from(pem);
      return file === undefined ? undefined : fs.readFileSync(file);
    };
    const ca = read(options.caFile, options.ca);
    const cert = read(options.certFile, options.cert);
    const key = read(options.keyFile, options.key);
    const endpoints = options.endpoints.map((e) => e.trim().replace(/\/+$/, ''));
    const https = endpoints.filter((e) => e.startsWith('https://')).length;
    const http = endpoints.filter((e) => e.startsWith('http://')).length;
    if (https > 0 && https !== endpoints.length) {
      throw new DatastoreError('etcd: endpoints must be all http:// or all https://');
    }
    if ((cert === undefined) !== (key === undefined)) {
      throw new DatastoreError('etcd: a client certificate needs its key, and a key its certificate');
    }
    const tls = https > 0 || ca !== undefined || cert !== undefined;
    if (tls && http > 0) {
      throw new DatastoreError('etcd: TLS settings were given, but the endpoints are http://');
    }
    const clientOptions: IOptions = {
      hosts: endpoints,
      grpcOptions: {
        // Lists of large objects exceed gRPC's default 4 MiB receive limit.
        'grpc.max_receive_message_length': -1,
        'grpc.max_send_message_length': -1,
        // Notice a dead connection (not just a closed one) under a long-lived watch stream.
        'grpc.keepalive_time_ms': 30_000,
        'grpc.keepalive_timeout_ms': 10_000,
      },
      faultHandling: {
        // No blind retries: a retried write whose first attempt did commit would report a
        // conflict for its own success. Calls retry where that is safe (see `call`).
        global: noRetryPolicy,
        // A short per-host breaker: a dead member is skipped after one failure and tried again
        // after a second. The library's default (three failures, five seconds) kept a restarted
        // member out so long that a quick rolling restart looked like a total outage.
        host: () =>
          circuitBreaker(handleWhen(isRecoverableError), {
            halfOpenAfter: 1000,
            breaker: new ConsecutiveBreaker(1),
          }) as unknown as ReturnType<NonNullable<NonNullable<IOptions['faultHandling']>['host']>>,
      },
    };
    if (tls) {
      // etcd3 (and gRPC) take the CA as the root; without one the system roots are used.
      clientOptions.credentials = {
        rootCertificate: ca as Buffer,
        ...(key ? { privateKey: key } : {}),
        ...(cert ? { certChain: cert } : {}),
      };
    }
    this.client = new Etcd3(clientOptions);
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

  async create(key: string, input: Buffer): Promise<KeyValue> {
    // Our own copy, taken now: the caller may reuse its buffer as soon as we return.
    const value = Buffer.from(input);
    const fullKey = this.fullKey(key);
    const response = await this.txn('create', {
      compare: [{ key: fullKey, target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key: fullKey, value } }],
      failure: [],
    });
    if (!response.succeeded) throw new KeyExistsError(key);
    const revision = num(response.header.revision);
    return { key, value, createRevision: revision, modRevision: revision };
  }

  async update(key: string, input: Buffer, expectedModRevision: number): Promise<KeyValue> {
    const value = Buffer.from(input);
    const fullKey = this.fullKey(key);
    const response = await this.txn('update', {
      compare: [
        { key: fullKey, target: 'Create', result: 'Greater', create_revision: 0 },
        { key: fullKey, target: 'Mod', result: 'Equal', mod_revision: expectedModRevision },
      ],
      success: [{ request_put: { key: fullKey, value, prev_kv: true } }],
      failure: [{ request_range: { key: fullKey } }],
    });
    if (!response.succeeded) throw this.casFailure(key, expectedModRevision, response.responses);
    const prev = response.responses[0]?.response_put?.prev_kv;
    const revision = num(response.header.revision);
    return { key, value, createRevision: prev ? num(prev.create_revision) : revision, modRevision: revision };
  }

  async delete(key: string, expectedModRevision?: number): Promise<KeyValue> {
    const fullKey = this.fullKey(key);
    const compare: ICompare[] = [
      { key: fullKey, target: 'Create', result: 'Greater', create_revision: 0 },
    ];
    if (expectedModRevision !== undefined) {
      compare.push({ key: fullKey, target: 'Mod', result: 'Equal', mod_revision: expectedModRevision });
    }
    const response = await this.txn('delete', {
      compare,
      success: [{ request_delete_range: { key: fullKey, prev_kv: true } }],
      failure: [{ request_range: { key: fullKey } }],
    });
    if (!response.succeeded) throw this.casFailure(key, expectedModRevision, response.responses);
    const prev = response.responses[0]?.response_delete_range?.prev_kvs?.[0];
    if (!prev) throw new KeyNotFoundError(key); // cannot happen: the compare saw the key
    return {
      key,
      value: prev.value ?? Buffer.alloc(0),
      createRevision: num(prev.create_revision),
      modRevision: num(response.header.revision),
    };
  }

  private casFailure(
    key: string,
    expected: number | undefined,
    responses: { response_range?: IRangeResponse }[],
  ): Error {
    const current = responses[0]?.response_range?.kvs?.[0];
    if (!current) return new KeyNotFoundError(key);
    return new ConflictError(key, expected ?? 0, num(current.mod_revision));
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

/** A fault-handling policy that just runs the call once (see the constructor). */
const NEVER_ABORTED = new AbortController().signal;
const noRetryPolicy = {
  execute: async <T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T): Promise<T> =>
    fn({ signal: NEVER_ABORTED }),
  onSuccess: () => ({ dispose: () => undefined }),
  onFailure: () => ({ dispose: () => undefined }),
} as unknown as NonNullable<NonNullable<IOptions['faultHandling']>['global']>;

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
