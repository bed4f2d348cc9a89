import { Informer } from '../client/informer.js';
import { type ApiClient, CONFIGMAPS, SECRETS } from '../client/types.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { Logger } from '../logging/logger.js';
import { type ConfigReference, referenceKey } from '../node-protocol/pod-references.js';
import type { LookupResult } from './pods/env-resolution.js';

/**
 * The ConfigMaps and Secrets the pods on this node use, kept current the way kubelet's
 * watch-based managers keep them: one watch per object (`fieldSelector=metadata.name=<name>` in
 * its namespace), which is all the node authorizer lets a node read. An object is watched while
 * at least one pod bound here refers to it, so a change reaches the agent within moments.
 *
 * A server caps the watches one user may hold (max-watches-per-user, 100 by default); past
 * MAX_WATCHED objects the rest are read with a GET every POLL_MS instead, as kubelet's TTL cache
 * does, so a node with many referenced objects keeps working, only slower to see their changes.
 */

export const MAX_WATCHED = 50;
export const POLL_MS = 10_000;

interface Entry {
  ref: ConfigReference;
  users: Set<string>;
  informer?: Informer;
  poll?: { timer: NodeJS.Timeout; result: LookupResult };
}

export class ConfigObjectCache {
  private readonly entries = new Map<string, Entry>();
  /** pod uid → the keys of the objects it refers to */
  private readonly byPod = new Map<string, string[]>();
  private stopped = false;

  constructor(
    private readonly client: ApiClient,
    /** Called whenever an object appears, changes or goes (and once each watch has listed). */
    private readonly onChange: () => void,
    private readonly logger: Logger,
    private readonly limits: { maxWatched: number; pollMs: number } = { maxWatched: MAX_WATCHED, pollMs: POLL_MS },
  ) {}

  /** The objects pod `uid` refers to now (its whole list; earlier ones it no longer names are released). */
  setPodReferences(uid: string, refs: readonly ConfigReference[]): void {
    if (this.stopped) return;
    const keys = refs.map(referenceKey);
    const before = this.byPod.get(uid);
    if (before && before.length === keys.length && before.every((k, i) => k === keys[i])) return;
    this.byPod.set(uid, keys);
    refs.forEach((ref, i) => this.use(keys[i]!, ref, uid));
    for (const key of before ?? []) if (!keys.includes(key)) this.release(key, uid);
  }

  /** Forget every pod not in `uids` (pods gone from this node). */
  retainPods(uids: ReadonlySet<string>): void {
    for (const uid of [...this.byPod.keys()]) if (!uids.has(uid)) this.forgetPod(uid);
  }

  forgetPod(uid: string): void {
    for (const key of this.byPod.get(uid) ?? []) this.release(key, uid);
    this.byPod.delete(uid);
  }

  lookup(ref: ConfigReference): LookupResult {
    const entry = this.entries.get(referenceKey(ref));
    if (!entry) return { state: 'unknown' };
    if (entry.poll) return entry.poll.result;
    if (!entry.informer?.hasSynced) return { state: 'unknown' };
    const object = entry.informer.get(ref.namespace, ref.name);
    return object ? { state: 'present', object } : { state: 'absent' };
  }

  /** How many objects are watched, and how many polled (tests, logs). */
  counts(): { watched: number; polled: number } {
    let watched = 0;
    for (const entry of this.entries.values()) if (entry.informer) watched++;
    return { watched, polled: this.entries.size - watched };
  }

  stop(): void {
    this.stopped = true;
    for (const entry of this.entries.values()) this.stopEntry(entry);
    this.entries.clear();
    this.byPod.clear();
  }

  private use(key: string, ref: ConfigReference, uid: string): void {
    const existing = this.entries.get(key);
    if (existing) {
      existing.users.add(uid);
      return;
    }
    const entry: Entry = { ref, users: new Set([uid]) };
    this.entries.set(key, entry);
    const resource = ref.kind === 'ConfigMap' ? CONFIGMAPS : SECRETS;
    if (this.counts().watched < this.limits.maxWatched) {
      entry.informer = new Informer(this.client, resource, ref.namespace, () => this.onChange(), this.logger, {
        fieldSelector: `metadata.name=${ref.name}`,
      });
      // The first list's outcome (present or absent) is a change too: a pod waits for it.
      void entry.informer.start().then(() => this.onChange());
    } else {
      entry.poll = { timer: setInterval(() => void this.poll(entry, resource), this.limits.pollMs), result: { state: 'unknown' } };
      void this.poll(entry, resource);
    }
  }

  private async poll(entry: Entry, resource: typeof CONFIGMAPS): Promise<void> {
    let result: LookupResult;
    try {
      const object: KubeObject | undefined = await this.client.get(resource, entry.ref.namespace, entry.ref.name);
      result = object ? { state: 'present', object } : { state: 'absent' };
    } catch (error) {
      // Not readable now (a server restarting, the node authorizer not yet aware of the pod):
      // keep what was known and ask again at the next round.
      this.logger.debug({ err: error, kind: entry.ref.kind, namespace: entry.ref.namespace, name: entry.ref.name }, 'cannot read a referenced object; retrying');
      return;
    }
    if (!entry.poll || this.entries.get(referenceKey(entry.ref)) !== entry) return;
    const before = entry.poll.result;
    entry.poll.result = result;
    const version = (r: LookupResult): string => (r.state === 'present' ? (r.object.metadata.resourceVersion ?? '') : r.state);
    if (version(before) !== version(result)) this.onChange();
  }

  private release(key: string, uid: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    entry.users.delete(uid);
    if (entry.users.size > 0) return;
    this.stopEntry(entry);
    this.entries.delete(key);
  }

  private stopEntry(entry: Entry): void {
    entry.informer?.stop();
    if (entry.poll) clearInterval(entry.poll.timer);
  }
}
