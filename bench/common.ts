/**
 * Shared helpers for the benchmarks: machine description, percentiles, result files, the
 * realistic Node status payloads the datastore and API benchmarks write, process and temp-dir
 * tracking with cleanup on every exit path, a server and agents on 127.0.0.1, an admin HTTPS
 * client, and the kubelet-shaped node-status PATCH load of api.ts and etcd.ts.
 *
 * The benchmark machine is shared and noisy, so every script measures its own baseline in the
 * same run and reports ratios against it. Nothing here asserts a timing.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { unmountAllUnder } from '../src/agent/pods/runtime/host-mounts.js';

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(BENCH_DIR, '..');
export const RESULTS_DIR = path.join(BENCH_DIR, 'results');
export const DROVER_BIN = path.join(REPO_ROOT, 'dist/cli/main.js');

export interface MachineInfo {
  date: string;
  node: string;
  platform: string;
  cpus: number;
  cpuModel: string;
  loadAverage: number[];
  totalMemoryMiB: number;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    date: new Date().toISOString(),
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    loadAverage: os.loadavg().map((l) => Math.round(l * 100) / 100),
    totalMemoryMiB: Math.round(os.totalmem() / 1024 / 1024),
  };
}

export function printMachine(info: MachineInfo): void {
  console.log(
    `# ${info.date}  node ${info.node}  ${info.cpus} x ${info.cpuModel}  load ${info.loadAverage.join(' ')}`,
  );
}

/** Nearest-rank percentile of an already sorted array. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}

export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

export function fmtInt(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

export function writeResult(name: string, data: unknown): string {
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, `${name}.json`);
  fs.writeFileSync(file, `${JSON.stringify(data, null, 2)}\n`);
  return file;
}

/** A numeric option's default, or its default and the least value it may take (`rounds`: at least 1). */
export type NumberOption = number | { default: number; min: number };

/**
 * A script's command line: each of `numbers` is `--name N` (a number, or the script stops saying
 * which option is wrong), raised to its min; `--only` names one part of the script out of
 * `only`; `flags` are the script's other options, as parseArgs takes them.
 */
export function parseBenchArgs<K extends string, const F extends NonNullable<ParseArgsConfig['options']> = Record<never, never>>(
  numbers: Record<K, NumberOption>,
  settings: { only?: readonly string[]; flags?: F } = {},
): { n: Record<K, number>; only: string | undefined; flags: ReturnType<typeof parseArgs<{ options: F }>>['values'] } {
  const options: NonNullable<ParseArgsConfig['options']> = { ...settings.flags };
  const spec = Object.entries(numbers) as [K, NumberOption][];
  for (const [name, option] of spec) options[name] = { type: 'string', default: String(typeof option === 'number' ? option : option.default) };
  if (settings.only) options.only = { type: 'string' };
  const { values } = parseArgs({ options });
  const n = {} as Record<K, number>;
  for (const [name, option] of spec) {
    const value = Number(values[name]);
    if (!Number.isFinite(value)) throw new Error(`--${name} takes a number, not ${String(values[name])}`);
    n[name] = typeof option === 'number' ? value : Math.max(option.min, value);
  }
  const only = values.only as string | undefined;
  if (only !== undefined && settings.only && !settings.only.includes(only)) throw new Error(`--only takes ${settings.only.join(', ')}`);
  return { n, only, flags: values as ReturnType<typeof parseArgs<{ options: F }>>['values'] };
}

