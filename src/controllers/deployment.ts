import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeTime } from '../apiserver/objects.js';
import { type ApiClient, DEPLOYMENTS, PODS, REPLICASETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import type { EventRecorder } from './events.js';
import { errorMessage, ownerReferenceTo } from './replicaset.js';
import { newer, objectKey, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type DeploymentSpec, deploymentSpec, replicaSetSpec, replicaSetStatus, storedDeploymentStatus } from './kube-types.js';
import {
  deploymentStatus,
  DESIRED_REPLICAS_ANNOTATION,
  isPodTerminated,
  MAX_REPLICAS_ANNOTATION,
  resolveRollingParams,
  REVISION_ANNOTATION,
  rollingUpdateStep,
  type RsCounts,
  sameStatus,
  selectorMatches,
  templateHash,
} from './workload-logic.js';
import { controllerOf } from '../node-protocol/pods.js';
import { POD_TEMPLATE_HASH_LABEL } from './workloads.js';

/**
 * The Deployment controller: one ReplicaSet per pod template (`<deployment>-<template hash>`),
 * rolled from the old ones to the new one by RollingUpdate (within maxSurge/maxUnavailable) or
 * Recreate (old pods all gone first), and a status `kubectl rollout status` understands.
 */

function rsReplicas(rs: KubeObject): number {
  return replicaSetSpec(rs).replicas ?? 0;
}

function revisionOf(rs: KubeObject): number {
  const value = Number(rs.metadata.annotations?.[REVISION_ANNOTATION]);
  return Number.isFinite(value) ? value : 0;
}

export class DeploymentController {
  private readonly queue: WorkQueue;
  /** ReplicaSets as this controller last wrote them, until the informer catches up. */
  private readonly written = new Map<string, KubeObject>();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    /** Dates the status conditions, and times requeues. */
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('deployment', (key) => this.reconcile(key), logger, { clock });
    informers.on(DEPLOYMENTS, (_type, d) => this.queue.add(objectKey(d)));
    informers.on(REPLICASETS, (type, rs) => {
      if (type === 'DELETED') this.written.delete(objectKey(rs));
      const owner = controllerOf(rs);
      if (owner?.kind === 'Deployment') this.queue.add(`${rs.metadata.namespace ?? ''}/${owner.name}`);
      else if (!owner && type !== 'DELETED') {
        // An orphan: any Deployment whose selector matches it may adopt it.
        for (const d of informers.get(DEPLOYMENTS).items()) {
          if (d.metadata.namespace === rs.metadata.namespace && selectorMatches(deploymentSpec(d).selector, rs.metadata.labels)) {
            this.queue.add(objectKey(d));
          }
        }
      }
    });
    // Recreate waits for the old pods to be gone; their deletion is what lets it go on.
    informers.on(PODS, (type, pod) => {
      if (type !== 'DELETED' && !isPodTerminated(pod)) return;
      const rsOwner = controllerOf(pod);
      if (rsOwner?.kind !== 'ReplicaSet') return;
      const rs = informers.get(REPLICASETS).get(pod.metadata.namespace, rsOwner.name);
      const owner = rs && controllerOf(rs);
      if (owner?.kind === 'Deployment') this.queue.add(`${pod.metadata.namespace ?? ''}/${owner.name}`);
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const d of this.informers.get(DEPLOYMENTS).items()) this.queue.add(objectKey(d));
  }

  private ownedReplicaSets(d: KubeObject): KubeObject[] {
    const owned: KubeObject[] = [];
    for (const cached of this.informers.get(REPLICASETS).items()) {
      if (cached.metadata.namespace !== d.metadata.namespace || controllerOf(cached)?.uid !== d.metadata.uid) continue;
      const key = objectKey(cached);
      const mine = this.written.get(key);
      const current = newer(cached, mine)!;
      if (current === cached && mine) this.written.delete(key);
      owned.push(current);
    }
    return owned;
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const d = this.informers.get(DEPLOYMENTS).get(namespace, name);
    if (!d || d.metadata.deletionTimestamp) return;
    if (!this.informers.get(REPLICASETS).hasSynced) throw new Error('ReplicaSet cache not synced yet');
    const spec = deploymentSpec(d);
    const replicas = spec.replicas ?? 1;
    const involved = { kind: 'Deployment', name, namespace, uid: d.metadata.uid!, apiVersion: 'apps/v1' };
    const hash = templateHash(spec.template);
    await this.adoptOrphans(d);
    const owned = this.ownedReplicaSets(d);
    let newRs = owned.find((rs) => rs.metadata.labels?.[POD_TEMPLATE_HASH_LABEL] === hash);
    const old = owned
      .filter((rs) => rs !== newRs)
      .sort((a, b) => revisionOf(a) - revisionOf(b) || String(a.metadata.creationTimestamp).localeCompare(String(b.metadata.creationTimestamp)));
    const maxRevision = owned.reduce((max, rs) => Math.max(max, revisionOf(rs)), 0);
    const recreate = spec.strategy?.type === 'Recreate';
    const params = resolveRollingParams(replicas, spec.strategy?.rollingUpdate?.maxSurge, spec.strategy?.rollingUpdate?.maxUnavailable);
    const unavailableBudget = recreate ? replicas : params.unavailable;

    const scale = async (rs: KubeObject, to: number): Promise<KubeObject> => {
      const from = rsReplicas(rs);
      const updated = await this.client.patch(REPLICASETS, namespace, rs.metadata.name!, 'merge', {
        metadata: {
          annotations: {
            [DESIRED_REPLICAS_ANNOTATION]: String(replicas),
            [MAX_REPLICAS_ANNOTATION]: String(replicas + (recreate ? 0 : params.surge)),
          },
        },
        spec: { replicas: to },
      });
      this.written.set(objectKey(updated), updated);
      if (from !== to) {
        await this.events.record(
          involved,
          'Normal',
          'ScalingReplicaSet',
          `Scaled ${to > from ? 'up' : 'down'} replica set ${rs.metadata.name} to ${to} from ${from}`,
        );
      }
      return updated;
    };

    const createNew = async (initialReplicas: number): Promise<KubeObject> => {
      const rsName = `${name}-${hash}`;
      const template = structuredClone(spec.template ?? {});
      template.metadata = { ...(template.metadata ?? {}), labels: { ...(template.metadata?.labels ?? {}), [POD_TEMPLATE_HASH_LABEL]: hash } };
      const selector = structuredClone(spec.selector ?? {});
      selector.matchLabels = { ...(selector.matchLabels ?? {}), [POD_TEMPLATE_HASH_LABEL]: hash };
      const rs: KubeObject = {
        apiVersion: 'apps/v1',
        kind: 'ReplicaSet',
        metadata: {
          name: rsName,
          namespace,
          labels: { ...template.metadata.labels },
          annotations: {
            [REVISION_ANNOTATION]: String(maxRevision + 1),
            [DESIRED_REPLICAS_ANNOTATION]: String(replicas),
            [MAX_REPLICAS_ANNOTATION]: String(replicas + (recreate ? 0 : params.surge)),
          },
          ownerReferences: [ownerReferenceTo(d, 'Deployment')],
        },
        spec: { replicas: initialReplicas, minReadySeconds: spec.minReadySeconds ?? 0, selector, template },
      };
      let created: KubeObject;
      try {
        created = await this.client.create(REPLICASETS, namespace, rs);
      } catch (error) {
        if (error instanceof ApiError && error.code === 409) {
          const existing = await this.client.get(REPLICASETS, namespace, rsName);
          if (existing && controllerOf(existing)?.uid === d.metadata.uid) {
            this.written.set(objectKey(existing), existing);
            return existing;
          }
          throw new Error(`replica set ${namespace}/${rsName} exists and is not owned by deployment ${name}; delete or rename it`);
        }
        throw error;
      }
      this.written.set(objectKey(created), created);
      if (initialReplicas > 0) {
        await this.events.record(involved, 'Normal', 'ScalingReplicaSet', `Scaled up replica set ${rsName} to ${initialReplicas}`);
      }
      return created;
    };

    if (!spec.paused) {
      if (recreate) {
        const activeOld = old.filter((rs) => rsReplicas(rs) > 0);
        for (const rs of activeOld) await scale(rs, 0);
        const oldUids = new Set(old.map((rs) => rs.metadata.uid));
        const oldPodsLeft = this.informers
          .get(PODS)
          .items()
          .some((p) => p.metadata.namespace === namespace && oldUids.has(controllerOf(p)?.uid) && !isPodTerminated(p));
        if (activeOld.length === 0 && !oldPodsLeft) {
          if (!newRs) newRs = await createNew(replicas);
          else if (rsReplicas(newRs) !== replicas) newRs = await scale(newRs, replicas);
        }
      } else {
        const counts = (rs: KubeObject): RsCounts => ({ name: rs.metadata.name!, replicas: rsReplicas(rs), available: replicaSetStatus(rs).availableReplicas ?? 0 });
        if (!newRs) {
          const [first] = rollingUpdateStep(replicas, params, { name: `${name}-${hash}`, replicas: 0, available: 0 }, old.map(counts));
          newRs = await createNew(first?.kind === 'scale' && first.name === `${name}-${hash}` ? first.replicas : 0);
        } else {
          for (const step of rollingUpdateStep(replicas, params, counts(newRs), old.map(counts))) {
            if (step.kind !== 'scale') continue;
            const target = owned.find((rs) => rs.metadata.name === step.name)!;
            const updated = await scale(target, step.replicas);
            if (target === newRs) newRs = updated;
          }
        }
      }
      // A template rolled back to an old ReplicaSet makes that one the newest revision again.
      if (newRs && old.some((rs) => revisionOf(rs) >= revisionOf(newRs!))) {
        newRs = await this.client.patch(REPLICASETS, namespace, newRs.metadata.name!, 'merge', {
          metadata: { annotations: { [REVISION_ANNOTATION]: String(maxRevision + 1) } },
        });
        this.written.set(objectKey(newRs), newRs);
      }
      await this.cleanUpHistory(spec, old, namespace);
    }

    const current = this.ownedReplicaSets(d);
    const currentNew = newRs ? current.find((rs) => rs.metadata.uid === newRs!.metadata.uid) ?? newRs : undefined;
    const revision = currentNew?.metadata.annotations?.[REVISION_ANNOTATION];
    if (revision && d.metadata.annotations?.[REVISION_ANNOTATION] !== revision) {
      await this.client.patch(DEPLOYMENTS, namespace, name, 'merge', { metadata: { annotations: { [REVISION_ANNOTATION]: revision } } });
    }
    const previousConditions = storedDeploymentStatus(d).conditions ?? [];
    const status = deploymentStatus(
      {
        replicas,
        ...(d.metadata.generation !== undefined ? { generation: d.metadata.generation } : {}),
        unavailable: unavailableBudget,
        ...(currentNew ? { newRs: { name: currentNew.metadata.name!, statusReplicas: replicaSetStatus(currentNew).replicas ?? 0 } } : {}),
        all: current.map((rs) => ({
          specReplicas: rsReplicas(rs),
          statusReplicas: replicaSetStatus(rs).replicas ?? 0,
          ready: replicaSetStatus(rs).readyReplicas ?? 0,
          available: replicaSetStatus(rs).availableReplicas ?? 0,
        })),
      },
      previousConditions,
      kubeTime(this.clock.wallNow()),
    );
    if (!sameStatus(d.status, { ...status })) {
      await this.client.patch(DEPLOYMENTS, namespace, name, 'merge', { status }, 'status');
    }
    return undefined;
  }

  /**
   * As Kubernetes' ClaimReplicaSets: ReplicaSets with no controller (left by a Deployment deleted
   * with propagationPolicy Orphan, say) whose labels this Deployment's selector matches become
   * its own, the newest if their template is this Deployment's. Only a Deployment the API still
   * shows, not being deleted, adopts. Pods are not adopted by ReplicaSets (docs/workloads.md).
   */
  private async adoptOrphans(d: KubeObject): Promise<void> {
    const selector = deploymentSpec(d).selector;
    const orphans = this.informers
      .get(REPLICASETS)
      .items()
      .filter(
        (rs) =>
          rs.metadata.namespace === d.metadata.namespace &&
          !controllerOf(rs) &&
          !rs.metadata.deletionTimestamp &&
          selectorMatches(selector, rs.metadata.labels),
      );
    if (orphans.length === 0) return;
    const live = await this.client.get(DEPLOYMENTS, d.metadata.namespace, d.metadata.name!);
    if (!live || live.metadata.uid !== d.metadata.uid || live.metadata.deletionTimestamp) return;
    for (const rs of orphans) {
      try {
        const adopted = await this.client.patch(REPLICASETS, rs.metadata.namespace, rs.metadata.name!, 'merge', {
          metadata: {
            ownerReferences: [...(rs.metadata.ownerReferences ?? []), ownerReferenceTo(d, 'Deployment')],
            // Against the version seen: a ReplicaSet claimed or changed since is looked at again.
            resourceVersion: rs.metadata.resourceVersion,
          },
        });
        this.written.set(objectKey(adopted), adopted);
        this.logger.info({ deployment: objectKey(d), replicaSet: rs.metadata.name }, 'adopted an orphaned replica set');
      } catch (error) {
        if (!(error instanceof ApiError && (error.code === 404 || error.code === 409))) throw error;
      }
    }
  }

  /** Old ReplicaSets at 0 with no pods left, beyond revisionHistoryLimit, oldest first. */
  private async cleanUpHistory(spec: DeploymentSpec, old: readonly KubeObject[], namespace: string): Promise<void> {
    const limit = spec.revisionHistoryLimit ?? 10;
    const idle = old.filter((rs) => rsReplicas(rs) === 0 && (replicaSetStatus(rs).replicas ?? 0) === 0 && !rs.metadata.deletionTimestamp);
    const excess = idle.length - limit;
    for (const rs of idle.slice(0, Math.max(0, excess))) {
      try {
        await this.client.delete(REPLICASETS, namespace, rs.metadata.name!);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) {
          this.logger.warn({ err: errorMessage(error), replicaSet: rs.metadata.name }, 'could not delete an old replica set');
        }
      }
    }
  }
}
