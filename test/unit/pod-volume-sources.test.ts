import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import type { Lookup } from '../../src/agent/pods/env-resolution.js';
import { buildContainerRoots, checkHostPath, resolveSubPath, VolumeSetupError } from '../../src/agent/pods/mounts.js';
import { resourceFieldValue } from '../../src/agent/pods/resource-fields.js';
import { downwardAPIPayload, downwardFieldValue, projectedPayload, type TokenLookup } from '../../src/agent/pods/volume-payloads.js';
import { mountPlan, podVolumes } from '../../src/agent/pods/volumes.js';
import { ApiError } from '../../src/apiserver/errors.js';
import { refreshDue, ServiceAccountTokens } from '../../src/agent/service-account-tokens.js';
import { createLogger } from '../../src/logging/logger.js';

/** Downward API and projected volumes, hostPath checks, subPaths, mounts for runc, token refresh. */

const dirs: string[] = [];
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-volume-sources-'));
  dirs.push(dir);
  return dir;
}
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

const NODE = { cpuMilli: 2000, memoryBytes: 4 * 2 ** 30, ephemeralStorageBytes: 100 * 2 ** 30 };

const pod: KubeObject = {
  metadata: { name: 'web-0', namespace: 'shop', uid: 'u-1', labels: { tier: 'front', app: 'web' }, annotations: { note: 'say "hi"' } },
  spec: {
    containers: [
      { name: 'main', resources: { limits: { cpu: '500m', memory: '128Mi' }, requests: { cpu: '250m', memory: '64Mi' } } },
      { name: 'side' },
    ],
  },
};

function filesOf(result: ReturnType<typeof downwardAPIPayload>): Record<string, [string, string]> {
  assert.equal(result.kind, 'ready', JSON.stringify(result));
  if (result.kind !== 'ready') return {};
  return Object.fromEntries([...result.payload].map(([name, f]) => [name, [f.data.toString('utf8'), f.mode.toString(8)]]));
}

describe('downward API volumes', () => {
  it("fields as kubelet writes them: labels and annotations as sorted key=\"value\" lines, one by key", () => {
    assert.equal(downwardFieldValue(pod, 'metadata.labels'), 'app="web"\ntier="front"');
    assert.equal(downwardFieldValue(pod, 'metadata.annotations'), 'note="say \\"hi\\""');
    assert.equal(downwardFieldValue(pod, "metadata.labels['tier']"), 'front');
    assert.equal(downwardFieldValue(pod, 'metadata.uid'), 'u-1');
    assert.equal(downwardFieldValue(pod, 'spec.nodeName'), undefined, 'not a volume field');
  });

  it('resource figures divided and rounded up; a limit not set is the node, a request not set is 0', () => {
    assert.equal(resourceFieldValue(pod, 'main', 'limits.cpu', undefined, NODE), '1', '500m rounds up to 1 core');
    assert.equal(resourceFieldValue(pod, 'main', 'limits.cpu', '1m', NODE), '500');
    assert.equal(resourceFieldValue(pod, 'main', 'limits.memory', '1Mi', NODE), '128');
    assert.equal(resourceFieldValue(pod, 'main', 'requests.memory', undefined, NODE), String(64 * 2 ** 20));
    assert.equal(resourceFieldValue(pod, 'side', 'limits.memory', '1Gi', NODE), '4');
    assert.equal(resourceFieldValue(pod, 'side', 'requests.cpu', '1m', NODE), '0');
    assert.deepEqual(resourceFieldValue(pod, 'nope', 'limits.cpu', undefined, NODE), { error: 'container "nope" not found in the pod' });
  });

  it('a volume: items at their paths and modes', () => {
    const [volume] = podVolumes({
      ...pod,
      spec: {
        ...(pod.spec as object),
        volumes: [
          {
            name: 'info',
            downwardAPI: {
              defaultMode: 0o600,
              items: [
                { path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } },
                { path: 'limits/mem', resourceFieldRef: { containerName: 'main', resource: 'limits.memory', divisor: '1Mi' }, mode: 0o444 },
              ],
            },
          },
        ],
      },
    });
    assert.deepEqual(filesOf(downwardAPIPayload(volume!, pod, NODE)), { labels: ['app="web"\ntier="front"', '600'], 'limits/mem': ['128', '444'] });
  });
});

