import {
  DEFAULT_EXPIRATION_SECONDS,
  EXPIRATION_EXTENSION_SECONDS,
  MAX_EXPIRATION_SECONDS,
  MIN_EXPIRATION_SECONDS,
  type ObjectRef,
  type ServiceAccountClaims,
  ServiceAccountTokenError,
  serviceAccountUsername,
  TOKEN_LEEWAY_SECONDS,
  WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS,
} from './service-account-tokens.js';

/**
 * The rules around ServiceAccount tokens that are not cryptography, as pure functions over
 * objects the caller looked up, so the TokenRequest handler and the authenticator stay thin:
 *
 * - planTokenRequest: a TokenRequest's spec → what to put in the token (defaults, the 600 s
 *   minimum, the 3607 s extension, the optional cap), or a typed 4xx;
 * - tokenLookups + checkTokenObjects: after verifyServiceAccountToken, the account (same UID)
 *   and the bound object (same UID, not deleted for longer than the leeway) must still exist;
 * - serviceAccountUser: the user such a token authenticates as.
 */

/** A refused TokenRequest: the HTTP status and Kubernetes reason the API layer answers with. */
export class TokenRequestError extends Error {
  override name = 'TokenRequestError';
  constructor(
    readonly status: 400 | 409 | 422,
    readonly reason: 'BadRequest' | 'Conflict' | 'Invalid',
    message: string,
    /** For Invalid: the field and value, as kube's field error shows them. */
    readonly field?: { path: string; value: unknown; detail: string },
  ) {
    super(message);
  }
}

export type BoundKind = 'Pod' | 'Secret' | 'Node';

export interface BoundObjectReference {
  kind?: string;
  apiVersion?: string;
  name?: string;
  uid?: string;
}

export interface TokenRequestSpec {
  audiences?: string[] | null;
  expirationSeconds?: number | null;
  boundObjectRef?: BoundObjectReference | null;
}

/** Go's GroupVersionKind.String(): "/v1, Kind=ConfigMap", "apps/v1, Kind=Deployment". */
function gvkString(ref: BoundObjectReference): string {
  const apiVersion = ref.apiVersion ?? '';
  const slash = apiVersion.indexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  return `${group}/${version}, Kind=${ref.kind ?? ''}`;
}

/**
 * Which kind a boundObjectRef names, so the caller knows what to look up (a missing object is the
 * lookup's own 404). Only core Pod, Secret and Node may be bound; anything else is a 400.
 */
export function boundObjectKind(ref: BoundObjectReference): BoundKind {
  const apiVersion = ref.apiVersion ?? '';
  const group = apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '';
  if (group === '' && (ref.kind === 'Pod' || ref.kind === 'Secret' || ref.kind === 'Node')) return ref.kind;
  throw new TokenRequestError(400, 'BadRequest', `cannot bind token to object of type ${gvkString(ref)}`);
}

/** The parts of a stored object the rules read. */
export interface ObjectFacts {
  name: string;
  uid: string;
  /** RFC 3339, when the object is being deleted. */
  deletionTimestamp?: string;
}

export interface BoundObject extends ObjectFacts {
  kind: BoundKind;
  /** Pods only: spec.serviceAccountName (must be the requesting account). */
  serviceAccountName?: string;
  /** Pods only: the node the pod is bound to, recorded in the token (uid may be unknown). */
  node?: { name: string; uid?: string };
}

export interface TokenRequestPlanInput {
  spec: TokenRequestSpec;
  serviceAccount: { namespace: string; name: string; uid: string };
  /** The object spec.boundObjectRef names, looked up by the caller (see boundObjectKind). */
  bound?: BoundObject;
  apiAudiences: readonly string[];
  /** The server's cap on lifetimes (kube's --service-account-max-token-expiration); none when absent. */
  maxExpirationSeconds?: number;
  /** The 3607 s extension (kube's --service-account-extend-token-expiration, default on). */
  extendExpiration?: boolean;
}

export interface TokenRequestPlan {
  audiences: string[];
  /** What status.expirationTimestamp reports: now + this. */
  expirationSeconds: number;
  /** What `exp` gets: the same, or a year for the 3607 s extension. */
  tokenExpirationSeconds: number;
  warnAfterSeconds?: number;
  pod?: ObjectRef;
  secret?: ObjectRef;
  node?: ObjectRef;
  /** Warnings for the response's Warning header (a shortened lifetime). */
  warnings: string[];
}

