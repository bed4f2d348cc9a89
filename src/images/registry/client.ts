import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { basicHeader, type Challenge, describeCredential, parseChallenges, type TokenCache, TokenError } from './auth.js';
import type { Credential } from './credentials.js';
import { type HttpResponse, readBody, type Transport } from './http.js';
import type { ManifestDocument } from '../oci.js';
import { DIGEST, MANIFEST_ACCEPT, ManifestError, parsePullable, sha256Digest } from './manifest.js';

/**
 * The OCI Distribution API, read side, against one endpoint (a mirror or the registry itself)
 * with at most one credential: manifests by tag or digest, verified against the digest asked
 * for or the one the registry names; blobs streamed through a digest and size check. A 401
 * answers with its challenge: a bearer token is fetched and the request made again; a Basic
 * challenge is answered with the credential's username and password.
 */

/** The registry answered, but not with what was asked: carries the status for the caller's message. */
export class RegistryError extends Error {
  override name = 'RegistryError';
  constructor(
    message: string,
    readonly status: number | undefined,
    /** 401/403: the credential (or its absence) was the problem; another credential may do. */
    readonly unauthorized = false,
  ) {
    super(message);
  }
}

const MANIFEST_LIMIT = 4 << 20;
const ERROR_BODY_LIMIT = 64 << 10;

export interface FetchedManifest {
  digest: string;
  body: Buffer;
  manifest: ManifestDocument;
}

/** A registry's error body (`{"errors":[{"code","message"}]}`) in a few words, or nothing. */
async function errorSummary(response: HttpResponse): Promise<string> {
  try {
    const body = await readBody(response, ERROR_BODY_LIMIT);
    const parsed = JSON.parse(body.toString('utf8')) as { errors?: { code?: string; message?: string }[] };
    const first = parsed.errors?.[0];
    if (first) return [first.code, first.message].filter(Boolean).join(': ');
  } catch {
    // not the spec's error shape
  }
  return '';
}

function statusText(status: number): string {
  const names: Record<number, string> = { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 429: 'Too Many Requests', 500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable' };
  return `${status}${names[status] ? ` ${names[status]}` : ''}`;
}

/** Content that does not hash to the digest it was asked by: the source is wrong (corrupt or lying), not absent. */
export class DigestMismatchError extends ManifestError {
  override name = 'DigestMismatchError';
}

/**
 * Passes bytes through while hashing and counting them; fails at the end when either is not what
 * was expected. With `hash` false only the size is checked: for a consumer that verifies the
 * digest itself (the store does), so the bytes are hashed once, not twice. Chunks are passed on
 * in runs of up to 1 MiB rather than as the TLS records arrive (16 KiB): fewer, larger writes
 * for whoever stores them.
 */
export class DigestVerifier extends Transform {
  private readonly hash = createHash('sha256');
  private bytes = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(
    private readonly digest: string,
    private readonly size: number | undefined,
    readonly where: string,
    private readonly hashing = true,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.size !== undefined && this.bytes > this.size) {
      callback(new ManifestError(`${this.where}: more than the ${this.size} bytes its descriptor says`));
      return;
    }
    if (this.hashing) this.hash.update(chunk);
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes >= COALESCE_BYTES) this.push(this.drainPending());
    callback();
  }

  private drainPending(): Buffer {
    const out = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    return out;
  }

  override _flush(callback: TransformCallback): void {
    const got = this.hashing ? `sha256:${this.hash.digest('hex')}` : this.digest;
    if (got !== this.digest) {
      callback(new DigestMismatchError(`${this.where}: content does not match its digest (got ${got}); rejected`));
    } else if (this.size !== undefined && this.bytes !== this.size) {
      callback(new ManifestError(`${this.where}: ${this.bytes} bytes, its descriptor says ${this.size}; rejected`));
    } else {
      callback(null, this.pendingBytes ? this.drainPending() : undefined);
    }
  }
}

const COALESCE_BYTES = 1 << 20;

export class EndpointSession {
  /** The Authorization header that worked last (basic, or a bearer token for this repository). */
  private authorization: string | undefined;

  constructor(
    private readonly transport: Transport,
    private readonly tokens: TokenCache,
    /** API root, ending in /v2. */
    readonly root: URL,
    readonly repository: string,
    readonly credential: Credential | undefined,
    /** `?ns=<registry>` for a mirror, as containerd tells a mirror which registry it stands for. */
    private readonly namespace: string | undefined,
  ) {}

