// Generates schemas/kubernetes-definitions.json: the OpenAPI schemas of the built-in kinds Drover
// serves (and every type they reach), from the models of the installed @kubernetes/client-node
// (each model's attributeTypeMap for types, its .d.ts comments for descriptions and `?` for
// required), plus the strategic-merge-patch extensions Drover's own patch metadata states.
// Run: npm run openapi-definitions. test/unit/openapi-definitions.test.ts checks the file is current.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { CRD_DEFINITION } from '../src/apiserver/extensions/crd-kind.js';
import { RESOURCES } from '../src/apiserver/kinds/index.js';
import { type PatchMeta, patchMetaForKind } from '../src/apiserver/patch/patch-meta.js';

const require = createRequire(import.meta.url);
const PACKAGE_JSON = require.resolve('@kubernetes/client-node/package.json');
const MODELS = path.join(path.dirname(PACKAGE_JSON), 'dist/gen/models');
export const OUTPUT = new URL('../schemas/kubernetes-definitions.json', import.meta.url);

type Schema = Record<string, unknown>;
interface Attribute {
  name: string;
  baseName: string;
  type: string;
  format: string;
}

/** `V1ObjectMeta` → `io.k8s.v1.ObjectMeta`: the prefix (group and version) in the package part, so kubectl prints `<ObjectMeta>`. */
export function schemaName(model: string): string {
  const match = /^((?:[A-Z][a-z0-9]*)*?V\d+(?:alpha\d+|beta\d+)?)([A-Z].*)$/.exec(model);
  return match ? `io.k8s.${match[1]!.toLowerCase()}.${match[2]}` : `io.k8s.${model}`;
}

const ref = (model: string): string => `#/components/schemas/${schemaName(model)}`;

function modelExists(model: string): boolean {
  return fs.existsSync(path.join(MODELS, `${model}.js`));
}

async function attributes(model: string): Promise<Attribute[]> {
  const mod = (await import(path.join(MODELS, `${model}.js`))) as Record<string, { attributeTypeMap: Attribute[] }>;
  return mod[model]!.attributeTypeMap;
}

/** Descriptions and which fields are optional, from the model's declaration file. */
function declarations(model: string): { description: string; fields: Map<string, { description: string; optional: boolean }> } {
  const text = fs.readFileSync(path.join(MODELS, `${model}.d.ts`), 'utf8');
  const clean = (comment: string) =>
    comment
      .split('\n')
      .map((line) => line.replace(/^\s*\*\s?/, '').trim())
      .filter((line) => line && line !== '/')
      .join(' ')
      .replace(/\\"/g, '"')
      .trim();
  const classMatch = /\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*export declare class/.exec(text);
  const fields = new Map<string, { description: string; optional: boolean }>();
  const fieldPattern = /(?:\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*)?'([^']+)'(\??):/g;
  for (const match of text.matchAll(fieldPattern)) {
    fields.set(match[2]!, { description: match[1] ? clean(match[1]) : '', optional: match[3] === '?' });
  }
  return { description: classMatch ? clean(classMatch[1]!) : '', fields };
}

/** A client-node type string as an OpenAPI schema; models it names are queued. */
function typeSchema(type: string, format: string, queue: string[]): Schema {
  const array = /^Array<(.+)>$/.exec(type);
  if (array) return { type: 'array', items: typeSchema(array[1]!, '', queue) };
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) return { type: 'object', additionalProperties: typeSchema(map[1]!, '', queue) };
  switch (type) {
    case 'string':
      return format ? { type: 'string', format } : { type: 'string' };
    case 'number':
      return format === 'int32' || format === 'int64' ? { type: 'integer', format } : { type: 'number', ...(format ? { format } : {}) };
    case 'boolean':
      return { type: 'boolean' };
    case 'Date':
    case 'V1MicroTime':
      return { type: 'string', format: 'date-time' };
    case 'IntOrString':
      return { type: 'string', format: 'int-or-string', 'x-kubernetes-int-or-string': true };
    case 'any':
    case 'object':
      // Any JSON value (apiextensions' JSON, RawExtension): no type, as kube publishes them.
      return { 'x-kubernetes-preserve-unknown-fields': true };
  }
  if (!modelExists(type)) throw new Error(`unknown client-node type ${type}`);
  queue.push(type);
  return { $ref: ref(type) };
}

