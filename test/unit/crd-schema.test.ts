import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateCrd } from '../../src/apiserver/extensions/crd-validation.js';
import { customResourceKinds } from '../../src/apiserver/extensions/custom-resources.js';
import { evaluateJsonPath, jsonPathProblem, parseJsonPath } from '../../src/apiserver/extensions/json-path.js';
import { CompiledSchema, type Schema } from '../../src/apiserver/extensions/schema.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { compareKubeVersions, ResourceRegistry } from '../../src/apiserver/resources.js';

/** CRD rules, schemas (validation, pruning, defaulting, the x-kubernetes extensions) and the kinds a CRD serves. */

const WIDGET_SCHEMA: Schema = {
  type: 'object',
  properties: {
    spec: {
      type: 'object',
      required: ['size'],
      properties: {
        size: { type: 'string', enum: ['small', 'large'] },
        replicas: { type: 'integer', minimum: 0, default: 1 },
        port: { 'x-kubernetes-int-or-string': true },
        extra: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
        tags: { type: 'array', items: { type: 'string' }, 'x-kubernetes-list-type': 'set' },
        ports: {
          type: 'array',
          'x-kubernetes-list-type': 'map',
          'x-kubernetes-list-map-keys': ['name'],
          items: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, number: { type: 'integer', default: 80 } } },
        },
        template: { type: 'object', 'x-kubernetes-embedded-resource': true, 'x-kubernetes-preserve-unknown-fields': true },
        labels: { type: 'object', additionalProperties: { type: 'string' } },
      },
    },
    status: { type: 'object', properties: { replicas: { type: 'integer' } } },
  },
};

