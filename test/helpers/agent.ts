import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { after, before } from 'node:test';
import { API_SERVER_CLIENT_NAME } from '../../src/cluster/drover-endpoints.js';
import { issueCertificate } from '../../src/security/pki.js';
import { type EtcdServer, startEtcd } from './etcd.js';
import { reapPods } from './pods.js';
import { cleanup, DROVER_BIN, request, type ServerProcess, startServer, type StartOptions, tempDir } from './server.js';

/**
 * Test harness for nodes: real `drover agent` child processes joining a test server, each with
 * its own temporary data dir (unless told otherwise), stopped by PID; a sampler that records the
 * state of every node several times a second, so a test can claim "never" and "throughout"; and
 * small helpers to read a node's state and pick a free port.
 */

export const STATE_LABEL = 'drover.io/state';

/** What an agent needs from its server: where it is, and where its join token lives. */
export type ServerTarget = Pick<ServerProcess, 'url' | 'dataDir'>;
/** What `request()` needs. */
export type ApiTarget = Pick<ServerProcess, 'port' | 'token' | 'caPem'>;

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Date.now() when the test process saw the exit. */
  at: number;
}

export interface AgentProcess {
  name: string;
  dataDir: string;
  pid: number;
  process: ChildProcess;
  output(): string;
  /** SIGTERM (or the given signal), then wait for exit; SIGKILL after the ceiling. */
  stop(signal?: NodeJS.Signals, ceilingMs?: number): Promise<ExitInfo>;
  exited: Promise<ExitInfo>;
  /** Whether the process has exited (as far as this process has seen). */
  readonly hasExited: boolean;
}

export interface StartAgentOptions {
  server: ServerTarget;
  name: string;
  /** Defaults to a fresh temp dir, removed by cleanupAgents(). */
  dataDir?: string;
  /** Extra arguments after the defaults (`--agent-port 0 --node-ip 127.0.0.1`). */
  args?: string[];
  /** Join token; defaults to the contents of `<server.dataDir>/token`. */
  token?: string;
  /** Pass `--token-file <file>` instead of a `--token` (which every local user can read in ps). */
  tokenFile?: string;
  /** The agent's environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** How long startAgent waits for "agent is running" (60 s: a ceiling for a loaded machine, not a figure). */
  timeoutMs?: number;
  /**
   * Run the agent in this network namespace (`nsenter --net`, which execs in place: the PID is the
   * agent's; not `ip netns exec`, whose fresh /sys hides the cgroup mounts runc needs). Pass its
   * `--node-ip` in `args`.
   */
  netns?: string;
}

const runningAgents = new Set<AgentProcess>();
const ownedDirs = new Set<string>();
/** Every agent data dir used, so cleanup can reap the pods they left running. */
const agentDataDirs = new Set<string>();

export function joinToken(server: Pick<ServerProcess, 'dataDir'>): string {
  return fs.readFileSync(path.join(server.dataDir, 'token'), 'utf8').trim();
}

/** The node CA of a server's cluster: what agents' serving certificates are checked against. */
export function nodeCaPem(server: Pick<ServerProcess, 'dataDir'>): string {
  return fs.readFileSync(path.join(server.dataDir, 'server', 'tls', 'node-ca.crt'), 'utf8');
}

/**
 * A client certificate for an agent's endpoint, from the cluster's client CA (as the server
 * keeps it in its data dir): as an administrator (system:masters), as the API servers, or as a
 * user with no group.
 */
export async function agentClientCertificate(
  server: Pick<ServerProcess, 'dataDir'>,
  as: 'admin' | 'apiserver' | 'user',
): Promise<{ cert: string; key: string }> {
  const tls = path.join(server.dataDir, 'server', 'tls');
  const clientCa = {
    certificatePem: fs.readFileSync(path.join(tls, 'client-ca.crt'), 'utf8'),
    privateKeyPem: fs.readFileSync(path.join(tls, 'client-ca.key'), 'utf8'),
  };
  const pair = await issueCertificate(clientCa, {
    commonName: as === 'apiserver' ? API_SERVER_CLIENT_NAME : `test-${as}`,
    ...(as === 'admin' ? { organization: 'system:masters' } : {}),
    usage: 'client',
  });
  return { cert: pair.certificatePem, key: pair.privateKeyPem };
}

