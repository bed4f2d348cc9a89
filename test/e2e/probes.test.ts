import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { grpcProbe, httpProbe, planExec, runProbe, tcpProbe } from '../../src/agent/pods/probe-handlers.js';
import { cleanupAgents, freePort, startAgent, waitForState } from '../helpers/agent.js';
import { MODERN_KUBECTL } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { createObject, listEvents, listPods } from '../helpers/workloads.js';

/**
 * Probes end to end. First each handler against real servers on 127.0.0.1 (HTTP, TCP, gRPC
 * health, exec); then a real server and agent running process pods whose probes hit a busybox
 * httpd the pod itself runs: readiness holds `kubectl rollout status` until the pod serves its
 * ready file, a failing liveness probe restarts the container with kubelet's events, and a
 * startup probe keeps the container not started (and not ready) until it passes.
 */

const CEILING_MS = 90_000;

function listen(server: http.Server | http2.Http2Server | net.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)));
}

describe('probe handlers', () => {
  const servers: (http.Server | http2.Http2Server | net.Server)[] = [];
  after(() => {
    for (const s of servers) s.close();
  });

  it('httpGet: 2xx and 3xx pass, others fail with the status; headers reach the server; refused and timed-out connections fail', async () => {
    const seen: http.IncomingHttpHeaders[] = [];
    const server = http.createServer((req, res) => {
      seen.push(req.headers);
      if (req.url === '/ok') res.writeHead(200).end('fine');
      else if (req.url === '/moved') res.writeHead(302, { location: '/elsewhere' }).end();
      else if (req.url === '/hang') return;
      else res.writeHead(503).end('overloaded');
    });
    servers.push(server);
    const port = await listen(server);
    const get = (p: string, headers: { name: string; value: string }[] = []) => httpProbe({ scheme: 'HTTP', port, path: p, headers }, 1000);
    assert.deepEqual(await get('/ok', [{ name: 'X-Probe', value: 'yes' }, { name: 'Host', value: 'web.example' }]), { ok: true });
    assert.equal(seen[0]!['x-probe'], 'yes');
    assert.equal(seen[0]!.host, 'web.example');
    assert.equal(seen[0]!['user-agent'], 'kube-probe/1.32');
    assert.deepEqual(await get('/moved'), { ok: true });
    assert.deepEqual(await get('/bad'), { ok: false, message: 'HTTP probe failed with statuscode: 503' });
    const hang = await get('/hang');
    assert.equal(hang.ok, false);
    assert.match(hang.message!, /context deadline exceeded/);
    const closed = await freePort();
    const refused = await httpProbe({ scheme: 'HTTP', port: closed, path: '/', headers: [] }, 1000);
    assert.deepEqual(refused, { ok: false, message: `Get "http://127.0.0.1:${closed}/": dial tcp 127.0.0.1:${closed}: connect: connection refused` });
  });

  it('tcpSocket: an open port passes, a closed one fails', async () => {
    const server = net.createServer((socket) => socket.end());
    servers.push(server);
    const port = await listen(server);
    assert.deepEqual(await tcpProbe('127.0.0.1', port, 1000), { ok: true });
    const closed = await freePort();
    assert.deepEqual(await tcpProbe('127.0.0.1', closed, 1000), { ok: false, message: `dial tcp 127.0.0.1:${closed}: connect: connection refused` });
  });

  it('grpc: the standard health service, SERVING passes and NOT_SERVING fails; the service name reaches it', async () => {
    const services: string[] = [];
    const server = http2.createServer();
    server.on('stream', (stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const body = Buffer.concat(chunks).subarray(5);
        const service = body.length ? body.subarray(2).toString('utf8') : '';
        services.push(service);
        assert.equal(headers[':path'], '/grpc.health.v1.Health/Check');
        // HealthCheckResponse {status: 1 SERVING | 2 NOT_SERVING}
        const message = Buffer.from([0x08, service === 'down' ? 2 : 1]);
        const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(frame);
      });
    });
    servers.push(server);
    const port = await listen(server);
    assert.deepEqual(await grpcProbe('127.0.0.1', port, '', 2000), { ok: true });
    assert.deepEqual(await grpcProbe('127.0.0.1', port, 'down', 2000), { ok: false, message: 'service unhealthy (responded with "NOT_SERVING")' });
    assert.deepEqual(services, ['', 'down']);
  });

  it('exec: exit 0 passes; a failure carries the output; a command past its timeout is killed and fails', async () => {
    const exec = planExec((argv) => ({ file: argv[0]!, args: argv.slice(1), cwd: '/', env: { PATH: process.env.PATH ?? '/usr/bin:/bin', GREETING: 'hi' } }));
    assert.deepEqual(await runProbe({ exec: { command: ['sh', '-c', 'test "$GREETING" = hi'] } }, 1, exec), { ok: true });
    assert.deepEqual(await runProbe({ exec: { command: ['sh', '-c', 'echo not healthy; exit 3'] } }, 1, exec), { ok: false, message: 'not healthy' });
    const started = Date.now();
    const slow = await runProbe({ exec: { command: ['sh', '-c', 'sleep 30'] } }, 1, exec);
    assert.deepEqual(slow, { ok: false, message: 'command "sh -c sleep 30" timed out' });
    assert.ok(Date.now() - started < 20_000, 'the sleep was killed at the timeout, not waited for');
    const missing = await runProbe({ exec: { command: ['/no/such/program'] } }, 1, exec);
    assert.equal(missing.ok, false);
    assert.match(missing.message!, /ENOENT/);
  });
});

