import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { classifyNode, isDisruption, isStale, type NodeObservation } from '../../src/controllers/node-state.js';
import { NODE_STATES, type NodeState } from '../../src/node-protocol/names.js';
import type { AgentHealth, ShutdownRecord } from '../../src/node-protocol/records.js';

/**
 * The pure node classification (src/controllers/node-state.ts), driven by a synthetic clock. No
 * server: every case is an observation, a "now", a grace period and a disruption flag.
 *
 * The grace is 4 s (Drover's default), so grace/2 = 2000 ms is the suspect threshold and 4000 ms
 * the lost threshold. Each boundary is tested exactly at the threshold and 1 ms past it.
 */

const GRACE = 4000;
const HALF = GRACE / 2;
/** The controller's clock at the moment of judgement; renewals are placed `late` ms before it. */
const NOW = 1_700_000_000_000;

const SHUTDOWN: ShutdownRecord = { reason: 'SIGTERM', time: '2025-01-01T00:00:00.000Z', cordoned: true };
const DISK: AgentHealth = { ready: false, reason: 'DiskPressure', message: 'less than 1% free space on /var/lib/drover/agent' };
const HEALTHY: AgentHealth = { ready: true, reason: 'AgentReady', message: 'Drover agent is healthy.' };

function observe(late: number, extra: Partial<NodeObservation> = {}): NodeObservation {
  return { lastRenewalObservedAt: NOW - late, leaseReleased: false, ...extra };
}

interface Case {
  name: string;
  late: number;
  extra?: Partial<NodeObservation>;
  disruption?: boolean;
  state: NodeState;
  reason: string;
  /** A fragment the message must contain. */
  message?: string | RegExp;
}

