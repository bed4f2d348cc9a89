import { randomUUID, randomInt } from 'node:crypto';
import {
  CompactedError,
  ConflictError,
  type Datastore,
  FutureRevisionError,
  GuardFailedError,
  KeyExistsError,
  KeyNotFoundError,
  type KeyValue,
  type Watch,
} from '../datastore/types.js';
import { DecryptionError } from '../datastore/encryption.js';
import { type ContinueToken, decodeContinue, encodeContinue } from './continue-token.js';
import { apiVersionOf, type KindStore, type ResourceDefinition } from './definition.js';
import { ApiError, errors } from './errors.js';
import { jsonEqual } from './json.js';
import { type KubeObject, kubeTime } from './objects.js';
import { type KnownObject, ObjectCodec } from './object-codec.js';
import { matchesSelection } from './selection.js';
import type {
  DeleteOptions,
  DeleteResult,
  ListOptions,
  ListResult,
  ObjectWatch,
  Selection,
  UpdateFn,
  UpdateOptions,
  WatchSink,
  WriteOptions,
} from './storage-types.js';
import { validateObjectMeta } from './validation.js';
import { WatchCaches } from './watch-cache/caches.js';
import { planRead, type ReadRevision } from './watch-cache/read-plan.js';
import type { ResourceCache } from './watch-cache/resource-cache.js';
import { deliverWatchEvent } from './watch-events.js';
import { recordCreate } from './patch/tracking.js';
import { checkPreconditions, deletionPlan, prepareForUpdate, sameContent, shouldDeleteOnWrite } from './write-rules.js';
import { WriteGuardRefusedError } from './write-guard.js';

/**
 * The generic object store: Kubernetes object semantics (uid, resourceVersion, generation,
 * status subresource, finalizers, preconditions, selectors, consistent paging, watch) over the
 * datastore's revisioned key-value interface. The resourceVersion of an object is the datastore
 * revision of its last write; it is never stored inside the value.
 */

const REGISTRY_PREFIX = '/registry/';
/**
 * Compare-and-swap retries before giving up with 409. Writes commit in batches, so among N
 * writers racing on one object one wins per batch; the bound must exceed realistic contention.
 */
const MAX_UPDATE_ATTEMPTS = 100;
/**
 * How long a read waits for the watch cache to catch up before it is served from the datastore
 * instead (kube-apiserver waits 3 s for its consistent reads from cache).
 */
const CACHE_WAIT_MS = 3000;
const NAME_SUFFIX_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

export function generateNameSuffix(): string {
  let suffix = '';
  for (let i = 0; i < 5; i++) suffix += NAME_SUFFIX_ALPHABET[randomInt(NAME_SUFFIX_ALPHABET.length)];
  return suffix;
}

/** An object as stored at a revision; `fresh` when just read from the datastore, not a remembered guess. */
interface StoredObject extends KnownObject {
  fresh: boolean;
}

/** A write this store made: the datastore key and the revision it got (a delete's revision for a delete). */
export type WriteListener = (key: string, revision: number) => void;

export class ObjectStore implements KindStore {
  private readonly codec = new ObjectCodec();
  private readonly writeListeners: WriteListener[] = [];
  /** The watch caches of the resources listed so far (one per definition). */
  private readonly caches: WatchCaches;

  constructor(
    readonly datastore: Datastore,
    options: { watchCache?: boolean } = {},
  ) {
    this.caches = new WatchCaches(datastore, this.codec, (def) => this.keyPrefix(def), options.watchCache ?? true);
  }

  /** The watch cache of a resource, when one is serving (for tests and diagnostics). */
  watchCache(def: ResourceDefinition): ResourceCache | undefined {
    return this.caches.existing(def);
  }

  /** End every watch cache (the datastore is about to close; a later read starts them again). */
  stopWatchCaches(): void {
    this.caches.stopAll();
  }

  /**
   * Call `listener` after each write of this store commits, before the writer is answered: for
   * caches fed by a watch, which must not answer from before a write this server acknowledged
   * (the watch delivers it a turn of the event loop later).
   */
  onWrite(listener: WriteListener): void {
    this.writeListeners.push(listener);
  }

  private wrote(key: string, revision: number): void {
    for (const listener of this.writeListeners) listener(key, revision);
  }

