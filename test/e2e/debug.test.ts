import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { registerNode } from '../helpers/agent.js';
import { importTestImage, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { spawnKubectl } from '../helpers/streams.js';

/**
 * `kubectl debug` with ephemeral containers under runc, end to end: a real server with its own
 * agent, a test image (Debian's static busybox) in the node's store, kubectl 1.32. The debugger
 * is added through pods/ephemeralcontainers, started by the pod's supervisor in the pod's sandbox
 * and the target's PID namespace, attached to by kubectl, and reported in
 * ephemeralContainerStatuses; it cannot be changed or removed afterwards, and a node cannot add one.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/debug.test.ts
 */

const IMAGE = 'drover.test/debug:1';
const POD = '/api/v1/namespaces/default/pods';

interface PodView {
  spec?: { ephemeralContainers?: { name: string; image: string }[] };
  status?: { ephemeralContainerStatuses?: { name: string; state: Record<string, { exitCode?: number; reason?: string; message?: string }> }[] };
}

describe('kubectl debug: ephemeral containers under runc', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  const kubectl = (args: string[], options: { input?: string; timeoutMs?: number } = {}) => runKubectl(MODERN_KUBECTL, server.kubeconfig, cacheDir, args, options);
  const getPod = async (name: string): Promise<PodView> => {
    const res = await request(server, 'GET', `${POD}/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as PodView;
  };

  before(async () => {
    work = tempDir('debug');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, applets: 'all', cmd: ['sleep', '1000000'] }), work);
    const manifest = [
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: target}',
      'spec:',
      '  runtimeClassName: runc',
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - name: main',
      `    image: ${IMAGE}`,
      '---',
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: processes}',
      'spec:',
      '  runtimeClassName: process',
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - name: main',
      '    command: [sleep, "1000000"]',
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    for (const name of ['target', 'processes']) {
      await eventually(async () => (await kubectl(['get', 'pod', name, '-o', 'jsonpath={.status.phase}'])).stdout === 'Running', `pod ${name} Running`, 90_000);
    }
  });

  after(async () => {
    const dataDir = server?.dataDir;
    if (server) await kubectl(['delete', 'pod', 'target', 'processes', '--wait=true', '--timeout=60s']).catch(() => undefined);
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  it('discovery lists pods/ephemeralcontainers (get, patch, update)', async () => {
    const res = await request(server, 'GET', '/api/v1');
    const entry = (res.json as { resources: { name: string; kind: string; verbs: string[] }[] }).resources.find((r) => r.name === 'pods/ephemeralcontainers');
    assert.deepEqual(entry && { kind: entry.kind, verbs: [...entry.verbs].sort() }, { kind: 'Pod', verbs: ['get', 'patch', 'update'] });
  });

  it("kubectl debug -i --target runs in the pod, sees the target's processes, its output reaches kubectl; the status says how it ended", async () => {
    // `read` holds the script until kubectl's stdin arrives through the attach session, so its output cannot precede the attach.
    const script = 'read line; echo "debugger got $line"; echo "host $(hostname)"; ps -o pid,args; exit 3';
    const live = spawnKubectl(MODERN_KUBECTL, { kubeconfig: server.kubeconfig, cacheDir }, ['debug', '-i', 'target', `--image=${IMAGE}`, '--target=main', '--container=debugger', '--', 'sh', '-c', script], 'pipe');
    live.child.stdin!.end('hello\n');
    const code = await new Promise<number | null>((resolve) => live.child.once('exit', (c) => resolve(c)));
    const output = live.output();
    if (!/debugger got hello/.test(output)) {
      const status = JSON.stringify((await getPod('target')).status?.ephemeralContainerStatuses);
      const lines = server.output().split('\n').filter((l) => /ephemeral|debugger|attach/.test(l)).slice(-20).join('\n');
      assert.fail(`kubectl debug printed:\n${output}\nephemeralContainerStatuses: ${status}\nserver log:\n${lines}`);
    }
    assert.equal(code, 0, output);
    assert.match(output, /debugger got hello/);
    assert.match(output, /host target/, 'the pod UTS namespace: its hostname');
    assert.match(output, /^\s*1\s+sleep 1000000$/m, "the target's PID namespace: its PID 1 is the target's command");

    await eventually(async () => {
      const statuses = (await getPod('target')).status?.ephemeralContainerStatuses ?? [];
      return statuses.find((s) => s.name === 'debugger')?.state.terminated?.exitCode === 3;
    }, 'ephemeralContainerStatuses: debugger terminated with exit code 3', 60_000);
    const logs = await kubectl(['logs', 'target', '-c', 'debugger']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /debugger got hello/);
    // The target ran on and was not restarted; the debugger was not restarted either.
    const pod = await kubectl(['get', 'pod', 'target', '-o', 'jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.ephemeralContainerStatuses[0].restartCount}']);
    assert.equal(pod.stdout, 'Running 0 0');
  });

  it('an ephemeral container cannot be changed or removed (422 with the field), nor set through the pod itself', async () => {
    const added = (await getPod('target')).spec?.ephemeralContainers ?? [];
    assert.equal(added.length, 1);
    const changed = await request(server, 'PATCH', `${POD}/target/ephemeralcontainers`, {
      headers: { 'content-type': 'application/strategic-merge-patch+json' },
      body: { spec: { ephemeralContainers: [{ name: 'debugger', image: 'other:1' }] } },
    });
    assert.equal(changed.status, 422, changed.text);
    const causes = (changed.json as { details: { causes: { field: string; message: string }[] } }).details.causes;
    assert.ok(causes.some((c) => c.field === 'spec.ephemeralContainers[0]' && /may not be changed/.test(c.message)), changed.text);
    const removed = await request(server, 'PATCH', `${POD}/target/ephemeralcontainers`, {
      headers: { 'content-type': 'application/merge-patch+json' },
      body: { spec: { ephemeralContainers: [] } },
    });
    assert.equal(removed.status, 422, removed.text);
    assert.match(removed.text, /"field":"spec.ephemeralContainers"/);
    assert.match(removed.text, /may not be removed/);
    const throughPod = await request(server, 'PATCH', `${POD}/target`, {
      headers: { 'content-type': 'application/merge-patch+json' },
      body: { spec: { ephemeralContainers: [] } },
    });
    assert.equal(throughPod.status, 422, throughPod.text);
    assert.match(throughPod.text, /pods\/ephemeralcontainers subresource/);
  });

  it('a node credential cannot add an ephemeral container (403)', async () => {
    const token = await registerNode(server, 'debug-intruder', 'debug-intruder-password-0123');
    const res = await request(server, 'PATCH', `${POD}/target/ephemeralcontainers`, {
      token,
      headers: { 'content-type': 'application/strategic-merge-patch+json' },
      body: { spec: { ephemeralContainers: [{ name: 'intruder', image: IMAGE, command: ['true'] }] } },
    });
    assert.equal(res.status, 403, res.text);
    assert.match(res.text, /pods\/ephemeralcontainers/);
    assert.deepEqual(((await getPod('target')).spec?.ephemeralContainers ?? []).map((c) => c.name), ['debugger']);
  });

  it('a pod under the process runtime says why its ephemeral container does not run', async () => {
    const res = await request(server, 'PATCH', `${POD}/processes/ephemeralcontainers`, {
      headers: { 'content-type': 'application/strategic-merge-patch+json' },
      body: { spec: { ephemeralContainers: [{ name: 'debugger', image: IMAGE, command: ['sh'] }] } },
    });
    assert.equal(res.status, 200, res.text);
    await eventually(async () => {
      const status = (await getPod('processes')).status?.ephemeralContainerStatuses?.[0];
      return status?.state.waiting?.reason === 'CreateContainerError' && /need the runc runtime/.test(status.state.waiting.message ?? '');
    }, 'the process pod reports that ephemeral containers need runc', 60_000);
  });
});
