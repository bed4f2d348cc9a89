import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  validateEphemeralContainers,
  validateEphemeralContainersOnCreate,
  validateEphemeralContainersUpdate,
} from '../../src/apiserver/kinds/ephemeral-containers.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { PODS } from '../../src/client/types.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/**
 * Ephemeral containers' rules as pure functions (add only, unique names, no ports/probes/
 * resources/lifecycle, a target that exists, none at create), then through the store's
 * ephemeralcontainers write path: only spec.ephemeralContainers is taken from the caller.
 */

function pod(ephemeral?: unknown[]): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace: 'default' },
    spec: {
      containers: [{ name: 'main', image: 'busybox', command: ['sleep', '1000'] }],
      initContainers: [{ name: 'init', image: 'busybox', command: ['true'] }],
      ...(ephemeral ? { ephemeralContainers: ephemeral } : {}),
    },
  };
}

const debuggerContainer = { name: 'debugger', image: 'busybox', command: ['sh'], stdin: true, tty: true, targetContainerName: 'main' };

function fields(causes: { field?: string }[]): string[] {
  return causes.map((c) => c.field ?? '');
}

describe('ephemeral container validation', () => {
  it('accepts a debugger that targets a container', () => {
    assert.deepEqual(validateEphemeralContainers(pod([debuggerContainer]).spec), []);
  });

  it('refuses a name any container of the pod already has, and duplicates among themselves', () => {
    const causes = validateEphemeralContainers(pod([{ ...debuggerContainer, name: 'main' }, { ...debuggerContainer, name: 'init' }, debuggerContainer, debuggerContainer]).spec);
    assert.deepEqual(fields(causes), ['spec.ephemeralContainers[0].name', 'spec.ephemeralContainers[1].name', 'spec.ephemeralContainers[3].name']);
    assert.ok(causes.every((c) => c.reason === 'FieldValueDuplicate'));
  });

  it('refuses ports, probes, resources and lifecycle', () => {
    const causes = validateEphemeralContainers(
      pod([
        {
          ...debuggerContainer,
          ports: [{ containerPort: 80 }],
          livenessProbe: { exec: { command: ['true'] } },
          readinessProbe: { exec: { command: ['true'] } },
          startupProbe: { exec: { command: ['true'] } },
          resources: { limits: { memory: '1Gi' } },
          lifecycle: { preStop: { exec: { command: ['true'] } } },
        },
      ]).spec,
    );
    assert.deepEqual(fields(causes).sort(), [
      'spec.ephemeralContainers[0].lifecycle',
      'spec.ephemeralContainers[0].livenessProbe',
      'spec.ephemeralContainers[0].ports',
      'spec.ephemeralContainers[0].readinessProbe',
      'spec.ephemeralContainers[0].resources',
      'spec.ephemeralContainers[0].startupProbe',
    ]);
    assert.ok(causes.every((c) => c.reason === 'FieldValueForbidden' && /cannot be set for an Ephemeral Container/.test(c.message)));
  });

  it('takes empty fields as unset, as kubectl debug sends them (resources: {})', () => {
    assert.deepEqual(validateEphemeralContainers(pod([{ ...debuggerContainer, resources: {}, ports: [], lifecycle: { preStop: null } }]).spec), []);
    assert.equal(validateEphemeralContainers(pod([{ ...debuggerContainer, resources: { limits: { cpu: '1' } } }]).spec).length, 1);
  });

  it('refuses a target that is not one of the containers (an init container is not one), and a missing image', () => {
    const causes = validateEphemeralContainers(pod([{ ...debuggerContainer, targetContainerName: 'init' }, { name: 'noimage' }]).spec);
    assert.deepEqual(fields(causes), ['spec.ephemeralContainers[0].targetContainerName', 'spec.ephemeralContainers[1].image']);
    assert.equal(causes[0]!.reason, 'FieldValueNotFound');
  });

  it("mounts the pod's volumes by name, without subPath: a missing volume and a subPath or subPathExpr are refused", () => {
    const withVolumes = (mounts: unknown[]): unknown => ({ ...(pod([{ ...debuggerContainer, volumeMounts: mounts }]).spec as object), volumes: [{ name: 'data', emptyDir: {} }] });
    assert.deepEqual(validateEphemeralContainers(withVolumes([{ name: 'data', mountPath: '/data', readOnly: true }])), []);
    const missing = validateEphemeralContainers(withVolumes([{ name: 'nope', mountPath: '/nope' }]));
    assert.deepEqual(fields(missing), ['spec.ephemeralContainers[0].volumeMounts[0].name']);
    assert.match(missing[0]!.message ?? '', /Not found: "nope"/);
    const sub = validateEphemeralContainers(withVolumes([{ name: 'data', mountPath: '/a', subPath: 'x' }, { name: 'data', mountPath: '/b', subPathExpr: '$(POD)' }]));
    assert.deepEqual(fields(sub), ['spec.ephemeralContainers[0].volumeMounts[0].subPath', 'spec.ephemeralContainers[0].volumeMounts[1].subPathExpr']);
    assert.ok(sub.every((c) => c.message === 'Forbidden: cannot be set for an Ephemeral Container'));
  });

  it('refuses ephemeral containers on create', () => {
    assert.deepEqual(fields(validateEphemeralContainersOnCreate(pod([debuggerContainer]))), ['spec.ephemeralContainers']);
    assert.deepEqual(validateEphemeralContainersOnCreate(pod()), []);
  });

  it('through the subresource: adding is allowed, changing or removing is not', () => {
    const one = pod([debuggerContainer]);
    assert.deepEqual(validateEphemeralContainersUpdate(one, pod(), true), []);
    const two = pod([debuggerContainer, { ...debuggerContainer, name: 'second' }]);
    assert.deepEqual(validateEphemeralContainersUpdate(two, one, true), []);
    const changed = validateEphemeralContainersUpdate(pod([{ ...debuggerContainer, image: 'other' }]), one, true);
    assert.deepEqual(fields(changed), ['spec.ephemeralContainers[0]']);
    assert.match(changed[0]!.message, /existing ephemeral containers "debugger" may not be changed/);
    const removed = validateEphemeralContainersUpdate(pod([]), one, true);
    assert.deepEqual(fields(removed), ['spec.ephemeralContainers']);
    assert.match(removed[0]!.message, /"debugger" may not be removed/);
  });

  it('through the pod itself: no change at all', () => {
    const one = pod([debuggerContainer]);
    assert.deepEqual(validateEphemeralContainersUpdate(one, pod([debuggerContainer]), false), []);
    const causes = validateEphemeralContainersUpdate(one, pod(), false);
    assert.deepEqual(fields(causes), ['spec.ephemeralContainers']);
    assert.match(causes[0]!.message, /pods\/ephemeralcontainers subresource/);
  });
});