describe('projected volumes', () => {
  const objects: Record<string, KubeObject> = {
    'ConfigMap/ca': { metadata: { name: 'ca', namespace: 'shop' }, data: { 'ca.crt': 'CERT' } },
    'Secret/creds': { metadata: { name: 'creds', namespace: 'shop' }, data: { user: Buffer.from('bob').toString('base64') } },
  };
  const lookup: Lookup = (kind, name) => {
    const object = objects[`${kind}/${name}`];
    return object ? { state: 'present', object } : { state: 'absent' };
  };
  const asked: string[] = [];
  const tokens: TokenLookup = (audience, seconds) => {
    asked.push(`${audience}|${seconds}`);
    return { state: 'ready', token: 'header.payload.signature' };
  };
  const volumeWith = (projected: Record<string, unknown>) => podVolumes({ ...pod, spec: { volumes: [{ name: 'all', projected }] } })[0]!;

  it("kube-api-access's shape: token, CA and namespace in one directory, with the runtime's default modes", () => {
    const volume = volumeWith({
      sources: [
        { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
        { configMap: { name: 'ca', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } },
        { secret: { name: 'creds' } },
      ],
    });
    const processFiles = filesOf(projectedPayload(volume, { pod, lookup, tokens, node: NODE, runtime: 'process' }));
    assert.deepEqual(processFiles, {
      token: ['header.payload.signature', '400'],
      'ca.crt': ['CERT', '644'],
      namespace: ['shop', '644'],
      user: ['bob', '400'],
    });
    assert.deepEqual(asked, ['|3607'], 'no audience: the API server\'s');
    const runcFiles = filesOf(projectedPayload(volume, { pod, lookup, tokens, node: NODE, runtime: 'runc' }));
    assert.equal(runcFiles.token![1], '644', "under runc, Kubernetes' 0644");
    const withMode = volumeWith({ defaultMode: 0o440, sources: [{ serviceAccountToken: { path: 't', audience: 'vault' } }] });
    assert.deepEqual(filesOf(projectedPayload(withMode, { pod, lookup, tokens, node: NODE, runtime: 'process' })), { t: ['header.payload.signature', '440'] });
    assert.equal(asked.at(-1), 'vault|3600', 'the default lifetime is an hour');
  });

  it('a missing object fails the volume unless optional; a token not there yet keeps it pending; an unsupported source fails', () => {
    const missing = volumeWith({ sources: [{ configMap: { name: 'absent' } }] });
    assert.deepEqual(projectedPayload(missing, { pod, lookup, tokens, node: NODE, runtime: 'process' }), { kind: 'failed', message: 'configmap "absent" not found' });
    const optional = volumeWith({ sources: [{ configMap: { name: 'absent', optional: true } }] });
    assert.equal(projectedPayload(optional, { pod, lookup, tokens, node: NODE, runtime: 'process' }).kind, 'ready');
    const pending = volumeWith({ sources: [{ serviceAccountToken: { path: 'token' } }] });
    assert.equal(projectedPayload(pending, { pod, lookup, tokens: () => ({ state: 'pending' }), node: NODE, runtime: 'process' }).kind, 'pending');
    const refused = projectedPayload(pending, { pod, lookup, tokens: () => ({ state: 'failed', message: 'failed to fetch token: forbidden' }), node: NODE, runtime: 'process' });
    assert.deepEqual(refused, { kind: 'failed', message: 'failed to fetch token: forbidden' });
    const bundle = volumeWith({ sources: [{ clusterTrustBundle: { name: 'x', path: 'b' } }] });
    assert.match(JSON.stringify(projectedPayload(bundle, { pod, lookup, tokens, node: NODE, runtime: 'process' })), /clusterTrustBundle sources are not supported/);
  });

  it('a token is refreshed once 80 % of its lifetime has passed, or after 24 hours', () => {
    const hour = 3600_000;
    assert.equal(refreshDue(0, hour, 0.79 * hour), false);
    assert.equal(refreshDue(0, hour, 0.8 * hour), true);
    assert.equal(refreshDue(0, 100 * hour, 23 * hour), false);
    assert.equal(refreshDue(0, 100 * hour, 24 * hour), true);
  });
});

describe('the agent\'s bound tokens', () => {
  it('asks once for a pod-bound token, serves it, asks again at 80 % of its lifetime while serving the old one, retries a failure with a back-off', async () => {
    let now = 1_000_000;
    const requests: { namespace: string; account: string; spec: Record<string, unknown> }[] = [];
    let answer: () => Promise<KubeObject> = () => Promise.reject(new Error('unset'));
    let changes = 0;
    const tokens = new ServiceAccountTokens(
      {
        requestToken: (namespace, account, request) => {
          requests.push({ namespace, account, spec: request.spec as Record<string, unknown> });
          return answer();
        },
      },
      () => changes++,
      createLogger('silent'),
      () => now,
    );
    const owner: KubeObject = { metadata: { name: 'web-0', namespace: 'shop', uid: 'u-1' }, spec: { serviceAccountName: 'app' } };
    const issued = (token: string, seconds: number): Promise<KubeObject> =>
      Promise.resolve({ metadata: {}, spec: { expirationSeconds: seconds }, status: { token, expirationTimestamp: 'x' } });
    const settle = () => new Promise((resolve) => setImmediate(resolve));

    answer = () => issued('first', 600);
    assert.deepEqual(tokens.get(owner, 'vault', 600), { state: 'pending' });
    await settle();
    assert.deepEqual(requests, [
      { namespace: 'shop', account: 'app', spec: { audiences: ['vault'], expirationSeconds: 600, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: 'web-0', uid: 'u-1' } } },
    ]);
    assert.ok(changes >= 1, 'the pod manager is asked for a pass');
    assert.deepEqual(tokens.get(owner, 'vault', 600), { state: 'ready', token: 'first' });
    now += 479_000;
    tokens.get(owner, 'vault', 600);
    assert.equal(requests.length, 1, 'not yet at 80 % of 600 s');
    now += 1_000;
    let release: (value: KubeObject) => void = () => undefined;
    answer = () => new Promise((resolve) => (release = resolve));
    assert.deepEqual(tokens.get(owner, 'vault', 600), { state: 'ready', token: 'first' }, 'the old token while the new one is asked for');
    assert.equal(requests.length, 2);
    tokens.get(owner, 'vault', 600);
    assert.equal(requests.length, 2, 'one request at a time');
    release((await issued('second', 600)));
    await settle();
    assert.deepEqual(tokens.get(owner, 'vault', 600), { state: 'ready', token: 'second' });

    // Another audience is another token; a refusal is a message, retried after a back-off.
    answer = () => Promise.reject(new ApiError(403, 'Forbidden', 'serviceaccounts "app" is forbidden', {}));
    tokens.get(owner, '', 3607);
    await settle();
    assert.deepEqual(tokens.get(owner, '', 3607), { state: 'failed', message: 'failed to fetch token: serviceaccounts "app" is forbidden' });
    assert.equal(requests.length, 3, 'no new request before the back-off');
    assert.deepEqual(requests[2]!.spec.audiences, [], 'no audience: the API server\'s');
    now += 1_000;
    answer = () => issued('api', 3607);
    tokens.get(owner, '', 3607);
    await settle();
    assert.deepEqual(tokens.get(owner, '', 3607), { state: 'ready', token: 'api' });
    tokens.forgetPod('u-1');
    answer = () => issued('again', 600);
    assert.deepEqual(tokens.get(owner, 'vault', 600), { state: 'pending' }, 'forgotten with its pod');
  });
});

