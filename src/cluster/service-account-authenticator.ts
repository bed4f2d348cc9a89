import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { type Authenticator, bearerToken, type UserInfo } from '../apiserver/auth.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS, type ResourceRef, SECRETS, SERVICEACCOUNTS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { checkTokenObjects, type ObjectFacts, serviceAccountUser, tokenLookups } from '../security/service-account-rules.js';
import {
  ServiceAccountTokenError,
  TOKEN_LEEWAY_SECONDS,
  type VerifiedToken,
  verifyServiceAccountToken,
  type VerifyingKey,
} from '../security/service-account-tokens.js';

/**
 * The ServiceAccount token authenticator, as kube-apiserver's: a bearer token that is a JWT of
 * this cluster's issuer is verified (signature by `kid`, times with 60 s of leeway, audiences:
 * verifyServiceAccountToken), then the account it names is read, and the pod, Secret or node it
 * is bound to: each must exist with the UID in the token and not have been deleting for longer
 * than the leeway (checkTokenObjects). So a token dies with its account, and a pod-bound one with
 * its pod; a re-created account or pod has a new UID and does not revive old tokens.
 *
 * Reads go to the store each time, not to a cache, so a deletion is effective from the next
 * request on, on every server. What is cached is only the signature check of a token already
 * verified (for up to 10 s, never past its expiry plus the leeway): it is most of the cost of a
 * request (bench/service-account-auth.ts) and cannot change.
 *
 * Tokens that are not JWTs, or JWTs of another issuer, are not this authenticator's: it answers
 * undefined and the next authenticator tries (the admin token and node credentials are random
 * hex, client certificates carry no token). A token it recognises but refuses is undefined too
 * (a 401 in the end); the reason is logged at debug, as a caller learns none of it.
 */

export interface ServiceAccountAuthenticatorOptions {
  client: ApiClient;
  /** Keys tokens may be signed with (the cluster's signing key). */
  keys: readonly VerifyingKey[];
  /** Issuers accepted; the first is the one this cluster issues with. */
  issuers: readonly string[];
  /** The API server's audiences: a token must carry one of them. */
  apiAudiences: readonly string[];
  logger: Logger;
  /** Wall time; tests pass a fixed one. */
  now?: () => Date;
}

/** The user and what the token was good for (TokenReview reports the audiences). */
export interface AuthenticatedToken {
  user: UserInfo;
  audiences: string[];
  /** Past the 3607 s mark of an extended token: kube audits it as stale. */
  stale: boolean;
}

const facts = (obj: KubeObject | undefined): ObjectFacts | undefined =>
  obj
    ? {
        name: obj.metadata.name ?? '',
        uid: obj.metadata.uid ?? '',
        ...(obj.metadata.deletionTimestamp ? { deletionTimestamp: obj.metadata.deletionTimestamp } : {}),
      }
    : undefined;

/** How long a verified signature is reused, and for how many tokens at most. */
const VERIFIED_TTL_MS = 10_000;
const VERIFIED_MAX = 4096;

export class ServiceAccountAuthenticator implements Authenticator {
  private readonly now: () => Date;
  /** SHA-256 of a token → its verification for the API audiences, and until when it may be reused. */
  private readonly verified = new Map<string, { verified: VerifiedToken; until: number }>();

  constructor(private readonly options: ServiceAccountAuthenticatorOptions) {
    this.now = options.now ?? (() => new Date());
  }

  async authenticate(req: IncomingMessage): Promise<UserInfo | undefined> {
    const token = bearerToken(req);
    // A JWT is three dot-separated parts; anything else is another authenticator's.
    if (!token || token.split('.').length !== 3) return undefined;
    try {
      return (await this.authenticateToken(token)).user;
    } catch (error) {
      if (!(error instanceof ServiceAccountTokenError)) throw error;
      if (error.recognised) this.options.logger.debug({ reason: error.reason }, `refused a service account token: ${error.message}`);
      return undefined;
    }
  }

  /**
   * Verify a token for `audiences` (default: the API's) and check it against the store. Throws
   * ServiceAccountTokenError, with kube's wording, when it is not good (`not-recognised` when it
   * is not a token of this cluster at all).
   */
  async authenticateToken(token: string, audiences?: readonly string[]): Promise<AuthenticatedToken> {
    const now = this.now();
    const verified = audiences ? await this.verify(token, now, audiences) : await this.verifyCached(token, now);
    const lookups = tokenLookups(verified.claims);
    const get = (ref: ResourceRef, namespace: string | undefined, name: string | undefined): Promise<KubeObject | undefined> =>
      name === undefined ? Promise.resolve(undefined) : this.options.client.get(ref, namespace, name);
    const [serviceAccount, secret, pod, node] = await Promise.all([
      get(SERVICEACCOUNTS, lookups.namespace, lookups.serviceAccount),
      get(SECRETS, lookups.namespace, lookups.secret),
      get(PODS, lookups.namespace, lookups.pod),
      get(NODES, undefined, lookups.node),
    ]);
    const found = {
      ...(serviceAccount ? { serviceAccount: facts(serviceAccount) } : {}),
      ...(secret ? { secret: facts(secret) } : {}),
      ...(pod ? { pod: facts(pod) } : {}),
      ...(node ? { node: facts(node) } : {}),
    };
    const info = checkTokenObjects(verified.claims, found, now);
    const user = serviceAccountUser(info);
    return {
      user: { name: user.name, groups: user.groups, uid: user.uid, ...(Object.keys(user.extra).length ? { extra: user.extra } : {}) },
      audiences: verified.audiences,
      stale: info.stale,
    };
  }

  private verify(token: string, now: Date, audiences?: readonly string[]): Promise<VerifiedToken> {
    return verifyServiceAccountToken(token, {
      keys: this.options.keys,
      issuers: this.options.issuers,
      apiAudiences: this.options.apiAudiences,
      ...(audiences ? { audiences } : {}),
      now,
    });
  }

  /** verify() for the API audiences, reusing a recent verification of the same token. */
  private async verifyCached(token: string, now: Date): Promise<VerifiedToken> {
    const id = createHash('sha256').update(token).digest('hex');
    const hit = this.verified.get(id);
    if (hit && now.getTime() <= hit.until) return hit.verified;
    this.verified.delete(id);
    const verified = await this.verify(token, now);
    if (this.verified.size >= VERIFIED_MAX) this.verified.delete(this.verified.keys().next().value!);
    const expires = (verified.claims.exp + TOKEN_LEEWAY_SECONDS) * 1000;
    this.verified.set(id, { verified, until: Math.min(now.getTime() + VERIFIED_TTL_MS, expires) });
    return verified;
  }
}
