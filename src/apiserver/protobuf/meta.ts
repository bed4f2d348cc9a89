/**
 * Messages of k8s.io/apimachinery shared by every kind: meta/v1 ObjectMeta (with Time,
 * OwnerReference and string maps), LabelSelector, DeleteOptions, and util/intstr IntOrString.
 */

import { OBJECT_META_FIELDS } from '../objects.js';
import { ProtobufDecodeError, unsupportedField } from './errors.js';
import { inOrder } from './go-json.js';
import { bool, bytes, embedded, type Field, int32, int64, parseMessage, str } from './reader.js';

const MIN_TIME_SECONDS = -62135596800; // 0001-01-01T00:00:00Z
const MAX_TIME_SECONDS = 253402300799; // 9999-12-31T23:59:59Z

/** meta/v1 Time {1 seconds int64, 2 nanos int32}; JSON is RFC 3339 at second precision, or null when zero. */
function decodeTime(buf: Uint8Array, message: string): string | null {
  if (buf.length === 0) return null; // Go marshals the zero Time as an empty message
  let seconds = 0;
  for (const f of parseMessage(buf, message)) {
    if (f.field === 1) seconds = int64(f, message);
    else if (f.field === 2) int32(f, message); // nanos: JSON Time has second precision
  }
  if (seconds < MIN_TIME_SECONDS || seconds > MAX_TIME_SECONDS) {
    throw new ProtobufDecodeError(`${message} is out of range: ${seconds} seconds`);
  }
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * A map field: repeated entries {1 key, 2 value}; a missing key or value is "". The value is a
 * string, or a message that `value` reads as one (resource.Quantity).
 */
export function decodeStringMap(
  entries: Field[],
  message: string,
  value: (f: Field, message: string) => string = str,
): Record<string, string> {
  const map = new Map<string, string>();
  for (const entry of entries) {
    const m = `${message} entry`;
    let k = '';
    let v = '';
    for (const f of parseMessage(bytes(entry, message), m)) {
      if (f.field === 1) k = str(f, m);
      else if (f.field === 2) v = value(f, m);
    }
    map.set(k, v);
  }
  return Object.fromEntries(map);
}

function decodeOwnerReference(buf: Uint8Array): Record<string, unknown> {
  const m = 'OwnerReference';
  let apiVersion = '';
  let kind = '';
  let name = '';
  let uid = '';
  let controller: boolean | undefined;
  let blockOwnerDeletion: boolean | undefined;
  for (const f of parseMessage(buf, m)) {
    switch (f.field) {
      case 1: kind = str(f, m); break;
      case 3: name = str(f, m); break;
      case 4: uid = str(f, m); break;
      case 5: apiVersion = str(f, m); break;
      case 6: controller = bool(f, m); break;
      case 7: blockOwnerDeletion = bool(f, m); break;
      default: break; // no other fields are defined; ignore as Go would
    }
  }
  return {
    apiVersion,
    kind,
    name,
    uid,
    ...(controller !== undefined ? { controller } : {}),
    ...(blockOwnerDeletion !== undefined ? { blockOwnerDeletion } : {}),
  };
}

/**
 * meta/v1 ObjectMeta. Server-populated and obsolete fields Drover does not take from clients
 * (15 clusterName, 16 initializers, 17 managedFields) are skipped, as is anything newer.
 */
export function decodeObjectMeta(buf: Uint8Array | undefined): Record<string, unknown> {
  const meta: Record<string, unknown> = {};
  if (!buf) return meta;
  const m = 'ObjectMeta';
  const fields = parseMessage(buf, m);
  const strings: Record<number, string> = {
    1: 'name',
    2: 'generateName',
    3: 'namespace',
    4: 'selfLink',
    5: 'uid',
    6: 'resourceVersion',
  };
  const labels: Field[] = [];
  const annotations: Field[] = [];
  const ownerReferences: Record<string, unknown>[] = [];
  const finalizers: string[] = [];
  for (const f of fields) {
    const key = strings[f.field];
    if (key !== undefined) {
      const value = str(f, m);
      if (value) meta[key] = value;
      else delete meta[key];
      continue;
    }
    switch (f.field) {
      case 7: {
        const generation = int64(f, m);
        if (generation) meta.generation = generation;
        else delete meta.generation;
        break;
      }
      case 8:
      case 9:
        break; // timestamps are decoded below, merged across occurrences
      case 10: meta.deletionGracePeriodSeconds = int64(f, m); break;
      case 11: labels.push(f); break;
      case 12: annotations.push(f); break;
      case 13: ownerReferences.push(decodeOwnerReference(bytes(f, m))); break;
      case 14: finalizers.push(str(f, m)); break;
      default: break;
    }
  }
  const created = embedded(fields, 8, m);
  const creationTimestamp = created && decodeTime(created, 'ObjectMeta.creationTimestamp');
  if (creationTimestamp) meta.creationTimestamp = creationTimestamp;
  const deleting = embedded(fields, 9, m);
  const deletionTimestamp = deleting && decodeTime(deleting, 'ObjectMeta.deletionTimestamp');
  if (deletionTimestamp) meta.deletionTimestamp = deletionTimestamp;
  if (labels.length) {
    const map = decodeStringMap(labels, 'ObjectMeta.labels');
    if (Object.keys(map).length) meta.labels = map;
  }
  if (annotations.length) {
    const map = decodeStringMap(annotations, 'ObjectMeta.annotations');
    if (Object.keys(map).length) meta.annotations = map;
  }
  if (ownerReferences.length) meta.ownerReferences = ownerReferences;
  if (finalizers.length) meta.finalizers = finalizers;
  // The order JSON clients produce, which is the order ObjectMeta's fields are known in.
  return inOrder(meta, [...OBJECT_META_FIELDS]);
}

/**
 * A top-level object {1 metadata, 2 spec, 3 status} of a kind decoded strictly: a field numbered
 * above 3 is refused rather than dropped. Its fields, and its metadata decoded.
 */
export function decodeStrictObject(
  raw: Uint8Array,
  kind: string,
): { fields: Field[]; metadata: Record<string, unknown> } {
  const fields = parseMessage(raw, kind);
  for (const f of fields) if (f.field > 3) throw unsupportedField(kind, kind, f.field);
  return { fields, metadata: decodeObjectMeta(embedded(fields, 1, kind)) };
}

/** meta/v1 LabelSelector {1 matchLabels map, 2 matchExpressions [{1 key, 2 operator, 3 values}]}. */
export function decodeLabelSelector(buf: Uint8Array, kind: string): Record<string, unknown> {
  const m = 'LabelSelector';
  const matchLabels: Field[] = [];
  const matchExpressions: Record<string, unknown>[] = [];
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) matchLabels.push(f);
    else if (f.field === 2) matchExpressions.push(decodeLabelSelectorRequirement(bytes(f, m), kind));
    else throw unsupportedField(kind, m, f.field);
  }
  const selector: Record<string, unknown> = {};
  if (matchLabels.length) {
    const map = decodeStringMap(matchLabels, 'LabelSelector.matchLabels');
    if (Object.keys(map).length) selector.matchLabels = map;
  }
  if (matchExpressions.length) selector.matchExpressions = matchExpressions;
  return selector;
}

