import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { aggregateAll } from '../../src/apiserver/rbac/aggregation.js';
import { decide, RbacAuthorizer } from '../../src/apiserver/rbac/authorizer.js';
import { defaultClusterRoleBindings, defaultClusterRoles } from '../../src/apiserver/rbac/defaults.js';
import { checkBindingWrite, covers } from '../../src/apiserver/rbac/escalation.js';
import { reconcileClusterRole, reconcileClusterRoleBinding } from '../../src/apiserver/rbac/reconcile.js';
import { InMemoryRbacSource } from '../../src/apiserver/rbac/source.js';
import type { AuthorizationAttributes, ClusterRole, UserInfo } from '../../src/apiserver/rbac/types.js';
import { roleBinding, saUser, user, who } from '../helpers/rbac.js';

/**
 * The default policy (src/apiserver/rbac/defaults.ts) evaluated by the real authorizer: what
 * every kind of caller may do in a fresh cluster, what admin/edit/view grant in a namespace,
 * and the start-up reconciliation of the stored defaults (reconcile.ts).
 */

const roles = defaultClusterRoles();
const bindings = defaultClusterRoleBindings();
const byName = (name: string): ClusterRole => roles.find((r) => r.metadata.name === name)!;

/** A cluster with the defaults, and ann as admin, ed as editor and vic as viewer of namespace team. */
function cluster(): InMemoryRbacSource {
  return new InMemoryRbacSource({
    clusterRoles: roles,
    clusterRoleBindings: bindings,
    roleBindings: [
      roleBinding('team', 'ann-admin', { kind: 'ClusterRole', name: 'admin' }, [user('ann')]),
      roleBinding('team', 'ed-edit', { kind: 'ClusterRole', name: 'edit' }, [user('ed')]),
      roleBinding('team', 'vic-view', { kind: 'ClusterRole', name: 'view' }, [user('vic')]),
    ],
  });
}

describe('the default policy objects', () => {
  it('are labelled rbac-defaults and marked for autoupdate', () => {
    for (const object of [...roles, ...bindings]) {
      assert.equal(object.metadata.labels?.['kubernetes.io/bootstrapping'], 'rbac-defaults', object.metadata.name);
      assert.equal(object.metadata.annotations?.['rbac.authorization.kubernetes.io/autoupdate'], 'true', object.metadata.name);
      assert.equal(object.apiVersion, 'rbac.authorization.k8s.io/v1');
    }
  });

  it('bind each default role to the groups Kubernetes binds it to', () => {
    const table = Object.fromEntries(bindings.map((b) => [b.metadata.name, [b.roleRef.name, (b.subjects ?? []).map((s) => `${s.kind}:${s.name}`)]]));
    assert.deepEqual(table, {
      'cluster-admin': ['cluster-admin', ['Group:system:masters']],
      'system:basic-user': ['system:basic-user', ['Group:system:authenticated']],
      'system:discovery': ['system:discovery', ['Group:system:authenticated']],
      'system:public-info-viewer': ['system:public-info-viewer', ['Group:system:authenticated', 'Group:system:unauthenticated']],
      'system:service-account-issuer-discovery': ['system:service-account-issuer-discovery', ['Group:system:serviceaccounts']],
      'system:monitoring': ['system:monitoring', ['Group:system:monitoring']],
    });
    for (const b of bindings) assert.ok(byName(b.roleRef.name), `${b.roleRef.name} exists`);
  });

  it('come with admin ⊇ edit ⊇ view already aggregated, and stable under aggregation', () => {
    assert.ok(byName('view').rules!.length > 0);
    assert.equal(covers(byName('edit').rules!, byName('view').rules!).covered, true);
    assert.equal(covers(byName('admin').rules!, byName('edit').rules!).covered, true);
    assert.equal(covers(byName('view').rules!, byName('edit').rules!).covered, false);
    const again = aggregateAll(roles);
    assert.equal(again.converged, true);
    assert.deepEqual(again.clusterRoles, roles);
  });
});

const masters: UserInfo = { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] };
const anonymous: UserInfo = { name: 'system:anonymous', groups: ['system:unauthenticated'] };
const nodeUser: UserInfo = { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };

function r(verb: string, group: string, resource: string, namespace?: string, subresource?: string, name?: string): AuthorizationAttributes {
  return { verb, group, resource, ...(namespace ? { namespace } : {}), ...(subresource ? { subresource } : {}), ...(name ? { name } : {}) };
}

