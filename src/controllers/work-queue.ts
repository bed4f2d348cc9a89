import type { KubeObject } from '../apiserver/objects.js';
import type { Informer } from '../client/informer.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, type TimerHandle } from './clock.js';

/**
 * A work queue of object keys for level-triggered reconcilers, as client-go's workqueue: a key
 * added many times is processed once; a key is never reconciled twice at the same time (a key
 * added while it runs is run again afterwards); failures come back with exponential back-off.
 */

export interface WorkQueueOptions {
  /** Keys reconciled at the same time, at most. */
  concurrency?: number;
  baseBackoffMs?: number;
  maxBackoffMs?: number;
  /** Times back-offs and delayed adds; the system clock unless a test drives one. */
  clock?: Clock;
}

/** A reconcile may ask to be called again later (e.g. when a pod becomes available by time). */
export type ReconcileResult = void | { requeueAfterMs: number };

export class WorkQueue {
  private readonly pending = new Set<string>();
  private readonly running = new Set<string>();
  private readonly dirtyWhileRunning = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, TimerHandle>();
  private stopped = false;
  private scheduled = false;
  private readonly concurrency: number;
  private readonly baseBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly clock: Clock;

  constructor(
    private readonly name: string,
    private readonly reconcile: (key: string) => Promise<ReconcileResult>,
    private readonly logger: Logger,
    options: WorkQueueOptions = {},
  ) {
    this.concurrency = options.concurrency ?? 4;
    this.baseBackoffMs = options.baseBackoffMs ?? 50;
    this.maxBackoffMs = options.maxBackoffMs ?? 10_000;
    this.clock = options.clock ?? systemClock;
  }

  add(key: string): void {
    if (this.stopped) return;
    if (this.running.has(key)) {
      this.dirtyWhileRunning.add(key);
      return;
    }
    this.pending.add(key);
    this.kick();
  }

  /** Add later, unless an earlier timer for the key is already due sooner. */
  addAfter(key: string, delayMs: number): void {
    if (this.stopped) return;
    if (delayMs <= 0) return this.add(key);
    if (this.timers.has(key)) return;
    const timer = this.clock.setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, delayMs);
    this.timers.set(key, timer);
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers.values()) this.clock.clearTimeout(timer);
    this.timers.clear();
    this.pending.clear();
  }

  /** For tests and shutdown: nothing queued or running. */
  get idle(): boolean {
    return this.pending.size === 0 && this.running.size === 0;
  }

  private kick(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // One turn later, so a burst of informer events for one key becomes one reconcile.
    setImmediate(() => {
      this.scheduled = false;
      this.drain();
    });
  }

  private drain(): void {
    for (const key of [...this.pending]) {
      if (this.stopped || this.running.size >= this.concurrency) return;
      this.pending.delete(key);
      this.running.add(key);
      void this.process(key);
    }
  }

  private async process(key: string): Promise<void> {
    let retryAfter: number | undefined;
    try {
      const result = await this.reconcile(key);
      this.failures.delete(key);
      if (result && result.requeueAfterMs > 0) retryAfter = result.requeueAfterMs;
    } catch (error) {
      const attempts = (this.failures.get(key) ?? 0) + 1;
      this.failures.set(key, attempts);
      retryAfter = Math.min(this.maxBackoffMs, this.baseBackoffMs * 2 ** (attempts - 1));
      const log = attempts >= 5 ? this.logger.warn.bind(this.logger) : this.logger.debug.bind(this.logger);
      log({ err: error, queue: this.name, key, attempts, retryInMs: retryAfter }, 'reconcile failed; retrying');
    } finally {
      this.running.delete(key);
    }
    if (this.dirtyWhileRunning.delete(key)) this.add(key);
    else if (retryAfter !== undefined) this.addAfter(key, retryAfter);
    this.kick();
  }
}

/**
 * A reconcile loop over informers with one work queue of string keys: it takes work only once
 * started (its informers have listed), and `stop` ends it. Subclasses say how a key is reconciled.
 */
export abstract class QueuedController {
  protected readonly queue: WorkQueue;
  protected started = false;

  constructor(name: string, logger: Logger, clock: Clock | undefined) {
    this.queue = new WorkQueue(name, (key) => this.sync(key), logger, clock ? { clock } : {});
  }