interface ContainerStatusView {
  ready?: boolean;
  started?: boolean;
  restartCount?: number;
  lastState?: { terminated?: { exitCode?: number } };
  state?: { running?: unknown };
}

describe('probes with a real agent', { concurrency: false }, () => {
  const NODE = 'probe1';
  let server: ServerProcess;
  let work: string;

  before(async () => {
    work = tempDir('probes');
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    await startAgent({ server, name: NODE });
    await waitForState(server, NODE, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  /** A container that serves `dir` over HTTP on `port` with busybox httpd (404 for a missing file). */
  function httpd(dir: string, port: number): Record<string, unknown> {
    return { name: 'web', image: 'busybox', command: ['/bin/busybox', 'httpd', '-f', '-p', `127.0.0.1:${port}`, '-h', dir], ports: [{ name: 'http', containerPort: port }] };
  }

  async function statusOf(name: string): Promise<ContainerStatusView | undefined> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    return (res.json as { status?: { containerStatuses?: ContainerStatusView[] } }).status?.containerStatuses?.[0];
  }

  it('readiness gates kubectl rollout status: the pod runs but is not ready until it serves its ready file', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'ready-'));
    const port = await freePort();
    await createObject(server, '/apis/apps/v1/namespaces/default/deployments', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'gated' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'gated' } },
        template: {
          metadata: { labels: { app: 'gated' } },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [{ ...httpd(dir, port), readinessProbe: { httpGet: { path: '/ready', port: 'http' }, periodSeconds: 1, failureThreshold: 1 } }],
          },
        },
      },
    });
    const rollout = spawn(MODERN_KUBECTL.bin, ['--kubeconfig', server.kubeconfig, 'rollout', 'status', 'deployment/gated', '--timeout=180s'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    rollout.stdout.on('data', (c: Buffer) => (output += c.toString()));
    rollout.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => rollout.on('close', resolve));
    let exitCode: number | null | undefined;
    void exited.then((code) => (exitCode = code));
    try {
      // Running, probed and failing: the pod is not ready, and the rollout is not done.
      // The first probe may come before httpd listens (a connection refused event, as kubelet's):
      // wait for the failure of a served request.
      const failed = await eventually(
        async () => (await listEvents(server)).find((e) => e.reason === 'Unhealthy' && e.object.startsWith('Pod/gated-') && e.message.includes('statuscode')),
        'a readiness failure event for the 404',
        CEILING_MS,
      );
      assert.equal(failed.message, 'Readiness probe failed: HTTP probe failed with statuscode: 404');
      const [pod] = await listPods(server, 'app=gated');
      assert.ok(pod, 'the pod exists');
      const status = await statusOf(pod.name);
      assert.ok(status?.state?.running, 'the container runs');
      assert.equal(status?.ready, false);
      assert.equal(status?.started, true, 'no startup probe: started once it runs');
      assert.equal(exitCode, undefined, `rollout status returned while the pod was not ready:\n${output}`);
      const deploy = await request(server, 'GET', '/apis/apps/v1/namespaces/default/deployments/gated');
      assert.ok(!(deploy.json as { status?: { availableReplicas?: number } }).status?.availableReplicas, 'nothing available yet');

      fs.writeFileSync(path.join(dir, 'ready'), 'ok\n');
      assert.equal(await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), CEILING_MS))]), 0, output);
      assert.match(output, /successfully rolled out/);
      const readyStatus = await statusOf(pod.name);
      assert.equal(readyStatus?.ready, true);
      const after = await request(server, 'GET', '/apis/apps/v1/namespaces/default/deployments/gated');
      assert.equal((after.json as { status?: { availableReplicas?: number } }).status?.availableReplicas, 1);

      // Failing again: not ready again, and the Ready condition says so.
      fs.rmSync(path.join(dir, 'ready'));
      await eventually(async () => (await statusOf(pod.name))?.ready === false, 'the pod to be unready again', CEILING_MS);
      const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${pod.name}`);
      const conditions = (res.json as { status: { conditions: { type: string; status: string }[] } }).status.conditions;
      assert.equal(conditions.find((c) => c.type === 'Ready')?.status, 'False');
      assert.equal((await statusOf(pod.name))?.restartCount, 0, 'readiness never restarts');
    } finally {
      rollout.kill('SIGKILL');
    }
  });

  it('a failing liveness probe restarts the container, with the Unhealthy and Killing events', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'live-'));
    fs.writeFileSync(path.join(dir, 'healthz'), 'ok\n');
    const port = await freePort();
    await createObject(server, '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'lively' },
      spec: {
        nodeName: NODE,
        terminationGracePeriodSeconds: 1,
        containers: [{ ...httpd(dir, port), livenessProbe: { httpGet: { path: '/healthz', port }, periodSeconds: 1, failureThreshold: 2 } }],
      },
    });
    await eventually(async () => (await statusOf('lively'))?.ready === true, 'the pod to run', CEILING_MS);
    fs.rmSync(path.join(dir, 'healthz'));
    const restarted = await eventually(
      async () => {
        const status = await statusOf('lively');
        return status && (status.restartCount ?? 0) >= 1 ? status : undefined;
      },
      'the container restarted',
      CEILING_MS,
    );
    assert.ok(restarted.lastState?.terminated, 'the killed instance is the last state');
    const events = await eventually(
      async () => {
        const all = (await listEvents(server)).filter((e) => e.object === 'Pod/lively');
        return all.some((e) => e.reason === 'Killing') ? all : undefined;
      },
      'the Killing event',
      CEILING_MS,
    );
    assert.ok(
      events.some((e) => e.reason === 'Unhealthy' && e.type === 'Warning' && e.message === 'Liveness probe failed: HTTP probe failed with statuscode: 404'),
      JSON.stringify(events),
    );
    assert.ok(events.some((e) => e.message === 'Container web failed liveness probe, will be restarted'), JSON.stringify(events));
    // Healthy again: it stays up.
    fs.writeFileSync(path.join(dir, 'healthz'), 'ok\n');
    const count = await eventually(async () => {
      const status = await statusOf('lively');
      return status?.ready ? status.restartCount : undefined;
    }, 'the restarted container to be ready', CEILING_MS);
    assert.ok((count ?? 0) >= 1);
  });

  it('a startup probe keeps the container not started and not ready until it passes', async () => {
    const marker = path.join(work, 'started-marker');
    await createObject(server, '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'slowstart' },
      spec: {
        nodeName: NODE,
        terminationGracePeriodSeconds: 1,
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sleep', '3600'],
            startupProbe: { exec: { command: ['test', '-f', marker] }, periodSeconds: 1, failureThreshold: 600 },
          },
        ],
      },
    });
    await eventually(async () => (await listEvents(server)).find((e) => e.object === 'Pod/slowstart' && e.reason === 'Unhealthy'), 'a startup failure event', CEILING_MS);
    const waiting = await statusOf('slowstart');
    assert.ok(waiting?.state?.running, 'the container runs');
    assert.deepEqual([waiting?.started, waiting?.ready], [false, false]);
    fs.writeFileSync(marker, '');
    await eventually(async () => {
      const status = await statusOf('slowstart');
      return status?.started === true && status.ready === true;
    }, 'started and ready', CEILING_MS);
  });
});
