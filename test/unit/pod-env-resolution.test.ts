import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { isEnvVarName, type Lookup, resolveContainerEnv } from '../../src/agent/pods/env-resolution.js';
import { podConfigReferences } from '../../src/node-protocol/pod-references.js';

/** A container's environment from ConfigMaps, Secrets and the downward API, as kubelet builds it. */

const b64 = (text: string): string => Buffer.from(text).toString('base64');

const pod: KubeObject = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web', namespace: 'team', uid: 'u-1', labels: { app: 'web' }, annotations: { 'example.com/x': 'y' } },
  spec: { nodeName: 'n1', serviceAccountName: 'robot', containers: [] },
};

const objects: Record<string, KubeObject> = {
  'ConfigMap/settings': {
    metadata: { name: 'settings', namespace: 'team', resourceVersion: '5' },
    data: { MODE: 'fast', LEVEL: '3', '1badkey': 'x', 'with-dash': 'ok' },
  },
  'Secret/creds': { metadata: { name: 'creds', namespace: 'team' }, data: { PASSWORD: b64('s3cret'), USER: b64('ann') } },
};

/** A lookup over fixtures; names in `unknown` have not been read yet. */
function lookupOf(unknown: string[] = []): Lookup {
  return (kind, name) => {
    if (unknown.includes(`${kind}/${name}`)) return { state: 'unknown' };
    const object = objects[`${kind}/${name}`];
    return object ? { state: 'present', object } : { state: 'absent' };
  };
}

function resolve(container: Record<string, unknown>, unknown: string[] = []): ReturnType<typeof resolveContainerEnv> {
  return resolveContainerEnv({ name: 'main', ...container }, { pod, nodeIp: '10.0.0.7', lookup: lookupOf(unknown) });
}

