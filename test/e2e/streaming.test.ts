import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import { cleanupAgents, freePort, registerNode } from '../helpers/agent.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { pidsRunning } from '../helpers/pods.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { PYTHON, runOnTerminal, spawnForward as spawnForwardIn } from '../helpers/streams.js';

/**
 * kubectl exec, cp and port-forward through the API server to the pod's agent, end to end: a real
 * server with its own agent, pods as processes (the process runtime), the real kubectl 1.32
 * (WebSocket: channel protocol v5, port-forward as SPDY tunnelled in a WebSocket) and Debian's
 * 1.20 (SPDY/3.1 by HTTP Upgrade), a terminal driven through a pty (python3's pty module), the
 * Python client's stream(), and who may not: a user who can only read pods, and a node.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/streaming.test.ts
 */

describe('kubectl exec, cp and port-forward', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  let webPort: number;
  const clients = kubectlClients();

  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, options: { input?: string; timeoutMs?: number } = {}) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, options);

  before(async () => {
    work = tempDir('streaming');
    cacheDir = path.join(work, 'kube-cache');
    fs.mkdirSync(path.join(work, 'www'));
    fs.writeFileSync(path.join(work, 'www', 'index.html'), 'hello through port-forward\n');
    server = await startServer({ embeddedAgent: true });
    webPort = await freePort();
    const manifest = [
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: shell}',
      'spec:',
      '  containers:',
      '  - name: main',
      '    image: busybox',
      '    command: ["sh", "-c", "while :; do sleep 1; done"]',
      '  - name: side',
      '    image: busybox',
      '    command: ["sh", "-c", "while :; do sleep 1; done"]',
      '---',
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: ticker}',
      'spec:',
      '  containers:',
      '  - name: main',
      '    image: busybox',
      '    command: ["sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"]',
      '---',
      'apiVersion: v1',
      'kind: Pod',
      'metadata: {name: web}',
      'spec:',
      '  containers:',
      '  - name: main',
      '    image: busybox',
      `    command: ["${PYTHON}", "-m", "http.server", "${webPort}", "--bind", "127.0.0.1", "--directory", "${path.join(work, 'www')}"]`,
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, { input: manifest });
    assert.equal(applied.code, 0, applied.stderr);
    for (const pod of ['shell', 'ticker', 'web']) {
      await eventually(async () => {
        const r = await kubectl(['get', 'pod', pod, '-o', 'jsonpath={.status.phase}']);
        return r.stdout === 'Running';
      }, `pod ${pod} Running`, 60_000);
    }
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  for (const client of clients) {
    it(`exec shows stdout and stderr and exits with the command's code (${client.name})`, async () => {
      const ok = await kubectl(['exec', 'shell', '-c', 'main', '--', 'sh', '-c', 'echo out; echo err >&2'], client);
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(ok.stdout, 'out\n');
      assert.match(ok.stderr, /^err$/m);
      const failed = await kubectl(['exec', 'shell', '-c', 'main', '--', 'sh', '-c', 'echo before; exit 7'], client);
      assert.equal(failed.code, 7, failed.stderr);
      assert.equal(failed.stdout, 'before\n');
      assert.match(failed.stderr, /command terminated with exit code 7/);
      // -c side reaches the other container; the default (first) container without -c.
      const side = await kubectl(['exec', 'shell', '-c', 'side', '--', 'sh', '-c', 'echo side'], client);
      assert.equal(side.stdout, 'side\n', side.stderr);
      // kubectl 1.30+ speaks WebSocket (v5); 1.20 only SPDY (v4 over it): each got the protocol it asked for.
      const transport = client === MODERN_KUBECTL ? 'websocket v5.channel.k8s.io' : 'spdy v4.channel.k8s.io';
      assert.ok(server.output().includes(`"transport":"${transport}"`), `an exec session over ${transport} in the server log`);
    });

    it(`exec -i passes stdin through and closes it at its end (${client.name})`, async () => {
      const input = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join('\n') + '\n';
      const r = await kubectl(['exec', '-i', 'shell', '-c', 'main', '--', 'sh', '-c', 'cat; echo done'], client, { input });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `${input}done\n`);
    });

    it(`exec -it runs on a terminal of the client's size (${client.name})`, async () => {
      const result = await runOnTerminal(client, { kubeconfig: server.kubeconfig, cacheDir }, 33, 111, ['tty; stty size; echo $((6*7))', 'exit 5'], ['exec', '-it', 'shell', '-c', 'main', '--', 'sh']);
      assert.match(result.output, /\/dev\/pts\/\d+/, result.output);
      assert.match(result.output, /33 111/, `the terminal has the client's size: ${result.output}`);
      assert.match(result.output, /42/);
      assert.equal(result.exitCode, 5, result.output);
    });

    it(`cp copies a file into the pod and back, byte for byte (${client.name})`, async () => {
      const local = path.join(work, `payload-${client.bin.length}.bin`);
      const payload = Buffer.alloc(3 * 1024 * 1024);
      for (let i = 0; i < payload.length; i++) payload[i] = (i * 7919) % 251;
      fs.writeFileSync(local, payload);
      const inPod = path.join(work, `in-pod-${client.bin.length}.bin`);
      const to = await kubectl(['cp', local, `shell:${inPod}`, '-c', 'main'], client, { timeoutMs: 120_000 });
      assert.equal(to.code, 0, to.stderr);
      assert.ok(fs.readFileSync(inPod).equals(payload), 'the copy in the pod is the file');
      const back = path.join(work, `back-${client.bin.length}.bin`);
      // kubectl cp reads relative to its working directory; an absolute path works too.
      const from = await kubectl(['cp', `shell:${inPod}`, back, '-c', 'main'], client, { timeoutMs: 120_000 });
      assert.equal(from.code, 0, from.stderr);
      assert.ok(fs.readFileSync(back).equals(payload), 'the copy back is the file');
    });

    it(`port-forward serves the pod's HTTP port; a closed port is an error kubectl prints (${client.name})`, async () => {
      const forward = spawnForward(client, ['port-forward', 'pod/web', `:${webPort}`]);
      try {
        const local = await forward.localPort;
        for (let i = 0; i < 3; i++) {
          const answer = await fetch(`http://127.0.0.1:${local}/index.html`);
          assert.equal(answer.status, 200);
          assert.equal(await answer.text(), 'hello through port-forward\n');
        }
      } finally {
        forward.child.kill('SIGTERM');
      }
      // kubectl 1.31+ tunnels its SPDY session in a WebSocket; 1.20 upgrades to SPDY directly.
      const transport = client === MODERN_KUBECTL ? 'websocket' : 'spdy';
      assert.match(server.output(), new RegExp(`"kind":"portforward","transport":"${transport}"`), `a port-forward session over ${transport}`);
      const closedPort = await freePort();
      const refused = spawnForward(client, ['port-forward', 'pod/web', `:${closedPort}`]);
      try {
        const local = await refused.localPort;
        await fetch(`http://127.0.0.1:${local}/`).then(
          () => assert.fail('a closed port answered'),
          () => undefined,
        );
        await eventually(() => /connection refused/.test(refused.output()), 'kubectl prints why the connection failed');
      } finally {
        refused.child.kill('SIGTERM');
      }
    });
  }

  for (const client of clients) {
    it(`attach shows the container's output from now on; -i to a container without stdin: true is refused with a reason (${client.name})`, async () => {
      const child = spawn(client.bin, ['--kubeconfig', server.kubeconfig, '--cache-dir', cacheDir, 'attach', 'ticker', '-c', 'main'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (out += c.toString()));
      try {
        const ticks = await eventually(() => {
          const seen = [...out.matchAll(/tick (\d+)/g)].map((m) => Number(m[1]));
          return seen.length >= 3 ? seen : undefined;
        }, `kubectl attach shows ticks (${client.name})`, 30_000);
        // From now on: consecutive, and not the log from the start of the container.
        for (let i = 1; i < ticks.length; i++) assert.equal(ticks[i], ticks[0]! + i, out);
      } finally {
        child.kill('SIGTERM');
      }
      const withStdin = await kubectl(['attach', '-i', 'ticker', '-c', 'main'], client, { timeoutMs: 30_000 });
      assert.notEqual(withStdin.code, 0);
      assert.match(withStdin.stderr, /container main in pod default\/ticker does not keep its stdin open \(its spec has no stdin: true\)/, withStdin.stderr);
    });
  }

  const spawnForward = (client: KubectlClient, args: string[]) => spawnForwardIn(client, { kubeconfig: server.kubeconfig, cacheDir }, args);

  it('a SPDY client that sends garbage after the upgrade loses its connection, nothing else', async () => {
    for (const garbage of [
      // SYN_STREAM whose header block is not zlib
      Buffer.concat([Buffer.from([0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]), Buffer.from('nozlib')]),
      // a frame claiming 16 MiB
      Buffer.from([0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff]),
      // data for a stream never opened, then SPDY/2
      Buffer.from([0, 0, 0, 9, 0, 0, 0, 1, 0x41, 0x80, 2, 0, 1, 0, 0, 0, 0]),
    ]) {
      const closed = await new Promise<string>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port: server.port, ca: server.caPem, servername: 'localhost' }, () => {
          socket.write(
            `POST /api/v1/namespaces/default/pods/shell/exec?command=true&stdout=true&container=main HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
              `Authorization: Bearer ${server.token}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n`,
          );
        });
        let seen = '';
        socket.on('data', (c: Buffer) => {
          seen += c.toString('latin1');
          if (seen.startsWith('HTTP/1.1 101') && seen.includes('\r\n\r\n') && !seen.includes('sent')) {
            seen += 'sent';
            socket.write(garbage);
          }
        });
        socket.on('error', () => undefined);
        socket.on('close', () => resolve(seen));
        setTimeout(() => reject(new Error(`the server kept the connection: ${seen}`)), 20_000).unref();
      });
      assert.match(closed, /^HTTP\/1\.1 101 Switching Protocols/);
    }
    const still = await kubectl(['exec', 'shell', '-c', 'main', '--', 'echo', 'alive']);
    assert.equal(still.stdout, 'alive\n', still.stderr);
  });

  it('a command whose client goes away is ended with it', async () => {
    const marker = String(100_000 + Math.floor(Math.random() * 800_000));
    const running = (): number[] => pidsRunning(['sleep', marker]);
    const child = spawn(MODERN_KUBECTL.bin, ['--kubeconfig', server.kubeconfig, '--cache-dir', cacheDir, 'exec', 'shell', '-c', 'main', '--', 'sh', '-c', `echo started; exec sleep ${marker}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    await eventually(() => out.includes('started') && running().length === 1, 'the command runs');
    child.kill('SIGKILL');
    await eventually(() => running().length === 0, 'the command ended with its session', 20_000);
  });

  it('bad requests are 400s with a clear message; a plain GET is not upgraded', async () => {
    const noContainer = await kubectl(['exec', 'shell', '-c', 'nope', '--', 'true']);
    assert.notEqual(noContainer.code, 0);
    assert.match(noContainer.stderr, /container nope is not valid for pod shell/);
    const plain = await request(server, 'GET', '/api/v1/namespaces/default/pods/shell/exec?command=true&stdout=true');
    assert.equal(plain.status, 400);
    assert.match(plain.text, /Upgrade request required/);
    const checks: [string, RegExp][] = [
      ['exec?stdout=true&container=main', /at least 1 command/],
      ['exec?command=true&container=main', /at least one of stdin, stdout, stderr/],
      ['exec?command=sh&stdout=true&stderr=true&tty=true&container=main', /stderr cannot be requested with tty/],
      ['exec?command=true&stdout=true', /a container name must be specified for pod shell, choose one of: \[main side\]/],
      ['portforward?ports=99999', /not a valid port number/],
    ];
    for (const [query, message] of checks) {
      const refused = await upgrade(`/api/v1/namespaces/default/pods/shell/${query}`, server.token, query.startsWith('portforward') ? 'SPDY/3.1+portforward.k8s.io' : 'v5.channel.k8s.io');
      assert.equal(refused.status, 400, `${query}: ${refused.body}`);
      assert.match(refused.body, message, query);
    }
    const missing = await upgrade('/api/v1/namespaces/default/pods/ghost/exec?command=true&stdout=true', server.token, 'v5.channel.k8s.io');
    assert.equal(missing.status, 404, missing.body);
    const oldProtocol = await upgrade('/api/v1/namespaces/default/pods/shell/exec?command=true&stdout=true&container=main', server.token, 'channel.k8s.io');
    assert.equal(oldProtocol.status, 400);
    assert.match(oldProtocol.body, /this server speaks v5\.channel\.k8s\.io, v4\.channel\.k8s\.io/);
    // Discovery names the subresources as kube-apiserver does.
    const resources = (await request(server, 'GET', '/api/v1')).json as { resources: { name: string; kind: string; verbs: string[] }[] };
    for (const [name, kind] of [['pods/exec', 'PodExecOptions'], ['pods/attach', 'PodAttachOptions'], ['pods/portforward', 'PodPortForwardOptions']]) {
      const entry = resources.resources.find((r) => r.name === name);
      assert.deepEqual(entry && { kind: entry.kind, verbs: entry.verbs }, { kind, verbs: ['create', 'get'] }, name);
    }
  });

  it('a user who may only read pods gets 403 on exec, cp and port-forward; a node may not exec at all', async () => {
    const setup = [
      'apiVersion: v1',
      'kind: ServiceAccount',
      'metadata: {name: reader}',
      '---',
      'apiVersion: rbac.authorization.k8s.io/v1',
      'kind: Role',
      'metadata: {name: pod-reader}',
      'rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]',
      '---',
      'apiVersion: rbac.authorization.k8s.io/v1',
      'kind: RoleBinding',
      'metadata: {name: reader}',
      'roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}',
      'subjects: [{kind: ServiceAccount, name: reader, namespace: default}]',
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, { input: setup });
    assert.equal(applied.code, 0, applied.stderr);
    const token = (await kubectl(['create', 'token', 'reader'])).stdout.trim();
    assert.ok(token);
    for (const client of clients) {
      const get = await kubectl(['--token', token, 'get', 'pod', 'shell'], client);
      assert.equal(get.code, 0, get.stderr);
      const exec = await kubectl(['--token', token, 'exec', 'shell', '-c', 'main', '--', 'true'], client);
      assert.notEqual(exec.code, 0);
      assert.match(exec.stderr, /cannot create resource "pods\/exec" in API group "" in the namespace "default"/, `${client.name}: ${exec.stderr}`);
      const cp = await kubectl(['--token', token, 'cp', 'shell:/etc/hostname', path.join(work, 'nope'), '-c', 'main'], client);
      assert.notEqual(cp.code, 0);
      assert.match(cp.stderr, /forbidden|pods\/exec/, cp.stderr);
    }
    const forward = await upgrade(`/api/v1/namespaces/default/pods/web/portforward`, token, 'SPDY/3.1+portforward.k8s.io');
    assert.equal(forward.status, 403, forward.body);
    assert.match(forward.body, /cannot create resource \\"pods\/portforward\\"/);
    // Node credentials are judged by the node authorizer, which never lets a node into a pod.
    const nodeToken = await registerNode(server, 'intruder', 'intruder-password');
    for (const sub of ['exec?command=true&stdout=true&container=main', 'attach?stdout=true&container=main']) {
      const refused = await upgrade(`/api/v1/namespaces/default/pods/shell/${sub}`, nodeToken, 'v5.channel.k8s.io');
      assert.equal(refused.status, 403, `${sub}: ${refused.body}`);
    }
  });

  it('the Python client runs a command through stream()', async () => {
    const script = [
      'import json, sys',
      'from kubernetes import client, config',
      'from kubernetes.stream import stream',
      'config.load_kube_config(sys.argv[1])',
      'api = client.CoreV1Api()',
      "r = stream(api.connect_get_namespaced_pod_exec, 'shell', 'default', container='main', command=['sh', '-c', 'echo from python'], stderr=True, stdin=False, stdout=True, tty=False)",
      'print(json.dumps(r))',
    ].join('\n');
    const result = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const child = spawn(PYTHON, ['-c', script, server.kubeconfig], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, out, err });
      });
    });
    assert.equal(result.code, 0, result.err);
    assert.equal(JSON.parse(result.out), 'from python\n');
  });

  /** A WebSocket (or SPDY) upgrade by hand: the status and body of a refusal. */
  function upgrade(urlPath: string, token: string, protocol: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      // Set by hand: ws refuses kubectl's `SPDY/3.1+portforward.k8s.io`, which is not an RFC 6455 token.
      const ws = new WebSocket(`wss://127.0.0.1:${server.port}${urlPath}`, {
        ca: server.caPem,
        headers: { Authorization: `Bearer ${token}`, 'Sec-WebSocket-Protocol': protocol },
      });
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.on('open', () => {
        ws.terminate();
        resolve({ status: 101, body: '' });
      });
      ws.on('error', (error) => {
        if (!/Unexpected server response/.test(error.message)) reject(error);
      });
    });
  }
});
