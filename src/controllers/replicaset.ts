import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, PODS, REPLICASETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import type { EventRecorder } from './events.js';
import { type ReconcileResult, Expectations, objectKey, ownerToReconcile, splitKey, WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { isPodAvailable, isPodActive, planReplicaSet, randomSuffix, sameStatus, selectorMatches } from './workload-logic.js';
import { replicaSetSpec } from './kube-types.js';
import { controllerOf, isPodReady } from '../node-protocol/pods.js';
import type { OwnerReference } from './workloads.js';

/**
 * The ReplicaSet controller: keeps spec.replicas active pods that match the selector and name the
 * ReplicaSet as their controller. A pod being deleted (evicted, on a lost node) no longer counts,
 * so its replacement is created at once, while the old copy finishes terminating.
 */

export function ownerReferenceTo(owner: KubeObject, kind: string): OwnerReference {
  return {
    apiVersion: 'apps/v1',
    kind,
    name: owner.metadata.name!,
    uid: owner.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}

export class ReplicaSetController {
  private readonly queue: WorkQueue;
  private readonly expectations = new Expectations();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    /** Judges minReadySeconds against the pods' (wall-clock) Ready times, and times requeues. */
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('replicaset', (key) => this.reconcile(key), logger, { clock });
    informers.on(REPLICASETS, (_type, rs) => this.queue.add(objectKey(rs)));
    informers.on(PODS, (_type, pod, old) => {
      for (const p of old ? [pod, old] : [pod]) {
        const owner = controllerOf(p);
        if (owner?.kind === 'ReplicaSet') this.queue.add(`${p.metadata.namespace ?? ''}/${owner.name}`);
      }
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const rs of this.informers.get(REPLICASETS).items()) this.queue.add(objectKey(rs));
  }

  private ownedPods(rs: KubeObject): KubeObject[] {
    const selector = replicaSetSpec(rs).selector;
    return this.informers
      .get(PODS)
      .items()
      .filter(
        (pod) =>
          pod.metadata.namespace === rs.metadata.namespace &&
          controllerOf(pod)?.uid === rs.metadata.uid &&
          selectorMatches(selector, pod.metadata.labels),
      );
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const pods = this.informers.get(PODS);
    const start = ownerToReconcile(key, this.informers.get(REPLICASETS), pods, this.expectations);
    if (!start.owner) return start.result;
    const rs = start.owner;

    const spec = replicaSetSpec(rs);
    const owned = this.ownedPods(rs);
    const now = this.clock.wallNow();
    const plan = planReplicaSet(rs, owned, now);
    const involved = { kind: 'ReplicaSet', name, namespace, uid: rs.metadata.uid!, apiVersion: 'apps/v1' };
    let firstError: unknown;
    if (plan.create || plan.scaleDown.length || plan.finished.length) {
      this.logger.debug({ replicaSet: key, create: plan.create, scaleDown: plan.scaleDown.length, finished: plan.finished.length }, 'syncing pods');
    }

    for (const pod of [...plan.finished, ...plan.scaleDown]) {
      const podName = pod.metadata.name!;
      this.expectations.expectDelete(key, podName);
      try {
        await this.client.delete(PODS, namespace, podName, { preconditions: { uid: pod.metadata.uid! } });
        await this.events.record(involved, 'Normal', 'SuccessfulDelete', `Deleted pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        if (error instanceof ApiError && (error.code === 404 || error.code === 409)) continue;
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedDelete', `Error deleting: ${errorMessage(error)}`);
      }
    }

    for (let i = 0; i < plan.create; i++) {
      let podName = `${name}-${randomSuffix()}`;
      while (pods.get(namespace, podName)) podName = `${name}-${randomSuffix()}`;
      const pod: KubeObject = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: podName,
          namespace,
          labels: { ...(spec.template?.metadata?.labels ?? {}) },
          ...(spec.template?.metadata?.annotations ? { annotations: { ...spec.template.metadata.annotations } } : {}),
          ownerReferences: [ownerReferenceTo(rs, 'ReplicaSet')],
        },
        spec: structuredClone(spec.template?.spec ?? {}),
      };
      this.expectations.expectCreate(key, podName);
      try {
        await this.client.create(PODS, namespace, pod);
        await this.events.record(involved, 'Normal', 'SuccessfulCreate', `Created pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedCreate', `Error creating: ${errorMessage(error)}`);
        // The same error would repeat for every remaining pod.
        break;
      }
    }

    if (!sameStatus(rs.status, { ...plan.status })) {
      try {
        await this.client.patch(REPLICASETS, namespace, name, 'merge', { status: plan.status }, 'status');
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) firstError ??= error;
      }
    }
    if (firstError) throw firstError;

    // A ready pod becomes available by the clock alone: look again when it should be.
    const minReady = spec.minReadySeconds ?? 0;
    if (minReady > 0 && owned.some((p) => isPodActive(p) && isPodReady(p) && !isPodAvailable(p, minReady, now))) {
      return { requeueAfterMs: 1000 };
    }
    return undefined;
  }
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
