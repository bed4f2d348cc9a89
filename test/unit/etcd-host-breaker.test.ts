/**
 * The etcd client's per-member breaker opens on a broken connection, never on an answer from
 * etcd: during an election the member answers the proposals it lost with "request timed out",
 * and a breaker opened by each of those made every call of the server fail for a second.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { BrokenCircuitError } from 'cockatiel';
import { EtcdLeaseInvalidError, GRPCUnavailableError } from 'etcd3';

import { hostBreaker, isConnectionFailure } from '../../src/datastore/etcd/client.js';

const timedOut = (): Error => new GRPCUnavailableError('14 UNAVAILABLE: etcdserver: request timed out, possibly due to previous leader failure');
const leaderChanged = (): Error => new GRPCUnavailableError('14 UNAVAILABLE: etcdserver: leader changed');
const noConnection = (): Error => new GRPCUnavailableError('14 UNAVAILABLE: No connection established');
const dropped = (): Error => new GRPCUnavailableError('14 UNAVAILABLE: Connection dropped');

describe('etcd member breaker', () => {
  it('counts only failures of the connection itself', () => {
    assert.equal(isConnectionFailure(noConnection()), true);
    assert.equal(isConnectionFailure(dropped()), true);
    assert.equal(isConnectionFailure(timedOut()), false, 'etcd answered: the member is up');
    assert.equal(isConnectionFailure(leaderChanged()), false);
    assert.equal(isConnectionFailure(new EtcdLeaseInvalidError('lease')), false, 'not a recoverable failure');
    assert.equal(isConnectionFailure(new Error('boom')), false);
  });

  it('keeps calling a member that answers "request timed out"', async () => {
    const breaker = hostBreaker();
    let calls = 0;
    for (let i = 0; i < 3; i++) {
      await assert.rejects(
        breaker.execute(() => {
          calls++;
          throw timedOut();
        }),
        /request timed out/,
      );
    }
    assert.equal(await breaker.execute(() => ++calls), 4, 'the fourth call went to etcd');
  });

  it('skips a member whose connection failed, without calling it', async () => {
    const breaker = hostBreaker();
    await assert.rejects(
      breaker.execute(() => {
        throw noConnection();
      }),
      /No connection established/,
    );
    let called = false;
    await assert.rejects(
      breaker.execute(() => {
        called = true;
      }),
      (error: unknown) => error instanceof BrokenCircuitError,
    );
    assert.equal(called, false);
  });
});
