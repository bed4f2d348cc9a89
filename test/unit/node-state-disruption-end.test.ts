import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { classifyNode, isStale, type NodeObservation } from '../../src/controllers/node-state.js';
import type { NodeState } from '../../src/node-protocol/names.js';
import type { AgentHealth, ShutdownRecord } from '../../src/node-protocol/records.js';

/**
 * The end of a control-plane disruption, in the pure classification: the controller restarts the
 * grace of the nodes still silent (`lastRenewalObservedAt` = the moment the episode ended) and
 * marks them `awaitingRenewal` until it sees one renew. Such a node is never Ready on the strength
 * of the restart alone, and is lost only a full grace after it. Synthetic clock, 4 s grace.
 */

const GRACE = 4000;
const HALF = GRACE / 2;
const NOW = 1_700_000_000_000;
const SHUTDOWN: ShutdownRecord = { reason: 'SIGTERM', time: '2025-01-01T00:00:00.000Z', cordoned: true };
const HEALTHY: AgentHealth = { ready: true, reason: 'AgentReady', message: 'Drover agent is healthy.' };

/** A node whose grace was restarted `sinceRestart` ms ago and that has not renewed since. */
function restarted(sinceRestart: number, extra: Partial<NodeObservation> = {}): NodeObservation {
  return { lastRenewalObservedAt: NOW - sinceRestart, leaseReleased: false, awaitingRenewal: true, ...extra };
}

const cases: { name: string; since: number; extra?: Partial<NodeObservation>; state: NodeState; reason: string; message?: RegExp }[] = [
  { name: 'at the restart', since: 0, state: 'Unknown', reason: 'NodeStatusUnknown', message: /No lease renewal since the control-plane disruption ended 0\.0s ago \(grace 4\.0s\)/ },
  { name: 'with a healthy report from before the outage', since: 0, extra: { health: HEALTHY }, state: 'Unknown', reason: 'NodeStatusUnknown' },
  { name: 'exactly grace/2 after it', since: HALF, state: 'Unknown', reason: 'NodeStatusUnknown', message: /ended 2\.0s ago/ },
  { name: '1 ms over grace/2', since: HALF + 1, state: 'Unknown', reason: 'NodeStatusUnknown', message: /late by 2\.0s/ },
  { name: 'exactly grace after it', since: GRACE, state: 'Unknown', reason: 'NodeStatusUnknown' },
  { name: '1 ms over grace', since: GRACE + 1, state: 'Unavailable', reason: 'NodeUnavailable' },
  { name: 'a shutdown record, lease fresh', since: 0, extra: { shutdown: SHUTDOWN }, state: 'NotReady', reason: 'NodeShutdown' },
  { name: 'a shutdown record, lease released', since: 0, extra: { shutdown: SHUTDOWN, leaseReleased: true }, state: 'Down', reason: 'NodeShutdown' },
];

describe('classifyNode after a disruption ended (awaitingRenewal)', () => {
  for (const c of cases) {
    it(`${c.name}: ${c.state} (${c.reason})`, () => {
      const verdict = classifyNode(restarted(c.since, c.extra), { now: NOW, gracePeriodMs: GRACE, disruption: false });
      assert.equal(verdict?.state, c.state);
      assert.equal(verdict?.reason, c.reason);
      if (c.message) assert.match(verdict!.message, c.message);
    });
  }

  it('never Ready before a renewal, at any time after the restart', () => {
    for (let since = 0; since <= 2 * GRACE; since += 50) {
      const state = classifyNode(restarted(since), { now: NOW, gracePeriodMs: GRACE, disruption: false })?.state;
      assert.notEqual(state, 'Ready', `${since} ms after the restart`);
      assert.equal(state, since > GRACE ? 'Unavailable' : 'Unknown', `${since} ms after the restart`);
    }
  });

  it('counts as silent for a new disruption only past grace/2, like any node', () => {
    assert.equal(isStale(restarted(HALF), NOW, GRACE), false);
    assert.equal(isStale(restarted(HALF + 1), NOW, GRACE), true);
  });

  it('is judged as before once a renewal has been seen (the flag cleared)', () => {
    const verdict = classifyNode({ lastRenewalObservedAt: NOW - 100, leaseReleased: false }, { now: NOW, gracePeriodMs: GRACE, disruption: false });
    assert.equal(verdict?.state, 'Ready');
  });
});
