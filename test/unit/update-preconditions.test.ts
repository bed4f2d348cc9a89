/**
 * An update's resourceVersion is a precondition on every attempt of the store's read-modify-write
 * (src/apiserver/storage.ts, guaranteedUpdate), including the attempt made again after the first
 * one, started from this server's last known object, lost its compare-and-swap. Real ObjectStore
 * on an in-memory SQLite datastore; two writers with the same resourceVersion at once, as two
 * `kubectl replace` or two servers taking an expired controller lease: exactly one may win. And
 * an attempt made again starts from the body as sent, not from what the stale attempt filled in
 * from the stored object (a Service's allocated node port).
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../../src/apiserver/resources.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { LocalClient } from '../../src/client/local.js';
import { CONFIGMAPS, LEASES, NAMESPACES, type ResourceRef } from '../../src/client/types.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { parseServiceNetwork } from '../../src/node-protocol/service-network.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

const SERVICES: ResourceRef = { group: '', version: 'v1', plural: 'services', namespaced: true };

const ROUNDS = 20;

describe('update preconditions under concurrent writers', () => {
  let api: InProcessApi;
  beforeEach(async () => {
    api = await inProcessApi();
  });
  afterEach(async () => {
    await api.close();
  });

  /** Two updates of the object at `current`'s resourceVersion at once: what each got. */
  async function race(current: KubeObject, change: (writer: string) => KubeObject): Promise<{ won: string[]; conflicts: number }> {
    const outcomes = await Promise.allSettled(['a', 'b'].map((writer) => api.client.update(current.kind === 'Lease' ? LEASES : CONFIGMAPS, 'default', change(writer))));
    const won: string[] = [];
    let conflicts = 0;
    outcomes.forEach((outcome, i) => {
      if (outcome.status === 'fulfilled') won.push(['a', 'b'][i]!);
      else if (outcome.reason instanceof ApiError && outcome.reason.code === 409) conflicts++;
      else throw outcome.reason;
    });
    return { won, conflicts };
  }

  it('two replaces of a ConfigMap at the same resourceVersion: one is stored, the other is a 409, in every round', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `cm-${round}`;
      const made = await api.client.create(CONFIGMAPS, 'default', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'default' }, data: { by: 'creator' } });
      // Updated once by this server: the store starts the next update from the object it wrote (its guess).
      const created = await api.client.update(CONFIGMAPS, 'default', { ...made, data: { by: 'updater' } });
      const { won, conflicts } = await race(created, (writer) => ({ ...created, data: { by: writer } }));
      assert.equal(won.length, 1, `round ${round}: ${won.length} updates at resourceVersion ${created.metadata.resourceVersion} were stored (${won.join(', ')})`);
      assert.equal(conflicts, 1);
      const stored = await api.client.get(CONFIGMAPS, 'default', name);
      assert.equal((stored?.data as Record<string, string> | undefined)?.by, won[0], `round ${round}: the stored object is the winner's`);
    }
  });

  it('two candidates taking the same expired Lease: one holds it, the other is refused', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `lease-${round}`;
      const made = await api.client.create(LEASES, 'default', {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace: 'default' },
        spec: { holderIdentity: 'gone', leaseDurationSeconds: 3 },
      });
      // The old holder's last renewal, through this server: the store's guess for the next update.
      const created = await api.client.update(LEASES, 'default', { ...made, spec: { holderIdentity: 'gone', leaseDurationSeconds: 3, renewTime: '2026-12-02T00:00:00.000000Z' } });
      const { won } = await race(created, (writer) => ({ ...created, spec: { holderIdentity: writer, leaseDurationSeconds: 3 } }));
      assert.equal(won.length, 1, `round ${round}: both candidates were told they hold the lease`);
      const stored = await api.client.get(LEASES, 'default', name);
      assert.equal((stored?.spec as { holderIdentity?: string }).holderIdentity, won[0]);
    }
  });

  it('a replace that keeps a Service’s node port, made again after losing to a write that moved the port, keeps the new port (not the one its stale attempt filled in)', async () => {
    const datastore = openSqliteDatastore(':memory:');
    try {
      const { network } = parseServiceNetwork({ clusterCidr: '10.42.0.0/16', serviceCidr: '10.96.0.0/24', serviceNodePortRange: '30000-30099', clusterDns: '10.96.0.10', clusterDomain: 'cluster.local' });
      const client = new LocalClient(new ObjectStore(datastore), new ResourceRegistry(), { serviceNetwork: network! });
      for (const name of BUILT_IN_NAMESPACES) await client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
      const stale: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const name = `svc-${round}`;
        const ports = (nodePort?: number): unknown[] => [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 80, ...(nodePort ? { nodePort } : {}) }];
        const made = await client.create(SERVICES, 'default', { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec: { type: 'NodePort', selector: { app: name }, ports: ports(30000 + 2 * round) } });
        // Updated once by this server: its guess for the next updates.
        const known = await client.update(SERVICES, 'default', { ...made, metadata: { ...made.metadata, labels: { round: String(round) } } });
        const spec = known.spec as Record<string, unknown>;
        const moved = 30001 + 2 * round;
        // One writer moves the port; the other replaces the Service without naming a port or a
        // resourceVersion (the port is then kept as allocated), at once.
        const { metadata } = known;
        const { resourceVersion: _rv, ...unversioned } = metadata;
        await Promise.all([
          client.update(SERVICES, 'default', { ...known, spec: { ...spec, ports: ports(moved) } }),
          client.update(SERVICES, 'default', { ...known, metadata: unversioned, spec: { ...spec, ports: ports(), selector: { app: name, replaced: 'yes' } } }),
        ]);
        const stored = await client.get(SERVICES, 'default', name);
        const port = ((stored?.spec as { ports: { nodePort: number }[] }).ports[0]!).nodePort;
        // Either order ends at the moved port: the replace keeps whatever is allocated when it lands.
        if (port !== moved) stale.push(round);
      }
      assert.deepEqual(stale, [], `rounds whose replace put the old node port back: ${stale.join(', ')}`);
    } finally {
      datastore.close();
    }
  });
});
