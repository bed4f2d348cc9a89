import type { IncomingMessage, ServerResponse } from 'node:http';
import { apiVersionOf, type PodLogParams, type WriteSubresource } from './definition.js';
import { ApiError, deletedStatus, errors } from './errors.js';
import { decodeBody, negotiate, readBody, sendJson } from './http.js';
import type { KubeObject } from './objects.js';
import { queryBool } from './query.js';
import {
  bodyDryRun,
  deleteOptionsOf,
  fieldValidationParam,
  gracePeriodOf,
  parseApplyBody,
  parsePatch,
  patchTypeOf,
  preconditionsOf,
  readDeleteOptions,
  readObject,
  warningHeader,
} from './request-options.js';
import { type HttpCall, listKind, respondObject } from './serve-reads.js';
import { isJsonObject } from './json.js';
import { PATCH_CONTENT_TYPES } from './patch/index.js';
import { asKubeObject, type Change } from './verbs/context.js';

/**
 * The HTTP side of the writes and of the subresources: bodies and query options in, the verb
 * layer's answer out, in kube-apiserver's response shapes (status codes, Status or object, Table).
 */

/** The server's hook that streams a container log from the pod's agent. */
export type PodLogHook = (pod: KubeObject, params: PodLogParams, req: IncomingMessage, res: ServerResponse) => Promise<void>;

export async function serveCreate(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const fieldValidation = fieldValidationParam(url.searchParams.get('fieldValidation'));
  const obj = await readObject(req, fieldValidation);
  const { object, unknownFields } = await verbs.create({ ...ctx, fieldValidation }, request.def, request.namespace, obj);
  respondObject(res, 201, negotiated, request.def, object, 'Metadata', warningHeader(unknownFields));
}

/** The subresources a PUT or PATCH writes through the object's own update path. */
function writeSubresource(name: string | undefined): WriteSubresource | undefined {
  return name === 'status' || name === 'ephemeralcontainers' || name === 'finalize' ? name : undefined;
}

/**
 * kubectl before 1.22 (Debian's 1.20) PUTs the alpha `EphemeralContainers` kind (metadata and the
 * whole list) to pods/ephemeralcontainers; since 1.22 that path takes (and GET answers) a Pod, which
 * such a kubectl reads as an empty list. So the containers it names are added to the stored ones
 * (removing one is refused anyway), then judged by the same rules: one named again must be unchanged.
 */
function legacyEphemeralContainers(obj: KubeObject, current: KubeObject): KubeObject {
  const sent = (obj as { ephemeralContainers?: unknown }).ephemeralContainers;
  const spec = current.spec as { ephemeralContainers?: unknown } | undefined;
  const stored = Array.isArray(spec?.ephemeralContainers) ? (spec.ephemeralContainers as unknown[]) : [];
  const nameOf = (c: unknown): unknown => (isJsonObject(c) ? c.name : undefined);
  const sentByName = new Map((Array.isArray(sent) ? sent : []).map((c) => [nameOf(c), c]));
  const merged = [...stored.map((c) => sentByName.get(nameOf(c)) ?? c), ...[...sentByName.values()].filter((c) => !stored.some((s) => nameOf(s) === nameOf(c)))];
  const { resourceVersion: _ignored, ...metadata } = obj.metadata;
  return { apiVersion: 'v1', kind: 'Pod', metadata, spec: { ephemeralContainers: merged } };
}

export async function serveUpdate(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const fieldValidation = fieldValidationParam(url.searchParams.get('fieldValidation'));
  let obj = await readObject(req, fieldValidation);
  const subresource = writeSubresource(request.subresource);
  if (subresource === 'ephemeralcontainers' && obj.kind === 'EphemeralContainers') {
    obj = legacyEphemeralContainers(obj, await verbs.get(ctx, request.def, request.namespace, request.name!));
  }
  const { object, unknownFields } = await verbs.update({ ...ctx, fieldValidation }, request.def, request.namespace, request.name!, obj, subresource);
  respondObject(res, 200, negotiated, request.def, object, 'Metadata', warningHeader(unknownFields));
}

export async function servePatch(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const patchType = patchTypeOf(req);
  const fieldValidation = fieldValidationParam(url.searchParams.get('fieldValidation'));
  const subresource = writeSubresource(request.subresource);
  if (patchType === 'apply') {
    const config = parseApplyBody(await readBody(req), fieldValidation);
    const { object, unknownFields, created } = await verbs.apply({ ...ctx, fieldValidation }, request.def, request.namespace, request.name!, config, subresource);
    respondObject(res, created ? 201 : 200, negotiated, request.def, object, 'Metadata', warningHeader(unknownFields));
    return;
  }
  if (ctx.force !== undefined) {
    throw errors.invalid('PatchOptions', '', 'meta.k8s.io', [{ reason: 'FieldValueForbidden', message: 'Forbidden: may not be specified for non-apply patch', field: 'force' }]);
  }
  const patch = parsePatch(await readBody(req), fieldValidation);
  const { object, unknownFields } = await verbs.patch(
    { ...ctx, fieldValidation },
    request.def,
    request.namespace,
    request.name!,
    patchType,
    patch,
    subresource,
  );
  respondObject(res, 200, negotiated, request.def, object, 'Metadata', warningHeader(unknownFields));
}

