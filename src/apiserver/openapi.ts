import { createHash } from 'node:crypto';
import { builtInDefinitions } from './builtin-definitions.js';
import { apiVersionOf, type ResourceDefinition } from './definition.js';
import { encodeOpenApiV2 } from './extensions/openapi-v2-protobuf.js';
import type { ResourceRegistry } from './resources.js';

/**
 * The OpenAPI documents: /openapi/v3 (an index, then one document per group-version) and
 * /openapi/v2 (one swagger 2.0 document, JSON or gnostic protobuf). Each carries the schemas of
 * the kinds it covers, with `x-kubernetes-group-version-kind`, so `kubectl explain` works and
 * kubectl validates and computes patches as against kube-apiserver: the built-in kinds' schemas
 * come from schemas/kubernetes-definitions.json (generated from @kubernetes/client-node's models
 * by scripts/openapi-definitions.ts), a CRD's from its versions' openAPIV3Schema. The v3 paths
 * list a PATCH per kind with `fieldValidation`, from which kubectl 1.27+ learns that the server
 * validates fields itself. Rebuilt whenever a CRD changes what is served.
 */

type Schema = Record<string, unknown>;

interface GroupVersionDoc {
  path: string;
  hash: string;
  body: string;
}

const V3_REF = '#/components/schemas/';
const V2_REF = '#/definitions/';
const OBJECT_META = 'io.k8s.v1.ObjectMeta';

const FIELD_VALIDATION_PARAM = {
  name: 'fieldValidation',
  in: 'query',
  description: 'How the server treats unknown fields: Ignore, Warn (default) or Strict.',
  schema: { type: 'string', uniqueItems: true },
};

function itemPath(def: ResourceDefinition): string {
  const base = def.group ? `/apis/${def.group}/${def.version}` : `/api/${def.version}`;
  return def.namespaced ? `${base}/namespaces/{namespace}/${def.plural}/{name}` : `${base}/${def.plural}/{name}`;
}

function operations(def: ResourceDefinition, schemaName: string | undefined): Record<string, object> {
  const gvk = { group: def.group, version: def.version, kind: def.kind };
  const schema = schemaName ? { $ref: `${V3_REF}${schemaName}` } : { type: 'object' };
  const ok = { description: 'OK', content: { 'application/json': { schema } } };
  const op = (action: string, extra: object = {}): object => ({
    operationId: `${action}${def.kind}`,
    'x-kubernetes-action': action,
    'x-kubernetes-group-version-kind': gvk,
    responses: { '200': ok },
    ...extra,
  });
  if (def.respondToCreate) {
    // Never stored (the access reviews): only a POST to the collection.
    return { [itemPath(def).replace(/\/\{name\}$/, '')]: { post: op('create') } };
  }
  if (def.reads) {
    // Read, not stored (metrics): get and list.
    return { [itemPath(def)]: { get: op('get') }, [itemPath(def).replace(/\/\{name\}$/, '')]: { get: op('list') } };
  }
  const docs: Record<string, object> = {
    [itemPath(def)]: {
      get: op('get'),
      put: op('put', { parameters: [FIELD_VALIDATION_PARAM] }),
      patch: op('patch', { parameters: [FIELD_VALIDATION_PARAM] }),
      delete: op('delete'),
    },
  };
  if (def.subresources.includes('status')) {
    docs[`${itemPath(def)}/status`] = {
      get: op('get'),
      put: op('put', { parameters: [FIELD_VALIDATION_PARAM] }),
      patch: op('patch', { parameters: [FIELD_VALIDATION_PARAM] }),
    };
  }
  return docs;
}

/** kube's name for a CRD version's schema: the group reversed, the version, the kind (`com.example.v1.Widget`). */
function crdSchemaName(def: ResourceDefinition): string {
  return `${def.group.split('.').reverse().join('.')}.${def.version}.${def.kind}`;
}

