import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import { type Classification, classify, listSeats, type RequestDescription } from '../../src/apiserver/flow-control/classify.js';
import { type Clock, FlowController, type Release } from '../../src/apiserver/flow-control/dispatcher.js';
import { DEFAULT_LEVELS, seatsPerLevel } from '../../src/apiserver/flow-control/levels.js';

/**
 * API Priority and Fairness, Drover's cut (src/apiserver/flow-control/): the classifier's table,
 * and the seats and queues with a fake clock. The same over a real server, with kubectl and a
 * node's renewals, is test/e2e/flow-control.test.ts.
 */

const NODE = { user: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };
const ADMIN = { user: 'system:admin', groups: ['system:masters', 'system:authenticated'] };
const KUBE_SYSTEM_SA = { user: 'system:serviceaccount:kube-system:coredns', groups: ['system:serviceaccounts', 'system:serviceaccounts:kube-system', 'system:authenticated'] };
const APP_SA = { user: 'system:serviceaccount:shop:operator', groups: ['system:serviceaccounts', 'system:serviceaccounts:shop', 'system:authenticated'] };
const ALICE = { user: 'alice', groups: ['system:authenticated'] };

const LEASE = { group: 'coordination.k8s.io', resource: 'leases' };

describe('classify', () => {
  const table: [string, RequestDescription, Classification['level'], boolean?][] = [
    ['the admin, even a list', { ...ADMIN, verb: 'list', group: '', resource: 'pods' }, 'exempt'],
    ["a node renewing its lease", { ...NODE, verb: 'patch', ...LEASE, namespace: 'kube-node-lease', name: 'n1' }, 'node-high'],
    ["a node updating its lease", { ...NODE, verb: 'update', ...LEASE, namespace: 'kube-node-lease', name: 'n1' }, 'node-high'],
    ["a node's status", { ...NODE, verb: 'patch', group: '', resource: 'nodes', subresource: 'status', name: 'n1' }, 'node-high'],
    ["a node reading its Node", { ...NODE, verb: 'get', group: '', resource: 'nodes', name: 'n1' }, 'node-high'],
    ["a node's other traffic (its pods)", { ...NODE, verb: 'list', group: '', resource: 'pods' }, 'workload-high'],
    ['anyone else writing a node lease', { ...ALICE, verb: 'patch', ...LEASE, namespace: 'kube-node-lease', name: 'n1' }, 'workload-low'],
    ['a service account renewing a leader lease', { ...APP_SA, verb: 'update', ...LEASE, namespace: 'shop', name: 'operator-leader' }, 'leader-election'],
    ['a service account reading a leader lease', { ...APP_SA, verb: 'get', ...LEASE, namespace: 'shop', name: 'operator-leader' }, 'leader-election'],
    ['the controller manager renewing its lease', { user: 'system:kube-controller-manager', groups: ['system:authenticated'], verb: 'update', ...LEASE, namespace: 'kube-system', name: 'kube-controller-manager' }, 'leader-election'],
    ['a service account listing leases', { ...APP_SA, verb: 'list', ...LEASE, namespace: 'shop' }, 'global-default'],
    ['a user writing a lease', { ...ALICE, verb: 'update', ...LEASE, namespace: 'shop', name: 'x' }, 'workload-low'],
    ['a kube-system service account listing', { ...KUBE_SYSTEM_SA, verb: 'list', group: '', resource: 'services' }, 'workload-high'],
    ['a kube-system service account writing', { ...KUBE_SYSTEM_SA, verb: 'create', group: '', resource: 'configmaps', namespace: 'kube-system' }, 'workload-high'],
    ['a service account elsewhere writing', { ...APP_SA, verb: 'create', group: '', resource: 'configmaps', namespace: 'shop' }, 'workload-low'],
    ['a user deleting', { ...ALICE, verb: 'delete', group: 'apps', resource: 'deployments', namespace: 'shop', name: 'web' }, 'workload-low'],
    ['a user listing', { ...ALICE, verb: 'list', group: '', resource: 'pods', namespace: 'shop' }, 'global-default'],
    ['a user getting', { ...ALICE, verb: 'get', group: '', resource: 'pods', namespace: 'shop', name: 'p' }, 'global-default'],
    ['a service account elsewhere listing', { ...APP_SA, verb: 'list', group: '', resource: 'pods' }, 'global-default'],
    ['a watch', { ...ALICE, verb: 'watch', group: '', resource: 'pods' }, 'global-default', true],
    ['a node watching', { ...NODE, verb: 'watch', group: '', resource: 'pods' }, 'workload-high', true],
    ['a followed log', { ...ALICE, verb: 'get', group: '', resource: 'pods', subresource: 'log', namespace: 'shop', name: 'p', follow: true }, 'global-default', true],
    ['a log, not followed', { ...ALICE, verb: 'get', group: '', resource: 'pods', subresource: 'log', namespace: 'shop', name: 'p' }, 'global-default', false],
    ['an exec', { ...ALICE, verb: 'create', group: '', resource: 'pods', subresource: 'exec', namespace: 'shop', name: 'p' }, 'workload-low', true],
  ];
  for (const [what, request, level, longRunning = false] of table) {
    it(`${what}: ${level}${longRunning ? ', long-running' : ''}`, () => {
      const c = classify(request);
      assert.equal(c.level, level, `rule ${c.rule}`);
      assert.equal(c.longRunning, longRunning);
    });
  }

  it('flows: a user per namespace for reads and writes, a user alone for heartbeats', () => {
    const inShop = classify({ ...ALICE, verb: 'list', group: '', resource: 'pods', namespace: 'shop' });
    const inBank = classify({ ...ALICE, verb: 'list', group: '', resource: 'pods', namespace: 'bank' });
    const bob = classify({ ...ALICE, user: 'bob', verb: 'list', group: '', resource: 'pods', namespace: 'shop' });
    assert.notEqual(inShop.flow, inBank.flow);
    assert.notEqual(inShop.flow, bob.flow);
    const lease = classify({ ...NODE, verb: 'patch', ...LEASE, namespace: 'kube-node-lease', name: 'n1' });
    const status = classify({ ...NODE, verb: 'patch', group: '', resource: 'nodes', subresource: 'status', name: 'n1' });
    assert.equal(lease.flow, status.flow);
  });

  it('seats: one for anything but a list; a list by the objects it may return (listSeats)', () => {
    const pods = { ...ALICE, group: '', resource: 'pods', namespace: 'shop' };
    assert.equal(classify({ ...pods, verb: 'get', name: 'p', storedObjects: 5000 }).seats, 1);
    assert.equal(classify({ ...pods, verb: 'delete', name: 'p' }).seats, 1);
    assert.equal(classify({ ...pods, verb: 'list', storedObjects: 50 }).seats, 1);
    assert.equal(classify({ ...pods, verb: 'list', storedObjects: 1000 }).seats, 10);
    assert.equal(classify({ ...pods, verb: 'list', storedObjects: 1000, limit: 250 }).seats, 3);
    assert.equal(classify({ ...pods, verb: 'list' }).seats, 10, 'a list of a resource the server has no count of: the most');
  });
});

