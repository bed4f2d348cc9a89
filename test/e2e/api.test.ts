/**
 * The Kubernetes API as Drover serves it over HTTPS: authentication, discovery, object semantics,
 * patches, selectors, paging, watch, tables and shutdown. Most tests talk to one real
 * `drover server` child process; the compaction (410 Gone) tests run the API server in-process so
 * that they can compact the datastore on demand.
 *
 * Run: node --import tsx --test test/e2e/api.test.ts
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createCertificateAuthority } from '../../src/security/pki.js';
import { versionInfo } from '../../src/version.js';
import { type InProcessApiServer, startInProcessApiServer } from '../helpers/api-server.js';
import {
  type ApiResponse,
  cleanup,
  DROVER_BIN,
  eventually,
  request,
  type RequestOptions,
  type ServerProcess,
  startServer,
  tempDir,
} from '../helpers/server.js';

// ---------------------------------------------------------------------------------------------
// Helpers

type Obj = Record<string, any>;
type Target = Pick<ServerProcess, 'port' | 'token' | 'caPem'>;

const TABLE_ACCEPT =
  'application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json';
const AGGREGATED_ACCEPT = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json';
const AGGREGATED_CONTENT_TYPE = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList';
const MERGE = { 'Content-Type': 'application/merge-patch+json' };
const JSON_PATCH = { 'Content-Type': 'application/json-patch+json' };
const STRATEGIC = { 'Content-Type': 'application/strategic-merge-patch+json' };

const dirs: string[] = [];

function json(res: ApiResponse): Obj {
  assert.ok(res.json !== undefined && res.json !== null, `expected a JSON body, got: ${res.text.slice(0, 500)}`);
  return res.json as Obj;
}

/** Assert the status code (showing the body when it is wrong) and return the JSON body. */
function expectCode(res: ApiResponse, code: number, what = ''): Obj {
  assert.equal(res.status, code, `${what ? `${what}: ` : ''}expected HTTP ${code}, got ${res.status}: ${res.text.slice(0, 800)}`);
  return json(res);
}

/** Assert a failure `Status` body with the given code and reason. */
function expectStatus(res: ApiResponse, code: number, reason: string, what = ''): Obj {
  const body = expectCode(res, code, what);
  assert.equal(body.kind, 'Status', `${what}: ${res.text}`);
  assert.equal(body.apiVersion, 'v1', what);
  assert.equal(body.status, 'Failure', what);
  assert.equal(body.code, code, what);
  assert.equal(body.reason, reason, `${what}: ${res.text}`);
  assert.equal(typeof body.message, 'string', what);
  return body;
}

function names(list: Obj): string[] {
  return (list.items as Obj[]).map((item) => item.metadata.name as string);
}

function pod(name: string, extra: { labels?: Record<string, string>; nodeName?: string; containers?: Obj[] } = {}): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, ...(extra.labels ? { labels: extra.labels } : {}) },
    spec: {
      // Drover runs containers as processes: every container needs a command.
      containers: (extra.containers ?? [{ name: 'main', image: 'busybox:1.36' }]).map((c) => ({ command: ['sleep', '3600'], ...c })),
      // Another scheduler's pod: Drover's scheduler would bind it (a write these tests don't expect).
      schedulerName: 'manual',
      ...(extra.nodeName ? { nodeName: extra.nodeName } : {}),
    },
  };
}

function node(name: string, extra: Obj = {}): Obj {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name }, ...extra };
}

function lease(name: string, holder = 'holder-a'): Obj {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name },
    spec: { holderIdentity: holder, leaseDurationSeconds: 40 },
  };
}

async function create(target: Target, urlPath: string, body: Obj, options: RequestOptions = {}): Promise<Obj> {
  return expectCode(await request(target, 'POST', urlPath, { ...options, body }), 201, `POST ${urlPath}`);
}

async function get(target: Target, urlPath: string, options: RequestOptions = {}): Promise<Obj> {
  return expectCode(await request(target, 'GET', urlPath, options), 200, `GET ${urlPath}`);
}

async function patch(target: Target, urlPath: string, headers: Record<string, string>, body: unknown): Promise<Obj> {
  return expectCode(await request(target, 'PATCH', urlPath, { headers, body }), 200, `PATCH ${urlPath}`);
}

async function createNamespace(target: Target, name: string): Promise<Obj> {
  return create(target, '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
}

function q(params: Record<string, string>): string {
  return new URLSearchParams(params).toString();
}

// ---------------------------------------------------------------------------------------------
// Watch streams

interface WatchEvent {
  type: string;
  object: Obj;
}

interface WatchStream {
  status: number;
  headers: IncomingHttpHeaders;
  /** Milliseconds from sending the request to receiving the response headers. */
  headersAfterMs: number;
  events: WatchEvent[];
  raw(): string;
  ended: Promise<void>;
  isEnded(): boolean;
  close(): void;
}

const openStreams = new Set<WatchStream>();

/**
 * Open a watch (or any streaming GET). Resolves when the response headers arrive, which for a
 * watch that has nothing to send yet only happens if the server flushes them.
 */
function openWatch(
  target: Target,
  urlPath: string,
  options: { headers?: Record<string, string>; headersTimeoutMs?: number } = {},
): Promise<WatchStream> {
  const headersTimeoutMs = options.headersTimeoutMs ?? 5000;
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1',
      port: target.port,
      method: 'GET',
      path: urlPath,
      ca: target.caPem,
      agent: false,
      headers: { Accept: 'application/json', Authorization: `Bearer ${target.token}`, ...options.headers },
    });
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`no response headers within ${headersTimeoutMs} ms for GET ${urlPath}`));
    }, headersTimeoutMs);
    req.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    req.on('response', (res) => {
      clearTimeout(timer);
      let buffer = '';
      let raw = '';
      let ended = false;
      let markEnded: () => void = () => {};
      const endedPromise = new Promise<void>((r) => {
        markEnded = () => {
          ended = true;
          openStreams.delete(stream);
          r();
        };
      });
      const stream: WatchStream = {
        status: res.statusCode ?? 0,
        headers: res.headers,
        headersAfterMs: Date.now() - started,
        events: [],
        raw: () => raw,
        ended: endedPromise,
        isEnded: () => ended,
        close: () => {
          req.destroy();
          res.destroy();
        },
      };
      openStreams.add(stream);
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        raw += chunk;
        if (stream.status !== 200) return;
        buffer += chunk;
        for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          if (!line.trim()) continue;
          try {
            stream.events.push(JSON.parse(line) as WatchEvent);
          } catch {
            stream.events.push({ type: 'UNPARSEABLE', object: { line } });
          }
        }
      });
      res.on('end', markEnded);
      res.on('close', markEnded);
      res.on('error', markEnded);
      req.on('error', markEnded);
      resolve(stream);
    });
    req.end();
  });
}

function summary(events: readonly WatchEvent[]): string[] {
  return events.map((e) => `${e.type} ${e.object?.metadata?.namespace ? `${e.object.metadata.namespace}/` : ''}${e.object?.metadata?.name ?? '?'}`);
}

function waitForEvents(stream: WatchStream, count: number, what: string, timeoutMs = 10_000): Promise<WatchEvent[]> {
  return eventually(
    () => {
      if (stream.events.length >= count) return stream.events.slice();
      if (stream.isEnded()) throw new Error(`stream ended after ${JSON.stringify(summary(stream.events))}: ${stream.raw().slice(-500)}`);
      return false;
    },
    `${what} (have ${JSON.stringify(summary(stream.events))})`,
    timeoutMs,
    20,
  );
}

