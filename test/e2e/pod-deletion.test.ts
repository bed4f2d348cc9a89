import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Authorizer, NonResourceAttributes, RequestAttributes } from '../../src/apiserver/auth.js';
import { ApiHandler, type PodLogParams } from '../../src/apiserver/handler.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { OpenApiDocuments } from '../../src/apiserver/openapi.js';
import { podSummary, POD_PRINTER } from '../../src/apiserver/kinds/pod-printer.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { HttpClient } from '../../src/client/http.js';
import { LocalClient } from '../../src/client/local.js';
import { PODS, type WatchEventType } from '../../src/client/types.js';
import { SqliteDatastore } from '../../src/datastore/sqlite.js';
import { createLogger } from '../../src/logging/logger.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { type ApiResponse, type ServerProcess, cleanup, eventually, request, startServer, tempDir } from '../helpers/server.js';

/**
 * Pods as kube-apiserver treats them: graceful deletion of bound pods (through DELETE, eviction,
 * kubectl, HttpClient and LocalClient alike), nodeName set once, kubectl's STATUS column, and the
 * pods/log hook.
 */

type Obj = KubeObject & { spec?: Record<string, unknown>; status?: Record<string, unknown> };

function pod(name: string, spec: Record<string, unknown> = {}, metadata: Record<string, unknown> = {}): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, ...metadata },
    spec: { containers: [{ name: 'main', command: ['sleep', '3600'] }], ...spec },
  };
}

function expectStatus(res: ApiResponse, status: number, what: string): Obj {
  assert.equal(res.status, status, `${what}: expected HTTP ${status}, got ${res.status}: ${res.text}`);
  return res.json as Obj;
}

/**
 * The deletionTimestamp is the moment of the delete plus the grace period, written in whole
 * seconds (rounded down). The delete happened between `from` (before the request was sent) and
 * now (after its answer), so that bracket, not a tolerance, bounds it: however slow the request.
 */
function assertDeadline(timestamp: string | undefined, graceSeconds: number, from: number): void {
  const to = Date.now();
  assert.ok(timestamp, 'a deletionTimestamp');
  const at = Date.parse(timestamp);
  const grace = graceSeconds * 1000;
  assert.ok(
    at >= Math.floor((from + grace) / 1000) * 1000 && at <= to + grace,
    `deletionTimestamp ${timestamp} is ${graceSeconds}s after the delete, made between ${new Date(from).toISOString()} and ${new Date(to).toISOString()}`,
  );
}

/** kubectl's protobuf DeleteOptions body (k8s\0 + runtime.Unknown), for small grace periods. */
function protobufDeleteOptions(graceSeconds: number): Buffer {
  const text = (field: number, value: string): Buffer =>
    Buffer.concat([Buffer.from([(field << 3) | 2, Buffer.byteLength(value)]), Buffer.from(value)]);
  const typeMeta = Buffer.concat([text(1, 'v1'), text(2, 'DeleteOptions')]);
  const raw = Buffer.concat([Buffer.from([0x08, graceSeconds]), text(4, 'Background')]);
  const unknown = Buffer.concat([Buffer.from([0x0a, typeMeta.length]), typeMeta, Buffer.from([0x12, raw.length]), raw]);
  return Buffer.concat([Buffer.from('k8s\0', 'latin1'), unknown]);
}

/** A raw watch stream: every event, in order. */
function watchPods(server: ServerProcess, ns: string, name: string, resourceVersion: string): { events: { type: string; object: Obj }[]; stop(): void } {
  const events: { type: string; object: Obj }[] = [];
  const req = https.request({
    host: '127.0.0.1',
    port: server.port,
    path: `/api/v1/namespaces/${ns}/pods?watch=true&fieldSelector=metadata.name%3D${name}&resourceVersion=${resourceVersion}`,
    ca: server.caPem,
    headers: { Authorization: `Bearer ${server.token}`, Accept: 'application/json' },
  });
  req.on('response', (res) => {
    let buffered = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      buffered += chunk;
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        if (line.trim()) events.push(JSON.parse(line) as { type: string; object: Obj });
      }
    });
  });
  req.on('error', () => undefined);
  req.end();
  return { events, stop: () => req.destroy() };
}

