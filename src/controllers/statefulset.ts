import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, PODS, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import type { EventRecorder } from './events.js';
import { errorMessage, ownerReferenceTo } from './replicaset.js';
import { Expectations, objectKey, ownerToReconcile, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';
import {
  isPodTerminated,
  POD_INDEX_LABEL,
  sameStatus,
  type StatefulPod,
  statefulOrdinal,
  statefulSetStatus,
  statefulSetStep,
  templateHash,
} from './workload-logic.js';
import { controllerOf, isPodRunningAndReady } from '../node-protocol/pods.js';
import { CONTROLLER_REVISION_HASH_LABEL, STATEFULSET_POD_NAME_LABEL } from './workloads.js';
import { statefulSetSpec, storedStatefulSetStatus } from './kube-types.js';

/**
 * The StatefulSet controller: pods `<set>-0 … <set>-(n-1)`, each name at most once. A pod being
 * deleted keeps its name until it is gone, and only then is its replacement created; the
 * controller never force-deletes, so the node's agent (or the failover controller, once fencing
 * is certain) decides when the old copy is really stopped.
 */

export class StatefulSetController {
  private readonly queue: WorkQueue;
  private readonly expectations = new Expectations();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    /** Times requeues and back-offs. */
    clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('statefulset', (key) => this.reconcile(key), logger, { clock });
    informers.on(STATEFULSETS, (_type, sts) => this.queue.add(objectKey(sts)));
    informers.on(PODS, (type, pod) => {
      const owner = controllerOf(pod);
      if (owner?.kind === 'StatefulSet') this.queue.add(`${pod.metadata.namespace ?? ''}/${owner.name}`);
      // A foreign pod holding one of our names blocks that ordinal; its deletion unblocks it.
      else if (type === 'DELETED') {
        for (const sts of informers.get(STATEFULSETS).items()) {
          if (sts.metadata.namespace === pod.metadata.namespace && statefulOrdinal(sts.metadata.name!, pod.metadata.name!) !== undefined) {
            this.queue.add(objectKey(sts));
          }
        }
      }
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const sts of this.informers.get(STATEFULSETS).items()) this.queue.add(objectKey(sts));
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const podCache = this.informers.get(PODS);
    const start = ownerToReconcile(key, this.informers.get(STATEFULSETS), podCache, this.expectations);
    if (!start.owner) return start.result;
    const sts = start.owner;

    const spec = statefulSetSpec(sts);
    const replicas = spec.replicas ?? 1;
    const updateRevision = `${name}-${templateHash(spec.template)}`;
    const pods: StatefulPod[] = [];
    for (const pod of podCache.items()) {
      if (pod.metadata.namespace !== namespace) continue;
      const ordinal = statefulOrdinal(name, pod.metadata.name!);
      if (ordinal === undefined) continue;
      const ours = controllerOf(pod)?.uid === sts.metadata.uid;
      pods.push({
        ordinal,
        name: pod.metadata.name!,
        // Someone else's pod under one of our names blocks the ordinal like a terminating one.
        terminating: !ours || Boolean(pod.metadata.deletionTimestamp),
        finished: ours && isPodTerminated(pod),
        runningAndReady: ours && isPodRunningAndReady(pod),
        revision: pod.metadata.labels?.[CONTROLLER_REVISION_HASH_LABEL],
      });
    }
    const policy = spec.podManagementPolicy === 'Parallel' ? 'Parallel' : 'OrderedReady';
    const rollingUpdate = (spec.updateStrategy?.type ?? 'RollingUpdate') === 'RollingUpdate';
    const partition = spec.updateStrategy?.rollingUpdate?.partition ?? 0;
    const actions = statefulSetStep({ name, replicas, policy, updateRevision, rollingUpdate, partition, pods });
    if (actions.waiting) this.logger.debug({ statefulSet: key, waiting: actions.waiting }, 'statefulset waiting');
    const involved = { kind: 'StatefulSet', name, namespace, uid: sts.metadata.uid!, apiVersion: 'apps/v1' };
    let firstError: unknown;

    for (const podName of actions.delete) {
      this.expectations.expectDelete(key, podName);
      try {
        await this.client.delete(PODS, namespace, podName);
        await this.events.record(involved, 'Normal', 'SuccessfulDelete', `delete Pod ${podName} in StatefulSet ${name} successful`);
      } catch (error) {
        this.expectations.forget(key, podName);
        if (error instanceof ApiError && error.code === 404) continue;
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedDelete', `delete Pod ${podName} in StatefulSet ${name} failed error: ${errorMessage(error)}`);
      }
    }
    for (const ordinal of actions.create) {
      const podName = `${name}-${ordinal}`;
      const template = spec.template ?? {};
      const pod: KubeObject = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: podName,
          namespace,
          labels: {
            ...(template.metadata?.labels ?? {}),
            [STATEFULSET_POD_NAME_LABEL]: podName,
            [CONTROLLER_REVISION_HASH_LABEL]: updateRevision,
            [POD_INDEX_LABEL]: String(ordinal),
          },
          ...(template.metadata?.annotations ? { annotations: { ...template.metadata.annotations } } : {}),
          ownerReferences: [ownerReferenceTo(sts, 'StatefulSet')],
        },
        spec: {
          ...structuredClone(template.spec ?? {}),
          hostname: podName,
          ...(spec.serviceName ? { subdomain: spec.serviceName } : {}),
        },
      };
      this.expectations.expectCreate(key, podName);
      try {
        await this.client.create(PODS, namespace, pod);
        await this.events.record(involved, 'Normal', 'SuccessfulCreate', `create Pod ${podName} in StatefulSet ${name} successful`);
      } catch (error) {
        this.expectations.forget(key, podName);
        // Our cache was behind: the name exists, and it is never created twice.
        if (error instanceof ApiError && error.code === 409) continue;
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedCreate', `create Pod ${podName} in StatefulSet ${name} failed error: ${errorMessage(error)}`);
      }
    }

    const status = statefulSetStatus(
      { replicas, updateRevision, pods },
      sts.metadata.generation,
      storedStatefulSetStatus(sts).currentRevision,
    );
    if (!sameStatus(sts.status, { ...status })) {
      try {
        await this.client.patch(STATEFULSETS, namespace, name, 'merge', { status }, 'status');
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) firstError ??= error;
      }
    }
    if (firstError) throw firstError;
    return undefined;
  }
}
