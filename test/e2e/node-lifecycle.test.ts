import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import {
  type AgentProcess,
  type ApiTarget,
  cleanupAgents,
  freePort,
  getNode,
  joinSecret,
  NodeSampler,
  type NodeObject,
  nodeState,
  readyCondition,
  runDrover,
  spawnAgent,
  startAgent,
  waitForNode,
  waitForState,
  watchNodes,
} from '../helpers/agent.js';
import { runKubectl, MODERN_KUBECTL } from '../helpers/kubectl.js';
import { delayingProxy } from '../helpers/proxy.js';
import { cleanup, eventually, request, serverArgs, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Node lifecycle end to end: real `drover server` and `drover agent` processes, signals sent by
 * PID, and node states read back through the API and kubectl. Timings are the defaults (lease
 * renewal every 1 s, grace 4 s). Where the claim is "never" or "throughout", a sampler lists the
 * nodes every 200 ms for the whole scenario and every sample is checked.
 *
 * How fast a verdict comes (Unavailable after a kill, Down after a planned stop, Ready after
 * SIGCONT) is a figure: bench/detection.ts measures it (docs/benchmarks.md, docs/node-lifecycle.md).
 * Here it is only held to a generous ceiling, so a loaded machine cannot fail the test; what the
 * tests prove is which verdict comes, in which order, and that none comes that must not.
 */

const RENEW_MS = 1000;
const GRACE_MS = 4000;
/** Ceiling on kill/freeze → Unavailable (measured: grace minus up to one renewal, ~3-4.2 s). */
const DETECTION_CEILING_MS = 5 * GRACE_MS;
/** Ceiling on agent exit → Down, and on SIGCONT → Ready (measured: well under a second). */
const VERDICT_CEILING_MS = 15_000;
const RELEASED_ANNOTATION = 'drover.io/released';
const UNREACHABLE = 'node.kubernetes.io/unreachable';
const SHUTDOWN_ANNOTATION = 'drover.io/shutdown';
const NODE_ID_ANNOTATION = 'drover.io/node-id';
const KUBECTL = MODERN_KUBECTL;

function unreachableTaints(node: NodeObject): string[] {
  return (node.spec?.taints ?? [])
    .filter((t) => t.key === UNREACHABLE)
    .map((t) => t.effect)
    .sort();
}

interface EventObject {
  type: string;
  reason: string;
  message: string;
  involvedObject: { kind: string; name: string };
  eventTime?: string;
  lastTimestamp?: string;
}

async function events(server: ApiTarget): Promise<EventObject[]> {
  const res = await request(server, 'GET', '/api/v1/events');
  assert.equal(res.status, 200, res.text);
  return (res.json as { items: EventObject[] }).items;
}

/**
 * Events are durable: they catch a verdict the 200 ms sampler might have missed. Only events
 * recorded at or after `since` count (so one scenario's failure does not fail the next).
 */
async function assertNoEvent(server: ApiTarget, node: string, reason: string, since = 0): Promise<void> {
  const found = (await events(server)).filter(
    (e) =>
      e.reason === reason &&
      e.involvedObject.kind === 'Node' &&
      e.involvedObject.name === node &&
      Date.parse(e.eventTime ?? e.lastTimestamp ?? '') >= since,
  );
  assert.deepEqual(
    found.map((e) => e.message),
    [],
    `no ${reason} event may exist for ${node}`,
  );
}

async function leaseAnnotations(server: ApiTarget, name: string): Promise<Record<string, string>> {
  const res = await request(server, 'GET', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`);
  assert.equal(res.status, 200, res.text);
  return (res.json as { metadata: { annotations?: Record<string, string> } }).metadata.annotations ?? {};
}

async function leaseRenewTime(server: ApiTarget, name: string): Promise<number | undefined> {
  const res = await request(server, 'GET', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`);
  if (res.status !== 200) return undefined;
  const renewTime = (res.json as { spec?: { renewTime?: string } }).spec?.renewTime;
  return renewTime ? Date.parse(renewTime) : undefined;
}

/** Wait (by polling the sampler, not by sleeping) until it has a successful round after `time`. */
function sampledUntil(sampler: NodeSampler, time: number, timeoutMs = 30_000): Promise<true> {
  return eventually(() => (sampler.rounds.at(-1) ?? 0) >= time || undefined, `samples up to ${new Date(time).toISOString()}`, timeoutMs, 50);
}

function assertStayed(sampler: NodeSampler, node: string, state: string, from: number, to: number): void {
  const rounds = sampler.roundsIn(from, to);
  assert.ok(rounds >= 3, `expected several samples of ${node} in the window, got ${rounds}`);
  const bad = sampler.violations(node, state, from, to);
  assert.deepEqual(
    bad.map((v) => `${v.state}@+${v.time - from}ms`),
    [],
    `${node} should have stayed ${state} throughout (${rounds} samples); transitions: ${sampler.transitions(node, from, to).join(' → ')}`,
  );
}

function assertNever(sampler: NodeSampler, node: string, state: string, from = 0, to = Infinity): void {
  assert.ok(
    !sampler.everIn(node, state, from, to),
    `${node} must never be ${state}; transitions: ${sampler.transitions(node, from, to).join(' → ')}`,
  );
}

/** With DROVER_TEST_LOGS=<dir>, keep every process's output for a look after the run. */
function saveLogs(label: string, servers: (ServerProcess | undefined)[], agents: (AgentProcess | undefined)[]): void {
  const dir = process.env.DROVER_TEST_LOGS;
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  servers.forEach((s, i) => s && fs.writeFileSync(path.join(dir, `${label}-server-${i}.log`), s.output()));
  agents.forEach((a, i) => a && fs.writeFileSync(path.join(dir, `${label}-agent-${a.name}-${i}.log`), a.output()));
}

function report(t: TestContext, message: string): void {
  for (const line of message.trimEnd().split('\n')) t.diagnostic(line);
  if (process.env.DROVER_TEST_VERBOSE) console.log(`# ${message}`);
}

// -------------------------------------------------------------------------------------------------

describe('node lifecycle: three agents, stopped, killed and frozen', () => {
  let server: ServerProcess;
  const agents = new Map<string, AgentProcess>();
  const history: AgentProcess[] = [];
  const kubectlCache = tempDir('kubectl-cache');
  const names = ['node-a', 'node-b', 'node-c'];

  before(async () => {
    server = await startServer({ args: ['--disable-agent'] });
    for (const agent of await Promise.all(names.map((name) => startAgent({ server, name })))) {
      agents.set(agent.name, agent);
      history.push(agent);
    }
    for (const name of names) await waitForState(server, name, 'Ready');
  });

  after(async () => {
    saveLogs('three', [server], history);
    await cleanupAgents();
    await cleanup(server?.dataDir ?? '', kubectlCache);
  });

  it('SIGTERM: the lease released and Down, never Unavailable; the others stay Ready; a restart brings it back uncordoned', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      await sampledUntil(sampler, from + 600);

      const a = agents.get('node-a')!;
      const exit = await a.stop('SIGTERM');
      assert.equal(exit.code, 0, `a SIGTERM'd agent exits 0; output:\n${a.output()}`);
      // Down comes from the released lease, not from the renewals running late.
      assert.equal((await leaseAnnotations(server, 'node-a'))[RELEASED_ANNOTATION], 'true', 'the agent released its lease before it exited');
      const down = await waitForState(server, 'node-a', 'Down', VERDICT_CEILING_MS);
      const detection = down.at - exit.at;
      report(t, `node-a Down ${detection} ms after the agent exited`);
      assert.ok(detection <= VERDICT_CEILING_MS, `Down ${detection} ms after the exit (ceiling ${VERDICT_CEILING_MS} ms)`);
      const ready = readyCondition(down.node);
      assert.equal(ready?.status, 'False');
      assert.equal(ready?.reason, 'NodeShutdown');
      assert.ok(down.node.metadata.annotations?.[SHUTDOWN_ANNOTATION], 'the shutdown record is on the Node');
      assert.equal(down.node.spec?.unschedulable, true, 'a planned shutdown cordons the node');
      assert.deepEqual(unreachableTaints(down.node), [], 'a planned shutdown does not taint the node unreachable');

      // Down must hold past the grace period, not decay into Unavailable.
      const holdUntil = Math.max(exit.at + GRACE_MS + 1500, down.at + 1000);
      await sampledUntil(sampler, holdUntil);
      const stillDown = await getNode(server, 'node-a');
      assert.equal(nodeState(stillDown!), 'Down');
      assertStayed(sampler, 'node-a', 'Down', down.at, holdUntil);

      // Same data dir: the same host comes back.
      const restarted = await startAgent({ server, name: 'node-a', dataDir: a.dataDir });
      agents.set('node-a', restarted);
      history.push(restarted);
      const back = await waitForNode(
        server,
        'node-a',
        (n) => nodeState(n) === 'Ready' && n.spec?.unschedulable === undefined && !n.metadata.annotations?.[SHUTDOWN_ANNOTATION],
        'Ready, uncordoned, shutdown record gone',
        15_000,
      );
      assert.equal(readyCondition(back.node)?.status, 'True');
      assert.equal(readyCondition(back.node)?.reason, 'NodeReady');
      assert.equal(back.node.metadata.uid, down.node.metadata.uid, 'the same Node object (same host) is reused');
      assert.equal(fs.existsSync(path.join(a.dataDir, 'agent', 'shutdown.json')), false, 'the local shutdown record is cleared');
      await sampledUntil(sampler, back.at + 400);

      const to = Date.now();
      assertNever(sampler, 'node-a', 'Unavailable', from, to);
      assertStayed(sampler, 'node-b', 'Ready', from, to);
      assertStayed(sampler, 'node-c', 'Ready', from, to);
      for (const name of names) await assertNoEvent(server, name, 'NodeUnavailable', from);
      report(t, `node-a transitions: ${sampler.transitions('node-a', from, to).join(' → ')} (${sampler.roundsIn(from, to)} samples, max gap ${sampler.maxGap(from, to)} ms)`);
    } finally {
      await sampler.stop();
    }
  });

  it('SIGKILL → Unavailable, tainted, with an event; SIGSTOP → Unavailable, SIGCONT → Ready; no other node leaves Ready', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      await sampledUntil(sampler, from + 600);

      // kill -9 node-b: no shutdown notice.
      const b = agents.get('node-b')!;
      const killedAt = Date.now();
      process.kill(b.pid, 'SIGKILL');
      const bExit = await b.exited;
      assert.equal(bExit.signal, 'SIGKILL');
      const bUnavailable = await waitForState(server, 'node-b', 'Unavailable', DETECTION_CEILING_MS);
      const bDetection = bUnavailable.at - killedAt;
      report(t, `node-b Unavailable ${bDetection} ms after SIGKILL (Unknown first seen at +${(sampler.firstSeen('node-b', 'Unknown', killedAt) ?? NaN) - killedAt} ms)`);
      assert.ok(bDetection <= DETECTION_CEILING_MS, `Unavailable ${bDetection} ms after SIGKILL (ceiling ${DETECTION_CEILING_MS} ms)`);
      const bTainted = await waitForNode(server, 'node-b', (n) => unreachableTaints(n).length === 2, 'both unreachable taints', VERDICT_CEILING_MS);
      assert.deepEqual(unreachableTaints(bTainted.node), ['NoExecute', 'NoSchedule']);
      const bReady = readyCondition(bTainted.node);
      assert.equal(bReady?.status, 'Unknown');
      assert.equal(bReady?.reason, 'NodeUnavailable');
      assert.match(bReady?.message ?? '', /no shutdown notice/);
      const bEvent = await eventually(
        async () =>
          (await events(server)).find(
            (e) => e.reason === 'NodeUnavailable' && e.involvedObject.kind === 'Node' && e.involvedObject.name === 'node-b',
          ),
        'a NodeUnavailable event for node-b',
        10_000,
      );
      assert.equal(bEvent.type, 'Warning');
      assert.match(bEvent.message, /node-b/);
      assert.match(bEvent.message, /no shutdown notice/);
      report(t, `node-b event: ${bEvent.message}`);

      // SIGSTOP node-c: frozen, indistinguishable from a lost host until it wakes.
      const c = agents.get('node-c')!;
      const stoppedAt = Date.now();
      process.kill(c.pid, 'SIGSTOP');
      const cUnavailable = await waitForState(server, 'node-c', 'Unavailable', DETECTION_CEILING_MS);
      const cDetection = cUnavailable.at - stoppedAt;
      report(t, `node-c Unavailable ${cDetection} ms after SIGSTOP`);
      assert.ok(cDetection <= DETECTION_CEILING_MS, `Unavailable ${cDetection} ms after SIGSTOP (ceiling ${DETECTION_CEILING_MS} ms)`);
      const cTainted = await waitForNode(server, 'node-c', (n) => unreachableTaints(n).length === 2, 'both unreachable taints', VERDICT_CEILING_MS);
      assert.deepEqual(unreachableTaints(cTainted.node), ['NoExecute', 'NoSchedule']);

      const continuedAt = Date.now();
      process.kill(c.pid, 'SIGCONT');
      const cBack = await waitForNode(
        server,
        'node-c',
        (n) => nodeState(n) === 'Ready' && unreachableTaints(n).length === 0,
        'Ready with the unreachable taints gone',
        VERDICT_CEILING_MS,
      );
      const recovery = cBack.at - continuedAt;
      report(t, `node-c Ready (taints gone) ${recovery} ms after SIGCONT`);
      assert.ok(recovery <= VERDICT_CEILING_MS, `Ready ${recovery} ms after SIGCONT (ceiling ${VERDICT_CEILING_MS} ms)`);
      assert.equal(readyCondition(cBack.node)?.status, 'True');
      assert.equal(readyCondition(cBack.node)?.reason, 'NodeReady');
      assert.equal(c.hasExited, false, 'the frozen agent survived');
      await sampledUntil(sampler, cBack.at + 1000);

      const to = Date.now();
      assertStayed(sampler, 'node-a', 'Ready', from, to);
      assertStayed(sampler, 'node-b', 'Ready', from, killedAt);
      assertStayed(sampler, 'node-b', 'Unavailable', bUnavailable.at, to);
      assertNever(sampler, 'node-b', 'Down', from, to);
      assertStayed(sampler, 'node-c', 'Ready', from, stoppedAt);
      assertStayed(sampler, 'node-c', 'Ready', cBack.at, to);
      assertNever(sampler, 'node-c', 'Down', from, to);
      await assertNoEvent(server, 'node-a', 'NodeUnavailable', from);
      report(t, `node-b: ${sampler.transitions('node-b', from, to).join(' → ')}; node-c: ${sampler.transitions('node-c', from, to).join(' → ')}`);
    } finally {
      await sampler.stop();
    }
  });

  it('kubectl shows Down and Unavailable nodes, their Ready reasons and messages, the taints, and the events', async (t) => {
    // node-b is Unavailable (killed above); stop node-a again for a Down node.
    const a = agents.get('node-a')!;
    await a.stop('SIGTERM');
    await waitForState(server, 'node-a', 'Down', 10_000);
    await waitForNode(server, 'node-b', (n) => nodeState(n) === 'Unavailable' && unreachableTaints(n).length === 2, 'Unavailable', 10_000);

    const kubectl = (args: string[]) => runKubectl(KUBECTL, server.kubeconfig, kubectlCache, args);
    const nodes = await kubectl(['get', 'nodes']);
    assert.equal(nodes.code, 0, nodes.stderr);
    report(t, `kubectl get nodes:\n${nodes.stdout}`);
    const statusOf = (name: string): string | undefined =>
      nodes.stdout
        .split('\n')
        .map((line) => line.trim().split(/\s+/))
        .find((cols) => cols[0] === name)?.[1];
    assert.match(nodes.stdout.split('\n')[0]!, /^NAME\s+STATUS\s+/);
    assert.equal(statusOf('node-a'), 'Down,SchedulingDisabled');
    assert.equal(statusOf('node-b'), 'Unavailable');
    assert.equal(statusOf('node-c'), 'Ready');

    const describeB = await kubectl(['describe', 'node', 'node-b']);
    assert.equal(describeB.code, 0, describeB.stderr);
    const readyLineB = describeB.stdout.split('\n').find((l) => /^\s+Ready\s+/.test(l));
    assert.ok(readyLineB, `a Ready condition row in:\n${describeB.stdout}`);
    assert.match(readyLineB, /\bUnknown\b.*\bNodeUnavailable\b.*no shutdown notice/);
    assert.match(describeB.stdout, /Taints:\s+node\.kubernetes\.io\/unreachable:NoExecute\n\s+node\.kubernetes\.io\/unreachable:NoSchedule/);
    report(t, `kubectl describe node node-b (Ready): ${readyLineB.trim()}`);
    assert.match(describeB.stdout, /Events:[\s\S]*NodeUnavailable/, 'describe lists the NodeUnavailable event');

    const describeA = await kubectl(['describe', 'node', 'node-a']);
    assert.equal(describeA.code, 0, describeA.stderr);
    const readyLineA = describeA.stdout.split('\n').find((l) => /^\s+Ready\s+/.test(l));
    assert.ok(readyLineA, `a Ready condition row in:\n${describeA.stdout}`);
    assert.match(readyLineA, /\bFalse\b.*\bNodeShutdown\b.*shut down as planned/);
    assert.match(describeA.stdout, /Unschedulable:\s+true/);
    assert.match(describeA.stdout, /Taints:\s+<none>/);
    report(t, `kubectl describe node node-a (Ready): ${readyLineA.trim()}`);

    const eventList = await kubectl(['get', 'events', '-A']);
    assert.equal(eventList.code, 0, eventList.stderr);
    const lines = eventList.stdout.split('\n');
    const downLine = lines.find((l) => /\bNodeDown\b/.test(l) && l.includes('node/node-a'));
    const unavailableLine = lines.find((l) => /\bNodeUnavailable\b/.test(l) && l.includes('node/node-b'));
    assert.ok(downLine, `a NodeDown event for node-a in:\n${eventList.stdout}`);
    assert.ok(unavailableLine, `a NodeUnavailable event for node-b in:\n${eventList.stdout}`);
    assert.match(downLine, /\bNormal\b.*Node node-a is Down.*shut down as planned/);
    assert.match(unavailableLine, /\bWarning\b.*Node node-b .*is Unavailable.*no shutdown notice/);
    report(t, `kubectl get events -A:\n${lines.filter((l) => /NAMESPACE|NodeDown|NodeUnavailable/.test(l)).join('\n')}`);
  });

  it('a node back from a planned shutdown is never judged Unavailable, even if its first heartbeat is late', async (t) => {
    // node-a is Down since the kubectl test; let it be silent for longer than the grace period.
    const a = agents.get('node-a')!;
    const exit = await a.exited;
    await waitForState(server, 'node-a', 'Down');
    await eventually(() => Date.now() > exit.at + GRACE_MS + 500, 'node-a silent for longer than the grace period', GRACE_MS + 5000, 100);
    const leaseBefore = await leaseRenewTime(server, 'node-a');

    // The returning agent talks to the server over a slow link: every answer reaches it
    // LINK_DELAY_MS late. Its withdrawal of the shutdown record lands on the server (and this
    // test's watch) at once, but it cannot send its first renewal before it has heard back twice
    // (the withdrawal, then its status report). So the freeze below always falls in that window,
    // instead of racing the agent's next request. The delay stays well under the agent's request
    // timeout (grace / 3), so no request of its start is given up.
    const LINK_DELAY_MS = 300;
    const FREEZE_MS = 600;
    const link = await delayingProxy(server, LINK_DELAY_MS);
    const sampler = new NodeSampler(server).start();
    let restarted: AgentProcess | undefined;
    let frozenAt: number | undefined;
    // Freeze the returning agent the moment it has withdrawn its shutdown record: a stall (GC,
    // CPU starvation) between its first writes that a returning node must survive.
    const watch = watchNodes(server, (_type, node) => {
      if (frozenAt || !restarted || node.metadata.name !== 'node-a') return;
      if (node.metadata.annotations?.[SHUTDOWN_ANNOTATION]) return;
      process.kill(restarted.pid, 'SIGSTOP');
      frozenAt = Date.now();
    });
    try {
      const from = Date.now();
      restarted = spawnAgent({ server: { url: link.url, dataDir: server.dataDir }, name: 'node-a', dataDir: a.dataDir });
      agents.set('node-a', restarted);
      history.push(restarted);
      await eventually(() => frozenAt, 'the restarted agent to withdraw its shutdown record', 60_000, 5);
      // The scenario happened: frozen with the record withdrawn and the lease as old as before.
      const node = await getNode(server, 'node-a');
      assert.equal(node?.metadata.annotations?.[SHUTDOWN_ANNOTATION], undefined, 'the shutdown record is withdrawn');
      assert.equal(await leaseRenewTime(server, 'node-a'), leaseBefore, 'node-a was frozen before its first lease renewal');
      assert.ok(leaseBefore !== undefined && Date.now() - leaseBefore > GRACE_MS, 'the lease the controller sees is older than the grace period');
      // The stall lasts several controller ticks (250 ms): each one judges a node with no record
      // and a lapsed lease. (A scenario length, not a wait for a result: the verdicts are checked below.)
      await new Promise((r) => setTimeout(r, FREEZE_MS));
      link.setDelay(0);
      process.kill(restarted.pid, 'SIGCONT');
      const back = await waitForNode(
        server,
        'node-a',
        (n) => nodeState(n) === 'Ready' && unreachableTaints(n).length === 0,
        'Ready after the stall',
        VERDICT_CEILING_MS,
      );
      await eventually(async () => ((await leaseRenewTime(server, 'node-a')) ?? 0) > leaseBefore, 'node-a to renew its lease after the stall', VERDICT_CEILING_MS);
      await sampledUntil(sampler, back.at + 400);
      const to = Date.now();
      report(t, `node-a frozen ${FREEZE_MS} ms right after withdrawing its shutdown record; transitions: ${sampler.transitions('node-a', from, to).join(' → ')}`);
      assertNever(sampler, 'node-a', 'Unavailable', from, to);
      await assertNoEvent(server, 'node-a', 'NodeUnavailable', from);
    } finally {
      watch.close();
      if (restarted && !restarted.hasExited) process.kill(restarted.pid, 'SIGCONT');
      await sampler.stop();
      await link.close();
    }
  });
});

