/**
 * Strategic merge patch (`application/strategic-merge-patch+json`), the patch kubectl sends for
 * built-in kinds. It is a JSON merge patch that knows, from {@link PatchMeta}, which lists to
 * merge element by element instead of replacing, and that understands these directives:
 *
 * - `$patch`: `replace` (in a map: the map becomes the patch; as a list element: the list
 *   becomes the other patch elements), `delete` (in a map: remove the map; as an element of a
 *   keyed list: remove the live element with that key), `merge` (the default);
 * - `$retainKeys: [...]`: drop the map's keys that are not listed;
 * - `$setElementOrder/<list>: [...]`: order of the merged list;
 * - `$deleteFromPrimitiveList/<list>: [...]`: values to remove from a list of primitives.
 *
 * Directives never reach the result. Everything works on private copies, mutating them in place.
 */
import { cloneJson, isJsonObject, type JsonObject, type JsonPrimitive, type JsonValue } from '../json.js';
import { PatchError, getOwn, setOwn } from './merge.js';
import { childMeta, type PatchMeta } from './patch-meta.js';

const PATCH = '$patch';
const RETAIN_KEYS = '$retainKeys';
const SET_ELEMENT_ORDER = '$setElementOrder/';
const DELETE_FROM_PRIMITIVE_LIST = '$deleteFromPrimitiveList/';

/**
 * Applies a strategic merge patch to `original`, which is described by `meta` (see
 * `patchMetaForKind`). Neither argument is modified, and the result shares no structure with
 * them.
 */
export function strategicMergePatch(
  original: JsonObject,
  patch: JsonValue,
  meta: PatchMeta,
  consumeOriginal = false,
): JsonObject {
  if (!isJsonObject(patch)) {
    throw new PatchError('a strategic merge patch must be a JSON object', 400);
  }
  const result = mergeMap(consumeOriginal ? original : cloneJson(original), cloneJson(patch), meta, '');
  if (result === undefined) {
    throw new PatchError('$patch: delete cannot delete the whole object', 422);
  }
  return result;
}

/** Merges `patch` into `original`; `undefined` means the map is deleted. */
function mergeMap(original: JsonObject, patch: JsonObject, meta: PatchMeta | undefined, path: string): JsonObject | undefined {
  const directive = getOwn(patch, PATCH);
  if (directive !== undefined) {
    delete patch[PATCH];
    switch (directive) {
      case 'replace':
        // Merging onto nothing rather than taking the patch verbatim strips nulls and directives.
        return mergeMap({}, patch, meta, path);
      case 'delete':
        return undefined;
      case 'merge':
        break;
      default:
        throw new PatchError(`unknown ${PATCH} directive ${JSON.stringify(directive)} at ${describe(path)}`, 400);
    }
  }

  retainKeys(original, patch, path);

  // Directives first, so a deletion applies to the live list before the patch's list merges in,
  // whatever the key order of the patch.
  for (const [key, value] of Object.entries(patch)) {
    if (!key.startsWith('$') || key === RETAIN_KEYS) continue;
    if (key.startsWith(DELETE_FROM_PRIMITIVE_LIST)) {
      deleteFromPrimitiveList(original, directiveField(key, DELETE_FROM_PRIMITIVE_LIST, path), value, path);
    } else if (!key.startsWith(SET_ELEMENT_ORDER)) {
      throw new PatchError(`unknown patch directive ${JSON.stringify(key)} at ${describe(path)}`, 400);
    }
  }

  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith('$')) continue;
    if (value === null) {
      delete original[key];
      continue;
    }
    const merged = mergeValue(getOwn(original, key), value, childMeta(meta, key), join(path, key));
    if (merged === undefined) {
      delete original[key];
    } else {
      setOwn(original, key, merged);
    }
  }

  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith(SET_ELEMENT_ORDER)) {
      const field = directiveField(key, SET_ELEMENT_ORDER, path);
      setElementOrder(original, field, value, getOwn(patch, field), childMeta(meta, field), join(path, field));
    }
  }
  return original;
}

