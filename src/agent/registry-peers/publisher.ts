import fs from 'node:fs';
import path from 'node:path';
import { ApiError } from '../../apiserver/errors.js';
import type { KubeObject } from '../../apiserver/objects.js';
import { type ApiClient, CONFIGMAPS } from '../../client/types.js';
import type { ImageStore } from '../../images/store.js';
import type { Logger } from '../../logging/logger.js';
import {
  type AdvertisedImage,
  encodeAdvertisement,
  MAX_ADVERTISED_IMAGES,
  REGISTRY_PEER_DATA_KEY,
  REGISTRY_PEER_LABEL,
  REGISTRY_PEER_NAMESPACE,
  REGISTRY_PEER_NODE_UID_ANNOTATION,
} from '../../node-protocol/registry-peers.js';

/**
 * Publishes which images this node's embedded registry serves (docs/registry.md): one ConfigMap,
 * named after the node, written only when the content changes. The store's name records are
 * checked every second (one stat of the refs directory; a full re-read only when it changed, and
 * once a minute in case blobs went away); a change is published after a second without further
 * change, so an import of many images is one write. Heartbeats never touch it.
 *
 * Only complete images are advertised, with their manifest and every layer as a blob (a layer
 * kept only unpacked cannot be served), so a peer that finds an image here can fetch all of it.
 */

export interface AdvertisementPublisherOptions {
  client: ApiClient;
  nodeName: string;
  /** The uid of this node's Node now ('' before registration); written into the object. */
  nodeUid: () => string;
  store: ImageStore;
  logger: Logger;
  /** How long the store must be quiet before a change is published (default 1 s). */
  debounceMs?: number;
}

const CHECK_MS = 1000;
const FULL_RECHECK_MS = 60_000;
const DEFAULT_DEBOUNCE_MS = 1000;

export class AdvertisementPublisher {
  private timer: NodeJS.Timeout | undefined;
  private lastMtime = -1;
  private lastFullCheck = 0;
  /** When the store was last seen changing (0: no change pending). */
  private changedAt = 0;
  /** What the object holds now, as written by this process ('' : nothing written yet). */
  private published: string | undefined;
  private publishedUid = '';
  private running = false;
  private busy = false;
  /** After a failed write: no new attempt before this (back-off doubling from 2 s to 60 s). */
  private retryAt = 0;
  private failures = 0;
  /** Writes made, for tests and the log. */
  writes = 0;

  constructor(private readonly options: AdvertisementPublisherOptions) {}

  start(): void {
    this.running = true;
    this.changedAt = 1; // publish the first content without waiting for a change
    this.timer = setInterval(() => void this.tick(), CHECK_MS);
    void this.tick();
  }

  stop(): void {
    this.running = false;
    clearInterval(this.timer);
  }

  private refsMtime(): number {
    try {
      return fs.statSync(path.join(this.options.store.root, 'refs')).mtimeMs;
    } catch {
      return 0;
    }
  }

  private async tick(): Promise<void> {
    if (!this.running || this.busy) return;
    this.busy = true;
    try {
      const now = Date.now();
      const mtime = this.refsMtime();
      if (mtime !== this.lastMtime || now - this.lastFullCheck >= FULL_RECHECK_MS) {
        this.lastMtime = mtime;
        this.lastFullCheck = now;
        this.changedAt = now;
        return;
      }
      const uid = this.options.nodeUid();
      if (!uid || now < this.retryAt) return;
      if (uid !== this.publishedUid && this.changedAt === 0) this.changedAt = 1;
      if (this.changedAt === 0 || now - this.changedAt < (this.options.debounceMs ?? DEFAULT_DEBOUNCE_MS)) return;
      const text = encodeAdvertisement(await this.advertisable());
      this.changedAt = 0;
      if (text === this.published && uid === this.publishedUid) return;
      await this.write(text, uid);
      this.published = text;
      this.publishedUid = uid;
      this.failures = 0;
    } catch (error) {
      // Tried again after a back-off (a server that refuses it, e.g. an older one, is not asked every second).
      this.failures++;
      const backOffMs = Math.min(60_000, 1000 * 2 ** this.failures);
      this.retryAt = Date.now() + backOffMs;
      this.changedAt = Date.now();
      this.options.logger.warn({ err: error, retryInMs: backOffMs }, 'embedded registry: could not publish this node’s advertisement; retrying');
    } finally {
      this.busy = false;
    }
  }

  /** The store's complete images, with every blob present; the most recently used first when there are too many. */
  async advertisable(): Promise<AdvertisedImage[]> {
    const { store } = this.options;
    const records = store.records().sort((a, b) => (b.lastUsed ?? b.created).localeCompare(a.lastUsed ?? a.created));
    const out: AdvertisedImage[] = [];
    for (const record of records) {
      if (out.length >= MAX_ADVERTISED_IMAGES) break;
      try {
        const image = await store.imageAt(record.digest, record.ref);
        if (!image.layers.every((l) => store.hasBlob(l.digest)) || !store.hasBlob(image.id)) continue;
        out.push({ ref: record.ref, digest: record.digest, ...(image.manifestDigest !== record.digest ? { manifestDigest: image.manifestDigest } : {}) });
      } catch {
        // incomplete or being replaced: not advertised
      }
    }
    return out;
  }

  private async write(text: string, uid: string): Promise<void> {
    const { client, nodeName } = this.options;
    const desired = (existing?: KubeObject): KubeObject => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        ...(existing ? { resourceVersion: existing.metadata.resourceVersion } : {}),
        name: nodeName,
        namespace: REGISTRY_PEER_NAMESPACE,
        labels: { [REGISTRY_PEER_LABEL]: 'true' },
        annotations: { [REGISTRY_PEER_NODE_UID_ANNOTATION]: uid },
      },
      data: { [REGISTRY_PEER_DATA_KEY]: text },
    });
    const existing = await client.get(CONFIGMAPS, REGISTRY_PEER_NAMESPACE, nodeName);
    try {
      if (existing) await client.update(CONFIGMAPS, REGISTRY_PEER_NAMESPACE, desired(existing));
      else await client.create(CONFIGMAPS, REGISTRY_PEER_NAMESPACE, desired());
    } catch (error) {
      // Someone else's write in between (a previous run of this node): read again at the next tick.
      if (error instanceof ApiError && (error.code === 409 || error.code === 404)) throw new Error(`advertisement changed meanwhile (${error.message})`);
      throw error;
    }
    this.writes++;
    this.options.logger.debug({ bytes: text.length, images: text ? text.split('\n').length : 0 }, 'embedded registry: advertisement published');
  }
}
