import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { type KubeObject, kubeMicroTime, kubeTime } from '../../src/apiserver/objects.js';
import { SharedInformers } from '../../src/client/shared-informers.js';
import { DEPLOYMENTS, EVENTS, PODS, REPLICASETS } from '../../src/client/types.js';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { ControllerManager, type LeaderOnlyController } from '../../src/controllers/controller-manager.js';
import { DeploymentController } from '../../src/controllers/deployment.js';
import { DisruptionController, PODDISRUPTIONBUDGETS } from '../../src/controllers/disruption.js';
import { DISRUPTED_POD_TIMEOUT_MS } from '../../src/controllers/disruption-logic.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { budgetStatus, podStatus, replicaSetStatus, storedDeploymentStatus } from '../../src/controllers/kube-types.js';
import { ReplicaSetController } from '../../src/controllers/replicaset.js';
import { Scheduler } from '../../src/controllers/scheduler.js';
import { advance, type InProcessApi, inProcessApi, InProcessNode } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * Every time a controller writes or judges by follows the controllers' Clock: events, the
 * Deployment's condition times, minReadySeconds, a budget's disruptedPods expiry. The fake wall
 * clock starts years away from the real one, so a time read from the system clock shows.
 */

const FAKE_WALL = Date.parse('2031-03-04T05:06:07.250Z');

const containers = [{ name: 'c', image: 'none', command: ['sleep', '3600'] }];

function replicaSet(name: string, spec: Record<string, unknown>): KubeObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: { name, namespace: 'default' },
    spec: { selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers } }, ...spec },
  };
}