const cases: Case[] = [
  // Plain heartbeats: Ready → Unknown (suspect) → Unavailable.
  { name: 'just renewed', late: 0, state: 'Ready', reason: 'NodeReady' },
  { name: 'renewed 1 ms ago', late: 1, state: 'Ready', reason: 'NodeReady' },
  { name: 'exactly grace/2 late', late: HALF, state: 'Ready', reason: 'NodeReady' },
  { name: '1 ms over grace/2', late: HALF + 1, state: 'Unknown', reason: 'NodeStatusUnknown', message: 'late by 2.0s (grace 4.0s)' },
  { name: 'between grace/2 and grace', late: 3000, state: 'Unknown', reason: 'NodeStatusUnknown', message: 'late by 3.0s' },
  { name: 'exactly grace late', late: GRACE, state: 'Unknown', reason: 'NodeStatusUnknown', message: 'late by 4.0s' },
  { name: '1 ms over grace', late: GRACE + 1, state: 'Unavailable', reason: 'NodeUnavailable', message: 'No lease renewal for 4.0s and no shutdown notice' },
  { name: 'an hour late', late: 3_600_000, state: 'Unavailable', reason: 'NodeUnavailable', message: 'No lease renewal for 3600.0s' },
  { name: 'healthy report, fresh lease', late: 500, extra: { health: HEALTHY }, state: 'Ready', reason: 'NodeReady' },

  // The agent's own health report, carried in the lease annotation.
  {
    name: 'health ready=false, fresh lease',
    late: 0,
    extra: { health: DISK },
    state: 'NotReady',
    reason: 'DiskPressure',
    message: DISK.message,
  },
  { name: 'health ready=false, exactly grace/2', late: HALF, extra: { health: DISK }, state: 'NotReady', reason: 'DiskPressure' },
  // Silence outranks a stale health report: the report is only as good as the heartbeat carrying it.
  { name: 'health ready=false, 1 ms over grace/2', late: HALF + 1, extra: { health: DISK }, state: 'Unknown', reason: 'NodeStatusUnknown' },
  { name: 'health ready=false, 1 ms over grace', late: GRACE + 1, extra: { health: DISK }, state: 'Unavailable', reason: 'NodeUnavailable' },

  // Planned shutdowns: the durable record turns a stop into Down, never Unavailable.
  {
    name: 'shutdown record, lease released',
    late: 0,
    extra: { shutdown: SHUTDOWN, leaseReleased: true },
    state: 'Down',
    reason: 'NodeShutdown',
    message: 'shut down as planned (SIGTERM at 2025-01-01T00:00:00.000Z)',
  },
  {
    name: 'shutdown record, fresh lease not yet released',
    late: 0,
    extra: { shutdown: SHUTDOWN },
    state: 'NotReady',
    reason: 'NodeShutdown',
    message: 'Node is shutting down (SIGTERM).',
  },
  { name: 'shutdown record, exactly grace/2, not released', late: HALF, extra: { shutdown: SHUTDOWN }, state: 'NotReady', reason: 'NodeShutdown' },
  { name: 'shutdown record, 1 ms over grace/2, not released', late: HALF + 1, extra: { shutdown: SHUTDOWN }, state: 'Down', reason: 'NodeShutdown' },
  { name: 'shutdown record, 1 ms over grace, not released', late: GRACE + 1, extra: { shutdown: SHUTDOWN }, state: 'Down', reason: 'NodeShutdown' },
  { name: 'shutdown record, an hour late', late: 3_600_000, extra: { shutdown: SHUTDOWN }, state: 'Down', reason: 'NodeShutdown' },
  {
    name: 'shutdown record with a planned duration',
    late: 0,
    extra: { shutdown: { ...SHUTDOWN, plannedDurationSeconds: 120 }, leaseReleased: true },
    state: 'Down',
    reason: 'NodeShutdown',
    message: 'expected back within 120s',
  },
  // The shutdown notice outranks the health report while the lease is still fresh.
  { name: 'shutdown record and ready=false health', late: 0, extra: { shutdown: SHUTDOWN, health: DISK }, state: 'NotReady', reason: 'NodeShutdown' },
  // A released lease without a shutdown record is not a planned stop: lateness decides.
  { name: 'lease released without a record, fresh', late: 0, extra: { leaseReleased: true }, state: 'Ready', reason: 'NodeReady' },
  { name: 'lease released without a record, 1 ms over grace', late: GRACE + 1, extra: { leaseReleased: true }, state: 'Unavailable', reason: 'NodeUnavailable' },

  // The disruption rule: when most nodes fall silent together, nobody is declared Unavailable.
  { name: 'disruption, 1 ms over grace', late: GRACE + 1, disruption: true, state: 'Unknown', reason: 'ControlPlaneDisruption', message: 'suspecting the control plane' },
  { name: 'disruption, an hour late', late: 3_600_000, disruption: true, state: 'Unknown', reason: 'ControlPlaneDisruption' },
  { name: 'disruption, exactly grace (ordinary suspect)', late: GRACE, disruption: true, state: 'Unknown', reason: 'NodeStatusUnknown' },
  { name: 'disruption, 1 ms over grace/2 (ordinary suspect)', late: HALF + 1, disruption: true, state: 'Unknown', reason: 'NodeStatusUnknown' },
  { name: 'disruption, fresh lease', late: 0, disruption: true, state: 'Ready', reason: 'NodeReady' },
  { name: 'disruption, ready=false health, fresh lease', late: 0, extra: { health: DISK }, disruption: true, state: 'NotReady', reason: 'DiskPressure' },
  // A hold does not take back a verdict made before it: a node already called Unavailable stays so while silent.
  { name: 'disruption, already judged Unavailable, an hour late', late: 3_600_000, extra: { judgedUnavailable: true }, disruption: true, state: 'Unavailable', reason: 'NodeUnavailable' },
  { name: 'disruption, already judged Unavailable, renewing again', late: 0, extra: { judgedUnavailable: true }, disruption: true, state: 'Ready', reason: 'NodeReady' },
  // A planned stop is still Down during a disruption: the record is positive evidence.
  { name: 'disruption, shutdown record, late', late: GRACE + 1, extra: { shutdown: SHUTDOWN }, disruption: true, state: 'Down', reason: 'NodeShutdown' },
];

