import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { defaultClusterRoleBindings, defaultClusterRoles } from '../apiserver/rbac/defaults.js';
import { type Reconciliation, reconcileClusterRole, reconcileClusterRoleBinding } from '../apiserver/rbac/reconcile.js';
import { type ApiClient, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, type ResourceRef } from '../client/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * The default RBAC policy brought back to ../apiserver/rbac/defaults.ts at every server start, as
 * kube-apiserver reconciles its bootstrap roles: missing ClusterRoles and ClusterRoleBindings are
 * created, stored ones get what is missing added (reconcile.ts), and those an administrator
 * marked `rbac.authorization.kubernetes.io/autoupdate: "false"` are left alone.
 *
 * Several servers may start at once on one datastore: each write is a create (409 if another got
 * there first) or a compare-and-swap update (409 if another changed it), and a 409 is met by
 * reading again and reconciling once more.
 */

const ATTEMPTS = 5;

type Reconcile<T> = (stored: T | undefined, wanted: T) => Reconciliation<T>;

async function reconcileOne<T extends { metadata: { name?: string } }>(
  client: ApiClient,
  ref: ResourceRef,
  wanted: T,
  reconcile: Reconcile<T>,
  logger: Logger,
): Promise<void> {
  const name = wanted.metadata.name!;
  for (let attempt = 1; ; attempt++) {
    const stored = (await client.get(ref, undefined, name)) as unknown as T | undefined;
    const plan = reconcile(stored, wanted);
    try {
      switch (plan.action) {
        case 'none':
          return;
        case 'protected':
          logger.info({ resource: ref.plural, name }, 'default RBAC object differs from the default but is marked autoupdate=false; left as it is');
          return;
        case 'create':
          await client.create(ref, undefined, plan.object as unknown as KubeObject);
          break;
        case 'update':
          // reconcile() keeps the stored resourceVersion: a compare-and-swap.
          await client.update(ref, undefined, plan.object as unknown as KubeObject);
          break;
        case 'recreate':
          await client.delete(ref, undefined, name, { preconditions: { uid: (stored as unknown as KubeObject).metadata.uid! } });
          await client.create(ref, undefined, plan.object as unknown as KubeObject);
          break;
      }
      logger.debug({ resource: ref.plural, name, action: plan.action }, 'reconciled a default RBAC object');
      return;
    } catch (error) {
      const raced = error instanceof ApiError && (error.code === 409 || error.code === 404);
      if (!raced || attempt >= ATTEMPTS) throw error;
    }
  }
}

/** Creates or completes the default ClusterRoles, then their bindings. */
export async function reconcileDefaultRbac(client: ApiClient, logger: Logger): Promise<void> {
  for (const role of defaultClusterRoles()) await reconcileOne(client, CLUSTER_ROLES, role, reconcileClusterRole, logger);
  for (const binding of defaultClusterRoleBindings()) {
    await reconcileOne(client, CLUSTER_ROLE_BINDINGS, binding, reconcileClusterRoleBinding, logger);
  }
}
