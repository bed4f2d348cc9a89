import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import {
  deploymentStatus,
  planReplicaSet,
  randomSuffix,
  rankForScaleDown,
  resolveRollingParams,
  rollingUpdateStep,
  type RsCounts,
  selectorMatches,
  type StatefulPod,
  statefulOrdinal,
  statefulSetStatus,
  statefulSetStep,
  templateHash,
} from '../../src/controllers/workload-logic.js';

/** The workload controllers' decisions, without any API: diffs, ranking, rollout maths, hashes. */

let clock = Date.parse('2026-01-01T00:00:00Z');

function pod(
  name: string,
  options: { node?: string; phase?: string; ready?: boolean; terminating?: boolean; createdAt?: number; labels?: Record<string, string> } = {},
): KubeObject {
  return {
    metadata: {
      name,
      namespace: 'default',
      creationTimestamp: new Date(options.createdAt ?? (clock += 1000)).toISOString(),
      labels: options.labels ?? { app: 'web' },
      ...(options.terminating ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: { ...(options.node ? { nodeName: options.node } : {}) },
    status: {
      phase: options.phase ?? (options.node ? 'Running' : 'Pending'),
      conditions: [{ type: 'Ready', status: options.ready ? 'True' : 'False' }],
    },
  };
}

function rs(replicas: number, generation = 3): KubeObject {
  return {
    metadata: { name: 'web-abc', namespace: 'default', generation },
    spec: { replicas, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web', tier: 'fe' } } } },
  };
}

describe('label selectors', () => {
  it('matchLabels and every matchExpressions operator', () => {
    const labels = { app: 'web', tier: 'fe' };
    assert.equal(selectorMatches({ matchLabels: { app: 'web' } }, labels), true);
    assert.equal(selectorMatches({ matchLabels: { app: 'db' } }, labels), false);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'tier', operator: 'In', values: ['fe', 'be'] }] }, labels), true);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['fe'] }] }, labels), false);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['x'] }] }, labels), true);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'app', operator: 'Exists' }] }, labels), true);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] }, labels), false);
  });

  it('an empty or missing selector selects nothing', () => {
    assert.equal(selectorMatches({}, { app: 'web' }), false);
    assert.equal(selectorMatches(undefined, { app: 'web' }), false);
  });
});

describe('ReplicaSet plan', () => {
  it('creates the missing replicas; terminating and finished pods do not count', () => {
    const pods = [
      pod('a', { node: 'n1', ready: true }),
      pod('b', { node: 'n1', ready: true, terminating: true }),
      pod('c', { node: 'n2', phase: 'Failed' }),
    ];
    const plan = planReplicaSet(rs(3), pods, clock);
    assert.equal(plan.create, 2);
    assert.deepEqual(plan.scaleDown, []);
    assert.deepEqual(plan.finished.map((p) => p.metadata.name), ['c']);
    assert.deepEqual(plan.status, { replicas: 1, fullyLabeledReplicas: 0, readyReplicas: 1, availableReplicas: 1, observedGeneration: 3 });
  });

  it('scales down the least valuable first: unscheduled, pending, not ready, ready; newer first', () => {
    const pods = [
      pod('ready-old', { node: 'n1', ready: true, createdAt: 1000 }),
      pod('ready-new', { node: 'n1', ready: true, createdAt: 2000 }),
      pod('notready', { node: 'n1', ready: false }),
      pod('pending', { node: 'n1', phase: 'Pending' }),
      pod('unscheduled'),
    ];
    assert.deepEqual(
      rankForScaleDown(pods).map((p) => p.metadata.name),
      ['unscheduled', 'pending', 'notready', 'ready-new', 'ready-old'],
    );
    const plan = planReplicaSet(rs(2), pods, clock);
    assert.equal(plan.create, 0);
    assert.deepEqual(plan.scaleDown.map((p) => p.metadata.name), ['unscheduled', 'pending', 'notready']);
  });

  it('counts fully labelled replicas against the template labels', () => {
    const pods = [pod('a', { labels: { app: 'web', tier: 'fe' } }), pod('b', { labels: { app: 'web' } })];
    assert.equal(planReplicaSet(rs(2), pods, clock).status.fullyLabeledReplicas, 1);
  });

  it('random suffixes are 5 characters of [a-z0-9]', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const s = randomSuffix();
      assert.match(s, /^[a-z0-9]{5}$/);
      seen.add(s);
    }
    assert.ok(seen.size > 190, 'suffixes should rarely repeat');
  });
});

