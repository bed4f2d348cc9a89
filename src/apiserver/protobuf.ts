/**
 * A small decoder for Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
 *
 * kubectl's generator commands (`kubectl create namespace`, `create pdb`, and `create deployment`
 * in kubectl 1.32; 1.20 sends the deployment as JSON) send their POST body as protobuf. Drover
 * stores JSON, so this decodes the envelope and the few kinds those commands create (plus Pod,
 * which shares the PodSpec) into the JSON shape the JSON API accepts. Everything else is refused
 * with a message telling the user to send JSON or YAML.
 *
 * Wire format: the 4 magic bytes `k8s\0`, then a `runtime.Unknown` message
 * (k8s.io/apimachinery/pkg/runtime/generated.proto):
 *   1 typeMeta { 1 apiVersion, 2 kind }, 2 raw (the object's own message), 3 contentEncoding,
 *   4 contentType.
 * Go's gogo-protobuf writes every non-pointer field, so empty strings and zero integers are on the
 * wire; they are dropped here where Go's JSON encoding (`omitempty`) would drop them.
 */

import { ApiError } from './errors.js';
import { OBJECT_META_FIELDS } from './objects.js';

/** A malformed protobuf body (bad magic, truncated varint or length, wrong wire type): 400. */
export class ProtobufDecodeError extends ApiError {
  override name = 'ProtobufDecodeError';
  constructor(detail: string) {
    super(400, 'BadRequest', `error decoding protobuf request body: ${detail}`);
  }
}

/** A well-formed protobuf body that Drover cannot decode (another kind, an unknown field): 415. */
export class ProtobufUnsupportedError extends ApiError {
  override name = 'ProtobufUnsupportedError';
  constructor(message: string) {
    super(415, 'UnsupportedMediaType', message);
  }
}

export interface DecodedProtobuf {
  apiVersion: string;
  kind: string;
  /** The object in its JSON shape, apiVersion and kind included. */
  object: Record<string, unknown>;
}

const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]); // "k8s\0"

const SUPPORTED = 'v1 Namespace, v1 Pod, apps/v1 Deployment and policy/v1 PodDisruptionBudget';

/** kubectl's generator subcommand for a kind, where it has one. */
const GENERATORS = new Map<string, string>(Object.entries({
  Namespace: 'namespace',
  PodDisruptionBudget: 'pdb',
  ConfigMap: 'configmap',
  Secret: 'secret generic',
  ServiceAccount: 'serviceaccount',
  Deployment: 'deployment',
  Job: 'job',
  CronJob: 'cronjob',
  Service: 'service clusterip',
  Ingress: 'ingress',
  Role: 'role',
  RoleBinding: 'rolebinding',
  ClusterRole: 'clusterrole',
  ClusterRoleBinding: 'clusterrolebinding',
  ResourceQuota: 'quota',
  PriorityClass: 'priorityclass',
}));

function jsonHint(kind: string): string {
  const generator = GENERATORS.get(kind);
  return generator
    ? `send JSON or YAML instead, e.g. kubectl create ${generator} ... --dry-run=client -o yaml | kubectl apply -f -`
    : 'send JSON or YAML instead, e.g. write the object to a YAML file and kubectl apply -f it';
}

function unsupportedField(kind: string, message: string, field: number): ProtobufUnsupportedError {
  return new ProtobufUnsupportedError(
    `Drover cannot decode field ${field} of ${message} in a protobuf request body; ${jsonHint(kind)}`,
  );
}

// ---------------------------------------------------------------------------------------------
// Wire format

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_BYTES = 2;
const WIRE_FIXED32 = 5;

interface Field {
  field: number;
  wire: number;
  /** Varints as bigint (unsigned 64-bit); length-delimited and fixed-width values as bytes. */
  value: bigint | Uint8Array;
}

