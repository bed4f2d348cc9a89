import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { checkPayloadPath, DATA_DIR_LINK, type Payload, writePayload } from '../../src/agent/pods/atomic-writer.js';
import type { Lookup } from '../../src/agent/pods/env-resolution.js';
import { buildContainerRoots } from '../../src/agent/pods/mounts.js';
import { mountPlan, podVolumes, volumePayload } from '../../src/agent/pods/volumes.js';

/** ConfigMap and Secret volumes: kubelet's payload rules, the atomic writer, and where mounts appear. */

const dirs: string[] = [];
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-volumes-'));
  dirs.push(dir);
  return dir;
}
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

const b64 = (text: string): string => Buffer.from(text).toString('base64');
const objects: Record<string, KubeObject> = {
  'ConfigMap/app': { metadata: { name: 'app', namespace: 'ns' }, data: { 'app.conf': 'a=1\n', other: 'o' }, binaryData: { blob: b64('\u0001\u0002') } },
  'Secret/tls': { metadata: { name: 'tls', namespace: 'ns' }, data: { 'tls.key': b64('KEY') } },
};
const lookup: Lookup = (kind, name) => {
  const object = objects[`${kind}/${name}`];
  return object ? { state: 'present', object } : { state: 'absent' };
};

function podWith(spec: Record<string, unknown>): KubeObject {
  return { metadata: { name: 'p', namespace: 'ns', uid: 'u' }, spec };
}

function payloadOf(volume: Record<string, unknown>): ReturnType<typeof volumePayload> {
  const [parsed] = podVolumes(podWith({ volumes: [{ name: 'v', ...volume }] }));
  return volumePayload(parsed!, 'ns', lookup);
}

function files(result: ReturnType<typeof volumePayload>): Record<string, [string, string]> {
  assert.equal(result.kind, 'ready', JSON.stringify(result));
  if (result.kind !== 'ready') return {};
  return Object.fromEntries([...result.payload].map(([name, f]) => [name, [f.data.toString('utf8'), f.mode.toString(8)]]));
}

describe('volume payloads', () => {
  it('every key (data and binaryData) with the default mode; a Secret defaults to 0400', () => {
    assert.deepEqual(files(payloadOf({ configMap: { name: 'app' } })), {
      'app.conf': ['a=1\n', '644'],
      other: ['o', '644'],
      blob: ['\u0001\u0002', '644'],
    });
    assert.deepEqual(files(payloadOf({ secret: { secretName: 'tls' } })), { 'tls.key': ['KEY', '400'] });
    assert.deepEqual(files(payloadOf({ secret: { secretName: 'tls', defaultMode: 0o440 } })), { 'tls.key': ['KEY', '440'] });
  });

  it('items pick keys, name their paths and may set a mode', () => {
    const result = payloadOf({ configMap: { name: 'app', defaultMode: 0o600, items: [{ key: 'app.conf', path: 'conf/main.conf' }, { key: 'other', path: 'o', mode: 0o444 }] } });
    assert.deepEqual(files(result), { 'conf/main.conf': ['a=1\n', '600'], o: ['o', '444'] });
  });

  it("missing objects and keys: kubelet's FailedMount messages, or empty when optional", () => {
    assert.deepEqual(payloadOf({ configMap: { name: 'gone' } }), { kind: 'failed', message: 'configmap "gone" not found' });
    assert.deepEqual(payloadOf({ secret: { secretName: 'gone' } }), { kind: 'failed', message: 'secret "gone" not found' });
    assert.deepEqual(payloadOf({ configMap: { name: 'app', items: [{ key: 'k', path: 'k' }] } }), {
      kind: 'failed',
      message: 'configmap references non-existent config key: k',
    });
    assert.deepEqual(payloadOf({ secret: { secretName: 'tls', items: [{ key: 'k', path: 'k' }] } }), {
      kind: 'failed',
      message: 'secret references non-existent secret key: k',
    });
    assert.deepEqual(files(payloadOf({ configMap: { name: 'gone', optional: true } })), {});
    assert.deepEqual(files(payloadOf({ configMap: { name: 'app', optional: true, items: [{ key: 'k', path: 'k' }, { key: 'other', path: 'x' }] } })), {
      x: ['o', '644'],
    });
  });
});

