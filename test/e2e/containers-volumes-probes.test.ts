import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../helpers/agent.js';
import { execIn, importTestImage, nodeLeftovers, podLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listEvents, listPods } from '../helpers/workloads.js';

/**
 * Volumes and probes for containers under runc, with a real server, its agent and kubectl: every
 * volume kind is a real mount at its mountPath (payload volumes read-only, a Memory emptyDir a
 * tmpfs, nested mounts fine), a non-root container can use them, a pod-bound token works; an
 * httpGet readiness probe holds `kubectl rollout status` until the container serves its file, an
 * exec liveness probe (through `runc exec`) restarts the container with kubelet's events. Nothing
 * is left on the host afterwards.
 */

const IMAGE = 'drover.test/volumes:1';
const CEILING_MS = 90_000;

interface RawPod {
  metadata: { name: string; uid: string };
  status?: { containerStatuses?: { ready?: boolean; restartCount?: number; state?: { running?: unknown } }[] };
}

describe('volumes and probes under runc', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  const kubectl = (args: string[], input?: string) => runKubectl(MODERN_KUBECTL, server.kubeconfig, path.join(work, 'cache'), args, input ? { input } : {});

  async function pod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  async function running(name: string): Promise<RawPod> {
    return eventually(async () => {
      const p = await pod(name);
      return p.status?.containerStatuses?.every((c) => c.state?.running) ? p : undefined;
    }, `${name} running`, CEILING_MS);
  }

  before(async () => {
    work = tempDir('containers-volumes');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, cmd: ['sleep', '1000000'] }), work);
  });

  after(async () => {
    const dataDir = server?.dataDir;
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  it('every volume kind is a mount at its mountPath; a non-root container writes its emptyDir and reads its files and token', async () => {
    const host = fs.mkdtempSync(path.join(work, 'host-'));
    // Readable by the container's user 1000, as a host directory shared with pods would be.
    fs.chmodSync(host, 0o755);
    fs.writeFileSync(path.join(host, 'motd'), 'from the host\n', { mode: 0o644 });
    const created = await request(server, 'POST', '/api/v1/namespaces/default/configmaps', {
      body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'app' }, data: { 'app.conf': 'mode=fast\n', other: 'x' } },
    });
    assert.equal(created.status, 201, created.text);
    const account = await request(server, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'app' } } });
    assert.equal(account.status, 201, account.text);
    const applied = await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: v1
kind: Pod
metadata:
  name: mounted
  labels: {app: mounted}
spec:
  runtimeClassName: runc
  serviceAccountName: app
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, emptyDir: {}}
  - {name: cache, emptyDir: {medium: Memory, sizeLimit: 8Mi}}
  - {name: config, configMap: {name: app}}
  - {name: host, hostPath: {path: ${host}, type: Directory}}
  - name: info
    downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  - name: api
    projected:
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap: {name: app, items: [{key: app.conf, path: app.conf}]}
  containers:
  - name: main
    image: ${IMAGE}
    securityContext: {runAsUser: 1000, runAsGroup: 1000}
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: cache, mountPath: /data/cache}
    - {name: config, mountPath: /etc/app}
    - {name: config, mountPath: /etc/single.conf, subPath: app.conf}
    - {name: host, mountPath: /host, readOnly: true}
    - {name: info, mountPath: /etc/podinfo}
    - {name: api, mountPath: /var/run/secrets/api}
  - name: peer
    image: ${IMAGE}
    volumeMounts:
    - {name: data, mountPath: /shared}
