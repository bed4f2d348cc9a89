import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RbacAuthorizer } from '../../src/apiserver/rbac/authorizer.js';
import {
  breakdownRule,
  checkBindingWrite,
  checkRoleWrite,
  compactRules,
  compactString,
  confirmNoEscalation,
  covers,
} from '../../src/apiserver/rbac/escalation.js';
import { InMemoryRbacSource } from '../../src/apiserver/rbac/source.js';
import type { ClusterRole, PolicyRule, Role, RoleBinding, UserInfo } from '../../src/apiserver/rbac/types.js';
import { clusterRole, clusterRoleBinding, role, roleBinding, saUser, user, who } from '../helpers/rbac.js';

/**
 * Escalation prevention (src/apiserver/rbac/escalation.ts): Covers as Kubernetes computes it,
 * the wording of the refusal, and the role and binding write checks with their ways around
 * (system:masters, `escalate`, `bind`, writes that only touch garbage-collection fields).
 */

const READ = ['get', 'list', 'watch'];
const pods = (verbs: string[], extra: Partial<PolicyRule> = {}): PolicyRule => ({ apiGroups: [''], resources: ['pods'], verbs, ...extra });

describe('covers', () => {
  const cases: Array<[string, PolicyRule[], PolicyRule[], boolean, PolicyRule[]?]> = [
    ['the same rule', [pods(READ)], [pods(READ)], true],
    ['a subset of verbs', [pods(READ)], [pods(['get'])], true],
    ['one verb more', [pods(READ)], [pods(['get', 'delete'])], false, [pods(['delete'])]],
    ['verb * covers any verb', [pods(['*'])], [pods(['get', 'escalate'])], true],
    ['group * covers any group', [{ apiGroups: ['*'], resources: ['pods'], verbs: ['get'] }], [{ apiGroups: ['apps', ''], resources: ['pods'], verbs: ['get'] }], true],
    ['another group', [pods(['get'])], [{ apiGroups: ['apps'], resources: ['pods'], verbs: ['get'] }], false, [{ apiGroups: ['apps'], resources: ['pods'], verbs: ['get'] }]],
    ['resource * covers subresources', [{ apiGroups: [''], resources: ['*'], verbs: ['get'] }], [{ apiGroups: [''], resources: ['pods/log', 'nodes'], verbs: ['get'] }], true],
    ['*/status covers pods/status', [{ apiGroups: [''], resources: ['*/status'], verbs: ['get'] }], [{ apiGroups: [''], resources: ['pods/status'], verbs: ['get'] }], true],
    ['*/status does not cover pods', [{ apiGroups: [''], resources: ['*/status'], verbs: ['get'] }], [pods(['get'])], false, [pods(['get'])]],
    ['pods does not cover pods/exec', [pods(['*'])], [{ apiGroups: [''], resources: ['pods/exec'], verbs: ['create'] }], false, [{ apiGroups: [''], resources: ['pods/exec'], verbs: ['create'] }]],
    ['any name covers a named rule', [pods(['get'])], [pods(['get'], { resourceNames: ['a'] })], true],
    ['the same names', [pods(['get'], { resourceNames: ['a', 'b'] })], [pods(['get'], { resourceNames: ['b'] })], true],
    ['a named rule does not cover any name', [pods(['get'], { resourceNames: ['a'] })], [pods(['get'])], false, [pods(['get'])]],
    ['another name', [pods(['get'], { resourceNames: ['a'] })], [pods(['get'], { resourceNames: ['a', 'c'] })], false, [pods(['get'], { resourceNames: ['c'] })]],
    ['URL * covers any path', [{ nonResourceURLs: ['*'], verbs: ['get'] }], [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }], true],
    ['URL prefix covers below it', [{ nonResourceURLs: ['/logs/*'], verbs: ['get'] }], [{ nonResourceURLs: ['/logs/a', '/logs/*'], verbs: ['get'] }], true],
    ['URL outside the prefix', [{ nonResourceURLs: ['/logs/*'], verbs: ['get'] }], [{ nonResourceURLs: ['/log'], verbs: ['get'] }], false, [{ nonResourceURLs: ['/log'], verbs: ['get'] }]],
    ['resource rules do not cover URLs', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }], [{ nonResourceURLs: ['/healthz'], verbs: ['get'] }], false, [{ nonResourceURLs: ['/healthz'], verbs: ['get'] }]],
    ['URL rules do not cover resources', [{ nonResourceURLs: ['*'], verbs: ['*'] }], [pods(['get'])], false, [pods(['get'])]],
    ['a rule with no verbs asks for nothing', [], [pods([])], true],
    ['two owner rules together (each atom by one rule)', [pods(['get']), pods(['list'])], [pods(['get', 'list'])], true],
  ];
  for (const [name, owner, requested, covered, missing] of cases) {
    it(name, () => assert.deepEqual(covers(owner, requested), { covered, missing: missing ?? [] }));
  }

  it('breaks a rule into one verb × group × resource × name, and URL × verb', () => {
    assert.deepEqual(breakdownRule({ apiGroups: ['', 'apps'], resources: ['a'], verbs: ['get', 'list'], resourceNames: ['x'] }), [
      { apiGroups: [''], resources: ['a'], verbs: ['get'], resourceNames: ['x'] },
      { apiGroups: [''], resources: ['a'], verbs: ['list'], resourceNames: ['x'] },
      { apiGroups: ['apps'], resources: ['a'], verbs: ['get'], resourceNames: ['x'] },
      { apiGroups: ['apps'], resources: ['a'], verbs: ['list'], resourceNames: ['x'] },
    ]);
    assert.deepEqual(breakdownRule({ nonResourceURLs: ['/a', '/b'], verbs: ['get'] }), [
      { nonResourceURLs: ['/a'], verbs: ['get'] },
      { nonResourceURLs: ['/b'], verbs: ['get'] },
    ]);
  });
});

