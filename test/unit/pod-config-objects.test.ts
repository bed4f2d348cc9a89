import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConfigObjectCache } from '../../src/agent/config-objects.js';
import type { LookupResult } from '../../src/agent/pods/env-resolution.js';
import { CONFIGMAPS, PODS } from '../../src/client/types.js';
import { NodeConfigGraph } from '../../src/cluster/node-graph.js';
import type { ConfigReference } from '../../src/node-protocol/pod-references.js';
import { eventually } from '../helpers/server.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/**
 * The two caches behind pods' ConfigMaps and Secrets, over the real in-process API: the agent's
 * (one watch per object, polling past its cap) and the server's graph the node authorizer asks.
 */

const CEILING_MS = 10_000;

function configMap(name: string, value: string) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data: { k: value } };
}

function state(result: LookupResult): string {
  return result.state === 'present' ? `present:${(result.object.data as { k: string }).k}` : result.state;
}

describe('the agent’s object cache', () => {
  let api: InProcessApi;
  before(async () => {
    api = await inProcessApi();
  });
  after(async () => {
    await api.close();
  });

  it('watches up to its cap and polls the rest; both see objects appear and change; released objects are forgotten', async () => {
    let changes = 0;
    const cache = new ConfigObjectCache(api.client, () => changes++, api.logger, { maxWatched: 1, pollMs: 50 });
    const watched: ConfigReference = { kind: 'ConfigMap', namespace: 'default', name: 'watched' };
    const polled: ConfigReference = { kind: 'ConfigMap', namespace: 'default', name: 'polled' };
    assert.equal(cache.lookup(watched).state, 'unknown', 'nothing is known before a pod refers to it');
    cache.setPodReferences('pod-1', [watched, polled]);
    assert.deepEqual(cache.counts(), { watched: 1, polled: 1 });
    await eventually(() => cache.lookup(watched).state === 'absent' && cache.lookup(polled).state === 'absent', 'both read as absent', CEILING_MS);

    const before = changes;
    await api.client.create(CONFIGMAPS, 'default', configMap('watched', 'w1'));
    await api.client.create(CONFIGMAPS, 'default', configMap('polled', 'p1'));
    await eventually(() => state(cache.lookup(watched)) === 'present:w1' && state(cache.lookup(polled)) === 'present:p1', 'both present', CEILING_MS);
    assert.ok(changes > before, 'each appearance is reported');
    await api.client.patch(CONFIGMAPS, 'default', 'polled', 'merge', { data: { k: 'p2' } });
    await api.client.patch(CONFIGMAPS, 'default', 'watched', 'merge', { data: { k: 'w2' } });
    await eventually(() => state(cache.lookup(watched)) === 'present:w2' && state(cache.lookup(polled)) === 'present:p2', 'both changed', CEILING_MS);

    // A second pod shares the objects; releasing one pod keeps them, releasing both drops them.
    cache.setPodReferences('pod-2', [watched]);
    cache.retainPods(new Set(['pod-2']));
    assert.equal(state(cache.lookup(watched)), 'present:w2');
    assert.equal(cache.lookup(polled).state, 'unknown');
    cache.forgetPod('pod-2');
    assert.deepEqual(cache.counts(), { watched: 0, polled: 0 });
    cache.stop();
  });
});

describe('the node authorizer’s graph', () => {
  let api: InProcessApi;
  let graph: NodeConfigGraph;
  before(async () => {
    api = await inProcessApi();
    graph = new NodeConfigGraph(api.client, api.logger);
    await graph.start();
  });
  after(async () => {
    graph.stop();
    await api.close();
  });

  const ref = (kind: 'ConfigMap' | 'Secret', name: string): ConfigReference => ({ kind, namespace: 'default', name });

  function pod(name: string, nodeName: string | undefined, secret: string) {
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name },
      spec: {
        ...(nodeName ? { nodeName } : {}),
        volumes: [{ name: 's', secret: { secretName: secret } }],
        containers: [{ name: 'c', command: ['true'], envFrom: [{ configMapRef: { name: 'shared' } }] }],
      },
    };
  }

  it('edges exist while a pod bound to the node refers to the object, per node, counted per pod', async () => {
    assert.ok(graph.synced);
    await api.client.create(PODS, 'default', pod('unbound', undefined, 'for-unbound'));
    await api.client.create(PODS, 'default', pod('a1', 'node-a', 'secret-a'));
    await api.client.create(PODS, 'default', pod('a2', 'node-a', 'secret-a'));
    await eventually(() => graph.nodeMayRead('node-a', ref('Secret', 'secret-a')), 'node-a reads its pods’ secret', CEILING_MS);
    assert.ok(graph.nodeMayRead('node-a', ref('ConfigMap', 'shared')));
    assert.ok(!graph.nodeMayRead('node-a', ref('Secret', 'for-unbound')), 'an unbound pod gives no node anything');
    assert.ok(!graph.nodeMayRead('node-b', ref('ConfigMap', 'shared')), 'another node reads nothing');
    assert.ok(!graph.nodeMayRead('node-a', { kind: 'Secret', namespace: 'other', name: 'secret-a' }), 'the namespace is part of the name');
    assert.ok(!graph.nodeMayRead('node-a', ref('ConfigMap', 'secret-a')), 'and so is the kind');

    // Binding gives the edge; one pod gone leaves the other's.
    await api.client.patch(PODS, 'default', 'unbound', 'merge', { spec: { nodeName: 'node-b' } });
    await eventually(() => graph.nodeMayRead('node-b', ref('Secret', 'for-unbound')), 'binding adds the edges', CEILING_MS);
    await api.client.delete(PODS, 'default', 'a1', { gracePeriodSeconds: 0 });
    // Events arrive in order: once a pod created after the delete is seen, so is the delete.
    await api.client.create(PODS, 'default', pod('marker', 'node-c', 'marker'));
    await eventually(() => graph.nodeMayRead('node-c', ref('Secret', 'marker')), 'the graph has seen the delete', CEILING_MS);
    assert.ok(graph.nodeMayRead('node-a', ref('Secret', 'secret-a')), 'a2 still uses it');
    await api.client.delete(PODS, 'default', 'a2', { gracePeriodSeconds: 0 });
    await eventually(() => !graph.nodeMayRead('node-a', ref('Secret', 'secret-a')), 'the last pod gone takes the edge', CEILING_MS);
    assert.ok(!graph.nodeMayRead('node-a', ref('ConfigMap', 'shared')));
  });
});
