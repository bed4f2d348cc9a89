import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, randomUUID } from 'node:crypto';
import { calculateJwkThumbprint, decodeJwt, decodeProtectedHeader, errors as joseErrors, exportJWK, type JWK, jwtVerify, SignJWT } from 'jose';

/**
 * ServiceAccount tokens: bound, expiring JWTs in the layout kube-apiserver issues (TokenRequest),
 * signed and verified with `jose`. This file is the crypto and the claims; which objects a token
 * may name, the checks against the store and the resulting user are in
 * service-account-rules.ts; sharing the key between servers is src/cluster/service-account-key.ts.
 *
 * Claims (what in-cluster clients and external verifiers read):
 *   iss  the issuer URL            sub  system:serviceaccount:<namespace>:<name>
 *   aud  audiences (always a list) exp, iat, nbf  seconds since the epoch
 *   jti  a random UUID (the credential id)
 *   kubernetes.io  { namespace, serviceaccount: {name, uid}, pod?|secret?, node?, warnafter? }
 */

/** `expirationSeconds` below this is refused ("may not specify a duration less than 10 minutes"). */
export const MIN_EXPIRATION_SECONDS = 600;
/** …and above this ("may not specify a duration larger than 2^32 seconds"). */
export const MAX_EXPIRATION_SECONDS = 2 ** 32;
export const DEFAULT_EXPIRATION_SECONDS = 3600;
/**
 * What the kubelet asks for when it projects a token into a pod (1 h + 7 s). The server answers
 * such a pod-bound request for the API audiences with a token valid for a year whose
 * `warnafter` is the 3607 s mark, so clients that never re-read the file keep working while
 * their staleness is visible.
 */
export const WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS = 3607;
export const EXPIRATION_EXTENSION_SECONDS = 365 * 24 * 60 * 60;
/** Clock skew allowed on exp, nbf and iat, and the grace for bound objects being deleted (kube: 60 s). */
export const TOKEN_LEEWAY_SECONDS = 60;

/** The issuer K3s sets: the in-cluster API service's name under the cluster domain. */
export function defaultIssuer(clusterDomain = 'cluster.local'): string {
  return `https://kubernetes.default.svc.${clusterDomain}`;
}

/**
 * Why a `service-account-issuer` cannot be used, or undefined: kube-apiserver wants a URL, and
 * OpenID discovery (what outside verifiers fetch from `<issuer>/.well-known/…`) an https one.
 */
export function issuerProblem(issuer: string): string | undefined {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    return `${JSON.stringify(issuer)} is not a URL`;
  }
  if (url.protocol !== 'https:') return `${JSON.stringify(issuer)} must be an https URL`;
  if (url.search || url.hash) return `${JSON.stringify(issuer)} may not have a query or a fragment`;
  return undefined;
}

/** The API server's own audiences, as K3s sets them: the issuer, plus the distribution's name. */
export function defaultApiAudiences(issuer: string): string[] {
  return [issuer, 'drover'];
}

export const SERVICE_ACCOUNT_USERNAME_PREFIX = 'system:serviceaccount:';

export interface ObjectRef {
  name: string;
  uid: string;
}

export interface KubernetesClaims {
  namespace: string;
  serviceaccount: ObjectRef;
  pod?: ObjectRef;
  secret?: ObjectRef;
  node?: ObjectRef;
  /** For the 3607 s extension: after this (seconds since the epoch) the token counts as stale. */
  warnafter?: number;
}

export interface ServiceAccountClaims {
  aud: string[];
  exp: number;
  iat: number;
  iss: string;
  jti: string;
  'kubernetes.io': KubernetesClaims;
  nbf: number;
  sub: string;
}

export type SigningAlgorithm = 'ES256' | 'RS256';

/** A public key tokens may be verified with. */
export interface VerifyingKey {
  alg: SigningAlgorithm;
  /** RFC 7638 thumbprint of the public JWK (base64url SHA-256). */
  kid: string;
  publicKey: KeyObject;
  /** The public JWK with kid, alg and use: what /openid/v1/jwks publishes. */
  publicJwk: JWK;
}

export interface SigningKey extends VerifyingKey {
  privateKey: KeyObject;
}

export class ServiceAccountKeyError extends Error {
  override name = 'ServiceAccountKeyError';
}

/** A new signing key: ECDSA P-256 (ES256), PKCS#8 PEM, like the rest of Drover's keys. */
export function generateServiceAccountKeyPem(): string {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
}

