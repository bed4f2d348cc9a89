import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildTestImage } from '../helpers/images.js';
import { importTestImage, nodeLeftovers, podLeftovers } from '../helpers/containers.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods, waitForReadyPods } from '../helpers/workloads.js';

/**
 * Containers under runc with a real server, its own agent and kubectl: the image's default
 * command runs as PID 1 in its own root file system with the pod's hostname; securityContext and
 * memory limits are enforced by the kernel; bad securityContext is refused at admission; nothing
 * is left on the host after the pods go.
 */

const WEB = 'drover.test/web:1';
const USER_IMAGE = 'drover.test/as-user:1';

interface RawPod {
  metadata: { name: string; uid: string };
  status?: {
    phase?: string;
    containerStatuses?: {
      restartCount: number;
      imageID?: string;
      containerID?: string;
      state?: Record<string, { reason?: string; message?: string }>;
      lastState?: { terminated?: { reason?: string; exitCode?: number } };
    }[];
  };
}

describe('containers under runc', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  const kubectl = (args: string[], input?: string) => runKubectl(MODERN_KUBECTL, server.kubeconfig, path.join(work, 'cache'), args, input ? { input } : {});

  /** `kubectl exec POD -c CONTAINER -- argv` (through the API server and the agent, into the container). */
  async function kexec(podName: string, container: string, argv: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return kubectl(['exec', podName, '-c', container, '--', ...argv]);
  }

  async function pod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  function podYaml(name: string, container: string, extra = ''): string {
    return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
spec:
  runtimeClassName: runc
  terminationGracePeriodSeconds: 1
${extra}  containers:
${container}`;
  }

  before(async () => {
    work = tempDir('containers');
    // Pods without a class run under runc here (the suite's other servers default to process).
    server = await startServer({ embeddedAgent: true, args: ['--default-runtime-class', 'runc'] });
    await importTestImage(
      server.dataDir,
      // StopSignal KILL: sleep as PID 1 has no SIGTERM handler, so the image says how to stop it
      // (and a deleted pod goes at once, not after its 30 s grace period).
      buildTestImage({
        name: WEB,
        entrypoint: ['/bin/sleep'],
        cmd: ['1000000'],
        files: { '/marker.txt': 'from the image\n' },
        env: ['GREETING=image'],
        stopSignal: 'SIGKILL',
      }),
      work,
    );
    await importTestImage(server.dataDir, buildTestImage({ name: USER_IMAGE, user: 'user', cmd: ['sleep', '1000000'] }), work);
  });

  after(async () => {
    const dataDir = server?.dataDir;
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  it('a deployment without a command runs the image Entrypoint+Cmd as PID 1, in the image root, named after the pod', async () => {
    // This server's default-runtime-class is runc: a plain `kubectl create deployment` runs a container.
    const applied = await kubectl(['create', 'deployment', 'web', `--image=${WEB}`]);
    assert.equal(applied.code, 0, applied.stderr);
    const [ready] = await waitForReadyPods(server, 'app=web', 1, 60_000);
    const uid = ready!.uid;
    const status = (await pod(ready!.name)).status!.containerStatuses![0]!;
    // kubectl names the container after the image's last path component.
    assert.match(status.containerID ?? '', new RegExp(`^runc://${uid}_web$`));
    assert.match(status.imageID ?? '', /^drover\.test\/web@sha256:[0-9a-f]{64}$/);

    const cmdline = await kexec(ready!.name, 'web', ['cat', '/proc/1/cmdline']);
    assert.equal(cmdline.code, 0, cmdline.stderr);
    assert.deepEqual(cmdline.stdout.split('\0').filter(Boolean), ['/bin/sleep', '1000000'], 'PID 1 is the image Entrypoint + Cmd');
    const hostname = await kexec(ready!.name, 'web', ['hostname']);
    assert.equal(hostname.stdout.trim(), ready!.name);
    const marker = await kexec(ready!.name, 'web', ['cat', '/marker.txt']);
    assert.equal(marker.stdout, 'from the image\n', 'the root file system is the image');
    const root = await kexec(ready!.name, 'web', ['ls', '/']);
    assert.doesNotMatch(root.stdout, /^(work|boot|lib64)$/m, 'the host root is not visible');
    const env = await kexec(ready!.name, 'web', ['env']);
    assert.match(env.stdout, /^GREETING=image$/m);
    assert.match(env.stdout, new RegExp(`^HOSTNAME=${ready!.name}$`, 'm'));
    const pids = await kexec(ready!.name, 'web', ['sh', '-c', 'ls /proc | grep -c "^[0-9]"']);
    assert.ok(Number(pids.stdout.trim()) <= 4, `its own PID namespace: ${pids.stdout}`);

    const deleted = await kubectl(['delete', 'deployment', 'web', '--wait=false']);
    assert.equal(deleted.code, 0, deleted.stderr);
    // Well inside the 30 s grace period: the image's StopSignal ended it.
    await eventually(async () => ((await listPods(server, 'app=web')).length === 0 ? true : undefined), 'web pods gone', 25_000);
    await eventually(() => (podLeftovers(server.dataDir, uid).length === 0 ? true : undefined), `no leftovers of pod ${uid}`, 30_000).catch(() => {
      assert.fail(`pod ${uid} left: ${podLeftovers(server.dataDir, uid).join(', ')}`);
    });
  });

  it('the image user by name; runAsUser, readOnlyRootFilesystem and capabilities are enforced', async () => {
    const byName = await kubectl(['apply', '-f', '-'], podYaml('as-user', `  - name: main\n    image: ${USER_IMAGE}\n`));
    assert.equal(byName.code, 0, byName.stderr);
    const locked = await kubectl(
      ['apply', '-f', '-'],
      podYaml(
        'locked',
        `  - name: main
    image: ${WEB}
    securityContext:
      runAsUser: 4242
      runAsGroup: 4343
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
`,
      ),
    );
    assert.equal(locked.code, 0, locked.stderr);
    await eventually(
      async () => {
        const pods = await listPods(server);
        const found = ['as-user', 'locked'].map((n) => pods.find((p) => p.name === n && p.ready));
        return found.every(Boolean) ? found : undefined;
      },
      'as-user and locked running',
      60_000,
    );
    assert.equal((await kexec('as-user', 'main', ['id', '-u'])).stdout.trim(), '1000', "the image's User 'user' from its /etc/passwd");

    const id = await kexec('locked', 'main', ['id']);
    assert.match(id.stdout, /uid=4242 gid=4343/);
    const write = await kexec('locked', 'main', ['touch', '/new-file']);
    assert.notEqual(write.code, 0);
    assert.match(write.stderr, /Read-only file system/);
    const status = await kexec('locked', 'main', ['cat', '/proc/1/status']);
    assert.match(status.stdout, /^CapBnd:\s+0000000000000400$/m, 'only CAP_NET_BIND_SERVICE in the bounding set');
    assert.match(status.stdout, /^NoNewPrivs:\s+1$/m);
    assert.match(status.stdout, /^Seccomp:\s+2$/m, 'the default seccomp filter is on');
    const rootStatus = await kexec('as-user', 'main', ['cat', '/proc/1/status']);
    assert.match(rootStatus.stdout, /^CapBnd:\s+00000000a80425fb$/m, 'the default 14 capabilities');
    for (const name of ['as-user', 'locked']) assert.equal((await kubectl(['delete', 'pod', name, '--wait=false'])).code, 0);
  });

  it("a pod's containers share its IPC and UTS namespaces and /dev/shm, each with its own PIDs", async () => {
    const applied = await kubectl(
      ['apply', '-f', '-'],
      podYaml('pair', `  - name: one\n    image: ${WEB}\n  - name: two\n    image: ${WEB}\n    command: [sleep, '999999']\n`),
    );
    assert.equal(applied.code, 0, applied.stderr);
    await eventually(async () => ((await listPods(server)).find((p) => p.name === 'pair' && p.ready) ? true : undefined), 'pair running', 60_000);
    const ns = async (container: string, kind: string): Promise<string> => (await kexec('pair', container, ['readlink', `/proc/1/ns/${kind}`])).stdout.trim();
    assert.match(await ns('one', 'ipc'), /^ipc:\[\d+\]$/);
    assert.equal(await ns('one', 'ipc'), await ns('two', 'ipc'), 'one IPC namespace for the pod');
    assert.equal(await ns('one', 'uts'), await ns('two', 'uts'), 'one UTS namespace for the pod');
    assert.notEqual(await ns('one', 'pid'), await ns('two', 'pid'), 'a PID namespace per container');
    assert.notEqual(await ns('one', 'ipc'), `ipc:[${fs.statSync('/proc/self/ns/ipc').ino}]`, "not the host's IPC namespace");
    assert.equal((await kexec('pair', 'one', ['sh', '-c', 'echo shared > /dev/shm/note'])).code, 0);
    assert.equal((await kexec('pair', 'two', ['cat', '/dev/shm/note'])).stdout, 'shared\n', 'one /dev/shm for the pod');
    assert.deepEqual(
      (await kexec('pair', 'two', ['cat', '/proc/1/cmdline'])).stdout.split('\0').filter(Boolean),
      ['sleep', '999999'],
      "the second container's PID 1 is its own command",
    );
    assert.equal((await kubectl(['delete', 'pod', 'pair', '--wait=false'])).code, 0);
  });

  it('a container over its memory limit is OOMKilled and restarted', async () => {
    const applied = await kubectl(
      ['apply', '-f', '-'],
      podYaml(
        'hog',
        `  - name: hog
    image: ${WEB}
    command: [dd, if=/dev/zero, of=/dev/null, bs=64M]
    resources: {limits: {memory: 24Mi}}
`,
      ),
    );
    assert.equal(applied.code, 0, applied.stderr);
    const hog = await eventually(
      async () => {
        const found = await pod('hog');
        const status = found.status?.containerStatuses?.[0];
        return status && status.restartCount >= 1 && status.lastState?.terminated?.reason === 'OOMKilled' ? status : undefined;
      },
      'hog OOMKilled and restarted',
      60_000,
    );
    assert.equal(hog.lastState!.terminated!.exitCode, 137);
    assert.equal((await kubectl(['delete', 'pod', 'hog', '--wait=false'])).code, 0);
  });

  it('a RuntimeClass of its own with handler runc runs the pod under runc', async () => {
    const created = await kubectl(['apply', '-f', '-'], 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: sandboxed\nhandler: runc\n');
    assert.equal(created.code, 0, created.stderr);
    const applied = await kubectl(['apply', '-f', '-'], podYaml('classy', `  - name: main\n    image: ${WEB}\n`).replace('runtimeClassName: runc', 'runtimeClassName: sandboxed'));
    assert.equal(applied.code, 0, applied.stderr);
    const running = await eventually(async () => (await listPods(server)).find((p) => p.name === 'classy' && p.ready), 'classy running', 60_000);
    assert.deepEqual(running.containerIds, [`runc://${running.uid}_main`]);
    assert.equal((await kexec('classy', 'main', ['hostname'])).stdout.trim(), 'classy');
    assert.equal((await kubectl(['delete', 'pod', 'classy', '--wait=false'])).code, 0);
  });

  it('a bad securityContext or resources is refused at admission with the field', async () => {
    const bad = await kubectl(
      ['apply', '-f', '-'],
      podYaml('bad', `  - name: main\n    image: ${WEB}\n    securityContext:\n      capabilities: {add: [NOT_A_CAP]}\n      runAsUser: -1\n`),
    );
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /spec\.containers\[0\]\.securityContext\.capabilities\.add\[0\]: Unsupported value: "NOT_A_CAP"/);
    assert.match(bad.stderr, /spec\.containers\[0\]\.securityContext\.runAsUser: Invalid value: -1/);
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'bad2' },
        spec: { runtimeClassName: 'runc', containers: [{ name: 'c', image: WEB, securityContext: { privileged: true, allowPrivilegeEscalation: false }, resources: { limits: { memory: 'lots' } } }] },
      },
    });
    assert.equal(res.status, 422, res.text);
    const causes = (res.json as { details: { causes: { field: string }[] } }).details.causes.map((c) => c.field);
    assert.deepEqual(causes.sort(), ['spec.containers[0].resources.limits[memory]', 'spec.containers[0].securityContext.allowPrivilegeEscalation']);
  });

  it('an image the node does not have: the pod says why and where it looked', async () => {
    const applied = await kubectl(['apply', '-f', '-'], podYaml('missing', `  - name: main\n    image: drover.test/absent:1\n    imagePullPolicy: Never\n`));
    assert.equal(applied.code, 0, applied.stderr);
    const waiting = await eventually(
      async () => {
        const state = (await pod('missing')).status?.containerStatuses?.[0]?.state?.waiting;
        return state?.reason === 'ErrImageNeverPull' ? state : undefined;
      },
      'missing image reported',
      30_000,
    );
    assert.match(waiting.message ?? '', /Container image "drover\.test\/absent:1" is not present with pull policy of Never/);
    assert.equal((await kubectl(['delete', 'pod', 'missing', '--wait=false'])).code, 0);
  });
});
