import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { chooseNode, failureMessage, nodeRejection, toleratesTaint } from '../../src/controllers/scheduling.js';
import { isNodeReady } from '../../src/node-protocol/pods.js';
import type { Taint, Toleration } from '../../src/node-protocol/taints.js';

/** The scheduler's pure decision: feasibility, ranking and kube-scheduler's wording. */

interface NodeOptions {
  state?: string;
  readyCondition?: 'True' | 'False';
  unschedulable?: boolean;
  taints?: Taint[];
  labels?: Record<string, string>;
}

function node(name: string, options: NodeOptions = {}): KubeObject {
  const labels: Record<string, string> = { ...(options.labels ?? {}) };
  if (options.state !== undefined) labels['drover.io/state'] = options.state;
  else if (options.readyCondition === undefined) labels['drover.io/state'] = 'Ready';
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels },
    spec: { ...(options.unschedulable ? { unschedulable: true } : {}), ...(options.taints ? { taints: options.taints } : {}) },
    status: options.readyCondition ? { conditions: [{ type: 'Ready', status: options.readyCondition }] } : {},
  };
}

function pod(name: string, options: { owner?: string; tolerations?: Toleration[]; nodeSelector?: Record<string, string>; nodeName?: string; phase?: string; terminating?: boolean } = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: 'default',
      ...(options.owner ? { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: options.owner, uid: `uid-${options.owner}`, controller: true }] } : {}),
      ...(options.terminating ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: {
      containers: [{ name: 'c', command: ['sleep', '1'] }],
      ...(options.tolerations ? { tolerations: options.tolerations } : {}),
      ...(options.nodeSelector ? { nodeSelector: options.nodeSelector } : {}),
      ...(options.nodeName ? { nodeName: options.nodeName } : {}),
    },
    status: { phase: options.phase ?? 'Running' },
  };
}

function byNode(pods: KubeObject[]): Map<string, KubeObject[]> {
  const map = new Map<string, KubeObject[]>();
  for (const p of pods) {
    const n = (p.spec as { nodeName: string }).nodeName;
    map.set(n, [...(map.get(n) ?? []), p]);
  }
  return map;
}

describe('toleration matching', () => {
  const taint: Taint = { key: 'dedicated', value: 'gpu', effect: 'NoSchedule' };
  const table: [string, Toleration, Taint, boolean][] = [
    ['Equal with same key, value, effect', { key: 'dedicated', operator: 'Equal', value: 'gpu', effect: 'NoSchedule' }, taint, true],
    ['operator defaults to Equal', { key: 'dedicated', value: 'gpu' }, taint, true],
    ['Equal with another value', { key: 'dedicated', operator: 'Equal', value: 'cpu', effect: 'NoSchedule' }, taint, false],
    ['Exists ignores the value', { key: 'dedicated', operator: 'Exists' }, taint, true],
    ['empty effect matches every effect', { key: 'dedicated', operator: 'Exists', effect: '' }, { ...taint, effect: 'NoExecute' }, true],
    ['another effect does not match', { key: 'dedicated', operator: 'Exists', effect: 'NoExecute' }, taint, false],
    ['empty key with Exists matches every taint', { operator: 'Exists' }, { key: 'anything', value: 'x', effect: 'NoExecute' }, true],
    ['empty key with Equal matches nothing', { operator: 'Equal', value: 'gpu' }, taint, false],
    ['another key', { key: 'other', operator: 'Exists' }, taint, false],
    ['Equal with empty value matches a taint without value', { key: 'node.kubernetes.io/unreachable', operator: 'Equal' }, { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }, true],
    ['unknown operator', { key: 'dedicated', operator: 'Lt', value: 'gpu' }, taint, false],
  ];
  for (const [what, toleration, t, expected] of table) {
    it(what, () => assert.equal(toleratesTaint(toleration, t), expected));
  }

  it('PreferNoSchedule taints never block', () => {
    assert.equal(nodeRejection(pod('p'), node('n', { taints: [{ key: 'soft', effect: 'PreferNoSchedule' }] })), undefined);
  });

  it('a NoExecute-only toleration does not cover the NoSchedule unreachable taint', () => {
    const tainted = node('n', {
      taints: [
        { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' },
        { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' },
      ],
    });
    const p = pod('p', { tolerations: [{ key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 }] });
    assert.equal(nodeRejection(p, tainted), 'node(s) had untolerated taint {node.kubernetes.io/unreachable: }');
  });
});

describe('node feasibility', () => {
  it('readiness comes from the drover.io/state label, else the Ready condition', () => {
    assert.equal(isNodeReady(node('a')), true);
    assert.equal(isNodeReady(node('a', { state: 'Unavailable', readyCondition: 'True' })), false);
    assert.equal(isNodeReady(node('a', { state: 'Down' })), false);
    assert.equal(isNodeReady(node('a', { readyCondition: 'True' })), true);
    assert.equal(isNodeReady(node('a', { readyCondition: 'False' })), false);
  });

  it('rejects cordoned, tainted, not ready and non-matching nodes with kube-scheduler reasons', () => {
    const p = pod('p', { nodeSelector: { disk: 'ssd' } });
    assert.equal(nodeRejection(p, node('a', { unschedulable: true, labels: { disk: 'ssd' } })), 'node(s) were unschedulable');
    assert.equal(
      nodeRejection(p, node('b', { taints: [{ key: 'k', value: 'v', effect: 'NoExecute' }], labels: { disk: 'ssd' } })),
      'node(s) had untolerated taint {k: v}',
    );
    assert.equal(nodeRejection(p, node('c', { state: 'NotReady', labels: { disk: 'ssd' } })), 'node(s) were not ready');
    assert.equal(nodeRejection(p, node('d', { labels: { disk: 'hdd' } })), "node(s) didn't match Pod's node affinity/selector");
    assert.equal(nodeRejection(p, node('e', { labels: { disk: 'ssd' } })), undefined);
  });

  it('a tolerated taint does not block', () => {
    const p = pod('p', { tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'gpu', effect: 'NoSchedule' }] });
    assert.equal(nodeRejection(p, node('a', { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] })), undefined);
  });
});

