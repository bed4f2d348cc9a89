import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { ArchiveError } from '../../src/images/archive.js';
import { CorruptBlobError, DigestMismatchError } from '../../src/images/blobs.js';
import { LayerError } from '../../src/images/layers.js';
import { ImageFormatError } from '../../src/images/oci.js';
import { ImageNotFoundError, ImageStore, IncompleteImageError } from '../../src/images/store.js';
import { buildTestImage, sha256, type TestImage, tarBytes, writeOciArchive } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * The store's guarantees, in process: content is checked against its digest when it is written
 * and again whenever it is read (a blob corrupted on disk is caught at the next use and removed),
 * an image is named only when it is complete, and an index resolves to this platform.
 * Layers are unpacked without overlayfs markers here (those need processes: test/e2e/images.test.ts).
 */

function newStore(): ImageStore {
  return new ImageStore(path.join(tempDir('image-store'), 'image-store'), { overlayMarks: false });
}

async function put(store: ImageStore, image: TestImage, skip: string[] = []): Promise<void> {
  for (const [digest, blob] of image.blobs) if (!skip.includes(digest)) await store.putBlob(digest, Readable.from([blob]));
}

/** Overwrites a blob on disk with other bytes of the same length (a flipped byte). */
function corrupt(store: ImageStore, digest: string): void {
  const file = store.blobFile(digest);
  const bytes = fs.readFileSync(file);
  bytes[bytes.length >> 1]! ^= 0xff;
  fs.chmodSync(file, 0o644);
  fs.writeFileSync(file, bytes);
}

const small = (name: string, extra: Record<string, string> = {}): TestImage =>
  buildTestImage({ name, base: 'empty', files: { 'etc/hello': `hello from ${name}\n`, ...extra }, cmd: ['/bin/hello'] });

describe('image store: blobs are verified on write', () => {
  it('refuses content that does not hash to the digest it is written as, and keeps nothing', async () => {
    const store = newStore();
    const digest = sha256('the real content');
    await assert.rejects(store.putBlob(digest, Readable.from([Buffer.from('other content')])), (error: unknown) => {
      assert.ok(error instanceof DigestMismatchError);
      assert.equal(error.expected, digest);
      assert.equal(error.actual, sha256('other content'));
      return true;
    });
    assert.equal(store.hasBlob(digest), false);
    assert.equal(store.hasBlob(sha256('other content')), false);
    assert.deepEqual(fs.readdirSync(path.join(store.root, 'tmp')), [], 'no temporary file is left');
  });

  it('stores content under its sha256 and takes the same content twice as one blob', async () => {
    const store = newStore();
    const data = Buffer.from('some bytes');
    await store.putBlob(sha256(data), Readable.from([data]));
    const again = await store.ingestBlob(Readable.from([data]));
    assert.equal(again.digest, sha256(data));
    assert.equal(again.size, data.length);
    assert.deepEqual(store.blobs.list(), [sha256(data)]);
    assert.deepEqual(await store.readBlob(sha256(data)), data);
  });

  it('refuses a malformed digest before touching the disk', async () => {
    const store = newStore();
    await assert.rejects(store.putBlob('sha256:abc', Readable.from([Buffer.from('x')])), /not a sha256 digest/);
    assert.throws(() => store.hasBlob('../../etc/passwd'), /not a sha256 digest/);
  });
});

