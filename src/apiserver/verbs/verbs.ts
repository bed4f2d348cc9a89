import type { Logger } from '../../logging/logger.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import type { Admission, Authorizer } from '../auth.js';
import {
  apiVersionOf,
  type CallerWrite,
  type KindContext,
  type LogQuery,
  type PodLogParams,
  type ReadStrategy,
  type ResourceDefinition,
  type TokenIssuer,
  type WriteSubresource,
} from '../definition.js';
import { ApiError, errors } from '../errors.js';
import type { JsonObject, JsonValue } from '../json.js';
import { type KubeObject, kubeTime } from '../objects.js';
import { applyConfiguration, applyPatch, encodeEntries, kindSchema, PatchError, patchMetaForKind, type PatchType, storedEntries, strategicPatchFields } from '../patch/index.js';
import type { ResourceRegistry } from '../resources.js';
import { matchesSelection, parseSelection } from '../selection.js';
import type { RbacSource } from '../rbac/types.js';
import type { ObjectStore } from '../storage.js';
import type { DeleteOptions, DeleteResult, FieldManagerOptions, ListResult, ObjectWatch, Preconditions, WatchSink, WriteOptions } from '../storage-types.js';
import { getReadRevision, listReadRevision } from '../watch-cache/read-plan.js';
import { checkPreconditions } from '../write-rules.js';
import { asKubeObject, type Change, checkTypeMeta, fieldManagerOf, pruneUnknownFields, type RequestContext, type WriteResult } from './context.js';

/**
 * The verb layer: get, list, watch, create, update, patch, delete and deletecollection, and the
 * subresources (status, scale, eviction, log, token), for every kind, run the same way for every caller.
 * The HTTP handler (src/apiserver/handler.ts) calls it after authentication and authorization;
 * LocalClient (src/client/local.ts) calls it for the code inside the server. The generic rules
 * are here and in the ObjectStore; what differs between kinds is in each kind's definition
 * (src/apiserver/kinds/), whose hooks this layer calls, as kube-apiserver's generic registry
 * calls each kind's strategy.
 *
 * Admission (node restriction) judges the writes of a request that carries a user: it runs here,
 * inside each write, because it must see the object about to be stored (for an update or patch,
 * inside the compare-and-swap, beside the stored object it replaces).
 */

export interface VerbsOptions {
  store: ObjectStore;
  registry: ResourceRegistry;
  /** Checks on objects about to be written by authenticated callers (node restriction). */
  admission?: Admission;
  /** The HTTP door's authorizer chain and the RBAC objects it reads, for the kinds' caller checks and the access reviews. */
  authorizer?: Authorizer;
  rbac?: RbacSource;
  /** Signs ServiceAccount tokens (the `token` subresource); without it that subresource is a 404. */
  tokens?: TokenIssuer;
  /** The cluster's `default-runtime-class` (KindContext.defaultRuntimeClass). */
  defaultRuntimeClass?: string;
  /** The cluster's Service network (KindContext.serviceNetwork). */
  serviceNetwork?: ServiceNetwork;
  logger?: Logger;
}

/** A list request: selectors as clients send them, paging, and the revision to read at. */
export interface ListRequest {
  labelSelector?: string | null;
  fieldSelector?: string | null;
  limit?: number;
  continueToken?: string;
  resourceVersion?: string;
  /** `Exact` reads at `resourceVersion`; `NotOlderThan` (or nothing, with a resourceVersion) a state not older than it. */
  resourceVersionMatch?: string;
  /** The caller never changes the items (see the store's ListOptions.sharedItems). */
  sharedItems?: boolean;
}

/** A watch request: selectors, one object by name, and the revision to start after. */
export interface WatchRequest {
  labelSelector?: string | null;
  fieldSelector?: string | null;
  name?: string;
  /** Unset or "0": the current objects first (as ADDED), then every change. */
  resourceVersion?: string;
}