// -------------------------------------------------------------------------------------------------

describe('node identity: same IP, name claims, node authorization', () => {
  let server: ServerProcess;
  const history: AgentProcess[] = [];

  before(async () => {
    server = await startServer({ args: ['--disable-agent'] });
  });

  after(async () => {
    saveLogs('identity', [server], history);
    await cleanupAgents();
    await cleanup(server?.dataDir ?? '');
  });

  it('two agents with the same IP and different names: kill -9 one, only it is marked', async (t) => {
    const [one, two] = await Promise.all([startAgent({ server, name: 'same-ip-1' }), startAgent({ server, name: 'same-ip-2' })]);
    history.push(one, two);
    for (const name of ['same-ip-1', 'same-ip-2']) {
      const { node } = await waitForState(server, name, 'Ready');
      assert.deepEqual(
        node.status?.addresses?.filter((a) => a.type === 'InternalIP').map((a) => a.address),
        ['127.0.0.1'],
        `${name} reports InternalIP 127.0.0.1`,
      );
    }
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      await sampledUntil(sampler, from + 600);
      const killedAt = Date.now();
      process.kill(one.pid, 'SIGKILL');
      const unavailable = await waitForState(server, 'same-ip-1', 'Unavailable', DETECTION_CEILING_MS);
      report(t, `same-ip-1 Unavailable ${unavailable.at - killedAt} ms after SIGKILL`);
      assert.ok(unavailable.at - killedAt <= DETECTION_CEILING_MS, `Unavailable ${unavailable.at - killedAt} ms after SIGKILL (ceiling ${DETECTION_CEILING_MS} ms)`);
      await sampledUntil(sampler, unavailable.at + 2 * RENEW_MS);
      const to = Date.now();
      assertStayed(sampler, 'same-ip-2', 'Ready', from, to);
      await assertNoEvent(server, 'same-ip-2', 'NodeUnavailable', from);
      const other = await getNode(server, 'same-ip-2');
      assert.deepEqual(unreachableTaints(other!), [], 'the other node is not tainted');
      assert.equal(readyCondition(other!)?.reason, 'NodeReady');
    } finally {
      await sampler.stop();
    }
  });

  it('a second host claiming an existing node name is refused with a clear error, until an admin runs drover node forget', async (t) => {
    const original = await startAgent({ server, name: 'claimed' });
    history.push(original);
    const owned = (await waitForState(server, 'claimed', 'Ready')).node;

    // Another host: a fresh data dir, hence another node id and password.
    const intruder = spawnAgent({ server, name: 'claimed' });
    history.push(intruder);
    const refused = await Promise.race([
      intruder.exited,
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the second host did not exit; output:\n${intruder.output()}`)), 30_000)),
    ]);
    assert.notEqual(refused.code, 0, 'the agent exits non-zero');
    assert.notEqual(refused.code, null, `the agent exits by itself (signal ${refused.signal})`);
    const error = intruder.output();
    report(t, `second host's error (exit ${refused.code}): ${error.trim().split('\n').at(-1)}`);
    assert.match(error, /node name "claimed" is already registered by another host/);
    assert.match(error, /drover node forget claimed/);

    // The rightful owner is undisturbed.
    const still = await waitForState(server, 'claimed', 'Ready');
    assert.equal(still.node.metadata.uid, owned.metadata.uid);
    assert.equal(still.node.metadata.annotations?.[NODE_ID_ANNOTATION], owned.metadata.annotations?.[NODE_ID_ANNOTATION]);
    assert.equal(original.hasExited, false);

    // The original host is gone for good; the admin frees the name (which deletes the Node too).
    await original.stop('SIGKILL');
    const forgotten = await runDrover(['node', 'forget', 'claimed', '--kubeconfig', server.kubeconfig]);
    assert.equal(forgotten.code, 0, forgotten.stderr);
    assert.match(forgotten.stdout, /node claimed forgotten: registration of node id [0-9a-f-]+ removed, its credential revoked on every server; Node object deleted/);
    await eventually(async () => (await getNode(server, 'claimed')) === undefined || undefined, 'the Node to be gone');

    const newHost = await startAgent({ server, name: 'claimed', dataDir: intruder.dataDir });
    history.push(newHost);
    const newNodeId = fs.readFileSync(path.join(intruder.dataDir, 'agent', 'node-id'), 'utf8').trim();
    const taken = await waitForNode(
      server,
      'claimed',
      (n) => nodeState(n) === 'Ready' && n.metadata.annotations?.[NODE_ID_ANNOTATION] === newNodeId,
      'Ready, owned by the new host',
      15_000,
    );
    assert.notEqual(taken.node.metadata.uid, owned.metadata.uid, 'a new Node object');
    assert.equal(taken.node.spec?.providerID, `drover://${newNodeId}`);

    // And now the old host is the stranger.
    const oldAgain = spawnAgent({ server, name: 'claimed', dataDir: original.dataDir });
    history.push(oldAgain);
    const oldRefused = await Promise.race([
      oldAgain.exited,
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the old host did not exit; output:\n${oldAgain.output()}`)), 30_000)),
    ]);
    assert.notEqual(oldRefused.code, 0);
    assert.match(oldAgain.output(), /node name "claimed" is already registered by another host/);
    assert.equal((await getNode(server, 'claimed'))?.metadata.uid, taken.node.metadata.uid, 'the new host keeps the name');
  });

  it('a node credential may write only its own Node, Lease and events (403 for another node)', async () => {
    const other = 'same-ip-2';
    assert.ok(await getNode(server, other), `${other} exists`);
    const self = 'authz-node';
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: self, nodeId: randomUUID(), password: 'authz-node-password-0123456789' },
    });
    assert.equal(registration.status, 200, registration.text);
    const nodeToken = (registration.json as { token?: string }).token;
    assert.ok(nodeToken, 'the registration answers with a node credential');
    const asNode = { token: nodeToken };
    const merge = { 'Content-Type': 'application/merge-patch+json' };

    try {
      const patchNode = await request(server, 'PATCH', `/api/v1/nodes/${other}`, {
        ...asNode,
        headers: merge,
        body: { metadata: { labels: { hijacked: 'true' } } },
      });
      assert.equal(patchNode.status, 403, `PATCH another node's Node: ${patchNode.text}`);

      const patchStatus = await request(server, 'PATCH', `/api/v1/nodes/${other}/status`, {
        ...asNode,
        headers: merge,
        body: { status: { conditions: [{ type: 'Ready', status: 'False', reason: 'Hijacked', message: 'x' }] } },
      });
      assert.equal(patchStatus.status, 403, `PATCH another node's Node status: ${patchStatus.text}`);

      const patchLease = await request(server, 'PATCH', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${other}`, {
        ...asNode,
        headers: merge,
        body: { spec: { renewTime: '2020-01-01T00:00:00.000000Z' } },
      });
      assert.equal(patchLease.status, 403, `PATCH another node's Lease: ${patchLease.text}`);

      const event = (about: string) => ({
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { name: `${about}.${Date.now().toString(16)}`, namespace: 'default' },
        involvedObject: { apiVersion: 'v1', kind: 'Node', name: about, namespace: '' },
        reason: 'NodeReady',
        message: `Node ${about} is Ready`,
        type: 'Normal',
        source: { component: 'test' },
      });
      const foreignEvent = await request(server, 'POST', '/api/v1/namespaces/default/events', { ...asNode, body: event(other) });
      assert.equal(foreignEvent.status, 403, `an Event about another node: ${foreignEvent.text}`);

      // Its own objects: allowed.
      const created = await request(server, 'POST', '/api/v1/nodes', {
        ...asNode,
        body: { apiVersion: 'v1', kind: 'Node', metadata: { name: self } },
      });
      assert.equal(created.status, 201, `create its own Node: ${created.text}`);
      const patchOwn = await request(server, 'PATCH', `/api/v1/nodes/${self}`, {
        ...asNode,
        headers: merge,
        body: { metadata: { labels: { 'example.com/own': 'yes' } } },
      });
      assert.equal(patchOwn.status, 200, `PATCH its own Node: ${patchOwn.text}`);
      const ownEvent = await request(server, 'POST', '/api/v1/namespaces/default/events', { ...asNode, body: event(self) });
      assert.equal(ownEvent.status, 201, `an Event about its own node: ${ownEvent.text}`);

      // Nothing about the other node changed.
      const untouched = await getNode(server, other);
      assert.equal(untouched?.metadata.labels?.hijacked, undefined);
      assert.notEqual(readyCondition(untouched!)?.reason, 'Hijacked');
    } finally {
      await request(server, 'DELETE', `/api/v1/nodes/${self}`);
    }
  });
});

// -------------------------------------------------------------------------------------------------

describe('server restarts and pauses with five agents running', () => {
  const dataDir = tempDir('restart');
  const names = ['r-1', 'r-2', 'r-3', 'r-4', 'r-5'];
  const servers: ServerProcess[] = [];
  const history: AgentProcess[] = [];
  let port = 0;
  let server: ServerProcess;
  const start = async (): Promise<ServerProcess> => {
    const s = await startServer({ dataDir, args: ['--disable-agent', '--https-listen-port', String(port)] });
    assert.equal(s.port, port, 'the server listens on the fixed port');
    servers.push(s);
    return s;
  };

  before(async () => {
    port = await freePort();
    server = await start();
    history.push(...(await Promise.all(names.map((name) => startAgent({ server, name })))));
    for (const name of names) await waitForState(server, name, 'Ready');
  });

  after(async () => {
    saveLogs('restart', servers, history);
    await cleanupAgents();
    await cleanup(dataDir);
  });

  /** Take the server away by `disrupt`, bring it back, and check no node ever became Unavailable. */
  async function scenario(t: TestContext, label: string, disrupt: () => Promise<void>): Promise<void> {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      await sampledUntil(sampler, from + 600);
      const disruptedAt = Date.now();
      await disrupt();
      const backAt = Date.now();
      // Every agent renews with the server that is now running.
      await eventually(
        async () => {
          for (const name of names) if (((await leaseRenewTime(server, name)) ?? 0) <= backAt) return undefined;
          return true;
        },
        'every agent to renew its lease after the disruption',
        15_000,
        100,
      );
      const renewedAt = Date.now();
      // Watch for longer than a grace period after the server is back: a node that was going to
      // be judged lost would be by then.
      await sampledUntil(sampler, backAt + GRACE_MS + 2000);
      for (const name of names) await waitForState(server, name, 'Ready', 10_000);
      const to = Date.now();
      for (const name of names) assertNever(sampler, name, 'Unavailable', from, to);
      for (const name of names) await assertNoEvent(server, name, 'NodeUnavailable', from);
      for (const name of names) assertStayed(sampler, name, 'Ready', backAt + GRACE_MS + 1000, to);
      const nonReady = names
        .map((name) => [name, sampler.transitions(name, from, to)] as const)
        .filter(([, states]) => states.some((s) => s !== 'Ready'));
      report(
        t,
        `${label}: server away ${backAt - disruptedAt} ms; all leases renewed ${renewedAt - backAt} ms after it was back; ` +
          `${sampler.roundsIn(from, to)} samples, ${sampler.failures} failed while it was away; ` +
          `non-Ready states seen: ${nonReady.length ? nonReady.map(([n, s]) => `${n}: ${s.join(' → ')}`).join('; ') : 'none'}`,
      );
      for (const agent of history.slice(0, names.length)) assert.equal(agent.hasExited, false, `${agent.name} is still running`);
    } finally {
      await sampler.stop();
    }
  }

  it('SIGTERM and restart the server: no node ever becomes Unavailable, all Ready afterwards', async (t) => {
    await scenario(t, 'SIGTERM restart', async () => {
      assert.equal(await server.stop('SIGTERM'), 0);
      server = await start();
    });
  });

  it('SIGKILL and restart the server: no node ever becomes Unavailable, all Ready afterwards', async (t) => {
    await scenario(t, 'SIGKILL restart', async () => {
      process.kill(server.pid, 'SIGKILL');
      await server.exited;
      server = await start();
    });
  });

  it('SIGSTOP the server for 2 × grace, then SIGCONT: no node becomes Unavailable, all Ready afterwards', async (t) => {
    // Either way of noticing the pause restarts every grace: the loop's own check, or (a pause longer
    // than the controller lease allows) giving up the term, whose successor starts every node afresh.
    const pauses = (): number => server.output().split(/controller loop was paused|stopped being the controller leader/).length - 1;
    const pausesBefore = pauses();
    await scenario(t, 'SIGSTOP 2×grace', async () => {
      process.kill(server.pid, 'SIGSTOP');
      try {
        // The scenario is the pause itself: hold the server stopped for two grace periods.
        await new Promise((r) => setTimeout(r, 2 * GRACE_MS));
      } finally {
        process.kill(server.pid, 'SIGCONT');
      }
    });
    // The scenario happened as intended: the controller noticed it had been stopped (rather than
    // the nodes merely renewing in time), and restarted every grace period.
    assert.ok(pauses() > pausesBefore, 'the paused server logged "controller loop was paused" or "stopped being the controller leader"');
  });
});

// -------------------------------------------------------------------------------------------------

describe('cluster timing validation', () => {
  const dir = tempDir('bad-timings');
  after(() => cleanup(dir));

  it('grace < 3 × renew interval: exit 78 naming both settings, nothing written to the data dir', async () => {
    const fresh = path.join(dir, 'fresh');
    const empty = path.join(dir, 'empty');
    fs.mkdirSync(empty);
    for (const dataDir of [fresh, empty]) {
      const result = await runDrover(
        serverArgs(dataDir, { args: ['--node-monitor-grace-period', '2s', '--node-lease-renew-interval', '1s'] }),
      );
      assert.equal(result.code, 78, `exit code; stderr: ${result.stderr}`);
      assert.match(result.stderr, /node-monitor-grace-period/);
      assert.match(result.stderr, /node-lease-renew-interval/);
      assert.equal(result.stdout.includes('is ready'), false);
    }
    assert.equal(fs.existsSync(fresh), false, 'the fresh data dir was not created');
    assert.deepEqual(fs.readdirSync(empty), [], 'nothing was written into the empty data dir');
  });
});
