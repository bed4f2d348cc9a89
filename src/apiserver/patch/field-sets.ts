import { isJsonObject, jsonEqual, type JsonObject, type JsonValue } from '../json.js';
import type { FieldSchema, ListType, SchemaResolver } from './apply-schema.js';
import { FieldSet, fieldElement, keyElement, valueElement } from './fields-v1.js';
import { PatchError } from './merge.js';
import { childMeta, type PatchMeta } from './patch-meta.js';

/**
 * The field sets server-side apply computes from values, as structured-merge-diff does: the
 * fields an applied configuration sets (what its manager then owns), and the fields a write
 * changed between two versions of an object (what an Update's manager takes, and what every
 * other manager loses).
 */

/** A list with its type and each item's path element (undefined: the list cannot be split, see {@link splitList}). */
export interface SplitList {
  type: ListType;
  elements: string[];
}

/**
 * The path element of each item of a non-atomic list: `k:{…}` by its keys (a key the item omits
 * takes the schema's default), `v:…` by its value. Undefined when the list cannot be split
 * that way (an item without a key, or twice the same element): `strict` (an applied
 * configuration) makes that an error, as kube-apiserver refuses it; otherwise (a stored object)
 * the list is treated as atomic.
 */
export function splitList(resolver: SchemaResolver, schema: FieldSchema, list: JsonValue[], strict: boolean, where: () => string): SplitList | undefined {
  const type = resolver.listType(schema);
  if (type.type === 'atomic') return undefined;
  const elements: string[] = [];
  const seen = new Set<string>();
  for (const item of list) {
    let element: string | undefined;
    if (type.type === 'map' && type.keys.length) {
      if (isJsonObject(item) && type.keys.length === 1 && Object.hasOwn(item, type.keys[0]!)) {
        // One key, present (conditions by type, containers by name): no sorting to do.
        element = `k:{${JSON.stringify(type.keys[0])}:${JSON.stringify(item[type.keys[0]!])}}`;
      } else if (isJsonObject(item)) {
        const pairs: [string, JsonValue][] = [];
        for (const key of type.keys) {
          const value = Object.hasOwn(item, key) ? item[key] : resolver.keyDefault(schema, key);
          if (value === undefined) {
            if (strict) throw new PatchError(`${where()}: associative list with keys has an element that omits key field "${key}" (and doesn't have default value)`, 422);
            return undefined;
          }
          pairs.push([key, value]);
        }
        element = keyElement(pairs);
      } else if (strict) {
        throw new PatchError(`${where()}: expected an object in a list of type map, got ${JSON.stringify(item)}`, 422);
      } else {
        return undefined;
      }
    } else {
      element = valueElement(item);
    }
    if (seen.has(element)) {
      if (strict) throw new PatchError(`${where()}: duplicate entries for key ${element.slice(2)}`, 422);
      return undefined;
    }
    seen.add(element);
    elements.push(element);
  }
  return { type, elements };
}

const EMPTY_SET = new FieldSet();

/**
 * The fields an applied configuration sets (structured-merge-diff's ToFieldSet): every scalar,
 * every item of a set or map list, atomic lists and maps as one field, an empty object or a
 * null as a field, and a map's keys (not a struct's declared fields) as fields of their own.
 */
export function configFieldSet(resolver: SchemaResolver, schema: FieldSchema, config: JsonObject): FieldSet {
  const set = new FieldSet();
  walkObject(resolver, schema, config, set, '');
  return set;
}

function walkValue(resolver: SchemaResolver, schema: FieldSchema, value: JsonValue, node: FieldSet, where: string): void {
  if (Array.isArray(value)) {
    const split = splitList(resolver, schema, value, true, () => where || '.');
    if (!split) {
      node.member = true;
      return;
    }
    const items = resolver.items(schema);
    value.forEach((item, i) => {
      const child = node.descend(split.elements[i]);
      walkValue(resolver, items, item, child, `${where}[${i}]`);
      child.member = true;
    });
  } else if (isJsonObject(value)) {
    if (resolver.atomicObject(schema)) node.member = true;
    else walkObject(resolver, schema, value, node, where);
  } else {
    node.member = true;
  }
}

