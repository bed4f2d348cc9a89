import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { reapPods } from './pods.js';
import { type ApiResponse, DROVER_BIN, eventually, request, tempDir, TEST_CLUSTER_ARGS } from './server.js';

/**
 * Test harness for multi-server clusters on managed etcd: `drover server` processes on their own
 * loopback addresses (127.0.0.N) with fixed ports, restarted on the same data dir; the etcd child
 * each one runs (found through `<data-dir>/server/etcd.pid`, checked against its command line, so
 * a recycled PID is never someone else's); HTTPS to any server's address; etcdctl against the
 * members. Every process is stopped by its PID and every data dir removed by cleanupCluster().
 */

export const LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases';
export const START_CEILING_MS = 60_000;

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export function tail(text: string, lines = 40): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Remembers whether a test of a suite failed, so that its after() keeps the servers' logs of a
 * failed run (dumpLogs): wrap each test body in `step`.
 */
export class FailureTracker {
  failed = false;

  readonly step =
    (body: (t: TestContext) => Promise<void>) =>
    async (t: TestContext): Promise<void> => {
      try {
        await body(t);
      } catch (error) {
        this.failed = true;
        throw error;
      }
    };
}

export { report } from './server.js';

/** Whether `pid` is a live process whose command line names `needle` (never someone else's). */
export function aliveWith(pid: number, needle: string): boolean {
  try {
    // A zombie has an empty command line: gone, for our purposes.
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle);
  } catch {
    return false;
  }
}

export async function waitGone(pid: number, needle: string, ceilingMs = 10_000): Promise<void> {
  const deadline = Date.now() + ceilingMs;
  while (aliveWith(pid, needle)) {
    if (Date.now() > deadline) throw new Error(`process ${pid} still alive after ${ceilingMs} ms`);
    await sleep(20);
  }
}

/**
 * Ports handed to a process that binds them later (etcd's client and peer ports) come from below
 * the kernel's ephemeral range (32768-60999 on Linux): a port taken from that range and released
 * could be given to any other test's `listen(0)` or outgoing connection before etcd binds it.
 */
const PICKED_PORTS = { from: 20_000, to: 32_000 };

/** A port free on both `ip` and 127.0.0.1 a moment ago (a managed etcd listens on both for clients). */
export async function freePortOn(ip: string): Promise<number> {
  const probe = (host: string, port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const server = net.createServer();
      server.unref();
      server.once('error', reject);
      server.listen(port, host, () => {
        const p = (server.address() as net.AddressInfo).port;
        server.close(() => resolve(p));
      });
    });
  for (let attempt = 0; ; attempt++) {
    const port = PICKED_PORTS.from + Math.floor(Math.random() * (PICKED_PORTS.to - PICKED_PORTS.from));
    try {
      await probe('127.0.0.1', port);
      await probe(ip, port);
      return port;
    } catch (error) {
      if (attempt > 100) throw error;
    }
  }
}

// -------------------------------------------------------------------------------------------------
// Processes

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ClusterProcess {
  pid: number;
  child: ChildProcess;
  output(): string;
  exited: Promise<Exit>;
  readonly hasExited: boolean;
}

/** One server of the cluster, across its restarts. */
export interface ClusterServer {
  /** Node name; its etcd member (if any) is `<name>-<first 8 hex digits of the server id>`. */
  name: string;
  ip: string;
  dataDir: string;
  httpsPort: number;
  /** Only servers that run an etcd member. */
  clientPort?: number;
  peerPort?: number;
  /** The current (or last) run. */
  proc?: ClusterProcess;
  /** Every output of every run (filled in at its exit, with how it ended), for failure messages. */
  runs: string[];
}

const procs = new Set<ClusterProcess>();
/** Every etcd child seen, with the data dir its command line names. */
const etcdPids = new Map<number, string>();
const dirs: string[] = [];

/** A temp dir removed by cleanupCluster(), after any etcd child running on it is stopped. */
export function clusterTempDir(prefix: string): string {
  const dir = tempDir(prefix);
  dirs.push(dir);
  return dir;
}

export function url(m: ClusterServer): string {
  assert.ok(m.httpsPort, `${m.name} has not reported its port yet`);
  return `https://${m.ip}:${m.httpsPort}`;
}

