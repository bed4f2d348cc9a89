import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type BehindTransition,
  DISRUPTION_LIMIT_GRACES,
  type DisruptionMode,
  type DisruptionTransition,
  reduceDisruption,
} from '../../src/controllers/node-state.js';

/**
 * The node lifecycle controller's disruption mode as a pure reducer: one pass at a time, from the
 * count of silent nodes, with explicit times. The controller only acts on what it returns
 * (node-lifecycle-controller.test.ts runs it there).
 */

const GRACE = 4000;
const LIMIT = DISRUPTION_LIMIT_GRACES * GRACE;

function run(passes: { now: number; stale: number; nodes: number }[]): { transitions: DisruptionTransition[]; holds: boolean[]; mode: DisruptionMode } {
  let mode: DisruptionMode = {};
  const transitions: DisruptionTransition[] = [];
  const holds: boolean[] = [];
  for (const pass of passes) {
    const step = reduceDisruption(mode, { now: pass.now, gracePeriodMs: GRACE, staleCount: pass.stale, nodeCount: pass.nodes });
    mode = step.mode;
    transitions.push(step.transition);
    holds.push(step.holdVerdicts);
  }
  return { transitions, holds, mode };
}

describe('reduceDisruption', () => {
  it('stays normal while fewer than three, or not more than half, of the nodes are silent', () => {
    const { transitions, holds, mode } = run([
      { now: 0, stale: 0, nodes: 4 },
      { now: 250, stale: 2, nodes: 4 },
      { now: 500, stale: 2, nodes: 3 },
      { now: 750, stale: 3, nodes: 6 },
    ]);
    assert.deepEqual(transitions, ['normal', 'normal', 'normal', 'normal']);
    assert.deepEqual(holds, [false, false, false, false]);
    assert.equal(mode.since, undefined);
  });

  it('is entered when most nodes (at least three) go silent at once, and held while they stay so', () => {
    const { transitions, holds, mode } = run([
      { now: 0, stale: 0, nodes: 4 },
      { now: 250, stale: 3, nodes: 4 },
      { now: 500, stale: 3, nodes: 4 },
      { now: 250 + LIMIT, stale: 4, nodes: 4 },
    ]);
    assert.deepEqual(transitions, ['normal', 'entered', 'held', 'held']);
    assert.deepEqual(holds, [false, true, true, true]);
    assert.equal(mode.since, 250);
  });

  it('ends when most nodes renew again within the limit: the nodes still silent get a fresh grace', () => {
    const { transitions, holds, mode } = run([
      { now: 250, stale: 3, nodes: 4 },
      { now: 8000, stale: 1, nodes: 4 },
      { now: 8250, stale: 1, nodes: 4 },
    ]);
    assert.deepEqual(transitions, ['entered', 'ended', 'normal']);
    assert.deepEqual(holds, [true, false, false]);
    assert.equal(mode.since, undefined);
  });

  it('stops holding verdicts after the limit, and ends without restarting graces after it', () => {
    const { transitions, holds } = run([
      { now: 0, stale: 3, nodes: 3 },
      { now: LIMIT, stale: 3, nodes: 3 },
      { now: LIMIT + 1, stale: 3, nodes: 3 },
      { now: LIMIT + 250, stale: 3, nodes: 3 },
      { now: LIMIT + 500, stale: 0, nodes: 3 },
      { now: LIMIT + 750, stale: 3, nodes: 3 },
    ]);
    assert.deepEqual(transitions, ['entered', 'held', 'expired', 'expired', 'ended-expired', 'entered']);
    assert.deepEqual(holds, [true, true, false, false, false, true]);
  });

  it('a view behind the renewals by more than half the grace holds verdicts, for the same limit, beside a silent majority or alone', () => {
    let mode: DisruptionMode = {};
    const behind: BehindTransition[] = [];
    const holds: boolean[] = [];
    const passes = [
      { now: 0, behindMs: GRACE / 2 }, // exactly half: trusted
      { now: 500, behindMs: GRACE / 2 + 1 },
      { now: 1000, behindMs: 3000 },
      { now: 500 + LIMIT, behindMs: 3000 }, // at the limit: still held
      { now: 501 + LIMIT, behindMs: 3000 }, // past it: judged (up to the oldest renewal on its way)
      { now: 600 + LIMIT, behindMs: 100 },
      { now: 700 + LIMIT, behindMs: 0 },
    ];
    for (const pass of passes) {
      const step = reduceDisruption(mode, { now: pass.now, gracePeriodMs: GRACE, staleCount: 0, nodeCount: 10, behindMs: pass.behindMs });
      mode = step.mode;
      behind.push(step.behind);
      holds.push(step.holdVerdicts);
      assert.equal(step.transition, 'normal', 'no node is silent: the silence rule stays normal');
    }
    assert.deepEqual(behind, ['normal', 'entered', 'held', 'held', 'expired', 'ended', 'normal']);
    assert.deepEqual(holds, [false, true, true, true, false, false, false]);
    assert.deepEqual(mode, {});

    // Both at once: each keeps its own start; verdicts are held while either holds.
    const both = reduceDisruption({ since: 0 }, { now: 1000, gracePeriodMs: GRACE, staleCount: 3, nodeCount: 4, behindMs: 3000 });
    assert.deepEqual(both.mode, { since: 0, behindSince: 1000 });
    assert.equal(both.transition, 'held');
    assert.equal(both.behind, 'entered');
    assert.equal(both.holdVerdicts, true);
    const silenceExpired = reduceDisruption({ since: 0, behindSince: 1000 }, { now: LIMIT + 1, gracePeriodMs: GRACE, staleCount: 3, nodeCount: 4, behindMs: 3000 });
    assert.equal(silenceExpired.transition, 'expired');
    assert.equal(silenceExpired.holdVerdicts, true, 'the view behind started later: its limit has not run out');
  });
});