describe('image store: blobs are verified on read', () => {
  it('a blob corrupted on disk is detected when read, removed, and reported with its digest and file', async () => {
    const store = newStore();
    const data = Buffer.from('a document the store will be asked for');
    const digest = sha256(data);
    await store.putBlob(digest, Readable.from([data]));
    corrupt(store, digest);
    await assert.rejects(store.readBlob(digest), (error: unknown) => {
      assert.ok(error instanceof CorruptBlobError);
      assert.equal(error.digest, digest);
      assert.match(error.message, /is corrupt .* it was removed: import or pull the image again/);
      return true;
    });
    assert.equal(store.hasBlob(digest), false, 'a corrupt blob no longer looks present, so a pull fetches it again');
  });

  it('resolving an image whose config was corrupted fails, rather than running a changed config', async () => {
    const store = newStore();
    const image = small('app:1');
    await put(store, image);
    await store.addImage(image.ref, image.digest);
    assert.equal((await store.resolve('app:1')).id, image.configDigest);
    corrupt(store, image.configDigest);
    await assert.rejects(store.resolve('app:1'), CorruptBlobError);
    await assert.rejects(store.resolve('app:1'), IncompleteImageError, 'then the image says what is missing');
  });

  it('a corrupted manifest is caught the same way', async () => {
    const store = newStore();
    const image = small('app:2');
    await put(store, image);
    await store.addImage(image.ref, image.digest);
    corrupt(store, image.manifestDigest);
    await assert.rejects(store.resolve(image.ref), CorruptBlobError);
  });

  it('a corrupted layer blob is caught while it is unpacked, and leaves no layer directory behind', async () => {
    const store = newStore();
    const image = small('app:3', { 'data/big': 'x'.repeat(200_000) });
    await put(store, image);
    await store.addImage(image.ref, image.digest);
    const resolved = await store.resolve(image.ref);
    corrupt(store, image.layers[0]!.digest);
    await assert.rejects(store.layerDirs(resolved), CorruptBlobError);
    const layersDir = path.join(store.root, 'layers');
    assert.deepEqual(fs.existsSync(layersDir) ? fs.readdirSync(layersDir) : [], []);
    assert.equal(store.hasBlob(image.layers[0]!.digest), false, 'the corrupt layer blob is removed');
    assert.deepEqual(fs.readdirSync(path.join(store.root, 'tmp')), [], 'the half-unpacked work directory is gone');
  });

  it('a layer whose uncompressed content is not the diff id its config names is refused', async () => {
    const store = newStore();
    const image = small('app:4');
    // The same manifest shape, with a config that promises another diff id for the layer.
    const config = JSON.parse(image.config.toString()) as { rootfs: { diff_ids: string[] } };
    config.rootfs.diff_ids = [sha256('something else')];
    const configBytes = Buffer.from(JSON.stringify(config));
    const manifest = Buffer.from(
      JSON.stringify({
        ...JSON.parse(image.manifest.toString()),
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(configBytes), size: configBytes.length },
      }),
    );
    await put(store, image);
    await store.putBlob(sha256(configBytes), Readable.from([configBytes]));
    await store.putBlob(sha256(manifest), Readable.from([manifest]));
    await store.addImage('app:4', sha256(manifest));
    await assert.rejects(store.layerDirs(await store.resolve('app:4')), (error: unknown) => {
      assert.ok(error instanceof LayerError);
      assert.match(error.message, /uncompressed content has digest sha256:[a-f0-9]{64}, but the image config says sha256:/);
      return true;
    });
  });
});

