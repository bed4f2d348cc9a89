import type { IncomingMessage } from 'node:http';
import { type Authenticator, presentedToken, tokenDigest, type UserInfo } from '../apiserver/auth.js';
import type { ApiClient } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import {
  checkTokenObjects,
  type FoundObjects,
  type ObjectFacts,
  type ServiceAccountInfo,
  serviceAccountUser,
} from '../security/service-account-rules.js';
import {
  type ServiceAccountClaims,
  ServiceAccountTokenError,
  TOKEN_LEEWAY_SECONDS,
  type VerifiedToken,
  verifyServiceAccountToken,
  type VerifyingKey,
} from '../security/service-account-tokens.js';
import { type LocalWrites, objectFacts, TOKEN_OBJECT_REFS, TokenObjectCache, type TokenObjectKind } from './service-account-objects.js';

/**
 * The ServiceAccount token authenticator, as kube-apiserver's: a bearer token that is a JWT of
 * this cluster's issuer is verified (signature by `kid`, times with 60 s of leeway, audiences:
 * verifyServiceAccountToken), then the account it names must exist, and the pod, Secret or node
 * it is bound to: each with the UID in the token and not deleting for longer than the leeway
 * (checkTokenObjects). So a token dies with its account, and a pod-bound one with its pod; a
 * re-created account or pod has a new UID and does not revive old tokens.
 *
 * The objects come from informers (TokenObjectCache), as kube-apiserver's do, not from a read of
 * the store at each request (which cost more than the rest of the authentication:
 * bench/authz.ts). The cache is trusted only to confirm: an object it holds with the token's UID.
 * An object it does not hold, holds with another UID, or cannot vouch for (not listed yet, its
 * watch re-listing) is read from the store, so an account created a moment ago authenticates at
 * once, and a stale entry can never refuse a good token. A deletion made through this server
 * takes effect before its DELETE is answered (the store reports its writes: LocalWrites); one made
 * through another server when its watch event arrives, milliseconds later
 * (docs/security.md#serviceaccount-tokens).
 *
 * The signature check of a token already verified is reused for up to 10 s, never past its
 * expiry plus the leeway: it is most of the cost of a first request (bench/service-account-auth.ts)
 * and cannot change.
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
  /** This server's own writes, so that the cache never answers from before one of them (a server passes its ObjectStore's). */
  localWrites?: LocalWrites;
}

/** The user and what the token was good for (TokenReview reports the audiences). */
export interface AuthenticatedToken {
  user: UserInfo;
  audiences: string[];
  /** Past the 3607 s mark of an extended token: kube audits it as stale. */
  stale: boolean;
}

/** How long a verified signature is reused, and for how many tokens at most. */
const VERIFIED_TTL_MS = 10_000;
const VERIFIED_MAX = 4096;

/** An object a token names, which must still exist with this UID. */
interface Needed {
  kind: TokenObjectKind;
  namespace: string | undefined;
  name: string;
  uid: string;
}

/** A token whose signature was verified, what it needs, and the user it is once those exist. */
interface Verified {
  verified: VerifiedToken;
  /** Until when (ms) the verification may be reused. */
  until: number;
  needed: Needed[];
  user: UserInfo | undefined;
  /**
   * The cached facts (one per needed object) the token was last found good against, when none
   * is being deleted: while the cache still holds these very objects, the checks would find the
   * same, so they are not made again.
   */
  confirmed: ObjectFacts[] | undefined;
}

/** What must exist for the token to be good: its account, and its bound object (a node only when not pod-bound). */
function neededBy(claims: ServiceAccountClaims): Needed[] {
  const k = claims['kubernetes.io'];
  const needed: Needed[] = [{ kind: 'serviceAccount', namespace: k.namespace, name: k.serviceaccount.name, uid: k.serviceaccount.uid }];
  if (k.secret) needed.push({ kind: 'secret', namespace: k.namespace, name: k.secret.name, uid: k.secret.uid });
  if (k.pod) needed.push({ kind: 'pod', namespace: k.namespace, name: k.pod.name, uid: k.pod.uid });
  if (k.node && !k.pod) needed.push({ kind: 'node', namespace: undefined, name: k.node.name, uid: k.node.uid });
  return needed;
}

function foundObjects(needed: readonly Needed[], facts: readonly (ObjectFacts | undefined)[]): FoundObjects {
  const found: FoundObjects = {};
  needed.forEach((n, i) => {
    const f = facts[i];
    if (f) found[n.kind] = f;
  });
  return found;
}

/** Three dot-separated parts, without splitting a 1 KB string into pieces to count them. */
function looksLikeJwt(token: string): boolean {
  const first = token.indexOf('.');
  if (first < 0) return false;
  const second = token.indexOf('.', first + 1);
  return second >= 0 && token.indexOf('.', second + 1) < 0;
}

function toUserInfo(info: ServiceAccountInfo): UserInfo {
  const user = serviceAccountUser(info);
  return { name: user.name, groups: user.groups, uid: user.uid, ...(Object.keys(user.extra).length ? { extra: user.extra } : {}) };
}

/** The user follows from the claims alone: made once per verified token, not at every request. */
function userOf(entry: Verified, info: ServiceAccountInfo): UserInfo {
  return (entry.user ??= toUserInfo(info));
}

export class ServiceAccountAuthenticator implements Authenticator {
  private readonly now: () => Date;
  /** Digest of a token → its verification for the API audiences. */
  private readonly verified = new Map<string, Verified>();
  /** Verifications under way, so that the requests a token's expiry finds in flight wait for one instead of each making its own. */
  private readonly verifying = new Map<string, Promise<Verified>>();
  private readonly objects: TokenObjectCache;

