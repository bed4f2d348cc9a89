import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { always, cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods, type PodView } from '../helpers/workloads.js';

/**
 * DaemonSets end to end: a real server, real agents on 127.0.0.2-4 whose pods are processes, and
 * the real kubectl (the machine's and Debian's 1.20). One pod per Ready node while agents join
 * and one is SIGKILLed; the killed node's pod stays with it (no copy elsewhere) and goes when the
 * Node does; a rolling restart; the printers and `kubectl rollout status`.
 */

const DS = [
  'apiVersion: apps/v1',
  'kind: DaemonSet',
  'metadata: {name: node-agent}',
  'spec:',
  '  selector: {matchLabels: {app: node-agent}}',
  '  template:',
  '    metadata: {labels: {app: node-agent}}',
  '    spec:',
  '      terminationGracePeriodSeconds: 2',
  '      containers:',
  '      - name: main',
  '        image: busybox:1.36',
  '        command: ["sh", "-c", "while :; do sleep 1; done"]',
].join('\n');

describe('DaemonSets on real agents', { concurrency: false }, () => {
  let server: ServerProcess;
  const agents = new Map<string, AgentProcess>();
  let work: string;
  let cacheDir: string;

  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, input?: string) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, input === undefined ? {} : { input });
  const daemonPods = async (): Promise<PodView[]> => (await listPods(server, 'app=node-agent')).filter((p) => !p.terminating);
  const join = async (name: string, ip: string): Promise<void> => {
    agents.set(name, await startAgent({ server, name, args: ['--node-ip', ip] }));
    await waitForState(server, name, 'Ready', 60_000);
  };
  /** Waits until the live daemon pods are exactly one Ready pod on each of `nodes`. */
  const onePodOn = (nodes: string[], what: string): Promise<PodView[]> =>
    eventually(
      async () => {
        const pods = await daemonPods();
        const placed = pods.map((p) => p.node).sort();
        return JSON.stringify(placed) === JSON.stringify([...nodes].sort()) && pods.every((p) => p.ready) ? pods : undefined;
      },
      what,
      90_000,
    );
  const status = async (): Promise<Record<string, number>> => {
    const res = await request(server, 'GET', '/apis/apps/v1/namespaces/default/daemonsets/node-agent');
    assert.equal(res.status, 200, res.text);
    return (res.json as { status?: Record<string, number> }).status ?? {};
  };

  before(async () => {
    work = tempDir('daemonsets');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer();
    await join('w1', '127.0.0.2');
    await join('w2', '127.0.0.3');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('runs one pod per node, bound to it with the daemon tolerations; get, describe and rollout status with both kubectls', async () => {
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, DS), 'kubectl apply');
    const pods = await onePodOn(['w1', 'w2'], 'a ready daemon pod on w1 and w2');
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${pods[0]!.name}`);
    const pod = res.json as { spec: { tolerations: { key: string; effect: string }[]; affinity: unknown }; metadata: { labels: Record<string, string> } };
    assert.ok(pod.spec.tolerations.some((t) => t.key === 'node.kubernetes.io/unreachable' && t.effect === 'NoExecute'));
    assert.deepEqual(pod.spec.affinity, {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [pods[0]!.node] }] }],
        },
      },
    });
    assert.ok(pod.metadata.labels['controller-revision-hash']);

    await eventually(async () => ((await status()).numberAvailable === 2 ? true : undefined), 'status numberAvailable 2');
    for (const client of kubectlClients()) {
      const rollout = await kubectl(['rollout', 'status', 'daemonset/node-agent', '--timeout=60s'], client);
      assertOk(rollout, `rollout status with ${client.name}`);
      assert.match(rollout.stdout, /daemon set "node-agent" successfully rolled out/);
      const get = await kubectl(['get', 'ds', '-o', 'wide'], client);
      assertOk(get, `get ds with ${client.name}`);
      const table = parseTable(get.stdout);
      assert.deepEqual(table.headers, ['NAME', 'DESIRED', 'CURRENT', 'READY', 'UP-TO-DATE', 'AVAILABLE', 'NODE SELECTOR', 'AGE', 'CONTAINERS', 'IMAGES', 'SELECTOR']);
      const row = rowNamed(table, 'node-agent');
      assert.deepEqual(
        [row.DESIRED, row.CURRENT, row.READY, row['UP-TO-DATE'], row.AVAILABLE, row['NODE SELECTOR'], row.CONTAINERS, row.SELECTOR],
        ['2', '2', '2', '2', '2', '<none>', 'main', 'app=node-agent'],
      );
      const describe = await kubectl(['describe', 'daemonset', 'node-agent'], client);
      assertOk(describe, `describe with ${client.name}`);
      assert.match(describe.stdout, /Desired Number of Nodes Scheduled: 2/);
      assert.match(describe.stdout, /Pods Status:\s+2 Running/);
    }
  });

  it('follows a node joining, keeps the pod of a SIGKILLed node there (no copy elsewhere), and removes it with its Node', async () => {
    await join('w3', '127.0.0.4');
    await onePodOn(['w1', 'w2', 'w3'], 'a daemon pod on the new node w3 too');

    const killed = agents.get('w2')!;
    const before = (await daemonPods()).find((p) => p.node === 'w2')!;
    killed.process.kill('SIGKILL');
    await killed.exited;
    await waitForState(server, 'w2', 'Unavailable', 60_000);
    // The node's pod tolerates the unreachable taint: it is neither evicted nor copied elsewhere.
    await eventually(async () => ((await status()).desiredNumberScheduled === 2 ? true : undefined), 'desired 2 once w2 is Unavailable');
    await always(
      async () => {
        const during = await daemonPods();
        const nodes = during.map((p) => p.node).sort();
        return JSON.stringify(nodes) === '["w1","w2","w3"]' && during.find((p) => p.node === 'w2')?.uid === before.uid;
      },
      'the lost node keeps its own pod and no other node gets a second one',
      5000,
      200,
    );
    const s = await status();
    assert.equal(s.numberMisscheduled, 1, JSON.stringify(s));

    assertOk(await kubectl(['delete', 'node', 'w2']), 'kubectl delete node w2');
    await onePodOn(['w1', 'w3'], 'the pod of the deleted node gone, one on each remaining node');
    await eventually(async () => {
      const all = await listPods(server, 'app=node-agent');
      return all.some((p) => p.node === 'w2') ? undefined : true;
    }, 'no pod object left on w2');
    const after = await status();
    assert.equal(after.desiredNumberScheduled, 2);
    assert.equal(after.numberMisscheduled, 0);
  });

  it('rollout restart replaces every pod within maxUnavailable 1 and rollout status waits for it', async () => {
    const old = new Set((await daemonPods()).map((p) => p.uid));
    assertOk(await kubectl(['rollout', 'restart', 'daemonset/node-agent']), 'rollout restart');
    // Never more than one node without an available daemon pod while it rolls.
    let worst = 0;
    await eventually(
      async () => {
        const pods = await daemonPods();
        const readyNodes = new Set(pods.filter((p) => p.ready).map((p) => p.node));
        worst = Math.max(worst, 2 - readyNodes.size);
        return pods.length === 2 && pods.every((p) => p.ready && !old.has(p.uid)) ? true : undefined;
      },
      'every daemon pod replaced',
      90_000,
      200,
    );
    assert.ok(worst <= 1, `at most one node lacked a ready daemon pod (saw ${worst})`);
    assertOk(await kubectl(['rollout', 'status', 'daemonset/node-agent', '--timeout=60s']), 'rollout status after restart');
  });

  it('rollout history lists a ControllerRevision per template and rollout undo goes back to the previous one', async () => {
    for (const client of kubectlClients()) {
      const history = await kubectl(['rollout', 'history', 'daemonset/node-agent'], client);
      assertOk(history, `rollout history with ${client.name}`);
      assert.match(history.stdout, /REVISION\s+CHANGE-CAUSE\n1\s+<none>\n2\s+<none>/, history.stdout);
    }
    const second = await kubectl(['rollout', 'history', 'daemonset/node-agent', '--revision=2']);
    assertOk(second, 'rollout history --revision=2');
    assert.match(second.stdout, /kubectl\.kubernetes\.io\/restartedAt/);
    const revisions = await kubectl(['get', 'controllerrevisions', '-l', 'app=node-agent']);
    assertOk(revisions, 'get controllerrevisions');
    const table = parseTable(revisions.stdout);
    assert.deepEqual(table.headers, ['NAME', 'CONTROLLER', 'REVISION', 'AGE']);
    assert.deepEqual(table.rows.map((r) => r.CONTROLLER), ['daemonset.apps/node-agent', 'daemonset.apps/node-agent']);

    const before = new Set((await daemonPods()).map((p) => p.uid));
    const undo = await kubectl(['rollout', 'undo', 'daemonset/node-agent']);
    assertOk(undo, 'rollout undo');
    assert.match(undo.stdout, /rolled back/);
    await eventually(
      async () => {
        const pods = await daemonPods();
        return pods.length === 2 && pods.every((p) => p.ready && !before.has(p.uid)) ? true : undefined;
      },
      'every daemon pod back on the first template',
      90_000,
      200,
    );
    const res = await request(server, 'GET', '/apis/apps/v1/namespaces/default/daemonsets/node-agent');
    const annotations = (res.json as { spec: { template: { metadata: { annotations?: Record<string, string> } } } }).spec.template.metadata.annotations ?? {};
    assert.equal(annotations['kubectl.kubernetes.io/restartedAt'], undefined, 'the restart annotation is gone with the undo');
    await eventually(async () => {
      const h = await kubectl(['rollout', 'history', 'daemonset/node-agent']);
      return /REVISION\s+CHANGE-CAUSE\n2\s+<none>\n3\s+<none>/.test(h.stdout) ? true : undefined;
    }, 'the first template renumbered as revision 3');
  });

  it('a planned agent stop does not evict its daemon pod nor wait for it; the node keeps exactly one', async () => {
    const agent = agents.get('w3')!;
    const exit = await agent.stop('SIGTERM');
    assert.equal(exit.code, 0, agent.output());
    assert.match(agent.output(), /planned shutdown: recorded and cordoned/);
    // Evicting it would make the DaemonSet bind a new copy to this node, which the draining agent
    // never starts: the drain would wait for that until its deadline.
    assert.doesNotMatch(agent.output(), /evicted the pods on this node|drain incomplete at the deadline/);
    // As on Kubernetes, the daemon pod stopped with the node stays bound to it (or its replacement
    // waits there for the node to come back): one per node, none elsewhere.
    await always(
      async () => {
        const live = await daemonPods();
        return live.filter((p) => p.node === 'w3').length === 1 && live.filter((p) => p.node === 'w1').length === 1 && live.length === 2;
      },
      'one daemon pod for w3 and one for w1',
      3000,
      200,
    );
  });
});
