import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, RbacAuthorizer } from '../../src/apiserver/rbac/authorizer.js';
import { defaultClusterRoleBindings, defaultClusterRoles } from '../../src/apiserver/rbac/defaults.js';
import {
  accessReviewStatus,
  parseAccessReviewSpec,
  reviewSubject,
  selfSubjectReviewStatus,
  subjectRulesReviewStatus,
} from '../../src/apiserver/rbac/reviews.js';
import { InMemoryRbacSource } from '../../src/apiserver/rbac/source.js';
import { clusterRole, roleBinding, user, who } from '../helpers/rbac.js';

/**
 * The access-review helpers (src/apiserver/rbac/reviews.ts): the spec kubectl auth can-i and
 * whoami send, turned into attributes and judged, and the statuses they expect back.
 */

const source = new InMemoryRbacSource({
  clusterRoles: [...defaultClusterRoles(), clusterRole('one-secret', [{ apiGroups: [''], resources: ['secrets'], resourceNames: ['s1'], verbs: ['get'] }])],
  clusterRoleBindings: defaultClusterRoleBindings(),
  roleBindings: [
    roleBinding('team', 'vic-view', { kind: 'ClusterRole', name: 'view' }, [user('vic')]),
    roleBinding('team', 'vic-secret', { kind: 'ClusterRole', name: 'one-secret' }, [user('vic')]),
    roleBinding('team', 'vic-broken', { kind: 'ClusterRole', name: 'gone' }, [user('vic')]),
  ],
});

describe('parsing an access review spec', () => {
  it('reads resourceAttributes (what `kubectl auth can-i get pods/log -n team` sends)', () => {
    assert.deepEqual(parseAccessReviewSpec({ resourceAttributes: { namespace: 'team', verb: 'get', group: '', version: '', resource: 'pods', subresource: 'log', name: '' } }, { subject: false }), {
      attributes: { verb: 'get', group: '', resource: 'pods', subresource: 'log', namespace: 'team' },
    });
  });

  it('reads nonResourceAttributes', () => {
    assert.deepEqual(parseAccessReviewSpec({ nonResourceAttributes: { path: '/metrics', verb: 'get' } }, { subject: false }), { attributes: { verb: 'get', path: '/metrics' } });
  });

  const invalid: Array<[string, unknown, boolean, string[]]> = [
    ['both kinds of attributes', { resourceAttributes: { verb: 'get', resource: 'pods' }, nonResourceAttributes: { path: '/', verb: 'get' } }, false, ['spec.nonResourceAttributes: Invalid value: "object": cannot be specified in combination with resourceAttributes']],
    ['neither', {}, false, ['spec.resourceAttributes: Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified']],
    ['no spec at all', undefined, false, ['spec.resourceAttributes: Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified']],
    ['a number for a verb', { resourceAttributes: { verb: 7, resource: 'pods' } }, false, ['spec.resourceAttributes.verb: Invalid value: 7: must be a string']],
    ['attributes not an object', { nonResourceAttributes: 'get /' }, false, ['spec.nonResourceAttributes: Invalid value: must be an object']],
    ['SubjectAccessReview without user or groups', { resourceAttributes: { verb: 'get', resource: 'pods' } }, true, ['spec.user: Invalid value: "": at least one of user or group must be specified']],
    ['SubjectAccessReview with groups that are not strings', { groups: [1], resourceAttributes: { verb: 'get', resource: 'pods' } }, true, ['spec.groups: Invalid value: must be a list of strings']],
  ];
  for (const [name, spec, subject, messages] of invalid) {
    it(`refuses ${name}`, () => {
      const parsed = parseAccessReviewSpec(spec, { subject });
      assert.equal(parsed.attributes, undefined);
      assert.deepEqual(parsed.causes!.map((c) => `${c.field}: ${c.message}`), messages);
      assert.ok(parsed.causes!.every((c) => c.reason === 'FieldValueInvalid'));
    });
  }

  it('a SubjectAccessReview judges exactly the user and groups named', () => {
    const spec = { user: 'vic', groups: ['g'], resourceAttributes: { verb: 'list', resource: 'pods', namespace: 'team' } };
    assert.ok(parseAccessReviewSpec(spec, { subject: true }).attributes);
    assert.deepEqual(reviewSubject(spec), { name: 'vic', groups: ['g'] });
    assert.deepEqual(reviewSubject({ groups: ['system:masters'] }), { name: '', groups: ['system:masters'] });
  });
});

