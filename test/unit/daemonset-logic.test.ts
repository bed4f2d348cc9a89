import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { daemonBackoffMs, type DaemonSetInput, daemonTolerations, nodeShouldRunDaemonPod, planDaemonSet, planRevisions, revisionData } from '../../src/controllers/daemonset-logic.js';
import type { PodSpec } from '../../src/controllers/kube-types.js';

/** The DaemonSet controller's decisions without any API: placement, taints, rolling update, status. */

const NOW = Date.parse('2026-01-01T00:10:00Z');
let created = Date.parse('2026-01-01T00:00:00Z');

function node(name: string, options: { labels?: Record<string, string>; taints?: { key: string; effect: string }[] } = {}): KubeObject {
  return { metadata: { name, labels: options.labels ?? {} }, spec: options.taints ? { taints: options.taints } : {} };
}

function pod(name: string, nodeName: string, options: { hash?: string; ready?: boolean; phase?: string; terminating?: boolean } = {}): KubeObject {
  return {
    metadata: {
      name,
      uid: `uid-${name}`,
      creationTimestamp: new Date((created += 1000)).toISOString(),
      labels: { app: 'agent', 'controller-revision-hash': options.hash ?? 'new' },
      ...(options.terminating ? { deletionTimestamp: new Date(NOW).toISOString() } : {}),
    },
    spec: { nodeName },
    status: {
      phase: options.phase ?? 'Running',
      conditions: [{ type: 'Ready', status: options.ready === false ? 'False' : 'True', lastTransitionTime: '2026-01-01T00:00:00Z' }],
    },
  };
}

function input(nodes: KubeObject[], pods: KubeObject[], extra: Partial<DaemonSetInput> = {}): DaemonSetInput {
  return { nodes, pods, template: {}, updateHash: 'new', strategy: 'RollingUpdate', maxUnavailable: 1, minReadySeconds: 0, generation: 3, now: NOW, ...extra };
}

const names = (pods: { pod: KubeObject }[]): string[] => pods.map((d) => d.pod.metadata.name!).sort();

