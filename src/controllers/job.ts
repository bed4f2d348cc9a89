import { ApiError } from '../apiserver/errors.js';
import type { KubeObject, OwnerReference } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, JOBS, PODS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { controllerOf } from '../node-protocol/pods.js';
import { type Clock, systemClock } from './clock.js';
import type { EventRecorder } from './events.js';
import { COMPLETION_INDEX_ANNOTATION, jobFinished, type JobSpecView, type JobStatus, planJob } from './job-logic.js';
import { errorMessage } from './replicaset.js';
import { Expectations, objectKey, ownerToReconcile, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import { randomSuffix, sameStatus } from './workload-logic.js';

/**
 * The Job controller: runs a Job's pods to completion (job-logic.ts decides how many, which
 * indexes, and when the Job is Complete or Failed), keeps its status, and deletes it
 * ttlSecondsAfterFinished after it finished (its pods go with it, by the garbage collector).
 */

export const COMPLETION_INDEX_LABEL = 'batch.kubernetes.io/job-completion-index';

export function jobOwnerReference(owner: KubeObject, kind: string): OwnerReference {
  return { apiVersion: 'batch/v1', kind, name: owner.metadata.name!, uid: owner.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

interface TemplateView {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
}

export class JobController {
  private readonly queue: WorkQueue;
  private readonly expectations = new Expectations();

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('job', (key) => this.reconcile(key), logger, { clock });
    informers.on(JOBS, (_type, job) => this.queue.add(objectKey(job)));
    informers.on(PODS, (_type, pod, old) => {
      for (const p of old ? [pod, old] : [pod]) {
        const owner = controllerOf(p);
        if (owner?.kind === 'Job') this.queue.add(`${p.metadata.namespace ?? ''}/${owner.name}`);
      }
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const job of this.informers.get(JOBS).items()) this.queue.add(objectKey(job));
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const podCache = this.informers.get(PODS);
    const start = ownerToReconcile(key, this.informers.get(JOBS), podCache, this.expectations);
    if (!start.owner) return start.result;
    const job = start.owner;
    const spec = (job.spec ?? {}) as JobSpecView & { template?: TemplateView };
    const previous = (job.status ?? {}) as JobStatus;
    const pods = podCache.items().filter((p) => p.metadata.namespace === namespace && controllerOf(p)?.uid === job.metadata.uid);
    const plan = planJob({ spec, status: previous, pods, now: this.clock.wallNow() });
    const involved = { kind: 'Job', name, namespace, uid: job.metadata.uid!, apiVersion: 'batch/v1' };
    let firstError: unknown;

    for (const pod of plan.delete) {
      const podName = pod.metadata.name!;
      this.expectations.expectDelete(key, podName);
      try {
        await this.client.delete(PODS, namespace, podName, { preconditions: { uid: pod.metadata.uid! } });
        await this.events.record(involved, 'Normal', 'SuccessfulDelete', `Deleted pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        if (error instanceof ApiError && (error.code === 404 || error.code === 409)) continue;
        firstError ??= error;
      }
    }
    const toCreate: (number | undefined)[] = [...plan.createIndexes, ...Array.from({ length: plan.create }, () => undefined)];
    for (const index of toCreate) {
      const pod = this.jobPod(job, spec.template ?? {}, index);
      const podName = pod.metadata.name!;
      this.expectations.expectCreate(key, podName);
      try {
        await this.client.create(PODS, namespace, pod);
        await this.events.record(involved, 'Normal', 'SuccessfulCreate', `Created pod: ${podName}`);
      } catch (error) {
        this.expectations.forget(key, podName);
        firstError ??= error;
        await this.events.record(involved, 'Warning', 'FailedCreate', `Error creating: ${errorMessage(error)}`);
        break; // the same error would repeat for every pod
      }
    }

    if (!sameStatus(job.status, { ...plan.status })) {
      const was = jobFinished(previous);
      const now = jobFinished(plan.status);
      try {
        const status = { ...plan.status, conditions: plan.status.conditions ?? null, startTime: plan.status.startTime ?? null };
        await this.client.patch(JOBS, namespace, name, 'merge', { status }, 'status');
        if (!was && now === 'Complete') await this.events.record(involved, 'Normal', 'Completed', 'Job completed');
        if (!was && now === 'Failed') {
          const failed = plan.status.conditions?.find((c) => c.type === 'Failed');
          await this.events.record(involved, 'Warning', failed?.reason ?? 'Failed', failed?.message ?? 'Job failed');
        }
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) firstError ??= error;
      }
    }
    if (plan.deleteJob) {
      try {
        await this.client.delete(JOBS, namespace, name, { propagationPolicy: 'Background', preconditions: { uid: job.metadata.uid! } });
        this.logger.info({ job: key }, 'deleted a finished job whose ttlSecondsAfterFinished passed');
      } catch (error) {
        if (!(error instanceof ApiError && (error.code === 404 || error.code === 409))) firstError ??= error;
      }
    }
    if (firstError) throw firstError;
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: Math.max(100, plan.requeueAfterMs) } : undefined;
  }

  private jobPod(job: KubeObject, template: TemplateView, index: number | undefined): KubeObject {
    const jobName = job.metadata.name!;
    const podCache = this.informers.get(PODS);
    const prefix = index === undefined ? jobName : `${jobName}-${index}`;
    let podName = `${prefix}-${randomSuffix()}`;
    while (podCache.get(job.metadata.namespace, podName)) podName = `${prefix}-${randomSuffix()}`;
    const spec = structuredClone(template.spec ?? {});
    const labels = { ...(template.metadata?.labels ?? {}) };
    const annotations = { ...(template.metadata?.annotations ?? {}) };
    if (index !== undefined) {
      labels[COMPLETION_INDEX_LABEL] = String(index);
      annotations[COMPLETION_INDEX_ANNOTATION] = String(index);
      // kube passes the index by the downward API; Drover's env fieldRefs do not read
      // annotations, so the value is written in (the same for the pod's whole life).
      for (const list of [spec.containers, spec.initContainers]) {
        if (!Array.isArray(list)) continue;
        for (const container of list as { env?: { name: string; value?: string }[] }[]) {
          const env = (container.env ?? []).filter((e) => e.name !== 'JOB_COMPLETION_INDEX');
          container.env = [...env, { name: 'JOB_COMPLETION_INDEX', value: String(index) }];
        }
      }
      spec.hostname ??= `${jobName}-${index}`;
    }
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: podName,
        namespace: job.metadata.namespace,
        labels,
        ...(Object.keys(annotations).length ? { annotations } : {}),
        ownerReferences: [jobOwnerReference(job, 'Job')],
      },
      spec,
    };
  }
}