/** A CRD version's schema as kube publishes it: apiVersion, kind and an ObjectMeta reference added, with its GVK. */
function crdSchema(def: ResourceDefinition): Schema {
  const root = structuredClone(def.crd?.schema ?? { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  const properties = (root.properties ?? {}) as Record<string, Schema>;
  return {
    ...root,
    type: 'object',
    properties: {
      apiVersion: { type: 'string', description: 'APIVersion defines the versioned schema of this representation of an object.' },
      kind: { type: 'string', description: 'Kind is a string value representing the REST resource this object represents.' },
      metadata: { $ref: `${V3_REF}${OBJECT_META}`, description: "Standard object's metadata." },
      ...Object.fromEntries(Object.entries(properties).filter(([key]) => key !== 'metadata')),
    },
    'x-kubernetes-group-version-kind': [{ group: def.group, version: def.version, kind: def.kind }],
  };
}

/** Every schema `roots` reach through `$ref`s. */
function closure(all: Record<string, Schema>, roots: Iterable<string>): Record<string, Schema> {
  const out: Record<string, Schema> = {};
  const queue = [...roots];
  while (queue.length) {
    const name = queue.pop()!;
    if (out[name] || !all[name]) continue;
    out[name] = all[name];
    for (const match of JSON.stringify(all[name]).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)) queue.push(match[1]!);
  }
  return out;
}

/** v3.0 ignores what sits beside a `$ref`: kube wraps such references in allOf, so descriptions survive. */
function wrapRefs(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(wrapRefs);
  if (!value || typeof value !== 'object') return value;
  const schema = value as Schema;
  if (typeof schema.$ref === 'string' && Object.keys(schema).length > 1) {
    const { $ref, ...rest } = schema;
    return { ...mapValues(rest, wrapRefs), allOf: [{ $ref }] };
  }
  return mapValues(schema, wrapRefs);
}

/**
 * A CRD schema in v2 terms, as kube publishes it there: no nullable or junctors (v2 has none),
 * and objects that keep unknown fields without properties, so v2 clients accept what they keep.
 */
function toV2(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(toV2);
  if (!value || typeof value !== 'object') return value;
  const { nullable: _n, anyOf: _a, oneOf: _o, not: _not, 'x-kubernetes-validations': _v, ...schema } = value as Schema;
  if (schema['x-kubernetes-preserve-unknown-fields'] === true) delete schema.properties;
  if (schema['x-kubernetes-int-or-string'] === true && schema.format !== 'int-or-string') delete schema.type;
  return mapValues(schema, toV2);
}

const mapValues = (schema: Schema, fn: (v: unknown) => unknown): Schema =>
  Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, k === 'enum' || k === 'default' || k === 'example' ? v : fn(v)]));

const hashOf = (body: string | Buffer): string => createHash('sha512').update(body).digest('hex').slice(0, 32).toUpperCase();

export class OpenApiDocuments {
  private docs = new Map<string, GroupVersionDoc>();
  private indexBody = '';
  private v2?: { json: string; protobuf: Buffer; etag: string };
  private builtAt = -1;

  constructor(private readonly registry: ResourceRegistry) {}

  /** The schema name of each kind, and every schema: the built-in ones and the CRDs'. */
  private schemas(): { names: Map<ResourceDefinition, string>; all: Record<string, Schema> } {
    const builtIn = builtInDefinitions();
    const all: Record<string, Schema> = { ...builtIn.schemas };
    const names = new Map<ResourceDefinition, string>();
    for (const def of this.registry.all) {
      if (def.crd) {
        const name = crdSchemaName(def);
        all[name] = crdSchema(def);
        names.set(def, name);
      } else {
        const name = builtIn.kinds[`${def.group}/${def.version}/${def.kind}`];
        if (name) names.set(def, name);
      }
    }
    return { names, all };
  }

  /** Rebuilt when the registry changed (a CRD came, changed or went): the hashes change with it, so clients fetch again. */
  private current(): void {
    if (this.builtAt === this.registry.generation) return;
    this.builtAt = this.registry.generation;
    this.v2 = undefined;
    const { names, all } = this.schemas();
    const groupVersions = new Map<string, ResourceDefinition[]>();
    for (const def of this.registry.all) {
      const path = def.group ? `apis/${apiVersionOf(def)}` : `api/${def.version}`;
      groupVersions.set(path, [...(groupVersions.get(path) ?? []), def]);
    }
    const docs = new Map<string, GroupVersionDoc>();
    const indexPaths: Record<string, { serverRelativeURL: string }> = {};
    for (const [path, defs] of groupVersions) {
      const paths: Record<string, object> = {};
      for (const def of defs) Object.assign(paths, operations(def, names.get(def)));
      const roots = defs.map((def) => names.get(def)).filter((name): name is string => Boolean(name));
      const body = JSON.stringify({
        openapi: '3.0.0',
        info: { title: 'Drover', version: path },
        paths,
        components: { schemas: wrapRefs(closure(all, roots)) },
      });
      const hash = hashOf(body);
      docs.set(path, { path, hash, body });
      indexPaths[path] = { serverRelativeURL: `/openapi/v3/${path}?hash=${hash}` };
    }
    this.docs = docs;
    this.indexBody = JSON.stringify({ paths: indexPaths });
  }

  get index(): string {
    this.current();
    return this.indexBody;
  }

  /** The document for `api/v1` or `apis/<group>/<version>`. */
  document(path: string): GroupVersionDoc | undefined {
    this.current();
    return this.docs.get(path);
  }

  /** The swagger 2.0 document: every schema, references as `#/definitions/…`, CRDs in v2 terms. */
  version2(): { json: string; protobuf: Buffer; etag: string } {
    this.current();
    if (this.v2) return this.v2;
    const { names, all } = this.schemas();
    const crdNames = new Set([...names].filter(([def]) => def.crd).map(([, name]) => name));
    const definitions = Object.fromEntries(Object.entries(all).map(([name, schema]) => [name, crdNames.has(name) ? toV2(schema) : schema]));
    const document = {
      swagger: '2.0',
      info: { title: 'Drover', version: 'v2' },
      paths: {},
      definitions: JSON.parse(JSON.stringify(definitions).replaceAll(`"${V3_REF}`, `"${V2_REF}`)) as Record<string, Schema>,
    };
    const json = JSON.stringify(document);
    this.v2 = { json, protobuf: encodeOpenApiV2(document), etag: hashOf(json) };
    return this.v2;
  }
}