describe('the wording of missing rules', () => {
  it('prints a rule as kube does (Go %q lists, empty fields left out)', () => {
    assert.equal(compactString(pods(['get', 'list'])), '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}');
    assert.equal(compactString(pods(['get'], { resourceNames: ['a'] })), '{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], Verbs:["get"]}');
    assert.equal(compactString({ nonResourceURLs: ['/metrics'], verbs: ['get'] }), '{NonResourceURLs:["/metrics"], Verbs:["get"]}');
  });

  it('merges atoms that differ only in the verb', () => {
    const atoms = [...breakdownRule(pods(['get', 'list'])), ...breakdownRule(pods(['get'], { resourceNames: ['a'] })), ...breakdownRule(pods(['delete'], { resourceNames: ['a'] }))];
    assert.deepEqual(compactRules([...atoms, { nonResourceURLs: ['/x'], verbs: ['get'] }]), [
      { nonResourceURLs: ['/x'], verbs: ['get'] },
      pods(['get', 'list']),
      pods(['get', 'delete'], { resourceNames: ['a'] }),
    ]);
  });
});

/**
 * bob may read pods in b (a ClusterRole by RoleBinding) and write roles and bindings there; sam
 * may also escalate roles there, bea may bind pod-deleter there; ann holds the core and apps
 * groups cluster-wide; root is cluster-admin.
 */
