import { isJsonObject, type JsonObject, type JsonValue } from '../json.js';
import type { FieldSchema, SchemaResolver } from './apply-schema.js';
import { compareObjects, configFieldSet, overlaps, splitList } from './field-sets.js';
import { FieldSet, fieldElement } from './fields-v1.js';
import {
  type Conflict,
  conflictError,
  entrySet,
  type FieldManagerInfo,
  type ManagedEntry,
  sameIdentity,
  stripServerFields,
} from './managed-fields.js';

/**
 * Server-side apply, as structured-merge-diff's Updater.Apply does it: the applied configuration
 * is merged into the live object by the schema (lists by type, maps by key); the applier's
 * entry becomes exactly the configuration's fields; fields the applier owned before, no longer
 * applies, and nobody else owns are removed; a change to a field another manager owns is a
 * conflict unless forced, and forcing takes it from them.
 */

export const LAST_APPLIED_ANNOTATION = 'kubectl.kubernetes.io/last-applied-configuration';

/**
 * kubectl applies server-side as this manager by default; only its applies may take over fields
 * from client-side apply without a conflict (kube-apiserver's lastAppliedManager), and keep the
 * last-applied annotation in step (its lastAppliedUpdater).
 */
const KUBECTL_MANAGER = 'kubectl';

export interface ApplyInput {
  resolver: SchemaResolver;
  schema: FieldSchema;
  /** The stored object (without managedFields weight: they are read from `entries`), or undefined to create. */
  live: JsonObject | undefined;
  config: JsonObject;
  entries: ManagedEntry[];
  who: FieldManagerInfo;
  force: boolean;
  time: string;
  /** Top-level fields the write resets whatever is sent (a main-resource write keeps the stored status): never owned. */
  resetFields?: readonly string[];
}

export interface ApplyResult {
  object: JsonObject;
  entries: ManagedEntry[];
}

/** Applies `config`; throws the 409 of kube-apiserver when it conflicts and is not forced. */
export function applyConfiguration(input: ApplyInput): ApplyResult {
  const { resolver, schema, config, who } = input;
  const live = input.live ?? {};
  let configSet = configFieldSet(resolver, schema, config);
  if (who.subresource === 'status') configSet = only(configSet, 'status');
  for (const field of input.resetFields ?? []) configSet.children?.delete(fieldElement(field));
  let merged = mergeValue(resolver, schema, live, config) as JsonObject;

  const previous = input.entries.find((e) => sameIdentity(e, 'Apply', who));
  const others = input.entries.filter((e) => e !== previous);
  if (previous) {
    const lastSet = entrySet(previous);
    if (!lastSet.empty()) {
      const owned = configSet.clone();
      for (const entry of others) owned.addAll(entrySet(entry));
      const gone = namedFieldsAsMembers(lastSet).removeAll(namedFieldsAsMembers(owned));
      if (!gone.empty()) merged = removeFields(resolver, schema, merged, gone) as JsonObject;
    }
  }

  const { changed, removed } = compareObjects(resolver, schema, withoutBookkeeping(live), withoutBookkeeping(merged));
  stripServerFields(changed);
  stripServerFields(removed);
  const conflicts: Conflict[] = [];
  for (const entry of others) {
    for (const path of entrySet(entry).intersection(changed).paths()) conflicts.push({ entry, path });
  }
  if (conflicts.length && !input.force) {
    const remaining = who.manager === KUBECTL_MANAGER ? conflictsBeyondLastApplied(resolver, schema, input.live, conflicts) : conflicts;
    if (remaining.length) throw conflictError(remaining);
  }
  for (const entry of others) loseFields(entry, changed, removed);

  const applied: ManagedEntry = {
    manager: who.manager,
    operation: 'Apply',
    apiVersion: who.apiVersion,
    ...(who.subresource ? { subresource: who.subresource } : {}),
    set: stripServerFields(configSet),
  };
  const unchanged = changed.empty() && removed.empty() && previous !== undefined && sameSet(entrySet(previous), applied.set!);
  applied.time = unchanged && previous?.time ? previous.time : input.time;

  if (who.manager === KUBECTL_MANAGER && input.live) merged = keepLastAppliedInStep(merged, config);
  return { object: merged, entries: [...others, applied] };
}

