/**
 * bench/verdict-attribution.ts: a false verdict in bench/scale.ts is put down to the simulator,
 * to a late answer, or to the server's view, from the simulated node's own renewal record.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attributeVerdict, countCauses, type RenewalRecord } from '../../bench/verdict-attribution.js';

const SUSPECT_MS = 2000;

/** Renewals every `everyMs` from `from`, each answered after `answerMs`, sent on time. */
function steady(from: number, count: number, answerMs: number, everyMs = 1000 + answerMs): RenewalRecord[] {
  return Array.from({ length: count }, (_, k) => {
    const sentAt = from + k * everyMs;
    return { dueAt: sentAt, sentAt, answeredAt: sentAt + answerMs };
  });
}

describe('false verdict attribution', () => {
  it('a node that renewed every second on the wire: the server view', () => {
    const records = steady(0, 10, 20);
    const a = attributeVerdict(9500, records, SUSPECT_MS);
    assert.equal(a.cause, 'server view');
    assert.ok(a.wireGapMs <= 1100, `gap ${a.wireGapMs}`);
  });

  it('a gap made long by the simulator’s timer firing late: simulator late', () => {
    const records = steady(0, 3, 20);
    // The fourth renewal was due at 3040 (answered 2040 + 1 s) and sent 1.5 s late.
    records.push({ dueAt: 3040, sentAt: 4540, answeredAt: 4560 });
    const a = attributeVerdict(4600, records, SUSPECT_MS);
    assert.equal(a.cause, 'simulator late');
    assert.equal(a.wireGapMs, 2500);
    assert.equal(a.simulatorLateMs, 1500);
    assert.equal(a.answerMs, 20);
  });

  it('a gap made long by the previous answer: answer late', () => {
    const records = steady(0, 2, 20);
    // Sent at 1020, answered 1.6 s later; the next one on time a second after that.
    records.push({ dueAt: 1020, sentAt: 1020, answeredAt: 2620 }, { dueAt: 3620, sentAt: 3620 });
    const a = attributeVerdict(3700, records, SUSPECT_MS);
    assert.equal(a.cause, 'answer late');
    assert.equal(a.wireGapMs, 2600);
    assert.equal(a.answerMs, 1600);
    assert.equal(a.simulatorLateMs, 0);
  });

  it('a renewal still unanswered at the verdict: the gap runs to the verdict, the answer is the server’s', () => {
    const records = [...steady(0, 2, 20), { dueAt: 2040, sentAt: 2040 }];
    const a = attributeVerdict(4500, records, SUSPECT_MS);
    assert.equal(a.cause, 'answer late');
    assert.equal(a.wireGapMs, 2460);
    assert.equal(a.simulatorLateMs, undefined);
  });

  it('renewals long before the verdict are not looked at, and counts add up', () => {
    const old: RenewalRecord[] = [{ dueAt: 0, sentAt: 0, answeredAt: 10 }, { dueAt: 1010, sentAt: 9000, answeredAt: 9010 }];
    const recent = steady(20_000, 5, 10);
    const a = attributeVerdict(24_500, [...old, ...recent], SUSPECT_MS);
    assert.equal(a.cause, 'server view');
    assert.deepEqual(countCauses([a, { cause: 'simulator late', wireGapMs: 3000 }]), { 'simulator late': 1, 'answer late': 0, 'server view': 1 });
  });
});
