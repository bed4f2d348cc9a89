import { ApiError, type StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';

/**
 * What ConfigMaps and Secrets share: the key rule, the 1 MiB bound, Go's base64 for `[]byte`
 * fields, and the shape checks kube-apiserver's JSON decoding makes before any validation runs
 * (a wrong type there is a 400, not a 422). Messages and field paths are kube-apiserver's
 * (k8s.io/apimachinery util/validation IsConfigMapKey, core validation ValidateConfigMap and
 * ValidateSecret).
 */

/** core.MaxSecretSize: the bound on a Secret's data and on a ConfigMap's data plus binaryData. */
export const MAX_CONFIG_BYTES = 1024 * 1024;

/** DNS1123SubdomainMaxLength, the longest key. */
const MAX_KEY_LENGTH = 253;
const CONFIG_KEY = /^[-._a-zA-Z0-9]+$/;
/** The examples and regex as RegexError spells them (its odd double spaces included). */
const CONFIG_KEY_MESSAGE =
  "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/** Why `key` cannot name an entry of a ConfigMap or Secret (none when it can). */
export function configKeyProblems(key: string): string[] {
  const problems: string[] = [];
  // Go's len() counts bytes.
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_LENGTH) problems.push(`must be no more than ${MAX_KEY_LENGTH} characters`);
  if (!CONFIG_KEY.test(key)) problems.push(CONFIG_KEY_MESSAGE);
  // Keys become file names in volumes: none may climb out of the directory.
  if (key === '.') problems.push("must not be '.'");
  else if (key === '..') problems.push("must not be '..'");
  else if (key.startsWith('..')) problems.push("must not start with '..'");
  return problems;
}

/** The causes for each bad key of one map (`data`, `binaryData`), as `data[key]: Invalid value: "key": …`. */
export function keyCauses(field: string, map: Readonly<Record<string, unknown>> | undefined): StatusCause[] {
  const causes: StatusCause[] = [];
  for (const key of Object.keys(map ?? {})) {
    for (const problem of configKeyProblems(key)) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(key)}: ${problem}`, field: `${field}[${key}]` });
    }
  }
  return causes;
}

/** field.TooLong: the total over `MAX_CONFIG_BYTES`, reported on `field` (`data` for Secrets, `[]` for ConfigMaps). */
export function tooLongCause(field: string): StatusCause {
  return { reason: 'FieldValueTooLong', message: `Too long: must have at most ${MAX_CONFIG_BYTES} bytes`, field };
}

// ---------------------------------------------------------------------------------------------
// Base64, as Go's encoding/json decodes a []byte

const BASE64_ALPHABET = /[A-Za-z0-9+/]/;
const isNewline = (byte: number): boolean => byte === 0x0a || byte === 0x0d;

/**
 * Where Go's base64.StdEncoding (what encoding/json uses for `[]byte`) would find `text` corrupt:
 * the input byte its CorruptInputError names, or undefined when the text decodes. Padding is
 * required; CR and LF are skipped anywhere; nothing may follow the padding.
 */
export function base64ErrorOffset(text: string): number | undefined {
  const src = Buffer.from(text, 'utf8');
  const valid = (byte: number): boolean => byte < 0x80 && BASE64_ALPHABET.test(String.fromCharCode(byte));
  let si = 0;
  for (;;) {
    // One quantum: four symbols, or fewer closed by padding.
    let j = 0;
    while (j < 4) {
      if (si === src.length) {
        if (j === 0) return undefined;
        return si - j;
      }
      const byte = src[si]!;
      si++;
      if (valid(byte)) {
        j++;
        continue;
      }
      if (isNewline(byte)) continue;
      if (byte !== 0x3d /* '=' */) return si - 1;
      if (j < 2) return si - 1;
      if (j === 2) {
        while (si < src.length && isNewline(src[si]!)) si++;
        if (si === src.length) return src.length;
        if (src[si] !== 0x3d) return si - 1;
        si++;
      }
      while (si < src.length && isNewline(src[si]!)) si++;
      return si < src.length ? si : undefined;
    }
  }
}

/**
 * A 400 worded as kube-apiserver answers a body its JSON decoding refuses (`<Kind> in version
 * "v1" cannot be handled as a <Kind>: …`). kube-apiserver's carries no cause; this one also names
 * the field, so every refused input says where it is wrong.
 */
export function undecodable(kind: string, why: string, field: string, reason = 'FieldValueTypeInvalid'): never {
  throw new ApiError(400, 'BadRequest', `${kind} in version "v1" cannot be handled as a ${kind}: ${why}`, {
    causes: [{ reason, message: why, field }],
  });
}

/** Go's JSON name of a value's type, for `json: cannot unmarshal <type> into …`. */
export function jsonType(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'boolean') return 'bool';
  return typeof value === 'object' ? 'object' : typeof value;
}

function cannotUnmarshal(kind: string, field: string, path: string, value: unknown, goType: string): never {
  undecodable(kind, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${kind}.${field} of type ${goType}`, path);
}

