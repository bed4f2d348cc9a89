import { isJsonObject, type JsonObject, type JsonValue } from '../json.js';

/**
 * Field sets, as server-side apply tracks them per field manager, and their wire form FieldsV1
 * (`metadata.managedFields[].fieldsV1`), as structured-merge-diff (kube-apiserver's library)
 * writes it. A set is a tree of path elements; each node may itself be a member of the set (a
 * field the manager owns) and may have children (fields below it that are owned). The elements
 * are written as FieldsV1 keys:
 *
 *   `f:<name>`          a field of an object (or a key of a map)
 *   `k:{"name":"app"}`  an item of a list of type map, by its keys (sorted by key name)
 *   `v:<json value>`    an item of a list of type set, by its value
 *   `i:<n>`             an item by index (read, never written: every list Drover knows is atomic, set or map)
 *
 * In FieldsV1 a member is `{}`, a node with children is an object of them, and a node that is
 * both writes `".": {}` first. The element strings are kept canonical (keys sorted, JSON as
 * JSON.stringify writes it), so two sets compare by plain string keys.
 */
export class FieldSet {
  /** Whether the path that leads here is itself in the set. */
  member = false;
  children: Map<string, FieldSet> | undefined;

  child(element: string): FieldSet | undefined {
    return this.children?.get(element);
  }

  /** The child for `element`, made if missing. */
  descend(element: string): FieldSet {
    if (!this.children) this.children = new Map();
    let child = this.children.get(element);
    if (!child) {
      child = new FieldSet();
      this.children.set(element, child);
    }
    return child;
  }

  /** Inserts a path (its elements) as a member. */
  insert(path: readonly string[]): void {
    let node: FieldSet = this;
    for (const element of path) node = node.descend(element);
    node.member = true;
  }

  has(path: readonly string[]): boolean {
    let node: FieldSet | undefined = this;
    for (const element of path) {
      node = node.child(element);
      if (!node) return false;
    }
    return node.member;
  }

  empty(): boolean {
    if (this.member) return false;
    if (!this.children) return true;
    for (const child of this.children.values()) if (!child.empty()) return false;
    return true;
  }

  clone(): FieldSet {
    const copy = new FieldSet();
    copy.member = this.member;
    if (this.children) {
      copy.children = new Map();
      for (const [element, child] of this.children) copy.children.set(element, child.clone());
    }
    return copy;
  }

  /** Adds every member of `other` to this set (in place). */
  addAll(other: FieldSet): this {
    if (other.member) this.member = true;
    if (other.children) for (const [element, child] of other.children) this.descend(element).addAll(child);
    return this;
  }

  /** Removes every member of `other` from this set (in place); nodes left with nothing go. */
  removeAll(other: FieldSet): this {
    if (other.member) this.member = false;
    if (this.children && other.children) {
      for (const [element, child] of other.children) {
        const mine = this.children.get(element);
        if (!mine) continue;
        mine.removeAll(child);
        if (mine.empty()) this.children.delete(element);
      }
    }
    return this;
  }

  /** A new set of the members in both. */
  intersection(other: FieldSet): FieldSet {
    const out = new FieldSet();
    out.member = this.member && other.member;
    if (this.children && other.children) {
      for (const [element, child] of this.children) {
        const theirs = other.children.get(element);
        if (!theirs) continue;
        const both = child.intersection(theirs);
        if (!both.empty()) out.descend(element).addAll(both);
      }
    }
    return out;
  }

