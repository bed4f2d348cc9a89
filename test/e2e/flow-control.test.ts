import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TokenAuthenticator } from '../../src/apiserver/auth.js';
import { ApiError } from '../../src/apiserver/errors.js';
import { FlowController } from '../../src/apiserver/flow-control/dispatcher.js';
import { HttpClient } from '../../src/client/http.js';
import { ServerMetrics } from '../../src/metrics/metrics.js';
import { CONFIGMAPS, LEASES, NAMESPACES } from '../../src/client/types.js';
import { type InProcessApiServer, startInProcessApiServer } from '../helpers/api-server.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { assertPythonClient, runPython } from '../helpers/python.js';

/**
 * Overload that never blinds the controller (docs/flow-control.md), over a real API server on
 * loopback with the total concurrency at 2 (every level one seat): one user's lists are held to
 * their level, wait in its queues and are refused with 429 and Retry-After, while a node's lease
 * renewals go through; kubectl, the Python client and our own client retry a 429 after its
 * Retry-After.
 *
 * A list holds its seat until its answer is written out; the test keeps the reads level's one
 * seat taken by a list of ~30 MB whose reader never reads, so the other lists wait for certain,
 * without any timing on the test's side.
 */

const PAYLOAD = 'x'.repeat(1_000_000);
const BIG_CONFIGMAPS = 30;

