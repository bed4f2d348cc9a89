import { randomUUID, randomInt } from 'node:crypto';
import {
  CompactedError,
  ConflictError,
  type Datastore,
  FutureRevisionError,
  KeyExistsError,
  type KeyValue,
  KeyNotFoundError,
  type Watch,
  type WatchEvent,
} from '../datastore/types.js';
import { ApiError, errors } from './errors.js';
import { jsonEqual } from './json.js';
import { MAX_OBJECT_BYTES } from './limits.js';
import { type KubeObject, kubeTime } from './objects.js';
import { apiVersionOf, type ResourceDefinition } from './resources.js';
import {
  type FieldSelector,
  type LabelSelector,
  matchesFields,
  matchesLabels,
  parseFieldSelector,
  parseLabelSelector,
} from './selectors.js';
import { validateObjectMeta } from './validation.js';
import { type DependentsChoice, finalizersForDeletion } from './deletion.js';

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
/** Recently written objects kept parsed (see ObjectStore.recent). */
const RECENT_OBJECTS = 4096;
const NAME_SUFFIX_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

export interface Selection {
  labelSelector: LabelSelector;
  fieldSelector: FieldSelector;
}

/** The field selectors each kind supports, computed once per kind rather than per request. */
const selectableFields = new WeakMap<ResourceDefinition, ReadonlySet<string>>();

/** A request's labelSelector and fieldSelector, parsed against what the kind can select on. */
export function parseSelection(
  def: ResourceDefinition,
  labelSelector: string | null | undefined,
  fieldSelector: string | null | undefined,
): Selection {
  let supported = selectableFields.get(def);
  if (!supported) {
    supported = new Set(['metadata.name', 'metadata.namespace', ...Object.keys(def.fieldLabels)]);
    selectableFields.set(def, supported);
  }
  return {
    labelSelector: parseLabelSelector(labelSelector),
    fieldSelector: parseFieldSelector(fieldSelector, supported, def.kind),
  };
}

export interface ListOptions extends Selection {
  limit?: number;
  continueToken?: string;
  /** Exact revision to read (`resourceVersionMatch=Exact`). */
  exactRevision?: number;
}

export interface ListResult {
  items: KubeObject[];
  resourceVersion: string;
  continueToken?: string;
}

export interface WriteOptions {
  dryRun?: boolean;
}

export interface UpdateOptions extends WriteOptions {
  subresource?: 'status';
  /**
   * Mark the object as going away: set metadata.deletionTimestamp and deletionGracePeriodSeconds
   * (it has finalizers, or it is deleted gracefully).
   */
  markDeleted?: { deletionTimestamp: string; gracePeriodSeconds: number };
}

export interface DeleteOptions extends WriteOptions, DependentsChoice {
  preconditions?: { uid?: string; resourceVersion?: string };
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

/**
 * How a delete proceeds: `remove` now; `pending` leaves an object already going away as it is;
 * `mark` writes a deletionTimestamp (and, when set, new finalizers) and the object stays until
 * its finalizers and grace period are done.
 */
type DeletionPlan =
  | { action: 'remove' }
  | { action: 'pending' }
  | { action: 'mark'; mark: NonNullable<UpdateOptions['markDeleted']>; finalizers?: string[] };

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
export type UpdateFn = (current: KubeObject) => KubeObject | Promise<KubeObject>;

interface ContinueToken {
  rv: number;
  start: string;
}

function encodeContinue(token: ContinueToken): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', ...token })).toString('base64url');
}

/**
 * A continue token, checked as kube-apiserver checks its own: a revision that could exist and a
 * start key inside the listed prefix. A forged one is a 400, never a read elsewhere or a 504.
 */
function decodeContinue(text: string, prefix: string): ContinueToken {
  try {
    const parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<ContinueToken>;
    if (
      typeof parsed.rv === 'number' &&
      Number.isSafeInteger(parsed.rv) &&
      parsed.rv > 0 &&
      typeof parsed.start === 'string' &&
      parsed.start.startsWith(prefix)
    ) {
      return { rv: parsed.rv, start: parsed.start };
    }
  } catch {
    // fall through to the error below
  }
  throw errors.badRequest('invalid continue token: it was not produced by this server for this list');
}

