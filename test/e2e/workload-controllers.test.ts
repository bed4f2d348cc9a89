import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import type { HttpClient } from '../../src/client/http.js';
import { DEPLOYMENTS, EVENTS, NODES, PODS, REPLICASETS, STATEFULSETS } from '../../src/client/types.js';
import { type FakeKubelet, type HandMadeCluster, startHandMadeCluster } from '../helpers/fake-kubelet.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { eventually, type ServerProcess, tempDir } from '../helpers/server.js';

/**
 * The scheduler and the workload controllers end to end, in a real `drover server` process (they
 * run on its controller leader) with hand-made Nodes and no agents. The test plays the agents: a
 * fake kubelet marks pods bound to its nodes Running and Ready and finishes their graceful
 * deletions, except for pods it is told to hold in Terminating.
 */

const NODE_NAMES = ['n1', 'n2', 'n3'];
const NS = 'default';

interface PodView {
  name: string;
  uid: string;
  node?: string;
  phase?: string;
  ready: boolean;
  terminating: boolean;
  labels: Record<string, string>;
  owner?: string;
}

function view(pod: KubeObject): PodView {
  const spec = (pod.spec ?? {}) as { nodeName?: string };
  const status = (pod.status ?? {}) as { phase?: string; conditions?: { type: string; status: string }[] };
  const owner = (pod.metadata.ownerReferences ?? []).find((r) => r.controller);
  return {
    name: pod.metadata.name!,
    uid: pod.metadata.uid!,
    ...(spec.nodeName ? { node: spec.nodeName } : {}),
    ...(status.phase ? { phase: status.phase } : {}),
    ready: (status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    terminating: Boolean(pod.metadata.deletionTimestamp),
    labels: pod.metadata.labels ?? {},
    ...(owner ? { owner: `${owner.kind}/${owner.name}` } : {}),
  };
}

function template(app: string, command: string[]): KubeObject['spec'] {
  return {
    metadata: { labels: { app } },
    spec: { containers: [{ name: 'main', image: 'busybox', command }] },
  };
}

describe('workload controllers (server process, hand-made nodes, a fake kubelet)', () => {
  let server: ServerProcess;
  let client: HttpClient;
  let kubelet: FakeKubelet;
  let cluster: HandMadeCluster | undefined;
  let cacheDir: string;

  const pods = async (filter: (p: PodView) => boolean = () => true): Promise<PodView[]> =>
    (await client.list(PODS, NS)).items.map(view).filter(filter);
  const activePodsOf = async (prefix: string): Promise<PodView[]> =>
    pods((p) => p.name.startsWith(prefix) && !p.terminating);
  const events = async (reason: string, name: string): Promise<string[]> =>
    (await client.list(EVENTS, NS)).items
      .filter((e) => e.reason === reason && (e.involvedObject as { name?: string }).name === name)
      .map((e) => String(e.message));
  const deploymentStatus = async (name: string): Promise<{ generation: number; status: Record<string, unknown> }> => {
    const d = (await client.get(DEPLOYMENTS, NS, name))!;
    return { generation: d.metadata.generation ?? 0, status: (d.status ?? {}) as Record<string, unknown> };
  };
  const rolledOut = async (name: string, replicas: number): Promise<boolean> => {
    const { generation, status } = await deploymentStatus(name);
    return (
      status.observedGeneration === generation &&
      status.updatedReplicas === replicas &&
      status.replicas === replicas &&
      status.availableReplicas === replicas
    );
  };

  before(async () => {
    cluster = await startHandMadeCluster({ nodeNames: NODE_NAMES, namespace: NS, logName: 'workload-controllers' });
    ({ server, client, kubelet } = cluster);
    cacheDir = tempDir('workloads-kubectl');
  });

  after(async () => {
    await cluster?.stop(cacheDir ?? '');
  });

  it('a Deployment of 3 spreads its pods over 3 nodes, scales to 5 and to 1', async () => {
    const started = Date.now();
    await client.create(DEPLOYMENTS, NS, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web' },
      spec: { replicas: 3, selector: { matchLabels: { app: 'web' } }, template: template('web', ['sleep', '3600']) },
    });
    const three = await eventually(async () => {
      const list = await activePodsOf('web-');
      return list.length === 3 && list.every((p) => p.ready) && list;
    }, '3 ready web pods');
    assert.deepEqual(three.map((p) => p.node).sort(), NODE_NAMES, 'one replica on each node');
    assert.ok(three.every((p) => p.owner?.startsWith('ReplicaSet/web-') && p.labels['pod-template-hash']), JSON.stringify(three));
    assert.ok(three.every((p) => /^web-[bcdfghjklmnpqrstvwxz2456789]+-[a-z0-9]{5}$/.test(p.name)), three.map((p) => p.name).join(' '));
    await eventually(() => rolledOut('web', 3), 'deployment web rolled out');
    const scheduled = await events('Scheduled', three[0]!.name);
    assert.deepEqual(scheduled, [`Successfully assigned ${NS}/${three[0]!.name} to ${three[0]!.node}`]);
    const rsName = three[0]!.owner!.slice('ReplicaSet/'.length);
    assert.deepEqual((await events('ScalingReplicaSet', 'web')).sort(), [`Scaled up replica set ${rsName} to 3`]);
    assert.equal((await events('SuccessfulCreate', rsName)).length, 3);
    console.log(`# 3 replicas ready and rolled out in ${Date.now() - started} ms`);

    await client.patch(DEPLOYMENTS, NS, 'web', 'merge', { spec: { replicas: 5 } });
    const five = await eventually(async () => {
      const list = await activePodsOf('web-');
      return list.length === 5 && list.every((p) => p.ready) && list;
    }, '5 ready web pods');
    const perNode = NODE_NAMES.map((n) => five.filter((p) => p.node === n).length).sort();
    assert.deepEqual(perNode, [1, 2, 2], 'five replicas spread 2/2/1');
    await eventually(() => rolledOut('web', 5), 'deployment web at 5');

    await client.patch(DEPLOYMENTS, NS, 'web', 'merge', { spec: { replicas: 1 } });
    await eventually(async () => (await pods((p) => p.name.startsWith('web-'))).length === 1, 'web down to 1 pod (the others gone)');
    await eventually(() => rolledOut('web', 1), 'deployment web at 1');
    const rs = (await client.get(REPLICASETS, NS, rsName))!;
    assert.equal((rs.status as { replicas: number }).replicas, 1);
    assert.match((await events('ScalingReplicaSet', 'web')).join('\n'), new RegExp(`Scaled down replica set ${rsName} to 1 from 5`));
    assert.equal((await events('SuccessfulDelete', rsName)).length, 4);
  });

  it('a template change rolls out to a new ReplicaSet and kubectl rollout status completes', async () => {
    await client.patch(DEPLOYMENTS, NS, 'web', 'merge', { spec: { replicas: 3 } });
    await eventually(() => rolledOut('web', 3), 'web back at 3');
    const before = await activePodsOf('web-');
    const oldHash = before[0]!.labels['pod-template-hash'];
    await client.patch(DEPLOYMENTS, NS, 'web', 'merge', {
      spec: { template: { spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '7200'] }] } } },
    });
    for (const kubectl of kubectlClients()) {
      const result = await runKubectl(kubectl, server.kubeconfig, cacheDir, ['rollout', 'status', 'deployment/web', '--timeout=60s']);
      assert.equal(result.code, 0, `${kubectl.name}: ${result.stdout}${result.stderr}`);
      assert.match(result.stdout, /deployment "web" successfully rolled out/, kubectl.name);
    }
    const { generation, status } = await deploymentStatus('web');
    assert.equal(status.observedGeneration, generation);
    assert.equal(status.updatedReplicas, 3);
    const after = await activePodsOf('web-');
    assert.equal(after.length, 3);
    const newHash = after[0]!.labels['pod-template-hash'];
    assert.notEqual(newHash, oldHash);
    assert.ok(after.every((p) => p.labels['pod-template-hash'] === newHash && p.ready));
    const rss = (await client.list(REPLICASETS, NS)).items.filter((r) => r.metadata.name!.startsWith('web-'));
    const byHash = new Map(rss.map((r) => [r.metadata.labels?.['pod-template-hash'], r]));
    assert.equal((byHash.get(oldHash)!.spec as { replicas: number }).replicas, 0, 'old replica set kept at 0');
    assert.equal(byHash.get(newHash)!.metadata.annotations?.['deployment.kubernetes.io/revision'], '2');
    const conditions = (status.conditions as { type: string; reason: string }[]).map((c) => `${c.type}:${c.reason}`).sort();
    assert.deepEqual(conditions, ['Available:MinimumReplicasAvailable', 'Progressing:NewReplicaSetAvailable']);
  });

  it('a ReplicaSet replaces a terminating pod at once, before the old one is gone', async () => {
    const [victim] = await activePodsOf('web-');
    kubelet.held.add(victim!.name);
    await client.delete(PODS, NS, victim!.name);
    const replaced = await eventually(async () => {
      const active = await activePodsOf('web-');
      return active.length === 3 && active.every((p) => p.name !== victim!.name) && active;
    }, 'a replacement for the terminating web pod');
    const old = (await pods((p) => p.name === victim!.name))[0];
    assert.ok(old?.terminating, 'the old pod is still terminating while its replacement exists');
    assert.ok(replaced.some((p) => p.node));
    kubelet.release(victim!.name);
    await eventually(async () => (await pods((p) => p.name === victim!.name)).length === 0, 'old pod gone');
  });

  it('a StatefulSet creates -0, -1, -2 in order and recreates a deleted pod only after the old one is gone', async () => {
    await client.create(STATEFULSETS, NS, {
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      metadata: { name: 'db' },
      spec: { replicas: 3, serviceName: 'db', selector: { matchLabels: { app: 'db' } }, template: template('db', ['sleep', '3600']) },
    });
    await eventually(async () => {
      const list = await activePodsOf('db-');
      return list.length === 3 && list.every((p) => p.ready) && list;
    }, '3 ready db pods');
    // The kubelet logs 'ready:' from its watch, which may trail the API read above by a moment.
    const order = await eventually(async () => {
      const seen = kubelet.log.filter((e) => /^(added|ready):db-\d$/.test(e));
      return seen.length >= 6 && seen;
    }, 'the kubelet saw the three pods added and ready');
    assert.deepEqual(order, ['added:db-0', 'ready:db-0', 'added:db-1', 'ready:db-1', 'added:db-2', 'ready:db-2']);
    const db1 = (await pods((p) => p.name === 'db-1'))[0]!;
    assert.equal(db1.labels['statefulset.kubernetes.io/pod-name'], 'db-1');
    assert.match(db1.labels['controller-revision-hash'] ?? '', /^db-[bcdfghjklmnpqrstvwxz2456789]+$/);
    assert.equal(db1.owner, 'StatefulSet/db');
    for (const kubectl of kubectlClients()) {
      const result = await runKubectl(kubectl, server.kubeconfig, cacheDir, ['rollout', 'status', 'statefulset/db', '--timeout=60s']);
      assert.equal(result.code, 0, `${kubectl.name}: ${result.stdout}${result.stderr}`);
      // The server defaults rollingUpdate.partition to 0, and kubectl then words success this way (as on Kubernetes).
      assert.match(result.stdout, /partitioned roll out complete: 3 new pods have been updated|statefulset rolling update complete 3 pods at revision db-/, kubectl.name);
    }

    kubelet.held.add('db-1');
    await client.delete(PODS, NS, 'db-1');
    // Held in Terminating: nobody may force it away or put a second db-1 beside it.
    const holdUntil = Date.now() + 1500;
    while (Date.now() < holdUntil) {
      const copies = await pods((p) => p.name === 'db-1');
      assert.equal(copies.length, 1);
      assert.equal(copies[0]!.uid, db1.uid, 'the old db-1 must stay until its node finishes it');
      assert.ok(copies[0]!.terminating);
      await new Promise((r) => setTimeout(r, 100));
    }
    const logFrom = kubelet.log.length;
    kubelet.release('db-1');
    const fresh = await eventually(async () => {
      const copy = (await pods((p) => p.name === 'db-1' && p.uid !== db1.uid))[0];
      return copy?.ready && copy;
    }, 'db-1 recreated and ready');
    assert.equal(fresh.labels['statefulset.kubernetes.io/pod-name'], 'db-1');
    const after = kubelet.log.slice(logFrom).filter((e) => e.endsWith(':db-1'));
    assert.deepEqual(after.slice(0, 2), ['gone:db-1', 'added:db-1']);
  });

  it('a StatefulSet scales down from the highest ordinal, one pod at a time', async () => {
    await client.patch(STATEFULSETS, NS, 'db', 'merge', { spec: { replicas: 5 } });
    await eventually(async () => (await activePodsOf('db-')).filter((p) => p.ready).length === 5, '5 ready db pods');
    const from = kubelet.log.length;
    await client.patch(STATEFULSETS, NS, 'db', 'merge', { spec: { replicas: 2 } });
    await eventually(async () => (await pods((p) => p.name.startsWith('db-'))).length === 2, 'db down to 2 pods');
    // The fake kubelet logs a pod gone when its watch delivers the deletion, which may come after the list above.
    await eventually(async () => kubelet.log.slice(from).includes('gone:db-2'), 'the fake kubelet saw db-2 go');
    const steps = kubelet.log.slice(from).filter((e) => /^(terminating|gone):db-/.test(e));
    assert.deepEqual(steps, ['terminating:db-4', 'gone:db-4', 'terminating:db-3', 'gone:db-3', 'terminating:db-2', 'gone:db-2']);
    await eventually(async () => {
      const sts = (await client.get(STATEFULSETS, NS, 'db'))!;
      const status = sts.status as { replicas?: number; readyReplicas?: number };
      return status.replicas === 2 && status.readyReplicas === 2;
    }, 'db status at 2');
  });

  it('Recreate removes every old pod before the first new one is created', async () => {
    await client.create(DEPLOYMENTS, NS, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'batch' },
      spec: {
        replicas: 2,
        strategy: { type: 'Recreate' },
        selector: { matchLabels: { app: 'batch' } },
        template: template('batch', ['sleep', '3600']),
      },
    });
    await eventually(() => rolledOut('batch', 2), 'batch rolled out');
    const old = await activePodsOf('batch-');
    const from = kubelet.log.length;
    await client.patch(DEPLOYMENTS, NS, 'batch', 'merge', {
      spec: { template: { spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '60'] }] } } },
    });
    await eventually(async () => {
      const active = await activePodsOf('batch-');
      return (await rolledOut('batch', 2)) && active.length === 2 && active.every((p) => !old.some((o) => o.uid === p.uid));
    }, 'batch recreated');
    const log = kubelet.log.slice(from).filter((e) => /:batch-/.test(e));
    const lastGone = Math.max(...old.map((p) => log.indexOf(`gone:${p.name}`)));
    const firstAdded = log.findIndex((e) => e.startsWith('added:'));
    assert.ok(lastGone >= 0 && firstAdded > lastGone, `old pods must be gone before new ones are added: ${log.join(' ')}`);
    await client.delete(DEPLOYMENTS, NS, 'batch');
  });

  it('cordoned and tainted nodes are avoided; FailedScheduling when nothing fits, then scheduled when a node changes', async () => {
    await client.patch(NODES, undefined, 'n1', 'merge', { spec: { unschedulable: true } });
    await client.patch(NODES, undefined, 'n2', 'merge', { spec: { taints: [{ key: 'dedicated', value: 'infra', effect: 'NoSchedule' }] } });
    await client.create(DEPLOYMENTS, NS, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'pinned' },
      spec: { replicas: 2, selector: { matchLabels: { app: 'pinned' } }, template: template('pinned', ['sleep', '3600']) },
    });
    const placed = await eventually(async () => {
      const list = await activePodsOf('pinned-');
      return list.length === 2 && list.every((p) => p.ready) && list;
    }, '2 pinned pods ready');
    assert.deepEqual(placed.map((p) => p.node), ['n3', 'n3']);

    await client.create(PODS, NS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'picky' },
      spec: { nodeSelector: { disk: 'ssd' }, containers: [{ name: 'main', command: ['sleep', '3600'] }] },
    });
    const failed = await eventually(async () => (await events('FailedScheduling', 'picky'))[0], 'FailedScheduling for picky');
    assert.equal(
      failed,
      "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: infra}, 1 node(s) were unschedulable.",
    );
    assert.equal((await pods((p) => p.name === 'picky'))[0]!.node, undefined);
    await client.patch(NODES, undefined, 'n2', 'merge', { metadata: { labels: { disk: 'ssd' } }, spec: { taints: null } });
    const bound = await eventually(async () => (await pods((p) => p.name === 'picky'))[0]?.node, 'picky scheduled after n2 changed');
    assert.equal(bound, 'n2');
    assert.deepEqual(await events('Scheduled', 'picky'), [`Successfully assigned ${NS}/picky to n2`]);
    await client.patch(NODES, undefined, 'n1', 'merge', { spec: { unschedulable: null } });
  });

  it('deleting a Deployment removes its ReplicaSets and their pods', async () => {
    const rsBefore = (await client.list(REPLICASETS, NS)).items.filter((r) => r.metadata.name!.startsWith('web-'));
    assert.equal(rsBefore.length, 2);
    await client.delete(DEPLOYMENTS, NS, 'web');
    await eventually(
      async () => (await client.list(REPLICASETS, NS)).items.every((r) => !r.metadata.name!.startsWith('web-')),
      'web replica sets deleted',
    );
    await eventually(async () => (await pods((p) => p.name.startsWith('web-'))).length === 0, 'web pods deleted');
    // Others' pods are untouched.
    assert.equal((await activePodsOf('pinned-')).length, 2);
    assert.equal((await activePodsOf('db-')).length, 2);
  });
});

// The suite needs the built server; say so plainly rather than time out.
if (!fs.existsSync(new URL('../../dist/cli/main.js', import.meta.url))) {
  throw new Error('dist/cli/main.js is missing: run npx tsc -p tsconfig.json first');
}
