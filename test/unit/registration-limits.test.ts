import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import { RegistrationLimiter, registrationSource, TokenBuckets } from '../../src/cluster/registration-limits.js';

/**
 * The registration limiter's arithmetic on a fake clock (the real-server behaviour is in
 * node-registration.test.ts): burst, refill, Retry-After, and how sources are keyed.
 */

function clock(start = 1_000_000): { now: () => number; advance(ms: number): void } {
  let t = start;
  return { now: () => t, advance: (ms) => (t += ms) };
}

function refusal(run: () => void): ApiError {
  try {
    run();
  } catch (error) {
    assert.ok(error instanceof ApiError);
    return error;
  }
  assert.fail('expected a 429');
}

describe('registration limits', () => {
  it('failures: 10 pass, then every registration from the source is refused until one token refills (6 s)', () => {
    const time = clock();
    const limiter = new RegistrationLimiter(undefined, undefined, time.now);
    for (let i = 0; i < 10; i++) {
      limiter.admit('10.1.1.1');
      limiter.failed('10.1.1.1');
    }
    const error = refusal(() => limiter.admit('10.1.1.1'));
    assert.equal(error.code, 429);
    assert.equal(error.reason, 'TooManyRequests');
    assert.equal(error.details?.retryAfterSeconds, 6);
    assert.match(error.message, /too many failed node registrations from 10\.1\.1\.1; try again in 6 s/);
    limiter.admit('10.1.1.2');

    time.advance(3000);
    assert.equal(refusal(() => limiter.admit('10.1.1.1')).details?.retryAfterSeconds, 3);
    time.advance(3000);
    limiter.admit('10.1.1.1');
    limiter.failed('10.1.1.1');
    assert.equal(refusal(() => limiter.admit('10.1.1.1')).details?.retryAfterSeconds, 6);
    // A full minute refills the whole burst, never more.
    time.advance(600_000);
    for (let i = 0; i < 10; i++) {
      limiter.admit('10.1.1.1');
      limiter.failed('10.1.1.1');
    }
    refusal(() => limiter.admit('10.1.1.1'));
  });

  it('new names: 30 at once, then one every 2 s', () => {
    const time = clock();
    const limiter = new RegistrationLimiter(undefined, undefined, time.now);
    for (let i = 0; i < 30; i++) limiter.newName('10.2.2.2', `n${i}`);
    const error = refusal(() => limiter.newName('10.2.2.2', 'n30'));
    assert.equal(error.details?.retryAfterSeconds, 2);
    assert.match(error.message, /too many registrations of new node names from 10\.2\.2\.2 \(registering "n30"\); try again in 2 s/);
    time.advance(2000);
    limiter.newName('10.2.2.2', 'n30');
    refusal(() => limiter.newName('10.2.2.2', 'n31'));
  });

  it('remembers a bounded number of sources, forgetting the least recently seen', () => {
    const buckets = new TokenBuckets({ capacity: 1, perMinute: 1 });
    for (let i = 0; i < 10_050; i++) buckets.charge(`source-${i}`);
    assert.equal(buckets.size, 10_000);
    assert.equal(buckets.retryAfterSeconds('source-10049'), 60, 'a recent source is still limited');
    assert.equal(buckets.retryAfterSeconds('source-0'), 0, 'the oldest was forgotten');
  });

  it('keys IPv4 (also IPv4-mapped) by address and IPv6 by its /64', () => {
    assert.equal(registrationSource('127.0.0.1'), '127.0.0.1');
    assert.equal(registrationSource('::ffff:192.0.2.7'), '192.0.2.7');
    assert.equal(registrationSource('2001:db8:0:1::5'), '2001:db8:0:1::/64');
    assert.equal(registrationSource('2001:DB8:0000:0001:aaaa:bbbb:cccc:dddd'), '2001:db8:0:1::/64');
    assert.equal(registrationSource('::1'), '0:0:0:0::/64');
    assert.equal(registrationSource('fe80::1'), 'fe80:0:0:0::/64');
    assert.equal(registrationSource(undefined), 'unknown');
  });
});
