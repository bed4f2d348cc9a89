/**
 * Starts a real single-member etcd (Debian's `etcd` binary, 3.4) on free loopback ports, for the
 * etcd datastore tests.
 *
 * Every process this helper starts is stopped by its PID (SIGTERM, then SIGKILL after a timeout),
 * and its data dir is removed only after the process has exited. If the test process itself exits
 * first, the remaining children are SIGKILLed from an `exit` hook so no etcd outlives the run.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';

export interface EtcdServer {
  /** The client URL, e.g. `http://127.0.0.1:41234`. */
  readonly endpoint: string;
  readonly dataDir: string;
  /** PID of the running etcd process (changes across restarts). */
  readonly pid: number;
  /** Stop the process (the data dir is kept) and start it again on the same data dir and ports. */
  restart(): Promise<void>;
  /** Stop the process and delete the data dir. Safe to call more than once. */
  stop(): Promise<void>;
}

export interface EtcdTls {
  /** Serving certificate and key of etcd's client endpoint. */
  certFile: string;
  keyFile: string;
  /** CA that signs client certificates; etcd then requires one (`--client-cert-auth`). */
  caFile: string;
  /** A client certificate, used only for the helper's own health checks. */
  clientCertFile: string;
  clientKeyFile: string;
}

/** EtcdTls as files, plus the PEMs behind them (for clients that take PEM strings). */
export interface EtcdTlsFixture extends EtcdTls {
  caPem: string;
  clientCertPem: string;
  clientKeyPem: string;
}

/**
 * A fresh CA, a serving certificate for etcd on 127.0.0.1 and a client certificate, written to
 * `dir` (mode 0600): what startEtcd({ tls }) needs for an etcd that demands client certificates.
 */
export async function writeEtcdTls(dir: string, caName: string): Promise<EtcdTlsFixture> {
  const ca = await createCertificateAuthority(caName);
  const serving = await issueCertificate(ca, { commonName: 'etcd', subjectAltNames: ['127.0.0.1', 'localhost'], usage: 'server' });
  const client = await issueCertificate(ca, { commonName: 'drover', usage: 'client' });
  const write = (name: string, content: string): string => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, content, { mode: 0o600 });
    return p;
  };
  return {
    caFile: write('ca.pem', ca.certificatePem),
    certFile: write('server.pem', serving.certificatePem),
    keyFile: write('server-key.pem', serving.privateKeyPem),
    clientCertFile: write('client.pem', client.certificatePem),
    clientKeyFile: write('client-key.pem', client.privateKeyPem),
    caPem: ca.certificatePem,
    clientCertPem: client.certificatePem,
    clientKeyPem: client.privateKeyPem,
  };
}

export interface StartEtcdOptions {
  /** How long to wait for etcd to answer /health. */
  readyTimeoutMs?: number;
  /** Serve clients over https with mutual TLS. */
  tls?: EtcdTls;
}

const STOP_TIMEOUT_MS = 10_000;
const running = new Set<ChildProcess>();
/** Temp dirs of servers not yet stopped, removed by the exit hook as a last resort. */
const roots = new Set<string>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of running) {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    }
    // A SIGKILLed etcd writes nothing more, so its data can go even if it has not been reaped.
    for (const root of roots) fs.rmSync(root, { recursive: true, force: true });
  });
}

let etcdBinary: string | undefined;

/** The etcd binary on PATH, or a clear error saying how to get it. */
export function findEtcd(): string {
  if (etcdBinary) return etcdBinary;
  const result = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  const found = result.stdout.trim();
  if (result.status !== 0 || !found) {
    throw new Error('etcd is not installed (Debian: apt-get install etcd-server)');
  }
  etcdBinary = found;
  return found;
}

/** A loopback port that was free a moment ago. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}

/** tmpfs makes etcd's fsyncs nearly free, which keeps a fresh etcd per test cheap. */
function tempRoot(): string {
  try {
    fs.accessSync('/dev/shm', fs.constants.W_OK);
    if (fs.statSync('/dev/shm').isDirectory()) return '/dev/shm';
  } catch {
    // Fall back to the normal temp dir.
  }
  return os.tmpdir();
}

function healthy(clientUrl: string, tls: EtcdTls | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    const get = tls
      ? (url: string, options: https.RequestOptions, cb: (res: http.IncomingMessage) => void) =>
          https.get(url, {
            ...options,
            ca: fs.readFileSync(tls.caFile),
            cert: fs.readFileSync(tls.clientCertFile),
            key: fs.readFileSync(tls.clientKeyFile),
          }, cb)
      : http.get;
    const req = get(`${clientUrl}/health`, { timeout: 1000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(res.statusCode === 200 && /"health"\s*:\s*"true"/.test(body)));
      res.on('error', () => resolve(false));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, timeoutMs);
    const onExit = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

/** SIGTERM, then SIGKILL if the process has not exited after a timeout. Only ever by PID. */
async function stopProcess(child: ChildProcess): Promise<void> {
  try {
    if (!exited(child) && child.pid !== undefined) {
      try {
        process.kill(child.pid, 'SIGTERM');
      } catch {
        // Already gone.
      }
      if (!(await waitForExit(child, STOP_TIMEOUT_MS)) && child.pid !== undefined) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
        await waitForExit(child, STOP_TIMEOUT_MS);
      }
    }
  } finally {
    running.delete(child);
  }
}

