import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import YAML from 'yaml';
import { type KubectlClient, type KubectlResult, kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { type ServerProcess, cleanup, eventually, request, startServer, tempDir } from '../helpers/server.js';

/**
 * End-to-end: real kubectl binaries (the machine's 1.32 dispatcher and Debian's 1.20) against a
 * real `drover server` child process, one server per client, a fresh discovery cache per test.
 */

const SERVER_VERSION = 'v1.32.0+drover0.1.0';
const KUBELET_VERSION = 'v1.32.0-test';
const OS_IMAGE = 'Debian GNU/Linux 12 (bookworm)';
const KERNEL = '6.1.0-test';
const RUNTIME = 'containerd://1.7.0';

// ---------------------------------------------------------------------------------------------
// Manifests

function nodeManifest(name: string, tier: string): string {
  return `apiVersion: v1
kind: Node
metadata:
  name: ${name}
  labels:
    node-role.kubernetes.io/control-plane: ""
    kubernetes.io/hostname: ${name}
    tier: ${tier}
spec: {}
status:
  conditions:
  - type: Ready
    status: "True"
    reason: KubeletReady
    message: kubelet is posting ready status
    lastHeartbeatTime: "2026-11-29T00:00:00Z"
    lastTransitionTime: "2026-11-29T00:00:00Z"
  addresses:
  - type: InternalIP
    address: 10.1.2.3
  - type: Hostname
    address: ${name}
  nodeInfo:
    kubeletVersion: ${KUBELET_VERSION}
    kubeProxyVersion: v1.32.0
    osImage: ${OS_IMAGE}
    kernelVersion: ${KERNEL}
    containerRuntimeVersion: ${RUNTIME}
    architecture: amd64
    operatingSystem: linux
    bootID: boot-1
    machineID: machine-1
    systemUUID: uuid-1
  capacity:
    cpu: "4"
    memory: 8Gi
    pods: "110"
  allocatable:
    cpu: "4"
    memory: 8Gi
    pods: "110"
`;
}

// Unbound, and left so by Drover's scheduler (another scheduler's pod): a pod bound to a node is
// deleted gracefully, and no agent runs here to finish that (test/e2e/pod-deletion.test.ts does).
function podManifest(name: string, extraMetadata = '', extraTopLevel = ''): string {
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: default
${extraMetadata}spec:
  schedulerName: manual
  containers:
  - name: main
    image: nginx:1.27
    command: ["sleep", "3600"]
${extraTopLevel}`;
}

const LEASE = `apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: node-a
  namespace: kube-node-lease
spec:
  holderIdentity: node-a-holder
  leaseDurationSeconds: 40
  renewTime: "2026-11-29T00:00:00.000000Z"
`;

/** lastTimestamp 30 minutes ago, so LAST SEEN reads exactly `30m` for the next minute. */
function eventManifest(): string {
  const when = new Date(Date.now() - 30 * 60_000).toISOString().replace(/\.\d+Z$/, 'Z');
  return `apiVersion: v1
kind: Event
metadata:
  name: node-a.ready1
  namespace: default
involvedObject:
  apiVersion: v1
  kind: Node
  name: node-a
reason: NodeReady
message: Node node-a status is now NodeReady
type: Normal
source:
  component: kubelet
count: 1
firstTimestamp: "${when}"
lastTimestamp: "${when}"
`;
}

// Loosely typed views of API objects read back with request().
interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  deletionTimestamp?: string;
}
interface ApiObject {
  kind?: string;
  apiVersion?: string;
  metadata: ObjectMeta;
  spec?: { unschedulable?: boolean; taints?: { key: string; value?: string; effect: string }[] } & Record<string, unknown>;
  status?: Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// Long-running kubectl children (get -w, delete that waits)

interface LiveKubectl {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

const live = new Set<ChildProcess>();

function spawnKubectl(client: KubectlClient, kubeconfig: string, cacheDir: string, args: string[]): LiveKubectl {
  const child = spawn(client.bin, ['--kubeconfig', kubeconfig, '--cache-dir', cacheDir, ...args], {
    env: { ...process.env, KUBECACHEDIR: cacheDir, KUBECONFIG: kubeconfig },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      live.delete(child);
      resolve(code);
    }),
  );
  return { child, stdout: () => out, stderr: () => err, exited };
}

async function killLive(): Promise<void> {
  await Promise.all(
    [...live].map(async (child) => {
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
        process.kill(child.pid, 'SIGKILL');
        await gone;
      }
      live.delete(child);
    }),
  );
}

/** Resolve with the exit code, or with 'timeout' if the process is still running after `ms`. */
function exitWithin(proc: LiveKubectl, ms: number): Promise<number | null | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return Promise.race([proc.exited, timeout]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------------------------------------

for (const client of kubectlClients()) {
  describe(`${client.name} against drover server`, () => {
    let server: ServerProcess;
    let files: string;
    let cacheDir: string;

    const kubectl = (args: string[], options: { input?: string; kubeconfig?: string } = {}): Promise<KubectlResult> =>
      runKubectl(client, options.kubeconfig ?? server.kubeconfig, cacheDir, args, { input: options.input });
    const file = (name: string, content: string): string => {
      const p = path.join(files, name);
      fs.writeFileSync(p, content);
      return p;
    };
    const getObject = async (urlPath: string): Promise<ApiObject> => {
      const res = await request(server, 'GET', urlPath);
      assert.equal(res.status, 200, `GET ${urlPath}: ${res.status} ${res.text}`);
      return res.json as ApiObject;
    };
    const createNodeRaw = async (name: string): Promise<void> => {
      const res = await request(server, 'POST', '/api/v1/nodes', {
        body: {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name, labels: { 'kubernetes.io/hostname': name } },
          status: {
            conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'ready' }],
            nodeInfo: { kubeletVersion: KUBELET_VERSION },
          },
        },
      });
      assert.equal(res.status, 201, `create node ${name}: ${res.status} ${res.text}`);
    };

    before(async () => {
      server = await startServer({ handMadeNodes: true });
      files = tempDir('kubectl-files');
    });
    after(async () => {
      await killLive();
      await server.stop();
      await cleanup(server.dataDir, files);
    });
    beforeEach(() => {
      cacheDir = tempDir('kubectl-cache');
    });
    afterEach(async () => {
      await killLive();
      fs.rmSync(cacheDir, { recursive: true, force: true });
    });

    it('version shows the server version', async () => {
      const result = await kubectl(['version']);
      assertOk(result, 'kubectl version');
      // 1.32: `Server Version: v1.32.0+drover0.1.0`; 1.20: `Server Version: version.Info{... GitVersion:"v1.32.0+drover0.1.0" ...}`
      const line = result.stdout.split('\n').find((l) => l.startsWith('Server Version:'));
      assert.ok(line, `no Server Version line in ${result.stdout}`);
      assert.ok(
        line === `Server Version: ${SERVER_VERSION}` || line.includes(`GitVersion:"${SERVER_VERSION}"`),
        `unexpected server version line: ${line}`,
      );
    });

    it('get nodes on an empty cluster says No resources found', async () => {
      const result = await kubectl(['get', 'nodes']);
      assertOk(result, 'get nodes');
      assert.equal(result.stdout, '');
      assert.match(result.stderr, /^No resources found\s*$/);
    });

    it('get ns shows the built-in namespaces as Active', async () => {
      const result = await kubectl(['get', 'ns']);
      assertOk(result, 'get ns');
      const table = parseTable(result.stdout);
      assert.deepEqual(table.headers, ['NAME', 'STATUS', 'AGE']);
      for (const ns of ['default', 'kube-system', 'kube-node-lease']) {
        const row = rowNamed(table, ns);
        assert.equal(row.STATUS, 'Active');
        assert.match(row.AGE!, /^\d+(s|m\d*s?)$/);
      }
    });

    it('node lifecycle: apply, get, -o wide, -o yaml, describe, label, annotate, cordon, taint, re-apply, delete', async () => {
      const nodeFile = file('node.yaml', nodeManifest('node-a', 'gold'));

      // apply (1.32 validates against the server's OpenAPI v3, 1.20 against the protobuf v2)
      let result = await kubectl(['apply', '-f', nodeFile]);
      assertOk(result, 'apply node.yaml');
      assert.equal(result.stdout.trim(), 'node/node-a created');

      // get nodes
      result = await kubectl(['get', 'nodes']);
      assertOk(result, 'get nodes');
      let table = parseTable(result.stdout);
      assert.deepEqual(table.headers, ['NAME', 'STATUS', 'ROLES', 'AGE', 'VERSION']);
      assert.equal(table.rows.length, 1);
      let row = rowNamed(table, 'node-a');
      assert.equal(row.STATUS, 'Ready');
      assert.equal(row.ROLES, 'control-plane');
      assert.match(row.AGE!, /^\d+s$/);
      assert.equal(row.VERSION, KUBELET_VERSION);

      // get nodes -o wide
      result = await kubectl(['get', 'nodes', '-o', 'wide']);
      assertOk(result, 'get nodes -o wide');
      table = parseTable(result.stdout);
      assert.deepEqual(table.headers, [
        'NAME',
        'STATUS',
        'ROLES',
        'AGE',
        'VERSION',
        'INTERNAL-IP',
        'EXTERNAL-IP',
        'OS-IMAGE',
        'KERNEL-VERSION',
        'CONTAINER-RUNTIME',
      ]);
      row = rowNamed(table, 'node-a');
      assert.equal(row['INTERNAL-IP'], '10.1.2.3');
      assert.equal(row['EXTERNAL-IP'], '<none>');
      assert.equal(row['OS-IMAGE'], OS_IMAGE);
      assert.equal(row['KERNEL-VERSION'], KERNEL);
      assert.equal(row['CONTAINER-RUNTIME'], RUNTIME);

      // get node -o yaml
      result = await kubectl(['get', 'node', 'node-a', '-o', 'yaml']);
      assertOk(result, 'get node -o yaml');
      const node = YAML.parse(result.stdout) as ApiObject;
      assert.equal(node.apiVersion, 'v1');
      assert.equal(node.kind, 'Node');
      assert.equal(node.metadata.name, 'node-a');
      assert.match(node.metadata.uid ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.match(node.metadata.resourceVersion ?? '', /^[1-9]\d*$/);
      assert.match(node.metadata.creationTimestamp ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      assert.ok(Math.abs(Date.parse(node.metadata.creationTimestamp!) - Date.now()) < 120_000, 'creationTimestamp is now');
      assert.equal(node.metadata.labels?.tier, 'gold');
      assert.ok(node.metadata.annotations?.['kubectl.kubernetes.io/last-applied-configuration'], 'last-applied annotation');
      assert.deepEqual((node.status?.nodeInfo as Record<string, string>).kernelVersion, KERNEL);

      // describe node
      result = await kubectl(['describe', 'node', 'node-a']);
      assertOk(result, 'describe node');
      const described = result.stdout;
      assert.match(described, /^Name:\s+node-a$/m);
      assert.match(described, /^Roles:\s+control-plane$/m);
      assert.match(described, /^Labels:\s+kubernetes\.io\/hostname=node-a$/m);
      assert.match(described, /^\s+tier=gold$/m);
      assert.match(described, /^Conditions:$/m);
      assert.match(described, /^\s+Ready\s+True\s+.*KubeletReady\s+kubelet is posting ready status$/m);
      assert.match(described, /^\s+InternalIP:\s+10\.1\.2\.3$/m);
      assert.match(described, /^\s+Kernel Version:\s+6\.1\.0-test$/m);

      // label, then select by label
      result = await kubectl(['label', 'node', 'node-a', 'k=v']);
      assertOk(result, 'label node');
      assert.equal(result.stdout.trim(), 'node/node-a labeled');
      result = await kubectl(['get', 'nodes', '-l', 'k=v']);
      assertOk(result, 'get nodes -l k=v');
      assert.deepEqual(
        parseTable(result.stdout).rows.map((r) => r.NAME),
        ['node-a'],
      );
      result = await kubectl(['get', 'nodes', '-l', 'k=other']);
      assertOk(result, 'get nodes -l k=other');
      assert.equal(result.stdout, '');
      assert.match(result.stderr, /No resources found/);

      // annotate
      result = await kubectl(['annotate', 'node', 'node-a', 'example.com/note=hello']);
      assertOk(result, 'annotate node');
      assert.equal(result.stdout.trim(), 'node/node-a annotated');
      assert.equal((await getObject('/api/v1/nodes/node-a')).metadata.annotations?.['example.com/note'], 'hello');

      // cordon / uncordon
      result = await kubectl(['cordon', 'node-a']);
      assertOk(result, 'cordon');
      assert.equal(result.stdout.trim(), 'node/node-a cordoned');
      assert.equal((await getObject('/api/v1/nodes/node-a')).spec?.unschedulable, true);
      result = await kubectl(['get', 'nodes']);
      assertOk(result, 'get nodes after cordon');
      assert.equal(rowNamed(parseTable(result.stdout), 'node-a').STATUS, 'Ready,SchedulingDisabled');

      result = await kubectl(['uncordon', 'node-a']);
      assertOk(result, 'uncordon');
      assert.equal(result.stdout.trim(), 'node/node-a uncordoned');
      const uncordoned = await getObject('/api/v1/nodes/node-a');
      assert.ok(!('unschedulable' in (uncordoned.spec ?? {})), `unschedulable still set: ${JSON.stringify(uncordoned.spec)}`);
      result = await kubectl(['get', 'nodes']);
      assert.equal(rowNamed(parseTable(result.stdout), 'node-a').STATUS, 'Ready');

      // taint / untaint
      result = await kubectl(['taint', 'node', 'node-a', 'k=v:NoSchedule']);
      assertOk(result, 'taint');
      assert.equal(result.stdout.trim(), 'node/node-a tainted');
      assert.deepEqual((await getObject('/api/v1/nodes/node-a')).spec?.taints, [
        { key: 'k', value: 'v', effect: 'NoSchedule' },
      ]);
      result = await kubectl(['describe', 'node', 'node-a']);
      assert.match(result.stdout, /^Taints:\s+k=v:NoSchedule$/m);
      result = await kubectl(['taint', 'node', 'node-a', 'k:NoSchedule-']);
      assertOk(result, 'untaint');
      assert.equal(result.stdout.trim(), 'node/node-a untainted');
      assert.deepEqual((await getObject('/api/v1/nodes/node-a')).spec?.taints ?? [], []);

      // a second apply of a modified file updates the node; labels set by `kubectl label` survive
      const rvBefore = (await getObject('/api/v1/nodes/node-a')).metadata.resourceVersion;
      result = await kubectl(['apply', '-f', file('node-silver.yaml', nodeManifest('node-a', 'silver'))]);
      assertOk(result, 'second apply');
      assert.equal(result.stdout.trim(), 'node/node-a configured');
      const reapplied = await getObject('/api/v1/nodes/node-a');
      assert.equal(reapplied.metadata.labels?.tier, 'silver');
      assert.equal(reapplied.metadata.labels?.k, 'v');
      assert.equal(reapplied.metadata.annotations?.['example.com/note'], 'hello');
      assert.notEqual(reapplied.metadata.resourceVersion, rvBefore);
      result = await kubectl(['get', 'nodes', '-l', 'tier=silver']);
      assertOk(result, 'get nodes -l tier=silver');
      assert.deepEqual(
        parseTable(result.stdout).rows.map((r) => r.NAME),
        ['node-a'],
      );

      // delete, then get fails with NotFound
      result = await kubectl(['delete', 'node', 'node-a']);
      assertOk(result, 'delete node');
      assert.equal(result.stdout.trim(), 'node "node-a" deleted');
      result = await kubectl(['get', 'node', 'node-a']);
      assert.notEqual(result.code, 0);
      assert.match(result.stderr, /Error from server \(NotFound\): nodes "node-a" not found/);
    });

    it('get leases -A shows NAMESPACE, NAME and HOLDER', async () => {
      const result0 = await kubectl(['apply', '-f', file('lease.yaml', LEASE)]);
      assertOk(result0, 'apply lease.yaml');
      assert.equal(result0.stdout.trim(), 'lease.coordination.k8s.io/node-a created');

      const result = await kubectl(['get', 'leases', '-A']);
      assertOk(result, 'get leases -A');
      const table = parseTable(result.stdout);
      assert.deepEqual(table.headers, ['NAMESPACE', 'NAME', 'HOLDER', 'AGE']);
      const row = rowNamed(table, 'node-a');
      assert.equal(row.NAMESPACE, 'kube-node-lease');
      assert.equal(row.HOLDER, 'node-a-holder');
      assert.match(row.AGE!, /^\d+s$/);
    });

    it('get events -A shows LAST SEEN, TYPE, REASON, OBJECT and MESSAGE', async () => {
      const created = await kubectl(['create', '-f', file('event.yaml', eventManifest())]);
      assertOk(created, 'create event.yaml');
      assert.equal(created.stdout.trim(), 'event/node-a.ready1 created');

      const result = await kubectl(['get', 'events', '-A']);
      assertOk(result, 'get events -A');
      const table = parseTable(result.stdout);
      assert.deepEqual(table.headers, ['NAMESPACE', 'LAST SEEN', 'TYPE', 'REASON', 'OBJECT', 'MESSAGE']);
      assert.equal(table.rows.length, 1);
      assert.deepEqual(table.rows[0], {
        NAMESPACE: 'default',
        'LAST SEEN': '30m',
        TYPE: 'Normal',
        REASON: 'NodeReady',
        OBJECT: 'node/node-a',
        MESSAGE: 'Node node-a status is now NodeReady',
      });
    });

    it('get nodes -w prints a change made by another client', async () => {
      await createNodeRaw('watch-a');
      // -v=6 logs each request, so we can tell when kubectl has moved on from its list to its watch.
      const watcher = spawnKubectl(client, server.kubeconfig, cacheDir, ['get', 'nodes', '-w', '-v=6']);
      await eventually(
        () => /GET \S+\/api\/v1\/nodes\?\S*watch=true\S* 200/.test(watcher.stderr()),
        'kubectl get -w to start its watch',
      );
      const initial = parseTable(watcher.stdout());
      assert.deepEqual(initial.headers, ['NAME', 'STATUS', 'ROLES', 'AGE', 'VERSION']);
      assert.equal(rowNamed(initial, 'watch-a').STATUS, 'Ready');
      assert.ok(!initial.rows.some((r) => r.NAME === 'watch-b'), 'watch-b does not exist yet');

      await createNodeRaw('watch-b');
      await eventually(
        () => watcher.stdout().split('\n').some((l) => /^watch-b\s+Ready\s+<none>\s+\d+s\s+v1\.32\.0-test\s*$/.test(l)),
        'an ADDED row for watch-b',
      );

      const patched = await request(server, 'PATCH', '/api/v1/nodes/watch-a', {
        headers: { 'Content-Type': 'application/merge-patch+json' },
        rawBody: JSON.stringify({ spec: { unschedulable: true } }),
      });
      assert.equal(patched.status, 200, patched.text);
      await eventually(
        () => watcher.stdout().split('\n').some((l) => /^watch-a\s+Ready,SchedulingDisabled\s/.test(l)),
        'a MODIFIED row for watch-a with Ready,SchedulingDisabled',
      );
      assert.equal(watcher.child.exitCode, null, `the watch ended early: ${watcher.stderr().slice(-2000)}`);

      for (const name of ['watch-a', 'watch-b']) {
        const deleted = await request(server, 'DELETE', `/api/v1/nodes/${name}`);
        assert.equal(deleted.status, 200, deleted.text);
      }
    });

    it('get --raw /api/v1/nodes returns a NodeList', async () => {
      await createNodeRaw('raw-node');
      const result = await kubectl(['get', '--raw', '/api/v1/nodes']);
      assertOk(result, 'get --raw');
      const list = JSON.parse(result.stdout) as { kind: string; apiVersion: string; metadata: ObjectMeta; items: ApiObject[] };
      assert.equal(list.kind, 'NodeList');
      assert.equal(list.apiVersion, 'v1');
      assert.match(list.metadata.resourceVersion ?? '', /^[1-9]\d*$/);
      const item = list.items.find((n) => n.metadata.name === 'raw-node');
      assert.ok(item, `raw-node is not in ${result.stdout}`);
      assert.equal(item.metadata.labels?.['kubernetes.io/hostname'], 'raw-node');
      const deleted = await request(server, 'DELETE', '/api/v1/nodes/raw-node');
      assert.equal(deleted.status, 200, deleted.text);
    });

    it('create -f pod.yaml, get pods -o wide, delete pod', async () => {
      let result = await kubectl(['create', '-f', file('pod.yaml', podManifest('web-1'))]);
      assertOk(result, 'create pod.yaml');
      assert.equal(result.stdout.trim(), 'pod/web-1 created');

      result = await kubectl(['get', 'pods', '-o', 'wide']);
      assertOk(result, 'get pods -o wide');
      const table = parseTable(result.stdout);
      assert.deepEqual(table.headers, [
        'NAME',
        'READY',
        'STATUS',
        'RESTARTS',
        'AGE',
        'IP',
        'NODE',
        'NOMINATED NODE',
        'READINESS GATES',
      ]);
      const row = rowNamed(table, 'web-1');
      assert.equal(row.READY, '0/1');
      assert.equal(row.STATUS, 'Pending');
      assert.equal(row.RESTARTS, '0');
      assert.equal(row.IP, '<none>');
      assert.equal(row.NODE, '<none>');

      const started = Date.now();
      result = await kubectl(['delete', 'pod', 'web-1']);
      assertOk(result, 'delete pod');
      assert.equal(result.stdout.trim(), 'pod "web-1" deleted');
      assert.ok(Date.now() - started < 15_000, `delete took ${Date.now() - started} ms`);
      assert.equal((await request(server, 'GET', '/api/v1/namespaces/default/pods/web-1')).status, 404);
    });

    it('delete pod waits on a fieldSelector watch and exits 0 once the pod is gone', async () => {
      const podFile = file('pod-held.yaml', podManifest('web-2', '  finalizers: ["example.com/hold"]\n'));
      const created = await kubectl(['create', '-f', podFile]);
      assertOk(created, 'create pod-held.yaml');

      // -v=6 logs each request, so we can see kubectl reach its watch before releasing the pod.
      const deleter = spawnKubectl(client, server.kubeconfig, cacheDir, ['delete', 'pod', 'web-2', '-v=6']);
      await eventually(
        () => /GET \S+\/api\/v1\/namespaces\/default\/pods\?\S*fieldSelector=metadata\.name%3Dweb-2\S*watch=true\S* 200/.test(deleter.stderr()),
        'kubectl delete to start its fieldSelector watch',
      );
      assert.equal(deleter.child.exitCode, null, 'kubectl delete must wait while the finalizer holds the pod');
      const held = await getObject('/api/v1/namespaces/default/pods/web-2');
      assert.ok(held.metadata.deletionTimestamp, 'the held pod has a deletionTimestamp');

      const released = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/web-2', {
        headers: { 'Content-Type': 'application/merge-patch+json' },
        rawBody: JSON.stringify({ metadata: { finalizers: null } }),
      });
      assert.equal(released.status, 200, released.text);

      const code = await exitWithin(deleter, 10_000);
      assert.equal(code, 0, `kubectl delete: ${code}\nstdout: ${deleter.stdout()}\nstderr: ${deleter.stderr().slice(-2000)}`);
      assert.equal(deleter.stdout().trim(), 'pod "web-2" deleted');
      assert.equal((await request(server, 'GET', '/api/v1/namespaces/default/pods/web-2')).status, 404);
    });

    if (!client.legacy) {
      it('apply validates without --validate=false and rejects an unknown top-level field', async () => {
        // Validation on: kubectl reads /openapi/v3 and sends fieldValidation=Strict.
        const good = await kubectl(['apply', '-f', file('pod-good.yaml', podManifest('web-3')), '-v=6']);
        assertOk(good, 'apply without --validate=false');
        assert.match(good.stdout, /^pod\/web-3 created$/m);
        assert.match(good.stderr, /GET \S+\/openapi\/v3\S* 200/);
        assert.match(good.stderr, /POST \S+\/api\/v1\/namespaces\/default\/pods\?\S*fieldValidation=Strict\S* 201/);

        const bad = await kubectl(['apply', '-f', file('pod-bad.yaml', podManifest('web-4', '', 'bogusTopLevel: 1\n'))]);
        assert.notEqual(bad.code, 0, `apply of an unknown field succeeded: ${bad.stdout}`);
        assert.match(bad.stderr, /strict decoding error: unknown field "bogusTopLevel"/);
        assert.equal((await request(server, 'GET', '/api/v1/namespaces/default/pods/web-4')).status, 404);

        const deleted = await request(server, 'DELETE', '/api/v1/namespaces/default/pods/web-3');
        assert.equal(deleted.status, 200, deleted.text);
      });
    }

    it('a kubeconfig with a different CA fails with a certificate error', async () => {
      const caDir = tempDir('kubectl-ca');
      try {
        execFileSync(
          'openssl',
          ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=x', '-days', '1', '-keyout', 'k', '-out', 'c'],
          { cwd: caDir, stdio: 'ignore' },
        );
        const otherCa = fs.readFileSync(path.join(caDir, 'c')).toString('base64');
        const original = fs.readFileSync(server.kubeconfig, 'utf8');
        const badCa = original.replace(/certificate-authority-data: \S+/, `certificate-authority-data: ${otherCa}`);
        assert.notEqual(badCa, original, 'the kubeconfig has certificate-authority-data to replace');
        const kubeconfig = path.join(caDir, 'kubeconfig.yaml');
        fs.writeFileSync(kubeconfig, badCa);

        const result = await kubectl(['get', 'nodes'], { kubeconfig });
        assert.notEqual(result.code, 0);
        assert.match(result.stderr, /x509: certificate signed by unknown authority/);
      } finally {
        fs.rmSync(caDir, { recursive: true, force: true });
      }
    });

    it('a wrong token is Unauthorized', async () => {
      const original = fs.readFileSync(server.kubeconfig, 'utf8');
      const badToken = original.replace(/token: \S+/, 'token: not-the-admin-token');
      assert.notEqual(badToken, original, 'the kubeconfig has a token to replace');
      const kubeconfig = file('kubeconfig-bad-token.yaml', badToken);

      const result = await kubectl(['get', 'nodes'], { kubeconfig });
      assert.notEqual(result.code, 0);
      assert.match(result.stderr, /You must be logged in to the server|Unauthorized/);
      assert.doesNotMatch(result.stdout, /NAME/);
    });
  });
}
