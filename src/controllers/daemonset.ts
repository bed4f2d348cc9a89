import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, CONTROLLER_REVISIONS, DAEMONSETS, NODES, PODS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { controllerOf } from '../node-protocol/pods.js';
import { type Clock, systemClock } from './clock.js';
import { daemonBackoffMs, daemonTolerations, planDaemonSet, planRevisions, revisionData } from './daemonset-logic.js';
import type { EventRecorder } from './events.js';
import type { PodSpec, PodTemplateSpec } from './kube-types.js';
import { errorMessage, ownerReferenceTo } from './replicaset.js';
import { Expectations, objectKey, ownerToReconcile, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import { isPodAvailable, isPodActive, randomSuffix, sameStatus, templateHash } from './workload-logic.js';
import { CONTROLLER_REVISION_HASH_LABEL } from './workloads.js';

/**
 * The DaemonSet controller: one pod per eligible node (daemonset-logic.ts decides which). A
 * daemon pod is bound to its node when it is created (spec.nodeName, plus the node affinity kube
 * gives it), so the scheduler never moves it; it tolerates the node being unreachable or not
 * ready, so failover leaves it where it is; and it goes when its Node goes.
 */

/** kube's deprecated but still set label: the DaemonSet generation a pod was made from. */
export const POD_TEMPLATE_GENERATION_LABEL = 'pod-template-generation';

interface DaemonSetSpecView {
  selector?: unknown;
  template?: PodTemplateSpec;
  minReadySeconds?: number;
  updateStrategy?: { type?: string; rollingUpdate?: { maxUnavailable?: number | string; maxSurge?: number | string } };
  revisionHistoryLimit?: number;
}

export class DaemonSetController {
  private readonly queue: WorkQueue;
  private readonly expectations = new Expectations();
  /** Per `<ds uid>/<node>`: failures of its daemon pod in a row, and when a new one may start. */
  private readonly failures = new Map<string, { count: number; until: number }>();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('daemonset', (key) => this.reconcile(key), logger, { clock });
    informers.on(DAEMONSETS, (_type, ds) => this.queue.add(objectKey(ds)));
    informers.on(PODS, (_type, pod, old) => {
      for (const p of old ? [pod, old] : [pod]) {
        const owner = controllerOf(p);
        if (owner?.kind === 'DaemonSet') this.queue.add(`${p.metadata.namespace ?? ''}/${owner.name}`);
      }
    });
    informers.on(NODES, (type, node, old) => {
      // Heartbeats change neither labels nor taints: only a node's arrival, departure or those matter.
      if (type === 'MODIFIED' && old && JSON.stringify([old.metadata.labels, old.spec]) === JSON.stringify([node.metadata.labels, node.spec])) return;
      this.resync();
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    const uids = new Set<string>();
    for (const ds of this.informers.get(DAEMONSETS).items()) {
      uids.add(ds.metadata.uid!);
      this.queue.add(objectKey(ds));
    }
    // Back-offs of DaemonSets that are gone.
    for (const key of this.failures.keys()) if (!uids.has(key.slice(0, key.indexOf('/')))) this.failures.delete(key);
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const podCache = this.informers.get(PODS);
    const start = ownerToReconcile(key, this.informers.get(DAEMONSETS), podCache, this.expectations);
    if (!start.owner) return start.result;
    const ds = start.owner;
    const nodes = this.informers.get(NODES);
    if (!nodes.hasSynced) return { requeueAfterMs: 1000 };

    const spec = (ds.spec ?? {}) as DaemonSetSpecView;
    const template = spec.template ?? {};
    const updateHash = templateHash(template);
    const owned = podCache.items().filter((p) => p.metadata.namespace === namespace && controllerOf(p)?.uid === ds.metadata.uid);
    const now = this.clock.wallNow();
    const strategy = spec.updateStrategy?.type === 'OnDelete' ? 'OnDelete' : 'RollingUpdate';
    const minReadySeconds = spec.minReadySeconds ?? 0;
    const plan = planDaemonSet({
      nodes: nodes.items(),
      pods: owned,
      template: (template.spec ?? {}) as PodSpec,
      updateHash,
      strategy,
      ...(spec.updateStrategy?.rollingUpdate?.maxUnavailable !== undefined ? { maxUnavailable: spec.updateStrategy.rollingUpdate.maxUnavailable } : {}),
      ...(spec.updateStrategy?.rollingUpdate?.maxSurge !== undefined ? { maxSurge: spec.updateStrategy.rollingUpdate.maxSurge } : {}),
      minReadySeconds,
      ...(ds.metadata.generation !== undefined ? { generation: ds.metadata.generation } : {}),
      now,
      backoffUntil: this.backoffFor(ds, owned),
    });
    for (const node of plan.failedOn) {
      const key = `${ds.metadata.uid}/${node}`;
      const count = (this.failures.get(key)?.count ?? 0) + 1;
      this.failures.set(key, { count, until: now + daemonBackoffMs(count) });
    }
    if (plan.create.length || plan.delete.length) {
      this.logger.debug({ daemonSet: key, create: plan.create, delete: plan.delete.map((d) => d.pod.metadata.name) }, 'syncing daemon pods');
    }
    const involved = { kind: 'DaemonSet', name, namespace, uid: ds.metadata.uid!, apiVersion: 'apps/v1' };
    let firstError: unknown;
    try {
      await this.syncRevisions(ds, template, updateHash, owned);
    } catch (error) {
      firstError = error;
    }

    for (const { pod, force } of plan.delete) {
      const podName = pod.metadata.name!;
      this.expectations.expectDelete(key, podName);
      try {
        await this.client.delete(PODS, namespace, podName, {
          preconditions: { uid: pod.metadata.uid! },
          ...(force ? { gracePeriodSeconds: 0 } : {}),
        });
        await this.events.record(involved, 'Normal', 'SuccessfulDelete', `Deleted pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        if (error instanceof ApiError && (error.code === 404 || error.code === 409)) continue;
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedDelete', `Error deleting: ${errorMessage(error)}`);
      }
    }

    for (const node of plan.create) {
      let podName = `${name}-${randomSuffix()}`;
      while (podCache.get(namespace, podName)) podName = `${name}-${randomSuffix()}`;
      const pod = this.daemonPod(ds, template, updateHash, node, podName);
      this.expectations.expectCreate(key, podName);
      try {
        await this.client.create(PODS, namespace, pod);
        await this.events.record(involved, 'Normal', 'SuccessfulCreate', `Created pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedCreate', `Error creating: ${errorMessage(error)}`);
        break; // the same error would repeat for every node
      }
    }

    if (!sameStatus(ds.status, { ...plan.status })) {
      try {
        await this.client.patch(DAEMONSETS, namespace, name, 'merge', { status: plan.status }, 'status');
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) firstError ??= error;
      }
    }
    if (firstError) throw firstError;
    // A ready pod becomes available by the clock alone: look again when it should be.
    if (minReadySeconds > 0 && owned.some((p) => isPodActive(p) && !isPodAvailable(p, minReadySeconds, now))) {
      return { requeueAfterMs: 1000 };
    }
    if (plan.failedOn.length) return { requeueAfterMs: 1000 };
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: Math.max(100, plan.requeueAfterMs) } : undefined;
  }

  /** The back-offs of this DaemonSet's nodes; a node whose pod is ready again starts afresh. */
  private backoffFor(ds: KubeObject, owned: readonly KubeObject[]): Map<string, number> {
    const out = new Map<string, number>();
    const prefix = `${ds.metadata.uid}/`;
    for (const [key, { until }] of this.failures) {
      if (!key.startsWith(prefix)) continue;
      const node = key.slice(prefix.length);
      if (owned.some((p) => (p.spec as { nodeName?: string } | undefined)?.nodeName === node && isPodActive(p) && isPodAvailable(p, 0, 0))) {
        this.failures.delete(key);
      } else out.set(node, until);
    }
    return out;
  }

  /** One ControllerRevision per template (`<ds>-<hash>`), the current one numbered highest; old ones pruned. */
  private async syncRevisions(ds: KubeObject, template: PodTemplateSpec, hash: string, pods: readonly KubeObject[]): Promise<void> {
    const namespace = ds.metadata.namespace!;
    const owned = this.informers
      .get(CONTROLLER_REVISIONS)
      .items()
      .filter((r) => r.metadata.namespace === namespace && controllerOf(r)?.uid === ds.metadata.uid);
    const live = new Set(pods.map((p) => p.metadata.labels?.[CONTROLLER_REVISION_HASH_LABEL]).filter((h): h is string => Boolean(h)));
    const plan = planRevisions(
      owned.map((r) => ({ name: r.metadata.name!, hash: r.metadata.labels?.[CONTROLLER_REVISION_HASH_LABEL], revision: typeof r.revision === 'number' ? r.revision : 0 })),
      hash,
      live,
      (ds.spec as DaemonSetSpecView | undefined)?.revisionHistoryLimit ?? 10,
    );
    if (plan.create !== undefined) {
      const revision: KubeObject = {
        apiVersion: 'apps/v1',
        kind: 'ControllerRevision',
        metadata: {
          name: `${ds.metadata.name}-${hash}`,
          namespace,
          labels: { ...(template.metadata?.labels ?? {}), [CONTROLLER_REVISION_HASH_LABEL]: hash },
          ownerReferences: [ownerReferenceTo(ds, 'DaemonSet')],
        },
        data: revisionData(template),
        revision: plan.create,
      };
      try {
        await this.client.create(CONTROLLER_REVISIONS, namespace, revision);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 409)) throw error;
      }
    }
    if (plan.renumber) {
      await this.client.patch(CONTROLLER_REVISIONS, namespace, plan.renumber.name, 'merge', { revision: plan.renumber.revision });
    }
    for (const name of plan.delete) {
      try {
        await this.client.delete(CONTROLLER_REVISIONS, namespace, name);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) throw error;
      }
    }
  }

  private daemonPod(ds: KubeObject, template: PodTemplateSpec, hash: string, node: string, podName: string): KubeObject {
    const podSpec = structuredClone(template.spec ?? {}) as PodSpec & Record<string, unknown>;
    podSpec.tolerations = daemonTolerations(podSpec) as PodSpec['tolerations'];
    // kube pins a daemon pod to its node by required affinity on metadata.name; Drover also binds
    // it at once, so neither the scheduler's resource fit nor a cordon keeps it off its node.
    const affinity = (podSpec.affinity ?? {}) as Record<string, unknown>;
    podSpec.affinity = {
      ...affinity,
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [node] }] }],
        },
      },
    } as PodSpec['affinity'];
    podSpec.nodeName = node;
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: podName,
        namespace: ds.metadata.namespace,
        labels: {
          ...(template.metadata?.labels ?? {}),
          [CONTROLLER_REVISION_HASH_LABEL]: hash,
          [POD_TEMPLATE_GENERATION_LABEL]: String(ds.metadata.generation ?? 1),
        },
        ...(template.metadata?.annotations ? { annotations: { ...template.metadata.annotations } } : {}),
        ownerReferences: [ownerReferenceTo(ds, 'DaemonSet')],
      },
      spec: podSpec,
    };
  }
}
