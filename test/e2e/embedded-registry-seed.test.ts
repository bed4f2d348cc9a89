import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, joinSecret, nodeCaPem, runDrover, startAgent } from '../helpers/agent.js';
import {
  api,
  type ClusterServer,
  cleanupCluster,
  clusterTempDir,
  dumpLogs,
  FailureTracker,
  file,
  freePortOn,
  runToExit,
  startClusterServer,
  stopClusterServer,
  tail,
  url,
} from '../helpers/cluster.js';
import { droverFreeEnv, isolateFromDroverEnv } from '../helpers/config-env.js';
import { DROVER_BIN, eventually } from '../helpers/server.js';

/**
 * The seed scenario of the embedded registry (k3s issue 12753 / rke2 8465, docs/registry.md):
 * three etcd-only servers, one control-plane server, two agents. `embedded-registry: true` is only
 * in the local config files of e2 and of agent a1: exactly those two serve `/v2/` from their first
 * start; e1, e3, cp and a2 answer 404. Turning it on in e1's own file and restarting e1 turns it
 * on for e1 only (e3 and cp restarted after it stay off: nothing copies e1's value); restarting e2
 * again changes nothing; `drover config show` on each node names that node's own file.
 * Needs `etcd` and `npm run build`.
 */

const { suiteDir } = isolateFromDroverEnv('embedded-registry-seed');

interface Srv extends ClusterServer {
  role: 'etcd' | 'control-plane';
  clusterInit?: boolean;
  join?: { server: string; token: string };
  /** This server's own local config file. */
  config: string;
}

function settingFlags(m: Srv): string[] {
  return [
    '--data-dir', m.dataDir,
    '--https-listen-port', String(m.httpsPort),
    '--bind-address', m.ip,
    '--node-ip', m.ip,
    '--node-name', m.name,
    '--agent-port', '0',
    ...(m.clientPort ? ['--etcd-client-port', String(m.clientPort), '--etcd-peer-port', String(m.peerPort)] : []),
    '--role', m.role,
    ...(m.clusterInit ? ['--cluster-init'] : []),
    ...(m.join ? ['--token', m.join.token] : []),
    '-c', m.config,
  ];
}

async function startSrv(m: Srv): Promise<void> {
  const { port } = await startClusterServer(m, ['server', ...settingFlags(m), ...(m.join ? ['--server', m.join.server] : [])], 60_000, droverFreeEnv());
  if (m.httpsPort === 0) m.httpsPort = port;
}

/** The agent port from the current run's "agent is running" line (a server's own agent, or an agent's). */
function agentPortIn(output: string): number | undefined {
  const line = output.split('\n').find((l) => l.includes('agent is running'));
  return line ? (JSON.parse(line) as { agentPort: number }).agentPort : undefined;
}

