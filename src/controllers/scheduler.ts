import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { EventRecorder } from './events.js';
import { chooseNode, podNodeName } from './scheduling.js';
import { nodeCondition, podSpec } from './kube-types.js';
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
  ) {
    this.queue = new WorkQueue('scheduler', (key) => this.schedule(key), logger, { concurrency: 8 });
    informers.on(PODS, (type, pod) => this.onPod(type, pod));
    informers.on(NODES, (type, node, old) => this.onNode(type, node, old));
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

  private onPod(type: string, pod: KubeObject): void {
    const key = objectKey(pod);
    if (type === 'DELETED' || podNodeName(pod)) {
      this.assumed.delete(key);
      this.unschedulable.delete(key);
      return;
    }
    if (this.wantsNode(pod)) this.queue.add(key);
  }

  private onNode(type: string, node: KubeObject, old: KubeObject | undefined): void {
    if (type === 'MODIFIED' && old && !schedulingRelevantChange(old, node)) return;
    for (const key of this.unschedulable.keys()) this.queue.add(key);
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
    const result = chooseNode(pod, nodes.items(), this.podsByNode());
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
              { type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message, lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z') },
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

/** Heartbeat-only node updates do not change where a pod fits. */
function schedulingRelevantChange(old: KubeObject, node: KubeObject): boolean {
  const readyOf = (n: KubeObject): string | undefined => nodeCondition(n, 'Ready')?.status;
  return (
    JSON.stringify(old.metadata.labels ?? {}) !== JSON.stringify(node.metadata.labels ?? {}) ||
    JSON.stringify(old.spec ?? {}) !== JSON.stringify(node.spec ?? {}) ||
    readyOf(old) !== readyOf(node)
  );
}
