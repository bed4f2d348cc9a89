import type { IncomingMessage } from 'node:http';
import { dependentsChoiceOf } from './deletion.js';
import { errors } from './errors.js';
import { decodeBody, mediaType, parseJson, readBody } from './http.js';
import { isJsonObject, type JsonObject } from './json.js';
import { checkDecoded, duplicateJsonKey, integerParam, MAX_FIELD_MANAGER_LENGTH, MAX_INT32 } from './limits.js';
import type { KubeObject } from './objects.js';
import { PATCH_CONTENT_TYPES, type PatchRequestType, patchTypeFromContentType } from './patch/index.js';
import { decodeKubernetesProtobuf } from './protobuf.js';
import type { DeleteOptions, Preconditions } from './storage-types.js';
import { asKubeObject, type FieldValidation } from './verbs/context.js';

/**
 * What the HTTP layer reads from a request for the verb layer: bodies (objects, patches,
 * DeleteOptions) and the options in the query, checked as kube-apiserver checks them.
 */

export function fieldValidationParam(value: string | null): FieldValidation {
  if (value === null || value === '' || value === 'Warn') return 'Warn';
  if (value === 'Ignore' || value === 'Strict') return value;
  throw errors.badRequest(`fieldValidation parameter must be one of Ignore, Warn or Strict (got "${value}")`);
}

/** The options kind a write's query belongs to, as kube-apiserver names it in its errors. */
const OPTIONS_KIND: Readonly<Record<string, string>> = {
  create: 'CreateOptions',
  update: 'UpdateOptions',
  patch: 'PatchOptions',
  delete: 'DeleteOptions',
  deletecollection: 'DeleteOptions',
};

/** dryRun (only `All`) and fieldManager (printable, at most 128 characters), as kube-apiserver validates them. */
export function checkWriteOptions(verb: string, params: URLSearchParams): void {
  const kind = OPTIONS_KIND[verb];
  if (!kind) return;
  const causes: { reason: string; message: string; field: string }[] = [];
  params.getAll('dryRun').forEach((value, i) => {
    if (value !== 'All') {
      causes.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(value)}: supported values: "All"`, field: `dryRun[${i}]` });
    }
  });
  const manager = params.get('fieldManager');
  if (manager !== null && kind !== 'DeleteOptions') {
    if (manager.length > MAX_FIELD_MANAGER_LENGTH) {
      causes.push({ reason: 'FieldValueTooLong', message: `Too long: may not be more than ${MAX_FIELD_MANAGER_LENGTH} bytes`, field: 'fieldManager' });
    } else if (!/^[\x20-\x7e]*$/.test(manager)) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(manager)}: must only contain printable characters`, field: 'fieldManager' });
    }
  }
  if (causes.length) throw errors.invalid(kind, '', 'meta.k8s.io', causes);
}

/** The `Warning` header for the unknown fields a write dropped. */
export function warningHeader(unknown: string[]): Record<string, string> {
  if (!unknown.length) return {};
  return { Warning: unknown.map((f) => `299 - "unknown field \\"${f}\\""`).join(', ') };
}

/** fieldValidation=Strict: a key twice in one object is an error (JSON.parse would keep the last). */
function refuseDuplicateKeys(text: string): void {
  const duplicate = duplicateJsonKey(text);
  if (duplicate !== undefined) throw errors.badRequest(`strict decoding error: duplicate field ${JSON.stringify(duplicate)}`);
}

/** A create's or update's body: JSON, YAML or protobuf, an object with object metadata. */
export async function readObject(req: IncomingMessage, mode: FieldValidation): Promise<KubeObject> {
  const body = await readBody(req);
  const obj = asKubeObject(decodeBody(body, req.headers['content-type']), 'the request body');
  if (mode === 'Strict' && mediaType(req.headers['content-type']).endsWith('json')) refuseDuplicateKeys(body.toString('utf8'));
  return obj;
}

export function patchTypeOf(req: IncomingMessage): PatchRequestType {
  const contentType = mediaType(req.headers['content-type']);
  const patchType = patchTypeFromContentType(contentType);
  if (!patchType) throw errors.unsupportedMediaType(contentType, PATCH_CONTENT_TYPES);
  return patchType;
}

