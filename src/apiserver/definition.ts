import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import type { ServiceNetwork } from '../node-protocol/service-network.js';
import type { Authorizer, UserInfo } from './auth.js';
import type { IssuedToken, IssueTokenRequest } from '../security/service-account-tokens.js';
import type { StatusCause } from './errors.js';
import type { KubeObject } from './objects.js';
import type {
  DeleteOptions,
  DeleteResult,
  ListOptions,
  ListResult,
  Selection,
  UpdateFn,
  UpdateOptions,
  WriteOptions,
  WriteSubresource,
} from './storage-types.js';
import type { RbacSource } from './rbac/types.js';
import type { Printer } from './table.js';

/**
 * What a kind is, as data, and how it behaves, as hooks: the shape of kube-apiserver's
 * registry/<group>/<kind>/strategy.go. Each kind declares one ResourceDefinition in
 * src/apiserver/kinds/; the store, the verb layer (src/apiserver/verbs/), routing, discovery,
 * OpenAPI, tables and field selectors are all driven from it, so a new kind needs no request code.
 * See docs/architecture.md, "How to add a kind".
 */

/**
 * `status`: the status-only write path; `eviction`: policy Eviction (pods); `scale`: the
 * autoscaling/v1 Scale view of `spec.replicas`; `log`: a pod's container log, served by a hook;
 * `token`: a TokenRequest (ServiceAccounts); `ephemeralcontainers`: the write path of a pod's
 * spec.ephemeralContainers (pods; its rules are the kind's validateUpdate); `finalize`: the write
 * path of a namespace's spec.finalizers. Every name but `status`, `ephemeralcontainers` and
 * `finalize` needs its hook below (the registry refuses a definition without it).
 */
export type Subresource = 'status' | 'eviction' | 'scale' | 'log' | 'token' | 'ephemeralcontainers' | 'finalize' | StreamSubresource;
export type { WriteSubresource };
/** Served by the handler's upgrade path (src/apiserver/streaming/), not by kind hooks. */
export type StreamSubresource = 'exec' | 'attach' | 'portforward';

export interface Conversion {
  /** From this version's shape to the stored shape. */
  toStorage(obj: KubeObject): KubeObject;
  /** From the stored shape to this version's shape. */
  fromStorage(obj: KubeObject): KubeObject;
}

/** The store as strategy hooks see it; the ObjectStore (src/apiserver/storage.ts) is one. */
export interface KindStore {
  get(def: ResourceDefinition, namespace: string | undefined, name: string): Promise<KubeObject>;
  list(def: ResourceDefinition, namespace: string | undefined, options: ListOptions): Promise<ListResult>;
  guaranteedUpdate(
    def: ResourceDefinition,
    namespace: string | undefined,
    name: string,
    update: UpdateFn,
    options?: UpdateOptions,
  ): Promise<KubeObject>;
  delete(def: ResourceDefinition, namespace: string | undefined, name: string, options?: DeleteOptions): Promise<DeleteResult>;
  /**
   * The datastore beneath, for records that are not objects: the Service allocators' reservation
   * keys (kinds/service-allocation.ts), which must be compare-and-swaps in the shared datastore.
   */
  readonly datastore?: Datastore;
  /**
   * Removes every object of the given namespaced kinds in one namespace; answers how many. Each
   * delete carries `options.writeGuard` (the namespace delete's caller's).
   */
  deleteNamespaceContents(defs: readonly ResourceDefinition[], namespace: string, options?: Pick<WriteOptions, 'writeGuard'>): Promise<number>;
}