function loseFields(entry: ManagedEntry, changed: FieldSet, removed: FieldSet): void {
  const set = entrySet(entry);
  if (!overlaps(set, changed) && !overlaps(set, removed)) return;
  set.removeAll(changed).removeAll(removed);
  delete entry.fieldsV1;
}

function sameSet(a: FieldSet, b: FieldSet): boolean {
  const left = a.paths().map((p) => p.join('\0'));
  const right = b.paths().map((p) => p.join('\0'));
  return left.length === right.length && left.every((p, i) => p === right[i]);
}

/** The part of `set` below one top-level field. */
function only(set: FieldSet, field: string): FieldSet {
  const out = new FieldSet();
  const child = set.child(fieldElement(field));
  if (child) out.descend(fieldElement(field)).addAll(child);
  return out;
}

/** The object without the metadata no manager owns and no comparison should walk. */
function withoutBookkeeping(obj: JsonObject): JsonObject {
  if (!isJsonObject(obj.metadata)) return obj;
  const { managedFields: _managed, resourceVersion: _version, ...metadata } = obj.metadata;
  return { ...obj, metadata };
}

/**
 * structured-merge-diff's EnsureNamedFieldsAreMembers, without a schema: a field with owned
 * fields below it counts as owned itself, so pruning takes a struct the applier no longer sets
 * at all, and keeps one anybody still sets something in.
 */