/** Split one message into its fields, in wire order. */
function parseMessage(buf: Uint8Array, message: string): Field[] {
  const fields: Field[] = [];
  let pos = 0;

  const varint = (what: string): bigint => {
    let result = 0n;
    for (let i = 0; i < 10; i++) {
      if (pos >= buf.length) throw new ProtobufDecodeError(`truncated varint (${what}) in ${message}`);
      const byte = buf[pos++]!;
      result |= BigInt(byte & 0x7f) << BigInt(7 * i);
      if ((byte & 0x80) === 0) return BigInt.asUintN(64, result);
    }
    throw new ProtobufDecodeError(`varint longer than 10 bytes (${what}) in ${message}`);
  };
  const take = (length: number, what: string): Uint8Array => {
    if (length > buf.length - pos) {
      throw new ProtobufDecodeError(
        `truncated ${what} in ${message}: ${length} bytes declared, ${buf.length - pos} left`,
      );
    }
    const bytes = buf.subarray(pos, pos + length);
    pos += length;
    return bytes;
  };

  while (pos < buf.length) {
    const tag = varint('field tag');
    const field = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    if (field === 0 || tag >> 3n > 0x1fffffffn) {
      throw new ProtobufDecodeError(`invalid field number ${tag >> 3n} in ${message}`);
    }
    switch (wire) {
      case WIRE_VARINT:
        fields.push({ field, wire, value: varint(`field ${field}`) });
        break;
      case WIRE_FIXED64:
        fields.push({ field, wire, value: take(8, `fixed64 field ${field}`) });
        break;
      case WIRE_BYTES: {
        const length = varint(`length of field ${field}`);
        if (length > BigInt(buf.length - pos)) {
          throw new ProtobufDecodeError(
            `truncated field ${field} in ${message}: ${length} bytes declared, ${buf.length - pos} left`,
          );
        }
        fields.push({ field, wire, value: take(Number(length), `field ${field}`) });
        break;
      }
      case WIRE_FIXED32:
        fields.push({ field, wire, value: take(4, `fixed32 field ${field}`) });
        break;
      default:
        throw new ProtobufDecodeError(`unsupported wire type ${wire} for field ${field} in ${message}`);
    }
  }
  return fields;
}

function expectWire(f: Field, wire: number, message: string): void {
  if (f.wire !== wire) {
    throw new ProtobufDecodeError(`field ${f.field} of ${message} has wire type ${f.wire}, expected ${wire}`);
  }
}

const utf8 = new TextDecoder('utf-8');

function str(f: Field, message: string): string {
  expectWire(f, WIRE_BYTES, message);
  return utf8.decode(f.value as Uint8Array);
}

function bytes(f: Field, message: string): Uint8Array {
  expectWire(f, WIRE_BYTES, message);
  return f.value as Uint8Array;
}

function toSafeNumber(value: bigint, f: Field, message: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new ProtobufDecodeError(`field ${f.field} of ${message} is out of range: ${value}`);
  }
  return Number(value);
}

function int64(f: Field, message: string): number {
  expectWire(f, WIRE_VARINT, message);
  return toSafeNumber(BigInt.asIntN(64, f.value as bigint), f, message);
}

function int32(f: Field, message: string): number {
  expectWire(f, WIRE_VARINT, message);
  return Number(BigInt.asIntN(32, f.value as bigint));
}

function bool(f: Field, message: string): boolean {
  expectWire(f, WIRE_VARINT, message);
  return (f.value as bigint) !== 0n;
}

/**
 * The fields of a singular embedded message, or undefined when absent. A message field that
 * occurs more than once is merged, as protobuf specifies, by decoding the concatenation.
 */