/** What a hook may reach besides its own object: the store and the other kinds. */
export interface KindContext {
  store: KindStore;
  /** Every kind served (the ResourceRegistry). */
  kinds: {
    readonly all: readonly ResourceDefinition[];
    lookup(group: string, version: string, plural: string): ResourceDefinition | undefined;
  };
  logger?: Logger;
  /**
   * The HTTP door's authorizer chain: what `authorizeWrite` and the access reviews ask about the
   * caller (may they `escalate`, `bind`, do X). Absent for in-process callers, who carry no user.
   */
  authorizer?: Authorizer;
  /** The RBAC objects the authorizer reads (its informer cache), for SelfSubjectRulesReview. */
  rbac?: RbacSource;
  /**
   * The cluster's `default-runtime-class` setting: the class a pod created without one gets
   * (kinds/runtime-classes.ts); the setting's default when absent.
   */
  defaultRuntimeClass?: string;
  /** The cluster's Service network settings (service-cidr, node port range, ...); their defaults when absent. */
  serviceNetwork?: ServiceNetwork;
}

/** A write as its caller asked for it, for the checks that depend on who asks. */
export interface CallerWrite {
  user: UserInfo;
  verb: 'create' | 'update' | 'patch';
  namespace: string | undefined;
  /** The name in the request path: absent on create. */
  name?: string;
  /** The object about to be stored, before the store's defaults and validation. */
  object: KubeObject;
  /** The stored object an update or patch replaces. */
  oldObject?: KubeObject;
}

/** What a create-only kind is handed: the body and who sent it. */
export interface CreateOnlyRequest {
  user: UserInfo | undefined;
  namespace: string | undefined;
  object: KubeObject;
}

/** `eviction`: checks made before an eviction deletes the object (pods: their disruption budget). */
export interface EvictionStrategy {
  /**
   * Throws an ApiError (429 for a budget) to refuse; may write (spend the budget) unless
   * `options.dryRun`, with the eviction's write guard, so a fenced eviction spends nothing.
   */
  beforeEviction(context: KindContext, obj: KubeObject, options: WriteOptions): Promise<void>;
}

/** `scale`: the autoscaling/v1 Scale view of an object. */
export interface ScaleStrategy {
  /** The Scale of the stored object. */
  view(obj: KubeObject): KubeObject;
  /** The object with the replicas a Scale asks for; throws a 422 for an invalid count. */
  apply(obj: KubeObject, scale: KubeObject): KubeObject;
}

/** The query of a pods/log request, as kubectl sends it (strings from the URL). */
export interface LogQuery {
  container?: string;
  follow?: boolean;
  previous?: boolean;
  tailLines?: string;
  limitBytes?: string;
}

/** What the server's log hook is handed once the query is checked against the pod. */
export interface PodLogParams {
  /** Always set when the hook is called: the named container, or the pod's only one. */
  container?: string;
  follow: boolean;
  tailLines?: number;
  previous: boolean;
  limitBytes?: number;
}

/** `log`: the checks of a log request; the HTTP layer then streams it (it is not a stored object). */
export interface LogStrategy {
  /** The query alone, before the object is read (a bad number is a 400 even for a missing pod). */
  parse(query: LogQuery): PodLogParams;
  /** The query against the object: which container (the named one, or the only one). */
  resolve(obj: KubeObject, params: PodLogParams): PodLogParams;
}

/**
 * What signs ServiceAccount tokens: the cluster's key, issuer and audiences. The server builds it
 * (src/server/service-accounts.ts) and hands it to the verb layer; without it, no tokens.
 */
export interface TokenIssuer {
  /** The API server's own audiences: a TokenRequest without audiences gets these. */
  readonly apiAudiences: readonly string[];
  /** A cap on lifetimes (kube's --service-account-max-token-expiration); none when absent. */
  readonly maxExpirationSeconds?: number;
  issue(request: Omit<IssueTokenRequest, 'issuer'>): Promise<IssuedToken>;
}

/** `token`: a TokenRequest (authentication.k8s.io/v1) for one object of the kind (ServiceAccounts). */
export interface TokenStrategy {
  /**
   * Checks the request against the stored objects, signs, and answers the TokenRequest with its
   * status, plus warnings for the `Warning` header. Throws an ApiError to refuse.
   */
  create(
    context: KindContext,
    target: { namespace: string; name: string },
    request: KubeObject,
    issuer: TokenIssuer,
  ): Promise<{ object: KubeObject; warnings: string[] }>;
}

