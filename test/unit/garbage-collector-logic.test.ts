import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { dependentsChoiceOf, finalizersForDeletion } from '../../src/apiserver/deletion.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject, OwnerReference } from '../../src/apiserver/objects.js';
import {
  decideDependent,
  decideOwner,
  type OwnerState,
  ownerStateOf,
  withoutFinalizer,
  withoutOwners,
} from '../../src/controllers/garbage-collector-logic.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { SqliteDatastore } from '../../src/datastore/sqlite.js';
import { tempDir } from '../helpers/server.js';

/**
 * The pure decisions behind deletion propagation: which finalizers a DELETE leaves on an object
 * (kube-apiserver's store.go rules), and what the garbage collector does with an owner being
 * deleted and with each dependent (kube-controller-manager's garbagecollector rules); and the
 * object store applying the finalizer rules, in process with no collector to race.
 */

const T = '2025-01-01T00:00:00Z';

function ref(uid: string, extra: Partial<OwnerReference> = {}): OwnerReference {
  return { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: `rs-${uid}`, uid, controller: true, ...extra };
}

function obj(name: string, meta: Partial<KubeObject['metadata']> = {}): KubeObject {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', uid: `uid-${name}`, ...meta } };
}

describe('finalizersForDeletion: what a DELETE leaves on the object', () => {
  const cases: { what: string; current?: string[]; choice: Parameters<typeof finalizersForDeletion>[1]; want: string[] | undefined }[] = [
    { what: 'background, no finalizers: nothing to change', choice: { propagationPolicy: 'Background' }, want: undefined },
    { what: 'no choice, no finalizers: nothing to change', choice: {}, want: undefined },
    { what: 'orphan adds the orphan finalizer', choice: { propagationPolicy: 'Orphan' }, want: ['orphan'] },
    { what: 'foreground adds foregroundDeletion', choice: { propagationPolicy: 'Foreground' }, want: ['foregroundDeletion'] },
    { what: 'orphanDependents true is orphan', choice: { orphanDependents: true }, want: ['orphan'] },
    { what: 'orphanDependents false is background', current: ['orphan'], choice: { orphanDependents: false }, want: [] },
    { what: 'other finalizers are kept, the new one goes last', current: ['example.com/a'], choice: { propagationPolicy: 'Orphan' }, want: ['example.com/a', 'orphan'] },
    { what: 'no choice keeps an orphan finalizer already there', current: ['orphan'], choice: {}, want: undefined },
    { what: 'no choice keeps foregroundDeletion already there', current: ['foregroundDeletion'], choice: {}, want: undefined },
    { what: 'background takes orphan off (the object may then go)', current: ['orphan'], choice: { propagationPolicy: 'Background' }, want: [] },
    { what: 'foreground replaces orphan', current: ['x', 'orphan'], choice: { propagationPolicy: 'Foreground' }, want: ['x', 'foregroundDeletion'] },
    { what: 'orphan again is no change', current: ['orphan'], choice: { propagationPolicy: 'Orphan' }, want: undefined },
  ];
  for (const c of cases) {
    it(c.what, () => assert.deepEqual(finalizersForDeletion(c.current, c.choice), c.want));
  }
});

describe('dependentsChoiceOf: DeleteOptions checked as ValidateDeleteOptions does', () => {
  it('reads propagationPolicy and orphanDependents', () => {
    assert.deepEqual(dependentsChoiceOf({}), {});
    assert.deepEqual(dependentsChoiceOf({ propagationPolicy: 'Foreground' }), { propagationPolicy: 'Foreground' });
    assert.deepEqual(dependentsChoiceOf({ orphanDependents: false }), { orphanDependents: false });
    assert.deepEqual(dependentsChoiceOf({ propagationPolicy: null, orphanDependents: null }), {});
  });

  it('an unknown policy, both fields, or a non-boolean orphanDependents is refused', () => {
    const refused = (options: Record<string, unknown>, code: number, pattern: RegExp): void => {
      assert.throws(() => dependentsChoiceOf(options as never), (error: unknown) => {
        assert.ok(error instanceof ApiError);
        assert.equal(error.code, code);
        assert.match(error.message, pattern);
        return true;
      });
    };
    refused({ propagationPolicy: 'background' }, 422, /^DeleteOptions\.meta\.k8s\.io "" is invalid: propagationPolicy: Unsupported value: "background"/);
    refused({ propagationPolicy: 'Orphan', orphanDependents: true }, 422, /cannot be both set/);
    refused({ orphanDependents: 'yes' }, 400, /orphanDependents must be a boolean/);
  });
});

