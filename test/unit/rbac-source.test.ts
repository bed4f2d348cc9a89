import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, type Grant, RbacAuthorizer, visitRulesFor } from '../../src/apiserver/rbac/authorizer.js';
import { describeGrant, ruleAllows } from '../../src/apiserver/rbac/rules.js';
import { aggregateMessages, goQuote } from '../../src/apiserver/rbac/go-format.js';
import { InMemoryRbacSource } from '../../src/apiserver/rbac/source.js';
import type { AuthorizationAttributes, RbacSource, UserInfo } from '../../src/apiserver/rbac/types.js';
import { clusterRole, clusterRoleBinding, group, role, roleBinding, saUser, serviceAccount, user, who } from '../helpers/rbac.js';

/**
 * InMemoryRbacSource's shortcuts for the authorizer (the RbacCache every server reads is one):
 * the bindings naming a user are remembered until a binding changes, and decisions with the
 * shortcut are the decisions without it. Also Go's %q fast path for plain names.
 */

function objects(): InMemoryRbacSource {
  return new InMemoryRbacSource({
    clusterRoles: [
      clusterRole('reader', [{ verbs: ['get', 'list'], apiGroups: [''], resources: ['pods'] }]),
      clusterRole('node-status', [{ verbs: ['patch'], apiGroups: [''], resources: ['nodes/status'] }]),
    ],
    roles: [role('a', 'cm', [{ verbs: ['get'], apiGroups: [''], resources: ['configmaps'], resourceNames: ['settings'] }])],
    clusterRoleBindings: [
      clusterRoleBinding('other', 'reader', [user('someone-else')]),
      clusterRoleBinding('team-reads', 'reader', [group('team')]),
      clusterRoleBinding('bot-status', 'node-status', [serviceAccount('bot', 'a')]),
      clusterRoleBinding('missing', 'no-such-role', [user('alice')]),
    ],
    roleBindings: [
      roleBinding('a', 'alice-cm', { kind: 'Role', name: 'cm' }, [user('alice')]),
      roleBinding('a', 'sa-cm', { kind: 'Role', name: 'cm' }, [serviceAccount('bot')]),
    ],
  });
}

/** The same objects without the shortcut: what the authorizer did before it existed. */
function withoutShortcut(source: InMemoryRbacSource): RbacSource {
  return {
    getRole: (ns, name) => source.getRole(ns, name),
    getClusterRole: (name) => source.getClusterRole(name),
    listRoleBindings: (ns) => source.listRoleBindings(ns),
    listClusterRoleBindings: () => source.listClusterRoleBindings(),
  };
}

