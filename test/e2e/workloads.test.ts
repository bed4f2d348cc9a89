import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, joinSecret, startAgent, waitForState } from '../helpers/agent.js';
import { type KubectlClient, kubectlClients, runKubectl, MODERN_KUBECTL } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import {
  alive,
  containerPids,
  createObject,
  deployment,
  listEvents,
  listPods,
  readyPods,
  waitForReadyPods,
} from '../helpers/workloads.js';

/**
 * Workloads end to end: a real server, three real agents on 127.0.0.2-4, pods that are real
 * processes, and the real kubectl (the machine's and Debian's 1.20) for apply, get, logs, scale,
 * cordon and drain.
 */

const KUBECTL = MODERN_KUBECTL;

describe('workloads on real agents', { concurrency: false }, () => {
  let server: ServerProcess;
  const agents: AgentProcess[] = [];
  let work: string;
  let cacheDir: string;

  const kubectl = (args: string[], client: KubectlClient = KUBECTL, input?: string) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, input === undefined ? {} : { input });

  before(async () => {
    work = tempDir('workloads');
    cacheDir = path.join(work, 'kube-cache');
    // No test here is about failure detection, and one restarts a killed agent and expects its
    // pods untouched: with the default 4 s grace that would also require the restart to beat the
    // grace period (else the node is Unavailable and its pods evicted), which a loaded machine
    // may not. A long grace takes that hidden race out.
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    for (const [i, name] of ['w1', 'w2', 'w3'].entries()) {
      agents.push(await startAgent({ server, name, args: ['--node-ip', `127.0.0.${i + 2}`] }));
    }
    for (const agent of agents) await waitForState(server, agent.name, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('kubectl apply runs a 3-replica Deployment as processes on 3 nodes; get -o wide, logs and scale work', async () => {
    const manifest = [
      'apiVersion: apps/v1',
      'kind: Deployment',
      'metadata: {name: ticker}',
      'spec:',
      '  replicas: 3',
      '  selector: {matchLabels: {app: ticker}}',
      '  template:',
      '    metadata: {labels: {app: ticker}}',
      '    spec:',
      '      containers:',
      '      - name: main',
      '        image: busybox:1.36',
      '        command: ["sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"]',
    ].join('\n');
    const applied = await kubectl(['apply', '-f', '-'], KUBECTL, manifest);
    assert.equal(applied.code, 0, applied.stderr);
    const pods = await waitForReadyPods(server, 'app=ticker', 3);
    assert.deepEqual(new Set(pods.map((p) => p.node)), new Set(['w1', 'w2', 'w3']), 'one replica per node');
    for (const pod of pods) for (const pid of containerPids(pod)) assert.ok(alive(pid), `process ${pid} of ${pod.name} runs`);

    const wide = await kubectl(['get', 'pods', '-l', 'app=ticker', '-o', 'wide']);
    assert.equal(wide.code, 0, wide.stderr);
    const [header, ...rows] = wide.stdout.trim().split('\n');
    assert.match(header!, /^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\s+IP\s+NODE\s+NOMINATED NODE\s+READINESS GATES$/);
    assert.equal(rows.length, 3);
    for (const row of rows) {
      const cells = row.split(/\s+/);
      assert.equal(cells[1], '1/1', row);
      assert.equal(cells[2], 'Running', row);
      assert.ok(['w1', 'w2', 'w3'].includes(cells[6]!), row);
      assert.match(cells[5]!, /^127\.0\.0\.[234]$/, row);
    }
    const plain = await kubectl(['get', 'pods', '-l', 'app=ticker']);
    assert.match(plain.stdout.split('\n')[0]!, /^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE$/);

    const deploy = await kubectl(['get', 'deployment', 'ticker']);
    assert.match(deploy.stdout, /ticker\s+3\/3\s+3\s+3\s/);
    const rollout = await kubectl(['rollout', 'status', 'deployment/ticker', '--timeout=30s']);
    assert.equal(rollout.code, 0, rollout.stderr);
    assert.match(rollout.stdout, /successfully rolled out/);

    // Logs through the API server, proxied to the pod's agent: plain, --tail, and -f streaming.
    const pod = pods[0]!.name;
    for (const client of kubectlClients()) {
      const logs = await eventually(async () => {
        const r = await kubectl(['logs', pod, '--tail=3'], client);
        return r.code === 0 && r.stdout.trim().split('\n').length === 3 ? r : undefined;
      }, `kubectl logs --tail=3 with ${client.name}`);
      for (const line of logs.stdout.trim().split('\n')) assert.match(line, /^tick \d+$/);
    }
    const withContainer = await kubectl(['logs', pod, '-c', 'main', '--tail=1']);
    assert.match(withContainer.stdout, /^tick \d+\n$/);
    const followed = await new Promise<string[]>((resolve, reject) => {
      const child = spawn(KUBECTL.bin, ['--kubeconfig', server.kubeconfig, '--cache-dir', cacheDir, 'logs', '-f', '--tail=1', pod]);
      let out = '';
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`kubectl logs -f streamed too little: ${JSON.stringify(out)}`));
      }, 15_000);
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const lines = out.split('\n').filter(Boolean);
        // The tail line, then new lines as the process writes them: proof the stream is live.
        if (lines.length >= 4) {
          clearTimeout(timer);
          child.kill('SIGTERM');
          resolve(lines);
        }
      });
    });
    const numbers = followed.map((l) => Number(/^tick (\d+)$/.exec(l)?.[1]));
    assert.ok(numbers.every((n, i) => i === 0 || n === numbers[i - 1]! + 1), `consecutive ticks: ${followed.join(', ')}`);

    // A new image rolls out a new ReplicaSet; rollout undo goes back to the first one, not a third.
    const rsBefore = await kubectl(['get', 'rs', '-l', 'app=ticker', '-o', 'name']);
    assert.equal(rsBefore.stdout.trim().split('\n').length, 1);
    const setImage = await kubectl(['set', 'image', 'deployment/ticker', 'main=busybox:1.37']);
    assert.equal(setImage.code, 0, setImage.stderr);
    assert.equal((await kubectl(['rollout', 'status', 'deployment/ticker', '--timeout=60s'])).code, 0);
    const undo = await kubectl(['rollout', 'undo', 'deployment/ticker']);
    assert.equal(undo.code, 0, undo.stderr);
    assert.equal((await kubectl(['rollout', 'status', 'deployment/ticker', '--timeout=60s'])).code, 0);
    const rsAfter = await kubectl(['get', 'rs', '-l', 'app=ticker', '--no-headers']);
    const rsRows = rsAfter.stdout.trim().split('\n').map((row) => row.split(/\s+/));
    assert.equal(rsRows.length, 2, `two ReplicaSets after the undo:\n${rsAfter.stdout}`);
    const original = rsRows.find((cells) => `replicaset.apps/${cells[0]}` === rsBefore.stdout.trim())!;
    assert.equal(original[1], '3', `the original ReplicaSet is back at 3 replicas:\n${rsAfter.stdout}`);
    await waitForReadyPods(server, 'app=ticker', 3);

    // Scale up and down with kubectl scale.
    const up = await kubectl(['scale', 'deployment/ticker', '--replicas=5']);
    assert.equal(up.code, 0, up.stderr);
    await waitForReadyPods(server, 'app=ticker', 5);
    const down = await kubectl(['scale', 'deployment/ticker', '--replicas=2']);
    assert.equal(down.code, 0, down.stderr);
    const remaining = await eventually(async () => {
      const all = await listPods(server, 'app=ticker');
      return all.length === 2 && all.every((p) => p.ready) ? all : undefined;
    }, 'scaled down to 2 pods');
    assert.equal(remaining.length, 2);
  });

  it('restartPolicy and back-off: a crashing container shows CrashLoopBackOff, restarts, and --previous logs', async () => {
    await createObject(server, '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'crasher', labels: { app: 'crasher' } },
      spec: { containers: [{ name: 'main', command: ['sh', '-c', 'echo "run at $(date +%s%N)"; exit 3'] }] },
    });
    const status = await eventually(async () => {
      const r = await kubectl(['get', 'pod', 'crasher', '--no-headers']);
      const cells = r.stdout.trim().split(/\s+/);
      return (cells[2] === 'CrashLoopBackOff' || cells[2] === 'Error') && Number(cells[3]) >= 1 ? cells : undefined;
    }, 'crasher in CrashLoopBackOff with a restart', 30_000);
    assert.equal(status[1], '0/1');
    const previous = await kubectl(['logs', 'crasher', '--previous']);
    assert.equal(previous.code, 0, previous.stderr);
    assert.match(previous.stdout, /^run at \d+\n$/);
    const json = (await request(server, 'GET', '/api/v1/namespaces/default/pods/crasher')).json as {
      status: { containerStatuses: { lastState: { terminated?: { exitCode: number; reason: string } } }[] };
    };
    assert.equal(json.status.containerStatuses[0]!.lastState.terminated?.exitCode, 3);
    assert.equal(json.status.containerStatuses[0]!.lastState.terminated?.reason, 'Error');
    // The agent tells the story in events, as kubelet does: kubectl describe pod shows them.
    const told = await eventually(async () => {
      const events = (await listEvents(server)).filter((e) => e.object === 'Pod/crasher');
      return events.some((e) => e.reason === 'Started') && events.some((e) => e.reason === 'BackOff') ? events : undefined;
    }, 'Started and BackOff events for crasher');
    assert.ok(told.some((e) => e.reason === 'Scheduled'), 'the scheduler’s event is there too');
    const describe = await kubectl(['describe', 'pod', 'crasher']);
    assert.match(describe.stdout, /Back-off restarting failed container main/);

    // restartPolicy Never: one run, then Succeeded, and the process is not started again.
    await createObject(server, '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'once' },
      spec: { restartPolicy: 'Never', containers: [{ name: 'main', command: ['sh', '-c', 'echo done'] }] },
    });
    await eventually(async () => (await listPods(server)).find((p) => p.name === 'once' && p.phase === 'Succeeded'), 'once Succeeded');
    const completed = await kubectl(['get', 'pod', 'once', '--no-headers']);
    assert.match(completed.stdout, /^once\s+0\/1\s+Completed\s+0\s/);
    for (const name of ['crasher', 'once']) await request(server, 'DELETE', `/api/v1/namespaces/default/pods/${name}`);
  });

  it('an agent crash and restart leaves its pods running: same processes, no restarts', async () => {
    const running = await readyPods(server, 'app=ticker');
    const index = agents.findIndex((a) => running.some((p) => p.node === a.name));
    const victim = agents[index]!;
    const before = running.filter((p) => p.node === victim.name);
    assert.ok(before.length >= 1, 'the victim runs a ticker pod');
    const pidsBefore = before.flatMap(containerPids);
    await victim.stop('SIGKILL');
    for (const pid of pidsBefore) assert.ok(alive(pid), `pod process ${pid} outlives its agent`);
    const restarted = await startAgent({ server, name: victim.name, dataDir: victim.dataDir, args: ['--node-ip', `127.0.0.${index + 2}`] });
    agents[index] = restarted;
    assert.match(restarted.output(), /re-attached to pods still running/);
    // Give the restarted agent time to reconcile and report; nothing may have been restarted.
    await eventually(async () => {
      const pods = (await readyPods(server, 'app=ticker')).filter((p) => p.node === victim.name);
      return pods.length === before.length && pods.every((p) => containerPids(p).every((pid) => pidsBefore.includes(pid)));
    }, 'the same pods reported by the restarted agent', 60_000);
    const after = (await listPods(server, 'app=ticker')).filter((p) => p.node === victim.name);
    assert.deepEqual(after.map((p) => p.uid).sort(), before.map((p) => p.uid).sort(), 'same pod objects');
    assert.deepEqual(after.flatMap(containerPids).sort(), [...pidsBefore].sort(), 'same processes');
    assert.ok(after.every((p) => p.restarts === 0), 'nothing restarted');
    for (const pid of pidsBefore) assert.ok(alive(pid));
  });

  it('a node credential may write status, delete and evict only pods bound to its own node (403 otherwise)', async () => {
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: 'pod-authz', nodeId: randomUUID(), password: 'pod-authz-password-0123456789' },
    });
    assert.equal(registration.status, 200, registration.text);
    const asNode = { token: (registration.json as { token: string }).token };
    const foreign = (await readyPods(server, 'app=ticker'))[0]!;
    const base = `/api/v1/namespaces/default/pods/${foreign.name}`;
    const status = await request(server, 'PATCH', `${base}/status`, {
      ...asNode,
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { status: { phase: 'Failed' } },
    });
    assert.equal(status.status, 403, status.text);
    assert.match((status.json as { message: string }).message, /bound to its own node "pod-authz" \(this pod is bound to "w\d"\)/);
    const evict = await request(server, 'POST', `${base}/eviction`, {
      ...asNode,
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: foreign.name, namespace: 'default' } },
    });
    assert.equal(evict.status, 403, evict.text);
    const del = await request(server, 'DELETE', base, { ...asNode, body: { gracePeriodSeconds: 0 } });
    assert.equal(del.status, 403, del.text);
    const still = await listPods(server, 'app=ticker');
    assert.ok(still.some((p) => p.uid === foreign.uid && !p.terminating && p.phase === 'Running'), 'the pod is untouched');
    const create = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      ...asNode,
      body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'sneaky' }, spec: { nodeName: 'pod-authz', containers: [{ name: 'c', command: ['true'] }] } },
    });
    assert.equal(create.status, 403, create.text);
    await request(server, 'DELETE', '/api/v1/nodes/pod-authz');
  });

  it('kubectl cordon and kubectl drain move pods off a node through the eviction API', async () => {
    const scale = await kubectl(['scale', 'deployment/ticker', '--replicas=3']);
    assert.equal(scale.code, 0, scale.stderr);
    const pods = await waitForReadyPods(server, 'app=ticker', 3);
    const target = pods[0]!.node;
    const cordon = await kubectl(['cordon', target]);
    assert.equal(cordon.code, 0, cordon.stderr);
    const drain = await kubectl(['drain', target, '--ignore-daemonsets', '--timeout=60s']);
    assert.equal(drain.code, 0, `${drain.stdout}\n${drain.stderr}`);
    assert.match(drain.stdout, /evicted/);
    const moved = await waitForReadyPods(server, 'app=ticker', 3);
    assert.ok(moved.every((p) => p.node !== target), `no pod left on ${target}: ${moved.map((p) => p.node).join(',')}`);
    const node = await kubectl(['get', 'node', target, '--no-headers']);
    assert.match(node.stdout, /SchedulingDisabled/);
    const uncordon = await kubectl(['uncordon', target]);
    assert.equal(uncordon.code, 0, uncordon.stderr);
    // Pod processes of the drained node are gone, and its pod dirs with them.
    const agent = agents.find((a) => a.name === target)!;
    await eventually(() => fs.readdirSync(path.join(agent.dataDir, 'agent', 'pods')).length === 0, 'pod dirs removed on the drained node');
  });
});

