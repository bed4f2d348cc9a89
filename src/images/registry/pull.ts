import { Readable } from 'node:stream';
import { TokenCache } from './auth.js';
import { type Credential, credentialFromConfig, credentialsFor, type KeyedCredential } from './credentials.js';
import { DigestMismatchError as StoreDigestMismatchError } from '../blobs.js';
import { DigestMismatchError, EndpointSession, type FetchedManifest, RegistryError } from './client.js';
import { type PeerPullStats, type PeerSource, resolvedThroughPeers } from './peers.js';
import { Transport, TransportError } from './http.js';
import type { Descriptor, Platform } from '../oci.js';
import type { ImageRef } from '../reference.js';
import { choosePlatform, ManifestError } from './manifest.js';
import { manifestReference } from './reference.js';
import { type Endpoint, endpointsFor, hostConfig, type RegistriesConfig } from './registries.js';

/**
 * Pulling one image into a node's store: each endpoint registries.yaml gives for the image's
 * registry is tried in order (mirrors, then the registry itself), with each credential that
 * applies there (the pod's pull secrets for that host, then registries.yaml's), until one serves
 * the manifest and every blob. Blobs the store already has are not fetched; every blob is
 * verified against its digest while it streams, so a corrupt or substituted blob is rejected
 * and nothing of it is kept. A failure lists every endpoint tried and what it answered.
 *
 * With a PeerSource (embedded-registry peers, docs/registry.md), a registry listed under
 * `mirrors` is resolved through the peers that advertise the image first, in the order the source
 * gives, without any credential (pull secrets never go to peers); a peer that fails (404, 429,
 * 503, a connection error, content not matching its digest) passes to the next, then to the
 * endpoints above. Blobs a failed peer delivered whole stay: the next source fetches the rest.
 */

/** The write side of the node's image store, as a pull uses it. */
export interface ImageSink {
  hasBlob(digest: string): boolean | Promise<boolean>;
  /** Stores `content` under `digest`, verifying it; rejects (keeping nothing) when the stream fails, or with blobs.ts's DigestMismatchError when it does not match. */
  putBlob(digest: string, content: NodeJS.ReadableStream): Promise<unknown>;
  /** Names `digest` (an image manifest, or an index whose entry for this platform is stored, with all blobs) `ref`. */
  addImage(ref: string, digest: string, source?: string): unknown;
}

export interface PullAttempt {
  /** The endpoint's API root, and whether it is a mirror. */
  endpoint: string;
  mirror: boolean;
  /** The peer node, when the endpoint is an embedded-registry peer ('' : no peer had it, `outcome` says why). */
  peer?: string;
  /** What happened there, with the URL asked. */
  outcome: string;
}

function describeAttempt(a: PullAttempt): string {
  if (a.peer === '') return `peers: ${a.outcome}`;
  return `${a.peer !== undefined ? `peer ${a.peer}` : a.mirror ? 'mirror' : 'registry'} ${a.endpoint}: ${a.outcome}`;
}

export class PullError extends Error {
  override name = 'PullError';
  constructor(
    readonly image: string,
    readonly attempts: PullAttempt[],
  ) {
    super(attempts.map(describeAttempt).join('; '));
  }
}

export interface PullResult {
  /** The name the image is stored under (the original, whatever mirror served it). */
  name: string;
  /** The platform's image manifest. */
  manifestDigest: string;
  /** The digest the tag resolved to (an index's, for a multi-platform image). */
  resolvedDigest: string;
  /** Where it came from. */
  endpoint: string;
  /** The peer node it came from, when it did. */
  peer?: string;
  /** Bytes of the image (config and layers), and of those fetched now. */
  size: number;
  fetched: number;
}

export interface PullRequest {
  image: ImageRef;
  /** Credentials from the pod's pull secrets (matched per host here). */
  secrets?: readonly KeyedCredential[];
  platform?: Platform;
}