function namedFieldsAsMembers(set: FieldSet): FieldSet {
  const out = new FieldSet();
  out.member = set.member;
  if (set.children) {
    out.children = new Map();
    for (const [element, child] of set.children) {
      const copy = namedFieldsAsMembers(child);
      if (element.startsWith('f:') && child.children?.size) copy.member = true;
      out.children.set(element, copy);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The client-side apply upgrade

/**
 * kube-apiserver's lastAppliedManager: when kubectl applies server-side an object it applied
 * client-side before, a conflict over a field whose live value is still the one recorded in the
 * last-applied annotation is no conflict (kubectl set it; it is taking it over).
 */
function conflictsBeyondLastApplied(resolver: SchemaResolver, schema: FieldSchema, live: JsonObject | undefined, conflicts: Conflict[]): Conflict[] {
  const annotations = isJsonObject(live?.metadata) && isJsonObject(live.metadata.annotations) ? live.metadata.annotations : undefined;
  const text = annotations?.[LAST_APPLIED_ANNOTATION];
  if (typeof text !== 'string' || !text) return conflicts;
  let lastApplied: JsonValue;
  try {
    lastApplied = JSON.parse(text) as JsonValue;
  } catch {
    return conflicts;
  }
  if (!isJsonObject(lastApplied)) return conflicts;
  let allowed: FieldSet;
  try {
    allowed = configFieldSet(resolver, schema, lastApplied);
  } catch {
    return conflicts;
  }
  const { changed, removed } = compareObjects(resolver, schema, withoutBookkeeping(lastApplied), withoutBookkeeping(live!));
  allowed.removeAll(changed).removeAll(removed);
  return conflicts.filter((c) => !allowed.has(c.path));
}

/** kube-apiserver's lastAppliedUpdater: kubectl's server-side apply rewrites an existing last-applied annotation. */
function keepLastAppliedInStep(merged: JsonObject, config: JsonObject): JsonObject {
  const metadata = isJsonObject(merged.metadata) ? merged.metadata : undefined;
  const annotations = metadata && isJsonObject(metadata.annotations) ? metadata.annotations : undefined;
  if (typeof annotations?.[LAST_APPLIED_ANNOTATION] !== 'string' || !annotations[LAST_APPLIED_ANNOTATION]) return merged;
  const recorded = structuredClone(config);
  if (isJsonObject(recorded.metadata) && isJsonObject(recorded.metadata.annotations)) {
    delete recorded.metadata.annotations[LAST_APPLIED_ANNOTATION];
    if (Object.keys(recorded.metadata.annotations).length === 0) delete recorded.metadata.annotations;
  }
  return { ...merged, metadata: { ...metadata, annotations: { ...annotations, [LAST_APPLIED_ANNOTATION]: `${JSON.stringify(recorded)}\n` } } };
}

// ---------------------------------------------------------------------------------------------
// Merging and removing by the schema (never modifying the values given: the live object's
// parts are shared into the result, and a comparison with it must still see what it was)

export function mergeValue(resolver: SchemaResolver, schema: FieldSchema, live: JsonValue | undefined, config: JsonValue): JsonValue {
  if (Array.isArray(config)) {
    if (!Array.isArray(live)) return structuredClone(config);
    const right = splitList(resolver, schema, config, true, () => 'list');
    const left = right ? splitList(resolver, schema, live, false, () => 'list') : undefined;
    if (!right || !left) return structuredClone(config);
    return mergeLists(resolver, resolver.items(schema), live, left.elements, config, right.elements);
  }
  if (isJsonObject(config)) {
    if (!isJsonObject(live) || resolver.atomicObject(schema)) return withoutNulls(config);
    const out: JsonObject = { ...live };
    for (const key of Object.keys(config)) {
      const value = config[key];
      if (value === null) delete out[key];
      else out[key] = mergeValue(resolver, resolver.field(schema, key).child, Object.hasOwn(live, key) ? live[key] : undefined, value);
    }
    return out;
  }
  return config;
}

/** A copy without null fields (an applied null says "not set"; kube-apiserver stores none either). */
function withoutNulls(value: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [key, v] of Object.entries(value)) {
    if (v === null) continue;
    out[key] = isJsonObject(v) ? withoutNulls(v) : structuredClone(v);
  }
  return out;
}

/**
 * Two keyed lists merged in structured-merge-diff's order: items only the live list has stay
 * where they were, items both have follow the configuration's order, new items come where the
 * configuration puts them.
 */
function mergeLists(resolver: SchemaResolver, items: FieldSchema, lhs: JsonValue[], lEls: string[], rhs: JsonValue[], rEls: string[]): JsonValue[] {
  const lIndex = new Map(lEls.map((e, i) => [e, i]));
  const rIndex = new Map(rEls.map((e, i) => [e, i]));
  const sharedOrder = rEls.filter((e) => lIndex.has(e));
  let shared = 0;
  const merged = new Set<string>();
  const out: JsonValue[] = [];
  let l = 0;
  let r = 0;
  const mergeItem = (element: string, right: JsonValue): JsonValue => {
    const li = lIndex.get(element);
    return li === undefined ? structuredClone(right) : mergeValue(resolver, items, lhs[li], right);
  };
  while (l < lEls.length || r < rEls.length) {
    if (l < lEls.length && r < rEls.length) {
      const element = lEls[l];
      if (element === rEls[r]) {
        merged.add(element);
        out.push(mergeItem(element, rhs[r]));
        l++;
        r++;
        if (sharedOrder[shared] === element) shared++;
        continue;
      }
      if (rIndex.has(element) && shared < sharedOrder.length && sharedOrder[shared] !== element) {
        l++;
        continue;
      }
    }
    if (l < lEls.length) {
      const element = lEls[l];
      if (!rIndex.has(element)) {
        out.push(lhs[l]);
        l++;
        continue;
      }
      if (merged.has(element)) {
        l++;
        continue;
      }
    }
    if (r < rEls.length) {
      const element = rEls[r];
      merged.add(element);
      out.push(mergeItem(element, rhs[r]));
      r++;
      if (sharedOrder[shared] === element) shared++;
    }
  }
  return out;
}

/** `value` without the members of `remove` (each with everything below it); new containers where something went. */
export function removeFields(resolver: SchemaResolver, schema: FieldSchema, value: JsonValue, remove: FieldSet): JsonValue {
  if (!remove.children) return value;
  if (Array.isArray(value)) {
    const split = splitList(resolver, schema, value, false, () => 'list');
    if (!split) return value;
    const items = resolver.items(schema);
    const out: JsonValue[] = [];
    value.forEach((item, i) => {
      const node = remove.child(split.elements[i]);
      if (node?.member) return;
      out.push(node ? removeFields(resolver, items, item, node) : item);
    });
    return out;
  }
  if (isJsonObject(value)) {
    const out: JsonObject = {};
    for (const key of Object.keys(value)) {
      const node = remove.child(fieldElement(key));
      if (node?.member) continue;
      out[key] = node ? removeFields(resolver, resolver.field(schema, key).child, value[key], node) : value[key];
    }
    return out;
  }
  return value;
}