function fixture(): { source: InMemoryRbacSource; authorizer: RbacAuthorizer } {
  const source = new InMemoryRbacSource({
    clusterRoles: [
      clusterRole('pod-reader', [pods(READ)]),
      clusterRole('pod-deleter', [pods(['delete'])]),
      // Every verb but the two that bypass the check (`*` would include escalate and bind).
      clusterRole('role-writer', [{ apiGroups: ['rbac.authorization.k8s.io'], resources: ['roles', 'rolebindings', 'clusterroles', 'clusterrolebindings'], verbs: [...READ, 'create', 'update', 'patch', 'delete'] }]),
      clusterRole('escalator', [{ apiGroups: ['rbac.authorization.k8s.io'], resources: ['roles'], verbs: ['escalate'] }]),
      clusterRole('binds-deleter', [{ apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterroles'], resourceNames: ['pod-deleter'], verbs: ['bind'] }]),
      clusterRole('cluster-admin', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }, { nonResourceURLs: ['*'], verbs: ['*'] }]),
      // Everything on the core and apps groups, nothing on RBAC (so no escalate or bind).
      clusterRole('almost-admin', [{ apiGroups: ['', 'apps'], resources: ['*'], verbs: ['*'] }]),
    ],
    roleBindings: [
      roleBinding('b', 'bob-reads', { kind: 'ClusterRole', name: 'pod-reader' }, [user('bob')]),
      roleBinding('b', 'bob-writes-roles', { kind: 'ClusterRole', name: 'role-writer' }, [user('bob')]),
      roleBinding('b', 'sam-escalates', { kind: 'ClusterRole', name: 'escalator' }, [user('sam')]),
      roleBinding('b', 'sam-writes-roles', { kind: 'ClusterRole', name: 'role-writer' }, [user('sam')]),
      roleBinding('b', 'bea-binds', { kind: 'ClusterRole', name: 'binds-deleter' }, [user('bea')]),
      roleBinding('b', 'bea-writes-roles', { kind: 'ClusterRole', name: 'role-writer' }, [user('bea')]),
      roleBinding('b', 'bob-broken', { kind: 'ClusterRole', name: 'gone' }, [user('bob')]),
    ],
    clusterRoleBindings: [
      clusterRoleBinding('ann-almost', 'almost-admin', [user('ann')]),
      clusterRoleBinding('root', 'cluster-admin', [user('root')]),
    ],
  });
  return { source, authorizer: new RbacAuthorizer(source) };
}

const bob: UserInfo = { name: 'bob', groups: ['system:authenticated'] };

describe('confirmNoEscalation', () => {
  const { source } = fixture();

  it('passes rules the user holds in that namespace', () => {
    assert.equal(confirmNoEscalation(source, bob, 'b', [pods(['get', 'watch'])]), undefined);
  });

  it("words the refusal as kube-apiserver, with the user's groups and the missing rules, one per line, sorted", () => {
    assert.equal(
      confirmNoEscalation(source, bob, 'c', [pods(['get', 'delete']), { apiGroups: ['apps'], resources: ['deployments'], verbs: ['create'] }]),
      'user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n' +
        '{APIGroups:[""], Resources:["pods"], Verbs:["get" "delete"]}\n' +
        '{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}',
    );
  });

  it('appends the resolution errors of the user\'s own bindings', () => {
    assert.equal(
      confirmNoEscalation(source, bob, 'b', [pods(['delete'])]),
      'user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n' +
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}; resolution errors: [clusterroles.rbac.authorization.k8s.io "gone" not found]',
    );
  });

  it('names a ServiceAccount user with its groups', () => {
    assert.match(
      confirmNoEscalation(source, saUser('rbac', 'privesc'), 'rbac', [pods(['delete'])]) ?? '',
      /^user "system:serviceaccount:rbac:privesc" \(groups=\["system:serviceaccounts" "system:serviceaccounts:rbac" "system:authenticated"\]\) is attempting/,
    );
  });
});

function roleIn(namespace: string, name: string, rules: PolicyRule[], extra: Partial<Role['metadata']> = {}): Role {
  const r = role(namespace, name, rules);
  r.metadata = { ...r.metadata, ...extra };
  return r;
}