describe('listSeats', () => {
  it('one seat per hundred objects a list may return, 1 to 10; the page size bounds it; unknown is the most', () => {
    assert.equal(listSeats(0, undefined), 1);
    assert.equal(listSeats(100, undefined), 1);
    assert.equal(listSeats(101, undefined), 2);
    assert.equal(listSeats(2000, undefined), 10);
    assert.equal(listSeats(2000, 250), 3);
    assert.equal(listSeats(undefined, undefined), 10);
    assert.equal(listSeats(undefined, 50), 1);
  });
});

describe('seatsPerLevel', () => {
  it('splits the total by shares, rounding up, at least one each', () => {
    assert.deepEqual(seatsPerLevel(200), { 'node-high': 80, 'leader-election': 10, 'workload-high': 40, 'workload-low': 50, 'global-default': 20 });
    assert.deepEqual(seatsPerLevel(50), { 'node-high': 20, 'leader-election': 3, 'workload-high': 10, 'workload-low': 13, 'global-default': 5 });
    assert.deepEqual(Object.values(seatsPerLevel(2)), [1, 1, 1, 1, 1]);
  });
});

/** Time that moves only when the test says. */
class FakeClock implements Clock {
  private at = 0;
  private timers: { due: number; fn: () => void; live: boolean }[] = [];
  now(): number {
    return this.at;
  }
  after(ms: number, fn: () => void): () => void {
    const timer = { due: this.at + ms, fn, live: true };
    this.timers.push(timer);
    return () => {
      timer.live = false;
    };
  }
  advance(ms: number): void {
    const end = this.at + ms;
    for (;;) {
      const next = this.timers.filter((t) => t.live && t.due <= end).sort((a, b) => a.due - b.due)[0];
      if (!next) break;
      this.at = next.due;
      next.live = false;
      next.fn();
    }
    this.at = end;
  }
}