function embedded(fields: Field[], number: number, message: string): Uint8Array | undefined {
  const parts = fields.filter((f) => f.field === number).map((f) => bytes(f, message));
  if (parts.length === 0) return undefined;
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------
// k8s.io/apimachinery/pkg/apis/meta/v1

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

/** map<string,string>: repeated entries {1 key, 2 value}; a missing key or value is "". */
function decodeStringMap(entries: Field[], message: string): Record<string, string> {
  const map = new Map<string, string>();
  for (const entry of entries) {
    let key = '';
    let value = '';
    for (const f of parseMessage(bytes(entry, message), `${message} entry`)) {
      if (f.field === 1) key = str(f, `${message} entry`);
      else if (f.field === 2) value = str(f, `${message} entry`);
    }
    map.set(key, value);
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
function decodeObjectMeta(buf: Uint8Array | undefined): Record<string, unknown> {
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
  return orderKeys(meta, [...OBJECT_META_FIELDS]);
}

function orderKeys(obj: Record<string, unknown>, order: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of order) if (key in obj) out[key] = obj[key];
  return out;
}

/** meta/v1 LabelSelector {1 matchLabels map, 2 matchExpressions [{1 key, 2 operator, 3 values}]}. */
function decodeLabelSelector(buf: Uint8Array, kind: string): Record<string, unknown> {
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
function decodeIntOrString(buf: Uint8Array, kind: string): number | string {
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

// ---------------------------------------------------------------------------------------------
// Kinds

/** core/v1 Namespace {1 metadata, 2 spec {1 finalizers}, 3 status {1 phase, 2 conditions}}. */
function decodeNamespace(raw: Uint8Array): Record<string, unknown> {
  const kind = 'Namespace';
  const fields = parseMessage(raw, kind);
  for (const f of fields) if (f.field > 3) throw unsupportedField(kind, kind, f.field);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));

  const spec: Record<string, unknown> = {};
  const specBytes = embedded(fields, 2, kind);
  if (specBytes) {
    const finalizers: string[] = [];
    for (const f of parseMessage(specBytes, 'NamespaceSpec')) {
      if (f.field === 1) finalizers.push(str(f, 'NamespaceSpec'));
      else throw unsupportedField(kind, 'NamespaceSpec', f.field);
    }
    if (finalizers.length) spec.finalizers = finalizers;
  }

  const status: Record<string, unknown> = {};
  const statusBytes = embedded(fields, 3, kind);
  if (statusBytes) {
    for (const f of parseMessage(statusBytes, 'NamespaceStatus')) {
      if (f.field === 1) {
        const phase = str(f, 'NamespaceStatus');
        if (phase) status.phase = phase;
        else delete status.phase;
      } else {
        // 2 conditions: server-owned and never sent by kubectl; refused rather than guessed at.
        throw unsupportedField(kind, 'NamespaceStatus', f.field);
      }
    }
  }

  return {
    apiVersion: 'v1',
    kind,
    metadata,
    spec,
    ...(Object.keys(status).length ? { status } : {}),
  };
}

/**
 * policy/v1 PodDisruptionBudget {1 metadata, 2 spec, 3 status (ignored: the controller's)}.
 * Spec {1 minAvailable, 2 selector, 3 maxUnavailable, 4 unhealthyPodEvictionPolicy}; all four are
 * pointers in Go, so presence is kept: an empty selector `{}` selects every pod, an absent one none.
 */
function decodePodDisruptionBudget(raw: Uint8Array): Record<string, unknown> {
  const kind = 'PodDisruptionBudget';
  const fields = parseMessage(raw, kind);
  for (const f of fields) if (f.field > 3) throw unsupportedField(kind, kind, f.field);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));

  const spec: Record<string, unknown> = {};
  const specBytes = embedded(fields, 2, kind);
  if (specBytes) {
    const m = 'PodDisruptionBudgetSpec';
    const specFields = parseMessage(specBytes, m);
    for (const f of specFields) if (f.field > 4) throw unsupportedField(kind, m, f.field);
    const minAvailable = embedded(specFields, 1, m);
    if (minAvailable) spec.minAvailable = decodeIntOrString(minAvailable, kind);
    const selector = embedded(specFields, 2, m);
    if (selector) spec.selector = decodeLabelSelector(selector, kind);
    const maxUnavailable = embedded(specFields, 3, m);
    if (maxUnavailable) spec.maxUnavailable = decodeIntOrString(maxUnavailable, kind);
    for (const f of specFields) if (f.field === 4) spec.unhealthyPodEvictionPolicy = str(f, m);
  }

  return { apiVersion: 'policy/v1', kind, metadata, spec };
}

/**
 * DeleteOptions {1 gracePeriodSeconds, 2 preconditions {1 uid, 2 resourceVersion},
 * 3 orphanDependents, 4 propagationPolicy, 5 dryRun}: the body of kubectl's typed DELETEs (drain
 * without the eviction API), whose grace period matters for pods.
 */
