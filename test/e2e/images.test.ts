import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { ImageStore } from '../../src/images/store.js';
import { buildTestImage, type LayerEntry, writeDockerArchive, writeOciArchive } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * Importing the archives the test image builder writes, in both formats, gzip or not, and
 * running what was imported: the layers mounted as overlayfs lower dirs (so the whiteout markers
 * the store made are the ones the kernel reads) and busybox run inside with chroot.
 */

const isRoot = process.getuid?.() === 0;
const mounts: string[] = [];

function mountOverlay(lowerDirsLowestFirst: string[]): string {
  const target = path.join(tempDir('image-mount'), 'root');
  fs.mkdirSync(target);
  // overlayfs lists lower dirs top first; with no upper dir the mount is read-only.
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${[...lowerDirsLowestFirst].reverse().join(':')}`, target]);
  mounts.push(target);
  return target;
}

after(() => {
  for (const target of mounts.splice(0)) {
    try {
      execFileSync('umount', [target]);
    } catch {
      execFileSync('umount', ['-l', target]);
    }
  }
});

function inRoot(root: string, script: string): string {
  return execFileSync('chroot', [root, '/bin/sh', '-c', script], { encoding: 'utf8', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } });
}

const APP_LAYER: LayerEntry[] = [
  { path: 'etc/motd', content: 'hello from the app layer\n' },
  { path: 'bin/wget', type: 'whiteout' },
  { path: 'var', type: 'opaque' },
  { path: 'var/app/data', content: 'only this under /var\n' },
  { path: 'app/run.sh', content: '#!/bin/sh\necho running as $(id -u)\n', mode: 0o755 },
];

function appImage(name: string, gzipLayers = true) {
  return buildTestImage({
    name,
    entrypoint: ['/app/run.sh'],
    cmd: ['--serve'],
    env: ['MODE=test'],
    workingDir: '/app',
    user: '1000:1000',
    exposedPorts: ['8080/tcp'],
    layers: [APP_LAYER],
    gzipLayers,
  });
}

describe('image import: OCI image layout archives', { skip: !isRoot && 'needs root (overlay mounts, chroot)' }, () => {
  for (const gzip of [false, true]) {
    it(`imports a ${gzip ? 'gzipped' : 'plain'} OCI archive and runs its root filesystem through overlayfs`, async () => {
      const image = appImage(`registry.test:5000/team/app:${gzip ? 'gz' : 'plain'}`);
      const file = path.join(tempDir('image-archive'), `app${gzip ? '.tar.gz' : '.tar'}`);
      writeOciArchive(image, file, { gzip });
      const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
      const result = await store.importArchive(file);
      assert.equal(result.format, 'oci');
      assert.deepEqual(result.images.map((i) => [i.ref, i.digest]), [[image.ref, image.manifestDigest]]);
      const resolved = await store.resolve(image.ref);
      assert.equal(resolved.id, image.configDigest);
      assert.deepEqual(resolved.config.config, {
        User: '1000:1000',
        Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'MODE=test'],
        Entrypoint: ['/app/run.sh'],
        Cmd: ['--serve'],
        WorkingDir: '/app',
        ExposedPorts: { '8080/tcp': {} },
      });
      const layers = await store.layers(resolved);
      assert.deepEqual(layers.map((l) => l.overlay), [true, true], 'the markers overlayfs needs were made');
      const root = mountOverlay(layers.map((l) => l.dir));
      assert.equal(inRoot(root, 'cat /etc/motd'), 'hello from the app layer\n');
      assert.equal(inRoot(root, 'test -e /bin/wget && echo present || echo gone'), 'gone\n', 'the whiteout hides the base layer\'s applet');
      assert.equal(inRoot(root, 'ls /var'), 'app\n', 'the opaque /var hides the base layer\'s /var/www');
      assert.equal(inRoot(root, 'su -s /bin/sh user -c /app/run.sh'), 'running as 1000\n', 'busybox, /etc/passwd and the app layer work together');
      assert.equal(inRoot(root, 'readlink /bin/sh'), 'busybox\n');
    });
  }

  it('names images from the layout\'s annotations, a tag-only name with --name, and keeps an unnamed one under its digest', async () => {
    const dir = tempDir('image-archive');
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    const full = buildTestImage({ name: 'full.test/a:1', base: 'empty', files: { a: 'a' } });
    writeOciArchive(full, path.join(dir, 'full.tar'), { naming: 'full' });
    assert.deepEqual((await store.importArchive(path.join(dir, 'full.tar'))).images.map((i) => i.ref), ['full.test/a:1']);
    const tagged = buildTestImage({ name: 'ignored.test/b:2.0', base: 'empty', files: { b: 'b' } });
    writeOciArchive(tagged, path.join(dir, 'tag.tar'), { naming: 'tag' });
    assert.deepEqual((await store.importArchive(path.join(dir, 'tag.tar'), { name: 'mine/b' })).images.map((i) => i.ref), ['docker.io/mine/b:2.0']);
    const unnamed = buildTestImage({ name: 'x/c', base: 'empty', files: { c: 'c' } });
    writeOciArchive(unnamed, path.join(dir, 'none.tar'), { naming: 'none' });
    assert.deepEqual((await store.importArchive(path.join(dir, 'none.tar'))).images.map((i) => i.ref), [unnamed.manifestDigest]);
    assert.equal((await store.resolve(`anything@${unnamed.manifestDigest}`)).id, unnamed.configDigest, 'an unnamed image is reachable by digest');
  });

  it('imports a multi-platform image (an index) and several images from one archive, sharing their layers', async () => {
    const multi = buildTestImage({ name: 'multi.test/m:1', multiPlatform: true, files: { 'etc/m': 'm' } });
    const other = buildTestImage({ name: 'multi.test/o:1', files: { 'etc/o': 'o' } });
    const file = path.join(tempDir('image-archive'), 'two.tar');
    writeOciArchive([multi, other], file);
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    const result = await store.importArchive(file);
    assert.deepEqual(result.images.map((i) => i.digest), [multi.indexDigest, other.manifestDigest]);
    assert.equal((await store.resolve('multi.test/m:1')).manifestDigest, multi.manifestDigest);
    await store.layerDirs(await store.resolve('multi.test/m:1'));
    await store.layerDirs(await store.resolve('multi.test/o:1'));
    assert.equal(fs.readdirSync(path.join(store.root, 'layers')).length, 3, 'the busybox base layer is unpacked once for both');
  });

  it('importing the same archive again changes nothing', async () => {
    const image = buildTestImage({ name: 'again.test/a:1', base: 'empty', files: { a: 'a' } });
    const file = path.join(tempDir('image-archive'), 'again.tar');
    writeOciArchive(image, file);
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    const first = await store.importArchive(file);
    const blobs = store.blobs.list();
    const second = await store.importArchive(file);
    assert.deepEqual(second.images.map((i) => i.digest), first.images.map((i) => i.digest));
    assert.deepEqual(store.blobs.list(), blobs);
    assert.equal(store.records().length, 1);
  });
});

describe('image import: docker save archives', { skip: !isRoot && 'needs root (overlay mounts, chroot)' }, () => {
  for (const gzip of [false, true]) {
    it(`imports a ${gzip ? 'gzipped' : 'plain'} docker save archive and runs it`, async () => {
      const image = appImage(`docker.test/app:${gzip ? 'gz' : 'plain'}`, false);
      const file = path.join(tempDir('image-archive'), `app-docker${gzip ? '.tar.gz' : '.tar'}`);
      writeDockerArchive(image, file, { gzip });
      const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
      const result = await store.importArchive(file);
      assert.equal(result.format, 'docker');
      assert.deepEqual(result.images.map((i) => i.ref), [image.ref]);
      const resolved = await store.resolve(image.ref);
      assert.equal(resolved.id, image.configDigest, 'the config (the image id) is the archive\'s, byte for byte');
      assert.deepEqual(resolved.layers.map((l) => l.diffId), image.layers.map((l) => l.diffId));
      const root = mountOverlay(await store.layerDirs(resolved));
      assert.equal(inRoot(root, 'cat /etc/motd; ls /var; test -e /bin/wget || echo no-wget'), 'hello from the app layer\napp\nno-wget\n');
    });
  }

  it('follows the symlinks docker save writes for a layer two images share, and names each RepoTag', async () => {
    const a = buildTestImage({ name: 'docker.test/a:1', files: { 'etc/a': 'a' }, gzipLayers: false });
    const b = buildTestImage({ name: 'docker.test/b:1', files: { 'etc/b': 'b' }, gzipLayers: false });
    const file = path.join(tempDir('image-archive'), 'linked.tar');
    writeDockerArchive([a, b], file, { linkDuplicateLayers: true });
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    const result = await store.importArchive(file);
    assert.deepEqual(result.images.map((i) => i.ref), [a.ref, b.ref]);
    const root = mountOverlay(await store.layerDirs(await store.resolve(b.ref)));
    assert.equal(inRoot(root, 'cat /etc/b; echo hi'), 'bhi\n');
  });

  it('an untagged docker save image takes --name, or is kept under its digest', async () => {
    const image = buildTestImage({ name: 'docker.test/u:1', base: 'empty', files: { u: 'u' }, gzipLayers: false });
    const file = path.join(tempDir('image-archive'), 'untagged.tar');
    writeDockerArchive(image, file, { repoTags: [] });
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    const unnamed = await store.importArchive(file);
    assert.match(unnamed.images[0]!.ref, /^sha256:[a-f0-9]{64}$/);
    const named = await store.importArchive(file, { name: 'local/u:dev' });
    assert.deepEqual(named.images.map((i) => i.ref), ['docker.io/local/u:dev']);
    assert.deepEqual(store.records().map((r) => r.ref), ['docker.io/local/u:dev'], 'naming it dropped the unnamed record');
  });

  it('refuses a docker save layer that is not what its config says', async () => {
    const image = buildTestImage({ name: 'docker.test/bad:1', base: 'empty', files: { f: 'f' }, gzipLayers: false });
    image.layers[0]!.tar = Buffer.concat([image.layers[0]!.tar, Buffer.alloc(512)]);
    const file = path.join(tempDir('image-archive'), 'bad.tar');
    writeDockerArchive(image, file);
    const store = new ImageStore(path.join(tempDir('image-store'), 'image-store'));
    await assert.rejects(store.importArchive(file), /layer [a-f0-9]{64}\/layer\.tar has digest sha256:[a-f0-9]{64}, but its config says sha256:/);
    assert.deepEqual(store.records(), []);
  });
});
