import type { KubeObject } from '../../apiserver/objects.js';
import { getPath } from '../../apiserver/objects.js';
import { Informer } from '../../client/informer.js';
import { type ApiClient, CONFIGMAPS, NODES } from '../../client/types.js';
import { Transport } from '../../images/registry/http.js';
import type { PeerEndpoint, PeerSource } from '../../images/registry/peers.js';
import type { ImageRef } from '../../images/reference.js';
import type { Logger } from '../../logging/logger.js';
import {
  decodeAdvertisement,
  REGISTRY_PEER_DATA_KEY,
  REGISTRY_PEER_LABEL,
  REGISTRY_PEER_NAMESPACE,
  REGISTRY_PEER_NODE_UID_ANNOTATION,
} from '../../node-protocol/registry-peers.js';
import { STATE_LABEL } from '../../node-protocol/names.js';

/**
 * Which nodes can serve an image (docs/registry.md, "Pulling from peers"): every node's
 * advertisement (src/node-protocol/registry-peers.ts) and every Node's address and state, kept
 * current by two watches. An advertisement counts only while a Node of that name exists with the
 * uid that wrote it, so the advertisement of a forgotten or re-registered node is ignored. Peers
 * are ordered: Ready nodes first (by the lifecycle controller's state label, else the Ready
 * condition), then those with the fewest pulls from this node in flight, then the fewest recent
 * failures, then at random so that many pulling nodes spread over the holders.
 *
 * Also the transport to peers: this node's certificate as client certificate, the node CA as the
 * only trusted issuer. A certificate renewed at registration gives a new transport.
 */

export interface PeerCredentials {
  nodeCaPem: string;
  certificatePem: string;
  keyPem: string;
}

export interface PeerDirectoryOptions {
  client: ApiClient;
  nodeName: string;
  /** This node's current certificates (undefined before registration gave them). */
  credentials: () => PeerCredentials | undefined;
  logger: Logger;
  /** For tests: the tie-break (default Math.random). */
  random?: () => number;
}

interface PeerNode {
  uid: string;
  ready: boolean;
  url: URL | undefined;
}

interface Advertised {
  uid: string;
  /** References and digests it advertises. */
  keys: Set<string>;
}

/** A peer as the order sees it. */
export interface PeerRank {
  name: string;
  ready: boolean;
  /** Pulls from this node to it in flight. */
  busy: number;
  /** Its failures in the last few minutes. */
  failed: number;
  /** Random, for the last tie-break. */
  tie: number;
}

/** The order peers are tried in: Ready first, then fewest in flight, then fewest recent failures, then at random. */
export function rankPeers(peers: readonly PeerRank[]): string[] {
  return [...peers].sort((a, b) => Number(b.ready) - Number(a.ready) || a.busy - b.busy || a.failed - b.failed || a.tie - b.tie).map((p) => p.name);
}

/** Failures older than this no longer count against a peer. */
const FAILURE_MEMORY_MS = 5 * 60_000;

function nodeView(node: KubeObject): PeerNode {
  const addresses = (getPath(node, ['status', 'addresses']) as { type?: string; address?: string }[] | undefined) ?? [];
  const ip = addresses.find((a) => a.type === 'InternalIP')?.address;
  const port = getPath(node, ['status', 'daemonEndpoints', 'kubeletEndpoint', 'Port']);
  const url = ip && typeof port === 'number' && port > 0 ? new URL(`https://${ip.includes(':') ? `[${ip}]` : ip}:${port}/v2`) : undefined;
  const state = node.metadata.labels?.[STATE_LABEL];
  const conditions = (getPath(node, ['status', 'conditions']) as { type?: string; status?: string }[] | undefined) ?? [];
  const ready = state !== undefined ? state === 'Ready' : conditions.some((c) => c.type === 'Ready' && c.status === 'True');
  return { uid: node.metadata.uid ?? '', ready, url };
}

export class PeerDirectory implements PeerSource {
  private readonly nodes = new Map<string, PeerNode>();
  private readonly adverts = new Map<string, Advertised>();
  private readonly inFlight = new Map<string, number>();
  private readonly failures = new Map<string, number[]>();
  private readonly nodeInformer: Informer;
  private readonly advertInformer: Informer;
  private peerTransport: { key: string; transport: Transport } | undefined;
  private readonly random: () => number;