function decodeDeleteOptions(raw: Uint8Array): Record<string, unknown> {
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

// ---------------------------------------------------------------------------------------------
// Workloads: core/v1 Pod and PodTemplateSpec, apps/v1 Deployment (k8s.io/api/{core,apps}/v1/generated.proto)
//
// Go marshals non-pointer fields even when zero and pointer fields only when set, so each field
// below is emitted the way Go's JSON encoding of the decoded struct would: `omitempty` scalars
// when non-zero, pointers whenever present (an explicit `replicas: 0` survives), and struct-typed
// fields (`resources`, `strategy`, `template`) always. Field numbers the proto does not define
// (newer than this decoder) are skipped, as protobuf specifies. Fields the proto defines that
// Drover does not decode (volumes, probes, affinity, …) are refused with 415 when present rather
// than silently dropped, since the stored object would then differ from what the client sent.

type Json = Record<string, unknown>;

/** Where in the object a message sits, for messages a user can act on. */
interface Ctx {
  kind: string;
  path: string;
}

function at(ctx: Ctx, field: string): Ctx {
  return { kind: ctx.kind, path: ctx.path ? `${ctx.path}.${field}` : field };
}

function undecodedField(ctx: Ctx, jsonName: string): ProtobufUnsupportedError {
  const path = ctx.path ? `${ctx.path}.${jsonName}` : jsonName;
  return new ProtobufUnsupportedError(
    `Drover does not decode ${path} in a protobuf ${ctx.kind}; ${jsonHint(ctx.kind)}`,
  );
}

/** Throw for a field the proto defines but this decoder does not; ignore numbers it does not know. */
function refuseUndecoded(f: Field, undecoded: Readonly<Record<number, string>>, ctx: Ctx): void {
  const jsonName = undecoded[f.field];
  if (jsonName !== undefined) throw undecodedField(ctx, jsonName);
}

/** Copy the defined entries of `values` in `order`, which is the Go struct's (and so JSON's) order. */
function inOrder(values: Json, order: readonly string[]): Json {
  const out: Json = {};
  for (const key of order) if (values[key] !== undefined) out[key] = values[key];
  return out;
}

const nonEmpty = (s: string): string | undefined => (s ? s : undefined);
const nonZero = (n: number): number | undefined => (n ? n : undefined);
const orUndefined = (b: boolean): true | undefined => (b ? true : undefined);
const listOrUndefined = <T>(list: T[]): T[] | undefined => (list.length ? list : undefined);

/** resource.Quantity {1 string}: its canonical string, kept as sent. */
function decodeQuantity(buf: Uint8Array): string {
  let value = '';
  for (const f of parseMessage(buf, 'Quantity')) if (f.field === 1) value = str(f, 'Quantity');
  return value;
}

/** map<string, Quantity>: entries {1 key, 2 value}. */
function decodeQuantityMap(entries: Field[], message: string): Record<string, string> {
  const map = new Map<string, string>();
  for (const entry of entries) {
    let key = '';
    let value = '';
    for (const f of parseMessage(bytes(entry, message), `${message} entry`)) {
      if (f.field === 1) key = str(f, `${message} entry`);
      else if (f.field === 2) value = decodeQuantity(bytes(f, `${message} entry`));
    }
    map.set(key, value);
  }
  return Object.fromEntries(map);
}

/** core/v1 ResourceRequirements {1 limits, 2 requests, 3 claims (refused)}; JSON `{}` when empty. */
function decodeResources(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'ResourceRequirements';
  const limits: Field[] = [];
  const requests: Field[] = [];
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) limits.push(f);
    else if (f.field === 2) requests.push(f);
    else refuseUndecoded(f, { 3: 'claims' }, ctx);
  }
  const out: Json = {};
  if (limits.length) out.limits = decodeQuantityMap(limits, 'ResourceRequirements.limits');
  if (requests.length) out.requests = decodeQuantityMap(requests, 'ResourceRequirements.requests');
  return out;
}

/** core/v1 ContainerPort {1 name, 2 hostPort, 3 containerPort, 4 protocol, 5 hostIP}. */
function decodeContainerPort(buf: Uint8Array): Json {
  const m = 'ContainerPort';
  let name = '';
  let hostPort = 0;
  let containerPort = 0;
  let protocol = '';
  let hostIP = '';
  for (const f of parseMessage(buf, m)) {
    switch (f.field) {
      case 1: name = str(f, m); break;
      case 2: hostPort = int32(f, m); break;
      case 3: containerPort = int32(f, m); break;
      case 4: protocol = str(f, m); break;
      case 5: hostIP = str(f, m); break;
      default: break;
    }
  }
  // containerPort has no omitempty in Go: it is always in the JSON.
  return inOrder(
    { name: nonEmpty(name), hostPort: nonZero(hostPort), containerPort, protocol: nonEmpty(protocol), hostIP: nonEmpty(hostIP) },
    ['name', 'hostPort', 'containerPort', 'protocol', 'hostIP'],
  );
}

/** ConfigMapKeySelector and SecretKeySelector {1 LocalObjectReference {1 name}, 2 key, 3 optional *bool}. */
function decodeKeySelector(buf: Uint8Array, message: string): Json {
  let name = '';
  let key = '';
  let optional: boolean | undefined;
  for (const f of parseMessage(buf, message)) {
    if (f.field === 1) name = decodeLocalObjectReference(bytes(f, message));
    else if (f.field === 2) key = str(f, message);
    else if (f.field === 3) optional = bool(f, message);
  }
  return inOrder({ name: nonEmpty(name), key, optional }, ['name', 'key', 'optional']);
}

/** core/v1 LocalObjectReference {1 name}. */
function decodeLocalObjectReference(buf: Uint8Array): string {
  let name = '';
  for (const f of parseMessage(buf, 'LocalObjectReference')) if (f.field === 1) name = str(f, 'LocalObjectReference');
  return name;
}

/**
 * core/v1 EnvVarSource {1 fieldRef ObjectFieldSelector {1 apiVersion, 2 fieldPath},
 * 2 resourceFieldRef (refused), 3 configMapKeyRef, 4 secretKeyRef, 5 fileKeyRef (refused)}.
 */
