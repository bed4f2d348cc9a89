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

/** One cache per served resource version: a CRD whose spec changed gets a new definition for the same one. */
const resourceOf = (def: ResourceDefinition): string => `${def.group}/${def.version}/${def.plural}`;

export class WatchCaches {
  private readonly caches = new Map<string, ResourceCache>();
  private readonly failedAt = new Map<string, number>();

  constructor(
    private readonly datastore: Datastore,
    private readonly codec: ObjectCodec,
    private readonly prefixOf: (def: ResourceDefinition) => string,
    private readonly enabled: boolean,
  ) {}

  /** The cache of `def`, started now if there is none (it serves once ready). */
  cacheFor(def: ResourceDefinition): ResourceCache | undefined {
    if (!this.enabled || def.reads) return undefined;
    const resource = resourceOf(def);
    const existing = this.caches.get(resource);
    if (existing?.def === def) return existing;
    // A definition replaced (a CRD's new schema or conversion): its objects decode differently,
    // so the old cache (and its watch) goes, and a new one is made from the new definition.
    if (existing) {
      this.caches.delete(resource);
      existing.stop();
    }
    const failed = this.failedAt.get(resource);
    if (failed !== undefined && Date.now() - failed < RESTART_AFTER_MS) return undefined;
    const cache = new ResourceCache(def, this.prefixOf(def), this.datastore, this.codec, (dead) => {
      if (this.caches.get(resource) !== dead) return; // replaced: not a failure of the resource
      this.caches.delete(resource);
      this.failedAt.set(resource, Date.now());
    });
    this.caches.set(resource, cache);
    void cache.start();
    return cache;
  }

  /** The cache of `def` if one is serving. */
  existing(def: ResourceDefinition): ResourceCache | undefined {
    const cache = this.caches.get(resourceOf(def));
    return cache?.ready && cache.def === def ? cache : undefined;
  }

  stopAll(): void {
    for (const cache of [...this.caches.values()]) cache.stop();
    this.caches.clear();
  }
}
