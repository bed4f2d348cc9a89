import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent } from '../helpers/agent.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Runtime handlers, node resources and the scheduler with real agents: one agent has runc (this
 * machine's, and it runs as root) and holds back `system-reserved`; the other is started with
 * DROVER_HIDE_RUNC=1, the documented way to have a node report no runc (its pods' runtime is not
 * changed, only what it offers the scheduler). Pods are placed only where their class's handler is and their requests fit; a pod that
 * fits nowhere stays Pending with FailedScheduling and PodScheduled=False in kube-scheduler's words.
 */

interface NodeObject {
  status: {
    capacity: Record<string, string>;
    allocatable: Record<string, string>;
    runtimeHandlers?: { name: string; features?: Record<string, boolean> }[];
  };
}

interface PodObject {
  spec: { nodeName?: string };
  status: { phase?: string; conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}

const RUNC_NODE = 'rt-runc';
const PLAIN_NODE = 'rt-plain';

function pod(name: string, spec: Record<string, unknown>, resources: Record<string, unknown> = {}): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: {
      terminationGracePeriodSeconds: 1,
      // No image pull, whichever runtime runs it: the test only looks at where it goes.
      containers: [{ name: 'c', image: 'drover.test/none:1', imagePullPolicy: 'Never', command: ['sleep', '3600'], resources }],
      ...spec,
    },
  };
}