describe('hostPath checks', () => {
  it("each type as kubelet checks it, creating what the OrCreate types create; failures in kubelet's words", async () => {
    const dir = tempDir();
    const made = path.join(dir, 'a', 'b');
    checkHostPath(made, 'DirectoryOrCreate');
    assert.ok(fs.statSync(made).isDirectory());
    assert.equal(fs.statSync(made).mode & 0o777, 0o755);
    const file = path.join(dir, 'f');
    checkHostPath(file, 'FileOrCreate');
    assert.ok(fs.statSync(file).isFile());
    assert.throws(() => checkHostPath(path.join(dir, 'no', 'parent'), 'FileOrCreate'), /cannot create file/);
    checkHostPath(file, 'File');
    checkHostPath(made, 'Directory');
    checkHostPath(path.join(dir, 'whatever'), '');
    checkHostPath('/dev/null', 'CharDevice');
    assert.throws(() => checkHostPath(file, 'Directory'), new VolumeSetupError(`hostPath type check failed: ${file} is not a directory`));
    assert.throws(() => checkHostPath(path.join(dir, 'missing'), 'File'), /is not a file/);
    assert.throws(() => checkHostPath(file, 'Socket'), /is not a socket file/);
    assert.throws(() => checkHostPath('/dev/null', 'BlockDevice'), /is not a block device/);
    assert.throws(() => checkHostPath(file, 'CharDevice'), /is not a character device/);
    const socketPath = path.join(dir, 's.sock');
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    try {
      checkHostPath(socketPath, 'Socket');
    } finally {
      server.close();
    }
  });
});

