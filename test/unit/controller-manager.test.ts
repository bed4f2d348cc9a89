import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { LEASES, PODS } from '../../src/client/types.js';
import { controllerLeaseTimings } from '../../src/config/timings.js';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { CONTROLLER_LEASE, ControllerManager, type LeaderOnlyController } from '../../src/controllers/controller-manager.js';
import { leaseSpec, podSpec } from '../../src/controllers/kube-types.js';
import { advance, type InProcessApi, inProcessApi, InProcessNode } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * The controller manager in-process on a FakeClock: only the holder of the controller lease runs
 * the controllers (and the extra leader-only ones it was given), over one set of shared
 * informers; losing the lease stops them, and another manager takes over once it expires.
 */

const TIMINGS = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000, defaultUnavailableTolerationMs: 0 };
const LEASE = controllerLeaseTimings(TIMINGS.nodeMonitorGracePeriodMs);

class RecordingController implements LeaderOnlyController {
  log: string[] = [];
  start(): void {
    this.log.push('start');
  }
  stop(): void {
    this.log.push('stop');
  }
}

describe('controller manager on a fake clock', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  const managers: ControllerManager[] = [];

  beforeEach(async () => {
    api = await inProcessApi();
    clock = new FakeClock();
  });

  afterEach(async () => {
    for (const manager of managers.splice(0)) await manager.stop();
    await api.close();
  });

  function manager(identity: string, extra: LeaderOnlyController): ControllerManager {
    const m = new ControllerManager({ client: api.client, logger: api.logger, identity, timings: TIMINGS, extraControllers: [extra], clock });
    managers.push(m);
    return m;
  }

  it('runs the controllers only while it holds the lease, and another takes over after losing it', async () => {
    const extraA = new RecordingController();
    const extraB = new RecordingController();
    const a = manager('server-a', extraA);
    const b = manager('server-b', extraB);
    a.start();
    await settle();
    b.start();
    await settle();
    assert.ok(a.isLeader && a.lifecycle, 'a holds the lease and runs the controllers');
    assert.ok(!b.isLeader && !b.lifecycle, 'b waits');
    assert.deepEqual(extraA.log, ['start']);
    assert.deepEqual(extraB.log, []);

    // Under a: a node renewing its lease is judged Ready, and an unscheduled pod is placed on it,
    // both controllers reading the one set of shared informers.
    const node = new InProcessNode(api, clock, 'n1');
    await node.register();
    await node.renew();
    await api.client.create(PODS, 'default', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p', namespace: 'default' },
      spec: { containers: [{ name: 'c', image: 'none', command: ['sleep', '3600'] }] },
    });
    await advance(clock, 1000, () => node.renew());
    await eventually(async () => (await node.state()) === 'Ready', 'n1 Ready under a', 5000, 5);
    await eventually(async () => podSpec(await api.client.get(PODS, 'default', 'p')).nodeName === 'n1', 'p scheduled to n1', 5000, 5);

    // Someone else takes the lease (a's renewal was lost): at its next renewal a stops everything.
    const lease = (await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!;
    await api.client.update(LEASES, CONTROLLER_LEASE.namespace, { ...lease, spec: { ...leaseSpec(lease), holderIdentity: 'server-x' } });
    await advance(clock, LEASE.renewIntervalMs, () => node.renew());
    assert.ok(!a.isLeader && !a.lifecycle, 'a stopped leading');
    assert.deepEqual(extraA.log, ['start', 'stop']);
    assert.ok(!b.isLeader, 'b does not take a lease that is not expired');

    // server-x never renews: once the lease has gone unchanged for its duration, one of them takes it.
    await advance(clock, LEASE.durationMs + LEASE.renewIntervalMs, () => node.renew(), LEASE.retryIntervalMs);
    const leaders = [a, b].filter((m) => m.isLeader);
    assert.equal(leaders.length, 1, 'exactly one leader');
    assert.equal(leaseSpec(await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name)).holderIdentity, leaders[0] === a ? 'server-a' : 'server-b');
    await eventually(async () => (await node.state()) === 'Ready', 'n1 still Ready under the new leader', 5000, 5);

    // stop() stops the controllers and releases the lease at once.
    const leader = leaders[0]!;
    await leader.stop();
    assert.ok(!leader.isLeader && !leader.lifecycle);
    assert.equal(leaseSpec(await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name)).holderIdentity, '');
    assert.equal((leader === a ? extraA : extraB).log.at(-1), 'stop');
  });

  it('a manager that loses the lease while its controllers start does not leave them running', async () => {
    let release!: () => void;
    const slow: LeaderOnlyController & { log: string[] } = {
      log: [],
      async start() {
        this.log.push('start');
        await new Promise<void>((resolve) => (release = resolve));
        this.log.push('started');
      },
      stop() {
        this.log.push('stop');
      },
    };
    const a = manager('server-a', slow);
    a.start();
    await eventually(() => slow.log.includes('start'), 'the extra controller starting', 5000, 5);
    await a.stop();
    release();
    await settle();
    assert.deepEqual(slow.log, ['start', 'stop', 'started', 'stop'], 'stopped again once its start finished');
    assert.ok(!a.lifecycle);
  });
});
