import { FOREGROUND_FINALIZER, ORPHAN_FINALIZER } from '../apiserver/deletion.js';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, CONTROLLER_REVISIONS, CRONJOBS, DAEMONSETS, DEPLOYMENTS, JOBS, PODS, REPLICASETS, type ResourceRef, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import {
  decideDependent,
  decideOwner,
  type OwnerState,
  ownerRefsOf,
  ownerStateOf,
  withoutFinalizer,
  withoutOwners,
} from './garbage-collector-logic.js';
import { errorMessage } from './replicaset.js';
import { WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';
import type { OwnerReference } from './workloads.js';

/**
 * The garbage collector for workloads, as kube-controller-manager's: a Deployment's ReplicaSets
 * and a ReplicaSet's or StatefulSet's pods (found by `ownerReferences` uid) follow their owner,
 * the way the owner's DELETE asked (its propagationPolicy, recorded by the API as a finalizer,
 * src/apiserver/deletion.ts):
 *
 * - Background: the owner is gone at once; its DELETED event sends the dependents here, and each
 *   is deleted once none of its owners exists any more.
 * - Orphan (`orphan` finalizer): the owner's reference is taken off every dependent, then the
 *   finalizer, which lets the API remove the owner. The dependents keep running, unowned.
 * - Foreground (`foregroundDeletion` finalizer): the dependents are deleted (in the foreground
 *   too when they have dependents, so a Deployment's pods go before its ReplicaSets), and the
 *   finalizer comes off once no dependent with `blockOwnerDeletion` is left, even a pod still
 *   terminating on its node.
 *
 * The pure decisions are in garbage-collector-logic.ts. Every decision is made on objects read
 * from the API, not the caches, and every write is preconditioned on the version it was made
 * for: a dependent whose reference was just taken off (orphaning) is never deleted because a
 * cache had not seen that yet. A sweep when the controllers start and every 30 s catches what
 * events were missed while no leader ran.
 */

/** Kinds whose objects own dependents, by ownerReference kind. */
const OWNER_KINDS: Readonly<Record<string, ResourceRef>> = {
  Deployment: DEPLOYMENTS,
  ReplicaSet: REPLICASETS,
  StatefulSet: STATEFULSETS,
  DaemonSet: DAEMONSETS,
  Job: JOBS,
  CronJob: CRONJOBS,
};
/** Kinds whose objects are dependents, by plural (the queue keys). */
const DEPENDENT_KINDS: Readonly<Record<string, ResourceRef>> = { pods: PODS, replicasets: REPLICASETS, jobs: JOBS, controllerrevisions: CONTROLLER_REVISIONS };
/**
 * Kinds whose deletion finalizers this collector takes off: every kind the API puts them on
 * (ResourceDefinition.garbageCollected). A pod has no dependents, so its finalizer just comes off.
 */
const FINALIZED_KINDS: Readonly<Record<string, ResourceRef>> = {
  deployments: DEPLOYMENTS,
  replicasets: REPLICASETS,
  statefulsets: STATEFULSETS,
  daemonsets: DAEMONSETS,
  jobs: JOBS,
  cronjobs: CRONJOBS,
  controllerrevisions: CONTROLLER_REVISIONS,
  pods: PODS,
};

function hasDeletionFinalizer(obj: KubeObject): boolean {
  const finalizers = obj.metadata.finalizers ?? [];
  return Boolean(obj.metadata.deletionTimestamp) && (finalizers.includes(ORPHAN_FINALIZER) || finalizers.includes(FOREGROUND_FINALIZER));
}

function at(plural: string, obj: KubeObject): string {
  return `${plural}/${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
}

function parseKey(key: string): { role: string; plural: string; namespace: string; name: string } {
  const [role, plural, namespace, ...rest] = key.split('/');
  return { role: role!, plural: plural!, namespace: namespace!, name: rest.join('/') };
}

/** 404 (gone already) and 409 (changed since it was read: the key is looked at again) are not failures here. */
function isGoneOrChanged(error: unknown): boolean {
  return error instanceof ApiError && (error.code === 404 || error.code === 409);
}

export class GarbageCollector {
  /** Keys: `dependent/<plural>/<namespace>/<name>` and `owner/<plural>/<namespace>/<name>`. */
  private readonly queue: WorkQueue;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    /** Times requeues and back-offs. */
    clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('garbage-collector', (key) => this.process(key), logger, { clock });
    const refs = new Map<ResourceRef, string>([
      [DEPLOYMENTS, 'deployments'],
      [REPLICASETS, 'replicasets'],
      [STATEFULSETS, 'statefulsets'],
      [DAEMONSETS, 'daemonsets'],
      [JOBS, 'jobs'],
      [CRONJOBS, 'cronjobs'],
      [CONTROLLER_REVISIONS, 'controllerrevisions'],
      [PODS, 'pods'],
    ]);
    for (const [ref, plural] of refs) {
      informers.on(ref, (type, obj, old) => {
        if (type === 'DELETED') {
          if (ref !== PODS) this.enqueueDependentsOf(obj.metadata.uid!);
        } else if (hasDeletionFinalizer(obj)) this.queue.add(`owner/${at(plural, obj)}`);
        // A dependent that changed or went may be what an owner deleting in the foreground, or
        // orphaning, waits for.
        if (DEPENDENT_KINDS[plural]) {
          for (const r of [...ownerRefsOf(obj), ...(old ? ownerRefsOf(old) : [])]) this.enqueueOwnerIfFinalizing(obj.metadata.namespace, r);
        }
      });
    }
  }

  stop(): void {
    this.queue.stop();
  }

  private enqueueDependentsOf(uid: string): void {
    for (const [plural, ref] of Object.entries(DEPENDENT_KINDS)) {
      for (const obj of this.informers.get(ref).items()) {
        if (ownerRefsOf(obj).some((r) => r.uid === uid)) this.queue.add(`dependent/${at(plural, obj)}`);
      }
    }
  }

  private enqueueOwnerIfFinalizing(namespace: string | undefined, ref: OwnerReference): void {
    const ownerRef = OWNER_KINDS[ref.kind];
    if (!ownerRef) return;
    const owner = this.informers.get(ownerRef).get(namespace, ref.name);
    if (owner && owner.metadata.uid === ref.uid && hasDeletionFinalizer(owner)) {
      this.queue.add(`owner/${ownerRef.plural}/${namespace ?? ''}/${ref.name}`);
    }
  }

  private ownersSynced(): boolean {
    return Object.values(OWNER_KINDS).every((ref) => this.informers.get(ref).hasSynced);
  }

  /** Whether the cache holds this owner, alive: a cheap "solid" before asking the API. */
  private ownerLiveInCache(namespace: string | undefined, ref: OwnerReference): boolean {
    const ownerRef = OWNER_KINDS[ref.kind];
    if (!ownerRef) return true;
    const cached = this.informers.get(ownerRef).get(namespace, ref.name);
    return cached?.metadata.uid === ref.uid && !cached.metadata.deletionTimestamp;
  }

  /**
   * Owners being deleted with a deletion finalizer, and dependents whose owners are all missing
   * from the caches (only once the caches are complete).
   */
  sweep(): void {
    for (const [plural, ref] of Object.entries(FINALIZED_KINDS)) {
      for (const obj of this.informers.get(ref).items()) if (hasDeletionFinalizer(obj)) this.queue.add(`owner/${at(plural, obj)}`);
    }
    if (!this.ownersSynced()) return;
    for (const [plural, ref] of Object.entries(DEPENDENT_KINDS)) {
      for (const obj of this.informers.get(ref).items()) {
        const refs = ownerRefsOf(obj);
        if (refs.length === 0 || obj.metadata.deletionTimestamp) continue;
        if (refs.some((r) => !this.ownerLiveInCache(obj.metadata.namespace, r))) this.queue.add(`dependent/${at(plural, obj)}`);
      }
    }
  }

  private async process(key: string): Promise<void> {
    const { role, plural, namespace, name } = parseKey(key);
    if (role === 'owner') await this.processOwner(FINALIZED_KINDS[plural]!, namespace, name, key);
    else await this.processDependent(plural, DEPENDENT_KINDS[plural]!, namespace, name);
  }

  /** How a dependent sees one owner; the API decides whatever the cache cannot vouch for. */
  private async ownerState(namespace: string, ref: OwnerReference): Promise<OwnerState | undefined> {
    const ownerRef = OWNER_KINDS[ref.kind];
    if (!ownerRef) return undefined;
    if (this.ownerLiveInCache(namespace, ref)) return 'solid';
    return ownerStateOf(ref, await this.client.get(ownerRef, namespace, ref.name));
  }

  /** Whether anything in the caches names this object as its owner. */
  private hasDependents(uid: string): boolean {
    return Object.values(DEPENDENT_KINDS).some((ref) => this.informers.get(ref).items().some((o) => ownerRefsOf(o).some((r) => r.uid === uid)));
  }

  private async processDependent(plural: string, ref: ResourceRef, namespace: string, name: string): Promise<void> {
    const obj = await this.client.get(ref, namespace, name);
    if (!obj) return;
    const states = new Map<string, OwnerState>();
    for (const owner of ownerRefsOf(obj)) {
      const state = await this.ownerState(namespace, owner);
      if (state) states.set(owner.uid, state);
    }
    // Whether it has dependents matters only under an owner waiting in the foreground.
    const waiting = [...states.values()].includes('waiting');
    const decision = decideDependent(obj, states, waiting && this.hasDependents(obj.metadata.uid!));
    const what = `${plural}/${namespace}/${name}`;
    try {
      if (decision.action === 'unlink') {
        await this.unlink(ref, obj, decision.ownerUids);
        this.logger.info({ object: what, owners: decision.ownerUids }, 'removed references to owners that are gone');
      } else if (decision.action === 'delete') {
        await this.client.delete(ref, namespace, name, {
          // The version judged: had an orphaning taken the reference off since, this is a 409.
          preconditions: { uid: obj.metadata.uid!, resourceVersion: obj.metadata.resourceVersion! },
          propagationPolicy: decision.propagationPolicy,
        });
        this.logger.info(
          { object: what, owners: ownerRefsOf(obj).map((r) => `${r.kind}/${r.name}`), propagationPolicy: decision.propagationPolicy },
          'deleted a dependent whose owners are gone or deleting in the foreground',
        );
      }
    } catch (error) {
      if (!isGoneOrChanged(error)) throw new Error(`could not collect ${what}: ${errorMessage(error)}`);
      // Changed under us: judge it again on its new version.
      if (error instanceof ApiError && error.code === 409) this.queue.add(`dependent/${what}`);
    }
  }

  /** Every dependent that names this uid, read from the API (the decision to remove a finalizer rests on it). */
  private async liveDependents(namespace: string, uid: string): Promise<{ ref: ResourceRef; plural: string; obj: KubeObject }[]> {
    const found: { ref: ResourceRef; plural: string; obj: KubeObject }[] = [];
    for (const [plural, ref] of Object.entries(DEPENDENT_KINDS)) {
      for (const obj of (await this.client.list(ref, namespace)).items) {
        if (ownerRefsOf(obj).some((r) => r.uid === uid)) found.push({ ref, plural, obj });
      }
    }
    return found;
  }

  private async processOwner(ref: ResourceRef, namespace: string, name: string, key: string): Promise<void> {
    const owner = await this.client.get(ref, namespace, name);
    if (!owner || !hasDeletionFinalizer(owner)) return;
    const dependents = await this.liveDependents(namespace, owner.metadata.uid!);
    const decision = decideOwner(owner, dependents.map((d) => d.obj));
    const where = new Map(dependents.map((d) => [d.obj, d]));
    const what = `${ref.plural}/${namespace}/${name}`;
    if (decision.action === 'orphan') {
      for (const dependent of decision.unlink) {
        try {
          await this.unlink(where.get(dependent)!.ref, dependent, [owner.metadata.uid!]);
        } catch (error) {
          if (!isGoneOrChanged(error)) throw error;
        }
      }
      if (decision.unlink.length) {
        this.logger.info({ owner: what, dependents: decision.unlink.map((d) => at(where.get(d)!.plural, d)) }, 'orphaned the dependents of a deleted owner');
        // Look again: the finalizer comes off only once the API shows no dependent left.
        this.queue.add(key);
        return;
      }
      await this.removeFinalizer(ref, owner, ORPHAN_FINALIZER, key);
      return;
    }
    if (decision.action === 'foreground') {
      for (const dependent of decision.judge) this.queue.add(`dependent/${at(where.get(dependent)!.plural, dependent)}`);
      if (decision.removeFinalizer) await this.removeFinalizer(ref, owner, FOREGROUND_FINALIZER, key);
    }
  }

  /** Take these owners' references off a dependent, against the version read. */
  private async unlink(ref: ResourceRef, obj: KubeObject, ownerUids: readonly string[]): Promise<void> {
    await this.client.patch(ref, obj.metadata.namespace, obj.metadata.name!, 'merge', {
      metadata: { ownerReferences: withoutOwners(obj, ownerUids) ?? null, resourceVersion: obj.metadata.resourceVersion },
    });
  }

  /** Take a deletion finalizer off, against the version read; the API removes an object left with none. */
  private async removeFinalizer(ref: ResourceRef, owner: KubeObject, finalizer: string, key: string): Promise<void> {
    try {
      await this.client.patch(ref, owner.metadata.namespace, owner.metadata.name!, 'merge', {
        metadata: { finalizers: withoutFinalizer(owner, finalizer) ?? null, resourceVersion: owner.metadata.resourceVersion },
      });
    } catch (error) {
      if (!isGoneOrChanged(error)) throw error;
      // Changed since it was judged (a pod's status, say): judge it again.
      if (error instanceof ApiError && error.code === 409) this.queue.add(key);
      return;
    }
    this.logger.info({ owner: `${ref.plural}/${owner.metadata.namespace}/${owner.metadata.name}`, finalizer }, 'removed a deletion finalizer');
  }
}
