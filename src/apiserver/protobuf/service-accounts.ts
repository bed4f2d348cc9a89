/**
 * What kubectl 1.32 sends as protobuf for ServiceAccounts: core/v1 ServiceAccount (`kubectl create
 * serviceaccount`) and authentication/v1 TokenRequest (`kubectl create token`), field numbers as
 * k8s.io/api/{core,authentication}/v1/generated.proto. The answers stay JSON, which kubectl reads.
 */

import { inOrder, type Json, nonEmpty } from './go-json.js';
import { decodeObjectMeta, decodeStrictObject } from './meta.js';
import { bool, bytes, embedded, type Field, int64, parseMessage, str } from './reader.js';

/** Every field a string (JSON omitempty): number → JSON name. */
function stringMessage(buf: Uint8Array, message: string, names: Readonly<Record<number, string>>): Json {
  const out: Json = {};
  for (const f of parseMessage(buf, message)) {
    const name = names[f.field];
    if (name !== undefined) out[name] = nonEmpty(str(f, message));
  }
  return inOrder(out, Object.values(names));
}

const OBJECT_REFERENCE = { 1: 'kind', 2: 'namespace', 3: 'name', 4: 'uid', 5: 'apiVersion', 6: 'resourceVersion', 7: 'fieldPath' };

/**
 * core/v1 ServiceAccount {1 metadata, 2 secrets [ObjectReference], 3 imagePullSecrets
 * [LocalObjectReference {1 name}], 4 automountServiceAccountToken (*bool: kept when sent)}.
 */
export function decodeServiceAccount(raw: Uint8Array): Record<string, unknown> {
  const m = 'ServiceAccount';
  const fields = parseMessage(raw, m);
  const secrets: Json[] = [];
  const imagePullSecrets: Json[] = [];
  let automount: boolean | undefined;
  for (const f of fields) {
    if (f.field === 2) secrets.push(stringMessage(bytes(f, m), 'ObjectReference', OBJECT_REFERENCE));
    else if (f.field === 3) imagePullSecrets.push(stringMessage(bytes(f, m), 'LocalObjectReference', { 1: 'name' }));
    else if (f.field === 4) automount = bool(f, m);
  }
  return inOrder(
    {
      apiVersion: 'v1',
      kind: m,
      metadata: decodeObjectMeta(embedded(fields, 1, m)),
      secrets: secrets.length ? secrets : undefined,
      imagePullSecrets: imagePullSecrets.length ? imagePullSecrets : undefined,
      automountServiceAccountToken: automount,
    },
    ['apiVersion', 'kind', 'metadata', 'secrets', 'imagePullSecrets', 'automountServiceAccountToken'],
  );
}

/**
 * authentication/v1 TokenRequest {1 metadata, 2 spec {1 audiences [string], 3 boundObjectRef
 * {1 kind, 2 apiVersion, 3 name, 4 uid}, 4 expirationSeconds (*int64)}, 3 status (the server's:
 * ignored)}.
 */
export function decodeTokenRequest(raw: Uint8Array): Record<string, unknown> {
  const kind = 'TokenRequest';
  const { fields, metadata } = decodeStrictObject(raw, kind);
  const spec: Json = {};
  const specBytes = embedded(fields, 2, kind);
  if (specBytes) {
    const m = 'TokenRequestSpec';
    const specFields: Field[] = parseMessage(specBytes, m);
    const audiences: string[] = [];
    for (const f of specFields) {
      if (f.field === 1) audiences.push(str(f, m));
      else if (f.field === 4) spec.expirationSeconds = int64(f, m);
    }
    if (audiences.length) spec.audiences = audiences;
    const ref = embedded(specFields, 3, m);
    if (ref) spec.boundObjectRef = stringMessage(ref, 'BoundObjectReference', { 1: 'kind', 2: 'apiVersion', 3: 'name', 4: 'uid' });
  }
  return {
    apiVersion: 'authentication.k8s.io/v1',
    kind,
    metadata,
    spec: inOrder(spec, ['audiences', 'expirationSeconds', 'boundObjectRef']),
  };
}