/** The join token's secret, the part after the last ':' (what POST /drover/v1/register takes). */
export function joinSecret(server: Pick<ServerProcess, 'dataDir'>): string {
  const token = joinToken(server);
  return token.slice(token.lastIndexOf(':') + 1);
}

/**
 * Register a node by hand, as an agent would (`POST /drover/v1/register` with the join secret),
 * and return the node credential it is given. The same password registers the same name again.
 */
export async function registerNode(
  server: ApiTarget & Pick<ServerProcess, 'dataDir'>,
  nodeName: string,
  password: string,
  nodeId: string = randomUUID(),
): Promise<string> {
  const res = await request(server, 'POST', '/drover/v1/register', {
    token: joinSecret(server),
    body: { nodeName, nodeId, password },
  });
  if (res.status !== 200) throw new Error(`registering ${nodeName}: HTTP ${res.status} ${res.text}`);
  const token = (res.json as { token?: unknown }).token;
  if (typeof token !== 'string' || !token) throw new Error(`registering ${nodeName}: no credential in ${res.text}`);
  return token;
}

/** Spawn `drover agent` and return at once (the agent may still be joining, or about to fail). */
export function spawnAgent(options: StartAgentOptions): AgentProcess {
  if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
  let dataDir = options.dataDir;
  if (!dataDir) {
    dataDir = tempDir(`agent-${options.name}`);
    ownedDirs.add(dataDir);
  }
  agentDataDirs.add(dataDir);
  const child = spawn(
    options.netns ? 'nsenter' : process.execPath,
    [
      ...(options.netns ? [`--net=/run/netns/${options.netns}`, '--', process.execPath] : []),
      DROVER_BIN,
      'agent',
      '--server',
      options.server.url,
      ...(options.tokenFile ? ['--token-file', options.tokenFile] : ['--token', options.token ?? joinToken(options.server)]),
      '--data-dir',
      dataDir,
      '--node-name',
      options.name,
      '--agent-port',
      '0',
      '--node-ip',
      '127.0.0.1',
      ...(options.args ?? []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], ...(options.env ? { env: options.env } : {}) },
  );
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let hasExited = false;
  const exited = new Promise<ExitInfo>((resolve) =>
    child.once('exit', (code, signal) => {
      hasExited = true;
      resolve({ code, signal, at: Date.now() });
    }),
  );
  const agent: AgentProcess = {
    name: options.name,
    dataDir,
    pid: child.pid!,
    process: child,
    output: () => output,
    exited,
    get hasExited() {
      return hasExited;
    },
    stop: async (signal: NodeJS.Signals = 'SIGTERM', ceilingMs = 15_000) => {
      if (!hasExited) {
        process.kill(child.pid!, signal);
        const timer = setTimeout(() => {
          if (!hasExited) process.kill(child.pid!, 'SIGKILL');
        }, ceilingMs);
        const info = await exited;
        clearTimeout(timer);
        runningAgents.delete(agent);
        return info;
      }
      runningAgents.delete(agent);
      return exited;
    },
  };
  runningAgents.add(agent);
  void exited.then(() => runningAgents.delete(agent));
  return agent;
}

/** Spawn `drover agent` and wait for its "agent is running" log line. */
export async function startAgent(options: StartAgentOptions): Promise<AgentProcess> {
  const agent = spawnAgent(options);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`agent ${options.name} did not start in time; output:\n${agent.output()}`));
    }, options.timeoutMs ?? 60_000);
    const check = (): void => {
      if (!agent.output().includes('agent is running')) return;
      clearTimeout(timer);
      agent.process.stdout!.off('data', check);
      resolve();
    };
    agent.process.stdout!.on('data', check);
    void agent.exited.then((info) => {
      clearTimeout(timer);
      reject(new Error(`agent ${options.name} exited (code ${info.code}, signal ${info.signal}) before it was running; output:\n${agent.output()}`));
    });
    check();
  });
  return agent;
}