/** Fails with the command to run when dist/ is missing; warns when src/ changed since the build. */
export function checkBuild(): void {
  if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
  const built = fs.statSync(DROVER_BIN).mtimeMs;
  const newest = (dir: string): number =>
    fs.readdirSync(dir, { withFileTypes: true }).reduce((max, entry) => {
      const full = path.join(dir, entry.name);
      return Math.max(max, entry.isDirectory() ? newest(full) : fs.statSync(full).mtimeMs);
    }, 0);
  if (newest(path.join(REPO_ROOT, 'src')) > built + 1000) {
    console.warn('# WARNING: src/ is newer than dist/: run npm run build for current figures');
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Kubernetes times have one-second resolution; `n` seconds after a fixed base keeps them unique. */
export function heartbeatTime(n: number): string {
  return new Date(Date.UTC(2025, 0, 1) + n * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export const CONDITION_TYPES = ['MemoryPressure', 'DiskPressure', 'PIDPressure', 'Ready'] as const;

/**
 * About 300 bytes of JSON: a Node's Ready condition with its heartbeat, as a kubelet posts it,
 * plus node info. `n` varies the heartbeat time so consecutive values differ.
 */
export function nodeStatusValue(n: number): Buffer {
  return Buffer.from(
    JSON.stringify({
      status: {
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            lastHeartbeatTime: heartbeatTime(n),
            lastTransitionTime: heartbeatTime(0),
            reason: 'KubeletReady',
            message: 'kubelet is posting ready status',
          },
        ],
        nodeInfo: { kubeletVersion: 'v1.31.0', containerRuntimeVersion: 'containerd://1.7.22', osImage: 'Debian GNU/Linux 12' },
      },
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// Processes and temp dirs: tracked so that every exit path cleans up what a benchmark started.

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();
const cleanupHooks: (() => void)[] = [];
let cleanupInstalled = false;

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export function alive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Signal a child (SIGCONT first: a stopped process cannot act on SIGTERM), SIGKILL after the ceiling. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', ceilingMs = 5000): Promise<void> {
  if (!alive(child) || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    process.kill(child.pid, 'SIGCONT');
    process.kill(child.pid, signal);
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    if (alive(child) && child.pid !== undefined) process.kill(child.pid, 'SIGKILL');
  }, ceilingMs);
  await exited;
  clearTimeout(timer);
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux); NaN elsewhere. */
export function processCpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields after the command: state is index 0, utime 11, stime 12 (in clock ticks).
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The last 100-200 kB of a child's stdout and stderr, for error messages. */
export function captureOutput(child: ChildProcess): () => string {
  let output = '';
  const add = (chunk: Buffer): void => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  child.stdout?.on('data', add);
  child.stderr?.on('data', add);
  return () => output;
}

/** The first stdout line for which `match` answers a number (a port), or an error with `output()`. */
export function waitForLine(
  child: ChildProcess,
  what: string,
  match: (line: string) => number | undefined,
  output: () => string,
  timeoutMs = 30_000,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} not ready after ${timeoutMs} ms:\n${output()}`)), timeoutMs);
    let buffered = '';
    const onData = (chunk: Buffer): void => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        const port = match(line);
        if (port !== undefined) {
          clearTimeout(timer);
          child.stdout!.off('data', onData);
          resolve(port);
          return;
        }
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}:\n${output()}`));
    });
  });
}

/** The HTTPS port of `drover server`'s ready log line, for waitForLine. */
export function droverReadyPort(line: string): number | undefined {
  return line.includes('Drover server is ready') ? (JSON.parse(line) as { port: number }).port : undefined;
}

/** A loopback port that was free a moment ago (listen on 0, read the port, close). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** A temporary directory removed at exit (also on errors and Ctrl-C) unless removed earlier. */
export function benchTempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export function removeBenchTempDir(dir: string): void {
  removeDir(dir);
  tempDirs.delete(dir);
}

/**
 * A temp dir and whatever is mounted under it: a server's embedded agent leaves its spare pod
 * sandbox mounted on purpose (the next start takes it), and rm alone then fails with EBUSY.
 */
function removeDir(dir: string): void {
  try {
    unmountAllUnder(dir);
  } catch (error) {
    console.error(`cannot unmount what is under ${dir}:`, error);
  }
  fs.rmSync(dir, { recursive: true, force: true });
}

/**
 * Synchronous work to do on every exit path after the tracked children are killed and before
 * the temp dirs go, e.g. reaping pod processes that outlive their agent on purpose.
 */
export function onCleanup(hook: () => void): void {
  cleanupHooks.push(hook);
}

export function killAllSync(): void {
  for (const child of children) {
    if (child.pid === undefined || !alive(child)) continue;
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const hook of cleanupHooks) {
    try {
      hook();
    } catch (error) {
      console.error('cleanup hook failed:', error);
    }
  }
  for (const dir of tempDirs) removeDir(dir);
}

/** Kill everything tracked on exit, SIGINT and SIGTERM. Call once at the top of a benchmark. */
export function installCleanup(): void {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.on('exit', killAllSync);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`\n${signal}: stopping everything this benchmark started`);
      killAllSync();
      process.exit(130);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// A drover server and agents on 127.0.0.1, and an admin client for the server's API.

export interface BenchServer {
  child: ChildProcess;
  url: string;
  dataDir: string;
  joinToken: string;
  adminToken: string;
  caPem: string;
  /** The first MB of the server's stdout and stderr (all of it is in logFile). */
  output(): string;
}

/**
 * Diagnostics: with DROVER_BENCH_SERVER_PROFILE_DIR set, every bench server writes a V8 CPU profile
 * there when it exits (node's --cpu-prof), for finding where a request's time goes.
 */