describe('the ephemeralcontainers write path of the store', () => {
  let api: InProcessApi;
  before(async () => {
    api = await inProcessApi();
  });
  after(async () => api.close());

  it('takes only spec.ephemeralContainers from the caller and keeps the rules', async () => {
    const created = await api.client.create(PODS, 'default', pod());
    const def = api.registry.lookup('', 'v1', 'pods')!;
    const update = (change: (p: KubeObject) => void) =>
      api.store.guaranteedUpdate(
        def,
        'default',
        'p',
        async (current) => {
          change(current);
          return current;
        },
        { subresource: 'ephemeralcontainers' },
      );
    const added = await update((p) => {
      (p.spec as { ephemeralContainers?: unknown[] }).ephemeralContainers = [debuggerContainer];
      // Not through this path: the label and the container's image stay as they are.
      p.metadata.labels = { sneaky: 'yes' };
      (p.spec as { containers: { image: string }[] }).containers[0]!.image = 'evil';
    });
    assert.equal(added.metadata.labels, undefined);
    assert.equal((added.spec as { containers: { image: string }[] }).containers[0]!.image, 'busybox');
    const stored = (added.spec as { ephemeralContainers: { name: string; terminationMessagePolicy?: string }[] }).ephemeralContainers;
    assert.deepEqual(stored.map((c) => c.name), ['debugger']);
    assert.equal(stored[0]!.terminationMessagePolicy, 'File', 'defaults apply to ephemeral containers');
    await assert.rejects(
      update((p) => {
        (p.spec as { ephemeralContainers: unknown[] }).ephemeralContainers = [];
      }),
      (error: unknown) => error instanceof ApiError && error.code === 422 && /may not be removed/.test(error.message),
    );
    // The pod itself cannot change them.
    await assert.rejects(
      api.client.update(PODS, 'default', { ...created, spec: { ...(created.spec as object), ephemeralContainers: [] }, metadata: { ...created.metadata, resourceVersion: undefined } } as KubeObject),
      (error: unknown) => error instanceof ApiError && error.code === 422 && /subresource/.test(error.message),
    );
  });
});
