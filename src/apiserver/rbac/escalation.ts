import type { Authorizer } from '../auth.js';
import { rulesFor, roleRefRules } from './authorizer.js';
import { aggregateMessages, goQuote, goQuoteList } from './go-format.js';
import { ALL } from './rules.js';
import {
  type ClusterRole,
  MASTERS_GROUP,
  type PolicyRule,
  RBAC_GROUP,
  type RbacRefusal,
  type RbacSource,
  type Role,
  type RoleBinding,
  type UserInfo,
} from './types.js';

/**
 * Escalation prevention, as Kubernetes' RBAC registry does it: nobody can grant, through a role
 * they write or a binding they create, a permission they do not hold themselves. Holding means
 * the writer's own RBAC rules cover every verb × group × resource × name of the granted rules.
 * The ways around it are explicit: membership of system:masters, the `escalate` verb on the
 * roles/clusterroles being written, or the `bind` verb on the role a binding refers to.
 */

/** `*` on everything: what setting an aggregationRule requires, since it can gather any rule. */
export const FULL_AUTHORITY: readonly PolicyRule[] = [
  { verbs: [ALL], apiGroups: [ALL], resources: [ALL] },
  { verbs: [ALL], nonResourceURLs: [ALL] },
];

/**
 * One rule as atomic rules of one verb, one group, one resource and at most one name (plus one
 * rule per non-resource URL and verb). Each atom is then covered or not by a single owner rule.
 */
export function breakdownRule(rule: PolicyRule): PolicyRule[] {
  const atoms: PolicyRule[] = [];
  for (const group of rule.apiGroups ?? []) {
    for (const resource of rule.resources ?? []) {
      for (const verb of rule.verbs ?? []) {
        const names = rule.resourceNames ?? [];
        if (names.length === 0) atoms.push({ apiGroups: [group], resources: [resource], verbs: [verb] });
        for (const name of names) atoms.push({ apiGroups: [group], resources: [resource], verbs: [verb], resourceNames: [name] });
      }
    }
  }
  for (const url of rule.nonResourceURLs ?? []) {
    for (const verb of rule.verbs ?? []) atoms.push({ nonResourceURLs: [url], verbs: [verb] });
  }
  return atoms;
}

function hasAll(set: readonly string[], wanted: readonly string[]): boolean {
  return wanted.every((item) => set.includes(item));
}

/** `*` covers everything; otherwise each wanted resource exactly, or its subresource through a rule for `*` + `/sub` (any resource's `sub`). */
function resourcesCovered(owner: readonly string[], wanted: readonly string[]): boolean {
  if (owner.includes(ALL)) return true;
  return wanted.every((resource) => {
    if (owner.includes(resource)) return true;
    const slash = resource.indexOf('/');
    return slash >= 0 && owner.includes(`*/${resource.slice(slash + 1)}`);
  });
}

function nonResourceURLsCovered(owner: readonly string[], wanted: readonly string[]): boolean {
  return wanted.every((path) =>
    owner.some((url) => url === path || (url.endsWith('*') && path.startsWith(url.replace(/\*+$/, '')))),
  );
}

/**
 * Whether one owner rule covers one atom. An owner rule with resourceNames covers only atoms for
 * those names, never an unnamed atom (a rule for any name is more than a rule for some names).
 */
function ruleCovers(owner: PolicyRule, atom: PolicyRule): boolean {
  const ownerVerbs = owner.verbs ?? [];
  const ownerGroups = owner.apiGroups ?? [];
  const ownerNames = owner.resourceNames ?? [];
  const atomNames = atom.resourceNames ?? [];
  const namesCovered = atomNames.length === 0 ? ownerNames.length === 0 : ownerNames.length === 0 || hasAll(ownerNames, atomNames);
  return (
    (ownerVerbs.includes(ALL) || hasAll(ownerVerbs, atom.verbs ?? [])) &&
    (ownerGroups.includes(ALL) || hasAll(ownerGroups, atom.apiGroups ?? [])) &&
    resourcesCovered(owner.resources ?? [], atom.resources ?? []) &&
    namesCovered &&
    nonResourceURLsCovered(owner.nonResourceURLs ?? [], atom.nonResourceURLs ?? [])
  );
}