/** A small list (twenty pods stored): one seat. */
const list = (user: string, namespace = 'shop'): Classification =>
  classify({ user, groups: ['system:authenticated'], verb: 'list', group: '', resource: 'pods', namespace, storedObjects: 20 });
const renewal = (node: string): Classification =>
  classify({ user: `system:node:${node}`, groups: ['system:nodes'], verb: 'patch', ...LEASE, namespace: 'kube-node-lease', name: node });

/** What became of a request handed to the controller: its seat, its refusal, or still waiting. */
interface Outcome {
  release?: Release;
  error?: ApiError;
}

function submit(flow: FlowController, c: Classification, gone?: { leave?: () => void }): Outcome {
  const outcome: Outcome = {};
  try {
    const seat = flow.admit(c, gone ? (fn) => (gone.leave = fn) : undefined);
    if (seat instanceof Promise) {
      seat.then(
        (release) => (outcome.release = release),
        (error: unknown) => (outcome.error = error as ApiError),
      );
    } else outcome.release = seat;
  } catch (error) {
    outcome.error = error as ApiError;
  }
  return outcome;
}

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function stats(flow: FlowController, level: string) {
  return flow.stats().find((s) => s.level === level)!;
}

describe('FlowController', () => {
  it('runs a level up to its seats, queues the rest, and gives a freed seat to the next', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock });
    const first = submit(flow, list('alice'));
    const second = submit(flow, list('alice'));
    await settle();
    assert.ok(first.release, 'the first list has the level’s one seat');
    assert.equal(second.release, undefined);
    assert.equal(stats(flow, 'global-default').queued, 1);
    first.release!();
    await settle();
    assert.ok(second.release, 'the freed seat went to the waiting list');
    assert.deepEqual([stats(flow, 'global-default').executing, stats(flow, 'global-default').queued], [1, 0]);
  });

  it('is fair between flows: a quiet client waits behind one of a noisy client’s requests, not all', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock });
    const holder = submit(flow, list('noisy'));
    const noisy = Array.from({ length: 30 }, () => submit(flow, list('noisy')));
    const quiet = submit(flow, list('quiet'));
    await settle();
    let release = holder.release!;
    let servedBeforeQuiet = 0;
    for (let turn = 0; turn < 31 && !quiet.release; turn++) {
      release();
      await settle();
      if (quiet.release) break;
      const next = noisy.find((o) => o.release && !o.error && !(o as { done?: boolean }).done)!;
      (next as { done?: boolean }).done = true;
      servedBeforeQuiet++;
      release = next.release!;
    }
    assert.ok(quiet.release, 'the quiet client was served');
    // The noisy client's 30 requests spread over its hand of 6 queues; round robin reaches the
    // quiet client's queue within one turn of the queues.
    assert.ok(servedBeforeQuiet <= 6, `served ${servedBeforeQuiet} of the noisy client's requests first`);
  });

  it('is bounded: a flow whose queues are full is refused at once with 429, Retry-After and the level', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock, levels: { 'global-default': { queues: 4, handSize: 2, queueLengthLimit: 3 } } });
    const holder = submit(flow, list('alice'));
    const queued = Array.from({ length: 6 }, () => submit(flow, list('alice')));
    const refused = submit(flow, list('alice'));
    await settle();
    assert.ok(holder.release);
    assert.ok(queued.every((o) => !o.error && !o.release), 'two queues of three hold six');
    assert.ok(refused.error instanceof ApiError, 'the seventh is refused');
    assert.equal(refused.error.code, 429);
    assert.equal(refused.error.reason, 'TooManyRequests');
    assert.match(refused.error.message, /priority level "global-default"/);
    assert.ok((refused.error.details?.retryAfterSeconds ?? 0) >= 1);
    assert.equal(stats(flow, 'global-default').rejected['queue-full'], 1);
    // Another client still finds room in its own queues.
    const other = submit(flow, list('bob', 'bank'));
    await settle();
    assert.equal(other.error, undefined);
  });

  it('refuses a request that waited longer than its level allows, with a Retry-After from the backlog', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock });
    // The level learns how long a seat is held: 2 s a list.
    const warm = submit(flow, list('alice'));
    clock.advance(2000);
    warm.release!();
    const holder = submit(flow, list('alice'));
    const waiting = [submit(flow, list('alice')), submit(flow, list('bob'))];
    await settle();
    clock.advance(DEFAULT_LEVELS['global-default'].maxWaitMs - 1);
    await settle();
    assert.ok(waiting.every((o) => !o.error && !o.release), 'still waiting just before the bound');
    clock.advance(1);
    await settle();
    const [first, second] = waiting.map((o) => o.error);
    assert.equal(first?.code, 429);
    assert.match(first!.message, /waited 5 s for a seat/);
    // When the first was refused, one request waited and one held the one seat, each for about 2 s.
    assert.equal(first!.details?.retryAfterSeconds, 4);
    assert.equal(second?.code, 429);
    assert.equal(stats(flow, 'global-default').rejected['time-out'], 2);
    holder.release!();
    assert.deepEqual([stats(flow, 'global-default').executing, stats(flow, 'global-default').queued], [0, 0]);
  });

  it('keeps heartbeats apart: a level full of lists leaves the heartbeats’ seats alone', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock, levels: { 'global-default': { queueLengthLimit: 1 } } });
    const lists = Array.from({ length: 50 }, () => submit(flow, list('bulk')));
    await settle();
    assert.ok(lists.some((o) => o.error?.code === 429), 'lists are being refused');
    for (let k = 0; k < 20; k++) {
      const beat = submit(flow, renewal('n1'));
      await settle();
      assert.ok(beat.release, `renewal ${k} had a seat at once`);
      beat.release!();
    }
    assert.equal(stats(flow, 'node-high').rejected['queue-full'] + stats(flow, 'node-high').rejected['time-out'], 0);
  });

  it('does not count long-running requests, and never queues the exempt', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock, levels: { 'global-default': { queues: 1, handSize: 1, queueLengthLimit: 1 } } });
    const watches = Array.from({ length: 10 }, () => submit(flow, classify({ ...ALICE, verb: 'watch', group: '', resource: 'pods' })));
    assert.ok(watches.every((o) => o.release), 'watches start without a seat');
    const holder = submit(flow, list('alice'));
    assert.ok(holder.release, 'the level’s one seat is still free after ten watches');
    submit(flow, list('alice'));
    const admin = Array.from({ length: 10 }, () => submit(flow, classify({ ...ADMIN, verb: 'list', group: '', resource: 'pods' })));
    assert.ok(admin.every((o) => o.release && !o.error), 'the admin goes past a full level');
    assert.deepEqual(stats(flow, 'global-default'), { level: 'global-default', seats: 1, executing: 1, queued: 1, rejected: { 'queue-full': 0, 'time-out': 0 } });
  });

  it('charges a wide list its seats; a queued wide list is not starved by narrow requests arriving after it', async () => {
    const clock = new FakeClock();
    // 200 in all: 20 seats for reads.
    const flow = new FlowController({ totalSeats: 200, clock });
    const wide = (user: string): Classification => classify({ user, groups: [], verb: 'list', group: '', resource: 'nodes', storedObjects: 1000 });
    const narrow = (user: string): Classification => classify({ user, groups: [], verb: 'get', group: '', resource: 'pods', namespace: 'shop', name: 'p', storedObjects: 1000 });
    const first = submit(flow, wide('a'));
    const small = submit(flow, narrow('b'));
    const second = submit(flow, wide('c'));
    await settle();
    assert.ok(first.release && small.release, 'ten seats and one of twenty');
    assert.equal(second.release, undefined, 'another ten do not fit in the nine left');
    const later = submit(flow, narrow('d'));
    await settle();
    assert.equal(later.release, undefined, 'while a request waits, a new one queues too, though a seat is free');
    // Seats go to the queues in turn: whichever is next, the wide list's turn comes within one
    // round, and then nobody overtakes it while it waits for its ten.
    small.release!();
    await settle();
    first.release!();
    await settle();
    assert.ok(second.release && later.release, 'both ran once the first wide list gave its seats back');
    assert.equal(stats(flow, 'global-default').executing, 11);
    const third = submit(flow, wide('e'));
    const overtaker = submit(flow, narrow('f'));
    await settle();
    assert.equal(third.release, undefined, 'nine seats free: the third wide list waits');
    (second as Outcome).release!();
    await settle();
    assert.ok(third.release && overtaker.release, 'the wide list ran when ten seats were free; the narrow one as well');
  });

  it('lets a request whose client went away leave its queue', async () => {
    const clock = new FakeClock();
    const flow = new FlowController({ totalSeats: 2, clock });
    const holder = submit(flow, list('alice'));
    const gone: { leave?: () => void } = {};
    const leaving = submit(flow, list('alice'), gone);
    const staying = submit(flow, list('alice'));
    assert.equal(stats(flow, 'global-default').queued, 2);
    gone.leave!();
    await settle();
    assert.equal(leaving.error?.name, 'ClientGoneError');
    holder.release!();
    await settle();
    assert.ok(staying.release, 'the seat went to the one still there');
  });
});
