import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { type AgentProcess, cleanupAgents, getNode, nodeState, startAgent, waitForState } from '../helpers/agent.js';
import { startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { always, cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import {
  alive,
  containerPids,
  createObject,
  deployment,
  FAILOVER_REASONS,
  journalingSingleton,
  journalOverlap,
  eventsSince,
  listEvents,
  listPods,
  type PodView,
  readJournal,
  readyPods,
  waitForReadyPods,
} from '../helpers/workloads.js';

/**
 * Failover end to end with real processes and the default timings (renew 1 s, grace 4 s,
 * fencing-timeout 3 s, default-unavailable-toleration 0 s): Deployment pods move after an abrupt
 * loss; a singleton moves too, but its journal proves the two copies never ran at once; a frozen
 * server moves nothing; a planned shutdown drains before the node is Down.
 */

const AGENTS = ['f1', 'f2', 'f3', 'f4'];
/** The default timings: a lost node's singleton is replaced fencing-timeout (3 s) + margin (2 s) after its last renewal. */
const FENCING_TIMEOUT_MS = 3000;
const FENCING_MARGIN_MS = 2000;
const WEB = 'app=web';
const SOLO = 'app=solo';

interface Cluster {
  server: ServerProcess;
  agents: Map<string, AgentProcess>;
  journal: string;
  work: string;
}

async function startCluster(work: string, serverArgs: string[] = []): Promise<Cluster> {
  const server = await startServer({ args: serverArgs });
  const agents = new Map<string, AgentProcess>();
  for (const [i, name] of AGENTS.entries()) {
    agents.set(name, await startAgent({ server, name, args: ['--node-ip', `127.0.0.${i + 2}`] }));
  }
  for (const name of AGENTS) await waitForState(server, name, 'Ready');
  const journal = path.join(work, 'solo.journal');
  await createObject(server, '/apis/apps/v1/namespaces/default/deployments', deployment('web', 3, ['sh', '-c', 'while :; do sleep 1; done']));
  await createObject(server, '/apis/apps/v1/namespaces/default/statefulsets', journalingSingleton('solo', journal));
  await waitForReadyPods(server, WEB, 3);
  await waitForReadyPods(server, SOLO, 1);
  return { server, agents, journal, work };
}

async function restartAgent(cluster: Cluster, name: string): Promise<AgentProcess> {
  const old = cluster.agents.get(name)!;
  const index = AGENTS.indexOf(name);
  const agent = await startAgent({ server: cluster.server, name, dataDir: old.dataDir, args: ['--node-ip', `127.0.0.${index + 2}`] });
  cluster.agents.set(name, agent);
  await waitForState(cluster.server, name, 'Ready');
  return agent;
}

/** Seconds from `since` until every pod in `gone` has a ready replacement on another node. */
async function waitForReplacements(cluster: Cluster, selector: string, gone: PodView[], since: number, timeoutMs: number): Promise<number> {
  const goneUids = new Set(gone.map((p) => p.uid));
  const victimNodes = new Set(gone.map((p) => p.node));
  return eventually(
    async () => {
      const ready = await readyPods(cluster.server, selector);
      const fresh = ready.filter((p) => !goneUids.has(p.uid) && !victimNodes.has(p.node));
      const survivors = ready.filter((p) => !goneUids.has(p.uid));
      return survivors.length >= ready.length && fresh.length >= gone.length ? (Date.now() - since) / 1000 : undefined;
    },
    `replacements for ${gone.map((p) => p.name).join(', ')}`,
    timeoutMs,
  );
}

/** Old pods on a restored node are stopped and their objects removed by its agent. */
async function waitForCleanup(cluster: Cluster, stale: PodView[]): Promise<void> {
  assert.ok(stale.length > 0, 'pods to wait for (none would prove nothing)');
  await eventually(async () => {
    const uids = new Set((await listPods(cluster.server)).map((p) => p.uid));
    return stale.every((p) => !uids.has(p.uid) && containerPids(p).every((pid) => !alive(pid)));
  }, 'stale pods stopped and gone after the node came back', 30_000);
}

function note(t: TestContext, text: string): void {
  t.diagnostic(text);
}

describe('failover after an abrupt loss (SQLite)', { concurrency: false }, () => {
  let cluster: Cluster;

  before(async () => {
    const work = tempDir('failover');
    cluster = await startCluster(work);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(cluster?.work ?? '');
  });

  /** A node running web pods but not the singleton (so this test moves only Deployment pods). */
  async function webOnlyNode(): Promise<{ name: string; pods: PodView[] }> {
    const solo = (await readyPods(cluster.server, SOLO))[0]!;
    const web = await readyPods(cluster.server, WEB);
    const name = AGENTS.find((n) => n !== solo.node && web.some((p) => p.node === n))!;
    return { name, pods: web.filter((p) => p.node === name) };
  }

  for (const signal of ['SIGKILL', 'SIGSTOP'] as const) {
    it(`${signal} of an agent: its Deployment pods run elsewhere within seconds; the node's return cleans up`, async (t) => {
      await waitForReadyPods(cluster.server, WEB, 3);
      const { name, pods } = await webOnlyNode();
      const agent = cluster.agents.get(name)!;
      const since = Date.now();
      process.kill(agent.pid, signal);
      const seconds = await waitForReplacements(cluster, WEB, pods, since, 30_000);
      note(t, `${signal}: Deployment pod replaced and ready ${seconds.toFixed(2)} s after the signal`);
      assert.equal(nodeState((await getNode(cluster.server, name))!), 'Unavailable');
      // The lost node's processes were not singletons: they may run on (nobody could stop them),
      // and stop when the node comes back.
      if (signal === 'SIGSTOP') {
        process.kill(agent.pid, 'SIGCONT');
        await waitForState(cluster.server, name, 'Ready');
      } else {
        await agent.exited;
        await restartAgent(cluster, name);
      }
      await waitForCleanup(cluster, pods);
      await waitForReadyPods(cluster.server, WEB, 3);
    });
  }

  it('SIGSTOP of the singleton’s agent: the copy there is fenced, the replacement starts elsewhere, never both at once', async (t) => {
    const [solo] = await waitForReadyPods(cluster.server, SOLO, 1);
    const agent = cluster.agents.get(solo!.node)!;
    const since = Date.now();
    process.kill(agent.pid, 'SIGSTOP');
    const seconds = await waitForReplacements(cluster, SOLO, [solo!], since, 30_000);
    note(t, `singleton replaced and ready ${seconds.toFixed(2)} s after SIGSTOP`);
    // Let the new copy journal for a while, then judge the file.
    const replacement = (await readyPods(cluster.server, SOLO))[0]!;
    await eventually(() => readJournal(cluster.journal).find((c) => c.uid === replacement.uid && c.lines >= 10), 'the replacement journaling');
    for (const pid of containerPids(solo!)) assert.ok(!alive(pid), `the fenced copy (pid ${pid}) is dead while its agent is still frozen`);
    const copies = readJournal(cluster.journal);
    const { maxOverlapMs, gapsMs } = journalOverlap(copies);
    note(t, `journal: ${copies.length} copies, max overlap ${maxOverlapMs} ms, handover gaps ${gapsMs.join(', ')} ms`);
    assert.equal(maxOverlapMs, 0, `two copies wrote at the same time: ${JSON.stringify(copies)}`);
    assert.ok(copies.some((c) => c.uid === solo!.uid) && copies.some((c) => c.uid === replacement.uid));
    const events = await listEvents(cluster.server);
    assert.ok(events.some((e) => e.reason === 'SingletonFailover' && e.message.includes('fencing-timeout')), 'a SingletonFailover event explains the move');
    process.kill(agent.pid, 'SIGCONT');
    await waitForState(cluster.server, solo!.node, 'Ready');
    await waitForCleanup(cluster, [solo!]);
    // Back on its feet, the old node never restarts the fenced copy.
    const oldCopy = readJournal(cluster.journal).find((c) => c.uid === solo!.uid)!;
    assert.equal(oldCopy.last, copies.find((c) => c.uid === solo!.uid)!.last, 'the fenced copy wrote nothing after it was fenced');
    assert.equal(journalOverlap(readJournal(cluster.journal)).maxOverlapMs, 0);
  });

  it('SIGSTOP of the server for 3 × grace: no pod stops, no replacement starts, all is normal after SIGCONT', async (t) => {
    const web = await waitForReadyPods(cluster.server, WEB, 3);
    const [solo] = await waitForReadyPods(cluster.server, SOLO, 1);
    const pods = [...web, solo!];
    const pids = pods.flatMap(containerPids);
    const eventsBefore = await listEvents(cluster.server);
    const journalBefore = readJournal(cluster.journal).find((c) => c.uid === solo!.uid)!.lines;
    process.kill(cluster.server.pid, 'SIGSTOP');
    try {
      // The outage lasts 3 × grace; every pod process must run throughout it.
      await always(() => pids.every(alive), `every pod process (${pids.join(', ')}) runs during the control-plane outage`, 12_000, 200);
    } finally {
      process.kill(cluster.server.pid, 'SIGCONT');
    }
    const resumedAt = Date.now();
    const grew = readJournal(cluster.journal).find((c) => c.uid === solo!.uid)!.lines - journalBefore;
    note(t, `the singleton wrote ${grew} journal lines during the 12 s outage`);
    assert.ok(grew > 0, 'the singleton wrote during the outage');
    // And it was never fenced: a fenced copy never writes again, this one still does.
    await eventually(
      () => (readJournal(cluster.journal).find((c) => c.uid === solo!.uid)?.last ?? 0) > resumedAt,
      'the singleton to go on journaling after the outage',
      20_000,
    );
    for (const name of AGENTS) await waitForState(cluster.server, name, 'Ready', 30_000);
    // A window for "nothing moves": longer than a failover would take to be decided once the
    // controller runs again (fencing timeout + margin), with every pod process checked throughout;
    // then the durable record (pods, events, journal) is checked.
    try {
      await always(() => pids.every(alive), 'every pod process runs after the outage', FENCING_TIMEOUT_MS + FENCING_MARGIN_MS + 1000, 200);
    } catch (error) {
      // Say which process went and what the cluster did meanwhile (a flake seen once in CI at load 3).
      const gone = pods.filter((p) => containerPids(p).some((pid) => !alive(pid))).map((p) => `${p.name} on ${p.node}`);
      const events = (await eventsSince(cluster.server, eventsBefore)).map((e) => `${e.reason}: ${e.message}`);
      throw new Error(`${(error as Error).message}; gone: ${gone.join(', ')}; events since the outage began:\n${events.join('\n')}`);
    }
    const now = [...(await readyPods(cluster.server, WEB)), ...(await readyPods(cluster.server, SOLO))];
    assert.deepEqual(now.map((p) => p.uid).sort(), pods.map((p) => p.uid).sort(), 'no pod was replaced');
    for (const pid of pids) assert.ok(alive(pid));
    const newEvents = await eventsSince(cluster.server, eventsBefore);
    const failovers = newEvents.filter((e) => FAILOVER_REASONS.has(e.reason));
    assert.deepEqual(failovers, [], 'no failover during a control-plane outage');
    assert.equal(journalOverlap(readJournal(cluster.journal)).maxOverlapMs, 0);
  });

  it('SIGTERM of an agent: its pods are evicted and running elsewhere before the node is Down; no failover', async (t) => {
    const [solo] = await waitForReadyPods(cluster.server, SOLO, 1);
    const name = solo!.node;
    const web = (await readyPods(cluster.server, WEB)).filter((p) => p.node === name);
    const leaving = [solo!, ...web];
    const eventsBefore = await listEvents(cluster.server);
    const agent = cluster.agents.get(name)!;
    // Sample node state and replacements every 50 ms until the node is Down.
    let replacedAt: number | undefined;
    let downAt: number | undefined;
    const since = Date.now();
    process.kill(agent.pid, 'SIGTERM');
    await eventually(
      async () => {
        const [node, soloNow, webNow] = await Promise.all([
          getNode(cluster.server, name),
          readyPods(cluster.server, SOLO),
          readyPods(cluster.server, WEB),
        ]);
        const replaced =
          soloNow.some((p) => p.uid !== solo!.uid && p.node !== name) && webNow.filter((p) => p.node !== name).length >= 3;
        if (replaced && replacedAt === undefined) replacedAt = Date.now();
        if (node && nodeState(node) === 'Down' && downAt === undefined) downAt = Date.now();
        return downAt !== undefined;
      },
      `${name} Down`,
      30_000,
    );
    note(t, `replacements ready ${(((replacedAt ?? NaN) - since) / 1000).toFixed(2)} s, node Down ${((downAt! - since) / 1000).toFixed(2)} s after SIGTERM`);
    const drainLog = (): string =>
      agent
        .output()
        .split('\n')
        .filter((line) => /drain|replacements|Ready node/.test(line))
        .join('\n');
    assert.ok(replacedAt !== undefined && replacedAt <= downAt!, `replacements ran before the node went Down; the agent's drain said:\n${drainLog()}`);
    const exit = await agent.exited;
    assert.equal(exit.code, 0);
    for (const pod of leaving) for (const pid of containerPids(pod)) assert.ok(!alive(pid), `pod process ${pid} stopped by the drain`);
    const newEvents = await eventsSince(cluster.server, eventsBefore);
    assert.deepEqual(newEvents.filter((e) => FAILOVER_REASONS.has(e.reason)), [], 'a planned shutdown is not a failover');
    assert.ok(newEvents.some((e) => e.reason === 'NodeDown' && e.object === `Node/${name}`));
    assert.equal(journalOverlap(readJournal(cluster.journal)).maxOverlapMs, 0, 'the singleton stopped before its replacement started');
    await restartAgent(cluster, name);
  });
});

describe('pods of a deleted node', { concurrency: false }, () => {
  let cluster: Cluster;

  before(async () => {
    cluster = await startCluster(tempDir('orphans'));
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(cluster?.work ?? '');
  });

  it('kubectl delete node of a dead machine: its Terminating pods are collected; the machine returning stops their processes', async (t) => {
    const web = await waitForReadyPods(cluster.server, WEB, 3);
    const solo = (await readyPods(cluster.server, SOLO))[0]!;
    const name = AGENTS.find((n) => n !== solo.node && web.some((p) => p.node === n))!;
    const stranded = web.filter((p) => p.node === name);
    const agent = cluster.agents.get(name)!;
    await agent.stop('SIGKILL');
    await waitForReplacements(cluster, WEB, stranded, Date.now(), 30_000);
    const terminating = (await listPods(cluster.server, WEB)).filter((p) => p.node === name);
    assert.ok(terminating.length && terminating.every((p) => p.terminating), 'the lost pods wait, Terminating');
    const deletedAt = Date.now();
    const res = await request(cluster.server, 'DELETE', `/api/v1/nodes/${name}`);
    assert.equal(res.status, 200, res.text);
    await eventually(async () => (await listPods(cluster.server, WEB)).every((p) => p.node !== name), 'the pods of the deleted node collected', 30_000);
    t.diagnostic(`pods of the deleted node collected ${((Date.now() - deletedAt) / 1000).toFixed(1)} s after the Node was deleted`);
    const events = await listEvents(cluster.server);
    assert.ok(events.some((e) => e.reason === 'PodGarbageCollected' && e.message.includes(`node ${name} no longer exists`)));
    // The pod processes outlived the killed agent; when it comes back, it stops them.
    for (const pod of stranded) assert.ok(containerPids(pod).every(alive), 'still running while the machine is away');
    await restartAgent(cluster, name);
    await waitForCleanup(cluster, stranded);
  });
});

describe('failover on etcd', { concurrency: false }, () => {
  let etcd: EtcdServer | undefined;
  let cluster: Cluster | undefined;

  before(async () => {
    etcd = await startEtcd();
    const work = tempDir('failover-etcd');
    cluster = await startCluster(work, ['--datastore-endpoint', etcd.endpoint.replace(/^https?:\/\//, 'etcd://')]);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(cluster?.work ?? '');
    await etcd?.stop();
  });

  it('SIGKILL of the singleton’s agent on an etcd datastore: fenced, replaced, never both at once', async (t) => {
    const c = cluster!;
    const [solo] = await waitForReadyPods(c.server, SOLO, 1);
    const web = (await readyPods(c.server, WEB)).filter((p) => p.node === solo!.node);
    const agent = c.agents.get(solo!.node)!;
    const since = Date.now();
    process.kill(agent.pid, 'SIGKILL');
    const soloSeconds = await waitForReplacements(c, SOLO, [solo!], since, 30_000);
    const webSeconds = web.length ? await waitForReplacements(c, WEB, web, since, 30_000) : NaN;
    note(t, `etcd: singleton ready elsewhere ${soloSeconds.toFixed(2)} s, Deployment pod ${webSeconds.toFixed(2)} s after SIGKILL`);
    const replacement = (await readyPods(c.server, SOLO))[0]!;
    await eventually(() => readJournal(c.journal).find((cp) => cp.uid === replacement.uid && cp.lines >= 10), 'the replacement journaling');
    assert.equal(journalOverlap(readJournal(c.journal)).maxOverlapMs, 0);
    for (const pid of containerPids(solo!)) assert.ok(!alive(pid), 'the fenced copy is dead');
    assert.ok(fs.existsSync(c.journal));
  });
});
