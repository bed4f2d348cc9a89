import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  controllerLeaseTimings,
  type DerivedTimings,
  deriveTimings,
  lifecycleTickMs,
  shutdownTimings,
  timingProblems,
} from '../../src/config/timings.js';
import { FENCING_MARGIN_MS, fencingThresholds } from '../../src/node-protocol/fencing.js';

/**
 * The derived timings table (src/config/timings.ts): each value as the code computed it where it
 * was used before it moved there. A change to any of them changes how fast nodes are declared
 * lost, singletons fenced or servers stopped, so each one is pinned here.
 */

const constants = { fencingMarginMs: 2000 };

describe('deriveTimings', () => {
  const rows: { name: string; renew: number; grace: number; fencing: number | undefined; expected: DerivedTimings }[] = [
    {
      name: 'the defaults (renew 1s, grace 4s, fencing 3s)',
      renew: 1000,
      grace: 4000,
      fencing: 3000,
      expected: {
        nodeLeaseRenewIntervalMs: 1000,
        nodeMonitorGracePeriodMs: 4000,
        fencingTimeoutMs: 3000,
        nodeLeaseDurationSeconds: 4,
        agentRequestTimeoutMs: 4000 / 3,
        peerCutOffMs: 2000,
        controllerSilenceMs: 1500,
        lifecycleTickMs: 250,
        controllerLease: { durationMs: 3000, stepDownMs: 2000, abandonMs: 6000, renewIntervalMs: 500, retryIntervalMs: 250 },
        ...constants,
      },
    },
    {
      name: 'the tightest the rules allow (renew 500ms, grace 1.5s, fencing 1s)',
      renew: 500,
      grace: 1500,
      fencing: 1000,
      expected: {
        nodeLeaseRenewIntervalMs: 500,
        nodeMonitorGracePeriodMs: 1500,
        fencingTimeoutMs: 1000,
        nodeLeaseDurationSeconds: 2,
        agentRequestTimeoutMs: 500,
        peerCutOffMs: 500,
        controllerSilenceMs: 375,
        lifecycleTickMs: 93.75,
        controllerLease: { durationMs: 1125, stepDownMs: 750, abandonMs: 2250, renewIntervalMs: 187.5, retryIntervalMs: 93.75 },
        ...constants,
      },
    },
    {
      name: 'a slow cluster (renew 10s, grace 40s, fencing 30s)',
      renew: 10_000,
      grace: 40_000,
      fencing: 30_000,
      expected: {
        nodeLeaseRenewIntervalMs: 10_000,
        nodeMonitorGracePeriodMs: 40_000,
        fencingTimeoutMs: 30_000,
        nodeLeaseDurationSeconds: 40,
        agentRequestTimeoutMs: 13_333.333333333334,
        peerCutOffMs: 20_000,
        controllerSilenceMs: 19_500,
        lifecycleTickMs: 250,
        controllerLease: { durationMs: 15_000, stepDownMs: 10_000, abandonMs: 30_000, renewIntervalMs: 2500, retryIntervalMs: 1250 },
        ...constants,
      },
    },
    {
      name: 'a server that sends no fencing timeout (grace 4s): three quarters of the grace',
      renew: 1000,
      grace: 4000,
      fencing: undefined,
      expected: {
        nodeLeaseRenewIntervalMs: 1000,
        nodeMonitorGracePeriodMs: 4000,
        fencingTimeoutMs: 3000,
        nodeLeaseDurationSeconds: 4,
        agentRequestTimeoutMs: 4000 / 3,
        peerCutOffMs: 2000,
        controllerSilenceMs: 1500,
        lifecycleTickMs: 250,
        controllerLease: { durationMs: 3000, stepDownMs: 2000, abandonMs: 6000, renewIntervalMs: 500, retryIntervalMs: 250 },
        ...constants,
      },
    },
    {
      name: 'the fencing fallback rounds down (grace 4.5s: 3375ms)',
      renew: 1000,
      grace: 4500,
      fencing: undefined,
      expected: {
        nodeLeaseRenewIntervalMs: 1000,
        nodeMonitorGracePeriodMs: 4500,
        fencingTimeoutMs: 3375,
        nodeLeaseDurationSeconds: 5,
        agentRequestTimeoutMs: 1500,
        peerCutOffMs: 2375,
        controllerSilenceMs: 1875,
        lifecycleTickMs: 250,
        controllerLease: { durationMs: 3375, stepDownMs: 2250, abandonMs: 6750, renewIntervalMs: 562.5, retryIntervalMs: 281.25 },
        ...constants,
      },
    },
    {
      name: 'hand-made nodes in tests (grace 1h)',
      renew: 1000,
      grace: 3_600_000,
      fencing: 3000,
      expected: {
        nodeLeaseRenewIntervalMs: 1000,
        nodeMonitorGracePeriodMs: 3_600_000,
        fencingTimeoutMs: 3000,
        nodeLeaseDurationSeconds: 3600,
        agentRequestTimeoutMs: 1500,
        peerCutOffMs: 2000,
        controllerSilenceMs: 1500,
        lifecycleTickMs: 250,
        controllerLease: { durationMs: 15_000, stepDownMs: 10_000, abandonMs: 30_000, renewIntervalMs: 2500, retryIntervalMs: 1250 },
        ...constants,
      },
    },
  ];
  for (const row of rows) {
    it(row.name, () => {
      assert.deepEqual(
        deriveTimings({
          nodeLeaseRenewIntervalMs: row.renew,
          nodeMonitorGracePeriodMs: row.grace,
          ...(row.fencing !== undefined ? { fencingTimeoutMs: row.fencing } : {}),
        }),
        row.expected,
      );
    });
  }

  it('every row satisfies the timing rules it was derived under', () => {
    for (const row of rows) {
      const fencing = deriveTimings({ nodeLeaseRenewIntervalMs: row.renew, nodeMonitorGracePeriodMs: row.grace }).fencingTimeoutMs;
      assert.deepEqual(timingProblems({ renewMs: row.renew, graceMs: row.grace, fencingMs: row.fencing ?? fencing }), [], row.name);
    }
  });

  it('the agent gives up on a request well before its node looks late (half the grace)', () => {
    for (const row of rows) {
      const derived = deriveTimings({ nodeLeaseRenewIntervalMs: row.renew, nodeMonitorGracePeriodMs: row.grace });
      assert.ok(derived.agentRequestTimeoutMs < row.grace / 2, row.name);
    }
  });

  it('the controller counts a node silent no later than a supervisor counts it cut off', () => {
    for (const [renew, fencing] of [
      [1000, 3000],
      [1000, 2000],
      [500, 1000],
      [200, 10_000],
    ] as const) {
      const { peerCutOffMs, controllerSilenceMs } = fencingThresholds(renew, fencing);
      assert.ok(controllerSilenceMs < peerCutOffMs, `${renew}/${fencing}`);
      assert.ok(peerCutOffMs >= renew, 'a peer one renewal late is never cut off');
    }
  });

  it('the node lifecycle tick is a sixteenth of the grace, between 50 and 250 ms', () => {
    assert.equal(lifecycleTickMs(400), 50);
    assert.equal(lifecycleTickMs(800), 50);
    assert.equal(lifecycleTickMs(1600), 100);
    assert.equal(lifecycleTickMs(4000), 250);
    assert.equal(lifecycleTickMs(60_000), 250);
  });

  it('the controller lease: a leader steps down before any other server can take over, and a new one is in place within the grace', () => {
    for (const row of rows) {
      const lease = deriveTimings({ nodeLeaseRenewIntervalMs: row.renew, nodeMonitorGracePeriodMs: row.grace }).controllerLease;
      // The leader counts from sending its renewal, a candidate from seeing it: the gap between
      // step-down and takeover is all margin (a third of the duration, at least 333 ms).
      assert.ok(lease.durationMs - lease.stepDownMs >= lease.durationMs / 4, row.name);
      assert.ok(lease.stepDownMs >= 4 * lease.renewIntervalMs, `${row.name}: four renewals may fail before the leader steps down`);
      assert.ok(lease.retryIntervalMs <= lease.renewIntervalMs / 2, row.name);
      assert.ok(lease.durationMs >= 1000 && lease.durationMs <= 15_000, row.name);
      // Where the cap does not bind: a node lost with the leader would not yet be lost when the new leader starts.
      if (row.grace <= 20_000) assert.ok(lease.durationMs + lease.retryIntervalMs < row.grace, row.name);
    }
    // Every server computes the same values from the cluster-wide grace, nothing else.
    assert.deepEqual(controllerLeaseTimings(4000), deriveTimings({ nodeLeaseRenewIntervalMs: 200, nodeMonitorGracePeriodMs: 4000 }).controllerLease);
    assert.equal(controllerLeaseTimings(100).durationMs, 1000, 'at least 1 s');
  });

  it('the fencing margin is the one node-protocol defines', () => {
    assert.equal(deriveTimings({ nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000 }).fencingMarginMs, FENCING_MARGIN_MS);
  });
});

describe('shutdownTimings', () => {
  it('the default grace (10s)', () => {
    assert.deepEqual(shutdownTimings(10_000), {
      shutdownGracePeriodMs: 10_000,
      drainMs: 8500,
      serverExitDeadlineMs: 15_000,
      agentExitDeadlineMs: 10_000,
      embeddedAgentStopMs: 10_000,
      requestDrainMs: 4000,
      courtesyMs: 2000,
    });
  });

  it('a short grace still drains for a second', () => {
    assert.equal(shutdownTimings(2000).drainMs, 1000);
    assert.equal(shutdownTimings(0).drainMs, 1000);
    assert.equal(shutdownTimings(2500).drainMs, 1000);
    assert.equal(shutdownTimings(2600).drainMs, 1100);
  });

  it('the server watchdog leaves 5 s after the grace, the agent none', () => {
    assert.equal(shutdownTimings(0).serverExitDeadlineMs, 5000);
    assert.equal(shutdownTimings(60_000).serverExitDeadlineMs, 65_000);
    assert.equal(shutdownTimings(60_000).agentExitDeadlineMs, 60_000);
  });
});
