import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { isMountPoint } from '../../src/agent/pods/runtime/host-mounts.js';
import { makeRootfs, removeRootfs, rootfsPaths } from '../../src/agent/pods/runtime/rootfs.js';
import { ImageStore } from '../../src/images/store.js';
import { buildTestImage, writeOciArchive } from '../helpers/images.js';
import { tempDir } from '../helpers/server.js';

/**
 * A container's root file system from real unpacked layers: the overlay mount and the copy
 * fallback show the same tree (whiteouts delete, opaque directories hide what is below, later
 * layers win), the fallback is reported, and removal leaves no mount.
 */

const work = tempDir('rootfs');
const mounted: string[] = [];
after(() => {
  for (const dir of mounted) {
    try {
      removeRootfs({ rootfs: dir, upper: path.join(dir, '..', '..', 'upper'), work: path.join(dir, '..', '..', 'work'), empty: '' });
    } catch {
      // reported by the test itself
    }
  }
  fs.rmSync(work, { recursive: true, force: true });
});

/** Every path under `root` with what it is (file content, link target, dir). */
function tree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string): void => {
    for (const name of fs.readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const rel = path.relative(root, full);
      const stat = fs.lstatSync(full);
      if (stat.isSymbolicLink()) out[rel] = `-> ${fs.readlinkSync(full)}`;
      else if (stat.isDirectory()) {
        out[rel] = `dir ${(stat.mode & 0o7777).toString(8)}`;
        walk(full);
      } else if (stat.isFile()) out[rel] = `file ${(stat.mode & 0o7777).toString(8)} ${fs.readFileSync(full, 'utf8').slice(0, 40)}`;
      else out[rel] = 'other';
    }
  };
  walk(root);
  return out;
}

describe('container root file systems', () => {
  it('overlay and the copy fallback give the same tree from layers with whiteouts and opaque dirs', async () => {
    const image = buildTestImage({
      name: 'drover.test/layers:1',
      base: 'empty',
      cmd: ['/x'],
      layers: [
        [
          { path: 'etc', type: 'dir' },
          { path: 'etc/keep', content: 'base\n' },
          { path: 'etc/gone', content: 'deleted above\n' },
          { path: 'data', type: 'dir' },
          { path: 'data/old-1', content: 'hidden by opaque\n' },
          { path: 'data/old-2', content: 'hidden by opaque\n' },
          { path: 'bin', type: 'dir', mode: 0o755 },
          { path: 'bin/tool', content: '#!/bin/sh\n', mode: 0o755 },
        ],
        [
          { path: 'etc/gone', type: 'whiteout' },
          { path: 'etc/keep', content: 'replaced\n' },
          { path: 'data', type: 'opaque' },
          { path: 'data/new', content: 'only this\n' },
          { path: 'bin/link', type: 'symlink', target: 'tool' },
        ],
      ],
    });
    const archive = path.join(work, 'layers.tar');
    writeOciArchive(image, archive);
    const store = new ImageStore(path.join(work, 'store'));
    await store.importArchive(archive);
    const layerDirs = await store.layerDirs(await store.resolve('drover.test/layers:1'));
    assert.equal(layerDirs.length, 2);

    const overlay = rootfsPaths(path.join(work, 'c-overlay'), path.join(work, 'c-overlay', 'bundle'));
    const warnings: string[] = [];
    assert.equal(makeRootfs(overlay, layerDirs, (m) => warnings.push(m)), 'overlay');
    mounted.push(overlay.rootfs);
    assert.ok(isMountPoint(overlay.rootfs));
    const copy = rootfsPaths(path.join(work, 'c-copy'), path.join(work, 'c-copy', 'bundle'));
    assert.equal(makeRootfs(copy, layerDirs, (m) => warnings.push(m), true), 'copy');

    const expected = tree(overlay.rootfs);
    assert.equal(expected['etc/keep'], 'file 644 replaced\n');
    assert.equal(expected['etc/gone'], undefined, 'the whiteout deletes');
    assert.deepEqual(Object.keys(expected).filter((p) => p.startsWith('data/')), ['data/new'], 'the opaque directory hides the lower files');
    assert.equal(expected['bin/link'], '-> tool');
    assert.deepEqual(tree(copy.rootfs), expected, 'the copy shows what the overlay shows');
    assert.deepEqual(warnings, [], 'forcing the copy is not a failure to report');

    // A write goes to the container's own layer, never to the image's.
    fs.writeFileSync(path.join(overlay.rootfs, 'etc/keep'), 'container write\n');
    assert.equal(fs.readFileSync(path.join(layerDirs[1]!, 'etc/keep'), 'utf8'), 'replaced\n');
    assert.equal(fs.readFileSync(path.join(overlay.upper, 'etc/keep'), 'utf8'), 'container write\n');

    // A fresh start drops the writes; removal leaves no mount and no writable layer.
    makeRootfs(overlay, layerDirs, () => undefined);
    assert.equal(fs.readFileSync(path.join(overlay.rootfs, 'etc/keep'), 'utf8'), 'replaced\n');
    removeRootfs(overlay);
    removeRootfs(copy);
    assert.ok(!isMountPoint(overlay.rootfs));
    assert.ok(!fs.existsSync(overlay.upper) && !fs.existsSync(copy.rootfs));
  });

  it('an overlay that cannot be mounted falls back to a copy and says why', () => {
    // A ':' in a lower dir's path splits overlay's lowerdir list: the kernel refuses the mount,
    // while the copy reads the directory as it is.
    const layer = path.join(work, 'layer:with-colon');
    fs.mkdirSync(path.join(layer, 'etc'), { recursive: true });
    fs.writeFileSync(path.join(layer, 'etc/hostname'), 'x\n');
    const paths = rootfsPaths(path.join(work, 'c-fallback'), path.join(work, 'c-fallback', 'bundle'));
    const warnings: { message: string; details: Record<string, unknown> }[] = [];
    assert.equal(makeRootfs(paths, [layer], (message, details) => warnings.push({ message, details })), 'copy');
    mounted.push(paths.rootfs);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!.message, /overlay mount failed; copying the image layers instead/);
    assert.equal(typeof warnings[0]!.details.error, 'string');
    assert.ok(!isMountPoint(paths.rootfs));
    assert.equal(fs.readFileSync(path.join(paths.rootfs, 'etc/hostname'), 'utf8'), 'x\n');
    removeRootfs(paths);
    assert.ok(!fs.existsSync(paths.rootfs));
  });
});
