import { ApiError } from '../apiserver/errors.js';
import type { JsonObject } from '../apiserver/json.js';
import type { KubeObject } from '../apiserver/objects.js';
import { applyPatch } from '../apiserver/patch/index.js';
import type { ResourceDefinition, ResourceRegistry } from '../apiserver/resources.js';
import { type ObjectStore, parseSelection, type Selection } from '../apiserver/storage.js';
import type { ApiClient, DeleteOptions, ListOptions, PatchKind, ResourceRef, WatchHandle, WatchHandler } from './types.js';

/** The API client for code running inside the server: straight to the object store, no HTTP. */
export class LocalClient implements ApiClient {
  constructor(
    private readonly store: ObjectStore,
    private readonly registry: ResourceRegistry,
  ) {}

  private def(ref: ResourceRef): ResourceDefinition {
    const def = this.registry.lookup(ref.group, ref.version, ref.plural);
    if (!def) throw new ApiError(404, 'NotFound', `the server could not find the requested resource (${ref.group}/${ref.version}/${ref.plural})`, {});
    return def;
  }

  private selection(def: ResourceDefinition, options: ListOptions = {}): Selection {
    return parseSelection(def, options.labelSelector, options.fieldSelector);
  }

  async get(ref: ResourceRef, namespace: string | undefined, name: string): Promise<KubeObject | undefined> {
    try {
      return await this.store.get(this.def(ref), namespace, name);
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return undefined;
      throw error;
    }
  }

  async list(ref: ResourceRef, namespace: string | undefined, options?: ListOptions) {
    const def = this.def(ref);
    const result = await this.store.list(def, namespace, this.selection(def, options));
    return { items: result.items, resourceVersion: result.resourceVersion };
  }

  create(ref: ResourceRef, namespace: string | undefined, obj: KubeObject): Promise<KubeObject> {
    return this.store.create(this.def(ref), namespace, structuredClone(obj));
  }

  update(ref: ResourceRef, namespace: string | undefined, obj: KubeObject, subresource?: 'status'): Promise<KubeObject> {
    const copy = structuredClone(obj);
    return this.store.guaranteedUpdate(this.def(ref), namespace, obj.metadata.name!, () => copy, {
      ...(subresource ? { subresource } : {}),
    });
  }

  patch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    kind: PatchKind,
    patch: unknown,
    subresource?: 'status',
  ): Promise<KubeObject> {
    const def = this.def(ref);
    return this.store.guaranteedUpdate(
      def,
      namespace,
      name,
      (current) =>
        applyPatch(kind, current as unknown as JsonObject, patch as JsonObject, def.kind, { consumeOriginal: true }) as unknown as KubeObject,
      { ...(subresource ? { subresource } : {}) },
    );
  }

  async delete(ref: ResourceRef, namespace: string | undefined, name: string, options: DeleteOptions = {}): Promise<void> {
    await this.store.delete(this.def(ref), namespace, name, {
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
      ...(options.propagationPolicy ? { propagationPolicy: options.propagationPolicy } : {}),
    });
  }

  watch(
    ref: ResourceRef,
    namespace: string | undefined,
    resourceVersion: string,
    options: ListOptions,
    handler: WatchHandler,
  ): WatchHandle {
    const def = this.def(ref);
    let stopped = false;
    let cancel: (() => void) | undefined;
    this.store
      .watch(def, namespace, resourceVersion, this.selection(def, options), {
        event: (type, obj) => {
          if (!stopped) handler.onEvent(type, obj);
        },
        progress: () => undefined,
        error: (error) => {
          if (stopped) return;
          stopped = true;
          handler.onClose(error, error.code === 410);
        },
      })
      .then(
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
