import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, it, mock } from 'node:test';
import { pino } from 'pino';
import type { Logger } from '../../src/logging/logger.js';
import { temporaryRefusal } from '../../src/cluster/etcd-membership.js';
import { RetryWait, statusMessage } from '../../src/server/etcd-join.js';

/**
 * The rules behind a joining server's waiting, without processes: which etcd refusals are
 * temporary (answered 503 with Retry-After, and waited out), and how the joiner waits (back-off
 * floored by Retry-After, capped; one log line per wait). Time is faked; nothing else is.
 */

describe('etcd refusals a joiner waits out', () => {
  it('classifies etcd 3.4’s reconfiguration refusals as temporary, with a Retry-After', () => {
    const cases: [string, RegExp, number][] = [
      ['etcdserver: unhealthy cluster', /connected to every voting member for 5 s/, 1],
      ['etcdserver: re-configuration failed due to not enough started members', /too few members are started/, 2],
      ['etcdserver: too many learner members in cluster', /one learner at a time/, 1],
      ['etcdserver: leader changed', /cannot take a reconfiguration now/, 2],
      ['etcdserver: request timed out', /cannot take a reconfiguration now/, 2],
    ];
    for (const [message, reason, seconds] of cases) {
      const refusal = temporaryRefusal(new Error(message));
      assert.ok(refusal, `${message} is temporary`);
      assert.match(refusal.reason, reason);
      assert.equal(refusal.retryAfterSeconds, seconds, message);
    }
  });

  it('leaves every other error final', () => {
    for (const message of ['etcdserver: Peer URLs already exists', 'etcdserver: member not found', 'permission denied']) {
      assert.equal(temporaryRefusal(new Error(message)), undefined, message);
    }
  });

  it('reads the message of a Status body, or the body itself', () => {
    assert.equal(statusMessage('{"kind":"Status","message":"etcd takes one learner at a time"}'), 'etcd takes one learner at a time');
    assert.equal(statusMessage(' plain text \n'), 'plain text');
  });
});

describe('RetryWait', () => {
  let lines: { level: string; msg: string; reason?: string }[];
  let logger: Logger;

  beforeEach(() => {
    lines = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as (typeof lines)[number]);
        done();
      },
    });
    logger = pino({ level: 'debug', formatters: { level: (label) => ({ level: label }) } }, sink) as Logger;
    mock.timers.enable({ apis: ['setTimeout'] });
    // No jitter: Math.random() = 0.5 makes the factor exactly 1.
    mock.method(Math, 'random', () => 0.5);
  });
  afterEach(() => {
    mock.timers.reset();
    mock.restoreAll();
  });

  /** How long one retry() sleeps, in fake ms (to the nearest 50 ms). */
  async function sleptMs(wait: RetryWait, reason: string, retryAfterSeconds?: number): Promise<number> {
    let done = false;
    const pending = wait.retry(reason, retryAfterSeconds).then(() => (done = true));
    let slept = 0;
    while (!done) {
      mock.timers.tick(50);
      slept += 50;
      await Promise.resolve();
      await Promise.resolve();
      if (slept > 60_000) throw new Error('retry() never returned');
    }
    await pending;
    return slept;
  }

  it('backs off exponentially up to its cap, never sooner than Retry-After', async () => {
    const wait = new RetryWait(logger, 'the cluster', { initialMs: 250, maxMs: 2000 });
    const slept: number[] = [];
    for (let i = 0; i < 6; i++) slept.push(await sleptMs(wait, 'busy'));
    assert.deepEqual(slept, [250, 500, 1000, 2000, 2000, 2000]);
    assert.equal(await sleptMs(wait, 'busy', 3), 3000, 'Retry-After above the cap is honoured');
    assert.equal(wait.retries, 7);
  });

  it('logs what it waits for once, and a change of reason only at debug level', async () => {
    const wait = new RetryWait(logger, 'the server to add this member', { initialMs: 10, maxMs: 10 });
    await sleptMs(wait, 'one learner at a time');
    await sleptMs(wait, 'one learner at a time');
    await sleptMs(wait, 'unhealthy cluster');
    await sleptMs(wait, 'unhealthy cluster');
    const info = lines.filter((l) => l.level === 'info');
    assert.deepEqual(
      info.map((l) => l.msg),
      ['waiting for the server to add this member: one learner at a time (retrying with back-off)'],
    );
    assert.equal(lines.filter((l) => l.level === 'debug').length, 1, 'the new reason once, at debug');
  });
});
