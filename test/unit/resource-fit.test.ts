import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { insufficientResources, nodeAllocatable, podRequests } from '../../src/controllers/resource-fit.js';
import { chooseNode, nodeRejections } from '../../src/controllers/scheduling.js';
import { allocatableOf, parseReservation, resourceList } from '../../src/node-protocol/node-resources.js';

/**
 * The scheduler's runtime-handler and resource checks (pure): pod requests as Kubernetes sums them,
 * node allocatable, kube-scheduler's reasons and its counted message; a node's allocatable from
 * its capacity and `system-reserved`.
 */

type Resources = { requests?: Record<string, string>; limits?: Record<string, string> };

function pod(name: string, options: { containers?: Resources[]; init?: (Resources & { restartPolicy?: string })[]; overhead?: Record<string, string>; runtimeClassName?: string; nodeName?: string; phase?: string } = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: {
      containers: (options.containers ?? [{}]).map((resources, i) => ({ name: `c${i}`, resources })),
      ...(options.init ? { initContainers: options.init.map(({ restartPolicy, ...resources }, i) => ({ name: `i${i}`, resources, ...(restartPolicy ? { restartPolicy } : {}) })) } : {}),
      ...(options.overhead ? { overhead: options.overhead } : {}),
      ...(options.runtimeClassName ? { runtimeClassName: options.runtimeClassName } : {}),
      ...(options.nodeName ? { nodeName: options.nodeName } : {}),
    },
    status: { phase: options.phase ?? 'Running' },
  };
}

function node(name: string, options: { allocatable?: Record<string, string>; handlers?: string[] } = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'drover.io/state': 'Ready' } },
    spec: {},
    status: {
      ...(options.allocatable ? { allocatable: options.allocatable } : {}),
      ...(options.handlers ? { runtimeHandlers: options.handlers.map((h) => ({ name: h, features: {} })) } : {}),
    },
  };
}

const ROOMY = { cpu: '2', memory: '4Gi', pods: '110' };

describe('pod requests', () => {
  it('sums containers, takes a limit without a request as the request, adds the overhead', () => {
    const p = pod('p', {
      containers: [{ requests: { cpu: '100m', memory: '64Mi' } }, { limits: { cpu: '1', memory: '128Mi' } }, { requests: { cpu: '50m' }, limits: { cpu: '200m' } }],
      overhead: { cpu: '10m', memory: '1Mi' },
    });
    assert.deepEqual(podRequests(p), { cpuMilli: 100 + 1000 + 50 + 10, memoryBytes: (64 + 128 + 1) * 2 ** 20, ephemeralStorageBytes: 0 });
  });

  it('an init container that needs more than the containers sets the request; sidecars add to both', () => {
    const big = pod('p', { containers: [{ requests: { cpu: '100m' } }], init: [{ requests: { cpu: '500m' } }] });
    assert.equal(podRequests(big).cpuMilli, 500);
    const small = pod('p', { containers: [{ requests: { cpu: '300m' } }], init: [{ requests: { cpu: '200m' } }] });
    assert.equal(podRequests(small).cpuMilli, 300);
    const sidecar = pod('p', { containers: [{ requests: { cpu: '300m' } }], init: [{ requests: { cpu: '100m' }, restartPolicy: 'Always' }, { requests: { cpu: '350m' } }] });
    // containers 300 + sidecar 100 = 400; the second init runs beside the sidecar: 450.
    assert.equal(podRequests(sidecar).cpuMilli, 450);
  });

  it('a node without allocatable in its status limits nothing', () => {
    assert.deepEqual(nodeAllocatable(node('n')), {});
    assert.deepEqual(insufficientResources(pod('p', { containers: [{ requests: { cpu: '64' } }] }), {}, []), []);
    assert.deepEqual(nodeAllocatable(node('n', { allocatable: { cpu: '1500m', memory: '1Gi', pods: '3' } })), { cpuMilli: 1500, memoryBytes: 2 ** 30, pods: 3 });
  });
});