describe('image store: names and resolution', () => {
  it('names an image only when everything it needs is in the store, and says what is missing', async () => {
    const store = newStore();
    const image = small('app:5');
    await put(store, image, [image.layers[0]!.digest]);
    await assert.rejects(store.addImage(image.ref, image.digest), (error: unknown) => {
      assert.ok(error instanceof IncompleteImageError);
      assert.ok(error.message.includes(image.layers[0]!.digest));
      return true;
    });
    assert.equal(store.record(image.ref), undefined);
  });

  it('resolves short names, and a digest whatever name the content was stored under', async () => {
    const store = newStore();
    const image = small('docker.io/library/app:6');
    await put(store, image);
    await store.addImage('app:6', image.digest);
    const byShort = await store.resolve('app:6');
    assert.equal(byShort.ref, 'docker.io/library/app:6');
    assert.equal(byShort.digest, image.manifestDigest);
    assert.deepEqual(byShort.config.config?.Cmd, ['/bin/hello']);
    const byDigest = await store.resolve(`other/name@${image.manifestDigest}`);
    assert.equal(byDigest.id, image.configDigest);
    await assert.rejects(store.resolve('app:7'), (error: unknown) => {
      assert.ok(error instanceof ImageNotFoundError);
      assert.match(error.message, /image docker\.io\/library\/app:7 is not in this node's image store/);
      return true;
    });
  });

  it('resolves a multi-platform index to this platform\'s manifest', async () => {
    const store = newStore();
    const image = buildTestImage({ name: 'multi:1', base: 'empty', files: { a: 'a' }, multiPlatform: true });
    await put(store, image);
    await store.addImage(image.ref, image.indexDigest!);
    const resolved = await store.resolve('multi:1');
    assert.equal(resolved.digest, image.indexDigest, 'the name points at the index (the repo digest)');
    assert.equal(resolved.manifestDigest, image.manifestDigest);
  });

  it('refuses an index with no manifest for this platform, naming the platforms it has', async () => {
    const store = newStore();
    const image = buildTestImage({ name: 'arm:1', base: 'empty', files: { a: 'a' }, multiPlatform: true, architecture: 's390x' });
    const index = JSON.parse(image.index!.toString()) as { manifests: { platform: { architecture: string } }[] };
    index.manifests = index.manifests.filter((m) => m.platform.architecture === 's390x');
    const bytes = Buffer.from(JSON.stringify(index));
    await put(store, image);
    await store.putBlob(sha256(bytes), Readable.from([bytes]));
    await assert.rejects(store.addImage('arm:1', sha256(bytes)), /its index has no manifest for linux\/\w+ \(it has linux\/s390x\)/);
  });

  it('refuses documents that are not image manifests', async () => {
    const store = newStore();
    const notJson = Buffer.from('{"schemaVersion": 2, "layers": [');
    await store.putBlob(sha256(notJson), Readable.from([notJson]));
    await assert.rejects(store.addImage('bad:1', sha256(notJson)), (error: unknown) => error instanceof ImageFormatError && /not valid JSON/.test(error.message));
    const v1 = Buffer.from(JSON.stringify({ schemaVersion: 1, name: 'x' }));
    await store.putBlob(sha256(v1), Readable.from([v1]));
    await assert.rejects(store.addImage('bad:2', sha256(v1)), /schemaVersion 1; only 2 is supported/);
  });

  it('removing a name leaves shared content until a sweep finds nothing using it', async () => {
    const store = newStore();
    const a = small('shared:a');
    const b = buildTestImage({ name: 'shared:b', base: 'empty', files: { 'etc/hello': 'hello from shared:a\n' }, cmd: ['/bin/other'] });
    assert.equal(a.layers[0]!.digest, b.layers[0]!.digest, 'the two images share their layer');
    await put(store, a);
    await put(store, b);
    await store.addImage(a.ref, a.digest);
    await store.addImage(b.ref, b.digest);
    await store.layerDirs(await store.resolve(a.ref));
    assert.equal(store.removeImage('shared:a'), true);
    let swept = await store.sweep([], 0);
    assert.equal(swept.blobs, 2, 'a\'s manifest and config go; the shared layer stays');
    assert.equal(swept.layers, 0);
    assert.ok((await store.layerDirs(await store.resolve(b.ref))).length === 1);
    store.removeImage('shared:b');
    swept = await store.sweep([], 0);
    assert.equal(swept.blobs, 3);
    assert.equal(swept.layers, 1);
    assert.deepEqual(store.blobs.list(), []);
  });

  it('a sweep keeps what pods use even when no name points at it any more, and spares content younger than its grace', async () => {
    const store = newStore();
    const old = small('moved:1');
    await put(store, old);
    await store.addImage('moved:1', old.digest);
    const newer = small('moved:1', { 'etc/new': 'new' });
    await put(store, newer);
    await store.addImage('moved:1', newer.digest); // the tag moved, as a new pull of :latest does
    assert.deepEqual((await store.sweep([old.digest], 0)).blobs, 0, 'a pod still runs the old image');
    assert.equal((await store.sweep([])).blobs, 0, 'within the grace period nothing goes');
    assert.equal((await store.sweep([], 0)).blobs, 3, 'then the old manifest, config and layer go');
    assert.equal((await store.resolve('moved:1')).digest, newer.digest);
  });
});

describe('image store: archives that are not images', () => {
  it('refuses a file that is not a tar archive', async () => {
    const store = newStore();
    const file = path.join(tempDir('image-archive'), 'junk.tar');
    fs.writeFileSync(file, Buffer.alloc(3000, 7));
    await assert.rejects(store.importArchive(file), (error: unknown) => error instanceof ArchiveError && error.message.includes(file));
  });

  it('refuses a tar that is neither an OCI layout nor a docker save archive', async () => {
    const store = newStore();
    const file = path.join(tempDir('image-archive'), 'plain.tar');
    fs.writeFileSync(file, tarBytes([{ path: 'hello.txt', type: 'File', content: Buffer.from('hi') }]));
    await assert.rejects(store.importArchive(file), /neither an OCI image layout \(no index\.json\) nor a docker save archive \(no manifest\.json\)/);
  });

  it('refuses an OCI layout whose blob is not what its name says, and names nothing', async () => {
    const store = newStore();
    const image = small('liar:1');
    image.blobs.set(image.layers[0]!.digest, Buffer.from('not the layer'));
    const file = path.join(tempDir('image-archive'), 'liar.tar');
    writeOciArchive(image, file);
    await assert.rejects(store.importArchive(file), (error: unknown) => {
      assert.ok(error instanceof ArchiveError);
      assert.match(error.message, /archive member blobs\/sha256\/[a-f0-9]{64}: content has digest sha256:[a-f0-9]{64}, expected sha256:/);
      return true;
    });
    assert.deepEqual(store.records(), []);
    assert.equal(store.hasBlob(image.layers[0]!.digest), false);
  });

  it('refuses a truncated archive (a copy that has not finished)', async () => {
    const store = newStore();
    const image = small('half:1', { 'data/big': 'y'.repeat(300_000) });
    const file = path.join(tempDir('image-archive'), 'half.tar');
    writeOciArchive(image, file);
    fs.truncateSync(file, Math.floor(fs.statSync(file).size / 2));
    await assert.rejects(store.importArchive(file), ArchiveError);
    assert.deepEqual(store.records(), []);
  });
});
