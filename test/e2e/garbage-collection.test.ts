import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import type { HttpClient } from '../../src/client/http.js';
import { DEPLOYMENTS, PODS, REPLICASETS, type WatchEventType } from '../../src/client/types.js';
import { type FakeKubelet, type HandMadeCluster, isRunningAndReady, startHandMadeCluster } from '../helpers/fake-kubelet.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { eventually, request, type ServerProcess, tempDir } from '../helpers/server.js';

/**
 * Deletion propagation end to end, as kubectl asks for it (`--cascade=orphan|foreground|background`,
 * kubectl 1.32 and Debian's 1.20 alike) against a real server whose garbage collector and
 * workload controllers run on its leader, with hand-made nodes and a fake kubelet that can hold a
 * pod in Terminating (so a foreground deletion can be watched while it waits).
 */

const NODE_NAMES = ['n1', 'n2'];
const NS = 'default';

function deployment(name: string, replicas: number): KubeObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] } },
    },
  };
}

function ownerUids(obj: KubeObject): string[] {
  return (obj.metadata.ownerReferences ?? []).map((r) => r.uid);
}

describe('deletion propagation: orphan, foreground, background (server process, hand-made nodes, a fake kubelet)', { concurrency: false }, () => {
  let server: ServerProcess;
  let client: HttpClient;
  let kubelet: FakeKubelet;
  let cluster: HandMadeCluster | undefined;
  let work: string;

  const replicaSetsOf = async (app: string): Promise<KubeObject[]> =>
    (await client.list(REPLICASETS, NS, { labelSelector: `app=${app}` })).items;
  const podsOf = async (app: string): Promise<KubeObject[]> => (await client.list(PODS, NS, { labelSelector: `app=${app}` })).items;

  /** A Deployment with its one ReplicaSet and `replicas` pods Running and Ready. */
  const running = async (name: string, replicas: number): Promise<{ d: KubeObject; rs: KubeObject; pods: KubeObject[] }> => {
    const d = await client.create(DEPLOYMENTS, NS, deployment(name, replicas));
    return eventually(async () => {
      const [rs, ...more] = await replicaSetsOf(name);
      const pods = await podsOf(name);
      return (
        rs && more.length === 0 && pods.length === replicas && pods.every((p) => isRunningAndReady(p) && !p.metadata.deletionTimestamp) && { d, rs, pods }
      );
    }, `${name}: ${replicas} pods running`, 30_000);
  };

  before(async () => {
    cluster = await startHandMadeCluster({ nodeNames: NODE_NAMES, namespace: NS, logName: 'garbage-collection' });
    ({ server, client, kubelet } = cluster);
    work = tempDir('garbage-collection');
  });

  after(async () => {
    await cluster?.stop(work ?? '');
  });

  for (const [index, kubectlClient] of kubectlClients().entries()) {
    const kubectl = (args: string[]) => runKubectl(kubectlClient, server.kubeconfig, path.join(work, `cache-${index}`), args, { timeoutMs: 120_000 });

    it(`${kubectlClient.name}: delete deployment --cascade=orphan leaves its ReplicaSet and pods running, unowned; a new Deployment adopts them`, async () => {
      const name = `orphan-${index}`;
      const { d, rs, pods } = await running(name, 2);
      const result = await kubectl(['delete', 'deployment', name, '--cascade=orphan']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout.trim(), `deployment.apps "${name}" deleted`);
      await eventually(async () => !(await client.get(DEPLOYMENTS, NS, name)), `${name} gone`);

      // The same ReplicaSet and pods, with no reference left to the deleted Deployment: nothing
      // will collect them (the collector only deletes objects whose owners are all gone).
      const [rsAfter, ...moreRs] = await replicaSetsOf(name);
      assert.equal(moreRs.length, 0);
      assert.equal(rsAfter?.metadata.uid, rs.metadata.uid);
      assert.ok(!rsAfter!.metadata.deletionTimestamp);
      assert.deepEqual(ownerUids(rsAfter!), []);
      const podsAfter = await podsOf(name);
      assert.deepEqual(podsAfter.map((p) => p.metadata.uid).sort(), pods.map((p) => p.metadata.uid).sort());
      for (const pod of podsAfter) {
        assert.ok(!pod.metadata.deletionTimestamp && isRunningAndReady(pod), `${pod.metadata.name} still running`);
        assert.deepEqual(ownerUids(pod), [rs.metadata.uid], `${pod.metadata.name} still owned by its ReplicaSet`);
      }
      assert.ok(!kubelet.log.some((e) => pods.some((p) => e === `terminating:${p.metadata.name}`)), 'no pod was ever asked to stop');

      // As in Kubernetes, a Deployment whose selector matches adopts the ReplicaSet (the same
      // template: it is the new one), and its pods stay.
      const again = await client.create(DEPLOYMENTS, NS, deployment(name, 2));
      assert.notEqual(again.metadata.uid, d.metadata.uid);
      const adopted = await eventually(async () => {
        const list = await replicaSetsOf(name);
        return list.length === 1 && ownerUids(list[0]!).includes(again.metadata.uid!) && list[0]!;
      }, `${name}'s ReplicaSet adopted`);
      assert.equal(adopted.metadata.uid, rs.metadata.uid);
      const owner = adopted.metadata.ownerReferences![0]!;
      assert.deepEqual(owner, { apiVersion: 'apps/v1', kind: 'Deployment', name, uid: again.metadata.uid, controller: true, blockOwnerDeletion: true });
      await eventually(async () => {
        const status = (await client.get(DEPLOYMENTS, NS, name))?.status as { readyReplicas?: number } | undefined;
        return status?.readyReplicas === 2;
      }, `${name} reports its adopted pods ready`);
      assert.deepEqual((await podsOf(name)).map((p) => p.metadata.uid).sort(), pods.map((p) => p.metadata.uid).sort());

      // And a plain (background) delete takes everything with it.
      const background = await kubectl(['delete', 'deployment', name]);
      assert.equal(background.code, 0, background.stderr);
      await eventually(async () => (await replicaSetsOf(name)).length === 0 && (await podsOf(name)).length === 0, `${name}'s ReplicaSet and pods collected`);
    });

    it(`${kubectlClient.name}: delete deployment --cascade=foreground: pods, then the ReplicaSet, then the Deployment`, async () => {
      const name = `fg-${index}`;
      const { d, rs, pods } = await running(name, 2);
      const heldName = pods[0]!.metadata.name!;
      kubelet.held.add(heldName);
      // Deletions in revision order: the datastore's one sequence orders them exactly.
      const gone: { what: string; rv: number }[] = [];
      const rv0 = (await client.list(DEPLOYMENTS, NS)).resourceVersion;
      const watches = [DEPLOYMENTS, REPLICASETS, PODS].map((ref) =>
        client.watch(ref, NS, rv0, {}, {
          onEvent: (type: WatchEventType, obj: KubeObject) => {
            if (type === 'DELETED' && obj.metadata.name!.startsWith(name)) gone.push({ what: `${obj.kind}/${obj.metadata.name}`, rv: Number(obj.metadata.resourceVersion) });
          },
          onClose: () => undefined,
        }),
      );
      try {
        let finished = false;
        const deleting = kubectl(['delete', 'deployment', name, '--cascade=foreground']).finally(() => (finished = true));

        // While the held pod terminates, the Deployment and its ReplicaSet wait, marked for
        // deletion with the foregroundDeletion finalizer, and kubectl (which waits for the
        // Deployment to go) has not returned.
        const waiting = await eventually(async () => {
          const dNow = await client.get(DEPLOYMENTS, NS, name);
          const rsNow = await client.get(REPLICASETS, NS, rs.metadata.name!);
          const podsNow = await podsOf(name);
          const done =
            Boolean(dNow?.metadata.deletionTimestamp && rsNow?.metadata.deletionTimestamp) &&
            podsNow.length === 1 &&
            podsNow[0]!.metadata.name === heldName &&
            Boolean(podsNow[0]!.metadata.deletionTimestamp);
          return done && { dNow: dNow!, rsNow: rsNow! };
        }, 'the other pod gone, the held one terminating, the owners waiting', 30_000);
        assert.deepEqual(waiting.dNow.metadata.finalizers, ['foregroundDeletion']);
        assert.equal(waiting.dNow.metadata.uid, d.metadata.uid);
        assert.deepEqual(waiting.rsNow.metadata.finalizers, ['foregroundDeletion']);
        assert.equal(finished, false, 'kubectl waits while the Deployment is there');
        const viaKubectl = await kubectl(['get', 'deployment', name, '-o', 'jsonpath={.metadata.deletionTimestamp} {.metadata.finalizers}']);
        assert.equal(viaKubectl.code, 0, viaKubectl.stderr);
        assert.match(viaKubectl.stdout, /^\d{4}-\d\d-\d\dT\S+Z \["foregroundDeletion"\]$/);

        kubelet.release(heldName);
        const result = await deleting;
        assert.equal(result.code, 0, result.stderr);
        assert.equal(result.stdout.trim(), `deployment.apps "${name}" deleted`);
        assert.equal(await client.get(DEPLOYMENTS, NS, name), undefined);
        assert.equal(await client.get(REPLICASETS, NS, rs.metadata.name!), undefined);
        assert.deepEqual(await podsOf(name), []);
        await eventually(() => gone.length === 4, 'four DELETED events');
        const order = gone.sort((a, b) => a.rv - b.rv).map((g) => g.what);
        assert.deepEqual(order.slice(2), [`ReplicaSet/${rs.metadata.name}`, `Deployment/${name}`], JSON.stringify(gone));
        assert.deepEqual(order.slice(0, 2).sort(), pods.map((p) => `Pod/${p.metadata.name}`).sort());
      } finally {
        kubelet.held.delete(heldName);
        for (const w of watches) w.stop();
      }
    });
  }

  it('kubectl delete rs --cascade=orphan leaves its pods, unowned; delete pod --cascade=foreground still removes the pod', async () => {
    const [kubectlClient] = kubectlClients();
    const kubectl = (args: string[]) => runKubectl(kubectlClient!, server.kubeconfig, path.join(work, 'cache-rs'), args, { timeoutMs: 120_000 });
    const { rs, pods } = await running('lone', 2);
    // Take the ReplicaSet from its Deployment first (orphan the Deployment), then orphan the pods.
    assert.equal((await kubectl(['delete', 'deployment', 'lone', '--cascade=orphan'])).code, 0);
    const result = await kubectl(['delete', 'rs', rs.metadata.name!, '--cascade=orphan']);
    assert.equal(result.code, 0, result.stderr);
    await eventually(async () => !(await client.get(REPLICASETS, NS, rs.metadata.name!)), 'the ReplicaSet gone');
    const left = await podsOf('lone');
    assert.deepEqual(left.map((p) => p.metadata.uid).sort(), pods.map((p) => p.metadata.uid).sort());
    for (const pod of left) {
      assert.ok(!pod.metadata.deletionTimestamp, `${pod.metadata.name} not deleted`);
      assert.equal(pod.metadata.ownerReferences, undefined, `${pod.metadata.name} has no owner left`);
    }

    // A pod (nothing depends on it) deleted in the foreground: the finalizer comes off, it goes.
    const name = left[0]!.metadata.name!;
    const deleted = await kubectl(['delete', 'pod', name, '--cascade=foreground']);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(await client.get(PODS, NS, name), undefined);
  });

  it('a StatefulSet deleted in the foreground waits for its pods; one deleted with Orphan leaves them running', async () => {
    const statefulSet = (name: string): KubeObject => ({
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      metadata: { name },
      spec: {
        replicas: 1,
        serviceName: name,
        selector: { matchLabels: { app: name } },
        template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] } },
      },
    });
    const sts = '/apis/apps/v1/namespaces/default/statefulsets';
    for (const name of ['sts-fg', 'sts-orphan']) {
      assert.equal((await request(server, 'POST', sts, { body: statefulSet(name) })).status, 201);
    }
    const ready = (name: string): Promise<KubeObject> =>
      eventually(async () => {
        const [pod] = await podsOf(name);
        return pod && isRunningAndReady(pod) && pod;
      }, `${name}-0 running`, 30_000);
    const fgPod = await ready('sts-fg');
    const orphanPod = await ready('sts-orphan');

    kubelet.held.add(fgPod.metadata.name!);
    try {
      const marked = await request(server, 'DELETE', `${sts}/sts-fg`, { body: { propagationPolicy: 'Foreground' } });
      assert.equal(marked.status, 200, marked.text);
      assert.deepEqual((marked.json as KubeObject).metadata.finalizers, ['foregroundDeletion']);
      await eventually(async () => (await podsOf('sts-fg'))[0]?.metadata.deletionTimestamp, 'sts-fg-0 terminating');
      const waiting = await request(server, 'GET', `${sts}/sts-fg`);
      assert.equal(waiting.status, 200, 'the StatefulSet waits for its terminating pod');
    } finally {
      kubelet.release(fgPod.metadata.name!);
    }
    await eventually(async () => (await request(server, 'GET', `${sts}/sts-fg`)).status === 404 && (await podsOf('sts-fg')).length === 0, 'sts-fg and its pod gone');

    const orphaned = await request(server, 'DELETE', `${sts}/sts-orphan`, { body: { propagationPolicy: 'Orphan' } });
    assert.equal(orphaned.status, 200, orphaned.text);
    await eventually(async () => (await request(server, 'GET', `${sts}/sts-orphan`)).status === 404, 'sts-orphan gone');
    const [left] = await podsOf('sts-orphan');
    assert.equal(left?.metadata.uid, orphanPod.metadata.uid);
    assert.ok(!left!.metadata.deletionTimestamp && isRunningAndReady(left!));
    assert.equal(left!.metadata.ownerReferences, undefined);
  });

  it('the deprecated orphanDependents: true orphans, as propagationPolicy Orphan does', async () => {
    const { rs } = await running('legacy', 1);
    const res = await request(server, 'DELETE', `/apis/apps/v1/namespaces/${NS}/deployments/legacy`, { body: { orphanDependents: true } });
    assert.equal(res.status, 200, res.text);
    // Marked, waiting for the collector: the answer is the object with the orphan finalizer.
    const answered = res.json as KubeObject;
    assert.equal(answered.kind, 'Deployment');
    assert.deepEqual(answered.metadata.finalizers, ['orphan']);
    assert.ok(answered.metadata.deletionTimestamp);
    await eventually(async () => !(await client.get(DEPLOYMENTS, NS, 'legacy')), 'legacy gone');
    const kept = await client.get(REPLICASETS, NS, rs.metadata.name!);
    assert.equal(kept?.metadata.uid, rs.metadata.uid);
    assert.deepEqual(ownerUids(kept!), []);
  });
});

// The suite needs the built server; say so plainly rather than time out.
if (!fs.existsSync(new URL('../../dist/cli/main.js', import.meta.url))) {
  throw new Error('dist/cli/main.js is missing: run npx tsc -p tsconfig.json first');
}