describe('subPaths and mounts', () => {
  it('a subPath is created when missing and may follow symlinks inside its volume, never out of it', () => {
    const volume = tempDir();
    const outside = tempDir();
    assert.equal(resolveSubPath(volume, 'a/b', 0o755), path.join(fs.realpathSync(volume), 'a', 'b'));
    assert.ok(fs.statSync(path.join(volume, 'a', 'b')).isDirectory());
    fs.symlinkSync('a', path.join(volume, 'inner'));
    assert.equal(resolveSubPath(volume, 'inner/b', 0o755), path.join(fs.realpathSync(volume), 'a', 'b'));
    fs.symlinkSync(outside, path.join(volume, 'escape'));
    assert.throws(() => resolveSubPath(volume, 'escape', 0o755), /leads outside its volume/);
    fs.symlinkSync('../../..', path.join(volume, 'a', 'up'));
    assert.throws(() => resolveSubPath(volume, 'a/up/etc', 0o755), /leads outside its volume/);
    assert.equal(fs.existsSync(path.join(outside, 'etc')), false, 'nothing was created outside');
  });

  it('under runc: nested mounts are fine, payload volumes are read-only, hostPaths and subPaths are their host paths', () => {
    const podDir = tempDir();
    const host = tempDir();
    const spec = {
      volumes: [
        { name: 'cfg', configMap: { name: 'app' } },
        { name: 'data', emptyDir: {} },
        { name: 'cache', emptyDir: { medium: 'Memory' } },
        { name: 'host', hostPath: { path: host, type: 'Directory' } },
      ],
      containers: [
        {
          name: 'main',
          volumeMounts: [
            { name: 'data', mountPath: '/data' },
            { name: 'cache', mountPath: '/data/cache', readOnly: true },
            { name: 'cfg', mountPath: '/etc/app', readOnly: false },
            { name: 'host', mountPath: '/host', subPath: 'logs', mountPropagation: 'HostToContainer' },
          ],
        },
      ],
    };
    const testPod: KubeObject = { metadata: { name: 'p', namespace: 'ns', uid: 'u' }, spec };
    assert.equal(mountPlan(testPod, podDir, 'process').kind, 'failed', 'the process runtime cannot nest');
    const plan = mountPlan(testPod, podDir, 'runc');
    assert.equal(plan.kind, 'ready');
    if (plan.kind !== 'ready') return;
    fs.mkdirSync(path.join(podDir, 'volumes', 'data'), { recursive: true });
    const mounts = buildContainerRoots(podDir, plan.containers, 'runc').get('main');
    assert.deepEqual(mounts, [
      { destination: '/data', source: path.join(podDir, 'volumes', 'data'), type: 'bind', readOnly: false },
      { destination: '/data/cache', source: path.join(podDir, 'volumes', 'cache'), type: 'bind', readOnly: true },
      { destination: '/etc/app', source: path.join(podDir, 'volumes', 'cfg'), type: 'bind', readOnly: true },
      { destination: '/host', source: path.join(fs.realpathSync(host), 'logs'), type: 'bind', readOnly: false, options: ['rslave'] },
    ]);
    assert.ok(fs.statSync(path.join(host, 'logs')).isDirectory(), 'the hostPath subPath was made');
    assert.equal(fs.existsSync(path.join(podDir, 'roots')), false, 'no links under runc');
  });
});
