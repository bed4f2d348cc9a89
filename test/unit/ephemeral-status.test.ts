import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { podStatusFrom } from '../../src/agent/pod-status.js';
import { RunSpecError, validateRunSpec, type PodRunSpec, type PodRunState } from '../../src/agent/pods/run-spec.js';

/**
 * The agent's side of ephemeral containers as pure functions: ephemeralContainerStatuses from the
 * supervisor's state (waiting before it is handed over, terminated with its exit code after), and
 * the run spec's rules for them (runc only, unique names, a target that is a container).
 */

const pod: KubeObject = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'p', namespace: 'default', uid: 'u1', creationTimestamp: '2026-01-01T00:00:00Z' },
  spec: {
    containers: [{ name: 'main', image: 'img' }],
    ephemeralContainers: [
      { name: 'dbg', image: 'img', targetContainerName: 'main' },
      { name: 'later', image: 'img' },
    ],
  },
};

const state: PodRunState = {
  uid: 'u1',
  supervisorPid: 1,
  startedAt: '2026-01-01T00:00:01Z',
  containers: [{ name: 'main', state: { running: { startedAt: '2026-01-01T00:00:01Z', pid: 5 } }, restartCount: 0, ready: true, started: true }],
  ephemeralContainers: [
    {
      name: 'dbg',
      state: { terminated: { exitCode: 3, reason: 'Error', startedAt: '2026-01-01T00:00:02Z', finishedAt: '2026-01-01T00:00:03Z' } },
      restartCount: 0,
      containerId: 'runc://u1_dbg',
    },
  ],
  finished: false,
  updatedAt: '2026-01-01T00:00:03Z',
};

describe('ephemeral containers on the agent', () => {
  it('ephemeralContainerStatuses: terminated with its exit code, or waiting with why; they do not change the pod phase or readiness', () => {
    const status = podStatusFrom({ pod, state, nodeIp: '10.0.0.1', now: '2026-01-01T00:00:04Z', ephemeralWaiting: { later: { reason: 'ErrImagePull', message: 'not there' } } });
    const statuses = status.ephemeralContainerStatuses as { name: string; state: Record<string, Record<string, unknown>>; ready: boolean; restartCount: number; containerID?: string }[];
    assert.deepEqual(statuses.map((s) => s.name), ['dbg', 'later']);
    assert.equal(statuses[0]!.state.terminated!.exitCode, 3);
    assert.equal(statuses[0]!.containerID, 'runc://u1_dbg');
    assert.deepEqual(statuses[1]!.state, { waiting: { reason: 'ErrImagePull', message: 'not there' } });
    assert.ok(statuses.every((s) => s.ready === false && s.restartCount === 0));
    assert.equal(status.phase, 'Running');
    const ready = (status.conditions as { type: string; status: string }[]).find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'True');
  });

  it('a pod without ephemeral containers reports none', () => {
    const plain = { ...pod, spec: { containers: [{ name: 'main', image: 'img' }] } };
    assert.equal(podStatusFrom({ pod: plain, state, nodeIp: '10.0.0.1', now: 'x' }).ephemeralContainerStatuses, undefined);
  });

  it('the run spec holds ephemeral containers under runc only, with unique names and a target that is a container', () => {
    const image = { ref: 'docker.io/library/img:1', digest: 'sha256:' + 'a'.repeat(64), layerDirs: ['/l'], config: {} };
    const base: PodRunSpec = {
      uid: 'u1',
      namespace: 'default',
      name: 'p',
      containers: [{ name: 'main', command: ['sleep'], args: ['1'], env: {}, image }],
      restartPolicy: 'Always',
      terminationGracePeriodSeconds: 1,
      atMostOne: false,
      runtime: 'runc',
      runcRoot: '/run/r',
    };
    const eph = { name: 'dbg', command: ['sh'], args: [], env: {}, image, targetContainerName: 'main' };
    assert.doesNotThrow(() => validateRunSpec({ ...base, ephemeralContainers: [eph] }, 'pod.json'));
    assert.throws(() => validateRunSpec({ ...base, ephemeralContainers: [{ ...eph, name: 'main' }] }, 'pod.json'), RunSpecError);
    assert.throws(() => validateRunSpec({ ...base, ephemeralContainers: [{ ...eph, targetContainerName: 'nope' }] }, 'pod.json'), /target nope/);
    const { runcRoot: _r, ...process } = base;
    assert.throws(() => validateRunSpec({ ...process, runtime: 'process', ephemeralContainers: [eph] }, 'pod.json'), /under runc only/);
  });
});
