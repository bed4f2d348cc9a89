import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, DEPLOYMENTS, PODS, REPLICASETS, type ResourceRef, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import { budgetSelects, computeBudgetStatus, type ControllerScale } from './disruption-logic.js';
import { budgetSpec, budgetStatus, deploymentSpec, replicaSetSpec, statefulSetSpec } from './kube-types.js';
import { objectKey, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { stableStringify } from './workload-logic.js';
import { controllerOf } from '../node-protocol/pods.js';

/**
 * The disruption controller: keeps each PodDisruptionBudget's status (how many of its pods are
 * healthy, how many must be, how many may be evicted now) in step with its pods. The eviction
 * subresource reads that status and decrements disruptionsAllowed; this controller gives the
 * budget back once the evicted pod's replacement is Ready.
 */

export const PODDISRUPTIONBUDGETS: ResourceRef = { group: 'policy', version: 'v1', plural: 'poddisruptionbudgets', namespaced: true };

/** The workloads whose scale a budget counts; a change to any of them may change expectedPods. */
const SCALED_WORKLOADS = [REPLICASETS, DEPLOYMENTS, STATEFULSETS] as const;

export class DisruptionController {
  private readonly queue: WorkQueue;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    /** Expires disruptedPods entries (wall-clock times written by evictions), and times requeues. */
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('disruption', (key) => this.reconcile(key), logger, { clock });
    informers.on(PODDISRUPTIONBUDGETS, (_type, pdb) => this.queue.add(objectKey(pdb)));
    informers.on(PODS, (_type, pod, old) => {
      for (const p of old ? [pod, old] : [pod]) this.queueBudgetsOf(p);
    });
    for (const ref of SCALED_WORKLOADS) {
      informers.on(ref, (_type, workload) => this.queueNamespace(workload.metadata.namespace ?? ''));
    }
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const pdb of this.informers.get(PODDISRUPTIONBUDGETS).items()) this.queue.add(objectKey(pdb));
  }

  private queueBudgetsOf(pod: KubeObject): void {
    for (const pdb of this.informers.get(PODDISRUPTIONBUDGETS).items()) {
      if (pdb.metadata.namespace !== pod.metadata.namespace) continue;
      if (budgetSelects(budgetSpec(pdb).selector, pod.metadata.labels)) this.queue.add(objectKey(pdb));
    }
  }

  private queueNamespace(namespace: string): void {
    for (const pdb of this.informers.get(PODDISRUPTIONBUDGETS).items()) {
      if (pdb.metadata.namespace === namespace) this.queue.add(objectKey(pdb));
    }
  }

  /** Kubernetes' finders: a ReplicaSet's pods count by their Deployment's scale when it has one. */
  private controllerScale(pod: KubeObject): ControllerScale | undefined {
    const namespace = pod.metadata.namespace;
    const owner = controllerOf(pod);
    if (!owner) return undefined;
    if (owner.kind === 'StatefulSet') {
      const set = this.informers.get(STATEFULSETS).get(namespace, owner.name);
      return set && set.metadata.uid === owner.uid ? { uid: owner.uid, replicas: scaleOf(statefulSetSpec(set).replicas) } : undefined;
    }
    if (owner.kind !== 'ReplicaSet') return undefined;
    const rs = this.informers.get(REPLICASETS).get(namespace, owner.name);
    if (!rs || rs.metadata.uid !== owner.uid) return undefined;
    const rsOwner = controllerOf(rs);
    if (rsOwner?.kind === 'Deployment') {
      const deployment = this.informers.get(DEPLOYMENTS).get(namespace, rsOwner.name);
      return deployment && deployment.metadata.uid === rsOwner.uid ? { uid: rsOwner.uid, replicas: scaleOf(deploymentSpec(deployment).replicas) } : undefined;
    }
    return { uid: owner.uid, replicas: scaleOf(replicaSetSpec(rs).replicas) };
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const pdb = this.informers.get(PODDISRUPTIONBUDGETS).get(namespace, name);
    if (!pdb || pdb.metadata.deletionTimestamp) return;
    const spec = budgetSpec(pdb);
    const pods = this.informers
      .get(PODS)
      .items()
      .filter((p) => p.metadata.namespace === namespace && !p.metadata.deletionTimestamp && budgetSelects(spec.selector, p.metadata.labels));
    const now = this.clock.wallNow();
    const previous = budgetStatus(pdb);
    const { status, recheckAt } = computeBudgetStatus({
      generation: pdb.metadata.generation ?? 1,
      spec,
      pods,
      controllerScale: (pod) => this.controllerScale(pod),
      previous,
      now,
    });
    if (stableStringify(previous) !== stableStringify(status)) {
      this.logger.debug({ budget: key, disruptionsAllowed: status.disruptionsAllowed, currentHealthy: status.currentHealthy }, 'updating budget status');
      try {
        // A PUT against the cached resourceVersion: if an eviction decremented the budget since,
        // this is a 409 and the next attempt sees its disruptedPods entry, never a stale count.
        await this.client.update(PODDISRUPTIONBUDGETS, namespace, { ...pdb, status: { ...status } }, 'status');
      } catch (error) {
        if (error instanceof ApiError && error.code === 404) return;
        throw error;
      }
    }
    return recheckAt !== undefined ? { requeueAfterMs: Math.max(100, recheckAt - now) } : undefined;
  }
}

/** A workload's spec.replicas; it defaults to 1 on every scaled workload (and a stored non-number counts as absent). */
function scaleOf(replicas: unknown): number {
  return typeof replicas === 'number' ? replicas : 1;
}
