import { goQuote } from './go-format.js';
import {
  type AuthorizationAttributes,
  isNonResource,
  type PolicyRule,
  type RoleBinding,
  SERVICE_ACCOUNT_USER_PREFIX,
  type Subject,
  type UserInfo,
} from './types.js';

/**
 * How one PolicyRule matches one request, and how one binding subject matches one user, as
 * Kubernetes' RBAC authorizer decides them. Rules only ever allow: there is no deny, so the
 * answer for a request is the union over every rule that applies to the user.
 */

export const ALL = '*';

export function verbMatches(rule: PolicyRule, verb: string): boolean {
  return (rule.verbs ?? []).some((v) => v === ALL || v === verb);
}

export function apiGroupMatches(rule: PolicyRule, group: string): boolean {
  return (rule.apiGroups ?? []).some((g) => g === ALL || g === group);
}

/**
 * `combined` is `resource` or `resource/subresource`. A rule matches with `*` (every resource and
 * every subresource), the exact combined name, or `*` + `/subresource` (that subresource of every
 * resource). `pods` alone does not match `pods/log`: subresources are granted by name.
 */
export function resourceMatches(rule: PolicyRule, combined: string, subresource: string): boolean {
  for (const resource of rule.resources ?? []) {
    if (resource === ALL || resource === combined) return true;
    if (subresource && resource === `*/${subresource}`) return true;
  }
  return false;
}

/**
 * A rule without resourceNames matches any name. A rule with resourceNames matches only requests
 * that carry one of those names, so it never matches a request without a name: `create` (the
 * name is in the body, not the path), `deletecollection`, and a `list` or `watch` of the whole
 * collection. That is why resourceNames cannot be used to restrict those verbs.
 */
export function resourceNameMatches(rule: PolicyRule, name: string): boolean {
  const names = rule.resourceNames ?? [];
  return names.length === 0 || names.includes(name);
}

/** Exact path, `*`, or a prefix ending in `*` (`/healthz/*`, `/apis/*`). */
export function nonResourceURLMatches(rule: PolicyRule, path: string): boolean {
  for (const url of rule.nonResourceURLs ?? []) {
    if (url === ALL || url === path) return true;
    if (url.endsWith('*') && path.startsWith(url.replace(/\*+$/, ''))) return true;
  }
  return false;
}

function includesOrAll(values: readonly string[] | undefined, value: string): boolean {
  if (!values) return false;
  for (const v of values) if (v === ALL || v === value) return true;
  return false;
}

/**
 * ruleAllows for one request and many rules: what the request says (the combined resource name
 * above all) is worked out once, and each rule is then matched without making anything.
 */
export function ruleMatcher(attributes: AuthorizationAttributes): (rule: PolicyRule) => boolean {
  const verb = attributes.verb;
  if (isNonResource(attributes)) {
    const path = attributes.path;
    return (rule) => includesOrAll(rule.verbs, verb) && nonResourceURLMatches(rule, path);
  }
  const { group } = attributes;
  const subresource = attributes.subresource ?? '';
  const combined = subresource ? `${attributes.resource}/${subresource}` : attributes.resource;
  const anyOfSubresource = subresource ? `*/${subresource}` : undefined;
  const name = attributes.name ?? '';
  return (rule) => {
    if (!includesOrAll(rule.verbs, verb) || !includesOrAll(rule.apiGroups, group)) return false;
    let resource = false;
    for (const r of rule.resources ?? []) {
      if (r === ALL || r === combined || r === anyOfSubresource) {
        resource = true;
        break;
      }
    }
    return resource && resourceNameMatches(rule, name);
  };
}

export function ruleAllows(attributes: AuthorizationAttributes, rule: PolicyRule): boolean {
  if (isNonResource(attributes)) {
    return verbMatches(rule, attributes.verb) && nonResourceURLMatches(rule, attributes.path);
  }
  const subresource = attributes.subresource ?? '';
  const combined = subresource ? `${attributes.resource}/${subresource}` : attributes.resource;
  return (
    verbMatches(rule, attributes.verb) &&
    apiGroupMatches(rule, attributes.group) &&
    resourceMatches(rule, combined, subresource) &&
    resourceNameMatches(rule, attributes.name ?? '')
  );
}

export function serviceAccountUsername(namespace: string, name: string): string {
  return `${SERVICE_ACCOUNT_USER_PREFIX}${namespace}:${name}`;
}

/**
 * Whether a binding subject names this user. `bindingNamespace` is the RoleBinding's namespace
 * ('' for a ClusterRoleBinding): a ServiceAccount subject without a namespace means one in the
 * binding's namespace, and in a ClusterRoleBinding it matches nobody. A ServiceAccount is
 * matched by its user name `system:serviceaccount:<ns>:<name>`, as its tokens authenticate.
 * Subject kinds other than User, Group and ServiceAccount match nobody.
 */
export function subjectAppliesTo(user: UserInfo, subject: Subject, bindingNamespace: string): boolean {
  switch (subject.kind) {
    case 'User':
      return user.name === subject.name;
    case 'Group':
      return user.groups.includes(subject.name);
    case 'ServiceAccount': {
      const namespace = subject.namespace || bindingNamespace;
      if (!namespace) return false;
      return user.name === serviceAccountUsername(namespace, subject.name);
    }
    default:
      return false;
  }
}

/** The first subject of `binding` that names this user, or undefined. */
export function matchingSubject(user: UserInfo, binding: RoleBinding, bindingNamespace: string): Subject | undefined {
  return (binding.subjects ?? []).find((subject) => subjectAppliesTo(user, subject, bindingNamespace));
}

function describeSubject(subject: Subject, bindingNamespace: string): string {
  if (subject.kind === 'ServiceAccount') {
    return `${subject.kind} ${goQuote(`${subject.name}/${subject.namespace || bindingNamespace}`)}`;
  }
  return `${subject.kind} ${goQuote(subject.name)}`;
}

/**
 * Which binding granted a request, in kube's words: `ClusterRoleBinding "x" of ClusterRole "y" to
 * Group "z"`, or for a RoleBinding `RoleBinding "name/namespace" of Role "y" to User "u"`.
 */
export function describeGrant(binding: RoleBinding, subject: Subject, bindingNamespace: string): string {
  const ref = binding.roleRef;
  const name = bindingNamespace ? `${binding.metadata.name ?? ''}/${bindingNamespace}` : (binding.metadata.name ?? '');
  const kind = bindingNamespace ? 'RoleBinding' : 'ClusterRoleBinding';
  return `${kind} ${goQuote(name)} of ${ref.kind} ${goQuote(ref.name)} to ${describeSubject(subject, bindingNamespace)}`;
}