function generateNameSuffix(): string {
  let suffix = '';
  for (let i = 0; i < 5; i++) suffix += NAME_SUFFIX_ALPHABET[randomInt(NAME_SUFFIX_ALPHABET.length)];
  return suffix;
}

/** Everything a client may not change through an update. */
function carryServerFields(next: KubeObject, current: KubeObject, markDeleted: UpdateOptions['markDeleted']): void {
  const meta = next.metadata;
  meta.uid = current.metadata.uid;
  meta.creationTimestamp = current.metadata.creationTimestamp;
  meta.name = current.metadata.name;
  if (current.metadata.namespace !== undefined) meta.namespace = current.metadata.namespace;
  else delete meta.namespace;
  if (markDeleted) {
    meta.deletionTimestamp = markDeleted.deletionTimestamp;
    meta.deletionGracePeriodSeconds = markDeleted.gracePeriodSeconds;
  } else if (current.metadata.deletionTimestamp) {
    meta.deletionTimestamp = current.metadata.deletionTimestamp;
    if (current.metadata.deletionGracePeriodSeconds !== undefined) {
      meta.deletionGracePeriodSeconds = current.metadata.deletionGracePeriodSeconds;
    } else {
      delete meta.deletionGracePeriodSeconds;
    }
  } else {
    delete meta.deletionTimestamp;
    delete meta.deletionGracePeriodSeconds;
  }
  if (current.metadata.generation !== undefined) meta.generation = current.metadata.generation;
  delete meta.resourceVersion;
  delete meta.managedFields;
  delete meta.selfLink;
  delete meta.generateName;
  if (current.metadata.generateName) meta.generateName = current.metadata.generateName;
}

/** Preconditions (DeleteOptions', or a uid sent in a body) against the stored object: a mismatch is a 409. */
export function checkPreconditions(
  def: ResourceDefinition,
  name: string,
  current: KubeObject,
  pre: DeleteOptions['preconditions'],
): void {
  if (pre?.uid && pre.uid !== current.metadata.uid) {
    throw errors.conflict(def, name, `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`);
  }
  if (pre?.resourceVersion && pre.resourceVersion !== current.metadata.resourceVersion) {
    throw errors.conflict(
      def,
      name,
      `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`,
    );
  }
}

function shouldDeleteOnWrite(obj: KubeObject): boolean {
  const meta = obj.metadata;
  return Boolean(meta.deletionTimestamp) && !meta.finalizers?.length && !meta.deletionGracePeriodSeconds;
}

/** Everything but metadata and status: a change there bumps metadata.generation. */
const NOT_SPEC: ReadonlySet<string> = new Set(['metadata', 'status']);

export class ObjectStore {
  constructor(private readonly datastore: Datastore) {}

  keyPrefix(def: ResourceDefinition, namespace?: string): string {
    const base = `${REGISTRY_PREFIX}${def.storagePath}/`;
    return def.namespaced && namespace ? `${base}${namespace}/` : base;
  }

  key(def: ResourceDefinition, namespace: string | undefined, name: string): string {
    return `${this.keyPrefix(def, def.namespaced ? namespace : undefined)}${name}`;
  }

  /**
   * Objects this store just wrote, by key, at their revision: the next read-modify-write of the
   * same object and every watcher of that write use them instead of parsing the value again.
   * Shared, so treated as immutable: only code that does not mutate what it gets reads from here
   * (guaranteedUpdate's `current`, watch delivery). Not used for kinds served through a conversion.
   */
  private readonly recent = new Map<string, { revision: number; obj: KubeObject }>();

  private rememberWritten(def: ResourceDefinition, key: string, obj: KubeObject): void {
    if (def.conversion) return;
    if (this.recent.size >= RECENT_OBJECTS) this.recent.clear();
    this.recent.set(key, { revision: Number(obj.metadata.resourceVersion), obj });
  }

  /** The object as stored at this kv's revision, parsed once and shared (do not mutate). */
  private decodeShared(def: ResourceDefinition, kv: KeyValue): KubeObject {
    if (!def.conversion) {
      const hit = this.recent.get(kv.key);
      if (hit && hit.revision === kv.modRevision) return hit.obj;
    }
    return this.decode(def, kv);
  }