function algorithmOf(key: KeyObject): SigningAlgorithm {
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return 'ES256';
  if (key.asymmetricKeyType === 'rsa' && (key.asymmetricKeyDetails?.modulusLength ?? 0) >= 2048) return 'RS256';
  throw new ServiceAccountKeyError(
    `service account keys must be ECDSA P-256 or RSA of at least 2048 bits, not ${key.asymmetricKeyType ?? 'unknown'}`,
  );
}

async function describePublic(publicKey: KeyObject): Promise<VerifyingKey> {
  const alg = algorithmOf(publicKey);
  const jwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(jwk, 'sha256');
  return { alg, kid, publicKey, publicJwk: { ...jwk, kid, alg, use: 'sig' } };
}

/** The signing key from its PEM (PKCS#8 or SEC1/PKCS#1). */
export async function signingKeyFromPem(pem: string): Promise<SigningKey> {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem);
  } catch (error) {
    throw new ServiceAccountKeyError(`the service account key is not a readable private key: ${(error as Error).message}`);
  }
  return { ...(await describePublic(createPublicKey(privateKey))), privateKey };
}

/** A key to verify with from a PEM holding a public key (SPKI) or a private key. */
export async function verifyingKeyFromPem(pem: string): Promise<VerifyingKey> {
  try {
    return await describePublic(createPublicKey(pem));
  } catch (error) {
    if (error instanceof ServiceAccountKeyError) throw error;
    throw new ServiceAccountKeyError(`not a readable public key: ${(error as Error).message}`);
  }
}

export function serviceAccountUsername(namespace: string, name: string): string {
  return `${SERVICE_ACCOUNT_USERNAME_PREFIX}${namespace}:${name}`;
}

/** Namespace and name from `system:serviceaccount:<ns>:<name>`, or undefined for other users. */
export function parseServiceAccountUsername(username: string): { namespace: string; name: string } | undefined {
  if (!username.startsWith(SERVICE_ACCOUNT_USERNAME_PREFIX)) return undefined;
  const [namespace, name, ...rest] = username.slice(SERVICE_ACCOUNT_USERNAME_PREFIX.length).split(':');
  if (!namespace || !name || rest.length > 0) return undefined;
  return { namespace, name };
}

export interface IssueTokenRequest {
  issuer: string;
  namespace: string;
  serviceAccount: ObjectRef;
  audiences: readonly string[];
  /** Lifetime written into `exp` (already planned: see planTokenRequest). */
  expirationSeconds: number;
  /** Sets `kubernetes.io.warnafter` to now + this (the 3607 s extension). */
  warnAfterSeconds?: number;
  /** At most one of pod and secret; node alone, or with a pod (the pod's node). */
  pod?: ObjectRef;
  secret?: ObjectRef;
  node?: ObjectRef;
  now?: Date;
}

export interface IssuedToken {
  token: string;
  claims: ServiceAccountClaims;
}

export async function issueServiceAccountToken(key: SigningKey, request: IssueTokenRequest): Promise<IssuedToken> {
  if (request.secret && (request.pod || request.node)) {
    throw new Error('internal error: a token can be bound to one object kind only');
  }
  const now = Math.floor((request.now ?? new Date()).getTime() / 1000);
  const kubernetes: KubernetesClaims = {
    namespace: request.namespace,
    serviceaccount: { name: request.serviceAccount.name, uid: request.serviceAccount.uid },
    ...(request.pod ? { pod: { ...request.pod } } : {}),
    ...(request.secret ? { secret: { ...request.secret } } : {}),
    ...(request.node ? { node: { ...request.node } } : {}),
    ...(request.warnAfterSeconds ? { warnafter: now + request.warnAfterSeconds } : {}),
  };
  const claims: ServiceAccountClaims = {
    aud: [...request.audiences],
    exp: now + request.expirationSeconds,
    iat: now,
    iss: request.issuer,
    jti: randomUUID(),
    'kubernetes.io': kubernetes,
    nbf: now,
    sub: serviceAccountUsername(request.namespace, request.serviceAccount.name),
  };
  const token = await new SignJWT({ ...claims }).setProtectedHeader({ alg: key.alg, kid: key.kid }).sign(key.privateKey);
  return { token, claims };
}

export type TokenErrorReason =
  /** Not a JWT, or not from an issuer this server accepts: another authenticator may know it. */
  | 'not-recognised'
  | 'invalid-signature'
  | 'expired'
  | 'not-yet-valid'
  | 'issued-in-future'
  | 'invalid-issuer'
  | 'invalid-audience'
  | 'invalid-claims'
  /** The follow-up checks (service-account-rules.ts): the account or bound object is gone or replaced. */
  | 'not-found'
  | 'uid-mismatch'
  | 'deleted'
  | 'invalidated';