export function file(m: ClusterServer, rel: string): string {
  return fs.readFileSync(path.join(m.dataDir, rel), 'utf8');
}

function readEtcdPid(dataDir: string): number | undefined {
  const f = path.join(dataDir, 'server/etcd.pid');
  if (!fs.existsSync(f)) return undefined;
  const pid = Number(fs.readFileSync(f, 'utf8').trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** The PID of the server's etcd child (remembered, so cleanup reaps it even after the file is gone). */
export function etcdPidOf(m: ClusterServer): number | undefined {
  const pid = readEtcdPid(m.dataDir);
  if (pid !== undefined) etcdPids.set(pid, m.dataDir);
  return pid;
}

function etcdLog(m: ClusterServer): string {
  const f = path.join(m.dataDir, 'server/etcd.log');
  return fs.existsSync(f) ? tail(fs.readFileSync(f, 'utf8'), 15) : '(no etcd.log)';
}

export function spawnDrover(args: string[], env: NodeJS.ProcessEnv = process.env): ClusterProcess {
  // Servers run the suite's pods as processes, as startServer's do (a test's own flag comes after and wins).
  const withDefaults = args[0] === 'server' ? ['server', ...TEST_CLUSTER_ARGS, ...args.slice(1)] : args;
  const child = spawn(process.execPath, [DROVER_BIN, ...withDefaults], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  let hasExited = false;
  const proc: ClusterProcess = {
    pid: child.pid!,
    child,
    output: () => output,
    exited: new Promise<Exit>((resolve) =>
      child.once('exit', (code, signal) => {
        hasExited = true;
        procs.delete(proc);
        resolve({ code, signal });
      }),
    ),
    get hasExited() {
      return hasExited;
    },
  };
  procs.add(proc);
  return proc;
}

/** Start `drover <args>` as the next run of `m` and wait for "Drover server is ready". */
export async function startClusterServer(
  m: ClusterServer,
  args: string[],
  ceilingMs = START_CEILING_MS,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ port: number; ms: number }> {
  assert.ok(!m.proc || m.proc.hasExited, `${m.name} is already running`);
  const started = Date.now();
  const proc = spawnDrover(args, env);
  m.proc = proc;
  m.runs.push('');
  const runIndex = m.runs.length - 1;
  void proc.exited.then((e) => {
    m.runs[runIndex] = `${proc.output()}\n[test] process ${proc.pid} exited at ${new Date().toISOString()}: code ${e.code}, signal ${e.signal}\n`;
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`${m.name} was not ready after ${ceilingMs} ms; output:\n${tail(proc.output())}\netcd.log:\n${etcdLog(m)}`));
    }, ceilingMs);
    const check = (): void => {
      const line = proc.output().split('\n').find((l) => l.includes('Drover server is ready'));
      if (!line) return;
      clearTimeout(timer);
      proc.child.stdout!.off('data', check);
      resolve((JSON.parse(line) as { port: number }).port);
    };
    proc.child.stdout!.on('data', check);
    void proc.exited.then((e) => {
      clearTimeout(timer);
      reject(new Error(`${m.name} exited (code ${e.code}, signal ${e.signal}) before it was ready; output:\n${tail(proc.output())}\netcd.log:\n${etcdLog(m)}`));
    });
    check();
  });
  etcdPidOf(m);
  return { port, ms: Date.now() - started };
}

/**
 * What a server that joined through `--server` logged about its etcd join: how many times the
 * server it asked answered 503 (etcd refused a member for now) and how many promotion attempts
 * etcd refused, both waited out by the joiner itself. Undefined when it did not join as a learner.
 */
export function joinStats(output: string): { refusals: number; promotionRetries: number } | undefined {
  let refusals: number | undefined;
  let promotionRetries = 0;
  for (const line of output.split('\n')) {
    if (!line.includes('added as an etcd learner') && !line.includes('promoted to a voting etcd member')) continue;
    try {
      const parsed = JSON.parse(line) as { msg: string; refusals?: number; retries?: number };
      if (parsed.msg.startsWith('added as an etcd learner')) refusals = parsed.refusals ?? 0;
      else promotionRetries = parsed.retries ?? 0;
    } catch {
      // not a JSON line
    }
  }
  return refusals === undefined ? undefined : { refusals, promotionRetries };
}

