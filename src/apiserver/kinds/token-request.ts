import {
  type BoundKind,
  type BoundObject,
  type BoundObjectReference,
  boundObjectKind,
  planTokenRequest,
  TokenRequestError,
  type TokenRequestSpec,
} from '../../security/service-account-rules.js';
import type { KindContext, TokenIssuer, TokenStrategy } from '../definition.js';
import { ApiError, errors } from '../errors.js';
import { isJsonObject } from '../json.js';
import { getString, type KubeObject } from '../objects.js';
import { jsonType, undecodable } from './config-data.js';

/**
 * `POST .../serviceaccounts/<name>/token`: a TokenRequest (authentication.k8s.io/v1), as
 * kube-apiserver's TokenREST answers it, in its order: the body's name and namespace must be the
 * URL's, the account must exist, the spec is defaulted and checked (planTokenRequest in
 * src/security/service-account-rules.ts: 600 s minimum, bindings, the 3607 s extension), the
 * bound object is looked up, then the token is signed by the server's TokenIssuer. The answer is
 * the request with `status: {token, expirationTimestamp}`. Nothing is stored.
 */

export const TOKEN_REQUEST_GROUP = 'authentication.k8s.io';
export const TOKEN_REQUEST_API_VERSION = `${TOKEN_REQUEST_GROUP}/v1`;
const KIND = 'TokenRequest';

const rfc3339 = (date: Date): string => date.toISOString().replace(/\.\d{3}Z$/, 'Z');

function cannotUnmarshal(path: string, value: unknown, goType: string): never {
  const field = `${KIND}Spec.${path}`;
  return undecodable(KIND, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${field} of type ${goType}`, path);
}

/** The spec as Go's JSON decoding would take it (a 400 for a wrong type), nulls dropped. */
export function readTokenRequestSpec(request: KubeObject): TokenRequestSpec {
  if (request.kind !== undefined && request.kind !== '' && request.kind !== KIND) {
    throw errors.badRequest(`expected a ${KIND}, got ${String(request.kind)}`);
  }
  if (request.apiVersion !== undefined && request.apiVersion !== '' && request.apiVersion !== TOKEN_REQUEST_API_VERSION) {
    throw errors.badRequest(`a ${KIND} must be ${TOKEN_REQUEST_API_VERSION}, not ${String(request.apiVersion)}`);
  }
  const spec = request.spec;
  if (spec === undefined || spec === null) return {};
  if (!isJsonObject(spec)) return cannotUnmarshal('spec', spec, 'v1.TokenRequestSpec');
  const out: TokenRequestSpec = {};
  const audiences = spec.audiences;
  if (audiences !== undefined && audiences !== null) {
    if (!Array.isArray(audiences)) cannotUnmarshal('spec.audiences', audiences, '[]string');
    (audiences as unknown[]).forEach((a) => typeof a !== 'string' && cannotUnmarshal('spec.audiences', a, 'string'));
    out.audiences = audiences as string[];
  }
  const seconds = spec.expirationSeconds;
  if (seconds !== undefined && seconds !== null) {
    if (typeof seconds !== 'number' || !Number.isSafeInteger(seconds)) {
      undecodable(
        KIND,
        typeof seconds === 'number'
          ? `json: cannot unmarshal number ${seconds} into Go struct field ${KIND}Spec.spec.expirationSeconds of type int64`
          : `json: cannot unmarshal ${jsonType(seconds)} into Go struct field ${KIND}Spec.spec.expirationSeconds of type int64`,
        'spec.expirationSeconds',
      );
    }
    out.expirationSeconds = seconds;
  }
  const ref = spec.boundObjectRef;
  if (ref !== undefined && ref !== null) {
    if (!isJsonObject(ref)) cannotUnmarshal('spec.boundObjectRef', ref, 'v1.BoundObjectReference');
    const bound: BoundObjectReference = {};
    for (const key of ['kind', 'apiVersion', 'name', 'uid'] as const) {
      const v = (ref as Record<string, unknown>)[key];
      if (v === undefined || v === null) continue;
      if (typeof v !== 'string') cannotUnmarshal(`spec.boundObjectRef.${key}`, v, 'string');
      if (v !== '') bound[key] = v as string;
    }
    out.boundObjectRef = bound;
  }
  return out;
}

/** A refusal of the rules as the Status kube-apiserver answers. */
function asApiError(error: TokenRequestError, ref: BoundObjectReference | undefined): ApiError {
  switch (error.status) {
    case 400:
      return errors.badRequest(error.message);
    case 409:
      return new ApiError(409, 'Conflict', error.message, { ...(ref?.name ? { name: ref.name } : {}), kind: ref?.kind ?? '' });
    case 422: {
      const field = error.field;
      return new ApiError(422, 'Invalid', error.message, {
        group: TOKEN_REQUEST_GROUP,
        kind: KIND,
        ...(field ? { causes: [{ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(field.value)}: ${field.detail}`, field: field.path }] } : {}),
      });
    }
  }
}

