import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, runDrover, STATE_LABEL, startAgent } from '../helpers/agent.js';
import {
  aliveWith,
  api,
  type ClusterServer,
  clusterTempDir,
  cleanupCluster,
  createLease,
  dumpLogs,
  etcdPidOf,
  expectMembers,
  FailureTracker,
  file,
  freePortOn,
  joinStats,
  killClusterServer,
  LEASES,
  leaderEndpoint,
  memberList,
  mustCreateLease,
  report,
  runToExit,
  sleep,
  startClusterServer,
  stopClusterServer,
  tail,
  url,
} from '../helpers/cluster.js';
import { runKubectl, MODERN_KUBECTL } from '../helpers/kubectl.js';
import { always, DROVER_BIN, eventually, tempDir } from '../helpers/server.js';

/**
 * Server roles, end to end, on one shared topology (the tests run in order and build on each other):
 *
 *   e1  --role etcd --cluster-init                     127.0.0.41   etcd member + supervisor, no Kubernetes API
 *   e2  --role etcd --server <e1> --token <e1 token>   127.0.0.42
 *   e3  --role etcd --server <e1> --token <e1 token>   127.0.0.43
 *   cp  --role control-plane --server <e1> --token T   127.0.0.44   API + controllers, no member
 *   a1  drover agent --server <cp> --token <agent token>  (node IP 127.0.0.45)
 *
 *   1. kubectl (through cp) lists the five nodes with their roles, all Ready; an etcd-only server
 *      answers the Kubernetes API with 404 but serves /readyz and /cacerts; three started members.
 *   2. supervisor-metrics is each node's own: e2 and e3 restarted with it serve /metrics at once,
 *      e1 does not until it is restarted with it too; `config show` agrees; nobody else is touched.
 *   3. The cluster-wide settings check holds on every role (etcd-only and control-plane: exit 78).
 *   4. The agent token registers nodes but cannot fetch the cluster identity.
 *   5. Bad role combinations exit 78 with a message.
 *   6. SIGKILL the etcd leader (an etcd-only server) and its etcd child: the API keeps serving; it rejoins.
 *   7. Deleting an etcd node's Node removes its etcd member.
 *
 * Every process is stopped by its PID: servers, the agent, and the etcd children a SIGKILLed server
 * leaves behind (found through `<data-dir>/server/etcd.pid`, checked against their command line).
 * Needs `etcd`, `etcdctl`, `kubectl` and `npm run build`.
 */

const EXIT_CONFIG = 78;
const READY_CEILING_MS = 60_000;
const KUBECTL = MODERN_KUBECTL;

// -------------------------------------------------------------------------------------------------
// Processes

interface Srv extends ClusterServer {
  /** 0 until the first start has reported its port; later starts reuse it, so the URL is stable. */
  httpsPort: number;
  role: 'etcd' | 'control-plane';
  clusterInit?: boolean;
  join?: { server: string; token: string };
  /** Node-scoped flags added along the way (e.g. --supervisor-metrics), kept for every later start. */
  extra: string[];
}

/** Background loops (samplers, writers) a failed test may leave running: after() stops them. */
const loops = new Set<{ stop(): Promise<void> }>();

/** The setting flags of a server (everything but `--server`, which `config show` takes from DROVER_SERVER). */
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
    ...m.extra,
  ];
}

function serverArgs(m: Srv, more: string[] = []): string[] {
  return ['server', ...settingFlags(m), ...(m.join ? ['--server', m.join.server] : []), ...more];
}

/** Start a server and wait for "Drover server is ready"; learns its port. Resolves with the time it took. */
async function startSrv(m: Srv): Promise<number> {
  const { port, ms } = await startClusterServer(m, serverArgs(m));
  if (m.httpsPort === 0) m.httpsPort = port;
  else assert.equal(port, m.httpsPort, `${m.name} came back on its port`);
  return ms;
}

/** Join through `m.join.server` (one start: the joiner waits out etcd's refusals itself); with its 503 refusals. */
async function joinSrv(m: Srv): Promise<{ ms: number; refusals: number }> {
  const ms = await startSrv(m);
  const stats = joinStats(m.proc!.output());
  assert.ok(stats, `${m.name} joined as an etcd learner`);
  return { ms, refusals: stats.refusals };
}

async function cleanupAll(): Promise<void> {
  await Promise.all([...loops].map((l) => l.stop()));
  await cleanupAgents();
  await cleanupCluster();
}

// -------------------------------------------------------------------------------------------------
// HTTPS