describe('ownerStateOf: an owner as its dependent sees it', () => {
  const r = ref('o');
  it('missing, or another object under the name, is dangling', () => {
    assert.equal(ownerStateOf(r, undefined), 'dangling');
    assert.equal(ownerStateOf(r, obj('rs-o', { uid: 'other' })), 'dangling');
  });
  it('present is solid, even while it is being deleted in the background or orphaning', () => {
    assert.equal(ownerStateOf(r, obj('rs-o', { uid: 'o' })), 'solid');
    assert.equal(ownerStateOf(r, obj('rs-o', { uid: 'o', deletionTimestamp: T, finalizers: ['orphan'] })), 'solid');
    assert.equal(ownerStateOf(r, obj('rs-o', { uid: 'o', deletionTimestamp: T, finalizers: ['example.com/x'] })), 'solid');
  });
  it('being deleted in the foreground is waiting', () => {
    assert.equal(ownerStateOf(r, obj('rs-o', { uid: 'o', deletionTimestamp: T, finalizers: ['foregroundDeletion'] })), 'waiting');
  });
});

describe('decideDependent: what the collector does with a dependent', () => {
  const states = (entries: [string, OwnerState][]): Map<string, OwnerState> => new Map(entries);

  it('no owners, or already being deleted: keep', () => {
    assert.deepEqual(decideDependent(obj('p'), states([]), false), { action: 'keep' });
    const deleting = obj('p', { ownerReferences: [ref('a')], deletionTimestamp: T });
    assert.deepEqual(decideDependent(deleting, states([['a', 'dangling']]), false), { action: 'keep' });
  });

  it('a solid owner keeps it; references to owners gone or waiting are taken off', () => {
    const p = obj('p', { ownerReferences: [ref('a'), ref('b', { controller: false }), ref('c', { controller: false })] });
    assert.deepEqual(decideDependent(p, states([['a', 'solid'], ['b', 'solid'], ['c', 'solid']]), false), { action: 'keep' });
    assert.deepEqual(decideDependent(p, states([['a', 'solid'], ['b', 'dangling'], ['c', 'waiting']]), false), { action: 'unlink', ownerUids: ['b', 'c'] });
  });

  it('owners of kinds the collector does not know count as solid', () => {
    const p = obj('p', { ownerReferences: [ref('a'), ref('x', { kind: 'Widget', controller: false })] });
    assert.deepEqual(decideDependent(p, states([['a', 'dangling']]), false), { action: 'unlink', ownerUids: ['a'] });
  });

  it('every owner gone: deleted in the background, or as its own finalizers ask', () => {
    const p = obj('p', { ownerReferences: [ref('a')] });
    assert.deepEqual(decideDependent(p, states([['a', 'dangling']]), false), { action: 'delete', propagationPolicy: 'Background' });
    assert.deepEqual(decideDependent(p, states([['a', 'dangling']]), true), { action: 'delete', propagationPolicy: 'Background' });
    const orphaning = obj('p', { ownerReferences: [ref('a')], finalizers: ['orphan'] });
    assert.deepEqual(decideDependent(orphaning, states([['a', 'dangling']]), true), { action: 'delete', propagationPolicy: 'Orphan' });
  });

  it('an owner waiting in the foreground passes the foreground on to a dependent that has dependents', () => {
    const rs = obj('rs', { ownerReferences: [ref('d', { kind: 'Deployment' })] });
    assert.deepEqual(decideDependent(rs, states([['d', 'waiting']]), true), { action: 'delete', propagationPolicy: 'Foreground' });
    assert.deepEqual(decideDependent(rs, states([['d', 'waiting']]), false), { action: 'delete', propagationPolicy: 'Background' });
  });
});