/**
 * Kinds that are not stored but read from elsewhere when asked (metrics.k8s.io: each node's usage,
 * from its agent): `get` and `list` only, every other verb a 405, as an aggregated API serving
 * only reads. The verb layer applies the request's selectors to what `list` answers.
 */
export interface ReadStrategy {
  /** The object, or an ApiError (404 when there is none). */
  get(namespace: string | undefined, name: string): Promise<KubeObject>;
  /** The objects in `namespace` (all when undefined); `selection` may narrow what is fetched. */
  list(namespace: string | undefined, selection: Selection): Promise<KubeObject[]>;
}

export interface ResourceDefinition {
  // ------------------------------------------------------------------------------------------
  // Data: names, scope, discovery, tables, selectors, storage.
  group: string;
  version: string;
  kind: string;
  plural: string;
  singular: string;
  namespaced: boolean;
  shortNames: readonly string[];
  categories: readonly string[];
  subresources: readonly Subresource[];
  printer: Printer;
  /** Field selector labels beyond metadata.name / metadata.namespace. */
  fieldLabels: Readonly<Record<string, (obj: KubeObject) => string>>;
  /** Top-level fields this kind has; anything else is an unknown field. */
  topLevelFields: ReadonlySet<string>;
  /** Where objects live in the datastore: `/registry/<storagePath>/...`. Shared across versions. */
  storagePath: string;
  /** `path-segment`: RBAC objects, whose names may hold `:` (`system:discovery`). */
  nameRule: 'dns-subdomain' | 'dns-label' | 'path-segment';
  conversion?: Conversion;
  /** The kind of its lists, when not `<kind>List` (a CRD's spec.names.listKind). */
  listKind?: string;
  /** Served for a CustomResourceDefinition (src/apiserver/extensions/): which, and this version's schema. */
  crd?: { name: string; uid: string; schema?: Record<string, unknown> };

  // ------------------------------------------------------------------------------------------
  // Create and update rules (run by the ObjectStore, so by every caller).
  /** Defaults and server-owned fields on create. */
  prepareForCreate?(obj: KubeObject): void;
  /**
   * On an update (not a status write), before the defaults: what the client may leave out and the
   * stored object keeps, as kube's strategy PrepareForUpdate (a pod's RuntimeClass and overhead,
   * written at creation by admission).
   */
  prepareForUpdate?(next: KubeObject, current: KubeObject): void;
  /**
   * True while the kind's own cleanup still holds an object asked to go away (a Namespace, while
   * `kubernetes` is in its spec.finalizers: its contents are not yet known to be gone). Such an
   * object is not removed by the write that leaves it without metadata finalizers.
   */
  awaitsCleanup?(obj: KubeObject): boolean;
  /** Defaults kept on every write that is not a status write: filled in when a client leaves them out. */
  applyDefaults?(obj: KubeObject): void;
  validate?(obj: KubeObject): StatusCause[];
  /** Rules for a status write (the status subresource), beyond status being an object (CRDs: the schema's status). */
  validateStatus?(obj: KubeObject): StatusCause[];
  /**
   * Kinds that know their fields below the top level (CRDs, from their schema): removes the
   * fields the kind does not know and answers their paths, which the verb layer treats as the
   * top-level unknown fields (dropped with a warning, or refused under fieldValidation=Strict).
   */
  unknownFields?(obj: KubeObject): string[];
  /** Rules about what an update (not a status write) may change, given the stored object. */
  /** `subresource`: the write path the update came through (absent: the object itself). */
  validateUpdate?(next: KubeObject, current: KubeObject, subresource?: WriteSubresource): StatusCause[];

