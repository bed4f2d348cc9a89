import type { KubeObject } from '../apiserver/objects.js';
import { ApiError } from '../apiserver/errors.js';
import type { ApiClient } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { TokenLookup, TokenLookupResult } from './pods/volume-payloads.js';

/**
 * The bound ServiceAccount tokens of the pods on this node, for their projected volumes, as
 * kubelet's token manager keeps them: the agent asks the TokenRequest subresource for a token
 * bound to the pod (so it dies with the pod), for the volume's audience and lifetime, and asks
 * again once 80 % of its lifetime has passed (or 24 hours, whichever comes first), while the old
 * one is still served. The node authorizer lets a node ask only for the accounts of pods bound to
 * it, and node restriction only for tokens bound to such a pod (src/cluster/node-authorization.ts).
 */

/** kubelet refreshes a token older than this whatever its lifetime. */
export const MAX_TOKEN_AGE_MS = 24 * 60 * 60 * 1000;
const RETRY_INITIAL_MS = 1000;
const RETRY_MAX_MS = 60_000;

/** Whether a token issued at `issuedAtMs`, expiring at `expiresAtMs`, is due for a new one at `nowMs`. */
export function refreshDue(issuedAtMs: number, expiresAtMs: number, nowMs: number): boolean {
  const lifetime = expiresAtMs - issuedAtMs;
  return nowMs >= issuedAtMs + lifetime * 0.8 || nowMs - issuedAtMs >= MAX_TOKEN_AGE_MS;
}

interface Entry {
  token?: string;
  issuedAtMs: number;
  expiresAtMs: number;
  fetching: boolean;
  /** Why the last request failed (until one succeeds). */
  error?: string;
  retryAtMs: number;
  retryDelayMs: number;
}

export interface TokenClient {
  requestToken: ApiClient['requestToken'];
}

export class ServiceAccountTokens {
  /** `<pod uid>|<audience>|<seconds>` → the token. */
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly client: TokenClient,
    /** Called when a token arrives or a request fails (the pod manager makes a pass). */
    private readonly onChange: () => void,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** The lookup a pod's projected volumes use. */
  lookupFor(pod: KubeObject): TokenLookup {
    return (audience, seconds) => this.get(pod, audience, seconds);
  }

  get(pod: KubeObject, audience: string, expirationSeconds: number): TokenLookupResult {
    const key = `${pod.metadata.uid}|${audience}|${expirationSeconds}`;
    let entry = this.entries.get(key);
    if (!entry) {
      entry = { issuedAtMs: 0, expiresAtMs: 0, fetching: false, retryAtMs: 0, retryDelayMs: RETRY_INITIAL_MS };
      this.entries.set(key, entry);
    }
    const now = this.now();
    const due = entry.token === undefined || refreshDue(entry.issuedAtMs, entry.expiresAtMs, now);
    if (due && !entry.fetching && now >= entry.retryAtMs) void this.fetch(pod, audience, expirationSeconds, entry);
    // A token being refreshed is still good until it expires.
    if (entry.token !== undefined && now < entry.expiresAtMs) return { state: 'ready', token: entry.token };
    if (entry.error !== undefined) return { state: 'failed', message: entry.error };
    return { state: 'pending' };
  }

  /** Forget the tokens of pods not in `uids`. */
  retainPods(uids: ReadonlySet<string>): void {
    for (const key of [...this.entries.keys()]) if (!uids.has(key.slice(0, key.indexOf('|')))) this.entries.delete(key);
  }

  forgetPod(uid: string): void {
    for (const key of [...this.entries.keys()]) if (key.startsWith(`${uid}|`)) this.entries.delete(key);
  }

  private async fetch(pod: KubeObject, audience: string, expirationSeconds: number, entry: Entry): Promise<void> {
    entry.fetching = true;
    const namespace = pod.metadata.namespace ?? 'default';
    const spec = (pod.spec ?? {}) as { serviceAccountName?: unknown };
    const account = typeof spec.serviceAccountName === 'string' && spec.serviceAccountName ? spec.serviceAccountName : 'default';
    const requestedAt = this.now();
    try {
      const answer = await this.client.requestToken(namespace, account, {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        metadata: {},
        spec: {
          audiences: audience ? [audience] : [],
          expirationSeconds,
          boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid },
        },
      });
      const status = (answer.status ?? {}) as { token?: unknown; expirationTimestamp?: unknown };
      const granted = (answer.spec as { expirationSeconds?: unknown } | undefined)?.expirationSeconds;
      if (typeof status.token !== 'string' || !status.token) throw new Error('the TokenRequest answer holds no token');
      // The lifetime the server granted (it may shorten it), counted on this node's clock.
      const lifetimeMs = (typeof granted === 'number' && granted > 0 ? granted : expirationSeconds) * 1000;
      entry.token = status.token;
      entry.issuedAtMs = requestedAt;
      entry.expiresAtMs = requestedAt + lifetimeMs;
      entry.error = undefined;
      entry.retryDelayMs = RETRY_INITIAL_MS;
      this.logger.info({ pod: `${namespace}/${pod.metadata.name}`, serviceAccount: account, audience: audience || '(API)', expiresInSeconds: lifetimeMs / 1000 }, 'got a ServiceAccount token for a projected volume');
    } catch (error) {
      const why = error instanceof ApiError ? error.message : (error as Error).message;
      entry.error = `failed to fetch token: ${why}`;
      entry.retryAtMs = this.now() + entry.retryDelayMs;
      entry.retryDelayMs = Math.min(entry.retryDelayMs * 2, RETRY_MAX_MS);
      this.logger.warn({ pod: `${namespace}/${pod.metadata.name}`, serviceAccount: account, err: error }, 'cannot get a ServiceAccount token; will retry');
    } finally {
      entry.fetching = false;
      this.onChange();
    }
  }
}