describe('a one-node cluster', () => {
  let server: ServerProcess | undefined;

  after(async () => {
    await cleanup();
  });

  it('stops promptly on SIGTERM with pods running: no other node to wait for, nothing left running', async () => {
    // "Promptly" means without waiting out the drain, which would take the shutdown grace period.
    // With a grace period of 2 min, a stop that waited would take ~2 min, so a ceiling of 30 s
    // tells the two apart on any machine; the real figure is well under a second.
    const SHUTDOWN_GRACE_S = 120;
    const CEILING_MS = 30_000;
    server = await startServer({ embeddedAgent: true, args: ['--shutdown-grace-period', `${SHUTDOWN_GRACE_S}s`] });
    await waitForState(server, (await eventually(async () => {
      const res = await request(server!, 'GET', '/api/v1/nodes');
      return (res.json as { items: { metadata: { name: string } }[] }).items[0]?.metadata.name;
    }, 'the server’s own node')), 'Ready');
    await createObject(server, '/apis/apps/v1/namespaces/default/deployments', deployment('solo-web', 1, ['sh', '-c', 'while :; do sleep 1; done']));
    const [pod] = await waitForReadyPods(server, 'app=solo-web', 1);
    const pids = containerPids(pod!);
    const started = Date.now();
    const code = await server.stop('SIGTERM', CEILING_MS + 10_000);
    const ms = Date.now() - started;
    assert.equal(code, 0, `exit code ${code} after ${ms} ms`);
    assert.ok(ms < CEILING_MS, `shutdown took ${ms} ms: it waited for the drain (grace ${SHUTDOWN_GRACE_S} s)`);
    for (const pid of pids) assert.ok(!alive(pid), `the pod process ${pid} stopped with the node`);
  });
});