function decodeEnvVarSource(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'EnvVarSource';
  const fields = parseMessage(buf, m);
  const out: Json = {};
  for (const f of fields) refuseUndecoded(f, { 2: 'resourceFieldRef', 5: 'fileKeyRef' }, ctx);
  const fieldRef = embedded(fields, 1, m);
  if (fieldRef) {
    let apiVersion = '';
    let fieldPath = '';
    for (const f of parseMessage(fieldRef, 'ObjectFieldSelector')) {
      if (f.field === 1) apiVersion = str(f, 'ObjectFieldSelector');
      else if (f.field === 2) fieldPath = str(f, 'ObjectFieldSelector');
    }
    out.fieldRef = inOrder({ apiVersion: nonEmpty(apiVersion), fieldPath }, ['apiVersion', 'fieldPath']);
  }
  const configMapKeyRef = embedded(fields, 3, m);
  if (configMapKeyRef) out.configMapKeyRef = decodeKeySelector(configMapKeyRef, 'ConfigMapKeySelector');
  const secretKeyRef = embedded(fields, 4, m);
  if (secretKeyRef) out.secretKeyRef = decodeKeySelector(secretKeyRef, 'SecretKeySelector');
  return out;
}

/** core/v1 EnvVar {1 name, 2 value, 3 valueFrom}. */
function decodeEnvVar(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'EnvVar';
  const fields = parseMessage(buf, m);
  let name = '';
  let value = '';
  for (const f of fields) {
    if (f.field === 1) name = str(f, m);
    else if (f.field === 2) value = str(f, m);
  }
  const source = embedded(fields, 3, m);
  const valueFrom = source ? decodeEnvVarSource(source, at(ctx, 'valueFrom')) : undefined;
  return inOrder({ name, value: nonEmpty(value), valueFrom }, ['name', 'value', 'valueFrom']);
}

/** Container fields the proto defines that Drover does not decode, by number. */
const CONTAINER_UNDECODED: Readonly<Record<number, string>> = {
  9: 'volumeMounts',
  10: 'livenessProbe',
  11: 'readinessProbe',
  12: 'lifecycle',
  15: 'securityContext',
  19: 'envFrom',
  21: 'volumeDevices',
  22: 'startupProbe',
  23: 'resizePolicy',
  25: 'restartPolicyRules',
};

const CONTAINER_ORDER = [
  'name', 'image', 'command', 'args', 'workingDir', 'ports', 'env', 'resources', 'restartPolicy',
  'terminationMessagePath', 'terminationMessagePolicy', 'imagePullPolicy', 'stdin', 'stdinOnce', 'tty',
] as const;

/**
 * core/v1 Container {1 name, 2 image, 3 command, 4 args, 5 workingDir, 6 ports, 7 env,
 * 8 resources, 13 terminationMessagePath, 14 imagePullPolicy, 16 stdin, 17 stdinOnce, 18 tty,
 * 20 terminationMessagePolicy, 24 restartPolicy}.
 */
function decodeContainer(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'Container';
  const fields = parseMessage(buf, m);
  const v: Json = {};
  let name = '';
  const command: string[] = [];
  const args: string[] = [];
  const ports: Json[] = [];
  const env: Json[] = [];
  for (const f of fields) {
    switch (f.field) {
      case 1: name = str(f, m); break;
      case 2: v.image = nonEmpty(str(f, m)); break;
      case 3: command.push(str(f, m)); break;
      case 4: args.push(str(f, m)); break;
      case 5: v.workingDir = nonEmpty(str(f, m)); break;
      case 6: ports.push(decodeContainerPort(bytes(f, m))); break;
      case 7: env.push(decodeEnvVar(bytes(f, m), at(ctx, `env[${env.length}]`))); break;
      case 8: break; // resources: merged below
      case 13: v.terminationMessagePath = nonEmpty(str(f, m)); break;
      case 14: v.imagePullPolicy = nonEmpty(str(f, m)); break;
      case 16: v.stdin = orUndefined(bool(f, m)); break;
      case 17: v.stdinOnce = orUndefined(bool(f, m)); break;
      case 18: v.tty = orUndefined(bool(f, m)); break;
      case 20: v.terminationMessagePolicy = nonEmpty(str(f, m)); break;
      case 24: v.restartPolicy = str(f, m); break; // *string: kept when present
      default: refuseUndecoded(f, CONTAINER_UNDECODED, ctx);
    }
  }
  const resources = embedded(fields, 8, m);
  // name has no omitempty and resources is a struct: Go's JSON always carries both.
  return inOrder(
    {
      ...v,
      name,
      command: listOrUndefined(command),
      args: listOrUndefined(args),
      ports: listOrUndefined(ports),
      env: listOrUndefined(env),
      resources: resources ? decodeResources(resources, at(ctx, 'resources')) : {},
    },
    CONTAINER_ORDER,
  );
}

