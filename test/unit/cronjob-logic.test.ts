import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CRONJOB_PRINTER, validateCronJob } from '../../src/apiserver/kinds/cronjobs.js';
import { parseSchedule } from '../../src/apiserver/kinds/cron-schedule.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { type CronJobInput, type CronJobSpecView, jobNameFor, planCronJob } from '../../src/controllers/cronjob-logic.js';

/**
 * The CronJob controller's decisions over a fake clock (the `now` each call is given): start times,
 * concurrency policies, startingDeadlineSeconds, suspend, history limits, time zones; and the
 * kind's validation and printer.
 */

const CREATED = '2026-03-01T10:00:30Z';
const at = (iso: string): number => Date.parse(iso);

function job(name: string, options: { finished?: 'Complete' | 'Failed'; startedAt?: string; uid?: string } = {}): KubeObject {
  return {
    metadata: { name, namespace: 'default', uid: options.uid ?? `uid-${name}`, resourceVersion: '7', creationTimestamp: options.startedAt ?? CREATED },
    spec: {},
    status: {
      ...(options.startedAt ? { startTime: options.startedAt } : {}),
      ...(options.finished
        ? { conditions: [{ type: options.finished, status: 'True', lastTransitionTime: options.startedAt ?? CREATED }], ...(options.finished === 'Complete' ? { completionTime: options.startedAt ?? CREATED } : {}) }
        : {}),
    },
  };
}

function input(spec: CronJobSpecView, now: string, extra: Partial<CronJobInput> = {}): CronJobInput {
  return { name: 'tick', namespace: 'default', creationTimestamp: CREATED, spec: { schedule: '*/5 * * * *', ...spec }, status: {}, jobs: [], now: at(now), ...extra };
}

describe('CronJob schedule decisions (fake clock)', () => {
  it('starts nothing before the first time, then the Job of that time, named by minutes since the epoch', () => {
    const early = planCronJob(input({}, '2026-03-01T10:04:00Z'));
    assert.equal(early.create, undefined);
    assert.equal(early.requeueAfterMs, 60_000 + 100, 'looks again when 10:05 is due');
    const due = planCronJob(input({}, '2026-03-01T10:05:01Z'));
    assert.deepEqual(due.create, { name: `tick-${at('2026-03-01T10:05:00Z') / 60_000}`, scheduledTime: at('2026-03-01T10:05:00Z') });
    assert.equal(due.status.lastScheduleTime, '2026-03-01T10:05:00Z');
    assert.equal(jobNameFor('tick', at('2026-03-01T10:05:00Z')), 'tick-29539325');
    // Once lastScheduleTime says 10:05, nothing until 10:10.
    const after = planCronJob(input({}, '2026-03-01T10:07:00Z', { status: { lastScheduleTime: '2026-03-01T10:05:00Z' } }));
    assert.equal(after.create, undefined);
  });

  it('after a long outage starts only the latest missed time, and reports too many misses', () => {
    const plan = planCronJob(input({ schedule: '* * * * *' }, '2026-03-01T13:00:10Z'));
    assert.equal(plan.create?.scheduledTime, at('2026-03-01T13:00:00Z'));
    assert.ok(plan.events.some((e) => e.reason === 'TooManyMissedTimes'));
  });

  it('startingDeadlineSeconds: a start time older than the deadline is skipped', () => {
    const plan = planCronJob(input({ startingDeadlineSeconds: 30 }, '2026-03-01T10:06:00Z'));
    assert.equal(plan.create, undefined, '10:05 was more than 30 s ago');
    const inTime = planCronJob(input({ startingDeadlineSeconds: 90 }, '2026-03-01T10:06:00Z'));
    assert.equal(inTime.create?.scheduledTime, at('2026-03-01T10:05:00Z'));
  });

  it('concurrencyPolicy: Allow starts beside a running Job, Forbid waits, Replace deletes the running one', () => {
    const running = job('tick-1', { startedAt: '2026-03-01T10:00:40Z' });
    const status = { active: [{ name: 'tick-1', uid: 'uid-tick-1' }] };
    const allow = planCronJob(input({ concurrencyPolicy: 'Allow' }, '2026-03-01T10:05:01Z', { jobs: [running], status }));
    assert.ok(allow.create);
    assert.deepEqual(allow.status.active?.map((r) => r.name), ['tick-1']);
    const forbid = planCronJob(input({ concurrencyPolicy: 'Forbid' }, '2026-03-01T10:05:01Z', { jobs: [running], status }));
    assert.equal(forbid.create, undefined);
    assert.equal(forbid.status.lastScheduleTime, undefined, 'a forbidden start is not recorded as scheduled');
    assert.ok(forbid.events.some((e) => e.reason === 'JobAlreadyActive'));
    const replace = planCronJob(input({ concurrencyPolicy: 'Replace' }, '2026-03-01T10:05:01Z', { jobs: [running], status }));
    assert.ok(replace.create);
    assert.deepEqual(replace.deleteJobs.map((j) => j.metadata.name), ['tick-1']);
  });

  it('suspend starts nothing; status.active drops finished Jobs and lastSuccessfulTime follows the latest success', () => {
    assert.equal(planCronJob(input({ suspend: true }, '2026-03-01T10:05:01Z')).create, undefined);
    const done = job('tick-a', { finished: 'Complete', startedAt: '2026-03-01T10:05:03Z' });
    const plan = planCronJob(
      input({}, '2026-03-01T10:06:00Z', { jobs: [done], status: { active: [{ name: 'tick-a', uid: 'uid-tick-a' }], lastScheduleTime: '2026-03-01T10:05:00Z' } }),
    );
    assert.deepEqual(plan.status.active, []);
    assert.equal(plan.status.lastSuccessfulTime, '2026-03-01T10:05:03Z');
    assert.ok(plan.events.some((e) => e.reason === 'SawCompletedJob'));
  });

  it('keeps successfulJobsHistoryLimit Complete and failedJobsHistoryLimit Failed Jobs, newest first', () => {
    const jobs = [
      job('ok-1', { finished: 'Complete', startedAt: '2026-03-01T10:01:00Z' }),
      job('ok-2', { finished: 'Complete', startedAt: '2026-03-01T10:02:00Z' }),
      job('ok-3', { finished: 'Complete', startedAt: '2026-03-01T10:03:00Z' }),
      job('bad-1', { finished: 'Failed', startedAt: '2026-03-01T10:01:30Z' }),
      job('bad-2', { finished: 'Failed', startedAt: '2026-03-01T10:02:30Z' }),
      job('running', { startedAt: '2026-03-01T10:03:30Z' }),
    ];
    const plan = planCronJob(input({ successfulJobsHistoryLimit: 2, failedJobsHistoryLimit: 1 }, '2026-03-01T10:04:00Z', { jobs }));
    assert.deepEqual(plan.deleteJobs.map((j) => j.metadata.name).sort(), ['bad-1', 'ok-1']);
    assert.deepEqual(plan.status.active?.map((r) => r.name), ['running'], 'a Job created by hand with our reference counts as active');
  });

  it('time zones: 09:00 in Tokyo is 00:00 UTC', () => {
    const plan = planCronJob(input({ schedule: '0 9 * * *', timeZone: 'Asia/Tokyo' }, '2026-03-02T00:00:05Z'));
    assert.equal(plan.create?.scheduledTime, at('2026-03-02T00:00:00Z'));
    const daily = parseSchedule('@daily', 'America/New_York');
    assert.equal(new Date(daily.next(at('2026-07-01T12:00:00Z'))).toISOString(), '2026-07-02T04:00:00.000Z');
  });
});

