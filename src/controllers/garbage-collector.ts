import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, DEPLOYMENTS, PODS, REPLICASETS, type ResourceRef, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { errorMessage } from './replicaset.js';
import { type SharedInformers, WorkQueue } from './work-queue.js';
import type { OwnerReference } from './workloads.js';

/**
 * The garbage collector for workloads: when a Deployment, ReplicaSet or StatefulSet is gone, its
 * dependents go too (a Deployment's ReplicaSets, the pods of a ReplicaSet or StatefulSet). Pods
 * are deleted normally, so a pod on a node terminates gracefully. It acts on the owner's DELETED
 * event and, as a safety net for events missed while no controller ran, sweeps for dependents
 * whose owners no longer exist.
 */

const OWNER_KINDS: Record<string, ResourceRef> = {
  Deployment: DEPLOYMENTS,
  ReplicaSet: REPLICASETS,
  StatefulSet: STATEFULSETS,
};
const DEPENDENT_REFS: Record<string, ResourceRef> = { pods: PODS, replicasets: REPLICASETS };

function ownerRefs(obj: KubeObject): OwnerReference[] {
  return (obj.metadata.ownerReferences as OwnerReference[] | undefined) ?? [];
}

export class GarbageCollector {
  /** Keys are `<plural>/<namespace>/<name>` of candidate dependents. */
  private readonly queue: WorkQueue;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
  ) {
    this.queue = new WorkQueue('garbage-collector', (key) => this.collect(key), logger);
    for (const ref of Object.values(OWNER_KINDS)) {
      informers.on(ref, (type, owner) => {
        if (type === 'DELETED') this.enqueueDependentsOf(owner.metadata.uid!);
      });
    }
  }

  stop(): void {
    this.queue.stop();
  }

  private enqueueDependentsOf(uid: string): void {
    for (const [plural, ref] of Object.entries(DEPENDENT_REFS)) {
      for (const obj of this.informers.get(ref).items()) {
        if (ownerRefs(obj).some((r) => r.uid === uid)) this.queue.add(`${plural}/${obj.metadata.namespace ?? ''}/${obj.metadata.name}`);
      }
    }
  }

  private ownersSynced(): boolean {
    return Object.values(OWNER_KINDS).every((ref) => this.informers.get(ref).hasSynced);
  }

  /** Is some owner in the cache under this uid? Unknown kinds are assumed alive: not ours to judge. */
  private ownerLiveInCache(namespace: string | undefined, ref: OwnerReference): boolean {
    const ownerRef = OWNER_KINDS[ref.kind];
    if (!ownerRef) return true;
    return this.informers.get(ownerRef).get(namespace, ref.name)?.metadata.uid === ref.uid;
  }

  /** Every dependent whose owners are all missing from the caches (only once the caches are complete). */
  sweep(): void {
    if (!this.ownersSynced()) return;
    for (const [plural, ref] of Object.entries(DEPENDENT_REFS)) {
      for (const obj of this.informers.get(ref).items()) {
        const refs = ownerRefs(obj);
        if (refs.length === 0 || obj.metadata.deletionTimestamp) continue;
        if (refs.every((r) => !this.ownerLiveInCache(obj.metadata.namespace, r))) {
          this.queue.add(`${plural}/${obj.metadata.namespace ?? ''}/${obj.metadata.name}`);
        }
      }
    }
  }

  private async collect(key: string): Promise<void> {
    const [plural, namespace, ...rest] = key.split('/');
    const name = rest.join('/');
    const ref = DEPENDENT_REFS[plural!]!;
    const obj = this.informers.get(ref).get(namespace, name);
    if (!obj || obj.metadata.deletionTimestamp) return;
    const refs = ownerRefs(obj);
    if (refs.length === 0) return;
    for (const owner of refs) {
      if (this.ownerLiveInCache(namespace, owner)) return;
      // The cache may lag behind an owner created a moment ago: ask the API before deleting.
      const live = await this.client.get(OWNER_KINDS[owner.kind]!, namespace, owner.name);
      if (live && live.metadata.uid === owner.uid && !live.metadata.deletionTimestamp) return;
    }
    try {
      await this.client.delete(ref, namespace, name, { preconditions: { uid: obj.metadata.uid! } });
      this.logger.info(
        { object: `${plural}/${namespace}/${name}`, owners: refs.map((r) => `${r.kind}/${r.name}`) },
        'deleted a dependent whose owner is gone',
      );
    } catch (error) {
      if (error instanceof ApiError && (error.code === 404 || error.code === 409)) return;
      throw new Error(`could not delete ${plural}/${namespace}/${name} after its owner was deleted: ${errorMessage(error)}`);
    }
  }
}
