import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import type { JsonObject } from '../../src/apiserver/json.js';
import { applyConfiguration, mergeValue, removeFields } from '../../src/apiserver/patch/apply.js';
import { SchemaResolver } from '../../src/apiserver/patch/apply-schema.js';
import { compareObjects, configFieldSet, strategicPatchFields } from '../../src/apiserver/patch/field-sets.js';
import { patchMetaForKind } from '../../src/apiserver/patch/patch-meta.js';
import { decodeFieldsV1, encodeFieldsV1, FieldSet, FieldsV1Error, pathString } from '../../src/apiserver/patch/fields-v1.js';
import { kindSchema } from '../../src/apiserver/patch/kind-schemas.js';
import { clientEntries, encodeEntries, type ManagedEntry, recordUpdate, storedEntries, touchOnly } from '../../src/apiserver/patch/managed-fields.js';

/**
 * The pure parts of server-side apply, called without a server: FieldsV1 both ways, the field
 * sets of a configuration and of a change, the merge by the schema's list and map types,
 * conflicts, removal of fields no longer applied, and the Update bookkeeping.
 */

const DEPLOYMENT = kindSchema({ group: 'apps', version: 'v1', kind: 'Deployment' });
const NODE = kindSchema({ group: '', version: 'v1', kind: 'Node' });

function deployment(replicas: number, containers: JsonObject[]): JsonObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', labels: { app: 'web' } },
    spec: { replicas, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers } } },
  };
}

const setOf = (fieldsV1: JsonObject): FieldSet => decodeFieldsV1(fieldsV1);

describe('FieldsV1', () => {
  it('encodes members as {}, nodes that are both with ".", in kube-apiserver order (fields, keys, values)', () => {
    const set = new FieldSet();
    set.insert(['f:spec', 'f:replicas']);
    set.insert(['f:spec', 'f:containers', 'k:{"name":"b"}']);
    set.insert(['f:spec', 'f:containers', 'k:{"name":"b"}', 'f:image']);
    set.insert(['f:spec', 'f:containers', 'k:{"name":"a"}']);
    set.insert(['f:metadata', 'f:finalizers', 'v:"x"']);
    set.insert(['f:metadata', 'f:finalizers', 'f:odd']);
    const encoded = encodeFieldsV1(set);
    assert.deepEqual(encoded, {
      'f:metadata': { 'f:finalizers': { 'f:odd': {}, 'v:"x"': {} } },
      'f:spec': { 'f:containers': { 'k:{"name":"a"}': {}, 'k:{"name":"b"}': { '.': {}, 'f:image': {} } }, 'f:replicas': {} },
    });
    assert.deepEqual(Object.keys(encoded['f:metadata'] as JsonObject), ['f:finalizers']);
    assert.deepEqual(Object.keys((encoded['f:metadata'] as JsonObject)['f:finalizers'] as JsonObject), ['f:odd', 'v:"x"']);
    assert.deepEqual(encodeFieldsV1(decodeFieldsV1(encoded)), encoded);
  });

  it('decodes keys into canonical form (key fields sorted) and refuses what is not FieldsV1', () => {
    const set = decodeFieldsV1({ 'f:ports': { 'k:{"protocol":"TCP","containerPort":80}': { '.': {}, 'f:name': {} } } });
    assert.ok(set.has(['f:ports', 'k:{"containerPort":80,"protocol":"TCP"}']));
    assert.ok(set.has(['f:ports', 'k:{"containerPort":80,"protocol":"TCP"}', 'f:name']));
    assert.ok(!set.has(['f:ports']));
    for (const bad of [[], { 'x:y': {} }, { 'f:a': 1 }, { '.': {} }, { 'k:{nope': {} }, { 'i:-1': {} }]) {
      assert.throws(() => decodeFieldsV1(bad), FieldsV1Error, JSON.stringify(bad));
    }
  });

  it('prints paths as kube-apiserver does in conflicts', () => {
    assert.equal(pathString(['f:spec', 'f:replicas']), '.spec.replicas');
    assert.equal(pathString(['f:spec', 'f:containers', 'k:{"name":"nginx"}', 'f:image']), '.spec.containers[name="nginx"].image');
    assert.equal(pathString(['f:ports', 'k:{"containerPort":80,"protocol":"TCP"}']), '[containerPort=80,protocol="TCP"]'.replace(/^/, '.ports'));
    assert.equal(pathString(['f:metadata', 'f:finalizers', 'v:"a"']), '.metadata.finalizers[="a"]');
    assert.equal(pathString(['f:items', 'i:3']), '.items[3]');
  });
});

