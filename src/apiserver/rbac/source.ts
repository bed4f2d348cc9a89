import { matchingSubject } from './rules.js';
import type { ClusterRole, ClusterRoleBinding, RbacSource, Role, RoleBinding, UserInfo } from './types.js';

/**
 * An RbacSource over plain arrays of objects: for tests, and for checks made against a set of
 * objects that is not stored (the default policy). Keyed like an informer cache (namespace/name),
 * so a later object with the same key replaces the earlier one. Lists keep insertion order.
 */

export interface RbacObjects {
  roles?: readonly Role[];
  clusterRoles?: readonly ClusterRole[];
  roleBindings?: readonly RoleBinding[];
  clusterRoleBindings?: readonly ClusterRoleBinding[];
}

function nameOf(object: { metadata: { name?: string } }): string {
  return object.metadata.name ?? '';
}

function namespaceOf(object: { metadata: { namespace?: string } }): string {
  return object.metadata.namespace ?? '';
}

/** How many (namespace, user) answers bindingsFor() keeps before starting over. */
const MAX_REMEMBERED_USERS = 10_000;

export class InMemoryRbacSource implements RbacSource {
  private readonly roles = new Map<string, Map<string, Role>>();
  private readonly clusterRoles = new Map<string, ClusterRole>();
  private readonly roleBindings = new Map<string, Map<string, RoleBinding>>();
  private readonly clusterRoleBindings = new Map<string, ClusterRoleBinding>();
  /**
   * The lists handed out, kept until the next change: the authorizer asks for them on every
   * request, and copying them each time was most of a decision's cost.
   */
  private clusterRoleBindingList: readonly ClusterRoleBinding[] | undefined;
  private readonly roleBindingLists = new Map<string, readonly RoleBinding[]>();
  /** bindingsFor() answers, per namespace and user, until the next binding changes. */
  /** User (name and groups) → namespace → the bindings naming them. */
  private readonly userBindings = new Map<string, Map<string, readonly RoleBinding[]>>();
  /** How many lists userBindings holds. */
  private remembered = 0;
  /**
   * The name-and-groups part of a user's key, per user object: authenticators hand the same
   * object to every request of a connection (certificates) or of a token (ServiceAccounts).
   */
  private readonly userKeys = new WeakMap<UserInfo, string>();

  constructor(objects: RbacObjects = {}) {
    for (const role of objects.roles ?? []) this.putRole(role);
    for (const role of objects.clusterRoles ?? []) this.putClusterRole(role);
    for (const binding of objects.roleBindings ?? []) this.putRoleBinding(binding);
    for (const binding of objects.clusterRoleBindings ?? []) this.putClusterRoleBinding(binding);
  }

  putRole(role: Role): void {
    inNamespace(this.roles, namespaceOf(role)).set(nameOf(role), role);
  }

  putClusterRole(role: ClusterRole): void {
    this.clusterRoles.set(nameOf(role), role);
  }

  putRoleBinding(binding: RoleBinding): void {
    inNamespace(this.roleBindings, namespaceOf(binding)).set(nameOf(binding), binding);
    this.roleBindingLists.delete(namespaceOf(binding));
    this.forgetUserBindings();
  }

  putClusterRoleBinding(binding: ClusterRoleBinding): void {
    this.clusterRoleBindings.set(nameOf(binding), binding);
    this.clusterRoleBindingList = undefined;
    this.forgetUserBindings();
  }

  deleteRole(namespace: string, name: string): void {
    this.roles.get(namespace)?.delete(name);
  }

  deleteClusterRole(name: string): void {
    this.clusterRoles.delete(name);
  }

  deleteRoleBinding(namespace: string, name: string): void {
    this.roleBindings.get(namespace)?.delete(name);
    this.roleBindingLists.delete(namespace);
    this.forgetUserBindings();
  }

  deleteClusterRoleBinding(name: string): void {
    this.clusterRoleBindings.delete(name);
    this.clusterRoleBindingList = undefined;
    this.forgetUserBindings();
  }

  getRole(namespace: string, name: string): Role | undefined {
    return this.roles.get(namespace)?.get(name);
  }

  getClusterRole(name: string): ClusterRole | undefined {
    return this.clusterRoles.get(name);
  }

  listRoleBindings(namespace: string): readonly RoleBinding[] {
    let list = this.roleBindingLists.get(namespace);
    if (!list) {
      list = Object.freeze([...(this.roleBindings.get(namespace)?.values() ?? [])]);
      this.roleBindingLists.set(namespace, list);
    }
    return list;
  }

  listClusterRoleBindings(): readonly ClusterRoleBinding[] {
    this.clusterRoleBindingList ??= Object.freeze([...this.clusterRoleBindings.values()]);
    return this.clusterRoleBindingList;
  }

  bindingsFor(namespace: string, user: UserInfo): readonly RoleBinding[] {
    // Subjects match by name, groups and (for ServiceAccounts) the name alone, so these decide.
    let who = this.userKeys.get(user);
    if (who === undefined) {
      who = `${user.name}\u0000${user.groups.join('\u0000')}`;
      this.userKeys.set(user, who);
    }
    let byNamespace = this.userBindings.get(who);
    let list = byNamespace?.get(namespace);
    if (!list) {
      const all = namespace ? this.listRoleBindings(namespace) : this.listClusterRoleBindings();
      list = Object.freeze(all.filter((binding) => matchingSubject(user, binding, namespace) !== undefined));
      // Bounded: many users times many namespaces must not grow without end.
      if (this.remembered >= MAX_REMEMBERED_USERS) {
        this.forgetUserBindings();
        byNamespace = undefined;
      }
      if (!byNamespace) {
        byNamespace = new Map();
        this.userBindings.set(who, byNamespace);
      }
      byNamespace.set(namespace, list);
      this.remembered++;
    }
    return list;
  }

  private forgetUserBindings(): void {
    this.userBindings.clear();
    this.remembered = 0;
  }

  /** Every ClusterRole, for aggregation. */
  listClusterRoles(): readonly ClusterRole[] {
    return [...this.clusterRoles.values()];
  }
}

function inNamespace<T>(byNamespace: Map<string, Map<string, T>>, namespace: string): Map<string, T> {
  let objects = byNamespace.get(namespace);
  if (!objects) {
    objects = new Map();
    byNamespace.set(namespace, objects);
  }
  return objects;
}