interface Ports {
  client: number;
  peer: number;
}

class EtcdProcess implements EtcdServer {
  private child: ChildProcess | undefined;
  private output: string[] = [];
  private stopped = false;

  readonly dataDir: string;

  constructor(
    /** A private temp dir holding the data dir; removed on stop. */
    private readonly root: string,
    private ports: Ports,
    private readonly readyTimeoutMs: number,
    private readonly tls: EtcdTls | undefined,
  ) {
    this.dataDir = path.join(root, 'data');
    roots.add(root);
  }

  get endpoint(): string {
    return `${this.tls ? 'https' : 'http'}://127.0.0.1:${this.ports.client}`;
  }

  get pid(): number {
    return this.child?.pid ?? -1;
  }

  async start(): Promise<void> {
    const clientUrl = this.endpoint;
    const peerUrl = `http://127.0.0.1:${this.ports.peer}`;
    const args = [
      '--name', 'n1',
      '--data-dir', this.dataDir,
      '--listen-client-urls', clientUrl,
      '--advertise-client-urls', clientUrl,
      '--listen-peer-urls', peerUrl,
      '--initial-advertise-peer-urls', peerUrl,
      '--initial-cluster', `n1=${peerUrl}`,
      '--initial-cluster-state', 'new',
      '--initial-cluster-token', 'drover-test',
      '--logger=zap',
      '--log-level=warn',
      // The conformance suite writes 3 MiB values: raise the request limit (default 1.5 MiB).
      '--max-request-bytes=10485760',
      // A single member elects itself after one election timeout: keep it short so tests start fast.
      '--heartbeat-interval=10',
      '--election-timeout=100',
    ];
    if (this.tls) {
      args.push(
        '--cert-file', this.tls.certFile,
        '--key-file', this.tls.keyFile,
        '--trusted-ca-file', this.tls.caFile,
        '--client-cert-auth',
      );
    }
    this.output = [];
    const child = spawn(findEtcd(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    running.add(child);
    installExitHook();
    const keep = (chunk: Buffer): void => {
      this.output.push(chunk.toString('utf8'));
      if (this.output.length > 50) this.output.shift();
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', () => running.delete(child));
    const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));

    const deadline = Date.now() + this.readyTimeoutMs;
    for (;;) {
      if (exited(child)) {
        throw new Error(`etcd exited during startup (code ${child.exitCode}, signal ${child.signalCode}):\n${this.log()}`);
      }
      const failed = await Promise.race([spawnError, new Promise<undefined>((r) => setImmediate(r, undefined))]);
      if (failed) throw new Error(`could not start etcd: ${failed.message}`);
      if (await healthy(clientUrl, this.tls)) return;
      if (Date.now() > deadline) {
        await stopProcess(child);
        throw new Error(`etcd did not become healthy within ${this.readyTimeoutMs} ms:\n${this.log()}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  log(): string {
    return this.output.join('').split('\n').slice(-30).join('\n');
  }

  async restart(): Promise<void> {
    if (this.stopped) throw new Error('etcd was stopped');
    if (this.child) await stopProcess(this.child);
    await this.start();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    try {
      if (this.child) await stopProcess(this.child);
    } finally {
      // Only after the process is gone.
      if (!this.child || exited(this.child)) {
        fs.rmSync(this.root, { recursive: true, force: true });
        roots.delete(this.root);
      }
    }
  }

  /** Picks new ports (after an address-in-use race). */
  async newPorts(): Promise<void> {
    this.ports = { client: await freePort(), peer: await freePort() };
  }
}

/** Starts a fresh single-member etcd in a new temporary data dir. */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<EtcdServer> {
  const root = fs.mkdtempSync(path.join(tempRoot(), 'drover-etcd-'));
  const proc = new EtcdProcess(
    root,
    { client: await freePort(), peer: await freePort() },
    options.readyTimeoutMs ?? 30_000,
    options.tls,
  );
  let lastError: unknown;
  // Another process may grab a port between probing and etcd binding it: retry with new ports.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await proc.start();
      return {
        get endpoint() {
          return proc.endpoint;
        },
        dataDir: proc.dataDir,
        get pid() {
          return proc.pid;
        },
        restart: () => proc.restart(),
        stop: () => proc.stop(),
      };
    } catch (error) {
      lastError = error;
      if (!/address already in use/i.test(String(error))) break;
      fs.rmSync(proc.dataDir, { recursive: true, force: true });
      await proc.newPorts();
    }
  }
  await proc.stop();
  throw lastError;
}
