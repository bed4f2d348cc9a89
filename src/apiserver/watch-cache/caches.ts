import type { Datastore } from '../../datastore/types.js';
import type { ResourceDefinition } from '../definition.js';
import type { ObjectCodec } from '../object-codec.js';
import { ResourceCache } from './resource-cache.js';

/**
 * The watch caches of one API server, one per resource definition, each made on the first list
 * of its resource (as kube-apiserver caches every resource, but only what is read here costs
 * memory and a watch). A cache whose watch ended is dropped and made again by a later list, not
 * sooner than a second after it failed, so a datastore that is down is not hammered with lists.
 */

const RESTART_AFTER_MS = 1000;

export class WatchCaches {
  private readonly caches = new Map<ResourceDefinition, ResourceCache>();
  private readonly failedAt = new Map<ResourceDefinition, number>();

  constructor(
    private readonly datastore: Datastore,
    private readonly codec: ObjectCodec,
    private readonly prefixOf: (def: ResourceDefinition) => string,
    private readonly enabled: boolean,
  ) {}

  /** The cache of `def`, started now if there is none (it serves once ready). */
  cacheFor(def: ResourceDefinition): ResourceCache | undefined {
    if (!this.enabled || def.reads) return undefined;
    const existing = this.caches.get(def);
    if (existing) return existing;
    const failed = this.failedAt.get(def);
    if (failed !== undefined && Date.now() - failed < RESTART_AFTER_MS) return undefined;
    const cache = new ResourceCache(def, this.prefixOf(def), this.datastore, this.codec, (dead) => {
      if (this.caches.get(def) === dead) this.caches.delete(def);
      this.failedAt.set(def, Date.now());
    });
    this.caches.set(def, cache);
    void cache.start();
    return cache;
  }

  /** The cache of `def` if one is serving. */
  existing(def: ResourceDefinition): ResourceCache | undefined {
    const cache = this.caches.get(def);
    return cache?.ready ? cache : undefined;
  }

  stopAll(): void {
    for (const cache of [...this.caches.values()]) cache.stop();
    this.caches.clear();
  }
}