  /** Every member's path, depth first in FieldsV1 order. */
  paths(prefix: string[] = []): string[][] {
    const out: string[][] = [];
    if (this.member) out.push(prefix);
    for (const element of sortedElements(this.children)) out.push(...this.children!.get(element)!.paths([...prefix, element]));
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Path elements

export const fieldElement = (name: string): string => `f:${name}`;

/** A map-list item's element: its key fields sorted by name, as structured-merge-diff sorts them. */
export function keyElement(keys: ReadonlyArray<readonly [string, JsonValue]>): string {
  const sorted = [...keys].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `k:{${sorted.map(([name, value]) => `${JSON.stringify(name)}:${JSON.stringify(value)}`).join(',')}}`;
}

export const valueElement = (value: JsonValue): string => `v:${JSON.stringify(value)}`;

/** The element in canonical form, or undefined when it is not one (a malformed FieldsV1 key). */
export function canonicalElement(element: string): string | undefined {
  if (element.startsWith('f:')) return element;
  const body = element.slice(2);
  try {
    if (element.startsWith('k:')) {
      const keys: unknown = JSON.parse(body);
      if (!isJsonObject(keys)) return undefined;
      return keyElement(Object.entries(keys));
    }
    if (element.startsWith('v:')) return valueElement(JSON.parse(body) as JsonValue);
    if (element.startsWith('i:')) return /^(0|[1-9][0-9]*)$/.test(body) ? element : undefined;
  } catch {
    return undefined;
  }
  return undefined;
}

/**
 * A path as kube-apiserver prints it in conflicts: `.spec.replicas`,
 * `.spec.containers[name="nginx"].image`, `.metadata.finalizers[="a"]`, `[3]`.
 */
export function pathString(path: readonly string[]): string {
  return path.map(elementString).join('');
}

function elementString(element: string): string {
  const body = element.slice(2);
  switch (element.slice(0, 2)) {
    case 'f:':
      return `.${body}`;
    case 'k:': {
      const keys = JSON.parse(body) as JsonObject;
      return `[${Object.entries(keys).map(([name, value]) => `${name}=${valueString(value)}`).join(',')}]`;
    }
    case 'v:':
      return `[=${valueString(JSON.parse(body) as JsonValue)}]`;
    default:
      return `[${body}]`;
  }
}

/** Go's `%v` of a value, strings quoted (`%q`), as structured-merge-diff's value.ToString. */
function valueString(value: JsonValue): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value !== 'object') return String(value);
  if (Array.isArray(value)) return `[${value.map(valueString).join(',')}]`;
  return `{${Object.entries(value).map(([k, v]) => `${k}=${valueString(v)}`).join(',')}}`;
}

// ---------------------------------------------------------------------------------------------
// Ordering: structured-merge-diff writes fields, then keyed items, then values, then indexes,
// each sorted within its kind, and kubectl shows them in that order.

const KIND_RANK: Readonly<Record<string, number>> = { 'f:': 0, 'k:': 1, 'v:': 2, 'i:': 3 };

function compareElements(a: string, b: string): number {
  const rank = KIND_RANK[a.slice(0, 2)] - KIND_RANK[b.slice(0, 2)];
  if (rank !== 0) return rank;
  switch (a.slice(0, 2)) {
    case 'k:': {
      const left = Object.entries(JSON.parse(a.slice(2)) as JsonObject);
      const right = Object.entries(JSON.parse(b.slice(2)) as JsonObject);
      if (left.length !== right.length) return left.length - right.length;
      for (let i = 0; i < left.length; i++) {
        if (left[i][0] !== right[i][0]) return left[i][0] < right[i][0] ? -1 : 1;
        const byValue = compareValues(left[i][1], right[i][1]);
        if (byValue !== 0) return byValue;
      }
      return 0;
    }
    case 'v:':
      return compareValues(JSON.parse(a.slice(2)) as JsonValue, JSON.parse(b.slice(2)) as JsonValue);
    case 'i:':
      return Number(a.slice(2)) - Number(b.slice(2));
    default:
      return a < b ? -1 : a > b ? 1 : 0;
  }
}

function compareValues(a: JsonValue, b: JsonValue): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'string' && typeof b === 'string') return a < b ? -1 : a > b ? 1 : 0;
  const left = JSON.stringify(a);
  const right = JSON.stringify(b);
  return left < right ? -1 : left > right ? 1 : 0;
}

