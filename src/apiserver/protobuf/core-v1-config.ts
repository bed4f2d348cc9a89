/**
 * core/v1 ConfigMap and Secret (k8s.io/api/core/v1/generated.proto), which kubectl 1.32's
 * `create configmap` and `create secret generic|tls|docker-registry` send as protobuf. `[]byte`
 * values (Secret.data, ConfigMap.binaryData) become base64 strings, as Go's JSON encoding writes
 * them; the Secret kind then checks and defaults them like a JSON body's.
 */

import { type Field, bool, bytes, embedded, parseMessage, str } from './reader.js';
import { inOrder, type Json, nonEmpty } from './go-json.js';
import { decodeObjectMeta, decodeStringMap } from './meta.js';

const base64Value = (f: Field, message: string): string => Buffer.from(bytes(f, message)).toString('base64');

/** A map field's entries decoded, or undefined when empty (Go's omitempty). */
function mapField(fields: Field[], number: number, message: string, value?: (f: Field, message: string) => string): Record<string, string> | undefined {
  const entries = fields.filter((f) => f.field === number);
  if (entries.length === 0) return undefined;
  const map = decodeStringMap(entries, message, value);
  return Object.keys(map).length ? map : undefined;
}

/** `immutable` is a *bool: present when sent, false included. */
function optionalBool(fields: Field[], number: number, message: string): boolean | undefined {
  let value: boolean | undefined;
  for (const f of fields) if (f.field === number) value = bool(f, message);
  return value;
}

/** core/v1 ConfigMap {1 metadata, 2 data map<string,string>, 3 binaryData map<string,bytes>, 4 immutable}. */
export function decodeConfigMap(raw: Uint8Array): Record<string, unknown> {
  const m = 'ConfigMap';
  // Every field the proto defines is decoded; numbers it does not define are skipped.
  const fields = parseMessage(raw, m);
  const out: Json = {
    apiVersion: 'v1',
    kind: m,
    metadata: decodeObjectMeta(embedded(fields, 1, m)),
    immutable: optionalBool(fields, 4, m),
    data: mapField(fields, 2, 'ConfigMap.data'),
    binaryData: mapField(fields, 3, 'ConfigMap.binaryData', base64Value),
  };
  return inOrder(out, ['apiVersion', 'kind', 'metadata', 'immutable', 'data', 'binaryData']);
}

/** core/v1 Secret {1 metadata, 2 data map<string,bytes>, 3 type, 4 stringData map<string,string>, 5 immutable}. */
export function decodeSecret(raw: Uint8Array): Record<string, unknown> {
  const m = 'Secret';
  const fields = parseMessage(raw, m);
  let type = '';
  for (const f of fields) if (f.field === 3) type = str(f, m);
  const out: Json = {
    apiVersion: 'v1',
    kind: m,
    metadata: decodeObjectMeta(embedded(fields, 1, m)),
    immutable: optionalBool(fields, 5, m),
    data: mapField(fields, 2, 'Secret.data', base64Value),
    stringData: mapField(fields, 4, 'Secret.stringData'),
    type: nonEmpty(type),
  };
  return inOrder(out, ['apiVersion', 'kind', 'metadata', 'immutable', 'data', 'stringData', 'type']);
}
