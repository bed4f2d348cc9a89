import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { type AgentProcess, cleanupAgents, getNode, nodeState, startAgent, waitForState } from '../helpers/agent.js';
import { containerInitPid, importTestImage, podDirOf, podLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { always, cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import {
  alive,
  createObject,
  eventsSince,
  FAILOVER_REASONS,
  journalOverlap,
  type JournalCopy,
  listEvents,
  POD_UID_ENV,
  listPods,
  type PodView,
  readyPods,
  singletonStatefulSet,
  waitForReadyPods,
} from '../helpers/workloads.js';

/**
 * The failover guarantees with runc containers instead of processes: an agent killed and started
 * again finds the same containers (same init PIDs, no restart); an agent lost for good has its
 * Deployment pods run elsewhere, and its singleton fenced (killed through its cgroup) before the
 * replacement starts, never both at once; a frozen control plane moves and restarts nothing; a
 * node that comes back removes what it ran, leaving no runc container, mount or cgroup.
 */

const IMAGE = 'drover.test/failover:1';

function image(): ReturnType<typeof buildTestImage> {
  return buildTestImage({ name: IMAGE, entrypoint: ['/bin/sleep'], cmd: ['1000000'] });
}

function webDeployment(name: string, replicas: number): Record<string, unknown> {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: { runtimeClassName: 'runc', terminationGracePeriodSeconds: 2, containers: [{ name: 'main', image: IMAGE }] },
      },
    },
  };
}

/** The last lines of a pod's supervisor.log, for a failure message. */
function supervisorLogTail(dataDir: string, uid: string): string {
  try {
    return fs.readFileSync(path.join(podDirOf(dataDir, uid), 'supervisor.log'), 'utf8').trimEnd().split('\n').slice(-15).join('\n');
  } catch (error) {
    return `(no supervisor.log: ${(error as Error).message})`;
  }
}

/** A one-replica StatefulSet whose container prints `<pod uid> <host uptime>` every 50 ms (its log is the journal). */
function journalingContainer(name: string): Record<string, unknown> {
  return singletonStatefulSet(name, {
    runtimeClassName: 'runc',
    terminationGracePeriodSeconds: 2,
    containers: [
      {
        name: 'main',
        image: IMAGE,
        // /proc/uptime is the host's (no time namespace): one clock for every copy on this machine.
        command: ['sh', '-c', 'while :; do echo "$POD_UID $(cut -d" " -f1 /proc/uptime)"; sleep 0.05; done'],
        env: POD_UID_ENV,
      },
    ],
  });
}

/** Every copy's journal lines seen so far in the container logs of `dataDirs`, kept across reads (a removed pod dir takes its logs). */
class LogJournal {
  private readonly copies = new Map<string, JournalCopy>();

  collect(dataDirs: readonly string[]): JournalCopy[] {
    for (const dataDir of dataDirs) {
      const pods = path.join(dataDir, 'agent', 'pods');
      for (const uid of fs.existsSync(pods) ? fs.readdirSync(pods) : []) {
        const logs = path.join(pods, uid, 'logs', 'main');
        for (const file of fs.existsSync(logs) ? fs.readdirSync(logs) : []) {
          let text = '';
          try {
            text = fs.readFileSync(path.join(logs, file), 'utf8');
          } catch {
            continue;
          }
          for (const line of text.split('\n')) {
            const [who, seconds] = line.trim().split(' ');
            const at = Math.round(Number(seconds) * 1000);
            if (!who || !Number.isFinite(at) || at <= 0) continue;
            const copy = this.copies.get(who);
            if (!copy) this.copies.set(who, { uid: who, first: at, last: at, lines: 1 });
            else {
              copy.first = Math.min(copy.first, at);
              copy.last = Math.max(copy.last, at);
              copy.lines++;
            }
          }
        }
      }
    }
    return [...this.copies.values()].sort((a, b) => a.first - b.first);
  }
}

async function startNodes(server: ServerProcess, work: string, names: readonly string[]): Promise<Map<string, AgentProcess>> {
  const built = image();
  const agents = new Map<string, AgentProcess>();
  for (const [i, name] of names.entries()) {
    const dataDir = path.join(work, `node-${name}`);
    await importTestImage(dataDir, built, work);
    agents.set(name, await startAgent({ server, name, dataDir, args: ['--node-ip', `127.0.0.${i + 2}`] }));
  }
  for (const name of names) await waitForState(server, name, 'Ready');
  return agents;
}

async function restartAgent(server: ServerProcess, agents: Map<string, AgentProcess>, names: readonly string[], name: string): Promise<AgentProcess> {
  const old = agents.get(name)!;
  const agent = await startAgent({ server, name, dataDir: old.dataDir, args: ['--node-ip', `127.0.0.${names.indexOf(name) + 2}`] });
  agents.set(name, agent);
  await waitForState(server, name, 'Ready');
  return agent;
}