const cases: Array<[string, UserInfo, AuthorizationAttributes, boolean]> = [
  // cluster-admin by group, through the binding itself (not the authorizer's fast path).
  ['masters: delete nodes', masters, r('delete', '', 'nodes', undefined, undefined, 'n1'), true],
  ['masters: any path', masters, { verb: 'post', path: '/anything' }, true],
  // Every signed-in user.
  ['authenticated: can-i', who('u'), r('create', 'authorization.k8s.io', 'selfsubjectaccessreviews'), true],
  ['authenticated: can-i --list', who('u'), r('create', 'authorization.k8s.io', 'selfsubjectrulesreviews'), true],
  ['authenticated: whoami', who('u'), r('create', 'authentication.k8s.io', 'selfsubjectreviews'), true],
  ['authenticated: not SubjectAccessReview', who('u'), r('create', 'authorization.k8s.io', 'subjectaccessreviews'), false],
  ['authenticated: discovery /apis/apps/v1', who('u'), { verb: 'get', path: '/apis/apps/v1' }, true],
  ['authenticated: /openapi/v3/apis/apps/v1', who('u'), { verb: 'get', path: '/openapi/v3/apis/apps/v1' }, true],
  ['authenticated: /version', who('u'), { verb: 'get', path: '/version' }, true],
  ['authenticated: not /metrics', who('u'), { verb: 'get', path: '/metrics' }, false],
  ['authenticated: not list pods', who('u'), r('list', '', 'pods', 'team'), false],
  ['authenticated: not post to discovery', who('u'), { verb: 'post', path: '/api' }, false],
  // Anonymous callers see only public information.
  ['anonymous: /healthz', anonymous, { verb: 'get', path: '/healthz' }, true],
  ['anonymous: /readyz', anonymous, { verb: 'get', path: '/readyz' }, true],
  ['anonymous: not /api', anonymous, { verb: 'get', path: '/api' }, false],
  ['anonymous: not can-i', anonymous, r('create', 'authorization.k8s.io', 'selfsubjectaccessreviews'), false],
  // ServiceAccounts: their issuer discovery; nothing else by default.
  ['service account: jwks', saUser('team', 'app'), { verb: 'get', path: '/openid/v1/jwks' }, true],
  ['service account: openid-configuration', saUser('team', 'app'), { verb: 'get', path: '/.well-known/openid-configuration' }, true],
  ['service account: not pods', saUser('team', 'app'), r('get', '', 'pods', 'team', undefined, 'p'), false],
  ['monitoring group: /metrics', { name: 'prom', groups: ['system:monitoring', 'system:authenticated'] }, { verb: 'get', path: '/metrics' }, true],
  ['a node gets nothing from RBAC (the node authorizer judges it)', nodeUser, r('get', '', 'pods', 'team', undefined, 'p'), false],
  // view
  ['view: get pods', who('vic'), r('get', '', 'pods', 'team', undefined, 'p'), true],
  ['view: pod logs', who('vic'), r('get', '', 'pods', 'team', 'log', 'p'), true],
  ['view: list deployments', who('vic'), r('list', 'apps', 'deployments', 'team'), true],
  ['view: watch jobs', who('vic'), r('watch', 'batch', 'jobs', 'team'), true],
  ['view: controllerrevisions (rollout history)', who('vic'), r('list', 'apps', 'controllerrevisions', 'team'), true],
  ['view: not writing controllerrevisions', who('vic'), r('create', 'apps', 'controllerrevisions', 'team'), false],
  ['view: endpointslices', who('vic'), r('list', 'discovery.k8s.io', 'endpointslices', 'team'), true],
  ['view: its own Namespace (the HTTP layer puts a namespace request in that namespace)', who('vic'), r('get', '', 'namespaces', 'team', undefined, 'team'), true],
  ['view: not another Namespace', who('vic'), r('get', '', 'namespaces', 'other', undefined, 'other'), false],
  ['view: not secrets', who('vic'), r('get', '', 'secrets', 'team', undefined, 's'), false],
  ['view: not create pods', who('vic'), r('create', '', 'pods', 'team'), false],
  ['view: not exec', who('vic'), r('create', '', 'pods', 'team', 'exec', 'p'), false],
  ['view: not roles', who('vic'), r('list', 'rbac.authorization.k8s.io', 'roles', 'team'), false],
  ['view: only in its namespace', who('vic'), r('get', '', 'pods', 'other', undefined, 'p'), false],
  // edit
  ['edit: create pods', who('ed'), r('create', '', 'pods', 'team'), true],
  ['edit: exec', who('ed'), r('create', '', 'pods', 'team', 'exec', 'p'), true],
  ['edit: exec over a websocket GET', who('ed'), r('get', '', 'pods', 'team', 'exec', 'p'), true],
  ['edit: portforward', who('ed'), r('create', '', 'pods', 'team', 'portforward', 'p'), true],
  ['edit: evict', who('ed'), r('create', '', 'pods', 'team', 'eviction', 'p'), true],
  ['edit: read secrets', who('ed'), r('get', '', 'secrets', 'team', undefined, 's'), true],
  ['edit: write configmaps', who('ed'), r('update', '', 'configmaps', 'team', undefined, 'c'), true],
  ['edit: token for a service account', who('ed'), r('create', '', 'serviceaccounts', 'team', 'token', 'app'), true],
  ['edit: impersonate a service account', who('ed'), r('impersonate', '', 'serviceaccounts', 'team', undefined, 'app'), true],
  ['edit: scale a deployment', who('ed'), r('patch', 'apps', 'deployments', 'team', 'scale', 'd'), true],
  ['edit: daemonsets', who('ed'), r('create', 'apps', 'daemonsets', 'team'), true],
  ['edit: cronjobs', who('ed'), r('delete', 'batch', 'cronjobs', 'team', undefined, 'c'), true],
  ['edit: pod disruption budgets', who('ed'), r('create', 'policy', 'poddisruptionbudgets', 'team'), true],
  ['edit: not endpoints writes', who('ed'), r('update', '', 'endpoints', 'team', undefined, 'svc'), false],
  ['edit: not endpointslice writes', who('ed'), r('create', 'discovery.k8s.io', 'endpointslices', 'team'), false],
  ['edit: not pod status writes', who('ed'), r('update', '', 'pods', 'team', 'status', 'p'), false],
  ['edit: not roles', who('ed'), r('create', 'rbac.authorization.k8s.io', 'roles', 'team'), false],
  ['edit: not the namespace itself', who('ed'), r('delete', '', 'namespaces', 'team', undefined, 'team'), false],
  // admin
  ['admin: roles', who('ann'), r('create', 'rbac.authorization.k8s.io', 'roles', 'team'), true],
  ['admin: rolebindings', who('ann'), r('delete', 'rbac.authorization.k8s.io', 'rolebindings', 'team', undefined, 'b'), true],
  ['admin: everything edit can', who('ann'), r('create', '', 'pods', 'team', 'exec', 'p'), true],
  // As Kubernetes' default roles: adding a container to a running pod is not granted by admin or
  // edit (older admission policies do not see ephemeral containers); cluster-admin has it.
  ['admin: not ephemeral containers', who('ann'), r('patch', '', 'pods', 'team', 'ephemeralcontainers', 'p'), false],
  ['edit: not ephemeral containers', who('ed'), r('update', '', 'pods', 'team', 'ephemeralcontainers', 'p'), false],
  ['masters: ephemeral containers', masters, r('patch', '', 'pods', 'team', 'ephemeralcontainers', 'p'), true],
  ['admin: not escalate', who('ann'), r('escalate', 'rbac.authorization.k8s.io', 'roles', 'team', undefined, 'r'), false],
  ['admin: not clusterroles', who('ann'), r('create', 'rbac.authorization.k8s.io', 'clusterroles', ''), false],
  ['admin: not nodes', who('ann'), r('list', '', 'nodes'), false],
];

