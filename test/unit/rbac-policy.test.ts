import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { AGGREGATE_TO_VIEW, defaultClusterRoleBindings, defaultClusterRoles } from '../../src/apiserver/rbac/defaults.js';
import type { ClusterRole, ClusterRoleBinding } from '../../src/apiserver/rbac/types.js';
import { reconcileDefaultRbac } from '../../src/cluster/rbac-defaults.js';
import { CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES } from '../../src/client/types.js';
import { ClusterRoleAggregationController } from '../../src/controllers/rbac-aggregation.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { clusterRole } from '../helpers/rbac.js';
import { eventually } from '../helpers/server.js';

/**
 * The default policy reconciled at server start, and the ClusterRole aggregation controller,
 * in-process over the real LocalClient and an in-memory SQLite store.
 */

describe('the default RBAC policy at start, and ClusterRole aggregation', () => {
  let api: InProcessApi;

  beforeEach(async () => {
    api = await inProcessApi();
  });

  afterEach(async () => {
    await api.close();
  });

  const getRole = async (name: string): Promise<ClusterRole | undefined> =>
    (await api.client.get(CLUSTER_ROLES, undefined, name)) as unknown as ClusterRole | undefined;

  it('creates every default, changes nothing on a second start, restores what was removed and leaves autoupdate=false alone', async () => {
    await reconcileDefaultRbac(api.client, api.logger);
    const roles = (await api.client.list(CLUSTER_ROLES, undefined)).items;
    const bindings = (await api.client.list(CLUSTER_ROLE_BINDINGS, undefined)).items;
    assert.deepEqual(roles.map((r) => r.metadata.name).sort(), defaultClusterRoles().map((r) => r.metadata.name).sort());
    assert.deepEqual(bindings.map((b) => b.metadata.name).sort(), defaultClusterRoleBindings().map((b) => b.metadata.name).sort());
    const view = (await getRole('view'))!;
    assert.ok((view.rules ?? []).some((r) => r.resources?.includes('pods')), 'aggregated roles are stored already computed');

    const revision = (await api.client.list(CLUSTER_ROLES, undefined)).resourceVersion;
    await reconcileDefaultRbac(api.client, api.logger);
    assert.equal((await api.client.list(CLUSTER_ROLES, undefined)).resourceVersion, revision, 'a second start writes nothing');

    // An administrator narrows system:basic-user and removes a subject from system:discovery: both come back.
    await api.client.patch(CLUSTER_ROLES, undefined, 'system:basic-user', 'merge', { rules: [] });
    await api.client.patch(CLUSTER_ROLE_BINDINGS, undefined, 'system:discovery', 'merge', { subjects: [] });
    // ...but system:public-info-viewer marked autoupdate=false stays as they left it.
    await api.client.patch(CLUSTER_ROLES, undefined, 'system:public-info-viewer', 'merge', {
      metadata: { annotations: { 'rbac.authorization.kubernetes.io/autoupdate': 'false' } },
      rules: [],
    });
    await reconcileDefaultRbac(api.client, api.logger);
    assert.equal((await getRole('system:basic-user'))!.rules!.length, 2);
    const discovery = (await api.client.get(CLUSTER_ROLE_BINDINGS, undefined, 'system:discovery')) as unknown as ClusterRoleBinding;
    assert.deepEqual(discovery.subjects, [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: 'system:authenticated' }]);
    assert.deepEqual((await getRole('system:public-info-viewer'))!.rules, []);
  });

  it('two servers reconciling at once both succeed and leave one copy of each default', async () => {
    await Promise.all([reconcileDefaultRbac(api.client, api.logger), reconcileDefaultRbac(api.client, api.logger)]);
    assert.equal((await api.client.list(CLUSTER_ROLES, undefined)).items.length, defaultClusterRoles().length);
  });

  it('the aggregation controller gives view, edit and admin the rules of a new labelled ClusterRole, and takes them back', async () => {
    await reconcileDefaultRbac(api.client, api.logger);
    const controller = new ClusterRoleAggregationController(api.client, api.logger);
    await controller.start();
    try {
      const crontabs = { verbs: ['get', 'list'], apiGroups: ['stable.example.com'], resources: ['crontabs'] };
      const extra = clusterRole('crontab-reader', [crontabs], { metadata: { name: 'crontab-reader', labels: { [AGGREGATE_TO_VIEW]: 'true' } } });
      await api.client.create(CLUSTER_ROLES, undefined, extra as unknown as KubeObject);
      const has = async (name: string): Promise<boolean> => ((await getRole(name))?.rules ?? []).some((r) => r.resources?.includes('crontabs'));
      // view selects the new role; edit selects view; admin selects edit.
      for (const name of ['view', 'edit', 'admin']) await eventually(() => has(name), `${name} aggregates crontabs`);
      assert.equal(await has('cluster-admin'), false, 'a role without an aggregationRule is left alone');
      await api.client.patch(CLUSTER_ROLES, undefined, 'crontab-reader', 'merge', { metadata: { labels: { [AGGREGATE_TO_VIEW]: null } } });
      for (const name of ['view', 'edit', 'admin']) await eventually(async () => !(await has(name)), `${name} drops crontabs`);
    } finally {
      controller.stop();
    }
  });
});
