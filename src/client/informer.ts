import type { KubeObject } from '../apiserver/objects.js';
import type { Logger } from '../logging/logger.js';
import type { ApiClient, ListOptions, ResourceRef, WatchEventType, WatchHandle } from './types.js';

/**
 * A cache of one resource kept current by list + watch, as client-go's informers do: it lists,
 * watches from the list's resourceVersion, and re-lists whenever the watch ends (410 Gone after
 * compaction, a dropped connection). Handlers see every change once, in order.
 */

export type ChangeHandler = (type: WatchEventType, obj: KubeObject, old: KubeObject | undefined) => void;

function cacheKey(obj: KubeObject): string {
  return `${obj.metadata.namespace ?? ''}/${obj.metadata.name ?? ''}`;
}

export class Informer {
  private readonly cache = new Map<string, KubeObject>();
  private watch: WatchHandle | undefined;
  private stopped = false;
  private synced = false;
  /** Between a successful list and the end of the watch that follows it. */
  private following = false;
  /** The resourceVersion of the last list, or of the last event delivered since. */
  private delivered = 0;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: ApiClient,
    private readonly ref: ResourceRef,
    private readonly namespace: string | undefined,
    private readonly onChange: ChangeHandler,
    private readonly logger: Logger,
    private readonly options: ListOptions = {},
    /**
     * What is kept of each object (and handed to onChange), as client-go's SetTransform: a cache
     * that needs a few fields need not hold every object whole. The resourceVersion must stay.
     */
    private readonly transform: (obj: KubeObject) => KubeObject = (obj) => obj,
  ) {}

  get hasSynced(): boolean {
    return this.synced;
  }

  /**
   * Listed, and the watch from that list not ended: the cache is as current as the watch's
   * delivery. False before the first list, while re-listing after a watch ended (a compaction, a
   * lost connection) and once stopped: a reader that must not act on old data reads the store then.
   */
  get current(): boolean {
    return this.following && !this.stopped;
  }

  /**
   * The revision the cache has caught up with: every change up to it has been delivered (client-go's
   * LastSyncResourceVersion). 0 before the first list.
   */
  get revision(): number {
    return this.delivered;
  }

  items(): KubeObject[] {
    return [...this.cache.values()];
  }

  get(namespace: string | undefined, name: string): KubeObject | undefined {
    return this.cache.get(`${namespace ?? ''}/${name}`);
  }

  async start(): Promise<void> {
    await this.relist();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.watch?.stop();
  }

  private async relist(): Promise<void> {
    if (this.stopped) return;
    try {
      const { items, resourceVersion } = await this.client.list(this.ref, this.namespace, this.options);
      const seen = new Set<string>();
      for (const listed of items) {
        const obj = this.transform(listed);
        const key = cacheKey(obj);
        seen.add(key);
        const old = this.cache.get(key);
        this.cache.set(key, obj);
        if (!old) this.onChange('ADDED', obj, undefined);
        else if (old.metadata.resourceVersion !== obj.metadata.resourceVersion) this.onChange('MODIFIED', obj, old);
      }
      for (const [key, old] of [...this.cache]) {
        if (!seen.has(key)) {
          this.cache.delete(key);
          this.onChange('DELETED', old, old);
        }
      }
      this.synced = true;
      this.following = true;
      this.delivered = Number(resourceVersion) || 0;
      this.startWatch(resourceVersion);
    } catch (error) {
      this.logger.warn({ err: error, resource: this.ref.plural }, 'list failed; retrying');
      this.retryTimer = setTimeout(() => void this.relist(), 1000);
    }
  }

  private startWatch(resourceVersion: string): void {
    if (this.stopped) return;
    this.watch = this.client.watch(this.ref, this.namespace, resourceVersion, this.options, {
      onEvent: (type, event) => {
        const obj = this.transform(event);
        const key = cacheKey(obj);
        const old = this.cache.get(key);
        if (type === 'DELETED') this.cache.delete(key);
        else this.cache.set(key, obj);
        const revision = Number(obj.metadata.resourceVersion);
        if (revision > this.delivered) this.delivered = revision;
        this.onChange(type, obj, old);
      },
      onClose: (error, expired) => {
        this.following = false;
        if (this.stopped) return;
        if (error && !expired) this.logger.debug({ err: error, resource: this.ref.plural }, 'watch closed; re-listing');
        this.retryTimer = setTimeout(() => void this.relist(), expired ? 0 : 200);
      },
    });
  }
}
