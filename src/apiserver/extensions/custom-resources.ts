import type { ResourceDefinition, ScaleStrategy, Subresource } from '../definition.js';
import { errors, type StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { ageOf, type Cell, type ColumnDefinition, column, DEFAULT_PRINTER, NAME_COLUMN, type Printer } from '../table.js';
import { type CrdSpec, type CrdVersion, crdSpec } from './crd-validation.js';
import { evaluateJsonPath, parseJsonPath } from './json-path.js';
import { CompiledSchema, type Schema } from './schema.js';

/**
 * The kinds a CustomResourceDefinition serves: one ResourceDefinition per served version, all
 * stored in the storage version's shape under `/registry/<group>/<plural>` (conversion `None`:
 * only apiVersion changes between versions), with the version's schema (validation, defaulting,
 * pruning), its status and scale subresources and its printer columns.
 */

/** Every top-level field: the root schema preserves unknown fields. */
class AnyField extends Set<string> {
  override has(): boolean {
    return true;
  }
}

function printerOf(version: CrdVersion): Printer {
  const columns = (version.additionalPrinterColumns ?? []).filter((c) => isJsonObject(c));
  if (!columns.length) return DEFAULT_PRINTER;
  const compiled = columns.map((c) => ({ column: c, steps: parseJsonPath(c.jsonPath) }));
  const definitions: ColumnDefinition[] = [
    NAME_COLUMN,
    ...compiled.map(({ column: c }) =>
      column(c.name, c.description ?? '', { type: c.type as ColumnDefinition['type'], format: c.format ?? '', priority: c.priority ?? 0 }),
    ),
  ];
  return {
    columns: definitions,
    cells: (obj, now) => [
      obj.metadata.name ?? '',
      ...compiled.map(({ column: c, steps }): Cell => {
        const values = evaluateJsonPath(steps, obj);
        if (!values.length) return null;
        const value = values.length === 1 ? values[0] : values;
        if (c.type === 'date') return ageOf(value, now);
        if (c.type === 'integer' || c.type === 'number') return typeof value === 'number' ? value : null;
        if (c.type === 'boolean') return typeof value === 'boolean' ? value : null;
        return typeof value === 'string' ? value : JSON.stringify(value);
      }),
    ],
  };
}

function readPath(obj: unknown, path: string): unknown {
  let value = obj;
  for (const key of path.split('.').slice(1)) value = isJsonObject(value) ? value[key] : undefined;
  return value;
}

function writePath(obj: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.').slice(1);
  let target = obj;
  for (const key of keys.slice(0, -1)) {
    if (!isJsonObject(target[key])) target[key] = {};
    target = target[key] as Record<string, unknown>;
  }
  target[keys[keys.length - 1]!] = value;
}

function scaleOf(spec: NonNullable<NonNullable<CrdVersion['subresources']>['scale']>): ScaleStrategy {
  const specPath = spec.specReplicasPath ?? '.spec.replicas';
  const statusPath = spec.statusReplicasPath ?? '.status.replicas';
  return {
    view(obj) {
      const meta = obj.metadata;
      const replicas = readPath(obj, specPath);
      const current = readPath(obj, statusPath);
      const selector = spec.labelSelectorPath ? readPath(obj, spec.labelSelectorPath) : undefined;
      return {
        kind: 'Scale',
        apiVersion: 'autoscaling/v1',
        metadata: { name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion, creationTimestamp: meta.creationTimestamp },
        spec: { replicas: typeof replicas === 'number' ? replicas : 0 },
        status: { replicas: typeof current === 'number' ? current : 0, ...(typeof selector === 'string' && selector ? { selector } : {}) },
      };
    },
    apply(obj, scale) {
      const replicas = isJsonObject(scale.spec) ? scale.spec.replicas : undefined;
      if (replicas !== undefined && (!Number.isInteger(replicas) || (replicas as number) < 0)) {
        throw errors.invalid('Scale', obj.metadata.name ?? '', 'autoscaling', [
          { reason: 'FieldValueInvalid', field: 'spec.replicas', message: `Invalid value: ${JSON.stringify(replicas)}: must be greater than or equal to 0` },
        ]);
      }
      const next = structuredClone(obj) as Record<string, unknown>;
      writePath(next, specPath, replicas ?? 0);
      return next as KubeObject;
    },
  };
}

/** The object's status alone, validated against the schema's status (a status write). */
function statusOnly(obj: KubeObject): Record<string, unknown> {
  return obj.status === undefined ? {} : { status: obj.status };
}

/** The definitions a CRD serves now, one per served version. */
export function customResourceKinds(crd: KubeObject): ResourceDefinition[] {
  const spec: CrdSpec = crdSpec(crd);
  const storage = spec.versions.find((v) => v.storage)?.name ?? spec.versions[0]?.name ?? '';
  const multiVersion = spec.versions.length > 1;
  const storedApiVersion = `${spec.group}/${storage}`;
  return spec.versions
    .filter((version) => version.served)
    .map((version): ResourceDefinition => {
      const schema = new CompiledSchema(version.schema ?? { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
      const rootProperties = isJsonObject(schema.schema.properties) ? Object.keys(schema.schema.properties) : [];
      const preserveRoot = schema.schema['x-kubernetes-preserve-unknown-fields'] === true;
      const hasStatus = isJsonObject(version.subresources?.status);
      const scale = isJsonObject(version.subresources?.scale) ? version.subresources!.scale : undefined;
      const subresources: Subresource[] = [...(hasStatus ? (['status'] as const) : []), ...(scale ? (['scale'] as const) : [])];
      const apiVersion = `${spec.group}/${version.name}`;
      const statusSchema = isJsonObject(schema.schema.properties) ? (schema.schema.properties as Record<string, Schema>).status : undefined;
      const statusCheck = statusSchema ? new CompiledSchema({ type: 'object', properties: { status: statusSchema } }) : undefined;
      return {
        group: spec.group,
        version: version.name,
        kind: spec.names.kind,
        plural: spec.names.plural,
        singular: spec.names.singular,
        namespaced: spec.scope === 'Namespaced',
        shortNames: spec.names.shortNames,
        categories: spec.names.categories,
        subresources,
        printer: printerOf(version),
        fieldLabels: {},
        topLevelFields: preserveRoot ? new AnyField() : new Set(['apiVersion', 'kind', 'metadata', ...rootProperties]),
        storagePath: `${spec.group}/${spec.names.plural}`,
        nameRule: 'dns-subdomain',
        listKind: spec.names.listKind,
        crd: { name: crd.metadata.name ?? '', uid: crd.metadata.uid ?? '', schema: version.schema },
        ...(multiVersion
          ? {
              conversion: {
                toStorage: (obj) => ({ ...obj, apiVersion: storedApiVersion }),
                fromStorage: (obj) => ({ ...obj, apiVersion }),
              },
            }
          : {}),
        prepareForCreate(obj) {
          // With a status subresource, status is written only through it (kube drops it on create).
          if (hasStatus) delete obj.status;
        },
        applyDefaults(obj) {
          schema.applyDefaults(obj as unknown as Record<string, unknown>);
        },
        unknownFields(obj) {
          return schema.prune(obj as unknown as Record<string, unknown>);
        },
        validate(obj): StatusCause[] {
          return schema.validate(obj as unknown as Record<string, unknown>);
        },
        ...(statusCheck ? { validateStatus: (obj: KubeObject) => statusCheck.validate(statusOnly(obj)) } : {}),
        ...(scale ? { scale: scaleOf(scale) } : {}),
      };
    });
}