async function initPids(dataDir: string, pods: readonly PodView[]): Promise<number[]> {
  const pids: number[] = [];
  for (const pod of pods) {
    // Running is reported once runc has started the container, so runc says so too; polled within
    // a ceiling all the same (a `runc state` that times out on a very busy host).
    const pid = await eventually(
      async () => {
        const found = await containerInitPid(dataDir, pod.uid, 'main');
        return found !== undefined && found > 1 ? found : undefined;
      },
      `pod ${pod.name} has a running container`,
      30_000,
    );
    pids.push(pid);
  }
  return pids;
}

function note(t: TestContext, text: string): void {
  t.diagnostic(text);
}

describe('an agent killed and restarted keeps its containers', { concurrency: false }, () => {
  const NAMES = ['k1', 'k2'];
  let server: ServerProcess;
  let work: string;
  let agents: Map<string, AgentProcess>;

  before(async () => {
    work = tempDir('containers-restart');
    // The restart must not race the node grace period (see workloads.test.ts): a long one.
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    agents = await startNodes(server, work, NAMES);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('kill -9 of the agent, then a restart: same pods, same container PIDs, no restart', async () => {
    await createObject(server, '/apis/apps/v1/namespaces/default/deployments', webDeployment('keep', 2));
    const running = await waitForReadyPods(server, 'app=keep', 2, 90_000);
    const victim = agents.get(running[0]!.node)!;
    const mine = running.filter((p) => p.node === victim.name);
    const pidsBefore = await initPids(victim.dataDir, mine);
    await victim.stop('SIGKILL');
    for (const pid of pidsBefore) assert.ok(alive(pid), `container init ${pid} outlives its agent`);
    const restarted = await restartAgent(server, agents, NAMES, victim.name);
    assert.match(restarted.output(), /re-attached to pods still running/);
    const after = await eventually(
      async () => {
        const pods = (await readyPods(server, 'app=keep')).filter((p) => p.node === victim.name);
        return pods.length === mine.length ? pods : undefined;
      },
      'the same pods reported by the restarted agent',
      60_000,
    );
    assert.deepEqual(after.map((p) => p.uid).sort(), mine.map((p) => p.uid).sort(), 'same pod objects');
    assert.deepEqual(await initPids(victim.dataDir, after), pidsBefore, 'same container init PIDs');
    assert.ok(after.every((p) => p.restarts === 0), 'nothing restarted');
    const res = await request(server, 'DELETE', '/apis/apps/v1/namespaces/default/deployments/keep');
    assert.equal(res.status, 200, res.text);
    await eventually(async () => ((await listPods(server, 'app=keep')).length === 0 ? true : undefined), 'keep pods gone', 60_000);
    for (const pod of mine) assert.deepEqual(podLeftovers(victim.dataDir, pod.uid), [], `pod ${pod.name} left nothing on ${victim.name}`);
  });
});

describe('failover with containers (default timings)', { concurrency: false }, () => {
  const NAMES = ['c1', 'c2', 'c3'];
  let server: ServerProcess;
  let work: string;
  let agents: Map<string, AgentProcess>;
  const journal = new LogJournal();
  const dataDirs = (): string[] => [...agents.values()].map((a) => a.dataDir);

  before(async () => {
    work = tempDir('containers-failover');
    server = await startServer();
    agents = await startNodes(server, work, NAMES);
    await createObject(server, '/apis/apps/v1/namespaces/default/deployments', webDeployment('web', 3));
    await createObject(server, '/apis/apps/v1/namespaces/default/statefulsets', journalingContainer('solo'));
    await waitForReadyPods(server, 'app=web', 3, 90_000);
    await waitForReadyPods(server, 'app=solo', 1, 90_000);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  /** Waits until each pod in `gone` has a new ready pod on another node (`known`: every uid before the loss); seconds since `since`. */
  async function replaced(selector: string, gone: readonly PodView[], known: ReadonlySet<string>, since: number): Promise<number> {
    const lost = new Set(gone.map((p) => p.node));
    return eventually(
      async () => {
        const fresh = (await readyPods(server, selector)).filter((p) => !known.has(p.uid) && !lost.has(p.node));
        return fresh.length >= gone.length ? (Date.now() - since) / 1000 : undefined;
      },
      `replacements for ${gone.map((p) => p.name).join(', ')}`,
      60_000,
    );
  }

  it('SIGSTOP of the server for 3 × grace: no container stops or restarts, none is replaced', async (t) => {
    const pods = [...(await waitForReadyPods(server, 'app=web', 3, 60_000)), ...(await waitForReadyPods(server, 'app=solo', 1, 60_000))];
    const pids: number[] = [];
    for (const pod of pods) pids.push(...(await initPids(agents.get(pod.node)!.dataDir, [pod])));
    const eventsBefore = await listEvents(server);
    const soloUid = pods.at(-1)!.uid;
    const linesBefore = journal.collect(dataDirs()).find((c) => c.uid === soloUid)?.lines ?? 0;
    process.kill(server.pid, 'SIGSTOP');
    try {
      await always(() => pids.every(alive), `every container init (${pids.join(', ')}) runs during the control-plane outage`, 12_000, 200);
    } catch (error) {
      // Which container ended, and what its supervisor said (a fence names its figures).
      const said = pods.map((pod, i) => `${pod.name} on ${pod.node} (init ${pids[i]}, ${alive(pids[i]!) ? 'alive' : 'ended'}):\n${supervisorLogTail(agents.get(pod.node)!.dataDir, pod.uid)}`);
      throw new Error(`${(error as Error).message}\n${said.join('\n')}`, { cause: error });
    } finally {
      process.kill(server.pid, 'SIGCONT');
    }
    const grew = (journal.collect(dataDirs()).find((c) => c.uid === soloUid)?.lines ?? 0) - linesBefore;
    note(t, `the singleton container wrote ${grew} journal lines during the 12 s outage`);
    assert.ok(grew > 0, 'the singleton ran on during the outage');
    for (const name of NAMES) await waitForState(server, name, 'Ready', 30_000);
    // Longer than a failover would take to be decided once the controller runs again.
    await always(() => pids.every(alive), 'every container runs after the outage', 6000, 200);
    const now = [...(await readyPods(server, 'app=web')), ...(await readyPods(server, 'app=solo'))];
    assert.deepEqual(now.map((p) => p.uid).sort(), pods.map((p) => p.uid).sort(), 'no pod was replaced');
    assert.ok(now.every((p) => p.restarts === 0), 'no container restarted');
    const failovers = (await eventsSince(server, eventsBefore)).filter((e) => FAILOVER_REASONS.has(e.reason));
    assert.deepEqual(failovers, [], 'no failover during a control-plane outage');
  });

  it('SIGKILL of an agent: its Deployment containers run elsewhere; its return removes them', async (t) => {
    const solo = (await readyPods(server, 'app=solo'))[0]!;
    const web = await readyPods(server, 'app=web');
    const name = NAMES.find((n) => n !== solo.node && web.some((p) => p.node === n))!;
    const victim = agents.get(name)!;
    const lost = web.filter((p) => p.node === name);
    const known = new Set((await listPods(server, 'app=web')).map((p) => p.uid));
    const since = Date.now();
    await victim.stop('SIGKILL');
    note(t, `Deployment pod replaced and ready ${(await replaced('app=web', lost, known, since)).toFixed(2)} s after SIGKILL`);
    assert.equal(nodeState((await getNode(server, name))!), 'Unavailable');
    await restartAgent(server, agents, NAMES, name);
    await eventually(
      async () => {
        const uids = new Set((await listPods(server)).map((p) => p.uid));
        return lost.every((p) => !uids.has(p.uid) && podLeftovers(victim.dataDir, p.uid).length === 0 && !fs.existsSync(podDirOf(victim.dataDir, p.uid)));
      },
      'the lost pods stopped and removed, nothing left on the node',
      60_000,
    );
    await waitForReadyPods(server, 'app=web', 3, 60_000);
  });

  it('SIGKILL of the singleton’s agent: the container is fenced through its cgroup, replaced elsewhere, never both at once', async (t) => {
    const [solo] = await waitForReadyPods(server, 'app=solo', 1, 60_000);
    const victim = agents.get(solo!.node)!;
    const [pid] = await initPids(victim.dataDir, [solo!]);
    const since = Date.now();
    await victim.stop('SIGKILL');
    note(t, `singleton replaced and ready ${(await replaced('app=solo', [solo!], new Set([solo!.uid]), since)).toFixed(2)} s after SIGKILL`);
    const replacement = (await readyPods(server, 'app=solo'))[0]!;
    await eventually(() => journal.collect(dataDirs()).find((c) => c.uid === replacement.uid && c.lines >= 10), 'the replacement journaling', 30_000);
    assert.ok(!alive(pid!), `the fenced container (init ${pid}) is dead while its agent is still down`);
    assert.deepEqual(
      podLeftovers(victim.dataDir, solo!.uid).filter((l) => l.startsWith('cgroup') && !l.endsWith(solo!.uid)),
      [],
      'the fenced container cgroup is gone',
    );
    const copies = journal.collect(dataDirs());
    const { maxOverlapMs, gapsMs } = journalOverlap(copies);
    note(t, `journal: ${copies.length} copies, max overlap ${maxOverlapMs} ms, handover gaps ${gapsMs.join(', ')} ms`);
    assert.ok(copies.some((c) => c.uid === solo!.uid) && copies.some((c) => c.uid === replacement.uid), JSON.stringify(copies));
    assert.equal(maxOverlapMs, 0, `two copies ran at the same time: ${JSON.stringify(copies)}`);
    const events = await listEvents(server);
    assert.ok(events.some((e) => e.reason === 'SingletonFailover'), 'a SingletonFailover event explains the move');
    await restartAgent(server, agents, NAMES, solo!.node);
    await eventually(
      async () => {
        const uids = new Set((await listPods(server)).map((p) => p.uid));
        return !uids.has(solo!.uid) && podLeftovers(victim.dataDir, solo!.uid).length === 0 ? true : undefined;
      },
      'the fenced pod removed, nothing left on its node',
      60_000,
    );
    assert.equal(journalOverlap(journal.collect(dataDirs())).maxOverlapMs, 0);
  });
});