describe('resource fit and runtime handlers', () => {
  it('counts what the pods already there requested, and reports each short resource as kube-scheduler does', () => {
    const n = node('n', { allocatable: { cpu: '1', memory: '1Gi', pods: '2' } });
    const there = [pod('a', { containers: [{ requests: { cpu: '600m', memory: '512Mi' } }] }), pod('b', { containers: [{ requests: { memory: '256Mi' } }] })];
    const wants = pod('p', { containers: [{ requests: { cpu: '500m', memory: '512Mi' } }] });
    assert.deepEqual(insufficientResources(wants, nodeAllocatable(n), there), ['Too many pods', 'Insufficient cpu', 'Insufficient memory']);
    // Exactly what is left fits.
    assert.deepEqual(insufficientResources(pod('q', { containers: [{ requests: { cpu: '400m', memory: '256Mi' } }] }), nodeAllocatable(n), there.slice(0, 1)), []);
  });

  it('a pod that requests nothing is only limited by the pod count', () => {
    const n = node('n', { allocatable: { cpu: '0', memory: '0', pods: '1' } });
    assert.deepEqual(insufficientResources(pod('p'), nodeAllocatable(n), []), []);
    assert.deepEqual(insufficientResources(pod('p'), nodeAllocatable(n), [pod('x')]), ['Too many pods']);
  });

  it('a node without the handler of the pod’s class is rejected before resources are looked at', () => {
    const processOnly = node('n', { handlers: ['process'], allocatable: { cpu: '0', pods: '0' } });
    assert.deepEqual(nodeRejections(pod('p', { runtimeClassName: 'runc' }), processOnly, 'runc', []), ["node(s) didn't have the runtime handler runc"]);
    const both = node('m', { handlers: ['runc', 'process'], allocatable: ROOMY });
    assert.deepEqual(nodeRejections(pod('p', { runtimeClassName: 'runc' }), both, 'runc', []), []);
  });

  it('words the failure as the issue asks: counts per reason across nodes, sorted', () => {
    const nodes = [
      node('small', { handlers: ['runc', 'process'], allocatable: { cpu: '4', memory: '100Mi', pods: '110' } }),
      node('old-1', { handlers: ['process'], allocatable: ROOMY }),
      node('old-2', { handlers: ['process'], allocatable: ROOMY }),
    ];
    const p = pod('p', { runtimeClassName: 'runc', containers: [{ requests: { memory: '200Mi' } }] });
    assert.deepEqual(chooseNode(p, nodes, new Map(), 'runc'), {
      reasons: "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't have the runtime handler runc.",
    });
  });

  it('without a handler given, the pod’s built-in class decides; a pod with no class runs processes', () => {
    const nodes = [node('runc-node', { handlers: ['runc', 'process'], allocatable: ROOMY }), node('legacy', { allocatable: ROOMY })];
    assert.deepEqual(chooseNode(pod('p', { runtimeClassName: 'runc' }), [nodes[1]!], new Map()), {
      reasons: "0/1 nodes are available: 1 node(s) didn't have the runtime handler runc.",
    });
    assert.deepEqual(chooseNode(pod('p'), nodes, new Map()), { node: 'legacy' });
  });

  it('places the pod where it fits; finished pods free their requests', () => {
    const nodes = [node('a', { allocatable: { cpu: '1', memory: '1Gi', pods: '10' } }), node('b', { allocatable: { cpu: '1', memory: '1Gi', pods: '10' } })];
    const onA = [pod('x', { nodeName: 'a', containers: [{ requests: { cpu: '800m' } }] })];
    const onB = [pod('y', { nodeName: 'b', containers: [{ requests: { cpu: '900m' } }] }), pod('z', { nodeName: 'b' })];
    const byNode = new Map([
      ['a', onA],
      ['b', onB],
    ]);
    const wants = pod('p', { containers: [{ requests: { cpu: '200m' } }] });
    assert.deepEqual(chooseNode(wants, nodes, byNode), { node: 'a' });
    const bigger = pod('p', { containers: [{ requests: { cpu: '300m' } }] });
    assert.deepEqual(chooseNode(bigger, nodes, byNode), { reasons: '0/2 nodes are available: 2 Insufficient cpu.' });
    onA[0]!.status = { phase: 'Succeeded' };
    assert.deepEqual(chooseNode(bigger, nodes, byNode), { node: 'a' });
  });
});

describe('node allocatable from capacity and system-reserved', () => {
  it('parses kubelet’s syntax, one entry or several, and names bad entries', () => {
    assert.deepEqual(parseReservation(['cpu=500m,memory=512Mi', 'ephemeral-storage=1Gi']), {
      reserved: { cpu: 500, memory: 512 * 2 ** 20, 'ephemeral-storage': 2 ** 30 },
      problems: [],
    });
    assert.deepEqual(parseReservation(['']), { reserved: {}, problems: [] });
    const bad = parseReservation(['gpu=1,cpu=lots,memory']);
    assert.deepEqual(bad.problems, [
      '"gpu=1": the resource must be one of cpu, memory, ephemeral-storage (as name=quantity)',
      '"cpu=lots": "lots" is not a quantity (quantities must match the regular expression \'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$\')',
      '"memory": needs a quantity after =',
    ]);
    assert.match(parseReservation(['cpu=-1']).problems[0] ?? '', /must not be negative/);
  });

  it('allocatable is capacity less the reservation, never below zero, printed as kubelet prints it', () => {
    const capacity = { cpuMilli: 2000, memoryBytes: 8 * 2 ** 30, ephemeralStorageBytes: 100 * 2 ** 30, pods: 110 };
    const allocatable = allocatableOf(capacity, { cpu: 500, memory: 2 ** 30, 'ephemeral-storage': 200 * 2 ** 30 });
    assert.deepEqual(allocatable, { cpuMilli: 1500, memoryBytes: 7 * 2 ** 30, ephemeralStorageBytes: 0, pods: 110 });
    assert.deepEqual(resourceList(allocatable), { cpu: '1500m', 'ephemeral-storage': '0Ki', memory: `${7 * 2 ** 20}Ki`, pods: '110' });
    assert.deepEqual(resourceList(capacity).cpu, '2');
  });
});
