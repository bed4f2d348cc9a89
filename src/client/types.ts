import type { KubeObject } from '../apiserver/objects.js';

/**
 * A small Kubernetes API client seam. Controllers run inside the server and use the in-process
 * implementation; agents talk HTTPS. Both raise ApiError (src/apiserver/errors.ts) with the
 * Kubernetes status code, so callers handle 404 and 409 the same way everywhere.
 */

export interface ResourceRef {
  group: string;
  version: string;
  plural: string;
  namespaced: boolean;
}

export const NODES: ResourceRef = { group: '', version: 'v1', plural: 'nodes', namespaced: false };
export const PODS: ResourceRef = { group: '', version: 'v1', plural: 'pods', namespaced: true };
export const EVENTS: ResourceRef = { group: '', version: 'v1', plural: 'events', namespaced: true };
export const NAMESPACES: ResourceRef = { group: '', version: 'v1', plural: 'namespaces', namespaced: false };
export const CONFIGMAPS: ResourceRef = { group: '', version: 'v1', plural: 'configmaps', namespaced: true };
export const SECRETS: ResourceRef = { group: '', version: 'v1', plural: 'secrets', namespaced: true };
export const SERVICEACCOUNTS: ResourceRef = { group: '', version: 'v1', plural: 'serviceaccounts', namespaced: true };
export const SERVICES: ResourceRef = { group: '', version: 'v1', plural: 'services', namespaced: true };
export const ENDPOINTS: ResourceRef = { group: '', version: 'v1', plural: 'endpoints', namespaced: true };
export const ENDPOINTSLICES: ResourceRef = { group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', namespaced: true };
export const LEASES: ResourceRef = {
  group: 'coordination.k8s.io',
  version: 'v1',
  plural: 'leases',
  namespaced: true,
};

export const ROLES: ResourceRef = { group: 'rbac.authorization.k8s.io', version: 'v1', plural: 'roles', namespaced: true };
export const CLUSTER_ROLES: ResourceRef = { group: 'rbac.authorization.k8s.io', version: 'v1', plural: 'clusterroles', namespaced: false };
export const ROLE_BINDINGS: ResourceRef = { group: 'rbac.authorization.k8s.io', version: 'v1', plural: 'rolebindings', namespaced: true };
export const CLUSTER_ROLE_BINDINGS: ResourceRef = {
  group: 'rbac.authorization.k8s.io',
  version: 'v1',
  plural: 'clusterrolebindings',
  namespaced: false,
};

export const RUNTIME_CLASSES: ResourceRef = { group: 'node.k8s.io', version: 'v1', plural: 'runtimeclasses', namespaced: false };

export const DEPLOYMENTS: ResourceRef = { group: 'apps', version: 'v1', plural: 'deployments', namespaced: true };
export const REPLICASETS: ResourceRef = { group: 'apps', version: 'v1', plural: 'replicasets', namespaced: true };
export const STATEFULSETS: ResourceRef = { group: 'apps', version: 'v1', plural: 'statefulsets', namespaced: true };
export const DAEMONSETS: ResourceRef = { group: 'apps', version: 'v1', plural: 'daemonsets', namespaced: true };
export const CONTROLLER_REVISIONS: ResourceRef = { group: 'apps', version: 'v1', plural: 'controllerrevisions', namespaced: true };
export const JOBS: ResourceRef = { group: 'batch', version: 'v1', plural: 'jobs', namespaced: true };
export const CRONJOBS: ResourceRef = { group: 'batch', version: 'v1', plural: 'cronjobs', namespaced: true };

/** Kubernetes DeleteOptions, the parts Drover honours. */
export interface DeleteOptions {
  /** 0 deletes at once (force); unset uses the object's own grace (pods: terminationGracePeriodSeconds). */
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
  /** What becomes of the dependents (docs/api.md, deletion); unset is Background. */
  propagationPolicy?: 'Orphan' | 'Background' | 'Foreground';
}

/** What an eviction may say about the delete it asks for (policy/v1 Eviction's deleteOptions). */
export interface EvictOptions {
  /** Unset uses the pod's own grace period. */
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
}

export type PatchKind = 'merge' | 'strategic' | 'json';

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface WatchHandler {
  onEvent(type: WatchEventType, obj: KubeObject): void;
  /** The watch ended; `expired` means the resourceVersion is too old and a re-list is needed. */
  onClose(error: Error | undefined, expired: boolean): void;
}

export interface WatchHandle {
  stop(): void;
}

export interface ApiClient {
  get(ref: ResourceRef, namespace: string | undefined, name: string): Promise<KubeObject | undefined>;
  list(
    ref: ResourceRef,
    namespace: string | undefined,
    options?: ListOptions,
  ): Promise<{ items: KubeObject[]; resourceVersion: string }>;
  create(ref: ResourceRef, namespace: string | undefined, obj: KubeObject): Promise<KubeObject>;
  /** PUT: `obj.metadata.resourceVersion`, when set, is a precondition (409 on mismatch). */
  update(ref: ResourceRef, namespace: string | undefined, obj: KubeObject, subresource?: 'status' | 'finalize'): Promise<KubeObject>;
  patch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    kind: PatchKind,
    patch: unknown,
    subresource?: 'status',
  ): Promise<KubeObject>;
  /**
   * A pod bound to a node is deleted gracefully: it gets a deletionTimestamp and its agent stops
   * it, then deletes it with grace 0. Everything else is deleted at once.
   */
  delete(ref: ResourceRef, namespace: string | undefined, name: string, options?: DeleteOptions): Promise<void>;
  /**
   * Evicts a pod (policy/v1 Eviction): deleted as `delete` would, but only if its
   * PodDisruptionBudget allows a disruption now, which the eviction spends. A budget that does not
   * allow it is a 429 ApiError: try again later, as `kubectl drain` does.
   */
  evict(namespace: string, name: string, options?: EvictOptions): Promise<void>;
  /** A ServiceAccount token (`serviceaccounts/<name>/token`): the TokenRequest answered, with its status. */
  requestToken(namespace: string, serviceAccount: string, request: KubeObject): Promise<KubeObject>;
  /** Changes after `resourceVersion`. */
  watch(
    ref: ResourceRef,
    namespace: string | undefined,
    resourceVersion: string,
    options: ListOptions,
    handler: WatchHandler,
  ): WatchHandle;
}