interface NodeObject {
  metadata: { name: string; labels?: Record<string, string> };
  spec?: { unschedulable?: boolean };
  status?: { conditions?: { type: string; status: string }[] };
}

async function listNodes(m: Srv, timeoutMs = 5000): Promise<NodeObject[]> {
  const res = await api(m, 'GET', '/api/v1/nodes', { timeoutMs });
  if (res.status !== 200) throw new Error(`list nodes through ${m.name}: HTTP ${res.status} ${res.text}`);
  return (res.json as { items: NodeObject[] }).items;
}

function isReady(n: NodeObject): boolean {
  return n.metadata.labels?.[STATE_LABEL] === 'Ready' && n.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
}

/** Every node in `names` is Ready (state label and condition) through `through`. */
async function allReady(through: Srv, names: string[], what: string, ceilingMs = READY_CEILING_MS): Promise<number> {
  const started = Date.now();
  let last: Record<string, string | undefined> = {};
  try {
    await eventually(
      async () => {
        const nodes = await listNodes(through);
        last = Object.fromEntries(nodes.map((n) => [n.metadata.name, n.metadata.labels?.[STATE_LABEL]]));
        return names.every((name) => {
          const node = nodes.find((n) => n.metadata.name === name);
          return node !== undefined && isReady(node);
        });
      },
      what,
      ceilingMs,
      200,
    );
  } catch (error) {
    throw new Error(`${String(error)}; last seen ${JSON.stringify(last)}`);
  }
  return Date.now() - started;
}

/** The warnings, errors and node-lifecycle lines of a JSON log between two times (for a failure's message). */
function noteworthy(log: string, from: number, to: number): string {
  const lines = log.split('\n').filter((line) => {
    try {
      const entry = JSON.parse(line) as { time?: string; level?: string; msg?: string };
      const at = Date.parse(entry.time ?? '');
      const interesting = entry.level === 'warn' || entry.level === 'error' || /lifecycle|lease|disruption|renew|etcd|watch/i.test(entry.msg ?? '');
      return at >= from - 5000 && at <= to && interesting;
    } catch {
      return false;
    }
  });
  return lines.slice(-40).join('\n') || '(none)';
}

/** Lists nodes through one server every 250 ms and records every node's state in every answer. */
class Sampler {
  readonly rounds: { time: number; states: Record<string, string | undefined> }[] = [];
  failures = 0;
  private running = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly through: Srv) {}

  start(): this {
    this.running = true;
    loops.add(this);
    this.loop = (async () => {
      while (this.running) {
        const started = Date.now();
        try {
          const nodes = await listNodes(this.through, 2000);
          if (this.running) {
            this.rounds.push({ time: Date.now(), states: Object.fromEntries(nodes.map((n) => [n.metadata.name, n.metadata.labels?.[STATE_LABEL]])) });
          }
        } catch {
          if (this.running) this.failures++;
        }
        const wait = 250 - (Date.now() - started);
        if (wait > 0) await sleep(wait);
      }
    })();
    return this;
  }

  async stop(): Promise<void> {
    this.running = false;
    loops.delete(this);
    await this.loop;
  }

  /** Rounds of [from, to] in which `node` was absent or not Ready. */
  notReady(node: string, from: number, to: number): { time: number; state: string | undefined }[] {
    return this.rounds
      .filter((r) => r.time >= from && r.time <= to && r.states[node] !== 'Ready')
      .map((r) => ({ time: r.time, state: node in r.states ? r.states[node] : '<absent>' }));
  }

  roundsIn(from: number, to: number): number {
    return this.rounds.filter((r) => r.time >= from && r.time <= to).length;
  }

  transitions(node: string, from: number, to: number): string[] {
    const out: string[] = [];
    for (const r of this.rounds) {
      if (r.time < from || r.time > to) continue;
      const label = node in r.states ? (r.states[node] ?? '<none>') : '<absent>';
      if (out[out.length - 1] !== label) out.push(label);
    }
    return out;
  }
}

// -------------------------------------------------------------------------------------------------
// kubectl

interface KubectlNode {
  name: string;
  status: string;
  roles: string;
}

