import type {
  ClusterRole,
  ClusterRoleBinding,
  PolicyRule,
  Role,
  RoleBinding,
  Subject,
  UserInfo,
} from '../../src/apiserver/rbac/types.js';

/** Builders for RBAC objects in the unit tests: the wire shapes, with only what a case needs. */

export function clusterRole(name: string, rules: PolicyRule[], extra: Partial<ClusterRole> = {}): ClusterRole {
  return { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name }, rules, ...extra };
}

export function role(namespace: string, name: string, rules: PolicyRule[]): Role {
  return { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name, namespace }, rules };
}

export function user(name: string): Subject {
  return { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name };
}

export function group(name: string): Subject {
  return { kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name };
}

export function serviceAccount(name: string, namespace?: string): Subject {
  return { kind: 'ServiceAccount', name, ...(namespace ? { namespace } : {}) };
}

export function clusterRoleBinding(name: string, roleName: string, subjects: Subject[]): ClusterRoleBinding {
  return {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: roleName },
    subjects,
  };
}

export function roleBinding(
  namespace: string,
  name: string,
  ref: { kind: 'Role' | 'ClusterRole'; name: string },
  subjects: Subject[],
): RoleBinding {
  return {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name, namespace },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', ...ref },
    subjects,
  };
}

/** A signed-in user as Drover's authenticators describe one (system:authenticated included). */
export function who(name: string, ...groups: string[]): UserInfo {
  return { name, groups: [...groups, 'system:authenticated'] };
}

/** A ServiceAccount's user, as its token authenticates. */
export function saUser(namespace: string, name: string): UserInfo {
  return {
    name: `system:serviceaccount:${namespace}:${name}`,
    groups: ['system:serviceaccounts', `system:serviceaccounts:${namespace}`, 'system:authenticated'],
  };
}