describe('template hash', () => {
  const template = { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'c', command: ['sleep', '3600'] }] } };

  it('is stable across key order and ignores its own hash labels', () => {
    const reordered = { spec: { containers: [{ command: ['sleep', '3600'], name: 'c' }] }, metadata: { labels: { app: 'web' } } };
    const labelled = { metadata: { labels: { app: 'web', 'pod-template-hash': 'xyz' } }, spec: template.spec };
    assert.equal(templateHash(template), templateHash(reordered));
    assert.equal(templateHash(template), templateHash(labelled));
    assert.match(templateHash(template), /^[bcdfghjklmnpqrstvwxz2456789]{1,10}$/);
  });

  it('is the same for the template kubectl rollout undo sends back (creationTimestamp: null, resources: {})', () => {
    const undone = {
      metadata: { creationTimestamp: null, labels: { app: 'web' } },
      spec: { containers: [{ name: 'c', command: ['sleep', '3600'], resources: {} }] },
    };
    assert.equal(templateHash(template), templateHash(undone));
  });

  it('changes with the template', () => {
    const changed = { ...template, spec: { containers: [{ name: 'c', command: ['sleep', '7200'] }] } };
    assert.notEqual(templateHash(template), templateHash(changed));
    assert.notEqual(templateHash(template), templateHash(template, 1));
  });

  it('is a known value (a change would rename every ReplicaSet after an upgrade)', () => {
    assert.equal(templateHash(template), templateHash(structuredClone(template)));
    assert.equal(templateHash({}), '5859f96865');
  });
});

describe('rolling update maths', () => {
  it('resolves ints and percentages: surge rounds up, unavailable down, never both zero', () => {
    assert.deepEqual(resolveRollingParams(10, undefined, undefined), { surge: 3, unavailable: 2 });
    assert.deepEqual(resolveRollingParams(3, '25%', '25%'), { surge: 1, unavailable: 0 });
    assert.deepEqual(resolveRollingParams(3, 0, 0), { surge: 0, unavailable: 1 });
    assert.deepEqual(resolveRollingParams(5, 2, '50%'), { surge: 2, unavailable: 2 });
    assert.deepEqual(resolveRollingParams(4, '0%', '0%'), { surge: 0, unavailable: 1 });
  });

  const counts = (name: string, replicas: number, available = replicas): RsCounts => ({ name, replicas, available });

  it('surges the new ReplicaSet first, within maxSurge', () => {
    const steps = rollingUpdateStep(3, { surge: 1, unavailable: 0 }, counts('new', 0), [counts('old', 3)]);
    assert.deepEqual(steps, [{ kind: 'scale', name: 'new', replicas: 1 }]);
  });

  it('scales old down only as far as availability allows', () => {
    // New has 1 replica not yet available: nothing old may go (min available 3, total 4, 1 unavailable).
    assert.deepEqual(rollingUpdateStep(3, { surge: 1, unavailable: 0 }, counts('new', 1, 0), [counts('old', 3)]), [{ kind: 'none' }]);
    // New pod available: one old may go.
    assert.deepEqual(rollingUpdateStep(3, { surge: 1, unavailable: 0 }, counts('new', 1, 1), [counts('old', 3)]), [
      { kind: 'scale', name: 'old', replicas: 2 },
    ]);
  });

  it('with maxUnavailable only, removes old first and then grows the new', () => {
    assert.deepEqual(rollingUpdateStep(4, { surge: 0, unavailable: 1 }, counts('new', 0), [counts('old', 4)]), [
      { kind: 'scale', name: 'old', replicas: 3 },
    ]);
    assert.deepEqual(rollingUpdateStep(4, { surge: 0, unavailable: 1 }, counts('new', 0), [counts('old', 3)]), [
      { kind: 'scale', name: 'new', replicas: 1 },
    ]);
  });

  it('removes unhealthy old replicas before available ones, oldest ReplicaSet first', () => {
    const steps = rollingUpdateStep(4, { surge: 1, unavailable: 1 }, counts('new', 1, 1), [counts('oldest', 2, 0), counts('older', 3, 3)]);
    // total 6, min available 3, budget 6-3-0=3: the 2 unhealthy of "oldest" go; then available 4 - 3 = 1 more from "older".
    assert.deepEqual(steps, [
      { kind: 'scale', name: 'oldest', replicas: 0 },
      { kind: 'scale', name: 'older', replicas: 2 },
    ]);
  });

  it('scaling without a template change: the new ReplicaSet follows replicas', () => {
    assert.deepEqual(rollingUpdateStep(5, { surge: 2, unavailable: 1 }, counts('new', 3), []), [{ kind: 'scale', name: 'new', replicas: 5 }]);
    assert.deepEqual(rollingUpdateStep(1, { surge: 1, unavailable: 0 }, counts('new', 5), []), [{ kind: 'scale', name: 'new', replicas: 1 }]);
    assert.deepEqual(rollingUpdateStep(3, { surge: 1, unavailable: 0 }, counts('new', 3), [counts('old', 0)]), [{ kind: 'none' }]);
  });

  it('a whole rollout converges with at most replicas+surge and at least replicas-unavailable available', () => {
    const params = { surge: 1, unavailable: 1 };
    let next = counts('new', 0, 0);
    let old = counts('old', 4, 4);
    for (let round = 0; round < 20; round++) {
      const steps = rollingUpdateStep(4, params, next, [old]);
      if (steps[0]!.kind === 'none' && old.replicas === 0) break;
      for (const step of steps) {
        if (step.kind !== 'scale') continue;
        if (step.name === 'new') next = counts('new', step.replicas, next.available);
        else old = counts('old', step.replicas, Math.min(old.available, step.replicas));
      }
      assert.ok(next.replicas + old.replicas <= 5, `round ${round}: too many replicas`);
      assert.ok(next.available + old.available >= 3, `round ${round}: too few available`);
      // The pods of the new ReplicaSet become available between rounds.
      next = counts('new', next.replicas, next.replicas);
    }
    assert.deepEqual([next.replicas, old.replicas], [4, 0]);
  });
});

