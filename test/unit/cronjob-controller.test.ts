import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { SharedInformers } from '../../src/client/shared-informers.js';
import { CRONJOBS, JOBS } from '../../src/client/types.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { CronJobController } from '../../src/controllers/cronjob.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { advance, type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * The CronJob controller in-process on a FakeClock (its only clock): Jobs appear at each start time
 * of the schedule as the fake time passes it, one per start time, and Forbid holds the next one
 * while a Job runs (no Job controller runs here, so Jobs never finish).
 */

function cronJob(name: string, concurrencyPolicy: string): KubeObject {
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name, namespace: 'default' },
    spec: {
      schedule: '* * * * *',
      concurrencyPolicy,
      jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', command: ['true'] }] } } } },
    },
  };
}

describe('CronJob controller on a fake clock', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  let informers: SharedInformers;
  let controller: CronJobController;

  beforeEach(async () => {
    api = await inProcessApi();
    // The store dates objects by the real clock: the fake wall clock starts just ahead of it, with
    // no minute boundary between the CronJob's creation and the fake now.
    let start = Date.now() + 2000;
    if (start % 60_000 < 3000) start += 3000;
    clock = new FakeClock({ wall: start });
    informers = new SharedInformers(api.client, api.logger);
    informers.get(CRONJOBS);
    informers.get(JOBS);
    const events = new EventRecorder(api.client, 'drover-controller-manager', 'test', api.logger, clock);
    controller = new CronJobController(api.client, informers, events, api.logger, clock);
    await informers.start();
  });

  afterEach(async () => {
    controller.stop();
    informers.stop();
    await api.close();
  });

  const jobNames = async (prefix: string): Promise<string[]> =>
    (await api.client.list(JOBS, 'default')).items.map((j) => j.metadata.name!).filter((n) => n.startsWith(`${prefix}-`)).sort();

  it('starts one Job at each minute as the fake clock passes it, named by the minute', async () => {
    await api.client.create(CRONJOBS, 'default', cronJob('every', 'Allow'));
    const first = Math.ceil((clock.wallNow() + 1) / 60_000);
    await advance(clock, first * 60_000 - clock.wallNow() - 300, undefined, 1000);
    assert.deepEqual(await jobNames('every'), [], 'nothing before the first minute');
    // Minute by minute, each Job awaited before the clock passes the next start time: the
    // controller's writes go through real promises, which a loaded machine may finish later than
    // the fake clock's settling turns (a start time passed meanwhile would be a missed one).
    for (const minute of [first, first + 1, first + 2]) {
      await advance(clock, minute * 60_000 - clock.wallNow() + 500, undefined, 1000);
      await eventually(async () => (await jobNames('every')).includes(`every-${minute}`), `the Job of minute ${minute}`);
    }
    assert.deepEqual(await jobNames('every'), [first, first + 1, first + 2].map((m) => `every-${m}`));
    const stored = await eventually(async () => {
      const got = await api.client.get(CRONJOBS, 'default', 'every');
      return (got?.status as { active?: unknown[] } | undefined)?.active?.length === 3 ? got : undefined;
    }, 'the CronJob status naming the three Jobs');
    const status = stored!.status as { active: { name: string }[]; lastScheduleTime: string };
    assert.equal(status.lastScheduleTime, new Date((first + 2) * 60_000).toISOString().replace('.000Z', 'Z'));
    assert.deepEqual(status.active.map((r) => r.name), [first, first + 1, first + 2].map((m) => `every-${m}`));
  });

  it('Forbid: no second Job while the first runs', async () => {
    await api.client.create(CRONJOBS, 'default', cronJob('once', 'Forbid'));
    const first = Math.ceil((clock.wallNow() + 1) / 60_000);
    await advance(clock, first * 60_000 - clock.wallNow() + 500, undefined, 1000);
    await eventually(async () => (await jobNames('once')).length === 1, 'the first Job');
    await advance(clock, 60_000 * 2, undefined, 1000);
    await eventually(async () => {
      const events = await api.client.list({ group: '', version: 'v1', plural: 'events', namespaced: true }, 'default');
      return events.items.some((e) => e.reason === 'JobAlreadyActive');
    }, 'a JobAlreadyActive event reporting the skipped start times');
    assert.equal((await jobNames('once')).length, 1);
  });
});