describe('access review status', () => {
  const judge = (name: string, spec: unknown) => {
    const parsed = parseAccessReviewSpec(spec, { subject: false });
    return accessReviewStatus(decide(source, who(name), parsed.attributes!));
  };

  it('allowed, with the binding that allowed it', () => {
    assert.deepEqual(judge('vic', { resourceAttributes: { verb: 'list', resource: 'pods', namespace: 'team' } }), {
      allowed: true,
      reason: 'RBAC: allowed by RoleBinding "vic-view/team" of ClusterRole "view" to User "vic"',
    });
  });

  it('denied without a reason: no denied or reason fields (omitempty)', () => {
    const status = judge('zed', { resourceAttributes: { verb: 'list', resource: 'pods', namespace: 'team' } });
    assert.deepEqual(status, { allowed: false });
    assert.equal(JSON.stringify(status), '{"allowed":false}');
  });

  it('denied with the resolution errors as reason', () => {
    assert.deepEqual(judge('vic', { resourceAttributes: { verb: 'delete', resource: 'pods', namespace: 'team', name: 'p' } }), {
      allowed: false,
      reason: 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found',
    });
  });

  it('`kubectl auth can-i get secrets/s1` style: resourceNames need the name', () => {
    assert.equal(judge('vic', { resourceAttributes: { verb: 'get', resource: 'secrets', namespace: 'team', name: 's1' } }).allowed, true);
    assert.equal(judge('vic', { resourceAttributes: { verb: 'get', resource: 'secrets', namespace: 'team' } }).allowed, false);
  });

  it('system:masters through the authorizer: allowed, no reason', () => {
    const decision = new RbacAuthorizer(source).decide({ name: 'system:admin', groups: ['system:masters'] }, { verb: 'get', group: '', resource: 'nodes' });
    assert.deepEqual(accessReviewStatus(decision), { allowed: true });
  });
});

describe('SelfSubjectRulesReview status (`kubectl auth can-i --list`)', () => {
  it('lists resource and non-resource rules held in the namespace, and errors', () => {
    const status = subjectRulesReviewStatus(source, who('vic'), 'team');
    assert.equal(status.incomplete, false);
    assert.equal(status.evaluationError, 'clusterrole.rbac.authorization.k8s.io "gone" not found');
    assert.ok(status.resourceRules.some((r) => r.resources?.includes('selfsubjectaccessreviews')));
    assert.ok(status.resourceRules.some((r) => r.resources?.includes('pods') && r.verbs.includes('list')));
    assert.ok(status.resourceRules.some((r) => r.resourceNames?.[0] === 's1'));
    assert.ok(status.nonResourceRules.some((r) => r.nonResourceURLs?.includes('/api/*')));
  });

  it('in another namespace only the cluster-wide rules', () => {
    const status = subjectRulesReviewStatus(source, who('vic'), 'other');
    assert.equal(status.evaluationError, undefined);
    assert.ok(!status.resourceRules.some((r) => r.resources?.includes('pods')));
  });
});

describe('SelfSubjectReview status (`kubectl auth whoami`)', () => {
  it('echoes the caller', () => {
    assert.deepEqual(selfSubjectReviewStatus(who('vic')), { userInfo: { username: 'vic', groups: ['system:authenticated'] } });
    assert.deepEqual(
      selfSubjectReviewStatus({ name: 'system:serviceaccount:a:b', uid: 'u1', groups: ['system:serviceaccounts'], extra: { 'authentication.kubernetes.io/pod-name': ['p'] } }),
      { userInfo: { username: 'system:serviceaccount:a:b', uid: 'u1', groups: ['system:serviceaccounts'], extra: { 'authentication.kubernetes.io/pod-name': ['p'] } } },
    );
  });
});
