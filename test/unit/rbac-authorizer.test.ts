import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { decide, forbiddenMessage, forbiddenRefusal, RbacAuthorizer, rulesFor } from '../../src/apiserver/rbac/authorizer.js';
import { ruleAllows } from '../../src/apiserver/rbac/rules.js';
import { InMemoryRbacSource } from '../../src/apiserver/rbac/source.js';
import type { AuthorizationAttributes, PolicyRule, UserInfo } from '../../src/apiserver/rbac/types.js';
import {
  clusterRole,
  clusterRoleBinding,
  group,
  role,
  roleBinding,
  saUser,
  serviceAccount,
  user,
  who,
} from '../helpers/rbac.js';
import { REPO_ROOT } from '../helpers/server.js';

/**
 * The RBAC authorizer (src/apiserver/rbac/authorizer.ts, rules.ts) against one fixed set of
 * roles and bindings held in an InMemoryRbacSource, as the informer caches will hold them. Each
 * case is a user and a request, and the decision with kube-apiserver's reason.
 */

const READ = ['get', 'list', 'watch'];

const source = new InMemoryRbacSource({
  clusterRoles: [
    clusterRole('pod-reader', [{ apiGroups: [''], resources: ['pods'], verbs: READ }]),
    clusterRole('one-secret', [{ apiGroups: [''], resources: ['secrets'], resourceNames: ['s1'], verbs: ['*'] }]),
    clusterRole('logs', [{ apiGroups: [''], resources: ['pods/log'], verbs: ['get'] }]),
    clusterRole('any-status', [{ apiGroups: ['*'], resources: ['*/status'], verbs: ['get'] }]),
    clusterRole('all-apps', [{ apiGroups: ['apps'], resources: ['*'], verbs: ['*'] }]),
    clusterRole('health', [{ nonResourceURLs: ['/healthz', '/logs/*'], verbs: ['get'] }]),
    clusterRole('everything', [
      { apiGroups: ['*'], resources: ['*'], verbs: ['*'] },
      { nonResourceURLs: ['*'], verbs: ['*'] },
    ]),
  ],
  roles: [role('a', 'deployer', [{ apiGroups: ['apps'], resources: ['deployments'], verbs: ['create'] }])],
  clusterRoleBindings: [
    clusterRoleBinding('alice-reads-pods', 'pod-reader', [user('alice')]),
    clusterRoleBinding('dana-one-secret', 'one-secret', [user('dana')]),
    clusterRoleBinding('robot-logs', 'logs', [serviceAccount('robot', 'x')]),
    // A ServiceAccount subject with no namespace in a ClusterRoleBinding names nobody.
    clusterRoleBinding('nobody', 'everything', [serviceAccount('robot')]),
    clusterRoleBinding('health-for-all', 'health', [group('system:authenticated')]),
    clusterRoleBinding('status-watchers', 'any-status', [group('watchers')]),
    clusterRoleBinding('appsers', 'all-apps', [group('appsers')]),
    clusterRoleBinding('admins', 'everything', [group('admins')]),
    clusterRoleBinding('weird', 'everything', [{ kind: 'Robot', name: 'erin' }]),
  ],
  roleBindings: [
    roleBinding('b', 'bob-reads-pods', { kind: 'ClusterRole', name: 'pod-reader' }, [user('bob')]),
    roleBinding('a', 'ci-deploys', { kind: 'Role', name: 'deployer' }, [serviceAccount('ci')]),
    roleBinding('b', 'carol-broken', { kind: 'ClusterRole', name: 'gone' }, [user('carol')]),
    roleBinding('b', 'carol-broken-role', { kind: 'Role', name: 'missing' }, [user('carol')]),
    // A Role named in another namespace's binding is looked up in the binding's namespace only.
    roleBinding('b', 'eve-deploys', { kind: 'Role', name: 'deployer' }, [user('eve')]),
  ],
});

