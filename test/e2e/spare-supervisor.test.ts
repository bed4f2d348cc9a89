import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SUPERVISOR_PID_FILE } from '../../src/agent/pods/run-spec.js';
import { type AgentProcess, cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { alive, containerPids, createObject, readyPods } from '../helpers/workloads.js';

/**
 * The agent's spare supervisor (src/agent/pods/supervisor-process.ts): a supervisor process
 * started before any pod needs it takes the next pod on, and is then that pod's supervisor like
 * any other: its own session, its pid file and log in the pod dir, found again by a restarted
 * agent, and outliving a kill -9 of the agent; the agent's death retires a spare that has no pod.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/spare-supervisor.test.ts
 */

const SPARE_FLAG = '--spare';

/** Live processes whose argv has the spare flag and a spare dir of this data dir: pid → argv. */
function sparesOf(dataDir: string): Map<number, string[]> {
  const root = `${path.join(dataDir, 'agent', 'spare-supervisor')}${path.sep}`;
  const found = new Map<number, string[]>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes(SPARE_FLAG) && argv.some((a) => a.startsWith(root))) found.set(Number(entry), argv);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]. */
function procStat(pid: number): string[] {
  const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

function pod(name: string): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'spare' } },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: 'busybox', command: ['sleep', '1000000'] }] },
  };
}

describe('the spare supervisor', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let agent: AgentProcess;

  before(async () => {
    work = tempDir('spare-supervisor');
    // The restart must not race the node grace period: a long one.
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    agent = await startAgent({ server, name: 'spare1', dataDir: path.join(work, 'node') });
    await waitForState(server, 'spare1', 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('takes the next pod on, outlives a kill -9 of the agent with it, and is found again by the restarted agent', async () => {
    const [spare] = await eventually(() => {
      const found = [...sparesOf(agent.dataDir).keys()];
      return found.length === 1 ? found : undefined;
    }, 'the agent keeps one spare supervisor', 60_000);
    assert.ok(spare !== undefined);
    // Waiting, it yields to the pods starting (5 nice steps below the agent); with its pod it takes
    // the supervisors' boost (10 above, root only) and gives its containers the agent's priority.
    const niceOf = (pid: number): number => Number(procStat(pid)[16]);
    const agentNice = niceOf(agent.pid);
    const asRoot = process.getuid?.() === 0;
    assert.equal(niceOf(spare), Math.min(19, agentNice + 5), 'the waiting spare runs below the agent');

    await createObject(server, '/api/v1/namespaces/default/pods', pod('first'));
    const [running] = await eventually(async () => {
      const pods = await readyPods(server, 'app=spare');
      return pods.length === 1 ? pods : undefined;
    }, 'the pod Running and ready', 60_000);
    const dir = path.join(agent.dataDir, 'agent', 'pods', running!.uid);
    const supervisor = Number(fs.readFileSync(path.join(dir, SUPERVISOR_PID_FILE), 'utf8'));
    assert.equal(supervisor, spare, 'the spare is the pod’s supervisor');
    const [, , pgrp, session] = procStat(supervisor);
    assert.equal(Number(session), supervisor, 'a session of its own');
    assert.equal(Number(pgrp), supervisor);
    assert.equal(fs.readlinkSync(`/proc/${supervisor}/cwd`), dir, 'it works in the pod dir');
    assert.match(fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8'), /"supervisor started"/, 'its log is in the pod dir');
    const containers = containerPids(running!);
    if (asRoot) assert.equal(niceOf(supervisor), Math.max(-20, agentNice - 10), 'with its pod, the supervisors’ boost');
    for (const pid of containers) assert.equal(niceOf(pid), agentNice, 'its container at the agent’s priority');

    // A new spare follows (after a moment, so it does not compete with the pod's start).
    await eventually(() => [...sparesOf(agent.dataDir).keys()].some((pid) => pid !== supervisor), 'a new spare', 30_000);
    await agent.stop('SIGKILL');
    assert.ok(alive(supervisor), 'the supervisor outlives its agent');
    for (const pid of containers) assert.ok(alive(pid), `container ${pid} outlives the agent`);
    // The waiting spare's stdin ended with the agent: it retires; the one with a pod stays.
    await eventually(() => [...sparesOf(agent.dataDir).keys()].every((pid) => pid === supervisor), 'the waiting spare gone with its agent', 30_000);

    agent = await startAgent({ server, name: 'spare1', dataDir: agent.dataDir });
    await waitForState(server, 'spare1', 'Ready');
    assert.match(agent.output(), /re-attached to pods still running/);
    const after = await eventually(async () => {
      const pods = await readyPods(server, 'app=spare');
      return pods.length === 1 && pods[0]!.uid === running!.uid ? pods[0] : undefined;
    }, 'the same pod reported by the restarted agent', 60_000);
    assert.deepEqual(containerPids(after), containers, 'same container');
    assert.equal(after.restarts, 0, 'nothing restarted');
    assert.equal(Number(fs.readFileSync(path.join(dir, SUPERVISOR_PID_FILE), 'utf8')), supervisor, 'the same supervisor');

    // Deleting it goes through that supervisor: stopped, gone, and the pod dir with it.
    const res = await request(server, 'DELETE', '/api/v1/namespaces/default/pods/first');
    assert.equal(res.status, 200, res.text);
    await eventually(() => !alive(supervisor) && !fs.existsSync(dir), 'the supervisor stopped and the pod dir removed', 60_000);
  });

  it('a pod started again after its supervisor died gets one of its own (its log is appended to); the spare waits on', async () => {
    const [spare] = await eventually(() => {
      const found = [...sparesOf(agent.dataDir).keys()];
      return found.length === 1 ? found : undefined;
    }, 'one spare supervisor', 60_000);
    await createObject(server, '/api/v1/namespaces/default/pods', pod('second'));
    const [running] = await eventually(async () => {
      const pods = await readyPods(server, 'app=spare');
      return pods.length === 1 ? pods : undefined;
    }, 'the pod Running and ready', 60_000);
    const dir = path.join(agent.dataDir, 'agent', 'pods', running!.uid);
    const first = Number(fs.readFileSync(path.join(dir, SUPERVISOR_PID_FILE), 'utf8'));
    assert.equal(first, spare, 'the spare took it');
    const next = await eventually(() => [...sparesOf(agent.dataDir).keys()].find((pid) => pid !== first), 'a new spare', 30_000);

    process.kill(first, 'SIGKILL');
    const restarted = await eventually(() => {
      const pid = Number(fs.readFileSync(path.join(dir, SUPERVISOR_PID_FILE), 'utf8'));
      return pid !== first && alive(pid) ? pid : undefined;
    }, 'the pod started again by a new supervisor', 60_000);
    assert.ok(fs.readFileSync(`/proc/${restarted}/cmdline`, 'utf8').split('\0').includes(dir), 'a supervisor started for the pod (its argv names the pod dir)');
    assert.ok(alive(next) && sparesOf(agent.dataDir).has(next), 'the waiting spare was not used up');
    // Its pid file comes a moment before its first line.
    const logged = (): number => fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8').match(/"supervisor started"/g)?.length ?? 0;
    await eventually(() => logged() >= 2, 'both supervisors logged to the pod’s log', 30_000);
    assert.equal(logged(), 2);

    const res = await request(server, 'DELETE', '/api/v1/namespaces/default/pods/second');
    assert.equal(res.status, 200, res.text);
    await eventually(() => !alive(restarted) && !fs.existsSync(dir), 'the supervisor stopped and the pod dir removed', 60_000);
  });
});