describe('atomic writer', () => {
  const payload = (entries: Record<string, string>, mode = 0o644): Payload =>
    new Map(Object.entries(entries).map(([k, v]) => [k, { data: Buffer.from(v), mode }]));

  it('files appear through ..data; an update swaps the whole set and removes the old version and names', () => {
    const dir = path.join(tempDir(), 'vol');
    assert.equal(writePayload(dir, payload({ a: '1', 'sub/b': '2' }), { now: new Date('2026-01-02T03:04:05Z') }), true);
    const first = fs.readlinkSync(path.join(dir, DATA_DIR_LINK));
    assert.match(first, /^\.\.2026_01_02_03_04_05\./);
    assert.equal(fs.readlinkSync(path.join(dir, 'a')), '..data/a');
    assert.equal(fs.readFileSync(path.join(dir, 'sub/b'), 'utf8'), '2');
    assert.equal(fs.statSync(path.join(dir, 'a')).mode & 0o777, 0o644);

    assert.equal(writePayload(dir, payload({ a: '1', 'sub/b': '2' })), false, 'the same content writes nothing');
    assert.equal(fs.readlinkSync(path.join(dir, DATA_DIR_LINK)), first);

    assert.equal(writePayload(dir, payload({ a: 'new', c: '3' }, 0o400)), true);
    const second = fs.readlinkSync(path.join(dir, DATA_DIR_LINK));
    assert.notEqual(second, first);
    assert.equal(fs.readFileSync(path.join(dir, 'a'), 'utf8'), 'new');
    assert.equal(fs.statSync(path.join(dir, 'c')).mode & 0o777, 0o400);
    assert.ok(!fs.existsSync(path.join(dir, 'sub')), 'a name the new version lacks is gone');
    assert.deepEqual(fs.readdirSync(dir).sort(), [DATA_DIR_LINK, second, 'a', 'c'].sort(), 'one version directory left');
    assert.equal(writePayload(dir, payload({ a: 'new', c: '3' }, 0o600)), true, 'a mode change alone is an update');
  });

  it('a reader holding the old file keeps reading it whole while the new version lands', () => {
    const dir = path.join(tempDir(), 'vol');
    writePayload(dir, payload({ a: 'old'.repeat(1000) }));
    const fd = fs.openSync(path.join(dir, 'a'), 'r');
    writePayload(dir, payload({ a: 'new' }));
    assert.equal(fs.readFileSync(fd, 'utf8'), 'old'.repeat(1000));
    fs.closeSync(fd);
    assert.equal(fs.readFileSync(path.join(dir, 'a'), 'utf8'), 'new');
  });

  it('refuses paths that leave the volume or collide with its own names', () => {
    for (const bad of ['/etc/passwd', '../x', 'a/../../x', '..data', '..x', 'a//b', './a', '']) {
      assert.throws(() => checkPayloadPath(bad), /must/, bad);
    }
    for (const ok of ['a', 'a/b', 'a..b', '.hidden']) checkPayloadPath(ok);
  });
});

describe('container roots', () => {
  it('each mountPath is a link under the container root; a ConfigMap subPath is a copy that later updates do not reach', () => {
    const podDir = tempDir();
    const pod = podWith({
      volumes: [{ name: 'cfg', configMap: { name: 'app' } }, { name: 'scratch', emptyDir: {} }, { name: 'host', hostPath: { path: '/tmp' } }],
      containers: [
        {
          name: 'main',
          volumeMounts: [
            { name: 'cfg', mountPath: '/etc/app' },
            { name: 'cfg', mountPath: '/etc/single.conf', subPath: 'app.conf' },
            { name: 'scratch', mountPath: 'data/../var/scratch' },
            { name: 'scratch', mountPath: '/work/logs', subPath: 'logs' },
            { name: 'host', mountPath: '/host' },
          ],
        },
      ],
    });
    const plan = mountPlan(pod, podDir);
    assert.equal(plan.kind, 'ready');
    if (plan.kind !== 'ready') return;
    assert.deepEqual(
      plan.containers[0]!.links.map((l) => l.mountPath),
      ['/etc/app', '/etc/single.conf', '/host', '/var/scratch', '/work/logs'],
      'mountPaths are made absolute and normal',
    );
    writePayload(path.join(podDir, 'volumes/cfg'), new Map([['app.conf', { data: Buffer.from('v1'), mode: 0o644 }]]));
    fs.mkdirSync(path.join(podDir, 'volumes/scratch'), { recursive: true });
    buildContainerRoots(podDir, plan.containers);
    const root = path.join(podDir, 'roots/main');
    assert.equal(fs.readFileSync(path.join(root, 'etc/app/app.conf'), 'utf8'), 'v1');
    assert.equal(fs.readFileSync(path.join(root, 'etc/single.conf'), 'utf8'), 'v1');
    fs.writeFileSync(path.join(root, 'work/logs/x'), 'shared');
    assert.equal(fs.readFileSync(path.join(podDir, 'volumes/scratch/logs/x'), 'utf8'), 'shared', 'an emptyDir subPath is the volume itself');
    writePayload(path.join(podDir, 'volumes/cfg'), new Map([['app.conf', { data: Buffer.from('v2'), mode: 0o644 }]]));
    assert.equal(fs.readFileSync(path.join(root, 'etc/app/app.conf'), 'utf8'), 'v2', 'the whole-volume mount follows updates');
    assert.equal(fs.readFileSync(path.join(root, 'etc/single.conf'), 'utf8'), 'v1', 'the subPath does not');
  });

  it('a mount inside another mount, or at /, cannot be expressed and fails the container', () => {
    const nested = mountPlan(
      podWith({
        volumes: [{ name: 'a', emptyDir: {} }, { name: 'b', emptyDir: {} }],
        containers: [{ name: 'c', volumeMounts: [{ name: 'a', mountPath: '/data' }, { name: 'b', mountPath: '/data/inner' }] }],
      }),
      '/pods/x',
    );
    assert.deepEqual(nested, {
      kind: 'failed',
      container: 'c',
      message: `volume "b" at /data/inner is inside the mount of volume "a" at /data: Drover's process runtime cannot nest mounts`,
    });
    const atRoot = mountPlan(podWith({ volumes: [{ name: 'a', emptyDir: {} }], containers: [{ name: 'c', volumeMounts: [{ name: 'a', mountPath: '/' }] }] }), '/pods/x');
    assert.equal(atRoot.kind, 'failed');
  });
});
