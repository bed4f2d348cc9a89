import type { IEvent } from 'etcd3';

import { CompactedError, DatastoreError, type Watch, type WatchCallbacks, type WatchEvent } from '../types.js';
import { WatchDelivery } from '../watch-delivery.js';
import { num, ZERO_KEY } from './encoding.js';
import { RawWatcher, type WatchStream } from './watch-stream.js';

/**
 * The etcd backend's watches (see ../etcd.ts for the backend itself).
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
 * Known limit: etcd attaches prevKv to a watch event by reading the previous revision when it
 * sends the event, so an event sent after that revision was compacted lacks it.
 */

/** What the hub and its watches need from the datastore that owns them (the etcd backend). */
export interface WatchHost {
  /** The one gRPC watch stream every etcd watcher of the datastore travels on. */
  readonly stream: WatchStream;
  /** The datastore's whole key range in etcd (its key prefix, or the whole keyspace). */
  readonly namespaceRange: { key: Buffer; rangeEnd: Buffer };
  /** Bounds of the hub's ring of recent events. */
  readonly cacheLimits: { maxEvents: number; maxBytes: number };
  /** True with a key prefix: then writes outside it leave no trace in the hub. */
  readonly namespaced: boolean;
  inNamespace(key: Buffer): boolean;
  /** An etcd event as a {@link WatchEvent}, or undefined when outside the namespace. */
  toWatchEvent(e: IEvent): WatchEvent | undefined;
  currentRevision(): Promise<number>;
  /** The hub ended: the next watch starts a new one. */
  hubDied(hub: Hub): void;
  /** The watch ended: the datastore no longer needs to end it on close. */
  forget(watch: EtcdWatch): void;
}

function valueSize(event: WatchEvent): number {
  return (
    event.kv.key.length * 2 +
    event.kv.value.length +
    (event.prevKv ? event.prevKv.value.length + event.prevKv.key.length * 2 : 0) +
    100
  );
}

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
export class Hub {
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
    private readonly store: WatchHost,
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
export class EtcdWatch implements Watch {
  private readonly delivery: WatchDelivery;
  /** Progress asked for before the watch went live; forwarded to the hub then. */
  private progressWanted = false;
  /** The hub once live. */
  private hub: Hub | undefined;
  /** The hub while replaying older history from etcd (it holds the ring for us). */
  private pendingHub: Hub | undefined;
  private catchUp: RawWatcher | undefined;

  constructor(
    private readonly store: WatchHost,
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