/** What admission is told a write is about. */
interface AdmissionTarget {
  def: ResourceDefinition;
  namespace: string | undefined;
  name?: string;
  subresource?: string;
}

export class ResourceVerbs {
  private readonly store: ObjectStore;
  /** What the kinds' hooks are handed. */
  private readonly kindContext: KindContext;

  constructor(private readonly options: VerbsOptions) {
    this.store = options.store;
    this.kindContext = {
      store: options.store,
      kinds: options.registry,
      ...(options.logger ? { logger: options.logger } : {}),
      ...(options.authorizer ? { authorizer: options.authorizer } : {}),
      ...(options.rbac ? { rbac: options.rbac } : {}),
      ...(options.defaultRuntimeClass ? { defaultRuntimeClass: options.defaultRuntimeClass } : {}),
      ...(options.serviceNetwork ? { serviceNetwork: options.serviceNetwork } : {}),
    };
  }

  // -------------------------------------------------------------------------------------------
  // Reads

  /** `resourceVersion`: unset reads the latest, "0" any recent state, N one not older than N (read-plan.ts). */
  get(_ctx: RequestContext, def: ResourceDefinition, namespace: string | undefined, name: string, resourceVersion?: string): Promise<KubeObject> {
    if (def.reads) return def.reads.get(namespace, name);
    storedKind(def);
    return this.store.get(def, namespace, name, getReadRevision(resourceVersion));
  }

  list(_ctx: RequestContext, def: ResourceDefinition, namespace: string | undefined, request: ListRequest = {}): Promise<ListResult> {
    if (def.reads) return listRead(def, def.reads, namespace, request);
    storedKind(def);
    const read = listReadRevision(request.resourceVersion, request.resourceVersionMatch, Boolean(request.continueToken));
    return this.store.list(def, namespace, {
      ...parseSelection(def, request.labelSelector, request.fieldSelector),
      ...(request.limit ? { limit: request.limit } : {}),
      ...(request.continueToken ? { continueToken: request.continueToken } : {}),
      ...(request.sharedItems ? { sharedItems: true } : {}),
      read,
    });
  }

  /**
   * A watch, in two steps: the request is checked at once (a bad selector throws before the
   * caller sends anything), and the answer starts it, first sending the current objects as ADDED
   * when no resourceVersion is given.
   */
  watch(
    _ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    request: WatchRequest,
  ): (sink: WatchSink) => Promise<ObjectWatch> {
    storedKind(def);
    const selection = parseSelection(def, request.labelSelector, request.fieldSelector);
    if (request.name !== undefined) selection.fieldSelector.push({ field: 'metadata.name', op: 'eq', value: request.name });
    return (sink) => this.store.watch(def, namespace, request.resourceVersion, selection, sink);
  }

  // -------------------------------------------------------------------------------------------
  // Writes of the object (and of its status)

  async create(ctx: RequestContext, def: ResourceDefinition, namespace: string | undefined, obj: KubeObject): Promise<WriteResult> {
    if (def.reads) throw errors.methodNotAllowed();
    checkTypeMeta(def, obj);
    const unknownFields = pruneUnknownFields(def, obj, ctx.fieldValidation);
    if (def.respondToCreate) {
      return { object: await def.respondToCreate(this.kindContext, { user: ctx.user, namespace, object: obj }), unknownFields };
    }
    return { object: await this.createObject(ctx, def, namespace, obj, tracking(ctx, def)), unknownFields };
  }

  private async createObject(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    obj: KubeObject,
    fieldManager: FieldManagerOptions,
  ): Promise<KubeObject> {
    if (def.namespaced) {
      if (!namespace) throw errors.methodNotAllowed();
      const bodyNamespace = obj.metadata.namespace;
      if (bodyNamespace && bodyNamespace !== namespace) {
        throw errors.badRequest('the namespace of the provided object does not match the namespace sent on the request');
      }
    }
    await this.admit(ctx, 'create', { def, namespace }, obj);
    await this.authorizeWrite(ctx, def, { verb: 'create', namespace, object: obj });
    await def.admitCreate?.(this.kindContext, obj, namespace);
    return this.store.create(def, namespace, obj, { ...writeOptions(ctx), fieldManager });
  }

