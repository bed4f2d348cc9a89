import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Authorizer } from '../../src/apiserver/auth.js';
import { ApiError } from '../../src/apiserver/errors.js';
import { validateRuntimeClass } from '../../src/apiserver/kinds/runtime-classes.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { LocalClient } from '../../src/client/local.js';
import { PODS, RUNTIME_CLASSES } from '../../src/client/types.js';
import { NodeAuthorizer } from '../../src/cluster/node-authorization.js';
import { formatBytes, formatMilliCpu, milliCpu, parseQuantity, QuantityError, wholeValue } from '../../src/node-protocol/quantity.js';
import { nodeRuntimeHandlerNames, podRuntimeClassName, resolvePodRuntime } from '../../src/node-protocol/runtime-classes.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/** Quantities, the pure runtime-class rules, RuntimeClass validation, pod admission in-process, and what a node may read. */

describe('quantities', () => {
  const table: [string, number][] = [
    ['0', 0],
    ['2', 2],
    ['250m', 0.25],
    ['1.5', 1.5],
    ['.5', 0.5],
    ['100n', 1e-7],
    ['64Mi', 64 * 2 ** 20],
    ['1Gi', 2 ** 30],
    ['1.5Gi', 1.5 * 2 ** 30],
    ['1k', 1000],
    ['1M', 1e6],
    ['2G', 2e9],
    ['1e3', 1000],
    ['1E3', 1000],
    ['1E', 1e18],
    ['12e-1', 1.2],
    ['+1', 1],
    ['-1', -1],
  ];
  for (const [text, value] of table) {
    it(`${text} is ${value}`, () => assert.equal(parseQuantity(text), value));
  }
  for (const bad of ['', 'abc', '1Kb', '1 Mi', 'Mi', '1.2.3', '1e', '0x10', '1mi']) {
    it(`"${bad}" is refused`, () => assert.throws(() => parseQuantity(bad), QuantityError));
  }
  it('millicores round up, whole values round up, printing as kubelet does', () => {
    assert.equal(milliCpu('250m'), 250);
    assert.equal(milliCpu('0.0001'), 1);
    assert.equal(milliCpu(2), 2000);
    assert.equal(wholeValue('1.5'), 2);
    assert.equal(wholeValue('64Mi'), 67108864);
    assert.equal(formatMilliCpu(2000), '2');
    assert.equal(formatMilliCpu(1500), '1500m');
    assert.equal(formatBytes(2048), '2Ki');
    assert.equal(formatBytes(1000), '1000');
  });
});

describe('what a pod runs under', () => {
  const pod = (runtimeClassName?: string): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p' },
    spec: { containers: [], ...(runtimeClassName ? { runtimeClassName } : {}) },
  });
  const stored = (name: string, handler: string): KubeObject => ({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name }, handler });

  it('a pod names its class; a pod stored before runtime classes ran as processes', () => {
    assert.equal(podRuntimeClassName(pod('runc')), 'runc');
    assert.equal(podRuntimeClassName(pod()), 'process');
  });

  it('resolves through the stored class, else the built-in of that name', () => {
    assert.deepEqual(resolvePodRuntime(pod('runc'), undefined, ['runc', 'process']), { ok: true, className: 'runc', handler: 'runc' });
    assert.deepEqual(resolvePodRuntime(pod('fast'), stored('fast', 'runc'), ['runc', 'process']), { ok: true, className: 'fast', handler: 'runc' });
    assert.deepEqual(resolvePodRuntime(pod(), undefined, ['process']), { ok: true, className: 'process', handler: 'process' });
  });

  it('refuses an unknown class, an unknown handler, and a handler the node lacks, saying which', () => {
    const missing = resolvePodRuntime(pod('kata'), undefined, ['runc', 'process']);
    assert.deepEqual(missing, { ok: false, className: 'kata', reason: 'RuntimeClassNotFound', message: 'RuntimeClass "kata" not found' });
    const foreign = resolvePodRuntime(pod('gvisor'), stored('gvisor', 'runsc'), ['runc', 'process']);
    assert.equal(foreign.ok, false);
    assert.match(foreign.ok ? '' : foreign.message, /needs the runtime handler "runsc", which this node does not have \(it has: runc, process\)/);
    const lacking = resolvePodRuntime(pod('runc'), undefined, ['process']);
    assert.equal(lacking.ok ? '' : lacking.reason, 'RuntimeHandlerNotSupported');
  });

  it('a node that reports no handlers (an older agent, a hand-made Node) runs processes only', () => {
    assert.deepEqual(nodeRuntimeHandlerNames({ status: {} }), ['process']);
    assert.deepEqual(nodeRuntimeHandlerNames({ status: { runtimeHandlers: [{ name: 'runc' }, { name: 'process' }] } }), ['runc', 'process']);
    assert.deepEqual(nodeRuntimeHandlerNames({ status: { runtimeHandlers: [] } }), []);
  });
});

