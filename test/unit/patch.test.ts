import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isJsonObject, type JsonObject, type JsonValue } from '../../src/apiserver/json.js';
import {
  PatchError,
  applyJsonPatch,
  applyPatch,
  childMeta,
  mergePatch,
  patchMetaForKind,
  patchTypeFromContentType,
  strategicMergePatch,
  type PatchType,
} from '../../src/apiserver/patch/index.js';

// ---------------------------------------------------------------------------------------------
// Fixtures: objects as the API server stores them.

function pod(): JsonObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'web-7d4b9c-x2x8p',
      namespace: 'default',
      uid: '5f0c8e2a-1b7d-4c1e-9d3a-2f6b8a9c0d11',
      resourceVersion: '4711',
      labels: { app: 'web', 'pod-template-hash': '7d4b9c' },
      annotations: { 'example.com/owner': 'team-a' },
      finalizers: ['example.com/protect'],
      ownerReferences: [
        {
          apiVersion: 'apps/v1',
          kind: 'ReplicaSet',
          name: 'web-7d4b9c',
          uid: 'a3c1d2e4-0000-4000-8000-000000000001',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      containers: [
        {
          name: 'log-shipper',
          image: 'fluent/fluent-bit:3.0',
          volumeMounts: [{ name: 'logs', mountPath: '/var/log/app' }],
        },
        {
          name: 'nginx',
          image: 'nginx:1.25',
          ports: [{ containerPort: 80, protocol: 'TCP' }],
          env: [
            { name: 'MODE', value: 'prod' },
            { name: 'LOG_LEVEL', value: 'info' },
          ],
          resources: { limits: { cpu: '500m', memory: '128Mi' } },
          volumeMounts: [
            { name: 'logs', mountPath: '/var/log/nginx' },
            { name: 'config', mountPath: '/etc/nginx/conf.d', readOnly: true },
          ],
        },
      ],
      volumes: [
        { name: 'logs', emptyDir: {} },
        { name: 'config', configMap: { name: 'nginx-config' } },
      ],
      nodeName: 'node-a',
      restartPolicy: 'Always',
      securityContext: { runAsNonRoot: true, fsGroup: 2000 },
      tolerations: [{ key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 }],
    },
    status: {
      phase: 'Running',
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: '2024-05-01T10:00:00Z' },
        { type: 'Ready', status: 'False', lastTransitionTime: '2024-05-01T10:00:00Z' },
      ],
      containerStatuses: [
        { name: 'log-shipper', ready: true, restartCount: 0 },
        { name: 'nginx', ready: false, restartCount: 3 },
      ],
    },
  };
}

function node(): JsonObject {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'node-a', labels: { 'kubernetes.io/hostname': 'node-a', 'kubernetes.io/os': 'linux' } },
    spec: {
      podCIDR: '10.244.1.0/24',
      podCIDRs: ['10.244.1.0/24'],
      taints: [
        { key: 'node-role.kubernetes.io/control-plane', effect: 'NoSchedule' },
        { key: 'example.com/gpu', value: 'true', effect: 'NoSchedule' },
      ],
    },
    status: {
      conditions: [
        {
          type: 'MemoryPressure',
          status: 'False',
          reason: 'KubeletHasSufficientMemory',
          lastHeartbeatTime: '2024-05-01T10:00:00Z',
        },
        {
          type: 'Ready',
          status: 'False',
          reason: 'KubeletNotReady',
          message: 'container runtime network not ready',
          lastHeartbeatTime: '2024-05-01T10:00:00Z',
        },
      ],
      addresses: [
        { type: 'InternalIP', address: '192.168.1.10' },
        { type: 'Hostname', address: 'node-a' },
      ],
    },
  };
}

function deployment(): JsonObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'default', generation: 3 },
    spec: {
      replicas: 2,
      selector: { matchLabels: { app: 'web' } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: {
          containers: [
            { name: 'nginx', image: 'nginx:1.25', ports: [{ containerPort: 80 }] },
            { name: 'exporter', image: 'nginx/nginx-prometheus-exporter:1.1' },
          ],
        },
      },
    },
    status: {
      conditions: [
        { type: 'Available', status: 'True' },
        { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable' },
      ],
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers.

function obj(value: JsonValue | undefined): JsonObject {
  assert.ok(isJsonObject(value), `expected a JSON object, got ${JSON.stringify(value)}`);
  return value;
}

function list(value: JsonValue | undefined): JsonValue[] {
  assert.ok(Array.isArray(value), `expected a JSON array, got ${JSON.stringify(value)}`);
  return value;
}

/** Follows a dotted path of object fields. */
function at(root: JsonValue, path: string): JsonValue | undefined {
  let current: JsonValue | undefined = root;
  for (const field of path.split('.')) {
    current = isJsonObject(current) && Object.hasOwn(current, field) ? current[field] : undefined;
  }
  return current;
}

function byName(items: JsonValue | undefined, name: string, key = 'name'): JsonObject {
  const found = list(items).find((item) => isJsonObject(item) && item[key] === name);
  return obj(found);
}

function names(items: JsonValue | undefined, key = 'name'): JsonValue[] {
  return list(items).map((item) => obj(item)[key]);
}

function directivesIn(value: JsonValue): string[] {
  if (Array.isArray(value)) return value.flatMap(directivesIn);
  if (!isJsonObject(value)) return [];
  return Object.entries(value).flatMap(([key, child]) => [...(key.startsWith('$') ? [key] : []), ...directivesIn(child)]);
}

function expectPatchError(fn: () => unknown, status: 400 | 422, message?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof PatchError, `expected a PatchError, got ${String(err)}`);
    assert.equal(err.status, status, `status for: ${err.message}`);
    assert.doesNotMatch(err.message, /\n/, 'the message is one line, without a dump of the object');
    if (message) assert.match(err.message, message);
    return true;
  });
}

