import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { HttpClient } from '../../src/client/http.js';
import { LocalClient } from '../../src/client/local.js';
import { type ApiClient, DEPLOYMENTS, LEASES, NAMESPACES, PODS, type ResourceRef, SERVICEACCOUNTS } from '../../src/client/types.js';
import { type InProcessApiServer, startInProcessApiServer } from '../helpers/api-server.js';

/**
 * In-process callers (LocalClient) and HTTP callers (HttpClient) run the same verb layer, so the
 * per-kind rules hold for both: an eviction honours the pod's PodDisruptionBudget, a namespace
 * takes its contents with it, the built-in namespaces stay. Each scenario runs once per client,
 * both against one store, the HTTP one through a real API server on loopback.
 */

const PDBS: ResourceRef = { group: 'policy', version: 'v1', plural: 'poddisruptionbudgets', namespaced: true };

function pod(name: string, labels: Record<string, string>, nodeName?: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels },
    spec: { ...(nodeName ? { nodeName } : {}), containers: [{ name: 'main', command: ['sleep', '3600'] }] },
  };
}

/** What the disruption controller would write (it does not run here, so the test sets it). */
function budgetStatus(disruptionsAllowed: number): Record<string, unknown> {
  return { observedGeneration: 1, disruptionsAllowed, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1 };
}

describe('LocalClient and HttpClient run the same per-kind rules', () => {
  let server: InProcessApiServer;
  let http: HttpClient;
  let local: LocalClient;

  before(async () => {
    server = await startInProcessApiServer({ prefix: 'client-parity' });
    const { port, caPem, token } = server.target;
    http = new HttpClient({ server: `https://127.0.0.1:${port}`, caPem, token });
    // As the test servers: pods without a runtimeClassName are processes.
    local = new LocalClient(server.store, server.registry, { defaultRuntimeClass: 'process' });
    await namespaceWithAccount(local, 'default');
  });

  /**
   * A namespace and its `default` ServiceAccount: this API server runs no controllers, so the test
   * makes the account the ServiceAccount controller would (pods are admitted only with it).
   */
  async function namespaceWithAccount(c: ApiClient, name: string): Promise<void> {
    await c.create(NAMESPACES, undefined, { metadata: { name } });
    await c.create(SERVICEACCOUNTS, name, { metadata: { name: 'default' } });
  }

  after(async () => {
    http?.close();
    await server?.close();
  });

  for (const label of ['local', 'http'] as const) {
    // Chosen when the test runs: the clients exist only after before().
    const client = (): ApiClient => (label === 'local' ? local : http);

    it(`${label}: an eviction is refused (429) while the budget allows no disruption, then succeeds and spends it`, async () => {
      const c = client();
      const ns = `${label}-evict`;
      await namespaceWithAccount(c, ns);
      const created = await c.create(PODS, ns, pod('guarded', { app: 'guarded' }, 'node-a'));
      await c.update(PODS, ns, {
        ...created,
        status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
      }, 'status');
      const pdb = await c.create(PDBS, ns, {
        apiVersion: 'policy/v1',
        kind: 'PodDisruptionBudget',
        metadata: { name: 'guard' },
        spec: { minAvailable: 1, selector: { matchLabels: { app: 'guarded' } } },
      });
      await c.update(PDBS, ns, { ...pdb, status: budgetStatus(0) }, 'status');

      await assert.rejects(c.evict(ns, 'guarded'), (error: unknown) => {
        assert.ok(error instanceof ApiError, `an ApiError, got ${String(error)}`);
        assert.equal(error.code, 429);
        assert.equal(error.reason, 'TooManyRequests');
        assert.match(error.message, /disruption budget/);
        return true;
      });
      const still = await c.get(PODS, ns, 'guarded');
      assert.ok(still, 'the refused eviction left the pod');
      assert.equal(still.metadata.deletionTimestamp, undefined, 'and did not start deleting it');

      const current = await c.get(PDBS, ns, 'guard');
      await c.update(PDBS, ns, { ...current!, status: budgetStatus(1) }, 'status');
      await c.evict(ns, 'guarded');
      const evicted = await c.get(PODS, ns, 'guarded');
      assert.ok(evicted?.metadata.deletionTimestamp, 'the pod, bound to a node, is deleted gracefully');
      const spent = (await c.get(PDBS, ns, 'guard'))!.status as { disruptionsAllowed: number; disruptedPods: Record<string, string> };
      assert.equal(spent.disruptionsAllowed, 0, 'the eviction spent the budget');
      assert.ok(spent.disruptedPods.guarded, 'and recorded the pod in disruptedPods');

      // A pod already terminating costs the budget nothing, and a missing one is a 404.
      await c.evict(ns, 'guarded');
      await assert.rejects(c.evict(ns, 'nobody'), (error: unknown) => error instanceof ApiError && error.code === 404);
    });

    it(`${label}: deleting a namespace deletes its contents, and the built-in ones may not be deleted`, async () => {
      const c = client();
      const ns = `${label}-cascade`;
      await namespaceWithAccount(c, ns);
      await c.create(PODS, ns, pod('inside', { app: 'inside' }, 'node-a'));
      await c.create(DEPLOYMENTS, ns, {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: 'web' },
        spec: {
          selector: { matchLabels: { app: 'web' } },
          template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'main', command: ['sleep', '1'] }] } },
        },
      });
      await c.create(LEASES, ns, { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l' }, spec: {} });

      await c.delete(NAMESPACES, undefined, ns);
      assert.equal(await c.get(NAMESPACES, undefined, ns), undefined, 'the namespace is gone');
      for (const ref of [PODS, DEPLOYMENTS, LEASES]) {
        const { items } = await local.list(ref, ns);
        assert.deepEqual(items.map((o) => o.metadata.name), [], `no ${ref.plural} left in ${ns}`);
      }

      await assert.rejects(c.delete(NAMESPACES, undefined, 'default'), (error: unknown) => error instanceof ApiError && error.code === 403);
      assert.ok(await c.get(NAMESPACES, undefined, 'default'), 'default stays');
    });
  }
});
