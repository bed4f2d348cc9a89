import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { CONFIGMAPS, LEASES, type ApiClient } from '../../src/client/types.js';
import { CONTROLLER_LEASE } from '../../src/controllers/controller-manager.js';
import { fencedClient, NotLeaderError } from '../../src/controllers/fenced-client.js';
import type { WriteGuard } from '../../src/datastore/types.js';
import { FreezableClient } from '../helpers/freezable-client.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/**
 * The write guard of the controllers' fenced client, in-process over the real object store and
 * SQLite: a write that passed the term's clock check and then waited (held at a gate between the
 * fence and the store, as a paused process or a stalled datastore would hold it: a frozen client) is refused by
 * the datastore once another server has taken the controller lease, and nothing is written; if
 * it was this server's own renewal that moved the lease, the write is made again and lands.
 */

function lease(holder: string): KubeObject {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: CONTROLLER_LEASE.name, namespace: CONTROLLER_LEASE.namespace },
    spec: { holderIdentity: holder, leaseDurationSeconds: 3 },
  };
}

/** A renewal of the lease by its holder: a new renewTime (an unchanged object would not be written). */
function renewal(current: KubeObject): KubeObject {
  return { ...current, spec: { ...(current.spec as object), renewTime: new Date().toISOString().replace('Z', '000Z') } };
}

function configMap(name: string): KubeObject {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'default' }, data: { written: 'by a' } };
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !check(); i++) await new Promise((resolve) => setImmediate(resolve));
  assert.ok(check(), 'the writes reached the gate');
}

describe('controller writes guarded by the controller lease', () => {
  let api: InProcessApi;
  let leaseKey: string;
  /** The lease's resourceVersion at "this server's" last renewal, as the elector keeps it. */
  let renewedVersion: string;
  let refusals: string[];

  beforeEach(async () => {
    api = await inProcessApi();
    leaseKey = api.client.storageKey(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name);
    renewedVersion = (await api.client.create(LEASES, CONTROLLER_LEASE.namespace, lease('a'))).metadata.resourceVersion!;
    refusals = [];
  });

  afterEach(async () => {
    await api.close();
  });

  const guard = (): WriteGuard => ({ key: leaseKey, modRevision: Number(renewedVersion) });
  /** As the server builds it: the fence over a client held at a gate, over the guarded in-process client. */
  const fenced = (gated: FreezableClient): ApiClient =>
    fencedClient(
      gated.client,
      () => undefined, // the clock check passes: the term has not run out by this server's clock
      'a',
      (verb, why) => refusals.push(`${verb}: ${why}`),
      guard,
    );

  it('a write held between the fence and the store, while another server takes the lease, is refused and writes nothing', async () => {
    const gated = new FreezableClient(api.client.withWriteGuard(guard));
    const client = fenced(gated);
    assert.equal((await client.create(CONFIGMAPS, 'default', configMap('before'))).metadata.name, 'before', 'an unheld write lands');

    gated.frozen = true;
    const late = client.create(CONFIGMAPS, 'default', configMap('late'));
    const lateUpdate = client.patch(CONFIGMAPS, 'default', 'before', 'merge', { data: { written: 'late' } });
    const lateDelete = client.delete(CONFIGMAPS, 'default', 'before');
    await until(() => gated.held === 3);
    // Another server takes the lease meanwhile (this one's elector has not seen it yet).
    const current = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    await api.client.update(LEASES, CONTROLLER_LEASE.namespace, { ...current, spec: { ...(current.spec as object), holderIdentity: 'b' } });
    gated.thaw();

    for (const write of [late, lateUpdate, lateDelete]) await assert.rejects(write, NotLeaderError);
    assert.equal(await api.client.get(CONFIGMAPS, 'default', 'late'), undefined, 'the held create wrote nothing');
    const before = (await api.client.get(CONFIGMAPS, 'default', 'before'))!;
    assert.deepEqual(before.data, { written: 'by a' }, 'the held patch wrote nothing, the held delete removed nothing');
    assert.equal(refusals.length, 3);
    assert.match(refusals[0]!, /the controller lease changed while the write was on its way/);
  });

  it('when this server’s own renewal moved the lease meanwhile, the held write is made again and lands', async () => {
    const gated = new FreezableClient(api.client.withWriteGuard(guard));
    const client = fenced(gated);
    gated.frozen = true;
    const held = client.create(CONFIGMAPS, 'default', configMap('held'));
    await until(() => gated.held === 1);
    // This server renews: the lease moves, and the elector records the new version.
    const current = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    renewedVersion = (await api.client.update(LEASES, CONTROLLER_LEASE.namespace, renewal(current))).metadata.resourceVersion!;
    gated.thaw();
    assert.equal((await held).metadata.name, 'held');
    assert.deepEqual(refusals, []);
  });

  it('a write refused because this server’s own renewal landed first is made again under the new revision', async () => {
    // The renewal commits between the guard's read and the write: as if the store saw the guard of
    // the revision before. A client that reads the old guard once, the current one after.
    let reads = 0;
    const stale = guard();
    const current = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    renewedVersion = (await api.client.update(LEASES, CONTROLLER_LEASE.namespace, renewal(current))).metadata.resourceVersion!;
    const racing = api.client.withWriteGuard(() => (reads++ === 0 ? stale : guard()));
    const client = fencedClient(racing, () => undefined, 'a', (verb, why) => refusals.push(`${verb}: ${why}`), guard);
    assert.equal((await client.create(CONFIGMAPS, 'default', configMap('raced'))).metadata.name, 'raced');
    assert.equal(reads, 2, 'refused once under the old revision, then made again');
    assert.deepEqual(refusals, []);
  });

  it('writes outside the guarded client carry no guard', async () => {
    const current = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    await api.client.update(LEASES, CONTROLLER_LEASE.namespace, { ...current, spec: { ...(current.spec as object), holderIdentity: 'b' } });
    assert.equal((await api.client.create(CONFIGMAPS, 'default', configMap('plain'))).metadata.name, 'plain');
  });
});
