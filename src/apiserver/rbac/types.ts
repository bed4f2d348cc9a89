import type { NonResourceAttributes, RequestAttributes, UserInfo } from '../auth.js';
import type { ObjectMeta } from '../objects.js';

/**
 * The `rbac.authorization.k8s.io/v1` objects as plain JSON, and what a request looks like to the
 * RBAC authorizer. Everything in this folder is pure: no I/O, no clock, no imports of values from
 * the rest of the API server, so it can run over an informer cache or over test fixtures alike.
 *
 * The object shapes are the wire shapes. Stored objects were written by clients, so every list is
 * optional here and read as empty when absent (Kubernetes accepts `rules: null`).
 */

export const RBAC_GROUP = 'rbac.authorization.k8s.io';
export const RBAC_API_VERSION = `${RBAC_GROUP}/v1`;

/** Members of this group may do anything and may grant anything (kube-apiserver's privileged group). */
export const MASTERS_GROUP = 'system:masters';
export const AUTHENTICATED_GROUP = 'system:authenticated';
export const UNAUTHENTICATED_GROUP = 'system:unauthenticated';
export const SERVICE_ACCOUNTS_GROUP = 'system:serviceaccounts';
export const SERVICE_ACCOUNT_USER_PREFIX = 'system:serviceaccount:';

/** Label and annotation the default policy carries (see defaults.ts). */
export const BOOTSTRAPPING_LABEL = 'kubernetes.io/bootstrapping';
export const BOOTSTRAPPING_VALUE = 'rbac-defaults';
export const AUTOUPDATE_ANNOTATION = 'rbac.authorization.kubernetes.io/autoupdate';

export interface PolicyRule {
  verbs: string[];
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist' | string;
  values?: string[];
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export interface AggregationRule {
  clusterRoleSelectors?: LabelSelector[];
}

export interface Role {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  rules?: PolicyRule[] | null;
}

export interface ClusterRole extends Role {
  aggregationRule?: AggregationRule | null;
}

export type SubjectKind = 'User' | 'Group' | 'ServiceAccount';

export interface Subject {
  kind: SubjectKind | string;
  name: string;
  /** Only for ServiceAccount subjects; a RoleBinding's own namespace when absent. */
  namespace?: string;
  apiGroup?: string;
}

export interface RoleRef {
  apiGroup: string;
  kind: 'Role' | 'ClusterRole' | string;
  name: string;
}

export interface RoleBinding {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  subjects?: Subject[] | null;
  roleRef: RoleRef;
}

export type ClusterRoleBinding = RoleBinding;


/**
 * What the authorizer judges: a resource request as Drover's handler describes it (verb, group,
 * resource, subresource, namespace, name), or a non-resource request. For `list` and `watch` with
 * `fieldSelector=metadata.name=X`, the HTTP layer should set `name: X`, as kube-apiserver does, so
 * that rules with resourceNames can allow watching a single object.
 */
export type AuthorizationAttributes = RequestAttributes | NonResourceAttributes;

/** A request is a non-resource one when it names a path and no resource (a resource request's path, if the HTTP layer ever adds one, does not count). */
export function isNonResource(attributes: AuthorizationAttributes): attributes is NonResourceAttributes {
  return !('resource' in attributes) && typeof (attributes as Partial<NonResourceAttributes>).path === 'string';
}

export type { NonResourceAttributes, RequestAttributes, UserInfo };

/**
 * Where the RBAC objects come from. The wiring implements it over informer caches (one per kind,
 * indexed by namespace); tests use InMemoryRbacSource. Calls are synchronous because Drover's
 * Authorizer is: the caches are in memory. Roles are looked up by name because bindings name them.
 */
export interface RbacSource {
  /** The Role `name` in `namespace`, if any. */
  getRole(namespace: string, name: string): Role | undefined;
  /** The ClusterRole `name`, if any. */
  getClusterRole(name: string): ClusterRole | undefined;
  /** Every RoleBinding in `namespace` (order decides only which binding an "allowed by" reason names). */
  listRoleBindings(namespace: string): readonly RoleBinding[];
  /** Every ClusterRoleBinding. */
  listClusterRoleBindings(): readonly ClusterRoleBinding[];
  /**
   * Optional shortcut: only the bindings of `namespace` ('' for ClusterRoleBindings) that name
   * this user, in the order of the full list. The authorizer asks for them on every request; a
   * source that remembers the answer per user spares it matching every subject of every binding.
   */
  bindingsFor?(namespace: string, user: UserInfo): readonly RoleBinding[];
}

/**
 * A refusal the HTTP layer turns into a Status: `code`/`reason` as kube-apiserver answers, the
 * resource and name for `details`, and the complete message.
 */
export interface RbacRefusal {
  code: 403 | 404;
  reason: 'Forbidden' | 'NotFound';
  group: string;
  resource: string;
  name: string;
  message: string;
}
