import https from 'node:https';
import { ApiError, type Status, type StatusReason } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import {
  type ApiClient,
  type DeleteOptions,
  type EvictOptions,
  type ListOptions,
  type PatchKind,
  PODS,
  SERVICEACCOUNTS,
  type ResourceRef,
  type WatchEventType,
  type WatchHandle,
  type WatchHandler,
} from './types.js';

/** The API client over HTTPS, pinned to the cluster CA, with a bearer token or a client certificate. */

const PATCH_CONTENT_TYPES: Record<PatchKind, string> = {
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  json: 'application/json-patch+json',
};

export interface HttpClientOptions {
  /** `https://host:port` */
  server: string;
  caPem: string;
  /** A bearer token, or else a client certificate and its key (PEM). */
  token?: string;
  certificatePem?: string;
  keyPem?: string;
  /** Per request; a watch is exempt. */
  timeoutMs?: number;
  /**
   * How a 429 with Retry-After (a busy server: docs/flow-control.md) is retried: at most `attempts`
   * more times, each after the server's Retry-After plus up to 20 % jitter, as long as the waits
   * together stay within `maxWaitMs`; then the 429 is the caller's. Default 3 and 10 s.
   */
  tooManyRequests?: { attempts: number; maxWaitMs: number };
}

const DEFAULT_TOO_MANY_REQUESTS = { attempts: 3, maxWaitMs: 10_000 };

export class HttpClient implements ApiClient {
  private readonly agent: https.Agent;
  private readonly base: URL;

  constructor(private readonly options: HttpClientOptions) {
    this.base = new URL(options.server);
    this.agent = new https.Agent({
      keepAlive: true,
      maxSockets: 16,
      ca: options.caPem,
      ...(options.certificatePem && options.keyPem ? { cert: options.certificatePem, key: options.keyPem } : {}),
    });
  }

  close(): void {
    this.agent.destroy();
  }

  private path(ref: ResourceRef, namespace: string | undefined, name?: string, subresource?: string): string {
    const root = ref.group ? `/apis/${ref.group}/${ref.version}` : `/api/${ref.version}`;
    const ns = ref.namespaced && namespace ? `/namespaces/${encodeURIComponent(namespace)}` : '';
    return `${root}${ns}/${ref.plural}${name ? `/${encodeURIComponent(name)}` : ''}${subresource ? `/${subresource}` : ''}`;
  }

  /** Where every request goes and who it is from; callers add the method, path and body headers. */
  private requestOptions(method: string, path: string, headers: Record<string, string> = {}): https.RequestOptions {
    return {
      host: this.base.hostname.replace(/^\[|\]$/g, ''),
      port: this.base.port || 443,
      method,
      path,
      agent: this.agent,
      headers: { Accept: 'application/json', ...(this.options.token ? { Authorization: `Bearer ${this.options.token}` } : {}), ...headers },
    };
  }