function get(ip: string, port: number, ca: string, credential: { cert: string; key: string }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: ip, port, path: '/v2/', ca, agent: false, ...credential }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('embedded-registry seed scenario: three etcd-only servers, a control-plane server, two agents', () => {
  const servers: Srv[] = [];
  let e1: Srv;
  let e2: Srv;
  let e3: Srv;
  let cp: Srv;
  const agents: Record<string, { proc: AgentProcess; ip: string; config: string }> = {};
  let peer: { cert: string; key: string };
  let ca = '';
  const run = new FailureTracker();

  function newSrv(name: string, ip: string, role: Srv['role'], config: string): Srv {
    const dataDir = clusterTempDir(`seed-${name}`);
    const file = path.join(suiteDir, `${name}.yaml`);
    fs.writeFileSync(file, config);
    const m: Srv = { name, ip, dataDir, httpsPort: 0, role, runs: [], config: file };
    servers.push(m);
    return m;
  }

  before(async () => {
    if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
    // Every node has its own local file; only e2's and a1's turn the registry on.
    e1 = newSrv('e1', '127.0.0.61', 'etcd', '# e1\nnode-label: [seed=e1]\n');
    e2 = newSrv('e2', '127.0.0.62', 'etcd', 'embedded-registry: true\n');
    e3 = newSrv('e3', '127.0.0.63', 'etcd', '# e3\n');
    cp = newSrv('cp', '127.0.0.64', 'control-plane', '# cp\n');
    for (const m of [e1, e2, e3]) {
      m.clientPort = await freePortOn(m.ip);
      m.peerPort = await freePortOn(m.ip);
    }
  });

  after(async () => {
    if (run.failed) {
      const others = Object.entries(agents).map(([name, a]) => ({ name: `agent ${name}`, output: a.proc.output() }));
      process.stderr.write(`embedded-registry-seed: logs of the failed run in ${dumpLogs('embedded-registry-seed', servers, others)}\n`);
    }
    await cleanupAgents();
    await cleanupCluster();
  });

  /** /v2/ status of every node now, by name (each node's current agent port). */
  async function statuses(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const m of servers) {
      const port = await eventually(() => agentPortIn(m.proc!.output()), `${m.name}’s own agent running`, 90_000);
      out[m.name] = await get(m.ip, port, ca, peer);
    }
    for (const [name, a] of Object.entries(agents)) out[name] = await get(a.ip, agentPortIn(a.proc.output())!, ca, peer);
    return out;
  }

  async function restart(m: Srv): Promise<void> {
    const stopped = await stopClusterServer(m);
    assert.equal(stopped.code, 0, `${m.name} stopped cleanly: ${tail(m.proc!.output(), 10)}`);
    await startSrv(m);
  }

  async function shown(args: string[], env: Record<string, string> = {}): Promise<{ configFile: string; row: { value: string; source: string } }> {
    const out = await runToExit(['config', 'show', '--json', ...args], 30_000, droverFreeEnv(env));
    assert.equal(out.code, 0, out.output);
    const parsed = JSON.parse(out.output) as { configFile: string; settings: { key: string; value: string; source: string }[] };
    const row = parsed.settings.find((s) => s.key === 'embedded-registry');
    assert.ok(row, out.output);
    return { configFile: parsed.configFile, row: { value: row.value, source: row.source } };
  }

  it('exactly e2 and a1 serve /v2/ at their first start; then e1’s own file turns it on for e1 only; restarting e2 changes nothing; config show names each node’s own file', run.step(async () => {
    e1.clusterInit = true;
    await startSrv(e1);
    const token = file(e1, 'token').trim();
    for (const m of [e2, e3, cp]) m.join = { server: url(e1), token };
    await startSrv(e2);
    await startSrv(e3);
    await startSrv(cp);
    ca = nodeCaPem(e1);
    const agentToken = file(cp, 'agent-token').trim();
    for (const [name, ip, config] of [['a1', '127.0.0.65', 'embedded-registry: true\n'], ['a2', '127.0.0.66', '# a2\n']] as const) {
      const configFile = path.join(suiteDir, `${name}.yaml`);
      fs.writeFileSync(configFile, config);
      const proc = await startAgent({ server: { url: url(cp), dataDir: cp.dataDir }, name, token: agentToken, env: droverFreeEnv(), args: ['--node-ip', ip, '-c', configFile] });
      agents[name] = { proc, ip, config: configFile };
    }
    // What another node presents: a node certificate, as registration issues it.
    const registered = await api(cp, 'POST', '/drover/v1/register', {
      token: joinSecret(cp),
      body: { nodeName: 'seed-peer', nodeId: 'seed-peer-id', password: 'seed-peer-password-0123456789abcdef', addresses: ['127.0.0.1'] },
    });
    assert.equal(registered.status, 200, registered.text);
    const body = registered.json as { servingCertificate: string; servingKey: string };
    peer = { cert: body.servingCertificate, key: body.servingKey };

    assert.deepEqual(await statuses(), { e1: 404, e2: 200, e3: 404, cp: 404, a1: 200, a2: 404 }, 'first start');

    fs.writeFileSync(e1.config, '# e1\nnode-label: [seed=e1]\nembedded-registry: true\n');
    await restart(e1);
    // The others restarted after e1 keep their own value: nothing carries e1's over.
    await restart(e3);
    await restart(cp);
    assert.deepEqual(await statuses(), { e1: 200, e2: 200, e3: 404, cp: 404, a1: 200, a2: 404 }, 'after e1’s own file turned it on');
    await restart(e2);
    assert.deepEqual(await statuses(), { e1: 200, e2: 200, e3: 404, cp: 404, a1: 200, a2: 404 }, 'after e2 restarted again');

    for (const m of servers) {
      const result = await shown(settingFlags(m), m.join ? { DROVER_SERVER: m.join.server } : {});
      assert.equal(result.configFile, m.config, `${m.name} reads its own file`);
      const expected = m === e1 ? { value: 'true', source: `file:${e1.config}:3` } : m === e2 ? { value: 'true', source: `file:${e2.config}:1` } : { value: 'false', source: 'default' };
      assert.deepEqual(result.row, expected, m.name);
    }
    for (const [name, a] of Object.entries(agents)) {
      const result = await shown(['--agent', '-c', a.config], { DROVER_SERVER: url(cp), DROVER_TOKEN: agentToken });
      assert.equal(result.configFile, a.config, `${name} reads its own file`);
      assert.deepEqual(result.row, name === 'a1' ? { value: 'true', source: `file:${a.config}:1` } : { value: 'false', source: 'default' }, name);
    }
    // runDrover is the CLI as users run it: `config show` without --json names the file too.
    const plain = await runDrover(['config', 'show', '--agent', '-c', agents.a1!.config], 30_000, { env: droverFreeEnv({ DROVER_SERVER: url(cp), DROVER_TOKEN: agentToken }), cwd: suiteDir });
    assert.match(plain.stdout, new RegExp(`embedded-registry.*true.*file:${agents.a1!.config.replace(/[.]/g, '\\.')}:1`));
  }));
});
