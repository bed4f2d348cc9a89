import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { runDrover } from '../helpers/agent.js';
import { buildTestImage, type LayerEntry, writeOciArchive } from '../helpers/images.js';
import { cleanup, DROVER_BIN, tempDir } from '../helpers/server.js';

/**
 * `drover image import` killed with SIGKILL while it streams an archive (blobs half written under
 * tmp/, layers half unpacked): nothing under a digest or a diff id is half-written or wrong, and
 * the same import run again completes with every layer as its tar says. The guarantee rests on
 * the order (write under tmp/, verify, then rename), which these checks read back from the disk.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/image-import-crash.test.ts
 */

after(async () => {
  await cleanup();
});

function sha256File(file: string): string {
  return `sha256:${createHash('sha256').update(fs.readFileSync(file)).digest('hex')}`;
}

/** Layers of a thousand small files and 6 MiB of large ones each: an import that takes a while. */
function layer(index: number): LayerEntry[] {
  const entries: LayerEntry[] = [];
  for (let i = 0; i < 1000; i++) entries.push({ path: `d${index}/small/${i % 10}/f${i}`, content: `${index}/${i} ${randomBytes(512).toString('base64')}\n` });
  for (let i = 0; i < 3; i++) entries.push({ path: `d${index}/large/b${i}`, content: randomBytes(2 * 1024 * 1024) });
  return entries;
}

/** Every blob hashes to its name; every layer directory is complete (its layer.json names its diff id). */
function checkStore(store: string): { blobs: number; layers: string[] } {
  const blobsDir = path.join(store, 'blobs', 'sha256');
  const blobs = fs.existsSync(blobsDir) ? fs.readdirSync(blobsDir) : [];
  for (const name of blobs) assert.equal(sha256File(path.join(blobsDir, name)), `sha256:${name}`, `blob ${name} holds what its name says`);
  const layersDir = path.join(store, 'layers');
  const layers = fs.existsSync(layersDir) ? fs.readdirSync(layersDir) : [];
  for (const hex of layers) {
    const info = JSON.parse(fs.readFileSync(path.join(layersDir, hex, 'layer.json'), 'utf8')) as { diffId: string };
    assert.equal(info.diffId, `sha256:${hex}`, `layer ${hex} is complete`);
  }
  return { blobs: blobs.length, layers };
}

describe('drover image import killed with SIGKILL', () => {
  const image = buildTestImage({ name: 'crash.test/big:1', layers: [layer(0), layer(1), layer(2)] });

  it('leaves nothing half-written under a name, and the import run again completes', async () => {
    const work = tempDir('image-crash');
    const archive = path.join(work, 'big.tar');
    writeOciArchive(image, archive);
    const dataDir = path.join(work, 'data');
    const store = path.join(dataDir, 'agent', 'image-store');
    const tmp = path.join(store, 'tmp');

    // Killed as soon as an unpack has files on disk: in the middle of the archive.
    const child = spawn(process.execPath, [DROVER_BIN, 'image', 'import', '--data-dir', dataDir, archive], { stdio: 'ignore' });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    let killedMidway = false;
    const deadline = Date.now() + 120_000;
    while (Date.now() < deadline && child.exitCode === null) {
      const unpacking = fs.existsSync(tmp) && fs.readdirSync(tmp).some((n) => n.startsWith('layer-') && fs.existsSync(path.join(tmp, n, 'fs', 'd0')));
      if (unpacking) {
        child.kill('SIGKILL');
        killedMidway = true;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    if (!killedMidway) child.kill('SIGKILL');
    await exited;
    assert.ok(killedMidway, 'the import was killed while it unpacked a layer');
    const crashed = checkStore(store);
    assert.ok(!crashed.layers.includes(image.layers[3]!.diffId.slice('sha256:'.length)), 'the last layer was not published by the killed import');

    const again = await runDrover(['image', 'import', '--data-dir', dataDir, archive]);
    assert.equal(again.code, 0, again.stderr);
    const done = checkStore(store);
    // Every layer of the image is unpacked, each file with its tar's content.
    for (const [i, built] of image.layers.entries()) {
      assert.ok(done.layers.includes(built.diffId.slice('sha256:'.length)), `layer ${i} unpacked`);
    }
    const top = path.join(store, 'layers', image.layers[3]!.diffId.slice('sha256:'.length), 'fs');
    assert.match(fs.readFileSync(path.join(top, 'd2/small/9/f999'), 'utf8'), /^2\/999 /);
    assert.equal(fs.statSync(path.join(top, 'd2/large/b2')).size, 2 * 1024 * 1024);
    const listed = await runDrover(['image', 'ls', '--json', '--data-dir', dataDir]);
    assert.equal(listed.code, 0, listed.stderr);
    assert.ok((JSON.parse(listed.stdout) as { ref: string }[]).some((i) => i.ref === 'crash.test/big:1'));
  });
});