  constructor(private readonly options: PeerDirectoryOptions) {
    this.random = options.random ?? Math.random;
    // Only the few fields used are kept of each object: at thousands of nodes the caches stay small.
    this.nodeInformer = new Informer(
      options.client,
      NODES,
      undefined,
      (type, node) => {
        const name = node.metadata.name ?? '';
        if (type === 'DELETED') this.nodes.delete(name);
        else this.nodes.set(name, nodeView(node));
      },
      options.logger,
      {},
      (node) => ({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: node.metadata.name, uid: node.metadata.uid, resourceVersion: node.metadata.resourceVersion, labels: node.metadata.labels ?? {} },
        status: {
          addresses: getPath(node, ['status', 'addresses']),
          daemonEndpoints: getPath(node, ['status', 'daemonEndpoints']),
          conditions: ((getPath(node, ['status', 'conditions']) as { type?: string }[] | undefined) ?? []).filter((c) => c.type === 'Ready'),
        },
      }),
    );
    this.advertInformer = new Informer(
      options.client,
      CONFIGMAPS,
      REGISTRY_PEER_NAMESPACE,
      (type, object) => {
        if (type === 'DELETED') this.adverts.delete(object.metadata.name ?? '');
      },
      options.logger,
      { labelSelector: `${REGISTRY_PEER_LABEL}=true` },
      // Parsed once, as it arrives, into the lookup sets; the cache keeps the object without its
      // text, so each advertisement is held once (as its set), not twice.
      (object) => {
        this.remember(object);
        return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: object.metadata.name, namespace: object.metadata.namespace, resourceVersion: object.metadata.resourceVersion } };
      },
    );
  }

  private remember(object: KubeObject): void {
    const images = decodeAdvertisement((object.data as Record<string, string> | undefined)?.[REGISTRY_PEER_DATA_KEY]);
    const keys = new Set<string>();
    for (const image of images) {
      keys.add(image.ref);
      keys.add(image.digest);
      if (image.manifestDigest) keys.add(image.manifestDigest);
    }
    this.adverts.set(object.metadata.name ?? '', { uid: object.metadata.annotations?.[REGISTRY_PEER_NODE_UID_ANNOTATION] ?? '', keys });
  }

  async start(): Promise<void> {
    await Promise.all([this.nodeInformer.start(), this.advertInformer.start()]);
  }

  stop(): void {
    this.nodeInformer.stop();
    this.advertInformer.stop();
    this.peerTransport?.transport.close();
  }

  /** Nodes whose advertisement is current (their Node exists with the uid that wrote it), by name. */
  private holders(keys: readonly string[]): string[] {
    const out: string[] = [];
    for (const [name, advert] of this.adverts) {
      if (name === this.options.nodeName) continue;
      const node = this.nodes.get(name);
      if (!node?.url || !advert.uid || node.uid !== advert.uid) continue;
      if (keys.some((k) => advert.keys.has(k))) out.push(name);
    }
    return out;
  }

  advertisers(): number {
    let count = 0;
    for (const [name, advert] of this.adverts) {
      const node = this.nodes.get(name);
      if (name !== this.options.nodeName && node?.url && advert.uid && node.uid === advert.uid && advert.keys.size > 0) count++;
    }
    return count;
  }

  private recentFailures(node: string, now: number): number {
    const list = (this.failures.get(node) ?? []).filter((t) => now - t < FAILURE_MEMORY_MS);
    if (list.length) this.failures.set(node, list);
    else this.failures.delete(node);
    return list.length;
  }

  peersFor(image: ImageRef): PeerEndpoint[] {
    // By digest when pinned (content is content, whatever name it was stored under), else by name:tag.
    const keys = image.digest ? [image.digest] : [image.ref];
    const now = Date.now();
    const ranked = rankPeers(
      this.holders(keys).map((name) => ({
        name,
        ready: this.nodes.get(name)!.ready,
        busy: this.inFlight.get(name) ?? 0,
        failed: this.recentFailures(name, now),
        tie: this.random(),
      })),
    );
    return ranked.map((name) => ({ node: name, url: this.nodes.get(name)!.url! }));
  }

  transport(): Transport | undefined {
    const credentials = this.options.credentials();
    if (!credentials) return undefined;
    const key = credentials.nodeCaPem + credentials.certificatePem;
    if (this.peerTransport?.key !== key) {
      this.peerTransport?.transport.close();
      const tls = { ca: credentials.nodeCaPem, cert: credentials.certificatePem, key: credentials.keyPem, onlyCa: true };
      this.peerTransport = { key, transport: new Transport(() => tls) };
    }
    return this.peerTransport.transport;
  }

  started(node: string): void {
    this.inFlight.set(node, (this.inFlight.get(node) ?? 0) + 1);
  }

  finished(node: string, ok: boolean): void {
    const left = (this.inFlight.get(node) ?? 1) - 1;
    if (left > 0) this.inFlight.set(node, left);
    else this.inFlight.delete(node);
    if (!ok) this.failures.set(node, [...(this.failures.get(node) ?? []), Date.now()]);
  }
}