describe('decideOwner: what the collector does for an owner being deleted', () => {
  const owner = (finalizers: string[], deleting = true): KubeObject =>
    obj('rs-o', { uid: 'o', finalizers, ...(deleting ? { deletionTimestamp: T } : {}) });
  const blocking = obj('p1', { ownerReferences: [ref('o', { blockOwnerDeletion: true })] });
  const nonBlocking = obj('p2', { ownerReferences: [ref('o', { controller: false })] });
  const terminating = obj('p3', { ownerReferences: [ref('o', { blockOwnerDeletion: true })], deletionTimestamp: T });
  const someoneElses = obj('p4', { ownerReferences: [ref('z', { blockOwnerDeletion: true })] });

  it('not being deleted, or without a deletion finalizer: nothing', () => {
    assert.deepEqual(decideOwner(owner(['orphan'], false), [blocking]), { action: 'none' });
    assert.deepEqual(decideOwner(owner(['example.com/x']), [blocking]), { action: 'none' });
  });

  it('orphan: unlink every dependent (blocking or not, terminating or not); the finalizer comes off when none is left', () => {
    const d = decideOwner(owner(['orphan']), [blocking, nonBlocking, terminating, someoneElses]);
    assert.equal(d.action, 'orphan');
    assert.deepEqual(d.action === 'orphan' && d.unlink.map((o) => o.metadata.name), ['p1', 'p2', 'p3']);
    assert.equal(d.action === 'orphan' && d.removeFinalizer, false);
    assert.deepEqual(decideOwner(owner(['orphan']), [someoneElses]), { action: 'orphan', unlink: [], removeFinalizer: true });
  });

  it('foreground: judge the dependents not yet going; wait for the blocking ones, even terminating', () => {
    const d = decideOwner(owner(['foregroundDeletion']), [blocking, nonBlocking, terminating, someoneElses]);
    assert.equal(d.action, 'foreground');
    if (d.action !== 'foreground') return;
    assert.deepEqual(d.judge.map((o) => o.metadata.name), ['p1', 'p2']);
    assert.deepEqual(d.blocking.map((o) => o.metadata.name), ['p1', 'p3']);
    assert.equal(d.removeFinalizer, false);
    const onlyTerminating = decideOwner(owner(['foregroundDeletion']), [terminating]);
    assert.equal(onlyTerminating.action === 'foreground' && onlyTerminating.removeFinalizer, false);
    const onlyNonBlocking = decideOwner(owner(['foregroundDeletion']), [nonBlocking]);
    assert.equal(onlyNonBlocking.action === 'foreground' && onlyNonBlocking.removeFinalizer, true, 'no blockOwnerDeletion: not waited for');
  });

  it('withoutOwners and withoutFinalizer leave undefined when nothing is left', () => {
    assert.deepEqual(withoutOwners(blocking, ['o']), undefined);
    const two = obj('p', { ownerReferences: [ref('a'), ref('b')] });
    assert.deepEqual(withoutOwners(two, ['a'])?.map((r) => r.uid), ['b']);
    assert.equal(withoutFinalizer(owner(['orphan']), 'orphan'), undefined);
    assert.deepEqual(withoutFinalizer(owner(['x', 'orphan']), 'orphan'), ['x']);
  });
});

describe('the object store applies the finalizer rules (no collector running)', () => {
  let dir: string;
  let datastore: SqliteDatastore;
  let store: ObjectStore;
  const registry = new ResourceRegistry();
  const deployments = registry.lookup('apps', 'v1', 'deployments')!;
  const leases = registry.lookup('coordination.k8s.io', 'v1', 'leases')!;
  const deployment = (name: string): KubeObject => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas: 0,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'main', command: ['sleep', '1'] }] } },
    },
  });

  before(async () => {
    dir = tempDir('gc-store');
    datastore = new SqliteDatastore(path.join(dir, 'state.db'));
    store = new ObjectStore(datastore);
    await store.create(registry.lookup('', 'v1', 'namespaces')!, undefined, { metadata: { name: 'default' } });
  });

  after(async () => {
    await datastore.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('Orphan marks, Foreground swaps the finalizer, Background takes it off and the object goes', async () => {
    await store.create(deployments, 'default', deployment('d'));
    const orphaned = await store.delete(deployments, 'default', 'd', { propagationPolicy: 'Orphan' });
    assert.equal(orphaned.removed, false);
    assert.deepEqual(orphaned.object.metadata.finalizers, ['orphan']);
    assert.ok(orphaned.object.metadata.deletionTimestamp);
    assert.equal(orphaned.object.metadata.deletionGracePeriodSeconds, 0);

    const again = await store.delete(deployments, 'default', 'd', {});
    assert.equal(again.removed, false, 'no policy: the finalizer already there decides');
    assert.equal(again.object.metadata.resourceVersion, orphaned.object.metadata.resourceVersion, 'and nothing is written');

    const foreground = await store.delete(deployments, 'default', 'd', { propagationPolicy: 'Foreground' });
    assert.deepEqual(foreground.object.metadata.finalizers, ['foregroundDeletion']);
    assert.equal(foreground.object.metadata.deletionTimestamp, orphaned.object.metadata.deletionTimestamp, 'still the first deletion');

    const background = await store.delete(deployments, 'default', 'd', { propagationPolicy: 'Background' });
    assert.equal(background.removed, true);
    await assert.rejects(store.get(deployments, 'default', 'd'), (error: unknown) => error instanceof ApiError && error.code === 404);
  });

  it('a dry run marks nothing; kinds the collector does not know ignore the policy', async () => {
    await store.create(deployments, 'default', deployment('dry'));
    const dry = await store.delete(deployments, 'default', 'dry', { propagationPolicy: 'Orphan', dryRun: true });
    assert.equal(dry.removed, false);
    assert.equal((await store.get(deployments, 'default', 'dry')).metadata.deletionTimestamp, undefined);

    await store.create(leases, 'default', { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l' }, spec: {} });
    const lease = await store.delete(leases, 'default', 'l', { propagationPolicy: 'Foreground' });
    assert.equal(lease.removed, true);
  });
});
