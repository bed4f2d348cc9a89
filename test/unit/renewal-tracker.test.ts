/**
 * RenewalTracker (src/apiserver/renewal-tracker.ts) on a hand-moved clock: a renewal counts as on
 * its way from its arrival until the controller has seen its commit; one refused or failed goes at
 * its answer; nothing is kept while no controller observes, nor past the ceiling.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RENEWAL_TRACK_CEILING_MS, RenewalTracker, renewedLease } from '../../src/apiserver/renewal-tracker.js';

function tracker(): { renewals: RenewalTracker; at: (ms: number) => void } {
  let now = 1_000;
  const renewals = new RenewalTracker(() => now, { eventLoopDelay: false });
  renewals.observing(true);
  return { renewals, at: (ms) => (now = ms) };
}

describe('renewals on their way to the node lifecycle controller', () => {
  it('from arrival through commit until the controller sees the commit’s revision or a later one', () => {
    const { renewals, at } = tracker();
    const answered = renewals.arrived('n1');
    at(1_300);
    assert.equal(renewals.unobservedForMs(), 300);
    renewals.committed('n1', 41);
    answered();
    at(1_500);
    assert.equal(renewals.unobservedForMs(), 500, 'committed and answered, but not seen yet');
    renewals.observed('n1', 40);
    assert.equal(renewals.unobservedForMs(), 500, 'an older revision does not cover it');
    renewals.observed('n2', 99);
    assert.equal(renewals.unobservedForMs(), 500, 'another lease does not cover it');
    renewals.observed('n1', 41);
    assert.equal(renewals.unobservedForMs(), 0);
    assert.equal(renewals.size, 0);
  });

  it('the oldest renewal on its way is the one that counts; a commit goes to the oldest uncommitted of its lease', () => {
    const { renewals, at } = tracker();
    renewals.arrived('a');
    at(1_200);
    renewals.arrived('b');
    const retry = renewals.arrived('a');
    at(2_000);
    assert.equal(renewals.unobservedForMs(), 1_000);
    renewals.committed('a', 10);
    renewals.observed('a', 10);
    assert.equal(renewals.unobservedForMs(), 800, 'b and the retry of a, both from 1.2 s');
    retry();
    assert.equal(renewals.unobservedForMs(), 800, 'b still');
    renewals.committed('b', 11);
    renewals.observed('b', 12);
    assert.equal(renewals.unobservedForMs(), 0);
  });

  it('a renewal answered without a commit (refused, failed) is dropped at its answer', () => {
    const { renewals, at } = tracker();
    const answered = renewals.arrived('n1');
    at(5_000);
    answered();
    assert.equal(renewals.unobservedForMs(), 0);
  });

  it('nothing is kept while no controller observes, and everything goes when it stops', () => {
    let now = 0;
    const renewals = new RenewalTracker(() => now, { eventLoopDelay: false });
    renewals.arrived('n1');
    renewals.committed('n1', 5);
    assert.equal(renewals.size, 0);
    renewals.observing(true);
    renewals.arrived('n1');
    now = 100;
    assert.equal(renewals.unobservedForMs(), 100);
    renewals.observing(false);
    assert.equal(renewals.size, 0);
    assert.equal(renewals.unobservedForMs(), 0);
  });

  it('a renewal never seen is dropped past the ceiling, so one lost event cannot hold verdicts for good', () => {
    const { renewals, at } = tracker();
    renewals.arrived('n1');
    renewals.committed('n1', 7);
    at(1_000 + RENEWAL_TRACK_CEILING_MS + 1);
    assert.equal(renewals.unobservedForMs(), 0);
    assert.equal(renewals.size, 0);
  });

  it('tells a node lease renewal from other requests', () => {
    assert.equal(renewedLease('PATCH', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1'), 'node-1');
    assert.equal(renewedLease('PUT', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1?fieldManager=x'), 'node-1');
    assert.equal(renewedLease('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1'), undefined);
    assert.equal(renewedLease('PATCH', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/drover-controllers'), undefined);
    assert.equal(renewedLease('PATCH', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases'), undefined);
    assert.equal(renewedLease('PATCH', '/api/v1/nodes/node-1/status'), undefined);
  });
});