describe('what the default policy allows', () => {
  const source = cluster();
  for (const [name, u, request, allowed] of cases) {
    it(name, () => assert.equal(decide(source, u, request).allowed, allowed));
  }

  it('an admin may grant edit in the namespace, but not cluster-admin', () => {
    const authorizer = new RbacAuthorizer(source);
    const grant = (roleName: string) =>
      checkBindingWrite(
        { user: who('ann'), kind: 'RoleBinding', namespace: 'team', object: roleBinding('team', 'x', { kind: 'ClusterRole', name: roleName }, [user('kim')]) },
        source,
        authorizer,
      );
    assert.equal(grant('edit'), undefined);
    assert.equal(grant('view'), undefined);
    assert.equal(grant('admin'), undefined);
    assert.match(grant('cluster-admin')?.message ?? '', /is attempting to grant RBAC permissions not currently held:\n\{APIGroups:\["\*"\], Resources:\["\*"\], Verbs:\["\*"\]\}\n\{NonResourceURLs:\["\*"\], Verbs:\["\*"\]\}$/);
  });
});

describe('reconciling the stored defaults at start', () => {
  const view = byName('view');
  const basic = byName('system:basic-user');

  it('creates what is missing and leaves what matches', () => {
    assert.deepEqual(reconcileClusterRole(undefined, basic), { action: 'create', object: basic });
    assert.deepEqual(reconcileClusterRole(structuredClone(basic), basic), { action: 'none' });
    assert.deepEqual(reconcileClusterRoleBinding(structuredClone(bindings[0]), bindings[0]!), { action: 'none' });
  });

  it('adds back a removed rule and keeps rules an administrator added', () => {
    const stored = structuredClone(basic);
    stored.rules = [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get'] }];
    const result = reconcileClusterRole(stored, basic);
    assert.equal(result.action, 'update');
    const rules = (result as { object: ClusterRole }).object.rules!;
    assert.deepEqual(rules[0], { apiGroups: [''], resources: ['configmaps'], verbs: ['get'] });
    assert.equal(covers(rules, basic.rules!).covered, true);
  });

  it('adds missing labels and annotations, keeping stored values', () => {
    const stored = structuredClone(basic);
    stored.metadata.labels = { mine: 'yes' };
    stored.metadata.annotations = { 'rbac.authorization.kubernetes.io/autoupdate': 'true', note: 'kept' };
    const result = reconcileClusterRole(stored, basic) as { action: string; object: ClusterRole };
    assert.equal(result.action, 'update');
    assert.deepEqual(result.object.metadata.labels, { 'kubernetes.io/bootstrapping': 'rbac-defaults', mine: 'yes' });
    assert.equal(result.object.metadata.annotations?.note, 'kept');
  });

  it('leaves an object marked autoupdate=false alone', () => {
    const stored = structuredClone(basic);
    stored.rules = [];
    stored.metadata.annotations = { 'rbac.authorization.kubernetes.io/autoupdate': 'false' };
    assert.deepEqual(reconcileClusterRole(stored, basic), { action: 'protected' });
    const binding = structuredClone(bindings[0]!);
    binding.subjects = [];
    binding.metadata.annotations = { 'rbac.authorization.kubernetes.io/autoupdate': 'false' };
    assert.deepEqual(reconcileClusterRoleBinding(binding, bindings[0]!), { action: 'protected' });
  });

  it('does not touch the rules of an aggregated role, but restores its selectors', () => {
    const stored = structuredClone(view);
    stored.rules = [];
    assert.deepEqual(reconcileClusterRole(stored, view), { action: 'none' });
    stored.aggregationRule = { clusterRoleSelectors: [{ matchLabels: { extra: 'true' } }] };
    const result = reconcileClusterRole(stored, view) as { action: string; object: ClusterRole };
    assert.equal(result.action, 'update');
    assert.deepEqual(result.object.aggregationRule?.clusterRoleSelectors, [{ matchLabels: { extra: 'true' } }, ...view.aggregationRule!.clusterRoleSelectors!]);
  });

  it('adds missing subjects, keeps extra ones, and recreates a binding whose roleRef changed', () => {
    const wanted = bindings.find((b) => b.metadata.name === 'system:public-info-viewer')!;
    const stored = structuredClone(wanted);
    stored.subjects = [user('extra')];
    const result = reconcileClusterRoleBinding(stored, wanted) as { action: string; object: typeof wanted };
    assert.equal(result.action, 'update');
    assert.deepEqual(result.object.subjects!.map((s) => s.name), ['extra', 'system:authenticated', 'system:unauthenticated']);
    const moved = structuredClone(wanted);
    moved.metadata = { ...moved.metadata, uid: 'u1', resourceVersion: '9', creationTimestamp: '2025-01-01T00:00:00Z' };
    moved.roleRef = { ...moved.roleRef, name: 'view' };
    const recreated = reconcileClusterRoleBinding(moved, wanted) as { action: string; object: typeof wanted };
    assert.equal(recreated.action, 'recreate');
    assert.equal(recreated.object.roleRef.name, 'system:public-info-viewer');
    assert.equal(recreated.object.metadata.uid, undefined);
    assert.equal(recreated.object.metadata.resourceVersion, undefined);
  });
});