export async function serveDelete(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const { def } = request;
  const name = request.name!;
  const body = await readDeleteOptions(req);
  const options = deleteOptionsOf(body, url.searchParams, { preconditions: true });
  const dryRun = ctx.dryRun === true || bodyDryRun(body);
  const { object, removed } = await verbs.delete({ ...ctx, dryRun }, def, request.namespace, name, options);
  // As kube-apiserver: gone at once is a Status of Success (uid included, for kubectl's --wait),
  // except for kinds that return the deleted object; still there (finalizers, a grace period)
  // is the object, with 202 instead of 200 when the deprecated orphanDependents was false.
  if (removed && !def.returnsDeletedObject) {
    sendJson(res, 200, deletedStatus(def, name, object.metadata.uid));
    return;
  }
  respondObject(res, !removed && options.orphanDependents === false ? 202 : 200, negotiated, def, object, 'Metadata');
}

export async function serveDeleteCollection(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const { def } = request;
  const body = await readDeleteOptions(req);
  const options = deleteOptionsOf(body, url.searchParams, { preconditions: false });
  const deleted = await verbs.deleteCollection(
    ctx,
    def,
    request.namespace,
    { labelSelector: url.searchParams.get('labelSelector'), fieldSelector: url.searchParams.get('fieldSelector') },
    options,
  );
  sendJson(res, 200, { kind: listKind(def), apiVersion: apiVersionOf(def), metadata: {}, items: deleted });
}

/**
 * policy/v1 (and kubectl 1.20's policy/v1beta1) Eviction: deletes the pod, gracefully when it runs
 * on a node, once its PodDisruptionBudget (if any) allows it.
 */
export async function serveEviction(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, request } = call;
  const eviction = asKubeObject(decodeBody(await readBody(req), req.headers['content-type']), 'the eviction');
  if (eviction.kind !== undefined && eviction.kind !== 'Eviction') {
    throw errors.badRequest(`expected an Eviction, got ${String(eviction.kind)}`);
  }
  if (eviction.metadata.name !== undefined && eviction.metadata.name !== request.name) {
    throw errors.badRequest(`name in URL does not match name in Eviction object`);
  }
  const deleteOptions = isJsonObject(eviction.deleteOptions) ? eviction.deleteOptions : {};
  const preconditions = preconditionsOf(deleteOptions);
  const gracePeriodSeconds = gracePeriodOf(deleteOptions);
  await verbs.evict(ctx, request.def, request.namespace, request.name!, {
    ...(preconditions ? { preconditions } : {}),
    ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
  });
  sendJson(res, 201, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 201 });
}

/**
 * `<workload>/scale`: the autoscaling/v1 Scale view of spec.replicas. Reads build it from the
 * workload; writes (PUT, or a patch of the Scale) change only the workload's spec.replicas.
 */
export async function serveScale(call: HttpCall, verb: string): Promise<void> {
  const { verbs, ctx, req, res, request } = call;
  const { def } = request;
  const name = request.name!;
  negotiate(req.headers.accept);
  if (verb === 'get') {
    sendJson(res, 200, await verbs.getScale(ctx, def, request.namespace, name));
    return;
  }
  if (verb !== 'update' && verb !== 'patch') throw errors.methodNotAllowed();
  const body = await readBody(req);
  const patchType = verb === 'patch' ? patchTypeOf(req) : undefined;
  if (patchType === 'apply') throw errors.unsupportedMediaType('application/apply-patch+yaml', PATCH_CONTENT_TYPES.filter((t) => !t.startsWith('application/apply')));
  const change: Change =
    patchType
      ? { type: 'patch', patchType, patch: parsePatch(body) }
      : { type: 'update', object: asKubeObject(decodeBody(body, req.headers['content-type']), 'the request body') };
  sendJson(res, 200, await verbs.updateScale(ctx, def, request.namespace, name, change));
}

/** `serviceaccounts/S/token`: a TokenRequest in, the same with its status (the token) out, 201. */
export async function serveTokenRequest(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, request } = call;
  negotiate(req.headers.accept);
  const body = asKubeObject(decodeBody(await readBody(req), req.headers['content-type']), 'the token request');
  const { object, warnings } = await verbs.createToken(ctx, request.def, request.namespace!, request.name!, body);
  const headers: Record<string, string> = warnings.length
    ? { Warning: warnings.map((w) => `299 - ${JSON.stringify(w)}`).join(', ') }
    : {};
  sendJson(res, 201, object, 'application/json', headers);
}

/** `pods/P/log`: checked by the verb layer, served by the podLogs hook (which reaches the pod's agent). */
export async function serveLog(call: HttpCall, podLogs: PodLogHook | undefined): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const params = url.searchParams;
  const container = params.get('container');
  const tailLines = params.get('tailLines');
  const limitBytes = params.get('limitBytes');
  const { object, params: logParams } = await verbs.podLog(ctx, request.def, request.namespace, request.name!, {
    ...(container ? { container } : {}),
    follow: queryBool(params, 'follow'),
    previous: queryBool(params, 'previous'),
    ...(tailLines !== null ? { tailLines } : {}),
    ...(limitBytes !== null ? { limitBytes } : {}),
  });
  if (!podLogs) {
    throw new ApiError(404, 'NotFound', 'this server does not serve container logs', {});
  }
  await podLogs(object, logParams, req, res);
}