function decodeLabelSelectorRequirement(buf: Uint8Array, kind: string): Record<string, unknown> {
  const m = 'LabelSelectorRequirement';
  let key = '';
  let operator = '';
  const values: string[] = [];
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) key = str(f, m);
    else if (f.field === 2) operator = str(f, m);
    else if (f.field === 3) values.push(str(f, m));
    else throw unsupportedField(kind, m, f.field);
  }
  return { key, operator, ...(values.length ? { values } : {}) };
}

/** util/intstr IntOrString {1 type int64 (0 int, 1 string), 2 intVal int32, 3 strVal string}. */
export function decodeIntOrString(buf: Uint8Array, kind: string): number | string {
  const m = 'IntOrString';
  let type = 0;
  let intVal = 0;
  let strVal = '';
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) type = int64(f, m);
    else if (f.field === 2) intVal = int32(f, m);
    else if (f.field === 3) strVal = str(f, m);
    else throw unsupportedField(kind, m, f.field);
  }
  if (type === 0) return intVal;
  if (type === 1) return strVal;
  throw new ProtobufDecodeError(`IntOrString has unknown type ${type}`);
}

/**
 * DeleteOptions {1 gracePeriodSeconds, 2 preconditions {1 uid, 2 resourceVersion},
 * 3 orphanDependents, 4 propagationPolicy, 5 dryRun}: the body of kubectl's typed DELETEs (drain
 * without the eviction API), whose grace period matters for pods.
 */
export function decodeDeleteOptions(raw: Uint8Array): Record<string, unknown> {
  const kind = 'DeleteOptions';
  const out: Record<string, unknown> = { apiVersion: 'v1', kind };
  const dryRun: string[] = [];
  for (const f of parseMessage(raw, kind)) {
    if (f.field === 1) out.gracePeriodSeconds = int64(f, kind);
    else if (f.field === 2) {
      const preconditions: Record<string, string> = {};
      for (const p of parseMessage(bytes(f, kind), 'Preconditions')) {
        if (p.field === 1) preconditions.uid = str(p, 'Preconditions');
        else if (p.field === 2) preconditions.resourceVersion = str(p, 'Preconditions');
      }
      out.preconditions = preconditions;
    } else if (f.field === 3) out.orphanDependents = bool(f, kind);
    else if (f.field === 4) out.propagationPolicy = str(f, kind);
    else if (f.field === 5) dryRun.push(str(f, kind));
  }
  if (dryRun.length) out.dryRun = dryRun;
  return out;
}
