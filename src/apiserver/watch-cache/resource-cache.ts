import type { Datastore, Watch, WatchEvent } from '../../datastore/types.js';
import type { ResourceDefinition } from '../definition.js';
import type { KnownObject, ObjectCodec } from '../object-codec.js';
import { RevisionWaiters } from './revision-waiters.js';

/**
 * The watch cache of one resource (one definition: one storage prefix, one served version): every
 * object under the prefix, parsed (and, for Secrets, decrypted) once, kept current by one
 * datastore watch, as kube-apiserver's cacher. Reads (see ./read-plan.ts) take it as it is, or
 * after it has caught up with a revision; an update starts from its object (ObjectStore).
 *
 * Life: `start` lists the prefix and watches from the list's revision; the cache is `ready` from
 * then until its watch ends (compaction while it lagged, the datastore closed or unreachable for
 * longer than the watch survives), when it is `failed` and the owner makes a new one on the next
 * read. It never serves while not ready: reads go to the store meanwhile.
 */

const STARTING = 'starting';
const READY = 'ready';
const FAILED = 'failed';

export class ResourceCache {
  private state: typeof STARTING | typeof READY | typeof FAILED = STARTING;
  private readonly items = new Map<string, KnownObject>();
  /** Keys in order, rebuilt lazily after a key came or went (updates keep the order). */
  private sortedKeys: string[] | undefined;
  private watch: Watch | undefined;
  /** Every event up to here is applied. */
  private appliedThrough = 0;
  /** Revision of the last event applied (a change of this resource). */
  private changedAt = 0;
  private readonly waiters = new RevisionWaiters();
  /** Readers waiting for the next progress report, and those covered by the one asked for. */
  private progressQueued: Array<(ok: boolean) => void> = [];
  private progressAsked: Array<(ok: boolean) => void> | undefined;

  constructor(
    readonly def: ResourceDefinition,
    readonly prefix: string,
    private readonly datastore: Datastore,
    private readonly codec: ObjectCodec,
    private readonly onFailed: (cache: ResourceCache, error: Error) => void,
  ) {}

  get ready(): boolean {
    return this.state === READY;
  }

  get failed(): boolean {
    return this.state === FAILED;
  }

  get revision(): number {
    return this.appliedThrough;
  }

  get lastChange(): number {
    return this.changedAt;
  }

  get size(): number {
    return this.items.size;
  }

  /** Fill from one list of the store, then follow it from that list's revision on. */
  async start(): Promise<void> {
    try {
      let after: string | undefined;
      let revision: number | undefined;
      // Pages at one revision: a consistent snapshot without one huge response.
      for (;;) {
        const page = await this.datastore.list(this.prefix, {
          limit: 1000,
          ...(after !== undefined ? { continue: after } : {}),
          ...(revision !== undefined ? { revision } : {}),
        });
        revision = page.revision;
        for (const kv of page.items) this.items.set(kv.key, { modRevision: kv.modRevision, obj: this.codec.decodeShared(this.def, kv), value: kv.value });
        if (!page.more || page.items.length === 0) break;
        after = page.items[page.items.length - 1]!.key;
      }
      if (this.failed) return; // stopped meanwhile
      this.appliedThrough = revision;
      // What changed before the fill (a delete leaves no item behind) is unknown: count the fill
      // itself as the last change, so no continue token from before it is served from here.
      this.changedAt = revision;
      this.watch = this.datastore.watch(this.prefix, revision + 1, {
        onEvents: (events) => this.apply(events),
        onProgress: (through) => this.progressed(through),
        onError: (error) => this.fail(error),
      });
      if (this.failed) {
        this.watch.cancel();
        return;
      }
      this.state = READY;
    } catch (error) {
      this.fail(error instanceof Error ? error : new Error(String(error)));
    }
  }

  stop(): void {
    this.fail(new Error('the watch cache was stopped'));
  }

  /** The object at `key`, as cached (shared: never to be mutated). */
  get(key: string): KnownObject | undefined {
    return this.state === READY ? this.items.get(key) : undefined;
  }

