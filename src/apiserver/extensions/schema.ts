import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { StatusCause } from '../errors.js';
import { isJsonObject, type JsonValue } from '../json.js';

/**
 * A CRD version's `openAPIV3Schema` put to work on custom objects, as kube-apiserver's
 * apiextensions does: validation (the JSON Schema keywords by ajv, a maintained validator; the
 * Kubernetes extensions x-kubernetes-int-or-string, -embedded-resource, -list-type and
 * -list-map-keys by the walk here), defaulting (`default`) and pruning of fields the schema does
 * not specify (kept under x-kubernetes-preserve-unknown-fields). `format` is not checked (kube
 * checks a few formats; see docs/api.md), and CEL rules (x-kubernetes-validations) are not run.
 */

export type Schema = Record<string, unknown>;

const schemaOf = (value: unknown): Schema | undefined => (isJsonObject(value) ? (value as Schema) : undefined);
const propertiesOf = (schema: Schema): Record<string, Schema> | undefined =>
  isJsonObject(schema.properties) ? (schema.properties as Record<string, Schema>) : undefined;

/** The field paths kube prints: `spec.items[2].name`. */
export function joinPath(base: string, key: string | number): string {
  if (typeof key === 'number') return `${base}[${key}]`;
  return base ? `${base}.${key}` : key;
}

// ---------------------------------------------------------------------------------------------
// Compiling

let sharedAjv: Ajv | undefined;

/** One ajv for every schema: OpenAPI's `nullable`, the x-kubernetes-* keywords known and mostly inert. */
function ajv(): Ajv {
  if (sharedAjv) return sharedAjv;
  const instance = new Ajv({ strict: false, allErrors: true, validateFormats: false, logger: false, validateSchema: false });
  instance.addKeyword({
    keyword: 'x-kubernetes-int-or-string',
    schemaType: 'boolean',
    errors: false,
    validate: (enabled: boolean, data: unknown) => !enabled || typeof data === 'string' || Number.isInteger(data),
  });
  for (const keyword of [
    'x-kubernetes-preserve-unknown-fields',
    'x-kubernetes-embedded-resource',
    'x-kubernetes-list-type',
    'x-kubernetes-list-map-keys',
    'x-kubernetes-map-type',
    'x-kubernetes-validations',
  ]) {
    instance.addKeyword({ keyword });
  }
  sharedAjv = instance;
  return instance;
}