/** Run a drover command that is expected to exit; SIGKILL after the ceiling. */
export async function runToExit(
  args: string[],
  ceilingMs = 60_000,
  env?: NodeJS.ProcessEnv,
): Promise<Exit & { output: string; ms: number }> {
  const started = Date.now();
  const proc = spawnDrover(args, env);
  const timer = setTimeout(() => {
    if (!proc.hasExited) process.kill(proc.pid, 'SIGKILL');
  }, ceilingMs);
  const exit = await proc.exited;
  clearTimeout(timer);
  return { ...exit, output: proc.output(), ms: Date.now() - started };
}

/** SIGTERM (planned stop): the server stops its etcd member itself, which is waited for too. */
export async function stopClusterServer(m: ClusterServer): Promise<Exit & { ms: number }> {
  const proc = m.proc!;
  const etcdPid = etcdPidOf(m);
  const started = Date.now();
  if (!proc.hasExited) process.kill(proc.pid, 'SIGTERM');
  const timer = setTimeout(() => !proc.hasExited && process.kill(proc.pid, 'SIGKILL'), 30_000);
  const exit = await proc.exited;
  clearTimeout(timer);
  if (etcdPid !== undefined) await waitGone(etcdPid, m.dataDir, 10_000);
  return { ...exit, ms: Date.now() - started };
}

/** SIGKILL the server, and (unless told otherwise) its etcd child too. */
export async function killClusterServer(m: ClusterServer, alsoEtcd = true): Promise<{ etcdPid: number | undefined }> {
  const proc = m.proc!;
  const etcdPid = etcdPidOf(m);
  process.kill(proc.pid, 'SIGKILL');
  if (alsoEtcd && etcdPid !== undefined && aliveWith(etcdPid, m.dataDir)) process.kill(etcdPid, 'SIGKILL');
  await proc.exited;
  if (alsoEtcd && etcdPid !== undefined) await waitGone(etcdPid, m.dataDir);
  return { etcdPid };
}

/** Where a failed run leaves every run's output and etcd log (the data dirs are removed). */
export function dumpLogs(prefix: string, servers: ClusterServer[], others: { name: string; output: string }[] = []): string {
  const out = path.join(tempDir(`${prefix}-failure`), 'logs.txt');
  const parts: string[] = [];
  for (const m of servers) {
    // A run's entry is filled in when it exits; the one still running is read live.
    m.runs.forEach((run, i) => parts.push(`===== ${m.name} run ${i + 1}\n${run || (m.proc?.output() ?? '')}`));
    const log = path.join(m.dataDir, 'server/etcd.log');
    parts.push(`===== ${m.name} etcd.log\n${fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '(none)'}`);
  }
  for (const other of others) parts.push(`===== ${other.name}\n${other.output}`);
  fs.writeFileSync(out, parts.join('\n'));
  return out;
}

/** SIGKILL every server still running and every etcd child left behind; remove the data dirs. */
export async function cleanupCluster(): Promise<void> {
  await Promise.all(
    [...procs].map(async (p) => {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      await p.exited;
    }),
  );
  // Orphaned etcd members (their server was SIGKILLed, or the test failed midway).
  for (const dir of dirs) {
    const pid = readEtcdPid(dir);
    if (pid !== undefined) etcdPids.set(pid, dir);
  }
  for (const [pid, dir] of etcdPids) {
    if (!aliveWith(pid, dir)) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
    await waitGone(pid, dir).catch(() => undefined);
  }
  // The servers' embedded agents started pod supervisors, which outlive them on purpose: reap
  // them (by PID, from the pod dirs) before the dirs that name them are gone.
  for (const dir of dirs) reapPods(dir);
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
}

// -------------------------------------------------------------------------------------------------
// The API, on any server's address

/** One HTTPS request on a fresh connection to `m`'s address, with the admin token unless told otherwise. */
export function api(
  m: ClusterServer,
  method: string,
  urlPath: string,
  options: { body?: unknown; token?: string | null; timeoutMs?: number } = {},
): Promise<ApiResponse> {
  // Read at every call: a server that joined or restarted may have just written them.
  const caPem = file(m, 'server/tls/server-ca.crt');
  const token = options.token === undefined ? file(m, 'server/cred/admin.token').trim() : options.token;
  return request({ port: m.httpsPort, token: '', caPem }, method, urlPath, {
    token,
    host: m.ip,
    agent: false,
    timeoutMs: options.timeoutMs ?? 5000,
    ...(options.body !== undefined ? { body: options.body } : {}),
  });
}