  /** PUT: the whole object, or with subresource `status` only its status. */
  async update(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    obj: KubeObject,
    subresource?: WriteSubresource,
  ): Promise<WriteResult> {
    storedKind(def);
    checkTypeMeta(def, obj);
    const unknownFields = pruneUnknownFields(def, obj, ctx.fieldValidation);
    if (obj.metadata.name !== undefined && obj.metadata.name !== name) {
      throw errors.badRequest(`the name of the object (${String(obj.metadata.name)}) does not match the name on the URL (${name})`);
    }
    if (def.namespaced && obj.metadata.namespace && obj.metadata.namespace !== namespace) {
      throw errors.badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    const uid = obj.metadata.uid;
    const target = { def, namespace, name, ...(subresource ? { subresource } : {}) };
    // Admission and the kind's rules fill the body in from the stored object (a Service's
    // allocated node ports, say). An attempt made again after a lost compare-and-swap starts from
    // the body as sent, not from what the stale attempt filled in.
    const sent = structuredClone(obj);
    let attempt = 0;
    const object = await this.store.guaranteedUpdate(
      def,
      namespace,
      name,
      async (current) => {
        const proposal = attempt++ === 0 ? obj : structuredClone(sent);
        // A uid in the body is a precondition, as in Kubernetes: it names one incarnation.
        checkPreconditions(def, name, current, { uid });
        await this.admit(ctx, 'update', target, proposal, current);
        await this.authorizeWrite(ctx, def, { verb: 'update', namespace, name, object: proposal, oldObject: current });
        if (!subresource) await def.admitUpdate?.(this.kindContext, proposal, current);
        return proposal;
      },
      { ...writeOptions(ctx), fieldManager: tracking(ctx, def, subresource), ...(subresource ? { subresource } : {}) },
    );
    return { object, unknownFields };
  }

  /** PATCH: the patch applied to the stored object (or, with subresource `status`, to its status). */
  async patch(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    patchType: PatchType,
    patch: unknown,
    subresource?: WriteSubresource,
  ): Promise<WriteResult> {
    storedKind(def);
    const admission = ctx.user && this.options.admission?.judges(ctx.user) ? this.options.admission : undefined;
    const callerChecked = ctx.user !== undefined && def.authorizeWrite !== undefined;
    const target = { def, namespace, name, ...(subresource ? { subresource } : {}) };
    let unknownFields: string[] = [];
    const object = await this.store.guaranteedUpdate(
      def,
      namespace,
      name,
      async (current, storedVersion) => {
        const currentUid = current.metadata.uid;
        // A JSON patch may test or replace /metadata/resourceVersion (kubectl's managedFields
        // migration replaces it as a precondition): it sees the stored one, and one it leaves as
        // it was is no precondition (a conflict then retries; one it set stays and is checked).
        if (patchType === 'json') current.metadata.resourceVersion = storedVersion;
        // The patch consumes `current`; admission judges the stored object as it was.
        const stored = admission ? admissionSnapshot(current) : undefined;
        const old = callerChecked ? structuredClone(current) : undefined;
        const before = !subresource && def.admitUpdate ? structuredClone(current) : undefined;
        // `current` is this attempt's private copy: the patch may work in it directly.
        const patched = asKubeObject(applyPatchAsApi(patchType, current, patch, def.kind, true), 'the patched object');
        if (patchType === 'json' && patched.metadata.resourceVersion === storedVersion) delete patched.metadata.resourceVersion;
        checkTypeMeta(def, patched);
        if (patched.metadata.name !== name) {
          throw errors.badRequest(`the name of the object (${String(patched.metadata.name)}) does not match the name on the URL (${name})`);
        }
        if (patched.metadata.uid !== undefined && patched.metadata.uid !== currentUid) {
          throw errors.invalid(def.kind, name, def.group, [{ reason: 'FieldValueInvalid', message: 'field is immutable', field: 'metadata.uid' }]);
        }
        unknownFields = pruneUnknownFields(def, patched, ctx.fieldValidation);
        await this.admit(ctx, 'patch', target, patched, stored);
        await this.authorizeWrite(ctx, def, { verb: 'patch', namespace, name, object: patched, ...(old ? { oldObject: old } : {}) });
        if (before) await def.admitUpdate?.(this.kindContext, patched, before);
        return patched;
      },
      { ...writeOptions(ctx), fieldManager: patchTracking(ctx, def, patchType, patch, subresource), ...(subresource ? { subresource } : {}) },
    );
    return { object, unknownFields };
  }

  /**
   * PATCH with `application/apply-patch+yaml`: server-side apply of `config` by the request's
   * field manager (src/apiserver/patch/apply.ts); an object that does not exist is created from
   * it, as kube-apiserver does (`created`: answer 201). Admission and the kind's checks see the
   * result as for any patch.
   */
  async apply(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    config: KubeObject,
    subresource?: WriteSubresource,
  ): Promise<WriteResult & { created: boolean }> {
    storedKind(def);
    const manager = ctx.fieldManager;
    if (!manager) {
      throw errors.invalid('PatchOptions', '', 'meta.k8s.io', [{ reason: 'FieldValueRequired', message: 'Required value: is required for apply patch', field: 'fieldManager' }]);
    }
    if (subresource === 'ephemeralcontainers') throw errors.badRequest('server-side apply is not supported for pods/ephemeralcontainers; use a patch');
    if (subresource === 'finalize') throw errors.badRequest('server-side apply is not supported for namespaces/finalize; use a PUT');
    if (config.apiVersion !== apiVersionOf(def) || config.kind !== def.kind) {
      const [group, version] = typeof config.apiVersion === 'string' && config.apiVersion.includes('/') ? config.apiVersion.split('/', 2) : ['', config.apiVersion ?? ''];
      throw errors.badRequest(`invalid object type: ${group}/${String(version)}, Kind=${String(config.kind ?? '')}`);
    }
    if (config.metadata.managedFields !== undefined) throw errors.badRequest('metadata.managedFields must be nil');
    if (config.metadata.name !== undefined && config.metadata.name !== name) {
      throw errors.badRequest(`the name of the object (${String(config.metadata.name)}) does not match the name on the URL (${name})`);
    }
    if (def.namespaced && config.metadata.namespace && config.metadata.namespace !== namespace) {
      throw errors.badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    const unknownFields = pruneUnknownFields(def, config, ctx.fieldValidation);
    const fieldManager: FieldManagerOptions = { ...tracking(ctx, def, subresource), applied: true };
    const { resolver, schema } = kindSchema(def);
    const applyTo = (live: KubeObject | undefined): KubeObject => {
      const result = applyAsApi(() =>
        applyConfiguration({
          resolver,
          schema,
          live: live as unknown as JsonObject | undefined,
          config: config as unknown as JsonObject,
          entries: storedEntries(live?.metadata.managedFields),
          who: fieldManager,
          force: ctx.force === true,
          time: kubeTime(),
          ...(!subresource && def.subresources.includes('status') ? { resetFields: ['status'] } : {}),
        }),
      );
      const next = asKubeObject(result.object, 'the applied object');
      const encoded = encodeEntries(result.entries);
      if (encoded) next.metadata.managedFields = encoded;
      else delete next.metadata.managedFields;
      return next;
    };
    const target = { def, namespace, name, ...(subresource ? { subresource } : {}) };
    try {
      const object = await this.store.guaranteedUpdate(
        def,
        namespace,
        name,
        async (current) => {
          const next = applyTo(current);
          checkTypeMeta(def, next);
          await this.admit(ctx, 'patch', target, next, current);
          await this.authorizeWrite(ctx, def, { verb: 'patch', namespace, name, object: next, oldObject: current });
          if (!subresource) await def.admitUpdate?.(this.kindContext, next, current);
          return next;
        },
        { ...writeOptions(ctx), fieldManager, ...(subresource ? { subresource } : {}) },
      );
      return { object, unknownFields, created: false };
    } catch (error) {
      // Only the object missing makes an apply a create (not its namespace, nor a subresource).
      if (!(error instanceof ApiError && error.code === 404 && error.details?.name === name) || subresource) throw error;
    }
    const created = applyTo(undefined);
    created.metadata.name = name;
    delete created.metadata.resourceVersion;
    return { object: await this.createObject(ctx, def, namespace, created, fieldManager), unknownFields, created: true };
  }

  /**
   * DELETE of one object: admission sees the stored object it would remove; built-in names may
   * not go; the kind's own delete hook (namespaces) runs in place of the store's.
   */
  async delete(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    options: Omit<DeleteOptions, 'dryRun'> = {},
  ): Promise<DeleteResult> {
    storedKind(def);
    await this.admitExisting(ctx, 'delete', { def, namespace, name });
    if (def.undeletable?.has(name)) {
      throw errors.forbidden(`${def.plural} "${name}" is forbidden: this ${def.singular} may not be deleted`, def, name);
    }
    return this.deleteObject(def, namespace, name, { ...options, ...writeOptions(ctx) });
  }

  /** DELETE of a collection: every object the selectors pick, but the undeletable ones; one gone meanwhile is skipped. */
  async deleteCollection(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    selectors: Pick<ListRequest, 'labelSelector' | 'fieldSelector'>,
    options: Omit<DeleteOptions, 'dryRun'> = {},
  ): Promise<KubeObject[]> {
    storedKind(def);
    const { items } = await this.store.list(def, namespace, parseSelection(def, selectors.labelSelector, selectors.fieldSelector));
    const deleted: KubeObject[] = [];
    for (const item of items) {
      if (def.undeletable?.has(item.metadata.name ?? '')) continue;
      try {
        deleted.push((await this.deleteObject(def, item.metadata.namespace, item.metadata.name!, { ...options, ...writeOptions(ctx) })).object);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) throw error;
      }
    }
    return deleted;
  }

  private deleteObject(def: ResourceDefinition, namespace: string | undefined, name: string, options: DeleteOptions): Promise<DeleteResult> {
    if (def.delete) return def.delete(this.kindContext, name, options, namespace);
    return this.store.delete(def, namespace, name, options);
  }

  // -------------------------------------------------------------------------------------------
  // Subresources: eviction, scale, log

  /**
   * `<kind>/eviction` (policy/v1 Eviction): the kind's eviction hook may refuse (pods: a
   * disruption budget, 429) or spend something, then the object is deleted, gracefully when the
   * kind says so. Admission sees the stored object, as for a delete.
   */
  async evict(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    options: { preconditions?: Preconditions; gracePeriodSeconds?: number } = {},
  ): Promise<void> {
    const hook = def.eviction;
    if (!hook) throw errors.pathNotFound();
    await this.admitExisting(ctx, 'create', { def, namespace, name, subresource: 'eviction' });
    const obj = await this.store.get(def, namespace, name);
    await hook.beforeEviction(this.kindContext, obj, writeOptions(ctx));
    await this.store.delete(def, namespace, name, {
      ...writeOptions(ctx),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
    });
  }

  /** `<kind>/scale` read: the Scale view of the stored object. */
  async getScale(_ctx: RequestContext, def: ResourceDefinition, namespace: string | undefined, name: string): Promise<KubeObject> {
    const hook = def.scale;
    if (!hook) throw errors.pathNotFound();
    return hook.view(await this.store.get(def, namespace, name));
  }

  /**
   * `<kind>/scale` write: a Scale (PUT) or a patch of the current Scale; only what the kind's
   * scale hook takes from it (spec.replicas) changes the object. A uid or resourceVersion in the
   * Scale is a precondition on the object, as in Kubernetes.
   */
  async updateScale(ctx: RequestContext, def: ResourceDefinition, namespace: string | undefined, name: string, change: Change): Promise<KubeObject> {
    const hook = def.scale;
    if (!hook) throw errors.pathNotFound();
    const updated = await this.store.guaranteedUpdate(
      def,
      namespace,
      name,
      async (current) => {
        let scale: KubeObject;
        if (change.type === 'patch') {
          scale = asKubeObject(applyPatchAsApi(change.patchType, hook.view(current), change.patch, 'Scale', false), 'the patched Scale');
        } else {
          scale = change.object;
          if (scale.kind !== undefined && scale.kind !== '' && scale.kind !== 'Scale') {
            throw errors.badRequest(`expected a Scale, got ${String(scale.kind)}`);
          }
        }
        if (scale.metadata.name !== undefined && scale.metadata.name !== '' && scale.metadata.name !== name) {
          throw errors.badRequest(`the name of the object (${String(scale.metadata.name)}) does not match the name on the URL (${name})`);
        }
        checkPreconditions(def, name, current, { uid: scale.metadata.uid });
        const next = hook.apply(current, scale);
        // A resourceVersion in the Scale (sent, or put there by the patch: the current copy has
        // none) is a precondition on the object.
        const wanted = scale.metadata.resourceVersion;
        if (typeof wanted === 'string' && wanted) next.metadata = { ...next.metadata, resourceVersion: wanted };
        await this.admit(ctx, change.type, { def, namespace, name, subresource: 'scale' }, next);
        return next;
      },
      { ...writeOptions(ctx), fieldManager: { ...tracking(ctx, def, 'scale'), apiVersion: 'autoscaling/v1' } },
    );
    return hook.view(updated);
  }

  /**
   * `<kind>/log`: the query checked alone, then against the stored object (which container). The
   * log itself is streamed by the HTTP layer's hook; it is not an object of the store.
   */
  async podLog(
    _ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    query: LogQuery,
  ): Promise<{ object: KubeObject; params: PodLogParams }> {
    const hook = def.log;
    if (!hook) throw errors.pathNotFound();
    const parsed = hook.parse(query);
    const object = await this.store.get(def, namespace, name);
    return { object, params: hook.resolve(object, parsed) };
  }

  /**
   * `<kind>/token` (ServiceAccounts): a TokenRequest, checked and signed by the kind's token hook
   * with the server's issuer. Nothing is stored; admission sees the account, as for an eviction.
   */
  async createToken(
    ctx: RequestContext,
    def: ResourceDefinition,
    namespace: string,
    name: string,
    request: KubeObject,
  ): Promise<{ object: KubeObject; warnings: string[] }> {
    const hook = def.token;
    if (!hook) throw errors.pathNotFound();
    if (!this.options.tokens) throw new ApiError(404, 'NotFound', 'this server does not issue service account tokens', {});
    // Admission judges the TokenRequest itself (node restriction reads its bound object).
    await this.admit(ctx, 'create', { def, namespace, name, subresource: 'token' }, request);
    return hook.create(this.kindContext, { namespace, name }, request, this.options.tokens);
  }

  // -------------------------------------------------------------------------------------------
  // Admission, and the kinds' own checks of the caller

  /** The kind's checks of who writes (RBAC escalation prevention); only callers with a user are judged. */
  private async authorizeWrite(ctx: RequestContext, def: ResourceDefinition, write: Omit<CallerWrite, 'user'>): Promise<void> {
    if (!def.authorizeWrite || !ctx.user) return;
    await def.authorizeWrite(this.kindContext, { ...write, user: ctx.user });
  }

  /**
   * Deletes and evictions carry no object: admission judges the one they would remove (node
   * restriction lets an agent remove only pods bound to its node). A missing object is left to
   * the verb itself, which answers 404.
   */
  private async admitExisting(ctx: RequestContext, verb: string, target: AdmissionTarget & { name: string }): Promise<void> {
    if (!this.options.admission || !ctx.user) return;
    let current: KubeObject;
    try {
      current = await this.store.get(target.def, target.namespace, target.name);
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return;
      throw error;
    }
    await this.admit(ctx, verb, target, current);
  }

  private async admit(ctx: RequestContext, verb: string, target: AdmissionTarget, obj: KubeObject, oldObject?: KubeObject): Promise<void> {
    const { admission } = this.options;
    if (!admission || !ctx.user) return;
    await admission.admit({
      user: ctx.user,
      verb,
      group: target.def.group,
      resource: target.def.plural,
      object: obj,
      ...(oldObject ? { oldObject } : {}),
      ...(target.subresource ? { subresource: target.subresource } : {}),
      ...(target.namespace ? { namespace: target.namespace } : {}),
      ...(target.name ? { name: target.name } : {}),
    });
  }
}

/** Who a write is recorded as in managedFields. */
function tracking(ctx: RequestContext, def: ResourceDefinition, subresource?: string): FieldManagerOptions {
  return { manager: fieldManagerOf(ctx), apiVersion: apiVersionOf(def), ...(subresource ? { subresource } : {}) };
}

/** As tracking(), with what a status write's strategic merge patch can change (the heartbeat's short cut). */
function patchTracking(ctx: RequestContext, def: ResourceDefinition, patchType: PatchType, patch: unknown, subresource?: string): FieldManagerOptions {
  const who = tracking(ctx, def, subresource);
  if (subresource !== 'status' || patchType !== 'strategic') return who;
  const { resolver, schema } = kindSchema(def);
  const patchFields = strategicPatchFields(resolver, schema, patchMetaForKind(def.kind), patch as JsonValue);
  return patchFields ? { ...who, patchFields } : who;
}

/** A server-side apply's own errors (a list item without its key, say) as API errors. */
function applyAsApi<T>(run: () => T): T {
  try {
    return run();
  } catch (error) {
    if (error instanceof PatchError) throw error.status === 422 ? new ApiError(422, 'Invalid', error.message) : errors.badRequest(error.message);
    throw error;
  }
}

/** Kinds that are never stored (access reviews) take only create: any other verb is a 405. */
function storedKind(def: ResourceDefinition): void {
  if (def.respondToCreate || def.reads) throw errors.methodNotAllowed();
}

/** A list of a kind that is read, not stored: what it answers, narrowed by the selectors; never paged. */
async function listRead(def: ResourceDefinition, reads: ReadStrategy, namespace: string | undefined, request: ListRequest): Promise<ListResult> {
  const selection = parseSelection(def, request.labelSelector, request.fieldSelector);
  const items = (await reads.list(namespace, selection)).filter((obj) => matchesSelection(def, obj, selection));
  return { items, resourceVersion: '' };
}

/** applyPatch, with a patch that does not apply answered as an API error (422, or 400 for a malformed one). */
function applyPatchAsApi(type: PatchType, original: KubeObject, patch: unknown, kind: string, consumeOriginal: boolean): unknown {
  try {
    return applyPatch(type, original as unknown as JsonObject, patch as JsonObject, kind, { consumeOriginal });
  } catch (error) {
    if (error instanceof PatchError) {
      throw error.status === 422 ? new ApiError(422, 'Invalid', error.message) : errors.badRequest(error.message);
    }
    throw error;
  }
}

/**
 * What admission may read of a stored object that a patch is about to consume in place: a copy of
 * all but its status (the bulk of a Node or Pod, which no admission rule judges), shared as is.
 */
function admissionSnapshot(current: KubeObject): KubeObject {
  const { status, ...rest } = current;
  return { ...structuredClone(rest), ...(status !== undefined ? { status } : {}) };
}

/** What every store write of a request carries from its context: dry run, and the caller's write guard (in-process writers only). */
function writeOptions(ctx: RequestContext): WriteOptions {
  return { dryRun: ctx.dryRun === true, ...(ctx.writeGuard ? { writeGuard: ctx.writeGuard } : {}) };
}