  keyPrefix(def: ResourceDefinition, namespace?: string): string {
    const base = `${REGISTRY_PREFIX}${def.storagePath}/`;
    return def.namespaced && namespace ? `${base}${namespace}/` : base;
  }

  key(def: ResourceDefinition, namespace: string | undefined, name: string): string {
    return `${this.keyPrefix(def, def.namespaced ? namespace : undefined)}${name}`;
  }

  /**
   * One object. The latest (`read` absent or `latest`) is read from the datastore, as
   * kube-apiserver reads a get without resourceVersion from etcd; `any` and `notOlderThan` are
   * served from the watch cache when it has (or, within a bounded wait, reaches) that state.
   */
  async get(def: ResourceDefinition, namespace: string | undefined, name: string, read?: ReadRevision): Promise<KubeObject> {
    const key = this.key(def, namespace, name);
    if (read && read.kind !== 'latest' && read.kind !== 'exact') {
      const cache = this.caches.cacheFor(def);
      const plan = planRead(read, cache);
      if (cache && plan.from !== 'store' && (plan.from === 'cache' || (plan.from === 'cache-after' && (await cache.waitFor(plan.revision, CACHE_WAIT_MS))))) {
        const item = cache.get(key);
        if (cache.ready) {
          if (!item) throw errors.notFound(def, name);
          return this.codec.decode(def, { key, value: item.value, modRevision: item.modRevision, createRevision: 0 });
        }
      }
    }
    const kv = await this.datastore.get(key);
    if (!kv) throw errors.notFound(def, name);
    const obj = this.codec.decode(def, kv);
    if (read?.kind === 'notOlderThan' && kv.modRevision < read.revision) {
      const current = await this.datastore.currentRevision();
      if (current < read.revision) throw errors.tooLargeResourceVersion(read.revision, current);
    }
    return obj;
  }

  /**
   * The object as the watch cache holds it now, shared (never to be mutated), or undefined when
   * the cache has no such object or is not serving (it starts one): for checks that can take a
   * recent state and read the datastore when it does not settle the question.
   */
  peekCached(def: ResourceDefinition, namespace: string | undefined, name: string): KubeObject | undefined {
    return this.caches.cacheFor(def)?.get(this.key(def, namespace, name))?.obj;
  }

  /**
   * A list, from the watch cache where that gives what the request asked for (see
   * ./watch-cache/read-plan.ts for the rules), else from the datastore.
   */
  async list(def: ResourceDefinition, namespace: string | undefined, options: ListOptions): Promise<ListResult> {
    const prefix = this.keyPrefix(def, namespace);
    const read: ReadRevision = options.read ?? (options.exactRevision !== undefined ? { kind: 'exact', revision: options.exactRevision } : { kind: 'latest' });
    const token = options.continueToken ? decodeContinue(options.continueToken, prefix) : undefined;
    const cache = this.caches.cacheFor(def);
    const plan = planRead(read, cache, token?.rv);
    if (cache && plan.from !== 'store') {
      const ready =
        plan.from === 'cache' ||
        (plan.from === 'cache-after-progress' ? await cache.waitForProgress(CACHE_WAIT_MS) : await cache.waitFor(plan.revision, CACHE_WAIT_MS));
      if (ready && cache.ready) return this.listFromCache(cache, def, prefix, options, token?.start);
    }
    const result = await this.listFromStore(def, prefix, options, plan.from === 'store' ? plan.revision : undefined, token);
    if (read.kind === 'notOlderThan' && Number(result.resourceVersion) < read.revision) {
      throw errors.tooLargeResourceVersion(read.revision, Number(result.resourceVersion));
    }
    return result;
  }

  private listFromCache(cache: ResourceCache, def: ResourceDefinition, prefix: string, options: ListOptions, after?: string): ListResult {
    const limit = options.limit && options.limit > 0 ? options.limit : 0;
    const revision = cache.revision;
    const items: KubeObject[] = [];
    let lastKey: string | undefined;
    let more = false;
    for (const key of cache.keysFrom(prefix, after)) {
      const item = cache.get(key)!;
      // Selectors judge the shared object: only what matches is copied for the caller (if it needs a copy).
      if (!matchesSelection(def, item.obj, options)) continue;
      if (limit && items.length >= limit) {
        more = true;
        break;
      }
      items.push(options.sharedItems ? item.obj : this.codec.decode(def, { key, value: item.value, modRevision: item.modRevision, createRevision: 0 }));
      lastKey = key;
    }
    const resourceVersion = String(revision);
    return more && lastKey !== undefined
      ? { items, resourceVersion, continueToken: encodeContinue({ rv: revision, start: lastKey }) }
      : { items, resourceVersion };
  }

