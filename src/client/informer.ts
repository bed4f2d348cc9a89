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
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: ApiClient,
    private readonly ref: ResourceRef,
    private readonly namespace: string | undefined,
    private readonly onChange: ChangeHandler,
    private readonly logger: Logger,
    private readonly options: ListOptions = {},
  ) {}

  get hasSynced(): boolean {
    return this.synced;
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
      for (const obj of items) {
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
      this.startWatch(resourceVersion);
    } catch (error) {
      this.logger.warn({ err: error, resource: this.ref.plural }, 'list failed; retrying');
      this.retryTimer = setTimeout(() => void this.relist(), 1000);
    }
  }

  private startWatch(resourceVersion: string): void {
    if (this.stopped) return;
    this.watch = this.client.watch(this.ref, this.namespace, resourceVersion, this.options, {
      onEvent: (type, obj) => {
        const key = cacheKey(obj);
        const old = this.cache.get(key);
        if (type === 'DELETED') this.cache.delete(key);
        else this.cache.set(key, obj);
        this.onChange(type, obj, old);
      },
      onClose: (error, expired) => {
        if (this.stopped) return;
        if (error && !expired) this.logger.debug({ err: error, resource: this.ref.plural }, 'watch closed; re-listing');
        this.retryTimer = setTimeout(() => void this.relist(), expired ? 0 : 200);
      },
    });
  }
}
