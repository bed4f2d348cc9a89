/**
 * An update's resourceVersion is a precondition on every attempt of the store's read-modify-write
 * (src/apiserver/storage.ts, guaranteedUpdate), including the attempt made again after the first
 * one, started from this server's last known object, lost its compare-and-swap. Real ObjectStore
 * on an in-memory SQLite datastore; two writers with the same resourceVersion at once, as two
 * `kubectl replace` or two servers taking an expired controller lease: exactly one may win.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { CONFIGMAPS, LEASES } from '../../src/client/types.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

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
});