function crd(overrides: Record<string, unknown> = {}, versions?: unknown[]): KubeObject {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', uid: 'u1', generation: 1 },
    spec: {
      group: 'example.com',
      scope: 'Namespaced',
      names: { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList', shortNames: ['wd'] },
      versions: versions ?? [
        {
          name: 'v1',
          served: true,
          storage: true,
          schema: { openAPIV3Schema: WIDGET_SCHEMA },
          subresources: { status: {}, scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas' } },
          additionalPrinterColumns: [{ name: 'Size', type: 'string', jsonPath: '.spec.size' }],
        },
      ],
      ...overrides,
    },
  };
}

describe('CustomResourceDefinition validation', () => {
  it('accepts a well-formed CRD', () => {
    assert.deepEqual(validateCrd(crd()), []);
  });

  it('refuses a name that is not plural.group, no storage version and two storage versions, with field paths', () => {
    const wrongName = crd();
    wrongName.metadata.name = 'gadgets.example.com';
    assert.deepEqual(validateCrd(wrongName).map((c) => c.field), ['metadata.name']);
    const version = (name: string, storage: boolean) => ({ name, served: true, storage, schema: { openAPIV3Schema: { type: 'object' } } });
    assert.match(validateCrd(crd({}, [version('v1', false)])).map((c) => `${c.field}: ${c.message}`).join('\n'), /spec\.versions: .*exactly one version marked as storage version/);
    assert.match(validateCrd(crd({}, [version('v1', true), version('v2', true)])).map((c) => c.message).join('\n'), /exactly one version marked as storage/);
  });

  it('refuses a non-structural schema: missing types, properties with additionalProperties, types inside junctors, metadata fields', () => {
    const fields = (schema: Schema) =>
      validateCrd(crd({}, [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: schema } }])).map((c) => c.field);
    const root = 'spec.versions[0].schema.openAPIV3Schema';
    assert.deepEqual(fields({ type: 'object', properties: { spec: { properties: {} } } }), [`${root}.properties[spec].type`]);
    assert.deepEqual(fields({ type: 'object', properties: { a: { type: 'object', properties: {}, additionalProperties: { type: 'string' } } } }), [
      `${root}.properties[a].additionalProperties`,
    ]);
    assert.deepEqual(fields({ type: 'object', properties: { a: { type: 'string', anyOf: [{ type: 'integer' }] } } }), [`${root}.properties[a].anyOf[0].type`]);
    assert.deepEqual(fields({ type: 'object', properties: { metadata: { type: 'object', properties: { labels: { type: 'object' } } } } }), [
      `${root}.properties[metadata].properties[labels]`,
    ]);
    assert.deepEqual(fields({ type: 'object', properties: { a: { type: 'array' } } }), [`${root}.properties[a].items`]);
    assert.deepEqual(fields({ type: 'object', properties: { a: { type: 'string', pattern: '([' } } }), [root]);
  });

  it('refuses a conversion webhook and unsupported printer column paths, saying what Drover supports', () => {
    const causes = validateCrd(crd({ conversion: { strategy: 'Webhook' } }));
    assert.deepEqual(causes.map((c) => c.field), ['spec.conversion.strategy']);
    const bad = crd({}, [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object' } }, additionalPrinterColumns: [{ name: 'X', type: 'string', jsonPath: '.a..b' }] }]);
    assert.deepEqual(validateCrd(bad).map((c) => c.field), ['spec.versions[0].additionalPrinterColumns[0].jsonPath']);
  });
});

describe('custom object schemas', () => {
  const schema = new CompiledSchema(WIDGET_SCHEMA);
  const widget = (spec: Record<string, unknown>): Record<string, unknown> => ({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' }, spec });

  it('validates with kube field paths and messages', () => {
    const causes = schema.validate(widget({ replicas: 'x', size: 'huge' }));
    assert.deepEqual(
      causes.map((c) => [c.field, c.reason]),
      [
        ['spec.replicas', 'FieldValueTypeInvalid'],
        ['spec.size', 'FieldValueNotSupported'],
      ],
    );
    assert.match(causes[0]!.message, /spec\.replicas in body must be of type integer/);
    assert.deepEqual(schema.validate(widget({})).map((c) => `${c.field} ${c.message}`), ['spec.size Required value']);
    assert.deepEqual(schema.validate(widget({ size: 'small', replicas: -1 })).map((c) => c.field), ['spec.replicas']);
  });

  it('int-or-string, set and map lists, embedded resources', () => {
    assert.deepEqual(schema.validate(widget({ size: 'small', port: 8080 })), []);
    assert.deepEqual(schema.validate(widget({ size: 'small', port: 'http' })), []);
    assert.deepEqual(schema.validate(widget({ size: 'small', port: 1.5 })).map((c) => c.field), ['spec.port']);
    assert.deepEqual(schema.validate(widget({ size: 'small', tags: ['a', 'b', 'a'] })).map((c) => [c.field, c.reason]), [['spec.tags[2]', 'FieldValueDuplicate']]);
    assert.deepEqual(schema.validate(widget({ size: 'small', ports: [{ name: 'a' }, { name: 'a', number: 2 }] })).map((c) => c.field), ['spec.ports[1]']);
    assert.deepEqual(schema.validate(widget({ size: 'small', template: { metadata: {} } })).map((c) => c.field), ['spec.template.apiVersion', 'spec.template.kind']);
  });

  it('prunes unknown fields except under preserve-unknown-fields and an embedded resource\'s type and metadata', () => {
    const obj = widget({ size: 'small', bogus: 1, extra: { anything: { deep: true } }, labels: { a: 'b' }, ports: [{ name: 'a', junk: 1 }], template: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: {} } });
    obj.topLevelJunk = 1;
    const pruned = schema.prune(obj);
    assert.deepEqual(pruned.sort(), ['spec.bogus', 'spec.ports[0].junk'], 'top-level fields are the verb layer\'s');
    assert.equal(obj.topLevelJunk, 1);
    assert.deepEqual((obj.spec as Record<string, unknown>).extra, { anything: { deep: true } });
    assert.deepEqual((obj.spec as Record<string, unknown>).template, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: {} });
    assert.deepEqual(obj.metadata, { name: 'w' });
  });

  it('applies defaults where the parent is present, inside lists too', () => {
    const obj = widget({ size: 'small', ports: [{ name: 'a' }, { name: 'b', number: 8 }] });
    schema.applyDefaults(obj);
    assert.deepEqual(obj.spec, { size: 'small', replicas: 1, ports: [{ name: 'a', number: 80 }, { name: 'b', number: 8 }] });
    const noSpec: Record<string, unknown> = { metadata: {} };
    schema.applyDefaults(noSpec);
    assert.equal(noSpec.spec, undefined);
  });
});

describe('the kinds a CRD serves', () => {
  it('one kind per served version, stored in the storage version, with its subresources and printer', () => {
    const kinds = customResourceKinds(
      crd({}, [
        { name: 'v1beta1', served: true, storage: false, schema: { openAPIV3Schema: WIDGET_SCHEMA } },
        { name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: WIDGET_SCHEMA }, subresources: { status: {} } },
        { name: 'v0', served: false, storage: false, schema: { openAPIV3Schema: WIDGET_SCHEMA } },
      ]),
    );
    assert.deepEqual(kinds.map((k) => [k.version, k.subresources]), [['v1beta1', []], ['v1', ['status']]]);
    const beta = kinds[0]!;
    assert.equal(beta.storagePath, 'example.com/widgets');
    const stored = beta.conversion!.toStorage({ apiVersion: 'example.com/v1beta1', kind: 'Widget', metadata: {} });
    assert.equal(stored.apiVersion, 'example.com/v1');
    assert.equal(beta.conversion!.fromStorage(stored).apiVersion, 'example.com/v1beta1');
    const obj: KubeObject = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' }, status: { replicas: 1 } };
    kinds[1]!.prepareForCreate!(obj);
    assert.equal(obj.status, undefined, 'status is written only through the status subresource');
  });

  it('printer columns and the scale subresource follow the CRD', () => {
    const [kind] = customResourceKinds(crd());
    const obj: KubeObject = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w', uid: 'x' }, spec: { size: 'large', replicas: 2 }, status: { replicas: 1 } };
    assert.deepEqual(kind!.printer.columns.map((c) => c.name), ['Name', 'Size']);
    assert.deepEqual(kind!.printer.cells(obj, Date.now()), ['w', 'large']);
    assert.deepEqual(kind!.scale!.view(obj).spec, { replicas: 2 });
    assert.deepEqual(kind!.scale!.view(obj).status, { replicas: 1 });
    assert.deepEqual(kind!.scale!.apply(obj, { apiVersion: 'autoscaling/v1', kind: 'Scale', metadata: {}, spec: { replicas: 5 } }).spec, { size: 'large', replicas: 5 });
  });

  it('the registry serves them, removes them, and orders a CRD group\'s versions by priority', () => {
    const registry = new ResourceRegistry();
    const before = registry.generation;
    registry.setDynamic('widgets.example.com', customResourceKinds(crd({}, [
      { name: 'v1alpha1', served: true, storage: false, schema: { openAPIV3Schema: WIDGET_SCHEMA } },
      { name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: WIDGET_SCHEMA } },
      { name: 'v2beta1', served: true, storage: false, schema: { openAPIV3Schema: WIDGET_SCHEMA } },
    ])));
    assert.notEqual(registry.generation, before);
    assert.equal(registry.lookup('example.com', 'v1', 'widgets')?.kind, 'Widget');
    assert.deepEqual(registry.groups().find((g) => g.name === 'example.com')?.versions, ['v1', 'v2beta1', 'v1alpha1']);
    registry.removeDynamic('widgets.example.com');
    assert.equal(registry.lookup('example.com', 'v1', 'widgets'), undefined);
    assert.equal(registry.groups().some((g) => g.name === 'example.com'), false);
    assert.deepEqual(['v1beta1', 'v2', 'v1', 'v10alpha1', 'foo', 'v3beta2'].sort(compareKubeVersions), ['v2', 'v1', 'v3beta2', 'v1beta1', 'v10alpha1', 'foo']);
  });
});

describe('printer column JSONPath subset', () => {
  it('field steps, indexes, wildcards and the equality filter', () => {
    const obj = { status: { conditions: [{ type: 'Ready', status: 'True' }, { type: 'Synced', status: 'False' }] }, spec: { 'a.b': 1, list: [5, 6] } };
    assert.deepEqual(evaluateJsonPath(parseJsonPath('.status.conditions[?(@.type=="Ready")].status'), obj), ['True']);
    assert.deepEqual(evaluateJsonPath(parseJsonPath(".spec['a.b']"), obj), [1]);
    assert.deepEqual(evaluateJsonPath(parseJsonPath('.spec.list[1]'), obj), [6]);
    assert.deepEqual(evaluateJsonPath(parseJsonPath('.spec.list[*]'), obj), [5, 6]);
    assert.deepEqual(evaluateJsonPath(parseJsonPath('.spec.missing'), obj), []);
    assert.match(jsonPathProblem('.spec.list[1:2]') ?? '', /unsupported JSONPath/);
  });
});