function smp(original: JsonObject, patch: JsonValue, kind = String(original.kind)): JsonObject {
  const result = applyPatch('strategic', original, patch, kind);
  assert.deepEqual(directivesIn(result), [], 'no directive may remain in the result');
  return result;
}

// ---------------------------------------------------------------------------------------------

describe('patchTypeFromContentType', () => {
  it('maps the three patch media types, ignoring parameters, case and whitespace', () => {
    assert.equal(patchTypeFromContentType('application/json-patch+json'), 'json');
    assert.equal(patchTypeFromContentType('application/merge-patch+json'), 'merge');
    assert.equal(patchTypeFromContentType('application/strategic-merge-patch+json'), 'strategic');
    assert.equal(patchTypeFromContentType('application/merge-patch+json; charset=utf-8'), 'merge');
    assert.equal(patchTypeFromContentType(' Application/Strategic-Merge-Patch+JSON ;charset=UTF-8'), 'strategic');
  });

  it('maps server-side apply to apply, and rejects anything else (the server answers 415)', () => {
    assert.equal(patchTypeFromContentType('application/apply-patch+yaml'), 'apply');
    assert.equal(patchTypeFromContentType('application/apply-patch+yaml; charset=utf-8'), 'apply');
    assert.equal(patchTypeFromContentType('application/json'), undefined);
    assert.equal(patchTypeFromContentType('text/plain'), undefined);
    assert.equal(patchTypeFromContentType(''), undefined);
    assert.equal(patchTypeFromContentType('constructor'), undefined);
  });
});

