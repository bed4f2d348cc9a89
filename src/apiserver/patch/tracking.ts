import type { ResourceDefinition } from '../definition.js';
import { isJsonObject, jsonEqual, type JsonObject } from '../json.js';
import { type KubeObject, kubeTime } from '../objects.js';
import type { FieldManagerOptions, WriteSubresource } from '../storage-types.js';
import { compareObjects } from './field-sets.js';
import { FieldSet, fieldElement } from './fields-v1.js';
import { type KindSchema, kindSchema } from './kind-schemas.js';
import { clientEntries, encodeEntries, type ManagedEntry, recordUpdate, storedEntries, touchOnly } from './managed-fields.js';

/**
 * managedFields on the ordinary writes (create, update, merge/JSON/strategic patch), as
 * kube-apiserver's field manager keeps them: the writer's Update entry gains the fields its write
 * added or changed, every other entry loses them and the removed ones. The store calls this on
 * the object it is about to write (after defaults, as kube-apiserver compares decoded, defaulted
 * objects). managedFields a client sends are honoured as kube-apiserver honours them: none, or
 * the ones it read, keep the stored entries; an empty list (or one empty entry) clears them
 * before this write is recorded; other entries replace them (a malformed one is a 422).
 */

/** The fields of an object a write's comparison walks: not the bookkeeping no one owns. */
function view(obj: KubeObject, only?: 'status' | 'spec', skipStatus = false, structs = true): JsonObject {
  // A built-in kind's spec and status are Go structs, there (empty) even when never written.
  if (only) return obj[only] === undefined ? (structs ? { [only]: {} } : {}) : { [only]: obj[only] as JsonObject };
  const { managedFields: _m, resourceVersion: _r, ...metadata } = obj.metadata;
  const out: JsonObject = { ...(obj as unknown as JsonObject), metadata: metadata as JsonObject };
  if (skipStatus) delete out.status;
  return out;
}

/** The entries a write starts from: the stored ones, unless the client sent others. */
function baseEntries(def: ResourceDefinition, name: string, stored: unknown, sent: unknown, subresource: string | undefined): ManagedEntry[] {
  // A subresource write may not set managedFields; one that sends back what it read changes nothing.
  if (subresource || sent === undefined || sent === null || jsonEqual(sent, stored)) return storedEntries(stored);
  const entries = clientEntries(sent, def.kind, name, def.group);
  if (entries === 'reset') return [];
  return entries.length ? entries : storedEntries(stored);
}

function setEntries(obj: KubeObject, entries: ManagedEntry[]): void {
  const encoded = encodeEntries(entries);
  if (encoded) obj.metadata.managedFields = encoded;
  else delete obj.metadata.managedFields;
}

/** Records a create (`sent`: the managedFields in the body). */
export function recordCreate(def: ResourceDefinition, obj: KubeObject, sent: unknown, fieldManager: FieldManagerOptions | undefined): void {
  if (fieldManager?.applied) return;
  if (!fieldManager) {
    delete obj.metadata.managedFields;
    return;
  }
  const base = sent === undefined || sent === null ? [] : baseEntries(def, obj.metadata.name ?? '', undefined, sent, undefined);
  const { resolver, schema } = kindSchema(def);
  const skipStatus = def.subresources.includes('status');
  const after = view(obj, undefined, skipStatus);
  const before: JsonObject = def.crd ? { metadata: {} } : zeroValue(resolver, schema, after, true);
  const { changed } = compareObjects(resolver, schema, before, after);
  setEntries(obj, recordUpdate(base, changed, new FieldSet(), whoOf(fieldManager), secondNow()));
}

/**
 * Records an update: `current` is the stored object, `next` the one about to be stored, `sent`
 * the managedFields the write carried (read before the store's rules replaced them).
 */