  /** Bring the objects that `key` names to what they should be. */
  protected abstract sync(key: string): Promise<ReconcileResult>;

  stop(): void {
    this.started = false;
    this.queue.stop();
  }

  /** For tests: nothing queued or running. */
  get idle(): boolean {
    return this.queue.idle;
  }
}

export type PodPresence = 'absent' | 'terminating' | 'present';

/** How a cache sees a name in one namespace, for `Expectations.satisfied`. */
export function presenceIn(cache: Informer, namespace: string | undefined): (name: string) => PodPresence {
  return (name) => {
    const obj = cache.get(namespace, name);
    return !obj ? 'absent' : obj.metadata.deletionTimestamp ? 'terminating' : 'present';
  };
}

/**
 * What a controller wrote but its informer may not show yet. Until the cache has caught up, a
 * reconcile would count from a stale picture and create or delete twice; client-go calls these
 * expectations. Each one expires, so a lost event delays a reconcile but never stops it.
 */
export class Expectations {
  private readonly byKey = new Map<string, { creates: Set<string>; deletes: Set<string>; until: number }>();

  constructor(
    private readonly ttlMs = 15_000,
    private readonly clock: Clock = systemClock,
  ) {}

  expectCreate(key: string, name: string): void {
    this.entry(key).creates.add(name);
  }

  expectDelete(key: string, name: string): void {
    this.entry(key).deletes.add(name);
  }

  /** A write failed: nothing will be observed for it. */
  forget(key: string, name: string): void {
    const entry = this.byKey.get(key);
    entry?.creates.delete(name);
    entry?.deletes.delete(name);
  }

  /**
   * Whether the cache reflects every write: created names are present, deleted names are gone or
   * terminating. `lookup` returns the cached object state for a name.
   */
  satisfied(key: string, lookup: (name: string) => PodPresence): boolean {
    const entry = this.byKey.get(key);
    if (!entry) return true;
    for (const name of [...entry.creates]) if (lookup(name) !== 'absent') entry.creates.delete(name);
    for (const name of [...entry.deletes]) if (lookup(name) !== 'present') entry.deletes.delete(name);
    if ((entry.creates.size === 0 && entry.deletes.size === 0) || this.clock.now() > entry.until) {
      this.byKey.delete(key);
      return true;
    }
    return false;
  }

  clear(key: string): void {
    this.byKey.delete(key);
  }

  private entry(key: string): { creates: Set<string>; deletes: Set<string>; until: number } {
    let entry = this.byKey.get(key);
    if (!entry) {
      entry = { creates: new Set(), deletes: new Set(), until: 0 };
      this.byKey.set(key, entry);
    }
    entry.until = this.clock.now() + this.ttlMs;
    return entry;
  }
}

/**
 * The start every pod-owning reconcile shares: the owner from its cache, or the result to return
 * instead: the owner is gone (its expectations are dropped), is being deleted (its dependents are
 * the garbage collector's now), or the pods' cache has not caught up with this controller's own
 * writes yet (look again in a second rather than count from a stale picture).
 */
export function ownerToReconcile(
  key: string,
  owners: Informer,
  pods: Informer,
  expectations: Expectations,
): { owner: KubeObject } | { owner?: undefined; result: ReconcileResult } {
  const { namespace, name } = splitKey(key);
  const owner = owners.get(namespace, name);
  if (!owner) {
    expectations.clear(key);
    return { result: undefined };
  }
  if (owner.metadata.deletionTimestamp) return { result: undefined };
  if (!expectations.satisfied(key, presenceIn(pods, namespace))) return { result: { requeueAfterMs: 1000 } };
  return { owner };
}

export function objectKey(obj: KubeObject): string {
  return `${obj.metadata.namespace ?? ''}/${obj.metadata.name ?? ''}`;
}

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

/** The newer of two copies of one object, by resourceVersion (datastore revisions are numbers). */
export function newer(a: KubeObject | undefined, b: KubeObject | undefined): KubeObject | undefined {
  if (!a) return b;
  if (!b) return a;
  return Number(b.metadata.resourceVersion ?? 0) > Number(a.metadata.resourceVersion ?? 0) ? b : a;
}
