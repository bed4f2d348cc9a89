import { parseSchedule } from '../apiserver/kinds/cron-schedule.js';
import type { KubeObject } from '../apiserver/objects.js';
import { jobFinished, type JobStatus } from './job-logic.js';

/**
 * The CronJob controller's decisions, pure, over an injected time: which Job to start now (if
 * any), which to delete (Replace, history limits), the status, the events, and when to look
 * again. cronjob.ts gathers the inputs and carries out the result; kube's cronjob_controllerv2
 * is the model.
 */

export const SCHEDULED_TIMESTAMP_ANNOTATION = 'batch.kubernetes.io/cronjob-scheduled-timestamp';
/** More missed start times than this is reported (kube's limit), and only the latest is started. */
export const MAX_MISSED = 100;

export interface CronJobSpecView {
  schedule?: string;
  timeZone?: string;
  startingDeadlineSeconds?: number;
  concurrencyPolicy?: 'Allow' | 'Forbid' | 'Replace';
  suspend?: boolean;
  successfulJobsHistoryLimit?: number;
  failedJobsHistoryLimit?: number;
}

export interface JobReference {
  apiVersion?: string;
  kind?: string;
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
}

export interface CronJobStatus {
  active?: JobReference[];
  lastScheduleTime?: string;
  lastSuccessfulTime?: string;
}

export interface CronJobInput {
  name: string;
  namespace: string;
  creationTimestamp: string;
  spec: CronJobSpecView;
  status: CronJobStatus;
  /** The Jobs this CronJob controls (by controller reference). */
  jobs: readonly KubeObject[];
  /** Wall-clock ms. */
  now: number;
}

export interface CronJobEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface CronJobPlan {
  /** The Job to create for this start time (`<cronjob>-<minutes since the epoch>`). */
  create?: { name: string; scheduledTime: number };
  /** Jobs to delete (Replace's active ones, then those past the history limits), background propagation. */
  deleteJobs: KubeObject[];
  /** The status to write if the create (when there is one) succeeds. */
  status: CronJobStatus;
  events: CronJobEvent[];
  /** When the next start time is due. */
  requeueAfterMs?: number;
}

const iso = (ms: number): string => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');

/** kube's job name: the scheduled time in minutes since the epoch, so each start time makes one name. */
export function jobNameFor(cronJob: string, scheduledTime: number): string {
  return `${cronJob}-${Math.floor(scheduledTime / 60_000)}`;
}

function referenceTo(job: KubeObject): JobReference {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    name: job.metadata.name!,
    namespace: job.metadata.namespace!,
    uid: job.metadata.uid!,
    resourceVersion: job.metadata.resourceVersion!,
  };
}

const finishedTime = (job: KubeObject): number => {
  const status = (job.status ?? {}) as JobStatus & { conditions?: { type: string; lastTransitionTime?: string }[] };
  const completion = Date.parse(status.completionTime ?? '');
  if (Number.isFinite(completion)) return completion;
  const condition = (status.conditions ?? []).find((c) => c.type === 'Complete' || c.type === 'Failed');
  return Date.parse(condition?.lastTransitionTime ?? '') || Date.parse(job.metadata.creationTimestamp ?? '') || 0;
};

const startedTime = (job: KubeObject): number =>
  Date.parse(((job.status ?? {}) as JobStatus).startTime ?? '') || Date.parse(job.metadata.creationTimestamp ?? '') || 0;

