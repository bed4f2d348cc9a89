import { isJsonObject, type JsonValue } from '../json.js';

/**
 * The type information server-side apply merges and tracks fields by, read from OpenAPI schemas:
 * the built-in kinds' (schemas/kubernetes-definitions.json, through `$ref`s) and a CRD version's
 * structural `openAPIV3Schema`. What matters is the shape structured-merge-diff gives a value:
 *
 * - a list is `atomic` (owned and replaced whole), a `set` of scalars (items by value) or a
 *   `map` (items by the values of `x-kubernetes-list-map-keys`);
 * - an object is a struct (declared `properties`), a map (`additionalProperties`, or no
 *   schema: keys not declared), or atomic (`x-kubernetes-map-type: atomic`).
 *
 * The built-in definitions come from client-node's models, which keep the strategic-merge tags
 * (`x-kubernetes-patch-strategy` / `-patch-merge-key`) but not the list types. Kubernetes
 * derives the same thing when no `+listType` is given (merge with a key: map by that key; merge
 * without: set; anything else: atomic); the few lists whose Go types carry more than one map
 * key, and the structs marked `+structType=atomic`, are restated below.
 */

export type Schema = Record<string, unknown>;

export interface ListType {
  type: 'atomic' | 'set' | 'map';
  keys: readonly string[];
}

const REF_PREFIX = '#/components/schemas/';

/** `definition.property` → list type, for the lists whose Go tags the models lost. */
const LIST_OVERRIDES: Readonly<Record<string, ListType>> = {
  'Container.ports': { type: 'map', keys: ['containerPort', 'protocol'] },
  'EphemeralContainer.ports': { type: 'map', keys: ['containerPort', 'protocol'] },
  'ServiceSpec.ports': { type: 'map', keys: ['port', 'protocol'] },
  'PodSpec.topologySpreadConstraints': { type: 'map', keys: ['topologyKey', 'whenUnsatisfiable'] },
  'ServiceSpec.clusterIPs': { type: 'atomic', keys: [] },
  'ServiceSpec.ipFamilies': { type: 'atomic', keys: [] },
};

/** Defaults of key fields, which structured-merge-diff uses when an item omits the key (`protocol: TCP`). */
const KEY_DEFAULTS: Readonly<Record<string, Readonly<Record<string, JsonValue>>>> = {
  'Container.ports': { protocol: 'TCP' },
  'EphemeralContainer.ports': { protocol: 'TCP' },
  'ServiceSpec.ports': { protocol: 'TCP' },
};

/** Definitions whose Go types are `+structType=atomic` (or `+mapType=atomic`): owned and replaced whole. */
const ATOMIC_STRUCTS: ReadonlySet<string> = new Set([
  'LabelSelector',
  'NodeSelector',
  'NodeSelectorTerm',
  'LocalObjectReference',
  'ObjectFieldSelector',
  'ResourceFieldSelector',
  'ConfigMapKeySelector',
  'SecretKeySelector',
  'TypedLocalObjectReference',
]);

/** A schema as a walk sees it: resolved, with the override for the field it was reached through. */
export interface FieldSchema {
  readonly schema: Schema | undefined;
  /** The definition it came from (built-ins), for the overrides. */
  readonly definition?: string;
  /** Set when reached through a property that has an override. */
  readonly listType?: ListType;
  readonly keyDefaults?: Readonly<Record<string, JsonValue>>;
}

const UNTYPED: FieldSchema = { schema: undefined };

/** Resolves `$ref`s against a set of named schemas (the built-in definitions). */
export class SchemaResolver {
  /** `definition.property` → the child, resolved once. */
  private readonly fieldCache = new WeakMap<Schema, Map<string, FieldSchema>>();
  /** Per resolved schema (each is made once, by field() or resolve() of a root). */
  private readonly itemsCache = new WeakMap<FieldSchema, FieldSchema>();
  private readonly listTypeCache = new WeakMap<FieldSchema, ListType>();

  constructor(private readonly definitions: Readonly<Record<string, Schema>> = {}) {}