function serverProfileArgs(): string[] {
  const dir = process.env.DROVER_BENCH_SERVER_PROFILE_DIR;
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(dir)}`] : [];
}

/**
 * Spawn `drover server --disable-agent` on 127.0.0.1 with an ephemeral port, wait for its ready
 * line, and read the credentials it wrote. Its output goes to `logFile`.
 */
export async function startBenchServer(dataDir: string, logFile: string, flags: readonly string[] = [], timeoutMs = 30_000): Promise<BenchServer> {
  const child = track(
    spawn(
      process.execPath,
      // The benchmarks' pods are processes unless a benchmark passes its own --default-runtime-class (later flags win).
      [...serverProfileArgs(), DROVER_BIN, 'server', '--disable-agent', '--https-listen-port', '0', '--bind-address', '127.0.0.1', '--data-dir', dataDir, '--default-runtime-class', 'process', ...flags],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
  let output = '';
  const log = fs.createWriteStream(logFile);
  const onData = (chunk: Buffer): void => {
    log.write(chunk);
    if (output.length < 1_000_000) output += chunk.toString();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const port = await waitForLine(child, 'server', droverReadyPort, () => output.slice(-3000), timeoutMs);
  return {
    child,
    url: `https://127.0.0.1:${port}`,
    dataDir,
    joinToken: fs.readFileSync(path.join(dataDir, 'token'), 'utf8').trim(),
    adminToken: fs.readFileSync(path.join(dataDir, 'server', 'cred', 'admin.token'), 'utf8').trim(),
    caPem: fs.readFileSync(path.join(dataDir, 'server', 'tls', 'server-ca.crt'), 'utf8'),
    output: () => output,
  };
}

export interface BenchAgentOptions {
  server: Pick<BenchServer, 'url' | 'joinToken'>;
  name: string;
  dataDir: string;
  /** Appended to (an agent restarted on the same data dir keeps one log). */
  logFile: string;
  nodeIp?: string;
}

/** Spawn `drover agent --agent-port 0` and return at once; the caller waits for its node to be Ready. */
export function spawnBenchAgent(options: BenchAgentOptions): ChildProcess {
  fs.mkdirSync(options.dataDir, { recursive: true });
  const log = fs.openSync(options.logFile, 'a');
  try {
    return track(
      spawn(
        process.execPath,
        [
          DROVER_BIN, 'agent', '--server', options.server.url, '--token', options.server.joinToken, '--data-dir', options.dataDir,
          '--node-name', options.name, '--agent-port', '0', '--node-ip', options.nodeIp ?? '127.0.0.1',
        ],
        { stdio: ['ignore', log, log] },
      ),
    );
  } finally {
    fs.closeSync(log);
  }
}

export function fileTail(file: string, chars = 3000): string {
  try {
    return fs.readFileSync(file, 'utf8').slice(-chars);
  } catch {
    return '(no log)';
  }
}

export class HttpStatusError extends Error {
  constructor(
    readonly method: string,
    readonly apiPath: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(`${method} ${apiPath}: HTTP ${status}: ${body.slice(0, 300)}`);
    this.name = 'HttpStatusError';
  }
}

/** The server's API as the admin, over keep-alive HTTPS that trusts the cluster CA. */
export class BenchApi {
  private readonly http: https.Agent;

  constructor(
    private readonly server: Pick<BenchServer, 'url' | 'adminToken' | 'caPem'>,
    maxSockets = 4,
  ) {
    this.http = new https.Agent({ keepAlive: true, maxSockets, ca: server.caPem });
  }