describe('writing a Role or ClusterRole', () => {
  const { source, authorizer } = fixture();
  const write = (u: UserInfo, object: Role | ClusterRole, oldObject?: Role | ClusterRole, kind: 'Role' | 'ClusterRole' = 'Role') =>
    checkRoleWrite({ user: u, kind, namespace: kind === 'Role' ? (object.metadata.namespace ?? '') : '', object, ...(oldObject ? { oldObject, pathName: object.metadata.name } : {}) }, source, authorizer);

  it('allows rules the writer holds there', () => {
    assert.equal(write(bob, roleIn('b', 'r', [pods(['get'])])), undefined);
  });

  it('refuses rules the writer does not hold, as a 403 on the role', () => {
    assert.deepEqual(write(bob, roleIn('b', 'r', [pods(['get', 'delete'])])), {
      code: 403,
      reason: 'Forbidden',
      group: 'rbac.authorization.k8s.io',
      resource: 'roles',
      name: 'r',
      message:
        'roles.rbac.authorization.k8s.io "r" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n' +
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}; resolution errors: [clusterroles.rbac.authorization.k8s.io "gone" not found]',
    });
  });

  it('judges against the rules held in the role\'s own namespace', () => {
    assert.match(write(bob, roleIn('c', 'r', [pods(['get'])]))?.message ?? '', /Verbs:\["get"\]/);
  });

  it('lets a holder of escalate on roles write any rules', () => {
    assert.equal(write({ name: 'sam', groups: [] }, roleIn('b', 'r', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }])), undefined);
    // escalate is on roles in b only: not on ClusterRoles.
    assert.equal(write({ name: 'sam', groups: [] }, clusterRole('c', [pods(['delete'])]), undefined, 'ClusterRole')?.code, 403);
  });

  it('lets system:masters write anything', () => {
    assert.equal(write({ name: 'system:admin', groups: ['system:masters'] }, clusterRole('c', [{ nonResourceURLs: ['*'], verbs: ['*'] }]), undefined, 'ClusterRole'), undefined);
  });

  it('lets an update that only changes finalizers or owner references through', () => {
    const stored = roleIn('b', 'wide', [pods(['*'])], { resourceVersion: '5', uid: 'u1' });
    const released = roleIn('b', 'wide', [pods(['*'])], { resourceVersion: '5', uid: 'u1', finalizers: ['x'], ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'c', uid: 'u' }] });
    assert.equal(write(bob, released, stored), undefined);
    const relabelled = roleIn('b', 'wide', [pods(['*'])], { resourceVersion: '5', uid: 'u1', labels: { a: 'b' } });
    assert.equal(write(bob, relabelled, stored)?.code, 403);
  });

  it('needs full authority for an aggregationRule, set or removed', () => {
    const aggregated = clusterRole('agg', [], { aggregationRule: { clusterRoleSelectors: [{ matchLabels: { a: 'b' } }] } });
    assert.deepEqual(write({ name: 'ann', groups: [] }, aggregated, undefined, 'ClusterRole')?.message, 'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule');
    assert.equal(write({ name: 'ann', groups: [] }, clusterRole('agg', []), aggregated, 'ClusterRole')?.message, 'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule');
    assert.equal(write({ name: 'ann', groups: [] }, clusterRole('plain', [pods(['*'])]), undefined, 'ClusterRole'), undefined);
    assert.equal(write({ name: 'root', groups: [] }, aggregated, undefined, 'ClusterRole'), undefined);
  });

  it('words a nameless role (generateName) without a name', () => {
    const nameless = role('c', '', [pods(['get'])]);
    delete nameless.metadata.name;
    assert.match(write(bob, nameless)?.message ?? '', /^roles\.rbac\.authorization\.k8s\.io is forbidden: user "bob"/);
  });
});