describe('deployment status', () => {
  it('reports a finished rollout as NewReplicaSetAvailable and keeps unchanged condition times', () => {
    const input = {
      replicas: 3,
      generation: 2,
      unavailable: 0,
      newRs: { name: 'web-new', statusReplicas: 3 },
      all: [{ specReplicas: 3, statusReplicas: 3, ready: 3, available: 3 }, { specReplicas: 0, statusReplicas: 0, ready: 0, available: 0 }],
    };
    const first = deploymentStatus(input, [], '2026-01-01T00:00:00Z');
    assert.equal(first.observedGeneration, 2);
    assert.deepEqual([first.replicas, first.updatedReplicas, first.readyReplicas, first.availableReplicas, first.unavailableReplicas], [3, 3, 3, 3, 0]);
    assert.deepEqual(first.conditions.map((c) => [c.type, c.status, c.reason]), [
      ['Available', 'True', 'MinimumReplicasAvailable'],
      ['Progressing', 'True', 'NewReplicaSetAvailable'],
    ]);
    const again = deploymentStatus(input, first.conditions, '2026-01-01T00:05:00Z');
    assert.deepEqual(again.conditions, first.conditions);
  });

  it('reports a rollout in progress as ReplicaSetUpdated and missing availability', () => {
    const status = deploymentStatus(
      {
        replicas: 3,
        unavailable: 0,
        newRs: { name: 'web-new', statusReplicas: 1 },
        all: [{ specReplicas: 1, statusReplicas: 1, ready: 0, available: 0 }, { specReplicas: 2, statusReplicas: 3, ready: 2, available: 2 }],
      },
      [],
      '2026-01-01T00:00:00Z',
    );
    assert.equal(status.replicas, 4);
    assert.equal(status.updatedReplicas, 1);
    assert.equal(status.unavailableReplicas, 1);
    assert.deepEqual(status.conditions.map((c) => c.reason), ['MinimumReplicasUnavailable', 'ReplicaSetUpdated']);
  });
});

