import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { applyLayers, LayerError, unpackLayer, unpackedLayerAt } from '../../src/images/layers.js';
import { ImageStore } from '../../src/images/store.js';
import { buildTestImage, type LayerEntry, sha256, type TarEntry, tarBytes, type TestImage } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * Layers and OCI whiteouts, in process: a layer's `.wh.` markers are recorded rather than
 * unpacked, and the copy fallback (`applyLayers`) merges layers as overlayfs would show them.
 * Whether overlayfs itself reads the markers the store makes is test/e2e/images.test.ts.
 */

async function stored(image: TestImage): Promise<ImageStore> {
  const store = new ImageStore(path.join(tempDir('image-layers'), 'image-store'), { overlayMarks: false });
  for (const [digest, blob] of image.blobs) await store.putBlob(digest, Readable.from([blob]));
  await store.addImage(image.ref, image.digest);
  return store;
}

const BASE: LayerEntry[] = [
  { path: 'etc', type: 'dir' },
  { path: 'etc/a', content: 'a from the base\n' },
  { path: 'etc/b', content: 'b from the base\n' },
  { path: 'etc/hard', type: 'hardlink', target: 'etc/b' },
  { path: 'dir/x/y', content: 'deep\n' },
  { path: 'dir/z', content: 'z\n' },
  { path: 'opq/keep', content: 'hidden by the opaque directory above\n' },
  { path: 'opq/sub/deep', content: 'hidden too\n' },
  { path: 'abs', type: 'symlink', target: '/etc/a' },
  { path: 'rel', type: 'symlink', target: 'etc/b' },
  { path: 'replaced', content: 'a file the next layer turns into a directory\n' },
  { path: 'tool', content: '#!/bin/sh\n', mode: 0o4755 },
  { path: 'home/user', type: 'dir', uid: 1000, gid: 1000, mode: 0o750 },
];

const MIDDLE: LayerEntry[] = [
  { path: 'etc/a', type: 'whiteout' },
  { path: 'dir', type: 'whiteout' },
  { path: 'opq', type: 'opaque' },
  { path: 'opq/new', content: 'added by the layer that made opq opaque\n' },
  { path: 'replaced/inside', content: 'now a directory\n' },
  { path: 'never-existed', type: 'whiteout' },
];

const TOP: LayerEntry[] = [
  { path: 'etc/a', content: 'a again, from the top layer\n' },
  { path: 'rel', type: 'whiteout' },
];