describe('classifyNode', () => {
  for (const c of cases) {
    it(`${c.name}: ${c.state} (${c.reason})`, () => {
      const verdict = classifyNode(observe(c.late, c.extra), { now: NOW, gracePeriodMs: GRACE, disruption: c.disruption ?? false });
      assert.ok(verdict, 'a node heard from always gets a verdict');
      assert.equal(verdict.state, c.state);
      assert.equal(verdict.reason, c.reason);
      assert.ok(verdict.message.length > 0, 'every verdict explains itself');
      if (typeof c.message === 'string') assert.ok(verdict.message.includes(c.message), `message "${verdict.message}" lacks "${c.message}"`);
      else if (c.message) assert.match(verdict.message, c.message);
    });
  }

  it('the cases cover every state', () => {
    assert.deepEqual(new Set(cases.map((c) => c.state)), new Set(NODE_STATES));
  });

  it('times by the observation the caller passes, not by a clock of its own', () => {
    // The same lateness gives the same verdict at any absolute time (far past, far future).
    for (const now of [0, 1, NOW, 4_102_444_800_000]) {
      const at = (late: number) => classifyNode({ lastRenewalObservedAt: now - late, leaseReleased: false }, { now, gracePeriodMs: GRACE, disruption: false })?.state;
      assert.deepEqual([at(HALF), at(HALF + 1), at(GRACE), at(GRACE + 1)], ['Ready', 'Unknown', 'Unknown', 'Unavailable'], `now=${now}`);
    }
  });

  it('scales the thresholds with the grace period (Kubernetes-like 50 s)', () => {
    const grace = 50_000;
    const at = (late: number) => classifyNode(observe(late), { now: NOW, gracePeriodMs: grace, disruption: false })?.state;
    assert.deepEqual(
      [at(25_000), at(25_001), at(50_000), at(50_001)],
      ['Ready', 'Unknown', 'Unknown', 'Unavailable'],
    );
    // With the 4 s default, 5 s of silence is already a loss.
    assert.equal(classifyNode(observe(5000), { now: NOW, gracePeriodMs: GRACE, disruption: false })?.state, 'Unavailable');
    assert.equal(at(5000), 'Ready');
  });

  it('a silent node walks Ready → Unknown → Unavailable and changes state exactly twice', () => {
    const states: (NodeState | undefined)[] = [];
    for (let late = 0; late <= 3 * GRACE; late += 1) {
      const state = classifyNode(observe(late), { now: NOW, gracePeriodMs: GRACE, disruption: false })?.state;
      if (states[states.length - 1] !== state) states.push(state);
      if (late === HALF) assert.equal(state, 'Ready');
      if (late === HALF + 1) assert.equal(state, 'Unknown');
      if (late === GRACE) assert.equal(state, 'Unknown');
      if (late === GRACE + 1) assert.equal(state, 'Unavailable');
    }
    assert.deepEqual(states, ['Ready', 'Unknown', 'Unavailable']);
  });

  it('a node that announced its shutdown walks NotReady → Down and is never Unknown or Unavailable', () => {
    const states: (NodeState | undefined)[] = [];
    for (let late = 0; late <= 3 * GRACE; late += 1) {
      for (const disruption of [false, true]) {
        const state = classifyNode(observe(late, { shutdown: SHUTDOWN }), { now: NOW, gracePeriodMs: GRACE, disruption })?.state;
        if (states[states.length - 1] !== state) states.push(state);
      }
    }
    assert.deepEqual(states, ['NotReady', 'Down']);
  });
});

describe('classifyNode: a node this controller has never heard from (heardFrom: false)', () => {
  // After a controller (re)start or a new Node object, no verdict is written until either a
  // renewal arrives or the grace runs out: no false Ready for a Node nobody runs, no Unknown flicker.
  const silent = (late: number, extra: Partial<NodeObservation> = {}, disruption = false) =>
    classifyNode(observe(late, { heardFrom: false, ...extra }), { now: NOW, gracePeriodMs: GRACE, disruption });

  const table: { name: string; late: number; extra?: Partial<NodeObservation>; disruption?: boolean; state: NodeState | undefined; reason?: string }[] = [
    { name: 'just appeared', late: 0, state: undefined },
    { name: '1 ms over grace/2 (no Unknown flicker)', late: HALF + 1, state: undefined },
    { name: 'exactly grace', late: GRACE, state: undefined },
    { name: '1 ms over grace', late: GRACE + 1, state: 'Unavailable', reason: 'NodeUnavailable' },
    { name: 'unhealthy report but never renewed, exactly grace', late: GRACE, extra: { health: DISK }, state: undefined },
    { name: 'disruption, exactly grace', late: GRACE, disruption: true, state: undefined },
    { name: 'disruption, 1 ms over grace', late: GRACE + 1, disruption: true, state: 'Unknown', reason: 'ControlPlaneDisruption' },
  ];
  for (const row of table) {
    it(`${row.name}: ${row.state ?? 'no verdict'}`, () => {
      const verdict = silent(row.late, row.extra, row.disruption);
      assert.equal(verdict?.state, row.state);
      if (row.reason) assert.equal(verdict?.reason, row.reason);
    });
  }

  it('heardFrom: true and an omitted heardFrom judge alike', () => {
    for (const late of [0, HALF, HALF + 1, GRACE, GRACE + 1]) {
      const context = { now: NOW, gracePeriodMs: GRACE, disruption: false };
      assert.deepEqual(classifyNode(observe(late, { heardFrom: true }), context), classifyNode(observe(late), context), `late=${late}`);
    }
  });

  it('says why it is Unavailable: no heartbeat since the node appeared', () => {
    assert.match(silent(GRACE + 1)?.message ?? '', /No heartbeat received for 4\.0s since the node appeared/);
  });

  // A Node left Down by a planned shutdown, judged by a controller that just started (server
  // restart or new leader): its lease is released, so no renewal ever arrives. The shutdown record
  // is positive evidence of a planned stop and must still give Down, never Unavailable.
  it('a shutdown record with a released lease is Down even if never heard from', () => {
    const extra = { shutdown: SHUTDOWN, leaseReleased: true };
    assert.equal(silent(0, extra)?.state, 'Down');
    assert.equal(silent(GRACE + 1, extra)?.state, 'Down');
    assert.equal(silent(3_600_000, extra)?.state, 'Down');
  });
});