describe('controllers on a fake clock date and time by it', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  let informers: SharedInformers;
  const stops: (() => void | Promise<void>)[] = [];

  beforeEach(async () => {
    api = await inProcessApi();
    clock = new FakeClock({ wall: FAKE_WALL });
    informers = new SharedInformers(api.client, api.logger);
  });

  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
    informers.stop();
    await api.close();
  });

  const recorder = (): EventRecorder => new EventRecorder(api.client, 'test', 'test', api.logger, clock);

  async function setPodReady(pod: KubeObject): Promise<void> {
    await api.client.patch(
      PODS,
      'default',
      pod.metadata.name!,
      'merge',
      { status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: kubeTime(clock.wallNow()) }] } },
      'status',
    );
  }

  it("an event's timestamps and name are the clock's wall time", async () => {
    const events = recorder();
    await events.record({ kind: 'Pod', name: 'p', namespace: 'default' }, 'Normal', 'First', 'one');
    await clock.advance(90_500);
    await events.record({ kind: 'Pod', name: 'p', namespace: 'default' }, 'Warning', 'Second', 'two');
    const { items } = await api.client.list(EVENTS, 'default');
    const first = items.find((e) => e.reason === 'First')!;
    const second = items.find((e) => e.reason === 'Second')!;
    assert.equal(first.firstTimestamp, '2031-03-04T05:06:07Z');
    assert.equal(first.lastTimestamp, '2031-03-04T05:06:07Z');
    assert.equal(first.eventTime, kubeMicroTime(FAKE_WALL));
    assert.equal(first.metadata.name, `p.${FAKE_WALL.toString(16)}${first.metadata.name!.slice(-4)}`);
    assert.equal(second.firstTimestamp, '2031-03-04T05:07:37Z');
    assert.equal(second.eventTime, kubeMicroTime(FAKE_WALL + 90_500));
  });

  it("the controller manager's controllers record events by its clock", async () => {
    const idle: LeaderOnlyController = { start: () => undefined, stop: () => undefined };
    const timings = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000, defaultUnavailableTolerationMs: 0 };
    const manager = new ControllerManager({ client: api.client, logger: api.logger, identity: 'server-a', timings, extraControllers: [idle], clock });
    stops.push(() => manager.stop());
    manager.start();
    await settle();
    const node = new InProcessNode(api, clock, 'n1');
    await node.register();
    await node.renew();
    await api.client.create(PODS, 'default', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'default' }, spec: { containers } });
    await advance(clock, 1000, () => node.renew());
    const scheduled = await eventually(
      async () => (await api.client.list(EVENTS, 'default')).items.find((e) => e.reason === 'Scheduled'),
      'the scheduler records Scheduled',
      10_000,
      5,
    );
    assert.match(String(scheduled.firstTimestamp), /^2031-03-04T05:06:0[78]Z$/);
  });

  it("the scheduler dates a pod's PodScheduled=False by the clock", async () => {
    const scheduler = new Scheduler(api.client, informers, recorder(), api.logger, clock);
    stops.push(() => scheduler.stop());
    await informers.start();
    await api.client.create(PODS, 'default', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'nowhere', namespace: 'default' }, spec: { containers } });
    const condition = await eventually(
      async () => (podStatus(await api.client.get(PODS, 'default', 'nowhere')).conditions ?? []).find((c) => c.type === 'PodScheduled'),
      'the pod is marked unschedulable (there is no node)',
      10_000,
      5,
    );
    assert.equal(condition.status, 'False');
    assert.equal(condition.lastTransitionTime, '2031-03-04T05:06:07Z');
  });

  it('a ReplicaSet counts a pod available after minReadySeconds of the clock', async () => {
    const controller = new ReplicaSetController(api.client, informers, recorder(), api.logger, clock);
    stops.push(() => controller.stop());
    await informers.start();
    await api.client.create(REPLICASETS, 'default', replicaSet('web', { replicas: 1, minReadySeconds: 60 }));
    const pod = await eventually(async () => (await api.client.list(PODS, 'default')).items[0], 'the ReplicaSet creates its pod', 10_000, 5);
    await setPodReady(pod);
    const status = async (): Promise<ReturnType<typeof replicaSetStatus>> => replicaSetStatus(await api.client.get(REPLICASETS, 'default', 'web'));
    await eventually(async () => (await status()).readyReplicas === 1, 'the pod counts as ready', 10_000, 5);
    assert.equal((await status()).availableReplicas, 0, 'not available before minReadySeconds');
    await advance(clock, 59_000, undefined, 1000);
    assert.equal((await status()).availableReplicas, 0, 'not available at 59 s');
    await advance(clock, 2000, undefined, 1000);
    await eventually(async () => (await status()).availableReplicas === 1, 'available once 60 s of the clock have passed', 10_000, 5);
  });

  it("a Deployment's conditions are dated by the clock", async () => {
    const controller = new DeploymentController(api.client, informers, recorder(), api.logger, clock);
    stops.push(() => controller.stop());
    await informers.start();
    await api.client.create(DEPLOYMENTS, 'default', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web', namespace: 'default' },
      spec: { replicas: 0, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers } } },
    });
    const conditions = await eventually(
      async () => storedDeploymentStatus(await api.client.get(DEPLOYMENTS, 'default', 'web')).conditions,
      'the Deployment has conditions',
      10_000,
      5,
    );
    assert.deepEqual(
      conditions.map((c) => [c.type, c.lastUpdateTime, c.lastTransitionTime]),
      [
        ['Available', '2031-03-04T05:06:07Z', '2031-03-04T05:06:07Z'],
        ['Progressing', '2031-03-04T05:06:07Z', '2031-03-04T05:06:07Z'],
      ],
    );
  });

  it("a budget's disruptedPods entry expires by the clock", async () => {
    const controller = new DisruptionController(api.client, informers, api.logger, clock);
    stops.push(() => controller.stop());
    await informers.start();
    const pod = await api.client.create(PODS, 'default', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p', namespace: 'default', labels: { app: 'web' } },
      spec: { nodeName: 'n1', containers },
    });
    await setPodReady(pod);
    await api.client.create(PODDISRUPTIONBUDGETS, 'default', {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'pdb', namespace: 'default' },
      spec: { minAvailable: 0, selector: { matchLabels: { app: 'web' } } },
    });
    const status = async (): Promise<ReturnType<typeof budgetStatus>> => budgetStatus(await api.client.get(PODDISRUPTIONBUDGETS, 'default', 'pdb'));
    await eventually(async () => (await status()).currentHealthy === 1, 'the budget counts the pod', 10_000, 5);
    // As an eviction records it: the pod is no longer healthy until the entry expires.
    await api.client.patch(PODDISRUPTIONBUDGETS, 'default', 'pdb', 'merge', { status: { disruptedPods: { p: kubeTime(clock.wallNow()) } } }, 'status');
    await eventually(async () => (await status()).currentHealthy === 0, 'the evicted pod is not counted', 10_000, 5);
    await advance(clock, DISRUPTED_POD_TIMEOUT_MS - 5000, undefined, 5000);
    assert.deepEqual(Object.keys((await status()).disruptedPods ?? {}), ['p'], 'the entry holds until its timeout');
    await advance(clock, 10_000, undefined, 1000);
    await eventually(async () => (await status()).currentHealthy === 1 && !(await status()).disruptedPods, 'the entry expired by the clock', 10_000, 5);
  });
});
