import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, CRONJOBS, JOBS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { controllerOf } from '../node-protocol/pods.js';
import { type Clock, systemClock } from './clock.js';
import { type CronJobSpecView, type CronJobStatus, type JobReference, planCronJob, SCHEDULED_TIMESTAMP_ANNOTATION } from './cronjob-logic.js';
import type { EventRecorder } from './events.js';
import { jobOwnerReference } from './job.js';
import { errorMessage } from './replicaset.js';
import { objectKey, type ReconcileResult, splitKey, WorkQueue } from './work-queue.js';
import { sameStatus } from './workload-logic.js';

/**
 * The CronJob controller: starts a Job at each time of a CronJob's schedule (cronjob-logic.ts
 * decides, over this controller's clock), keeps `status.active`, `lastScheduleTime` and
 * `lastSuccessfulTime`, and prunes finished Jobs past the history limits. Each reconcile asks to
 * be run again when the next start time is due.
 */

interface JobTemplateView {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
}

export class CronJobController {
  private readonly queue: WorkQueue;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    private readonly clock: Clock = systemClock,
  ) {
    this.queue = new WorkQueue('cronjob', (key) => this.reconcile(key), logger, { clock });
    informers.on(CRONJOBS, (_type, cj) => this.queue.add(objectKey(cj)));
    informers.on(JOBS, (_type, job, old) => {
      for (const j of old ? [job, old] : [job]) {
        const owner = controllerOf(j);
        if (owner?.kind === 'CronJob') this.queue.add(`${j.metadata.namespace ?? ''}/${owner.name}`);
      }
    });
  }

  stop(): void {
    this.queue.stop();
  }

  resync(): void {
    for (const cj of this.informers.get(CRONJOBS).items()) this.queue.add(objectKey(cj));
  }

  private async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const cj = this.informers.get(CRONJOBS).get(namespace, name);
    if (!cj || cj.metadata.deletionTimestamp) return undefined;
    const spec = (cj.spec ?? {}) as CronJobSpecView & { jobTemplate?: JobTemplateView };
    const jobs = this.informers
      .get(JOBS)
      .items()
      .filter((j) => j.metadata.namespace === namespace && controllerOf(j)?.uid === cj.metadata.uid);
    const plan = planCronJob({
      name,
      namespace,
      creationTimestamp: cj.metadata.creationTimestamp ?? '',
      spec,
      status: (cj.status ?? {}) as CronJobStatus,
      jobs,
      now: this.clock.wallNow(),
    });
    const involved = { kind: 'CronJob', name, namespace, uid: cj.metadata.uid!, apiVersion: 'batch/v1' };
    for (const event of plan.events) await this.events.record(involved, event.type, event.reason, event.message);
    let firstError: unknown;

    for (const job of plan.deleteJobs) {
      try {
        await this.client.delete(JOBS, namespace, job.metadata.name!, { propagationPolicy: 'Background', preconditions: { uid: job.metadata.uid! } });
        await this.events.record(involved, 'Normal', 'SuccessfulDelete', `Deleted job ${job.metadata.name}`);
      } catch (error) {
        if (!(error instanceof ApiError && (error.code === 404 || error.code === 409))) firstError ??= error;
      }
    }

    const status = { ...plan.status };
    if (plan.create) {
      const template = spec.jobTemplate ?? {};
      const job: KubeObject = {
        apiVersion: 'batch/v1',
        kind: 'Job',
        metadata: {
          name: plan.create.name,
          namespace,
          ...(template.metadata?.labels ? { labels: { ...template.metadata.labels } } : {}),
          annotations: {
            ...(template.metadata?.annotations ?? {}),
            [SCHEDULED_TIMESTAMP_ANNOTATION]: new Date(plan.create.scheduledTime).toISOString().replace('.000Z', 'Z'),
          },
          ownerReferences: [jobOwnerReference(cj, 'CronJob')],
        },
        spec: structuredClone(template.spec ?? {}),
      };
      try {
        const created = await this.client.create(JOBS, namespace, job);
        const ref: JobReference = {
          apiVersion: 'batch/v1',
          kind: 'Job',
          name: created.metadata.name!,
          namespace,
          uid: created.metadata.uid!,
          resourceVersion: created.metadata.resourceVersion!,
        };
        status.active = [...(status.active ?? []), ref];
        await this.events.record(involved, 'Normal', 'SuccessfulCreate', `Created job ${plan.create.name}`);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 409)) {
          // Not started: the status must not claim this start time, so it is tried again.
          await this.events.record(involved, 'Warning', 'FailedCreate', `Error creating job: ${errorMessage(error)}`);
          throw error;
        }
        // Already there (our cache was behind): this start time is done.
      }
    }

    if (!sameStatus(cj.status, { ...status })) {
      try {
        await this.client.patch(CRONJOBS, namespace, name, 'merge', { status }, 'status');
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) firstError ??= error;
      }
    }
    if (firstError) throw firstError;
    if (plan.requeueAfterMs !== undefined) {
      this.logger.debug({ cronJob: key, nextInMs: plan.requeueAfterMs }, 'next start time');
      return { requeueAfterMs: plan.requeueAfterMs };
    }
    return undefined;
  }
}
