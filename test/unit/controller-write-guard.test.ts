import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { CRD_DEFINITION } from '../../src/apiserver/extensions/crd-kind.js';
import { RESOURCES } from '../../src/apiserver/kinds/index.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { WriteGuardRefusedError } from '../../src/apiserver/write-guard.js';
import { LocalClient } from '../../src/client/local.js';
import { CONFIGMAPS, LEASES, NAMESPACES, PODS, type ApiClient, type ResourceRef } from '../../src/client/types.js';
import { CONTROLLER_LEASE } from '../../src/controllers/controller-manager.js';
import { PODDISRUPTIONBUDGETS } from '../../src/controllers/disruption.js';
import { fencedClient, NotLeaderError } from '../../src/controllers/fenced-client.js';
import type { WriteGuard } from '../../src/datastore/types.js';
import { FreezableClient } from '../helpers/freezable-client.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/**
 * The write guard of the controllers' fenced client, in-process over the real object store and
 * SQLite: a write that passed the term's clock check and then waited (held at a gate between the
 * fence and the store, as a paused process or a stalled datastore would hold it: a frozen client) is refused by
 * the datastore once another server has taken the controller lease, and nothing is written; if
 * it was this server's own renewal that moved the lease, the write is made again and lands. The
 * deletes that write more than their object (a namespace and its contents, a CRD's cleanup
 * finalizer, an eviction's disruption budget) carry the guard on every one of those writes.
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

function configMap(name: string, namespace = 'default'): KubeObject {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace }, data: { written: 'by a' } };
}

const CRDS: ResourceRef = { group: 'apiextensions.k8s.io', version: 'v1', plural: 'customresourcedefinitions', namespaced: false };

function crd(): KubeObject {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com' },
    spec: {
      group: 'example.com',
      scope: 'Namespaced',
      names: { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList' },
      versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }],
    },
  };
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

  /** Another server takes the controller lease (this one's elector has not seen it yet). */
  async function takeOver(): Promise<void> {
    const current = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    await api.client.update(LEASES, CONTROLLER_LEASE.namespace, { ...current, spec: { ...(current.spec as object), holderIdentity: 'b' } });
  }

  /** Runs `write` through the fence over `guarded`, held at the gate while another server takes the lease; it must be refused. */
  async function heldAcrossTakeover(guarded: ApiClient, write: (client: ApiClient) => Promise<unknown>): Promise<void> {
    const gated = new FreezableClient(guarded);
    gated.frozen = true;
    const late = write(fenced(gated));
    await until(() => gated.held === 1);
    await takeOver();
    gated.thaw();
    await assert.rejects(late, NotLeaderError);
    assert.equal(refusals.length, 1);
    assert.match(refusals[0]!, /the controller lease changed while the write was on its way/);
  }

  async function namespaceWithTwoConfigMaps(name: string): Promise<void> {
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    for (const cm of ['a', 'b']) await api.client.create(CONFIGMAPS, name, configMap(cm, name));
  }

  it('a held namespace delete, once another server took the lease, is refused and changes nothing: not the namespace, its phase or its contents', async () => {
    await namespaceWithTwoConfigMaps('shop');
    await heldAcrossTakeover(api.client.withWriteGuard(guard), (client) => client.delete(NAMESPACES, undefined, 'shop'));
    const namespace = await api.client.get(NAMESPACES, undefined, 'shop');
    assert.ok(namespace, 'the namespace is still there');
    assert.equal((namespace.status as { phase?: string }).phase, 'Active', 'and not Terminating');
    assert.deepEqual((await api.client.list(CONFIGMAPS, 'shop')).items.map((cm) => cm.metadata.name), ['a', 'b'], 'its contents are all there');
  });

  it('every write of a namespace delete carries the guard: a takeover between any two of them stops the rest', async () => {
    // The delete writes four times: the namespace marked deleted and Terminating, its two
    // ConfigMaps, and the finalize write that removes the namespace. The guard holds for the first `held` of those writes; then another server has the lease.
    const stale: WriteGuard = { ...guard(), modRevision: guard().modRevision - 1 };
    for (let held = 0; held <= 4; held++) {
      const name = `shop-${held}`;
      await namespaceWithTwoConfigMaps(name);
      let reads = 0;
      const deleting = api.client.withWriteGuard(() => (reads++ < held ? guard() : stale)).delete(NAMESPACES, undefined, name);
      if (held < 4) await assert.rejects(deleting, WriteGuardRefusedError, `refused after ${held} writes`);
      else await deleting;
      const namespace = await api.client.get(NAMESPACES, undefined, name);
      const terminating = !namespace || (namespace.status as { phase?: string }).phase === 'Terminating';
      const deletedConfigMaps = 2 - (await api.client.list(CONFIGMAPS, name)).items.length;
      assert.equal(Number(terminating) + deletedConfigMaps + Number(!namespace), held, `exactly the ${held} writes made under the guard landed`);
    }
  });

  it('a held CRD delete, once another server took the lease, is refused and leaves no cleanup finalizer or deletion mark', async () => {
    const withCrds = new LocalClient(api.store, new ResourceRegistry([...RESOURCES, CRD_DEFINITION]));
    await withCrds.create(CRDS, undefined, crd());
    await heldAcrossTakeover(withCrds.withWriteGuard(guard), (client) => client.delete(CRDS, undefined, 'widgets.example.com'));
    const stored = (await withCrds.get(CRDS, undefined, 'widgets.example.com'))!;
    assert.equal(stored.metadata.deletionTimestamp, undefined);
    assert.equal(stored.metadata.finalizers, undefined, 'the delete added no finalizer');
  });

  it('a held eviction, once another server took the lease, is refused and spends no disruption budget', async () => {
    const labels = { app: 'web' };
    await api.client.create(PODS, 'default', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web-1', namespace: 'default', labels },
      spec: { containers: [{ name: 'web', image: 'example.com/web:1', command: ['sleep', '1000'] }] },
    });
    await api.client.patch(PODS, 'default', 'web-1', 'merge', { status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] } }, 'status');
    await api.client.create(PODDISRUPTIONBUDGETS, 'default', {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'web', namespace: 'default' },
      spec: { minAvailable: 1, selector: { matchLabels: labels } },
    });
    const budget = { observedGeneration: 1, disruptionsAllowed: 1, currentHealthy: 2, desiredHealthy: 1, expectedPods: 2 };
    await api.client.patch(PODDISRUPTIONBUDGETS, 'default', 'web', 'merge', { status: budget }, 'status');
    await heldAcrossTakeover(api.client.withWriteGuard(guard), (client) => client.evict('default', 'web-1'));
    const pod = (await api.client.get(PODS, 'default', 'web-1'))!;
    assert.equal(pod.metadata.deletionTimestamp, undefined, 'the pod was not deleted');
    const status = (await api.client.get(PODDISRUPTIONBUDGETS, 'default', 'web'))!.status as { disruptionsAllowed?: number; disruptedPods?: object };
    assert.equal(status.disruptionsAllowed, 1, 'the budget was not spent');
    assert.equal(status.disruptedPods, undefined);
  });
});