  /**
   * One request; resolves with the parsed JSON body, rejects with ApiError for non-2xx. A 429 that
   * says when to come back is retried then (bounded by `tooManyRequests`), as client-go does: the
   * server refused it before doing anything, so even a write is safe to send again.
   */
  async request(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<unknown> {
    const { attempts, maxWaitMs } = this.options.tooManyRequests ?? DEFAULT_TOO_MANY_REQUESTS;
    let waitedMs = 0;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.requestOnce(method, path, body, contentType);
      } catch (error) {
        const retryAfterS = error instanceof ApiError && error.code === 429 ? error.details?.retryAfterSeconds : undefined;
        if (retryAfterS === undefined || attempt >= attempts) throw error;
        const delayMs = retryAfterS * 1000 * (1 + Math.random() * 0.2);
        if (waitedMs + delayMs >= maxWaitMs) throw error;
        waitedMs += delayMs;
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }

  private requestOnce(method: string, path: string, body: unknown, contentType: string): Promise<unknown> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          ...this.requestOptions(
            method,
            path,
            payload ? { 'Content-Type': contentType, 'Content-Length': String(payload.length) } : {},
          ),
          timeout: this.options.timeoutMs ?? 10_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown;
            try {
              parsed = text ? JSON.parse(text) : undefined;
            } catch {
              parsed = undefined;
            }
            const code = res.statusCode ?? 0;
            if (code >= 200 && code < 300) resolve(parsed);
            else reject(toApiError(code, parsed, text, res.headers['retry-after']));
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`request to ${this.base.host} timed out`)));
      req.on('error', reject);
      if (payload) req.write(payload);
      req.end();
    });
  }

  async get(ref: ResourceRef, namespace: string | undefined, name: string): Promise<KubeObject | undefined> {
    try {
      return (await this.request('GET', this.path(ref, namespace, name))) as KubeObject;
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return undefined;
      throw error;
    }
  }

  async list(ref: ResourceRef, namespace: string | undefined, options: ListOptions = {}) {
    const q = withSelectors(new URLSearchParams(), options).toString();
    const list = (await this.request('GET', `${this.path(ref, namespace)}${q ? `?${q}` : ''}`)) as {
      items: KubeObject[];
      metadata: { resourceVersion: string };
    };
    return { items: list.items, resourceVersion: list.metadata.resourceVersion };
  }

  async create(ref: ResourceRef, namespace: string | undefined, obj: KubeObject): Promise<KubeObject> {
    return (await this.request('POST', this.path(ref, namespace), obj)) as KubeObject;
  }

  async update(ref: ResourceRef, namespace: string | undefined, obj: KubeObject, subresource?: 'status' | 'finalize'): Promise<KubeObject> {
    return (await this.request('PUT', this.path(ref, namespace, obj.metadata.name, subresource), obj)) as KubeObject;
  }

  async patch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    kind: PatchKind,
    patch: unknown,
    subresource?: 'status',
  ): Promise<KubeObject> {
    return (await this.request(
      'PATCH',
      this.path(ref, namespace, name, subresource),
      patch,
      PATCH_CONTENT_TYPES[kind],
    )) as KubeObject;
  }

  async delete(ref: ResourceRef, namespace: string | undefined, name: string, options: DeleteOptions = {}): Promise<void> {
    await this.request('DELETE', this.path(ref, namespace, name), {
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
      ...(options.propagationPolicy ? { propagationPolicy: options.propagationPolicy } : {}),
    });
  }

  async evict(namespace: string, name: string, options: EvictOptions = {}): Promise<void> {
    const deleteOptions = {
      ...(options.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: options.gracePeriodSeconds } : {}),
      ...(options.preconditions ? { preconditions: options.preconditions } : {}),
    };
    await this.request('POST', this.path(PODS, namespace, name, 'eviction'), {
      apiVersion: 'policy/v1',
      kind: 'Eviction',
      metadata: { name, namespace },
      ...(Object.keys(deleteOptions).length ? { deleteOptions } : {}),
    });
  }

  async requestToken(namespace: string, serviceAccount: string, request: KubeObject): Promise<KubeObject> {
    return (await this.request('POST', this.path(SERVICEACCOUNTS, namespace, serviceAccount, 'token'), request)) as KubeObject;
  }

  watch(
    ref: ResourceRef,
    namespace: string | undefined,
    resourceVersion: string,
    options: ListOptions,
    handler: WatchHandler,
  ): WatchHandle {
    const query = withSelectors(new URLSearchParams({ watch: '1', resourceVersion, allowWatchBookmarks: 'true' }), options);
    let closed = false;
    const close = (error: Error | undefined, expired: boolean): void => {
      if (closed) return;
      closed = true;
      handler.onClose(error, expired);
    };
    const req = https.request(
      this.requestOptions('GET', `${this.path(ref, namespace)}?${query}`),
      (res) => {
        if ((res.statusCode ?? 0) !== 200) {
          res.resume();
          close(new Error(`watch failed with HTTP ${res.statusCode}`), res.statusCode === 410);
          return;
        }
        let buffered = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffered += chunk;
          let newline: number;
          while ((newline = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, newline);
            buffered = buffered.slice(newline + 1);
            if (!line.trim() || closed) continue;
            const event = JSON.parse(line) as { type: string; object: KubeObject & Partial<Status> };
            if (event.type === 'ERROR') {
              close(new Error(event.object.message ?? 'watch error'), event.object.code === 410);
              req.destroy();
              return;
            }
            if (event.type === 'BOOKMARK') continue;
            handler.onEvent(event.type as WatchEventType, event.object);
          }
        });
        res.on('end', () => close(undefined, false));
        res.on('error', (error) => close(error, false));
      },
    );
    req.on('error', (error) => close(error, false));
    req.end();
    return {
      stop: () => {
        closed = true;
        req.destroy();
      },
    };
  }
}

function withSelectors(query: URLSearchParams, options: ListOptions): URLSearchParams {
  if (options.labelSelector) query.set('labelSelector', options.labelSelector);
  if (options.fieldSelector) query.set('fieldSelector', options.fieldSelector);
  return query;
}

/** The answer as an ApiError; a Retry-After header (whole seconds) is kept as the Status's retryAfterSeconds. */
function toApiError(code: number, parsed: unknown, text: string, retryAfterHeader: string | undefined): ApiError {
  const status = parsed as Partial<Status> | undefined;
  const retryAfter = retryAfterHeader && /^\d+$/.test(retryAfterHeader.trim()) ? Number(retryAfterHeader.trim()) : undefined;
  if (status && status.kind === 'Status') {
    const details = retryAfter !== undefined ? { ...status.details, retryAfterSeconds: retryAfter } : status.details;
    return new ApiError(code, (status.reason ?? 'InternalError') as StatusReason, status.message ?? text, details);
  }
  return new ApiError(code, code === 429 ? 'TooManyRequests' : 'InternalError', text || `HTTP ${code}`, retryAfter !== undefined ? { retryAfterSeconds: retryAfter } : undefined);
}