export function planCronJob(input: CronJobInput): CronJobPlan {
  const { spec, now, jobs } = input;
  const plan: CronJobPlan = { deleteJobs: [], status: {}, events: [] };
  const byUid = new Map(jobs.map((j) => [j.metadata.uid!, j]));

  // status.active: the Jobs still running, whether this controller started them or
  // `kubectl create job --from=cronjob/…` did (they carry our controller reference).
  const active: KubeObject[] = jobs.filter((j) => !jobFinished((j.status ?? {}) as JobStatus) && !j.metadata.deletionTimestamp);
  let lastSuccessful = Date.parse(input.status.lastSuccessfulTime ?? '');
  for (const ref of input.status.active ?? []) {
    const job = ref.uid ? byUid.get(ref.uid) : undefined;
    if (!job) continue;
    const finished = jobFinished((job.status ?? {}) as JobStatus);
    if (finished) {
      plan.events.push({ type: 'Normal', reason: 'SawCompletedJob', message: `Saw completed job: ${job.metadata.name}, condition: ${finished}` });
    }
  }
  for (const job of jobs) {
    if (jobFinished((job.status ?? {}) as JobStatus) === 'Complete') {
      const at = finishedTime(job);
      if (!Number.isFinite(lastSuccessful) || at > lastSuccessful) lastSuccessful = at;
    }
  }
  const status: CronJobStatus = {
    active: active.sort((a, b) => startedTime(a) - startedTime(b)).map(referenceTo),
    ...(input.status.lastScheduleTime ? { lastScheduleTime: input.status.lastScheduleTime } : {}),
    ...(Number.isFinite(lastSuccessful) ? { lastSuccessfulTime: iso(lastSuccessful) } : {}),
  };
  plan.status = status;

  // History: the newest successfulJobsHistoryLimit Complete and failedJobsHistoryLimit Failed Jobs stay.
  const prune = (kind: 'Complete' | 'Failed', limit: number | undefined): void => {
    if (limit === undefined) return;
    const finished = jobs.filter((j) => !j.metadata.deletionTimestamp && jobFinished((j.status ?? {}) as JobStatus) === kind);
    finished.sort((a, b) => startedTime(b) - startedTime(a));
    plan.deleteJobs.push(...finished.slice(limit));
  };
  prune('Complete', spec.successfulJobsHistoryLimit);
  prune('Failed', spec.failedJobsHistoryLimit);

  if (spec.suspend === true || typeof spec.schedule !== 'string') return plan;
  const schedule = parseSchedule(spec.schedule, spec.timeZone);
  const requeueForNext = (): void => {
    plan.requeueAfterMs = Math.max(0, schedule.next(now) - now) + 100;
  };

  // The start times since the last one (or creation), no further back than startingDeadlineSeconds.
  let floor = Date.parse(input.status.lastScheduleTime ?? input.creationTimestamp);
  if (!Number.isFinite(floor)) floor = now;
  if (spec.startingDeadlineSeconds !== undefined) floor = Math.max(floor, now - spec.startingDeadlineSeconds * 1000 - 1);
  const { time: scheduledTime, missed } = schedule.mostRecent(floor, now, MAX_MISSED);
  if (scheduledTime === undefined) {
    requeueForNext();
    return plan;
  }
  if (missed > MAX_MISSED) {
    plan.events.push({
      type: 'Warning',
      reason: 'TooManyMissedTimes',
      message: `too many missed start times: ${missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew`,
    });
  }
  if (spec.startingDeadlineSeconds !== undefined && scheduledTime + spec.startingDeadlineSeconds * 1000 < now) {
    plan.events.push({ type: 'Warning', reason: 'MissSchedule', message: `Missed scheduled time to start a job: ${new Date(scheduledTime).toUTCString()}` });
    requeueForNext();
    return plan;
  }
  const name = jobNameFor(input.name, scheduledTime);
  if (jobs.some((j) => j.metadata.name === name)) {
    // Already started for this time (our cache saw it before the status did).
    status.lastScheduleTime = iso(scheduledTime);
    requeueForNext();
    return plan;
  }
  if (spec.concurrencyPolicy === 'Forbid' && active.length > 0) {
    plan.events.push({ type: 'Normal', reason: 'JobAlreadyActive', message: 'Not starting job because prior execution is running and concurrency policy is Forbid' });
    requeueForNext();
    return plan;
  }
  if (spec.concurrencyPolicy === 'Replace') {
    for (const job of active) plan.deleteJobs.push(job);
    status.active = [];
  }
  plan.create = { name, scheduledTime };
  status.lastScheduleTime = iso(scheduledTime);
  requeueForNext();
  return plan;
}
