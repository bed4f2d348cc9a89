import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../helpers/agent.js';
import { importTestImage, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { pidsRunning } from '../helpers/pods.js';
import { cleanup, eventually, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { runOnTerminal, spawnForward, spawnKubectl } from '../helpers/streams.js';

/**
 * kubectl exec (plain, -i, -it), cp both ways and port-forward against a pod under runc, end to
 * end: a real server with its own agent, a test image (Debian's static busybox, with busybox httpd
 * serving a page from the image) imported into the node's store, kubectl 1.32 (WebSocket) and
 * Debian's 1.20 (SPDY). Sessions run through `runc exec` in the container's namespaces and root.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/streaming-runc.test.ts
 */

const IMAGE = 'drover.test/streams:1';

describe('kubectl exec, cp and port-forward under runc', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  let webPort: number;
  const clients = kubectlClients();
  const target = () => ({ kubeconfig: server.kubeconfig, cacheDir });
  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, options: { input?: string; timeoutMs?: number } = {}) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, options);

  before(async () => {
    work = tempDir('streaming-runc');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(
      server.dataDir,
      buildTestImage({ name: IMAGE, cmd: ['sleep', '1000000'], files: { '/www/index.html': 'hello from the image through port-forward\n' } }),
      work,
    );
    // The pod shares the host's network namespace until issue 15: a free host port for httpd.
    webPort = await freePort();
    const manifest = [
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: box}',
      'spec:',
      '  runtimeClassName: runc',
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - name: shell',
      `    image: ${IMAGE}`,
      '  - name: web',
      `    image: ${IMAGE}`,
      `    command: [httpd, -f, -p, "127.0.0.1:${webPort}", -h, /www]`,
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    await eventually(async () => (await kubectl(['get', 'pod', 'box', '-o', 'jsonpath={.status.phase}'])).stdout === 'Running', 'pod box Running', 90_000);
  });

  after(async () => {
    const dataDir = server?.dataDir;
    if (server) await kubectl(['delete', 'pod', 'box', '--wait=true', '--timeout=60s']).catch(() => undefined);
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  for (const client of clients) {
    it(`exec runs in the container: its PID 1, hostname and root; stdout, stderr and the exit code (${client.name})`, async () => {
      const pid1 = await kubectl(['exec', 'box', '-c', 'shell', '--', 'cat', '/proc/1/cmdline'], client);
      assert.equal(pid1.code, 0, pid1.stderr);
      assert.deepEqual(pid1.stdout.split('\0').filter(Boolean), ['sleep', '1000000'], 'PID 1 is the image command');
      const where = await kubectl(['exec', 'box', '-c', 'shell', '--', 'sh', '-c', 'hostname; cat /www/index.html; echo err >&2'], client);
      assert.equal(where.code, 0, where.stderr);
      assert.equal(where.stdout, 'box\nhello from the image through port-forward\n');
      assert.match(where.stderr, /^err$/m);
      const failed = await kubectl(['exec', 'box', '-c', 'web', '--', 'sh', '-c', 'echo before; exit 7'], client);
      assert.equal(failed.code, 7, failed.stderr);
      assert.equal(failed.stdout, 'before\n');
      assert.match(failed.stderr, /command terminated with exit code 7/);
      const missing = await kubectl(['exec', 'box', '-c', 'shell', '--', '/no/such/binary'], client);
      assert.notEqual(missing.code, 0);
      assert.match(missing.stderr, /no such file or directory|not found/i, missing.stderr);
    });

    it(`exec -i passes stdin through and closes it at its end (${client.name})`, async () => {
      const input = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join('\n') + '\n';
      const r = await kubectl(['exec', '-i', 'box', '-c', 'shell', '--', 'sh', '-c', 'cat; echo done'], client, { input });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `${input}done\n`);
    });

    it(`exec -it runs on a terminal of the client's size (${client.name})`, async () => {
      const result = await runOnTerminal(client, target(), 33, 111, ['tty; stty size; echo $((6*7)); hostname', 'exit 5'], ['exec', '-it', 'box', '-c', 'shell', '--', 'sh']);
      assert.match(result.output, /\/dev\/pts\/\d+/, result.output);
      assert.match(result.output, /33 111/, `the terminal has the client's size: ${result.output}`);
      assert.match(result.output, /42/);
      assert.match(result.output, /^box\r?$/m, `the shell runs in the container: ${result.output}`);
      assert.equal(result.exitCode, 5, result.output);
    });

    it(`cp copies a file into the container's root and back, byte for byte (${client.name})`, async () => {
      const local = path.join(work, `payload-${client.bin.length}.bin`);
      const payload = Buffer.alloc(3 * 1024 * 1024);
      for (let i = 0; i < payload.length; i++) payload[i] = (i * 7919) % 251;
      fs.writeFileSync(local, payload);
      const to = await kubectl(['cp', local, 'box:/tmp/payload.bin', '-c', 'shell'], client, { timeoutMs: 120_000 });
      assert.equal(to.code, 0, to.stderr);
      assert.ok(!fs.existsSync('/tmp/payload.bin') || !fs.readFileSync('/tmp/payload.bin').equals(payload), 'the copy went into the container, not the host');
      const sum = await kubectl(['exec', 'box', '-c', 'shell', '--', 'sha256sum', '/tmp/payload.bin'], client);
      assert.equal(sum.stdout.split(' ')[0], createHash('sha256').update(payload).digest('hex'), 'the copy in the container is the file');
      const back = path.join(work, `back-${client.bin.length}.bin`);
      const from = await kubectl(['cp', 'box:/tmp/payload.bin', back, '-c', 'shell'], client, { timeoutMs: 120_000 });
      assert.equal(from.code, 0, from.stderr);
      assert.ok(fs.readFileSync(back).equals(payload), 'the copy back is the file');
      // A file of the image, out of the container's root.
      const page = path.join(work, `page-${client.bin.length}.html`);
      const image = await kubectl(['cp', 'box:/www/index.html', page, '-c', 'web'], client);
      assert.equal(image.code, 0, image.stderr);
      assert.equal(fs.readFileSync(page, 'utf8'), 'hello from the image through port-forward\n');
    });

    it(`port-forward serves busybox httpd of the container to fetch (${client.name})`, async () => {
      const forward = spawnForward(client, target(), ['port-forward', 'pod/box', `:${webPort}`]);
      try {
        const local = await forward.localPort;
        for (let i = 0; i < 3; i++) {
          const answer = await fetch(`http://127.0.0.1:${local}/index.html`);
          assert.equal(answer.status, 200);
          assert.equal(await answer.text(), 'hello from the image through port-forward\n');
        }
      } finally {
        forward.child.kill('SIGTERM');
      }
    });
  }

  it('a runc exec whose client goes away is ended with it, in the container', async () => {
    const marker = String(100_000 + Math.floor(Math.random() * 800_000));
    const running = (): number[] => pidsRunning(['sleep', marker]);
    const live = spawnKubectl(MODERN_KUBECTL, target(), ['exec', 'box', '-c', 'shell', '--', 'sh', '-c', `echo started; exec sleep ${marker}`]);
    await eventually(() => live.output().includes('started') && running().length === 1, 'the command runs');
    // In the container's PID namespace: not the host's.
    const [pid] = running();
    assert.notEqual(fs.readlinkSync(`/proc/${pid}/ns/pid`), fs.readlinkSync('/proc/self/ns/pid'), 'the command runs in the container PID namespace');
    live.child.kill('SIGKILL');
    await eventually(() => running().length === 0, 'the command ended with its session', 20_000);
  });
});