`,
    );
    assert.equal(applied.code, 0, applied.stderr);
    const { metadata } = await running('mounted');
    const run = (container: string, argv: string[]) => execIn(server.dataDir, metadata.uid, container, argv);

    // `running` in the status is `runc run` started; exec works once runc has made the container.
    const first = await eventually(async () => {
      const result = await run('main', ['cat', '/etc/app/app.conf']);
      return result.code === 0 || !/does not exist/.test(result.stderr) ? result : undefined;
    }, 'the container to exist', CEILING_MS);
    assert.equal(first.stdout, 'mode=fast\n', first.stderr);
    assert.equal((await run('main', ['cat', '/etc/single.conf'])).stdout, 'mode=fast\n', 'a subPath of one key');
    assert.equal((await run('main', ['cat', '/etc/podinfo/labels'])).stdout, 'app="mounted"');
    assert.equal((await run('main', ['cat', '/host/motd'])).stdout, 'from the host\n');
    const mounts = (await run('main', ['cat', '/proc/self/mounts'])).stdout;
    assert.match(mounts, /^tmpfs \/data\/cache tmpfs [^ ]*size=8192k/m, `a tmpfs of the sizeLimit, nested in /data:\n${mounts}`);
    for (const [target, why] of [['/etc/app/new', 'a ConfigMap volume'], ['/host/new', 'a readOnly hostPath'], ['/var/run/secrets/api/new', 'a projected volume']]) {
      const write = await run('main', ['touch', target!]);
      assert.notEqual(write.code, 0, `${why} is read-only`);
      assert.match(write.stderr, /Read-only file system/);
    }
    // A non-root user (1000) uses the volumes: Kubernetes' modes under runc.
    assert.equal((await run('main', ['sh', '-c', 'echo hello > /data/note && echo ok > /data/cache/c && cat /data/cache/c'])).stdout, 'ok\n');
    assert.equal((await run('peer', ['cat', '/shared/note'])).stdout, 'hello\n', 'the emptyDir is shared by the containers');
    const token = (await run('main', ['cat', '/var/run/secrets/api/token'])).stdout;
    assert.equal((await run('main', ['cat', '/var/run/secrets/api/app.conf'])).stdout, 'mode=fast\n');
    const review = await request(server, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      token,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    });
    assert.equal(review.status, 201, review.text);
    assert.equal((review.json as { status: { userInfo: { username: string } } }).status.userInfo.username, 'system:serviceaccount:default:app');

    // A ConfigMap update reaches the mounted directory inside the container.
    const patched = await request(server, 'PATCH', '/api/v1/namespaces/default/configmaps/app', {
      body: { data: { 'app.conf': 'mode=slow\n' } },
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(patched.status, 200, patched.text);
    await eventually(async () => (await run('main', ['cat', '/etc/app/app.conf'])).stdout === 'mode=slow\n', 'the update inside the container', CEILING_MS);
    assert.equal((await run('main', ['cat', '/etc/single.conf'])).stdout, 'mode=fast\n', 'the subPath keeps its version');

    assert.equal((await kubectl(['delete', 'pod', 'mounted', '--wait=true', '--timeout=120s'])).code, 0);
    assert.deepEqual(podLeftovers(server.dataDir, metadata.uid), [], 'no mount (the tmpfs included) or cgroup is left');
    assert.equal(fs.readFileSync(path.join(host, 'motd'), 'utf8'), 'from the host\n');
  });

  it('an httpGet readiness probe holds rollout status until the container serves its file; an exec liveness probe restarts it', async () => {
    const port = await freePort();
    const applied = await kubectl(
      ['apply', '-f', '-'],
      `apiVersion: apps/v1
kind: Deployment
metadata:
  name: probed
spec:
  replicas: 1
  selector: {matchLabels: {app: probed}}
  template:
    metadata: {labels: {app: probed}}
    spec:
      runtimeClassName: runc
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: ${IMAGE}
        command: [sh, -c, 'mkdir -p /www && touch /tmp/healthy && exec httpd -f -p 127.0.0.1:${port} -h /www']
        ports: [{name: http, containerPort: ${port}}]
        readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1, failureThreshold: 1}
        livenessProbe: {exec: {command: [cat, /tmp/healthy]}, periodSeconds: 1, failureThreshold: 2}
`,
    );
    assert.equal(applied.code, 0, applied.stderr);
    const rollout = spawn(MODERN_KUBECTL.bin, ['--kubeconfig', server.kubeconfig, 'rollout', 'status', 'deployment/probed', '--timeout=180s'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    rollout.stdout.on('data', (c: Buffer) => (output += c.toString()));
    rollout.stderr.on('data', (c: Buffer) => (output += c.toString()));
    let exitCode: number | null | undefined;
    const exited = new Promise<number | null>((resolve) => rollout.on('close', (code) => resolve((exitCode = code))));
    try {
      const unhealthy = await eventually(
        async () => (await listEvents(server)).find((e) => e.reason === 'Unhealthy' && e.object.startsWith('Pod/probed-')),
        'a readiness failure',
        CEILING_MS,
      );
      assert.equal(unhealthy.message, 'Readiness probe failed: HTTP probe failed with statuscode: 404');
      const [p] = await listPods(server, 'app=probed');
      assert.ok(p);
      assert.equal((await pod(p.name)).status?.containerStatuses?.[0]?.ready, false);
      assert.equal(exitCode, undefined, `rollout status returned before the pod was ready:\n${output}`);
      assert.equal((await execIn(server.dataDir, p.uid, 'web', ['sh', '-c', 'echo ok > /www/ready'])).code, 0);
      assert.equal(await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), CEILING_MS))]), 0, output);

      // Liveness through runc exec: the file goes, the container is killed and started again.
      assert.equal((await execIn(server.dataDir, p.uid, 'web', ['rm', '/tmp/healthy'])).code, 0);
      await eventually(async () => ((await pod(p.name)).status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1, 'a restart', CEILING_MS);
      const events = (await listEvents(server)).filter((e) => e.object === `Pod/${p.name}`);
      assert.ok(events.some((e) => e.reason === 'Killing' && e.message === 'Container web failed liveness probe, will be restarted'), JSON.stringify(events));
      assert.ok(events.some((e) => e.reason === 'Unhealthy' && e.message.startsWith('Liveness probe failed: ')), JSON.stringify(events));
    } finally {
      rollout.kill('SIGKILL');
    }
    assert.equal((await kubectl(['delete', 'deployment', 'probed', '--wait=true'])).code, 0);
  });
});