/** validation.Covers: whether `owner` covers `requested`, and the atoms it does not cover. */
export function covers(owner: readonly PolicyRule[], requested: readonly PolicyRule[]): { covered: boolean; missing: PolicyRule[] } {
  const missing = requested.flatMap(breakdownRule).filter((atom) => !owner.some((rule) => ruleCovers(rule, atom)));
  return { covered: missing.length === 0, missing };
}

/**
 * Merges atoms that differ only in their verb (one group, one resource, at most one name, no
 * URLs) into one rule, so a missing `get, list, watch` on pods reads as one line.
 */
export function compactRules(rules: readonly PolicyRule[]): PolicyRule[] {
  const compacted: PolicyRule[] = [];
  const simple = new Map<string, PolicyRule>();
  for (const rule of rules) {
    const names = rule.resourceNames ?? [];
    const isSimple =
      names.length <= 1 &&
      (rule.nonResourceURLs ?? []).length === 0 &&
      (rule.apiGroups ?? []).length === 1 &&
      (rule.resources ?? []).length === 1;
    if (!isSimple) {
      compacted.push(rule);
      continue;
    }
    const key = JSON.stringify([rule.apiGroups![0], rule.resources![0], names.length === 1, names[0] ?? '']);
    const existing = simple.get(key);
    if (existing) existing.verbs = [...existing.verbs, ...(rule.verbs ?? [])];
    else simple.set(key, { ...rule, verbs: [...(rule.verbs ?? [])] });
  }
  return [...compacted, ...simple.values()];
}

/** `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`, as the escalation message lists rules. */
export function compactString(rule: PolicyRule): string {
  const parts: string[] = [];
  const field = (label: string, values: readonly string[] | undefined): void => {
    if (values && values.length > 0) parts.push(`${label}:${goQuoteList(values)}`);
  };
  field('APIGroups', rule.apiGroups);
  field('Resources', rule.resources);
  field('NonResourceURLs', rule.nonResourceURLs);
  field('ResourceNames', rule.resourceNames);
  field('Verbs', rule.verbs);
  return `{${parts.join(', ')}}`;
}

/**
 * Why `user` may not grant `rules` in `namespace` ('' for cluster scope), or undefined when
 * their own rules cover them:
 * `user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not
 * currently held:\n{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}` (one missing rule per
 * line, sorted), then `; resolution errors: [...]` when some of the user's bindings were unreadable.
 */
export function confirmNoEscalation(
  source: RbacSource,
  user: UserInfo,
  namespace: string,
  rules: readonly PolicyRule[],
): string | undefined {
  const owner = rulesFor(source, user, namespace, 'registry');
  const { covered, missing } = covers(owner.rules, rules);
  if (covered) return undefined;
  const lines = [...new Set(compactRules(missing).map(compactString))].sort();
  let message =
    `user ${goQuote(user.name)} (groups=${goQuoteList(user.groups)}) is attempting to grant RBAC permissions not currently held:\n` +
    lines.join('\n');
  if (owner.errors.length > 0) message += `; resolution errors: [${aggregateMessages(owner.errors)}]`;
  return message;
}

/** Whether the user is trusted to grant anything (system:masters, as the API server's own loopback user is). */
export function escalationAllowed(user: UserInfo): boolean {
  return user.groups.includes(MASTERS_GROUP);
}

export function hasAggregationRule(role: ClusterRole | undefined): boolean {
  return (role?.aggregationRule?.clusterRoleSelectors ?? []).length > 0;
}

/**
 * Whether an update changes only what the garbage collector and finalizers need (owner
 * references, finalizers; selfLink and managedFields are bookkeeping), so a role or binding
 * that already exists can always be released for deletion by whoever may update it.
 */
export function onlyGarbageCollectionFieldsChange(object: { metadata: object }, old: { metadata: object } | undefined): boolean {
  if (!old) return false;
  const oldMeta = old.metadata as Record<string, unknown>;
  const metadata: Record<string, unknown> = { ...(object.metadata as Record<string, unknown>) };
  for (const key of ['ownerReferences', 'finalizers', 'selfLink', 'managedFields']) {
    if (key in oldMeta) metadata[key] = oldMeta[key];
    else delete metadata[key];
  }
  return canonical({ ...object, metadata }) === canonical(old);
}