/** Why a token was refused, with kube-apiserver's wording as the message. */
export class ServiceAccountTokenError extends Error {
  override name = 'ServiceAccountTokenError';
  constructor(
    readonly reason: TokenErrorReason,
    message: string,
  ) {
    super(message);
  }

  /** False when the token is simply not ours: the caller should let other authenticators try. */
  get recognised(): boolean {
    return this.reason !== 'not-recognised';
  }
}

/** Go's %q of a []string, which kube's audience message uses: ["a" "b"]. */
export function quoteList(values: readonly string[]): string {
  return `[${values.map((v) => JSON.stringify(v)).join(' ')}]`;
}

export interface VerifyOptions {
  /** Keys to verify with: the signing key, plus any still accepted after a key change. */
  keys: readonly VerifyingKey[];
  /** Issuers accepted (the first is the one this cluster issues with). */
  issuers: readonly string[];
  /** The API server's audiences: assumed for a token without `aud`, and the default target. */
  apiAudiences: readonly string[];
  /** Audiences the caller needs (TokenReview's spec.audiences); default apiAudiences. */
  audiences?: readonly string[];
  now?: Date;
  leewaySeconds?: number;
}

export interface VerifiedToken {
  claims: ServiceAccountClaims;
  /** The token's audiences that the caller asked for (never empty). */
  audiences: string[];
}

/**
 * Verify signature, issuer, audience and times; the checks that need the store come after
 * (checkTokenObjects). Errors carry kube's wording; `not-recognised` (malformed, or another
 * issuer) means "not a service account token of this cluster", not "a bad one".
 */
export async function verifyServiceAccountToken(token: string, options: VerifyOptions): Promise<VerifiedToken> {
  const now = options.now ?? new Date();
  const leeway = options.leewaySeconds ?? TOKEN_LEEWAY_SECONDS;
  // Like kube, look at the (unverified) issuer first, so tokens of other issuers are passed on.
  let unverifiedIssuer: unknown;
  let kid: string | undefined;
  try {
    unverifiedIssuer = decodeJwt(token).iss;
    kid = decodeProtectedHeader(token).kid;
  } catch {
    throw new ServiceAccountTokenError('not-recognised', 'not a JWT');
  }
  if (typeof unverifiedIssuer !== 'string' || !options.issuers.includes(unverifiedIssuer)) {
    throw new ServiceAccountTokenError('not-recognised', `token issuer ${JSON.stringify(unverifiedIssuer ?? '')} is not accepted`);
  }
  const candidates = kid ? options.keys.filter((k) => k.kid === kid) : options.keys;
  if (candidates.length === 0) throw new ServiceAccountTokenError('invalid-signature', 'invalid signature, no keys found');

  let payload: Record<string, unknown> | undefined;
  for (const key of candidates) {
    try {
      payload = (
        await jwtVerify(token, key.publicKey, {
          algorithms: [key.alg],
          issuer: [...options.issuers],
          clockTolerance: leeway,
          currentDate: now,
          requiredClaims: ['exp'],
        })
      ).payload;
      break;
    } catch (error) {
      if (error instanceof joseErrors.JWSSignatureVerificationFailed || error instanceof joseErrors.JOSEAlgNotAllowed) continue;
      throw translate(error);
    }
  }
  if (!payload) throw new ServiceAccountTokenError('invalid-signature', 'invalid signature');

  const iat = payload['iat'];
  if (typeof iat === 'number' && iat > now.getTime() / 1000 + leeway) {
    throw new ServiceAccountTokenError('issued-in-future', 'service account token is issued in the future');
  }
  const claims = claimsOf(payload);
  const tokenAudiences = claims.aud.length > 0 ? claims.aud : [...options.apiAudiences];
  const wanted = options.audiences && options.audiences.length > 0 ? options.audiences : options.apiAudiences;
  const audiences = tokenAudiences.filter((a) => wanted.includes(a));
  if (audiences.length === 0) {
    throw new ServiceAccountTokenError(
      'invalid-audience',
      `token audiences ${quoteList(tokenAudiences)} is invalid for the target audiences ${quoteList(wanted)}`,
    );
  }
  return { claims, audiences };
}

