import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import {
  decideFailover,
  type FailoverSettings,
  majoritySilentDuring,
  NodeRateLimiter,
  unreachableToleranceMs,
} from '../../src/controllers/failover-logic.js';
import { fencingThresholds } from '../../src/node-protocol/fencing.js';

/** The pure failover rules, driven with explicit times (ms on the controller's clock). */

const SETTINGS: FailoverSettings = { defaultTolerationMs: 0, fencingTimeoutMs: 3000, fencingMarginMs: 2000, silenceThresholdMs: 1500 };

function pod(overrides: { annotations?: Record<string, string>; owner?: string; tolerations?: unknown[]; phase?: string; deleting?: boolean } = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'p',
      namespace: 'default',
      uid: 'u1',
      ...(overrides.annotations ? { annotations: overrides.annotations } : {}),
      ...(overrides.owner ? { ownerReferences: [{ apiVersion: 'apps/v1', kind: overrides.owner, name: 'o', uid: 'o1', controller: true }] } : {}),
      ...(overrides.deleting ? { deletionTimestamp: '2026-11-30T00:00:00Z' } : {}),
    },
    spec: { nodeName: 'n1', containers: [{ name: 'c', command: ['true'] }], ...(overrides.tolerations ? { tolerations: overrides.tolerations } : {}) },
    status: { phase: overrides.phase ?? 'Running' },
  };
}

const facts = (lostSince: number, lastRenewalObservedAt: number, majoritySilentRecently = false) => ({
  lostSince,
  lastRenewalObservedAt,
  majoritySilentRecently,
});

describe('decideFailover', () => {
  it('evicts an ordinary pod as soon as the default toleration (0 s) runs out', () => {
    const decision = decideFailover(pod({ owner: 'ReplicaSet' }), facts(10_000, 6_000), 10_000, SETTINGS);
    assert.equal(decision.action, 'evict');
  });

  it('waits out a pod’s own toleration, and keeps a pod that tolerates forever', () => {
    const sixty = pod({ tolerations: [{ key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 60 }] });
    assert.deepEqual(decideFailover(sixty, facts(10_000, 6_000), 20_000, SETTINGS).action, 'wait');
    assert.equal(decideFailover(sixty, facts(10_000, 6_000), 70_001, SETTINGS).action, 'evict');
    const forever = pod({ tolerations: [{ operator: 'Exists' }] });
    assert.equal(decideFailover(forever, facts(10_000, 6_000), 1e9, SETTINGS).action, 'keep');
  });

  it('leaves finished and already-deleting ordinary pods alone', () => {
    assert.equal(decideFailover(pod({ phase: 'Succeeded' }), facts(0, 0), 1e6, SETTINGS).action, 'keep');
    assert.equal(decideFailover(pod({ deleting: true }), facts(0, 0), 1e6, SETTINGS).action, 'keep');
  });

  it('replaces a singleton only after fencing-timeout + margin of observed silence', () => {
    const singleton = pod({ owner: 'StatefulSet' });
    // Lost at 10 s, last renewal seen at 6 s: safe from 6 + 3 + 2 = 11 s.
    const early = decideFailover(singleton, facts(10_000, 6_000), 10_999, SETTINGS);
    assert.equal(early.action, 'wait');
    assert.equal(early.action === 'wait' && early.untilMs, 11_000);
    assert.equal(decideFailover(singleton, facts(10_000, 6_000), 11_000, SETTINGS).action, 'replace-singleton');
  });

  it('treats the at-most-one annotation like a StatefulSet owner, also for a pod already being deleted', () => {
    const annotated = pod({ annotations: { 'drover.io/at-most-one': 'true' }, deleting: true });
    assert.equal(decideFailover(annotated, facts(10_000, 6_000), 11_000, SETTINGS).action, 'replace-singleton');
  });

  it('never replaces a singleton while most nodes were silent within the window (an outage)', () => {
    const decision = decideFailover(pod({ owner: 'StatefulSet' }), facts(10_000, 6_000, true), 60_000, SETTINGS);
    assert.equal(decision.action, 'wait');
  });
});

describe('majoritySilentDuring', () => {
  const T = 1500;
  it('finds no outage when every node renews every second', () => {
    const every = (offset: number) => ({ observations: Array.from({ length: 20 }, (_, i) => i * 1000 + offset) });
    assert.equal(majoritySilentDuring([every(0), every(300), every(600)], 5000, 15_000, T), false);
  });

  it('finds a majority silent at once, even for an instant between two controller passes', () => {
    // Three nodes; two go quiet after 5.0 s and 5.1 s and come back at 6.7 s and 6.65 s: both
    // silent (> 1.5 s) only during [6.6, 6.65).
    const a = { observations: [3000, 4000, 5000, 6700, 7700] };
    const b = { observations: [3100, 4100, 5100, 6650, 7650] };
    const c = { observations: [3000, 4000, 5000, 6000, 7000, 8000] };
    assert.equal(majoritySilentDuring([a, b, c], 4000, 9000, T), true);
    assert.equal(majoritySilentDuring([a, b, c], 6650, 9000, T), false, 'the window after it is clear');
    assert.equal(majoritySilentDuring([a, b, c], 3000, 6599, T), false, 'just before it: clear');
    assert.equal(majoritySilentDuring([a, b, c], 3000, 6600, T), true, 'the window includes its end');
  });

  it('counts one silent node of three as no outage, and nodes never seen as silent', () => {
    const quiet = { observations: [1000] };
    const fine = { observations: [1000, 2000, 3000, 4000, 5000] };
    assert.equal(majoritySilentDuring([quiet, fine, fine], 1000, 5000, T), false);
    assert.equal(majoritySilentDuring([{ observations: [] }, { observations: [] }, fine], 1000, 5000, T), true);
    assert.equal(majoritySilentDuring([quiet, fine, fine], 0, 5000, T), true, 'before anyone was seen, nothing is known');
  });

  it('does not count a node that announced a planned shutdown', () => {
    const quiet = { observations: [1000] };
    const fine = { observations: [1000, 2000, 3000, 4000, 5000] };
    assert.equal(majoritySilentDuring([quiet, { ...quiet, exempt: true }, fine], 1000, 5000, T), false);
    assert.equal(majoritySilentDuring([quiet, quiet, fine], 1000, 5000, T), true);
  });
});

describe('fencingThresholds', () => {
  it('defaults: a peer is cut off after 2 s without a confirmed renewal; the controller counts 1.5 s', () => {
    assert.deepEqual(fencingThresholds(1000, 3000), { peerCutOffMs: 2000, controllerSilenceMs: 1500 });
  });
  it('never below one renew interval', () => {
    assert.equal(fencingThresholds(1000, 2000).peerCutOffMs, 1000);
  });
});

describe('unreachableToleranceMs and the rate limiter', () => {
  it('reads the longest matching NoExecute toleration', () => {
    assert.equal(unreachableToleranceMs(pod()), undefined);
    assert.equal(
      unreachableToleranceMs(
        pod({
          tolerations: [
            { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 5 },
            { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 9 },
            { key: 'other', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 99 },
          ],
        }),
      ),
      9000,
    );
  });
  it('lets three lost nodes through at once, then one every two seconds', () => {
    const limiter = new NodeRateLimiter(3, 0.5, 0);
    assert.deepEqual([limiter.tryTake(0), limiter.tryTake(0), limiter.tryTake(0), limiter.tryTake(0)], [true, true, true, false]);
    assert.equal(limiter.tryTake(1000), false);
    assert.equal(limiter.tryTake(2000), true);
  });
});