/** JSON with keys sorted, so two objects compare as data whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) => {
    if (inner === null || typeof inner !== 'object' || Array.isArray(inner)) return inner;
    return Object.fromEntries(Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  });
}

function refusal(resource: string, name: string, message: string, code: 403 | 404 = 403): RbacRefusal {
  const qualified = `${resource}.${RBAC_GROUP}`;
  return {
    code,
    reason: code === 403 ? 'Forbidden' : 'NotFound',
    group: RBAC_GROUP,
    resource,
    name,
    message: code === 404 ? message : name ? `${qualified} ${goQuote(name)} is forbidden: ${message}` : `${qualified} is forbidden: ${message}`,
  };
}

export interface RoleWrite {
  user: UserInfo;
  kind: 'Role' | 'ClusterRole';
  /** The Role's namespace; '' for a ClusterRole. */
  namespace: string;
  /** The name in the request path: absent on create, so `escalate` limited by resourceNames does not apply to it (as in kube). */
  pathName?: string;
  object: Role | ClusterRole;
  /** The stored object, on update and patch. */
  oldObject?: Role | ClusterRole;
}

/**
 * The check before storing a Role or ClusterRole (create, update, patch), or undefined when the
 * write may go ahead. `authorizer` is the full chain, asked whether the user may `escalate`.
 */
export function checkRoleWrite(write: RoleWrite, source: RbacSource, authorizer: Authorizer): RbacRefusal | undefined {
  const resource = write.kind === 'Role' ? 'roles' : 'clusterroles';
  const { user, object } = write;
  if (escalationAllowed(user)) return undefined;
  const escalate = authorizer.authorize(user, {
    verb: 'escalate',
    group: RBAC_GROUP,
    resource,
    ...(write.namespace ? { namespace: write.namespace } : {}),
    ...(write.pathName ? { name: write.pathName } : {}),
  });
  if (escalate.allowed) return undefined;
  if (write.oldObject && onlyGarbageCollectionFieldsChange(object, write.oldObject)) return undefined;
  const name = object.metadata.name ?? '';
  const why = confirmNoEscalation(source, user, write.namespace, object.rules ?? []);
  if (why !== undefined) return refusal(resource, name, why);
  if (write.kind === 'ClusterRole' && (hasAggregationRule(object as ClusterRole) || hasAggregationRule(write.oldObject as ClusterRole | undefined))) {
    if (confirmNoEscalation(source, user, '', FULL_AUTHORITY) !== undefined) {
      return refusal(resource, name, 'must have cluster-admin privileges to use the aggregationRule');
    }
  }
  return undefined;
}

export interface BindingWrite {
  user: UserInfo;
  kind: 'RoleBinding' | 'ClusterRoleBinding';
  /** The RoleBinding's namespace; '' for a ClusterRoleBinding. */
  namespace: string;
  object: RoleBinding;
  oldObject?: RoleBinding;
}

/**
 * The check before storing a RoleBinding or ClusterRoleBinding, or undefined when it may go
 * ahead: the user may `bind` the referenced role (in the binding's namespace, or cluster-wide for
 * a ClusterRoleBinding), or already holds every rule of it there. A binding to a role that does
 * not exist is answered 404 with the role's name, as kube does for a writer who could not bind it.
 */
export function checkBindingWrite(write: BindingWrite, source: RbacSource, authorizer: Authorizer): RbacRefusal | undefined {
  const resource = write.kind === 'RoleBinding' ? 'rolebindings' : 'clusterrolebindings';
  const { user, object } = write;
  if (escalationAllowed(user)) return undefined;
  if (write.oldObject && onlyGarbageCollectionFieldsChange(object, write.oldObject)) return undefined;
  const ref = object.roleRef;
  const name = object.metadata.name ?? '';
  if (ref.kind === 'Role' || ref.kind === 'ClusterRole') {
    const bind = authorizer.authorize(user, {
      verb: 'bind',
      group: ref.apiGroup,
      resource: ref.kind === 'Role' ? 'roles' : 'clusterroles',
      name: ref.name,
      ...(write.namespace ? { namespace: write.namespace } : {}),
    });
    if (bind.allowed) return undefined;
  }
  const resolved = roleRefRules(source, ref, write.namespace, 'registry');
  if (resolved.error !== undefined) {
    if (resolved.missing) return refusal(ref.kind === 'Role' ? 'roles' : 'clusterroles', ref.name, resolved.error, 404);
    return refusal(resource, name, resolved.error);
  }
  const why = confirmNoEscalation(source, user, write.namespace, resolved.rules);
  return why === undefined ? undefined : refusal(resource, name, why);
}