export function createLease(m: ClusterServer, name: string, timeoutMs = 5000): Promise<ApiResponse> {
  return api(m, 'POST', LEASES, {
    body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name }, spec: { holderIdentity: m.name } },
    timeoutMs,
  });
}

export async function mustCreateLease(m: ClusterServer, name: string): Promise<void> {
  const res = await createLease(m, name);
  assert.equal(res.status, 201, `create lease ${name} through ${m.name}: ${res.text}`);
}

// -------------------------------------------------------------------------------------------------
// etcdctl

/** etcdctl with `certsOf`'s etcd client certificate, against the members of `endpoints`. */
export function etcdctl(
  certsOf: ClusterServer,
  endpoints: ClusterServer[],
  args: string[],
  timeoutMs = 15_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const tls = path.join(certsOf.dataDir, 'server/tls/etcd');
  return new Promise((resolve) => {
    execFile(
      'etcdctl',
      [
        '--endpoints', endpoints.map((m) => `https://127.0.0.1:${m.clientPort}`).join(','),
        '--cacert', path.join(tls, 'ca.crt'),
        '--cert', path.join(tls, 'client.crt'),
        '--key', path.join(tls, 'client.key'),
        '--dial-timeout', '3s',
        '--command-timeout', '5s',
        ...args,
      ],
      { env: { ...process.env, ETCDCTL_API: '3' }, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

export interface EtcdMember {
  id: string;
  status: string;
  name: string;
  peerURL: string;
  clientURL: string;
  learner: string;
}

/** `etcdctl member list -w simple`: id, status, name, peer URLs, client URLs, is learner. */
export async function memberList(certsOf: ClusterServer, endpoints: ClusterServer[]): Promise<EtcdMember[]> {
  const out = await etcdctl(certsOf, endpoints, ['member', 'list', '-w', 'simple']);
  if (out.code !== 0) throw new Error(`etcdctl member list via ${endpoints.map((m) => m.name).join(',')}: ${out.stderr}`);
  return out.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [id, status, name, peerURL, clientURL, learner] = line.split(', ');
      return { id: id!, status: status!, name: name ?? '', peerURL: peerURL ?? '', clientURL: clientURL ?? '', learner: learner ?? '' };
    });
}

/** `etcdctl endpoint status --cluster -w simple`: the client URL of the raft leader. */
export async function leaderEndpoint(certsOf: ClusterServer, endpoints: ClusterServer[]): Promise<string> {
  const out = await etcdctl(certsOf, endpoints, ['endpoint', 'status', '--cluster', '-w', 'simple']);
  // With a member down, etcdctl exits non-zero but still prints the status of the others.
  for (const line of out.stdout.trim().split('\n')) {
    const fields = line.split(', ');
    if (fields[4] === 'true') return fields[0]!;
  }
  throw new Error(`etcdctl endpoint status: no leader in:\n${out.stdout}${out.stderr}`);
}

/**
 * The member list is exactly these servers, every one a started voting member named after its
 * node, with its peer and client URLs. Resolves with the list and how long it took to get there.
 */
export async function expectMembers(
  certsOf: ClusterServer,
  endpoints: ClusterServer[],
  members: ClusterServer[],
  what: string,
  ceilingMs = 30_000,
): Promise<{ list: EtcdMember[]; ms: number }> {
  const started = Date.now();
  let last: EtcdMember[] = [];
  try {
    const list = await eventually(
      async () => {
        last = await memberList(certsOf, endpoints);
        if (last.length !== members.length) return false;
        for (const m of members) {
          const found = last.find((e) => e.peerURL === `https://${m.ip}:${m.peerPort}`);
          if (!found || found.status !== 'started' || found.learner !== 'false') return false;
          if (!new RegExp(`^${m.name}-[0-9a-f]{8}$`).test(found.name)) return false;
          if (found.clientURL !== `https://${m.ip}:${m.clientPort}`) return false;
        }
        return last;
      },
      what,
      ceilingMs,
      100,
    );
    return { list, ms: Date.now() - started };
  } catch (error) {
    throw new Error(`${String(error)}; last member list ${JSON.stringify(last)}`);
  }
}
