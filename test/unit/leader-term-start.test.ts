import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { type ApiClient, PODS, REPLICASETS } from '../../src/client/types.js';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { ControllerManager } from '../../src/controllers/controller-manager.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * A new term acts only on a complete view: its work queues start as soon as the first keys come
 * in, which may be while another informer is still listing, so every controller write is refused
 * until all of the term's informers have listed. Here the pods' list is held back: a ReplicaSet
 * whose pod exists must not be given another one meanwhile.
 */

const TIMINGS = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000, defaultUnavailableTolerationMs: 0 };
const containers = [{ name: 'c', image: 'none', command: ['sleep', '3600'] }];

describe('a new term writes nothing before its informers have all listed', () => {
  let api: InProcessApi;
  let manager: ControllerManager | undefined;

  beforeEach(async () => {
    api = await inProcessApi();
  });

  afterEach(async () => {
    await manager?.stop();
    await api.close();
  });

  it('a ReplicaSet listed before its pods gets no extra pod', async () => {
    const rs = await api.client.create(REPLICASETS, 'default', {
      apiVersion: 'apps/v1',
      kind: 'ReplicaSet',
      metadata: { name: 'web', namespace: 'default' },
      spec: { replicas: 1, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers } } },
    });
    const pod: KubeObject = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: 'web-1',
        namespace: 'default',
        labels: { app: 'web' },
        ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web', uid: rs.metadata.uid!, controller: true }],
      },
      spec: { containers },
    };
    await api.client.create(PODS, 'default', pod);

    // The pods' first list waits until released; everything else goes straight through.
    let release!: () => void;
    const podsListed = new Promise<void>((resolve) => (release = resolve));
    let podListsAsked = 0;
    const slowPods: ApiClient = {
      ...api.client,
      get: (...args) => api.client.get(...args),
      create: (...args) => api.client.create(...args),
      update: (...args) => api.client.update(...args),
      patch: (...args) => api.client.patch(...args),
      delete: (...args) => api.client.delete(...args),
      evict: (...args) => api.client.evict(...args),
      requestToken: (...args) => api.client.requestToken(...args),
      watch: (...args) => api.client.watch(...args),
      list: async (ref, namespace, options) => {
        if (ref.plural === 'pods' && podListsAsked++ === 0) await podsListed;
        return api.client.list(ref, namespace, options);
      },
    };
    manager = new ControllerManager({ client: slowPods, logger: api.logger, identity: 'server-a', timings: TIMINGS, clock: new FakeClock() });
    manager.start();
    await eventually(() => manager!.isLeader && podListsAsked > 0, 'leading, the pods being listed', 5000, 5);
    // Long enough for the ReplicaSet's key to be reconciled (and retried) while pods are unknown.
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(manager.writeRefusal()?.includes('listed'), `writes refused while listing: ${manager.writeRefusal()}`);
    assert.equal((await api.client.list(PODS, 'default')).items.length, 1, 'no pod created from a ReplicaSet seen without its pods');

    release();
    await eventually(() => manager!.mayWrite(), 'the term writing once every informer has listed', 5000, 5);
    await settle(50);
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(
      (await api.client.list(PODS, 'default')).items.map((p) => p.metadata.name),
      ['web-1'],
      'still the one pod once the view is complete',
    );
  });
});
