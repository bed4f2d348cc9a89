import type { WriteGuard } from '../../datastore/types.js';
import type { UserInfo } from '../auth.js';
import { apiVersionOf, type ResourceDefinition } from '../definition.js';
import { errors } from '../errors.js';
import { isJsonObject } from '../json.js';
import { type KubeObject, OBJECT_META_FIELDS } from '../objects.js';
import type { PatchType } from '../patch/index.js';

/**
 * What every verb is told about its request, and the object checks every caller's writes get,
 * whether they came over HTTP or from inside the server.
 */

/** Unknown fields are dropped with a warning (Warn, the default), dropped silently (Ignore) or refused (Strict). */
export type FieldValidation = 'Ignore' | 'Warn' | 'Strict';

export interface RequestContext {
  /**
   * The authenticated caller of an HTTP request: admission judges its writes. In-process callers
   * (LocalClient: the controllers, the node registry, the server itself) carry none and are not
   * judged; see docs/architecture.md, "The verb layer".
   */
  user?: UserInfo;
  dryRun?: boolean;
  fieldValidation?: FieldValidation;
  /** The `fieldManager` query parameter, when given. */
  fieldManager?: string;
  /** An HTTP request's User-Agent ('' when it sent none); in-process callers have none. */
  userAgent?: string;
  /** `force=true`: a server-side apply takes the fields it conflicts over. */
  force?: boolean;
  /**
   * The guard every datastore write of the call carries, read at each write (in-process callers
   * only: the leader's controllers, through LocalClient.withWriteGuard; see storage-types.ts).
   */
  writeGuard?: () => WriteGuard | undefined;
}

/** The manager in-process writers (the controllers, the node registry) record their writes as, as K3s records its embedded controllers as `k3s`. */
export const IN_PROCESS_MANAGER = 'drover';

/**
 * The field manager a write is recorded as, as kube-apiserver picks it: the `fieldManager`
 * parameter, else the User-Agent up to its first `/` (`kubectl/v1.32.0 (linux/amd64)` is
 * `kubectl`), cut to the 128 characters a manager may have.
 */
export function fieldManagerOf(ctx: RequestContext): string {
  if (ctx.fieldManager) return ctx.fieldManager;
  if (ctx.userAgent === undefined) return IN_PROCESS_MANAGER;
  return ctx.userAgent.split('/', 1)[0].slice(0, 128);
}

/** A write's outcome: the object as stored (or as it would be, in a dry run) and its warnings. */
export interface WriteResult {
  object: KubeObject;
  /** Unknown fields that were dropped (fieldValidation=Warn), for the `Warning` header. */
  unknownFields: string[];
}

/** The new content of an update: a whole object (PUT), or a patch of the stored one (PATCH). */
export type Change = { type: 'update'; object: KubeObject } | { type: 'patch'; patchType: PatchType; patch: unknown };

/** A value that must be an object with an object (or no) metadata: the shape every body and patch result must have. */
export function asKubeObject(value: unknown, what: string): KubeObject {
  if (!isJsonObject(value)) throw errors.badRequest(`${what} must be a JSON object`);
  const metadata = value.metadata;
  if (metadata === undefined || metadata === null) value.metadata = {};
  else if (!isJsonObject(metadata)) throw errors.badRequest('metadata must be an object');
  return value as unknown as KubeObject;
}

/** An object's kind and apiVersion, when given, must be the resource's. */
export function checkTypeMeta(def: ResourceDefinition, obj: KubeObject): void {
  if (obj.kind !== undefined && obj.kind !== '' && obj.kind !== def.kind) {
    throw errors.badRequest(
      `the kind of the provided object (${String(obj.kind)}) does not match the resource (${def.kind})`,
    );
  }
  if (obj.apiVersion !== undefined && obj.apiVersion !== '' && obj.apiVersion !== apiVersionOf(def)) {
    throw errors.badRequest(
      `the API version of the provided object (${String(obj.apiVersion)}) does not match the request (${apiVersionOf(def)})`,
    );
  }
}

/**
 * Drover knows the top-level fields of each kind and every ObjectMeta field; an unknown one is
 * dropped with a warning (Warn, the default), dropped silently (Ignore) or refused (Strict).
 * Inside spec and status, fields are kept as sent. Answers the fields to warn about.
 */
export function pruneUnknownFields(def: ResourceDefinition, obj: KubeObject, mode: FieldValidation = 'Warn'): string[] {
  const unknown: string[] = [];
  for (const field of Object.keys(obj)) {
    if (!def.topLevelFields.has(field)) unknown.push(field);
  }
  for (const field of Object.keys(obj.metadata)) {
    if (!OBJECT_META_FIELDS.has(field)) unknown.push(`metadata.${field}`);
  }
  if (def.unknownFields) unknown.push(...def.unknownFields(obj));
  if (unknown.length && mode === 'Strict') {
    throw errors.badRequest(`strict decoding error: ${unknown.map((f) => `unknown field "${f}"`).join(', ')}`);
  }
  for (const field of unknown) {
    if (field.startsWith('metadata.')) delete obj.metadata[field.slice('metadata.'.length)];
    else delete obj[field];
  }
  return mode === 'Warn' ? unknown : [];
}
