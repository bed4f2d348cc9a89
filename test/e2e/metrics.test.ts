import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { importTestImage, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { parseTable } from '../helpers/kubectl-table.js';
import { roleBinding, serviceAccount } from '../helpers/rbac.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { waitForReadyPods } from '../helpers/workloads.js';

/**
 * metrics.k8s.io/v1beta1 with a real server and its own agent: busy pods under both runtimes (a
 * shell loop as a process, and the same loop in a container under runc from an image the test
 * builds), `kubectl top nodes|pods` with kubectl 1.32 and 1.20, the API's objects, discovery, the
 * verbs it refuses, and RBAC (a ServiceAccount bound to `view` reads its namespace's pod metrics
 * and nothing else).
 */

const SPIN = 'drover.test/spin:1';
const LOOP = ['sh', '-c', 'while :; do :; done'];

interface NodeMetrics {
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  timestamp: string;
  window: string;
  usage: { cpu: string; memory: string };
}

interface PodMetrics {
  kind: string;
  metadata: { name: string; namespace: string; labels?: Record<string, string> };
  window: string;
  containers: { name: string; usage: { cpu: string; memory: string } }[];
}

interface Status {
  code: number;
  message: string;
}

/** `123m` or `2` (cores) as millicores. */
function millicores(text: string): number {
  return text.endsWith('m') ? Number(text.slice(0, -1)) : Number(text) * 1000;
}

function pod(name: string, spec: Record<string, unknown>): object {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { app: 'spin', pod: name } }, spec: { terminationGracePeriodSeconds: 1, ...spec } };
}