describe('flow control: a full reads level refuses lists with 429 while heartbeats pass', () => {
  let server: InProcessApiServer;
  let flow: FlowController;
  let metrics: ServerMetrics;
  let admin: HttpClient;
  const tokens = { admin: 'admin-token-0123456789', lister: 'lister-token-0123456789', node: 'node-token-0123456789' };
  const url = (): string => `https://127.0.0.1:${server.target.port}`;
  const readsLevel = () => flow.stats().find((s) => s.level === 'global-default')!;

  before(async () => {
    flow = new FlowController({ totalSeats: 2 });
    metrics = new ServerMetrics(async () => ({}), async () => ({ error: 0, info: 0 }));
    metrics.observeFlowControl(() => flow.stats());
    const authenticator = new TokenAuthenticator();
    authenticator.add(tokens.admin, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });
    authenticator.add(tokens.lister, { name: 'lister', groups: ['system:authenticated'] });
    authenticator.add(tokens.node, { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] });
    server = await startInProcessApiServer({ prefix: 'flow-control', handler: { authenticator, flowControl: flow, metrics } });
    admin = new HttpClient({ server: url(), caPem: server.target.caPem, token: tokens.admin });
    await admin.create(NAMESPACES, undefined, { metadata: { name: 'bulk' } });
    await admin.create(NAMESPACES, undefined, { metadata: { name: 'kube-node-lease' } });
    for (let k = 0; k < BIG_CONFIGMAPS; k++) {
      await admin.create(CONFIGMAPS, 'bulk', { metadata: { name: `big-${k}` }, data: { payload: PAYLOAD } });
    }
    await admin.create(LEASES, 'kube-node-lease', {
      metadata: { name: 'n1' },
      spec: { holderIdentity: 'n1', leaseDurationSeconds: 4, renewTime: new Date().toISOString().replace('Z', '000Z') },
    });
  });

  after(async () => {
    admin?.close();
    await server?.close();
  });

  /** A list of the big ConfigMaps whose answer is never read: it keeps its seat until destroyed. */
  async function holdReadsSeat(): Promise<() => void> {
    const agent = new https.Agent({ ca: server.target.caPem });
    const req = https.get(`${url()}/api/v1/namespaces/bulk/configmaps`, { agent, headers: { Authorization: `Bearer ${tokens.lister}` } });
    req.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => {
      req.once('response', () => resolve());
      req.once('error', reject);
    });
    assert.equal(readsLevel().executing, 1, 'the unread list holds the reads level’s one seat');
    return () => {
      req.destroy();
      agent.destroy();
    };
  }

  async function until(what: string, check: () => boolean): Promise<void> {
    const deadline = Date.now() + 60_000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`${what}: not within 60 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  it("refuses one user's burst of lists with 429 and Retry-After naming the level, while a node's renewals all succeed", async () => {
    const release = await holdReadsSeat();
    try {
      const agent = new https.Agent({ ca: server.target.caPem, keepAlive: true, maxSockets: 64 });
      const burst = Array.from({ length: 40 }, () =>
        new Promise<{ status: number; retryAfter: string | undefined; body: string }>((resolve, reject) => {
          https
            .get(`${url()}/api/v1/namespaces/bulk/configmaps?limit=1`, { agent, headers: { Authorization: `Bearer ${tokens.lister}` } }, (res) => {
              let body = '';
              res.setEncoding('utf8');
              res.on('data', (c: string) => (body += c));
              res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body }));
            })
            .on('error', reject);
        }),
      );
      await until('the burst queued or refused', () => readsLevel().queued + readsLevel().rejected['queue-full'] + readsLevel().rejected['time-out'] >= 40);
      // Meanwhile the node renews its lease, one renewal after the other, as an agent does; no retries.
      const node = new HttpClient({ server: url(), caPem: server.target.caPem, token: tokens.node, tooManyRequests: { attempts: 0, maxWaitMs: 0 } });
      try {
        for (let k = 0; k < 10; k++) {
          const renewed = await node.patch(LEASES, 'kube-node-lease', 'n1', 'merge', { spec: { renewTime: new Date().toISOString().replace('Z', '000Z') } });
          assert.equal(renewed.metadata.name, 'n1');
        }
      } finally {
        node.close();
      }
      const answers = await Promise.all(burst);
      agent.destroy();
      assert.ok(answers.every((a) => a.status === 429), `every list of the burst waited behind the held seat and was refused: ${JSON.stringify(answers.map((a) => a.status))}`);
      for (const answer of answers) {
        assert.ok(Number(answer.retryAfter) >= 1, 'with a Retry-After header');
        const status = JSON.parse(answer.body) as { kind: string; reason: string; code: number; message: string; details?: { retryAfterSeconds?: number } };
        assert.equal(status.kind, 'Status');
        assert.equal(status.reason, 'TooManyRequests');
        assert.equal(status.code, 429);
        assert.match(status.message, /priority level "global-default"/);
        assert.equal(status.details?.retryAfterSeconds, Number(answer.retryAfter));
      }
      const heartbeats = flow.stats().find((s) => s.level === 'node-high')!;
      assert.deepEqual(heartbeats.rejected, { 'queue-full': 0, 'time-out': 0 });
    } finally {
      release();
    }
    await until('the seat given back', () => readsLevel().executing === 0);
    // The same figures on /metrics (supervisor-metrics), per level.
    const text = await new Promise<string>((resolve, reject) => {
      https
        .get(`${url()}/metrics`, { ca: server.target.caPem, headers: { Authorization: `Bearer ${tokens.admin}` } }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve(body));
        })
        .on('error', reject);
    });
    const refused = readsLevel().rejected;
    assert.match(text, new RegExp(`drover_apiserver_flowcontrol_rejected_total\\{level="global-default",reason="time-out"\\} ${refused['time-out']}\n`));
    assert.ok(refused['time-out'] + refused['queue-full'] === 40);
    assert.match(text, /drover_apiserver_flowcontrol_rejected_total\{level="node-high",reason="time-out"\} 0\n/);
    assert.match(text, /drover_apiserver_flowcontrol_seats\{level="node-high"\} 1\n/);
    assert.match(text, /drover_apiserver_flowcontrol_executing\{level="global-default"\} 0\n/);
    assert.match(text, /drover_apiserver_flowcontrol_queued\{level="global-default"\} 0\n/);
  });

  it('kubectl and HttpClient retry a 429 after its Retry-After, and get their list once the level has room', async () => {
    const dir = fs.mkdtempSync(path.join(server.dir, 'kubectl-'));
    const kubeconfig = path.join(dir, 'kubeconfig');
    fs.writeFileSync(path.join(dir, 'ca.crt'), server.target.caPem);
    fs.writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: url(), 'certificate-authority': path.join(dir, 'ca.crt') } }],
        users: [{ name: 'lister', user: { token: tokens.lister } }],
        contexts: [{ name: 'c', context: { cluster: 'c', user: 'lister' } }],
        'current-context': 'c',
      }),
    );
    const refusedBefore = readsLevel().rejected['time-out'] + readsLevel().rejected['queue-full'];
    const release = await holdReadsSeat();
    let released = false;
    try {
      const kubectl = runKubectl(MODERN_KUBECTL, kubeconfig, path.join(dir, 'cache'), ['-v=6', 'get', 'configmaps', '-n', 'bulk', '-o', 'name'], { timeoutMs: 120_000 });
      // Retry-After follows how long the level's seats have been held lately (here: the held lists
      // of the test before, seconds each), so this client may wait longer than the default 10 s.
      const client = new HttpClient({ server: url(), caPem: server.target.caPem, token: tokens.lister, tooManyRequests: { attempts: 3, maxWaitMs: 120_000 } });
      const listed = client.list(CONFIGMAPS, 'bulk', { fieldSelector: 'metadata.name=big-0' }).finally(() => client.close());
      listed.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile
      // Both lists wait behind the held seat and are refused; then the level gets room.
      await until('both clients refused once', () => readsLevel().rejected['time-out'] + readsLevel().rejected['queue-full'] >= refusedBefore + 2);
      release();
      released = true;
      const result = await kubectl;
      assert.equal(result.code, 0, `kubectl failed: ${result.stderr.slice(-2000)}`);
      assert.match(result.stderr, /configmaps\S* 429 Too Many Requests/, 'kubectl was refused once and retried');
      assert.equal(result.stdout.trim().split('\n').length, BIG_CONFIGMAPS);
      assert.deepEqual((await listed).items.map((item) => item.metadata.name), ['big-0']);
    } finally {
      if (!released) release();
    }
  });

  it('the Python client (urllib3 under it) retries a GET refused with 429 after its Retry-After', async () => {
    assertPythonClient();
    const caFile = path.join(server.dir, 'python-ca.crt');
    fs.writeFileSync(caFile, server.target.caPem);
    const script = [
      'import json, sys',
      'from kubernetes import client',
      'c = client.Configuration()',
      `c.host = ${JSON.stringify(url())}`,
      `c.ssl_ca_cert = ${JSON.stringify(caFile)}`,
      `c.api_key = {"authorization": "Bearer ${tokens.lister}"}`,
      'api = client.CoreV1Api(client.ApiClient(c))',
      'try:',
      '    names = [i.metadata.name for i in api.list_namespaced_config_map("bulk", field_selector="metadata.name=big-0").items]',
      '    print(json.dumps({"names": names}))',
      'except client.exceptions.ApiException as e:',
      '    print(json.dumps({"status": e.status, "retryAfter": (e.headers or {}).get("Retry-After"), "body": e.body}))',
    ].join('\n');
    const refusedBefore = readsLevel().rejected['time-out'] + readsLevel().rejected['queue-full'];
    const release = await holdReadsSeat();
    let released = false;
    try {
      const python = runPython(['-c', script], 120_000);
      await until('the Python client refused once', () => readsLevel().rejected['time-out'] + readsLevel().rejected['queue-full'] >= refusedBefore + 1);
      release();
      released = true;
      const result = await python;
      assert.equal(result.code, 0, result.output);
      assert.deepEqual(JSON.parse(result.stdout.trim().split('\n').pop()!), { names: ['big-0'] }, result.output);
    } finally {
      if (!released) release();
    }
  });

  it('without retries our client reports the 429 as a TooManyRequests ApiError with its Retry-After', async () => {
    const release = await holdReadsSeat();
    const client = new HttpClient({ server: url(), caPem: server.target.caPem, token: tokens.lister, tooManyRequests: { attempts: 0, maxWaitMs: 0 } });
    try {
      await assert.rejects(client.list(CONFIGMAPS, 'bulk'), (error: unknown) => {
        assert.ok(error instanceof ApiError);
        assert.equal(error.code, 429);
        assert.equal(error.reason, 'TooManyRequests');
        assert.ok((error.details?.retryAfterSeconds ?? 0) >= 1);
        return true;
      });
    } finally {
      client.close();
      release();
    }
  });
});