/** Decide what a TokenRequest gets, in kube's order: defaults, validation, binding, cap, extension. */
export function planTokenRequest(input: TokenRequestPlanInput): TokenRequestPlan {
  const { spec, serviceAccount } = input;
  const audiences = spec.audiences && spec.audiences.length > 0 ? [...spec.audiences] : [...input.apiAudiences];
  let expirationSeconds = spec.expirationSeconds ?? DEFAULT_EXPIRATION_SECONDS;
  const invalid = (detail: string): TokenRequestError =>
    new TokenRequestError(
      422,
      'Invalid',
      `TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: ${expirationSeconds}: ${detail}`,
      { path: 'spec.expirationSeconds', value: expirationSeconds, detail },
    );
  if (!Number.isInteger(expirationSeconds)) throw invalid('must be a whole number of seconds');
  if (expirationSeconds < MIN_EXPIRATION_SECONDS) throw invalid('may not specify a duration less than 10 minutes');
  if (expirationSeconds > MAX_EXPIRATION_SECONDS) throw invalid('may not specify a duration larger than 2^32 seconds');

  const plan: TokenRequestPlan = { audiences, expirationSeconds, tokenExpirationSeconds: expirationSeconds, warnings: [] };
  const ref = spec.boundObjectRef;
  if (ref) {
    const kind = boundObjectKind(ref);
    const bound = input.bound;
    if (!bound || bound.kind !== kind || bound.name !== ref.name) {
      throw new Error(`internal error: the caller must look up the ${kind} ${ref.name ?? ''} the token is bound to`);
    }
    if (kind === 'Pod' && bound.serviceAccountName !== serviceAccount.name) {
      throw new TokenRequestError(
        400,
        'BadRequest',
        `cannot bind token for serviceaccount "${serviceAccount.name}" to pod running with different serviceaccount name.`,
      );
    }
    if (ref.uid && ref.uid !== bound.uid) {
      throw new TokenRequestError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${kind} "${bound.name}": the UID in the bound object reference (${ref.uid}) does not match the UID in record. The object might have been deleted and then recreated`,
      );
    }
    const self = { name: bound.name, uid: bound.uid };
    if (kind === 'Pod') {
      plan.pod = self;
      if (bound.node) plan.node = { name: bound.node.name, uid: bound.node.uid ?? '' };
    } else if (kind === 'Secret') plan.secret = self;
    else plan.node = self;
  }

  if (input.maxExpirationSeconds && input.maxExpirationSeconds > 0 && expirationSeconds > input.maxExpirationSeconds) {
    plan.warnings.push(`requested expiration of ${expirationSeconds} seconds shortened to ${input.maxExpirationSeconds} seconds`);
    expirationSeconds = input.maxExpirationSeconds;
    plan.expirationSeconds = plan.tokenExpirationSeconds = expirationSeconds;
  }

  // The kubelet's projected token: pod-bound, exactly 3607 s, only API audiences.
  const apiOnly = audiences.every((a) => input.apiAudiences.includes(a));
  if ((input.extendExpiration ?? true) && plan.pod && expirationSeconds === WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS && apiOnly) {
    plan.warnAfterSeconds = expirationSeconds;
    plan.tokenExpirationSeconds = EXPIRATION_EXTENSION_SECONDS;
  }
  return plan;
}

/** What the authenticator must look up for a verified token (node only when not pod-bound). */
export interface TokenLookups {
  namespace: string;
  serviceAccount: string;
  secret?: string;
  pod?: string;
  node?: string;
}

export function tokenLookups(claims: ServiceAccountClaims): TokenLookups {
  const k = claims['kubernetes.io'];
  return {
    namespace: k.namespace,
    serviceAccount: k.serviceaccount.name,
    ...(k.secret ? { secret: k.secret.name } : {}),
    ...(k.pod ? { pod: k.pod.name } : {}),
    ...(k.node && !k.pod ? { node: k.node.name } : {}),
  };
}

/** What the lookups found (undefined: not found). */
export interface FoundObjects {
  serviceAccount?: ObjectFacts;
  secret?: ObjectFacts;
  pod?: ObjectFacts;
  node?: ObjectFacts;
}

/** Who a valid token speaks for. */
export interface ServiceAccountInfo {
  namespace: string;
  name: string;
  uid: string;
  podName?: string;
  podUid?: string;
  nodeName?: string;
  nodeUid?: string;
  /** `JTI=<jti>`, the credential id kube reports. */
  credentialId?: string;
  /** Past the 3607 s mark of an extended token (kube adds the stale-token audit annotation). */
  stale: boolean;
}

/**
 * The checks against the store: the account exists with the token's UID, a bound secret or pod
 * (or node, for node-bound tokens) exists with its UID and has not been deleting for longer than
 * the leeway. Errors in kube's words.
 */
export function checkTokenObjects(claims: ServiceAccountClaims, found: FoundObjects, now = new Date()): ServiceAccountInfo {
  const k = claims['kubernetes.io'];
  const deletedLongAgo = (facts: ObjectFacts): boolean =>
    facts.deletionTimestamp !== undefined && Date.parse(facts.deletionTimestamp) < now.getTime() - TOKEN_LEEWAY_SECONDS * 1000;
  const invalidated = (): ServiceAccountTokenError => new ServiceAccountTokenError('invalidated', 'service account token has been invalidated');

  const sa = found.serviceAccount;
  if (!sa) throw new ServiceAccountTokenError('not-found', `serviceaccounts "${k.serviceaccount.name}" not found`);
  if (sa.uid !== k.serviceaccount.uid) {
    throw new ServiceAccountTokenError('uid-mismatch', `service account UID (${sa.uid}) does not match claim (${k.serviceaccount.uid})`);
  }
  if (deletedLongAgo(sa)) {
    throw new ServiceAccountTokenError('deleted', `service account ${k.namespace}/${k.serviceaccount.name} has been deleted`);
  }

  const bound = (what: 'secret' | 'pod' | 'node', ref: ObjectRef, facts: ObjectFacts | undefined): void => {
    if (!facts) throw invalidated();
    if (facts.uid !== ref.uid) {
      throw new ServiceAccountTokenError('uid-mismatch', `${what} UID (${facts.uid}) does not match service account ${what} ref claim (${ref.uid})`);
    }
    if (deletedLongAgo(facts)) throw invalidated();
  };
  if (k.secret) bound('secret', k.secret, found.secret);
  if (k.pod) bound('pod', k.pod, found.pod);
  if (k.node && !k.pod) bound('node', k.node, found.node);

  return {
    namespace: k.namespace,
    name: k.serviceaccount.name,
    uid: k.serviceaccount.uid,
    ...(k.pod ? { podName: k.pod.name, podUid: k.pod.uid } : {}),
    ...(k.node ? { nodeName: k.node.name, nodeUid: k.node.uid } : {}),
    ...(claims.jti ? { credentialId: `JTI=${claims.jti}` } : {}),
    stale: k.warnafter !== undefined && now.getTime() / 1000 > k.warnafter,
  };
}

/** The extra keys kube puts on a service account's user. */
export const EXTRA_POD_NAME = 'authentication.kubernetes.io/pod-name';
export const EXTRA_POD_UID = 'authentication.kubernetes.io/pod-uid';
export const EXTRA_NODE_NAME = 'authentication.kubernetes.io/node-name';
export const EXTRA_NODE_UID = 'authentication.kubernetes.io/node-uid';
export const EXTRA_CREDENTIAL_ID = 'authentication.kubernetes.io/credential-id';

export interface ServiceAccountUser {
  name: string;
  uid: string;
  groups: string[];
  extra: Record<string, string[]>;
}

/** Structurally a UserInfo (name, groups) plus uid and extra, as TokenReview and whoami show them. */
export function serviceAccountUser(info: ServiceAccountInfo): ServiceAccountUser {
  const extra: Record<string, string[]> = {};
  if (info.podName) extra[EXTRA_POD_NAME] = [info.podName];
  if (info.podUid) extra[EXTRA_POD_UID] = [info.podUid];
  if (info.nodeName) extra[EXTRA_NODE_NAME] = [info.nodeName];
  if (info.nodeUid) extra[EXTRA_NODE_UID] = [info.nodeUid];
  if (info.credentialId) extra[EXTRA_CREDENTIAL_ID] = [info.credentialId];
  return {
    name: serviceAccountUsername(info.namespace, info.name),
    uid: info.uid,
    groups: ['system:serviceaccounts', `system:serviceaccounts:${info.namespace}`, 'system:authenticated'],
    extra,
  };
}
