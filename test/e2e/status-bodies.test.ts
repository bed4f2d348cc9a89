import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { type ApiResponse, cleanup, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * The bodies real clients parse, against kube-apiserver's, field by field: every error Status
 * (kind, apiVersion, metadata, status, message, reason, details, code, in that order, details
 * present exactly where apimachinery's constructor puts them and without empty fields), and what
 * a DELETE answers (a Status of Success for kinds deleted at once, the object for pods, namespaces
 * and objects that stay behind finalizers). Plus the two kubectl commands that tripped on them:
 * `kubectl debug` (nil details on a 404) and `kubectl delete`.
 */

type Json = Record<string, unknown>;

const STATUS_KEYS = ['kind', 'apiVersion', 'metadata', 'status', 'message', 'reason', 'details', 'code'];
const STATUS_KEYS_NO_DETAILS = STATUS_KEYS.filter((k) => k !== 'details');
const NOT_FOUND_PATH = 'the server could not find the requested resource';

/** The body, checked to be this Status exactly, keys in kube-apiserver's order (as clients print them). */
function expectBody(res: ApiResponse, expected: Json, what: string): void {
  assert.equal(res.status, expected.code, `${what}: HTTP ${res.status}: ${res.text}`);
  assert.equal(res.headers['content-type'], 'application/json', what);
  assert.deepEqual(res.json, expected, what);
  const body = res.json as Json;
  assert.deepEqual(Object.keys(body), 'details' in expected ? STATUS_KEYS : STATUS_KEYS_NO_DETAILS, `${what}: key order`);
  if (expected.details) assert.deepEqual(Object.keys(body.details as Json), Object.keys(expected.details as Json), `${what}: details key order`);
}

function failure(code: number, reason: string, message: string, details?: Json): Json {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, ...(details ? { details } : {}), code };
}

function deploymentBody(name: string, extraMeta: Json = {}): Json {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, ...extraMeta },
    spec: {
      replicas: 0,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'main', image: 'x', command: ['sleep', '1'] }] } },
    },
  };
}

function pod(name: string): Json {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [{ name: 'main', command: ['sleep', '3600'] }] } };
}