  constructor(private readonly options: ServiceAccountAuthenticatorOptions) {
    this.now = options.now ?? (() => new Date());
    this.objects = new TokenObjectCache(options.client, options.logger, options.localWrites);
  }

  /** Follows the accounts from now on; resolves after their first list (until then, and without it, the store is read). */
  start(): Promise<void> {
    return this.objects.start();
  }

  stop(): void {
    this.objects.stop();
  }

  /** Whether the cache of `kind` is current (tests, the benchmark's warm-up). */
  following(kind: TokenObjectKind): boolean {
    return this.objects.current(kind);
  }

  authenticate(req: IncomingMessage): UserInfo | undefined | Promise<UserInfo | undefined> {
    const presented = presentedToken(req);
    // A JWT is three dot-separated parts; anything else is another authenticator's.
    if (!presented || !looksLikeJwt(presented.token)) return undefined;
    const now = this.now();
    const known = this.verified.get(presented.digest);
    if (known && now.getTime() <= known.until) {
      // The common case, without a turn of the event loop: a token seen lately, its objects in the cache.
      if (known.confirmed && known.user && this.stillConfirmed(known.needed, known.confirmed)) return known.user;
      const facts = this.cachedFacts(known.needed);
      if (facts) {
        try {
          const user = userOf(known, this.check(known, facts, now));
          known.confirmed = facts.some((f) => f.deletionTimestamp !== undefined) ? undefined : facts;
          return user;
        } catch (error) {
          known.confirmed = undefined;
          return this.refused(error);
        }
      }
    }
    return this.authenticateToken(presented.token, undefined, presented.digest).then(
      (result) => result.user,
      (error: unknown) => this.refused(error),
    );
  }

  /**
   * Verify a token for `audiences` (default: the API's) and check its objects. Throws
   * ServiceAccountTokenError, with kube's wording, when it is not good (`not-recognised` when it
   * is not a token of this cluster at all).
   */
  async authenticateToken(token: string, audiences?: readonly string[], digest?: string): Promise<AuthenticatedToken> {
    const now = this.now();
    if (audiences) {
      const verified = await this.verify(token, now, audiences);
      const needed = neededBy(verified.claims);
      const info = checkTokenObjects(verified.claims, foundObjects(needed, await this.facts(needed)), now);
      return { user: toUserInfo(info), audiences: verified.audiences, stale: info.stale };
    }
    const entry = await this.verifyCached(token, digest ?? tokenDigest(token), now);
    const info = this.check(entry, await this.facts(entry.needed), now);
    return { user: userOf(entry, info), audiences: entry.verified.audiences, stale: info.stale };
  }

  /** checkTokenObjects for a verified token whose objects are `facts`. */
  private check(entry: Verified, facts: readonly (ObjectFacts | undefined)[], now: Date): ServiceAccountInfo {
    return checkTokenObjects(entry.verified.claims, foundObjects(entry.needed, facts), now);
  }

  private refused(error: unknown): undefined {
    if (!(error instanceof ServiceAccountTokenError)) throw error;
    if (error.recognised) this.options.logger.debug({ reason: error.reason }, `refused a service account token: ${error.message}`);
    return undefined;
  }

  /** Whether the cache still holds, for every needed object, the very facts the token was found good against. */
  private stillConfirmed(needed: readonly Needed[], confirmed: readonly ObjectFacts[]): boolean {
    for (let i = 0; i < needed.length; i++) {
      const n = needed[i]!;
      if (this.objects.cached(n.kind, n.namespace, n.name) !== confirmed[i]) return false;
    }
    return true;
  }

  /** The facts of every needed object, from the cache, or undefined when any must be read from the store. */
  private cachedFacts(needed: readonly Needed[]): ObjectFacts[] | undefined {
    const facts: ObjectFacts[] = [];
    for (const n of needed) {
      const cached = this.objects.cached(n.kind, n.namespace, n.name);
      // Only a match is taken from the cache; anything else is the store's to say.
      if (!cached || cached.uid !== n.uid) return undefined;
      facts.push(cached);
    }
    return facts;
  }

  /** The facts of every needed object: the cache's where it confirms the token's UID, else the store's (undefined: not found). */
  private facts(needed: readonly Needed[]): Promise<(ObjectFacts | undefined)[]> {
    return Promise.all(
      needed.map(async (n) => {
        const cached = this.objects.cached(n.kind, n.namespace, n.name);
        if (cached && cached.uid === n.uid) return cached;
        const stored = await this.options.client.get(TOKEN_OBJECT_REFS[n.kind], n.namespace, n.name);
        return stored && objectFacts(stored);
      }),
    );
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
  private verifyCached(token: string, digest: string, now: Date): Promise<Verified> {
    const hit = this.verified.get(digest);
    if (hit && now.getTime() <= hit.until) return Promise.resolve(hit);
    this.verified.delete(digest);
    let pending = this.verifying.get(digest);
    if (!pending) {
      pending = this.verify(token, now).then((verified) => {
        if (this.verified.size >= VERIFIED_MAX) this.verified.delete(this.verified.keys().next().value!);
        const expires = (verified.claims.exp + TOKEN_LEEWAY_SECONDS) * 1000;
        const entry: Verified = {
          verified,
          until: Math.min(now.getTime() + VERIFIED_TTL_MS, expires),
          needed: neededBy(verified.claims),
          user: undefined,
          confirmed: undefined,
        };
        this.verified.set(digest, entry);
        return entry;
      });
      const settled = (): void => void this.verifying.delete(digest);
      pending.then(settled, settled);
      this.verifying.set(digest, pending);
    }
    return pending;
  }
}
