import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { importTestImage, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { spawnKubectl } from '../helpers/streams.js';

/**
 * `kubectl attach -i` end to end, for pods as processes and under runc: a container with
 * `stdin: true` reads what the client sends; without stdinOnce its stdin outlives a session, with
 * stdinOnce the end of the first session closes it (the container sees EOF) until it restarts;
 * `kubectl run -i --rm` runs a command that reads its input. A real server with its own agent,
 * kubectl 1.32 (WebSocket) and Debian's 1.20 (SPDY) for the process pods.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/attach.test.ts
 */

const IMAGE = 'drover.test/attach:1';
const READER = 'while read line; do echo "got $line"; done; echo "stdin closed"';

describe('kubectl attach -i', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  const target = () => ({ kubeconfig: server.kubeconfig, cacheDir });
  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, options: { input?: string; timeoutMs?: number } = {}) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, options);

  function pod(name: string, runtime: 'process' | 'runc', once: boolean): string {
    return [
      'apiVersion: v1',
      'kind: Pod',
      `metadata: {name: ${name}}`,
      'spec:',
      ...(runtime === 'runc' ? ['  runtimeClassName: runc'] : []),
      '  terminationGracePeriodSeconds: 1',
      '  containers:',
      '  - name: main',
      `    image: ${IMAGE}`,
      '    stdin: true',
      `    stdinOnce: ${once}`,
      // The reader ends at EOF: under stdinOnce the container exits and restarts.
      `    command: [sh, -c, '${READER}']`,
    ].join('\n');
  }

  async function restarts(name: string): Promise<number> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    return (res.json as { status?: { containerStatuses?: { restartCount: number }[] } }).status?.containerStatuses?.[0]?.restartCount ?? -1;
  }

  async function running(name: string): Promise<void> {
    await eventually(async () => (await kubectl(['get', 'pod', name, '-o', 'jsonpath={.status.containerStatuses[0].state.running.startedAt}'])).stdout !== '', `pod ${name} running`, 90_000);
  }

  /** kubectl attach -i with `input`, until `until` shows in its output (then it is stopped) or it exits. */
  async function attach(client: KubectlClient, name: string, input: string, until: RegExp): Promise<{ output: string; code: number | null }> {
    const live = spawnKubectl(client, target(), ['attach', '-i', name, '-c', 'main'], 'pipe');
    const exited = new Promise<number | null>((resolve) => live.child.once('close', (code) => resolve(code)));
    // Typed once kubectl is connected, as a user would: kubectl reads stdin only then.
    live.child.stdin!.write(input);
    live.child.stdin!.end();
    let code: number | null = null;
    let ended = false;
    void exited.then((c) => {
      code = c;
      ended = true;
    });
    try {
      await eventually(() => until.test(live.output()) || ended, `kubectl attach (${client.name}) shows ${until}`, 60_000);
    } finally {
      if (!ended) live.child.kill('SIGTERM');
    }
    return { output: live.output(), code: ended ? code : await exited.then(() => null) };
  }

  before(async () => {
    work = tempDir('attach');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, cmd: ['sh'] }), work);
    const manifest = [pod('keep', 'process', false), pod('once', 'process', true), pod('keep-runc', 'runc', false), pod('once-runc', 'runc', true)].join('\n---\n');
    const applied = await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    for (const name of ['keep', 'once', 'keep-runc', 'once-runc']) await running(name);
  });

  after(async () => {
    const dataDir = server?.dataDir;
    if (server) await kubectl(['delete', 'pod', '--all', '--wait=true', '--timeout=60s']).catch(() => undefined);
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  const cases: { name: string; client: KubectlClient }[] = [
    ...kubectlClients().map((client) => ({ name: 'process', client })),
    { name: 'runc', client: MODERN_KUBECTL },
  ];
  for (const { name, client } of cases) {
    const keep = name === 'runc' ? 'keep-runc' : 'keep';
    const once = name === 'runc' ? 'once-runc' : 'once';

    it(`without stdinOnce the container's stdin outlives a session (${name}, ${client.name})`, async () => {
      const tag = `${client.bin.length}`;
      const first = await attach(client, keep, `hello ${tag}\n`, new RegExp(`got hello ${tag}`));
      assert.match(first.output, new RegExp(`got hello ${tag}`), first.output);
      // The first session closed its stdin and went away: the container still reads.
      const second = await attach(client, keep, `again ${tag}\n`, new RegExp(`got again ${tag}`));
      assert.match(second.output, new RegExp(`got again ${tag}`), second.output);
      assert.doesNotMatch(second.output, /stdin closed/);
      assert.equal(await restarts(keep), 0, 'the container kept running');
    });

    it(`with stdinOnce the end of the first session closes stdin until the container restarts (${name}, ${client.name})`, async () => {
      await running(once);
      const before = await restarts(once);
      const session = await attach(client, once, 'one\ntwo\n', /stdin closed/);
      assert.match(session.output, /got one\s+got two\s+stdin closed/, session.output);
      // The instance ended with its stdin, and so did the session: kubectl exits on its own.
      await eventually(async () => ((await restarts(once)) === before + 1 ? true : undefined), `${once} restarted after its stdin closed`, 60_000);
    });
  }

  it('kubectl run -i --rm runs a command reading its input, then removes the pod (process and runc)', async () => {
    for (const [name, overrides] of [['reader', []], ['reader-runc', ['--overrides', '{"apiVersion":"v1","spec":{"runtimeClassName":"runc"}}']]] as const) {
      const ran = await kubectl(
        ['run', name, '-i', '--rm', '--restart=Never', `--image=${IMAGE}`, '--image-pull-policy=Never', ...overrides, '--command', '--', 'sh', '-c', 'read x; read y; echo "read $x and $y"'],
        MODERN_KUBECTL,
        { input: 'first\nsecond\n', timeoutMs: 120_000 },
      );
      assert.equal(ran.code, 0, `${name}: ${ran.stdout}\n${ran.stderr}`);
      assert.match(ran.stdout, /read first and second/, `${name}: ${ran.stdout}\n${ran.stderr}`);
      assert.match(ran.stdout, new RegExp(`pod "${name}" deleted`), ran.stdout);
    }
  });

  it('attach -i to a container without stdin: true is refused with the reason', async () => {
    const applied = await kubectl(['run', 'deaf', `--image=${IMAGE}`, '--restart=Never', '--command', '--', 'sleep', '1000000']);
    assert.equal(applied.code, 0, applied.stderr);
    await running('deaf');
    const refused = await kubectl(['attach', '-i', 'deaf'], MODERN_KUBECTL, { timeoutMs: 30_000 });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /container deaf in pod default\/deaf does not keep its stdin open/, refused.stderr);
  });
});
