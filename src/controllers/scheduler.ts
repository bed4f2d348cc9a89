import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeTime } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS, RUNTIME_CLASSES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import type { EventRecorder } from './events.js';
import { effectiveRuntimeClass, podRuntimeClassName, type RuntimeClassView } from '../node-protocol/runtime-classes.js';
import { chooseNode, isPodTerminated, podNodeName, type ScheduleResult } from './scheduling.js';
import { nodeCondition, nodeStatus, podSpec } from './kube-types.js';
import { objectKey, splitKey, WorkQueue } from './work-queue.js';
import type { SharedInformers } from '../client/shared-informers.js';

/**
 * The scheduler: binds each pod that has no node to one (scheduling.ts decides which). A pod
 * that fits nowhere gets a FailedScheduling event and is tried again whenever a node changes.
 *
 * Between a bind and the informer showing it, the pod is "assumed" on its node (as
 * kube-scheduler does): it is not bound twice, and it counts on that node for the next pods, so
 * three replicas created at once still spread over three nodes.
 */

const SCHEDULER_NAME = 'default-scheduler';

export class Scheduler {
  private readonly queue: WorkQueue;
  private readonly assumed = new Map<string, { node: string; pod: KubeObject }>();
  /** Pods that fit nowhere, with the last message recorded for each (one event per change). */
  private readonly unschedulable = new Map<string, string>();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    /** Dates PodScheduled=False, and times requeues. */
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('scheduler', (key) => this.schedule(key), logger, { concurrency: 8, clock });
    informers.on(PODS, (type, pod, old) => this.onPod(type, pod, old));
    informers.on(NODES, (type, node, old) => this.onNode(type, node, old));
    // A class created or changed may make a waiting pod placeable (or say where).
    informers.on(RUNTIME_CLASSES, () => this.retryUnschedulable());
  }

  stop(): void {
    this.queue.stop();
  }

  /** Try every pending pod again (periodic resync). */
  resync(): void {
    for (const pod of this.informers.get(PODS).items()) if (this.wantsNode(pod)) this.queue.add(objectKey(pod));
  }

  private wantsNode(pod: KubeObject): boolean {
    const schedulerName = podSpec(pod).schedulerName;
    return !podNodeName(pod) && !pod.metadata.deletionTimestamp && (!schedulerName || schedulerName === SCHEDULER_NAME);
  }

  private onPod(type: string, pod: KubeObject, old: KubeObject | undefined): void {
    const key = objectKey(pod);
    // A bound pod that goes away or finishes frees what it requested: pods waiting for room may fit now.
    if (podNodeName(pod) && (type === 'DELETED' || (isPodTerminated(pod) && !(old && isPodTerminated(old))))) this.retryUnschedulable();
    if (type === 'DELETED' || podNodeName(pod)) {
      this.assumed.delete(key);
      this.unschedulable.delete(key);
      return;
    }
    if (this.wantsNode(pod)) this.queue.add(key);
  }

  private onNode(type: string, node: KubeObject, old: KubeObject | undefined): void {
    if (type === 'MODIFIED' && old && !schedulingRelevantChange(old, node)) return;
    this.retryUnschedulable();
  }

  private retryUnschedulable(): void {
    for (const key of this.unschedulable.keys()) this.queue.add(key);
  }

  /** The handler the pod's class needs, or undefined when the class does not exist (any more). */
  private handlerOf(pod: KubeObject): string | undefined {
    const name = podRuntimeClassName(pod);
    const stored = this.informers.get(RUNTIME_CLASSES).get(undefined, name) as RuntimeClassView | undefined;
    const handler = effectiveRuntimeClass(name, stored)?.handler;
    return typeof handler === 'string' ? handler : undefined;
  }

  private podsByNode(): Map<string, KubeObject[]> {
    const byNode = new Map<string, KubeObject[]>();
    const add = (node: string, pod: KubeObject): void => {
      const list = byNode.get(node);
      if (list) list.push(pod);
      else byNode.set(node, [pod]);
    };
    for (const pod of this.informers.get(PODS).items()) {
      const node = podNodeName(pod);
      if (node) add(node, pod);
    }
    for (const { node, pod } of this.assumed.values()) add(node, pod);
    return byNode;
  }

  private async schedule(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const pod = this.informers.get(PODS).get(namespace, name);
    if (!pod || !this.wantsNode(pod) || this.assumed.has(key)) return;
    const nodes = this.informers.get(NODES);
    if (!nodes.hasSynced) throw new Error('node cache not synced yet');
    const handler = this.handlerOf(pod);
    const result: ScheduleResult =
      handler === undefined
        ? { reasons: `0/${nodes.items().length} nodes are available: RuntimeClass "${podRuntimeClassName(pod)}" of the pod not found.` }
        : chooseNode(pod, nodes.items(), this.podsByNode(), handler);
    const involved = { kind: 'Pod', name, namespace, uid: pod.metadata.uid! };
    if ('reasons' in result) {
      if (this.unschedulable.get(key) !== result.reasons) {
        this.unschedulable.set(key, result.reasons);
        await this.events.record(involved, 'Warning', 'FailedScheduling', result.reasons);
        await this.markUnschedulable(pod, result.reasons);
      }
      return;
    }
    this.assumed.set(key, { node: result.node, pod });
    try {
      // The resourceVersion makes the bind conditional: a pod changed meanwhile is looked at again.
      await this.client.patch(PODS, namespace, name, 'merge', {
        metadata: { resourceVersion: pod.metadata.resourceVersion },
        spec: { nodeName: result.node },
      });
    } catch (error) {
      this.assumed.delete(key);
      if (error instanceof ApiError && error.code === 404) return;
      throw error;
    }
    this.unschedulable.delete(key);
    this.logger.debug({ pod: key, node: result.node }, 'pod bound');
    await this.events.record(involved, 'Normal', 'Scheduled', `Successfully assigned ${namespace}/${name} to ${result.node}`);
  }

  /** PodScheduled=False, so `kubectl get pods` and `describe` show why the pod is Pending. */
  private async markUnschedulable(pod: KubeObject, message: string): Promise<void> {
    try {
      await this.client.patch(
        PODS,
        pod.metadata.namespace,
        pod.metadata.name!,
        'strategic',
        {
          status: {
            phase: 'Pending',
            conditions: [
              { type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message, lastTransitionTime: kubeTime(this.clock.wallNow()) },
            ],
          },
        },
        'status',
      );
    } catch (error) {
      this.logger.debug({ err: error, pod: objectKey(pod) }, 'could not record PodScheduled=False');
    }
  }
}

/** Heartbeat-only node updates do not change where a pod fits; labels, spec, readiness, handlers and allocatable do. */
function schedulingRelevantChange(old: KubeObject, node: KubeObject): boolean {
  const readyOf = (n: KubeObject): string | undefined => nodeCondition(n, 'Ready')?.status;
  return (
    JSON.stringify(old.metadata.labels ?? {}) !== JSON.stringify(node.metadata.labels ?? {}) ||
    JSON.stringify(old.spec ?? {}) !== JSON.stringify(node.spec ?? {}) ||
    readyOf(old) !== readyOf(node) ||
    JSON.stringify(nodeStatus(old).runtimeHandlers ?? null) !== JSON.stringify(nodeStatus(node).runtimeHandlers ?? null) ||
    JSON.stringify(nodeStatus(old).allocatable ?? null) !== JSON.stringify(nodeStatus(node).allocatable ?? null)
  );
}
