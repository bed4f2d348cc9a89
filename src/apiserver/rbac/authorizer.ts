import type { AuthorizationDecision, Authorizer } from '../auth.js';
import { aggregateMessages, goQuote } from './go-format.js';
import { describeGrant, matchingSubject, ruleMatcher } from './rules.js';
import {
  type AuthorizationAttributes,
  isNonResource,
  MASTERS_GROUP,
  type PolicyRule,
  RBAC_GROUP,
  type RbacRefusal,
  type RbacSource,
  type RoleBinding,
  type RoleRef,
  type Subject,
  type UserInfo,
} from './types.js';

/**
 * The RBAC authorizer: which rules apply to a user in a namespace (from the ClusterRoleBindings,
 * then the RoleBindings of that namespace), and whether any of them allows a request. A
 * ClusterRole bound by a RoleBinding grants its rules only in that binding's namespace, because
 * RoleBindings are only consulted for requests in their own namespace.
 */

/**
 * How a missing role is worded. The authorizer reads informer caches, whose listers say
 * `clusterrole.rbac.authorization.k8s.io "x" not found`; the escalation checks read the registry,
 * which says `clusterroles.rbac.authorization.k8s.io "x" not found`. Drover keeps both wordings.
 */
export type NotFoundWording = 'lister' | 'registry';

function roleNotFound(kind: 'Role' | 'ClusterRole', name: string, wording: NotFoundWording): string {
  const resource = wording === 'lister' ? kind.toLowerCase() : kind === 'Role' ? 'roles' : 'clusterroles';
  return `${resource}.${RBAC_GROUP} ${goQuote(name)} not found`;
}

export type RoleRefResolution = { rules: PolicyRule[]; error?: undefined } | { rules?: undefined; error: string; missing: boolean };

/** The rules of the role a binding refers to; `bindingNamespace` is '' for a ClusterRoleBinding. */
export function roleRefRules(
  source: RbacSource,
  ref: RoleRef,
  bindingNamespace: string,
  wording: NotFoundWording = 'lister',
): RoleRefResolution {
  if (ref.kind === 'Role') {
    const role = bindingNamespace ? source.getRole(bindingNamespace, ref.name) : undefined;
    return role ? { rules: role.rules ?? [] } : { error: roleNotFound('Role', ref.name, wording), missing: true };
  }
  if (ref.kind === 'ClusterRole') {
    const role = source.getClusterRole(ref.name);
    return role ? { rules: role.rules ?? [] } : { error: roleNotFound('ClusterRole', ref.name, wording), missing: true };
  }
  return { error: `unsupported role reference kind: ${goQuote(ref.kind)}`, missing: false };
}

/** One rule granted to the user, with where it came from (described only when needed). */
export interface Grant {
  rule: PolicyRule;
  binding: RoleBinding;
  subject: Subject;
  /** '' for a ClusterRoleBinding. */
  bindingNamespace: string;
}

/** Called per granted rule or per resolution error; return false to stop. */
export type RuleVisitor = (grant: Grant | undefined, error: string | undefined) => boolean;

/**
 * Every rule that applies to `user` for a request in `namespace` ('' for cluster-scoped requests
 * and non-resource paths, which only ClusterRoleBindings can grant), in kube's order:
 * ClusterRoleBindings first, then the namespace's RoleBindings. A binding whose role is missing
 * contributes an error, not rules: it grants nothing, and the error explains a denial.
 */
export function visitRulesFor(
  source: RbacSource,
  user: UserInfo,
  namespace: string,
  visit: RuleVisitor,
  wording: NotFoundWording = 'lister',
): void {
  /** Visits one scope's bindings; false once the visitor has asked to stop. */
  const visitBindings = (bindings: readonly RoleBinding[], bindingNamespace: string): boolean => {
    for (const binding of bindings) {
      const subject = matchingSubject(user, binding, bindingNamespace);
      if (!subject) continue;
      const resolved = roleRefRules(source, binding.roleRef, bindingNamespace, wording);
      if (resolved.error !== undefined) {
        if (!visit(undefined, resolved.error)) return false;
        continue;
      }
      for (const rule of resolved.rules) {
        if (!visit({ rule, binding, subject, bindingNamespace }, undefined)) return false;
      }
    }
    return true;
  };
  const clusterBindings = source.bindingsFor ? source.bindingsFor('', user) : source.listClusterRoleBindings();
  if (!visitBindings(clusterBindings, '')) return;
  if (namespace) visitBindings(source.bindingsFor ? source.bindingsFor(namespace, user) : source.listRoleBindings(namespace), namespace);
}

export interface ResolvedRules {
  rules: PolicyRule[];
  /** Resolution errors (missing roles): the rules are still complete for what could be read. */
  errors: string[];
}

/** All rules the user holds in `namespace` (RulesFor): what escalation checks compare against. */
export function rulesFor(source: RbacSource, user: UserInfo, namespace: string, wording: NotFoundWording = 'lister'): ResolvedRules {
  const result: ResolvedRules = { rules: [], errors: [] };
  visitRulesFor(
    source,
    user,
    namespace,
    (grant, error) => {
      if (grant) result.rules.push(grant.rule);
      if (error !== undefined) result.errors.push(error);
      return true;
    },
    wording,
  );
  return result;
}

/**
 * The decision with kube's reason: `RBAC: allowed by ClusterRoleBinding "…" of ClusterRole "…" to
 * User "…"` when allowed; when denied, '' or `RBAC: <resolution errors>` (a binding to a missing
 * role), which kube-apiserver appends to its 403 message after `: `.
 */