describe('DaemonSet placement', () => {
  it('creates one pod on each node without one and counts the status', () => {
    const plan = planDaemonSet(input([node('a'), node('b'), node('c')], [pod('p-a', 'a')]));
    assert.deepEqual(plan.create.sort(), ['b', 'c']);
    assert.deepEqual(plan.delete, []);
    assert.deepEqual(plan.status, {
      currentNumberScheduled: 1,
      numberMisscheduled: 0,
      desiredNumberScheduled: 3,
      numberReady: 1,
      updatedNumberScheduled: 1,
      numberAvailable: 1,
      numberUnavailable: 2,
      observedGeneration: 3,
    });
  });

  it('honours nodeSelector and required node affinity', () => {
    const template: PodSpec = {
      nodeSelector: { disk: 'ssd' },
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['z1', 'z2'] }] }],
          },
        },
      },
    };
    const nodes = [
      node('fit', { labels: { disk: 'ssd', zone: 'z1' } }),
      node('wrong-zone', { labels: { disk: 'ssd', zone: 'z9' } }),
      node('no-disk', { labels: { zone: 'z2' } }),
    ];
    const plan = planDaemonSet(input(nodes, [pod('stray', 'no-disk')], { template }));
    assert.deepEqual(plan.create, ['fit']);
    // A pod on a node that no longer matches is misscheduled and removed.
    assert.deepEqual(names(plan.delete), ['stray']);
    assert.equal(plan.status.desiredNumberScheduled, 1);
    assert.equal(plan.status.numberMisscheduled, 1);
  });

  it('tolerates the lifecycle taints (unreachable NoExecute keeps the pod) but a NoSchedule one blocks new pods', () => {
    const unreachable = node('lost', {
      taints: [
        { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' },
        { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' },
      ],
    });
    assert.deepEqual(nodeShouldRunDaemonPod({}, unreachable), { shouldRun: false, shouldContinueRunning: true });
    const plan = planDaemonSet(input([unreachable, node('ok')], [pod('p-lost', 'lost'), pod('p-ok', 'ok')]));
    assert.deepEqual(plan.create, []);
    assert.deepEqual(plan.delete, [], 'the pod on an unreachable node stays: no duplicate, no eviction');
    assert.equal(plan.status.desiredNumberScheduled, 1);
    assert.equal(plan.status.numberMisscheduled, 1);
    // An untolerated NoExecute taint removes the pod; a tolerated one does not.
    const tainted = node('dedicated', { taints: [{ key: 'dedicated', effect: 'NoExecute' }] });
    assert.deepEqual(names(planDaemonSet(input([tainted], [pod('p-d', 'dedicated')])).delete), ['p-d']);
    const tolerating: PodSpec = { tolerations: [{ key: 'dedicated', operator: 'Exists' }] };
    assert.deepEqual(nodeShouldRunDaemonPod(tolerating, tainted), { shouldRun: true, shouldContinueRunning: true });
    // Cordoned and pressured nodes still get their daemon.
    const cordoned = node('c', { taints: [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }] });
    assert.equal(nodeShouldRunDaemonPod({}, cordoned).shouldRun, true);
    assert.equal(daemonTolerations({ tolerations: [{ key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute' }] }).length, 6);
  });

  it('removes the pods of a node that is gone, at once, and extra pods on one node', () => {
    const plan = planDaemonSet(input([node('a')], [pod('p-a1', 'a'), pod('p-a2', 'a'), pod('p-gone', 'gone')]));
    assert.deepEqual(
      plan.delete.map((d) => [d.pod.metadata.name, d.force]),
      [
        ['p-gone', true],
        ['p-a2', false],
      ],
    );
    assert.deepEqual(plan.create, []);
  });

  it('backs off before making the pod of a node whose daemon pod failed again', () => {
    const failed = planDaemonSet(input([node('a')], [pod('p-a', 'a', { phase: 'Failed' })]));
    assert.deepEqual(failed.failedOn, ['a']);
    const waiting = planDaemonSet(input([node('a'), node('b')], [], { backoffUntil: new Map([['a', NOW + 4000]]) }));
    assert.deepEqual(waiting.create, ['b'], 'no new pod on a before its back-off ends');
    assert.equal(waiting.requeueAfterMs, 4000);
    assert.deepEqual(planDaemonSet(input([node('a')], [], { backoffUntil: new Map([['a', NOW - 1]]) })).create, ['a']);
    assert.deepEqual([1, 2, 3, 20].map(daemonBackoffMs), [1000, 2000, 4000, 300_000]);
  });

  it('replaces a failed pod and waits for a terminating one to be gone', () => {
    const failed = planDaemonSet(input([node('a')], [pod('p-a', 'a', { phase: 'Failed' })]));
    assert.deepEqual(names(failed.delete), ['p-a']);
    assert.deepEqual(failed.create, ['a']);
    const terminating = planDaemonSet(input([node('a')], [pod('p-a', 'a', { terminating: true })]));
    assert.deepEqual(terminating.create, []);
  });
});

describe('DaemonSet rolling update', () => {
  const nodes = [node('a'), node('b'), node('c'), node('d')];
  const old = (n: string, ready = true): KubeObject => pod(`old-${n}`, n, { hash: 'old', ready });

  it('replaces at most maxUnavailable available pods at a time, unavailable old ones first', () => {
    const plan = planDaemonSet(input(nodes, [old('a'), old('b'), old('c', false), old('d')], { maxUnavailable: 2 }));
    // old-c is unavailable already (costs 1 of the budget of 2) and is replaced for free; one more.
    assert.deepEqual(names(plan.delete), ['old-a', 'old-c']);
    assert.equal(plan.status.updatedNumberScheduled, 0);
  });

  it('waits while the budget is spent, and counts updated pods', () => {
    const plan = planDaemonSet(input(nodes, [pod('new-a', 'a', { ready: false }), old('b'), old('c'), old('d')], { maxUnavailable: 1 }));
    assert.deepEqual(plan.delete, []);
    assert.equal(plan.status.updatedNumberScheduled, 1);
    assert.equal(plan.status.numberAvailable, 3);
    const percent = planDaemonSet(input(nodes, [old('a'), old('b'), old('c'), old('d')], { maxUnavailable: '50%' }));
    assert.equal(percent.delete.length, 2);
  });

  it('OnDelete leaves old pods alone', () => {
    const plan = planDaemonSet(input(nodes, [old('a'), old('b'), old('c'), old('d')], { strategy: 'OnDelete' }));
    assert.deepEqual(plan.delete, []);
    assert.deepEqual(plan.create, []);
  });

  it('maxSurge starts the new pod beside the old one and removes the old one once the new one is available', () => {
    const first = planDaemonSet(input([node('a'), node('b')], [old('a'), old('b')], { maxSurge: 1, maxUnavailable: 0 }));
    assert.deepEqual(first.create, ['a']);
    assert.deepEqual(first.delete, []);
    const waiting = planDaemonSet(
      input([node('a'), node('b')], [old('a'), pod('new-a', 'a', { ready: false }), old('b')], { maxSurge: 1, maxUnavailable: 0 }),
    );
    assert.deepEqual(waiting.create, []);
    assert.deepEqual(waiting.delete, []);
    const done = planDaemonSet(input([node('a'), node('b')], [old('a'), pod('new-a', 'a'), old('b')], { maxSurge: 1, maxUnavailable: 0 }));
    assert.deepEqual(names(done.delete), ['old-a']);
  });
});

describe('DaemonSet ControllerRevisions', () => {
  it('creates one revision per template, renumbers an old one rolled back to, and prunes past the limit', () => {
    assert.deepEqual(planRevisions([], 'h1', new Set(), 10), { create: 1, delete: [] });
    const revisions = [
      { name: 'ds-h1', hash: 'h1', revision: 1 },
      { name: 'ds-h2', hash: 'h2', revision: 2 },
    ];
    assert.deepEqual(planRevisions(revisions, 'h2', new Set(['h2']), 10), { delete: [] });
    assert.deepEqual(planRevisions(revisions, 'h3', new Set(['h2']), 10), { create: 3, delete: [] });
    // A rollback to h1: it becomes revision 3.
    assert.deepEqual(planRevisions(revisions, 'h1', new Set(['h2']), 10), { renumber: { name: 'ds-h1', revision: 3 }, delete: [] });
    // Limit 0: old revisions go, unless a live pod still runs their template.
    assert.deepEqual(planRevisions(revisions, 'h3', new Set(['h2']), 0), { create: 3, delete: ['ds-h1'] });
    assert.deepEqual(revisionData({ metadata: { labels: { app: 'x' } } }), { spec: { template: { metadata: { labels: { app: 'x' } }, $patch: 'replace' } } });
  });
});
