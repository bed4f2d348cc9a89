/**
 * The datastore seam: one narrow, revisioned key-value interface in the spirit of kine's
 * backend. Everything above it (the API server, controllers) sees only this, so SQLite and etcd
 * are interchangeable. The semantics follow etcd's, because etcd is the stricter of the two:
 *
 * - every successful write (create, update, delete) gets the next value of one global,
 *   monotonically increasing revision, and an acknowledged revision is never reused (for SQLite
 *   this holds across process crashes; see docs/datastore.md for power loss);
 * - each key carries the revision that created it and the revision of its last modification;
 * - history older than the compacted revision is gone: reading or watching from it fails with
 *   {@link CompactedError}, which the API server turns into `410 Gone`.
 */

export interface KeyValue {
  key: string;
  value: Buffer;
  /** Revision of the write that created this key (since it last did not exist). */
  createRevision: number;
  /** Revision of the last write to this key; the Kubernetes resourceVersion of the object. */
  modRevision: number;
}

export interface ListOptions {
  /** At most this many items; 0 or absent means no limit. */
  limit?: number;
  /** Start strictly after this key (the last key of the previous page). */
  continue?: string;
  /** Read the state as of this revision instead of the latest (for consistent pages). */
  revision?: number;
}

export interface ListResult {
  items: KeyValue[];
  /** The revision the list reflects: the store's revision at read time, or the one asked for. */
  revision: number;
  /** True when more keys match beyond the returned page. */
  more: boolean;
}

export type WatchEventType = 'put' | 'delete';

export interface WatchEvent {
  type: WatchEventType;
  /**
   * For a put, the new value. For a delete, the value the key had just before it was deleted,
   * with `modRevision` set to the revision of the delete itself, so a consumer can report the
   * deleted object at the revision it disappeared.
   */
  kv: KeyValue;
  /** The value before this event, when the key existed (absent for a create). */
  prevKv?: KeyValue;
}

export interface WatchCallbacks {
  /** Events in revision order, each exactly once, starting at the requested revision. */
  onEvents(events: WatchEvent[]): void;
  /**
   * Every event for this watch up to `revision` has been delivered. Sent when asked for with
   * {@link Watch.requestProgress}; used for Kubernetes watch bookmarks.
   */
  onProgress?(revision: number): void;
  /** The watch ended abnormally (for example, compacted while it lagged). No further calls. */
  onError(error: Error): void;
}

export interface Watch {
  /** Ask for an `onProgress` notification with the latest revision fully delivered. */
  requestProgress(): void;
  cancel(): void;
}

/**
 * A condition on another key, checked in the same transaction as a write: the write happens only
 * while `key` is still at `modRevision` (a missing key never is). The controllers' writes carry the
 * controller lease's key and its revision at this server's last renewal, so a write issued in a
 * term and delayed past a takeover (the takeover rewrote the lease) is refused by the datastore
 * itself (docs/high-availability.md, "What a new leader may not do").
 */
export interface WriteGuard {
  key: string;
  modRevision: number;
}

export interface Datastore {
  /** Human-readable name of the backend, for logs and /readyz. */
  readonly name: string;
  /** The latest revision of the whole store. */
  currentRevision(): Promise<number>;
  /** The revision up to which history has been compacted (0 when never). */
  compactRevision(): Promise<number>;
  get(key: string): Promise<KeyValue | undefined>;
  /** Keys starting with `prefix`, in key order. */
  list(prefix: string, options?: ListOptions): Promise<ListResult>;
  /**
   * Create a key; {@link KeyExistsError} when it already exists. Every write takes an optional
   * `guard`: {@link GuardFailedError} when it does not hold (checked before the write's own
   * condition, and reported first), and nothing is written.
   */
  create(key: string, value: Buffer, guard?: WriteGuard): Promise<KeyValue>;
  /**
   * Compare-and-swap: write only if the key's modRevision is `expectedModRevision`.
   * {@link ConflictError} when it is not (carrying the value it found, so a retry needs no
   * read), {@link KeyNotFoundError} when the key is gone.
   */
  update(key: string, value: Buffer, expectedModRevision: number, guard?: WriteGuard): Promise<KeyValue>;
  /**
   * Delete a key, optionally only at `expectedModRevision`. Returns the deleted value with the
   * delete's revision as modRevision.
   */
  delete(key: string, expectedModRevision?: number, guard?: WriteGuard): Promise<KeyValue>;
  /** Events for keys under `prefix` from `fromRevision` (inclusive) on. */
  watch(prefix: string, fromRevision: number, callbacks: WatchCallbacks): Watch;
  /** Discard history at and below `revision`; the latest value of every live key is kept. */
  compact(revision: number): Promise<void>;
  close(): Promise<void>;
}

/** Base class so callers can tell datastore failures from programming errors. */
export class DatastoreError extends Error {
  override name = 'DatastoreError';
}

export class KeyExistsError extends DatastoreError {
  override name = 'KeyExistsError';
  constructor(readonly key: string) {
    super(`key ${key} already exists`);
  }
}

export class KeyNotFoundError extends DatastoreError {
  override name = 'KeyNotFoundError';
  constructor(readonly key: string) {
    super(`key ${key} not found`);
  }
}

export class ConflictError extends DatastoreError {
  override name = 'ConflictError';
  constructor(
    readonly key: string,
    readonly expectedModRevision: number,
    readonly actualModRevision: number,
    /**
     * The key's value as the failed compare found it, read in the same transaction: a writer
     * retrying its compare-and-swap starts from it without another read (both backends set it).
     */
    readonly current?: KeyValue,
  ) {
    super(
      `key ${key} was modified concurrently: expected revision ${expectedModRevision}, found ${actualModRevision}`,
    );
  }
}

/** A write's {@link WriteGuard} did not hold: the guard key was changed (or removed) since. */
export class GuardFailedError extends DatastoreError {
  override name = 'GuardFailedError';
  constructor(
    readonly key: string,
    readonly guard: WriteGuard,
    /** The guard key's modRevision as the write found it (0: missing). */
    readonly actualModRevision: number,
  ) {
    super(`the write of ${key} was refused: ${guard.key} is at revision ${actualModRevision || '(missing)'}, not ${guard.modRevision}`);
  }
}

export class CompactedError extends DatastoreError {
  override name = 'CompactedError';
  constructor(
    readonly requestedRevision: number,
    readonly compactRevision: number,
  ) {
    super(
      `revision ${requestedRevision} is too old: history was compacted up to revision ${compactRevision}`,
    );
  }
}

/** A revision later than anything the store has written. */
export class FutureRevisionError extends DatastoreError {
  override name = 'FutureRevisionError';
  constructor(
    readonly requestedRevision: number,
    readonly currentRevision: number,
  ) {
    super(`revision ${requestedRevision} is newer than the current revision ${currentRevision}`);
  }
}