describe('StatefulSet next action', () => {
  const sp = (ordinal: number, extra: Partial<StatefulPod> = {}): StatefulPod => ({
    ordinal,
    name: `db-${ordinal}`,
    terminating: false,
    finished: false,
    runningAndReady: true,
    revision: 'db-r2',
    ...extra,
  });
  const base = { name: 'db', replicas: 3, policy: 'OrderedReady' as const, updateRevision: 'db-r2', rollingUpdate: true };

  it('creates ordinals one at a time, each after the previous is Running and Ready', () => {
    assert.deepEqual(statefulSetStep({ ...base, pods: [] }).create, [0]);
    const waiting = statefulSetStep({ ...base, pods: [sp(0, { runningAndReady: false })] });
    assert.deepEqual([waiting.create, waiting.delete], [[], []]);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0)] }).create, [1]);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0), sp(1)] }).create, [2]);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0), sp(1), sp(2)] }), { create: [], delete: [] });
  });

  it('never recreates a name while the old pod is terminating, in either policy', () => {
    for (const policy of ['OrderedReady', 'Parallel'] as const) {
      const step = statefulSetStep({ ...base, policy, pods: [sp(0), sp(1, { terminating: true }), sp(2)] });
      assert.deepEqual(step.create, [], policy);
      assert.deepEqual(step.delete, [], policy);
    }
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0), sp(2)] }).create, [1]);
  });

  it('deletes finished pods so they are recreated', () => {
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0), sp(1, { finished: true }), sp(2)] }).delete, ['db-1']);
  });

  it('scales down from the highest ordinal, one at a time', () => {
    const pods = [sp(0), sp(1), sp(2), sp(3), sp(4)];
    assert.deepEqual(statefulSetStep({ ...base, pods }).delete, ['db-4']);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0), sp(1), sp(2), sp(3), sp(4, { terminating: true })] }).delete, []);
  });

  it('Parallel creates and deletes all at once', () => {
    assert.deepEqual(statefulSetStep({ ...base, policy: 'Parallel', pods: [] }).create, [0, 1, 2]);
    assert.deepEqual(statefulSetStep({ ...base, policy: 'Parallel', replicas: 1, pods: [sp(0), sp(1), sp(2)] }).delete, ['db-2', 'db-1']);
  });

  it('rolls updates from the highest ordinal, only when every other pod is Running and Ready', () => {
    const old = { revision: 'db-r1' };
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0, old), sp(1, old), sp(2, old)] }).delete, ['db-2']);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0, old), sp(1, old), sp(2)] }).delete, ['db-1']);
    assert.deepEqual(statefulSetStep({ ...base, pods: [sp(0, old), sp(1, { runningAndReady: false }), sp(2)] }).delete, []);
    assert.deepEqual(statefulSetStep({ ...base, rollingUpdate: false, pods: [sp(0, old), sp(1, old), sp(2, old)] }).delete, []);
    // A partition keeps the ordinals below it at their revision.
    assert.deepEqual(statefulSetStep({ ...base, partition: 2, pods: [sp(0, old), sp(1, old), sp(2)] }).delete, []);
    assert.deepEqual(statefulSetStep({ ...base, partition: 1, pods: [sp(0, old), sp(1, old), sp(2)] }).delete, ['db-1']);
  });

  it('status: currentRevision moves to the update revision once every pod is updated', () => {
    const mid = statefulSetStatus({ replicas: 3, updateRevision: 'db-r2', pods: [sp(0, { revision: 'db-r1' }), sp(1), sp(2)] }, 4, 'db-r1');
    assert.deepEqual([mid.currentRevision, mid.currentReplicas, mid.updatedReplicas, mid.readyReplicas], ['db-r1', 1, 2, 3]);
    const done = statefulSetStatus({ replicas: 3, updateRevision: 'db-r2', pods: [sp(0), sp(1), sp(2)] }, 4, 'db-r1');
    assert.deepEqual([done.currentRevision, done.currentReplicas, done.updatedReplicas, done.observedGeneration], ['db-r2', 3, 3, 4]);
    const terminating = statefulSetStatus({ replicas: 3, updateRevision: 'db-r2', pods: [sp(0), sp(1, { terminating: true }), sp(2)] }, undefined, 'db-r2');
    assert.deepEqual([terminating.replicas, terminating.readyReplicas, terminating.observedGeneration], [2, 2, 1]);
  });

  it('ordinals are parsed for the set’s own names only', () => {
    assert.equal(statefulOrdinal('db', 'db-12'), 12);
    assert.equal(statefulOrdinal('db', 'db-01'), undefined);
    assert.equal(statefulOrdinal('db', 'dbx-1'), undefined);
    assert.equal(statefulOrdinal('db', 'db-primary-1'), undefined);
  });
});
