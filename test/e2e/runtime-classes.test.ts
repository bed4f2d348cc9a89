import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * node.k8s.io/v1 RuntimeClass end to end on a real server: the built-in classes, kubectl 1.32 and
 * 1.20 `get runtimeclass`, the official JavaScript client, validation, and what pods get at
 * admission (the cluster's default class written in, a 403 naming the field for an unknown
 * class, the class's overhead, nodeSelector and tolerations), for pods created directly and by a
 * ReplicaSet (a FailedCreate event).
 */

interface Status {
  code: number;
  reason: string;
  message: string;
  details?: { causes?: { reason: string; field?: string; message: string }[] };
}

interface PodObject {
  metadata: { name: string };
  spec: {
    runtimeClassName?: string;
    overhead?: Record<string, string>;
    nodeSelector?: Record<string, string>;
    tolerations?: Record<string, unknown>[];
  };
}

function pod(name: string, spec: Record<string, unknown> = {}): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: { containers: [{ name: 'c', image: 'busybox', command: ['sleep', '3600'] }], ...spec },
  };
}

function runtimeClass(name: string, fields: Record<string, unknown>): object {
  return { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name }, ...fields };
}

describe('RuntimeClass', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;

  before(async () => {
    work = tempDir('runtime-classes');
    // The helpers' default class is `process`; no agent: admission and the API alone.
    server = await startServer();
  });

  after(async () => {
    await cleanup(work);
  });

  it('the built-in classes runc and process exist from the start, each with its own handler, and cannot be deleted', async () => {
    const list = await request(server, 'GET', '/apis/node.k8s.io/v1/runtimeclasses');
    assert.equal(list.status, 200, list.text);
    const items = (list.json as { kind: string; items: { metadata: { name: string }; handler: string }[] }).items;
    assert.deepEqual(
      items.map((c) => [c.metadata.name, c.handler]),
      [
        ['process', 'process'],
        ['runc', 'runc'],
      ],
    );
    for (const name of ['runc', 'process']) {
      const refused = await request(server, 'DELETE', `/apis/node.k8s.io/v1/runtimeclasses/${name}`);
      assert.equal(refused.status, 403, refused.text);
      assert.match((refused.json as Status).message, new RegExp(`runtimeclasses "${name}" is forbidden: this runtimeclass may not be deleted`));
    }
  });

  it('discovery lists runtimeclasses in node.k8s.io/v1, cluster-scoped', async () => {
    const res = await request(server, 'GET', '/apis/node.k8s.io/v1');
    assert.equal(res.status, 200, res.text);
    const resource = (res.json as { resources: { name: string; namespaced: boolean; kind: string; verbs: string[] }[] }).resources.find(
      (r) => r.name === 'runtimeclasses',
    );
    assert.ok(resource, res.text);
    assert.equal(resource.namespaced, false);
    assert.equal(resource.kind, 'RuntimeClass');
    assert.ok(resource.verbs.includes('list') && resource.verbs.includes('create'));
  });

  for (const [index, client] of kubectlClients().entries()) {
    it(`${client.name}: get runtimeclass prints NAME, HANDLER, AGE; apply creates one`, async () => {
      const kubectl = (args: string[], input?: string) =>
        runKubectl(client, server.kubeconfig, path.join(work, `cache-${index}`), args, input === undefined ? {} : { input });
      const name = `gvisor-${index}`;
      const manifest = JSON.stringify(runtimeClass(name, { handler: 'runsc', overhead: { podFixed: { cpu: '250m', memory: '120Mi' } } }));
      const applied = await kubectl(['apply', '-f', '-'], manifest);
      assert.equal(applied.code, 0, applied.stderr);
      assert.match(applied.stdout, new RegExp(`runtimeclass.node.k8s.io/${name} created`));
      const got = await kubectl(['get', 'runtimeclass']);
      assert.equal(got.code, 0, got.stderr);
      const table = parseTable(got.stdout);
      assert.deepEqual(table.headers, ['NAME', 'HANDLER', 'AGE']);
      assert.equal(rowNamed(table, 'runc').HANDLER, 'runc');
      assert.equal(rowNamed(table, 'process').HANDLER, 'process');
      assert.equal(rowNamed(table, name).HANDLER, 'runsc');
      const yaml = await kubectl(['get', 'runtimeclasses.node.k8s.io', name, '-o', 'jsonpath={.overhead.podFixed.memory}']);
      assert.equal(yaml.code, 0, yaml.stderr);
      assert.equal(yaml.stdout, '120Mi');
      const deleted = await kubectl(['delete', 'runtimeclass', name]);
      assert.equal(deleted.code, 0, deleted.stderr);
    });
  }

  it('@kubernetes/client-node NodeV1Api lists and reads them', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(server.kubeconfig);
    const api = kc.makeApiClient(k8s.NodeV1Api);
    const list = await api.listRuntimeClass();
    assert.deepEqual(list.items.map((c) => c.metadata?.name), ['process', 'runc']);
    const runc = await api.readRuntimeClass({ name: 'runc' });
    assert.equal(runc.handler, 'runc');
  });

  it('validation: handler required and a DNS label, overhead quantities, tolerations; handler immutable', async () => {
    const create = (body: object) => request(server, 'POST', '/apis/node.k8s.io/v1/runtimeclasses', { body });
    const cases: [object, RegExp][] = [
      [runtimeClass('no-handler', {}), /handler: Required value/],
      [runtimeClass('bad-handler', { handler: 'Not_A_Label' }), /handler: Invalid value: "Not_A_Label": a lowercase RFC 1123 label/],
      [runtimeClass('negative', { handler: 'runc', overhead: { podFixed: { cpu: '-1' } } }), /overhead.podFixed\[cpu\]: Invalid value: "-1": must be greater than or equal to 0/],
      [runtimeClass('garbage', { handler: 'runc', overhead: { podFixed: { memory: 'lots' } } }), /overhead.podFixed\[memory\]: Invalid value: "lots": quantities must match/],
      [runtimeClass('gpus', { handler: 'runc', overhead: { podFixed: { 'nvidia.com/gpu': '1' } } }), /overhead.podFixed\[nvidia.com\/gpu\]: Unsupported value/],
      [
        runtimeClass('tol', { handler: 'runc', scheduling: { tolerations: [{ key: 'k', operator: 'Exists', value: 'v' }] } }),
        /scheduling.tolerations\[0\].operator: Invalid value: "v": value must be empty when `operator` is 'Exists'/,
      ],
      [runtimeClass('sel', { handler: 'runc', scheduling: { nodeSelector: { 'bad key!': 'x' } } }), /scheduling.nodeSelector: Invalid value: "bad key!"/],
    ];
    for (const [body, message] of cases) {
      const res = await create(body);
      assert.equal(res.status, 422, res.text);
      assert.match((res.json as Status).message, message);
    }
    const ok = await create(runtimeClass('fixed', { handler: 'runc' }));
    assert.equal(ok.status, 201, ok.text);
    const changed = await request(server, 'PATCH', '/apis/node.k8s.io/v1/runtimeclasses/fixed', {
      body: { handler: 'process' },
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(changed.status, 422, changed.text);
    assert.match((changed.json as Status).message, /handler: Invalid value: "process": field is immutable/);
    assert.equal((await request(server, 'DELETE', '/apis/node.k8s.io/v1/runtimeclasses/fixed')).status, 200);
  });

  it('a pod without runtimeClassName gets the cluster default written in; its class is immutable afterwards', async () => {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body: pod('defaulted') });
    assert.equal(res.status, 201, res.text);
    assert.equal((res.json as PodObject).spec.runtimeClassName, 'process');
    const changed = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/defaulted', {
      body: { spec: { runtimeClassName: 'runc' } },
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(changed.status, 422, changed.text);
    assert.match((changed.json as Status).message, /spec.runtimeClassName: Invalid value: "runc": field is immutable/);
    const named = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body: pod('named', { runtimeClassName: 'runc' }) });
    assert.equal(named.status, 201, named.text);
    assert.equal((named.json as PodObject).spec.runtimeClassName, 'runc');
  });

  it('an unknown class is a 403 naming spec.runtimeClassName, through kubectl too; a bad name is a 422', async () => {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body: pod('lost', { runtimeClassName: 'kata' }) });
    assert.equal(res.status, 403, res.text);
    const status = res.json as Status;
    assert.equal(status.message, 'pods "lost" is forbidden: pod rejected: RuntimeClass "kata" not found');
    assert.deepEqual(status.details?.causes, [{ reason: 'FieldValueNotFound', message: 'Not found: "kata"', field: 'spec.runtimeClassName' }]);
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/default/pods/lost')).status, 404);

    const [client] = kubectlClients();
    const manifest = path.join(work, 'lost.json');
    fs.writeFileSync(manifest, JSON.stringify(pod('lost', { runtimeClassName: 'kata' })));
    const created = await runKubectl(client!, server.kubeconfig, path.join(work, 'cache-0'), ['create', '-f', manifest]);
    assert.notEqual(created.code, 0);
    assert.match(created.stderr, /pods "lost" is forbidden: pod rejected: RuntimeClass "kata" not found/);

    const bad = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body: pod('bad', { runtimeClassName: 'Not/A/Name' }) });
    assert.equal(bad.status, 422, bad.text);
    assert.match((bad.json as Status).message, /spec.runtimeClassName: Invalid value: "Not\/A\/Name"/);
  });

  it("pods get the class's overhead, nodeSelector and tolerations; a conflicting pod is refused", async () => {
    const created = await request(server, 'POST', '/apis/node.k8s.io/v1/runtimeclasses', {
      body: runtimeClass('pinned', {
        handler: 'runc',
        overhead: { podFixed: { cpu: '100m', memory: '32Mi' } },
        scheduling: { nodeSelector: { 'runtime/sandboxed': 'yes' }, tolerations: [{ key: 'sandbox', operator: 'Exists', effect: 'NoSchedule' }] },
      }),
    });
    assert.equal(created.status, 201, created.text);
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: pod('overhead', { runtimeClassName: 'pinned', nodeSelector: { zone: 'a' }, tolerations: [{ key: 'other', operator: 'Exists' }] }),
    });
    assert.equal(res.status, 201, res.text);
    const spec = (res.json as PodObject).spec;
    assert.deepEqual(spec.overhead, { cpu: '100m', memory: '32Mi' });
    assert.deepEqual(spec.nodeSelector, { zone: 'a', 'runtime/sandboxed': 'yes' });
    assert.deepEqual(spec.tolerations, [
      { key: 'other', operator: 'Exists' },
      { key: 'sandbox', operator: 'Exists', effect: 'NoSchedule' },
    ]);

    const conflicting = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: pod('conflict', { runtimeClassName: 'pinned', nodeSelector: { 'runtime/sandboxed': 'no' } }),
    });
    assert.equal(conflicting.status, 403, conflicting.text);
    assert.match((conflicting.json as Status).message, /conflict: runtimeClass.scheduling.nodeSelector\[runtime\/sandboxed\] = yes; pod.spec.nodeSelector\[runtime\/sandboxed\] = no/);
    const ownOverhead = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: pod('own-overhead', { runtimeClassName: 'pinned', overhead: { cpu: '1' } }),
    });
    assert.equal(ownOverhead.status, 403, ownOverhead.text);
    assert.match((ownOverhead.json as Status).message, /Pod's Overhead doesn't match RuntimeClass's defined Overhead/);
    const noClassOverhead = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: pod('stray-overhead', { runtimeClassName: 'runc', overhead: { cpu: '1' } }),
    });
    assert.equal(noClassOverhead.status, 403, noClassOverhead.text);
    assert.deepEqual((noClassOverhead.json as Status).details?.causes?.map((c) => c.field), ['spec.overhead']);
  });

  it('a Deployment naming an unknown class is accepted; its ReplicaSet reports FailedCreate saying why', async () => {
    const res = await request(server, 'POST', '/apis/apps/v1/namespaces/default/deployments', {
      body: {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: 'ghost' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'ghost' } },
          template: {
            metadata: { labels: { app: 'ghost' } },
            spec: { runtimeClassName: 'kata', containers: [{ name: 'c', image: 'busybox', command: ['sleep', '1'] }] },
          },
        },
      },
    });
    assert.equal(res.status, 201, res.text);
    const message = await eventually(async () => {
      const events = await request(server, 'GET', '/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedCreate');
      const items = (events.json as { items: { message: string }[] }).items;
      return items.find((e) => e.message.includes('RuntimeClass'))?.message;
    }, 'a FailedCreate event');
    assert.match(message, /pod rejected: RuntimeClass "kata" not found/);
  });

  it('a server with --default-runtime-class runc writes runc into pods; an unknown default is refused with its name', async () => {
    const runcServer = await startServer({ args: ['--default-runtime-class', 'runc'] });
    const res = await request(runcServer, 'POST', '/api/v1/namespaces/default/pods', { body: pod('p') });
    assert.equal(res.status, 201, res.text);
    assert.equal((res.json as PodObject).spec.runtimeClassName, 'runc');
    await runcServer.stop('SIGKILL');

    const oddServer = await startServer({ args: ['--default-runtime-class', 'missing'] });
    const refused = await request(oddServer, 'POST', '/api/v1/namespaces/default/pods', { body: pod('p') });
    assert.equal(refused.status, 403, refused.text);
    assert.match((refused.json as Status).message, /RuntimeClass "missing" not found \(the cluster's default-runtime-class/);
    await oddServer.stop('SIGKILL');
  });
});
