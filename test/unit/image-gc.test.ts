import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { collectImageGarbage, diskUsage, imagesInUse, PodDirUnreadableError } from '../../src/images/gc.js';
import { ImageStore } from '../../src/images/store.js';
import { buildTestImage, sha256, type TestImage } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * Image garbage collection against the real filesystem the store is on: its usage is whatever
 * this machine's disk is at, so the thresholds are chosen around it (1% is always exceeded, a
 * threshold just above the usage never is). Which images pods use comes from pod.json files as
 * the agent writes them (containers[].image.digest).
 */

interface Node {
  store: ImageStore;
  podsDir: string;
}

function newNode(): Node {
  const agentDir = path.join(tempDir('image-gc'), 'agent');
  return { store: new ImageStore(path.join(agentDir, 'image-store'), { overlayMarks: false }), podsDir: path.join(agentDir, 'pods') };
}

async function add(store: ImageStore, image: TestImage, lastUsed?: string): Promise<void> {
  for (const [digest, blob] of image.blobs) await store.putBlob(digest, Readable.from([blob]));
  await store.addImage(image.ref, image.digest);
  if (lastUsed) store.touch(image.ref, new Date(lastUsed));
}

function runPod(node: Node, uid: string, name: string, digests: string[]): void {
  fs.mkdirSync(path.join(node.podsDir, uid), { recursive: true });
  fs.writeFileSync(
    path.join(node.podsDir, uid, 'pod.json'),
    JSON.stringify({
      uid,
      namespace: 'default',
      name,
      containers: digests.map((digest, i) => ({ name: `c${i}`, image: { ref: 'x', digest, layerDirs: [], config: {} } })),
    }),
  );
}

const image = (name: string): TestImage => buildTestImage({ name, base: 'empty', files: { [`etc/${name.replace(/\W/g, '-')}`]: name } });

describe('image garbage collection', () => {
  it('above the high threshold removes the images no pod uses, least recently used first, and their content', async () => {
    const node = newNode();
    const [used, old, older, newest] = [image('gc/used:1'), image('gc/old:1'), image('gc/older:1'), image('gc/newest:1')];
    await add(node.store, used);
    await add(node.store, old, '2024-03-01T00:00:00Z');
    await add(node.store, older, '2024-02-01T00:00:00Z');
    await add(node.store, newest, '2024-04-01T00:00:00Z');
    runPod(node, 'uid-1', 'web', [used.manifestDigest]);
    const report = await collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: 1, lowThresholdPercent: 0, minAgeMs: 0 });
    assert.equal(report.skipped, undefined);
    assert.deepEqual(report.removed.map((r) => r.ref), [older.ref, old.ref, newest.ref], 'least recently used first; the one a pod uses stays');
    assert.deepEqual(node.store.records().map((r) => r.ref), [used.ref]);
    assert.ok(report.freedBytes > 0);
    assert.deepEqual(node.store.blobs.list().sort(), [...used.blobs.keys()].sort(), 'the removed images\' blobs are gone, the used one\'s kept');
    assert.ok(node.store.record(used.ref)?.lastUsed, 'an image in use is marked used now');
  });

  it('spares images younger than the minimum age (a pod may be about to use what was just pulled for it)', async () => {
    const node = newNode();
    await add(node.store, image('gc/fresh:1'));
    const report = await collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: 1, lowThresholdPercent: 0 });
    assert.deepEqual(report.removed, []);
    assert.equal(node.store.records().length, 1);
  });

  it('does nothing below the high threshold, and nothing at all when the threshold is 100', async () => {
    const node = newNode();
    await add(node.store, image('gc/idle:1'));
    const used = diskUsage(node.store.root).usedPercent;
    if (used < 98) {
      const below = await collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: Math.ceil(used) + 1, lowThresholdPercent: 0, minAgeMs: 0 });
      assert.match(below.skipped ?? '', /below image-gc-high-threshold/);
      assert.deepEqual(below.removed, []);
    }
    const off = await collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: 100, lowThresholdPercent: 0, minAgeMs: 0 });
    assert.match(off.skipped ?? '', /image garbage collection is off/);
    assert.equal(node.store.records().length, 1);
  });

  it('a multi-platform image is in use when a pod runs its platform manifest', async () => {
    const node = newNode();
    const multi = buildTestImage({ name: 'gc/multi:1', base: 'empty', files: { m: 'm' }, multiPlatform: true });
    await add(node.store, multi);
    runPod(node, 'uid-2', 'multi', [multi.manifestDigest]);
    const report = await collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: 1, lowThresholdPercent: 0, minAgeMs: 0 });
    assert.deepEqual(report.removed, []);
  });

  it('removes nothing when a pod.json cannot be read (it might use any image)', async () => {
    const node = newNode();
    await add(node.store, image('gc/safe:1'));
    fs.mkdirSync(path.join(node.podsDir, 'uid-3'), { recursive: true });
    fs.writeFileSync(path.join(node.podsDir, 'uid-3', 'pod.json'), '{"containers": [');
    await assert.rejects(
      collectImageGarbage(node.store, node.podsDir, { highThresholdPercent: 1, lowThresholdPercent: 0, minAgeMs: 0 }),
      (error: unknown) => error instanceof PodDirUnreadableError && /uid-3\/pod\.json is not valid JSON/.test(error.message),
    );
    assert.equal(node.store.records().length, 1);
  });

  it('reads which pods use which digest from pod dirs, ignoring dirs still being set up', () => {
    const node = newNode();
    const d1 = sha256('one');
    const d2 = sha256('two');
    runPod(node, 'a', 'web-1', [d1, d2]);
    runPod(node, 'b', 'web-2', [d1]);
    fs.mkdirSync(path.join(node.podsDir, 'c'), { recursive: true });
    const uses = imagesInUse(node.podsDir);
    assert.deepEqual(uses.get(d1)?.pods, ['default/web-1', 'default/web-2']);
    assert.deepEqual(uses.get(d2)?.pods, ['default/web-1']);
    assert.equal(uses.size, 2);
  });
});

describe('image store leases', () => {
  it('a sweep keeps what an import in progress wrote and has not named yet', async () => {
    const node = newNode();
    const data = Buffer.from('a layer a pull has fetched but not yet named');
    let sweptDuring = -1;
    await node.store.withLease(async () => {
      await node.store.putBlob(sha256(data), Readable.from([data]));
      // Another store object (as another process would have) sweeps with no grace period.
      sweptDuring = (await new ImageStore(node.store.root, { overlayMarks: false }).sweep([], 0)).blobs;
    });
    assert.equal(sweptDuring, 0);
    assert.equal(node.store.hasBlob(sha256(data)), true);
    assert.deepEqual(fs.readdirSync(path.join(node.store.root, 'leases')), [], 'the lease is released');
    assert.equal((await node.store.sweep([], 0)).blobs, 1, 'once released, unnamed content goes');
  });

  it('the lease of a process that died holds nothing', async () => {
    const node = newNode();
    const data = Buffer.from('left by a crashed import');
    await node.store.putBlob(sha256(data), Readable.from([data]));
    fs.mkdirSync(path.join(node.store.root, 'leases'), { recursive: true });
    // pid 2^22 + 1 is above Linux's pid_max ceiling: no process has it.
    fs.writeFileSync(path.join(node.store.root, 'leases', 'lease-4194305-abcdef'), `${sha256(data)}\n`);
    assert.equal((await node.store.sweep([], 0)).blobs, 1);
    assert.deepEqual(fs.readdirSync(path.join(node.store.root, 'leases')), []);
  });
});
