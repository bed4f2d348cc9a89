import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { type ApiClient, CONFIGMAPS, LEASES } from '../../src/client/types.js';
import { controllerLeaseTimings } from '../../src/config/timings.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { CONTROLLER_LEASE } from '../../src/controllers/controller-manager.js';
import { fencedClient, NotLeaderError } from '../../src/controllers/fenced-client.js';
import { leaseSpec } from '../../src/controllers/kube-types.js';
import { DatastoreStalls } from '../../src/controllers/datastore-stalls.js';
import { LeaderElector } from '../../src/controllers/leader-election.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { FreezableClient } from '../helpers/freezable-client.js';

/**
 * The controller lease's step-down rule on fake clocks: a leader counts its term from when it
 * *sent* its last committed renewal and refuses its controllers' writes from `stepDownMs` on; a
 * candidate takes over only after seeing the lease unchanged for `durationMs`. So, with each
 * server on its own clock, the old leader has stopped writing before the new one begins, whether
 * it was cut off from the datastore or paused outright. A stall that nobody else used keeps the
 * term; a longer one (`abandonMs`), or another holder seen, ends it.
 */

const LEASE = controllerLeaseTimings(4000);

describe('controller lease: the leader steps down before anyone can take over', () => {
  let api: InProcessApi;
  const electors: LeaderElector[] = [];

  beforeEach(async () => {
    api = await inProcessApi();
  });

  afterEach(async () => {
    for (const elector of electors.splice(0)) await elector.stop();
    await api.close();
  });

  /** Each elector's term starts and ends, in order. */
  const terms = new Map<string, string[]>();

  function elector(identity: string, client: ApiClient, clock: FakeClock, stalls?: DatastoreStalls): LeaderElector {
    const log: string[] = [];
    terms.set(identity, log);
    const e = new LeaderElector(
      client,
      { ...CONTROLLER_LEASE, ...LEASE, identity, clock, ...(stalls ? { stalls } : {}) },
      { onStartedLeading: () => log.push('start'), onStoppedLeading: () => log.push('stop') },
      api.logger,
    );
    electors.push(e);
    return e;
  }

  /** Both servers' clocks move together, a few milliseconds at a time, the way real time does. */
  async function both(clocks: FakeClock[], ms: number, each?: () => void, stepMs = 10): Promise<void> {
    for (let done = 0; done < ms; done += stepMs) {
      for (const clock of clocks) await clock.advance(stepMs, 3);
      each?.();
    }
  }

  it('a leader cut off from the datastore stops writing at its deadline, the other server takes over a third of a lease later, and the cut-off one gives its term up', async () => {
    const clockA = new FakeClock();
    const clockB = new FakeClock({ monotonic: 77_000_000 }); // another host: its own origin
    const frozen = new FreezableClient(api.client);
    const a = elector('server-a', frozen.client, clockA);
    const b = elector('server-b', api.client, clockB);
    a.start();
    await both([clockA, clockB], 100);
    b.start();
    await both([clockA, clockB], 2000);
    assert.ok(a.isLeader && a.mayWrite() && !b.isLeader, 'a leads, b waits');

    // a's renewals now hang (they are sent, never committed). Follow both, 10 ms at a time.
    frozen.frozen = true;
    const cutAt = clockA.now();
    let aStoppedAt: number | undefined; // on a's clock: its writes are refused from then on
    let aEndedAt: number | undefined; // its term given up
    let bStartedAtElapsed: number | undefined;
    let aStoppedAtElapsed: number | undefined;
    let overlap = false;
    let elapsed = 0;
    await both([clockA, clockB], 3 * LEASE.durationMs, () => {
      elapsed += 10;
      if (a.mayWrite() && b.isLeader) overlap = true;
      if (aStoppedAt === undefined && !a.mayWrite()) [aStoppedAt, aStoppedAtElapsed] = [clockA.now(), elapsed];
      if (aEndedAt === undefined && !a.isLeader) aEndedAt = clockA.now();
      if (bStartedAtElapsed === undefined && b.isLeader) bStartedAtElapsed = elapsed;
    });
    assert.equal(overlap, false, 'a could write while b led');
    assert.ok(aStoppedAt !== undefined && bStartedAtElapsed !== undefined && aStoppedAtElapsed !== undefined, 'a stopped writing and b took over');
    // Its renewals hang, so it cannot see b: it gives its term up by its clock alone.
    assert.ok(aEndedAt !== undefined && aEndedAt - cutAt <= LEASE.abandonMs + 10, `a gave its term up ${aEndedAt === undefined ? 'never' : `${aEndedAt - cutAt} ms`} after the cut`);
    assert.deepEqual(terms.get('server-a'), ['start', 'stop']);
    // a's last committed renewal was sent at most one renew interval before the cut.
    assert.ok(aStoppedAt - cutAt <= LEASE.stepDownMs + 10, `a stopped ${aStoppedAt - cutAt} ms after the cut (deadline ${LEASE.stepDownMs} ms after its last renewal)`);
    assert.ok(aStoppedAt - cutAt >= LEASE.stepDownMs - LEASE.renewIntervalMs - 10, `a stopped no earlier than its deadline (${aStoppedAt - cutAt} ms)`);
    assert.ok(
      bStartedAtElapsed - aStoppedAtElapsed >= LEASE.durationMs - LEASE.stepDownMs - 10,
      `b started ${bStartedAtElapsed - aStoppedAtElapsed} ms after a stopped; at least ${LEASE.durationMs - LEASE.stepDownMs} ms expected`,
    );
    assert.ok(bStartedAtElapsed <= LEASE.durationMs + 2 * LEASE.retryIntervalMs + 20, `b took over ${bStartedAtElapsed} ms after the cut`);

    // The link comes back: a's hung read answers with b's lease, and a stays a follower.
    frozen.thaw();
    await both([clockA, clockB], 2000);
    assert.ok(!a.isLeader && b.isLeader);
    assert.equal(leaseSpec((await api.client.get(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name))!).holderIdentity, 'server-b');
  });

  it('a leader paused past its lease refuses its writes at the first instant it runs again, before any of its timers', async () => {
    const clockA = new FakeClock();
    const clockB = new FakeClock({ monotonic: 5_000_000 });
    const a = elector('server-a', api.client, clockA);
    const b = elector('server-b', api.client, clockB);
    const writes = fencedClient(api.client, () => (a.mayWrite() ? undefined : 'not leading'), 'server-a');
    const configMap = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'default' }, data: {} });
    a.start();
    await both([clockA, clockB], 100);
    b.start();
    await both([clockA, clockB], 1000);
    await writes.create(CONFIGMAPS, 'default', configMap('while-leading'));

    // a is stopped (SIGSTOP): only b's time passes, and b takes over.
    for (let waited = 0; !b.isLeader; waited += 10) {
      assert.ok(waited < 2 * LEASE.durationMs, 'b takes over');
      await clockB.advance(10, 3);
    }
    assert.ok(a.isLeader, 'a, stopped, still believes it leads');

    // SIGCONT: a's clock has moved on, none of its timers has run yet.
    clockA.jump(LEASE.durationMs + 500);
    assert.equal(a.mayWrite(), false, 'the deadline is read from the clock at the write, not from a timer');
    await assert.rejects(writes.create(CONFIGMAPS, 'default', configMap('after-pause')), NotLeaderError);
    assert.equal(await api.client.get(CONFIGMAPS, 'default', 'after-pause'), undefined, 'nothing was written');

    // Then its overdue timers run: it finds b's lease and ends its term.
    await both([clockA, clockB], 1000);
    assert.ok(!a.isLeader && b.isLeader);
    assert.deepEqual(terms.get('server-a'), ['start', 'stop']);
    assert.ok(await api.client.get(CONFIGMAPS, 'default', 'while-leading'));
  });

  it('a stall shorter than abandonMs suspends the writes, not the term: a prompt renewal of the unchanged lease lifts the fence', async () => {
    const clock = new FakeClock();
    const slow = new FreezableClient(api.client);
    const a = elector('server-a', slow.client, clock);
    a.start();
    await clock.advance(100, 3);
    assert.ok(a.isLeader && a.mayWrite());
    slow.frozen = true; // an etcd leader election: every write waits
    await clock.advance(LEASE.stepDownMs + LEASE.renewIntervalMs, 3);
    assert.ok(!a.mayWrite(), 'writes refused while no renewal is committed');
    assert.ok(a.isLeader, 'the term is kept: nobody else can have led yet');
    // The hung renewal now commits: it was sent too long ago to lift the fence.
    slow.thaw();
    await clock.advance(0, 10);
    assert.ok(!a.mayWrite(), 'a renewal sent more than stepDownMs ago proves nothing about now');
    // Its next renewal, prompt again, does; the term is the same one.
    await clock.advance(LEASE.renewIntervalMs + 10, 10);
    assert.ok(a.isLeader && a.mayWrite());
    assert.deepEqual(terms.get('server-a'), ['start']);
  });

  it('its lease writes measure the datastore: quick ones count as no stall, a hung one as a stall from its sending, open and then closed', async () => {
    const clock = new FakeClock();
    const slow = new FreezableClient(api.client);
    const stalls = new DatastoreStalls(LEASE.stepDownMs / 2);
    const a = elector('server-a', slow.client, clock, stalls);
    const startedAt = clock.now();
    a.start();
    await both([clock], 3 * LEASE.renewIntervalMs);
    assert.ok(a.isLeader);
    assert.equal(stalls.stalledWithin(startedAt, clock.now()), 0, 'renewals that commit at once are no stall');
    const frozenAt = clock.now();
    slow.frozen = true; // an etcd leader election: every write waits
    await both([clock], LEASE.stepDownMs);
    const open = stalls.stalledWithin(startedAt, clock.now());
    // From the send of the write that hangs: the next renewal after the freeze, or one already on its way.
    assert.ok(open > LEASE.stepDownMs / 2 && open <= LEASE.stepDownMs + LEASE.renewIntervalMs, `an outstanding write is a stall so far: ${open} ms`);
    slow.thaw();
    await both([clock], 20);
    const thawedAt = clock.now();
    await both([clock], 3 * LEASE.renewIntervalMs);
    const closed = stalls.stalledWithin(startedAt, clock.now());
    assert.ok(
      closed > thawedAt - frozenAt - LEASE.renewIntervalMs && closed <= thawedAt - frozenAt + LEASE.renewIntervalMs,
      `the stall is kept once the write ends: ${closed} ms`,
    );
    assert.equal(stalls.stalledWithin(thawedAt, clock.now()), 0, 'and nothing after it');
  });

  it('a stall longer than abandonMs ends the term; the next renewal starts a new one', async () => {
    const clock = new FakeClock();
    const slow = new FreezableClient(api.client);
    const a = elector('server-a', slow.client, clock);
    a.start();
    await clock.advance(100, 3);
    slow.frozen = true;
    await clock.advance(LEASE.abandonMs + 10, 3);
    assert.ok(!a.isLeader && !a.mayWrite());
    slow.thaw();
    for (let i = 0; i < 20 && !a.mayWrite(); i++) await clock.advance(LEASE.retryIntervalMs, 20);
    assert.ok(a.isLeader && a.mayWrite(), `leading ${a.isLeader}, terms ${terms.get('server-a')?.join(',')}`);
    assert.deepEqual(terms.get('server-a'), ['start', 'stop', 'start']);
  });
});
