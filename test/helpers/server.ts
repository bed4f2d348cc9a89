import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { reapPods } from './pods.js';

/**
 * Test harness: real `drover server` child processes on 127.0.0.1 with ephemeral ports, each in
 * its own temporary data dir, stopped by PID and cleaned up after the test.
 */

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const DROVER_BIN = path.join(REPO_ROOT, 'dist/cli/main.js');

/**
 * Every temp dir this process made is removed when the test file's process exits (after reaping
 * any pod processes started under it), so no test leaks one; suites may still remove theirs
 * earlier with cleanup(). Not at cleanup() itself: a suite's dir may be made before an earlier
 * suite's cleanup runs.
 */
const createdDirs = new Set<string>();
process.once('exit', () => {
  for (const dir of createdDirs) {
    try {
      reapPods(dir);
      fs.rmSync(dir, { recursive: true, force: true });
    } catch {
      // best effort at exit
    }
  }
});

/** A multi-line message as test diagnostics, one per line (and on the console with DROVER_TEST_VERBOSE). */
export function report(t: TestContext, message: string): void {
  for (const line of message.trimEnd().split('\n')) t.diagnostic(line);
  if (process.env.DROVER_TEST_VERBOSE) console.log(`# ${message}`);
}

export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `drover-${prefix}-`));
  createdDirs.add(dir);
  return dir;
}

export interface ServerProcess {
  dataDir: string;
  port: number;
  url: string;
  kubeconfig: string;
  token: string;
  caPem: string;
  pid: number;
  process: ChildProcess;
  output(): string;
  /** SIGTERM (or the given signal), then wait for exit; SIGKILL after the ceiling (15 s unless told). */
  stop(signal?: NodeJS.Signals, ceilingMs?: number): Promise<number | null>;
  exited: Promise<number | null>;
}

export interface StartOptions {
  dataDir?: string;
  args?: string[];
  timeoutMs?: number;
  /** Run the server's own agent (off by default so API tests see an empty cluster). */
  embeddedAgent?: boolean;
  /**
   * For tests that create Node objects by hand (no agent behind them): a grace period so long that
   * the node lifecycle controller never judges them during the test.
   */
  handMadeNodes?: boolean;
  /** The server's environment (default: this process's), as startAgent's `env`. */
  env?: NodeJS.ProcessEnv;
}

const running = new Set<ServerProcess>();

/**
 * The `drover server …` arguments startServer uses: loopback, an ephemeral port, no agent unless
 * asked. For tests that run a start expected to be refused (through runDrover) with the same flags.
 */
/**
 * The cluster defaults the test servers run with: pods without a runtimeClassName are processes,
 * and there is no pod network (`--flannel-backend none`): most suites run several nodes in the
 * host's one network namespace, where each would claim the same bridge, routes and tables. The
 * pod network's tests run each agent in a network namespace of its own and pass their backend
 * after these (the last flag wins).
 */
export const TEST_CLUSTER_ARGS: readonly string[] = ['--default-runtime-class', 'process', '--flannel-backend', 'none'];

export function serverArgs(
  dataDir: string,
  options: Pick<StartOptions, 'args' | 'embeddedAgent' | 'handMadeNodes'> = {},
): string[] {
  return [
    'server',
    '--data-dir',
    dataDir,
    '--https-listen-port',
    '0',
    '--bind-address',
    '127.0.0.1',
    ...(options.embeddedAgent ? ['--agent-port', '0', '--node-ip', '127.0.0.1'] : ['--disable-agent']),
    // The suite's pods are local processes (a command, no image) unless a test asks for containers:
    // those name `runtimeClassName: runc`, or pass their own --default-runtime-class after this one.
    ...TEST_CLUSTER_ARGS,
    ...(options.handMadeNodes ? ['--node-monitor-grace-period', '1h'] : []),
    ...(options.args ?? []),
  ];
}