/** What ajv cannot take: an invalid pattern, say. The message, or undefined when it compiles. */
export function compileProblem(schema: Schema): string | undefined {
  try {
    const compiled = withoutDefaults(schema);
    ajv().compile(compiled);
    ajv().removeSchema(compiled);
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/**
 * ajv must not see `default` (it would not apply it, but checks it in strict modes) nor
 * `metadata` restrictions beyond name (ObjectMeta is checked by the store's own rules).
 */
function withoutDefaults(schema: Schema): Schema {
  return JSON.parse(JSON.stringify(schema, (key, value: unknown) => (key === 'default' ? undefined : value))) as Schema;
}

export class CompiledSchema {
  private readonly check: ValidateFunction;

  constructor(readonly schema: Schema) {
    const root = { ...schema };
    // metadata is ObjectMeta whatever the schema says of it; the store validates it.
    const properties = propertiesOf(root);
    if (properties?.metadata) {
      const { metadata: _metadata, ...rest } = properties;
      root.properties = rest;
    }
    const instance = ajv();
    const compiled = withoutDefaults(root);
    this.check = instance.compile(compiled);
    // The function stands alone; ajv's cache would otherwise keep every schema a CRD ever had.
    instance.removeSchema(compiled);
  }

  /** Every violation, as kube's field errors (field path, reason, message). */
  validate(obj: Record<string, unknown>): StatusCause[] {
    const causes: StatusCause[] = [];
    if (!this.check(obj)) {
      for (const error of this.check.errors ?? []) {
        const cause = causeOf(error, obj);
        if (cause && !causes.some((c) => c.field === cause.field && c.message === cause.message)) causes.push(cause);
      }
    }
    walkExtensions(obj, this.schema, '', causes, true);
    // By field, as kube's errors come out of its ordered walk.
    return causes.sort((a, b) => (a.field ?? '').localeCompare(b.field ?? ''));
  }

  /** Removes fields the schema does not specify; answers their paths (for warnings or a strict refusal). */
  prune(obj: Record<string, unknown>): string[] {
    const pruned: string[] = [];
    pruneObject(obj, this.schema, '', pruned, true);
    return pruned;
  }

  /** Fills in `default`s where a field is missing (its parent present), as kube's structural defaulting. */
  applyDefaults(obj: Record<string, unknown>): void {
    defaultValue(obj, this.schema);
  }
}

// ---------------------------------------------------------------------------------------------
// Validation messages

function instancePath(path: string): string {
  let out = '';
  for (const part of path.split('/').slice(1)) {
    const key = part.replace(/~1/g, '/').replace(/~0/g, '~');
    out = /^\d+$/.test(key) ? joinPath(out, Number(key)) : joinPath(out, key);
  }
  return out;
}

function valueAt(obj: unknown, path: string): unknown {
  let value = obj;
  for (const part of path.split('/').slice(1)) {
    const key = part.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(value)) value = value[Number(key)];
    else if (isJsonObject(value)) value = value[key];
    else return undefined;
  }
  return value;
}

const shown = (value: unknown): string => (typeof value === 'string' ? JSON.stringify(value) : JSON.stringify(value) ?? 'null');

/** ajv's error in kube's words (k8s.io/kube-openapi validate errors). */
function causeOf(error: ErrorObject, obj: unknown): StatusCause | undefined {
  const field = instancePath(error.instancePath);
  const value = valueAt(obj, error.instancePath);
  const where = field || '<root>';
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required': {
      const missing = String(params.missingProperty);
      return { reason: 'FieldValueRequired', field: joinPath(field, missing), message: 'Required value' };
    }
    case 'type':
      return {
        reason: 'FieldValueTypeInvalid',
        field: where,
        message: `Invalid value: ${shown(typeName(value))}: ${where} in body must be of type ${String(params.type)}: ${shown(typeName(value))}`,
      };
    case 'enum':
      return {
        reason: 'FieldValueNotSupported',
        field: where,
        message: `Unsupported value: ${shown(value)}: supported values: ${(params.allowedValues as unknown[]).map(shown).join(', ')}`,
      };
    case 'x-kubernetes-int-or-string':
      return { reason: 'FieldValueTypeInvalid', field: where, message: `Invalid value: ${shown(value)}: ${where} in body must be of type integer or string` };
    case 'if':
    case 'anyOf':
    case 'oneOf':
      // The branch errors say more; kube reports the junctor only when nothing else is wrong.
      return { reason: 'FieldValueInvalid', field: where, message: `Invalid value: ${shown(value)}: ${where} in body must match ${error.keyword === 'oneOf' ? 'exactly one' : 'at least one'} schema in ${error.keyword}` };
    default:
      return { reason: 'FieldValueInvalid', field: where, message: `Invalid value: ${shown(value)}: ${where} in body ${error.message ?? 'is invalid'}` };
  }
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
}

// ---------------------------------------------------------------------------------------------
// The Kubernetes extensions ajv does not know: list types and embedded resources.