const BOUND_PLURAL: Record<BoundKind, string> = { Pod: 'pods', Secret: 'secrets', Node: 'nodes' };

async function getCore(context: KindContext, plural: string, namespace: string | undefined, name: string): Promise<KubeObject> {
  const def = context.kinds.lookup('', 'v1', plural);
  if (!def) throw errors.internal(`the ${plural} kind is not served`);
  return context.store.get(def, def.namespaced ? namespace : undefined, name);
}

/** The object a boundObjectRef names (its 404 if missing), with what the rules read of it. */
async function lookUpBound(context: KindContext, namespace: string, ref: BoundObjectReference): Promise<BoundObject> {
  const kind = boundObjectKind(ref);
  const obj = await getCore(context, BOUND_PLURAL[kind], namespace, ref.name ?? '');
  const facts: BoundObject = { kind, name: obj.metadata.name!, uid: obj.metadata.uid! };
  if (kind !== 'Pod') return facts;
  // kube-apiserver's ServiceAccount admission sets `default` on pods that name none.
  facts.serviceAccountName = getString(obj, ['spec', 'serviceAccountName']) || 'default';
  const nodeName = getString(obj, ['spec', 'nodeName']);
  if (nodeName) {
    // The node's UID is recorded when the node can be read; a pod on a node gone is still bound.
    let nodeUid: string | undefined;
    try {
      nodeUid = (await getCore(context, 'nodes', undefined, nodeName)).metadata.uid;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 404)) throw error;
    }
    facts.node = { name: nodeName, ...(nodeUid ? { uid: nodeUid } : {}) };
  }
  return facts;
}

async function createToken(
  context: KindContext,
  target: { namespace: string; name: string },
  request: KubeObject,
  issuer: TokenIssuer,
): Promise<{ object: KubeObject; warnings: string[] }> {
  const { namespace, name } = target;
  const spec = readTokenRequestSpec(request);
  const mismatch = (field: 'name' | 'namespace', value: string, what: string): ApiError =>
    errors.invalid(KIND, name, TOKEN_REQUEST_GROUP, [
      { reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: must match the service account ${what} if specified`, field: `metadata.${field}` },
    ]);
  const bodyName = request.metadata.name;
  if (typeof bodyName === 'string' && bodyName !== '' && bodyName !== name) throw mismatch('name', bodyName, 'name');
  const bodyNamespace = request.metadata.namespace;
  if (typeof bodyNamespace === 'string' && bodyNamespace !== '' && bodyNamespace !== namespace) throw mismatch('namespace', bodyNamespace, 'namespace');

  const account = await getCore(context, 'serviceaccounts', namespace, name);
  const serviceAccount = { namespace, name, uid: account.metadata.uid! };
  const ref = spec.boundObjectRef ?? undefined;
  try {
    // The spec's own rules (audiences, lifetime) come before the bound object is read, as in kube.
    planTokenRequest({ spec: { ...spec, boundObjectRef: null }, serviceAccount, apiAudiences: issuer.apiAudiences });
    const bound = ref ? await lookUpBound(context, namespace, ref) : undefined;
    const plan = planTokenRequest({
      spec,
      serviceAccount,
      ...(bound ? { bound } : {}),
      apiAudiences: issuer.apiAudiences,
      ...(issuer.maxExpirationSeconds !== undefined ? { maxExpirationSeconds: issuer.maxExpirationSeconds } : {}),
    });
    // One instant for the token's iat and the status, so expirationTimestamp is never after exp.
    const now = new Date(Math.floor(Date.now() / 1000) * 1000);
    const { token } = await issuer.issue({
      namespace,
      serviceAccount: { name, uid: serviceAccount.uid },
      audiences: plan.audiences,
      expirationSeconds: plan.tokenExpirationSeconds,
      ...(plan.warnAfterSeconds ? { warnAfterSeconds: plan.warnAfterSeconds } : {}),
      ...(plan.pod ? { pod: plan.pod } : {}),
      ...(plan.secret ? { secret: plan.secret } : {}),
      ...(plan.node ? { node: plan.node } : {}),
      now,
    });
    const object: KubeObject = {
      kind: KIND,
      apiVersion: TOKEN_REQUEST_API_VERSION,
      metadata: { name, namespace, creationTimestamp: rfc3339(now) },
      spec: {
        audiences: plan.audiences,
        expirationSeconds: plan.expirationSeconds,
        ...(ref ? { boundObjectRef: ref } : {}),
      },
      status: { token, expirationTimestamp: rfc3339(new Date(now.getTime() + plan.expirationSeconds * 1000)) },
    };
    return { object, warnings: plan.warnings };
  } catch (error) {
    if (error instanceof TokenRequestError) throw asApiError(error, ref);
    throw error;
  }
}

export const TOKEN_REQUEST_STRATEGY: TokenStrategy = { create: createToken };
