import type { KubeObject, ObjectMeta } from '../apiserver/objects.js';
import { Informer } from '../client/informer.js';
import { type ApiClient, NODES, PODS, type ResourceRef, SECRETS, SERVICEACCOUNTS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { ObjectFacts } from '../security/service-account-rules.js';

/**
 * The objects ServiceAccount tokens are checked against, in memory: the accounts, and the pods,
 * Secrets and nodes tokens are bound to, each followed by an informer (a list, then a watch), as
 * kube-apiserver's token authenticator reads its informers rather than etcd. Reading the store
 * at every request cost more than the rest of the authentication (bench/authz.ts).
 *
 * Accounts are followed from start(); pods, Secrets and nodes from the first token bound to one
 * of that kind after it, so a cluster whose tokens are not bound pays nothing for them. Before
 * start() and after stop(), nothing is cached and every check reads the store. Only the name, UID
 * and deletion timestamp of each object are kept (no Secret data, no pod specs).
 *
 * The cache answers only for a kind whose informer is current (listed, and its watch running);
 * otherwise, and for an object it does not hold, the caller reads the store. A change made
 * through this server is known at once, before its writer is answered (ObjectStore.onWrite): the
 * object is read from the store until the watch has delivered that write, a turn of the event
 * loop later. A change made through another server takes effect when its watch event arrives.
 */

/** This server's own writes, as its store reports them, and where each kind is stored. */
export interface LocalWrites {
  /** ObjectStore.onWrite: `listener` is called after each write commits, before the writer is answered. */
  onWrite(listener: (key: string, revision: number) => void): void;
  /** The datastore key prefix of a kind (ObjectStore.keyPrefix). */
  prefix(ref: ResourceRef): string;
}

export type TokenObjectKind = 'serviceAccount' | 'secret' | 'pod' | 'node';

export const TOKEN_OBJECT_REFS: Readonly<Record<TokenObjectKind, ResourceRef>> = {
  serviceAccount: SERVICEACCOUNTS,
  secret: SECRETS,
  pod: PODS,
  node: NODES,
};

/** What the checks read of an object, as the informer keeps it (its resourceVersion too, which informers need). */
function metadataOnly(obj: KubeObject): KubeObject {
  const { name, namespace, uid, resourceVersion, deletionTimestamp } = obj.metadata;
  const metadata: ObjectMeta = {};
  if (name !== undefined) metadata.name = name;
  if (namespace !== undefined) metadata.namespace = namespace;
  if (uid !== undefined) metadata.uid = uid;
  if (resourceVersion !== undefined) metadata.resourceVersion = resourceVersion;
  if (deletionTimestamp !== undefined) metadata.deletionTimestamp = deletionTimestamp;
  return { metadata };
}

export function objectFacts(obj: KubeObject): ObjectFacts {
  return {
    name: obj.metadata.name ?? '',
    uid: obj.metadata.uid ?? '',
    ...(obj.metadata.deletionTimestamp ? { deletionTimestamp: obj.metadata.deletionTimestamp } : {}),
  };
}

interface Followed {
  informer: Informer;
  /** The first list (resolves, failed or not: the informer keeps retrying). */
  started: Promise<void>;
  /** Facts of each object the informer holds, by cacheKey: made once per change, not per request. */
  facts: Map<string, ObjectFacts>;
  /** Where the kind is stored, when this server's writes are reported. */
  prefix: string | undefined;
  /** Objects this server wrote, by cacheKey: the revision, until the informer has delivered it. */
  written: Map<string, number>;
}

/** `namespace/name`, or `name` for a cluster-scoped object: the datastore key after the kind's prefix. */
const cacheKey = (namespace: string | undefined, name: string): string => (namespace === undefined ? name : `${namespace}/${name}`);

/** Past this many writes not yet seen by the watch, those it has seen are swept out. */
const WRITTEN_SWEEP = 1024;

export class TokenObjectCache {
  private readonly followed = new Map<TokenObjectKind, Followed>();
  /** Nothing is followed before start() (a cache nobody stops must not watch): the store answers. */
  private started = false;
  private stopped = false;

  constructor(
    private readonly client: ApiClient,
    private readonly logger: Logger,
    private readonly localWrites?: LocalWrites,
  ) {
    localWrites?.onWrite((key, revision) => this.wrote(key, revision));
  }

  /** Follows the accounts, and from now on each bound kind at first use; resolves after the accounts' first list. */
  start(): Promise<void> {
    this.started = true;
    return this.follow('serviceAccount')?.started ?? Promise.resolve();
  }

  stop(): void {
    this.stopped = true;
    for (const { informer } of this.followed.values()) informer.stop();
  }

  /**
   * The cached facts of an object, or undefined when the cache cannot vouch for them: the kind is
   * not followed yet (it is from now on), its informer is not current, or it does not hold the
   * object (which may have been created a moment ago). Undefined means: read the store.
   */
  cached(kind: TokenObjectKind, namespace: string | undefined, name: string): ObjectFacts | undefined {
    const followed = this.followed.get(kind) ?? this.follow(kind);
    if (!followed?.informer.current) return undefined;
    const key = cacheKey(namespace, name);
    if (followed.written.size > 0) {
      const revision = followed.written.get(key);
      if (revision !== undefined) {
        // Written through this server since the watch delivered it: the store knows better.
        if (followed.informer.revision < revision) return undefined;
        followed.written.delete(key);
      }
    }
    return followed.facts.get(key);
  }

  /** A write this server made (ObjectStore.onWrite), before its writer is answered. */
  private wrote(storageKey: string, revision: number): void {
    for (const followed of this.followed.values()) {
      if (followed.prefix === undefined || !storageKey.startsWith(followed.prefix)) continue;
      followed.written.set(storageKey.slice(followed.prefix.length), revision);
      if (followed.written.size > WRITTEN_SWEEP) {
        for (const [key, at] of followed.written) if (at <= followed.informer.revision) followed.written.delete(key);
      }
      return;
    }
  }

  /** Whether the kind's informer is current (for tests and the benchmark's warm-up). */
  current(kind: TokenObjectKind): boolean {
    return this.followed.get(kind)?.informer.current ?? false;
  }

  private follow(kind: TokenObjectKind): Followed | undefined {
    if (!this.started || this.stopped) return undefined;
    const existing = this.followed.get(kind);
    if (existing) return existing;
    const ref = TOKEN_OBJECT_REFS[kind];
    const facts = new Map<string, ObjectFacts>();
    const written = new Map<string, number>();
    const informer = new Informer(
      this.client,
      ref,
      undefined,
      (type, obj) => {
        const key = cacheKey(obj.metadata.namespace, obj.metadata.name ?? '');
        if (type === 'DELETED') facts.delete(key);
        else facts.set(key, objectFacts(obj));
        const at = written.get(key);
        if (at !== undefined && Number(obj.metadata.resourceVersion) >= at) written.delete(key);
      },
      this.logger.child({ informer: ref.plural }),
      {},
      metadataOnly,
    );
    // Set before the first list starts, so no write of this server falls between.
    const followed: Followed = { informer, started: Promise.resolve(), facts, prefix: this.localWrites?.prefix(ref), written };
    this.followed.set(kind, followed);
    followed.started = informer.start();
    return followed;
  }
}