function sortedElements(children: Map<string, FieldSet> | undefined): string[] {
  if (!children) return [];
  return [...children.keys()].sort(compareElements);
}

// ---------------------------------------------------------------------------------------------
// FieldsV1

/** The FieldsV1 object of a set (members with nothing below them are `{}`). */
export function encodeFieldsV1(set: FieldSet): JsonObject {
  return encodeNode(set, false);
}

function encodeNode(set: FieldSet, includeSelf: boolean): JsonObject {
  const out: JsonObject = {};
  if (includeSelf && set.member && set.children?.size) out['.'] = {};
  for (const element of sortedElements(set.children)) {
    const child = set.children!.get(element)!;
    if (child.empty()) continue;
    out[element] = encodeNode(child, true);
  }
  return out;
}

/** Thrown for a FieldsV1 that is not one; the message says where. */
export class FieldsV1Error extends Error {
  override readonly name = 'FieldsV1Error';
}

/**
 * The set a FieldsV1 object describes. Throws {@link FieldsV1Error} for anything malformed.
 * `trusted`: written by this server, so already canonical (no key is parsed again).
 */
export function decodeFieldsV1(value: unknown, trusted = false): FieldSet {
  if (!isJsonObject(value)) throw new FieldsV1Error('fieldsV1 must be an object');
  const set = new FieldSet();
  if (trusted) decodeTrusted(set, value);
  else decodeInto(set, value, '', true);
  return set;
}

function decodeTrusted(set: FieldSet, value: JsonObject): void {
  let empty = true;
  for (const key in value) {
    empty = false;
    if (key === '.') set.member = true;
    else decodeTrusted(set.descend(key), value[key] as JsonObject);
  }
  if (empty) set.member = true;
}

// ---------------------------------------------------------------------------------------------
// Questions asked of a stored FieldsV1 without decoding it (the hot path: a heartbeat's write
// touches fields its writer already owns, and no other entry's).

/** Whether the stored (canonical) FieldsV1 `raw` owns any member of `set`. */
export function rawOverlaps(raw: JsonObject, set: FieldSet, root = true): boolean {
  if (set.member && !root && rawMember(raw)) return true;
  if (!set.children) return false;
  for (const [element, child] of set.children) {
    const below = raw[element];
    if (isJsonObject(below) && rawOverlaps(below, child, false)) return true;
  }
  return false;
}

/** Whether the stored FieldsV1 `raw` owns every member of `set`. */
export function rawContains(raw: JsonObject | undefined, set: FieldSet, root = true): boolean {
  if (set.member && !root && (raw === undefined || !rawMember(raw))) return false;
  if (!set.children) return true;
  for (const [element, child] of set.children) {
    const below = raw?.[element];
    if (!rawContains(isJsonObject(below) ? below : undefined, child, false)) return false;
  }
  return true;
}

function rawMember(raw: JsonObject): boolean {
  for (const key in raw) return key === '.' || Object.hasOwn(raw, '.');
  return true;
}

function decodeInto(set: FieldSet, value: JsonObject, where: string, root: boolean): void {
  const keys = Object.keys(value);
  // A node with nothing below it is owned itself; `{".": {}}` and `{}` say the same.
  if (!root && keys.length === 0) set.member = true;
  for (const key of keys) {
    const child = value[key];
    if (!isJsonObject(child)) throw new FieldsV1Error(`fieldsV1${where}: the value of "${key}" must be an object`);
    if (key === '.') {
      if (root) throw new FieldsV1Error('fieldsV1: "." is not allowed at the top level');
      set.member = true;
      continue;
    }
    const element = canonicalElement(key);
    if (element === undefined) throw new FieldsV1Error(`fieldsV1${where}: "${key}" is not a path element (f:, k:, v: or i:)`);
    decodeInto(set.descend(element), child, `${where}.${key}`, false);
  }
}