/** The agent's exit, or a failure naming its output if it still runs after `ceilingMs` (a safety ceiling). */
export async function exitWithin(agent: AgentProcess, ceilingMs = 30_000): Promise<ExitInfo> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      agent.exited,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`agent ${agent.name} still runs after ${ceilingMs} ms; output:\n${agent.output()}`)), ceilingMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** SIGKILL every agent this process started (SIGCONT first, in case one is stopped) and remove their temp dirs. */
export async function cleanupAgents(): Promise<void> {
  await Promise.all(
    [...runningAgents].map(async (agent) => {
      try {
        process.kill(agent.pid, 'SIGCONT');
      } catch {
        // already gone
      }
      await agent.stop('SIGKILL');
    }),
  );
  for (const dir of agentDataDirs) reapPods(dir);
  // Retried: a process killed just now may still be closing files in the dir; and reaped once
  // more before the last try, for a supervisor that started as the first reaping ran.
  for (const dir of ownedDirs) {
    try {
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    } catch {
      for (const data of agentDataDirs) reapPods(data);
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  }
  agentDataDirs.clear();
  ownedDirs.clear();
}

/** A TCP port that was free a moment ago (listen on 0, read the port, close). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Run `drover <args>` to completion (SIGKILL after the ceiling). */
const runningCli = new Set<ChildProcess>();

/**
 * `node dist/cli/main.js <args>` to completion; SIGKILL (by PID) after the ceiling, a generous one:
 * on a loaded 2-core machine loading the CLI alone has taken tens of seconds.
 */
export function runDrover(
  args: string[],
  timeoutMs = 120_000,
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [DROVER_BIN, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(options.env ? { env: options.env } : {}),
      ...(options.cwd ? { cwd: options.cwd } : {}),
    });
    runningCli.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      runningCli.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** For after hooks: kill (by PID) any CLI run a test abandoned midway. */
export function killRunningDrover(): void {
  for (const child of runningCli) {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
  }
}

// ---------------------------------------------------------------------------------------------
// Reading nodes

export interface NodeCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastHeartbeatTime?: string;
  lastTransitionTime?: string;
}

export interface NodeTaint {
  key: string;
  value?: string;
  effect: string;
  timeAdded?: string;
}