describe('metrics.k8s.io and kubectl top', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let nodeName: string;

  before(async () => {
    work = tempDir('metrics');
    server = await startServer({ embeddedAgent: true });
    await importTestImage(server.dataDir, buildTestImage({ name: SPIN, cmd: LOOP }), work);
    const pods = [
      pod('spin-proc', { runtimeClassName: 'process', containers: [{ name: 'loop', image: 'busybox', command: LOOP }] }),
      pod('spin-runc', { runtimeClassName: 'runc', containers: [{ name: 'spin', image: SPIN, imagePullPolicy: 'Never' }] }),
      pod('two-runc', {
        runtimeClassName: 'runc',
        containers: [
          { name: 'busy', image: SPIN, imagePullPolicy: 'Never' },
          { name: 'idle', image: SPIN, imagePullPolicy: 'Never', command: ['sleep', '1000000'] },
        ],
      }),
    ];
    for (const body of pods) {
      const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body });
      assert.equal(res.status, 201, res.text);
    }
    const ready = await waitForReadyPods(server, 'app=spin', 3, 60_000);
    nodeName = ready[0]!.node;
  });

  after(async () => {
    const dataDir = server?.dataDir;
    for (const name of ['spin-proc', 'spin-runc', 'two-runc']) {
      if (server) await request(server, 'DELETE', `/api/v1/namespaces/default/pods/${name}?gracePeriodSeconds=0`).catch(() => undefined);
    }
    await cleanup(work);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  it('discovery lists metrics.k8s.io/v1beta1 with nodes and pods, get and list only', async () => {
    const groups = await request(server, 'GET', '/apis');
    const group = (groups.json as { groups: { name: string; preferredVersion: { groupVersion: string } }[] }).groups.find((g) => g.name === 'metrics.k8s.io');
    assert.equal(group?.preferredVersion.groupVersion, 'metrics.k8s.io/v1beta1', groups.text);
    const list = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1');
    const resources = (list.json as { resources: { name: string; kind: string; namespaced: boolean; verbs: string[] }[] }).resources;
    assert.deepEqual(
      resources.map((r) => [r.name, r.kind, r.namespaced, r.verbs]),
      [
        ['nodes', 'NodeMetrics', false, ['get', 'list']],
        ['pods', 'PodMetrics', true, ['get', 'list']],
      ],
    );
  });

  for (const [index, client] of kubectlClients().entries()) {
    const kubectl = (args: string[]) => runKubectl(client, server.kubeconfig, path.join(work, `cache-${index}`), args);

    it(`${client.name}: top nodes shows the node's CPU and memory with their share of allocatable`, async () => {
      const out = await kubectl(['top', 'nodes']);
      assert.equal(out.code, 0, out.stderr);
      const table = parseTable(out.stdout);
      const row = table.rows.find((r) => r.NAME === nodeName);
      assert.ok(row, out.stdout);
      // Two pods spin: the node is busy.
      assert.ok(millicores(row['CPU(cores)']!) >= 20, out.stdout);
      assert.match(row['MEMORY(bytes)']!, /^[1-9]\d*Mi$/);
      assert.match(row['CPU%'] ?? row['CPU(%)'] ?? '', /^\d+%$/, out.stdout);
    });

    it(`${client.name}: top pods shows the spinning pods of both runtimes busy; --containers each container`, async () => {
      const rows = await eventually(async () => {
        const out = await kubectl(['top', 'pods']);
        if (out.code !== 0) throw new Error(out.stderr);
        const table = parseTable(out.stdout);
        const names = table.rows.map((r) => r.NAME);
        return ['spin-proc', 'spin-runc', 'two-runc'].every((n) => names.includes(n)) ? table.rows : undefined;
      }, 'top pods listing the three pods', 60_000);
      for (const name of ['spin-proc', 'spin-runc', 'two-runc']) {
        const row = rows.find((r) => r.NAME === name)!;
        // A busy loop over a window of a second or more: at least 10m even on a loaded machine.
        assert.ok(millicores(row['CPU(cores)']!) >= 10, `${name}: ${JSON.stringify(row)}`);
        assert.match(row['MEMORY(bytes)']!, /^\d+Mi$/);
      }
      const out = await kubectl(['top', 'pod', 'two-runc', '--containers']);
      assert.equal(out.code, 0, out.stderr);
      const containers = parseTable(out.stdout).rows;
      assert.deepEqual(containers.map((r) => [r.POD, r.NAME]), [
        ['two-runc', 'busy'],
        ['two-runc', 'idle'],
      ]);
      const busy = millicores(containers[0]!['CPU(cores)']!);
      const idle = millicores(containers[1]!['CPU(cores)']!);
      assert.ok(busy >= 10 && idle < busy, JSON.stringify(containers));
    });
  }

  it('the API: NodeMetrics and PodMetrics objects, selectors, and a 404 for what it has no figures of', async () => {
    const node = await request(server, 'GET', `/apis/metrics.k8s.io/v1beta1/nodes/${nodeName}`);
    assert.equal(node.status, 200, node.text);
    const metrics = node.json as NodeMetrics;
    assert.equal(metrics.kind, 'NodeMetrics');
    assert.equal(metrics.metadata.labels?.['kubernetes.io/hostname'], nodeName);
    assert.match(metrics.window, /^\d+(\.\d+)?s$/);
    assert.match(metrics.usage.cpu, /^\d+n$/);
    assert.match(metrics.usage.memory, /^\d+Ki$/);
    assert.ok(!Number.isNaN(Date.parse(metrics.timestamp)));

    const one = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/spin-runc');
    assert.equal(one.status, 200, one.text);
    assert.deepEqual((one.json as PodMetrics).containers.map((c) => c.name), ['spin']);
    const selected = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=pod%3Dspin-proc');
    assert.deepEqual((selected.json as { kind: string; items: PodMetrics[] }).items.map((p) => p.metadata.name), ['spin-proc']);
    assert.equal((selected.json as { kind: string }).kind, 'PodMetricsList');
    const all = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/pods');
    assert.ok((all.json as { items: PodMetrics[] }).items.some((p) => p.metadata.namespace === 'default' && p.metadata.name === 'two-runc'), all.text);

    const missing = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope');
    assert.equal(missing.status, 404, missing.text);
    assert.equal((missing.json as Status).message, 'podmetrics.metrics.k8s.io "default/nope" not found');
    const noNode = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/nodes/nope');
    assert.equal(noNode.status, 404, noNode.text);
    assert.equal((noNode.json as Status).message, 'nodemetrics.metrics.k8s.io "nope" not found');
  });

  it('only get and list: a watch, a create and a delete are 405', async () => {
    const watch = await request(server, 'GET', '/apis/metrics.k8s.io/v1beta1/nodes?watch=true');
    assert.equal(watch.status, 405, watch.text);
    const create = await request(server, 'POST', '/apis/metrics.k8s.io/v1beta1/nodes', {
      body: { apiVersion: 'metrics.k8s.io/v1beta1', kind: 'NodeMetrics', metadata: { name: 'fake' } },
    });
    assert.equal(create.status, 405, create.text);
    const remove = await request(server, 'DELETE', `/apis/metrics.k8s.io/v1beta1/nodes/${nodeName}`);
    assert.equal(remove.status, 405, remove.text);
  });

  it('RBAC: a ServiceAccount bound to view reads pod metrics in its namespace, not elsewhere, and no node metrics', async () => {
    assert.equal((await request(server, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { metadata: { name: 'watcher' } } })).status, 201);
    assert.equal((await request(server, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { metadata: { name: 'stranger' } } })).status, 201);
    const bound = await request(server, 'POST', '/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings', {
      body: roleBinding('default', 'watcher-view', { kind: 'ClusterRole', name: 'view' }, [serviceAccount('watcher', 'default')]),
    });
    assert.equal(bound.status, 201, bound.text);
    const tokenOf = async (sa: string): Promise<string> => {
      const res = await request(server, 'POST', `/api/v1/namespaces/default/serviceaccounts/${sa}/token`, {
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: {} },
      });
      assert.equal(res.status, 201, res.text);
      return (res.json as { status: { token: string } }).status.token;
    };
    const watcher = await tokenOf('watcher');
    const stranger = await tokenOf('stranger');
    const as = (token: string, urlPath: string) => request(server, 'GET', urlPath, { token });
    await eventually(async () => (await as(watcher, '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods')).status === 200, 'the binding to take effect');
    const denied = await as(watcher, '/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods');
    assert.equal(denied.status, 403, denied.text);
    assert.match((denied.json as Status).message, /cannot list resource "pods" in API group "metrics.k8s.io" in the namespace "kube-system"/);
    assert.equal((await as(watcher, '/apis/metrics.k8s.io/v1beta1/nodes')).status, 403);
    assert.equal((await as(stranger, '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods')).status, 403);
  });
});
