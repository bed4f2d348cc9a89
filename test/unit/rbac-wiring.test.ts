import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { UserInfo } from '../../src/apiserver/auth.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { RbacAuthorizer } from '../../src/apiserver/rbac/authorizer.js';
import { ResourceVerbs } from '../../src/apiserver/verbs/verbs.js';
import { apiResourceList } from '../../src/apiserver/discovery.js';
import { NodeAuthorizer } from '../../src/cluster/node-authorization.js';
import { RbacCache } from '../../src/cluster/rbac-cache.js';
import { CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, NAMESPACES, ROLE_BINDINGS, ROLES } from '../../src/client/types.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { clusterRole, clusterRoleBinding, role, roleBinding, user } from '../helpers/rbac.js';
import { eventually } from '../helpers/server.js';

/**
 * The RBAC wiring in-process (in-memory SQLite, the real verb layer and LocalClient): the four
 * kinds' validation, escalation prevention on writes by a caller, the RbacCache the authorizer
 * reads, the authorizer chain (node authorizer first), and the access reviews as create-only kinds.
 */

const RBAC = 'rbac.authorization.k8s.io';
const bob: UserInfo = { name: 'bob', groups: ['system:authenticated'] };
const admin: UserInfo = { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] };
const node: UserInfo = { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };

/** The ApiError a promise rejects with. */
async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  assert.fail('expected an ApiError');
}

const asObject = (value: unknown): KubeObject => value as KubeObject;

