import { createHash } from 'node:crypto';
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

function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

export function bearerToken(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  if (!header) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

/**
 * Static tokens, looked up by SHA-256 digest: the plain tokens are not kept in memory, and since
 * the lookup key is a hash of the caller's input, its timing reveals nothing about a real token.
 */
export class TokenAuthenticator implements Authenticator {
  private readonly users = new Map<string, UserInfo>();

  add(token: string, user: UserInfo): void {
    this.users.set(digest(token).toString('hex'), user);
  }

  authenticate(req: IncomingMessage): UserInfo | undefined {
    const token = bearerToken(req);
    if (!token) return undefined;
    return this.users.get(digest(token).toString('hex'));
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
      const user = await authenticator.authenticate(req);
      if (user) return user;
    }
    return undefined;
  }
}

/** Every authenticated user may do everything: the single-admin model of the first release. */
export const allowAuthenticated: Authorizer = {
  authorize: () => ({ allowed: true }),
};
