/**
 * One datastore event delivered to many selecting watches (agents watching their pods by node
 * name): the event's object and its previous one are parsed once for all of them, and what one
 * watch is told (an object leaving its selection, at the revision it left) does not change what
 * the others are told.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ObjectCodec } from '../../src/apiserver/object-codec.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { parseFieldSelector } from '../../src/apiserver/selectors.js';
import type { Selection, WatchEventType } from '../../src/apiserver/storage-types.js';
import { deliverWatchEvent } from '../../src/apiserver/watch-events.js';
import type { KeyValue, WatchEvent } from '../../src/datastore/types.js';

const pods = new ResourceRegistry().lookup('', 'v1', 'pods')!;

function stored(node: string, revision: number): KeyValue {
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { nodeName: node, containers: [] } };
  return { key: '/registry/core/pods/default/p', value: Buffer.from(JSON.stringify(pod)), createRevision: 5, modRevision: revision };
}

function onNode(node: string): Selection {
  return { labelSelector: [], fieldSelector: parseFieldSelector(`spec.nodeName=${node}`, new Set(['spec.nodeName']), 'pods') };
}

interface Told {
  type: WatchEventType;
  obj: KubeObject;
}

function watcher(): { told: Told[]; sink: { event(type: WatchEventType, obj: KubeObject): void; progress(): void; error(): void } } {
  const told: Told[] = [];
  return { told, sink: { event: (type, obj) => told.push({ type, obj }), progress: () => undefined, error: () => undefined } };
}

/** A codec that counts the values it parses. */
function countingCodec(): { codec: ObjectCodec; parses: () => number } {
  const codec = new ObjectCodec();
  let parses = 0;
  const decode = codec.decode.bind(codec);
  codec.decode = (def, kv) => {
    parses++;
    return decode(def, kv);
  };
  return { codec, parses: () => parses };
}

describe('one watch event, many selecting watches', () => {
  it('parses the object and its previous one once, whatever the number of watches', () => {
    const { codec, parses } = countingCodec();
    // The pod moved from node a to node b (a rescheduled pod's record): 100 agents watch.
    const event: WatchEvent = { type: 'put', kv: stored('b', 9), prevKv: stored('a', 7) };
    const watchers = Array.from({ length: 100 }, (_, i) => ({ node: i === 0 ? 'a' : i === 1 ? 'b' : `n${i}`, ...watcher() }));
    for (const w of watchers) deliverWatchEvent(codec, pods, event, onNode(w.node), w.sink);
    assert.equal(parses(), 2, 'the new object and the previous one, each parsed once');
    const [onA, onB, ...others] = watchers;
    assert.deepEqual(onA!.told.map((t) => [t.type, t.obj.metadata.resourceVersion, (t.obj.spec as { nodeName: string }).nodeName]), [['DELETED', '9', 'a']]);
    assert.deepEqual(onB!.told.map((t) => [t.type, t.obj.metadata.resourceVersion, (t.obj.spec as { nodeName: string }).nodeName]), [['ADDED', '9', 'b']]);
    for (const w of others) assert.deepEqual(w.told, []);
  });

  it('parses a deleted object once for all the watches it matched', () => {
    const { codec, parses } = countingCodec();
    const event: WatchEvent = { type: 'delete', kv: stored('a', 14) };
    const watchers = Array.from({ length: 100 }, (_, i) => ({ node: i < 50 ? 'a' : 'b', ...watcher() }));
    for (const w of watchers) deliverWatchEvent(codec, pods, event, onNode(w.node), w.sink);
    assert.equal(parses(), 1, 'the deleted object parsed once');
    for (const w of watchers.slice(0, 50)) assert.deepEqual(w.told.map((t) => [t.type, t.obj.metadata.resourceVersion]), [['DELETED', '14']]);
    for (const w of watchers.slice(50)) assert.deepEqual(w.told, []);
  });

  it('tells each watch that an object left its selection without changing the shared previous object', () => {
    const codec = new ObjectCodec();
    const event: WatchEvent = { type: 'put', kv: stored('b', 12), prevKv: stored('a', 11) };
    const first = watcher();
    const second = watcher();
    deliverWatchEvent(codec, pods, event, onNode('a'), first.sink);
    deliverWatchEvent(codec, pods, event, onNode('a'), second.sink);
    assert.equal(first.told[0]?.obj.metadata.resourceVersion, '12');
    assert.equal(second.told[0]?.obj.metadata.resourceVersion, '12');
    assert.equal(codec.decodeShared(pods, event.prevKv!).metadata.resourceVersion, '11', 'the shared previous object keeps its own revision');
  });
});
