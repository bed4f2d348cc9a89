import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cleanupAgents, getNode, joinToken, nodeState, startAgent, waitForState } from '../helpers/agent.js';
import { reapPods } from '../helpers/pods.js';
import { createTestNetwork, netnsProblem, type TestNetwork } from '../helpers/netns.js';
import { cleanup, DROVER_BIN, eventually, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import {
  alive,
  containerPids,
  createObject,
  journalingSingleton,
  journalOverlap,
  readJournal,
  readyPods,
  waitForReadyPods,
} from '../helpers/workloads.js';

/**
 * A real network partition: the singleton's agent runs in a network namespace this test creates,
 * joined to the host by a veth on a test bridge (test/helpers/netns.ts); taking the link down cuts that node off from the server and
 * from its peers while every process keeps running. The copy on the cut-off node must fence
 * itself before its replacement starts elsewhere. Needs root and iproute2 (./test.sh installs it).
 */

const skip = netnsProblem();

function link(state: 'up' | 'down', device: string): void {
  execFileSync('ip', ['link', 'set', device, state], { stdio: 'pipe' });
}

describe('failover across a real network partition (ip netns, veth, link down)', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  let server: ServerProcess;
  let work: string;
  let nsAgent: ChildProcess | undefined;
  let nsAgentDir: string;
  let nsOutput = '';
  let journal: string;
  let net: TestNetwork | undefined;
  // The cut-off node's namespace, its address, the host's address on its link, the link's host end.
  let NETNS = '';
  let NS_IP = '';
  let HOST_IP = '';
  let HOST_VETH = '';

  before(async () => {
    work = tempDir('netns');
    journal = path.join(work, 'solo.journal');
    // No default route: the cut-off node reaches only the server's address on its link.
    net = createTestNetwork(1, { tag: 'f', defaultRoute: false });
    ({ netns: NETNS, ip: NS_IP, hostVeth: HOST_VETH } = net.hosts[0]!);
    HOST_IP = net.hostIp;
    // All addresses: 127.0.0.1 for the test and the host agents, the veth address for the node
    // in the namespace (its certificate must name that address too).
    server = await startServer({ args: ['--bind-address', '0.0.0.0', '--tls-san', HOST_IP] });
    nsAgentDir = path.join(work, 'cut-agent');
    // `ip netns exec` execs the command in place: the PID is the agent's, for signals and cleanup.
    nsAgent = spawn(
      'ip',
      [
        'netns', 'exec', NETNS, process.execPath, DROVER_BIN, 'agent',
        '--server', `https://${HOST_IP}:${server.port}`,
        '--token', joinToken(server),
        '--data-dir', nsAgentDir,
        '--node-name', 'cut',
        '--agent-port', '0',
        '--node-ip', NS_IP,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    nsAgent.stdout!.on('data', (c: Buffer) => (nsOutput += c.toString()));
    nsAgent.stderr!.on('data', (c: Buffer) => (nsOutput += c.toString()));
    await waitForState(server, 'cut', 'Ready', 30_000).catch((error: unknown) => {
      throw new Error(`${String(error)}\nagent output:\n${nsOutput}`);
    });
    // The singleton starts while the namespaced node is the only one, so it runs there.
    await createObject(server, '/apis/apps/v1/namespaces/default/statefulsets', journalingSingleton('solo', journal));
    const [solo] = await waitForReadyPods(server, 'app=solo', 1);
    assert.equal(solo!.node, 'cut');
    for (const [i, name] of ['h1', 'h2'].entries()) {
      await startAgent({ server: { url: `https://127.0.0.1:${server.port}`, dataDir: server.dataDir }, name, args: ['--node-ip', `127.0.0.${i + 2}`] });
      await waitForState(server, name, 'Ready');
    }
  });

  after(async () => {
    if (nsAgent?.pid && nsAgent.exitCode === null) {
      try {
        process.kill(nsAgent.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    if (nsAgentDir) reapPods(nsAgentDir);
    await cleanupAgents();
    await cleanup(work);
    net?.remove();
  });

  it('link down: the cut-off copy fences itself, the replacement runs on a host node, the journal shows no overlap; link up cleans up', async (t) => {
    const [solo] = await waitForReadyPods(server, 'app=solo', 1);
    await eventually(() => readJournal(journal).find((c) => c.uid === solo!.uid && c.lines >= 10), 'the first copy journaling');
    const pids = containerPids(solo!);
    assert.ok(pids.length && pids.every(alive));
    const since = Date.now();
    link('down', HOST_VETH);
    const replacement = await eventually(
      async () => (await readyPods(server, 'app=solo')).find((p) => p.uid !== solo!.uid && p.node !== 'cut'),
      'a replacement on a host node',
      30_000,
    );
    t.diagnostic(`replacement ready ${((Date.now() - since) / 1000).toFixed(2)} s after the link went down, on ${replacement.node}`);
    assert.equal(nodeState((await getNode(server, 'cut'))!), 'Unavailable');
    // The agent in the namespace is alive and well, only cut off: its supervisor fenced the copy.
    assert.ok(nsAgent!.exitCode === null && alive(nsAgent!.pid!), 'the cut-off agent still runs');
    const supervisorLog = (): string => {
      try {
        return fs.readFileSync(path.join(nsAgentDir, 'agent', 'pods', solo!.uid, 'supervisor.log'), 'utf8');
      } catch (error) {
        return String(error);
      }
    };
    for (const pid of pids) assert.ok(!alive(pid), `the cut-off copy (pid ${pid}) was fenced; supervisor.log:\n${supervisorLog()}`);
    await eventually(() => readJournal(journal).find((c) => c.uid === replacement.uid && c.lines >= 10), 'the replacement journaling');
    const copies = readJournal(journal);
    const { maxOverlapMs, gapsMs } = journalOverlap(copies);
    t.diagnostic(`journal: max overlap ${maxOverlapMs} ms, handover gap ${gapsMs.join(', ')} ms`);
    assert.equal(maxOverlapMs, 0, JSON.stringify(copies));
    const state = JSON.parse(fs.readFileSync(path.join(nsAgentDir, 'agent', 'pods', solo!.uid, 'state.json'), 'utf8')) as {
      finishReason?: string;
      fenced?: { message: string };
    };
    assert.equal(state.finishReason, 'Fenced');
    assert.match(state.fenced!.message, /no confirmed lease renewal/);

    link('up', HOST_VETH);
    await waitForState(server, 'cut', 'Ready', 30_000);
    await eventually(() => !fs.existsSync(path.join(nsAgentDir, 'agent', 'pods', solo!.uid)), 'the fenced pod removed on the reconnected node', 20_000);
    assert.equal(journalOverlap(readJournal(journal)).maxOverlapMs, 0);
    assert.equal((await readyPods(server, 'app=solo'))[0]!.uid, replacement.uid, 'the replacement stays');
  });
});
