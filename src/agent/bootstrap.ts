import https from 'node:https';
import { caHash, type JoinToken } from '../cluster/join-token.js';
import type { RegistrationResponse } from '../cluster/drover-endpoints.js';
import type { Status } from '../controllers/kube-types.js';

/**
 * Joining: fetch the cluster CA, check it against the hash pinned in the join token, then
 * register over a connection verified with that CA. The secret is never sent to a server whose
 * CA does not match.
 */

export class JoinError extends Error {
  override name = 'JoinError';
  constructor(
    message: string,
    /** The server refused (wrong token, name taken): retrying will not help. */
    readonly fatal: boolean,
  ) {
    super(message);
  }
}

/**
 * TLS verification errors that mean the server's certificate was not issued by the CA it was
 * checked against: retrying cannot help, so joining stops (a name or validity-time problem is not
 * in this list).
 */
const NOT_ISSUED_BY_CA = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
]);

/**
 * Advice for the log when a TLS failure is what a wrong clock on this host looks like: the
 * cluster's certificates are valid from an hour before they were issued (security.md), so a host
 * that still finds one "not yet valid" is more than an hour behind.
 */
export function clockHint(error: unknown): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const now = new Date().toISOString();
  if (code === 'CERT_NOT_YET_VALID') {
    return `the server's certificate is not valid yet by this host's clock (${now}): this host's clock is probably behind by more than an hour; synchronise it (NTP)`;
  }
  if (code === 'CERT_HAS_EXPIRED') {
    return `the server's certificate has expired by this host's clock (${now}): check this host's clock (NTP) before renewing certificates`;
  }
  return undefined;
}

interface RawResponse {
  status: number;
  body: string;
}

function call(
  server: URL,
  method: string,
  path: string,
  options: { ca?: string; insecure?: boolean; token?: string; body?: unknown },
): Promise<RawResponse> {
  const payload = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: server.hostname.replace(/^\[|\]$/g, ''),
        port: server.port || 443,
        method,
        path,
        timeout: 10_000,
        rejectUnauthorized: !options.insecure,
        ...(options.ca ? { ca: options.ca } : {}),
        headers: {
          Accept: 'application/json',
          ...(options.token ? { Authorization: `Bearer ${options.token}` } : {}),
          ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

/** The cluster CA, verified against the token's pin (or trusted on first use without one). */
export async function fetchClusterCa(server: URL, token: JoinToken): Promise<{ caPem: string; pinned: boolean }> {
  const fetched = await call(server, 'GET', '/cacerts', { insecure: true });
  if (fetched.status !== 200 || !fetched.body.includes('BEGIN CERTIFICATE')) {
    throw new JoinError(`GET ${server.origin}/cacerts answered HTTP ${fetched.status}, not a CA certificate`, false);
  }
  if (token.caHash && caHash(fetched.body) !== token.caHash) {
    throw new JoinError(
      `the server's CA certificate does not match the join token (token pins ${token.caHash.slice(0, 12)}…, server has ${caHash(fetched.body).slice(0, 12)}…): wrong server or wrong token`,
      true,
    );
  }
  // Prove the server holds a certificate issued by that CA before sending any secret. The CA
  // certificate is public (anyone can copy it from /cacerts), so matching the pin proves nothing
  // until the TLS handshake does.
  let verified: RawResponse;
  try {
    verified = await call(server, 'GET', '/cacerts', { ca: fetched.body });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === undefined || !NOT_ISSUED_BY_CA.has(code)) throw error;
    throw new JoinError(
      `the server at ${server.origin} serves the ${token.caHash ? 'CA certificate the join token pins' : 'CA certificate'} but presents a TLS certificate not issued by it (${code}): wrong server, or a man in the middle`,
      true,
    );
  }
  if (verified.status !== 200) throw new JoinError('CA certificate validation failed', true);
  return { caPem: fetched.body, pinned: Boolean(token.caHash) };
}

export async function register(
  server: URL,
  caPem: string,
  joinSecret: string,
  request: { nodeName: string; nodeId: string; password: string; addresses: string[]; agentPort: number },
): Promise<RegistrationResponse> {
  const res = await call(server, 'POST', '/drover/v1/register', { ca: caPem, token: joinSecret, body: request });
  if (res.status === 200) return JSON.parse(res.body) as RegistrationResponse;
  let message = res.body;
  try {
    message = (JSON.parse(res.body) as Status).message ?? res.body;
  } catch {
    // keep the raw body
  }
  if (res.status === 401) throw new JoinError('the server rejected the join token (401 Unauthorized)', true);
  if (res.status === 403 || res.status === 400) throw new JoinError(message, true);
  throw new JoinError(`registration failed with HTTP ${res.status}: ${message}`, false);
}