function translate(error: unknown): Error {
  if (error instanceof joseErrors.JWTExpired) return new ServiceAccountTokenError('expired', 'service account token has expired');
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    switch (error.claim) {
      case 'nbf':
        return new ServiceAccountTokenError('not-yet-valid', 'service account token is not valid yet');
      case 'iss':
        return new ServiceAccountTokenError('invalid-issuer', `token issuer ${JSON.stringify(error.payload.iss ?? '')} is invalid`);
      default:
        return new ServiceAccountTokenError('invalid-claims', `service account token claims could not be validated: ${error.message}`);
    }
  }
  if (error instanceof joseErrors.JOSEError) return new ServiceAccountTokenError('not-recognised', `not a valid JWT: ${error.message}`);
  return error as Error;
}

const isRef = (value: unknown): value is ObjectRef =>
  typeof value === 'object' && value !== null && typeof (value as ObjectRef).name === 'string' && typeof (value as ObjectRef).uid === 'string';

/** The verified payload as claims, refusing a token without the private claim we need. */
function claimsOf(payload: Record<string, unknown>): ServiceAccountClaims {
  const invalid = (what: string): ServiceAccountTokenError =>
    new ServiceAccountTokenError('invalid-claims', `service account token claims could not be validated: ${what}`);
  const k = payload['kubernetes.io'] as Partial<KubernetesClaims> | undefined;
  if (!k || typeof k !== 'object' || typeof k.namespace !== 'string' || !isRef(k.serviceaccount)) {
    throw invalid('missing the kubernetes.io claim');
  }
  for (const field of ['pod', 'secret', 'node'] as const) {
    if (k[field] !== undefined && !isRef(k[field])) throw invalid(`kubernetes.io.${field} is malformed`);
  }
  const sub = payload['sub'];
  if (sub !== serviceAccountUsername(k.namespace, k.serviceaccount.name)) throw invalid('sub does not name the service account');
  const aud = payload['aud'];
  const audiences = aud === undefined ? [] : typeof aud === 'string' ? [aud] : aud;
  if (!Array.isArray(audiences) || !audiences.every((a) => typeof a === 'string')) throw invalid('aud is malformed');
  const num = (name: string): number => (typeof payload[name] === 'number' ? (payload[name] as number) : 0);
  return {
    aud: audiences,
    exp: num('exp'),
    iat: num('iat'),
    iss: payload['iss'] as string,
    jti: typeof payload['jti'] === 'string' ? payload['jti'] : '',
    'kubernetes.io': {
      namespace: k.namespace,
      serviceaccount: { name: k.serviceaccount.name, uid: k.serviceaccount.uid },
      ...(k.pod ? { pod: { name: k.pod.name, uid: k.pod.uid } } : {}),
      ...(k.secret ? { secret: { name: k.secret.name, uid: k.secret.uid } } : {}),
      ...(k.node ? { node: { name: k.node.name, uid: k.node.uid } } : {}),
      ...(typeof k.warnafter === 'number' ? { warnafter: k.warnafter } : {}),
    },
    nbf: num('nbf'),
    sub,
  };
}

// ---------------------------------------------------------------------------------------------
// Discovery for external verifiers: /.well-known/openid-configuration and /openid/v1/jwks
// ---------------------------------------------------------------------------------------------

export const OPENID_CONFIGURATION_PATH = '/.well-known/openid-configuration';
export const JWKS_PATH = '/openid/v1/jwks';
/** kube serves both with this, and JWKS as application/jwk-set+json. */
export const DISCOVERY_CACHE_CONTROL = 'public, max-age=3600';
export const JWKS_CONTENT_TYPE = 'application/jwk-set+json';

/** Where the JWKS is, by default: under the API server's external URL. */
export function defaultJwksUri(apiServerUrl: string): string {
  return `${apiServerUrl.replace(/\/+$/, '')}${JWKS_PATH}`;
}

export interface OpenIdConfiguration {
  issuer: string;
  jwks_uri: string;
  response_types_supported: string[];
  subject_types_supported: string[];
  id_token_signing_alg_values_supported: string[];
}

export function openIdConfiguration(issuer: string, jwksUri: string, keys: readonly VerifyingKey[]): OpenIdConfiguration {
  return {
    issuer,
    jwks_uri: jwksUri,
    response_types_supported: ['id_token'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: [...new Set(keys.map((k) => k.alg))].sort(),
  };
}

/** The public keys only (never d, p, q…): exportJWK of a public KeyObject has none to leak. */
export function jwks(keys: readonly VerifyingKey[]): { keys: JWK[] } {
  return { keys: keys.map((k) => ({ ...k.publicJwk })) };
}