function walkExtensions(value: unknown, schema: Schema, path: string, causes: StatusCause[], root = false): void {
  if (Array.isArray(value)) {
    const listType = schema['x-kubernetes-list-type'];
    if (listType === 'set') {
      const seen = new Set<string>();
      value.forEach((item, i) => {
        const key = JSON.stringify(item);
        if (seen.has(key)) causes.push({ reason: 'FieldValueDuplicate', field: joinPath(path, i), message: `Duplicate value: ${shown(item)}` });
        seen.add(key);
      });
    } else if (listType === 'map') {
      const keys = Array.isArray(schema['x-kubernetes-list-map-keys']) ? (schema['x-kubernetes-list-map-keys'] as string[]) : [];
      const seen = new Set<string>();
      value.forEach((item, i) => {
        if (!isJsonObject(item)) return;
        const entry = Object.fromEntries(keys.filter((k) => item[k] !== undefined).map((k) => [k, item[k]]));
        const key = JSON.stringify(keys.map((k) => item[k] ?? null));
        if (seen.has(key)) causes.push({ reason: 'FieldValueDuplicate', field: joinPath(path, i), message: `Duplicate value: ${JSON.stringify(entry)}` });
        seen.add(key);
      });
    }
    const items = schemaOf(schema.items);
    if (items) value.forEach((item, i) => walkExtensions(item, items, joinPath(path, i), causes));
    return;
  }
  if (!isJsonObject(value)) return;
  if (schema['x-kubernetes-embedded-resource'] === true && !root) {
    for (const field of ['apiVersion', 'kind']) {
      if (typeof value[field] !== 'string' || !value[field]) {
        causes.push({ reason: 'FieldValueRequired', field: joinPath(path, field), message: 'Required value: must not be empty' });
      }
    }
  }
  const properties = propertiesOf(schema);
  const additional = schemaOf(schema.additionalProperties);
  for (const [key, child] of Object.entries(value)) {
    if (root && key === 'metadata') continue;
    const childSchema = properties?.[key] ?? additional;
    if (childSchema) walkExtensions(child, childSchema, joinPath(path, key), causes);
  }
}

// ---------------------------------------------------------------------------------------------
// Pruning and defaulting

/** Fields every object keeps at its root, and every embedded resource keeps at its own. */
const RESOURCE_FIELDS = new Set(['apiVersion', 'kind', 'metadata']);

function pruneObject(value: unknown, schema: Schema, path: string, pruned: string[], root = false): void {
  if (Array.isArray(value)) {
    const items = schemaOf(schema.items);
    if (items) value.forEach((item, i) => pruneObject(item, items, joinPath(path, i), pruned));
    else if (schema['x-kubernetes-preserve-unknown-fields'] !== true && schema['x-kubernetes-int-or-string'] !== true && schema.type === 'array') {
      // An array without an items schema keeps nothing structured inside it.
      value.forEach((item, i) => pruneObject(item, {}, joinPath(path, i), pruned));
    }
    return;
  }
  if (!isJsonObject(value)) return;
  const properties = propertiesOf(schema);
  const additional = schemaOf(schema.additionalProperties);
  const preserve = schema['x-kubernetes-preserve-unknown-fields'] === true;
  const keepResourceFields = root || schema['x-kubernetes-embedded-resource'] === true;
  for (const key of Object.keys(value)) {
    if (keepResourceFields && RESOURCE_FIELDS.has(key) && !properties?.[key]) continue;
    // The root's own fields are the kind's top-level fields, which the verb layer judges.
    if (root && (key === 'metadata' || !properties?.[key])) continue;
    const child = properties?.[key] ?? additional;
    if (child) {
      pruneObject(value[key], child, joinPath(path, key), pruned);
    } else if (!preserve && schema.additionalProperties !== true) {
      pruned.push(joinPath(path, key));
      delete value[key];
    }
  }
}

function defaultValue(value: unknown, schema: Schema): void {
  if (Array.isArray(value)) {
    const items = schemaOf(schema.items);
    if (items) for (const item of value) defaultValue(item, items);
    return;
  }
  if (!isJsonObject(value)) return;
  const properties = propertiesOf(schema);
  if (properties) {
    for (const [key, child] of Object.entries(properties)) {
      if (value[key] === undefined && child.default !== undefined) value[key] = structuredClone(child.default) as JsonValue;
      if (value[key] !== undefined) defaultValue(value[key], child);
    }
  }
  const additional = schemaOf(schema.additionalProperties);
  if (additional) {
    for (const [key, child] of Object.entries(value)) if (!properties?.[key]) defaultValue(child, additional);
  }
}