/** core/v1 Toleration {1 key, 2 operator, 3 value, 4 effect, 5 tolerationSeconds *int64}. */
function decodeToleration(buf: Uint8Array): Json {
  const m = 'Toleration';
  const v: Json = {};
  for (const f of parseMessage(buf, m)) {
    switch (f.field) {
      case 1: v.key = nonEmpty(str(f, m)); break;
      case 2: v.operator = nonEmpty(str(f, m)); break;
      case 3: v.value = nonEmpty(str(f, m)); break;
      case 4: v.effect = nonEmpty(str(f, m)); break;
      case 5: v.tolerationSeconds = int64(f, m); break;
      default: break;
    }
  }
  return inOrder(v, ['key', 'operator', 'value', 'effect', 'tolerationSeconds']);
}

/** PodSpec fields the proto defines that Drover does not decode, by number. */
const POD_SPEC_UNDECODED: Readonly<Record<number, string>> = {
  1: 'volumes',
  14: 'securityContext',
  18: 'affinity',
  23: 'hostAliases',
  26: 'dnsConfig',
  28: 'readinessGates',
  32: 'overhead',
  33: 'topologySpreadConstraints',
  34: 'ephemeralContainers',
  36: 'os',
  38: 'schedulingGates',
  39: 'resourceClaims',
  40: 'resources',
  42: 'workloadRef',
};

const POD_SPEC_ORDER = [
  'initContainers', 'containers', 'restartPolicy', 'terminationGracePeriodSeconds', 'activeDeadlineSeconds',
  'dnsPolicy', 'nodeSelector', 'serviceAccountName', 'serviceAccount', 'automountServiceAccountToken',
  'nodeName', 'hostNetwork', 'hostPID', 'hostIPC', 'shareProcessNamespace', 'imagePullSecrets', 'hostname',
  'subdomain', 'schedulerName', 'tolerations', 'priorityClassName', 'priority', 'runtimeClassName',
  'enableServiceLinks', 'preemptionPolicy', 'setHostnameAsFQDN', 'hostUsers', 'hostnameOverride',
] as const;

/**
 * core/v1 PodSpec. Decoded: 2 containers, 3 restartPolicy, 4 terminationGracePeriodSeconds,
 * 5 activeDeadlineSeconds, 6 dnsPolicy, 7 nodeSelector, 8 serviceAccountName, 9 serviceAccount,
 * 10 nodeName, 11 hostNetwork, 12 hostPID, 13 hostIPC, 15 imagePullSecrets, 16 hostname,
 * 17 subdomain, 19 schedulerName, 20 initContainers, 21 automountServiceAccountToken,
 * 22 tolerations, 24 priorityClassName, 25 priority, 27 shareProcessNamespace, 29 runtimeClassName,
 * 30 enableServiceLinks, 31 preemptionPolicy, 35 setHostnameAsFQDN, 37 hostUsers, 41 hostnameOverride.
 */