async function kubectlNodes(cp: Srv): Promise<{ rows: KubectlNode[]; stdout: string }> {
  const cacheDir = tempDir('roles-kubectl-cache');
  try {
    const out = await runKubectl(KUBECTL, path.join(cp.dataDir, 'kubeconfig.yaml'), cacheDir, ['get', 'nodes'], { timeoutMs: 20_000 });
    if (out.code !== 0) throw new Error(`kubectl get nodes: exit ${out.code}: ${out.stderr}`);
    const lines = out.stdout.trim().split('\n');
    const header = lines[0]!.split(/\s+/);
    assert.deepEqual(header.slice(0, 3), ['NAME', 'STATUS', 'ROLES'], `kubectl header: ${lines[0]}`);
    const rows = lines.slice(1).map((line) => {
      const [name, status, roles] = line.split(/\s+/);
      return { name: name!, status: status!, roles: roles! };
    });
    return { rows, stdout: out.stdout };
  } finally {
    fs.rmSync(cacheDir, { recursive: true, force: true });
  }
}

async function kubectl(cp: Srv, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const cacheDir = tempDir('roles-kubectl-cache');
  try {
    return await runKubectl(KUBECTL, path.join(cp.dataDir, 'kubeconfig.yaml'), cacheDir, args, { timeoutMs: 30_000 });
  } finally {
    fs.rmSync(cacheDir, { recursive: true, force: true });
  }
}

// -------------------------------------------------------------------------------------------------