describe('container environment', () => {
  it('configMapKeyRef and secretKeyRef give the value (a secret decoded from base64)', () => {
    const result = resolve({
      env: [
        { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'settings', key: 'MODE' } } },
        { name: 'PASS', valueFrom: { secretKeyRef: { name: 'creds', key: 'PASSWORD' } } },
        { name: 'PLAIN', value: 'v' },
        { name: 'EMPTY' },
      ],
    });
    assert.deepEqual(result, { kind: 'ready', env: { MODE: 'fast', PASS: 's3cret', PLAIN: 'v', EMPTY: '' }, warnings: [] });
  });

  it("a missing object or key that is not optional fails with kubelet's message", () => {
    assert.deepEqual(resolve({ env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'nope', key: 'k' } } }] }), {
      kind: 'failed',
      message: 'configmap "nope" not found',
    });
    assert.deepEqual(resolve({ env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'settings', key: 'k' } } }] }), {
      kind: 'failed',
      message: "couldn't find key k in ConfigMap team/settings",
    });
    assert.deepEqual(resolve({ env: [{ name: 'A', valueFrom: { secretKeyRef: { name: 'vault', key: 'k' } } }] }), {
      kind: 'failed',
      message: 'secret "vault" not found',
    });
    assert.deepEqual(resolve({ env: [{ name: 'A', valueFrom: { secretKeyRef: { name: 'creds', key: 'TOKEN' } } }] }), {
      kind: 'failed',
      message: "couldn't find key TOKEN in Secret team/creds",
    });
    assert.deepEqual(resolve({ envFrom: [{ secretRef: { name: 'vault' } }] }), { kind: 'failed', message: 'secret "vault" not found' });
  });

  it('optional refs to missing objects or keys leave the variable unset', () => {
    const result = resolve({
      env: [
        { name: 'A', valueFrom: { configMapKeyRef: { name: 'nope', key: 'k', optional: true } } },
        { name: 'B', valueFrom: { secretKeyRef: { name: 'creds', key: 'TOKEN', optional: true } } },
        { name: 'C', value: 'c' },
      ],
      envFrom: [{ configMapRef: { name: 'nope', optional: true } }],
    });
    assert.deepEqual(result, { kind: 'ready', env: { C: 'c' }, warnings: [] });
  });

  it('an object not read yet makes the container wait, whatever optional says', () => {
    const result = resolve({ env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'settings', key: 'MODE', optional: true } } }] }, [
      'ConfigMap/settings',
    ]);
    assert.deepEqual(result, { kind: 'pending', what: 'ConfigMap team/settings' });
  });

  it('envFrom: prefix, later sources win, env wins over envFrom, invalid names skipped with the kubelet event', () => {
    const result = resolve({
      envFrom: [{ configMapRef: { name: 'settings' } }, { secretRef: { name: 'creds' }, prefix: 'DB_' }, { configMapRef: { name: 'settings' }, prefix: 'X_' }],
      env: [{ name: 'LEVEL', value: 'override' }],
    });
    assert.equal(result.kind, 'ready');
    if (result.kind !== 'ready') return;
    assert.deepEqual(result.env, {
      MODE: 'fast',
      LEVEL: 'override',
      'with-dash': 'ok',
      DB_PASSWORD: 's3cret',
      DB_USER: 'ann',
      X_MODE: 'fast',
      X_LEVEL: '3',
      X_1badkey: 'x',
      'X_with-dash': 'ok',
    });
    assert.deepEqual(result.warnings, [
      {
        reason: 'InvalidEnvironmentVariableNames',
        message: 'Keys [1badkey] from the EnvFrom configMap team/settings were skipped since they are considered invalid environment variable names.',
      },
    ]);
  });

  it('fieldRef: the downward API a process pod can answer', () => {
    const fields = {
      NAME: 'metadata.name',
      NS: 'metadata.namespace',
      UID: 'metadata.uid',
      APP: "metadata.labels['app']",
      ANN: "metadata.annotations['example.com/x']",
      NODE: 'spec.nodeName',
      SA: 'spec.serviceAccountName',
      IP: 'status.podIP',
      HOST: 'status.hostIP',
      MISSING: "metadata.labels['none']",
    };
    const result = resolve({ env: Object.entries(fields).map(([name, fieldPath]) => ({ name, valueFrom: { fieldRef: { fieldPath } } })) });
    assert.deepEqual(result, {
      kind: 'ready',
      env: { NAME: 'web', NS: 'team', UID: 'u-1', APP: 'web', ANN: 'y', NODE: 'n1', SA: 'robot', IP: '10.0.0.7', HOST: '10.0.0.7' },
      warnings: [],
    });
  });

  it('resourceFieldRef: the container\'s own limits and requests (by default), divided and rounded up; the node for a limit not set', () => {
    const withResources: KubeObject = {
      ...pod,
      spec: { containers: [{ name: 'main', resources: { limits: { memory: '256Mi' }, requests: { cpu: '100m' } } }, { name: 'side' }] },
    };
    const node = { cpuMilli: 4000, memoryBytes: 8 * 2 ** 30, ephemeralStorageBytes: 0 };
    const result = resolveContainerEnv(
      {
        name: 'main',
        env: [
          { name: 'MEM_MI', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1Mi' } } },
          { name: 'CPU_M', valueFrom: { resourceFieldRef: { resource: 'requests.cpu', divisor: '1m' } } },
          { name: 'CPU_LIMIT', valueFrom: { resourceFieldRef: { resource: 'limits.cpu' } } },
          { name: 'SIDE_MEM_GI', valueFrom: { resourceFieldRef: { containerName: 'side', resource: 'limits.memory', divisor: '1Gi' } } },
        ],
      },
      { pod: withResources, nodeIp: '10.0.0.7', lookup: lookupOf(), node },
    );
    assert.deepEqual(result, { kind: 'ready', env: { MEM_MI: '256', CPU_M: '100', CPU_LIMIT: '4', SIDE_MEM_GI: '8' }, warnings: [] });
  });

  it("environment variable names as kubelet's envFrom check reads them", () => {
    for (const ok of ['A', '_a', 'a.b', 'my-name', 'x1']) assert.ok(isEnvVarName(ok), ok);
    for (const bad of ['', '1a', 'a b', 'a=b', '.', '..a', 'é']) assert.ok(!isEnvVarName(bad), bad);
  });
});

describe('pod references', () => {
  it('volumes, projected sources, env, envFrom of every container kind, imagePullSecrets: each once, sorted', () => {
    const refs = podConfigReferences({
      metadata: { namespace: 'team' },
      spec: {
        volumes: [
          { name: 'a', configMap: { name: 'cm-vol' } },
          { name: 'b', secret: { secretName: 'sec-vol' } },
          { name: 'c', projected: { sources: [{ configMap: { name: 'cm-proj' } }, { secret: { name: 'sec-proj' } }] } },
          { name: 'd', emptyDir: {} },
        ],
        containers: [{ name: 'x', env: [{ name: 'E', valueFrom: { configMapKeyRef: { name: 'cm-env', key: 'k' } } }], envFrom: [{ secretRef: { name: 'sec-from' } }] }],
        initContainers: [{ name: 'i', env: [{ name: 'E', valueFrom: { secretKeyRef: { name: 'sec-init', key: 'k' } } }] }],
        ephemeralContainers: [{ name: 'e', envFrom: [{ configMapRef: { name: 'cm-vol' } }] }],
        imagePullSecrets: [{ name: 'pull' }],
      },
    });
    assert.deepEqual(
      refs.map((r) => `${r.kind}/${r.namespace}/${r.name}`),
      [
        'ConfigMap/team/cm-env',
        'ConfigMap/team/cm-proj',
        'ConfigMap/team/cm-vol',
        'Secret/team/pull',
        'Secret/team/sec-from',
        'Secret/team/sec-init',
        'Secret/team/sec-proj',
        'Secret/team/sec-vol',
      ],
    );
  });
});