function res(verb: string, resource: string, extra: Partial<AuthorizationAttributes & { group: string }> = {}): AuthorizationAttributes {
  return { verb, group: '', resource, ...extra } as AuthorizationAttributes;
}

interface Case {
  name: string;
  user: UserInfo;
  request: AuthorizationAttributes;
  allowed: boolean;
  reason: string;
}

const cases: Case[] = [
  // ClusterRoleBindings apply everywhere.
  { name: 'cluster binding: list pods in a namespace', user: who('alice'), request: res('list', 'pods', { namespace: 'b' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "alice-reads-pods" of ClusterRole "pod-reader" to User "alice"' },
  { name: 'cluster binding: list pods cluster-wide', user: who('alice'), request: res('list', 'pods'), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "alice-reads-pods" of ClusterRole "pod-reader" to User "alice"' },
  { name: 'verb not in the rule', user: who('alice'), request: res('delete', 'pods', { namespace: 'b', name: 'p' }), allowed: false, reason: '' },
  { name: 'same resource name in another group', user: who('alice'), request: res('list', 'pods', { group: 'metrics.k8s.io', namespace: 'b' }), allowed: false, reason: '' },
  // Subresources are granted by name: pods does not give pods/log, pods/log does not give pods.
  { name: 'pods rule does not cover pods/log', user: who('alice'), request: res('get', 'pods', { subresource: 'log', namespace: 'b', name: 'p' }), allowed: false, reason: '' },
  { name: 'pods/log rule does not cover pods', user: saUser('x', 'robot'), request: res('get', 'pods', { namespace: 'b', name: 'p' }), allowed: false, reason: '' },
  { name: '*/status gives any status', user: who('wanda', 'watchers'), request: res('get', 'deployments', { group: 'apps', subresource: 'status', namespace: 'b', name: 'd' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "status-watchers" of ClusterRole "any-status" to Group "watchers"' },
  { name: '*/status does not give the object', user: who('wanda', 'watchers'), request: res('get', 'deployments', { group: 'apps', namespace: 'b', name: 'd' }), allowed: false, reason: '' },
  { name: '*/status does not give another subresource', user: who('wanda', 'watchers'), request: res('get', 'deployments', { group: 'apps', subresource: 'scale', namespace: 'b', name: 'd' }), allowed: false, reason: '' },
  { name: 'resource * covers subresources too', user: who('al', 'appsers'), request: res('update', 'deployments', { group: 'apps', subresource: 'scale', namespace: 'b', name: 'd' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "appsers" of ClusterRole "all-apps" to Group "appsers"' },
  { name: 'verb * covers custom verbs', user: who('al', 'appsers'), request: res('escalate', 'deployments', { group: 'apps', namespace: 'b' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "appsers" of ClusterRole "all-apps" to Group "appsers"' },
  { name: 'apps rule does not cover the core group', user: who('al', 'appsers'), request: res('get', 'pods', { namespace: 'b', name: 'p' }), allowed: false, reason: '' },
  // resourceNames: only requests that carry one of the names.
  { name: 'resourceNames: get the named object', user: who('dana'), request: res('get', 'secrets', { namespace: 'b', name: 's1' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "dana-one-secret" of ClusterRole "one-secret" to User "dana"' },
  { name: 'resourceNames: get another object', user: who('dana'), request: res('get', 'secrets', { namespace: 'b', name: 's2' }), allowed: false, reason: '' },
  { name: 'resourceNames: create carries no name', user: who('dana'), request: res('create', 'secrets', { namespace: 'b' }), allowed: false, reason: '' },
  { name: 'resourceNames: deletecollection carries no name', user: who('dana'), request: res('deletecollection', 'secrets', { namespace: 'b' }), allowed: false, reason: '' },
  { name: 'resourceNames: list of the collection', user: who('dana'), request: res('list', 'secrets', { namespace: 'b' }), allowed: false, reason: '' },
  { name: 'resourceNames: watch of the collection', user: who('dana'), request: res('watch', 'secrets', { namespace: 'b' }), allowed: false, reason: '' },
  { name: 'resourceNames: watch with metadata.name=s1', user: who('dana'), request: res('watch', 'secrets', { namespace: 'b', name: 's1' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "dana-one-secret" of ClusterRole "one-secret" to User "dana"' },
  { name: 'resourceNames: delete the named object', user: who('dana'), request: res('delete', 'secrets', { namespace: 'b', name: 's1' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "dana-one-secret" of ClusterRole "one-secret" to User "dana"' },
  // A ClusterRole bound by a RoleBinding applies in that namespace only.
  { name: 'RoleBinding of a ClusterRole: its namespace', user: who('bob'), request: res('list', 'pods', { namespace: 'b' }), allowed: true, reason: 'RBAC: allowed by RoleBinding "bob-reads-pods/b" of ClusterRole "pod-reader" to User "bob"' },
  { name: 'RoleBinding of a ClusterRole: another namespace', user: who('bob'), request: res('list', 'pods', { namespace: 'c' }), allowed: false, reason: '' },
  { name: 'RoleBinding of a ClusterRole: cluster-wide list', user: who('bob'), request: res('list', 'pods'), allowed: false, reason: '' },
  // ServiceAccounts: system:serviceaccount:<ns>:<name>; the binding's namespace by default.
  { name: 'SA subject defaults to the binding namespace', user: saUser('a', 'ci'), request: res('create', 'deployments', { group: 'apps', namespace: 'a' }), allowed: true, reason: 'RBAC: allowed by RoleBinding "ci-deploys/a" of Role "deployer" to ServiceAccount "ci/a"' },
  { name: 'SA of the same name in another namespace', user: saUser('b', 'ci'), request: res('create', 'deployments', { group: 'apps', namespace: 'a' }), allowed: false, reason: '' },
  { name: 'a user named like the SA but with the wrong prefix', user: who('ci'), request: res('create', 'deployments', { group: 'apps', namespace: 'a' }), allowed: false, reason: '' },
  { name: 'SA in a ClusterRoleBinding with a namespace', user: saUser('x', 'robot'), request: res('get', 'pods', { subresource: 'log', namespace: 'q', name: 'p' }), allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "robot-logs" of ClusterRole "logs" to ServiceAccount "robot/x"' },
  { name: 'SA subject without namespace in a ClusterRoleBinding matches nobody', user: saUser('', 'robot'), request: res('get', 'pods', { namespace: 'q', name: 'p' }), allowed: false, reason: '' },
  // Groups, system:authenticated included; unknown subject kinds match nobody.
  { name: 'group system:authenticated', user: who('zed'), request: { verb: 'get', path: '/healthz' }, allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "health-for-all" of ClusterRole "health" to Group "system:authenticated"' },
  { name: 'without system:authenticated', user: { name: 'anon', groups: ['system:unauthenticated'] }, request: { verb: 'get', path: '/healthz' }, allowed: false, reason: '' },
  { name: 'unknown subject kind', user: who('erin'), request: res('get', 'pods', { namespace: 'b', name: 'p' }), allowed: false, reason: '' },
  // Non-resource URLs: exact, trailing * as a prefix; verbs are lowercased HTTP methods.
  { name: 'nonResourceURL prefix with *', user: who('zed'), request: { verb: 'get', path: '/logs/kube/x.log' }, allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "health-for-all" of ClusterRole "health" to Group "system:authenticated"' },
  { name: 'nonResourceURL prefix itself', user: who('zed'), request: { verb: 'get', path: '/logs/' }, allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "health-for-all" of ClusterRole "health" to Group "system:authenticated"' },
  { name: 'nonResourceURL exact only without *', user: who('zed'), request: { verb: 'get', path: '/healthz/etcd' }, allowed: false, reason: '' },
  { name: 'nonResourceURL other verb', user: who('zed'), request: { verb: 'post', path: '/healthz' }, allowed: false, reason: '' },
  { name: 'nonResourceURL * covers any path', user: who('root', 'admins'), request: { verb: 'delete', path: '/anything/at/all' }, allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "admins" of ClusterRole "everything" to Group "admins"' },
  { name: 'a resource request that also carries a path is still a resource request', user: who('zed'), request: { verb: 'get', group: '', resource: 'pods', namespace: 'b', path: '/healthz' } as AuthorizationAttributes, allowed: false, reason: '' },
  { name: 'resource rules do not grant paths', user: who('al', 'appsers'), request: { verb: 'get', path: '/apis' }, allowed: false, reason: '' },
  // A Role is looked up in the binding's own namespace.
  { name: 'RoleBinding to a Role of another namespace', user: who('eve'), request: res('create', 'deployments', { group: 'apps', namespace: 'b' }), allowed: false, reason: 'RBAC: role.rbac.authorization.k8s.io "deployer" not found' },
  // Bindings to missing roles grant nothing and explain the denial.
  { name: 'binding to missing roles', user: who('carol'), request: res('get', 'pods', { namespace: 'b', name: 'p' }), allowed: false, reason: 'RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "missing" not found]' },
  { name: 'missing roles in another namespace are not read', user: who('carol'), request: res('get', 'pods', { namespace: 'c', name: 'p' }), allowed: false, reason: '' },
];

describe('RBAC authorizer decisions', () => {
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(decide(source, c.user, c.request), { allowed: c.allowed, reason: c.reason });
    });
  }

  it('system:masters is allowed everything before any rule is read', () => {
    const empty = new InMemoryRbacSource();
    const authorizer = new RbacAuthorizer(empty);
    assert.deepEqual(authorizer.authorize({ name: 'system:admin', groups: ['system:masters', 'system:authenticated'] }, res('delete', 'nodes', { name: 'n' })), { allowed: true });
    assert.deepEqual(authorizer.authorize(who('alice'), res('get', 'nodes', { name: 'n' })), { allowed: false, reason: '' });
  });

  it('reads the source on every request, as an informer cache changes', () => {
    const live = new InMemoryRbacSource({ clusterRoles: [clusterRole('pod-reader', [{ apiGroups: [''], resources: ['pods'], verbs: READ }])] });
    const authorizer = new RbacAuthorizer(live);
    const request = res('list', 'pods', { namespace: 'b' });
    assert.equal(authorizer.authorize(who('bob'), request).allowed, false);
    live.putRoleBinding(roleBinding('b', 'rb', { kind: 'ClusterRole', name: 'pod-reader' }, [user('bob')]));
    assert.equal(authorizer.authorize(who('bob'), request).allowed, true);
    live.deleteClusterRole('pod-reader');
    assert.deepEqual(authorizer.authorize(who('bob'), request), { allowed: false, reason: 'RBAC: clusterrole.rbac.authorization.k8s.io "pod-reader" not found' });
  });

  it('a rule with no verbs, groups or resources allows nothing', () => {
    const empty: PolicyRule = { verbs: [] };
    assert.equal(ruleAllows(res('get', 'pods'), empty), false);
    assert.equal(ruleAllows({ verb: 'get', path: '/' }, empty), false);
  });

  it('rulesFor lists cluster-wide rules, then the namespace ones, with resolution errors', () => {
    const carol = rulesFor(source, who('carol'), 'b');
    assert.deepEqual(carol.rules, [{ nonResourceURLs: ['/healthz', '/logs/*'], verbs: ['get'] }]);
    assert.deepEqual(carol.errors, ['clusterrole.rbac.authorization.k8s.io "gone" not found', 'role.rbac.authorization.k8s.io "missing" not found']);
    const bob = rulesFor(source, who('bob'), 'b');
    assert.deepEqual(bob.rules.map((r) => r.resources ?? r.nonResourceURLs), [['/healthz', '/logs/*'], ['pods']]);
    assert.deepEqual(rulesFor(source, who('bob'), '').rules.length, 1);
  });
});

describe("kube-apiserver's 403 message", () => {
  const messages: Array<[string, UserInfo, AuthorizationAttributes, string, string]> = [
    ['namespaced list', who('x'), res('list', 'pods', { namespace: 'b' }), '', 'pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "b"'],
    ['named get in a group', who('x'), res('get', 'deployments', { group: 'apps', namespace: 'b', name: 'web' }), '', 'deployments.apps "web" is forbidden: User "x" cannot get resource "deployments" in API group "apps" in the namespace "b"'],
    ['subresource', who('x'), res('update', 'deployments', { group: 'apps', subresource: 'scale', namespace: 'b', name: 'web' }), '', 'deployments.apps "web" is forbidden: User "x" cannot update resource "deployments/scale" in API group "apps" in the namespace "b"'],
    ['cluster scope', who('x'), res('list', 'nodes'), '', 'nodes is forbidden: User "x" cannot list resource "nodes" in API group "" at the cluster scope'],
    ['with a reason', who('carol'), res('get', 'pods', { namespace: 'b', name: 'p' }), 'RBAC: role.rbac.authorization.k8s.io "r" not found', 'pods "p" is forbidden: User "carol" cannot get resource "pods" in API group "" in the namespace "b": RBAC: role.rbac.authorization.k8s.io "r" not found'],
    ['non-resource path', who('x'), { verb: 'get', path: '/metrics' }, '', 'forbidden: User "x" cannot get path "/metrics"'],
    ['ServiceAccount user', saUser('ns', 'sa'), res('create', 'serviceaccounts', { subresource: 'token', namespace: 'ns', name: 'sa' }), '', 'serviceaccounts "sa" is forbidden: User "system:serviceaccount:ns:sa" cannot create resource "serviceaccounts/token" in API group "" in the namespace "ns"'],
    ['quotes are escaped as Go does', who('a"b'), res('get', 'pods', { namespace: 'n', name: 'x\ny' }), '', 'pods "x\\ny" is forbidden: User "a\\"b" cannot get resource "pods" in API group "" in the namespace "n"'],
  ];
  for (const [name, u, request, reason, expected] of messages) {
    it(name, () => assert.equal(forbiddenMessage(u, request, reason), expected));
  }

  it('carries the resource and name for Status details', () => {
    assert.deepEqual(forbiddenRefusal(who('x'), res('get', 'deployments', { group: 'apps', namespace: 'b', name: 'web', subresource: 'scale' })), {
      code: 403,
      reason: 'Forbidden',
      group: 'apps',
      resource: 'deployments',
      name: 'web',
      message: 'deployments.apps "web" is forbidden: User "x" cannot get resource "deployments/scale" in API group "apps" in the namespace "b"',
    });
  });

  it('is what the RBAC decision feeds: denied with a reason only when one exists', () => {
    const denied = decide(source, who('carol'), res('get', 'pods', { namespace: 'b', name: 'p' }));
    assert.equal(
      forbiddenMessage(who('carol'), res('get', 'pods', { namespace: 'b', name: 'p' }), denied.reason),
      'pods "p" is forbidden: User "carol" cannot get resource "pods" in API group "" in the namespace "b": RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "missing" not found]',
    );
  });
});

describe('the rbac folder', () => {
  it('imports only types from the rest of the API server (so the wiring can come and go)', () => {
    const folder = path.join(REPO_ROOT, 'src/apiserver/rbac');
    const wrong: string[] = [];
    for (const file of readdirSync(folder)) {
      const text = readFileSync(path.join(folder, file), 'utf8');
      for (const match of text.matchAll(/^import\s+(type\s+)?[^;]*?from\s+'([^']+)';/gms)) {
        const [statement, typeOnly, target] = match;
        if (!target!.startsWith('./') && !typeOnly) wrong.push(`${file}: ${statement!.replace(/\s+/g, ' ')}`);
      }
    }
    assert.deepEqual(wrong, []);
  });
});