describe('RuntimeClass validation', () => {
  const rc = (fields: Record<string, unknown>): KubeObject => ({ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'x' }, ...fields });
  it('accepts a full class', () => {
    assert.deepEqual(
      validateRuntimeClass(
        rc({
          handler: 'runc',
          overhead: { podFixed: { cpu: '100m', memory: '10Mi', 'ephemeral-storage': '1Gi' } },
          scheduling: { nodeSelector: { 'a/b': 'c' }, tolerations: [{ key: 'k', operator: 'Equal', value: 'v', effect: 'NoExecute', tolerationSeconds: 5 }, { operator: 'Exists' }] },
        }),
      ),
      [],
    );
  });
  it('names each problem by its field', () => {
    const fields = (fieldsOf: Record<string, unknown>): string[] => validateRuntimeClass(rc(fieldsOf)).map((c) => c.field ?? '');
    assert.deepEqual(fields({}), ['handler']);
    assert.deepEqual(fields({ handler: 'a'.repeat(64) }), ['handler']);
    assert.deepEqual(fields({ handler: 'runc', overhead: { podFixed: { cpu: '1x' } } }), ['overhead.podFixed[cpu]']);
    assert.deepEqual(fields({ handler: 'runc', scheduling: { tolerations: [{ key: 'k', effect: 'Sometimes' }] } }), ['scheduling.tolerations[0].effect']);
    assert.deepEqual(fields({ handler: 'runc', scheduling: { tolerations: [{ value: 'v' }] } }), ['scheduling.tolerations[0].operator']);
    assert.deepEqual(fields({ handler: 'runc', scheduling: { tolerations: [{ key: 'k', operator: 'Exists', tolerationSeconds: 3 }] } }), [
      'scheduling.tolerations[0].effect',
    ]);
    assert.deepEqual(fields({ handler: 'runc', scheduling: { nodeSelector: { a: 'has space' } } }), ['scheduling.nodeSelector[a]']);
  });
});

describe('pod admission in-process (the server’s own controllers meet it too)', () => {
  let api: InProcessApi;
  before(async () => {
    api = await inProcessApi();
  });
  after(async () => {
    await api.close();
  });
  const pod = (name: string, spec: Record<string, unknown> = {}): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: { containers: [{ name: 'c', image: 'busybox', command: ['sleep', '1'] }], ...spec },
  });

  it('a client without a configured default writes the setting’s default, runc, and built-ins resolve before they are stored', async () => {
    const bare = new LocalClient(api.store, api.registry);
    const created = await bare.create(PODS, 'default', pod('a'));
    assert.equal((created.spec as { runtimeClassName?: string }).runtimeClassName, 'runc');
    const configured = await api.client.create(PODS, 'default', pod('a2'));
    assert.equal((configured.spec as { runtimeClassName?: string }).runtimeClassName, 'process');
    const process = await api.client.create(PODS, 'default', pod('b', { runtimeClassName: 'process' }));
    assert.equal((process.spec as { runtimeClassName?: string }).runtimeClassName, 'process');
  });

  it('a stored class with overhead charges it; an unknown one is a 403 with the field', async () => {
    await api.client.create(RUNTIME_CLASSES, undefined, {
      apiVersion: 'node.k8s.io/v1',
      kind: 'RuntimeClass',
      metadata: { name: 'heavy' },
      handler: 'runc',
      overhead: { podFixed: { memory: '64Mi' } },
    });
    const created = await api.client.create(PODS, 'default', pod('c', { runtimeClassName: 'heavy' }));
    assert.deepEqual((created.spec as { overhead?: unknown }).overhead, { memory: '64Mi' });
    await assert.rejects(
      api.client.create(PODS, 'default', { ...pod('d', { runtimeClassName: 'nope' }), metadata: { generateName: 'rs-' } }),
      (error: unknown) =>
        error instanceof ApiError &&
        error.code === 403 &&
        error.message === 'pods "rs-" is forbidden: pod rejected: RuntimeClass "nope" not found' &&
        error.details?.causes?.[0]?.field === 'spec.runtimeClassName',
    );
  });
});

describe('node authorization of runtime classes', () => {
  const nobody: Authorizer = { authorize: () => ({ allowed: false, reason: 'rbac says no' }) };
  const node = { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };
  const attrs = (verb: string, name?: string) => ({ verb, group: 'node.k8s.io', resource: 'runtimeclasses', ...(name ? { name } : {}) });
  it('a node may read RuntimeClasses, and write none', () => {
    const authorizer = new NodeAuthorizer(nobody);
    for (const verb of ['get', 'list', 'watch']) assert.equal(authorizer.authorize(node, attrs(verb, verb === 'get' ? 'runc' : undefined)).allowed, true, verb);
    for (const verb of ['create', 'update', 'patch', 'delete']) assert.equal(authorizer.authorize(node, attrs(verb, 'runc')).allowed, false, verb);
  });
});
