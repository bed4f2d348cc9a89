import assert from 'node:assert/strict';
import fs from 'node:fs';
import { describe, it } from 'node:test';
import { customResourceKinds } from '../../src/apiserver/extensions/custom-resources.js';
import { CRD_DEFINITION } from '../../src/apiserver/extensions/crd-kind.js';
import { RESOURCES } from '../../src/apiserver/kinds/index.js';
import { OpenApiDocuments } from '../../src/apiserver/openapi.js';
import { type Field, parseMessage } from '../../src/apiserver/protobuf/reader.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { generate, OUTPUT } from '../../scripts/openapi-definitions.js';
import type { KubeObject } from '../../src/apiserver/objects.js';

/** The OpenAPI documents: built-in schemas, CRD schemas, v3 per group-version, v2 JSON and gnostic protobuf. */

const WIDGET_CRD: KubeObject = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.example.com', uid: 'u', generation: 1 },
  spec: {
    group: 'example.com',
    scope: 'Namespaced',
    names: { plural: 'widgets', kind: 'Widget' },
    versions: [
      {
        name: 'v1',
        served: true,
        storage: true,
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: {
                type: 'object',
                description: 'The spec.',
                properties: { size: { type: 'string', nullable: true }, port: { 'x-kubernetes-int-or-string': true, anyOf: [{ type: 'integer' }, { type: 'string' }] } },
              },
            },
          },
        },
      },
    ],
  },
};

function registryWithWidget(): ResourceRegistry {
  const registry = new ResourceRegistry([...RESOURCES, CRD_DEFINITION]);
  registry.setDynamic('widgets.example.com', customResourceKinds(WIDGET_CRD));
  return registry;
}

type Doc = { paths: Record<string, Record<string, { 'x-kubernetes-group-version-kind'?: unknown }>>; components: { schemas: Record<string, Record<string, unknown>> } };