/** The model class of a served kind, by client-node's naming. */
function modelOf(group: string, version: string, kind: string): string | undefined {
  const v = version.charAt(0).toUpperCase() + version.slice(1);
  const groupPrefix = group
    .split('.')[0]!
    .replace(/^./, (c) => c.toUpperCase());
  const candidates = group === '' ? [`Core${v}${kind}`, `${v}${kind}`] : [`${groupPrefix}${v}${kind}`, `${v}${kind}`];
  return candidates.find(modelExists);
}

export async function generate(): Promise<object> {
  const schemas: Record<string, Schema> = {};
  const kinds: Record<string, string> = {};
  const queue: string[] = [];
  const defs = [...RESOURCES, CRD_DEFINITION];
  const roots = new Map<string, { group: string; version: string; kind: string }[]>();
  for (const def of defs) {
    // A version served in v1's shape with no model of its own (batch/v1beta1 CronJob) shares v1's schema.
    const model = modelOf(def.group, def.version, def.kind) ?? (def.conversion ? modelOf(def.group, 'v1', def.kind) : undefined);
    if (!model) continue;
    kinds[`${def.group}/${def.version}/${def.kind}`] = schemaName(model);
    roots.set(model, [...(roots.get(model) ?? []), { group: def.group, version: def.version, kind: def.kind }]);
    queue.push(model);
  }
  const done = new Set<string>();
  while (queue.length) {
    const model = queue.shift()!;
    if (done.has(model)) continue;
    done.add(model);
    const { description, fields } = declarations(model);
    const properties: Record<string, Schema> = {};
    const required: string[] = [];
    for (const attribute of await attributes(model)) {
      const field = fields.get(attribute.name);
      const schema = typeSchema(attribute.type, attribute.format, queue);
      const withDescription = field?.description ? { ...schema, description: field.description } : schema;
      properties[attribute.baseName] = withDescription;
      if (field && !field.optional) required.push(attribute.baseName);
    }
    const gvks = roots.get(model);
    schemas[schemaName(model)] = {
      ...(description ? { description } : {}),
      type: 'object',
      ...(required.length ? { required } : {}),
      properties,
      ...(gvks ? { 'x-kubernetes-group-version-kind': gvks } : {}),
    };
  }
  // The strategic-merge-patch extensions, from the kinds' patch metadata, on the types they reach.
  for (const def of defs) {
    const model = modelOf(def.group, def.version, def.kind);
    if (model) annotate(schemas, schemaName(model), patchMetaForKind(def.kind));
  }
  const version = (JSON.parse(fs.readFileSync(PACKAGE_JSON, 'utf8')) as { version: string }).version;
  return { source: `@kubernetes/client-node ${version} models (scripts/openapi-definitions.ts)`, kinds, schemas: sortKeys(schemas) };
}

function target(schemas: Record<string, Schema>, schema: Schema): Schema | undefined {
  const pointer = typeof schema.$ref === 'string' ? schema.$ref : undefined;
  return pointer ? schemas[pointer.slice('#/components/schemas/'.length)] : undefined;
}

function annotate(schemas: Record<string, Schema>, name: string, meta: PatchMeta, seen = new Set<string>()): void {
  const schema = schemas[name];
  if (!schema || !meta.children) return;
  const key = `${name}:${JSON.stringify(meta)}`;
  if (seen.has(key)) return;
  seen.add(key);
  const properties = schema.properties as Record<string, Schema>;
  for (const [field, child] of Object.entries(meta.children)) {
    const property = properties[field];
    if (!property) continue;
    if (child.strategy === 'merge') {
      property['x-kubernetes-patch-strategy'] = 'merge';
      if (child.mergeKey) property['x-kubernetes-patch-merge-key'] = child.mergeKey;
    }
    const inner = property.type === 'array' ? (property.items as Schema) : property;
    const next = target(schemas, inner);
    if (next && child.children) annotate(schemas, String(inner.$ref).slice('#/components/schemas/'.length), child, seen);
  }
}

function sortKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  const document = await generate();
  fs.mkdirSync(new URL('.', OUTPUT), { recursive: true });
  fs.writeFileSync(OUTPUT, `${JSON.stringify(document, null, 1)}\n`);
  console.log(`${OUTPUT.pathname}: ${Object.keys((document as { schemas: object }).schemas).length} schemas written`);
}
