import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { Expectations, WorkQueue } from '../../src/controllers/work-queue.js';
import { createLogger } from '../../src/logging/logger.js';

/** The keyed work queue and expectations, with back-offs and delays on a FakeClock. */

const logger = createLogger('silent');

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('WorkQueue', () => {
  it('reconciles a key added many times in one turn once', async () => {
    const seen: string[] = [];
    const queue = new WorkQueue('t', async (key) => void seen.push(key), logger, { clock: new FakeClock() });
    for (let i = 0; i < 5; i++) queue.add('a');
    queue.add('b');
    await settle();
    assert.deepEqual(seen.sort(), ['a', 'b']);
    assert.ok(queue.idle);
    queue.stop();
  });

  it('never runs one key twice at once: a key added while it runs is run again afterwards', async () => {
    const gate = deferred();
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    const queue = new WorkQueue(
      't',
      async () => {
        runs++;
        running++;
        maxRunning = Math.max(maxRunning, running);
        if (runs === 1) await gate.promise;
        running--;
      },
      logger,
      { clock: new FakeClock() },
    );
    queue.add('a');
    await settle();
    queue.add('a');
    queue.add('a');
    await settle();
    assert.equal(runs, 1, 'the second add waits for the first run');
    gate.resolve();
    await settle();
    assert.equal(runs, 2, 'run once more for the adds made meanwhile');
    assert.equal(maxRunning, 1);
    queue.stop();
  });

  it('retries a failed key with exponential back-off on its clock, and not before', async () => {
    const clock = new FakeClock();
    let attempts = 0;
    const queue = new WorkQueue(
      't',
      async () => {
        attempts++;
        if (attempts <= 2) throw new Error('not yet');
      },
      logger,
      { clock, baseBackoffMs: 100, maxBackoffMs: 1000 },
    );
    queue.add('a');
    await settle();
    assert.equal(attempts, 1);
    await clock.advance(99);
    assert.equal(attempts, 1, 'no retry before the first back-off (100 ms)');
    await clock.advance(1);
    assert.equal(attempts, 2);
    await clock.advance(199);
    assert.equal(attempts, 2, 'the second back-off is twice as long');
    await clock.advance(1);
    assert.equal(attempts, 3);
    await clock.advance(10_000);
    assert.equal(attempts, 3, 'a success ends the retries');
    queue.stop();
  });

  it('addAfter waits on its clock, keeps the earlier timer, and stop() cancels it', async () => {
    const clock = new FakeClock();
    const seen: string[] = [];
    const queue = new WorkQueue('t', async (key) => void seen.push(key), logger, { clock });
    queue.addAfter('a', 500);
    queue.addAfter('a', 100);
    queue.addAfter('b', 300);
    await clock.advance(299);
    assert.deepEqual(seen, []);
    await clock.advance(1);
    assert.deepEqual(seen, ['b']);
    await clock.advance(200);
    assert.deepEqual(seen, ['b', 'a']);
    queue.addAfter('c', 100);
    queue.stop();
    await clock.advance(1000);
    assert.deepEqual(seen, ['b', 'a']);
    assert.equal(clock.pending, 0);
  });

  it('a reconcile may ask to be called again later', async () => {
    const clock = new FakeClock();
    let runs = 0;
    const queue = new WorkQueue('t', async () => (++runs === 1 ? { requeueAfterMs: 1000 } : undefined), logger, { clock });
    queue.add('a');
    await settle();
    await clock.advance(999);
    assert.equal(runs, 1);
    await clock.advance(1);
    assert.equal(runs, 2);
    queue.stop();
  });
});

describe('Expectations', () => {
  it('are satisfied once the cache shows the writes, or once they expire on the clock', async () => {
    const clock = new FakeClock();
    const expectations = new Expectations(15_000, clock);
    expectations.expectCreate('rs', 'p1');
    expectations.expectDelete('rs', 'p2');
    assert.equal(expectations.satisfied('rs', (name) => (name === 'p2' ? 'present' : 'absent')), false);
    assert.equal(expectations.satisfied('rs', (name) => (name === 'p1' ? 'present' : 'terminating')), true);

    expectations.expectCreate('rs', 'p3');
    clock.stepWall(60_000);
    assert.equal(expectations.satisfied('rs', () => 'absent'), false, 'a wall-clock step does not expire them');
    await clock.advance(15_001);
    assert.equal(expectations.satisfied('rs', () => 'absent'), true, 'expired: a lost event delays a reconcile, never stops it');
  });
});