/** The merge of a non-null patch value into the live value, `undefined` meaning "delete". */
function mergeValue(
  original: JsonValue | undefined,
  patch: JsonValue,
  meta: PatchMeta | undefined,
  path: string,
): JsonValue | undefined {
  if (isJsonObject(patch)) {
    const base = isJsonObject(original) && meta?.strategy !== 'replace' ? original : {};
    return mergeMap(base, patch, meta, path);
  }
  if (Array.isArray(patch)) {
    return mergeList(Array.isArray(original) ? original : [], patch, meta, path);
  }
  return patch;
}

function mergeList(original: JsonValue[], patch: JsonValue[], meta: PatchMeta | undefined, path: string): JsonValue[] {
  const elements = patch.filter((element) => !isListReplaceDirective(element));
  if (meta?.strategy !== 'merge' || elements.length < patch.length) {
    return freshElements(elements, meta, path);
  }
  if (elements.some(Array.isArray)) {
    throw new PatchError(`${describe(path)}: lists of lists cannot be merged`, 422);
  }
  return meta.mergeKey === undefined
    ? unionPrimitives(original, elements, path)
    : mergeByKey(original, elements, meta.mergeKey, meta, path);
}

function isListReplaceDirective(element: JsonValue): boolean {
  return isJsonObject(element) && getOwn(element, PATCH) === 'replace';
}

/** The elements of a list that replaces the live one, with their nulls and directives resolved. */
function freshElements(elements: JsonValue[], meta: PatchMeta | undefined, path: string): JsonValue[] {
  const result: JsonValue[] = [];
  elements.forEach((element, index) => {
    // An element's fields are described by the list's children; a nested list has no metadata.
    const elementMeta = isJsonObject(element) ? meta : undefined;
    const fresh = element === null ? null : mergeValue(undefined, element, elementMeta, `${path}[${index}]`);
    if (fresh !== undefined) result.push(fresh);
  });
  return result;
}

function unionPrimitives(original: JsonValue[], patch: JsonValue[], path: string): JsonValue[] {
  const result = [...original];
  for (const value of patch) {
    if (!isPrimitive(value)) {
      throw new PatchError(`${describe(path)} is a list of primitives, but the patch has ${JSON.stringify(value)}`, 400);
    }
    if (!result.includes(value)) result.push(value);
  }
  return result;
}

function mergeByKey(original: JsonValue[], patch: JsonValue[], mergeKey: string, meta: PatchMeta, path: string): JsonValue[] {
  let result = [...original];
  for (const element of patch) {
    if (!isJsonObject(element)) {
      throw new PatchError(`${describe(path)} is a list of objects merged by ${mergeKey}, but the patch has ${JSON.stringify(element)}`, 400);
    }
    const key = getOwn(element, mergeKey);
    if (key === undefined || key === null) {
      throw new PatchError(`an element of ${describe(path)} in the patch lacks its merge key ${JSON.stringify(mergeKey)}`, 400);
    }
    const matches = (live: JsonValue): live is JsonObject => isJsonObject(live) && jsonEqual(getOwn(live, mergeKey), key);
    const elementPath = `${path}[${mergeKey}=${JSON.stringify(key)}]`;
    if (getOwn(element, PATCH) === 'delete') {
      result = result.filter((live) => !matches(live));
      continue;
    }
    const index = result.findIndex(matches);
    const live = index === -1 ? {} : (result[index] as JsonObject);
    const merged = mergeMap(live, element, meta, elementPath);
    if (index === -1) {
      if (merged !== undefined) result.push(merged);
    } else if (merged === undefined) {
      result.splice(index, 1);
    } else {
      result[index] = merged;
    }
  }
  return result;
}

function retainKeys(original: JsonObject, patch: JsonObject, path: string): void {
  const retain = getOwn(patch, RETAIN_KEYS);
  if (retain === undefined) return;
  if (!Array.isArray(retain) || !retain.every((key) => typeof key === 'string')) {
    throw new PatchError(`${RETAIN_KEYS} at ${describe(path)} must be a list of field names`, 400);
  }
  const keep = new Set<string>(retain);
  for (const [key, value] of Object.entries(patch)) {
    // A field the patch sets but the directive drops would be a contradiction.
    if (!key.startsWith('$') && value !== null && !keep.has(key)) {
      throw new PatchError(`${RETAIN_KEYS} at ${describe(path)} does not list ${JSON.stringify(key)}, which the patch sets`, 400);
    }
  }
  for (const key of Object.keys(original)) {
    if (!keep.has(key)) delete original[key];
  }
}