describe('field sets', () => {
  it('a configuration owns its scalars, list items by key (with the protocol default), atomic selectors whole, map keys', () => {
    const set = configFieldSet(DEPLOYMENT.resolver, DEPLOYMENT.schema, deployment(2, [{ name: 'c', image: 'i', ports: [{ containerPort: 80 }], args: ['a', 'b'] }]));
    assert.deepEqual(encodeFieldsV1(set), {
      'f:apiVersion': {},
      'f:kind': {},
      'f:metadata': { 'f:labels': { 'f:app': {} }, 'f:name': {} },
      'f:spec': {
        'f:replicas': {},
        'f:selector': {},
        'f:template': {
          'f:metadata': { 'f:labels': { 'f:app': {} } },
          'f:spec': {
            'f:containers': {
              'k:{"name":"c"}': {
                '.': {},
                'f:args': {},
                'f:image': {},
                'f:name': {},
                'f:ports': { 'k:{"containerPort":80,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {} } },
              },
            },
          },
        },
      },
    });
  });

  it('a list item without its key, or twice the same key, is refused in a configuration', () => {
    assert.throws(() => configFieldSet(DEPLOYMENT.resolver, DEPLOYMENT.schema, deployment(1, [{ image: 'x' }])), /omits key field "name"/);
    assert.throws(() => configFieldSet(DEPLOYMENT.resolver, DEPLOYMENT.schema, deployment(1, [{ name: 'a' }, { name: 'a' }])), /duplicate entries/);
  });

  it('a comparison finds changed leaves, new nodes (themselves too) and removed ones', () => {
    const before = deployment(1, [{ name: 'a', image: 'x' }, { name: 'b', image: 'y' }]);
    const after = deployment(2, [{ name: 'a', image: 'x2', env: [{ name: 'E', value: '1' }] }]);
    const { changed, removed } = compareObjects(DEPLOYMENT.resolver, DEPLOYMENT.schema, before, after);
    const containers = ['f:spec', 'f:template', 'f:spec', 'f:containers'];
    assert.deepEqual(changed.paths().map(pathString), [
      '.spec.replicas',
      '.spec.template.spec.containers[name="a"].env',
      '.spec.template.spec.containers[name="a"].env[name="E"]',
      '.spec.template.spec.containers[name="a"].env[name="E"].name',
      '.spec.template.spec.containers[name="a"].env[name="E"].value',
      '.spec.template.spec.containers[name="a"].image',
    ]);
    assert.ok(removed.has([...containers, 'k:{"name":"b"}']));
    assert.ok(removed.has([...containers, 'k:{"name":"b"}', 'f:image']));
    assert.ok(!changed.has(['f:spec', 'f:selector']));
  });
});

describe('merging by the schema', () => {
  it('map lists merge by key (live-only items stay in place), sets merge by value, atomic lists and selectors are replaced', () => {
    const { resolver, schema } = DEPLOYMENT;
    const live = deployment(1, [{ name: 'a', image: 'x', args: ['1'] }, { name: 'side', image: 's' }]);
    const merged = mergeValue(resolver, schema, live, {
      spec: { selector: { matchLabels: { other: 'y' } }, template: { spec: { containers: [{ name: 'a', args: ['2'] }, { name: 'new', image: 'n' }] } } },
    }) as JsonObject;
    const spec = merged.spec as { selector: JsonObject; template: { spec: { containers: JsonObject[] } } };
    assert.deepEqual(spec.selector, { matchLabels: { other: 'y' } });
    assert.deepEqual(spec.template.spec.containers, [{ name: 'a', image: 'x', args: ['2'] }, { name: 'side', image: 's' }, { name: 'new', image: 'n' }]);
    assert.deepEqual((live.spec as { template: { spec: { containers: JsonObject[] } } }).template.spec.containers[0], { name: 'a', image: 'x', args: ['1'] }, 'the live object is untouched');
    const finalizers = mergeValue(resolver, schema, { metadata: { finalizers: ['a', 'b'] } }, { metadata: { finalizers: ['c', 'a'] } });
    // structured-merge-diff's order: the configuration's items first where they lead, live-only ones after.
    assert.deepEqual(finalizers, { metadata: { finalizers: ['c', 'a', 'b'] } });
  });

  it('removes fields by path, each with what is below it, leaving the input as it was', () => {
    const { resolver, schema } = DEPLOYMENT;
    const obj = deployment(1, [{ name: 'a', image: 'x', command: ['c'] }, { name: 'b', image: 'y' }]);
    const remove = setOf({ 'f:spec': { 'f:replicas': {}, 'f:template': { 'f:spec': { 'f:containers': { 'k:{"name":"a"}': { 'f:command': {} }, 'k:{"name":"b"}': {} } } } } });
    const out = removeFields(resolver, schema, obj, remove) as JsonObject;
    assert.deepEqual(out.spec, { selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'a', image: 'x' }] } } });
    assert.equal((obj.spec as JsonObject).replicas, 1);
  });

  it('a CRD schema: list-type map with its keys, set, and preserve-unknown-fields objects as maps', () => {
    const resolver = new SchemaResolver();
    const schema = resolver.resolve({
      type: 'object',
      properties: {
        spec: {
          type: 'object',
          properties: {
            parts: { type: 'array', 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['name', 'zone'], items: { type: 'object', properties: { name: { type: 'string' }, zone: { type: 'string', default: 'z1' } } } },
            free: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
          },
        },
      },
    });
    const set = configFieldSet(resolver, schema, { spec: { parts: [{ name: 'a' }, { name: 'a', zone: 'z2' }], free: { x: { y: 1 } } } });
    assert.deepEqual(encodeFieldsV1(set), {
      'f:spec': {
        'f:free': { 'f:x': { '.': {}, 'f:y': {} } },
        'f:parts': { 'k:{"name":"a","zone":"z1"}': { '.': {}, 'f:name': {} }, 'k:{"name":"a","zone":"z2"}': { '.': {}, 'f:name': {}, 'f:zone': {} } },
      },
    });
  });
});

