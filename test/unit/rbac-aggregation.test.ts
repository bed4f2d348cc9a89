import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { aggregateAll, aggregatedRules, labelSelectorMatcher } from '../../src/apiserver/rbac/aggregation.js';
import type { ClusterRole, LabelSelector, PolicyRule } from '../../src/apiserver/rbac/types.js';
import { clusterRole } from '../helpers/rbac.js';

/**
 * ClusterRole aggregation (src/apiserver/rbac/aggregation.ts): label selectors as Kubernetes
 * reads them, the rules one aggregated role gathers, and a chain of aggregated roles settled
 * as the controller leaves it.
 */

describe('label selectors of clusterRoleSelectors', () => {
  const labels = { tier: 'web', env: 'prod' };
  const cases: Array<[string, LabelSelector, Record<string, string>, boolean]> = [
    ['matchLabels equal', { matchLabels: { tier: 'web' } }, labels, true],
    ['matchLabels different value', { matchLabels: { tier: 'db' } }, labels, false],
    ['matchLabels missing key', { matchLabels: { team: 'a' } }, labels, false],
    ['matchLabels all must hold', { matchLabels: { tier: 'web', env: 'dev' } }, labels, false],
    ['In', { matchExpressions: [{ key: 'env', operator: 'In', values: ['prod', 'staging'] }] }, labels, true],
    ['In, key absent', { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }, labels, false],
    ['NotIn', { matchExpressions: [{ key: 'env', operator: 'NotIn', values: ['prod'] }] }, labels, false],
    ['NotIn, key absent matches', { matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, labels, true],
    ['Exists', { matchExpressions: [{ key: 'tier', operator: 'Exists' }] }, labels, true],
    ['DoesNotExist', { matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }, labels, false],
    ['labels and expressions together', { matchLabels: { tier: 'web' }, matchExpressions: [{ key: 'env', operator: 'Exists' }] }, labels, true],
    ['empty selector matches everything', {}, {}, true],
    ['Exists sees only real labels, not object built-ins', { matchExpressions: [{ key: 'constructor', operator: 'Exists' }] }, {}, false],
    ['DoesNotExist likewise', { matchExpressions: [{ key: 'toString', operator: 'DoesNotExist' }] }, {}, true],
  ];
  for (const [name, selector, on, expected] of cases) {
    it(name, () => {
      const matcher = labelSelectorMatcher(selector);
      assert.equal(typeof matcher, 'function');
      assert.equal((matcher as (l: Record<string, string>) => boolean)(on), expected);
    });
  }

  it('refuses invalid selectors', () => {
    assert.deepEqual(labelSelectorMatcher({ matchExpressions: [{ key: 'a', operator: 'Near' }] }), { error: '"Near" is not a valid label selector operator' });
    assert.match((labelSelectorMatcher({ matchExpressions: [{ key: 'a', operator: 'In', values: [] }] }) as { error: string }).error, /values set can't be empty/);
    assert.match((labelSelectorMatcher({ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] }) as { error: string }).error, /must be empty/);
  });
});

const rule = (resource: string, verbs = ['get']): PolicyRule => ({ apiGroups: [''], resources: [resource], verbs });
const aggregated = (name: string, label: string, rules: PolicyRule[] = [], labels: Record<string, string> = {}): ClusterRole =>
  clusterRole(name, rules, { metadata: { name, labels }, aggregationRule: { clusterRoleSelectors: [{ matchLabels: { [label]: 'true' } }] } });
const labelled = (name: string, labels: Record<string, string>, rules: PolicyRule[]): ClusterRole => clusterRole(name, rules, { metadata: { name, labels } });

describe('the rules of one aggregated ClusterRole', () => {
  it('gathers the rules of every selected role, by name order, each rule once', () => {
    const target = aggregated('monitoring', 'agg-mon', [rule('stale')]);
    const roles = [
      target,
      labelled('z-b', { 'agg-mon': 'true' }, [rule('services'), rule('pods')]),
      labelled('a-a', { 'agg-mon': 'true' }, [{ verbs: ['get'], resources: ['pods'], apiGroups: [''] }, rule('endpoints')]),
      labelled('other', { 'agg-mon': 'false' }, [rule('secrets')]),
      labelled('unlabelled', {}, [rule('nodes')]),
    ];
    // The target's own (stale) rules are not gathered back, and pods (two spellings) comes once.
    assert.deepEqual(aggregatedRules(target, roles), { rules: [rule('pods'), rule('endpoints'), rule('services')], errors: [] });
  });

  it('selects with any of several selectors, and never itself', () => {
    const target = clusterRole('t', [], {
      metadata: { name: 't', labels: { a: 'true' } },
      aggregationRule: { clusterRoleSelectors: [{ matchLabels: { a: 'true' } }, { matchLabels: { b: 'true' } }] },
    });
    const roles = [target, labelled('x', { a: 'true' }, [rule('x')]), labelled('y', { b: 'true' }, [rule('y')])];
    assert.deepEqual(aggregatedRules(target, roles).rules, [rule('x'), rule('y')]);
  });

  it('reports an invalid selector and still applies the valid ones', () => {
    const target = clusterRole('t', [], {
      aggregationRule: { clusterRoleSelectors: [{ matchExpressions: [{ key: 'a', operator: 'Near' }] }, { matchLabels: { b: 'true' } }] },
    });
    const result = aggregatedRules(target, [target, labelled('y', { b: 'true' }, [rule('y')])]);
    assert.deepEqual(result, { rules: [rule('y')], errors: ['"Near" is not a valid label selector operator'] });
  });

  it('gathers nothing when nothing matches', () => {
    const target = aggregated('t', 'nothing-has-this', [rule('old')]);
    assert.deepEqual(aggregatedRules(target, [target]).rules, []);
  });
});

describe('aggregating every ClusterRole', () => {
  // admin ⊇ edit ⊇ view, the way the default roles are built.
  const chain = (): ClusterRole[] => [
    aggregated('admin', 'to-admin'),
    aggregated('edit', 'to-edit', [], { 'to-admin': 'true' }),
    aggregated('view', 'to-view', [], { 'to-edit': 'true' }),
    labelled('to-admin-rules', { 'to-admin': 'true' }, [rule('roles', ['*'])]),
    labelled('to-edit-rules', { 'to-edit': 'true' }, [rule('secrets', ['*'])]),
    labelled('to-view-rules', { 'to-view': 'true' }, [rule('pods')]),
  ];
  const rulesOf = (roles: ClusterRole[], name: string) => roles.find((r) => r.metadata.name === name)?.rules;

  it('settles a chain of aggregated roles', () => {
    const result = aggregateAll(chain());
    assert.equal(result.converged, true);
    assert.deepEqual(rulesOf(result.clusterRoles, 'view'), [rule('pods')]);
    assert.deepEqual(rulesOf(result.clusterRoles, 'edit'), [rule('secrets', ['*']), rule('pods')]);
    assert.deepEqual(rulesOf(result.clusterRoles, 'admin'), [rule('secrets', ['*']), rule('pods'), rule('roles', ['*'])]);
    assert.deepEqual(rulesOf(result.clusterRoles, 'to-view-rules'), [rule('pods')]);
  });

  it('carries a role added at the bottom all the way up', () => {
    const roles = [...chain(), labelled('extra-view', { 'to-view': 'true' }, [rule('configmaps')])];
    const result = aggregateAll(roles);
    for (const name of ['view', 'edit', 'admin']) {
      assert.ok(rulesOf(result.clusterRoles, name)?.some((r) => r.resources?.[0] === 'configmaps'), name);
    }
  });

  it('does not change the roles it was given', () => {
    const roles = chain();
    aggregateAll(roles);
    assert.deepEqual(rulesOf(roles, 'admin'), []);
  });

  it('settles roles that select each other', () => {
    const roles = [aggregated('a', 'b-sel', [rule('x')], { 'a-sel': 'true' }), aggregated('b', 'a-sel', [rule('y')], { 'b-sel': 'true' })];
    const result = aggregateAll(roles);
    assert.equal(result.converged, true);
    assert.deepEqual(rulesOf(result.clusterRoles, 'a'), rulesOf(result.clusterRoles, 'b'));
  });
});