describe('chooseNode', () => {
  it('words the failure exactly as kube-scheduler does', () => {
    const nodes = [
      node('a', { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }], state: 'Unavailable' }),
      node('b', { unschedulable: true }),
      node('c', { unschedulable: true }),
    ];
    assert.deepEqual(chooseNode(pod('p'), nodes, new Map()), {
      reasons: '0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 node(s) were unschedulable.',
    });
  });

  it('sorts reasons as Go sort.Strings does (count first) and says so when there are no nodes', () => {
    assert.equal(
      failureMessage(4, ['node(s) were unschedulable', "node(s) didn't match Pod's node affinity/selector", 'node(s) were unschedulable', 'node(s) were unschedulable']),
      "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 3 node(s) were unschedulable.",
    );
    assert.deepEqual(chooseNode(pod('p'), [], new Map()), { reasons: 'no nodes available to schedule pods' });
  });

  it('spreads replicas of one owner before balancing load', () => {
    const nodes = [node('a'), node('b'), node('c')];
    const existing = [
      pod('x1', { owner: 'web', nodeName: 'a' }),
      pod('o1', { nodeName: 'b' }),
      pod('o2', { nodeName: 'b' }),
      pod('o3', { nodeName: 'b' }),
      pod('o4', { nodeName: 'c' }),
    ];
    // b is the busiest but has no web replica; c has fewer pods than b: c wins.
    assert.deepEqual(chooseNode(pod('x2', { owner: 'web' }), nodes, byNode(existing)), { node: 'c' });
    // Without an owner only the load counts: a (1 pod) and c (1 pod) tie, the name decides.
    assert.deepEqual(chooseNode(pod('solo'), nodes, byNode(existing)), { node: 'a' });
  });

  it('counts only pods still running toward the load', () => {
    const nodes = [node('a'), node('b')];
    const existing = [
      pod('done1', { nodeName: 'a', phase: 'Succeeded' }),
      pod('done2', { nodeName: 'a', phase: 'Failed' }),
      pod('live', { nodeName: 'b' }),
    ];
    assert.deepEqual(chooseNode(pod('p'), nodes, byNode(existing)), { node: 'a' });
  });

  it('a terminating replica does not push its replacement away from its node', () => {
    const nodes = [node('a'), node('b')];
    const existing = [pod('old', { owner: 'web', nodeName: 'a', terminating: true }), pod('other', { nodeName: 'b' })];
    // Same sibling count (0) on both; a has the terminating pod (load 1), b the other (load 1): name.
    assert.deepEqual(chooseNode(pod('new', { owner: 'web' }), nodes, byNode(existing)), { node: 'a' });
  });

  it('never picks a cordoned, tainted or selector-mismatched node even when it is empty', () => {
    const nodes = [
      node('a', { unschedulable: true }),
      node('b', { taints: [{ key: 'k', effect: 'NoSchedule' }] }),
      node('c', { labels: { zone: 'x' } }),
      node('d', { labels: { zone: 'y' } }),
    ];
    const busy = [pod('p1', { nodeName: 'd' }), pod('p2', { nodeName: 'd' })];
    assert.deepEqual(chooseNode(pod('p', { nodeSelector: { zone: 'y' } }), nodes, byNode(busy)), { node: 'd' });
  });
});