describe('InMemoryRbacSource shortcuts', () => {
  it('bindingsFor answers only the bindings naming the user, in list order, and forgets them when a binding changes', () => {
    const source = objects();
    const names = (ns: string, u = who('alice', 'team')): string[] => source.bindingsFor(ns, u).map((b) => b.metadata.name ?? '');
    assert.deepEqual(names(''), ['team-reads', 'missing']);
    assert.deepEqual(names('a'), ['alice-cm']);
    assert.deepEqual(source.bindingsFor('a', saUser('a', 'bot')).map((b) => b.metadata.name), ['sa-cm']);
    assert.deepEqual(source.bindingsFor('', saUser('a', 'bot')).map((b) => b.metadata.name), ['bot-status']);
    source.putClusterRoleBinding(clusterRoleBinding('alice-too', 'reader', [user('alice')]));
    assert.deepEqual(names(''), ['team-reads', 'missing', 'alice-too'], 'a new binding is seen at once');
    source.deleteClusterRoleBinding('team-reads');
    assert.deepEqual(names(''), ['missing', 'alice-too']);
    source.deleteRoleBinding('a', 'alice-cm');
    assert.deepEqual(names('a'), []);
  });

  it('decisions and their reasons are the same with the shortcut as without it', () => {
    const source = objects();
    const plain = withoutShortcut(source);
    const users = [who('alice', 'team'), who('alice'), who('bob', 'team'), saUser('a', 'bot'), saUser('b', 'bot'), who('someone-else')];
    const requests: AuthorizationAttributes[] = [
      { verb: 'list', group: '', resource: 'pods', namespace: 'a' },
      { verb: 'get', group: '', resource: 'pods', name: 'p' },
      { verb: 'get', group: '', resource: 'configmaps', namespace: 'a', name: 'settings' },
      { verb: 'get', group: '', resource: 'configmaps', namespace: 'b', name: 'settings' },
      { verb: 'patch', group: '', resource: 'nodes', subresource: 'status', name: 'n1' },
      { verb: 'get', path: '/api' },
    ];
    let allowed = 0;
    for (const u of users) {
      for (const request of requests) {
        const expected = decide(plain, u, request);
        assert.deepEqual(decide(source, u, request), expected, `${u.name} ${JSON.stringify(request)}`);
        if (expected.allowed) allowed++;
      }
    }
    assert.ok(allowed >= 5, 'the cases include allowed requests');
  });

  it('the authorizer’s one-loop walk decides as the general walk (visitRulesFor, ruleAllows), with the same reasons', () => {
    const source = objects();
    source.putClusterRole(clusterRole('any-status', [{ verbs: ['*'], apiGroups: ['*'], resources: ['*/status'] }]));
    source.putClusterRole(clusterRole('healthz', [{ verbs: ['get'], nonResourceURLs: ['/healthz/*', '/version'] }]));
    source.putClusterRole(clusterRole('everything-apps', [{ verbs: ['get', 'list'], apiGroups: ['apps'], resources: ['*'] }]));
    source.putClusterRole(clusterRole('empty', []));
    source.putClusterRoleBinding(clusterRoleBinding('status-team', 'any-status', [group('ops')]));
    source.putClusterRoleBinding(clusterRoleBinding('health', 'healthz', [group('team'), group('ops')]));
    source.putClusterRoleBinding(clusterRoleBinding('apps', 'everything-apps', [user('bob')]));
    source.putClusterRoleBinding(clusterRoleBinding('nothing', 'empty', [group('team')]));
    source.putRoleBinding(roleBinding('a', 'gone-role', { kind: 'Role', name: 'no-such-role' }, [group('team')]));
    source.putRoleBinding({ ...roleBinding('a', 'odd-kind', { kind: 'Role', name: 'x' }, [user('bob')]), roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Unknown', name: 'x' } });
    source.putRoleBinding(roleBinding('b', 'cluster-in-b', { kind: 'ClusterRole', name: 'reader' }, [user('bob')]));
    /** What the authorizer decided before its one loop: the general walk, rule by rule. */
    const reference = (u: UserInfo, request: AuthorizationAttributes): { allowed: boolean; reason: string } => {
      let allowedBy: Grant | undefined;
      const errors: string[] = [];
      const namespace = 'path' in request ? '' : (request.namespace ?? '');
      visitRulesFor(source, u, namespace, (grant, error) => {
        if (grant && ruleAllows(request, grant.rule)) {
          allowedBy = grant;
          return false;
        }
        if (error !== undefined) errors.push(error);
        return true;
      });
      if (allowedBy) return { allowed: true, reason: `RBAC: allowed by ${describeGrant(allowedBy.binding, allowedBy.subject, allowedBy.bindingNamespace)}` };
      return { allowed: false, reason: errors.length ? `RBAC: ${aggregateMessages(errors)}` : '' };
    };
    const authorizer = new RbacAuthorizer(source);
    const users = [who('alice', 'team'), who('bob'), who('bob', 'ops'), who('carol', 'ops', 'team'), saUser('a', 'bot'), saUser('b', 'bot'), who('someone-else')];
    const requests: AuthorizationAttributes[] = [];
    for (const verb of ['get', 'list', 'patch', 'create']) {
      for (const [group, resource, subresource] of [['', 'pods'], ['', 'nodes', 'status'], ['apps', 'deployments'], ['apps', 'deployments', 'status'], ['', 'configmaps'], ['', 'pods', 'log']] as const) {
        for (const namespace of [undefined, 'a', 'b']) {
          for (const name of [undefined, 'settings', 'n1']) {
            requests.push({ verb, group, resource, ...(subresource ? { subresource } : {}), ...(namespace ? { namespace } : {}), ...(name ? { name } : {}) });
          }
        }
      }
      for (const path of ['/healthz/ping', '/healthz', '/version', '/api']) requests.push({ verb, path });
    }
    const seen = { allowed: 0, deniedWithReason: 0 };
    for (const u of users) {
      for (const request of requests) {
        const expected = reference(u, request);
        const what = `${u.name} ${JSON.stringify(request)}`;
        assert.deepEqual(decide(source, u, request), expected, what);
        const decision = authorizer.authorize(u, request);
        assert.equal(decision.allowed, expected.allowed, what);
        assert.equal(decision.reason ?? '', expected.reason, what);
        if (expected.allowed) seen.allowed++;
        else if (expected.reason) seen.deniedWithReason++;
      }
    }
    assert.ok(seen.allowed >= 50 && seen.deniedWithReason >= 20, `the cases include both: ${JSON.stringify(seen)}`);
  });

  it('goQuote quotes plain names as they are and escapes the rest as Go does', () => {
    assert.equal(goQuote('system:serviceaccount:a:bot'), '"system:serviceaccount:a:bot"');
    assert.equal(goQuote(''), '""');
    assert.equal(goQuote('say "hi"\\'), '"say \\"hi\\"\\\\"');
    assert.equal(goQuote('tab\there'), '"tab\\there"');
    assert.equal(goQuote('héllo'), '"héllo"');
    assert.equal(goQuote('\x01'), '"\\x01"');
  });
});
