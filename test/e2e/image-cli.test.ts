import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { cleanupAgents, runDrover } from '../helpers/agent.js';
import { buildTestImage, writeDockerArchive, writeOciArchive } from '../helpers/images.js';
import { cleanup, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * `drover image import|ls|rm|prune` on a data dir, and a server's own agent importing archives
 * dropped into `<data-dir>/agent/images/` at start and while it runs (a half-copied archive is
 * not imported half, and is imported once complete), with image garbage collection running on
 * its node's thresholds.
 */

after(async () => {
  await cleanupAgents();
  await cleanup();
});

interface ListedImage {
  ref: string;
  digest: string;
  id?: string;
  size?: number;
  pods: string[];
}

async function listImages(dataDir: string): Promise<ListedImage[]> {
  const result = await runDrover(['image', 'ls', '--json', '--data-dir', dataDir]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout) as ListedImage[];
}

/** A pod dir as the agent writes it for a running pod (the file image GC and `image rm` read). */
function podUsing(dataDir: string, name: string, digest: string): void {
  const dir = path.join(dataDir, 'agent', 'pods', `uid-${name}`);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'pod.json'),
    JSON.stringify({ uid: `uid-${name}`, namespace: 'default', name, containers: [{ name: 'c', image: { ref: 'r', digest, layerDirs: [], config: {} } }] }),
  );
}