describe('graceful pod deletion on a real server', () => {
  let server: ServerProcess;
  const ns = 'default';
  const pods = `/api/v1/namespaces/${ns}/pods`;
  const dirs: string[] = [];

  const create = async (body: Obj): Promise<Obj> => expectStatus(await request(server, 'POST', pods, { body }), 201, `create ${body.metadata.name}`);
  const del = async (name: string, body?: unknown): Promise<ApiResponse> =>
    request(server, 'DELETE', `${pods}/${name}`, body === undefined ? {} : { body });
  const getStatus = async (name: string): Promise<number> => (await request(server, 'GET', `${pods}/${name}`)).status;
  const patch = async (name: string, body: unknown, subresource = ''): Promise<ApiResponse> =>
    request(server, 'PATCH', `${pods}/${name}${subresource}`, {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      rawBody: JSON.stringify(body),
    });

  before(async () => {
    server = await startServer({ handMadeNodes: true });
    // A node with no agent behind it that the lifecycle controller leaves alone for the test.
    expectStatus(
      await request(server, 'POST', '/api/v1/nodes', {
        body: {
          metadata: { name: 'node-a' },
          status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', lastHeartbeatTime: new Date().toISOString() }] },
        },
      }),
      201,
      'node-a',
    );
  });

  after(async () => {
    await cleanup(...dirs);
  });

  it('a bound pod gets a deletionTimestamp and stays; only a shorter grace changes it; grace 0 removes it', async () => {
    const created = await create(pod('graceful', { nodeName: 'node-a', terminationGracePeriodSeconds: 45 }));
    const watch = watchPods(server, ns, 'graceful', created.metadata.resourceVersion!);
    try {
      const started = Date.now();
      const first = expectStatus(await del('graceful'), 200, 'first delete');
      assertDeadline(first.metadata.deletionTimestamp, 45, started);
      assert.equal(first.metadata.deletionGracePeriodSeconds, 45);
      assert.equal(await getStatus('graceful'), 200, 'the pod stays while its node stops it');

      // A longer or unset grace changes nothing.
      const again = expectStatus(await del('graceful', { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Background' }), 200, 'second delete');
      assert.equal(again.metadata.deletionTimestamp, first.metadata.deletionTimestamp);
      const longer = expectStatus(await del('graceful', { gracePeriodSeconds: 60 }), 200, 'longer grace');
      assert.equal(longer.metadata.deletionTimestamp, first.metadata.deletionTimestamp);
      assert.equal(longer.metadata.deletionGracePeriodSeconds, 45);

      const shorter = expectStatus(await del('graceful', { gracePeriodSeconds: 10 }), 200, 'shorter grace');
      assert.equal(shorter.metadata.deletionGracePeriodSeconds, 10);
      assert.equal(Date.parse(shorter.metadata.deletionTimestamp!), Date.parse(first.metadata.deletionTimestamp!) - 35_000);

      // While it goes away: spec frozen, status and metadata still writable (its agent reports).
      const specChange = expectStatus(await patch('graceful', { spec: { activeDeadlineSeconds: 5 } }), 422, 'spec change');
      assert.match(String(specChange.message), /being deleted/);
      const status = expectStatus(await patch('graceful', { status: { phase: 'Running' } }, '/status'), 200, 'status write');
      assert.equal(status.metadata.deletionGracePeriodSeconds, 10);
      const labelled = expectStatus(await patch('graceful', { metadata: { labels: { stopping: 'yes' }, deletionGracePeriodSeconds: 99 } }), 200, 'label');
      assert.equal(labelled.metadata.deletionGracePeriodSeconds, 10, 'the grace period is the server\'s');
      assert.equal(labelled.metadata.deletionTimestamp, shorter.metadata.deletionTimestamp);

      expectStatus(await del('graceful', { gracePeriodSeconds: 0 }), 200, 'final delete');
      assert.equal(await getStatus('graceful'), 404);

      await eventually(() => watch.events.some((e) => e.type === 'DELETED'), 'the DELETED event');
      const types = watch.events.map((e) => e.type);
      const marked = watch.events.findIndex((e) => e.object.metadata.deletionTimestamp);
      assert.ok(marked >= 0 && watch.events[marked]!.type === 'MODIFIED', `the deletionTimestamp arrives as MODIFIED: ${types.join(',')}`);
      assert.equal(types.at(-1), 'DELETED');
      assert.ok(types.slice(0, -1).every((t) => t === 'MODIFIED'), `events: ${types.join(',')}`);
    } finally {
      watch.stop();
    }
  });

  it('takes the grace from DeleteOptions, else from the pod (30 by default)', async () => {
    await create(pod('from-options', { nodeName: 'node-a' }));
    let started = Date.now();
    const fromOptions = expectStatus(await del('from-options', { gracePeriodSeconds: 5 }), 200, 'delete');
    assertDeadline(fromOptions.metadata.deletionTimestamp, 5, started);

    await create(pod('from-default', { nodeName: 'node-a' }));
    started = Date.now();
    const fromDefault = expectStatus(await del('from-default'), 200, 'delete');
    assertDeadline(fromDefault.metadata.deletionTimestamp, 30, started);
    assert.equal(fromDefault.metadata.deletionGracePeriodSeconds, 30);
    // The query parameter works as the body does.
    expectStatus(await request(server, 'DELETE', `${pods}/from-default?gracePeriodSeconds=0`), 200, 'query grace 0');
    expectStatus(await del('from-options', { gracePeriodSeconds: 0 }), 200, 'grace 0');
    assert.equal(await getStatus('from-default'), 404);
    assert.equal(await getStatus('from-options'), 404);
  });

  it('reads the grace period from a protobuf DeleteOptions body', async () => {
    await create(pod('proto', { nodeName: 'node-a' }));
    const send = (grace: number): Promise<ApiResponse> =>
      request(server, 'DELETE', `${pods}/proto`, {
        headers: { 'Content-Type': 'application/vnd.kubernetes.protobuf' },
        rawBody: protobufDeleteOptions(grace),
      });
    const marked = expectStatus(await send(3), 200, 'protobuf grace 3');
    assert.equal(marked.metadata.deletionGracePeriodSeconds, 3);
    expectStatus(await send(0), 200, 'protobuf grace 0');
    assert.equal(await getStatus('proto'), 404);
  });

  it('removes unbound and finished pods at once', async () => {
    // Another scheduler's pod: Drover's scheduler leaves it unbound.
    await create(pod('unbound', { schedulerName: 'manual' }));
    const gone = expectStatus(await del('unbound'), 200, 'delete unbound');
    assert.equal(gone.metadata.deletionTimestamp, undefined);
    assert.equal(await getStatus('unbound'), 404);

    await create(pod('finished', { nodeName: 'node-a' }));
    expectStatus(await patch('finished', { status: { phase: 'Succeeded' } }, '/status'), 200, 'finish');
    expectStatus(await del('finished'), 200, 'delete finished');
    assert.equal(await getStatus('finished'), 404);
  });

  it('eviction (policy/v1 and v1beta1) goes the graceful way and honours its grace period', async () => {
    for (const apiVersion of ['policy/v1', 'policy/v1beta1']) {
      const name = `evicted-${apiVersion.split('/')[1]}`;
      await create(pod(name, { nodeName: 'node-a', terminationGracePeriodSeconds: 20 }));
      const started = Date.now();
      const evicted = expectStatus(
        await request(server, 'POST', `${pods}/${name}/eviction`, {
          body: { kind: 'Eviction', apiVersion, metadata: { name, namespace: ns }, deleteOptions: {} },
        }),
        201,
        `evict with ${apiVersion}`,
      );
      assert.equal(evicted.status as unknown, 'Success');
      const terminating = expectStatus(await request(server, 'GET', `${pods}/${name}`), 200, 'still there');
      assertDeadline(terminating.metadata.deletionTimestamp, 20, started);

      expectStatus(
        await request(server, 'POST', `${pods}/${name}/eviction`, {
          body: { kind: 'Eviction', apiVersion, metadata: { name }, deleteOptions: { gracePeriodSeconds: 0 } },
        }),
        201,
        'evict with grace 0',
      );
      assert.equal(await getStatus(name), 404);
    }
  });

  it('spec.nodeName is set once', async () => {
    await create(pod('bind-once', { schedulerName: 'manual' }));
    const bound = expectStatus(await patch('bind-once', { spec: { nodeName: 'node-a' } }), 200, 'bind');
    assert.equal(bound.spec!.nodeName, 'node-a');
    const moved = expectStatus(await patch('bind-once', { spec: { nodeName: 'node-b' } }), 422, 'move');
    assert.match(String(moved.message), /spec\.nodeName: Invalid value: "node-b": field is immutable/);
    expectStatus(await patch('bind-once', { spec: { nodeName: null } }), 422, 'unbind');
    expectStatus(await del('bind-once', { gracePeriodSeconds: 0 }), 200, 'cleanup');
  });

  for (const client of kubectlClients()) {
    it(`${client.name}: delete --wait=false shows Terminating; delete --force --grace-period=0 removes the pod`, async () => {
      const work = tempDir('pod-deletion');
      dirs.push(work);
      const kubectl = (args: string[]) => runKubectl(client, server.kubeconfig, tempDir('pod-deletion-cache'), args);
      const name = `forced-${client.legacy ? 'old' : 'new'}`;
      await create(pod(name, { nodeName: 'node-a' }));

      let result = await kubectl(['delete', 'pod', name, '--wait=false']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout.trim(), `pod "${name}" deleted`);
      result = await kubectl(['get', 'pod', name, '--no-headers']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout.trim().split(/\s+/)[2], 'Terminating', result.stdout);

      result = await kubectl(['delete', 'pod', name, '--force', '--grace-period=0']);
      assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
      assert.match(result.stdout, new RegExp(`pod "${name}" force deleted`));
      assert.equal(await getStatus(name), 404);
    });
  }

  it('HttpClient.delete sends DeleteOptions: graceful first, gone with grace 0', async () => {
    const client = new HttpClient({ server: server.url, caPem: server.caPem, token: server.token });
    try {
      await create(pod('via-http', { nodeName: 'node-a' }));
      await client.delete(PODS, ns, 'via-http');
      const terminating = await client.get(PODS, ns, 'via-http');
      assert.ok(terminating?.metadata.deletionTimestamp);
      await assert.rejects(
        client.delete(PODS, ns, 'via-http', { gracePeriodSeconds: 0, preconditions: { uid: 'not-this-one' } }),
        /Precondition failed/,
      );
      await client.delete(PODS, ns, 'via-http', { gracePeriodSeconds: 0, preconditions: { uid: terminating.metadata.uid! } });
      assert.equal(await client.get(PODS, ns, 'via-http'), undefined);
    } finally {
      client.close();
    }
  });
});

describe('graceful deletion in the object store (LocalClient)', () => {
  let dir: string;
  let datastore: SqliteDatastore;
  let client: LocalClient;
  const registry = new ResourceRegistry();

  before(async () => {
    dir = tempDir('pod-deletion-store');
    datastore = new SqliteDatastore(path.join(dir, 'state.db'));
    const store = new ObjectStore(datastore);
    // As the test servers: pods without a runtimeClassName are processes.
    client = new LocalClient(store, registry, { defaultRuntimeClass: 'process' });
    await store.create(registry.lookup('', 'v1', 'namespaces')!, undefined, { metadata: { name: 'default' } });
    // What a server's ServiceAccount controller makes: pods are admitted only with their account.
    await store.create(registry.lookup('', 'v1', 'serviceaccounts')!, 'default', { metadata: { name: 'default' } });
  });

  after(async () => {
    await datastore.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('behaves as over HTTP, finalizers included; watchers see MODIFIED then DELETED', async () => {
    const created = await client.create(PODS, 'default', pod('local', { nodeName: 'node-a', terminationGracePeriodSeconds: 7 }, { finalizers: ['example.com/hold'] }));
    const events: [WatchEventType, KubeObject][] = [];
    const watch = client.watch(PODS, 'default', created.metadata.resourceVersion!, {}, {
      onEvent: (type, obj) => events.push([type, obj]),
      onClose: () => undefined,
    });
    try {
      const started = Date.now();
      await client.delete(PODS, 'default', 'local');
      const marked = await client.get(PODS, 'default', 'local');
      assertDeadline(marked?.metadata.deletionTimestamp, 7, started);
      assert.equal(marked?.metadata.deletionGracePeriodSeconds, 7);

      // The finalizer goes first: the grace period still holds the pod.
      await client.patch(PODS, 'default', 'local', 'merge', { metadata: { finalizers: null } });
      assert.ok(await client.get(PODS, 'default', 'local'), 'the grace period holds the pod without finalizers');

      await client.delete(PODS, 'default', 'local', { gracePeriodSeconds: 0 });
      assert.equal(await client.get(PODS, 'default', 'local'), undefined);
      await eventually(() => events.some(([type]) => type === 'DELETED'), 'the DELETED event');
      assert.deepEqual(events.map(([type]) => type), ['MODIFIED', 'MODIFIED', 'DELETED']);

      // A finalizer outlives grace 0: the pod goes when the finalizer does.
      await client.create(PODS, 'default', pod('held', { nodeName: 'node-a' }, { finalizers: ['example.com/hold'] }));
      await client.delete(PODS, 'default', 'held', { gracePeriodSeconds: 0 });
      const held = await client.get(PODS, 'default', 'held');
      assert.equal(held?.metadata.deletionGracePeriodSeconds, 0);
      await client.patch(PODS, 'default', 'held', 'merge', { metadata: { finalizers: null } });
      assert.equal(await client.get(PODS, 'default', 'held'), undefined);
    } finally {
      watch.stop();
    }
  });
});

describe('pods/log', () => {
  let dir: string;
  let datastore: SqliteDatastore;
  let server: http.Server;
  let port: number;
  let withHook = true;
  const authorized: Array<RequestAttributes | NonResourceAttributes> = [];
  const calls: { pod: string; params: PodLogParams }[] = [];

  before(async () => {
    dir = tempDir('pod-logs');
    datastore = new SqliteDatastore(path.join(dir, 'state.db'));
    const registry = new ResourceRegistry();
    const store = new ObjectStore(datastore);
    await store.create(registry.lookup('', 'v1', 'namespaces')!, undefined, { metadata: { name: 'default' } });
    const podsDef = registry.lookup('', 'v1', 'pods')!;
    await store.create(podsDef, 'default', pod('one'));
    await store.create(podsDef, 'default', {
      ...pod('two'),
      spec: {
        initContainers: [{ name: 'setup', command: ['true'] }],
        containers: [
          { name: 'a', command: ['sleep', '1'] },
          { name: 'b', command: ['sleep', '1'] },
        ],
      },
    });
    const authorizer: Authorizer = {
      authorize: (_user, attributes) => {
        authorized.push(attributes);
        return { allowed: true };
      },
    };
    const handler = new ApiHandler({
      store,
      registry,
      openapi: new OpenApiDocuments(registry),
      // Anonymous is fine here: plain HTTP on loopback, and kubectl sends no credentials over it.
      authenticator: { authenticate: () => ({ name: 'tester', groups: ['system:masters'] }) },
      authorizer,
      logger: createLogger('silent'),
      version: { major: '1', minor: '32', gitVersion: 'v1.32.0', gitCommit: '', gitTreeState: 'clean', buildDate: '', goVersion: '', compiler: 'gc', platform: 'linux/amd64' },
      caCertificatePem: '',
      readiness: async () => undefined,
      podLogs: async (p, params, _req, res) => {
        if (!withHook) throw new Error('unreachable');
        calls.push({ pod: p.metadata.name!, params });
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end(`log of ${p.metadata.name}/${params.container}\n`);
      },
    });
    server = http.createServer((req, res) => {
      if (!withHook) {
        // The same handler without the hook.
        noHook.handle(req, res);
        return;
      }
      handler.handle(req, res);
    });
    const noHook = new ApiHandler({
      store,
      registry,
      openapi: new OpenApiDocuments(registry),
      authenticator: { authenticate: () => ({ name: 'tester', groups: [] }) },
      authorizer,
      logger: createLogger('silent'),
      version: { major: '1', minor: '32', gitVersion: 'v1.32.0', gitCommit: '', gitTreeState: 'clean', buildDate: '', goVersion: '', compiler: 'gc', platform: 'linux/amd64' },
      caCertificatePem: '',
      readiness: async () => undefined,
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await datastore.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const get = (urlPath: string): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: urlPath }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        })
        .on('error', reject);
    });

  it('is in discovery as pods/log (get)', async () => {
    const list = JSON.parse((await get('/api/v1')).text) as { resources: { name: string; verbs: string[]; kind: string }[] };
    const log = list.resources.find((r) => r.name === 'pods/log');
    assert.deepEqual({ verbs: log?.verbs, kind: log?.kind }, { verbs: ['get'], kind: 'Pod' });
  });

  it('passes the pod and the parameters to the hook after authorization', async () => {
    calls.length = 0;
    authorized.length = 0;
    let res = await get('/api/v1/namespaces/default/pods/one/log');
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'log of one/main\n', 'one container: the default');
    assert.deepEqual(authorized.at(-1), { verb: 'get', group: '', resource: 'pods', subresource: 'log', namespace: 'default', name: 'one' });
    res = await get('/api/v1/namespaces/default/pods/two/log?container=b&follow=true&tailLines=10&previous=true&limitBytes=100');
    assert.equal(res.text, 'log of two/b\n');
    assert.deepEqual(calls.at(-1), { pod: 'two', params: { container: 'b', follow: true, previous: true, tailLines: 10, limitBytes: 100 } });
    assert.deepEqual(calls[0]!.params, { container: 'main', follow: false, previous: false });
  });

  it('refuses what kube-apiserver refuses', async () => {
    let res = await get('/api/v1/namespaces/default/pods/two/log');
    assert.equal(res.status, 400);
    assert.match(res.text, /a container name must be specified for pod two, choose one of: \[a b\] or one of the init containers: \[setup\]/);
    res = await get('/api/v1/namespaces/default/pods/two/log?container=nope');
    assert.equal(res.status, 400);
    assert.match(res.text, /container nope is not valid for pod two/);
    res = await get('/api/v1/namespaces/default/pods/missing/log');
    assert.equal(res.status, 404);
    assert.match(res.text, /pods \\"missing\\" not found/);
    res = await get('/api/v1/namespaces/default/pods/one/log?tailLines=-1');
    assert.equal(res.status, 400);
    withHook = false;
    try {
      res = await get('/api/v1/namespaces/default/pods/one/log');
      assert.equal(res.status, 404, 'no hook, no logs');
    } finally {
      withHook = true;
    }
  });

  for (const client of kubectlClients()) {
    it(`${client.name}: kubectl logs reaches the hook`, async () => {
      const kubeconfig = path.join(dir, `kubeconfig-${client.legacy ? 'old' : 'new'}.yaml`);
      fs.writeFileSync(
        kubeconfig,
        `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:${port}
contexts:
- name: c
  context:
    cluster: c
    user: u
    namespace: default
current-context: c
users:
- name: u
  user: {}
`,
      );
      calls.length = 0;
      let result = await runKubectl(client, kubeconfig, tempDir('pod-logs-cache'), ['logs', 'one', '--tail=5']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, 'log of one/main\n');
      assert.equal(calls.at(-1)?.params.tailLines, 5);
      result = await runKubectl(client, kubeconfig, tempDir('pod-logs-cache'), ['logs', 'two', '-c', 'a']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, 'log of two/a\n');
    });
  }
});

describe('the pod printer follows kubectl', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  const base = (status: Record<string, unknown>, extra: Partial<Obj> = {}): Obj => ({
    metadata: { name: 'p', creationTimestamp: '2026-11-30T11:00:00Z', ...(extra.metadata ?? {}) },
    spec: { containers: [{ name: 'main' }, { name: 'side' }], ...(extra.spec ?? {}) },
    status,
  });

  it('STATUS, READY and RESTARTS', () => {
    const running = { running: { startedAt: '2026-11-30T11:00:00Z' } };
    const cases: [string, Obj, { ready: string; status: string; restarts: string }][] = [
      ['pending', base({ phase: 'Pending' }), { ready: '0/2', status: 'Pending', restarts: '0' }],
      [
        'running and ready',
        base({ phase: 'Running', containerStatuses: [{ name: 'main', ready: true, restartCount: 0, state: running }, { name: 'side', ready: true, restartCount: 0, state: running }] }),
        { ready: '2/2', status: 'Running', restarts: '0' },
      ],
      [
        'crash loop, restarts with the last finish',
        base({
          phase: 'Running',
          containerStatuses: [
            { name: 'main', ready: false, restartCount: 4, state: { waiting: { reason: 'CrashLoopBackOff' } }, lastState: { terminated: { exitCode: 1, reason: 'Error', finishedAt: '2026-11-30T11:59:15Z' } } },
            { name: 'side', ready: true, restartCount: 1, state: running },
          ],
        }),
        { ready: '1/2', status: 'CrashLoopBackOff', restarts: '5 (45s ago)' },
      ],
      [
        'creating',
        base({ phase: 'Pending', containerStatuses: [{ name: 'main', state: { waiting: { reason: 'ContainerCreating' } } }] }),
        { ready: '0/2', status: 'ContainerCreating', restarts: '0' },
      ],
      [
        'create error',
        base({ phase: 'Pending', containerStatuses: [{ name: 'main', state: { waiting: { reason: 'CreateContainerError' } } }] }),
        { ready: '0/2', status: 'CreateContainerError', restarts: '0' },
      ],
      [
        'completed',
        base({ phase: 'Succeeded', containerStatuses: [{ name: 'main', state: { terminated: { exitCode: 0, reason: 'Completed' } } }, { name: 'side', state: { terminated: { exitCode: 0, reason: 'Completed' } } }] }),
        { ready: '0/2', status: 'Completed', restarts: '0' },
      ],
      [
        'error',
        base({ phase: 'Failed', containerStatuses: [{ name: 'main', state: { terminated: { exitCode: 2, reason: 'Error' } } }] }),
        { ready: '0/2', status: 'Error', restarts: '0' },
      ],
      [
        'signal without a reason',
        base({ phase: 'Failed', containerStatuses: [{ name: 'main', state: { terminated: { exitCode: 137, signal: 9 } } }] }),
        { ready: '0/2', status: 'Signal:9', restarts: '0' },
      ],
      [
        'exit code without a reason',
        base({ phase: 'Failed', containerStatuses: [{ name: 'main', state: { terminated: { exitCode: 3 } } }] }),
        { ready: '0/2', status: 'ExitCode:3', restarts: '0' },
      ],
      [
        'completed beside a running container',
        base({
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'False' }],
          containerStatuses: [{ name: 'main', state: { terminated: { exitCode: 0, reason: 'Completed' } } }, { name: 'side', ready: true, state: running }],
        }),
        { ready: '1/2', status: 'NotReady', restarts: '0' },
      ],
      [
        'terminating',
        base({ phase: 'Running', containerStatuses: [{ name: 'main', ready: true, state: running }] }, { metadata: { name: 'p', deletionTimestamp: '2026-11-30T12:00:30Z' } }),
        { ready: '1/2', status: 'Terminating', restarts: '0' },
      ],
      [
        'lost with its node',
        base({ phase: 'Running', reason: 'NodeLost' }, { metadata: { name: 'p', deletionTimestamp: '2026-11-30T12:00:30Z' } }),
        { ready: '0/2', status: 'Unknown', restarts: '0' },
      ],
      [
        'status reason wins over the phase',
        base({ phase: 'Failed', reason: 'Evicted' }),
        { ready: '0/2', status: 'Evicted', restarts: '0' },
      ],
      [
        'init container still running',
        base(
          { phase: 'Pending', initContainerStatuses: [{ name: 'setup', state: { running: {} } }] },
          { spec: { initContainers: [{ name: 'setup' }], containers: [{ name: 'main' }] } },
        ),
        { ready: '0/1', status: 'Init:0/1', restarts: '0' },
      ],
    ];
    for (const [what, obj, expected] of cases) {
      assert.deepEqual(podSummary(obj, now), expected, what);
    }
  });

  it('fills the wide columns', () => {
    const cells = POD_PRINTER.cells(base({ phase: 'Running', podIP: '10.0.0.5' }, { spec: { containers: [{ name: 'main' }], nodeName: 'node-a' } }), now);
    assert.deepEqual(cells, ['p', '0/1', 'Running', '0', '60m', '10.0.0.5', 'node-a', '<none>', '<none>']);
  });
});