  url(kind: 'manifests' | 'blobs', reference: string): URL {
    const url = new URL(`${this.root.href.replace(/\/+$/, '')}/${this.repository}/${kind}/${reference}`);
    if (this.namespace) url.searchParams.set('ns', this.namespace);
    return url;
  }

  /** How this session authenticates, for messages. */
  get how(): string {
    return describeCredential(this.credential);
  }

  private async respondToChallenge(response: HttpResponse): Promise<boolean> {
    const header = response.headers['www-authenticate'];
    const challenges = parseChallenges(Array.isArray(header) ? header.join(', ') : (header ?? ''));
    const bearer = challenges.find((c: Challenge) => c.scheme === 'bearer');
    if (bearer) {
      const token = this.credential?.registryToken ?? (await this.tokens.token(bearer, `repository:${this.repository}:pull`, this.credential));
      this.authorization = `Bearer ${token}`;
      return true;
    }
    if (challenges.some((c) => c.scheme === 'basic') && this.credential?.username !== undefined) {
      this.authorization = basicHeader(this.credential);
      return true;
    }
    return false;
  }

  /** GET with authentication: one retry after answering a 401's challenge. */
  private async get(url: URL, accept?: string): Promise<HttpResponse> {
    const headers = (): Record<string, string> => ({
      ...(accept ? { Accept: accept } : {}),
      ...(this.authorization ? { Authorization: this.authorization } : {}),
    });
    let response = await this.transport.request(url, { headers: headers() });
    if (response.status !== 401) return response;
    const summary = await errorSummary(response);
    try {
      if (!(await this.respondToChallenge(response))) throw this.error(response.status, url, summary);
    } catch (error) {
      if (error instanceof TokenError) throw new RegistryError(`${url.href}: 401 Unauthorized, then ${error.message}`, 401, error.refused);
      throw error;
    }
    return this.transport.request(url, { headers: headers() });
  }

  private error(status: number, url: URL, summary: string): RegistryError {
    const unauthorized = status === 401 || status === 403;
    const who = unauthorized ? ` (asked ${this.how})` : '';
    return new RegistryError(`${url.href}: ${statusText(status)}${summary ? ` (${summary})` : ''}${who}`, status, unauthorized);
  }

  private async fail(response: HttpResponse, url: URL): Promise<never> {
    throw this.error(response.status, url, await errorSummary(response));
  }

  /**
   * The manifest `reference` (tag or digest). Verified: by digest, the body must hash to it; by
   * tag, to the `Docker-Content-Digest` the registry names, when it names one.
   */
  async manifest(reference: string): Promise<FetchedManifest> {
    const url = this.url('manifests', reference);
    const response = await this.get(url, MANIFEST_ACCEPT);
    if (response.status !== 200) await this.fail(response, url);
    const body = await readBody(response, MANIFEST_LIMIT);
    const digest = sha256Digest(body);
    if (DIGEST.test(reference) && digest !== reference) {
      throw new DigestMismatchError(`${url.href}: manifest content does not match its digest (got ${digest}); rejected`);
    }
    const named = response.headers['docker-content-digest'];
    if (typeof named === 'string' && named.startsWith('sha256:') && named !== digest) {
      throw new DigestMismatchError(`${url.href}: manifest content does not match the Docker-Content-Digest ${named} (got ${digest}); rejected`);
    }
    const contentType = response.headers['content-type'];
    let manifest: ManifestDocument;
    try {
      manifest = parsePullable(body, contentType);
    } catch (error) {
      throw new ManifestError(`${url.href}: ${(error as Error).message}`);
    }
    return { digest, body, manifest };
  }

  /**
   * The blob `digest` as a stream that fails at its end unless the bytes hash to `digest` and
   * number `size` (`hash: false`: the size only, for a consumer that checks the digest itself):
   * whoever stores it must keep nothing from a stream that failed.
   */
  async blob(digest: string, size: number | undefined, options: { hash?: boolean } = {}): Promise<DigestVerifier> {
    const url = this.url('blobs', digest);
    const response = await this.get(url);
    if (response.status !== 200) await this.fail(response, url);
    const verifier = new DigestVerifier(digest, size, `blob ${digest} from ${url.origin}${url.pathname}`, options.hash ?? true);
    response.body.on('error', (error) => verifier.destroy(error));
    // A consumer that gives up (the store refused it) must not leave the download hanging on its socket.
    verifier.on('close', () => {
      if (!response.body.complete) response.body.destroy();
    });
    return response.body.pipe(verifier);
  }
}