describe('isStale', () => {
  const table: { name: string; late: number; extra?: Partial<NodeObservation>; stale: boolean }[] = [
    { name: 'fresh', late: 0, stale: false },
    { name: 'exactly grace/2', late: HALF, stale: false },
    { name: '1 ms over grace/2', late: HALF + 1, stale: true },
    { name: 'exactly grace', late: GRACE, stale: true },
    { name: '1 ms over grace', late: GRACE + 1, stale: true },
    { name: 'unhealthy but fresh', late: 0, extra: { health: DISK }, stale: false },
    { name: 'unhealthy and silent', late: GRACE + 1, extra: { health: DISK }, stale: true },
    // A planned Down is not silence: it must not push the cluster into disruption mode.
    { name: 'shutdown record, 1 ms over grace/2', late: HALF + 1, extra: { shutdown: SHUTDOWN }, stale: false },
    { name: 'shutdown record, an hour late', late: 3_600_000, extra: { shutdown: SHUTDOWN }, stale: false },
    { name: 'shutdown record, lease released', late: GRACE + 1, extra: { shutdown: SHUTDOWN, leaseReleased: true }, stale: false },
    { name: 'lease released without a record', late: GRACE + 1, extra: { leaseReleased: true }, stale: true },
  ];
  for (const row of table) {
    it(`${row.name}: ${row.stale ? 'stale' : 'not stale'}`, () => {
      assert.equal(isStale(observe(row.late, row.extra), NOW, GRACE), row.stale);
    });
  }

  it('agrees with classifyNode: stale exactly when a node without a shutdown record is no longer Ready/NotReady', () => {
    for (const late of [0, HALF - 1, HALF, HALF + 1, GRACE, GRACE + 1, 10 * GRACE]) {
      for (const health of [undefined, DISK, HEALTHY]) {
        const o = observe(late, health ? { health } : {});
        const state = classifyNode(o, { now: NOW, gracePeriodMs: GRACE, disruption: false })?.state;
        assert.equal(isStale(o, NOW, GRACE), state === 'Unknown' || state === 'Unavailable', `late=${late} health=${health?.reason}`);
      }
    }
  });
});

describe('isDisruption', () => {
  const table: [stale: number, nodes: number, disruption: boolean][] = [
    [0, 0, false],
    [1, 1, false], // one node of one: never a disruption, a lone node can be lost
    [2, 2, false], // all of two, but fewer than three
    [2, 3, false],
    [3, 3, true],
    [3, 4, true],
    [3, 5, true],
    [3, 6, false], // exactly half is not more than half
    [4, 7, true],
    [4, 8, false],
    [5, 8, true],
    [50, 100, false],
    [51, 100, true],
  ];
  for (const [stale, nodes, expected] of table) {
    it(`${stale} of ${nodes} stale: ${expected ? 'disruption' : 'no disruption'}`, () => {
      assert.equal(isDisruption(stale, nodes), expected);
    });
  }

  it('one lost node out of five (the detection benchmark) is never a disruption', () => {
    assert.equal(isDisruption(1, 5), false);
    assert.equal(isDisruption(2, 5), false);
  });
});