function message(error: unknown, url: URL): string {
  if (error instanceof TransportError) return `${url.href}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

export class Puller {
  private readonly transport: Transport;
  private readonly tokens: TokenCache;
  /** Pulls under way, by image and credentials: a second pod asking waits for the same one. */
  private readonly inFlight = new Map<string, Promise<PullResult>>();

  constructor(
    private readonly sink: ImageSink,
    private readonly registries: RegistriesConfig,
    /** Embedded-registry peers to try first for mirrored registries, and what to count. */
    private readonly peers?: { source: PeerSource; stats?: PeerPullStats },
  ) {
    this.transport = new Transport((host) => hostConfig(registries, host)?.tls);
    this.tokens = new TokenCache(this.transport);
  }

  close(): void {
    this.transport.close();
  }

  pull(request: PullRequest): Promise<PullResult> {
    const name = request.image.ref;
    const key = JSON.stringify([name, (request.secrets ?? []).map((s) => [s.key, s.source, s.username])]);
    let running = this.inFlight.get(key);
    if (!running) {
      running = this.pullOnce(request, name).finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, running);
    }
    return running;
  }

  private credentialsAt(endpoint: Endpoint, secrets: readonly KeyedCredential[]): (Credential | undefined)[] {
    const out: Credential[] = [...credentialsFor(secrets, endpoint.url.host, endpoint.repository)];
    const configured = credentialFromConfig(endpoint.config?.auth, `registries.yaml configs for ${endpoint.url.host}`);
    if (configured) out.push(configured);
    return out.length ? out : [undefined];
  }

  /** Through the peers advertising the image, in order; undefined when none served it (attempts says why). */
  private async fromPeers(request: PullRequest, name: string, attempts: PullAttempt[]): Promise<PullResult | undefined> {
    const { source, stats } = this.peers!;
    const transport = source.transport();
    const peers = transport ? source.peersFor(request.image) : [];
    if (!peers.length) {
      stats?.miss();
      // Said only where the embedded registry is in use: in a cluster where no node serves, peers are no news.
      if (source.advertisers() > 0) {
        const why = transport ? `no node advertises ${request.image.ref}` : 'this node has no certificate yet';
        attempts.push({ endpoint: '', mirror: true, peer: '', outcome: why });
      }
      return undefined;
    }
    for (const peer of peers) {
      // No credential: a pod's pull secrets are for its registry, never for another node.
      const session = new EndpointSession(transport!, this.tokens, peer.url, request.image.path, undefined, request.image.domain);
      source.started(peer.node);
      try {
        const result = await this.fromSession(session, request, name, peer.node);
        source.finished(peer.node, true);
        stats?.hit();
        return result;
      } catch (error) {
        source.finished(peer.node, false);
        if (isDigestMismatch(error)) stats?.corrupt();
        const at = session.url('manifests', manifestReference(request.image));
        attempts.push({ endpoint: peer.url.href, mirror: true, peer: peer.node, outcome: message(error, at) });
      }
    }
    stats?.fallback();
    return undefined;
  }

  private async pullOnce(request: PullRequest, name: string): Promise<PullResult> {
    const attempts: PullAttempt[] = [];
    if (this.peers && resolvedThroughPeers(this.registries, request.image)) {
      const result = await this.fromPeers(request, name, attempts);
      if (result) return result;
    }
    for (const endpoint of endpointsFor(this.registries, request.image)) {
      const candidates = this.credentialsAt(endpoint, request.secrets ?? []);
      for (const [index, credential] of candidates.entries()) {
        const session = new EndpointSession(
          this.transport,
          this.tokens,
          endpoint.url,
          endpoint.repository,
          credential,
          endpoint.mirror ? request.image.domain : undefined,
        );
        try {
          return await this.fromSession(session, request, name);
        } catch (error) {
          const at = session.url('manifests', manifestReference(request.image));
          attempts.push({ endpoint: endpoint.url.href, mirror: endpoint.mirror, outcome: message(error, at) });
          // Another credential only helps when this one was refused.
          const refused = error instanceof RegistryError && error.unauthorized;
          if (!refused || index === candidates.length - 1) break;
        }
      }
    }
    throw new PullError(name, attempts);
  }

  private async fromSession(session: EndpointSession, request: PullRequest, name: string, peer?: string): Promise<PullResult> {
    const top = await session.manifest(manifestReference(request.image));
    let image: FetchedManifest = top;
    if (top.manifest.kind === 'index') {
      const chosen = choosePlatform(top.manifest.index.manifests, request.platform);
      image = await session.manifest(chosen.digest);
      if (image.manifest.kind !== 'manifest') throw new ManifestError(`${session.url('manifests', chosen.digest).href}: an index inside an index is not supported`);
    }
    if (image.manifest.kind !== 'manifest') throw new ManifestError('not an image manifest');
    const blobs: Descriptor[] = [image.manifest.manifest.config, ...image.manifest.manifest.layers];
    let fetched = 0;
    for (const blob of blobs) {
      if (await this.sink.hasBlob(blob.digest)) continue;
      // The store verifies the digest as it writes (ImageSink's contract): hashed once, here.
      const stream = await session.blob(blob.digest, blob.size, { hash: false });
      try {
        await this.sink.putBlob(blob.digest, stream);
      } catch (error) {
        if (error instanceof StoreDigestMismatchError) {
          throw new DigestMismatchError(`${stream.where}: content does not match its digest (got ${error.actual}); rejected`);
        }
        throw error;
      }
      fetched += blob.size;
    }
    // Manifests last: a manifest in the store means its blobs are there.
    await this.sink.putBlob(image.digest, Readable.from([image.body]));
    if (top !== image) await this.sink.putBlob(top.digest, Readable.from([top.body]));
    // The name points at what the tag resolved to (an index for a multi-platform image), as containerd records it.
    await this.sink.addImage(name, top.digest, `pull ${peer !== undefined ? `peer ${peer} ` : ''}${session.root.href}`);
    return {
      name,
      manifestDigest: image.digest,
      resolvedDigest: top.digest,
      endpoint: session.root.href,
      ...(peer !== undefined ? { peer } : {}),
      size: blobs.reduce((sum, b) => sum + b.size, 0),
      fetched,
    };
  }
}

/** A digest mismatch, wherever it surfaced (the store may wrap the stream's error as its cause). */
function isDigestMismatch(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof DigestMismatchError) return true;
  }
  return false;
}