describe('image layers: OCI whiteouts', () => {
  it('records whiteouts and opaque directories instead of unpacking the .wh. files', async () => {
    const image = buildTestImage({ name: 'wh:1', base: 'empty', layers: [BASE, MIDDLE, TOP] });
    const store = await stored(image);
    const layers = await store.layers(await store.resolve('wh:1'));
    assert.equal(layers.length, 3);
    assert.deepEqual(layers.map((l) => l.diffId), image.layers.map((l) => l.diffId), 'lowest first, keyed by diff id');
    assert.deepEqual(layers[0]!.whiteouts, []);
    assert.equal(layers[0]!.overlay, true, 'a layer without markers is usable by overlayfs as it is');
    assert.deepEqual(layers[1]!.whiteouts, ['etc/a', 'dir', 'never-existed']);
    assert.deepEqual(layers[1]!.opaques, ['opq']);
    assert.equal(layers[1]!.overlay, false, 'markers were not made (overlayMarks off), and the layer says so');
    assert.deepEqual(layers[2]!.whiteouts, ['rel']);
    const names = (dir: string): string[] => fs.readdirSync(dir, { recursive: true }).map(String);
    for (const layer of layers) assert.deepEqual(names(layer.dir).filter((n) => n.includes('.wh.')), [], 'no .wh. file is unpacked');
    assert.deepEqual(unpackedLayerAt(layers[1]!.dir), layers[1], 'a layer directory alone leads back to its markers');
  });

  it('unpacks files with their modes, owners, hard links and symlink targets verbatim (absolute ones stay absolute)', async () => {
    const store = await stored(buildTestImage({ name: 'wh:2', base: 'empty', layers: [BASE] }));
    const [base] = await store.layers(await store.resolve('wh:2'));
    const dir = base!.dir;
    assert.equal(fs.readlinkSync(path.join(dir, 'abs')), '/etc/a');
    assert.equal(fs.readlinkSync(path.join(dir, 'rel')), 'etc/b');
    assert.equal(fs.statSync(path.join(dir, 'etc/hard')).ino, fs.statSync(path.join(dir, 'etc/b')).ino);
    assert.equal(fs.statSync(path.join(dir, 'tool')).mode & 0o7777, 0o4755);
    if (process.getuid?.() === 0) {
      const home = fs.statSync(path.join(dir, 'home/user'));
      assert.deepEqual([home.uid, home.gid], [1000, 1000]);
    }
    assert.equal(fs.statSync(path.join(dir, 'etc/a')).mtime.toISOString(), '2024-01-01T00:00:00.000Z');
  });

  it("keeps the layer's modes whatever the umask (0777, 0666, setuid on a file of another owner) and a directory's mtime after files are written into it", async () => {
    const entries: LayerEntry[] = [
      { path: 'shared', type: 'dir', mode: 0o777 },
      { path: 'shared/tmp', type: 'dir', mode: 0o1777 },
      { path: 'shared/open', content: 'anyone\n', mode: 0o666 },
      { path: 'shared/run', content: '#!/bin/sh\n', mode: 0o777 },
      { path: 'shared/su', content: '#!/bin/sh\n', mode: 0o4755, uid: 1000, gid: 1000 },
      { path: 'shared/later', content: 'written after its directory\n' },
    ];
    const store = await stored(buildTestImage({ name: 'modes:1', base: 'empty', layers: [entries] }));
    const [layer] = await store.layers(await store.resolve('modes:1'));
    const mode = (rel: string): number => fs.statSync(path.join(layer!.dir, rel)).mode & 0o7777;
    assert.deepEqual(
      ['shared', 'shared/tmp', 'shared/open', 'shared/run'].map(mode),
      [0o777, 0o1777, 0o666, 0o777],
      'the umask of the unpacking process takes nothing from a mode',
    );
    if (process.getuid?.() === 0) {
      const su = fs.statSync(path.join(layer!.dir, 'shared/su'));
      assert.deepEqual([su.uid, su.gid, su.mode & 0o7777], [1000, 1000, 0o4755], 'chown does not drop the setuid bit');
    }
    // Times from the layer, set after the directory's files were written into it.
    assert.equal(fs.statSync(path.join(layer!.dir, 'shared')).mtime.toISOString(), '2024-01-01T00:00:00.000Z');
  });

  it('the copy fallback merges the layers as overlayfs shows them', async () => {
    const store = await stored(buildTestImage({ name: 'wh:3', base: 'empty', layers: [BASE, MIDDLE, TOP] }));
    const layers = await store.layers(await store.resolve('wh:3'));
    const root = path.join(tempDir('image-rootfs'), 'rootfs');
    applyLayers(layers, root);
    const read = (p: string): string => fs.readFileSync(path.join(root, p), 'utf8');
    const exists = (p: string): boolean => fs.existsSync(path.join(root, p)) || fs.lstatSync(path.join(root, p), { throwIfNoEntry: false }) !== undefined;
    assert.equal(read('etc/a'), 'a again, from the top layer\n', 'deleted in the middle, added again on top');
    assert.equal(read('etc/b'), 'b from the base\n');
    assert.equal(exists('dir'), false, 'a whited-out directory goes with everything in it');
    assert.deepEqual(fs.readdirSync(path.join(root, 'opq')), ['new'], 'an opaque directory hides what is below, keeps what its own layer adds');
    assert.equal(read('replaced/inside'), 'now a directory\n');
    assert.equal(exists('rel'), false);
    assert.equal(fs.readlinkSync(path.join(root, 'abs')), '/etc/a');
    assert.equal(fs.statSync(path.join(root, 'tool')).mode & 0o7777, 0o4755, 'setuid survives the copy');
    assert.deepEqual(
      fs.readdirSync(root, { recursive: true }).map(String).filter((n) => n.includes('.wh.')),
      [],
    );
  });

  it('the copy fallback replaces a lower symlink by a directory instead of writing through it', async () => {
    const outside = tempDir('image-outside');
    const image = buildTestImage({
      name: 'wh:4',
      base: 'empty',
      layers: [[{ path: 'escape', type: 'symlink', target: outside }], [{ path: 'escape/planted', content: 'must stay inside the root\n' }]],
    });
    const store = await stored(image);
    const root = path.join(tempDir('image-rootfs'), 'rootfs');
    applyLayers(await store.layers(await store.resolve('wh:4')), root);
    assert.deepEqual(fs.readdirSync(outside), [], 'nothing was written outside the root');
    assert.equal(fs.lstatSync(path.join(root, 'escape')).isDirectory(), true);
    assert.equal(fs.readFileSync(path.join(root, 'escape/planted'), 'utf8'), 'must stay inside the root\n');
  });
});