  /** The schema `node` stands for, `$ref` and a lone `allOf` followed. */
  resolve(node: unknown): FieldSchema {
    if (!isJsonObject(node)) return UNTYPED;
    const ref = node.$ref;
    if (typeof ref === 'string' && ref.startsWith(REF_PREFIX)) {
      const name = ref.slice(REF_PREFIX.length);
      const target = this.definitions[name];
      if (!target) return UNTYPED;
      return { schema: target, definition: shortName(name) };
    }
    if (Array.isArray(node.allOf) && node.allOf.length === 1) return this.resolve(node.allOf[0]);
    return { schema: node };
  }

  /** The schema of `field` in an object of schema `parent`, and whether the schema declares it. */
  field(parent: FieldSchema, field: string): { child: FieldSchema; declared: boolean } {
    const schema = parent.schema;
    if (!schema) return { child: UNTYPED, declared: false };
    let cache = this.fieldCache.get(schema);
    if (!cache) {
      cache = new Map();
      this.fieldCache.set(schema, cache);
    }
    const properties = isJsonObject(schema.properties) ? schema.properties : undefined;
    if (properties && Object.hasOwn(properties, field)) {
      let child = cache.get(field);
      if (!child) {
        const resolved = this.resolve(properties[field]);
        const override = parent.definition ? `${parent.definition}.${field}` : undefined;
        const listType = override ? LIST_OVERRIDES[override] : undefined;
        const keyDefaults = override ? KEY_DEFAULTS[override] : undefined;
        child = { ...resolved, ...(listType ? { listType } : {}), ...(keyDefaults ? { keyDefaults } : {}) };
        cache.set(field, child);
      }
      return { child, declared: true };
    }
    const additional = schema.additionalProperties;
    if (isJsonObject(additional)) return { child: this.resolve(additional), declared: false };
    return { child: UNTYPED, declared: false };
  }

  /** The schema of a list's items. */
  items(list: FieldSchema): FieldSchema {
    if (!list.schema) return UNTYPED;
    let items = this.itemsCache.get(list);
    if (!items) {
      items = this.resolve(list.schema.items);
      this.itemsCache.set(list, items);
    }
    return items;
  }

  /** How a list of this schema merges; no schema: atomic, as structured-merge-diff deduces. */
  listType(list: FieldSchema): ListType {
    let type = this.listTypeCache.get(list);
    if (!type) {
      type = this.readListType(list);
      this.listTypeCache.set(list, type);
    }
    return type;
  }

  private readListType(list: FieldSchema): ListType {
    if (list.listType) return list.listType;
    const schema = list.schema;
    if (!schema) return { type: 'atomic', keys: [] };
    const declared = schema['x-kubernetes-list-type'];
    if (declared === 'set' || declared === 'atomic') return { type: declared, keys: [] };
    if (declared === 'map') {
      const keys = schema['x-kubernetes-list-map-keys'];
      return { type: 'map', keys: Array.isArray(keys) ? keys.filter((k): k is string => typeof k === 'string') : [] };
    }
    const strategy = schema['x-kubernetes-patch-strategy'];
    if (typeof strategy === 'string' && strategy.split(',').includes('merge')) {
      const key = schema['x-kubernetes-patch-merge-key'];
      return typeof key === 'string' ? { type: 'map', keys: [key] } : { type: 'set', keys: [] };
    }
    return { type: 'atomic', keys: [] };
  }

  /** The default of a map list's key field, for an item that omits it. */
  keyDefault(list: FieldSchema, key: string): JsonValue | undefined {
    if (list.keyDefaults && Object.hasOwn(list.keyDefaults, key)) return list.keyDefaults[key];
    const items = this.items(list).schema;
    const properties = items && isJsonObject(items.properties) ? items.properties : undefined;
    const property = properties && Object.hasOwn(properties, key) ? this.resolve(properties[key]).schema : undefined;
    return property && property.default !== undefined ? (property.default as JsonValue) : undefined;
  }

  /** Whether an object of this schema is owned and replaced as a whole. */
  atomicObject(object: FieldSchema): boolean {
    const schema = object.schema;
    if (!schema) return false;
    if (schema['x-kubernetes-map-type'] === 'atomic') return true;
    return object.definition !== undefined && ATOMIC_STRUCTS.has(object.definition);
  }
}

function shortName(definition: string): string {
  return definition.slice(definition.lastIndexOf('.') + 1);
}