  /**
   * Checks that depend on who writes (RBAC's escalation prevention: nobody grants what they do not
   * hold), run by the verb layer before a create, update or patch of a caller that carries a user,
   * inside the compare-and-swap for updates. In-process callers carry none and are trusted, as
   * kube-apiserver trusts its loopback client. Throws an ApiError to refuse.
   */
  authorizeWrite?(context: KindContext, write: CallerWrite): Promise<void>;
  /**
   * Kinds that are never stored (the access reviews): a POST is answered 201 with what this
   * returns, and every other verb is a 405, as kube-apiserver's create-only REST storage.
   */
  respondToCreate?(context: KindContext, request: CreateOnlyRequest): Promise<KubeObject> | KubeObject;
  /**
   * Admission that reads other objects (a pod's RuntimeClass), run by the verb layer on every
   * create from every caller, in-process ones included (kube-controller-manager's pods meet
   * admission too), before the store's defaults and validation. It may change the object (a
   * mutating admission plug-in); it throws an ApiError to refuse. `namespace`: the request's.
   */
  admitCreate?(context: KindContext, obj: KubeObject, namespace?: string): Promise<void>;
  /**
   * The same for an update or patch (not a status write), inside the compare-and-swap, with the
   * stored object it replaces (Services: node ports and a ClusterIP a type change needs).
   */
  admitUpdate?(context: KindContext, next: KubeObject, current: KubeObject): Promise<void>;

  // ------------------------------------------------------------------------------------------
  // Delete rules.
  /**
   * Kinds deleted gracefully (pods): the grace period in seconds this deletion gets, given the
   * caller's `gracePeriodSeconds`; 0 removes the object at once. Without it, deletion is immediate.
   */
  deletionGracePeriod?(obj: KubeObject, requested: number | undefined): number;
  /** Names that may not be deleted (the built-in namespaces). */
  undeletable?: ReadonlySet<string>;
  /**
   * Kinds the garbage collector watches (owners and dependents it knows): a DELETE's
   * propagationPolicy Orphan or Foreground puts its finalizer on them (src/apiserver/deletion.ts).
   * Other kinds ignore the policy, since no controller would ever take such a finalizer off.
   */
  garbageCollected?: true;
  /**
   * A DELETE that removes the object at once answers with the object (kube-apiserver's
   * ReturnDeletedObject: pods, namespaces); other kinds answer a Status of Success.
   */
  returnsDeletedObject?: true;
  /**
   * The delete itself, in place of the store's plain one (namespaces: their contents go with
   * them). Called by the verb layer for every delete of this kind, dry runs included.
   */
  delete?(context: KindContext, name: string, options: DeleteOptions, namespace?: string): Promise<DeleteResult>;

  // ------------------------------------------------------------------------------------------
  // Subresource hooks: one for each of `eviction`, `scale`, `log`, `token` listed in `subresources`.
  eviction?: EvictionStrategy;
  scale?: ScaleStrategy;
  log?: LogStrategy;
  token?: TokenStrategy;

  /** Not stored: read through this (see ReadStrategy). */
  reads?: ReadStrategy;
}

export function apiVersionOf(def: Pick<ResourceDefinition, 'group' | 'version'>): string {
  return def.group ? `${def.group}/${def.version}` : def.version;
}

/** `apiVersion`, `kind`, `metadata` and the kind's own top-level fields. */
export const standardFields = (...extra: string[]): ReadonlySet<string> =>
  new Set(['apiVersion', 'kind', 'metadata', ...extra]);

/** A definition's subresources and its hooks must agree: a listed subresource without its hook would be routed to nothing. */
export function checkDefinition(def: ResourceDefinition): void {
  const hooks: Record<Exclude<Subresource, WriteSubresource | StreamSubresource>, unknown> = { eviction: def.eviction, scale: def.scale, log: def.log, token: def.token };
  for (const [name, hook] of Object.entries(hooks)) {
    const listed = def.subresources.includes(name as Subresource);
    if (listed !== (hook !== undefined)) {
      throw new Error(`resource ${def.plural}.${def.group || 'core'}: subresource ${name} ${listed ? 'is listed without its hook' : 'has a hook but is not listed'}`);
    }
  }
}