describe('the CronJob kind', () => {
  const cronJob = (spec: Record<string, unknown>): KubeObject => ({
    metadata: { name: 'tick' },
    spec: {
      schedule: '*/5 * * * *',
      jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', command: ['true'] }] } } } },
      ...spec,
    },
  });

  it('accepts descriptors and time zones; refuses bad schedules, zones and policies with the field path', () => {
    assert.deepEqual(validateCronJob(cronJob({ schedule: '@hourly', timeZone: 'Europe/Berlin' })), []);
    const fields = (spec: Record<string, unknown>): string[] => validateCronJob(cronJob(spec)).map((c) => `${c.field}: ${c.message}`);
    assert.match(fields({ schedule: '61 * * * *' })[0]!, /^spec\.schedule: Invalid value: "61 \* \* \* \*"/);
    assert.match(fields({ schedule: '* * * *' })[0]!, /^spec\.schedule: .*expected exactly 5 fields/);
    assert.match(fields({ timeZone: 'Mars/Olympus' })[0]!, /^spec\.timeZone: Invalid value: "Mars\/Olympus"/);
    assert.match(fields({ concurrencyPolicy: 'Sometimes' })[0]!, /^spec\.concurrencyPolicy: Unsupported value/);
    assert.match(
      fields({ jobTemplate: { spec: { template: { spec: { restartPolicy: 'Always', containers: [{ name: 'm', command: ['true'] }] } } } } })[0]!,
      /^spec\.jobTemplate\.spec\.template\.spec\.restartPolicy: Unsupported value: "Always"/,
    );
  });

  it('prints Schedule, Timezone, Suspend, Active and Last Schedule', () => {
    const obj: KubeObject = {
      metadata: { name: 'tick', creationTimestamp: '2026-03-01T10:00:00Z' },
      spec: { schedule: '*/5 * * * *', suspend: false },
      status: { active: [{ name: 'tick-1' }], lastScheduleTime: '2026-03-01T10:05:00Z' },
    };
    assert.deepEqual(CRONJOB_PRINTER.cells(obj, at('2026-03-01T10:06:00Z')).slice(0, 7), ['tick', '*/5 * * * *', '<none>', 'False', 1, '60s', '6m']);
  });
});