describe('JSON merge patch (RFC 7386)', () => {
  it('passes the examples of RFC 7386 appendix A', () => {
    const cases: [JsonValue, JsonValue, JsonValue][] = [
      [{ a: 'b' }, { a: 'c' }, { a: 'c' }],
      [{ a: 'b' }, { b: 'c' }, { a: 'b', b: 'c' }],
      [{ a: 'b' }, { a: null }, {}],
      [{ a: 'b', b: 'c' }, { a: null }, { b: 'c' }],
      [{ a: ['b'] }, { a: 'c' }, { a: 'c' }],
      [{ a: 'c' }, { a: ['b'] }, { a: ['b'] }],
      [{ a: { b: 'c' } }, { a: { b: 'd', c: null } }, { a: { b: 'd' } }],
      [{ a: [{ b: 'c' }] }, { a: [1] }, { a: [1] }],
      [['a', 'b'], ['c', 'd'], ['c', 'd']],
      [{ a: 'b' }, ['c'], ['c']],
      [{ a: 'foo' }, null, null],
      [{ a: 'foo' }, 'bar', 'bar'],
      [{ e: null }, { a: 1 }, { e: null, a: 1 }],
      [[1, 2], { a: 'b', c: null }, { a: 'b' }],
      [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
    ];
    for (const [original, patch, expected] of cases) {
      assert.deepEqual(mergePatch(original, patch), expected, `${JSON.stringify(original)} + ${JSON.stringify(patch)}`);
    }
  });

  it('cordons a node with kubectl cordon\'s patch, keeping the rest of the spec', () => {
    const result = applyPatch('merge', node(), { spec: { unschedulable: true } }, 'Node');
    assert.equal(at(result, 'spec.unschedulable'), true);
    assert.equal(at(result, 'spec.podCIDR'), '10.244.1.0/24');
    assert.deepEqual(at(result, 'spec.taints'), at(node(), 'spec.taints'));
    assert.deepEqual(result.status, node().status);
  });

  it('uncordons a node by deleting spec.unschedulable with null', () => {
    const cordoned = applyPatch('merge', node(), { spec: { unschedulable: true } }, 'Node');
    const result = applyPatch('merge', cordoned, { spec: { unschedulable: null } }, 'Node');
    assert.equal(Object.hasOwn(obj(result.spec), 'unschedulable'), false);
    assert.deepEqual(result, node());
  });

  it('merges labels like kubectl label, and removes one with null', () => {
    const labelled = applyPatch('merge', pod(), { metadata: { labels: { a: 'b' } } }, 'Pod');
    assert.deepEqual(at(labelled, 'metadata.labels'), { app: 'web', 'pod-template-hash': '7d4b9c', a: 'b' });
    assert.equal(at(labelled, 'metadata.name'), 'web-7d4b9c-x2x8p');

    const unlabelled = applyPatch('merge', labelled, { metadata: { labels: { app: null } } }, 'Pod');
    assert.deepEqual(at(unlabelled, 'metadata.labels'), { 'pod-template-hash': '7d4b9c', a: 'b' });

    const bare: JsonObject = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team-a' } };
    const created = applyPatch('merge', bare, { metadata: { labels: { a: 'b' } } }, 'Namespace');
    assert.deepEqual(at(created, 'metadata.labels'), { a: 'b' });
  });

  it('replaces lists wholesale, even those a strategic merge patch would merge', () => {
    const patch = { spec: { containers: [{ name: 'nginx', image: 'nginx:1.26' }] } };
    const result = applyPatch('merge', pod(), patch, 'Pod');
    assert.deepEqual(at(result, 'spec.containers'), [{ name: 'nginx', image: 'nginx:1.26' }]);
  });

  it('rejects a body that is not an object with 400 (it would replace the whole object)', () => {
    expectPatchError(() => applyPatch('merge', pod(), [{ op: 'add', path: '/x', value: 1 }], 'Pod'), 400);
    expectPatchError(() => applyPatch('merge', pod(), 'spec', 'Pod'), 400);
    expectPatchError(() => applyPatch('merge', pod(), null, 'Pod'), 400);
  });

  it('modifies neither argument and returns an independent object', () => {
    const original = pod();
    const patch: JsonObject = {
      metadata: { labels: { a: 'b' }, annotations: { new: 'x' } },
      spec: { tolerations: [{ key: 'x', operator: 'Exists' }], overhead: { cpu: '1' } },
    };
    const patchCopy = structuredClone(patch);
    const result = applyPatch('merge', original, patch, 'Pod');
    assert.deepEqual(original, pod());
    assert.deepEqual(patch, patchCopy);

    obj(result.status).phase = 'Failed';
    obj(list(at(result, 'spec.tolerations'))[0]).key = 'changed';
    obj(at(result, 'metadata.annotations')).new = 'changed';
    obj(at(result, 'spec.overhead')).cpu = 'changed';
    obj(at(result, 'metadata.labels')).a = 'changed';
    assert.equal(at(original, 'status.phase'), 'Running');
    assert.deepEqual(patch, patchCopy);
    // Applied again (a retried update), the same patch gives the same result.
    assert.deepEqual(applyPatch('merge', pod(), patch, 'Pod'), applyPatch('merge', pod(), patchCopy, 'Pod'));
  });

  it('stores a "__proto__" key as data instead of changing the prototype', () => {
    const patch = JSON.parse('{"metadata":{"annotations":{"__proto__":{"polluted":"yes"}}}}') as JsonValue;
    const result = applyPatch('merge', pod(), patch, 'Pod');
    const annotations = obj(at(result, 'metadata.annotations'));
    assert.equal(Object.getPrototypeOf(annotations), Object.prototype);
    assert.ok(Object.hasOwn(annotations, '__proto__'));
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });
});

describe('JSON patch (RFC 6902)', () => {
  it('adds a label under an escaped key and replaces an image guarded by a test', () => {
    const patch: JsonValue = [
      { op: 'add', path: '/metadata/labels/app.kubernetes.io~1name', value: 'web' },
      { op: 'test', path: '/spec/containers/1/name', value: 'nginx' },
      { op: 'replace', path: '/spec/containers/1/image', value: 'nginx:1.26' },
    ];
    const result = applyPatch('json', pod(), patch, 'Pod');
    assert.equal(obj(at(result, 'metadata.labels'))['app.kubernetes.io/name'], 'web');
    assert.equal(byName(at(result, 'spec.containers'), 'nginx').image, 'nginx:1.26');
    assert.equal(byName(at(result, 'spec.containers'), 'log-shipper').image, 'fluent/fluent-bit:3.0');
  });

  it('appends with "-", removes by index, and moves and copies values', () => {
    const patch: JsonValue = [
      { op: 'add', path: '/metadata/finalizers/-', value: 'example.com/backup' },
      { op: 'remove', path: '/spec/containers/0' },
      { op: 'copy', from: '/metadata/labels/app', path: '/metadata/annotations/app' },
      { op: 'move', from: '/spec/nodeName', path: '/metadata/annotations/scheduled-to' },
    ];
    const result = applyPatch('json', pod(), patch, 'Pod');
    assert.deepEqual(at(result, 'metadata.finalizers'), ['example.com/protect', 'example.com/backup']);
    assert.deepEqual(names(at(result, 'spec.containers')), ['nginx']);
    assert.equal(at(result, 'metadata.annotations.app'), 'web');
    assert.equal(at(result, 'metadata.annotations.scheduled-to'), 'node-a');
    assert.equal(at(result, 'spec.nodeName'), undefined);
  });

  it('fails a patch whose test op does not match with 422, applying nothing', () => {
    const original = pod();
    const patch: JsonValue = [
      { op: 'replace', path: '/spec/containers/1/image', value: 'nginx:1.26' },
      { op: 'test', path: '/metadata/resourceVersion', value: '4710' },
    ];
    expectPatchError(() => applyPatch('json', original, patch, 'Pod'), 422, /operation 1 .*test/);
    expectPatchError(() => applyJsonPatch(original, [{ op: 'test', path: '/metadata/missing', value: 'x' }]), 422);
    assert.deepEqual(original, pod());
  });

  it('fails paths that do not resolve with 422', () => {
    const bad: JsonValue[] = [
      { op: 'remove', path: '/metadata/labels/missing' },
      { op: 'replace', path: '/spec/containers/5/image', value: 'x' },
      { op: 'add', path: '/spec/containers/9', value: { name: 'x' } },
      { op: 'add', path: '/metadata/nothing/here', value: 'x' },
      { op: 'add', path: '/metadata/name/x', value: 'x' },
      { op: 'add', path: '/spec/containers/first', value: { name: 'x' } },
      { op: 'replace', path: 'spec/nodeName', value: 'x' },
      { op: 'move', from: '/spec/missing', path: '/spec/nodeName' },
    ];
    for (const operation of bad) {
      expectPatchError(() => applyPatch('json', pod(), [operation], 'Pod'), 422);
    }
  });

  it('rejects a body that is not a list of operation objects with 400', () => {
    expectPatchError(() => applyJsonPatch(pod(), { op: 'add', path: '/x', value: 1 }), 400, /array/);
    expectPatchError(() => applyJsonPatch(pod(), 'add'), 400);
    expectPatchError(() => applyJsonPatch(pod(), ['add /x 1']), 400, /operation 0/);
  });

  it('rejects unknown or incomplete operations with 422, including fast-json-patch\'s internal _get', () => {
    const bad: JsonValue[] = [
      { op: 'merge', path: '/spec', value: {} },
      { op: '_get', path: '/spec/nodeName', value: null },
      { path: '/spec/nodeName', value: 'x' },
      { op: 'add', path: '/spec/nodeName' },
      { op: 'add', value: 'x' },
      { op: 'copy', path: '/spec/x' },
    ];
    for (const operation of bad) {
      expectPatchError(() => applyJsonPatch(pod(), [operation]), 422);
    }
  });

  it('refuses to move a value into its own child, and to touch __proto__', () => {
    expectPatchError(() => applyJsonPatch(pod(), [{ op: 'move', from: '/spec', path: '/spec/inner' }]), 422, /own child/);
    expectPatchError(() => applyJsonPatch(pod(), [{ op: 'add', path: '/metadata/__proto__/x', value: 1 }]), 422);
    expectPatchError(() => applyJsonPatch(pod(), [{ op: 'add', path: '/metadata/constructor/prototype/x', value: 1 }]), 422);
    assert.equal(({} as Record<string, unknown>).x, undefined);
  });

  it('may replace the whole object, but a result that is not an object is a 422', () => {
    const replaced = applyPatch('json', pod(), [{ op: 'replace', path: '', value: { kind: 'Pod', metadata: { name: 'other' } } }], 'Pod');
    assert.deepEqual(replaced, { kind: 'Pod', metadata: { name: 'other' } });
    expectPatchError(() => applyPatch('json', pod(), [{ op: 'remove', path: '' }], 'Pod'), 422, /JSON object/);
    expectPatchError(() => applyPatch('json', pod(), [{ op: 'replace', path: '', value: [1] }], 'Pod'), 422);
  });

  it('modifies neither argument and shares no values with the patch', () => {
    const original = pod();
    const value: JsonObject = { name: 'debug', image: 'busybox:1.36' };
    const patch: JsonValue = [
      { op: 'add', path: '/spec/containers/-', value },
      { op: 'replace', path: '/spec/containers/2/image', value: 'busybox:1.37' },
    ];
    const patchCopy = structuredClone(patch);
    const result = applyPatch('json', original, patch, 'Pod');
    assert.equal(byName(at(result, 'spec.containers'), 'debug').image, 'busybox:1.37');
    assert.deepEqual(original, pod());
    assert.deepEqual(patch, patchCopy);
    byName(at(result, 'spec.containers'), 'debug').name = 'changed';
    assert.equal(value.name, 'debug');
  });
});

describe('strategic merge patch', () => {
  it('applies the patch of a second kubectl apply: image updated, other fields kept, order per directive', () => {
    const lastApplied =
      '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d4b9c-x2x8p","namespace":"default"},"spec":{"containers":[{"image":"nginx:1.26","name":"nginx"}]}}\n';
    const patch: JsonValue = {
      metadata: { annotations: { 'kubectl.kubernetes.io/last-applied-configuration': lastApplied } },
      spec: {
        '$setElementOrder/containers': [{ name: 'nginx' }],
        containers: [{ image: 'nginx:1.26', name: 'nginx' }],
      },
    };
    const result = smp(pod(), patch);

    const containers = at(result, 'spec.containers');
    assert.deepEqual(names(containers), ['nginx', 'log-shipper']);
    const nginx = byName(containers, 'nginx');
    assert.equal(nginx.image, 'nginx:1.26');
    const before = byName(at(pod(), 'spec.containers'), 'nginx');
    assert.deepEqual({ ...nginx, image: before.image }, before, 'the other fields of nginx are kept');
    assert.deepEqual(byName(containers, 'log-shipper'), byName(at(pod(), 'spec.containers'), 'log-shipper'));
    assert.deepEqual(at(result, 'metadata.annotations'), {
      'example.com/owner': 'team-a',
      'kubectl.kubernetes.io/last-applied-configuration': lastApplied,
    });
    assert.deepEqual(at(result, 'spec.volumes'), at(pod(), 'spec.volumes'));
  });

  it('cordons and uncordons a node as kubectl does', () => {
    const cordoned = smp(node(), { spec: { unschedulable: true } });
    assert.equal(at(cordoned, 'spec.unschedulable'), true);
    assert.deepEqual(at(cordoned, 'spec.taints'), at(node(), 'spec.taints'));
    const uncordoned = smp(cordoned, { spec: { unschedulable: null } });
    assert.deepEqual(uncordoned, node());
  });

  it('merges nested keyed lists of a container: env by name, ports by containerPort, volumeMounts by mountPath', () => {
    const patch: JsonValue = {
      spec: {
        containers: [
          {
            name: 'nginx',
            env: [{ name: 'LOG_LEVEL', value: 'debug' }, { name: 'WORKERS', value: '4' }],
            ports: [{ containerPort: 80, name: 'http' }, { containerPort: 443, protocol: 'TCP' }],
            volumeMounts: [{ mountPath: '/etc/nginx/conf.d', readOnly: null }],
          },
        ],
      },
    };
    const nginx = byName(at(smp(pod(), patch), 'spec.containers'), 'nginx');
    assert.deepEqual(nginx.env, [
      { name: 'MODE', value: 'prod' },
      { name: 'LOG_LEVEL', value: 'debug' },
      { name: 'WORKERS', value: '4' },
    ]);
    assert.deepEqual(nginx.ports, [
      { containerPort: 80, protocol: 'TCP', name: 'http' },
      { containerPort: 443, protocol: 'TCP' },
    ]);
    assert.deepEqual(nginx.volumeMounts, [
      { name: 'logs', mountPath: '/var/log/nginx' },
      { name: 'config', mountPath: '/etc/nginx/conf.d' },
    ]);
    assert.deepEqual(nginx.resources, { limits: { cpu: '500m', memory: '128Mi' } });
  });

  it('appends an element with a new key, dropping the nulls in it', () => {
    const patch: JsonValue = {
      spec: { containers: [{ name: 'debug', image: 'busybox:1.36', command: ['sleep', '3600'], workingDir: null }] },
    };
    const containers = at(smp(pod(), patch), 'spec.containers');
    assert.deepEqual(names(containers), ['log-shipper', 'nginx', 'debug']);
    assert.deepEqual(byName(containers, 'debug'), { name: 'debug', image: 'busybox:1.36', command: ['sleep', '3600'] });
  });

  it('deletes a keyed element with $patch: delete, and a map with $patch: delete', () => {
    const patch: JsonValue = {
      spec: {
        containers: [{ name: 'log-shipper', $patch: 'delete' }],
        volumes: [{ name: 'nonexistent', $patch: 'delete' }],
        securityContext: { $patch: 'delete' },
      },
    };
    const result = smp(pod(), patch);
    assert.deepEqual(names(at(result, 'spec.containers')), ['nginx']);
    assert.deepEqual(at(result, 'spec.volumes'), at(pod(), 'spec.volumes'));
    assert.equal(Object.hasOwn(obj(result.spec), 'securityContext'), false);
    assert.equal(at(result, 'spec.nodeName'), 'node-a');
  });

  it('replaces a list with a {"$patch":"replace"} element and a map with $patch: replace', () => {
    const patch: JsonValue = {
      metadata: { labels: { $patch: 'replace', app: 'api', stale: null } },
      spec: { volumes: [{ name: 'data', emptyDir: { medium: 'Memory' } }, { $patch: 'replace' }] },
    };
    const result = smp(pod(), patch);
    assert.deepEqual(at(result, 'metadata.labels'), { app: 'api' });
    assert.deepEqual(at(result, 'spec.volumes'), [{ name: 'data', emptyDir: { medium: 'Memory' } }]);
  });

  it('treats an explicit $patch: merge like the default', () => {
    const patch: JsonValue = { spec: { securityContext: { $patch: 'merge', runAsUser: 1000 } } };
    assert.deepEqual(at(smp(pod(), patch), 'spec.securityContext'), { runAsNonRoot: true, fsGroup: 2000, runAsUser: 1000 });
  });

  it('drops the keys a $retainKeys directive does not list, as kubectl sends when a volume changes source', () => {
    const patch: JsonValue = {
      spec: { volumes: [{ $retainKeys: ['hostPath', 'name'], name: 'logs', hostPath: { path: '/var/log/web' } }] },
    };
    const volumes = at(smp(pod(), patch), 'spec.volumes');
    assert.deepEqual(byName(volumes, 'logs'), { name: 'logs', hostPath: { path: '/var/log/web' } });
    assert.deepEqual(byName(volumes, 'config'), { name: 'config', configMap: { name: 'nginx-config' } });
  });

  it('switches a Deployment to Recreate with $retainKeys, as kubectl apply does', () => {
    const patch: JsonValue = { spec: { strategy: { $retainKeys: ['type'], type: 'Recreate', rollingUpdate: null } } };
    const result = smp(deployment(), patch);
    assert.deepEqual(at(result, 'spec.strategy'), { type: 'Recreate' });
    assert.equal(at(result, 'spec.replicas'), 2);
  });

  it('merges primitive merge lists as a set, and removes values with $deleteFromPrimitiveList', () => {
    const withFinalizers: JsonObject = {
      ...pod(),
      metadata: { ...obj(pod().metadata), finalizers: ['example.com/protect', 'kubernetes.io/pvc-protection', 'example.com/audit'] },
    };
    const union = smp(withFinalizers, { metadata: { finalizers: ['example.com/backup', 'example.com/protect'] } });
    assert.deepEqual(at(union, 'metadata.finalizers'), [
      'example.com/protect',
      'kubernetes.io/pvc-protection',
      'example.com/audit',
      'example.com/backup',
    ]);

    const patch: JsonValue = {
      metadata: {
        finalizers: ['example.com/backup'],
        '$deleteFromPrimitiveList/finalizers': ['kubernetes.io/pvc-protection', 'example.com/backup', 'not-there'],
      },
    };
    // The deletion applies to the live list before the patch's own values are added.
    assert.deepEqual(at(smp(withFinalizers, patch), 'metadata.finalizers'), [
      'example.com/protect',
      'example.com/audit',
      'example.com/backup',
    ]);
  });

  it('orders a primitive list with $setElementOrder', () => {
    const patch: JsonValue = {
      metadata: {
        '$setElementOrder/finalizers': ['example.com/backup', 'example.com/protect'],
        finalizers: ['example.com/backup'],
      },
    };
    assert.deepEqual(at(smp(pod(), patch), 'metadata.finalizers'), ['example.com/backup', 'example.com/protect']);
  });

  it('orders a keyed list with $setElementOrder: listed elements first, the others after in their order', () => {
    const patch: JsonValue = {
      spec: {
        '$setElementOrder/containers': [{ name: 'debug' }, { name: 'nginx' }],
        containers: [{ name: 'debug', image: 'busybox:1.36' }],
      },
    };
    assert.deepEqual(names(at(smp(pod(), patch), 'spec.containers')), ['debug', 'nginx', 'log-shipper']);

    const reorderOnly: JsonValue = { spec: { '$setElementOrder/volumes': [{ name: 'config' }, { name: 'logs' }] } };
    assert.deepEqual(names(at(smp(pod(), reorderOnly), 'spec.volumes')), ['config', 'logs']);
  });

  it('merges node conditions and addresses by type', () => {
    const patch: JsonValue = {
      status: {
        '$setElementOrder/conditions': [{ type: 'MemoryPressure' }, { type: 'Ready' }, { type: 'DiskPressure' }],
        conditions: [
          { type: 'Ready', status: 'True', reason: 'KubeletReady', message: null, lastHeartbeatTime: '2024-05-01T10:00:40Z' },
          { type: 'DiskPressure', status: 'False', reason: 'KubeletHasNoDiskPressure' },
        ],
        addresses: [{ type: 'InternalIP', address: '192.168.1.11' }],
      },
    };
    const result = smp(node(), patch);
    const conditions = at(result, 'status.conditions');
    assert.deepEqual(names(conditions, 'type'), ['MemoryPressure', 'Ready', 'DiskPressure']);
    assert.deepEqual(byName(conditions, 'Ready', 'type'), {
      type: 'Ready',
      status: 'True',
      reason: 'KubeletReady',
      lastHeartbeatTime: '2024-05-01T10:00:40Z',
    });
    assert.deepEqual(byName(conditions, 'MemoryPressure', 'type'), byName(at(node(), 'status.conditions'), 'MemoryPressure', 'type'));
    assert.deepEqual(at(result, 'status.addresses'), [
      { type: 'InternalIP', address: '192.168.1.11' },
      { type: 'Hostname', address: 'node-a' },
    ]);
  });

  it('replaces node taints (no strategy) and unions podCIDRs (primitive merge list)', () => {
    const patch: JsonValue = {
      spec: {
        taints: [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }],
        podCIDRs: ['fd00:10:244:1::/64'],
      },
    };
    const result = smp(node(), patch);
    assert.deepEqual(at(result, 'spec.taints'), [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }]);
    assert.deepEqual(at(result, 'spec.podCIDRs'), ['10.244.1.0/24', 'fd00:10:244:1::/64']);
  });

  it('merges pod conditions by type but replaces containerStatuses', () => {
    const patch: JsonValue = {
      status: {
        conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: '2024-05-01T10:01:00Z' }],
        containerStatuses: [{ name: 'nginx', ready: true, restartCount: 3 }],
      },
    };
    const result = smp(pod(), patch);
    assert.deepEqual(at(result, 'status.conditions'), [
      { type: 'PodScheduled', status: 'True', lastTransitionTime: '2024-05-01T10:00:00Z' },
      { type: 'Ready', status: 'True', lastTransitionTime: '2024-05-01T10:01:00Z' },
    ]);
    assert.deepEqual(at(result, 'status.containerStatuses'), [{ name: 'nginx', ready: true, restartCount: 3 }]);
    assert.equal(at(result, 'status.phase'), 'Running');
  });

  it('replaces lists without a strategy, such as tolerations', () => {
    const patch: JsonValue = { spec: { tolerations: [{ key: 'example.com/gpu', operator: 'Exists' }] } };
    assert.deepEqual(at(smp(pod(), patch), 'spec.tolerations'), [{ key: 'example.com/gpu', operator: 'Exists' }]);
  });

  it('merges ownerReferences by uid and labels and annotations as maps', () => {
    const patch: JsonValue = {
      metadata: {
        labels: { 'pod-template-hash': null, track: 'canary' },
        annotations: { 'example.com/owner': 'team-b' },
        ownerReferences: [
          { uid: 'a3c1d2e4-0000-4000-8000-000000000001', blockOwnerDeletion: false },
          { apiVersion: 'v1', kind: 'ConfigMap', name: 'anchor', uid: 'b7e2c3f5-0000-4000-8000-000000000002' },
        ],
      },
    };
    const result = smp(pod(), patch);
    assert.deepEqual(at(result, 'metadata.labels'), { app: 'web', track: 'canary' });
    assert.deepEqual(at(result, 'metadata.annotations'), { 'example.com/owner': 'team-b' });
    assert.deepEqual(at(result, 'metadata.ownerReferences'), [
      {
        apiVersion: 'apps/v1',
        kind: 'ReplicaSet',
        name: 'web-7d4b9c',
        uid: 'a3c1d2e4-0000-4000-8000-000000000001',
        controller: true,
        blockOwnerDeletion: false,
      },
      { apiVersion: 'v1', kind: 'ConfigMap', name: 'anchor', uid: 'b7e2c3f5-0000-4000-8000-000000000002' },
    ]);
  });

  it('applies the pod spec rules to the pod template of a Deployment, and merges its conditions by type', () => {
    const patch: JsonValue = {
      spec: {
        template: {
          metadata: { annotations: { 'kubectl.kubernetes.io/restartedAt': '2024-05-01T12:00:00Z' } },
          spec: { containers: [{ name: 'nginx', image: 'nginx:1.26' }] },
        },
      },
      status: { conditions: [{ type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated' }] },
    };
    const result = smp(deployment(), patch);
    const containers = at(result, 'spec.template.spec.containers');
    assert.deepEqual(names(containers), ['nginx', 'exporter']);
    assert.deepEqual(byName(containers, 'nginx'), { name: 'nginx', image: 'nginx:1.26', ports: [{ containerPort: 80 }] });
    assert.deepEqual(at(result, 'spec.template.metadata'), {
      labels: { app: 'web' },
      annotations: { 'kubectl.kubernetes.io/restartedAt': '2024-05-01T12:00:00Z' },
    });
    assert.deepEqual(names(at(result, 'status.conditions'), 'type'), ['Available', 'Progressing']);
  });

  it('gives other kinds only the ObjectMeta rules: their lists are replaced', () => {
    const widget: JsonObject = {
      apiVersion: 'example.com/v1',
      kind: 'Widget',
      metadata: { name: 'w', finalizers: ['example.com/a'] },
      spec: { template: { spec: { containers: [{ name: 'a', image: 'a:1' }, { name: 'b', image: 'b:1' }] } } },
    };
    const patch: JsonValue = {
      metadata: { finalizers: ['example.com/b'] },
      spec: { template: { spec: { containers: [{ name: 'a', image: 'a:2' }] } } },
    };
    const result = smp(widget, patch);
    assert.deepEqual(at(result, 'metadata.finalizers'), ['example.com/a', 'example.com/b']);
    assert.deepEqual(at(result, 'spec.template.spec.containers'), [{ name: 'a', image: 'a:2' }]);

    const lease: JsonObject = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'node-a', namespace: 'kube-node-lease' },
      spec: { holderIdentity: 'node-a', leaseDurationSeconds: 40, renewTime: '2024-05-01T10:00:00.000000Z' },
    };
    const renewed = smp(lease, { spec: { renewTime: '2024-05-01T10:00:10.000000Z' } });
    assert.deepEqual(renewed.spec, { holderIdentity: 'node-a', leaseDurationSeconds: 40, renewTime: '2024-05-01T10:00:10.000000Z' });
  });

  it('replaces the whole object with $patch: replace at the top level', () => {
    const patch: JsonValue = { $patch: 'replace', apiVersion: 'v1', kind: 'Pod', metadata: { name: 'fresh', labels: { x: null } } };
    assert.deepEqual(smp(pod(), patch), { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'fresh', labels: {} } });
  });

  it('resolves directives inside values the object did not have', () => {
    const bare: JsonObject = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' } };
    const patch: JsonValue = {
      spec: {
        '$setElementOrder/containers': [{ name: 'b' }, { name: 'a' }],
        containers: [
          { name: 'a', image: 'a:1', env: [{ name: 'X', value: '1' }, { name: 'Y', $patch: 'delete' }] },
          { name: 'b', image: 'b:1', securityContext: { $patch: 'delete' } },
          { name: 'c', $patch: 'delete' },
        ],
      },
    };
    assert.deepEqual(smp(bare, patch).spec, {
      containers: [
        { name: 'b', image: 'b:1' },
        { name: 'a', image: 'a:1', env: [{ name: 'X', value: '1' }] },
      ],
    });
  });

  it('modifies neither argument and returns an independent object', () => {
    const original = pod();
    const patch: JsonObject = {
      spec: {
        '$setElementOrder/containers': [{ name: 'nginx' }, { name: 'log-shipper' }],
        containers: [{ name: 'nginx', image: 'nginx:1.26', env: [{ name: 'NEW', value: 'x' }] }],
        securityContext: { $patch: 'delete' },
      },
    };
    const patchCopy = structuredClone(patch);
    const result = strategicMergePatch(original, patch, patchMetaForKind('Pod'));
    assert.deepEqual(original, pod());
    assert.deepEqual(patch, patchCopy);
    list(byName(at(result, 'spec.containers'), 'nginx').env).push({ name: 'LATER', value: 'y' });
    byName(at(result, 'spec.containers'), 'log-shipper').image = 'changed';
    assert.deepEqual(original, pod());
    assert.deepEqual(patch, patchCopy);
  });

  it('rejects malformed patches and directives with 400', () => {
    const bad: [string, JsonValue, RegExp][] = [
      ['non-object body', [{ spec: {} }], /JSON object/],
      ['unknown $patch value', { spec: { securityContext: { $patch: 'remove' } } }, /unknown \$patch directive "remove" at spec\.securityContext/],
      ['non-string $patch', { spec: { $patch: true } }, /unknown \$patch directive/],
      ['unknown $patch in a list element', { spec: { containers: [{ name: 'nginx', $patch: 'drop' }] } }, /unknown \$patch/],
      ['unknown directive key', { spec: { '$mergeInto/containers': [] } }, /unknown patch directive "\$mergeInto\/containers"/],
      ['directive without field', { metadata: { '$setElementOrder/': [] } }, /names no field/],
      ['$retainKeys not a list', { spec: { strategy: { $retainKeys: 'type', type: 'Recreate' } } }, /\$retainKeys/],
      ['$retainKeys with non-strings', { spec: { strategy: { $retainKeys: [1], type: 'Recreate' } } }, /\$retainKeys/],
      ['$retainKeys missing a patched field', { spec: { strategy: { $retainKeys: ['type'], type: 'Recreate', rollingUpdate: { maxSurge: 1 } } } }, /rollingUpdate/],
      ['$setElementOrder not a list', { spec: { '$setElementOrder/containers': { name: 'nginx' } } }, /must be a list/],
      ['$setElementOrder on a list that does not merge', { spec: { '$setElementOrder/tolerations': [{ key: 'x' }] } }, /not a list that merges/],
      ['$setElementOrder element without merge key', { spec: { '$setElementOrder/containers': [{ image: 'nginx' }] } }, /by name/],
      ['$setElementOrder missing a patched element', { spec: { '$setElementOrder/containers': [{ name: 'nginx' }], containers: [{ name: 'debug', image: 'busybox' }] } }, /debug/],
      ['$deleteFromPrimitiveList not a list', { metadata: { '$deleteFromPrimitiveList/finalizers': 'example.com/protect' } }, /list of primitive/],
      ['$deleteFromPrimitiveList on a non-list', { metadata: { '$deleteFromPrimitiveList/labels': ['app'] } }, /not a list/],
      ['keyed element without merge key', { spec: { containers: [{ image: 'nginx:1.26' }] } }, /merge key "name"/],
      ['$patch: delete without merge key', { status: { conditions: [{ $patch: 'delete' }] } }, /merge key "type"/],
      ['primitive in a keyed list', { spec: { containers: ['nginx'] } }, /merged by name/],
      ['object in a primitive list', { metadata: { finalizers: [{ name: 'x' }] } }, /list of primitives/],
    ];
    for (const [label, patch, message] of bad) {
      assert.throws(
        () => strategicMergePatch(pod(), patch, patchMetaForKind('Pod')),
        (err: unknown) => err instanceof PatchError && err.status === 400 && message.test(err.message),
        label,
      );
    }
  });

  it('rejects what a well-formed patch cannot do with 422', () => {
    expectPatchError(() => smp(pod(), { $patch: 'delete' }), 422, /whole object/);
    expectPatchError(() => smp(pod(), { metadata: { finalizers: [['a']] } }), 422, /lists of lists/);
  });
});