export function recordUpdateOf(
  def: ResourceDefinition,
  current: KubeObject,
  next: KubeObject,
  sent: unknown,
  fieldManager: FieldManagerOptions | undefined,
  subresource: WriteSubresource | undefined,
): void {
  const stored = current.metadata.managedFields;
  if (fieldManager?.applied) {
    if (sent === undefined) delete next.metadata.managedFields;
    else next.metadata.managedFields = sent as JsonObject[];
    return;
  }
  if (!fieldManager) {
    if (stored === undefined) delete next.metadata.managedFields;
    else next.metadata.managedFields = stored;
    return;
  }
  const only = subresource === 'status' ? 'status' : subresource === 'ephemeralcontainers' || subresource === 'finalize' ? 'spec' : undefined;
  const heartbeat = only === 'status' ? heartbeatEntries(current, next, fieldManager) : undefined;
  if (heartbeat) {
    if (heartbeat.length) next.metadata.managedFields = heartbeat as JsonObject[];
    else delete next.metadata.managedFields;
    return;
  }
  const { resolver, schema } = kindSchema(def);
  const skipStatus = !only && def.subresources.includes('status');
  const structs = !def.crd;
  const { changed, removed } = compareObjects(resolver, schema, view(current, only, skipStatus, structs), view(next, only, skipStatus, structs));
  const who = whoOf(fieldManager);
  const keepsStored = subresource !== undefined || fieldManager.subresource !== undefined || sent === undefined || sent === null || jsonEqual(sent, stored);
  const touched = keepsStored ? touchOnly(stored, changed, removed, who, secondNow()) : undefined;
  if (touched) {
    if (touched.length) next.metadata.managedFields = touched as JsonObject[];
    else delete next.metadata.managedFields;
    return;
  }
  const base = baseEntries(def, current.metadata.name ?? '', stored, sent, subresource ?? fieldManager.subresource);
  setEntries(next, recordUpdate(base, changed, removed, who, secondNow()));
}

/**
 * What kube-apiserver compares a new built-in object with: the Go zero value of its kind, in which
 * the structs that are not pointers are there (empty) and the lists Go always serialises are null,
 * so a create does not own those nodes themselves (no `".": {}` on spec, template, containers).
 * Go's types are not here; the schema's `required` fields, ObjectMeta and the few optional
 * value structs of the workload kinds stand for them. (An unstructured custom object's zero
 * value is empty: everything it has is new.)
 */
const VALUE_STRUCTS: ReadonlySet<string> = new Set(['ObjectMeta', 'PodSpec', 'JobSpec', 'DeploymentStrategy', 'DaemonSetUpdateStrategy', 'StatefulSetUpdateStrategy']);

function zeroValue(resolver: KindSchema['resolver'], schema: KindSchema['schema'], obj: JsonObject, root: boolean): JsonObject {
  const zero: JsonObject = {};
  const required = Array.isArray(schema.schema?.required) ? (schema.schema.required as unknown[]) : [];
  for (const [key, value] of Object.entries(obj)) {
    const { child, declared } = resolver.field(schema, key);
    if (!declared) continue;
    const always = required.includes(key) || (root && (key === 'spec' || key === 'status')) || (child.definition !== undefined && VALUE_STRUCTS.has(child.definition));
    if (!always) continue;
    if (isJsonObject(value)) zero[key] = zeroValue(resolver, child, value, false);
    else if (Array.isArray(value)) zero[key] = null;
  }
  return zero;
}

/**
 * A status write by a strategic merge patch whose fields its writer already owns, and no one else
 * does (a heartbeat): no comparison of the objects, the stored entries with the writer's time
 * moved (kept as they are when the status did not change). Undefined when that is not the case.
 */
function heartbeatEntries(current: KubeObject, next: KubeObject, fieldManager: FieldManagerOptions): unknown[] | undefined {
  const touched = fieldManager.patchFields instanceof FieldSet ? fieldManager.patchFields.child(fieldElement('status')) : undefined;
  const stored = current.metadata.managedFields;
  if (!touched || !Array.isArray(stored)) return undefined;
  if (jsonEqual(current.status, next.status)) return stored;
  const changed = new FieldSet();
  changed.descend(fieldElement('status')).addAll(touched);
  return touchOnly(stored, changed, new FieldSet(), whoOf(fieldManager), secondNow());
}

let lastSecond = -1;
let lastTime = '';

/** kubeTime() of now, made once a second (a busy server records many writes in each). */
function secondNow(): string {
  const second = Math.floor(Date.now() / 1000);
  if (second !== lastSecond) {
    lastSecond = second;
    lastTime = kubeTime(second * 1000);
  }
  return lastTime;
}

function whoOf(fieldManager: FieldManagerOptions): { manager: string; apiVersion: string; subresource?: string } {
  return { manager: fieldManager.manager, apiVersion: fieldManager.apiVersion, ...(fieldManager.subresource ? { subresource: fieldManager.subresource } : {}) };
}
