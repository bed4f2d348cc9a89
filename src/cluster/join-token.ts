import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The join token an agent needs: `D10<sha256 of the cluster CA certificate>::<user>:<secret>`.
 * The hash pins the CA, so an agent that has never seen the cluster can still tell the real
 * server from an impostor before it sends the secret (the idea of K3s' `K10` tokens).
 */

export const TOKEN_PREFIX = 'D10';

export class JoinTokenError extends Error {
  override name = 'JoinTokenError';
}

export interface JoinToken {
  /** Hex SHA-256 of the CA certificate PEM, or undefined for a bare secret (no pinning). */
  caHash?: string;
  user: string;
  secret: string;
}

/** The pin: SHA-256 of the CA PEM, with surrounding whitespace normalised to one final newline. */
export function caHash(caCertificatePem: string): string {
  return createHash('sha256').update(`${caCertificatePem.trim()}\n`).digest('hex');
}

export function formatJoinToken(token: Required<JoinToken>): string {
  return `${TOKEN_PREFIX}${token.caHash}::${token.user}:${token.secret}`;
}

export function parseJoinToken(text: string): JoinToken {
  const value = text.trim();
  if (!value) throw new JoinTokenError('the join token is empty');
  if (!value.startsWith(TOKEN_PREFIX)) {
    if (value.includes(':')) throw new JoinTokenError(`invalid token format: expected ${TOKEN_PREFIX}<ca-hash>::<user>:<secret> or a bare secret`);
    return { user: 'server', secret: value };
  }
  const match = /^D10([^:]*)::([^:]+):(.+)$/.exec(value);
  if (!match) throw new JoinTokenError(`invalid token format: expected ${TOKEN_PREFIX}<ca-hash>::<user>:<secret>`);
  const hash = match[1]!;
  if (!/^[0-9a-f]{64}$/.test(hash)) {
    throw new JoinTokenError(`invalid token CA hash: expected 64 hex characters, got ${hash.length}`);
  }
  return { caHash: hash, user: match[2]!, secret: match[3]! };
}

export function secretsEqual(a: string, b: string): boolean {
  const left = createHash('sha256').update(a).digest();
  const right = createHash('sha256').update(b).digest();
  return timingSafeEqual(left, right);
}

/**
 * The agent token's secret, derived from the server token's: every server can compute it, but it
 * does not reveal the server token. It lets a node join; it cannot fetch the cluster identity.
 */
export function agentSecretFor(serverSecret: string): string {
  return createHmac('sha256', serverSecret).update('drover agent token').digest('hex').slice(0, 48);
}