function deleteFromPrimitiveList(original: JsonObject, field: string, values: JsonValue, path: string): void {
  const directive = `${DELETE_FROM_PRIMITIVE_LIST}${field}`;
  if (!Array.isArray(values) || !values.every(isPrimitive)) {
    throw new PatchError(`${directive} at ${describe(path)} must be a list of primitive values`, 400);
  }
  const live = getOwn(original, field);
  if (live === undefined) return;
  if (!Array.isArray(live)) {
    throw new PatchError(`${directive}: ${describe(join(path, field))} is not a list`, 400);
  }
  setOwn(
    original,
    field,
    live.filter((value) => !values.includes(value as JsonPrimitive)),
  );
}

/**
 * Puts the elements named by `order` first, in that order, and keeps the rest after them in
 * their merged order. `patchList` is the patch's own list for the field: every element it adds
 * or updates must be named, as kubectl always does.
 */
function setElementOrder(
  original: JsonObject,
  field: string,
  order: JsonValue,
  patchList: JsonValue | undefined,
  meta: PatchMeta | undefined,
  path: string,
): void {
  const directive = `${SET_ELEMENT_ORDER}${field}`;
  if (!Array.isArray(order)) {
    throw new PatchError(`${directive} must be a list`, 400);
  }
  if (meta?.strategy !== 'merge') {
    throw new PatchError(`${directive}: ${describe(path)} is not a list that merges`, 400);
  }
  const identity = elementIdentity(meta.mergeKey);
  const orderKeys = order.map((element) => {
    const key = identity(element);
    if (key === undefined) {
      throw new PatchError(
        `${directive}: ${JSON.stringify(element)} does not name an element ${meta.mergeKey === undefined ? 'as a primitive value' : `by ${meta.mergeKey}`}`,
        400,
      );
    }
    return key;
  });
  if (Array.isArray(patchList)) {
    for (const element of patchList) {
      if (isListReplaceDirective(element) || (isJsonObject(element) && getOwn(element, PATCH) === 'delete')) continue;
      const key = identity(element);
      if (key !== undefined && !orderKeys.some((orderKey) => jsonEqual(orderKey, key))) {
        throw new PatchError(`${directive} does not list ${JSON.stringify(element)}, which the patch sets`, 400);
      }
    }
  }

  const live = getOwn(original, field);
  if (live === undefined) return;
  if (!Array.isArray(live)) {
    throw new PatchError(`${directive}: ${describe(path)} is not a list`, 400);
  }
  const placed = new Set<number>();
  const ordered: JsonValue[] = [];
  for (const key of orderKeys) {
    live.forEach((element, index) => {
      if (!placed.has(index) && jsonEqual(identity(element), key)) {
        placed.add(index);
        ordered.push(element);
      }
    });
  }
  setOwn(original, field, [...ordered, ...live.filter((_, index) => !placed.has(index))]);
}

/** What identifies a list element: its merge key, or the value itself in a primitive list. */
function elementIdentity(mergeKey: string | undefined): (element: JsonValue) => JsonValue | undefined {
  if (mergeKey === undefined) {
    return (element) => (isPrimitive(element) ? element : undefined);
  }
  return (element) => {
    const key = isJsonObject(element) ? getOwn(element, mergeKey) : undefined;
    return key === null ? undefined : key;
  };
}

function directiveField(key: string, prefix: string, path: string): string {
  const field = key.slice(prefix.length);
  if (field === '') {
    throw new PatchError(`patch directive ${JSON.stringify(key)} at ${describe(path)} names no field`, 400);
  }
  return field;
}

function isPrimitive(value: JsonValue): value is JsonPrimitive {
  return value === null || typeof value !== 'object';
}

function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((value, i) => jsonEqual(value, b[i]));
  }
  if (isJsonObject(a) && isJsonObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((key) => jsonEqual(a[key], getOwn(b, key)));
  }
  return false;
}

function join(path: string, field: string): string {
  return path === '' ? field : `${path}.${field}`;
}

function describe(path: string): string {
  return path === '' ? 'the top level' : path;
}
