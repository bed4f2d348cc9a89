import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { SharedInformers } from '../../src/client/shared-informers.js';
import { CRONJOBS, JOBS } from '../../src/client/types.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { CronJobController } from '../../src/controllers/cronjob.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { advance, type InProcessApi, inProcessApi } from '../helpers/in-process.js';

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
    await advance(clock, 60_000 * 3, undefined, 1000);
    assert.deepEqual(await jobNames('every'), [first, first + 1, first + 2].map((m) => `every-${m}`));
    const stored = await api.client.get(CRONJOBS, 'default', 'every');
    const status = stored!.status as { active: { name: string }[]; lastScheduleTime: string };
    assert.equal(status.lastScheduleTime, new Date((first + 2) * 60_000).toISOString().replace('.000Z', 'Z'));
    assert.deepEqual(status.active.map((r) => r.name), [first, first + 1, first + 2].map((m) => `every-${m}`));
  });

  it('Forbid: no second Job while the first runs', async () => {
    await api.client.create(CRONJOBS, 'default', cronJob('once', 'Forbid'));
    await advance(clock, 60_000 * 3, undefined, 1000);
    assert.equal((await jobNames('once')).length, 1);
    const events = await api.client.list({ group: '', version: 'v1', plural: 'events', namespaced: true }, 'default');
    assert.ok(events.items.some((e) => e.reason === 'JobAlreadyActive'), 'the skipped start times are reported');
  });
});
