import { createHash, hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { KubeObject } from './objects.js';

/**
 * Who is calling, and may they. Authentication is by bearer token; authorization is a separate
 * seam so node restriction (agents may write only their own Node, Lease and events) plugs in.
 */

export interface UserInfo {
  name: string;
  groups: readonly string[];
  /** A stable id of the user where the authenticator has one (a ServiceAccount's UID). */
  uid?: string;
  /** What else the authenticator knows (a ServiceAccount token's pod, node and credential id). */
  extra?: Record<string, string[]>;
}

export interface RequestAttributes {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

/**
 * A request to a path outside the resource API (`/api`, `/apis/...` discovery, `/openapi/v3`,
 * `/metrics`): the verb is the lowercased HTTP method (`get`, `post`, `put`, `patch`, `delete`,
 * `head`, `options`), as Kubernetes authorizers see it.
 */
export interface NonResourceAttributes {
  verb: string;
  path: string;
}

/**
 * One way of proving who one is. Answers the caller, or undefined when this authenticator does
 * not recognise them (the next one may); a credential it recognises but refuses (an expired
 * token) is undefined too, and ends as a 401 unless another authenticator knows it. May answer
 * asynchronously (ServiceAccount tokens verify a signature and read the store).
 */
export interface Authenticator {
  authenticate(req: IncomingMessage): UserInfo | undefined | Promise<UserInfo | undefined>;
}

/** `reason` says why (RBAC: which binding allowed it), for access reviews and the 403's message. */
export type AuthorizationDecision = { allowed: true; reason?: string } | { allowed: false; reason: string };

export interface Authorizer {
  authorize(user: UserInfo, attributes: RequestAttributes | NonResourceAttributes): AuthorizationDecision;
}

/** SHA-256 of a token, hex: how token authenticators key what they know (never the token itself). */
export const tokenDigest: (token: string) => string =
  // The one-shot hash (Node >= 20.12) costs half a Hash object's for a token-sized input.
  typeof hash === 'function' ? (token) => hash('sha256', token, 'hex') : (token) => createHash('sha256').update(token).digest('hex');

export function bearerToken(req: IncomingMessage): string | undefined {
  return presentedToken(req)?.token;
}

/** A request's bearer token and its digest. */
export interface PresentedToken {
  token: string;
  /** {@link tokenDigest} of the token. */
  digest: string;
}

/** Where a request keeps its PresentedToken (null: none); a property, as a WeakMap's entries are costly to collect. */
const PRESENTED = Symbol('presented token');
type WithPresented = IncomingMessage & { [PRESENTED]?: PresentedToken | null };

/**
 * The bearer token a request presents, and its digest, worked out once per request: the admin
 * token, node credentials and ServiceAccount tokens are each looked up by digest in turn, and a
 * ServiceAccount token (about 1 KB) would otherwise be parsed out of the header and hashed by each.
 */
export function presentedToken(req: IncomingMessage): PresentedToken | undefined {
  const memo = req as WithPresented;
  let found = memo[PRESENTED];
  if (found === undefined) {
    const header = req.headers.authorization;
    const token = header ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
    found = token === undefined ? null : { token, digest: tokenDigest(token) };
    memo[PRESENTED] = found;
  }
  return found ?? undefined;
}

/**
 * Static tokens, looked up by SHA-256 digest: the plain tokens are not kept in memory, and since
 * the lookup key is a hash of the caller's input, its timing reveals nothing about a real token.
 */
export class TokenAuthenticator implements Authenticator {
  private readonly users = new Map<string, UserInfo>();

  add(token: string, user: UserInfo): void {
    this.users.set(tokenDigest(token), user);
  }

  authenticate(req: IncomingMessage): UserInfo | undefined {
    const token = presentedToken(req);
    return token && this.users.get(token.digest);
  }
}

/** A write about to be stored, for checks that need to see the object (node restriction). */
export interface AdmissionAttributes extends RequestAttributes {
  user: UserInfo;
  /** The object the write would store (for deletes and evictions, the stored one). */
  object: KubeObject;
  /** The stored object an update or patch replaces: decisions the caller must not steer are made on it. */
  oldObject?: KubeObject;
}

export interface Admission {
  /** Throws an ApiError to refuse the write. */
  admit(attributes: AdmissionAttributes): Promise<void>;
  /** Whether this caller's writes are judged at all (so a patch need not keep the stored object for it). */
  judges(user: UserInfo): boolean;
}

/** Several authenticators, in order: the first that recognises the caller wins. */
export class UnionAuthenticator implements Authenticator {
  constructor(private readonly authenticators: readonly Authenticator[]) {}

  async authenticate(req: IncomingMessage): Promise<UserInfo | undefined> {
    for (const authenticator of this.authenticators) {
      const answer = authenticator.authenticate(req);
      // Most answer synchronously: awaiting only promises spares a turn of the microtask queue each.
      const user = answer instanceof Promise ? await answer : answer;
      if (user) return user;
    }
    return undefined;
  }
}

/** Every authenticated user may do everything: the single-admin model of the first release. */
export const allowAuthenticated: Authorizer = {
  authorize: () => ({ allowed: true }),
};