  decode(def: ResourceDefinition, kv: KeyValue): KubeObject {
    const stored = JSON.parse(kv.value.toString('utf8')) as KubeObject;
    stored.metadata.resourceVersion = String(kv.modRevision);
    return def.conversion ? def.conversion.fromStorage(stored) : stored;
  }

  private encode(def: ResourceDefinition, obj: KubeObject): Buffer {
    const stored = def.conversion ? def.conversion.toStorage(obj) : obj;
    const { resourceVersion: _rv, ...metadata } = stored.metadata;
    const encoded = Buffer.from(JSON.stringify({ ...stored, metadata }));
    if (encoded.length > MAX_OBJECT_BYTES) {
      throw new ApiError(
        413,
        'RequestEntityTooLarge',
        `${def.kind} "${obj.metadata.name ?? ''}" is too large to store: ${encoded.length} bytes, the limit is ${MAX_OBJECT_BYTES} bytes (etcd's request limit)`,
      );
    }
    return encoded;
  }

  async get(def: ResourceDefinition, namespace: string | undefined, name: string): Promise<KubeObject> {
    const kv = await this.datastore.get(this.key(def, namespace, name));
    if (!kv) throw errors.notFound(def, name);
    return this.decode(def, kv);
  }

  async list(def: ResourceDefinition, namespace: string | undefined, options: ListOptions): Promise<ListResult> {
    const prefix = this.keyPrefix(def, namespace);
    let revision = options.exactRevision;
    let start: string | undefined;
    if (options.continueToken) {
      const token = decodeContinue(options.continueToken, prefix);
      revision = token.rv;
      start = token.start;
    }
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
          const obj = this.decode(def, kv);
          if (this.matches(def, obj, options)) items.push(obj);
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

  matches(def: ResourceDefinition, obj: KubeObject, selection: Selection): boolean {
    return (
      matchesLabels(selection.labelSelector, obj.metadata.labels) &&
      matchesFields(selection.fieldSelector, (field) => {
        if (field === 'metadata.name') return obj.metadata.name ?? '';
        if (field === 'metadata.namespace') return obj.metadata.namespace ?? '';
        return def.fieldLabels[field]?.(obj) ?? '';
      })
    );
  }

  async create(
    def: ResourceDefinition,
    namespace: string | undefined,
    input: KubeObject,
    options: WriteOptions = {},
  ): Promise<KubeObject> {
    const obj = input;
    const meta = obj.metadata;
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
    this.validate(def, obj);
    if (def.namespaced) await this.requireActiveNamespace(namespace!);
    if (options.dryRun) return obj;
    try {
      const kv = await this.datastore.create(this.key(def, namespace, meta.name!), this.encode(def, obj));
      meta.resourceVersion = String(kv.modRevision);
      return obj;
    } catch (error) {
      if (error instanceof KeyExistsError) throw errors.alreadyExists(def, meta.name!);
      throw error;
    }
  }

  private validate(def: ResourceDefinition, obj: KubeObject, current?: KubeObject): void {
    const causes = [
      ...validateObjectMeta(obj, def.nameRule),
      ...(def.validate?.(obj) ?? []),
      ...(current && def.validateUpdate ? def.validateUpdate(obj, current) : []),
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
   */
  async guaranteedUpdate(
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    update: UpdateFn,
    options: UpdateOptions = {},
  ): Promise<KubeObject> {
    const key = this.key(def, namespace, name);
    for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
      const kv = await this.datastore.get(key);
      if (!kv) throw errors.notFound(def, name);
      const current = this.decodeShared(def, kv);
      // The copy carries no resourceVersion, so one present afterwards was asked for by the client.
      const copy = this.decode(def, kv);
      delete copy.metadata.resourceVersion;
      const proposed = await update(copy);
      const wantedVersion = proposed.metadata.resourceVersion;
      if (wantedVersion !== undefined && wantedVersion !== '' && wantedVersion !== current.metadata.resourceVersion) {
        throw errors.modified(def, name);
      }
      const next = this.prepareForUpdate(def, current, proposed, options);
      // A status write keeps the stored metadata and spec, which were valid when written.
      if (options.subresource === 'status') this.validateStatus(def, next);
      else this.validate(def, next, current);
      const nextValue = this.encode(def, next);
      // Byte-equal is the common no-op; otherwise compare as data, since key order means nothing.
      const unchanged =
        nextValue.equals(kv.value) ||
        (options.subresource === 'status' ? jsonEqual(current.status, next.status) : this.sameContent(current, next));
      if (unchanged || options.dryRun) {
        next.metadata.resourceVersion = current.metadata.resourceVersion;
        return unchanged ? current : next;
      }
      try {
        if (shouldDeleteOnWrite(next)) {
          // The last finalizer is gone from an object that was asked to go away, and no grace
          // period holds it (a pod still being stopped by its node stays until that node is done).
          const deleted = await this.datastore.delete(key, kv.modRevision);
          next.metadata.resourceVersion = String(deleted.modRevision);
          return next;
        }
        const written = await this.datastore.update(key, nextValue, kv.modRevision);
        next.metadata.resourceVersion = String(written.modRevision);
        this.rememberWritten(def, key, next);
        return next;
      } catch (error) {
        if (error instanceof ConflictError) {
          if (wantedVersion) throw errors.modified(def, name);
          continue;
        }
        if (error instanceof KeyNotFoundError) throw errors.notFound(def, name);
        throw error;
      }
    }
    throw errors.conflict(def, name, 'too many concurrent writers; try again');
  }

  private sameContent(current: KubeObject, next: KubeObject): boolean {
    const { resourceVersion: _a, ...currentMeta } = current.metadata;
    const { resourceVersion: _b, ...nextMeta } = next.metadata;
    return jsonEqual(currentMeta, nextMeta) && jsonEqual(current, next, new Set(['metadata']));
  }

  private prepareForUpdate(
    def: ResourceDefinition,
    current: KubeObject,
    proposed: KubeObject,
    options: UpdateOptions,
  ): KubeObject {
    let next: KubeObject;
    if (options.subresource === 'status') {
      // A status write changes status only; metadata and spec stay as stored.
      next = { ...current, metadata: { ...current.metadata } };
      if (proposed.status === undefined) delete next.status;
      else next.status = proposed.status;
    } else {
      next = proposed;
      if (!next.metadata || typeof next.metadata !== 'object') next.metadata = {};
      if (def.subresources.includes('status')) {
        if (current.status === undefined) delete next.status;
        else next.status = current.status;
      }
    }
    next.apiVersion = apiVersionOf(def);
    next.kind = def.kind;
    carryServerFields(next, current, options.markDeleted);
    if (options.subresource !== 'status') def.applyDefaults?.(next);
    if (options.subresource !== 'status' && !jsonEqual(next, current, NOT_SPEC)) {
      next.metadata.generation = (current.metadata.generation ?? 1) + 1;
    }
    return next;
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
      const current = this.decode(def, kv);
      checkPreconditions(def, name, current, options.preconditions);
      const plan = this.deletionPlan(def, current, options);
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
          { markDeleted: mark },
        ).catch((error: unknown) => {
          if (error instanceof ApiError && error.code === 409) return undefined;
          throw error;
        });
        if (!marked) continue;
        // Taking the last finalizer off (a Background DELETE of an object waiting to be orphaned)
        // removes it in the same write.
        return { object: marked, removed: shouldDeleteOnWrite(marked) };
      }
      if (options.dryRun) return { object: current, removed: true };
      try {
        const deleted = await this.datastore.delete(key, kv.modRevision);
        current.metadata.resourceVersion = String(deleted.modRevision);
        return { object: current, removed: true };
      } catch (error) {
        if (error instanceof ConflictError) continue;
        if (error instanceof KeyNotFoundError) throw errors.notFound(def, name);
        throw error;
      }
    }
    throw errors.conflict(def, name, 'too many concurrent writers; try again');
  }

  /**
   * How a delete proceeds, as kube-apiserver's BeforeDelete and updateForGracefulDeletionAndFinalizers
   * decide: graceful kinds (pods) get a grace period; the garbage collection finalizers follow
   * the DELETE's propagation choice (kinds whose dependents Drover collects); an object with
   * finalizers is only marked; anything else is removed now.
   */
  private deletionPlan(def: ResourceDefinition, current: KubeObject, options: DeleteOptions): DeletionPlan {
    const meta = current.metadata;
    const finalizers = def.garbageCollected ? finalizersForDeletion(meta.finalizers, options) : undefined;
    const hasFinalizers = Boolean((finalizers ?? meta.finalizers)?.length);
    const withFinalizers = finalizers ? { finalizers } : {};
    if (meta.deletionTimestamp) {
      const granted = meta.deletionGracePeriodSeconds;
      if (!granted) {
        // Waiting for finalizers only: a DELETE may still change the collection finalizers
        // (Background after Orphan lets the object go), nothing else.
        if (!finalizers) return { action: 'pending' };
        return { action: 'mark', mark: { deletionTimestamp: meta.deletionTimestamp, gracePeriodSeconds: 0 }, ...withFinalizers };
      }
      // Being stopped gracefully: a caller may only shorten the grace period (the agent's final
      // delete, or kubectl delete --force --grace-period=0); finalizers stay as they are.
      const requested = options.gracePeriodSeconds;
      if (!def.deletionGracePeriod || requested === undefined) return { action: 'pending' };
      const period = Math.max(requested, 0);
      if (period >= granted) return { action: 'pending' };
      if (period === 0 && !meta.finalizers?.length) return { action: 'remove' };
      const shifted = Date.parse(meta.deletionTimestamp) + (period - granted) * 1000;
      return { action: 'mark', mark: { deletionTimestamp: kubeTime(shifted), gracePeriodSeconds: period } };
    }
    const period = def.deletionGracePeriod ? def.deletionGracePeriod(current, options.gracePeriodSeconds) : 0;
    if (period > 0) {
      return { action: 'mark', mark: { deletionTimestamp: kubeTime(Date.now() + period * 1000), gracePeriodSeconds: period }, ...withFinalizers };
    }
    if (hasFinalizers) return { action: 'mark', mark: { deletionTimestamp: kubeTime(), gracePeriodSeconds: 0 }, ...withFinalizers };
    return { action: 'remove' };
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
        for (const event of events) this.deliver(def, event, selection, sink);
      },
      onProgress: (revision) => sink.progress(String(revision)),
      onError: (error) => {
        if (error instanceof CompactedError) {
          sink.error(
            errors.expired(`too old resource version: ${startRevision - 1} (${error.compactRevision})`),
          );
        } else {
          sink.error(errors.internal(error.message));
        }
      },
    });
    return handle;
  }

  private deliver(def: ResourceDefinition, event: WatchEvent, selection: Selection, sink: WatchSink): void {
    if (event.type === 'delete') {
      const obj = this.decode(def, event.kv);
      if (this.matches(def, obj, selection)) sink.event('DELETED', obj);
      return;
    }
    const obj = this.decodeShared(def, event.kv);
    if (!selection.labelSelector.length && !selection.fieldSelector.length) {
      // Everything matches: no need to decode the previous value to see what changed.
      sink.event(event.prevKv ? 'MODIFIED' : 'ADDED', obj);
      return;
    }
    const nowMatches = this.matches(def, obj, selection);
    const before = event.prevKv ? this.decode(def, event.prevKv) : undefined;
    const beforeMatched = before !== undefined && this.matches(def, before, selection);
    if (nowMatches) sink.event(beforeMatched ? 'MODIFIED' : 'ADDED', obj);
    else if (beforeMatched) {
      // Leaving the selection: the watcher last saw (and can only match) the old state.
      before!.metadata.resourceVersion = obj.metadata.resourceVersion;
      sink.event('DELETED', before!);
    }
  }

  /** Delete every object of the given namespaced resources in one namespace. */
  async deleteNamespaceContents(defs: readonly ResourceDefinition[], namespace: string): Promise<number> {
    let deleted = 0;
    const seen = new Set<string>();
    for (const def of defs) {
      if (!def.namespaced || seen.has(def.storagePath)) continue;
      seen.add(def.storagePath);
      const { items } = await this.datastore.list(this.keyPrefix(def, namespace));
      for (const kv of items) {
        try {
          await this.datastore.delete(kv.key);
          deleted++;
        } catch (error) {
          if (!(error instanceof KeyNotFoundError)) throw error;
        }
      }
    }
    return deleted;
  }
}