export interface NodeObject {
  metadata: {
    name: string;
    uid: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: { unschedulable?: boolean; taints?: NodeTaint[]; providerID?: string };
  status?: {
    conditions?: NodeCondition[];
    addresses?: { type: string; address: string }[];
  };
}

export function nodeState(node: NodeObject): string | undefined {
  return node.metadata.labels?.[STATE_LABEL];
}

export function readyCondition(node: NodeObject): NodeCondition | undefined {
  return node.status?.conditions?.find((c) => c.type === 'Ready');
}

export async function getNode(server: ApiTarget, name: string): Promise<NodeObject | undefined> {
  const res = await request(server, 'GET', `/api/v1/nodes/${name}`);
  if (res.status === 404) return undefined;
  if (res.status !== 200) throw new Error(`GET node ${name}: HTTP ${res.status} ${res.text}`);
  return res.json as NodeObject;
}

export async function listNodes(server: ApiTarget): Promise<NodeObject[]> {
  const res = await request(server, 'GET', '/api/v1/nodes');
  if (res.status !== 200) throw new Error(`GET nodes: HTTP ${res.status} ${res.text}`);
  return (res.json as { items: NodeObject[] }).items;
}

/**
 * Poll one node every `intervalMs` until `predicate` holds; resolve with the node and the
 * Date.now() of the response that showed it. Polls tightly, so measured times are accurate to
 * about one interval plus one request.
 */
export async function waitForNode(
  server: ApiTarget,
  name: string,
  predicate: (node: NodeObject) => boolean,
  what: string,
  timeoutMs = 20_000,
  intervalMs = 50,
): Promise<{ node: NodeObject; at: number }> {
  const deadline = Date.now() + timeoutMs;
  let last: NodeObject | undefined;
  let lastError: unknown;
  for (;;) {
    try {
      last = await getNode(server, name);
      const at = Date.now();
      if (last && predicate(last)) return { node: last, at };
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for node ${name}: ${what}; last state ${
          last ? `${nodeState(last)} ${JSON.stringify(readyCondition(last))}` : 'absent'
        }${lastError ? `; last error: ${String(lastError)}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function waitForState(server: ApiTarget, name: string, state: string, timeoutMs = 20_000) {
  return waitForNode(server, name, (n) => nodeState(n) === state, `state ${state}`, timeoutMs);
}

// ---------------------------------------------------------------------------------------------
// Sampling

export interface Sample {
  /** Date.now() when the list answered. */
  time: number;
  node: string;
  state: string | undefined;
}

/**
 * Lists nodes every `intervalMs` and records (time, node, drover.io/state) for every node in
 * every answer. Requests that fail or time out (the server is down or stopped) are counted and
 * otherwise ignored. `rounds` holds the time of every successful list, so "throughout" can be
 * checked as "in every round of the window, present and in that state".
 */
export class NodeSampler {
  readonly samples: Sample[] = [];
  readonly rounds: number[] = [];
  failures = 0;
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly agent = new https.Agent({ keepAlive: true });

  constructor(
    private readonly server: ApiTarget,
    private readonly intervalMs = 200,
    private readonly requestTimeoutMs = 2000,
  ) {}

  start(): this {
    if (this.running) return this;
    this.running = true;
    this.loop = this.run();
    return this;
  }

  async stop(): Promise<void> {
    this.running = false;
    this.agent.destroy();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (this.running) {
      const started = Date.now();
      try {
        let timer: NodeJS.Timeout | undefined;
        const res = await Promise.race([
          request(this.server, 'GET', '/api/v1/nodes', { agent: this.agent }),
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error('sampler request timed out')), this.requestTimeoutMs);
          }),
        ]).finally(() => clearTimeout(timer));
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
        const time = Date.now();
        if (!this.running) break;
        this.rounds.push(time);
        for (const node of (res.json as { items: NodeObject[] }).items) {
          this.samples.push({ time, node: node.metadata.name, state: nodeState(node) });
        }
      } catch {
        if (this.running) this.failures++;
      }
      const wait = this.intervalMs - (Date.now() - started);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }

  /** The node's state in every successful round of [from, to]; `undefined` where it was absent. */
  statesOf(node: string, from = 0, to = Infinity): (string | undefined)[] {
    const byTime = new Map<number, string | undefined>();
    for (const s of this.samples) if (s.node === node && s.time >= from && s.time <= to) byTime.set(s.time, s.state);
    return this.rounds.filter((t) => t >= from && t <= to).map((t) => (byTime.has(t) ? byTime.get(t) : '<absent>'));
  }

  roundsIn(from = 0, to = Infinity): number {
    return this.rounds.filter((t) => t >= from && t <= to).length;
  }

  /** Every state the node was seen in, in order, collapsed (e.g. Ready → NotReady → Down). */
  transitions(node: string, from = 0, to = Infinity): string[] {
    const out: string[] = [];
    for (const state of this.statesOf(node, from, to)) {
      const label = state ?? '<none>';
      if (out[out.length - 1] !== label) out.push(label);
    }
    return out;
  }

  /** Rounds of the window in which the node was absent or in a state other than `state`. */
  violations(node: string, state: string, from = 0, to = Infinity): { time: number; state: string | undefined }[] {
    const out: { time: number; state: string | undefined }[] = [];
    const rounds = this.rounds.filter((t) => t >= from && t <= to);
    const byTime = new Map<number, string | undefined>();
    for (const s of this.samples) if (s.node === node && s.time >= from && s.time <= to) byTime.set(s.time, s.state);
    for (const t of rounds) {
      const seen = byTime.has(t) ? byTime.get(t) : '<absent>';
      if (seen !== state) out.push({ time: t, state: seen });
    }
    return out;
  }

  /** Whether the node was ever seen in `state` in the window. */
  everIn(node: string, state: string, from = 0, to = Infinity): boolean {
    return this.samples.some((s) => s.node === node && s.state === state && s.time >= from && s.time <= to);
  }

  /** The longest gap between successful rounds in the window (ms). */
  maxGap(from = 0, to = Infinity): number {
    const rounds = this.rounds.filter((t) => t >= from && t <= to);
    let gap = 0;
    for (let i = 1; i < rounds.length; i++) gap = Math.max(gap, rounds[i]! - rounds[i - 1]!);
    return gap;
  }

  /** The first time at or after `from` the node was seen in `state`. */
  firstSeen(node: string, state: string, from = 0): number | undefined {
    return this.samples.find((s) => s.node === node && s.state === state && s.time >= from)?.time;
  }
}

// ---------------------------------------------------------------------------------------------
// Watching

export interface NodeWatch {
  close(): void;
}

/**
 * Watch every Node (`GET /api/v1/nodes?watch=true`) and call `onEvent` for each event as it
 * arrives, within a millisecond or so of the write: for tests that must act at a precise moment
 * of an agent's sequence (e.g. freeze it right after a given write).
 */
export function watchNodes(server: ApiTarget, onEvent: (type: string, node: NodeObject) => void): NodeWatch {
  const req = https.request({
    host: '127.0.0.1',
    port: server.port,
    method: 'GET',
    path: '/api/v1/nodes?watch=true',
    ca: server.caPem,
    agent: false,
    headers: { Accept: 'application/json', Authorization: `Bearer ${server.token}` },
  });
  req.on('response', (res) => {
    let buffer = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      buffer += chunk;
      for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!line) continue;
        const event = JSON.parse(line) as { type: string; object: NodeObject };
        onEvent(event.type, event.object);
      }
    });
    res.on('error', () => undefined);
  });
  req.on('error', () => undefined);
  req.end();
  return { close: () => req.destroy() };
}

/** Two servers of one cluster sharing a real etcd: `<prefix>-a` made it, `<prefix>-b` joined with its token. */
export interface ServerPair {
  etcd: EtcdServer;
  a: ServerProcess;
  b: ServerProcess;
  stop(): Promise<void>;
}

/**
 * For a describe(): one server (`startServer(options)`) started before its tests; after them,
 * every agent this process started is stopped, then the server, and `dirs` are removed. Its
 * `server` is set once before() has run, so read it inside the tests.
 */
export function serverForSuite(options: StartOptions = {}, dirs: readonly string[] = []): { server: ServerProcess } {
  const suite = {} as { server: ServerProcess };
  before(async () => {
    suite.server = await startServer(options);
  });
  after(async () => {
    await cleanupAgents();
    await cleanup(suite.server?.dataDir ?? '', ...dirs);
  });
  return suite;
}

/**
 * For a describe(): a ServerPair started before its tests and stopped after them. Its fields are
 * set once before() has run, so read them inside the tests.
 */
export function serverPairForSuite(prefix: string): ServerPair {
  const pair = {} as ServerPair;
  before(async () => {
    Object.assign(pair, await startServerPairOnEtcd(prefix));
  });
  after(async () => {
    await pair.stop?.();
  });
  return pair;
}

export async function startServerPairOnEtcd(prefix: string): Promise<ServerPair> {
  const etcd = await startEtcd();
  const endpoint = etcd.endpoint.replace(/^https?:\/\//, 'etcd://');
  const a = await startServer({ args: ['--datastore-endpoint', endpoint, '--node-name', `${prefix}-a`] });
  const b = await startServer({ args: ['--datastore-endpoint', endpoint, '--node-name', `${prefix}-b`, '--token', joinToken(a)] });
  return {
    etcd,
    a,
    b,
    stop: async () => {
      await cleanup(a.dataDir, b.dataDir);
      await etcd.stop();
    },
  };
}