describe('patchMetaForKind', () => {
  it('describes the merge lists of a Pod', () => {
    const spec = childMeta(patchMetaForKind('Pod'), 'spec');
    const containers = childMeta(spec, 'containers');
    assert.deepEqual([containers?.strategy, containers?.mergeKey], ['merge', 'name']);
    assert.equal(childMeta(containers, 'ports')?.mergeKey, 'containerPort');
    assert.equal(childMeta(containers, 'volumeMounts')?.mergeKey, 'mountPath');
    assert.equal(childMeta(childMeta(spec, 'initContainers'), 'env')?.mergeKey, 'name');
    assert.equal(childMeta(childMeta(spec, 'ephemeralContainers'), 'volumeDevices')?.mergeKey, 'devicePath');
    assert.equal(childMeta(spec, 'hostAliases')?.mergeKey, 'ip');
    assert.equal(childMeta(spec, 'tolerations'), undefined);
    assert.equal(childMeta(childMeta(patchMetaForKind('Pod'), 'status'), 'containerStatuses'), undefined);
  });

  it('gives every kind the ObjectMeta rules, and unknown kinds nothing else', () => {
    for (const kind of ['Pod', 'Node', 'Lease', 'Event', 'Namespace', 'Widget', 'constructor']) {
      const metadata = childMeta(patchMetaForKind(kind), 'metadata');
      assert.deepEqual(childMeta(metadata, 'finalizers'), { strategy: 'merge' }, kind);
      assert.equal(childMeta(metadata, 'ownerReferences')?.mergeKey, 'uid', kind);
    }
    for (const kind of ['Lease', 'Event', 'Namespace', 'Widget', 'constructor']) {
      assert.deepEqual(Object.keys(patchMetaForKind(kind).children ?? {}), ['metadata'], kind);
    }
    assert.equal(childMeta(childMeta(patchMetaForKind('Node'), 'spec'), 'taints'), undefined);
    assert.equal(childMeta(patchMetaForKind('Pod'), 'constructor'), undefined);
  });

  it('nests the pod template rules under spec.template of the workload kinds', () => {
    for (const kind of ['Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet', 'Job']) {
      const template = childMeta(childMeta(patchMetaForKind(kind), 'spec'), 'template');
      assert.equal(childMeta(childMeta(template, 'spec'), 'containers')?.mergeKey, 'name', kind);
      assert.deepEqual(childMeta(childMeta(template, 'metadata'), 'finalizers'), { strategy: 'merge' }, kind);
    }
  });
});

