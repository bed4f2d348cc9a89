import type { StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { dnsLabelProblem, dnsSubdomainProblem } from '../validation.js';
import { compileProblem, joinPath, type Schema } from './schema.js';
import { jsonPathProblem } from './json-path.js';

/**
 * The rules a CustomResourceDefinition itself must meet, as kube-apiserver's apiextensions
 * validation has them for what Drover supports: its name, group, names, scope, versions (exactly
 * one storage version), conversion `None`, and each version's schema being structural.
 * Violations are 422s with their field paths.
 */

const invalid = (field: string, value: unknown, message: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  field,
  message: `Invalid value: ${JSON.stringify(value) ?? 'null'}: ${message}`,
});
const required = (field: string, message = ''): StatusCause => ({ reason: 'FieldValueRequired', field, message: message ? `Required value: ${message}` : 'Required value' });
const forbidden = (field: string, message: string): StatusCause => ({ reason: 'FieldValueForbidden', field, message: `Forbidden: ${message}` });
const unsupported = (field: string, value: unknown, supported: string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  field,
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => JSON.stringify(s)).join(', ')}`,
});

export interface CrdNames {
  plural: string;
  singular: string;
  kind: string;
  listKind: string;
  shortNames: string[];
  categories: string[];
}

export interface CrdVersion {
  name: string;
  served: boolean;
  storage: boolean;
  schema?: Schema;
  subresources?: { status?: object; scale?: { specReplicasPath?: string; statusReplicasPath?: string; labelSelectorPath?: string } };
  additionalPrinterColumns?: { name: string; type: string; format?: string; description?: string; priority?: number; jsonPath: string }[];
  deprecated?: boolean;
  deprecationWarning?: string;
}

export interface CrdSpec {
  group: string;
  names: CrdNames;
  scope: 'Namespaced' | 'Cluster';
  versions: CrdVersion[];
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : []);

/** The CRD's spec as the rest of the code reads it (defaults applied; validate first). */
export function crdSpec(crd: KubeObject): CrdSpec {
  const spec = (isJsonObject(crd.spec) ? crd.spec : {}) as Record<string, unknown>;
  const names = (isJsonObject(spec.names) ? spec.names : {}) as Record<string, unknown>;
  const kind = typeof names.kind === 'string' ? names.kind : '';
  return {
    group: typeof spec.group === 'string' ? spec.group : '',
    names: {
      plural: typeof names.plural === 'string' ? names.plural : '',
      singular: typeof names.singular === 'string' && names.singular ? names.singular : kind.toLowerCase(),
      kind,
      listKind: typeof names.listKind === 'string' && names.listKind ? names.listKind : `${kind}List`,
      shortNames: strings(names.shortNames),
      categories: strings(names.categories),
    },
    scope: spec.scope === 'Cluster' ? 'Cluster' : 'Namespaced',
    versions: (Array.isArray(spec.versions) ? spec.versions : []).filter(isJsonObject).map((v) => {
      const version = v as Record<string, unknown>;
      const schema = isJsonObject(version.schema) && isJsonObject(version.schema.openAPIV3Schema) ? (version.schema.openAPIV3Schema as Schema) : undefined;
      return {
        ...(version as object),
        name: typeof version.name === 'string' ? version.name : '',
        served: version.served === true,
        storage: version.storage === true,
        ...(schema ? { schema } : {}),
      } as CrdVersion;
    }),
  };
}

/** Defaults kube-apiserver fills in on every write of a CRD. */
export function defaultCrd(crd: KubeObject): void {
  const spec = crd.spec;
  if (!isJsonObject(spec)) return;
  const names = spec.names;
  if (isJsonObject(names) && typeof names.kind === 'string') {
    if (!names.singular) names.singular = names.kind.toLowerCase();
    if (!names.listKind) names.listKind = `${names.kind}List`;
  }
  if (!isJsonObject(spec.conversion)) spec.conversion = { strategy: 'None' };
}

const KIND = /^[A-Za-z][A-Za-z0-9]*$/;
const VERSION = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export function validateCrd(crd: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const spec = crd.spec;
  if (!isJsonObject(spec)) return [required('spec')];
  const raw = spec as Record<string, unknown>;
  const { group, names, scope, versions } = crdSpec(crd);
  if (!group) causes.push(required('spec.group'));
  else {
    const problem = dnsSubdomainProblem(group);
    if (problem) causes.push(invalid('spec.group', group, problem));
    else if (!group.includes('.')) causes.push(invalid('spec.group', group, "should be a domain with at least one dot"));
  }
  if (raw.scope !== 'Namespaced' && raw.scope !== 'Cluster') causes.push(unsupported('spec.scope', raw.scope ?? '', ['Cluster', 'Namespaced']));
  void scope;

  const rawNames = raw.names;
  if (!isJsonObject(rawNames)) causes.push(required('spec.names'));
  for (const [field, value] of [['plural', names.plural], ['singular', names.singular]] as const) {
    const path = `spec.names.${field}`;
    if (!value) causes.push(required(path));
    else {
      const problem = dnsLabelProblem(value);
      if (problem) causes.push(invalid(path, value, problem));
    }
  }
  for (const [field, value] of [['kind', names.kind], ['listKind', names.listKind]] as const) {
    const path = `spec.names.${field}`;
    if (!value) causes.push(required(path));
    else if (!KIND.test(value)) causes.push(invalid(path, value, 'may have mixed case, but should otherwise match: ^[a-z]([-a-z0-9]*[a-z0-9])?'));
  }
  if (names.kind && names.kind === names.listKind) causes.push(invalid('spec.names.listKind', names.listKind, 'kind and listKind may not be the same'));
  names.shortNames.forEach((short, i) => {
    const problem = dnsLabelProblem(short);
    if (problem) causes.push(invalid(`spec.names.shortNames[${i}]`, short, problem));
  });
  names.categories.forEach((category, i) => {
    const problem = dnsLabelProblem(category);
    if (problem) causes.push(invalid(`spec.names.categories[${i}]`, category, problem));
  });

  const expectedName = `${names.plural}.${group}`;
  if (names.plural && group && crd.metadata.name !== expectedName) {
    causes.push(invalid('metadata.name', crd.metadata.name ?? '', `must be spec.names.plural+"."+spec.group`));
  }

  const conversion = raw.conversion;
  if (isJsonObject(conversion) && conversion.strategy !== undefined && conversion.strategy !== 'None') {
    causes.push(
      conversion.strategy === 'Webhook'
        ? forbidden('spec.conversion.strategy', 'conversion webhooks are not supported by Drover; use strategy None (only apiVersion changes between versions)')
        : unsupported('spec.conversion.strategy', conversion.strategy, ['None', 'Webhook']),
    );
  }

  if (!Array.isArray(raw.versions) || raw.versions.length === 0) {
    causes.push(required('spec.versions', 'must have exactly one version marked as storage version'));
    return causes;
  }
  if (raw.version !== undefined || raw.validation !== undefined || raw.subresources !== undefined || raw.additionalPrinterColumns !== undefined) {
    causes.push(forbidden('spec', 'version, validation, subresources and additionalPrinterColumns at the top level are apiextensions.k8s.io/v1beta1 fields; put them in spec.versions[*]'));
  }
  const storage = versions.filter((v) => v.storage).length;
  if (storage !== 1) causes.push(invalid('spec.versions', versions.map((v) => v.name), 'must have exactly one version marked as storage version'));
  if (!versions.some((v) => v.served)) causes.push(invalid('spec.versions', versions.map((v) => v.name), 'must have at least one version marked as served'));
  const seen = new Set<string>();
  versions.forEach((version, i) => {
    const path = `spec.versions[${i}]`;
    if (!version.name) causes.push(required(`${path}.name`));
    else if (!VERSION.test(version.name) || version.name.length > 63) causes.push(invalid(`${path}.name`, version.name, 'must be a DNS-1035 label'));
    else if (seen.has(version.name)) causes.push({ reason: 'FieldValueDuplicate', field: `${path}.name`, message: `Duplicate value: ${JSON.stringify(version.name)}` });
    seen.add(version.name);
    const rawVersion = (raw.versions as unknown[])[i] as Record<string, unknown>;
    for (const flag of ['served', 'storage']) {
      if (typeof rawVersion[flag] !== 'boolean') causes.push(required(`${path}.${flag}`));
    }
    if (!version.schema) causes.push(required(`${path}.schema.openAPIV3Schema`, 'schemas are required'));
    else causes.push(...structuralProblems(version.schema, `${path}.schema.openAPIV3Schema`, true));
    const scale = version.subresources?.scale;
    if (scale !== undefined) {
      if (!isJsonObject(scale)) causes.push(invalid(`${path}.subresources.scale`, scale, 'must be an object'));
      else {
        for (const field of ['specReplicasPath', 'statusReplicasPath'] as const) {
          const value = scale[field];
          if (typeof value !== 'string' || !value) causes.push(required(`${path}.subresources.scale.${field}`));
          else if (!/^\.[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/.test(value)) causes.push(invalid(`${path}.subresources.scale.${field}`, value, 'should be a json path under either .spec or .status'));
        }
        if (scale.labelSelectorPath !== undefined && (typeof scale.labelSelectorPath !== 'string' || !/^\.[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/.test(scale.labelSelectorPath))) {
          causes.push(invalid(`${path}.subresources.scale.labelSelectorPath`, scale.labelSelectorPath, 'should be a json path under either .spec or .status'));
        }
      }
    }
    (version.additionalPrinterColumns ?? []).forEach((col, j) => {
      const colPath = `${path}.additionalPrinterColumns[${j}]`;
      if (!isJsonObject(col)) return void causes.push(invalid(colPath, col, 'must be an object'));
      if (!col.name) causes.push(required(`${colPath}.name`));
      if (!['integer', 'number', 'string', 'boolean', 'date'].includes(col.type)) {
        causes.push(unsupported(`${colPath}.type`, col.type, ['integer', 'number', 'string', 'boolean', 'date']));
      }
      if (typeof col.jsonPath !== 'string' || !col.jsonPath) causes.push(required(`${colPath}.jsonPath`));
      else {
        const problem = jsonPathProblem(col.jsonPath);
        if (problem) causes.push(invalid(`${colPath}.jsonPath`, col.jsonPath, problem));
      }
    });
  });
  return causes;
}

const TYPES = ['object', 'array', 'string', 'integer', 'number', 'boolean'];
const JUNCTORS = ['allOf', 'anyOf', 'oneOf', 'not'] as const;
/** What a junctor's subtree may not say (kube's structural schema rule 3). */
const NOT_IN_JUNCTORS = ['type', 'description', 'default', 'additionalProperties', 'nullable', 'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-embedded-resource'];

/**
 * kube's structural schema rules, for the parts Drover supports: every specified node has a type
 * (or int-or-string / preserve-unknown-fields), properties and additionalProperties exclusive,
 * additionalProperties never false, no $ref, junctors only restrict, metadata only name and
 * generateName at the root, list-type map with its keys; and ajv must compile it.
 */
export function structuralProblems(schema: Schema, path: string, root = false): StatusCause[] {
  const causes: StatusCause[] = [];
  checkNode(schema, path, causes, root);
  if (!causes.length) {
    const problem = compileProblem(schema);
    if (problem) causes.push(invalid(path, '', `the schema does not compile: ${problem}`));
  }
  return causes;
}

function checkNode(node: unknown, path: string, causes: StatusCause[], root = false, inJunctor = false): void {
  if (!isJsonObject(node)) return void causes.push(invalid(path, node, 'must be an object'));
  const schema = node as Schema;
  if (schema.$ref !== undefined) causes.push(forbidden(`${path}.$ref`, '$ref is not supported'));
  const intOrString = schema['x-kubernetes-int-or-string'] === true;
  const preserve = schema['x-kubernetes-preserve-unknown-fields'];
  if (preserve !== undefined && preserve !== true) causes.push(invalid(`${path}.x-kubernetes-preserve-unknown-fields`, preserve, 'must be true or undefined'));
  if (inJunctor) {
    for (const key of NOT_IN_JUNCTORS) if (schema[key] !== undefined) causes.push(forbidden(`${path}.${key}`, 'must be empty to be structural'));
  } else if (schema.type === undefined) {
    if (!intOrString && preserve !== true) causes.push(required(`${path}.type`, root ? 'must not be empty at the root' : 'must not be empty for specified object fields'));
  } else if (typeof schema.type !== 'string' || !TYPES.includes(schema.type)) {
    causes.push(unsupported(`${path}.type`, schema.type, TYPES));
  } else if (intOrString) {
    causes.push(forbidden(`${path}.type`, 'must be empty for x-kubernetes-int-or-string'));
  }
  if (root && schema.type !== undefined && schema.type !== 'object') causes.push(invalid(`${path}.type`, schema.type, 'must be object at the root'));
  if (schema.properties !== undefined && schema.additionalProperties !== undefined) {
    causes.push(forbidden(`${path}.additionalProperties`, 'additionalProperties and properties are mutual exclusive'));
  }
  if (schema.additionalProperties === false) causes.push(forbidden(`${path}.additionalProperties`, 'must not be false'));
  if (schema.type === 'array' && schema.items === undefined && !inJunctor) causes.push(required(`${path}.items`, 'must be specified'));
  if (schema.properties !== undefined) {
    if (!isJsonObject(schema.properties)) causes.push(invalid(`${path}.properties`, schema.properties, 'must be an object'));
    else {
      for (const [key, child] of Object.entries(schema.properties)) {
        const childPath = `${path}.properties[${key}]`;
        if (root && key === 'metadata') checkMetadata(child, childPath, causes);
        else checkNode(child, childPath, causes, false, inJunctor);
      }
    }
  }
  if (isJsonObject(schema.additionalProperties)) checkNode(schema.additionalProperties, `${path}.additionalProperties`, causes, false, inJunctor);
  if (schema.items !== undefined) {
    if (Array.isArray(schema.items)) causes.push(forbidden(`${path}.items`, 'items must be a schema object and not an array'));
    else checkNode(schema.items, `${path}.items`, causes, false, inJunctor);
  }
  for (const junctor of JUNCTORS) {
    const value = schema[junctor];
    if (value === undefined) continue;
    const list = junctor === 'not' ? [value] : Array.isArray(value) ? value : [value];
    list.forEach((child, i) => checkNode(child, junctor === 'not' ? `${path}.not` : `${path}.${junctor}[${i}]`, causes, false, true));
  }
  const listType = schema['x-kubernetes-list-type'];
  if (listType !== undefined) {
    if (!['atomic', 'set', 'map'].includes(listType as string)) causes.push(unsupported(`${path}.x-kubernetes-list-type`, listType, ['atomic', 'map', 'set']));
    else if (schema.type !== 'array') causes.push(invalid(`${path}.type`, schema.type, 'must be array if x-kubernetes-list-type is specified'));
    else if (listType === 'map') {
      const keys = schema['x-kubernetes-list-map-keys'];
      const items = schema.items;
      if (!Array.isArray(keys) || !keys.length) causes.push(required(`${path}.x-kubernetes-list-map-keys`, 'must not be empty if x-kubernetes-list-type is map'));
      else if (isJsonObject(items)) {
        const props = isJsonObject(items.properties) ? items.properties : {};
        for (const key of keys) {
          if (typeof key !== 'string' || !isJsonObject(props[key])) causes.push(invalid(`${path}.x-kubernetes-list-map-keys`, keys, `entries must all be names of item properties`));
        }
      }
    }
  } else if (schema['x-kubernetes-list-map-keys'] !== undefined) {
    causes.push(required(`${path}.x-kubernetes-list-type`, 'must be map if x-kubernetes-list-map-keys is non-empty'));
  }
}

/** At the root, metadata may only restrict name and generateName (ObjectMeta is the server's). */
function checkMetadata(node: unknown, path: string, causes: StatusCause[]): void {
  if (!isJsonObject(node)) return void causes.push(invalid(path, node, 'must be an object'));
  if (node.type !== undefined && node.type !== 'object') causes.push(invalid(`${path}.type`, node.type, 'must be object'));
  for (const key of Object.keys(node)) {
    if (!['type', 'properties', 'description'].includes(key)) causes.push(forbidden(`${path}.${key}`, 'must not be specified'));
  }
  if (isJsonObject(node.properties)) {
    for (const key of Object.keys(node.properties)) {
      if (key !== 'name' && key !== 'generateName') causes.push(forbidden(`${path}.properties[${key}]`, 'must not be specified'));
    }
  }
}

export { joinPath };