  private async listFromStore(
    def: ResourceDefinition,
    prefix: string,
    options: ListOptions,
    atRevision: number | undefined,
    token: ContinueToken | undefined,
  ): Promise<ListResult> {
    const revision = token?.rv ?? atRevision;
    let start = token?.start;
    const limit = options.limit && options.limit > 0 ? options.limit : 0;
    const items: KubeObject[] = [];
    let more = false;
    let lastKey: string | undefined;
    let listRevision = revision;
    try {
      // Selectors are applied after reading, so keep reading pages until the page is full.
      for (;;) {
        const page = await this.datastore.list(prefix, {
          ...(limit ? { limit: Math.max(limit - items.length, 100) } : {}),
          ...(start !== undefined ? { continue: start } : {}),
          ...(listRevision !== undefined ? { revision: listRevision } : {}),
        });
        listRevision = page.revision;
        more = page.more;
        for (let i = 0; i < page.items.length; i++) {
          const kv = page.items[i]!;
          lastKey = kv.key;
          const obj = this.codec.decode(def, kv);
          if (matchesSelection(def, obj, options)) items.push(obj);
          if (limit && items.length >= limit) {
            more = more || i < page.items.length - 1;
            break;
          }
        }
        if (!more || (limit && items.length >= limit)) break;
        start = lastKey;
      }
    } catch (error) {
      if (error instanceof CompactedError) {
        throw errors.expired(
          'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.',
        );
      }
      if (error instanceof DecryptionError && revision !== undefined) {
        // History from before a finished key rotation: its key is gone, so that past cannot be read.
        throw errors.expired(
          `${options.continueToken ? 'The provided continue parameter is too old to display a consistent list result' : `too old resource version: ${revision}`}: ` +
            'it reads values encrypted with a key that a finished rotation dropped. Start a new list.',
        );
      }
      if (error instanceof FutureRevisionError && options.continueToken) {
        // This server never handed out a token from the future: it is forged or from another cluster.
        throw errors.badRequest('invalid continue token: it was not produced by this server for this list');
      }
      if (error instanceof FutureRevisionError) {
        throw errors.tooLargeResourceVersion(error.requestedRevision, error.currentRevision);
      }
      throw error;
    }
    const resourceVersion = String(listRevision ?? (await this.datastore.currentRevision()));
    return more && lastKey !== undefined
      ? { items, resourceVersion, continueToken: encodeContinue({ rv: listRevision!, start: lastKey }) }
      : { items, resourceVersion };
  }

  async create(
    def: ResourceDefinition,
    namespace: string | undefined,
    input: KubeObject,
    options: WriteOptions = {},
  ): Promise<KubeObject> {
    const obj = input;
    const meta = obj.metadata;
    const sentManagedFields: unknown = meta.managedFields;
    obj.apiVersion = apiVersionOf(def);
    obj.kind = def.kind;
    if (def.namespaced) meta.namespace = namespace;
    else delete meta.namespace;
    if (!meta.name && typeof meta.generateName === 'string' && meta.generateName) {
      meta.name = meta.generateName + generateNameSuffix();
    }
    meta.uid = randomUUID();
    meta.creationTimestamp = kubeTime();
    meta.generation = 1;
    for (const field of ['resourceVersion', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'managedFields', 'selfLink']) {
      delete meta[field];
    }
    def.prepareForCreate?.(obj);
    def.applyDefaults?.(obj);
    if (options.fieldManager?.applied) meta.managedFields = sentManagedFields as KubeObject['metadata']['managedFields'];
    recordCreate(def, obj, sentManagedFields, options.fieldManager);
    this.validate(def, obj);
    if (def.namespaced) await this.requireActiveNamespace(namespace!);
    if (options.dryRun) return obj;
    try {
      const kv = await this.datastore.create(this.key(def, namespace, meta.name!), this.codec.encode(def, obj), options.writeGuard?.());
      this.wrote(kv.key, kv.modRevision);
      meta.resourceVersion = String(kv.modRevision);
      return obj;
    } catch (error) {
      if (error instanceof KeyExistsError) throw errors.alreadyExists(def, meta.name!);
      throw guardRefusal(error);
    }
  }