describe('applyPatch', () => {
  it('applies the same change through each patch type', () => {
    const patches: Record<PatchType, JsonValue> = {
      json: [{ op: 'add', path: '/metadata/labels/track', value: 'canary' }],
      merge: { metadata: { labels: { track: 'canary' } } },
      strategic: { metadata: { labels: { track: 'canary' } } },
    };
    for (const [type, patch] of Object.entries(patches) as [PatchType, JsonValue][]) {
      const result = applyPatch(type, pod(), patch, 'Pod');
      assert.deepEqual(at(result, 'metadata.labels'), { app: 'web', 'pod-template-hash': '7d4b9c', track: 'canary' }, type);
      assert.deepEqual({ ...result, metadata: obj(pod().metadata) }, pod(), type);
    }
  });

  it('reports failures as PatchError, an Error with a status', () => {
    try {
      applyPatch('json', pod(), [{ op: 'test', path: '/spec/nodeName', value: 'node-b' }], 'Pod');
      assert.fail('expected the patch to fail');
    } catch (err) {
      assert.ok(err instanceof Error);
      assert.ok(err instanceof PatchError);
      assert.equal(err.name, 'PatchError');
      assert.equal(err.status, 422);
      assert.match(err.message, /\/spec\/nodeName/);
    }
  });
});