export function parsePatch(body: Buffer, mode: FieldValidation = 'Warn'): unknown {
  const text = body.toString('utf8');
  const patch = parseJson(text, 'error decoding patch');
  checkDecoded(patch, 'the patch');
  if (mode === 'Strict') refuseDuplicateKeys(text);
  return patch;
}

/**
 * A server-side apply's body: YAML (JSON, which kubectl sends, is read as JSON first: the YAML
 * parser is far slower), and it must be an object.
 */
export function parseApplyBody(body: Buffer, mode: FieldValidation = 'Warn'): KubeObject {
  const text = body.toString('utf8');
  let config: unknown;
  if (text.trimStart().startsWith('{')) {
    try {
      config = JSON.parse(text);
      checkDecoded(config, 'the applied configuration');
      if (mode === 'Strict') refuseDuplicateKeys(text);
    } catch (error) {
      if (!(error instanceof SyntaxError)) throw error;
      config = undefined;
    }
  }
  config ??= decodeBody(body, 'application/yaml');
  if (!isJsonObject(config)) {
    const what = config === null ? 'nothing' : Array.isArray(config) ? 'a list' : `a ${typeof config}`;
    throw errors.badRequest(`error decoding YAML: the applied configuration must be an object (a Kubernetes object with apiVersion, kind and metadata), got ${what}`);
  }
  return asKubeObject(config, 'the applied configuration');
}

/** A DELETE's body, a v1 DeleteOptions (JSON, or the protobuf kubectl's typed DELETEs send); anything else counts as none. */
export async function readDeleteOptions(req: IncomingMessage): Promise<JsonObject> {
  const body = await readBody(req);
  if (body.length === 0) return {};
  const type = mediaType(req.headers['content-type']);
  if (type.startsWith('application/vnd.kubernetes.protobuf')) {
    // kubectl's typed DELETEs (drain without eviction) send protobuf DeleteOptions; their grace
    // period decides whether a pod goes at once. Anything else in protobuf is ignored, as before.
    try {
      const decoded = decodeKubernetesProtobuf(body);
      return decoded.kind === 'DeleteOptions' ? (decoded.object as JsonObject) : {};
    } catch {
      return {};
    }
  }
  if (!type.endsWith('json')) return {};
  const parsed = decodeBody(body, req.headers['content-type']);
  return isJsonObject(parsed) ? parsed : {};
}

/**
 * DeleteOptions.gracePeriodSeconds from a body or the query (kubectl sends the body). Negative
 * means "now" (the pod strategy makes it 1 s, as kube-apiserver does); the upper bound keeps
 * deletion timestamps within what a date can hold.
 */
export function gracePeriodOf(options: JsonObject, params?: URLSearchParams): number | undefined {
  const value = options.gracePeriodSeconds ?? (params ? integerParam(params, 'gracePeriodSeconds', -MAX_INT32, MAX_INT32) : undefined);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || Math.abs(value) > MAX_INT32) {
    throw errors.badRequest(`gracePeriodSeconds must be an integer between ${-MAX_INT32} and ${MAX_INT32} (got ${JSON.stringify(value)})`);
  }
  return value;
}

export function preconditionsOf(options: JsonObject): Preconditions | undefined {
  const pre = options.preconditions;
  if (!isJsonObject(pre)) return undefined;
  return {
    ...(typeof pre.uid === 'string' ? { uid: pre.uid } : {}),
    ...(typeof pre.resourceVersion === 'string' ? { resourceVersion: pre.resourceVersion } : {}),
  };
}

/** A DELETE's options for the verb layer, from its DeleteOptions body and the query. */
export function deleteOptionsOf(options: JsonObject, params: URLSearchParams, what: { preconditions: boolean }): Omit<DeleteOptions, 'dryRun'> {
  const preconditions = what.preconditions ? preconditionsOf(options) : undefined;
  const gracePeriodSeconds = gracePeriodOf(options, params);
  return {
    ...dependentsChoiceOf(options),
    ...(preconditions ? { preconditions } : {}),
    ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
  };
}

/** A dryRun in the DeleteOptions body counts as one in the query. */
export function bodyDryRun(options: JsonObject): boolean {
  return Array.isArray(options.dryRun) && options.dryRun.includes('All');
}
