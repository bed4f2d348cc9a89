import type { Credential } from './credentials.js';
import { readBody, type Transport } from './http.js';

/**
 * Registry authentication: the `WWW-Authenticate` challenge of a 401, and the token flow of the
 * distribution spec (a `Bearer realm=…,service=…,scope=…` challenge → a token from the realm,
 * anonymously or with the credential: basic auth, or an OAuth2 refresh token for an identity
 * token → retry with `Authorization: Bearer <token>`). Tokens are kept per realm, service,
 * scope and credential until they expire.
 */

export interface Challenge {
  /** Lower case: `bearer`, `basic`. */
  scheme: string;
  params: Record<string, string>;
}

/** The challenges of a WWW-Authenticate header (RFC 7235: scheme, then `key=value` or `key="quoted"` params). */
export function parseChallenges(header: string): Challenge[] {
  const challenges: Challenge[] = [];
  let i = 0;
  const skip = (): void => {
    while (i < header.length && /[\s,]/.test(header[i]!)) i++;
  };
  const token = (): string => {
    const start = i;
    while (i < header.length && /[!#$%&'*+\-.^_`|~0-9A-Za-z/]/.test(header[i]!)) i++;
    return header.slice(start, i);
  };
  let current: Challenge | undefined;
  while (i < header.length) {
    skip();
    const start = i;
    const word = token();
    if (!word) {
      i++;
      continue;
    }
    let j = i;
    while (j < header.length && header[j] === ' ') j++;
    if (header[j] === '=' && current) {
      i = j + 1;
      while (i < header.length && header[i] === ' ') i++;
      let value = '';
      if (header[i] === '"') {
        i++;
        while (i < header.length && header[i] !== '"') {
          if (header[i] === '\\' && i + 1 < header.length) i++;
          value += header[i];
          i++;
        }
        i++;
      } else {
        const from = i;
        while (i < header.length && header[i] !== ',') i++;
        value = header.slice(from, i).trim();
      }
      current.params[word.toLowerCase()] = value;
    } else if (header[j] === '=' && !current) {
      i = j + 1;
    } else {
      current = { scheme: header.slice(start, i).toLowerCase(), params: {} };
      challenges.push(current);
    }
  }
  return challenges;
}

/** The token service said no, or answered nonsense. */
export class TokenError extends Error {
  override name = 'TokenError';
  /** The service refused the credential (401/403), rather than failing. */
  constructor(
    message: string,
    readonly refused = false,
  ) {
    super(message);
  }
}

interface CachedToken {
  token: string;
  expiresAtMs: number;
}

const TOKEN_BODY_LIMIT = 1 << 20;
/** Past this many, expired tokens are dropped. */
const MAX_TOKENS = 256;
/** The spec's default lifetime when the service names none. */
const DEFAULT_EXPIRES_S = 60;

function describeCredential(credential: Credential | undefined): string {
  if (!credential) return 'anonymously';
  if (credential.identityToken) return `with the identity token of ${credential.source}`;
  return `as "${credential.username ?? ''}" (${credential.source})`;
}

export function basicHeader(credential: Credential): string {
  return `Basic ${Buffer.from(`${credential.username ?? ''}:${credential.password ?? ''}`).toString('base64')}`;
}

export class TokenCache {
  private readonly tokens = new Map<string, CachedToken>();

  constructor(
    private readonly transport: Transport,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * A token for `challenge` (bearer) and `scope`, from the cache or the realm. Throws TokenError
   * naming the realm and how it was asked.
   */
  async token(challenge: Challenge, scope: string, credential: Credential | undefined): Promise<string> {
    const realm = challenge.params.realm;
    if (!realm) throw new TokenError('the registry asked for a bearer token but named no realm');
    let url: URL;
    try {
      url = new URL(realm);
    } catch {
      throw new TokenError(`the registry's token realm "${realm}" is not a URL`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new TokenError(`the registry's token realm "${realm}" is not http(s)`);
    const service = challenge.params.service ?? '';
    const wanted = challenge.params.scope ?? scope;
    const key = JSON.stringify([realm, service, wanted, credential?.source, credential?.username, credential?.identityToken ? 'id' : '']);
    const cached = this.tokens.get(key);
    if (cached && cached.expiresAtMs > this.now()) return cached.token;

    let response;
    if (credential?.identityToken) {
      // An identity token is an OAuth2 refresh token: exchanged by POST (docker's flow).
      const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: credential.identityToken, client_id: 'drover', service });
      if (wanted) form.set('scope', wanted);
      response = await this.transport.request(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
      });
    } else {
      if (service) url.searchParams.set('service', service);
      if (wanted) url.searchParams.set('scope', wanted);
      response = await this.transport.request(url, {
        headers: credential?.username !== undefined ? { Authorization: basicHeader(credential) } : {},
      });
    }
    const body = await readBody(response, TOKEN_BODY_LIMIT);
    const asked = `token service ${url.origin}${url.pathname} asked ${describeCredential(credential)}`;
    if (response.status === 401 || response.status === 403) throw new TokenError(`${asked}: ${response.status} (credentials refused)`, true);
    if (response.status !== 200) throw new TokenError(`${asked}: answered ${response.status}`);
    let parsed: { token?: unknown; access_token?: unknown; expires_in?: unknown };
    try {
      parsed = JSON.parse(body.toString('utf8')) as typeof parsed;
    } catch {
      throw new TokenError(`${asked}: the answer is not JSON`);
    }
    const token = typeof parsed.token === 'string' && parsed.token ? parsed.token : typeof parsed.access_token === 'string' ? parsed.access_token : '';
    if (!token) throw new TokenError(`${asked}: the answer holds no token`);
    const seconds = typeof parsed.expires_in === 'number' && parsed.expires_in > 0 ? parsed.expires_in : DEFAULT_EXPIRES_S;
    // A little early, so a token does not expire between the check and its use.
    this.tokens.set(key, { token, expiresAtMs: this.now() + Math.max(1, seconds - 5) * 1000 });
    if (this.tokens.size > MAX_TOKENS) {
      for (const [k, t] of this.tokens) if (t.expiresAtMs <= this.now()) this.tokens.delete(k);
    }
    return token;
  }

  clear(): void {
    this.tokens.clear();
  }
}

export { describeCredential };