describe('apply', () => {
  const { resolver, schema } = DEPLOYMENT;
  const applyAs = (manager: string, live: JsonObject | undefined, config: JsonObject, force = false) => {
    const entries = storedEntries((live?.metadata as JsonObject | undefined)?.managedFields);
    const result = applyConfiguration({ resolver, schema, live, config, entries, who: { manager, apiVersion: 'apps/v1' }, force, time: '2026-01-01T00:00:00Z' });
    const object = result.object;
    const encoded = encodeEntries(result.entries);
    (object.metadata as JsonObject).managedFields = encoded ?? [];
    return object;
  };

  it('conflicts name the manager and the field; force takes the field; a field no one applies any more goes', () => {
    let live = applyAs('alice', undefined, deployment(1, [{ name: 'a', image: 'x', command: ['c'] }]));
    assert.throws(
      () => applyAs('bob', live, deployment(3, [{ name: 'a', image: 'x', command: ['c'] }])),
      (error: unknown) => {
        assert.ok(error instanceof ApiError);
        assert.equal(error.code, 409);
        assert.equal(error.message, 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas');
        assert.deepEqual(error.details?.causes, [{ reason: 'FieldManagerConflict', message: 'conflict with "alice"', field: '.spec.replicas' }]);
        return true;
      },
    );
    live = applyAs('bob', live, deployment(3, [{ name: 'a', image: 'x', command: ['c'] }]), true);
    const entries = (live.metadata as { managedFields: { manager: string; fieldsV1: JsonObject }[] }).managedFields;
    assert.ok(!setOf(entries.find((e) => e.manager === 'alice')!.fieldsV1).has(['f:spec', 'f:replicas']));
    assert.ok(setOf(entries.find((e) => e.manager === 'bob')!.fieldsV1).has(['f:spec', 'f:replicas']));
    // alice drops command: bob still applies it, it stays; bob drops it too: it goes.
    live = applyAs('alice', live, deployment(3, [{ name: 'a', image: 'x' }]));
    assert.deepEqual(((live.spec as JsonObject).template as { spec: { containers: JsonObject[] } }).spec.containers[0]!.command, ['c']);
    live = applyAs('bob', live, deployment(3, [{ name: 'a', image: 'x' }]));
    assert.equal(((live.spec as JsonObject).template as { spec: { containers: JsonObject[] } }).spec.containers[0]!.command, undefined);
  });

  it('several conflicts are listed per manager, as kube-apiserver lists them', () => {
    const live = applyAs('alice', undefined, deployment(1, [{ name: 'a', image: 'x' }]));
    assert.throws(
      () => applyAs('bob', live, deployment(2, [{ name: 'a', image: 'y' }])),
      { message: 'Apply failed with 2 conflicts: conflicts with "alice":\n- .spec.replicas\n- .spec.template.spec.containers[name="a"].image' },
    );
  });

  it('kubectl takes over fields from client-side apply when the live value is the last-applied one', () => {
    const config = deployment(1, [{ name: 'a', image: 'x' }]);
    const live = structuredClone(config);
    (live.metadata as JsonObject).annotations = { 'kubectl.kubernetes.io/last-applied-configuration': JSON.stringify(config) };
    const csa: ManagedEntry[] = [{ manager: 'kubectl-client-side-apply', operation: 'Update', apiVersion: 'apps/v1', set: configFieldSet(resolver, schema, config) }];
    (live.metadata as JsonObject).managedFields = encodeEntries(csa)!;
    const next = deployment(5, [{ name: 'a', image: 'x' }]);
    assert.throws(() => applyAs('someone', live, next), /conflict with "kubectl-client-side-apply" using apps\/v1: \.spec\.replicas/);
    const applied = applyAs('kubectl', live, next);
    assert.equal((applied.spec as JsonObject).replicas, 5);
    const annotation = JSON.parse(((applied.metadata as JsonObject).annotations as Record<string, string>)['kubectl.kubernetes.io/last-applied-configuration']!) as JsonObject;
    assert.equal((annotation.spec as JsonObject).replicas, 5);
  });
});

describe('Update bookkeeping', () => {
  const who = { manager: 'agent', apiVersion: 'v1', subresource: 'status' };
  const status = (time: string) => ({ status: { conditions: [{ type: 'Ready', status: 'True', lastHeartbeatTime: time }] } });

  it('a heartbeat changes only the entry time; a new writer takes the fields from the others', () => {
    const first = compareObjects(NODE.resolver, NODE.schema, { status: {} }, status('t1'));
    let entries = recordUpdate([], first.changed, first.removed, who, '2026-01-01T00:00:00Z');
    const stored = encodeEntries(entries)!;
    assert.deepEqual(stored[0]!.fieldsV1, { 'f:status': { 'f:conditions': { '.': {}, 'k:{"type":"Ready"}': { '.': {}, 'f:lastHeartbeatTime': {}, 'f:status': {}, 'f:type': {} } } } });
    const beat = compareObjects(NODE.resolver, NODE.schema, status('t1'), status('t2'));
    entries = recordUpdate(storedEntries(stored), beat.changed, beat.removed, who, '2026-01-01T00:00:10Z');
    const after = encodeEntries(entries)!;
    assert.equal(after[0]!.time, '2026-01-01T00:00:10Z');
    assert.equal(after[0]!.fieldsV1, stored[0]!.fieldsV1, 'the stored FieldsV1 is reused, not rebuilt');
    const other = recordUpdate(storedEntries(after), beat.changed, beat.removed, { ...who, manager: 'other' }, '2026-01-01T00:00:20Z');
    const encoded = encodeEntries(other)!;
    assert.deepEqual(encoded.map((e) => e.manager), ['agent', 'other']);
    assert.ok(!setOf(encoded[0]!.fieldsV1 as JsonObject).has(['f:status', 'f:conditions', 'k:{"type":"Ready"}', 'f:lastHeartbeatTime']));
  });

  it('the heartbeat path keeps the stored list, moving only the writer\'s time, and steps aside otherwise', () => {
    const first = compareObjects(NODE.resolver, NODE.schema, { status: {} }, status('t1'));
    const stored = encodeEntries(recordUpdate([], first.changed, first.removed, who, '2026-01-01T00:00:00Z'))!;
    const beat = () => compareObjects(NODE.resolver, NODE.schema, status('t1'), status('t2'));
    let b = beat();
    const touched = touchOnly(stored, b.changed, b.removed, who, '2026-01-01T00:00:10Z') as JsonObject[];
    assert.equal(touched[0]!.fieldsV1, stored[0]!.fieldsV1);
    assert.deepEqual(touched as unknown, [{ ...stored[0]!, time: '2026-01-01T00:00:10Z' }]);
    b = beat();
    assert.equal(touchOnly(stored, b.changed, b.removed, { ...who, manager: 'other' }, 't'), undefined, 'another writer takes the general path');
    const nothing = compareObjects(NODE.resolver, NODE.schema, status('t1'), status('t1'));
    assert.equal(touchOnly(stored, nothing.changed, nothing.removed, who, 't'), stored);
  });

  it('a status heartbeat\'s strategic patch names the fields it can change; one that may remove something names none', () => {
    const meta = patchMetaForKind('Node');
    const heartbeat = { status: { '$setElementOrder/conditions': [{ type: 'Ready' }], conditions: [{ type: 'Ready', lastHeartbeatTime: 't' }] } };
    const fields = strategicPatchFields(NODE.resolver, NODE.schema, meta, heartbeat)!;
    assert.deepEqual(fields.paths().map(pathString), ['.status.conditions[type="Ready"].lastHeartbeatTime']);
    assert.equal(strategicPatchFields(NODE.resolver, NODE.schema, meta, { status: { phase: null } }), undefined, 'a null removes');
    assert.equal(strategicPatchFields(NODE.resolver, NODE.schema, meta, { spec: { taints: [{ key: 'a' }] } }), undefined, 'a replaced list');
    assert.equal(strategicPatchFields(NODE.resolver, NODE.schema, meta, { status: { $patch: 'replace' } }), undefined, 'a directive');
  });

  it('managedFields a client sends: an empty list resets, a malformed one is a 422 naming the field', () => {
    assert.equal(clientEntries([], 'ConfigMap', 'x', ''), 'reset');
    assert.equal(clientEntries([{}], 'ConfigMap', 'x', ''), 'reset');
    assert.throws(() => clientEntries('nope', 'ConfigMap', 'x', ''), { message: /metadata.managedFields: Invalid value/ });
    assert.throws(() => clientEntries([{ manager: 'm', operation: 'Update', apiVersion: 'v1', fieldsType: 'FieldsV2', fieldsV1: {} }], 'ConfigMap', 'x', ''), {
      message: /metadata.managedFields\[0\].fieldsType: Invalid value: "FieldsV2": must be `FieldsV1`/,
    });
    const ok = clientEntries([{ manager: 'm', operation: 'Apply', apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:data': { 'f:a': {} } } }], 'ConfigMap', 'x', '');
    assert.ok(Array.isArray(ok) && ok[0]!.set!.has(['f:data', 'f:a']));
  });
});
