import type { ResourceDefinition } from '../apiserver/definition.js';
import type { ServiceNetwork } from '../node-protocol/service-network.js';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { ResourceRegistry } from '../apiserver/resources.js';
import type { ObjectStore } from '../apiserver/storage.js';
import type { RequestContext } from '../apiserver/verbs/context.js';
import { ResourceVerbs } from '../apiserver/verbs/verbs.js';
import {
  type ApiClient,
  type DeleteOptions,
  type EvictOptions,
  type ListOptions,
  type PatchKind,
  PODS,
  SERVICEACCOUNTS,
  type ResourceRef,
  type WatchHandle,
  type WatchHandler,
} from './types.js';

import type { WriteGuard } from '../datastore/types.js';
/**
 * The API client for code running inside the server: no HTTP, but the same verb layer the HTTP
 * handler calls (src/apiserver/verbs/), so every per-kind rule (eviction and disruption budgets,
 * namespace deletion, defaults, validation, unknown fields) applies to it exactly as to a request.
 *
 * Its calls carry no user, so admission does not judge them: the callers are the server's own
 * controllers and registries, trusted as kube-controller-manager is, and the one admission
 * plug-in (node restriction) judges only node credentials, which in-process callers never hold.
 * Authentication and authorization are likewise the HTTP front door's.
 */
export class LocalClient implements ApiClient {
  private readonly verbs: ResourceVerbs;
  /** Every call's context: no user (not judged by admission), unknown fields dropped silently. */
  private readonly context: RequestContext;

  /** `defaultRuntimeClass`: the cluster's setting, for the pods the server's own code creates. */
  constructor(
    private readonly store: ObjectStore,
    private readonly registry: ResourceRegistry,
    options: { defaultRuntimeClass?: string; serviceNetwork?: ServiceNetwork } = {},
    /** A client made by withWriteGuard shares its maker's verbs. */
    shared?: { verbs: ResourceVerbs; context: RequestContext },
  ) {
    this.verbs = shared?.verbs ?? new ResourceVerbs({ store, registry, ...options });
    this.context = shared?.context ?? { fieldValidation: 'Ignore' };
  }

  /**
   * The same client, with every datastore write it makes guarded by `guard()` as it is at that
   * write (storage-types.ts, WriteOptions.writeGuard): the leader's controllers write through one.
   */
  withWriteGuard(guard: () => WriteGuard | undefined): LocalClient {
    return new LocalClient(this.store, this.registry, {}, { verbs: this.verbs, context: { ...this.context, writeGuard: guard } });
  }

  /** Where an object lives in the datastore (a write guard names it: datastore/types.ts, WriteGuard). */
  storageKey(ref: ResourceRef, namespace: string | undefined, name: string): string {
    return this.store.key(this.def(ref), namespace, name);
  }

  private def(ref: ResourceRef): ResourceDefinition {
    const def = this.registry.lookup(ref.group, ref.version, ref.plural);
    if (!def) throw new ApiError(404, 'NotFound', `the server could not find the requested resource (${ref.group}/${ref.version}/${ref.plural})`, {});
    return def;
  }

  async get(ref: ResourceRef, namespace: string | undefined, name: string): Promise<KubeObject | undefined> {
    try {
      return await this.verbs.get(this.context, this.def(ref), namespace, name);
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return undefined;
      throw error;
    }
  }

  async list(ref: ResourceRef, namespace: string | undefined, options: ListOptions = {}) {
    const result = await this.verbs.list(this.context, this.def(ref), namespace, options);
    return { items: result.items, resourceVersion: result.resourceVersion };
  }

  async create(ref: ResourceRef, namespace: string | undefined, obj: KubeObject): Promise<KubeObject> {
    return (await this.verbs.create(this.context, this.def(ref), namespace, structuredClone(obj))).object;
  }

  async update(ref: ResourceRef, namespace: string | undefined, obj: KubeObject, subresource?: 'status' | 'finalize'): Promise<KubeObject> {
    const copy = structuredClone(obj);
    return (await this.verbs.update(this.context, this.def(ref), namespace, obj.metadata.name!, copy, subresource)).object;
  }

  async patch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    kind: PatchKind,
    patch: unknown,
    subresource?: 'status',
  ): Promise<KubeObject> {
    return (await this.verbs.patch(this.context, this.def(ref), namespace, name, kind, patch, subresource)).object;
  }

  async delete(ref: ResourceRef, namespace: string | undefined, name: string, options: DeleteOptions = {}): Promise<void> {
    await this.verbs.delete(this.context, this.def(ref), namespace, name, {
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
      ...(options.propagationPolicy ? { propagationPolicy: options.propagationPolicy } : {}),
    });
  }

  async evict(namespace: string, name: string, options: EvictOptions = {}): Promise<void> {
    await this.verbs.evict(this.context, this.def(PODS), namespace, name, {
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
    });
  }

  async requestToken(namespace: string, serviceAccount: string, request: KubeObject): Promise<KubeObject> {
    return (await this.verbs.createToken(this.context, this.def(SERVICEACCOUNTS), namespace, serviceAccount, request)).object;
  }

  watch(
    ref: ResourceRef,
    namespace: string | undefined,
    resourceVersion: string,
    options: ListOptions,
    handler: WatchHandler,
  ): WatchHandle {
    let stopped = false;
    let cancel: (() => void) | undefined;
    // Started at once, so an unknown resource or a bad selector throws here, to the caller.
    const start = this.verbs.watch(this.context, this.def(ref), namespace, { ...options, resourceVersion });
    start({
      event: (type, obj) => {
        if (!stopped) handler.onEvent(type, obj);
      },
      progress: () => undefined,
      error: (error) => {
        if (stopped) return;
        stopped = true;
        handler.onClose(error, error.code === 410);
      },
    }).then(
      (handle) => {
        if (stopped) handle.cancel();
        else cancel = () => handle.cancel();
      },
      (error: unknown) => {
        if (stopped) return;
        stopped = true;
        handler.onClose(error instanceof Error ? error : new Error(String(error)), false);
      },
    );
    return {
      stop: () => {
        stopped = true;
        cancel?.();
      },
    };
  }
}
