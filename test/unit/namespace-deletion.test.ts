/**
 * Namespace deletion in-process, over an in-memory store and the real LocalClient: the rules of a
 * namespace (the `kubernetes` finalizer in its spec from creation, changed only through
 * namespaces/finalize; Terminating only with a deletionTimestamp), a delete cut short after its
 * first write, and the namespace finisher, run by a real ControllerManager on a FakeClock, that
 * completes it.
 *
 * Run: node --import tsx --test test/unit/namespace-deletion.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { ApiError } from '../../src/apiserver/errors.js';
import { awaitsContentRemoval } from '../../src/apiserver/kinds/namespaces.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { WriteGuardRefusedError } from '../../src/apiserver/write-guard.js';
import { CONFIGMAPS, LEASES, NAMESPACES } from '../../src/client/types.js';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { CONTROLLER_LEASE, ControllerManager } from '../../src/controllers/controller-manager.js';
import { NAMESPACE_FINISH_SETTLE_MS, NamespaceFinisher } from '../../src/controllers/namespace-finisher.js';
import type { WriteGuard } from '../../src/datastore/types.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

const TIMINGS = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000, defaultUnavailableTolerationMs: 0 };
const until = <T>(check: () => Promise<T | undefined | false>, what: string): Promise<T> => eventually(check, what, 10_000, 5);

const namespace = (name: string, extra: Partial<KubeObject> = {}): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name }, ...extra });
const configMap = (name: string, ns: string): KubeObject => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns }, data: { a: 'b' } });
const specFinalizers = (ns: KubeObject | undefined): unknown => (ns?.spec as { finalizers?: unknown } | undefined)?.finalizers;
const phaseOf = (ns: KubeObject | undefined): unknown => (ns?.status as { phase?: unknown } | undefined)?.phase;

async function refusedWith(promise: Promise<unknown>, code: number): Promise<ApiError> {
  const error = await promise.then(
    () => assert.fail(`expected a ${code}`),
    (e: unknown) => e,
  );
  assert.ok(error instanceof ApiError, `an ApiError, got ${String(error)}`);
  assert.equal(error.code, code, error.message);
  return error;
}

describe('namespace deletion', () => {
  let api: InProcessApi;
  let manager: ControllerManager;
  let clock: FakeClock;

  before(async () => {
    api = await inProcessApi();
    clock = new FakeClock();
    manager = new ControllerManager({
      client: api.client,
      logger: api.logger,
      identity: 'server-a',
      timings: TIMINGS,
      clock,
      termControllers: [(informers, termClock) => new NamespaceFinisher(api.client, informers, api.logger, { clock: termClock })],
    });
    manager.start();
    await settle();
    assert.ok(manager.isLeader);
  });

  after(async () => {
    await manager.stop();
    await api.close();
  });

  it('a namespace holds the kubernetes finalizer from creation; a plain update keeps it, namespaces/finalize changes it', async () => {
    const created = await api.client.create(NAMESPACES, undefined, namespace('rules', { spec: { finalizers: ['example.com/mine'] } }));
    assert.deepEqual(specFinalizers(created), ['example.com/mine', 'kubernetes'], 'added to what the client listed');
    const updated = await api.client.update(NAMESPACES, undefined, { ...created, spec: { finalizers: [] } });
    assert.deepEqual(specFinalizers(updated), ['example.com/mine', 'kubernetes'], 'an update does not change spec.finalizers');
    const finalized = await api.client.update(NAMESPACES, undefined, { ...updated, spec: { finalizers: ['kubernetes'] } }, 'finalize');
    assert.deepEqual(specFinalizers(finalized), ['kubernetes']);
    await refusedWith(api.client.update(NAMESPACES, undefined, { ...finalized, spec: { finalizers: ['not a name!'] } }, 'finalize'), 422);
  });

  it('namespaces/status cannot make a namespace Terminating unless it is being deleted', async () => {
    const created = await api.client.create(NAMESPACES, undefined, namespace('status-rules'));
    const error = await refusedWith(api.client.update(NAMESPACES, undefined, { ...created, status: { phase: 'Terminating' } }, 'status'), 422);
    assert.match(error.message, /may only be 'Active' if `deletionTimestamp` is empty/);
    await api.client.create(CONFIGMAPS, 'status-rules', configMap('still-allowed', 'status-rules'));
  });

  it('a delete cut short after its first write leaves the namespace marked; creates are refused; the finisher completes it after the settle time', async () => {
    await api.client.create(NAMESPACES, undefined, namespace('cut'));
    for (const name of ['a', 'b', 'c']) await api.client.create(CONFIGMAPS, 'cut', configMap(name, 'cut'));
    // A guard that holds for the first write only: as a takeover right after it.
    const leaseKey = api.client.storageKey(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name);
    const lease = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    const held: WriteGuard = { key: leaseKey, modRevision: Number(lease.metadata.resourceVersion) };
    const stale: WriteGuard = { key: leaseKey, modRevision: held.modRevision - 1 };
    let writes = 0;
    // The manager renews the lease meanwhile only on the fake clock, which stands still here.
    await assert.rejects(api.client.withWriteGuard(() => (writes++ < 1 ? held : stale)).delete(NAMESPACES, undefined, 'cut'), WriteGuardRefusedError);

    const marked = (await api.client.get(NAMESPACES, undefined, 'cut'))!;
    assert.ok(marked.metadata.deletionTimestamp, 'marked deleted by the first write');
    assert.equal(phaseOf(marked), 'Terminating');
    assert.deepEqual(specFinalizers(marked), ['kubernetes'], 'still held for its contents');
    assert.ok(awaitsContentRemoval(marked));
    assert.equal((await api.client.list(CONFIGMAPS, 'cut')).items.length, 3, 'no content deleted');
    const refused = await refusedWith(api.client.create(CONFIGMAPS, 'cut', configMap('late', 'cut')), 403);
    assert.match(refused.message, /being terminated/);
    const error = await refusedWith(api.client.update(NAMESPACES, undefined, { ...marked, status: { phase: 'Active' } }, 'status'), 422);
    assert.match(error.message, /may only be 'Terminating' if `deletionTimestamp` is not empty/);

    // Not before the settle time: a request still running elsewhere finishes first.
    await clock.advance(NAMESPACE_FINISH_SETTLE_MS - 500);
    await settle(50);
    assert.ok(await api.client.get(NAMESPACES, undefined, 'cut'), 'left alone before the settle time');
    await clock.advance(1_000);
    await until(async () => !(await api.client.get(NAMESPACES, undefined, 'cut')), 'the finisher removed the namespace');
    assert.equal((await api.client.list(CONFIGMAPS, 'cut')).items.length, 0, 'and its contents');
    // The name starts afresh.
    const again = await api.client.create(NAMESPACES, undefined, namespace('cut'));
    assert.equal(again.metadata.deletionTimestamp, undefined);
    assert.equal(phaseOf(again), 'Active');
  });

  it('two deletes of one namespace at once both succeed: the one that finds it gone at the end does not answer 404', async () => {
    await api.client.create(NAMESPACES, undefined, namespace('twice'));
    for (let i = 0; i < 20; i++) await api.client.create(CONFIGMAPS, 'twice', configMap(`cm-${i}`, 'twice'));
    await Promise.all([api.client.delete(NAMESPACES, undefined, 'twice'), api.client.delete(NAMESPACES, undefined, 'twice')]);
    assert.equal(await api.client.get(NAMESPACES, undefined, 'twice'), undefined);
    assert.equal((await api.client.list(CONFIGMAPS, 'twice')).items.length, 0);
  });

  it('a metadata finalizer holds a deleted namespace after its contents are gone; the finisher leaves it to its owner', async () => {
    await api.client.create(NAMESPACES, undefined, namespace('held', { metadata: { name: 'held', finalizers: ['example.com/hold'] } }));
    await api.client.create(CONFIGMAPS, 'held', configMap('a', 'held'));
    await api.client.delete(NAMESPACES, undefined, 'held');
    const waiting = (await api.client.get(NAMESPACES, undefined, 'held'))!;
    assert.ok(waiting.metadata.deletionTimestamp);
    assert.equal(phaseOf(waiting), 'Terminating');
    assert.deepEqual(specFinalizers(waiting), [], 'its contents are gone');
    assert.equal(awaitsContentRemoval(waiting), false);
    assert.equal((await api.client.list(CONFIGMAPS, 'held')).items.length, 0);
    await clock.advance(NAMESPACE_FINISH_SETTLE_MS * 2);
    await settle(50);
    assert.equal((await api.client.get(NAMESPACES, undefined, 'held'))?.metadata.resourceVersion, waiting.metadata.resourceVersion, 'not written by the finisher');
    await api.client.update(NAMESPACES, undefined, { ...waiting, metadata: { ...waiting.metadata, finalizers: [] } });
    assert.equal(await api.client.get(NAMESPACES, undefined, 'held'), undefined, 'taking the last finalizer off removes it');
  });
});