  private validate(def: ResourceDefinition, obj: KubeObject, current?: KubeObject, subresource?: 'ephemeralcontainers' | 'finalize'): void {
    const causes = [
      ...validateObjectMeta(obj, def.nameRule),
      ...(def.validate?.(obj) ?? []),
      ...(current && def.validateUpdate ? def.validateUpdate(obj, current, subresource) : []),
    ];
    if (causes.length) throw errors.invalid(def.kind, obj.metadata.name ?? '', def.group, causes);
  }

  private validateStatus(def: ResourceDefinition, obj: KubeObject): void {
    const status = obj.status;
    if (status !== undefined && (typeof status !== 'object' || status === null || Array.isArray(status))) {
      throw errors.invalid(def.kind, obj.metadata.name ?? '', def.group, [
        { reason: 'FieldValueInvalid', message: 'must be an object', field: 'status' },
      ]);
    }
    const causes = def.validateStatus?.(obj) ?? [];
    if (causes.length) throw errors.invalid(def.kind, obj.metadata.name ?? '', def.group, causes);
  }

  private async requireActiveNamespace(namespace: string): Promise<void> {
    const kv = await this.datastore.get(`${REGISTRY_PREFIX}core/namespaces/${namespace}`);
    if (!kv) throw errors.notFound({ group: '', plural: 'namespaces' }, namespace);
    const ns = JSON.parse(kv.value.toString('utf8')) as KubeObject;
    if (ns.metadata.deletionTimestamp || (ns.status as { phase?: string } | undefined)?.phase === 'Terminating') {
      throw errors.forbidden(
        `unable to create new content in namespace ${namespace} because it is being terminated`,
        { group: '', plural: 'namespaces' },
        namespace,
      );
    }
  }

