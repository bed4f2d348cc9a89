import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import tls from 'node:tls';

/**
 * The HTTP underneath the registry client: node's http/https with the TLS of the host contacted
 * (system roots plus a configured CA, a client certificate, or no verification when the node's
 * registries.yaml says `insecure_skip_verify`), plain HTTP only for endpoints written http://,
 * redirects followed (a blob may be served from another host: its Authorization is not sent
 * there), and time limits so a silent registry cannot hold a pull forever.
 */

export interface TlsSettings {
  /** PEM: trusted in addition to the system roots. */
  ca?: string;
  cert?: string;
  key?: string;
  insecureSkipVerify?: boolean;
  /** Trust `ca` only, not the system roots too (embedded-registry peers: the node CA alone). */
  onlyCa?: boolean;
}

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The URL that answered (after redirects). */
  url: URL;
  body: IncomingMessage;
}

/** A request that got no HTTP answer (refused, reset, TLS, timeout): says what happened in a few words. */
export class TransportError extends Error {
  override name = 'TransportError';
}

const MAX_REDIRECTS = 5;
/** Connect + TLS + response headers. */
const HEADERS_TIMEOUT_MS = 30_000;
/** Silence while a body streams. */
const IDLE_TIMEOUT_MS = 60_000;

export interface RequestOptions {
  method?: 'GET' | 'HEAD' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

/** Why a TLS or socket error happened, in words for a pod's message. */
export function describeNetworkError(error: unknown): string {
  const e = error as NodeJS.ErrnoException & { reason?: string };
  switch (e.code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'host not found';
    case 'ECONNRESET':
      return 'connection reset';
    case 'ETIMEDOUT':
      return 'timed out';
    case 'UNABLE_TO_VERIFY_LEAF_SIGNATURE':
    case 'SELF_SIGNED_CERT_IN_CHAIN':
    case 'DEPTH_ZERO_SELF_SIGNED_CERT':
    case 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY':
      return `TLS: certificate not trusted (${e.code}; set configs.<host>.tls.ca_file)`;
    case 'ERR_TLS_CERT_ALTNAME_INVALID':
      return `TLS: certificate is not for this host (${e.reason ?? e.message})`;
    case 'CERT_HAS_EXPIRED':
      return 'TLS: certificate has expired';
    case 'EPROTO':
      return `TLS handshake failed (${e.message.split('\n')[0]})`;
    default:
      return e.code ? `${e.code}: ${e.message}` : e.message;
  }
}

export class Transport {
  private readonly agents = new Map<string, http.Agent>();

  /** `tlsFor(host)`: the TLS settings of a host contacted (host[:port] as in URL.host). */
  constructor(private readonly tlsFor: (host: string) => TlsSettings | undefined = () => undefined) {}

  private agentFor(url: URL): http.Agent {
    const key = `${url.protocol}//${url.host}`;
    let agent = this.agents.get(key);
    if (!agent) {
      if (url.protocol === 'http:') {
        agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
      } else {
        const settings = this.tlsFor(url.host) ?? {};
        agent = new https.Agent({
          keepAlive: true,
          maxSockets: 4,
          // Node's `ca` replaces the roots; a registry's own CA is trusted besides them.
          ...(settings.ca ? { ca: settings.onlyCa ? [settings.ca] : [...tls.rootCertificates, settings.ca] } : {}),
          ...(settings.cert ? { cert: settings.cert } : {}),
          ...(settings.key ? { key: settings.key } : {}),
          rejectUnauthorized: !settings.insecureSkipVerify,
        });
      }
      this.agents.set(key, agent);
    }
    return agent;
  }

  private once(url: URL, options: RequestOptions): Promise<HttpResponse> {
    return new Promise((resolve, reject) => {
      const lib = url.protocol === 'http:' ? http : https;
      const req = lib.request(
        url,
        {
          method: options.method ?? 'GET',
          headers: { 'User-Agent': 'drover', ...options.headers },
          agent: this.agentFor(url),
          timeout: HEADERS_TIMEOUT_MS,
        },
        (res) => {
          req.setTimeout(0);
          // The socket goes back to the pool after this answer: its timer must not outlive it.
          const socket = res.socket;
          const idle = (): void => void res.destroy(new TransportError(`no data for ${IDLE_TIMEOUT_MS / 1000}s`));
          socket.setTimeout(IDLE_TIMEOUT_MS, idle);
          res.once('close', () => {
            socket.setTimeout(0);
            socket.removeListener('timeout', idle);
          });
          resolve({ status: res.statusCode ?? 0, headers: res.headers, url, body: res });
        },
      );
      req.on('timeout', () => req.destroy(new TransportError(`no answer within ${HEADERS_TIMEOUT_MS / 1000}s`)));
      req.on('error', (error) => reject(error instanceof TransportError ? error : new TransportError(describeNetworkError(error))));
      req.end(options.body);
    });
  }

  /**
   * One request, following redirects (GET and HEAD). The Authorization header goes only to the
   * origin it was meant for.
   */
  async request(url: URL, options: RequestOptions = {}): Promise<HttpResponse> {
    let current = url;
    let headers = { ...options.headers };
    for (let hop = 0; ; hop++) {
      const response = await this.once(current, { ...options, headers });
      const location = response.headers.location;
      if (![301, 302, 303, 307, 308].includes(response.status) || !location || options.method === 'POST') return response;
      response.body.resume();
      if (hop >= MAX_REDIRECTS) throw new TransportError(`more than ${MAX_REDIRECTS} redirects`);
      const next = new URL(location, current);
      if (next.protocol !== 'https:' && next.protocol !== 'http:') throw new TransportError(`redirect to unsupported URL ${next.protocol}`);
      if (next.origin !== current.origin) {
        const { Authorization: _dropped, authorization: _dropped2, ...rest } = headers;
        headers = rest;
      }
      current = next;
    }
  }

  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}

/** Reads a whole (small) body, refusing more than `limit` bytes. */
export async function readBody(response: HttpResponse, limit: number): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    response.body.destroy();
    throw new TransportError(`answer of ${declared} bytes is over the ${limit}-byte limit`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of response.body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      response.body.destroy();
      throw new TransportError(`answer is over the ${limit}-byte limit`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}
