import type { ImageRef } from '../reference.js';
import type { Transport } from './http.js';
import type { RegistriesConfig } from './registries.js';

/**
 * What the puller needs to pull through embedded-registry peers (docs/registry.md), without
 * knowing how peers are found: the agent's directory (src/agent/registry-peers/) answers which
 * nodes advertise an image, in the order to try them, and gives the transport that presents this
 * node's certificate and trusts only the node CA. Pure decisions live here; no I/O.
 */

export interface PeerEndpoint {
  /** The node's name, for messages and load accounting. */
  node: string;
  /** Its registry's API root: `https://<ip>:<agent port>/v2`. */
  url: URL;
}

export interface PeerSource {
  /** Peers that advertise `image` (its tag, or its digest), best first; never this node itself. */
  peersFor(image: ImageRef): PeerEndpoint[];
  /** How many other nodes advertise anything now (0: no node serves, so a failed pull's message leaves peers out). */
  advertisers(): number;
  /** The TLS transport to peers: undefined while this node has no certificate yet. */
  transport(): Transport | undefined;
  /** A pull from `node` starts and ends (`ok` false: it failed), so the order can prefer idle, reliable peers. */
  started(node: string): void;
  finished(node: string, ok: boolean): void;
}

/** What the puller counts (the agent's prom-client counters when supervisor-metrics is on). */
export interface PeerPullStats {
  /** An image pulled from a peer. */
  hit(): void;
  /** A pull through peers that found no peer advertising the image. */
  miss(): void;
  /** A pull that peers advertised but none served: it went on to the mirrors and the registry. */
  fallback(): void;
  /** Content from a peer that did not match its digest, rejected. */
  corrupt(): void;
}

/**
 * Whether `image` is resolved through peers first: its registry (or `*`) is listed under
 * `mirrors` in registries.yaml, with or without endpoints, as K3s decides it (`docker.io:` with
 * nothing under it is enough). A tag `latest` is not, unless pinned by digest: a peer's `latest` may be older
 * than the registry's, and nothing could tell (K3s skips it by default too).
 */
export function resolvedThroughPeers(config: RegistriesConfig, image: ImageRef): boolean {
  if (!config.mirrors.has(image.domain.toLowerCase()) && !config.mirrors.has('*')) return false;
  return image.digest !== undefined || (image.tag ?? 'latest') !== 'latest';
}