function walkObject(resolver: SchemaResolver, schema: FieldSchema, value: JsonObject, node: FieldSet, where: string): void {
  for (const key of Object.keys(value)) {
    const field = value[key];
    const { child: childSchema, declared } = resolver.field(schema, key);
    const child = node.descend(fieldElement(key));
    walkValue(resolver, childSchema, field, child, `${where}.${key}`);
    if (field === null || !declared || (isJsonObject(field) && Object.keys(field).length === 0)) child.member = true;
    if (child.empty()) node.children!.delete(fieldElement(key));
  }
}

/** What a write changed: fields added or modified, and fields removed. */
export interface Comparison {
  changed: FieldSet;
  removed: FieldSet;
}

/**
 * The fields that differ between `before` and `after` (structured-merge-diff's Compare): a leaf
 * (a scalar, an atomic list or map, or a list or map empty on both sides) that was added or
 * changed, or removed; and a list item or object that appeared or went, itself, with
 * everything below it.
 */
export function compareObjects(resolver: SchemaResolver, schema: FieldSchema, before: JsonValue | undefined, after: JsonValue | undefined): Comparison {
  const out: Comparison = { changed: new FieldSet(), removed: new FieldSet() };
  compareValue(resolver, schema, before, after, [], out, true);
  return out;
}

function isEmptyContainer(value: JsonValue | undefined): boolean {
  if (value === undefined || value === null) return true;
  if (Array.isArray(value)) return value.length === 0;
  if (typeof value !== 'object') return false;
  for (const _ in value) return false;
  return true;
}

/** null is an empty list or map, as structured-merge-diff reads it (Go's zero value of a list a kind always serialises, like a pod's containers, is null). */
function absent(value: JsonValue | undefined): boolean {
  return value === undefined || value === null;
}

/** Not a list or an object (or nothing at all). */
function isScalar(value: JsonValue | undefined): boolean {
  return typeof value !== 'object' || value === null;
}

/** A stored object's list that cannot be split is atomic, not an error: no place to name. */
const noWhere = (): string => '';

function compareValue(
  resolver: SchemaResolver,
  schema: FieldSchema,
  before: JsonValue | undefined,
  after: JsonValue | undefined,
  path: string[],
  out: Comparison,
  root = false,
): void {
  if (before === after) return;
  if (isScalar(before) && isScalar(after)) {
    // The common leaf: no schema to consult.
    if (root) return;
    if (before === undefined) out.changed.insert(path);
    else if (after === undefined) out.removed.insert(path);
    else out.changed.insert(path);
    return;
  }
  // Two containers alike (most of a status a heartbeat rewrites): nothing below them changed.
  if (before !== undefined && after !== undefined && jsonEqual(before, after)) return;
  const bothLists = (absent(before) || Array.isArray(before)) && (absent(after) || Array.isArray(after));
  const bothObjects = (absent(before) || isJsonObject(before)) && (absent(after) || isJsonObject(after));
  let leaf = !(bothLists || bothObjects) || (isEmptyContainer(before) && isEmptyContainer(after));
  let split: { before?: SplitList; after?: SplitList } | undefined;
  if (!leaf && bothLists) {
    const b = absent(before) ? undefined : splitList(resolver, schema, before as JsonValue[], false, noWhere);
    const a = absent(after) ? undefined : splitList(resolver, schema, after as JsonValue[], false, noWhere);
    if ((!absent(before) && !b) || (!absent(after) && !a)) leaf = true;
    else split = { ...(b ? { before: b } : {}), ...(a ? { after: a } : {}) };
  } else if (!leaf && bothObjects && resolver.atomicObject(schema)) {
    leaf = true;
  }
  if (leaf) {
    if (root) return;
    if (before === undefined) out.changed.insert(path);
    else if (after === undefined) out.removed.insert(path);
    else if (!jsonEqual(before, after)) out.changed.insert(path);
    return;
  }
  if (split) {
    const items = resolver.items(schema);
    const beforeItems = new Map<string, JsonValue>();
    split.before?.elements.forEach((element, i) => beforeItems.set(element, (before as JsonValue[])[i]));
    const afterElements = new Set(split.after?.elements ?? []);
    split.after?.elements.forEach((element, i) => {
      path.push(element);
      compareValue(resolver, items, beforeItems.get(element), (after as JsonValue[])[i], path, out);
      path.pop();
    });
    split.before?.elements.forEach((element, i) => {
      if (afterElements.has(element)) return;
      path.push(element);
      compareValue(resolver, items, (before as JsonValue[])[i], undefined, path, out);
      path.pop();
    });
  } else {
    const b = (before ?? undefined) as JsonObject | undefined;
    const a = (after ?? undefined) as JsonObject | undefined;
    if (a) {
      for (const key in a) {
        const next = a[key];
        const previous = b && Object.hasOwn(b, key) ? b[key] : undefined;
        if (next === undefined || next === previous) continue;
        path.push(fieldElement(key));
        // A scalar on both sides needs no schema: only containers are typed.
        const childSchema = isScalar(next) && isScalar(previous) ? schema : resolver.field(schema, key).child;
        compareValue(resolver, childSchema, previous, next, path, out);
        path.pop();
      }
    }
    if (b) {
      for (const key in b) {
        if (b[key] === undefined || (a && Object.hasOwn(a, key))) continue;
        path.push(fieldElement(key));
        compareValue(resolver, isScalar(b[key]) ? schema : resolver.field(schema, key).child, b[key], undefined, path, out);
        path.pop();
      }
    }
  }
  if (root) return;
  if (before === undefined) out.changed.insert(path);
  else if (after === undefined) out.removed.insert(path);
}