describe('image layers: hostile layers', () => {
  /** A raw tar (paths as given, not cleaned by the test image builder) unpacked into a fresh work dir. */
  async function unpackRaw(entries: TarEntry[]): Promise<{ fsDir: string; result: Promise<unknown> }> {
    const tar = tarBytes(entries);
    const workDir = path.join(tempDir('image-raw-layer'), 'work');
    fs.mkdirSync(workDir);
    const result = unpackLayer({ source: Readable.from([tar]), compression: 'none', diffId: sha256(tar), blob: 'sha256:raw', workDir, overlayMarks: false });
    return { fsDir: path.join(workDir, 'fs'), result };
  }

  it('unpacks absolute entry paths inside the layer, never at the host path they name', async () => {
    const outside = tempDir('image-outside');
    const hostFile = path.join(outside, 'planted');
    const modeBefore = fs.statSync(outside).mode;
    const { fsDir, result } = await unpackRaw([
      { path: `${outside}/`, type: 'Directory', mode: 0o700 },
      { path: hostFile, type: 'File', content: Buffer.from('inside\n') },
    ]);
    await result;
    assert.equal(fs.existsSync(hostFile), false, 'nothing written at the host path');
    assert.equal(fs.readFileSync(path.join(fsDir, hostFile), 'utf8'), 'inside\n');
    assert.equal(fs.statSync(outside).mode, modeBefore, 'the host directory named by the entry keeps its mode');
    assert.equal(fs.statSync(path.join(fsDir, outside)).mode & 0o777, 0o700, 'its namesake inside the layer got the mode');
  });

  it('never hard-links a host file: an absolute hard-link target is read inside the layer', async () => {
    const outside = tempDir('image-outside');
    const secret = path.join(outside, 'secret');
    fs.writeFileSync(secret, 'host secret\n');
    const { fsDir, result } = await unpackRaw([{ path: 'leak', type: 'Link', linkpath: secret }]);
    await assert.rejects(result, LayerError, 'the target does not exist inside the layer');
    assert.equal(fs.statSync(secret).nlink, 1, 'the host file got no second name');
    assert.equal(fs.existsSync(path.join(fsDir, 'leak')), false);
  });

  it('refuses a hard link whose target climbs out with ..', async () => {
    const { result } = await unpackRaw([
      { path: 'a', type: 'File', content: Buffer.from('a\n') },
      { path: 'dir/leak', type: 'Link', linkpath: '../../a' },
    ]);
    await assert.rejects(result, (error: unknown) => {
      assert.ok(error instanceof LayerError);
      assert.match(error.message, /hard link "dir\/leak" points out of the layer/);
      return true;
    });
  });

  it('refuses a layer with a path that climbs out with ..', async () => {
    const store = await stored(buildTestImage({ name: 'bad:1', base: 'empty', layers: [[{ path: '../escaped', content: 'x' }]] }));
    await assert.rejects(store.layerDirs(await store.resolve('bad:1')), (error: unknown) => {
      assert.ok(error instanceof LayerError);
      assert.match(error.message, /cannot be unpacked safely: .*climbs out of the layer/);
      return true;
    });
    assert.equal(fs.existsSync(path.join(store.root, 'layers')) ? fs.readdirSync(path.join(store.root, 'layers')).length : 0, 0);
  });

  it('never writes a file through a symlink the same layer made', async () => {
    const outside = tempDir('image-outside');
    const store = await stored(
      buildTestImage({
        name: 'bad:2',
        base: 'empty',
        layers: [[{ path: 'link', type: 'symlink', target: outside }, { path: 'link/planted', content: 'x' }]],
      }),
    );
    const [layer] = await store.layers(await store.resolve('bad:2'));
    assert.deepEqual(fs.readdirSync(outside), []);
    assert.equal(fs.lstatSync(path.join(layer!.dir, 'link')).isDirectory(), true, 'the file landed inside the layer');
    assert.match(layer!.skipped.join('\n'), /link: symlink would replace a directory/);
  });
});