  /**
   * Read-modify-write with compare-and-swap, retried on conflicts with other writers. `update`
   * receives a private copy of the current object without its resourceVersion; if the result has
   * one (a PUT body, a patch that names it), that is a precondition: a mismatch is a 409, not a
   * retry.
   *
   * One round trip in the usual case: the update starts from the object as this server last knew
   * it (its own last write of it, or the watch cache), and writes with the compare-and-swap at
   * once. When that was stale, the conflict carries the stored value (read in the same
   * transaction), and the update is made again from it. A known object is only a guess: nothing
   * that depends on the stored object being current (a no-op answered without writing, a dry
   * run, a resourceVersion precondition that fails) is decided on it without a fresh read.
   */
  async guaranteedUpdate(
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    update: UpdateFn,
    options: UpdateOptions = {},
  ): Promise<KubeObject> {
    const key = this.key(def, namespace, name);
    let stored: StoredObject | undefined = this.lastKnown(def, key);
    for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
      if (!stored) stored = await this.readStored(def, key, name);
      const { obj: current, modRevision, fresh } = stored;
      let prepared: { next: KubeObject; nextValue: Buffer; unchanged: boolean; wantedVersion: string | undefined };
      try {
        prepared = await this.prepareUpdate(def, name, key, stored, update, options);
      } catch (error) {
        // Every refusal (a precondition, admission, validation) is judged on the stored object, not on a guess.
        if (!fresh) {
          stored = undefined;
          continue;
        }
        throw error;
      }
      const { next, nextValue, unchanged, wantedVersion } = prepared;
      if (unchanged || options.dryRun) {
        if (!fresh) {
          // "Nothing to change" and a dry run's answer are only true of the stored object.
          stored = undefined;
          continue;
        }
        next.metadata.resourceVersion = current.metadata.resourceVersion;
        return unchanged ? current : next;
      }
      try {
        if (shouldDeleteOnWrite(def, next)) {
          // The last finalizer is gone from an object that was asked to go away, and no grace
          // period holds it (a pod still being stopped by its node stays until that node is done).
          const deleted = await this.datastore.delete(key, modRevision, options.writeGuard?.());
          this.codec.forget(key);
          this.wrote(key, deleted.modRevision);
          next.metadata.resourceVersion = String(deleted.modRevision);
          return next;
        }
        const written = await this.datastore.update(key, nextValue, modRevision, options.writeGuard?.());
        this.wrote(key, written.modRevision);
        next.metadata.resourceVersion = String(written.modRevision);
        this.codec.remember(def, key, next, nextValue);
        return next;
      } catch (error) {
        if (error instanceof ConflictError) {
          // With a guess, a precondition that matched the guess is judged again on the stored object.
          if (wantedVersion && fresh) throw errors.modified(def, name);
          stored = error.current ? this.storedFrom(def, error.current) : undefined;
          continue;
        }
        if (error instanceof KeyNotFoundError) {
          this.codec.forget(key);
          throw errors.notFound(def, name);
        }
        throw guardRefusal(error);
      }
    }
    throw errors.conflict(def, name, 'too many concurrent writers; try again');
  }

  /** One attempt's object to write, made from `stored` by the caller's update function and the kind's rules. */
  private async prepareUpdate(
    def: ResourceDefinition,
    name: string,
    key: string,
    stored: StoredObject,
    update: UpdateFn,
    options: UpdateOptions,
  ): Promise<{ next: KubeObject; nextValue: Buffer; unchanged: boolean; wantedVersion: string | undefined }> {
    const { obj: current, value, modRevision } = stored;
    // The copy carries no resourceVersion, so one present afterwards was asked for by the client.
    const copy = this.codec.decode(def, { key, value, modRevision, createRevision: 0 });
    delete copy.metadata.resourceVersion;
    const proposed = await update(copy, String(current.metadata.resourceVersion ?? modRevision));
    const wantedVersion = proposed.metadata.resourceVersion;
    if (wantedVersion !== undefined && wantedVersion !== '' && wantedVersion !== current.metadata.resourceVersion) {
      throw errors.modified(def, name);
    }
    // The kind's rules rewrite the proposal's metadata (its resourceVersion first): on a copy, so
    // that an attempt made again after a lost compare-and-swap still carries the caller's
    // precondition (an update function may hand back the same object every time, as a PUT does).
    const next = prepareForUpdate(def, current, { ...proposed, metadata: { ...proposed.metadata } }, options);
    // A status write keeps the stored metadata and spec, which were valid when written.
    if (options.subresource === 'status') this.validateStatus(def, next);
    else this.validate(def, next, current, options.subresource);
    const nextValue = this.codec.encode(def, next);
    // Byte-equal is the common no-op; otherwise compare as data, since key order means nothing.
    const unchanged =
      nextValue.equals(value) ||
      (options.subresource === 'status' ? jsonEqual(current.status, next.status) : sameContent(current, next));
    return { next, nextValue, unchanged, wantedVersion };
  }

  /** What this server last knew of a key's object (possibly stale): the watch cache's, else its own last write. */
  private lastKnown(def: ResourceDefinition, key: string): StoredObject | undefined {
    // The newer of the two: the cache may not have this server's own last write yet.
    const cached = this.caches.existing(def)?.get(key);
    const written = this.codec.lastKnown(def, key);
    const known = cached && written ? (cached.modRevision >= written.modRevision ? cached : written) : (cached ?? written);
    return known && { ...known, fresh: false };
  }

  private async readStored(def: ResourceDefinition, key: string, name: string): Promise<StoredObject> {
    const kv = await this.datastore.get(key);
    if (!kv) throw errors.notFound(def, name);
    return this.storedFrom(def, kv);
  }

  private storedFrom(def: ResourceDefinition, kv: KeyValue): StoredObject {
    return { obj: this.codec.decodeShared(def, kv), value: kv.value, modRevision: kv.modRevision, fresh: true };
  }

  async delete(
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    options: DeleteOptions = {},
  ): Promise<DeleteResult> {
    const key = this.key(def, namespace, name);
    for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
      const kv = await this.datastore.get(key);
      if (!kv) throw errors.notFound(def, name);
      const current = this.codec.decode(def, kv);
      checkPreconditions(def, name, current, options.preconditions);
      const plan = deletionPlan(def, current, options);
      if (plan.action === 'pending') return { object: current, removed: false };
      if (plan.action === 'mark') {
        if (options.dryRun) return { object: current, removed: false };
        const { mark, finalizers } = plan;
        const marked = await this.guaranteedUpdate(
          def,
          namespace,
          name,
          (obj) => {
            // Written against the version the plan was made for (a resourceVersion on the result
            // is a precondition): a change in between is a 409, and the plan is made again.
            obj.metadata.resourceVersion = current.metadata.resourceVersion;
            if (finalizers?.length) obj.metadata.finalizers = finalizers;
            else if (finalizers) delete obj.metadata.finalizers;
            return obj;
          },
          { markDeleted: mark, ...(options.writeGuard ? { writeGuard: options.writeGuard } : {}) },
        ).catch((error: unknown) => {
          if (error instanceof ApiError && error.code === 409) return undefined;
          throw error;
        });
        if (!marked) continue;
        // Taking the last finalizer off (a Background DELETE of an object waiting to be orphaned)
        // removes it in the same write.
        return { object: marked, removed: shouldDeleteOnWrite(def, marked) };
      }
      if (options.dryRun) return { object: current, removed: true };
      try {
        const deleted = await this.datastore.delete(key, kv.modRevision, options.writeGuard?.());
        this.wrote(key, deleted.modRevision);
        current.metadata.resourceVersion = String(deleted.modRevision);
        return { object: current, removed: true };
      } catch (error) {
        if (error instanceof ConflictError) continue;
        if (error instanceof KeyNotFoundError) throw errors.notFound(def, name);
        throw guardRefusal(error);
      }
    }
    throw errors.conflict(def, name, 'too many concurrent writers; try again');
  }

  /**
   * Watch objects of one resource. `fromResourceVersion` undefined or "0" first sends the current
   * objects as ADDED (what clients get from a plain `?watch=1`), then changes after them.
   */
  async watch(
    def: ResourceDefinition,
    namespace: string | undefined,
    fromResourceVersion: string | undefined,
    selection: Selection,
    sink: WatchSink,
  ): Promise<ObjectWatch> {
    const prefix = this.keyPrefix(def, namespace);
    let startRevision: number;
    if (fromResourceVersion === undefined || fromResourceVersion === '' || fromResourceVersion === '0') {
      const initial = await this.list(def, namespace, selection);
      for (const obj of initial.items) sink.event('ADDED', obj);
      startRevision = Number(initial.resourceVersion) + 1;
    } else {
      const parsed = Number(fromResourceVersion);
      if (!Number.isSafeInteger(parsed) || parsed < 0) {
        throw errors.badRequest(`invalid resource version: ${fromResourceVersion}`);
      }
      startRevision = parsed + 1;
    }
    const handle: Watch = this.datastore.watch(prefix, startRevision, {
      onEvents: (events) => {
        for (const event of events) deliverWatchEvent(this.codec, def, event, selection, sink);
      },
      onProgress: (revision) => sink.progress(String(revision)),
      onError: (error) => {
        if (error instanceof CompactedError) {
          sink.error(
            errors.expired(`too old resource version: ${startRevision - 1} (${error.compactRevision})`),
          );
        } else if (error instanceof DecryptionError) {
          // A value from before a finished key rotation (or a key this server does not hold yet):
          // the client re-lists, and the current values are under a key every server holds.
          sink.error(
            errors.expired(`too old resource version: ${startRevision - 1}: it reads values encrypted with a key this server does not hold (a key rotation finished since)`),
          );
        } else {
          sink.error(errors.internal(error.message));
        }
      },
    });
    return handle;
  }

  /** Delete every object of the given namespaced resources in one namespace, each delete under `options.writeGuard`. */
  async deleteNamespaceContents(defs: readonly ResourceDefinition[], namespace: string, options: Pick<WriteOptions, 'writeGuard'> = {}): Promise<number> {
    let deleted = 0;
    const seen = new Set<string>();
    for (const def of defs) {
      if (!def.namespaced || def.reads || seen.has(def.storagePath)) continue;
      seen.add(def.storagePath);
      const { items } = await this.datastore.list(this.keyPrefix(def, namespace));
      for (const kv of items) {
        try {
          this.wrote(kv.key, (await this.datastore.delete(kv.key, undefined, options.writeGuard?.())).modRevision);
          deleted++;
        } catch (error) {
          if (!(error instanceof KeyNotFoundError)) throw guardRefusal(error);
        }
      }
    }
    return deleted;
  }
}

/** A write refused by its guard (write-guard.ts) as the API error its caller expects; any other error as it is. */
function guardRefusal(error: unknown): unknown {
  return error instanceof GuardFailedError ? new WriteGuardRefusedError(error) : error;
}