describe('scheduling by runtime handler and resources, with real agents', { concurrency: false }, () => {
  let server: ServerProcess;
  let agents: AgentProcess[] = [];
  let work: string;

  const getPod = async (name: string): Promise<PodObject> => (await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`)).json as PodObject;
  const create = async (body: object): Promise<void> => {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', { body });
    assert.equal(res.status, 201, res.text);
  };
  const remove = async (name: string): Promise<void> => {
    await request(server, 'DELETE', `/api/v1/namespaces/default/pods/${name}?gracePeriodSeconds=0`);
  };
  const boundTo = (name: string): Promise<string> => eventually(async () => (await getPod(name)).spec.nodeName, `${name} bound`, 90_000);
  const unschedulable = (name: string): Promise<string> =>
    eventually(async () => {
      const condition = (await getPod(name)).status.conditions?.find((c) => c.type === 'PodScheduled');
      return condition?.status === 'False' && condition.reason === 'Unschedulable' ? condition.message : undefined;
    }, `${name} PodScheduled=False`, 90_000);
  const failedScheduling = (name: string, message: string): Promise<unknown> =>
    eventually(async () => {
      const res = await request(server, 'GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D${name},reason%3DFailedScheduling`);
      return (res.json as { items: { message: string; type: string }[] }).items.find((e) => e.message === message && e.type === 'Warning');
    }, `a FailedScheduling event for ${name} saying ${message}`, 90_000);

  before(async () => {
    work = tempDir('scheduling-runtime');
    // A long grace: a renewal late on a loaded machine must not make a node Unknown (and so "not
    // ready" to the scheduler) while a test counts on both nodes being there.
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    agents = await Promise.all([
      startAgent({ server, name: RUNC_NODE, args: ['--system-reserved', 'cpu=500m,memory=256Mi'] }),
      startAgent({ server, name: PLAIN_NODE, env: { ...process.env, DROVER_HIDE_RUNC: '1' } }),
    ]);
    // The scheduler places pods only on nodes the lifecycle controller has called Ready: a pod
    // created before that goes to whichever node was first (seen in CI: the process pod on the
    // runc node while the plain one was still being registered).
    await eventually(async () => {
      const { items } = (await request(server, 'GET', '/api/v1/nodes')).json as { items: { metadata: { labels?: Record<string, string> } }[] };
      return items.length === 2 && items.every((n) => n.metadata.labels?.['drover.io/state'] === 'Ready');
    }, 'both nodes Ready', 90_000);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('nodes report their runtime handlers, and capacity and allocatable from the host less system-reserved', async () => {
    const nodeOf = async (name: string): Promise<NodeObject> => (await request(server, 'GET', `/api/v1/nodes/${name}`)).json as NodeObject;
    const withRunc = await nodeOf(RUNC_NODE);
    const plain = await nodeOf(PLAIN_NODE);
    assert.deepEqual(withRunc.status.runtimeHandlers?.map((h) => h.name), ['runc', 'process']);
    assert.deepEqual(withRunc.status.runtimeHandlers?.[0]?.features, { recursiveReadOnlyMounts: false, userNamespaces: false });
    assert.deepEqual(plain.status.runtimeHandlers?.map((h) => h.name), ['process']);
    assert.match(agents[1]!.output(), /no runc runtime on this node: it runs process pods only/);

    const cpus = os.cpus().length;
    const memoryKi = Math.floor(os.totalmem() / 1024);
    assert.equal(plain.status.capacity.cpu, String(cpus));
    assert.equal(plain.status.capacity.memory, `${memoryKi}Ki`);
    assert.equal(plain.status.capacity.pods, '110');
    const stats = fs.statfsSync(os.tmpdir());
    assert.equal(plain.status.capacity['ephemeral-storage'], `${Math.floor((stats.blocks * stats.bsize) / 1024)}Ki`);
    assert.deepEqual(plain.status.allocatable, plain.status.capacity);
    assert.equal(withRunc.status.allocatable.cpu, `${cpus * 1000 - 500}m`);
    assert.equal(withRunc.status.allocatable.memory, `${memoryKi - 256 * 1024}Ki`);
  });

  it('a runc pod goes only to the node with runc; a process pod may go anywhere', async () => {
    for (let i = 0; i < 3; i++) await create(pod(`runc-${i}`, { runtimeClassName: 'runc' }));
    for (let i = 0; i < 3; i++) assert.equal(await boundTo(`runc-${i}`), RUNC_NODE);
    await create(pod('proc', { runtimeClassName: 'process' }));
    // The runc node already has three pods: the process pod spreads to the other.
    const where = await boundTo('proc');
    if (where !== PLAIN_NODE) {
      // Say what the scheduler saw: the nodes' states and conditions, and what the server logged about them.
      const nodes = (await request(server, 'GET', '/api/v1/nodes')).json as { items: { metadata: { name: string; labels?: Record<string, string> }; status: { conditions?: unknown[] } }[] };
      const seen = nodes.items.map((n) => ({ name: n.metadata.name, labels: n.metadata.labels, conditions: n.status.conditions }));
      const logged = server.output().split('\n').filter((line) => line.includes(PLAIN_NODE)).slice(-20);
      assert.fail(`proc went to ${where}, not ${PLAIN_NODE}; nodes: ${JSON.stringify(seen)}\nserver log on ${PLAIN_NODE}:\n${logged.join('\n')}`);
    }
    for (const name of ['runc-0', 'runc-1', 'runc-2', 'proc']) await remove(name);
  });

  it('a pod that fits nowhere stays Pending with FailedScheduling and PodScheduled=False saying why per reason', async () => {
    await create(pod('picky', { runtimeClassName: 'runc', nodeSelector: { 'kubernetes.io/hostname': PLAIN_NODE } }));
    const message = "0/2 nodes are available: 1 node(s) didn't have the runtime handler runc, 1 node(s) didn't match Pod's node affinity/selector.";
    assert.equal(await unschedulable('picky'), message);
    await failedScheduling('picky', message);
    assert.equal((await getPod('picky')).status.phase, 'Pending');
    assert.equal((await getPod('picky')).spec.nodeName, undefined);

    const huge = `${Math.ceil(os.totalmem() / 2 ** 30) + 1}Gi`;
    await create(pod('hungry', {}, { requests: { memory: huge } }));
    assert.equal(await unschedulable('hungry'), '0/2 nodes are available: 2 Insufficient memory.');

    // kubectl shows it as kube-scheduler's users know it.
    const [client] = kubectlClients();
    const described = await runKubectl(client!, server.kubeconfig, path.join(work, 'cache'), ['describe', 'pod', 'hungry']);
    assert.equal(described.code, 0, described.stderr);
    assert.match(described.stdout, /FailedScheduling .*0\/2 nodes are available: 2 Insufficient memory\./);
    await remove('picky');
    await remove('hungry');
  });

  it('requests are charged against allocatable; a pod waiting for room is placed when a pod leaves', async () => {
    const cpus = os.cpus().length;
    // Most of the plain node's CPU: fits there only (the runc node has 500m less).
    const big = `${cpus * 1000 - 400}m`;
    await create(pod('big-1', { runtimeClassName: 'process' }, { requests: { cpu: big } }));
    assert.equal(await boundTo('big-1'), PLAIN_NODE);
    await create(pod('big-2', { runtimeClassName: 'process' }, { requests: { cpu: big } }));
    assert.equal(await unschedulable('big-2'), '0/2 nodes are available: 2 Insufficient cpu.');
    await remove('big-1');
    assert.equal(await boundTo('big-2'), PLAIN_NODE);
    await remove('big-2');
  });

  it('a class whose handler no node has says so for every node', async () => {
    const res = await request(server, 'POST', '/apis/node.k8s.io/v1/runtimeclasses', {
      body: { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'gvisor' }, handler: 'runsc' },
    });
    assert.equal(res.status, 201, res.text);
    await create(pod('sandboxed', { runtimeClassName: 'gvisor' }));
    assert.equal(await unschedulable('sandboxed'), "0/2 nodes are available: 2 node(s) didn't have the runtime handler runsc.");
    await remove('sandboxed');
  });
});