/**
 * A `map[string]string` or `map[string][]byte` field as encoding/json would take it: absent,
 * null or empty is no map (the field is dropped, as Go's omitempty drops it); a null entry is
 * the empty value; anything else must be an object of strings. Answers the entries.
 */
export function takeStringMap(obj: KubeObject, kind: string, field: string, goType: string): Record<string, string> | undefined {
  const value = obj[field];
  if (value === undefined || value === null) {
    delete obj[field];
    return undefined;
  }
  if (!isJsonObject(value)) cannotUnmarshal(kind, field, field, value, `map[string]${goType}`);
  for (const [key, entry] of Object.entries(value)) {
    if (entry === null) value[key] = '';
    else if (typeof entry !== 'string') cannotUnmarshal(kind, field, `${field}[${key}]`, entry, goType);
  }
  if (Object.keys(value).length === 0) {
    delete obj[field];
    return undefined;
  }
  return value as Record<string, string>;
}

/**
 * A `map[string][]byte` field: each value must be Go-valid base64 (a 400 otherwise, naming the
 * input byte, never the value) and is stored in canonical form, so equal bytes compare equal
 * (immutability, no-op updates). Answers the decoded bytes by key.
 */
export function takeBytesMap(obj: KubeObject, kind: string, field: string): Map<string, Buffer> {
  const map = takeStringMap(obj, kind, field, '[]uint8');
  const decoded = new Map<string, Buffer>();
  if (!map) return decoded;
  for (const [key, text] of Object.entries(map)) {
    const offset = base64ErrorOffset(text);
    if (offset !== undefined) undecodable(kind, `illegal base64 data at input byte ${offset}`, `${field}[${key}]`, 'FieldValueInvalid');
    const bytes = Buffer.from(text.replace(/[\r\n]/g, ''), 'base64');
    decoded.set(key, bytes);
    map[key] = bytes.toString('base64');
  }
  return decoded;
}

/** `immutable`: a bool or nothing (null drops it). */
export function takeImmutable(obj: KubeObject, kind: string): void {
  const value = obj.immutable;
  if (value === null) delete obj.immutable;
  else if (value !== undefined && typeof value !== 'boolean') cannotUnmarshal(kind, 'immutable', 'immutable', value, 'bool');
}

/**
 * The update rules of `immutable: true` (ValidateConfigMapUpdate, ValidateSecretUpdate): it
 * cannot be unset, and the listed content fields cannot change.
 */
export function immutableCauses(next: KubeObject, current: KubeObject, fields: readonly string[], equal: (a: unknown, b: unknown) => boolean): StatusCause[] {
  if (current.immutable !== true) return [];
  const causes: StatusCause[] = [];
  const forbidden = (field: string): StatusCause => ({ reason: 'FieldValueForbidden', message: 'Forbidden: field is immutable when `immutable` is set', field });
  if (next.immutable !== true) causes.push(forbidden('immutable'));
  for (const field of fields) if (!equal(next[field], current[field])) causes.push(forbidden(field));
  return causes;
}