describe('server roles: three etcd-only servers, one control-plane-only server, one agent', () => {
  let e1: Srv;
  let e2: Srv;
  let e3: Srv;
  let cp: Srv;
  let etcdServers: Srv[];
  let all: Srv[];
  let agent: AgentProcess | undefined;
  let agentToken = '';
  const agentName = 'a1';
  const agentIp = '127.0.0.45';

  function newSrv(name: string, ip: string, role: Srv['role']): Srv {
    const dataDir = clusterTempDir(`roles-${name}`);
    return { name, ip, dataDir, httpsPort: 0, role, extra: [], runs: [] };
  }

  before(async () => {
    if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
    e1 = newSrv('e1', '127.0.0.41', 'etcd');
    e2 = newSrv('e2', '127.0.0.42', 'etcd');
    e3 = newSrv('e3', '127.0.0.43', 'etcd');
    cp = newSrv('cp', '127.0.0.44', 'control-plane');
    etcdServers = [e1, e2, e3];
    all = [e1, e2, e3, cp];
    for (const m of etcdServers) {
      m.clientPort = await freePortOn(m.ip);
      m.peerPort = await freePortOn(m.ip);
    }
  });

  const run = new FailureTracker();
  const step = run.step;

  after(async () => {
    if (run.failed) process.stderr.write(`roles: logs of the failed run in ${dumpLogs('roles', all ?? [], agent ? [{ name: 'agent a1', output: agent.output() }] : [])}\n`);
    await cleanupAll();
  });

  /** The PIDs of running servers, to check later that each is the same process and still ready. */
  function pidsOf(servers: Srv[]): Map<Srv, number> {
    return new Map(servers.map((m) => [m, m.proc!.pid]));
  }
  async function expectUntouched(before: Map<Srv, number>, what: string): Promise<void> {
    for (const [m, pid] of before) {
      assert.ok(!m.proc!.hasExited && m.proc!.pid === pid, `${m.name} kept running (same pid ${pid}) ${what}`);
      const ready = await api(m, 'GET', '/readyz');
      assert.equal(ready.status, 200, `${m.name} /readyz ${what}: ${ready.text}`);
    }
  }

  it('topology: kubectl through cp lists e1-e3 as etcd, cp as control-plane, the agent as <none>, all Ready; etcd-only servers serve no Kubernetes API; three started members', step(async (t) => {
    e1.clusterInit = true;
    const e1Ms = await startSrv(e1);
    const e1Token = file(e1, 'token').trim();
    assert.match(e1Token, /^D10[0-9a-f]{64}::server:.+$/);
    e2.join = { server: url(e1), token: e1Token };
    e3.join = { server: url(e1), token: e1Token };
    cp.join = { server: url(e1), token: e1Token };
    const j2 = await joinSrv(e2);
    const j3 = await joinSrv(e3);
    const cpMs = await startSrv(cp);
    assert.match(cp.proc!.output(), /control-plane only: using the cluster’s etcd members/);
    assert.ok(!fs.existsSync(path.join(cp.dataDir, 'server/etcd.pid')), 'cp runs no etcd member');
    assert.ok(!fs.existsSync(path.join(cp.dataDir, 'server/db/etcd/member')), 'cp holds no etcd data');
    const endpoints = JSON.parse(file(cp, 'server/etcd-endpoints.json')) as string[];
    assert.deepEqual(
      [...endpoints].sort(),
      etcdServers.map((m) => `https://${m.ip}:${m.clientPort}`).sort(),
      'cp learned the three members’ client URLs',
    );

    // The agent joins cp with the agent token (`drover token show --agent`).
    const shown = await runDrover(['token', 'show', '--agent', '--data-dir', cp.dataDir]);
    assert.equal(shown.code, 0, shown.stderr);
    agentToken = shown.stdout.trim();
    assert.match(agentToken, /^D10[0-9a-f]{64}::node:[0-9a-f]+$/);
    assert.equal(agentToken, file(cp, 'agent-token').trim());
    for (const m of etcdServers) assert.equal(file(m, 'agent-token').trim(), agentToken, `${m.name} has the same agent token`);
    const agentStarted = Date.now();
    agent = await startAgent({ server: { url: url(cp), dataDir: cp.dataDir }, name: agentName, token: agentToken, args: ['--node-ip', agentIp] });
    const agentMs = Date.now() - agentStarted;

    const names = [...all.map((m) => m.name), agentName];
    const readyStart = Date.now();
    let rows: KubectlNode[] = [];
    let stdout = '';
    await eventually(
      async () => {
        ({ rows, stdout } = await kubectlNodes(cp));
        return names.every((n) => rows.find((r) => r.name === n)?.status === 'Ready');
      },
      'kubectl: all five nodes Ready',
      READY_CEILING_MS,
      500,
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}; last output:\n${stdout}`);
    });
    const readyMs = Date.now() - readyStart;
    assert.equal(rows.length, 5, stdout);
    const byName = Object.fromEntries(rows.map((r) => [r.name, r]));
    for (const m of etcdServers) assert.equal(byName[m.name]!.roles, 'etcd', `ROLES of ${m.name}:\n${stdout}`);
    assert.equal(byName.cp!.roles, 'control-plane', stdout);
    assert.equal(byName[agentName]!.roles, '<none>', stdout);
    for (const n of names) assert.equal(byName[n]!.status, 'Ready', stdout);

    // The etcd-only servers' agents waited for a control-plane server (they started before cp).
    for (const m of etcdServers) {
      assert.match(m.proc!.output(), /etcd-only server: waiting for a control-plane server to register this node through/, `${m.name} said it waits`);
    }

    // An etcd-only server: no Kubernetes API (404 Status), but health and the CA are served.
    const ca = file(e1, 'server/tls/server-ca.crt');
    for (const m of etcdServers) {
      const nodes = await api(m, 'GET', '/api/v1/nodes');
      assert.equal(nodes.status, 404, `${m.name} /api/v1/nodes: ${nodes.text}`);
      const status = nodes.json as { kind?: string; code?: number; message?: string };
      assert.equal(status.kind, 'Status');
      assert.equal(status.code, 404);
      assert.match(status.message ?? '', /etcd-only/);
      const readyz = await api(m, 'GET', '/readyz', { token: null });
      assert.equal(readyz.status, 200, `${m.name} /readyz: ${readyz.text}`);
      const cacerts = await api(m, 'GET', '/cacerts', { token: null });
      assert.equal(cacerts.status, 200);
      assert.equal(cacerts.text.trim(), ca.trim(), `${m.name} serves the cluster CA`);
      // Every server has the same admin token.
      assert.equal(file(m, 'server/cred/admin.token'), file(e1, 'server/cred/admin.token'));
    }
    assert.equal(file(cp, 'server/cred/admin.token'), file(e1, 'server/cred/admin.token'));
    const e1Nodes = (await api(e1, 'GET', '/api/v1/nodes')).json as { message: string };

    const { list } = await expectMembers(e1, [e1], etcdServers, 'three started members');
    // A write through cp lands in the members' etcd.
    await mustCreateLease(cp, 'topology');

    report(
      t,
      `e1 (--cluster-init) ready in ${e1Ms} ms; e2 join ${j2.ms} ms, e3 join ${j3.ms} ms; cp ${cpMs} ms; agent ${agentMs} ms\n` +
        `join requests refused for now (503, waited out by the joiner): e2 ${j2.refusals}, e3 ${j3.refusals}\n` +
        `all five nodes Ready per kubectl ${readyMs} ms after the agent ran\n` +
        `kubectl get nodes:\n${stdout.trimEnd()}\n` +
        `e1 /api/v1/nodes: 404 "${e1Nodes.message}"\n` +
        `members: ${list.map((e) => `${e.name} ${e.status}`).join(', ')}`,
    );
  }));

  it('supervisor-metrics is each node’s own: e2, e3 restarted with it serve /metrics at once, e1 not until its own restart; config show agrees; the others are untouched', step(async (t) => {
    const token = file(e1, 'server/cred/admin.token').trim();
    const metrics = async (m: Srv): Promise<number> => (await api(m, 'GET', '/metrics', { token })).status;
    const expectMetrics = async (expected: Record<string, number>, what: string): Promise<void> => {
      for (const m of all) assert.equal(await metrics(m), expected[m.name], `/metrics on ${m.name} ${what}`);
    };
    const configShow = async (m: Srv): Promise<{ value: string; source: string }> => {
      // `config show` takes every server flag but --server (its own --server is a switch): DROVER_SERVER instead.
      const env = { ...process.env, ...(m.join ? { DROVER_SERVER: m.join.server } : {}) };
      const out = await runToExit(['config', 'show', '--json', ...settingFlags(m)], 30_000, env);
      assert.equal(out.code, 0, `config show for ${m.name}: ${out.output}`);
      const shown = JSON.parse(out.output) as { settings: { key: string; value: string; source: string }[] };
      const row = shown.settings.find((s) => s.key === 'supervisor-metrics');
      assert.ok(row, 'config show has supervisor-metrics');
      const role = shown.settings.find((s) => s.key === 'role');
      assert.equal(role?.value, m.role);
      return { value: row.value, source: row.source };
    };

    await expectMetrics({ e1: 404, e2: 404, e3: 404, cp: 404 }, 'before any restart');
    const sampler = new Sampler(cp).start();
    const steps: string[] = [];
    const nodesAll = [...all.map((m) => m.name), agentName];

    /** Restart `m` (SIGTERM, start with the same flags plus its extras): /metrics at the first request after ready. */
    const restart = async (m: Srv): Promise<void> => {
      const others = all.filter((o) => o !== m);
      const pids = pidsOf(others);
      const from = Date.now();
      const stopped = await stopClusterServer(m);
      assert.equal(stopped.code, 0, `${m.name} stopped cleanly: ${tail(m.proc!.output(), 10)}`);
      const ms = await startSrv(m);
      const first = await metrics(m);
      assert.equal(first, 200, `/metrics on ${m.name} at the first request after ready`);
      await expectMembers(e1, etcdServers.filter((o) => o !== m).slice(0, 1), etcdServers, `three started members after ${m.name}'s restart`);
      await allReady(cp, nodesAll, `all nodes Ready after ${m.name}'s restart`);
      const to = Date.now();
      await expectUntouched(pids, `while ${m.name} restarted`);
      // The other nodes stayed Ready in every round sampled through cp.
      for (const o of [...others.map((x) => x.name), agentName]) {
        const seen = sampler.notReady(o, from, to);
        // Seen once in a full CI run at load 3 and not since: say what cp and the agent logged then.
        if (seen.length > 0) {
          const logs = [`cp:\n${noteworthy(cp.proc!.output(), from, to)}`, `agent ${agentName}:\n${noteworthy(agent!.output(), from, to)}`];
          assert.fail(`${o} stayed Ready while ${m.name} restarted; seen ${JSON.stringify(seen)}; warnings and lifecycle lines meanwhile:\n${logs.join('\n')}`);
        }
      }
      steps.push(
        `${m.name} restart (${m.extra.join(' ')}): stop ${stopped.ms} ms, ready ${ms} ms, /metrics ${first} at once; ` +
          `${sampler.roundsIn(from, to)} rounds, ${m.name} node ${sampler.transitions(m.name, from, to).join(' → ')}`,
      );
    };

    // Each server's own local config file turns it on, as in k3s issue 12753's report.
    const localConfig = (m: Srv): string => {
      const file = path.join(m.dataDir, 'local-config.yaml');
      fs.writeFileSync(file, 'supervisor-metrics: true\n');
      m.extra.push('-c', file);
      return `file:${file}:1`;
    };
    const sources: Record<string, string> = {};
    sources.e2 = localConfig(e2);
    await restart(e2);
    await expectMetrics({ e1: 404, e2: 200, e3: 404, cp: 404 }, 'after e2’s restart');
    sources.e3 = localConfig(e3);
    await restart(e3);
    await expectMetrics({ e1: 404, e2: 200, e3: 200, cp: 404 }, 'after e3’s restart');
    assert.match(e2.proc!.output(), /supervisor metrics enabled on \/metrics/);
    assert.doesNotMatch(e1.proc!.output(), /supervisor metrics enabled/);

    const shown: Record<string, { value: string; source: string }> = {};
    for (const m of etcdServers) shown[m.name] = await configShow(m);
    assert.deepEqual(shown.e1, { value: 'false', source: 'default' });
    assert.deepEqual(shown.e2, { value: 'true', source: sources.e2 });
    assert.deepEqual(shown.e3, { value: 'true', source: sources.e3 });

    sources.e1 = localConfig(e1);
    await restart(e1);
    await expectMetrics({ e1: 200, e2: 200, e3: 200, cp: 404 }, 'after e1’s restart');
    assert.deepEqual(await configShow(e1), { value: 'true', source: sources.e1 });

    await restart(e2);
    await restart(e3);
    await expectMetrics({ e1: 200, e2: 200, e3: 200, cp: 404 }, 'after e2 and e3 restarted again');
    for (const m of etcdServers) assert.deepEqual(await configShow(m), { value: 'true', source: sources[m.name] });
    await sampler.stop();
    const text = (await api(e2, 'GET', '/metrics', { token })).text;
    assert.match(text, /^# (HELP|TYPE) /m, 'Prometheus text');

    report(
      t,
      `${steps.join('\n')}\nconfig show supervisor-metrics: ${Object.entries(shown).map(([k, v]) => `${k} ${v.value} (${v.source})`).join('; ')}\n` +
        `sampler through cp: ${sampler.rounds.length} rounds, ${sampler.failures} failed requests`,
    );
  }));

  it('the cluster-wide settings check holds on every role: a different node-monitor-grace-period exits 78 on an etcd-only and on the control-plane server', step(async (t) => {
    const lines: string[] = [];
    for (const m of [e2, cp]) {
      const stopped = await stopClusterServer(m);
      assert.equal(stopped.code, 0);
      const refused = await runToExit(serverArgs(m, ['--node-monitor-grace-period', '6s']));
      assert.equal(refused.code, EXIT_CONFIG, `${m.name}: exit 78; output:\n${tail(refused.output)}`);
      assert.match(
        refused.output,
        /node-monitor-grace-period: this server has 6s \(flag:--node-monitor-grace-period\), but the cluster has 4s/,
        `${m.name} names the key and both values:\n${tail(refused.output)}`,
      );
      // A refused etcd-only server stops the member it had started.
      const pid = etcdPidOf(m);
      if (m.role === 'etcd') assert.ok(pid === undefined || !aliveWith(pid, m.dataDir), `${m.name}'s refused start left its etcd child ${pid} running`);
      assert.ok(!/Drover server is ready/.test(refused.output), `${m.name} never became ready`);
      lines.push(`${m.name}: exit ${refused.code} after ${refused.ms} ms: ${refused.output.split('\n').find((l) => l.includes('this server has 6s'))?.trim()}`);
      const back = await startSrv(m);
      lines.push(`${m.name}: normal restart ready in ${back} ms`);
      if (m === e2) await expectMembers(e1, [e1], etcdServers, 'three started members after e2 is back');
      // Its node (and every other) Ready again before the next server goes down: an etcd-only server's
      // embedded agent registers through cp, and does not survive cp going away mid-start (see the report).
      const readyMs = await allReady(cp, [...all.map((o) => o.name), agentName], `all nodes Ready after ${m.name} is back`);
      lines.push(`${m.name}: all nodes Ready ${readyMs} ms after it was back`);
    }
    await mustCreateLease(cp, 'after-refusals');
    report(t, lines.join('\n'));
  }));

  it('the agent token registers nodes but cannot fetch the cluster identity', step(async (t) => {
    const agentSecret = agentToken.slice(agentToken.lastIndexOf(':') + 1);
    const serverToken = file(e1, 'token').trim();
    const serverSecret = serverToken.slice(serverToken.lastIndexOf(':') + 1);
    assert.notEqual(agentSecret, serverSecret);
    const withAgent = await api(e1, 'GET', '/drover/v1/bootstrap', { token: agentSecret });
    assert.equal(withAgent.status, 401, `bootstrap with the agent secret: ${withAgent.text}`);
    const withServer = await api(e1, 'GET', '/drover/v1/bootstrap', { token: serverSecret });
    assert.equal(withServer.status, 200, `bootstrap with the server secret: ${withServer.text}`);
    assert.ok(withServer.text.length > 0);
    assert.ok(!withServer.text.includes(file(e1, 'server/cred/admin.token').trim()), 'the identity is sealed');
    // Nor may it add etcd members or list them.
    const addWithAgent = await api(e1, 'POST', '/drover/v1/etcd/members', { token: agentSecret, body: { name: 'x-00000000', peerURL: 'https://127.0.0.99:1' } });
    assert.equal(addWithAgent.status, 401, addWithAgent.text);
    const endpointsWithAgent = await api(e1, 'GET', '/drover/v1/etcd/endpoints', { token: agentSecret });
    assert.equal(endpointsWithAgent.status, 401, endpointsWithAgent.text);
    // The same on the control-plane server.
    const cpBootstrap = await api(cp, 'GET', '/drover/v1/bootstrap', { token: agentSecret });
    assert.equal(cpBootstrap.status, 401);
    // The agent joined with it: it is registered and Ready.
    assert.ok(agent && !agent.hasExited, 'the agent runs');
    assert.match(agent.output(), /agent is running/);
    await allReady(cp, [agentName], `${agentName} is Ready`);
    await expectMembers(e1, [e1], etcdServers, 'no member added by the agent token');
    report(t, `bootstrap on e1: agent secret ${withAgent.status}, server secret ${withServer.status} (${withServer.text.length} bytes sealed); etcd/members ${addWithAgent.status}, etcd/endpoints ${endpointsWithAgent.status} with the agent secret`);
  }));

  it('bad role combinations exit 78 with a message', step(async (t) => {
    const cases: { args: string[]; message: RegExp }[] = [
      {
        args: ['--role', 'control-plane', '--cluster-init'],
        message: /role control-plane \(flag:--role\) runs no etcd member, so it cannot be the first server \(cluster-init, flag:--cluster-init\)/,
      },
      { args: ['--role', 'etcd'], message: /role etcd \(flag:--role\) needs cluster-init \(a new cluster\) or server \(join one\)/ },
      { args: ['--role', 'control-plane'], message: /role control-plane \(flag:--role\) needs server \(a server of the cluster to join\) or datastore-endpoint/ },
      { args: ['--role', 'etcd', '--cluster-init', '--datastore-endpoint', 'etcd://127.0.0.1:1'], message: /role etcd \(flag:--role\) runs a managed etcd member, so it cannot use datastore-endpoint/ },
      { args: ['--role', 'worker'], message: /--role: expected one of all, etcd, control-plane, got "worker"/ },
    ];
    const lines: string[] = [];
    for (const c of cases) {
      const dataDir = path.join(clusterTempDir('roles-bad'), 'data');
      const out = await runToExit(['server', '--data-dir', dataDir, '--bind-address', '127.0.0.46', '--https-listen-port', '0', '--disable-agent', ...c.args], 30_000);
      assert.equal(out.code, EXIT_CONFIG, `${c.args.join(' ')}: exit 78; output:\n${out.output}`);
      assert.match(out.output, /invalid configuration/);
      assert.match(out.output, c.message, `${c.args.join(' ')}:\n${out.output}`);
      assert.ok(!fs.existsSync(dataDir), `${c.args.join(' ')}: nothing written`);
      lines.push(`${c.args.join(' ')} → ${out.code} in ${out.ms} ms: ${out.output.split('\n').filter((l) => l.startsWith('  ')).map((l) => l.trim()).join(' | ')}`);
    }
    report(t, lines.join('\n'));
  }));

  it('SIGKILL the etcd leader (an etcd-only server) and its etcd child: the API through cp keeps serving; it restarts and rejoins', step(async (t) => {
    const leaderUrl = await leaderEndpoint(e1, etcdServers);
    const victim = etcdServers.find((m) => leaderUrl === `https://${m.ip}:${m.clientPort}`);
    assert.ok(victim, `leader ${leaderUrl} is one of the etcd-only servers`);
    const survivors = etcdServers.filter((m) => m !== victim);
    const pids = pidsOf([...survivors, cp]);

    // A writer through cp: one lease update every 200 ms, timing every outcome.
    await mustCreateLease(cp, 'writer');
    let writing = true;
    const writes: { at: number; ok: boolean; ms: number }[] = [];
    let writer: Promise<void> | undefined;
    const writerLoop = {
      stop: async (): Promise<void> => {
        writing = false;
        loops.delete(writerLoop);
        await writer;
      },
    };
    loops.add(writerLoop);
    writer = (async () => {
      for (let i = 0; writing; i++) {
        const started = Date.now();
        try {
          const got = await api(cp, 'GET', `${LEASES}/writer`, { timeoutMs: 3000 });
          if (got.status !== 200) throw new Error(`GET ${got.status}`);
          const lease = got.json as { spec: Record<string, unknown> };
          lease.spec.holderIdentity = `w${i}`;
          const put = await api(cp, 'PUT', `${LEASES}/writer`, { body: lease, timeoutMs: 3000 });
          writes.push({ at: started, ok: put.status === 200, ms: Date.now() - started });
        } catch {
          writes.push({ at: started, ok: false, ms: Date.now() - started });
        }
        const wait = 200 - (Date.now() - started);
        if (wait > 0) await sleep(wait);
      }
    })();

    await sleep(600);
    const killedAt = Date.now();
    const { etcdPid } = await killClusterServer(victim);
    assert.ok(etcdPid !== undefined && !aliveWith(etcdPid, victim.dataDir), 'the etcd child is gone');

    // Reads and writes through cp.
    const firstWrite = await eventually(
      async () => {
        const res = await createLease(cp, `after-kill-${victim.name}`, 3000);
        if (res.status === 201 || res.status === 409) return Date.now() - killedAt;
        throw new Error(`HTTP ${res.status} ${res.text}`);
      },
      'a write through cp after the kill',
      30_000,
      100,
    );
    const nodes = await listNodes(cp);
    assert.ok(nodes.length >= 5, 'nodes listed through cp');
    const kc = await kubectlNodes(cp);
    assert.ok(kc.rows.length >= 5, `kubectl get nodes through cp with ${victim.name} down:\n${kc.stdout}`);
    // Writes through cp succeed again: three in a row, polled rather than slept for.
    await eventually(() => {
      const recent = writes.slice(-3);
      return recent.length === 3 && recent.every((w) => w.ok && w.at >= killedAt);
    }, 'three writes in a row through cp after the kill', 30_000);
    await writerLoop.stop();
    // Every write that was in flight at the kill or started after it.
    const afterKill = writes.filter((w) => w.at + w.ms >= killedAt);
    const failedAfter = afterKill.filter((w) => !w.ok).length;
    assert.ok(afterKill.length >= 3, 'the writer ran after the kill');
    const slowest = Math.max(...afterKill.map((w) => w.ms));

    const restartMs = await startSrv(victim);
    assert.match(victim.proc!.output(), /"mode":"restart"[^\n]*managed etcd member is up/);
    const { ms: membersMs } = await expectMembers(survivors[0]!, [survivors[0]!], etcdServers, 'three started members after the restart');
    const readyMs = await allReady(cp, [victim.name], `node ${victim.name} Ready again`);
    await allReady(cp, [...all.map((m) => m.name), agentName], 'all nodes Ready');
    await expectUntouched(pids, `while ${victim.name} was killed and restarted`);
    await mustCreateLease(cp, `after-restart-${victim.name}`);

    report(
      t,
      `killed ${victim.name} (etcd leader ${leaderUrl}) and its etcd child ${etcdPid}\n` +
        `first successful write through cp ${firstWrite} ms after the kill; writer (GET+PUT every 200 ms): ${afterKill.length} writes in flight at or after the kill, ${failedAfter} failed, slowest ${slowest} ms\n` +
        `restart to ready ${restartMs} ms; three started members ${membersMs} ms later; node ${victim.name} Ready ${readyMs} ms after that`,
    );
  }));

  it('deleting an etcd node’s Node removes its member: e3 stopped keeps its member; kubectl delete node e3 removes it; the API keeps working', step(async (t) => {
    const stopped = await stopClusterServer(e3);
    assert.equal(stopped.code, 0);
    const still = await memberList(e1, [e1, e2]);
    assert.equal(still.length, 3, `e3's member stays while e3 is only stopped: ${JSON.stringify(still)}`);
    assert.ok(still.some((e) => e.name.startsWith('e3-')));
    await always(async () => (await memberList(e1, [e1, e2])).length === 3, 'three members while e3 is only stopped', 1000, 200);

    const deletedAt = Date.now();
    const del = await kubectl(cp, ['delete', 'node', 'e3']);
    assert.equal(del.code, 0, `kubectl delete node e3: ${del.stderr}`);
    const deleteMs = Date.now() - deletedAt;
    const { list, ms } = await expectMembers(e1, [e1, e2], [e1, e2], 'two members (e1, e2) after the Node was deleted', 15_000);
    const removedMs = Date.now() - deletedAt;
    assert.match(cp.proc!.output(), /removed the etcd member of a deleted node/);

    await mustCreateLease(cp, 'after-member-removal');
    const { rows, stdout } = await kubectlNodes(cp);
    assert.deepEqual(rows.map((r) => r.name).sort(), ['a1', 'cp', 'e1', 'e2'], stdout);
    await allReady(cp, ['e1', 'e2', 'cp', agentName], 'the remaining nodes Ready');
    report(t, `kubectl delete node e3: ${deleteMs} ms; members ${list.map((e) => e.name).join(', ')} ${removedMs} ms after the delete began (${ms} ms after kubectl returned)`);
  }));
});
