import type { WriteGuard } from '../datastore/types.js';
import type { DependentsChoice } from './deletion.js';
import type { ApiError } from './errors.js';
import type { KubeObject } from './objects.js';
import type { FieldSelector, LabelSelector } from './selectors.js';
import type { ReadRevision } from './watch-cache/read-plan.js';

/** The subresources written through the object's own update path. */
export type WriteSubresource = 'status' | 'ephemeralcontainers' | 'finalize';

/**
 * The options and results of the ObjectStore (src/apiserver/storage.ts). They know nothing of
 * any kind, so resource definitions, strategy hooks and the verb layer can all name them
 * without depending on the store itself.
 */

export interface Selection {
  labelSelector: LabelSelector;
  fieldSelector: FieldSelector;
}

export interface ListOptions extends Selection {
  limit?: number;
  continueToken?: string;
  /** Exact revision to read (`resourceVersionMatch=Exact`); the same as `read: { kind: 'exact' }`. */
  exactRevision?: number;
  /** Which state to read (resourceVersion and resourceVersionMatch); the latest when absent. */
  read?: ReadRevision;
  /**
   * The caller only serializes the items and never changes them: a list from the watch cache may
   * then hand out the cache's own (shared) objects instead of a parsed copy of each (the HTTP
   * JSON answer; a list of 500 objects is parsed 500 times less).
   */
  sharedItems?: boolean;
}

export interface ListResult {
  items: KubeObject[];
  resourceVersion: string;
  continueToken?: string;
}

export interface WriteOptions {
  dryRun?: boolean;
  /**
   * A condition every datastore write of this call carries (datastore/types.ts, WriteGuard), read
   * at each attempt so a retry carries the latest: the controllers' writes name the controller
   * lease at this server's last renewal, so one delayed past a takeover is refused by the datastore
   * (docs/high-availability.md). Refused: a WriteGuardRefusedError (503).
   */
  writeGuard?: () => WriteGuard | undefined;
  /**
   * Who writes, for metadata.managedFields (src/apiserver/patch/tracking.ts). Without it the
   * stored entries are kept as they are (the store's own bookkeeping writes: finalizers, deletion).
   */
  fieldManager?: FieldManagerOptions;
}

export interface FieldManagerOptions {
  manager: string;
  /** The apiVersion the writer used. */
  apiVersion: string;
  /** The subresource written through (status, scale, ephemeralcontainers), for the entry. */
  subresource?: string;
  /** A server-side apply: the object carries the managedFields the apply computed. */
  applied?: boolean;
  /**
   * The fields a status write's strategic merge patch can change (a FieldSet of
   * src/apiserver/patch/fields-v1.ts), when the patch removes nothing: the heartbeat's short cut.
   */
  patchFields?: object;
}

export interface UpdateOptions extends WriteOptions {
  /** `status`: status only; `ephemeralcontainers`: a pod's spec.ephemeralContainers only; `finalize`: a namespace's spec.finalizers only. */
  subresource?: WriteSubresource;
  /**
   * Mark the object as going away: set metadata.deletionTimestamp and deletionGracePeriodSeconds
   * (it has finalizers, or it is deleted gracefully).
   */
  markDeleted?: { deletionTimestamp: string; gracePeriodSeconds: number };
}

export interface Preconditions {
  uid?: string;
  resourceVersion?: string;
}

export interface DeleteOptions extends WriteOptions, DependentsChoice {
  preconditions?: Preconditions;
  /**
   * For kinds deleted gracefully (pods): 0 removes the object at once; unset uses the object's
   * own grace period. Other kinds ignore it.
   */
  gracePeriodSeconds?: number;
}

/** What a delete did: `removed` when the object is gone now, else it waits (finalizers, grace). */
export interface DeleteResult {
  /** The object as removed, or as it stays marked for deletion. */
  object: KubeObject;
  removed: boolean;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface WatchSink {
  event(type: WatchEventType, obj: KubeObject): void;
  /** Everything up to this resourceVersion has been sent. */
  progress(resourceVersion: string): void;
  error(error: ApiError): void;
}

export interface ObjectWatch {
  requestProgress(): void;
  cancel(): void;
}

/** What a caller's update function may answer: the new object, or "nothing to change". */
/** `storedVersion`: the resourceVersion the copy was read at (the copy itself carries none). */
export type UpdateFn = (current: KubeObject, storedVersion: string) => KubeObject | Promise<KubeObject>;
