import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { readRunState } from '../../src/agent/pods/run-spec.js';
import { terminalOf } from '../../src/agent/pods/runtime/terminal.js';
import { importTestImage, nodeLeftovers, podDirOf } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { runOnTerminal, spawnKubectl } from '../helpers/streams.js';

/**
 * Terminals for containers under runc, end to end: a `tty: true` container's shell runs on a
 * pseudo-terminal (`tty` names a /dev/pts device), `kubectl attach -it` types into it and sees the
 * echo, a resized client window reaches `stty size` (channel 4 over WebSocket for kubectl 1.32,
 * the SPDY resize stream for Debian's 1.20), `kubectl exec -it` follows a resize mid-session,
 * `kubectl debug -it` gets a terminal in its ephemeral container, and a `tty: true` container of
 * the process runtime runs without one. kubectl runs on a pseudo-terminal of its own
 * (test/python/pty_run.py), as a user's would.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/terminals.test.ts
 */

const IMAGE = 'drover.test/terminals:1';
const POD = '/api/v1/namespaces/default/pods';
const READER = 'while read line; do echo "got $line"; done; echo "stdin closed"';

interface ContainerStatusView {
  name: string;
  restartCount: number;
  state: Record<string, { exitCode?: number; reason?: string }>;
}

describe('terminals: tty containers, attach -it, exec -it, debug -it', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  const target = () => ({ kubeconfig: server.kubeconfig, cacheDir });
  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, options: { input?: string; timeoutMs?: number } = {}) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, options);
  const statuses = async (name: string, field: 'containerStatuses' | 'ephemeralContainerStatuses'): Promise<ContainerStatusView[]> => {
    const res = await request(server, 'GET', `${POD}/${name}`);
    assert.equal(res.status, 200, res.text);
    return ((res.json as { status?: Record<string, ContainerStatusView[]> }).status?.[field] ?? []) as ContainerStatusView[];
  };

  function pod(name: string, runtime: 'runc' | 'process', command?: string, once = false): string {
    return [
      'apiVersion: v1',
      'kind: Pod',
      `metadata: {name: ${name}}`,
      'spec:',
      `  runtimeClassName: ${runtime}`,
      '  restartPolicy: Never',
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - name: main',
      `    image: ${IMAGE}`,
      '    tty: true',
      '    stdin: true',
      ...(once ? ['    stdinOnce: true'] : []),
      ...(command ? [`    command: [sh, -c, '${command}']`] : []),
    ].join('\n');
  }

  before(async () => {
    work = tempDir('terminals');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, cmd: ['sh'] }), work);
    const manifest = [pod('term', 'runc'), pod('plain', 'process', 'tty; sleep 1000000'), pod('once', 'runc', READER, true)].join('\n---\n');
    const applied = await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    for (const name of ['term', 'plain', 'once']) {
      await eventually(async () => (await statuses(name, 'containerStatuses'))[0]?.state.running !== undefined, `pod ${name} running`, 90_000);
    }
  });

  after(async () => {
    const dataDir = server?.dataDir;
    if (server) await kubectl(['delete', 'pod', '--all', '--wait=true', '--timeout=60s']).catch(() => undefined);
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  for (const client of kubectlClients()) {
    const tag = client === MODERN_KUBECTL ? 'modern' : 'legacy';
    it(`attach -it reaches the shell of a tty: true container: echo, a /dev/pts terminal, resizes (${client.name})`, async () => {
      const rows = client === MODERN_KUBECTL ? 31 : 29;
      const result = await runOnTerminal(client, target(), rows, 101, [
        `echo attached-${tag}-$((6*7))`,
        'tty; stty size',
        '@resize 47 133',
        'stty size; echo "TERM=$TERM"',
        '@end',
      ], ['attach', '-it', 'term', '-c', 'main']);
      const out = result.output;
      // The terminal echoes what was typed (the command line), then the shell runs it.
      assert.match(out, new RegExp(`echo attached-${tag}-\\$\\(\\(6\\*7\\)\\)`), `the typed line is echoed: ${out}`);
      assert.match(out, new RegExp(`^attached-${tag}-42\\r?$`, 'm'), out);
      assert.match(out, /^\/dev\/pts\/\d+\r?$/m, `the shell's stdin is a terminal: ${out}`);
      assert.match(out, new RegExp(`^${rows} 101\\r?$`, 'm'), `the terminal took the client's size: ${out}`);
      assert.match(out, /^47 133\r?$/m, `the resize reached the terminal: ${out}`);
      assert.match(out, /^TERM=xterm\r?$/m, out);
      assert.doesNotMatch(out, /Unable to use a TTY/, out);
      // Leaving the session leaves the shell running.
      const [main] = await statuses('term', 'containerStatuses');
      assert.ok(main?.state.running, JSON.stringify(main));
      assert.equal(main.restartCount, 0);
    });

    it(`exec -it follows a resize mid-session (${client.name})`, async () => {
      const result = await runOnTerminal(client, target(), 24, 80, ['tty; stty size', '@resize 52 140', 'stty size', 'exit 6'], ['exec', '-it', 'term', '-c', 'main', '--', 'sh']);
      assert.match(result.output, /^\/dev\/pts\/\d+\r?$/m, result.output);
      assert.match(result.output, /^24 80\r?$/m, result.output);
      assert.match(result.output, /^52 140\r?$/m, `the resize reached the exec's terminal: ${result.output}`);
      assert.equal(result.exitCode, 6, result.output);
    });
  }

  it("the log of a tty: true container is its terminal's output, one stream", async () => {
    const logs = await kubectl(['logs', 'term', '-c', 'main']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /attached-modern-42/);
    assert.match(logs.stdout, /\/dev\/pts\/\d+/);
  });

  it("the host end of a container's terminal is root's, closed to other users", async () => {
    const res = await request(server, 'GET', `${POD}/term`);
    const uid = (res.json as { metadata: { uid: string } }).metadata.uid;
    const run = readRunState(podDirOf(server.dataDir, uid));
    const state = run?.containers.find((c) => c.name === 'main')?.state;
    assert.ok(state && 'running' in state, JSON.stringify(state));
    const tty = terminalOf(state.running.pid);
    assert.ok(tty, 'the main process (script) has a terminal with runc on it');
    const stat = fs.statSync(tty);
    assert.ok(stat.isCharacterDevice(), tty);
    assert.equal(stat.uid, 0, `${tty} is root's`);
    assert.equal(stat.mode & 0o007, 0, `${tty} is closed to other users: mode ${(stat.mode & 0o777).toString(8)}`);
    // The container's end is in its own devpts: not this host device.
    const inside = await kubectl(['exec', 'term', '-c', 'main', '--', 'sh', '-c', 'readlink /proc/1/fd/0; ls /dev/pts']);
    assert.equal(inside.code, 0, inside.stderr);
    assert.deepEqual(inside.stdout.split(/\s+/).filter(Boolean), ['/dev/pts/0', '0', 'ptmx'], `a devpts of its own, holding only its console: ${inside.stdout}`);
  });

  it('debug -it gets a terminal in its ephemeral container', async () => {
    const result = await runOnTerminal(MODERN_KUBECTL, target(), 27, 99, [
      'tty; stty size; echo debugger-$((2*21))',
      '@resize 44 120',
      'stty size',
      'exit 4',
    ], ['debug', '-it', 'term', `--image=${IMAGE}`, '--image-pull-policy=Never', '--target=main', '--container=dbg', '--', 'sh']);
    const out = result.output;
    assert.match(out, /^debugger-42\r?$/m, out);
    assert.match(out, /^\/dev\/pts\/\d+\r?$/m, out);
    assert.match(out, /^27 99\r?$/m, out);
    assert.match(out, /^44 120\r?$/m, `the resize reached the debugger's terminal: ${out}`);
    await eventually(async () => (await statuses('term', 'ephemeralContainerStatuses')).find((s) => s.name === 'dbg')?.state.terminated?.exitCode === 4, 'dbg terminated with exit code 4', 60_000);
  });

  it('attach -it until the shell exits: the container ends with its status', async () => {
    const result = await runOnTerminal(MODERN_KUBECTL, target(), 24, 80, ['echo bye', 'exit 3'], ['attach', '-it', 'term', '-c', 'main']);
    assert.match(result.output, /^bye\r?$/m, result.output);
    await eventually(async () => (await statuses('term', 'containerStatuses'))[0]?.state.terminated?.exitCode === 3, 'main terminated with exit code 3', 60_000);
  });

  it('kubectl run -it --rm under runc: a shell on a terminal, then the pod is removed', async () => {
    const result = await runOnTerminal(MODERN_KUBECTL, target(), 24, 80, ['echo ran-$((5*5))', 'tty', 'exit 0'], [
      'run', 'oneoff', '-it', '--rm', '--restart=Never', `--image=${IMAGE}`, '--image-pull-policy=Never',
      '--overrides', '{"apiVersion":"v1","spec":{"runtimeClassName":"runc","terminationGracePeriodSeconds":1}}', '--', 'sh',
    ]);
    assert.match(result.output, /^ran-25\r?$/m, result.output);
    assert.match(result.output, /^\/dev\/pts\/\d+\r?$/m, result.output);
    assert.match(result.output, /pod "oneoff" deleted/, result.output);
    assert.equal(result.exitCode, 0, result.output);
  });

  it('stdinOnce on a terminal: the end of the first session types an end-of-file, a reader sees EOF', async () => {
    const live = spawnKubectl(MODERN_KUBECTL, target(), ['attach', '-i', 'once', '-c', 'main'], 'pipe');
    live.child.stdin!.end('one\ntwo\n');
    try {
      await eventually(() => /stdin closed/.test(live.output()), 'the reader saw the end of its input', 60_000);
    } finally {
      live.child.kill('SIGTERM');
    }
    assert.match(live.output(), /got one\r?\n[\s\S]*got two\r?\n[\s\S]*stdin closed/, live.output());
    await eventually(async () => (await statuses('once', 'containerStatuses'))[0]?.state.terminated?.exitCode === 0, 'the reader ended with exit code 0', 60_000);
  });

  it('a tty: true container of the process runtime runs without a terminal (documented), its log says so', async () => {
    const logs = await eventually(async () => {
      const r = await kubectl(['logs', 'plain', '-c', 'main']);
      return r.stdout.trim() ? r.stdout : undefined;
    }, 'the process pod logged', 30_000);
    assert.match(logs, /not a tty/, logs);
    const res = await request(server, 'GET', `${POD}/plain`);
    const uid = (res.json as { metadata: { uid: string } }).metadata.uid;
    const supervisorLog = fs.readFileSync(path.join(podDirOf(server.dataDir, uid), 'supervisor.log'), 'utf8');
    assert.match(supervisorLog, /tty: true has no terminal under the process runtime/);
    // And where kubectl describe shows it: a Warning event on the pod.
    await eventually(async () => {
      const events = await request(server, 'GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dplain`);
      const items = (events.json as { items?: { type: string; reason: string; message: string }[] }).items ?? [];
      return items.some((e) => e.type === 'Warning' && e.reason === 'NoTerminal' && /container main: tty: true has no terminal under the process runtime/.test(e.message));
    }, 'a NoTerminal event on the process pod', 30_000);
  });
});
