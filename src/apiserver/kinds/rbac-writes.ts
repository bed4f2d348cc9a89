import type { Authorizer } from '../auth.js';
import type { CallerWrite, KindContext } from '../definition.js';
import { ApiError } from '../errors.js';
import type { KubeObject } from '../objects.js';
import { checkBindingWrite, checkRoleWrite, escalationAllowed } from '../rbac/escalation.js';
import { InMemoryRbacSource } from '../rbac/source.js';
import { RBAC_GROUP, type ClusterRole, type RbacRefusal, type RbacSource, type Role, type RoleBinding } from '../rbac/types.js';

/**
 * Escalation prevention on the writes of the four RBAC kinds, as kube-apiserver's RBAC registry
 * does it before storing: a caller may not create or change a role granting what they do not
 * hold (unless they may `escalate`), nor a binding to a role whose rules they do not hold (unless
 * they may `bind` it). The decision itself is ../rbac/escalation.ts; this reads what it needs.
 *
 * The caller's own rules are read from the store, not from the authorizer's informer cache, as
 * kube's registry does: a Role created a moment ago is already there for the binding that follows.
 * Members of system:masters skip it all without a read, so the admin's writes cost nothing extra.
 */

/** Nobody may escalate or bind through a missing authorizer: only held rules count then. */
const DENY_ALL: Authorizer = { authorize: () => ({ allowed: false, reason: '' }) };

/** The RBAC objects the escalation checks need for a write in `namespace` ('' for cluster scope), read from the store. */
export async function storeRbacSource(context: KindContext, namespace: string): Promise<RbacSource> {
  const list = async (plural: string, ns: string | undefined): Promise<KubeObject[]> => {
    const def = context.kinds.lookup(RBAC_GROUP, 'v1', plural);
    if (!def) return [];
    return (await context.store.list(def, ns, { labelSelector: [], fieldSelector: [] })).items;
  };
  const [clusterRoles, clusterRoleBindings, roles, roleBindings] = await Promise.all([
    list('clusterroles', undefined),
    list('clusterrolebindings', undefined),
    namespace ? list('roles', namespace) : Promise.resolve([]),
    namespace ? list('rolebindings', namespace) : Promise.resolve([]),
  ]);
  return new InMemoryRbacSource({
    clusterRoles: clusterRoles as unknown as ClusterRole[],
    clusterRoleBindings: clusterRoleBindings as unknown as RoleBinding[],
    roles: roles as unknown as Role[],
    roleBindings: roleBindings as unknown as RoleBinding[],
  });
}

/** The refusal as the Status kube-apiserver answers (403 Forbidden, or 404 for a binding to a missing role). */
function refusalError(refusal: RbacRefusal): ApiError {
  return new ApiError(refusal.code, refusal.reason, refusal.message, {
    ...(refusal.name ? { name: refusal.name } : {}),
    group: refusal.group,
    kind: refusal.resource,
  });
}

/**
 * The object and the stored one as the "only owner references or finalizers change" rule must
 * compare them: a PUT body carries the resourceVersion it was read at, the stored copy none.
 */
function withoutVersion<T extends KubeObject | undefined>(obj: T): T {
  if (!obj) return obj;
  const { resourceVersion: _version, ...metadata } = obj.metadata;
  return { ...obj, metadata } as T;
}

export async function authorizeRoleWrite(context: KindContext, kind: 'Role' | 'ClusterRole', write: CallerWrite): Promise<void> {
  if (escalationAllowed(write.user)) return;
  const namespace = kind === 'Role' ? (write.namespace ?? '') : '';
  const source = await storeRbacSource(context, namespace);
  const refusal = checkRoleWrite(
    {
      user: write.user,
      kind,
      namespace,
      ...(write.name ? { pathName: write.name } : {}),
      object: withoutVersion(write.object) as unknown as Role,
      ...(write.oldObject ? { oldObject: withoutVersion(write.oldObject) as unknown as Role } : {}),
    },
    source,
    context.authorizer ?? DENY_ALL,
  );
  if (refusal) throw refusalError(refusal);
}

export async function authorizeBindingWrite(
  context: KindContext,
  kind: 'RoleBinding' | 'ClusterRoleBinding',
  write: CallerWrite,
): Promise<void> {
  if (escalationAllowed(write.user)) return;
  const namespace = kind === 'RoleBinding' ? (write.namespace ?? '') : '';
  const source = await storeRbacSource(context, namespace);
  const refusal = checkBindingWrite(
    {
      user: write.user,
      kind,
      namespace,
      object: withoutVersion(write.object) as unknown as RoleBinding,
      ...(write.oldObject ? { oldObject: withoutVersion(write.oldObject) as unknown as RoleBinding } : {}),
    },
    source,
    context.authorizer ?? DENY_ALL,
  );
  if (refusal) throw refusalError(refusal);
}