describe('writing a RoleBinding or ClusterRoleBinding', () => {
  const { source, authorizer } = fixture();
  const bind = (u: UserInfo, object: RoleBinding, oldObject?: RoleBinding) =>
    checkBindingWrite(
      { user: u, kind: object.kind === 'ClusterRoleBinding' ? 'ClusterRoleBinding' : 'RoleBinding', namespace: object.metadata.namespace ?? '', object, ...(oldObject ? { oldObject } : {}) },
      source,
      authorizer,
    );

  it('allows binding a role whose rules the writer holds there', () => {
    assert.equal(bind(bob, roleBinding('b', 'x', { kind: 'ClusterRole', name: 'pod-reader' }, [user('kim')])), undefined);
  });

  it('refuses binding a role whose rules the writer lacks', () => {
    assert.deepEqual(bind(bob, roleBinding('b', 'x', { kind: 'ClusterRole', name: 'cluster-admin' }, [user('bob')])), {
      code: 403,
      reason: 'Forbidden',
      group: 'rbac.authorization.k8s.io',
      resource: 'rolebindings',
      name: 'x',
      message:
        'rolebindings.rbac.authorization.k8s.io "x" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n' +
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n{NonResourceURLs:["*"], Verbs:["*"]}; resolution errors: [clusterroles.rbac.authorization.k8s.io "gone" not found]',
    });
  });

  it('allows it with bind on that role, in that namespace only', () => {
    const bea = { name: 'bea', groups: [] };
    assert.equal(bind(bea, roleBinding('b', 'x', { kind: 'ClusterRole', name: 'pod-deleter' }, [user('kim')])), undefined);
    assert.equal(bind(bea, roleBinding('c', 'x', { kind: 'ClusterRole', name: 'pod-deleter' }, [user('kim')]))?.code, 403);
    // bind is on pod-deleter by name, not on every role.
    assert.equal(bind(bea, roleBinding('b', 'x', { kind: 'ClusterRole', name: 'cluster-admin' }, [user('kim')]))?.code, 403);
  });

  it('judges a ClusterRoleBinding against cluster-wide rules only', () => {
    const refused = bind(bob, clusterRoleBinding('x', 'pod-reader', [user('kim')]));
    assert.equal(refused?.message.split('\n')[0], 'clusterrolebindings.rbac.authorization.k8s.io "x" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:');
    assert.equal(bind({ name: 'ann', groups: [] }, clusterRoleBinding('x', 'pod-reader', [user('kim')])), undefined);
  });

  it('answers 404 for a role that does not exist', () => {
    assert.deepEqual(bind(bob, roleBinding('b', 'x', { kind: 'ClusterRole', name: 'nope' }, [user('kim')])), {
      code: 404,
      reason: 'NotFound',
      group: 'rbac.authorization.k8s.io',
      resource: 'clusterroles',
      name: 'nope',
      message: 'clusterroles.rbac.authorization.k8s.io "nope" not found',
    });
    assert.equal(bind(bob, roleBinding('b', 'x', { kind: 'Role', name: 'nope' }, [user('kim')]))?.message, 'roles.rbac.authorization.k8s.io "nope" not found');
  });

  it('refuses an unsupported roleRef kind with a 403, never a 500', () => {
    const odd = roleBinding('b', 'x', { kind: 'ClusterRole', name: 'pod-reader' }, [user('kim')]);
    odd.roleRef = { ...odd.roleRef, kind: 'Policy' };
    assert.deepEqual(bind(bob, odd)?.message, 'rolebindings.rbac.authorization.k8s.io "x" is forbidden: unsupported role reference kind: "Policy"');
  });

  it('lets an update that only changes finalizers through, but not a new subject', () => {
    const stored = roleBinding('b', 'x', { kind: 'ClusterRole', name: 'cluster-admin' }, [user('root')]);
    const released = structuredClone(stored);
    released.metadata.finalizers = ['f'];
    assert.equal(bind(bob, released, stored), undefined);
    const widened = structuredClone(stored);
    widened.subjects = [user('root'), user('bob')];
    assert.equal(bind(bob, widened, stored)?.code, 403);
  });

  it('lets system:masters bind anything, even a missing role', () => {
    assert.equal(bind({ name: 'system:admin', groups: ['system:masters'] }, clusterRoleBinding('x', 'nope', [user('kim')])), undefined);
  });

  it('cluster-admin may bind anything: its verb * includes bind', () => {
    assert.equal(bind(who('root'), clusterRoleBinding('x', 'cluster-admin', [user('kim')])), undefined);
  });

  it('verb * on roles includes escalate, so such a user may write any rules', () => {
    const source = new InMemoryRbacSource({
      clusterRoles: [clusterRole('roles-star', [{ apiGroups: ['rbac.authorization.k8s.io'], resources: ['roles'], verbs: ['*'] }])],
      roleBindings: [roleBinding('b', 'x', { kind: 'ClusterRole', name: 'roles-star' }, [user('kim')])],
    });
    const object = role('b', 'r', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }]);
    assert.equal(checkRoleWrite({ user: who('kim'), kind: 'Role', namespace: 'b', object }, source, new RbacAuthorizer(source)), undefined);
  });
});
