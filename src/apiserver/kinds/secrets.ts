import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import { getString, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import {
  immutableCauses,
  jsonType,
  keyCauses,
  MAX_CONFIG_BYTES,
  takeBytesMap,
  takeImmutable,
  takeStringMap,
  tooLongCause,
  undecodable,
} from './config-data.js';
import { goJsonSyntaxError } from './go-json-syntax.js';

/**
 * v1 Secret, as kube-apiserver's registry/core/secret strategy and ValidateSecret(Update) have
 * it: `data` holds bytes (base64 in JSON), `stringData` is a write-only convenience merged into
 * `data` (winning over it) and never stored, `type` defaults to Opaque and is fixed at create,
 * each built-in type requires its keys, 1 MiB of data in all, and `immutable: true` freezes data.
 *
 * Values never appear in a message: key problems name the key, a bad docker config says
 * `<secret contents redacted>` as kube-apiserver does, and a base64 error names a byte offset.
 * The table shows the type and the number of keys only.
 */

const KIND = 'Secret';

export const SECRET_TYPE = {
  opaque: 'Opaque',
  serviceAccountToken: 'kubernetes.io/service-account-token',
  dockercfg: 'kubernetes.io/dockercfg',
  dockerConfigJson: 'kubernetes.io/dockerconfigjson',
  basicAuth: 'kubernetes.io/basic-auth',
  sshAuth: 'kubernetes.io/ssh-auth',
  tls: 'kubernetes.io/tls',
  bootstrapToken: 'bootstrap.kubernetes.io/token',
} as const;

/** The annotation a service-account-token Secret must carry: the account it belongs to. */
export const SERVICE_ACCOUNT_NAME_ANNOTATION = 'kubernetes.io/service-account.name';

const keysOf = (value: unknown): string[] => (isJsonObject(value) ? Object.keys(value) : []);

const SECRET_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Type', 'Used to facilitate programmatic handling of secret data.'),
    column('Data', 'Data contains the secret data.', { type: 'integer' }),
    AGE_COLUMN,
  ],
  cells: (secret, now) => [
    secret.metadata.name ?? '',
    getString(secret, ['type']),
    keysOf(secret.data).length,
    ageOf(secret.metadata.creationTimestamp, now),
  ],
};

/**
 * What kube-apiserver's decoding and defaulting do before validation: the shapes (a 400
 * otherwise), `data` in canonical base64, `stringData` merged into `data` and dropped, `type`
 * Opaque when empty. Runs on create and on every update, so stringData is never stored.
 */
function normalizeSecret(secret: KubeObject): void {
  takeBytesMap(secret, KIND, 'data');
  const stringData = takeStringMap(secret, KIND, 'stringData', 'string');
  if (stringData) {
    const data = isJsonObject(secret.data) ? (secret.data as Record<string, string>) : {};
    for (const [key, value] of Object.entries(stringData)) data[key] = Buffer.from(value, 'utf8').toString('base64');
    secret.data = data;
    delete secret.stringData;
  }
  takeImmutable(secret, KIND);
  const type = secret.type;
  if (type === undefined || type === null || type === '') secret.type = SECRET_TYPE.opaque;
  else if (typeof type !== 'string') {
    undecodable(KIND, `json: cannot unmarshal ${jsonType(type)} into Go struct field Secret.type of type v1.SecretType`, 'type');
  }
}

/**
 * Why a docker config is not what Go's json.Unmarshal into a map takes, in Go's words: a syntax
 * error (which quotes one character at most), or a value that is not an object (null is fine).
 */
export function dockerConfigProblem(bytes: Buffer): string | undefined {
  const syntax = goJsonSyntaxError(bytes);
  if (syntax) return syntax;
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch {
    // Valid to Go but not to JavaScript: say nothing of the content.
    return 'invalid JSON';
  }
  if (value === null || isJsonObject(value)) return undefined;
  return `json: cannot unmarshal ${jsonType(value)} into Go value of type map[string]interface {}`;
}

const required = (field: string): StatusCause => ({ reason: 'FieldValueRequired', message: 'Required value', field });

/** The keys (and annotation) each built-in type requires. */
function typeCauses(secret: KubeObject, data: Readonly<Record<string, string>>): StatusCause[] {
  const has = (key: string): boolean => Object.hasOwn(data, key);
  const bytesOf = (key: string): Buffer => Buffer.from(data[key] ?? '', 'base64');
  const dockerConfig = (key: string): StatusCause[] => {
    if (!has(key)) return [required(`data[${key}]`)];
    const problem = dockerConfigProblem(bytesOf(key));
    return problem
      ? [{ reason: 'FieldValueInvalid', message: `Invalid value: "<secret contents redacted>": ${problem}`, field: `data[${key}]` }]
      : [];
  };
  switch (secret.type) {
    case SECRET_TYPE.serviceAccountToken:
      return secret.metadata.annotations?.[SERVICE_ACCOUNT_NAME_ANNOTATION]
        ? []
        : [required(`metadata.annotations[${SERVICE_ACCOUNT_NAME_ANNOTATION}]`)];
    case SECRET_TYPE.dockercfg:
      return dockerConfig('.dockercfg');
    case SECRET_TYPE.dockerConfigJson:
      return dockerConfig('.dockerconfigjson');
    case SECRET_TYPE.basicAuth:
      // Either may be empty, but one of them must be there.
      return has('username') || has('password') ? [] : [required('data[username]'), required('data[password]')];
    case SECRET_TYPE.sshAuth:
      return bytesOf('ssh-privatekey').length > 0 ? [] : [required('data[ssh-privatekey]')];
    case SECRET_TYPE.tls:
      return [...(has('tls.crt') ? [] : [required('data[tls.crt]')]), ...(has('tls.key') ? [] : [required('data[tls.key]')])];
    default:
      return [];
  }
}

export function validateSecret(secret: KubeObject): StatusCause[] {
  const data = isJsonObject(secret.data) ? (secret.data as Record<string, string>) : {};
  const causes = keyCauses('data', data);
  let total = 0;
  for (const value of Object.values(data)) total += Buffer.byteLength(value, 'base64');
  if (total > MAX_CONFIG_BYTES) causes.push(tooLongCause('data'));
  causes.push(...typeCauses(secret, data));
  return causes;
}

export function validateSecretUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  if (next.type !== current.type) {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(next.type)}: field is immutable`, field: 'type' });
  }
  // stringData is already merged into data, so comparing data covers it.
  causes.push(...immutableCauses(next, current, ['data'], jsonEqual));
  return causes;
}

export const SECRET_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: KIND,
  plural: 'secrets',
  singular: 'secret',
  namespaced: true,
  shortNames: [],
  categories: [],
  subresources: [],
  printer: SECRET_PRINTER,
  fieldLabels: { type: (secret) => getString(secret, ['type']) },
  topLevelFields: standardFields('data', 'stringData', 'type', 'immutable'),
  // Encryption at rest covers this prefix (SECRETS_PREFIX in src/datastore/encryption.ts); a
  // unit test keeps the two equal.
  storagePath: 'core/secrets',
  nameRule: 'dns-subdomain',
  applyDefaults: normalizeSecret,
  validate: validateSecret,
  validateUpdate: validateSecretUpdate,
};