describe('Status bodies as kube-apiserver shapes them', () => {
  let server: ServerProcess;
  let work: string;
  const deployments = '/apis/apps/v1/namespaces/default/deployments';
  const pods = '/api/v1/namespaces/default/pods';

  before(async () => {
    work = tempDir('status-bodies');
    server = await startServer();
  });

  after(async () => {
    await cleanup(work);
  });

  it('404 for a path the server does not serve: NotFound, the fixed message, details {}', async () => {
    await request(server, 'POST', pods, { body: pod('dbg') });
    const paths: [string, string, unknown][] = [
      ['GET', '/api/v1/widgets', undefined],
      ['GET', '/apis/nope.example.com/v1', undefined],
      ['GET', '/apis/apps/v9/deployments', undefined],
      ['GET', '/not/an/api/path', undefined],
      ['GET', `${pods}/dbg/nosuchsubresource`, undefined],
    ];
    for (const [method, urlPath, body] of paths) {
      const res = await request(server, method, urlPath, {
        ...(body ? { body, headers: { 'Content-Type': 'application/strategic-merge-patch+json' } } : {}),
      });
      expectBody(res, failure(404, 'NotFound', NOT_FOUND_PATH, {}), `${method} ${urlPath}`);
    }
  });

  it('404 for a missing object: details name, group (left out when empty) and kind (the resource)', async () => {
    expectBody(
      await request(server, 'GET', `${pods}/nope`),
      failure(404, 'NotFound', 'pods "nope" not found', { name: 'nope', kind: 'pods' }),
      'missing pod',
    );
    expectBody(
      await request(server, 'GET', `${deployments}/nope`),
      failure(404, 'NotFound', 'deployments.apps "nope" not found', { name: 'nope', group: 'apps', kind: 'deployments' }),
      'missing deployment',
    );
    expectBody(
      await request(server, 'DELETE', '/apis/coordination.k8s.io/v1/namespaces/default/leases/nope'),
      failure(404, 'NotFound', 'leases.coordination.k8s.io "nope" not found', { name: 'nope', group: 'coordination.k8s.io', kind: 'leases' }),
      'DELETE of a missing lease',
    );
  });

  it('409 AlreadyExists and Conflict: details name, group, kind', async () => {
    assert.equal((await request(server, 'POST', pods, { body: pod('dup') })).status, 201);
    expectBody(
      await request(server, 'POST', pods, { body: pod('dup') }),
      failure(409, 'AlreadyExists', 'pods "dup" already exists', { name: 'dup', kind: 'pods' }),
      'second create of a pod',
    );
    const created = await request(server, 'POST', deployments, { body: deploymentBody('dup') });
    assert.equal(created.status, 201, created.text);
    expectBody(
      await request(server, 'POST', deployments, { body: deploymentBody('dup') }),
      failure(409, 'AlreadyExists', 'deployments.apps "dup" already exists', { name: 'dup', group: 'apps', kind: 'deployments' }),
      'second create of a deployment',
    );
    const stale = { ...deploymentBody('dup'), metadata: { name: 'dup', resourceVersion: '1' } };
    expectBody(
      await request(server, 'PUT', `${deployments}/dup`, { body: stale }),
      failure(
        409,
        'Conflict',
        'Operation cannot be fulfilled on deployments.apps "dup": the object has been modified; please apply your changes to the latest version and try again',
        { name: 'dup', group: 'apps', kind: 'deployments' },
      ),
      'PUT with a stale resourceVersion',
    );
  });

  it('422 Invalid: Kind.group "name" is invalid, details name, group, kind (the Kind) and causes', async () => {
    const res = await request(server, 'POST', '/api/v1/nodes', { body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'Bad_Name' } } });
    const body = res.json as Json & { details: { causes: Json[] } };
    assert.equal(body.details?.causes?.length, 1, res.text);
    const cause = body.details.causes[0]!;
    assert.deepEqual(Object.keys(cause), ['reason', 'message', 'field']);
    assert.equal(cause.reason, 'FieldValueInvalid');
    assert.equal(cause.field, 'metadata.name');
    expectBody(
      res,
      failure(422, 'Invalid', `Node "Bad_Name" is invalid: metadata.name: ${String(cause.message)}`, { name: 'Bad_Name', kind: 'Node', causes: [cause] }),
      'a node with an invalid name',
    );

    const bad = deploymentBody('bad-selector');
    (bad.spec as Json).selector = { matchLabels: { app: 'other' } };
    const invalid = await request(server, 'POST', deployments, { body: bad });
    const details = (invalid.json as { details?: { causes?: Json[] } }).details;
    assert.ok(details?.causes?.length, invalid.text);
    const summary = details.causes.map((c) => `${String(c.field)}: ${String(c.message)}`);
    expectBody(
      invalid,
      failure(422, 'Invalid', `Deployment.apps "bad-selector" is invalid: ${summary.length === 1 ? summary[0] : `[${summary.join(', ')}]`}`, {
        name: 'bad-selector',
        group: 'apps',
        kind: 'Deployment',
        causes: details.causes,
      }),
      'a deployment whose selector does not match its template',
    );
  });

  it('405 for a method the path does not take: MethodNotAllowed, the fixed message, details {}', async () => {
    const message = 'the server does not allow this method on the requested resource';
    for (const [method, urlPath] of [
      ['PUT', pods],
      ['POST', `${pods}/dup`],
      ['DELETE', `${pods}/dup/status`],
      ['POST', '/version'],
    ] as const) {
      expectBody(await request(server, method, urlPath, { body: {} }), failure(405, 'MethodNotAllowed', message, {}), `${method} ${urlPath}`);
    }
  });

  it('GET of an eviction is 405 without reading the pod: for a pod that exists and for one that does not', async () => {
    const message = 'the server does not allow this method on the requested resource';
    await request(server, 'POST', pods, { body: pod('evictable') });
    for (const name of ['evictable', 'no-such-pod']) {
      expectBody(await request(server, 'GET', `${pods}/${name}/eviction`), failure(405, 'MethodNotAllowed', message, {}), `GET ${name}/eviction`);
    }
  });

  it('reasons whose constructors carry no details have none: 400, 401; 403 and 504 carry theirs', async () => {
    expectBody(await request(server, 'GET', pods, { token: 'not-a-token' }), failure(401, 'Unauthorized', 'Unauthorized'), 'a bad token');
    const bad = await request(server, 'POST', pods, { rawBody: '{"not json' });
    assert.equal(bad.status, 400, bad.text);
    assert.deepEqual(Object.keys(bad.json as Json), STATUS_KEYS_NO_DETAILS);
    expectBody(
      await request(server, 'DELETE', '/api/v1/namespaces/default'),
      failure(403, 'Forbidden', 'namespaces "default" is forbidden: this namespace may not be deleted', { name: 'default', kind: 'namespaces' }),
      'deleting the default namespace',
    );
    const list = await request(server, 'GET', `${pods}?resourceVersion=999999999&resourceVersionMatch=Exact`);
    const current = /current: (\d+)$/.exec((list.json as { message?: string }).message ?? '')?.[1];
    assert.ok(current, list.text);
    // client-go's reflector knows this error by its cause (IsTooLargeResourceVersion) and waits.
    expectBody(
      list,
      failure(504, 'Timeout', `Timeout: Too large resource version: 999999999, current: ${current}`, {
        causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
        retryAfterSeconds: 1,
      }),
      'a list at a future resourceVersion',
    );
  });

  it('DELETE of a kind without graceful deletion answers a Status of Success with the uid; pods and namespaces answer the object', async () => {
    const created = (await request(server, 'POST', deployments, { body: deploymentBody('gone') })).json as { metadata: { uid: string } };
    const deleted = await request(server, 'DELETE', `${deployments}/gone`, { body: { propagationPolicy: 'Background' } });
    assert.equal(deleted.status, 200, deleted.text);
    const success = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success' };
    assert.deepEqual(deleted.json, { ...success, details: { name: 'gone', group: 'apps', kind: 'deployments', uid: created.metadata.uid } });
    assert.equal((await request(server, 'GET', `${deployments}/gone`)).status, 404);

    const node = (await request(server, 'POST', '/api/v1/nodes', { body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'gone-node' } } })).json as {
      metadata: { uid: string };
    };
    const nodeDeleted = await request(server, 'DELETE', '/api/v1/nodes/gone-node');
    assert.deepEqual(nodeDeleted.json, { ...success, details: { name: 'gone-node', kind: 'nodes', uid: node.metadata.uid } });

    // Propagation means nothing to kinds whose dependents Drover does not collect: gone at once.
    const leases = '/apis/coordination.k8s.io/v1/namespaces/default/leases';
    const lease = (await request(server, 'POST', leases, { body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'l' } } })).json as {
      metadata: { uid: string };
    };
    const leaseDeleted = await request(server, 'DELETE', `${leases}/l`, { body: { propagationPolicy: 'Foreground' } });
    assert.deepEqual(leaseDeleted.json, { ...success, details: { name: 'l', group: 'coordination.k8s.io', kind: 'leases', uid: lease.metadata.uid } });

    // A pod not bound to a node goes at once, and the answer is the pod (ReturnDeletedObject).
    await request(server, 'POST', pods, { body: pod('unbound') });
    const podDeleted = await request(server, 'DELETE', `${pods}/unbound`);
    assert.equal(podDeleted.status, 200, podDeleted.text);
    assert.equal((podDeleted.json as Json).kind, 'Pod');
    assert.equal((podDeleted.json as { metadata: { name: string } }).metadata.name, 'unbound');

    await request(server, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'gone-ns' } } });
    const nsDeleted = await request(server, 'DELETE', '/api/v1/namespaces/gone-ns');
    assert.equal(nsDeleted.status, 200, nsDeleted.text);
    assert.equal((nsDeleted.json as Json).kind, 'Namespace');

    // A dry run answers as the real delete would, and removes nothing.
    const kept = (await request(server, 'POST', deployments, { body: deploymentBody('dry') })).json as { metadata: { uid: string } };
    const dry = await request(server, 'DELETE', `${deployments}/dry?dryRun=All`);
    assert.deepEqual(dry.json, { ...success, details: { name: 'dry', group: 'apps', kind: 'deployments', uid: kept.metadata.uid } });
    assert.equal((await request(server, 'GET', `${deployments}/dry`)).status, 200);
  });

  it('DELETE of an object that finalizers keep answers the object marked for deletion (202 with orphanDependents: false)', async () => {
    const held = { finalizers: ['example.com/hold'] };
    await request(server, 'POST', deployments, { body: deploymentBody('held', held) });
    const marked = await request(server, 'DELETE', `${deployments}/held`);
    assert.equal(marked.status, 200, marked.text);
    const meta = (marked.json as { kind: string; metadata: { deletionTimestamp?: string; finalizers?: string[] } }).metadata;
    assert.equal((marked.json as Json).kind, 'Deployment');
    assert.ok(meta.deletionTimestamp, marked.text);
    assert.deepEqual(meta.finalizers, ['example.com/hold']);

    await request(server, 'POST', deployments, { body: deploymentBody('held-202', held) });
    const accepted = await request(server, 'DELETE', `${deployments}/held-202`, { body: { orphanDependents: false } });
    assert.equal(accepted.status, 202, accepted.text);
    assert.equal((accepted.json as Json).kind, 'Deployment');

    // Taking the finalizer off lets it go.
    for (const name of ['held', 'held-202']) {
      const patched = await request(server, 'PATCH', `${deployments}/${name}`, {
        body: { metadata: { finalizers: null } },
        headers: { 'Content-Type': 'application/merge-patch+json' },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.equal((await request(server, 'GET', `${deployments}/${name}`)).status, 404, name);
    }
  });

  it('DeleteOptions are checked as ValidateDeleteOptions does: an unknown policy, or both fields, is 422', async () => {
    await request(server, 'POST', deployments, { body: deploymentBody('kept') });
    const unsupported = 'Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil"';
    expectBody(
      await request(server, 'DELETE', `${deployments}/kept`, { body: { propagationPolicy: 'Sideways' } }),
      failure(422, 'Invalid', `DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: ${unsupported}`, {
        group: 'meta.k8s.io',
        kind: 'DeleteOptions',
        causes: [{ reason: 'FieldValueNotSupported', message: unsupported, field: 'propagationPolicy' }],
      }),
      'an unknown propagationPolicy',
    );
    const both = await request(server, 'DELETE', `${deployments}/kept`, { body: { propagationPolicy: 'Orphan', orphanDependents: true } });
    assert.equal(both.status, 422, both.text);
    assert.match((both.json as { message: string }).message, /orphanDependents and deletionPropagation cannot be both set/);
    assert.equal((await request(server, 'GET', `${deployments}/kept`)).status, 200, 'a refused DELETE deletes nothing');
  });

  for (const [index, client] of kubectlClients().entries()) {
    const kubectl = (args: string[]) => runKubectl(client, server.kubeconfig, path.join(work, `cache-${index}`), args);

    it(`${client.name}: kubectl debug adds ephemeral containers (pods/ephemeralcontainers)`, async () => {
      const name = `debug-${index}`;
      assert.equal((await request(server, 'POST', pods, { body: pod(name) })).status, 201);
      // Twice: the second sees the first (kubectl 1.20 speaks the alpha EphemeralContainers kind).
      for (const debugger_ of ['first', 'second']) {
        const result = await kubectl(['debug', name, '--image=busybox', `--container=${debugger_}`]);
        assert.equal(result.code, 0, result.stderr);
        assert.doesNotMatch(result.stderr, /panic|nil pointer|goroutine/);
      }
      const stored = (await request(server, 'GET', `${pods}/${name}`)).json as { spec: { ephemeralContainers?: { name: string; image: string }[] } };
      assert.deepEqual(stored.spec.ephemeralContainers?.map((c) => `${c.name} ${c.image}`), ['first busybox', 'second busybox']);
    });

    it(`${client.name}: kubectl renders a 404 of an unknown path, and deletes a deployment answered with a Status`, async () => {
      const raw = await kubectl(['get', '--raw', '/api/v1/widgets']);
      assert.notEqual(raw.code, 0);
      assert.match(raw.stderr, /Error from server \(NotFound\): the server could not find the requested resource/);

      const name = `kubectl-del-${index}`;
      assert.equal((await request(server, 'POST', deployments, { body: deploymentBody(name) })).status, 201);
      const deleted = await kubectl(['delete', 'deployment', name]);
      assert.equal(deleted.code, 0, deleted.stderr);
      assert.equal(deleted.stdout.trim(), `deployment.apps "${name}" deleted`);
      assert.equal((await request(server, 'GET', `${deployments}/${name}`)).status, 404);
    });
  }
});
