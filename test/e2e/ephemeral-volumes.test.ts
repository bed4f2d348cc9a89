import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { importTestImage, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * An ephemeral container's volumeMounts under runc, end to end: a pod with a ConfigMap volume and
 * an emptyDir, a debugger added by the real kubectl 1.32 (`kubectl debug --custom` with a partial
 * container spec holding the volumeMounts, which kubectl merges into the ephemeral container it
 * PATCHes onto pods/ephemeralcontainers) reads the ConfigMap's file and what the pod's container
 * wrote into the emptyDir, and writes back into it; a mount of a volume the pod does not have, or
 * with a subPath, is refused at admission (422 naming the field).
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/ephemeral-volumes.test.ts
 */

const IMAGE = 'drover.test/ephemeral-volumes:1';
const POD = '/api/v1/namespaces/default/pods';

interface EphemeralStatus {
  name: string;
  state: Record<string, { exitCode?: number; reason?: string; message?: string }>;
}

describe('ephemeral containers mount the pod volumes (runc)', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  const kubectl = (args: string[], options: { input?: string; timeoutMs?: number } = {}) => runKubectl(MODERN_KUBECTL, server.kubeconfig, cacheDir, args, options);
  const statusOf = async (container: string): Promise<EphemeralStatus | undefined> => {
    const res = await request(server, 'GET', `${POD}/vols`);
    assert.equal(res.status, 200, res.text);
    const statuses = (res.json as { status?: { ephemeralContainerStatuses?: EphemeralStatus[] } }).status?.ephemeralContainerStatuses ?? [];
    return statuses.find((s) => s.name === container);
  };
  const custom = (name: string, spec: unknown): string => {
    const file = path.join(work, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify(spec));
    return file;
  };

  before(async () => {
    work = tempDir('ephemeral-volumes');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, applets: 'all', cmd: ['sleep', '1000000'] }), work);
    const manifest = [
      'apiVersion: v1',
      'kind: ConfigMap',
      'metadata: {name: greeting}',
      'data: {message: hello-from-configmap}',
      '---',
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: vols}',
      'spec:',
      '  runtimeClassName: runc',
      '  terminationGracePeriodSeconds: 1',
      '  volumes:',
      '  - {name: config, configMap: {name: greeting}}',
      '  - {name: scratch, emptyDir: {}}',
      '  containers:',
      '  - name: main',
      `    image: ${IMAGE}`,
      '    command: [sh, -c, "echo written-by-main > /work/from-main; exec sleep 1000000"]',
      '    volumeMounts:',
      '    - {name: scratch, mountPath: /work}',
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    await eventually(async () => (await kubectl(['get', 'pod', 'vols', '-o', 'jsonpath={.status.phase}'])).stdout === 'Running', 'pod vols Running', 90_000);
  });

  after(async () => {
    const dataDir = server?.dataDir;
    if (server) await kubectl(['delete', 'pod', 'vols', '--wait=true', '--timeout=60s']).catch(() => undefined);
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  it("kubectl debug --custom with volumeMounts: the debugger reads the ConfigMap volume and the pod's emptyDir, and writes into the emptyDir", async () => {
    const spec = custom('mounts', {
      volumeMounts: [
        { name: 'config', mountPath: '/cfg' },
        { name: 'scratch', mountPath: '/data' },
      ],
    });
    // Not -i: the debugger runs to its end, and its output is read from its log (no attach race).
    const script = 'echo "config=$(cat /cfg/message)"; echo "scratch=$(cat /data/from-main)"; echo written-by-debugger > /data/from-debugger; if echo x > /cfg/message; then echo config-writable; else echo config-read-only; fi';
    const debug = await kubectl(['debug', 'vols', `--image=${IMAGE}`, '--container=reader', `--custom=${spec}`, '--', 'sh', '-c', script]);
    assert.equal(debug.code, 0, debug.stderr);
    await eventually(async () => (await statusOf('reader'))?.state.terminated !== undefined, 'the reader ended', 90_000);
    const ended = await statusOf('reader');
    const logs = await kubectl(['logs', 'vols', '-c', 'reader']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.equal(ended?.state.terminated?.exitCode, 0, `${JSON.stringify(ended)}\n${logs.stdout}`);
    assert.match(logs.stdout, /^config=hello-from-configmap$/m, 'the ConfigMap volume is mounted at /cfg');
    assert.match(logs.stdout, /^scratch=written-by-main$/m, "the pod's emptyDir is mounted at /data: what main wrote is there");
    assert.match(logs.stdout, /^config-read-only$/m, 'a ConfigMap volume is read-only in the debugger, as in any container');
    // The same emptyDir, not a copy: main sees what the debugger wrote.
    const seen = await kubectl(['exec', 'vols', '-c', 'main', '--', 'cat', '/work/from-debugger']);
    assert.equal(seen.code, 0, seen.stderr);
    assert.equal(seen.stdout.trim(), 'written-by-debugger');
    // The spec kubectl sent carries the mounts.
    const sent = await kubectl(['get', 'pod', 'vols', '-o', 'jsonpath={.spec.ephemeralContainers[?(@.name=="reader")].volumeMounts[*].name}']);
    assert.equal(sent.stdout, 'config scratch');
  });

  it('a volumeMount naming a volume the pod does not have is refused: kubectl debug fails with 422 naming the field', async () => {
    const spec = custom('missing', { volumeMounts: [{ name: 'nope', mountPath: '/nope' }] });
    const debug = await kubectl(['debug', 'vols', `--image=${IMAGE}`, '--container=lost', `--custom=${spec}`, '--', 'true']);
    assert.notEqual(debug.code, 0, debug.stdout);
    assert.match(debug.stderr, /spec\.ephemeralContainers\[1\]\.volumeMounts\[0\]\.name: Not found: "nope"/, debug.stderr);
    const names = await kubectl(['get', 'pod', 'vols', '-o', 'jsonpath={.spec.ephemeralContainers[*].name}']);
    assert.equal(names.stdout, 'reader', 'nothing was added');
  });

  it('a subPath in an ephemeral container is refused (422), as in Kubernetes', async () => {
    const res = await request(server, 'PATCH', `${POD}/vols/ephemeralcontainers`, {
      headers: { 'content-type': 'application/strategic-merge-patch+json' },
      body: { spec: { ephemeralContainers: [{ name: 'sub', image: IMAGE, command: ['true'], volumeMounts: [{ name: 'scratch', mountPath: '/data', subPath: 'a' }] }] } },
    });
    assert.equal(res.status, 422, res.text);
    const causes = (res.json as { details: { causes: { field: string; message: string }[] } }).details.causes;
    assert.ok(
      causes.some((c) => c.field === 'spec.ephemeralContainers[1].volumeMounts[0].subPath' && /cannot be set for an Ephemeral Container/.test(c.message)),
      res.text,
    );
  });
});