async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>, ceilingMs = 60_000): Promise<T> {
  const deadline = Date.now() + ceilingMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('drover image', () => {
  const web = buildTestImage({ name: 'cli.test/web:1', cmd: ['httpd', '-f'], files: { 'var/www/index.html': 'hi' } });
  const job = buildTestImage({ name: 'cli.test/job:2', cmd: ['sleep', '1'], files: { 'etc/job': 'job' }, gzipLayers: false });

  it('imports both archive formats, lists them, and removes them by name or id', async () => {
    const dataDir = tempDir('image-cli');
    const archives = tempDir('image-archives');
    writeOciArchive(web, path.join(archives, 'web.tar.gz'), { gzip: true });
    writeDockerArchive(job, path.join(archives, 'job.tar'));
    const imported = await runDrover(['image', 'import', path.join(archives, 'web.tar.gz'), path.join(archives, 'job.tar'), '--data-dir', dataDir]);
    assert.equal(imported.code, 0, imported.stderr);
    assert.match(imported.stdout, new RegExp(`imported cli\\.test/web:1 \\(${web.manifestDigest}\\) from .*web\\.tar\\.gz`));
    assert.match(imported.stdout, /imported cli\.test\/job:2 \(sha256:[a-f0-9]{64}\) from .*job\.tar/);

    const table = await runDrover(['image', 'ls', '--data-dir', dataDir]);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trim().split('\n');
    assert.match(lines[0]!, /^IMAGE\s+TAG\s+IMAGE ID\s+SIZE\s+PODS$/);
    assert.match(lines[1]!, new RegExp(`^cli\\.test/job\\s+2\\s+${job.configDigest.slice(7, 19)}\\s+\\d+(\\.\\d+)?[kM]B\\s+0$`));
    assert.match(lines[2]!, new RegExp(`^cli\\.test/web\\s+1\\s+${web.configDigest.slice(7, 19)}\\s+\\d+(\\.\\d+)?[kM]B\\s+0$`));

    const listed = await listImages(dataDir);
    assert.deepEqual(listed.map((i) => [i.ref, i.id]), [
      [job.ref, job.configDigest],
      [web.ref, web.configDigest],
    ]);

    const byId = await runDrover(['image', 'rm', job.configDigest.slice(7, 19), '--data-dir', dataDir]);
    assert.equal(byId.code, 0, byId.stderr);
    // The import unpacked the layers; job's own one goes with it (the base layer web shares stays).
    assert.match(byId.stdout, /removed cli\.test\/job:2\nfreed \d+(\.\d+)?[kM]B \(4 blobs, 1 unpacked layers\)/);
    const byName = await runDrover(['image', 'rmi', 'cli.test/web:1', '--data-dir', dataDir]);
    assert.equal(byName.code, 0, byName.stderr);
    assert.deepEqual(await listImages(dataDir), []);
    assert.deepEqual(fs.readdirSync(path.join(dataDir, 'agent/image-store/blobs/sha256')), [], 'their content is gone too');
  });

  it('refuses to remove an image a pod on this node uses; prune removes the rest', async () => {
    const dataDir = tempDir('image-cli');
    const archives = tempDir('image-archives');
    writeOciArchive([web, job], path.join(archives, 'both.tar'));
    assert.equal((await runDrover(['image', 'import', path.join(archives, 'both.tar'), '--data-dir', dataDir])).code, 0);
    podUsing(dataDir, 'web-0', web.manifestDigest);
    assert.deepEqual((await listImages(dataDir)).map((i) => [i.ref, i.pods]), [
      [job.ref, []],
      [web.ref, ['default/web-0']],
    ]);
    const refused = await runDrover(['image', 'rm', 'cli.test/web:1', '--data-dir', dataDir]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /drover image rm: image cli\.test\/web:1 is used by pod default\/web-0 on this node; delete it first/);
    const pruned = await runDrover(['image', 'prune', '--data-dir', dataDir]);
    assert.equal(pruned.code, 0, pruned.stderr);
    assert.match(pruned.stdout, /^removed cli\.test\/job:2\nfreed /);
    assert.deepEqual((await listImages(dataDir)).map((i) => i.ref), [web.ref]);
  });

  it('says clearly what is wrong', async () => {
    const dataDir = tempDir('image-cli');
    const missing = await runDrover(['image', 'import', '/nonexistent/x.tar', '--data-dir', dataDir]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /drover image import: \/nonexistent\/x\.tar does not exist/);
    const badName = await runDrover(['image', 'import', '/nonexistent/x.tar', '--name', 'Web:1', '--data-dir', dataDir]);
    assert.match(badName.stderr, /image reference "Web:1": repository name must be lowercase/);
    const notArchive = path.join(tempDir('image-archives'), 'notes.tar');
    fs.writeFileSync(notArchive, 'just some text, not a tar archive at all'.repeat(40));
    const junk = await runDrover(['image', 'import', notArchive, '--data-dir', dataDir]);
    assert.equal(junk.code, 1);
    assert.match(junk.stderr, /is not a readable tar archive|neither an OCI image layout/);
    const unknown = await runDrover(['image', 'rm', 'nothere:1', '--data-dir', dataDir]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no image nothere:1 in .*image-store/);
    const noDir = await runDrover(['image', 'ls', '--data-dir', path.join(dataDir, 'nope')]);
    assert.equal(noDir.code, 1);
    assert.match(noDir.stderr, /no data dir at .*nope; has a server or agent run with --data-dir/);
    const help = await runDrover(['image', 'import', '--help']);
    assert.match(help.stdout, /Import OCI image-layout or docker save archives \(tar, gzip or not\)/);
  });
});

describe('the agent imports archives dropped into <data-dir>/agent/images', () => {
  let server: ServerProcess;
  const imported = (file: string): number =>
    server.output().split('\n').filter((l) => l.includes('"imported image archive"') && l.includes(file)).length;

  it('at start, and when one is added: a half-copied archive is refused, then imported once complete', async () => {
    const dataDir = tempDir('image-agent');
    const imagesDir = path.join(dataDir, 'agent', 'images');
    fs.mkdirSync(imagesDir, { recursive: true });
    const early = buildTestImage({ name: 'airgap.test/early:1', files: { 'etc/early': 'e' } });
    writeOciArchive(early, path.join(imagesDir, 'early.tar'));
    server = await startServer({
      dataDir,
      embeddedAgent: true,
      args: ['--image-gc-high-threshold', '1', '--image-gc-low-threshold', '0'],
    });
    await waitFor('the archive present at start to be imported', () => imported('early.tar') === 1);
    assert.deepEqual((await listImages(dataDir)).map((i) => i.ref), [early.ref]);

    // A copy in progress: the first half sits there longer than the agent waits for quiet.
    const late = buildTestImage({ name: 'airgap.test/late:1', files: { 'etc/late': 'x'.repeat(100_000) }, gzipLayers: false });
    const whole = path.join(tempDir('image-archives'), 'late.tar.gz');
    writeDockerArchive(late, whole, { gzip: true });
    const bytes = fs.readFileSync(whole);
    const target = path.join(imagesDir, 'late.tar.gz');
    fs.writeFileSync(target, bytes.subarray(0, bytes.length >> 1));
    await waitFor('the half archive to be tried and refused', () =>
      server.output().includes('could not import image archive; it is tried again when it changes') && server.output().includes('late.tar.gz'),
    );
    assert.deepEqual((await listImages(dataDir)).map((i) => i.ref), [early.ref], 'nothing of the half archive was named');
    fs.appendFileSync(target, bytes.subarray(bytes.length >> 1));
    await waitFor('the completed archive to be imported', () => imported('late.tar.gz') === 1);
    assert.deepEqual((await listImages(dataDir)).map((i) => i.ref), [late.ref, early.ref].sort());
    assert.match(server.output(), /"images":\["airgap\.test\/late:1 \(sha256:[a-f0-9]{64}\)"\]/);

    // The node's thresholds reach image garbage collection (1%/0%: it runs, and spares images
    // younger than two minutes, so it says it could not get down to the low threshold).
    await waitFor('a round of image garbage collection', () => server.output().includes('image garbage collection could not bring disk usage down'));
    assert.equal((await listImages(dataDir)).length, 2);
  });

  it('after a restart, imports again only what is missing from the store', async () => {
    const dataDir = server.dataDir;
    const removed = await runDrover(['image', 'rm', 'airgap.test/early:1', '--data-dir', dataDir]);
    assert.equal(removed.code, 0, removed.stderr);
    await server.stop();
    server = await startServer({ dataDir, embeddedAgent: true });
    await waitFor('the removed image to be imported again', () => imported('early.tar') === 1);
    // The scan at start handled both files: the unchanged, still-present one was not read again.
    assert.equal(imported('late.tar.gz'), 0);
    assert.equal((await listImages(dataDir)).length, 2);
  });
});