  /** Keys under `prefix` in key order, after `after` when given. */
  keysFrom(prefix: string, after?: string): string[] {
    const keys = (this.sortedKeys ??= [...this.items.keys()].sort(compareKeys));
    const start = after !== undefined && after >= prefix ? after : undefined;
    let lo = 0;
    let hi = keys.length;
    // First key >= prefix (or > after).
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const k = keys[mid]!;
      const before = start !== undefined ? compareKeys(k, start) <= 0 : compareKeys(k, prefix) < 0;
      if (before) lo = mid + 1;
      else hi = mid;
    }
    const out: string[] = [];
    for (let i = lo; i < keys.length && keys[i]!.startsWith(prefix); i++) out.push(keys[i]!);
    return out;
  }

  /** Resolves true once every event up to `revision` is applied, false after `timeoutMs` or if the cache fails. */
  waitFor(revision: number, timeoutMs: number): Promise<boolean> {
    if (this.state === FAILED) return Promise.resolve(false);
    if (this.appliedThrough >= revision) return Promise.resolve(true);
    return this.waiters.wait(revision, timeoutMs);
  }

  /**
   * Resolves true once the cache holds every write acknowledged before this call, on any server:
   * the datastore is asked for a progress report, which reads the store's revision after being
   * asked, and reports it once every event up to it has been delivered here. Readers arriving
   * while a report is on its way wait for the next one (the one in flight may have read the
   * revision before their write was acknowledged). False after `timeoutMs` or if the cache fails.
   */
  waitForProgress(timeoutMs: number): Promise<boolean> {
    if (this.state !== READY) return Promise.resolve(false);
    return new Promise((resolve) => {
      let settled = false;
      const timer = setTimeout(() => finish(false), timeoutMs);
      const finish = (ok: boolean): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(ok);
      };
      this.progressQueued.push(finish);
      if (!this.progressAsked) this.askProgress();
    });
  }

  private askProgress(): void {
    this.progressAsked = this.progressQueued;
    this.progressQueued = [];
    this.watch?.requestProgress();
  }

  private progressed(through: number): void {
    if (through > this.appliedThrough) this.appliedThrough = through;
    this.waiters.reached(this.appliedThrough);
    const covered = this.progressAsked;
    this.progressAsked = undefined;
    if (covered) for (const finish of covered) finish(true);
    if (this.progressQueued.length > 0) this.askProgress();
  }

  private apply(events: WatchEvent[]): void {
    for (const event of events) {
      const { key, modRevision } = event.kv;
      if (event.type === 'delete') {
        if (this.items.delete(key)) this.sortedKeys = undefined;
      } else {
        const existed = this.items.has(key);
        this.items.set(key, { modRevision, obj: this.codec.decodeShared(this.def, event.kv), value: event.kv.value });
        if (!existed) this.sortedKeys = undefined;
      }
      if (modRevision > this.appliedThrough) this.appliedThrough = modRevision;
      if (modRevision > this.changedAt) this.changedAt = modRevision;
    }
    this.waiters.reached(this.appliedThrough);
  }

  private fail(error: Error): void {
    if (this.state === FAILED) return;
    this.state = FAILED;
    this.watch?.cancel();
    this.items.clear();
    this.sortedKeys = undefined;
    this.waiters.failAll();
    for (const finish of [...(this.progressAsked ?? []), ...this.progressQueued]) finish(false);
    this.progressAsked = undefined;
    this.progressQueued = [];
    this.onFailed(this, error);
  }
}

/** Datastore key order: SQLite and etcd both order keys by their UTF-8 bytes, which is code point order. */
export function compareKeys(a: string, b: string): number {
  // JavaScript compares UTF-16 code units, which orders like code points except for characters
  // beyond U+FFFF against U+E000-U+FFFF; object names are DNS names (ASCII), so it is exact here.
  return a < b ? -1 : a > b ? 1 : 0;
}