/** Whether the sets share a member, without building their intersection. */
export function overlaps(a: FieldSet, b: FieldSet): boolean {
  if (a.member && b.member) return true;
  if (!a.children || !b.children) return false;
  const [small, large] = a.children.size <= b.children.size ? [a.children, b.children] : [b.children, a.children];
  for (const [element, child] of small) {
    const other = large.get(element);
    if (other && overlaps(child, other)) return true;
  }
  return false;
}

/** Whether every member of `part` is in `whole`. */
export function contains(whole: FieldSet, part: FieldSet): boolean {
  if (part.member && !whole.member) return false;
  if (!part.children) return true;
  for (const [element, child] of part.children) {
    const mine = whole.child(element) ?? EMPTY_SET;
    if (!contains(mine, child)) return false;
  }
  return true;
}

/**
 * The fields a strategic merge patch can change, from the patch alone (an upper bound on what a
 * comparison would find), or undefined when it may remove anything (a null, a directive other
 * than `$setElementOrder`, a list it replaces, an item without its key): the caller then compares.
 * The hot path of a status heartbeat asks whether its writer already owns all of these.
 */
export function strategicPatchFields(resolver: SchemaResolver, schema: FieldSchema, meta: PatchMeta | undefined, patch: JsonValue): FieldSet | undefined {
  const set = new FieldSet();
  return touchObject(resolver, schema, meta, patch, set) ? set : undefined;
}

function touchObject(resolver: SchemaResolver, schema: FieldSchema, meta: PatchMeta | undefined, patch: JsonValue, node: FieldSet, itemKey?: string): boolean {
  if (!isJsonObject(patch)) return false;
  for (const key in patch) {
    // An item's key names it; it cannot change (a comparison never finds it changed).
    if (key === itemKey) continue;
    if (key.startsWith('$')) {
      if (key.startsWith('$setElementOrder/')) continue;
      return false;
    }
    const value = patch[key]!;
    if (value === null) return false;
    const child = node.descend(fieldElement(key));
    const { child: childSchema } = resolver.field(schema, key);
    const childPatchMeta = childMeta(meta, key);
    if (isScalar(value)) {
      child.member = true;
    } else if (Array.isArray(value)) {
      const type = resolver.listType(childSchema);
      // Only a list both patch kinds merge by the same single key: anything else is replaced.
      if (type.type !== 'map' || type.keys.length !== 1 || childPatchMeta?.strategy !== 'merge' || childPatchMeta.mergeKey !== type.keys[0]) return false;
      const split = splitList(resolver, childSchema, value, false, noWhere);
      if (!split) return false;
      const items = resolver.items(childSchema);
      for (let i = 0; i < value.length; i++) {
        if (!touchObject(resolver, items, childPatchMeta, value[i]!, child.descend(split.elements[i]!), type.keys[0])) return false;
      }
    } else if (resolver.atomicObject(childSchema) || Object.keys(value).length === 0) {
      child.member = true;
    } else if (!touchObject(resolver, childSchema, childPatchMeta, value, child)) {
      return false;
    }
  }
  return true;
}