function decodePodSpec(buf: Uint8Array | undefined, ctx: Ctx): Json {
  const m = 'PodSpec';
  const v: Json = {};
  const containers: Json[] = [];
  const initContainers: Json[] = [];
  const nodeSelector: Field[] = [];
  const imagePullSecrets: Json[] = [];
  const tolerations: Json[] = [];
  for (const f of buf ? parseMessage(buf, m) : []) {
    switch (f.field) {
      case 2: containers.push(decodeContainer(bytes(f, m), at(ctx, `containers[${containers.length}]`))); break;
      case 20: initContainers.push(decodeContainer(bytes(f, m), at(ctx, `initContainers[${initContainers.length}]`))); break;
      case 3: v.restartPolicy = nonEmpty(str(f, m)); break;
      case 4: v.terminationGracePeriodSeconds = int64(f, m); break;
      case 5: v.activeDeadlineSeconds = int64(f, m); break;
      case 6: v.dnsPolicy = nonEmpty(str(f, m)); break;
      case 7: nodeSelector.push(f); break;
      case 8: v.serviceAccountName = nonEmpty(str(f, m)); break;
      case 9: v.serviceAccount = nonEmpty(str(f, m)); break;
      case 10: v.nodeName = nonEmpty(str(f, m)); break;
      case 11: v.hostNetwork = orUndefined(bool(f, m)); break;
      case 12: v.hostPID = orUndefined(bool(f, m)); break;
      case 13: v.hostIPC = orUndefined(bool(f, m)); break;
      case 15: {
        const name = decodeLocalObjectReference(bytes(f, m));
        imagePullSecrets.push(name ? { name } : {});
        break;
      }
      case 16: v.hostname = nonEmpty(str(f, m)); break;
      case 17: v.subdomain = nonEmpty(str(f, m)); break;
      case 19: v.schedulerName = nonEmpty(str(f, m)); break;
      case 21: v.automountServiceAccountToken = bool(f, m); break;
      case 22: tolerations.push(decodeToleration(bytes(f, m))); break;
      case 24: v.priorityClassName = nonEmpty(str(f, m)); break;
      case 25: v.priority = int32(f, m); break;
      case 27: v.shareProcessNamespace = bool(f, m); break;
      case 29: v.runtimeClassName = str(f, m); break;
      case 30: v.enableServiceLinks = bool(f, m); break;
      case 31: v.preemptionPolicy = str(f, m); break;
      case 35: v.setHostnameAsFQDN = bool(f, m); break;
      case 37: v.hostUsers = bool(f, m); break;
      case 41: v.hostnameOverride = str(f, m); break;
      default: refuseUndecoded(f, POD_SPEC_UNDECODED, ctx);
    }
  }
  if (nodeSelector.length) {
    const map = decodeStringMap(nodeSelector, 'PodSpec.nodeSelector');
    if (Object.keys(map).length) v.nodeSelector = map;
  }
  // containers has no omitempty (Go writes null for none); [] keeps the type, and validation
  // refuses it either way.
  return inOrder(
    {
      ...v,
      initContainers: listOrUndefined(initContainers),
      containers,
      imagePullSecrets: listOrUndefined(imagePullSecrets),
      tolerations: listOrUndefined(tolerations),
    },
    POD_SPEC_ORDER,
  );
}

/** core/v1 PodTemplateSpec {1 metadata, 2 spec}: both always in Go's JSON. */
function decodePodTemplateSpec(buf: Uint8Array | undefined, ctx: Ctx): Json {
  const m = 'PodTemplateSpec';
  const fields = buf ? parseMessage(buf, m) : [];
  return {
    metadata: decodeObjectMeta(embedded(fields, 1, m)),
    spec: decodePodSpec(embedded(fields, 2, m), at(ctx, 'spec')),
  };
}

/** core/v1 Pod {1 metadata, 2 spec, 3 status (ignored: the agent's)}. */
function decodePod(raw: Uint8Array): Json {
  const kind = 'Pod';
  const fields = parseMessage(raw, kind);
  return {
    apiVersion: 'v1',
    kind,
    metadata: decodeObjectMeta(embedded(fields, 1, kind)),
    spec: decodePodSpec(embedded(fields, 2, kind), { kind, path: 'spec' }),
  };
}

/** apps/v1 DeploymentStrategy {1 type, 2 rollingUpdate {1 maxUnavailable, 2 maxSurge}}. */
function decodeDeploymentStrategy(buf: Uint8Array, kind: string): Json {
  const m = 'DeploymentStrategy';
  const fields = parseMessage(buf, m);
  let type = '';
  for (const f of fields) if (f.field === 1) type = str(f, m);
  const out: Json = {};
  if (type) out.type = type;
  const rolling = embedded(fields, 2, m);
  if (rolling) {
    const r = 'RollingUpdateDeployment';
    const rollingFields = parseMessage(rolling, r);
    const rollingUpdate: Json = {};
    const maxUnavailable = embedded(rollingFields, 1, r);
    if (maxUnavailable) rollingUpdate.maxUnavailable = decodeIntOrString(maxUnavailable, kind);
    const maxSurge = embedded(rollingFields, 2, r);
    if (maxSurge) rollingUpdate.maxSurge = decodeIntOrString(maxSurge, kind);
    out.rollingUpdate = rollingUpdate;
  }
  return out;
}

/**
 * apps/v1 Deployment {1 metadata, 2 spec, 3 status (ignored: the controller's)}. Spec {1 replicas,
 * 2 selector, 3 template, 4 strategy, 5 minReadySeconds, 6 revisionHistoryLimit, 7 paused,
 * 9 progressDeadlineSeconds, 10 podReplacementPolicy}; replicas, revisionHistoryLimit,
 * progressDeadlineSeconds and podReplacementPolicy are pointers, so an explicit zero is kept.
 */