export interface RbacDecision {
  allowed: boolean;
  reason: string;
}

export function decide(source: RbacSource, user: UserInfo, attributes: AuthorizationAttributes): RbacDecision {
  const found = findGrant(source, user, attributes);
  return 'grant' in found ? { allowed: true, reason: allowedReason(found.grant) } : { allowed: false, reason: found.reason };
}

function allowedReason(grant: Grant): string {
  return `RBAC: allowed by ${describeGrant(grant.binding, grant.subject, grant.bindingNamespace)}`;
}

/**
 * The grant that allows the request, or the denial's reason: visitRulesFor's walk (the same
 * bindings, in the same order, the same errors), written as one loop because it runs for every
 * request of every user RBAC judges. No object is made per rule looked at, and the request's
 * side of the match is worked out once (ruleMatcher).
 */
function findGrant(source: RbacSource, user: UserInfo, attributes: AuthorizationAttributes): { grant: Grant } | { reason: string } {
  const namespace = isNonResource(attributes) ? '' : (attributes.namespace ?? '');
  const allows = ruleMatcher(attributes);
  const errors: string[] = [];
  const clusterBindings = source.bindingsFor ? source.bindingsFor('', user) : source.listClusterRoleBindings();
  const grant =
    grantIn(source, user, clusterBindings, '', allows, errors) ??
    (namespace ? grantIn(source, user, source.bindingsFor ? source.bindingsFor(namespace, user) : source.listRoleBindings(namespace), namespace, allows, errors) : undefined);
  if (grant) return { grant };
  return { reason: errors.length > 0 ? `RBAC: ${aggregateMessages(errors)}` : '' };
}

function grantIn(
  source: RbacSource,
  user: UserInfo,
  bindings: readonly RoleBinding[],
  bindingNamespace: string,
  allows: (rule: PolicyRule) => boolean,
  errors: string[],
): Grant | undefined {
  for (const binding of bindings) {
    const subject = matchingSubject(user, binding, bindingNamespace);
    if (!subject) continue;
    const ref = binding.roleRef;
    const role =
      ref.kind === 'ClusterRole' ? source.getClusterRole(ref.name) : ref.kind === 'Role' && bindingNamespace ? source.getRole(bindingNamespace, ref.name) : undefined;
    if (!role) {
      // Missing, or a kind no role can be: worded as the walk words it.
      errors.push(roleRefRules(source, ref, bindingNamespace).error!);
      continue;
    }
    for (const rule of role.rules ?? []) {
      if (allows(rule)) return { rule, binding, subject, bindingNamespace };
    }
  }
  return undefined;
}

/**
 * The RBAC authorizer behind Drover's Authorizer seam. Members of system:masters are allowed
 * everything before any rule is read (kube-apiserver's privileged-group authorizer, which comes
 * first in its chain), so the admin keeps working even with no RBAC objects at all.
 */
export class RbacAuthorizer implements Authorizer {
  constructor(private readonly source: RbacSource) {}

  decide(user: UserInfo, attributes: AuthorizationAttributes): RbacDecision {
    if (user.groups.includes(MASTERS_GROUP)) return { allowed: true, reason: '' };
    return decide(this.source, user, attributes);
  }

  authorize(user: UserInfo, attributes: AuthorizationAttributes): AuthorizationDecision {
    if (user.groups.includes(MASTERS_GROUP)) return { allowed: true };
    const found = findGrant(this.source, user, attributes);
    if (!('grant' in found)) return { allowed: false, reason: found.reason };
    return new AllowedBy(found.grant);
  }
}

/** An allowing decision whose reason is worded only when read (access reviews): a request that is simply allowed never needs it. */
class AllowedBy {
  readonly allowed = true as const;
  constructor(private readonly grant: Grant) {}

  get reason(): string {
    return allowedReason(this.grant);
  }
}

/**
 * kube-apiserver's 403 for a denied request, word for word:
 * `pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "b"`,
 * `deployments.apps "web" is forbidden: User "x" cannot get resource "deployments/scale" in API
 * group "apps" at the cluster scope`, `forbidden: User "x" cannot get path "/metrics"`, each
 * followed by `: <reason>` when the authorizers gave one.
 */
export function forbiddenMessage(user: UserInfo, attributes: AuthorizationAttributes, reason = ''): string {
  return forbiddenRefusal(user, attributes, reason).message;
}

export function forbiddenRefusal(user: UserInfo, attributes: AuthorizationAttributes, reason = ''): RbacRefusal {
  const suffix = reason ? `: ${reason}` : '';
  const who = `User ${goQuote(user.name)} cannot ${attributes.verb}`;
  if (isNonResource(attributes)) {
    return { code: 403, reason: 'Forbidden', group: '', resource: '', name: '', message: `forbidden: ${who} path ${goQuote(attributes.path)}${suffix}` };
  }
  const resource = attributes.subresource ? `${attributes.resource}/${attributes.subresource}` : attributes.resource;
  const scope = attributes.namespace ? `in the namespace ${goQuote(attributes.namespace)}` : 'at the cluster scope';
  const detail = `${who} resource ${goQuote(resource)} in API group ${goQuote(attributes.group)} ${scope}${suffix}`;
  const qualified = attributes.group ? `${attributes.resource}.${attributes.group}` : attributes.resource;
  const name = attributes.name ?? '';
  const message = name ? `${qualified} ${goQuote(name)} is forbidden: ${detail}` : `${qualified} is forbidden: ${detail}`;
  return { code: 403, reason: 'Forbidden', group: attributes.group, resource: attributes.resource, name, message };
}