/** Wait until an event satisfying `match` arrives; return every event up to and including it. */
function waitForEvent(stream: WatchStream, match: (e: WatchEvent) => boolean, what: string, timeoutMs = 10_000): Promise<WatchEvent[]> {
  return eventually(
    () => {
      const index = stream.events.findIndex(match);
      if (index >= 0) return stream.events.slice(0, index + 1);
      if (stream.isEnded()) throw new Error(`stream ended after ${JSON.stringify(summary(stream.events))}: ${stream.raw().slice(-500)}`);
      return false;
    },
    what,
    timeoutMs,
    20,
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}; events so far: ${JSON.stringify(summary(stream.events))}`);
  });
}

function closeAllStreams(): void {
  for (const stream of [...openStreams]) stream.close();
}

// ---------------------------------------------------------------------------------------------

/**
 * No embedded agent (the helper's default: the only nodes are the ones tests create) and a grace
 * period long enough that the node lifecycle controller, which still stamps each new node once, never moves a
 * heartbeat-less test node on to Unknown or Unavailable (which would taint it) mid-test.
 */
const SERVER_ARGS = ['--node-monitor-grace-period', '1h'];

let server: ServerProcess;

before(async () => {
  server = await startServer({ args: SERVER_ARGS });
  dirs.push(server.dataDir);
});

after(async () => {
  closeAllStreams();
  await cleanup(...dirs);
});

// ---------------------------------------------------------------------------------------------

describe('authentication and TLS', () => {
  const protectedPaths = [
    '/api',
    '/apis',
    '/api/v1',
    '/apis/coordination.k8s.io',
    '/apis/coordination.k8s.io/v1',
    '/apis/policy/v1',
    '/openapi/v3',
    '/openapi/v3/api/v1',
    '/api/v1/namespaces',
    '/api/v1/namespaces/default',
    '/api/v1/nodes',
    '/api/v1/nodes/some-node',
    '/api/v1/nodes/some-node/status',
    '/api/v1/pods',
    '/api/v1/namespaces/default/pods',
    '/api/v1/namespaces/default/pods/some-pod',
    '/api/v1/namespaces/default/pods/some-pod/status',
    '/api/v1/pods?watch=1',
    '/api/v1/events',
    '/api/v1/namespaces/default/events',
    '/api/v1/namespaces/default/events/some-event',
    '/apis/coordination.k8s.io/v1/leases',
    '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases',
    '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/some-lease',
    '/apis/events.k8s.io/v1/events',
    '/apis/events.k8s.io/v1/namespaces/default/events',
    '/apis/events.k8s.io/v1/namespaces/default/events/some-event',
    '/apis/policy/v1/poddisruptionbudgets',
    '/apis/policy/v1/namespaces/default/poddisruptionbudgets',
    '/apis/policy/v1/namespaces/default/poddisruptionbudgets/some-pdb',
  ];

  const badCredentials: [string, RequestOptions][] = [
    ['no token', { token: null }],
    ['a wrong token', { token: 'not-the-admin-token-0123456789abcdef' }],
    ['a Basic authorization header', { token: null, headers: { Authorization: 'Basic YWRtaW46YWRtaW4=' } }],
  ];

  for (const [label, options] of badCredentials) {
    it(`answers 401 with a Status to ${label} on every API path`, async () => {
      for (const urlPath of protectedPaths) {
        const res = await request(server, 'GET', urlPath, options);
        const body = expectStatus(res, 401, 'Unauthorized', `GET ${urlPath} with ${label}`);
        assert.match(String(res.headers['content-type']), /^application\/json/, urlPath);
        assert.equal(body.message, 'Unauthorized', urlPath);
      }
    });
  }

  it('refuses writes without a valid token and creates nothing', async () => {
    const writes: [string, string, Obj | undefined][] = [
      ['POST', '/api/v1/nodes', node('unauth-node')],
      ['POST', '/api/v1/namespaces/default/pods', pod('unauth-pod')],
      ['POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', lease('unauth-lease')],
      ['PUT', '/api/v1/namespaces/default', { metadata: { name: 'default' } }],
      ['DELETE', '/api/v1/namespaces/kube-public', undefined],
    ];
    for (const [method, urlPath, body] of writes) {
      for (const [label, options] of badCredentials) {
        expectStatus(await request(server, method, urlPath, { ...options, ...(body ? { body } : {}) }), 401, 'Unauthorized', `${method} ${urlPath} with ${label}`);
      }
    }
    expectStatus(await request(server, 'GET', '/api/v1/nodes/unauth-node'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/default/pods/unauth-pod'), 404, 'NotFound');
    await get(server, '/api/v1/namespaces/kube-public');
  });

  it('accepts the admin token from the kubeconfig', async () => {
    const kubeconfig = fs.readFileSync(server.kubeconfig, 'utf8');
    assert.ok(kubeconfig.includes(server.token), 'the kubeconfig carries the admin token');
    const list = await get(server, '/api/v1/namespaces');
    assert.equal(list.kind, 'NamespaceList');
    assert.deepEqual(names(list).sort(), ['default', 'kube-node-lease', 'kube-public', 'kube-system']);
  });

  it('serves health, version and the CA certificate without a token', async () => {
    for (const urlPath of ['/healthz', '/livez', '/readyz']) {
      const res = await request(server, 'GET', urlPath, { token: null });
      assert.equal(res.status, 200, `${urlPath}: ${res.text}`);
      assert.equal(res.text, 'ok', urlPath);
    }
    const version = expectCode(await request(server, 'GET', '/version', { token: null }), 200);
    assert.equal(version.major, '1');
    assert.match(version.minor, /^\d+$/);
    assert.match(version.gitVersion, /^v1\.\d+\.\d+/);
    assert.equal(version.gitVersion, versionInfo().gitVersion);

    const cacerts = await request(server, 'GET', '/cacerts', { token: null });
    assert.equal(cacerts.status, 200);
    assert.match(cacerts.text, /^-----BEGIN CERTIFICATE-----/);
    assert.equal(cacerts.text, server.caPem);

    // The admin token works there too; a token that fails authentication is refused, as
    // kube-apiserver does.
    for (const urlPath of ['/healthz', '/livez', '/readyz', '/version', '/cacerts']) {
      assert.equal((await request(server, 'GET', urlPath)).status, 200, `${urlPath} with the admin token`);
      expectStatus(await request(server, 'GET', urlPath, { token: 'wrong-token-0123456789' }), 401, 'Unauthorized', `${urlPath} with a wrong token`);
    }
  });

  it('fails TLS verification for a client that trusts a different CA', async () => {
    const other = await createCertificateAuthority('some-other-ca');
    await assert.rejects(
      request(server, 'GET', '/healthz', { token: null, ca: other.certificatePem }),
      (error: NodeJS.ErrnoException) => {
        assert.match(
          String(error.code),
          /^(UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|CERT_SIGNATURE_FAILURE)$/,
          `unexpected error: ${error.code} ${error.message}`,
        );
        return true;
      },
    );
    // The same request succeeds with the server's own CA.
    assert.equal((await request(server, 'GET', '/healthz', { token: null })).status, 200);
  });
});

// ---------------------------------------------------------------------------------------------

describe('discovery', () => {
  it('serves legacy /api, /apis and group documents as plain JSON', async () => {
    for (const accept of ['application/json, */*', 'application/json', '*/*']) {
      const headers = { Accept: accept };
      const apiRes = await request(server, 'GET', '/api', { headers });
      const api = expectCode(apiRes, 200);
      assert.equal(apiRes.headers['content-type'], 'application/json', `Accept ${accept}`);
      assert.equal(api.kind, 'APIVersions');
      assert.deepEqual(api.versions, ['v1']);
      assert.ok(Array.isArray(api.serverAddressByClientCIDRs));

      const apisRes = await request(server, 'GET', '/apis', { headers });
      const apis = expectCode(apisRes, 200);
      assert.equal(apisRes.headers['content-type'], 'application/json');
      assert.equal(apis.kind, 'APIGroupList');
      const groups = new Map((apis.groups as Obj[]).map((g) => [g.name as string, g]));
      for (const name of ['coordination.k8s.io', 'events.k8s.io', 'policy']) {
        const group = groups.get(name);
        assert.ok(group, `group ${name} in ${apisRes.text}`);
        assert.deepEqual(group.versions, [{ groupVersion: `${name}/v1`, version: 'v1' }]);
        assert.deepEqual(group.preferredVersion, { groupVersion: `${name}/v1`, version: 'v1' });
      }
    }
    const policy = await get(server, '/apis/policy');
    assert.equal(policy.kind, 'APIGroup');
    assert.equal(policy.name, 'policy');
    expectStatus(await request(server, 'GET', '/apis/networking.k8s.io/v1'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/apis/networking.k8s.io'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/api/v2'), 404, 'NotFound');
  });

  it('lists core resources and their subresources in /api/v1', async () => {
    const list = await get(server, '/api/v1');
    assert.equal(list.kind, 'APIResourceList');
    assert.equal(list.groupVersion, 'v1');
    const byName = new Map((list.resources as Obj[]).map((r) => [r.name as string, r]));
    for (const [name, kind, namespaced] of [
      ['namespaces', 'Namespace', false],
      ['nodes', 'Node', false],
      ['pods', 'Pod', true],
      ['events', 'Event', true],
    ] as const) {
      const resource = byName.get(name);
      assert.ok(resource, `${name} listed`);
      assert.equal(resource.kind, kind);
      assert.equal(resource.namespaced, namespaced);
      for (const verb of ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch']) {
        assert.ok(resource.verbs.includes(verb), `${name} supports ${verb}`);
      }
    }
    assert.deepEqual(byName.get('pods')!.shortNames, ['po']);
    assert.deepEqual(byName.get('nodes')!.shortNames, ['no']);
    assert.equal(byName.get('pods/status')?.kind, 'Pod');
    assert.equal(byName.get('nodes/status')?.kind, 'Node');
    const eviction = byName.get('pods/eviction');
    assert.ok(eviction, 'pods/eviction is listed (kubectl drain looks for it)');
    assert.equal(eviction.group, 'policy');
    assert.equal(eviction.version, 'v1');
    assert.equal(eviction.kind, 'Eviction');
    assert.deepEqual(eviction.verbs, ['create']);

    const coordination = await get(server, '/apis/coordination.k8s.io/v1');
    assert.equal(coordination.groupVersion, 'coordination.k8s.io/v1');
    assert.ok((coordination.resources as Obj[]).some((r) => r.name === 'leases' && r.kind === 'Lease' && r.namespaced));
    const policy = await get(server, '/apis/policy/v1');
    assert.ok((policy.resources as Obj[]).some((r) => r.name === 'poddisruptionbudgets' && r.kind === 'PodDisruptionBudget'));
    const events = await get(server, '/apis/events.k8s.io/v1');
    assert.ok((events.resources as Obj[]).some((r) => r.name === 'events' && r.kind === 'Event'));
  });

  it('serves aggregated discovery only when the Accept header asks for it', async () => {
    const apiRes = await request(server, 'GET', '/api', { headers: { Accept: AGGREGATED_ACCEPT } });
    const api = expectCode(apiRes, 200);
    assert.equal(apiRes.headers['content-type'], AGGREGATED_CONTENT_TYPE);
    assert.equal(api.kind, 'APIGroupDiscoveryList');
    assert.equal(api.apiVersion, 'apidiscovery.k8s.io/v2');
    assert.equal(api.items.length, 1);
    const core = api.items[0].versions[0];
    assert.equal(core.version, 'v1');
    const pods = (core.resources as Obj[]).find((r) => r.resource === 'pods');
    assert.ok(pods, 'pods in aggregated /api');
    assert.equal(pods.scope, 'Namespaced');
    assert.deepEqual(pods.responseKind, { group: '', version: 'v1', kind: 'Pod' });
    const eviction = (pods.subresources as Obj[]).find((s) => s.subresource === 'eviction');
    assert.deepEqual(eviction?.responseKind, { group: 'policy', version: 'v1', kind: 'Eviction' });

    const apisRes = await request(server, 'GET', '/apis', { headers: { Accept: AGGREGATED_ACCEPT } });
    const apis = expectCode(apisRes, 200);
    assert.equal(apisRes.headers['content-type'], AGGREGATED_CONTENT_TYPE);
    assert.equal(apis.kind, 'APIGroupDiscoveryList');
    const groupNames = (apis.items as Obj[]).map((g) => g.metadata.name as string);
    for (const name of ['coordination.k8s.io', 'events.k8s.io', 'policy']) assert.ok(groupNames.includes(name), name);

    // kubectl 1.20 sends `application/json, */*` and must not get the aggregated form.
    for (const accept of ['application/json, */*', 'application/json', '*/*']) {
      const plain = await request(server, 'GET', '/apis', { headers: { Accept: accept } });
      assert.equal(plain.headers['content-type'], 'application/json', accept);
      assert.equal(json(plain).kind, 'APIGroupList', accept);
    }
  });

  it('serves an OpenAPI v3 index with a document for every group version', async () => {
    const index = await get(server, '/openapi/v3');
    for (const gv of ['api/v1', 'apis/coordination.k8s.io/v1', 'apis/events.k8s.io/v1', 'apis/policy/v1']) {
      const entry = index.paths[gv];
      assert.ok(entry, `${gv} in the OpenAPI index`);
      const doc = await get(server, entry.serverRelativeURL as string);
      assert.equal(doc.openapi, '3.0.0', gv);
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe('object semantics', () => {
  const pods = '/api/v1/namespaces/crud/pods';
  const leases = '/apis/coordination.k8s.io/v1/namespaces/crud/leases';

  before(async () => {
    await createNamespace(server, 'crud');
  });

  it('create sets uid, creationTimestamp, resourceVersion and generation, whatever the client sent', async () => {
    const before = Date.now();
    const serverSet = {
      uid: 'client-chosen-uid',
      resourceVersion: '99999',
      creationTimestamp: '2000-01-01T00:00:00Z',
      generation: 42,
    };
    const created = await create(server, pods, { ...pod('crud-pod'), metadata: { name: 'crud-pod', ...serverSet, labels: { role: 'web' } } });
    assert.equal(created.kind, 'Pod');
    assert.equal(created.apiVersion, 'v1');
    assert.equal(created.metadata.namespace, 'crud');
    assert.match(created.metadata.uid, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.match(created.metadata.creationTimestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.ok(Date.parse(created.metadata.creationTimestamp) >= Math.floor(before / 1000) * 1000 - 1000, created.metadata.creationTimestamp);
    assert.match(created.metadata.resourceVersion, /^[1-9]\d*$/);
    assert.notEqual(created.metadata.resourceVersion, '99999');
    assert.equal(created.metadata.generation, 1);

    const fetched = await get(server, `${pods}/crud-pod`);
    assert.equal(fetched.metadata.uid, created.metadata.uid);
    assert.equal(fetched.metadata.resourceVersion, created.metadata.resourceVersion);
    assert.equal(fetched.metadata.creationTimestamp, created.metadata.creationTimestamp);
    const sent = pod('crud-pod').spec as { containers: Obj[] };
    // ServiceAccount admission: the default account and its API credentials (kube-api-access-<random>).
    const access = (fetched.spec.volumes as Obj[] | undefined)?.[0]?.name as string;
    assert.match(access, /^kube-api-access-[a-z0-9]{5}$/);
    const mount = { name: access, readOnly: true, mountPath: '/var/run/secrets/kubernetes.io/serviceaccount' };
    assert.deepEqual(
      { ...fetched.spec, volumes: undefined },
      {
        ...sent,
        volumes: undefined,
        serviceAccountName: 'default',
        serviceAccount: 'default',
        containers: [{ ...sent.containers[0], terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent', volumeMounts: [mount] }],
        restartPolicy: 'Always',
        terminationGracePeriodSeconds: 30,
        dnsPolicy: 'ClusterFirst',
        // RuntimeClass admission writes the cluster's default class (the test servers': process).
        runtimeClassName: 'process',
      },
      'the spec as sent, with the pod defaults and its runtime class filled in',
    );
    assert.deepEqual(fetched.metadata.labels, { role: 'web' });

    const list = await get(server, pods);
    assert.equal(list.kind, 'PodList');
    assert.equal(list.apiVersion, 'v1');
    assert.deepEqual(names(list), ['crud-pod']);
    assert.equal(list.items[0].metadata.uid, created.metadata.uid);
    assert.ok(Number(list.metadata.resourceVersion) >= Number(created.metadata.resourceVersion));

    // The same for a cluster-scoped kind (read back only by uid: controllers may write nodes).
    const createdNode = await create(server, '/api/v1/nodes', node('crud-node', { metadata: { name: 'crud-node', namespace: 'ignored', ...serverSet }, spec: { podCIDR: '10.42.0.0/24' } }));
    assert.equal(createdNode.kind, 'Node');
    assert.match(createdNode.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.notEqual(createdNode.metadata.creationTimestamp, serverSet.creationTimestamp);
    assert.notEqual(createdNode.metadata.resourceVersion, serverSet.resourceVersion);
    assert.equal(createdNode.metadata.generation, 1);
    assert.equal(createdNode.metadata.namespace, undefined, 'cluster-scoped objects have no namespace');
    assert.equal((await get(server, '/api/v1/nodes/crud-node')).metadata.uid, createdNode.metadata.uid);
    assert.ok(names(await get(server, '/api/v1/nodes')).includes('crud-node'));
  });

  it('namespaced create sets the namespace from the URL and refuses a conflicting one', async () => {
    const created = await create(server, pods, pod('ns-pod'));
    assert.equal(created.metadata.namespace, 'crud');
    const mismatch = await request(server, 'POST', pods, {
      body: { ...pod('ns-pod-2'), metadata: { name: 'ns-pod-2', namespace: 'default' } },
    });
    expectStatus(mismatch, 400, 'BadRequest');
    const clusterPost = await request(server, 'POST', '/api/v1/pods', { body: pod('ns-pod-3') });
    assert.ok(clusterPost.status >= 400 && clusterPost.status < 500, `POST /api/v1/pods: ${clusterPost.status}`);
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/default/pods/ns-pod-2'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', `${pods}/ns-pod-2`), 404, 'NotFound');
  });

  it('generateName picks a unique name', async () => {
    const a = await create(server, '/api/v1/nodes', { metadata: { generateName: 'gen-node-' } });
    const b = await create(server, '/api/v1/nodes', { metadata: { generateName: 'gen-node-' } });
    assert.match(a.metadata.name, /^gen-node-[a-z0-9]{5}$/);
    assert.notEqual(a.metadata.name, b.metadata.name);
    await get(server, `/api/v1/nodes/${a.metadata.name}`);
  });

  it('update checks resourceVersion: stale is a 409 Conflict, absent is last-writer-wins', async () => {
    const created = await create(server, leases, lease('rv-lease'));
    const rv1 = created.metadata.resourceVersion as string;

    const first = expectCode(
      await request(server, 'PUT', `${leases}/rv-lease`, {
        body: { ...created, metadata: { ...created.metadata, labels: { step: 'one' } } },
      }),
      200,
    );
    assert.ok(Number(first.metadata.resourceVersion) > Number(rv1));
    assert.deepEqual(first.metadata.labels, { step: 'one' });

    const stale = await request(server, 'PUT', `${leases}/rv-lease`, {
      body: { ...created, metadata: { ...created.metadata, labels: { step: 'stale' } } },
    });
    const status = expectStatus(stale, 409, 'Conflict');
    assert.equal(
      status.message,
      'Operation cannot be fulfilled on leases.coordination.k8s.io "rv-lease": the object has been modified; please apply your changes to the latest version and try again',
    );
    assert.equal(status.details.name, 'rv-lease');
    assert.equal(status.details.group, 'coordination.k8s.io');
    assert.deepEqual((await get(server, `${leases}/rv-lease`)).metadata.labels, { step: 'one' });

    const { resourceVersion: _rv, ...metaWithoutRv } = created.metadata;
    const blind = expectCode(
      await request(server, 'PUT', `${leases}/rv-lease`, {
        body: { ...created, metadata: { ...metaWithoutRv, labels: { step: 'blind' } } },
      }),
      200,
    );
    assert.deepEqual(blind.metadata.labels, { step: 'blind' });
    assert.equal(blind.metadata.uid, created.metadata.uid, 'uid is kept');
    assert.equal(blind.metadata.creationTimestamp, created.metadata.creationTimestamp);
    assert.ok(Number(blind.metadata.resourceVersion) > Number(first.metadata.resourceVersion));

    // A merge patch that names a stale resourceVersion is refused the same way.
    const stalePatch = await request(server, 'PATCH', `${leases}/rv-lease`, {
      headers: MERGE,
      body: { metadata: { resourceVersion: rv1, labels: { step: 'patch' } } },
    });
    expectStatus(stalePatch, 409, 'Conflict');
    // ... and one that names the current resourceVersion applies.
    const currentPatch = await patch(server, `${leases}/rv-lease`, MERGE, {
      metadata: { resourceVersion: blind.metadata.resourceVersion, labels: { step: 'patch' } },
    });
    assert.deepEqual(currentPatch.metadata.labels, { step: 'patch' });

    // Name on the URL and in the body must agree.
    const renamed = await request(server, 'PUT', `${leases}/rv-lease`, {
      body: { ...created, metadata: { ...metaWithoutRv, name: 'other-name' } },
    });
    expectStatus(renamed, 400, 'BadRequest');
    // PUT to an object that does not exist is a 404.
    expectStatus(await request(server, 'PUT', `${leases}/no-such-lease`, { body: lease('no-such-lease') }), 404, 'NotFound');
  });

  it('generation bumps only on spec changes, and a no-op update keeps the resourceVersion', async () => {
    const created = await create(server, pods, pod('gen-pod'));
    assert.equal(created.metadata.generation, 1);

    const labelled = await patch(server, `${pods}/gen-pod`, MERGE, { metadata: { labels: { a: 'b' } } });
    assert.equal(labelled.metadata.generation, 1, 'a label change does not bump generation');

    const annotated = await patch(server, `${pods}/gen-pod`, MERGE, { metadata: { annotations: { note: 'x' } } });
    assert.equal(annotated.metadata.generation, 1, 'an annotation change does not bump generation');

    const statusPatched = await patch(server, `${pods}/gen-pod/status`, MERGE, { status: { phase: 'Running' } });
    assert.equal(statusPatched.metadata.generation, 1, 'a status change does not bump generation');
    assert.ok(Number(statusPatched.metadata.resourceVersion) > Number(annotated.metadata.resourceVersion));

    const specChanged = await patch(server, `${pods}/gen-pod`, MERGE, { spec: { activeDeadlineSeconds: 30 } });
    assert.equal(specChanged.metadata.generation, 2, 'a spec change bumps generation');

    const again = await patch(server, `${pods}/gen-pod`, MERGE, { spec: { activeDeadlineSeconds: 30 } });
    assert.equal(again.metadata.generation, 2, 'a patch that changes nothing does not bump generation');
    assert.equal(again.metadata.resourceVersion, specChanged.metadata.resourceVersion, 'nor the resourceVersion');

    const put = expectCode(await request(server, 'PUT', `${pods}/gen-pod`, { body: again }), 200);
    assert.equal(put.metadata.resourceVersion, specChanged.metadata.resourceVersion, 'an identical PUT writes nothing');
    assert.equal(put.metadata.generation, 2);

    const putGeneration = expectCode(
      await request(server, 'PUT', `${pods}/gen-pod`, { body: { ...again, metadata: { ...again.metadata, generation: 99 } } }),
      200,
    );
    assert.equal(putGeneration.metadata.generation, 2, 'clients cannot set generation');

    const specAgain = await patch(server, `${pods}/gen-pod`, MERGE, { spec: { activeDeadlineSeconds: 60 } });
    assert.equal(specAgain.metadata.generation, 3, 'every spec change bumps it again');
  });

  it(
    'a semantically identical spec in another key order changes neither generation nor resourceVersion',
    async () => {
      // schedulerName manual: no scheduler binds this pod (a bind would change it under the test).
      const created = await create(server, pods, {
        ...pod('order-pod'),
        spec: { containers: pod('x').spec.containers, restartPolicy: 'Always', schedulerName: 'manual' },
      });
      const reordered = expectCode(
        await request(server, 'PUT', `${pods}/order-pod`, {
          body: {
            apiVersion: 'v1',
            kind: 'Pod',
            metadata: created.metadata,
            // The stored spec (admission added the account and its volume) with its keys reversed.
            spec: Object.fromEntries(Object.entries(created.spec as Obj).reverse()),
          },
        }),
        200,
      );
      assert.equal(reordered.metadata.generation, 1, 'same spec, so same generation');
      assert.equal(reordered.metadata.resourceVersion, created.metadata.resourceVersion, 'nothing changed, so nothing written');
    },
  );

  it('concurrent writers: every patch lands, exactly one create of a name wins', async () => {
    await create(server, pods, pod('busy-pod'));
    const patches = await Promise.all(
      Array.from({ length: 25 }, (_, i) =>
        request(server, 'PATCH', `${pods}/busy-pod`, { headers: MERGE, body: { metadata: { labels: { [`writer-${i}`]: 'yes' } } } }),
      ),
    );
    assert.deepEqual(patches.map((r) => r.status), Array.from({ length: 25 }, () => 200));
    const final = await get(server, `${pods}/busy-pod`);
    assert.deepEqual(Object.keys(final.metadata.labels).sort(), Array.from({ length: 25 }, (_, i) => `writer-${i}`).sort(), 'no lost update');
    const rvs = new Set(patches.map((r) => json(r).metadata.resourceVersion as string));
    assert.equal(rvs.size, 25, 'each patch was its own write');

    const creates = await Promise.all(Array.from({ length: 8 }, () => request(server, 'POST', pods, { body: pod('contested-pod') })));
    assert.deepEqual(creates.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409, 409, 409]);
    for (const r of creates.filter((c) => c.status === 409)) assert.equal(json(r).reason, 'AlreadyExists');
  });

  it('delete collection deletes what the selector matches and returns it', async () => {
    for (const [name, group] of [['dc-a', 'x'], ['dc-b', 'y'], ['dc-c', 'x']] as const) {
      await create(server, pods, { ...pod(name), metadata: { name, labels: { group } } });
    }
    const res = expectCode(await request(server, 'DELETE', `${pods}?${q({ labelSelector: 'group=x' })}`), 200);
    assert.equal(res.kind, 'PodList');
    assert.deepEqual(names(res), ['dc-a', 'dc-c']);
    assert.deepEqual(names(await get(server, `${pods}?${q({ labelSelector: 'group' })}`)), ['dc-b']);
  });

  it('the status subresource changes only status; the main resource ignores status (nodes)', async () => {
    // A controller may write this node too, so bodies carry no resourceVersion and the checks
    // look for values only this test writes.
    await create(server, '/api/v1/nodes', node('status-node', { spec: { podCIDR: '10.1.0.0/24' } }));
    const withStatus = expectCode(
      await request(server, 'PUT', '/api/v1/nodes/status-node/status', {
        body: {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: 'status-node', labels: { sneaky: 'label' } },
          spec: { podCIDR: '10.99.0.0/24' },
          status: { nodeInfo: { kubeletVersion: 'v-marker-1' }, addresses: [{ type: 'InternalIP', address: '10.0.0.1' }] },
        },
      }),
      200,
    );
    assert.equal(withStatus.status.nodeInfo.kubeletVersion, 'v-marker-1');
    assert.deepEqual(withStatus.spec, { podCIDR: '10.1.0.0/24' }, 'PUT /status leaves spec alone');
    assert.equal(withStatus.metadata.labels?.sneaky, undefined, 'PUT /status leaves labels alone');

    const statusGet = await get(server, '/api/v1/nodes/status-node/status');
    assert.equal(statusGet.kind, 'Node');
    assert.equal(statusGet.status.nodeInfo.kubeletVersion, 'v-marker-1');

    const mainPut = expectCode(
      await request(server, 'PUT', '/api/v1/nodes/status-node', {
        body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'status-node' }, spec: { podCIDR: '10.2.0.0/24' }, status: { nodeInfo: { kubeletVersion: 'v-marker-2' } } },
      }),
      200,
    );
    assert.deepEqual(mainPut.spec, { podCIDR: '10.2.0.0/24' });
    assert.equal(mainPut.status.nodeInfo.kubeletVersion, 'v-marker-1', 'PUT on the main resource ignores status');
    assert.deepEqual(mainPut.status.addresses, [{ type: 'InternalIP', address: '10.0.0.1' }]);

    const mainPatch = await patch(server, '/api/v1/nodes/status-node', MERGE, { status: { nodeInfo: { kubeletVersion: 'v-marker-3' } } });
    assert.equal(mainPatch.status.nodeInfo.kubeletVersion, 'v-marker-1', 'PATCH on the main resource ignores status');

    const statusPatch = await patch(server, '/api/v1/nodes/status-node/status', MERGE, {
      spec: { podCIDR: '10.3.0.0/24' },
      status: { nodeInfo: { osImage: 'marker-os' } },
    });
    assert.deepEqual(statusPatch.spec, { podCIDR: '10.2.0.0/24' }, 'PATCH /status leaves spec alone');
    assert.equal(statusPatch.status.nodeInfo.osImage, 'marker-os');
    assert.equal(statusPatch.status.nodeInfo.kubeletVersion, 'v-marker-1');
    assert.equal((await get(server, '/api/v1/nodes/status-node')).spec.podCIDR, '10.2.0.0/24');

    // The status subresource checks resourceVersion like the main resource.
    const staleStatus = await request(server, 'PUT', '/api/v1/nodes/status-node/status', {
      body: { ...withStatus, status: { nodeInfo: { kubeletVersion: 'v-marker-stale' } } },
    });
    expectStatus(staleStatus, 409, 'Conflict');
    expectStatus(await request(server, 'PATCH', '/api/v1/nodes/missing-node/status', { headers: MERGE, body: { status: {} } }), 404, 'NotFound');
  });

  it('the status subresource changes only status; the main resource ignores status (pods)', async () => {
    const created = await create(server, pods, { ...pod('status-pod'), status: { phase: 'Running', podIP: '1.2.3.4' } });
    assert.deepEqual(created.status, { phase: 'Pending' }, 'a client cannot create a pod with a status');
    const running = await patch(server, `${pods}/status-pod/status`, MERGE, {
      status: { phase: 'Running', podIP: '10.42.0.7' },
      spec: { nodeName: 'sneaky' },
    });
    assert.equal(running.status.phase, 'Running');
    assert.equal(running.status.podIP, '10.42.0.7');
    assert.equal(running.spec.nodeName, undefined);

    const mainPatch = await patch(server, `${pods}/status-pod`, MERGE, { status: { phase: 'Failed' } });
    assert.equal(mainPatch.status.phase, 'Running');
    const mainPut = expectCode(
      await request(server, 'PUT', `${pods}/status-pod`, {
        body: { ...running, status: { phase: 'Succeeded' } },
      }),
      200,
    );
    assert.equal(mainPut.status.phase, 'Running');
    assert.equal((await get(server, `${pods}/status-pod`)).status.phase, 'Running');
  });

  it('delete answers a Status of Success naming the uid (kube-apiserver, nodes); a missing object is a 404 in the Kubernetes message format', async () => {
    const created = await create(server, '/api/v1/nodes', node('doomed-node'));
    const deleted = expectCode(await request(server, 'DELETE', '/api/v1/nodes/doomed-node'), 200);
    assert.deepEqual(deleted, {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Success',
      details: { name: 'doomed-node', kind: 'nodes', uid: created.metadata.uid },
    });

    const missing = expectStatus(await request(server, 'GET', '/api/v1/nodes/doomed-node'), 404, 'NotFound');
    assert.equal(missing.message, 'nodes "doomed-node" not found');
    assert.equal(missing.details.name, 'doomed-node');
    assert.equal(missing.details.kind, 'nodes');
    const again = expectStatus(await request(server, 'DELETE', '/api/v1/nodes/doomed-node'), 404, 'NotFound');
    assert.equal(again.message, 'nodes "doomed-node" not found');

    const lease404 = expectStatus(
      await request(server, 'GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/x'),
      404,
      'NotFound',
    );
    assert.equal(lease404.message, 'leases.coordination.k8s.io "x" not found');
    assert.equal(lease404.details.group, 'coordination.k8s.io');
    const pod404 = expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/nope'), 404, 'NotFound');
    assert.equal(pod404.message, 'pods "nope" not found');

    expectStatus(await request(server, 'GET', '/api/v1/widgets'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/nodes/x'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/api/v1/nodes/x/bogus-subresource'), 404, 'NotFound');
  });

  it('delete honours preconditions and dryRun', async () => {
    const created = await create(server, '/api/v1/namespaces/crud/pods', pod('precondition-pod'));
    const wrongUid = await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/precondition-pod', {
      body: { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: 'not-the-uid' } },
    });
    expectStatus(wrongUid, 409, 'Conflict');
    const wrongRv = await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/precondition-pod', {
      body: { preconditions: { resourceVersion: '1' } },
    });
    expectStatus(wrongRv, 409, 'Conflict');
    expectCode(await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/precondition-pod?dryRun=All'), 200);
    await get(server, '/api/v1/namespaces/crud/pods/precondition-pod');
    expectCode(
      await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/precondition-pod', {
        body: { preconditions: { uid: created.metadata.uid, resourceVersion: created.metadata.resourceVersion } },
      }),
      200,
    );
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/precondition-pod'), 404, 'NotFound');

    const dry = await create(server, '/api/v1/nodes?dryRun=All', node('dry-node'));
    assert.equal(dry.metadata.name, 'dry-node');
    expectStatus(await request(server, 'GET', '/api/v1/nodes/dry-node'), 404, 'NotFound');
    await create(server, '/api/v1/namespaces/crud/pods', pod('dry-pod'));
    const dryPatch = await patch(server, '/api/v1/namespaces/crud/pods/dry-pod?dryRun=All', MERGE, { metadata: { labels: { dry: 'run' } } });
    assert.equal(dryPatch.metadata.labels?.dry, 'run', 'the dry-run answer shows the change');
    assert.equal((await get(server, '/api/v1/namespaces/crud/pods/dry-pod')).metadata.labels, undefined, 'but nothing was stored');
  });

  it('a duplicate create is a 409 AlreadyExists', async () => {
    await create(server, '/api/v1/namespaces/crud/pods', pod('dup-pod'));
    const dup = expectStatus(await request(server, 'POST', '/api/v1/namespaces/crud/pods', { body: pod('dup-pod') }), 409, 'AlreadyExists');
    assert.equal(dup.message, 'pods "dup-pod" already exists');
    assert.equal(dup.details.name, 'dup-pod');
    // The same name in another namespace is a different object.
    await create(server, '/api/v1/namespaces/default/pods', pod('dup-pod'));
  });

  it('invalid objects are a 422 with causes naming the field', async () => {
    const badName = expectStatus(await request(server, 'POST', '/api/v1/nodes', { body: node('Bad_Name') }), 422, 'Invalid');
    assert.equal(badName.details.kind, 'Node');
    assert.equal(badName.details.name, 'Bad_Name');
    assert.ok((badName.details.causes as Obj[]).some((c) => c.field === 'metadata.name'), JSON.stringify(badName));
    assert.match(badName.message, /^Node "Bad_Name" is invalid: metadata\.name: /);

    const noName = expectStatus(await request(server, 'POST', '/api/v1/nodes', { body: { metadata: {} } }), 422, 'Invalid');
    assert.ok((noName.details.causes as Obj[]).some((c) => c.field === 'metadata.name'));

    const noContainers = expectStatus(
      await request(server, 'POST', '/api/v1/namespaces/crud/pods', { body: { metadata: { name: 'empty-pod' }, spec: { containers: [] } } }),
      422,
      'Invalid',
    );
    assert.ok((noContainers.details.causes as Obj[]).some((c) => c.field === 'spec.containers'), JSON.stringify(noContainers));

    const noCommand = expectStatus(
      await request(server, 'POST', '/api/v1/namespaces/crud/pods', {
        body: { metadata: { name: 'no-command' }, spec: { containers: [{ name: 'main', image: 'busybox:1.36' }] } },
      }),
      422,
      'Invalid',
    );
    assert.ok((noCommand.details.causes as Obj[]).some((c) => c.field === 'spec.containers[0].command'));

    const badLabel = expectStatus(
      await request(server, 'POST', '/api/v1/nodes', { body: { metadata: { name: 'bad-label', labels: { 'bad key!': 'v' } } } }),
      422,
      'Invalid',
    );
    assert.ok((badLabel.details.causes as Obj[]).some((c) => c.field === 'metadata.labels'));
    expectStatus(await request(server, 'GET', '/api/v1/nodes/bad-label'), 404, 'NotFound');

    // Updates are validated too.
    await create(server, '/api/v1/namespaces/crud/pods', pod('valid-pod'));
    expectStatus(
      await request(server, 'PATCH', '/api/v1/namespaces/crud/pods/valid-pod', { headers: MERGE, body: { spec: { containers: null } } }),
      422,
      'Invalid',
    );
  });

  it('malformed JSON is a 400 quoting the parse error', async () => {
    const malformed = '{"metadata": {"name": "broken",}}';
    let parseError = '';
    try {
      JSON.parse(malformed);
    } catch (error) {
      parseError = (error as Error).message;
    }
    assert.ok(parseError);
    const res = expectStatus(await request(server, 'POST', '/api/v1/nodes', { rawBody: malformed }), 400, 'BadRequest');
    assert.ok(res.message.includes(parseError), `"${res.message}" should quote "${parseError}"`);

    const notObject = expectStatus(await request(server, 'POST', '/api/v1/nodes', { rawBody: '[1,2]' }), 400, 'BadRequest');
    assert.match(notObject.message, /object/);

    const badPatch = expectStatus(
      await request(server, 'PATCH', '/api/v1/nodes/crud-node', { headers: MERGE, rawBody: '{"metadata":' }),
      400,
      'BadRequest',
    );
    assert.match(badPatch.message, /decoding/);
  });

  it('a body whose kind or apiVersion does not match the resource is a 400', async () => {
    const wrongKind = expectStatus(
      await request(server, 'POST', '/api/v1/nodes', { body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'kind-mismatch' } } }),
      400,
      'BadRequest',
    );
    assert.match(wrongKind.message, /Pod/);
    assert.match(wrongKind.message, /Node/);
    expectStatus(
      await request(server, 'POST', '/api/v1/nodes', { body: { apiVersion: 'apps/v1', kind: 'Node', metadata: { name: 'kind-mismatch' } } }),
      400,
      'BadRequest',
    );
    expectStatus(await request(server, 'GET', '/api/v1/nodes/kind-mismatch'), 404, 'NotFound');
  });

  it('a body over 3 MiB is a 413, with or without Content-Length', async () => {
    const big = `{"metadata":{"name":"too-big"},"spec":{"blob":"${'x'.repeat(3 * 1024 * 1024)}"}}`;
    expectStatus(await request(server, 'POST', '/api/v1/nodes', { rawBody: big }), 413, 'RequestEntityTooLarge');

    const chunked = await new Promise<ApiResponse>((resolve, reject) => {
      const req = https.request(
        {
          host: '127.0.0.1',
          port: server.port,
          method: 'POST',
          path: '/api/v1/nodes',
          ca: server.caPem,
          agent: false,
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${server.token}`, 'Transfer-Encoding': 'chunked' },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: JSON.parse(text) as unknown }));
        },
      );
      req.on('error', reject);
      const payload = Buffer.from(big);
      for (let offset = 0; offset < payload.length; offset += 256 * 1024) req.write(payload.subarray(offset, offset + 256 * 1024));
      req.end();
    });
    expectStatus(chunked, 413, 'RequestEntityTooLarge', 'chunked upload');
    expectStatus(await request(server, 'GET', '/api/v1/nodes/too-big'), 404, 'NotFound');

    // A body just under the limit is read, but an object is stored only up to 1.5 MiB (etcd's limit).
    const body = `{"metadata":{"name":"fits"},"spec":{"blob":"${'x'.repeat(3 * 1024 * 1024 - 100)}"}}`;
    const stored = expectStatus(await request(server, 'POST', '/api/v1/nodes', { rawBody: body }), 413, 'RequestEntityTooLarge');
    assert.match(stored.message, /too large to store: \d+ bytes, the limit is 1572864 bytes/);
    const fits = `{"metadata":{"name":"fits"},"spec":{"blob":"${'x'.repeat(1.5 * 1024 * 1024 - 1000)}"}}`;
    expectCode(await request(server, 'POST', '/api/v1/nodes', { rawBody: fits }), 201);
  });

  it('server-side apply (YAML) is served; protobuf bodies are a 415', async () => {
    const apply = await request(server, 'PATCH', '/api/v1/nodes/crud-node?fieldManager=test', {
      headers: { 'Content-Type': 'application/apply-patch+yaml' },
      rawBody: 'apiVersion: v1\nkind: Node\nmetadata:\n  name: crud-node\n  labels:\n    applied: "yes"\n',
    });
    expectCode(apply, 200);
    assert.equal((await get(server, '/api/v1/nodes/crud-node')).metadata.labels?.applied, 'yes');

    // A well-formed runtime.Unknown envelope (typeMeta v1/Node, raw ObjectMeta{name: "pb-node"}):
    // Drover stores JSON and decodes protobuf only for the few kinds kubectl's generators send.
    const typeMeta = Buffer.concat([Buffer.from([0x0a, 2]), Buffer.from('v1'), Buffer.from([0x12, 4]), Buffer.from('Node')]);
    const raw = Buffer.concat([Buffer.from([0x0a, 9, 0x0a, 7]), Buffer.from('pb-node')]);
    const envelope = Buffer.concat([
      Buffer.from('k8s\0', 'binary'),
      Buffer.from([0x0a, typeMeta.length]),
      typeMeta,
      Buffer.from([0x12, raw.length]),
      raw,
      Buffer.from([0x1a, 0, 0x22, 0]),
    ]);
    const create415 = await request(server, 'POST', '/api/v1/nodes', {
      headers: { 'Content-Type': 'application/vnd.kubernetes.protobuf' },
      rawBody: envelope,
    });
    const pb = expectStatus(create415, 415, 'UnsupportedMediaType');
    assert.match(pb.message, /Node/);
    expectStatus(await request(server, 'GET', '/api/v1/nodes/pb-node'), 404, 'NotFound');
    const text415 = await request(server, 'POST', '/api/v1/nodes', {
      headers: { 'Content-Type': 'text/plain' },
      rawBody: '{"metadata":{"name":"text-node"}}',
    });
    expectStatus(text415, 415, 'UnsupportedMediaType');
  });

  it('YAML request bodies are accepted', async () => {
    const res = await request(server, 'POST', '/api/v1/nodes', {
      headers: { 'Content-Type': 'application/yaml' },
      rawBody: 'apiVersion: v1\nkind: Node\nmetadata:\n  name: yaml-node\n  labels:\n    from: yaml\n',
    });
    const created = expectCode(res, 201);
    assert.deepEqual(created.metadata.labels, { from: 'yaml' });
  });

  it('a DELETE with a protobuf DeleteOptions body (kubectl drain fallback) deletes and does not crash', async () => {
    await create(server, '/api/v1/namespaces/crud/pods', pod('proto-delete'));
    const body = Buffer.concat([
      Buffer.from('k8s\0', 'binary'),
      Buffer.from([0x0a, 0x11, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x0d]),
      Buffer.from('DeleteOptions'),
      Buffer.from([0x12, 0x04, 0x42, 0x02, 0x08, 0x00, 0xff, 0xfe, 0xfd, 0x80]),
    ]);
    const res = await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/proto-delete', {
      headers: { 'Content-Type': 'application/vnd.kubernetes.protobuf' },
      rawBody: body,
    });
    const deleted = expectCode(res, 200);
    assert.equal(deleted.metadata.name, 'proto-delete');
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/proto-delete'), 404, 'NotFound');
    assert.equal(server.process.exitCode, null, 'the server is still running');
    assert.equal((await request(server, 'GET', '/healthz', { token: null })).status, 200);
    await get(server, '/api/v1/namespaces/crud/pods');
  });

  it('eviction deletes the pod and answers a Success Status', async () => {
    await create(server, '/api/v1/namespaces/crud/pods', pod('evict-me'));
    const res = await request(server, 'POST', '/api/v1/namespaces/crud/pods/evict-me/eviction', {
      body: { kind: 'Eviction', apiVersion: 'policy/v1', metadata: { name: 'evict-me', namespace: 'crud' }, deleteOptions: {} },
    });
    const status = expectCode(res, 201);
    assert.equal(status.kind, 'Status');
    assert.equal(status.status, 'Success');
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/evict-me'), 404, 'NotFound');
    // kubectl 1.20 sends policy/v1beta1.
    await create(server, '/api/v1/namespaces/crud/pods', pod('evict-old'));
    expectCode(
      await request(server, 'POST', '/api/v1/namespaces/crud/pods/evict-old/eviction', {
        body: { kind: 'Eviction', apiVersion: 'policy/v1beta1', metadata: { name: 'evict-old', namespace: 'crud' } },
      }),
      201,
    );
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/evict-old'), 404, 'NotFound');
  });

  it('creating in a missing namespace is a 404', async () => {
    const res = expectStatus(await request(server, 'POST', '/api/v1/namespaces/no-such-ns/pods', { body: pod('orphan') }), 404, 'NotFound');
    assert.equal(res.message, 'namespaces "no-such-ns" not found');
    expectStatus(
      await request(server, 'POST', '/apis/coordination.k8s.io/v1/namespaces/no-such-ns/leases', { body: lease('orphan') }),
      404,
      'NotFound',
    );
  });

  it('the built-in namespaces cannot be deleted', async () => {
    for (const name of ['default', 'kube-system', 'kube-public']) {
      expectStatus(await request(server, 'DELETE', `/api/v1/namespaces/${name}`), 403, 'Forbidden', name);
      const ns = await get(server, `/api/v1/namespaces/${name}`);
      assert.equal(ns.metadata.deletionTimestamp, undefined, name);
      assert.equal(ns.status?.phase, 'Active', name);
    }
  });

  it('deleting a namespace deletes its contents, and only its contents', async () => {
    await createNamespace(server, 'ns-doomed');
    await createNamespace(server, 'ns-survivor');
    for (const ns of ['ns-doomed', 'ns-survivor']) {
      await create(server, `/api/v1/namespaces/${ns}/pods`, pod('p1'));
      await create(server, `/api/v1/namespaces/${ns}/pods`, pod('p2'));
      await create(server, `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`, lease('l1'));
      await create(server, `/api/v1/namespaces/${ns}/events`, { metadata: { name: 'e1' }, involvedObject: { kind: 'Pod', name: 'p1' }, reason: 'Test' });
    }
    const deleted = expectCode(await request(server, 'DELETE', '/api/v1/namespaces/ns-doomed'), 200);
    assert.equal(deleted.kind, 'Namespace');
    assert.equal(deleted.metadata.name, 'ns-doomed');

    await eventually(async () => (await request(server, 'GET', '/api/v1/namespaces/ns-doomed')).status === 404, 'namespace ns-doomed gone');
    await eventually(
      async () => {
        const pods = await get(server, '/api/v1/pods?fieldSelector=metadata.namespace%3Dns-doomed');
        return pods.items.length === 0;
      },
      'pods of ns-doomed gone',
    );
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/ns-doomed/pods/p1'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/apis/coordination.k8s.io/v1/namespaces/ns-doomed/leases/l1'), 404, 'NotFound');
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/ns-doomed/events/e1'), 404, 'NotFound');

    assert.deepEqual(names(await get(server, '/api/v1/namespaces/ns-survivor/pods')), ['p1', 'p2']);
    await get(server, '/apis/coordination.k8s.io/v1/namespaces/ns-survivor/leases/l1');
    await get(server, '/api/v1/namespaces/ns-survivor/events/e1');
    await get(server, '/api/v1/namespaces/ns-survivor');

    // The name can be reused afterwards, and starts empty.
    await createNamespace(server, 'ns-doomed');
    assert.deepEqual(names(await get(server, '/api/v1/namespaces/ns-doomed/pods')), []);
  });

  it('finalizers hold a deleted object until the last one is removed', async () => {
    await create(server, '/api/v1/namespaces/crud/pods', { ...pod('final-pod'), metadata: { name: 'final-pod', finalizers: ['example.com/hold'] } });
    const watch = await openWatch(server, '/api/v1/namespaces/crud/pods?watch=1&fieldSelector=metadata.name%3Dfinal-pod');
    await waitForEvents(watch, 1, 'initial ADDED');

    const deleting = expectCode(await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/final-pod'), 200);
    assert.equal(deleting.metadata.name, 'final-pod');
    assert.match(deleting.metadata.deletionTimestamp ?? '', /^\d{4}-\d\d-\d\dT/, 'deletionTimestamp is set');
    const held = await get(server, '/api/v1/namespaces/crud/pods/final-pod');
    assert.equal(held.metadata.deletionTimestamp, deleting.metadata.deletionTimestamp);
    assert.deepEqual(held.metadata.finalizers, ['example.com/hold']);

    // Deleting again changes nothing; clearing deletionTimestamp by update is not possible.
    const again = expectCode(await request(server, 'DELETE', '/api/v1/namespaces/crud/pods/final-pod'), 200);
    assert.equal(again.metadata.deletionTimestamp, deleting.metadata.deletionTimestamp);
    const cleared = await patch(server, '/api/v1/namespaces/crud/pods/final-pod', MERGE, { metadata: { deletionTimestamp: null, labels: { x: 'y' } } });
    assert.equal(cleared.metadata.deletionTimestamp, deleting.metadata.deletionTimestamp);

    await patch(server, '/api/v1/namespaces/crud/pods/final-pod', MERGE, { metadata: { finalizers: null } });
    expectStatus(await request(server, 'GET', '/api/v1/namespaces/crud/pods/final-pod'), 404, 'NotFound');

    const events = await waitForEvent(watch, (e) => e.type === 'DELETED', 'DELETED after the finalizer is removed');
    assert.deepEqual(
      events.map((e) => e.type),
      ['ADDED', 'MODIFIED', 'MODIFIED', 'DELETED'],
      JSON.stringify(summary(events)),
    );
    assert.ok(events[1]!.object.metadata.deletionTimestamp, 'the MODIFIED event shows deletionTimestamp');
    watch.close();
  });
});

// ---------------------------------------------------------------------------------------------

describe('unknown fields', () => {
  const pods = '/api/v1/namespaces/fields/pods';

  before(async () => {
    await createNamespace(server, 'fields');
  });

  it('Warn (the default) drops unknown fields and says so in a Warning header', async () => {
    const res = await request(server, 'POST', pods, {
      body: { ...pod('warn-pod'), metadata: { name: 'warn-pod', bogusMeta: 'x' }, bogus: { a: 1 }, spec: { ...pod('x').spec, custom: 'kept' } },
    });
    const created = expectCode(res, 201);
    assert.equal(created.bogus, undefined);
    assert.equal(created.metadata.bogusMeta, undefined);
    const warning = String(res.headers.warning ?? '');
    assert.match(warning, /^299 - /);
    assert.ok(warning.includes('unknown field \\"bogus\\"'), warning);
    assert.ok(warning.includes('unknown field \\"metadata.bogusMeta\\"'), warning);
    const fetched = await get(server, `${pods}/warn-pod`);
    assert.equal(fetched.bogus, undefined);
    assert.equal(fetched.metadata.bogusMeta, undefined);
    assert.equal(fetched.spec.custom, 'kept', 'fields inside spec are kept');

    const put = await request(server, 'PUT', `${pods}/warn-pod?fieldValidation=Warn`, { body: { ...fetched, extra: true } });
    const updated = expectCode(put, 200);
    assert.ok(String(put.headers.warning ?? '').includes('unknown field \\"extra\\"'), String(put.headers.warning));
    assert.equal(updated.extra, undefined);
    const clean = await request(server, 'PUT', `${pods}/warn-pod`, { body: { ...fetched, metadata: { ...fetched.metadata, resourceVersion: updated.metadata.resourceVersion } } });
    expectCode(clean, 200);
    assert.equal(clean.headers.warning, undefined, 'no Warning without unknown fields');
    const patched = await request(server, 'PATCH', `${pods}/warn-pod`, { headers: MERGE, body: { alsoBogus: 1 } });
    expectCode(patched, 200);
    assert.ok(String(patched.headers.warning ?? '').includes('unknown field \\"alsoBogus\\"'), 'patches warn too');
  });

  it('Strict refuses unknown fields with a 400 naming them', async () => {
    const res = expectStatus(
      await request(server, 'POST', '/api/v1/nodes?fieldValidation=Strict', { body: { metadata: { name: 'strict-node' }, bogusField: 1 } }),
      400,
      'BadRequest',
    );
    assert.ok(res.message.includes('bogusField'), res.message);
    expectStatus(await request(server, 'GET', '/api/v1/nodes/strict-node'), 404, 'NotFound');

    await create(server, '/api/v1/nodes?fieldValidation=Strict', { metadata: { name: 'strict-node' }, spec: {} });
    const patched = expectStatus(
      await request(server, 'PATCH', '/api/v1/nodes/strict-node?fieldValidation=Strict', { headers: MERGE, body: { sneaky: 1 } }),
      400,
      'BadRequest',
    );
    assert.ok(patched.message.includes('sneaky'));
    expectStatus(await request(server, 'POST', '/api/v1/nodes?fieldValidation=Sometimes', { body: node('x') }), 400, 'BadRequest');
  });

  it('Ignore drops unknown fields silently', async () => {
    const res = await request(server, 'POST', '/api/v1/nodes?fieldValidation=Ignore', { body: { metadata: { name: 'ignore-node' }, bogus: 1 } });
    const created = expectCode(res, 201);
    assert.equal(res.headers.warning, undefined);
    assert.equal(created.bogus, undefined);
    assert.equal((await get(server, '/api/v1/nodes/ignore-node')).bogus, undefined);
  });
});

// ---------------------------------------------------------------------------------------------

describe('patches', () => {
  before(async () => {
    await createNamespace(server, 'patching');
  });

  it('a JSON merge patch with null deletes a label', async () => {
    await create(server, '/api/v1/namespaces/patching/pods', { ...pod('merge-pod'), metadata: { name: 'merge-pod', labels: { a: '1', b: '2' } } });
    const patched = await patch(server, '/api/v1/namespaces/patching/pods/merge-pod', MERGE, { metadata: { labels: { a: null, c: '3' } } });
    assert.deepEqual(patched.metadata.labels, { b: '2', c: '3' });
    assert.deepEqual((await get(server, '/api/v1/namespaces/patching/pods/merge-pod')).metadata.labels, { b: '2', c: '3' });
    expectStatus(
      await request(server, 'PATCH', '/api/v1/nodes/no-such-node', { headers: MERGE, body: { metadata: { labels: { a: 'b' } } } }),
      404,
      'NotFound',
    );
  });

  it('a JSON patch applies its operations, and a failing test op is a 422 that changes nothing', async () => {
    await create(server, '/api/v1/namespaces/patching/pods', { ...pod('jsonpatch-pod'), metadata: { name: 'jsonpatch-pod', labels: { a: '1', b: '2' } } });
    const patched = await patch(server, '/api/v1/namespaces/patching/pods/jsonpatch-pod', JSON_PATCH, [
      { op: 'test', path: '/metadata/labels/a', value: '1' },
      { op: 'replace', path: '/metadata/labels/a', value: 'one' },
      { op: 'add', path: '/metadata/labels/c', value: '3' },
      { op: 'remove', path: '/metadata/labels/b' },
      { op: 'add', path: '/spec/activeDeadlineSeconds', value: 60 },
      { op: 'replace', path: '/spec/containers/0/image', value: 'busybox:1.37' },
    ]);
    assert.deepEqual(patched.metadata.labels, { a: 'one', c: '3' });
    assert.equal(patched.spec.activeDeadlineSeconds, 60);
    assert.equal(patched.spec.containers[0].image, 'busybox:1.37');
    assert.equal(patched.metadata.generation, 2);

    const failing = await request(server, 'PATCH', '/api/v1/namespaces/patching/pods/jsonpatch-pod', {
      headers: JSON_PATCH,
      body: [
        { op: 'remove', path: '/metadata/labels/c' },
        { op: 'test', path: '/metadata/labels/a', value: 'wrong' },
      ],
    });
    expectStatus(failing, 422, 'Invalid');
    assert.deepEqual((await get(server, '/api/v1/namespaces/patching/pods/jsonpatch-pod')).metadata.labels, { a: 'one', c: '3' }, 'nothing applied');

    const missingPath = await request(server, 'PATCH', '/api/v1/namespaces/patching/pods/jsonpatch-pod', {
      headers: JSON_PATCH,
      body: [{ op: 'replace', path: '/metadata/labels/absent', value: 'x' }],
    });
    assert.ok([422, 400].includes(missingPath.status), `replace of a missing path: ${missingPath.status} ${missingPath.text}`);
  });

  it('a strategic merge patch merges pod containers by name; a merge patch replaces the list', async () => {
    await create(
      server,
      '/api/v1/namespaces/patching/pods',
      pod('smp-pod', {
        containers: [
          { name: 'app', image: 'app:1', env: [{ name: 'A', value: '1' }] },
          { name: 'sidecar', image: 'sidecar:1' },
        ],
      }),
    );
    const smp = await patch(server, '/api/v1/namespaces/patching/pods/smp-pod', STRATEGIC, {
      spec: { containers: [{ name: 'sidecar', image: 'sidecar:2' }, { name: 'extra', image: 'extra:1', command: ['sleep', '1'] }] },
    });
    const byName = new Map((smp.spec.containers as Obj[]).map((c) => [c.name as string, c]));
    assert.deepEqual([...byName.keys()].sort(), ['app', 'extra', 'sidecar']);
    assert.equal(byName.get('app')!.image, 'app:1');
    assert.deepEqual(byName.get('app')!.env, [{ name: 'A', value: '1' }]);
    assert.equal(byName.get('sidecar')!.image, 'sidecar:2');
    assert.equal(smp.metadata.generation, 2);

    const deleteDirective = await patch(server, '/api/v1/namespaces/patching/pods/smp-pod', STRATEGIC, {
      spec: { containers: [{ name: 'extra', $patch: 'delete' }] },
    });
    assert.deepEqual((deleteDirective.spec.containers as Obj[]).map((c) => c.name).sort(), ['app', 'sidecar']);

    const merge = await patch(server, '/api/v1/namespaces/patching/pods/smp-pod', MERGE, {
      spec: { containers: [{ name: 'only', image: 'only:1', command: ['sleep', '1'] }] },
    });
    assert.deepEqual(merge.spec.containers, [
      { name: 'only', image: 'only:1', command: ['sleep', '1'], terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent' },
    ]);
  });

  it('cordon and uncordon as kubectl sends them (strategic merge on a node)', async () => {
    await create(server, '/api/v1/nodes', node('cordon-node', { spec: { podCIDR: '10.5.0.0/24' } }));
    const cordoned = await patch(server, '/api/v1/nodes/cordon-node', STRATEGIC, { spec: { unschedulable: true } });
    assert.equal(cordoned.spec.unschedulable, true);
    assert.equal(cordoned.spec.podCIDR, '10.5.0.0/24');
    const listed = await get(server, `/api/v1/nodes?${q({ fieldSelector: 'spec.unschedulable=true' })}`);
    assert.ok(names(listed).includes('cordon-node'));

    const uncordoned = await patch(server, '/api/v1/nodes/cordon-node', STRATEGIC, { spec: { unschedulable: null } });
    assert.equal('unschedulable' in uncordoned.spec, false);
    assert.equal(uncordoned.spec.podCIDR, '10.5.0.0/24');

    const tainted = await patch(server, '/api/v1/nodes/cordon-node?fieldManager=kubectl-taint&fieldValidation=Strict', STRATEGIC, {
      spec: { taints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] },
    });
    assert.deepEqual(tainted.spec.taints, [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }]);
  });

  it('an unknown patch content type is a 415', async () => {
    await create(server, '/api/v1/nodes', node('ct-node'));
    expectStatus(
      await request(server, 'PATCH', '/api/v1/nodes/ct-node', { headers: { 'Content-Type': 'application/json' }, body: { metadata: {} } }),
      415,
      'UnsupportedMediaType',
    );
  });
});

// ---------------------------------------------------------------------------------------------

describe('selectors', () => {
  const ns = 'sel';
  const base = `/api/v1/namespaces/${ns}/pods`;

  before(async () => {
    await createNamespace(server, ns);
    await createNamespace(server, 'sel-other');
    await create(server, base, pod('web-front', { labels: { app: 'web', tier: 'front', 'example.com/team': 'blue' }, nodeName: 'node-a' }));
    await create(server, base, pod('web-back', { labels: { app: 'web', tier: 'back' }, nodeName: 'node-b' }));
    await create(server, base, pod('db', { labels: { app: 'db', 'example.com/team': 'red' }, nodeName: 'node-a' }));
    await create(server, base, pod('misc', { labels: { env: 'prod' } }));
    await create(server, '/api/v1/namespaces/sel-other/pods', pod('web-front', { labels: { app: 'web' }, nodeName: 'node-a' }));
    await patch(server, `${base}/web-front/status`, MERGE, { status: { phase: 'Running' } });
    await patch(server, `${base}/db/status`, MERGE, { status: { phase: 'Succeeded' } });
    const event = (name: string, about: Obj, reason: string): Obj => ({ metadata: { name }, involvedObject: about, reason, type: 'Normal', message: `${reason} happened` });
    await create(server, `/api/v1/namespaces/${ns}/events`, event('ev-web', { kind: 'Pod', name: 'web-front', namespace: ns }, 'Started'));
    await create(server, `/api/v1/namespaces/${ns}/events`, event('ev-db', { kind: 'Pod', name: 'db', namespace: ns }, 'Killing'));
    await create(server, '/api/v1/namespaces/default/events', event('ev-node', { kind: 'Node', name: 'node-a' }, 'NodeReady'));
  });

  async function podNames(params: Record<string, string>, urlBase = base): Promise<string[]> {
    return names(await get(server, `${urlBase}?${q(params)}`));
  }

  it('label selectors: =, ==, !=, in, notin, exists, !key and combinations', async () => {
    const cases: [string, string[]][] = [
      ['app=web', ['web-back', 'web-front']],
      ['app==web', ['web-back', 'web-front']],
      ['app!=web', ['db', 'misc']],
      ['app in (web,db)', ['db', 'web-back', 'web-front']],
      ['app in ( web , db )', ['db', 'web-back', 'web-front']],
      ['example.com/team=blue', ['web-front']],
      ['example.com/team', ['db', 'web-front']],
      ['example.com/team notin (blue)', ['db', 'misc', 'web-back']],
      ['app in (nope)', []],
      ['app notin (web)', ['db', 'misc']],
      ['tier', ['web-back', 'web-front']],
      ['!tier', ['db', 'misc']],
      ['app=web,tier!=front', ['web-back']],
      ['app,!tier', ['db']],
      ['', ['db', 'misc', 'web-back', 'web-front']],
    ];
    for (const [selector, expected] of cases) {
      assert.deepEqual(await podNames({ labelSelector: selector }), expected, `labelSelector=${selector}`);
    }
    expectStatus(await request(server, 'GET', `${base}?${q({ labelSelector: 'app in web' })}`), 400, 'BadRequest');
  });

  it('field selectors on pods: metadata.name, metadata.namespace, spec.nodeName, status.phase', async () => {
    const cases: [string, string[]][] = [
      ['metadata.name=db', ['db']],
      ['metadata.name!=db', ['misc', 'web-back', 'web-front']],
      ['spec.nodeName=node-a', ['db', 'web-front']],
      ['spec.nodeName=', ['misc']],
      ['status.phase=Running', ['web-front']],
      ['status.phase=Pending', ['misc', 'web-back']],
      ['spec.nodeName=node-a,status.phase!=Succeeded,status.phase!=Failed', ['web-front']],
      [`metadata.namespace=${ns}`, ['db', 'misc', 'web-back', 'web-front']],
    ];
    for (const [selector, expected] of cases) {
      assert.deepEqual(await podNames({ fieldSelector: selector }), expected, `fieldSelector=${selector}`);
    }
    assert.deepEqual(await podNames({ labelSelector: 'app=web', fieldSelector: 'spec.nodeName=node-b' }), ['web-back']);

    const cluster = async (params: Record<string, string>): Promise<string[]> =>
      ((await get(server, `/api/v1/pods?${q(params)}`)).items as Obj[]).map((p) => `${p.metadata.namespace}/${p.metadata.name}`);
    assert.deepEqual(await cluster({ fieldSelector: `metadata.namespace=${ns}` }), [`${ns}/db`, `${ns}/misc`, `${ns}/web-back`, `${ns}/web-front`]);
    assert.deepEqual((await cluster({ fieldSelector: 'metadata.name=web-front' })).sort(), ['sel-other/web-front', 'sel/web-front']);
    assert.deepEqual(await cluster({ fieldSelector: 'metadata.namespace=sel-other', labelSelector: 'app=web' }), ['sel-other/web-front']);
  });

  it('field selectors on events: involvedObject.* (and regarding.* on events.k8s.io)', async () => {
    assert.deepEqual(names(await get(server, `/api/v1/namespaces/${ns}/events?${q({ fieldSelector: 'involvedObject.name=web-front' })}`)), ['ev-web']);
    assert.deepEqual(
      names(await get(server, `/api/v1/events?${q({ fieldSelector: 'involvedObject.name=node-a,involvedObject.kind=Node,involvedObject.namespace=' })}`)),
      ['ev-node'],
    );
    assert.deepEqual(names(await get(server, `/api/v1/events?${q({ fieldSelector: 'reason=Killing' })}`)), ['ev-db']);
    const v1 = await get(server, `/apis/events.k8s.io/v1/namespaces/${ns}/events?${q({ fieldSelector: 'regarding.name=web-front' })}`);
    assert.equal(v1.kind, 'EventList');
    assert.equal(v1.apiVersion, 'events.k8s.io/v1');
    assert.deepEqual(names(v1), ['ev-web']);
    assert.equal(v1.items[0].regarding.name, 'web-front');
    assert.equal(v1.items[0].note, 'Started happened');
    assert.equal(v1.items[0].apiVersion, 'events.k8s.io/v1');
    assert.equal(v1.items[0].message, undefined);

    // Written as events.k8s.io/v1, read as core/v1 (one stored shape).
    await create(server, `/apis/events.k8s.io/v1/namespaces/${ns}/events`, {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { name: 'ev-new' },
      eventTime: '2026-01-01T00:00:00.000000Z',
      reportingController: 'drover.test/controller',
      reportingInstance: 'test-1',
      action: 'Testing',
      reason: 'Checked',
      regarding: { kind: 'Node', name: 'node-b' },
      note: 'written through events.k8s.io',
      type: 'Normal',
    });
    const core = await get(server, `/api/v1/namespaces/${ns}/events/ev-new`);
    assert.equal(core.apiVersion, 'v1');
    assert.equal(core.message, 'written through events.k8s.io');
    assert.deepEqual(core.involvedObject, { kind: 'Node', name: 'node-b' });
    assert.equal(core.reportingComponent, 'drover.test/controller');
    assert.equal(core.note, undefined);
    assert.deepEqual(names(await get(server, `/api/v1/events?${q({ fieldSelector: 'involvedObject.name=node-b' })}`)), ['ev-new']);
  });

  it('an unsupported field label is a 400, on list and on watch', async () => {
    for (const urlPath of [
      `${base}?${q({ fieldSelector: 'spec.bogus=x' })}`,
      `${base}?${q({ fieldSelector: 'metadata.labels=x' })}`,
      `/api/v1/nodes?${q({ fieldSelector: 'status.phase=Running' })}`,
      `${base}?${q({ fieldSelector: 'spec.bogus=x', watch: '1' })}`,
      `/api/v1/events?${q({ fieldSelector: 'spec.nodeName=x', watch: 'true' })}`,
    ]) {
      const res = expectStatus(await request(server, 'GET', urlPath), 400, 'BadRequest', urlPath);
      assert.match(res.message, /field label not supported/, urlPath);
    }
  });

  it('selectors apply to watches, and a watched object that stops matching is DELETED', async () => {
    const labelWatch = await openWatch(server, `${base}?${q({ watch: '1', labelSelector: 'app=web' })}`);
    const initial = await waitForEvents(labelWatch, 2, 'the initial ADDED events');
    assert.deepEqual(summary(initial), ['ADDED sel/web-back', 'ADDED sel/web-front']);
    const rv = (await get(server, base)).metadata.resourceVersion as string;
    const fieldWatch = await openWatch(server, `/api/v1/pods?${q({ watch: 'true', fieldSelector: 'spec.nodeName=node-a', resourceVersion: rv })}`);
    const phaseWatch = await openWatch(server, `${base}?${q({ watch: '1', fieldSelector: 'status.phase=Running', resourceVersion: rv })}`);

    await create(server, base, pod('late-db', { labels: { app: 'db' } }));
    await create(server, base, pod('late-web', { labels: { app: 'web' } }));
    const leaving = await patch(server, `${base}/late-web`, MERGE, { metadata: { labels: { app: 'db' } } });
    await patch(server, `${base}/late-db`, MERGE, { metadata: { labels: { app: 'web' } } });
    await create(server, base, pod('late-b', { nodeName: 'node-b' }));
    await patch(server, `${base}/late-b/status`, MERGE, { status: { phase: 'Running' } });
    await patch(server, `${base}/web-front`, MERGE, { metadata: { annotations: { touched: 'yes' } } });
    await create(server, base, pod('late-a', { nodeName: 'node-a' }));

    const labelEvents = await waitForEvent(labelWatch, (e) => e.type === 'MODIFIED' && e.object.metadata.name === 'web-front', 'web-front MODIFIED');
    assert.deepEqual(summary(labelEvents), [
      'ADDED sel/web-back',
      'ADDED sel/web-front',
      'ADDED sel/late-web',
      'DELETED sel/late-web',
      'ADDED sel/late-db',
      'MODIFIED sel/web-front',
    ]);
    // As kube-apiserver's watch cache does: the last state the watcher could match, at the
    // resourceVersion of the change that made it leave the selection.
    assert.equal(labelEvents[3]!.object.metadata.labels.app, 'web', 'the DELETED event carries the last matching state');
    assert.equal(labelEvents[3]!.object.metadata.resourceVersion, leaving.metadata.resourceVersion);

    const fieldEvents = await waitForEvent(fieldWatch, (e) => e.object.metadata.name === 'late-a', 'late-a ADDED');
    assert.deepEqual(summary(fieldEvents), ['MODIFIED sel/web-front', 'ADDED sel/late-a']);

    const phaseEvents = await waitForEvent(phaseWatch, (e) => e.object.metadata.name === 'web-front', 'web-front MODIFIED');
    assert.deepEqual(summary(phaseEvents), ['ADDED sel/late-b', 'MODIFIED sel/web-front']);

    labelWatch.close();
    fieldWatch.close();
    phaseWatch.close();
  });
});

// ---------------------------------------------------------------------------------------------

describe('paging', () => {
  const ns = 'paging';
  const base = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`;
  const all = Array.from({ length: 25 }, (_, i) => `lease-${String(i).padStart(2, '0')}`);

  before(async () => {
    await createNamespace(server, ns);
    for (const [i, name] of all.entries()) {
      await create(server, base, { ...lease(name), metadata: { name, labels: { parity: i % 2 ? 'odd' : 'even' } } });
    }
  });

  async function page(params: Record<string, string>): Promise<Obj> {
    return get(server, `${base}?${q(params)}`);
  }

  it('limit/continue returns every object exactly once at one resourceVersion', async () => {
    const seen: string[] = [];
    const pageSizes: number[] = [];
    let token: string | undefined;
    let resourceVersion: string | undefined;
    for (let i = 0; i < 10; i++) {
      const result = await page({ limit: '10', ...(token ? { continue: token } : {}) });
      seen.push(...names(result));
      pageSizes.push(result.items.length);
      resourceVersion ??= result.metadata.resourceVersion;
      assert.equal(result.metadata.resourceVersion, resourceVersion, 'every page is at the first page’s resourceVersion');
      token = result.metadata.continue;
      if (!token) break;
    }
    assert.deepEqual(pageSizes, [10, 10, 5]);
    assert.deepEqual(seen, all);

    const full = await page({});
    assert.deepEqual(names(full), all);
    assert.equal(full.metadata.continue, undefined);
    const exact = await page({ limit: '25' });
    assert.equal(exact.items.length, 25);
    assert.ok(!exact.metadata.continue, 'no continue token when nothing is left');
  });

  it('limit with a label selector fills pages with matching objects', async () => {
    const seen: string[] = [];
    let token: string | undefined;
    const sizes: number[] = [];
    do {
      const result = await page({ limit: '4', labelSelector: 'parity=even', ...(token ? { continue: token } : {}) });
      seen.push(...names(result));
      sizes.push(result.items.length);
      token = result.metadata.continue;
    } while (token && sizes.length < 20);
    assert.deepEqual(seen, all.filter((_, i) => i % 2 === 0));
    assert.deepEqual(sizes.slice(0, 3), [4, 4, 4]);
  });

  it('a continue token reads the snapshot it was issued at, even after further writes', async () => {
    const first = await page({ limit: '10' });
    assert.deepEqual(names(first), all.slice(0, 10));
    const token = first.metadata.continue as string;
    assert.ok(token);

    await create(server, base, lease('lease-09a'));
    expectCode(await request(server, 'DELETE', `${base}/lease-15`), 200);
    await patch(server, `${base}/lease-20`, MERGE, { spec: { holderIdentity: 'holder-b' } });

    const second = await page({ limit: '10', continue: token });
    assert.equal(second.metadata.resourceVersion, first.metadata.resourceVersion);
    assert.deepEqual(names(second), all.slice(10, 20), 'lease-09a absent and lease-15 still present');
    const third = await page({ limit: '10', continue: second.metadata.continue as string });
    assert.deepEqual(names(third), all.slice(20));
    assert.equal(third.items[0].spec.holderIdentity, 'holder-a', 'lease-20 as it was at the snapshot');
    assert.equal(third.metadata.continue, undefined);

    const fresh = await page({});
    assert.ok(Number(fresh.metadata.resourceVersion) > Number(first.metadata.resourceVersion));
    assert.ok(names(fresh).includes('lease-09a'));
    assert.ok(!names(fresh).includes('lease-15'));
    assert.equal((fresh.items as Obj[]).find((l) => l.metadata.name === 'lease-20')!.spec.holderIdentity, 'holder-b');

    expectStatus(await request(server, 'GET', `${base}?${q({ limit: '10', continue: 'not-a-token' })}`), 400, 'BadRequest');
    expectStatus(await request(server, 'GET', `${base}?${q({ limit: '-1' })}`), 400, 'BadRequest');
  });
});

// ---------------------------------------------------------------------------------------------

describe('watch', () => {
  const ns = 'watching';
  const base = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`;

  before(async () => {
    await createNamespace(server, ns);
  });

  it('streams ADDED/MODIFIED/DELETED as JSON lines, with headers sent before any event', async () => {
    // Without the flush the headers would wait for the first event, which only comes below: the
    // ceiling is generous, the proof is that they arrived with no event sent.
    const watch = await openWatch(server, `${base}?watch=1`, { headersTimeoutMs: 20_000 });
    assert.equal(watch.status, 200);
    assert.equal(watch.headers['content-type'], 'application/json');
    assert.equal(watch.headers['transfer-encoding'], 'chunked');
    assert.equal(watch.events.length, 0, 'nothing to send yet');
    assert.equal(watch.raw(), '');

    const created = await create(server, base, lease('w1'));
    const modified = await patch(server, `${base}/w1`, MERGE, { spec: { holderIdentity: 'holder-b' } });
    const deleted = expectCode(await request(server, 'DELETE', `${base}/w1`), 200);

    const events = await waitForEvents(watch, 3, 'three events');
    assert.deepEqual(events.map((e) => e.type), ['ADDED', 'MODIFIED', 'DELETED']);
    for (const event of events) {
      assert.equal(event.object.kind, 'Lease');
      assert.equal(event.object.apiVersion, 'coordination.k8s.io/v1');
      assert.equal(event.object.metadata.name, 'w1');
    }
    assert.equal(events[0]!.object.metadata.resourceVersion, created.metadata.resourceVersion);
    assert.equal(events[1]!.object.metadata.resourceVersion, modified.metadata.resourceVersion);
    assert.equal(events[1]!.object.spec.holderIdentity, 'holder-b');
    assert.ok(watch.raw().endsWith('\n'), 'each event ends with a newline');
    assert.equal(watch.raw().split('\n').filter(Boolean).length, 3, 'one JSON object per line');

    // The DELETED event carries the object at the deletion's resourceVersion.
    const deletedRv = events[2]!.object.metadata.resourceVersion as string;
    assert.ok(Number(deletedRv) > Number(modified.metadata.resourceVersion), `deleted rv ${deletedRv} > ${modified.metadata.resourceVersion}`);
    assert.equal(deleted.status, 'Success', 'a lease is not returned by its DELETE: a Status is');
    assert.equal(events[2]!.object.metadata.uid, deleted.details.uid, 'the DELETE response and the DELETED event agree');
    assert.equal(events[2]!.object.spec.holderIdentity, 'holder-b', 'the last state of the object');
    const listRv = (await get(server, base)).metadata.resourceVersion as string;
    assert.ok(Number(listRv) >= Number(deletedRv));
    watch.close();
  });

  it('a watch from a resourceVersion replays later changes in order', async () => {
    const rv0 = (await get(server, base)).metadata.resourceVersion as string;
    const writes: [string, string, string][] = [];
    const record = (type: string, obj: Obj): void => {
      writes.push([type, obj.metadata.name as string, obj.metadata.resourceVersion as string]);
    };
    record('ADDED', await create(server, base, lease('r-a')));
    record('MODIFIED', await patch(server, `${base}/r-a`, MERGE, { spec: { holderIdentity: 'x' } }));
    record('ADDED', await create(server, base, lease('r-b')));
    // A DELETE answers a Status (no resourceVersion): the event's place is checked by the order below.
    expectCode(await request(server, 'DELETE', `${base}/r-a`), 200);
    writes.push(['DELETED', 'r-a', '']);
    record('MODIFIED', await patch(server, `${base}/r-b`, MERGE, { metadata: { labels: { l: 'v' } } }));

    const replay = await openWatch(server, `${base}?${q({ watch: '1', resourceVersion: rv0 })}`);
    const events = await waitForEvents(replay, writes.length, 'replayed events');
    assert.deepEqual(
      events.map((e) => [e.type, e.object.metadata.name, e.type === 'DELETED' ? '' : e.object.metadata.resourceVersion]),
      writes,
    );
    const rvs = events.map((e) => Number(e.object.metadata.resourceVersion));
    assert.deepEqual([...rvs].sort((a, b) => a - b), rvs, 'in resourceVersion order');

    // From the middle: only what came after.
    const fromMiddle = await openWatch(server, `${base}?${q({ watch: '1', resourceVersion: writes[2]![2] })}`);
    const tail = await waitForEvents(fromMiddle, 2, 'events after the third write');
    assert.deepEqual(tail.map((e) => [e.type, e.object.metadata.name]), [['DELETED', 'r-a'], ['MODIFIED', 'r-b']]);

    // Without a resourceVersion: the current objects as ADDED, then changes.
    const fresh = await openWatch(server, `${base}?watch=true`);
    const initial = await waitForEvents(fresh, 1, 'initial state');
    assert.deepEqual(summary(initial), [`ADDED ${ns}/r-b`]);
    await patch(server, `${base}/r-b`, MERGE, { spec: { holderIdentity: 'y' } });
    const next = await waitForEvents(fresh, 2, 'the change after the initial state');
    assert.deepEqual(summary(next), [`ADDED ${ns}/r-b`, `MODIFIED ${ns}/r-b`]);
    // From a resourceVersion that is current: nothing until the next change.
    const current = (await get(server, base)).metadata.resourceVersion as string;
    const quiet = await openWatch(server, `${base}?${q({ watch: '1', resourceVersion: current })}`);
    await create(server, base, lease('r-c'));
    assert.deepEqual(summary(await waitForEvents(quiet, 1, 'r-c')), [`ADDED ${ns}/r-c`]);

    for (const s of [replay, fromMiddle, fresh, quiet]) s.close();
  });

  it('the legacy /watch/ path and single-object watches work', async () => {
    const rv = (await get(server, base)).metadata.resourceVersion as string;
    const legacy = await openWatch(server, `/apis/coordination.k8s.io/v1/watch/namespaces/${ns}/leases?${q({ resourceVersion: rv })}`);
    const single = await openWatch(server, `${base}/only-me?${q({ watch: '1', resourceVersion: rv })}`);
    await create(server, base, lease('not-me'));
    await create(server, base, lease('only-me'));
    assert.deepEqual(summary(await waitForEvents(legacy, 2, 'legacy watch')), [`ADDED ${ns}/not-me`, `ADDED ${ns}/only-me`]);
    assert.deepEqual(summary(await waitForEvent(single, (e) => e.object.metadata.name === 'only-me', 'only-me')), [`ADDED ${ns}/only-me`]);
    legacy.close();
    single.close();
  });

  it('a watch with a Table Accept gets one-row Tables with row objects', async () => {
    const rv = (await get(server, base)).metadata.resourceVersion as string;
    const watch = await openWatch(server, `${base}?${q({ watch: 'true', resourceVersion: rv })}`, { headers: { Accept: TABLE_ACCEPT } });
    assert.equal(watch.status, 200);
    await create(server, base, lease('table-lease', 'holder-t'));
    await patch(server, `${base}/table-lease`, MERGE, { spec: { holderIdentity: 'holder-u' } });
    const events = await waitForEvents(watch, 2, 'table events');
    assert.deepEqual(events.map((e) => e.type), ['ADDED', 'MODIFIED']);
    for (const event of events) {
      const table = event.object;
      assert.equal(table.kind, 'Table');
      assert.equal(table.apiVersion, 'meta.k8s.io/v1');
      assert.deepEqual((table.columnDefinitions as Obj[]).map((c) => c.name), ['Name', 'Holder', 'Age']);
      assert.equal(table.rows.length, 1);
      const row = table.rows[0];
      assert.equal(row.cells[0], 'table-lease');
      assert.equal(row.object.kind, 'PartialObjectMetadata');
      assert.equal(row.object.apiVersion, 'meta.k8s.io/v1');
      assert.equal(row.object.metadata.name, 'table-lease');
      assert.equal(row.object.metadata.namespace, ns);
      assert.equal(row.object.spec, undefined);
      assert.equal(table.metadata.resourceVersion, row.object.metadata.resourceVersion);
    }
    assert.equal(events[0]!.object.rows[0].cells[1], 'holder-t');
    assert.equal(events[1]!.object.rows[0].cells[1], 'holder-u');
    watch.close();
  });

  it('allowWatchBookmarks=true is accepted', async () => {
    const rv = (await get(server, base)).metadata.resourceVersion as string;
    const watch = await openWatch(
      server,
      `${base}?${q({ watch: 'true', allowWatchBookmarks: 'true', resourceVersion: rv, timeoutSeconds: '426' })}`,
    );
    assert.equal(watch.status, 200);
    await create(server, base, lease('bookmark-lease'));
    const events = await waitForEvent(watch, (e) => e.type === 'ADDED', 'ADDED');
    assert.deepEqual(summary(events.filter((e) => e.type !== 'BOOKMARK')), [`ADDED ${ns}/bookmark-lease`]);
    assert.ok(events.every((e) => e.type !== 'ERROR'));
    watch.close();
  });

  it('a watch with timeoutSeconds ends by itself', async () => {
    const watch = await openWatch(server, `${base}?${q({ watch: '1', timeoutSeconds: '1', resourceVersion: '0' })}`);
    assert.equal(watch.status, 200);
    await eventually(() => watch.isEnded(), 'the watch to end after timeoutSeconds', 20_000);
  });
});

// ---------------------------------------------------------------------------------------------

describe('tables', () => {
  it('nodes: Name/Status/Roles/Age/Version, wide columns at priority 1, rows with PartialObjectMetadata', async () => {
    await create(server, '/api/v1/nodes', node('table-node', { metadata: { name: 'table-node', labels: { 'node-role.kubernetes.io/control-plane': '' } } }));
    await patch(server, '/api/v1/nodes/table-node/status', MERGE, {
      status: {
        conditions: [{ type: 'Ready', status: 'True' }],
        addresses: [{ type: 'InternalIP', address: '10.1.2.3' }],
        nodeInfo: { kubeletVersion: 'v1.31.0', osImage: 'Debian GNU/Linux 12', kernelVersion: '6.1.0', containerRuntimeVersion: 'containerd://1.7' },
      },
    });
    await patch(server, '/api/v1/nodes/table-node', STRATEGIC, { spec: { unschedulable: true } });

    const res = await request(server, 'GET', '/api/v1/nodes?limit=500', { headers: { Accept: TABLE_ACCEPT } });
    const table = expectCode(res, 200);
    assert.equal(table.kind, 'Table');
    assert.equal(table.apiVersion, 'meta.k8s.io/v1');
    assert.match(table.metadata.resourceVersion, /^\d+$/);
    const columns = table.columnDefinitions as Obj[];
    assert.deepEqual(
      columns.map((c) => [c.name, c.priority]),
      [
        ['Name', 0],
        ['Status', 0],
        ['Roles', 0],
        ['Age', 0],
        ['Version', 0],
        ['Internal-IP', 1],
        ['External-IP', 1],
        ['OS-Image', 1],
        ['Kernel-Version', 1],
        ['Container-Runtime', 1],
      ],
    );
    assert.equal(columns[0]!.format, 'name');
    for (const column of columns) {
      assert.equal(typeof column.type, 'string');
      assert.equal(typeof column.description, 'string');
    }
    const row = (table.rows as Obj[]).find((r) => r.object?.metadata?.name === 'table-node');
    assert.ok(row, 'a row for table-node');
    assert.equal(row.cells.length, columns.length);
    assert.deepEqual(
      [row.cells[0], row.cells[1], row.cells[2], row.cells[4], row.cells[5], row.cells[6], row.cells[7], row.cells[8], row.cells[9]],
      ['table-node', 'Ready,SchedulingDisabled', 'control-plane', 'v1.31.0', '10.1.2.3', '<none>', 'Debian GNU/Linux 12', '6.1.0', 'containerd://1.7'],
    );
    assert.match(row.cells[3], /^\d+s$/);
    assert.equal(row.object.kind, 'PartialObjectMetadata');
    assert.equal(row.object.apiVersion, 'meta.k8s.io/v1');
    assert.match(row.object.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.equal(row.object.spec, undefined);
    assert.equal(row.object.status, undefined);
    assert.equal((table.rows as Obj[]).length, (await get(server, '/api/v1/nodes')).items.length, 'one row per node');

    const single = expectCode(await request(server, 'GET', '/api/v1/nodes/table-node', { headers: { Accept: TABLE_ACCEPT } }), 200);
    assert.equal(single.kind, 'Table');
    assert.equal(single.rows.length, 1);
    assert.equal(single.rows[0].cells[0], 'table-node');

    const full = expectCode(await request(server, 'GET', '/api/v1/nodes/table-node?includeObject=Object', { headers: { Accept: TABLE_ACCEPT } }), 200);
    assert.equal(full.rows[0].object.kind, 'Node');
    const none = expectCode(await request(server, 'GET', '/api/v1/nodes?includeObject=None', { headers: { Accept: TABLE_ACCEPT } }), 200);
    assert.ok((none.rows as Obj[]).every((r) => r.object === undefined));

    // Typed clients offer protobuf first; JSON is served.
    const typed = await request(server, 'GET', '/api/v1/nodes/table-node', { headers: { Accept: 'application/vnd.kubernetes.protobuf,application/json' } });
    assert.equal(expectCode(typed, 200).kind, 'Node');
  });

  it('pods across namespaces (-A): rows carry object.metadata.namespace', async () => {
    await createNamespace(server, 'tbl-a');
    await createNamespace(server, 'tbl-b');
    await create(server, '/api/v1/namespaces/tbl-a/pods', pod('tp', { nodeName: 'node-x' }));
    await create(server, '/api/v1/namespaces/tbl-b/pods', pod('tp'));
    const table = expectCode(await request(server, 'GET', '/api/v1/pods?limit=500', { headers: { Accept: TABLE_ACCEPT } }), 200);
    assert.deepEqual(
      (table.columnDefinitions as Obj[]).map((c) => [c.name, c.priority]),
      [
        ['Name', 0],
        ['Ready', 0],
        ['Status', 0],
        ['Restarts', 0],
        ['Age', 0],
        ['IP', 1],
        ['Node', 1],
        ['Nominated Node', 1],
        ['Readiness Gates', 1],
      ],
    );
    const rows = (table.rows as Obj[]).filter((r) => r.cells[0] === 'tp');
    assert.deepEqual(rows.map((r) => r.object.metadata.namespace).sort(), ['tbl-a', 'tbl-b']);
    const rowA = rows.find((r) => r.object.metadata.namespace === 'tbl-a')!;
    assert.deepEqual([rowA.cells[1], rowA.cells[2], rowA.cells[3], rowA.cells[6]], ['0/1', 'Pending', '0', 'node-x']);
    assert.ok((table.rows as Obj[]).every((r) => typeof r.object?.metadata?.namespace === 'string' && r.object.metadata.namespace));
  });

  it('namespaces and leases have their own columns', async () => {
    const namespaces = expectCode(await request(server, 'GET', '/api/v1/namespaces', { headers: { Accept: TABLE_ACCEPT } }), 200);
    assert.deepEqual((namespaces.columnDefinitions as Obj[]).map((c) => c.name), ['Name', 'Status', 'Age']);
    const defaultRow = (namespaces.rows as Obj[]).find((r) => r.cells[0] === 'default');
    assert.equal(defaultRow?.cells[1], 'Active');
    const leases = expectCode(
      await request(server, 'GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { headers: { Accept: TABLE_ACCEPT } }),
      200,
    );
    assert.deepEqual((leases.columnDefinitions as Obj[]).map((c) => c.name), ['Name', 'Holder', 'Age']);
  });
});

// ---------------------------------------------------------------------------------------------

describe('410 Gone after compaction (in-process API server)', () => {
  let server: InProcessApiServer;
  let datastore: InProcessApiServer['datastore'];
  let target: Target;

  before(async () => {
    server = await startInProcessApiServer({ handler: { bookmarkIntervalMs: 100 } });
    dirs.push(server.dir);
    ({ datastore, target } = server);
  });

  after(async () => {
    closeAllStreams();
    await server?.close();
  });

  it('a watch from a compacted resourceVersion gets an ERROR event with 410 Expired; a list with an old continue token is 410', async () => {
    const first = await create(target, '/api/v1/nodes', node('gone-0'));
    for (let i = 1; i < 12; i++) await create(target, '/api/v1/nodes', node(`gone-${i}`));
    const page = await get(target, '/api/v1/nodes?limit=5');
    const token = page.metadata.continue as string;
    assert.ok(token);
    // Before compaction both work.
    expectCode(await request(target, 'GET', `/api/v1/nodes?${q({ limit: '5', continue: token })}`), 200);
    for (let i = 0; i < 5; i++) await patch(target, `/api/v1/nodes/gone-${i}`, MERGE, { metadata: { labels: { round: String(i) } } });

    const current = await datastore.currentRevision();
    await datastore.compact(current);

    const watch = await openWatch(target, `/api/v1/nodes?${q({ watch: '1', resourceVersion: first.metadata.resourceVersion as string })}`);
    assert.equal(watch.status, 200);
    const events = await waitForEvents(watch, 1, 'the ERROR event');
    assert.equal(events[0]!.type, 'ERROR', JSON.stringify(events));
    const status = events[0]!.object;
    assert.equal(status.kind, 'Status');
    assert.equal(status.code, 410);
    assert.equal(status.reason, 'Expired');
    assert.match(status.message, /too old resource version/);
    await eventually(() => watch.isEnded(), 'the server to end the expired watch', 20_000);

    const expired = expectStatus(await request(target, 'GET', `/api/v1/nodes?${q({ limit: '5', continue: token })}`), 410, 'Expired');
    assert.match(expired.message, /continue/);

    // The head of history still works: a plain list, and a watch from the compacted revision on.
    assert.equal((await get(target, '/api/v1/nodes')).items.length, 12);
    const live = await openWatch(target, `/api/v1/nodes?${q({ watch: '1', resourceVersion: String(current) })}`);
    await create(target, '/api/v1/nodes', node('after-compaction'));
    assert.deepEqual(summary(await waitForEvents(live, 1, 'event after compaction')), ['ADDED after-compaction']);
    live.close();
  });

  it('bookmarks arrive only when asked for, with the latest resourceVersion', async () => {
    const rv = (await get(target, '/api/v1/nodes')).metadata.resourceVersion as string;
    const without = await openWatch(target, `/api/v1/nodes?${q({ watch: '1', resourceVersion: rv })}`);
    const withBookmarks = await openWatch(target, `/api/v1/nodes?${q({ watch: '1', resourceVersion: rv, allowWatchBookmarks: 'true' })}`);
    await create(target, '/api/v1/nodes', node('bookmark-node'));
    await waitForEvents(without, 1, 'the ADDED event');
    // Writes elsewhere move the revision on without events for these watches: bookmarks report it.
    const ns1 = await createNamespace(target, 'bookmark-ns-1');
    const first = await waitForEvent(withBookmarks, (e) => e.type === 'BOOKMARK', 'a BOOKMARK');
    assert.deepEqual(summary(first.slice(0, 1)), ['ADDED bookmark-node']);
    const bookmark = first.at(-1)!;
    assert.equal(bookmark.object.kind, 'Node');
    assert.equal(bookmark.object.apiVersion, 'v1');
    assert.equal(bookmark.object.metadata.resourceVersion, ns1.metadata.resourceVersion);
    const ns2 = await createNamespace(target, 'bookmark-ns-2');
    await waitForEvent(
      withBookmarks,
      (e) => e.type === 'BOOKMARK' && e.object.metadata.resourceVersion === ns2.metadata.resourceVersion,
      'a second BOOKMARK',
    );
    // Both watches have had several bookmark intervals by now.
    assert.deepEqual(summary(without.events), ['ADDED bookmark-node'], 'no bookmarks unless asked for');
    without.close();
    withBookmarks.close();
  });
});

// ---------------------------------------------------------------------------------------------

describe('shutdown and the data dir lock', () => {
  /**
   * SIGTERM is answered by a clean stop, exit code 0, before the watchdog (shutdown-grace-period
   * + 5 s = 15 s) would exit 1. How long the stop takes (normally well under a second) is a
   * figure: bench/coldstart.ts measures it. The tests hold it to the watchdog's limit only.
   */
  const WATCHDOG_MS = 15_000;

  /** Send SIGTERM and wait up to `limitMs` for the exit; SIGKILL by PID after that. */
  async function terminate(target: ServerProcess, limitMs: number): Promise<{ code: number | null; elapsedMs: number; timedOut: boolean }> {
    const started = Date.now();
    process.kill(target.pid, 'SIGTERM');
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      if (target.process.exitCode === null && target.process.signalCode === null) target.process.kill('SIGKILL');
    }, limitMs);
    const code = await target.exited;
    clearTimeout(timer);
    await target.stop();
    return { code, elapsedMs: Date.now() - started, timedOut };
  }

  it('a second server on the same data dir fails with "in use"; SIGTERM exits 0, before the watchdog', async () => {
    // The default configuration, embedded agent included (on a free port).
    const first = await startServer({ embeddedAgent: true });
    dirs.push(first.dataDir);
    await create(first, '/api/v1/nodes', node('persisted-node'));

    let second: ChildProcess | undefined;
    try {
      second = spawn(
        process.execPath,
        [DROVER_BIN, 'server', '--data-dir', first.dataDir, '--https-listen-port', '0', '--bind-address', '127.0.0.1', '--agent-port', '0', '--node-ip', '127.0.0.1'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let output = '';
      second.stdout!.on('data', (c: Buffer) => (output += c.toString()));
      second.stderr!.on('data', (c: Buffer) => (output += c.toString()));
      const child = second;
      const code = await new Promise<number | null>((resolve, reject) => {
        // A ceiling, not a figure: at load 25 a server had printed nothing yet after 15 s (module loading).
        const timer = setTimeout(() => reject(new Error(`second server did not exit; output:\n${output}`)), 60_000);
        child.once('exit', (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      assert.notEqual(code, 0, `second server exit code; output:\n${output}`);
      assert.notEqual(code, null);
      assert.match(output, /in use/, output);
      assert.ok(output.includes(String(first.pid)), `names the owner pid ${first.pid}: ${output}`);
      assert.doesNotMatch(output, /Drover server is ready/);
    } finally {
      if (second && second.exitCode === null && second.signalCode === null) second.kill('SIGKILL');
    }

    // The first keeps serving.
    assert.equal(first.process.exitCode, null);
    assert.equal((await request(first, 'GET', '/readyz', { token: null })).text, 'ok');
    await get(first, '/api/v1/nodes/persisted-node');
    await create(first, '/api/v1/nodes', node('after-second'));

    // Its own agent has registered its node: a steady, fully started server.
    const watch = await openWatch(first, '/api/v1/nodes?watch=1');
    await waitForEvents(watch, 3, 'the two test nodes and the server’s own node');
    assert.equal(watch.isEnded(), false);

    const { code, elapsedMs, timedOut } = await terminate(first, WATCHDOG_MS + 15_000);
    assert.equal(timedOut, false, `still running ${elapsedMs} ms after SIGTERM`);
    assert.equal(code, 0, first.output().slice(-2000));
    assert.doesNotMatch(first.output(), /shutdown took longer than/, 'the stop finished before the watchdog');
    await eventually(() => watch.isEnded(), 'the open watch to be closed by shutdown', 20_000);
    assert.match(first.output(), /shutdown complete/);
    assert.equal(fs.existsSync(path.join(first.dataDir, 'server.lock')), false, 'the lock is released');

    // The data dir can be used again, and the data survived.
    const again = await startServer({ dataDir: first.dataDir });
    await get(again, '/api/v1/nodes/persisted-node');
    await get(again, '/api/v1/nodes/after-second');
    const restarted = await terminate(again, WATCHDOG_MS + 15_000);
    assert.equal(restarted.code, 0, `exit code ${restarted.code} ${restarted.elapsedMs} ms after SIGTERM`);
  });

  it(
    'SIGTERM right after start, before the embedded agent has registered, still exits 0, before the watchdog',
    async () => {
      const dataDir = tempDir('early-sigterm');
      dirs.push(dataDir);
      const child = spawn(
        process.execPath,
        [DROVER_BIN, 'server', '--data-dir', dataDir, '--https-listen-port', '0', '--bind-address', '127.0.0.1', '--agent-port', '0', '--node-ip', '127.0.0.1'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      try {
        let output = '';
        let signalledAt = 0;
        const timers: NodeJS.Timeout[] = [setTimeout(() => child.kill('SIGKILL'), 60_000)];
        child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
        // SIGTERM the moment the server says it is ready, as a quick stop after a start would.
        child.stdout!.on('data', (c: Buffer) => {
          output += c.toString();
          if (!signalledAt && output.includes('Drover server is ready')) {
            signalledAt = Date.now();
            child.kill('SIGTERM');
            // Past the watchdog, which exits 1 by itself: a stop that hangs for good is killed.
            timers.push(setTimeout(() => child.kill('SIGKILL'), WATCHDOG_MS + 15_000));
          }
        });
        const code = await new Promise<number | null>((resolve) => {
          child.once('exit', (c) => {
            for (const timer of timers) clearTimeout(timer);
            resolve(c);
          });
        });
        const elapsedMs = Date.now() - signalledAt;
        assert.ok(signalledAt > 0, `the server never became ready:\n${output.slice(-1000)}`);
        // 1 is the watchdog's exit, null a kill after it: only a clean, complete stop exits 0.
        assert.equal(code, 0, `exit code ${code} (1: the watchdog; null: still running, killed) ${elapsedMs} ms after SIGTERM; last output:\n${output.slice(-800)}`);
        assert.doesNotMatch(output, /shutdown took longer than/, 'the stop finished before the watchdog');
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
    },
  );
});