function decodeDeployment(raw: Uint8Array): Json {
  const kind = 'Deployment';
  const fields = parseMessage(raw, kind);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));
  const m = 'DeploymentSpec';
  const specFields = parseMessage(embedded(fields, 2, kind) ?? new Uint8Array(0), m);
  const v: Json = {};
  for (const f of specFields) {
    switch (f.field) {
      case 1: v.replicas = int32(f, m); break;
      case 5: v.minReadySeconds = nonZero(int32(f, m)); break;
      case 6: v.revisionHistoryLimit = int32(f, m); break;
      case 7: v.paused = orUndefined(bool(f, m)); break;
      case 9: v.progressDeadlineSeconds = int32(f, m); break;
      case 10: v.podReplacementPolicy = str(f, m); break;
      default: break; // 2-4 are messages, merged below; others are newer than this decoder
    }
  }
  const selector = embedded(specFields, 2, m);
  if (selector) v.selector = decodeLabelSelector(selector, kind);
  v.template = decodePodTemplateSpec(embedded(specFields, 3, m), { kind, path: 'spec.template' });
  const strategy = embedded(specFields, 4, m);
  v.strategy = strategy ? decodeDeploymentStrategy(strategy, kind) : {};
  const spec = inOrder(v, [
    'replicas', 'selector', 'template', 'strategy', 'minReadySeconds', 'revisionHistoryLimit', 'paused',
    'progressDeadlineSeconds', 'podReplacementPolicy',
  ]);
  return { apiVersion: 'apps/v1', kind, metadata, spec };
}

const DECODERS = new Map<string, (raw: Uint8Array) => Record<string, unknown>>([
  ['v1/Namespace', decodeNamespace],
  ['policy/v1/PodDisruptionBudget', decodePodDisruptionBudget],
  ['v1/Pod', decodePod],
  ['apps/v1/Deployment', decodeDeployment],
  ['v1/DeleteOptions', decodeDeleteOptions],
  ['meta.k8s.io/v1/DeleteOptions', decodeDeleteOptions],
]);

// ---------------------------------------------------------------------------------------------
// Envelope

/** True when a body starts with the Kubernetes protobuf magic `k8s\0`. */
export function isKubernetesProtobuf(body: Uint8Array): boolean {
  return body.length >= MAGIC.length && MAGIC.equals(body.subarray(0, MAGIC.length));
}

/**
 * Decode a Kubernetes protobuf request body into the object's JSON form.
 *
 * Throws ProtobufDecodeError (an ApiError: 400 BadRequest) for malformed input and
 * ProtobufUnsupportedError (an ApiError: 415 UnsupportedMediaType) for kinds, encodings and
 * fields Drover does not decode; both messages are fit to show to a kubectl user.
 */
export function decodeKubernetesProtobuf(body: Buffer): DecodedProtobuf {
  if (!isKubernetesProtobuf(body)) {
    throw new ProtobufDecodeError('the body does not start with the Kubernetes protobuf magic "k8s\\0"');
  }
  const m = 'runtime.Unknown';
  const fields = parseMessage(body.subarray(MAGIC.length), m);
  let apiVersion = '';
  let kind = '';
  let contentEncoding = '';
  let contentType = '';
  for (const f of fields) {
    if (f.field === 3) contentEncoding = str(f, m);
    else if (f.field === 4) contentType = str(f, m);
  }
  const typeMeta = embedded(fields, 1, m);
  if (typeMeta) {
    for (const f of parseMessage(typeMeta, 'runtime.TypeMeta')) {
      if (f.field === 1) apiVersion = str(f, 'runtime.TypeMeta');
      else if (f.field === 2) kind = str(f, 'runtime.TypeMeta');
    }
  }
  const raw = embedded(fields, 2, m) ?? new Uint8Array(0);

  const decoder = DECODERS.get(`${apiVersion}/${kind}`);
  if (!decoder) {
    const got = kind ? `${apiVersion ? `${apiVersion} ` : ''}${kind}` : 'an object without a kind';
    throw new ProtobufUnsupportedError(
      `Drover accepts protobuf request bodies only for ${SUPPORTED} (got ${got}); ${jsonHint(kind)}`,
    );
  }
  if (contentEncoding) {
    throw new ProtobufUnsupportedError(
      `Drover does not accept protobuf request bodies with content encoding "${contentEncoding}"; ${jsonHint(kind)}`,
    );
  }
  if (contentType && !contentType.toLowerCase().startsWith('application/vnd.kubernetes.protobuf')) {
    throw new ProtobufUnsupportedError(
      `Drover does not accept protobuf envelopes carrying ${contentType}; ${jsonHint(kind)}`,
    );
  }
  return { apiVersion, kind, object: decoder(raw) };
}
