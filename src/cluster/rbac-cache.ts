import type { KubeObject } from '../apiserver/objects.js';
import { InMemoryRbacSource } from '../apiserver/rbac/source.js';
import type { ClusterRole, ClusterRoleBinding, RbacSource, Role, RoleBinding, UserInfo } from '../apiserver/rbac/types.js';
import { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, type ResourceRef, ROLE_BINDINGS, ROLES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * The RBAC objects the authorizer reads, kept in memory by a list and a watch of each of the four
 * kinds on every server (not only the leader: every server authorizes its own requests), as
 * kube-apiserver's RBAC authorizer reads its informer caches. Reads are synchronous map lookups,
 * indexed by namespace and name, so authorizing costs no datastore read.
 *
 * A change takes effect when its watch event arrives, a moment after the write (tests poll).
 * Until the first lists are in, only system:masters (and node credentials, through the node
 * authorizer) can be allowed anything; start() resolves once they are.
 */
export class RbacCache implements RbacSource {
  private readonly objects = new InMemoryRbacSource();
  private readonly informers: SharedInformers;

  constructor(client: ApiClient, logger: Logger) {
    this.informers = new SharedInformers(client, logger.child({ component: 'rbac-cache' }));
    const follow = (ref: ResourceRef, put: (obj: KubeObject) => void, remove: (obj: KubeObject) => void): void =>
      this.informers.on(ref, (type, obj) => (type === 'DELETED' ? remove(obj) : put(obj)));
    const ns = (obj: KubeObject): string => obj.metadata.namespace ?? '';
    const name = (obj: KubeObject): string => obj.metadata.name ?? '';
    follow(ROLES, (o) => this.objects.putRole(o as unknown as Role), (o) => this.objects.deleteRole(ns(o), name(o)));
    follow(CLUSTER_ROLES, (o) => this.objects.putClusterRole(o as unknown as ClusterRole), (o) => this.objects.deleteClusterRole(name(o)));
    follow(ROLE_BINDINGS, (o) => this.objects.putRoleBinding(o as unknown as RoleBinding), (o) => this.objects.deleteRoleBinding(ns(o), name(o)));
    follow(
      CLUSTER_ROLE_BINDINGS,
      (o) => this.objects.putClusterRoleBinding(o as unknown as ClusterRoleBinding),
      (o) => this.objects.deleteClusterRoleBinding(name(o)),
    );
  }

  /** Lists and watches the four kinds; resolves after the first lists. */
  start(): Promise<void> {
    return this.informers.start();
  }

  stop(): void {
    this.informers.stop();
  }

  getRole(namespace: string, name: string): Role | undefined {
    return this.objects.getRole(namespace, name);
  }

  getClusterRole(name: string): ClusterRole | undefined {
    return this.objects.getClusterRole(name);
  }

  listRoleBindings(namespace: string): readonly RoleBinding[] {
    return this.objects.listRoleBindings(namespace);
  }

  listClusterRoleBindings(): readonly ClusterRoleBinding[] {
    return this.objects.listClusterRoleBindings();
  }

  bindingsFor(namespace: string, user: UserInfo): readonly RoleBinding[] {
    return this.objects.bindingsFor(namespace, user);
  }
}