describe('OpenAPI documents', () => {
  it('schemas/kubernetes-definitions.json is what scripts/openapi-definitions.ts generates from the installed models (npm run openapi-definitions)', async () => {
    const current = JSON.parse(fs.readFileSync(OUTPUT, 'utf8')) as unknown;
    assert.deepEqual(current, JSON.parse(JSON.stringify(await generate())), 'out of date: run npm run openapi-definitions');
  });

  it('v3: every stored built-in kind has a schema with its group-version-kind, reachable types included, with patch extensions', () => {
    const openapi = new OpenApiDocuments(new ResourceRegistry([...RESOURCES, CRD_DEFINITION]));
    const index = JSON.parse(openapi.index) as { paths: Record<string, { serverRelativeURL: string }> };
    assert.match(index.paths['apis/apps/v1']!.serverRelativeURL, /^\/openapi\/v3\/apis\/apps\/v1\?hash=[0-9A-F]{32}$/);
    const apps = JSON.parse(openapi.document('apis/apps/v1')!.body) as Doc;
    const deployment = Object.values(apps.components.schemas).find((s) =>
      (s['x-kubernetes-group-version-kind'] as { kind: string }[] | undefined)?.some((g) => g.kind === 'Deployment'),
    );
    assert.ok(deployment, 'a Deployment schema');
    assert.ok(apps.components.schemas['io.k8s.v1.ObjectMeta'], 'ObjectMeta is in the document');
    const podSpec = apps.components.schemas['io.k8s.v1.PodSpec']!;
    const containers = (podSpec.properties as Record<string, Record<string, unknown>>).containers!;
    assert.equal(containers['x-kubernetes-patch-merge-key'], 'name');
    // Every $ref resolves inside the document.
    for (const match of JSON.stringify(apps).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)) {
      assert.ok(apps.components.schemas[match[1]!], `${match[1]} is defined`);
    }
    for (const def of RESOURCES.filter((d) => !d.reads)) {
      const path = def.group ? `apis/${def.group}/${def.version}` : `api/${def.version}`;
      const doc = JSON.parse(openapi.document(path)!.body) as Doc;
      const found = Object.values(doc.components.schemas).some((s) =>
        (s['x-kubernetes-group-version-kind'] as { group: string; version: string; kind: string }[] | undefined)?.some(
          (g) => g.group === def.group && g.version === def.version && g.kind === def.kind,
        ),
      );
      assert.ok(found, `${def.kind} (${path}) has a schema`);
    }
  });

  it('v3: a CRD adds its group-version with its schema, and the index hash changes with it', () => {
    const registry = new ResourceRegistry([...RESOURCES, CRD_DEFINITION]);
    const openapi = new OpenApiDocuments(registry);
    const before = openapi.index;
    assert.equal(openapi.document('apis/example.com/v1'), undefined);
    registry.setDynamic('widgets.example.com', customResourceKinds(WIDGET_CRD));
    assert.notEqual(openapi.index, before);
    const doc = JSON.parse(openapi.document('apis/example.com/v1')!.body) as Doc;
    const widget = doc.components.schemas['com.example.v1.Widget']!;
    assert.deepEqual(widget['x-kubernetes-group-version-kind'], [{ group: 'example.com', version: 'v1', kind: 'Widget' }]);
    const properties = widget.properties as Record<string, Record<string, unknown>>;
    assert.deepEqual(Object.keys(properties), ['apiVersion', 'kind', 'metadata', 'spec']);
    assert.deepEqual(properties.metadata!.allOf, [{ $ref: '#/components/schemas/io.k8s.v1.ObjectMeta' }]);
    assert.ok(doc.paths['/apis/example.com/v1/namespaces/{namespace}/widgets/{name}']!.patch);
    registry.removeDynamic('widgets.example.com');
    assert.equal(openapi.document('apis/example.com/v1'), undefined);
  });

  it('v2: one swagger document, references to #/definitions, CRD schemas in v2 terms', () => {
    const v2 = new OpenApiDocuments(registryWithWidget()).version2();
    const doc = JSON.parse(v2.json) as { swagger: string; definitions: Record<string, Record<string, unknown>> };
    assert.equal(doc.swagger, '2.0');
    assert.equal(v2.json.includes('#/components/schemas/'), false);
    assert.match(v2.json, /"\$ref":"#\/definitions\/io\.k8s\.v1\.ObjectMeta"/);
    const spec = (doc.definitions['com.example.v1.Widget']!.properties as Record<string, Record<string, unknown>>).spec!;
    const props = spec.properties as Record<string, Record<string, unknown>>;
    assert.deepEqual(props.size, { type: 'string' }, 'nullable dropped');
    assert.deepEqual(props.port, { 'x-kubernetes-int-or-string': true }, 'junctors dropped, no type');
  });

  it('v2 protobuf: gnostic Document fields (swagger 1, info 2, definitions 9) with named schemas and YAML vendor extensions', () => {
    const { protobuf } = new OpenApiDocuments(registryWithWidget()).version2();
    const text = (f: Field | undefined) => Buffer.from(f!.value as Uint8Array).toString('utf8');
    const doc = parseMessage(protobuf, 'Document');
    assert.equal(text(doc.find((f) => f.field === 1)), '2.0');
    const info = parseMessage(doc.find((f) => f.field === 2)!.value as Uint8Array, 'Info');
    assert.equal(text(info.find((f) => f.field === 1)), 'Drover');
    const definitions = parseMessage(doc.find((f) => f.field === 9)!.value as Uint8Array, 'Definitions');
    const named = definitions.map((f) => parseMessage(f.value as Uint8Array, 'NamedSchema'));
    const widget = named.find((n) => text(n.find((f) => f.field === 1)) === 'com.example.v1.Widget');
    assert.ok(widget, 'the CRD schema is a named definition');
    const schema = parseMessage(widget.find((f) => f.field === 2)!.value as Uint8Array, 'Schema');
    const type = parseMessage(schema.find((f) => f.field === 22)!.value as Uint8Array, 'TypeItem');
    assert.equal(text(type[0]), 'object');
    const extension = parseMessage(schema.find((f) => f.field === 31)!.value as Uint8Array, 'NamedAny');
    assert.equal(text(extension.find((f) => f.field === 1)), 'x-kubernetes-group-version-kind');
    const any = parseMessage(extension.find((f) => f.field === 2)!.value as Uint8Array, 'Any');
    assert.deepEqual(JSON.parse(text(any.find((f) => f.field === 2))), [{ group: 'example.com', version: 'v1', kind: 'Widget' }]);
    const properties = parseMessage(schema.find((f) => f.field === 25)!.value as Uint8Array, 'Properties');
    const names = properties.map((p) => text(parseMessage(p.value as Uint8Array, 'NamedSchema').find((f) => f.field === 1)));
    assert.deepEqual(names, ['apiVersion', 'kind', 'metadata', 'spec']);
  });
});
