import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ArchiveError } from '../../src/images/archive.js';
import { LayerError } from '../../src/images/layers.js';
import { ImageStore } from '../../src/images/store.js';
import { buildTestImage, sha256, type TestImage, writeDockerArchive, writeOciArchive } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * An import unpacks each layer while it writes the blob into the store (one read of the archive,
 * one gunzip), and stages its blobs to name them together at the end. What must still hold: a
 * layer directory appears only for a blob whose digest verified and whose content is the diff id
 * its image's config names; an import that fails leaves no blob, no layer, no name and no work file.
 */

function newStore(): ImageStore {
  return new ImageStore(path.join(tempDir('image-import'), 'image-store'), { overlayMarks: false });
}

const small = (name: string, extra: Record<string, string> = {}): TestImage =>
  buildTestImage({ name, base: 'empty', files: { 'etc/hello': `hello from ${name}\n`, ...extra }, cmd: ['/bin/hello'] });

function list(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

/** Nothing of a failed import is visible: no name, no blob, no layer, no work file. */
function assertNothingLeft(store: ImageStore): void {
  assert.deepEqual(store.records(), [], 'no name');
  assert.deepEqual(store.blobs.list(), [], 'no blob');
  assert.deepEqual(list(path.join(store.root, 'layers')), [], 'no unpacked layer');
  assert.deepEqual(list(path.join(store.root, 'tmp')), [], 'no staged blob or half-unpacked layer left in tmp/');
}

/** The image with a config that promises another diff id for its layer (the layer blob itself is fine). */
function withWrongDiffId(image: TestImage): TestImage {
  const config = JSON.parse(image.config.toString()) as { rootfs: { diff_ids: string[] } };
  config.rootfs.diff_ids = [sha256('something else')];
  const configBytes = Buffer.from(JSON.stringify(config));
  const manifest = Buffer.from(
    JSON.stringify({
      ...JSON.parse(image.manifest.toString()),
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(configBytes), size: configBytes.length },
    }),
  );
  const blobs = new Map([...image.blobs].filter(([digest]) => digest !== image.configDigest && digest !== image.manifestDigest));
  blobs.set(sha256(configBytes), configBytes);
  blobs.set(sha256(manifest), manifest);
  return { ...image, config: configBytes, configDigest: sha256(configBytes), manifest, manifestDigest: sha256(manifest), digest: sha256(manifest), blobs };
}

describe('image import: layers unpacked while the archive is read', () => {
  for (const format of ['oci', 'docker'] as const) {
    it(`a ${format} archive's layers are unpacked by the import itself, under the diff ids the config names`, async () => {
      const store = newStore();
      const image = small(`early-${format}:1`, { 'data/text': 'some text\n'.repeat(5000) });
      const file = path.join(tempDir('image-import'), `${format}.tar`);
      if (format === 'oci') writeOciArchive(image, file);
      else writeDockerArchive(image, file);
      const imported = await store.importArchive(file);
      assert.equal(imported.format, format);
      const resolved = await store.resolve(image.ref);
      for (const layer of resolved.layers) {
        const info = store.layerInfo(layer.diffId);
        assert.ok(info, `layer ${layer.diffId} is unpacked before anything asked for it`);
        assert.equal(info.blob, layer.digest, 'layer.json names the blob it came from');
        assert.equal(fs.readFileSync(path.join(info.dir, 'etc/hello'), 'utf8'), `hello from ${image.ref.replace(/^docker\.io\/library\//, '')}\n`);
        assert.equal(fs.readFileSync(path.join(info.dir, 'data/text'), 'utf8'), 'some text\n'.repeat(5000));
      }
      assert.deepEqual(list(path.join(store.root, 'tmp')), [], 'no work dir left');
      // Using the image finds the layers there (and importing again changes nothing).
      assert.deepEqual(await store.layerDirs(resolved), resolved.layers.map((l) => store.layerInfo(l.diffId)!.dir));
      await store.importArchive(file);
      assert.deepEqual(list(path.join(store.root, 'tmp')), []);
    });
  }

  it('a layer whose content is not the diff id its config names is never published; using it fails and names both', async () => {
    const store = newStore();
    const image = withWrongDiffId(small('wrong-diff:1'));
    const file = path.join(tempDir('image-import'), 'wrong-diff.tar');
    writeOciArchive(image, file);
    await store.importArchive(file);
    assert.deepEqual(list(path.join(store.root, 'layers')), [], 'the unpack made while importing was thrown away');
    assert.deepEqual(list(path.join(store.root, 'tmp')), []);
    await assert.rejects(store.layerDirs(await store.resolve('wrong-diff:1')), (error: unknown) => {
      assert.ok(error instanceof LayerError);
      assert.match(error.message, /uncompressed content has digest sha256:[a-f0-9]{64}, but the image config says sha256:/);
      return true;
    });
    assert.deepEqual(list(path.join(store.root, 'layers')), []);
  });

  it('a layer blob that is another valid layer, not what its name says: no blob, no layer, no name', async () => {
    const store = newStore();
    const image = small('swapped:1');
    const other = small('other:1', { 'etc/other': 'other\n' });
    // A real gzipped layer (so it is unpacked while it streams), under the wrong digest.
    image.blobs.set(image.layers[0]!.digest, other.layers[0]!.blob);
    const file = path.join(tempDir('image-import'), 'swapped.tar');
    writeOciArchive(image, file);
    await assert.rejects(store.importArchive(file), (error: unknown) => {
      assert.ok(error instanceof ArchiveError);
      assert.match(error.message, /content has digest sha256:[a-f0-9]{64}, expected sha256:/);
      return true;
    });
    // Not even the blobs that did verify are named: an import that fails names nothing.
    assertNothingLeft(store);
  });

  it('an archive that breaks off in the middle of a layer leaves nothing visible', async () => {
    const store = newStore();
    const image = small('broken:1', { 'data/random': randomBytes(400_000).toString('base64') });
    const file = path.join(tempDir('image-import'), 'broken.tar');
    writeOciArchive(image, file);
    const archive = fs.readFileSync(file);
    const layer = image.layers[0]!.blob;
    const at = archive.indexOf(layer.subarray(0, 512));
    assert.ok(at > 0, 'the layer blob is in the archive');
    fs.truncateSync(file, at + Math.floor(layer.length / 2));
    await assert.rejects(store.importArchive(file), ArchiveError);
    assertNothingLeft(store);
  });
});