describe('RBAC wiring', () => {
  let api: InProcessApi;
  let cache: RbacCache;
  let verbs: ResourceVerbs;
  let chain: NodeAuthorizer;

  beforeEach(async () => {
    api = await inProcessApi();
    for (const name of ['a', 'b']) await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    cache = new RbacCache(api.client, api.logger);
    await cache.start();
    chain = new NodeAuthorizer(new RbacAuthorizer(cache));
    verbs = new ResourceVerbs({ store: api.store, registry: api.registry, logger: api.logger, authorizer: chain, rbac: cache });
  });

  afterEach(async () => {
    cache.stop();
    await api.close();
  });

  const def = (plural: string, group = RBAC): NonNullable<ReturnType<typeof api.registry.lookup>> => api.registry.lookup(group, 'v1', plural)!;
  const as = (who: UserInfo) => ({ user: who });

  /** bob may read pods and write Roles and RoleBindings in namespace a; nothing else. */
  async function grantBob(): Promise<void> {
    await api.client.create(ROLES, 'a', asObject(role('a', 'bob-role', [
      { verbs: ['get', 'list'], apiGroups: [''], resources: ['pods'] },
      { verbs: ['create', 'update', 'patch', 'get'], apiGroups: [RBAC], resources: ['roles', 'rolebindings'] },
    ])));
    await api.client.create(ROLE_BINDINGS, 'a', asObject(roleBinding('a', 'bob', { kind: 'Role', name: 'bob-role' }, [user('bob')])));
    await eventually(() => cache.listRoleBindings('a').length === 1 && cache.getRole('a', 'bob-role'), 'the cache sees the grant');
  }

  it('validates the four kinds as kube-apiserver does, in its words', async () => {
    const role422 = await refusal(api.client.create(ROLES, 'a', asObject({ metadata: { name: 'r' }, rules: [{ verbs: [], apiGroups: [''], resources: ['pods'] }, { verbs: ['get'], nonResourceURLs: ['/logs'] }] })));
    assert.equal(role422.code, 422);
    assert.equal(
      role422.message,
      'Role.rbac.authorization.k8s.io "r" is invalid: [rules[0].verbs: Required value: verbs must contain at least one value, rules[1].nonResourceURLs: Invalid value: []string{"/logs"}: namespaced rules cannot apply to non-resource URLs]',
    );
    const cr422 = await refusal(api.client.create(CLUSTER_ROLES, undefined, asObject({ metadata: { name: 'c' }, rules: [{ verbs: ['get'] }], aggregationRule: {} })));
    assert.match(cr422.message, /rules\[0\]\.apiGroups: Required value: resource rules must supply at least one api group/);
    assert.match(cr422.message, /rules\[0\]\.resources: Required value: resource rules must supply at least one resource/);
    assert.match(cr422.message, /aggregationRule\.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil/);

    const binding422 = await refusal(
      api.client.create(CLUSTER_ROLE_BINDINGS, undefined, asObject({
        metadata: { name: 'x' },
        roleRef: { apiGroup: RBAC, kind: 'Role', name: 'r' },
        subjects: [{ kind: 'Robot', name: 'r2' }, { kind: 'ServiceAccount', name: 'sa' }, { kind: 'User', apiGroup: 'v1', name: 'u' }],
      })),
    );
    assert.equal(
      binding422.message,
      'ClusterRoleBinding.rbac.authorization.k8s.io "x" is invalid: [roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole", ' +
        'subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group", subjects[1].namespace: Required value, ' +
        'subjects[2].apiGroup: Unsupported value: "v1": supported values: "rbac.authorization.k8s.io"]',
    );
    // Names may hold colons (system:*), but not slashes.
    await api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('team:reader', [{ verbs: ['get'], apiGroups: [''], resources: ['pods'] }])));
    assert.match((await refusal(api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('a%b', []))))).message, /metadata\.name: Invalid value: "a%b": may not contain '%'/);
    // A malformed body is Go's decoding error, not a crash.
    const shape = await refusal(api.client.create(ROLES, 'a', asObject({ metadata: { name: 'r' }, rules: 'all' })));
    assert.equal(shape.code, 400);
    assert.equal(shape.message, 'Role in version "v1" cannot be handled as a Role: json: cannot unmarshal string into Go struct field Role.rules of type []v1.PolicyRule');
  });

  it('defaults subjects and roleRef groups, and refuses to change roleRef', async () => {
    const created = await api.client.create(ROLE_BINDINGS, 'a', asObject({
      metadata: { name: 'rb' },
      roleRef: { kind: 'ClusterRole', name: 'view' },
      subjects: [{ kind: 'User', name: 'u' }, { kind: 'ServiceAccount', name: 'sa' }],
    }));
    assert.deepEqual(created.roleRef, { kind: 'ClusterRole', name: 'view', apiGroup: RBAC });
    assert.deepEqual(created.subjects, [{ kind: 'User', name: 'u', apiGroup: RBAC }, { kind: 'ServiceAccount', name: 'sa' }]);
    const changed = await refusal(api.client.patch(ROLE_BINDINGS, 'a', 'rb', 'merge', { roleRef: { name: 'edit' } }));
    assert.equal(changed.code, 422);
    assert.equal(
      changed.message,
      'RoleBinding.rbac.authorization.k8s.io "rb" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef',
    );
  });

  it('refuses a Role granting what its writer does not hold, with kube-apiserver\'s message; allows what they hold', async () => {
    await grantBob();
    const grantDelete = role('a', 'deleter', [{ verbs: ['delete'], apiGroups: [''], resources: ['pods'] }]);
    const refused = await refusal(verbs.create(as(bob), def('roles'), 'a', asObject(grantDelete)));
    assert.equal(refused.code, 403);
    assert.equal(
      refused.message,
      'roles.rbac.authorization.k8s.io "deleter" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n' +
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}',
    );
    assert.deepEqual(refused.details, { name: 'deleter', group: RBAC, kind: 'roles' });
    assert.equal(await api.client.get(ROLES, 'a', 'deleter'), undefined, 'nothing stored');
    // Within what bob holds, in his namespace: fine. The same role in namespace b: not his to grant.
    const reader = role('a', 'reader', [{ verbs: ['get'], apiGroups: [''], resources: ['pods'] }]);
    await verbs.create(as(bob), def('roles'), 'a', asObject(structuredClone(reader)));
    assert.equal((await refusal(verbs.create(as(bob), def('roles'), 'b', asObject({ ...structuredClone(reader), metadata: { name: 'reader', namespace: 'b' } })))).code, 403);
    // Widening his own role by patch is refused too; the stored role is unchanged.
    const widened = await refusal(verbs.patch(as(bob), def('roles'), 'a', 'reader', 'merge', { rules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'] }] }));
    assert.equal(widened.code, 403);
    // The admin (system:masters) may grant anything.
    await verbs.create(as(admin), def('roles'), 'a', asObject(structuredClone(grantDelete)));
  });

  it('a binding needs the role\'s rules or the bind verb; a binding to a missing role is a 404', async () => {
    await grantBob();
    const toEdit = roleBinding('a', 'bob-edits', { kind: 'ClusterRole', name: 'edit' }, [user('carol')]);
    await api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('edit', [{ verbs: ['*'], apiGroups: [''], resources: ['pods'] }])));
    const refused = await refusal(verbs.create(as(bob), def('rolebindings'), 'a', asObject(structuredClone(toEdit))));
    assert.equal(refused.code, 403);
    assert.match(refused.message, /^rolebindings\.rbac\.authorization\.k8s\.io "bob-edits" is forbidden: user "bob" .* not currently held:\n\{APIGroups:\[""\], Resources:\["pods"\], Verbs:\["\*"\]\}$/s);
    // A role he holds all of: allowed.
    await verbs.create(as(bob), def('rolebindings'), 'a', asObject(roleBinding('a', 'bob-shares', { kind: 'Role', name: 'bob-role' }, [user('carol')])));
    const missing = await refusal(verbs.create(as(bob), def('rolebindings'), 'a', asObject(roleBinding('a', 'ghost', { kind: 'Role', name: 'nope' }, [user('carol')]))));
    assert.equal(missing.code, 404);
    assert.equal(missing.message, 'roles.rbac.authorization.k8s.io "nope" not found');
    // `bind` on that ClusterRole by name lets him bind it without holding it.
    await api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('binder', [{ verbs: ['bind'], apiGroups: [RBAC], resources: ['clusterroles'], resourceNames: ['edit'] }])));
    await api.client.create(ROLE_BINDINGS, 'a', asObject(roleBinding('a', 'bob-binds', { kind: 'ClusterRole', name: 'binder' }, [user('bob')])));
    await eventually(() => cache.listRoleBindings('a').some((b) => b.metadata.name === 'bob-binds'), 'the cache sees the bind grant');
    await verbs.create(as(bob), def('rolebindings'), 'a', asObject(structuredClone(toEdit)));
  });

  it('the RbacCache follows creates, updates and deletes', async () => {
    await api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('c1', [{ verbs: ['get'], apiGroups: [''], resources: ['pods'] }])));
    await eventually(() => cache.getClusterRole('c1'), 'created');
    await api.client.patch(CLUSTER_ROLES, undefined, 'c1', 'merge', { rules: [{ verbs: ['list'], apiGroups: [''], resources: ['pods'] }] });
    await eventually(() => cache.getClusterRole('c1')?.rules?.[0]?.verbs[0] === 'list', 'updated');
    await api.client.create(CLUSTER_ROLE_BINDINGS, undefined, asObject(clusterRoleBinding('cb1', 'c1', [user('u')])));
    await eventually(() => cache.listClusterRoleBindings().length === 1, 'binding seen');
    await api.client.delete(CLUSTER_ROLES, undefined, 'c1');
    await api.client.delete(CLUSTER_ROLE_BINDINGS, undefined, 'cb1');
    await eventually(() => !cache.getClusterRole('c1') && cache.listClusterRoleBindings().length === 0, 'deleted');
  });

  it('node credentials keep exactly the node authorizer\'s rights, whatever RBAC grants their groups', async () => {
    await api.client.create(CLUSTER_ROLES, undefined, asObject(clusterRole('all', [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'] }])));
    await api.client.create(CLUSTER_ROLE_BINDINGS, undefined, asObject(clusterRoleBinding('nodes-all', 'all', [{ kind: 'Group', apiGroup: RBAC, name: 'system:nodes' }])));
    await eventually(() => cache.listClusterRoleBindings().length === 1, 'binding seen');
    assert.equal(chain.authorize(node, { verb: 'list', group: '', resource: 'secrets', namespace: 'a' }).allowed, false);
    assert.equal(chain.authorize(node, { verb: 'get', group: '', resource: 'pods', namespace: 'a', name: 'p' }).allowed, true);
    assert.equal(chain.authorize(node, { verb: 'get', path: '/apis' }).allowed, true, 'discovery, as before RBAC');
    assert.equal(chain.authorize(bob, { verb: 'get', path: '/apis' }).allowed, false, 'no system:discovery binding in this store');
    assert.equal(chain.authorize(admin, { verb: 'delete', group: '', resource: 'nodes', name: 'n1' }).allowed, true);
  });

  it('serves the access reviews as create-only kinds: can-i, can-i --list, whoami, SubjectAccessReview', async () => {
    await grantBob();
    const review = (plural: string, group: string, who: UserInfo | undefined, body: object) =>
      verbs.create(who ? as(who) : {}, def(plural, group), undefined, asObject({ metadata: {}, ...body })).then((r) => r.object as unknown as { status: Record<string, unknown> });
    const ssar = (namespace: string) => ({ apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', metadata: {}, spec: { resourceAttributes: { namespace, verb: 'list', resource: 'pods' } } });
    assert.deepEqual((await review('selfsubjectaccessreviews', 'authorization.k8s.io', bob, ssar('a'))).status, {
      allowed: true,
      reason: 'RBAC: allowed by RoleBinding "bob/a" of Role "bob-role" to User "bob"',
    });
    assert.deepEqual((await review('selfsubjectaccessreviews', 'authorization.k8s.io', bob, ssar('b'))).status, { allowed: false });
    const bad = await refusal(review('selfsubjectaccessreviews', 'authorization.k8s.io', bob, { spec: {} }));
    assert.equal(bad.code, 422);
    const sar = await review('subjectaccessreviews', 'authorization.k8s.io', admin, { spec: { user: 'bob', groups: ['system:authenticated'], resourceAttributes: { namespace: 'a', verb: 'get', resource: 'pods' } } });
    assert.equal(sar.status.allowed, true);
    const rules = await review('selfsubjectrulesreviews', 'authorization.k8s.io', bob, { spec: { namespace: 'a' } });
    assert.deepEqual(rules.status.resourceRules, [
      { verbs: ['get', 'list'], apiGroups: [''], resources: ['pods'] },
      { verbs: ['create', 'update', 'patch', 'get'], apiGroups: [RBAC], resources: ['roles', 'rolebindings'] },
    ]);
    assert.equal((await refusal(review('selfsubjectrulesreviews', 'authorization.k8s.io', bob, { spec: {} }))).message, 'no namespace on request');
    const whoami = await review('selfsubjectreviews', 'authentication.k8s.io', bob, { metadata: {} });
    assert.deepEqual(whoami.status, { userInfo: { username: 'bob', groups: ['system:authenticated'] } });
    assert.equal((await refusal(review('selfsubjectreviews', 'authentication.k8s.io', undefined, {}))).code, 400, 'in-process callers have no identity');
    // Never stored: every other verb is a 405, and discovery lists only create.
    assert.equal((await refusal(Promise.resolve().then(() => verbs.list({}, def('selfsubjectaccessreviews', 'authorization.k8s.io'), undefined)))).code, 405);
    const list = apiResourceList(api.registry, 'authorization.k8s.io', 'v1') as { resources: Array<{ name: string; verbs: string[] }> };
    assert.deepEqual(list.resources.map((r) => [r.name, r.verbs]), [
      ['selfsubjectaccessreviews', ['create']],
      ['subjectaccessreviews', ['create']],
      ['selfsubjectrulesreviews', ['create']],
    ]);
  });
});