export async function startServer(options: StartOptions = {}): Promise<ServerProcess> {
  if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
  const dataDir = options.dataDir ?? tempDir('server');
  const child = spawn(process.execPath, [DROVER_BIN, ...serverArgs(dataDir, options)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(options.env ? { env: options.env } : {}),
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Nothing else holds this child: left running, it would keep the test file alive until its
      // own timeout (seen: a failed before-hook held garbage-collection.test.ts for 10 minutes).
      child.kill('SIGKILL');
      reject(new Error(`server did not become ready in time; output:\n${output}`));
    },
      // A generous ceiling: at load 30 a server took over 30 s to load its modules and get ready.
      options.timeoutMs ?? 90_000,
    );
    const check = (): void => {
      for (const line of output.split('\n')) {
        if (!line.includes('Drover server is ready')) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { port: number }).port);
        return;
      }
    };
    child.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with code ${code} before it was ready; output:\n${output}`));
    });
  });
  const caPem = fs.readFileSync(path.join(dataDir, 'server/tls/server-ca.crt'), 'utf8');
  const token = fs.readFileSync(path.join(dataDir, 'server/cred/admin.token'), 'utf8').trim();
  const server: ServerProcess = {
    dataDir,
    port,
    url: `https://127.0.0.1:${port}`,
    kubeconfig: path.join(dataDir, 'kubeconfig.yaml'),
    token,
    caPem,
    pid: child.pid!,
    process: child,
    output: () => output,
    exited,
    stop: async (signal: NodeJS.Signals = 'SIGTERM', ceilingMs = 15_000) => {
      if (child.exitCode === null && child.signalCode === null) {
        process.kill(child.pid!, signal);
        const timer = setTimeout(() => child.exitCode === null && child.kill('SIGKILL'), ceilingMs);
        const code = await exited;
        clearTimeout(timer);
        running.delete(server);
        return code;
      }
      running.delete(server);
      return child.exitCode;
    },
  };
  running.add(server);
  // Pods are admitted only once their ServiceAccount exists, and `default` is made by the
  // controller leader a moment after the server is ready: wait for it, as Kubernetes users do
  // before creating pods in a new cluster. A server that never makes it is the test's to judge.
  await eventually(
    async () => (await request(server, 'GET', '/api/v1/namespaces/default/serviceaccounts/default')).status === 200,
    'the default ServiceAccount',
    30_000,
  ).catch(() => undefined);
  return server;
}

/** Stop every server this process started and remove the given temp dirs. */
export async function cleanup(...dirs: string[]): Promise<void> {
  const dataDirs = [...running].map((s) => s.dataDir);
  await Promise.all([...running].map((s) => s.stop('SIGKILL')));
  for (const dir of [...dataDirs, ...dirs]) reapPods(dir);
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
}

export interface ApiResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

export interface RequestOptions {
  token?: string | null;
  headers?: Record<string, string>;
  body?: unknown;
  rawBody?: Buffer | string;
  ca?: string;
  /** A client certificate and its key (PEM), e.g. for an agent's endpoint. */
  cert?: string;
  key?: string;
  /** `false`: a fresh connection, closed after the answer (no pooled socket to a server about to die). */
  agent?: https.Agent | false;
  /** Defaults to 127.0.0.1; servers of a multi-server test listen on 127.0.0.N. */
  host?: string;
  /** Fail the request (rather than hang) when no answer came within this time. */
  timeoutMs?: number;
  /** The client's source address (e.g. 127.0.0.5), for per-source limits; implies a fresh connection. */
  localAddress?: string;
}

/** One HTTPS request to a server, with its admin token unless told otherwise. */
export function request(
  server: Pick<ServerProcess, 'port' | 'token' | 'caPem'>,
  method: string,
  urlPath: string,
  options: RequestOptions = {},
): Promise<ApiResponse> {
  const token = options.token === undefined ? server.token : options.token;
  const payload =
    options.rawBody !== undefined
      ? Buffer.from(options.rawBody)
      : options.body !== undefined
        ? Buffer.from(JSON.stringify(options.body))
        : undefined;
  const host = options.host ?? '127.0.0.1';
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host,
        port: server.port,
        method,
        path: urlPath,
        ca: options.ca ?? server.caPem,
        ...(options.cert ? { cert: options.cert, key: options.key } : {}),
        ...(options.agent !== undefined ? { agent: options.agent } : {}),
        ...(options.timeoutMs !== undefined ? { timeout: options.timeoutMs } : {}),
        ...(options.localAddress ? { localAddress: options.localAddress, agent: false } : {}),
        headers: {
          Accept: 'application/json',
          ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) } : {}),
          ...(token ? { Authorization: `Bearer ${token}` } : {}),
          ...options.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () =>
      req.destroy(new Error(`${method} ${urlPath} on ${host}:${server.port}: timed out after ${options.timeoutMs} ms`)),
    );
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

/** Poll until `check` returns a truthy value, or fail after `timeoutMs`. */
export async function eventually<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 20_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * The counterpart of eventually() for "never" and "throughout" claims: check every `intervalMs`
 * for `durationMs` and fail at the first check that does not hold (false, or a throw). A claim that
 * something does not happen needs a window of time; this checks the whole window, not its end.
 */
export async function always(
  check: () => boolean | Promise<boolean>,
  what: string,
  durationMs: number,
  intervalMs = 50,
): Promise<void> {
  const started = Date.now();
  for (;;) {
    if (!(await check())) throw new Error(`${what} no longer held ${Date.now() - started} ms into a ${durationMs} ms window`);
    if (Date.now() - started >= durationMs) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