  /** `contentType`: the body's (a PATCH's patch type); JSON unless told. */
  request(method: string, apiPath: string, body?: unknown, timeoutMs = 5000, contentType = 'application/json'): Promise<{ status: number; body: string }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${this.server.url}${apiPath}`,
        {
          method,
          agent: this.http,
          headers: {
            Authorization: `Bearer ${this.server.adminToken}`,
            Accept: 'application/json',
            ...(payload === undefined ? {} : { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(payload) }),
          },
          timeout: timeoutMs,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${apiPath} timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  /** The parsed body of a 2xx answer; HttpStatusError otherwise. */
  async json<T>(method: string, apiPath: string, body?: unknown): Promise<T> {
    const res = await this.request(method, apiPath, body);
    if (res.status < 200 || res.status > 299) throw new HttpStatusError(method, apiPath, res.status, res.body);
    return JSON.parse(res.body) as T;
  }

  destroy(): void {
    this.http.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// Node-status heartbeats as kubelets send them, from many keep-alive clients (api.ts, etcd.ts).

/** An HTTPS server on 127.0.0.1 and how this client reaches it. */
export interface PatchTarget {
  port: number;
  ca: string;
  /** A bearer token; '' for a caller that proves itself with a client certificate instead. */
  token: string;
  agent: https.Agent;
  /** A client certificate and its key (PEM), for certificate users (authz.ts). */
  cert?: string;
  key?: string;
}

/** One request; the answer's status and text, whatever the status. */
export function send(
  target: PatchTarget,
  method: string,
  urlPath: string,
  body: string | undefined,
  contentType = 'application/json',
): Promise<{ status: number; text: string; reusedSocket: boolean }> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port: target.port,
        method,
        path: urlPath,
        agent: target.agent,
        ca: target.ca,
        ...(target.cert ? { cert: target.cert, key: target.key } : {}),
        headers: {
          Accept: 'application/json',
          ...(target.token ? { Authorization: `Bearer ${target.token}` } : {}),
          ...(body !== undefined ? { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text, reusedSocket: req.reusedSocket }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

export const nodeName = (i: number): string => `bench-node-${String(i).padStart(4, '0')}`;

/** A worker Node as a kubelet registers it, with the four conditions and node info. */
export function nodeObject(i: number): unknown {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: nodeName(i),
      labels: {
        'kubernetes.io/hostname': nodeName(i),
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        'node-role.kubernetes.io/worker': '',
      },
    },
    spec: { podCIDR: `10.42.${i % 256}.0/24` },
    status: {
      capacity: { cpu: '4', memory: '16384Mi', pods: '110', 'ephemeral-storage': '100Gi' },
      allocatable: { cpu: '4', memory: '16000Mi', pods: '110', 'ephemeral-storage': '95Gi' },
      conditions: CONDITION_TYPES.map((type) => ({
        type,
        status: type === 'Ready' ? 'True' : 'False',
        lastHeartbeatTime: heartbeatTime(0),
        lastTransitionTime: heartbeatTime(0),
        reason: type === 'Ready' ? 'KubeletReady' : `KubeletHasNo${type}`,
        message: type === 'Ready' ? 'kubelet is posting ready status' : `kubelet has no ${type}`,
      })),
      addresses: [
        { type: 'InternalIP', address: `10.0.${Math.floor(i / 256)}.${i % 256}` },
        { type: 'Hostname', address: nodeName(i) },
      ],
      nodeInfo: {
        kubeletVersion: 'v1.31.0',
        containerRuntimeVersion: 'containerd://1.7.22',
        osImage: 'Debian GNU/Linux 12 (bookworm)',
        kernelVersion: '6.1.0-25-amd64',
        architecture: 'amd64',
        operatingSystem: 'linux',
      },
    },
  };
}

/** The heartbeat patch kubelet sends: every condition's lastHeartbeatTime moves forward. */
export function heartbeatPatch(beat: number): string {
  const time = heartbeatTime(beat);
  return JSON.stringify({
    status: {
      '$setElementOrder/conditions': CONDITION_TYPES.map((type) => ({ type })),
      conditions: CONDITION_TYPES.map((type) => ({ lastHeartbeatTime: time, type })),
    },
  });
}

/** Nodes 0..count-1, created `batch` at a time; `label` names the server in errors. */
export async function createNodes(target: PatchTarget, count: number, batch: number, label: string): Promise<void> {
  for (let i = 0; i < count; i += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, count - i) }, async (_, j) => {
        const res = await send(target, 'POST', '/api/v1/nodes', JSON.stringify(nodeObject(i + j)));
        if (res.status !== 201) throw new Error(`${label}: creating ${nodeName(i + j)}: ${res.status} ${res.text}`);
      }),
    );
  }
}

export interface HeartbeatRun {
  seconds: number;
  /** Milliseconds per answered request, in completion order. */
  latencies: number[];
  statuses: Record<string, number>;
  /** Answers other than 200, and requests that failed. */
  errors: number;
  firstError?: string;
}

/**
 * `clients` concurrent loops PATCH node status for about `ms`; loop w owns nodes w, w + clients, …
 * of the `beats.length` nodes and patches them in turn. `beats` holds each node's heartbeat
 * counter, kept by the caller across runs so that every PATCH changes the node.
 */
export async function heartbeatLoad(target: PatchTarget, beats: Uint32Array, clients: number, ms: number): Promise<HeartbeatRun> {
  const nodes = beats.length;
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  const deadline = started + ms;
  const worker = async (w: number): Promise<void> => {
    const mine: number[] = [];
    for (let i = w; i < nodes; i += clients) mine.push(i);
    if (mine.length === 0) mine.push(w % nodes);
    for (let k = 0; performance.now() < deadline; k++) {
      const node = mine[k % mine.length]!;
      const body = heartbeatPatch(++beats[node]!);
      const t0 = performance.now();
      try {
        const res = await send(target, 'PATCH', `/api/v1/nodes/${nodeName(node)}/status`, body, 'application/strategic-merge-patch+json');
        latencies.push(performance.now() - t0);
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
        if (res.status !== 200) {
          errors++;
          firstError ??= `${res.status} ${res.text.slice(0, 300)}`;
        }
      } catch (error) {
        errors++;
        firstError ??= String(error);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
  return {
    seconds: (performance.now() - started) / 1000,
    latencies,
    statuses,
    errors,
    ...(firstError ? { firstError } : {}),
  };
}
