import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import type { Logger } from '../logging/logger.js';
import { issueCertificate, type KeyPair } from '../security/pki.js';
import { writeFileAtomic } from '../security/files.js';

/**
 * A managed etcd member: the `etcd` binary (Debian's etcd-server) run as a child of the server,
 * with client and peer traffic over TLS using certificates from the cluster CA. Drover never
 * implements consensus itself: membership changes go through etcd's own member API.
 */

export class ManagedEtcdError extends Error {
  override name = 'ManagedEtcdError';
}

export interface ManagedEtcdOptions {
  dataDir: string;
  /** The member name, unique in the cluster. */
  name: string;
  ca: KeyPair;
  advertiseIp: string;
  clientPort: number;
  peerPort: number;
  /**
   * How to start: `new` (first member, --cluster-init), `existing` (joining: the member was added
   * through the cluster and `initialCluster` lists every member), or `restart` (data on disk).
   */
  mode: 'new' | 'existing' | 'restart';
  initialCluster?: string;
  logger: Logger;
  /** The member died while the server still ran (the server must not limp on without it). */
  onUnexpectedExit?: (code: number | null) => void;
}

export interface EtcdClientTls {
  ca: string;
  cert: string;
  key: string;
}

export interface ManagedEtcd {
  /** Where this server's datastore connects: the local member. */
  endpoint: string;
  peerUrl: string;
  clientTls: EtcdClientTls;
  /** Whether the etcd child has exited (a joining server watches this while its member is a learner). */
  hasExited(): boolean;
  stop(): Promise<void>;
}

export function etcdDataDir(dataDir: string): string {
  return path.join(dataDir, 'server', 'db', 'etcd');
}

/** Whether this server already holds etcd data (then it restarts its member, whoever it joined). */
export function hasEtcdData(dataDir: string): boolean {
  return fs.existsSync(path.join(etcdDataDir(dataDir), 'member'));
}

function findEtcd(): string {
  const bin = (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter(Boolean)
    .map((dir) => path.join(dir, 'etcd'))
    .find((candidate) => {
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        return fs.statSync(candidate).isFile();
      } catch {
        return false;
      }
    });
  if (!bin) {
    throw new ManagedEtcdError(
      'the etcd binary is not on PATH: install Debian’s etcd-server package (apt-get install etcd-server), or use --datastore-endpoint',
    );
  }
  return bin;
}

/**
 * A server killed with SIGKILL cannot stop its etcd child, which keeps the ports and the data
 * dir. On the next start, that orphan (recognised by its pid file and its command line naming
 * our data dir) is stopped before a new member starts.
 */
function reapOrphan(pidFile: string, dataDir: string, logger: Logger): void {
  if (!fs.existsSync(pidFile)) return;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
  fs.rmSync(pidFile, { force: true });
  if (!Number.isInteger(pid) || pid <= 0) return;
  let cmdline = '';
  try {
    cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return; // not running
  }
  if (!cmdline.includes(dataDir)) return;
  logger.warn({ pid }, 'stopping the etcd member left behind by a previous run of this server');
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  // Gone once it has left /proc or every thread of it has exited (the leader a zombie waiting to be
  // collected). Not when only the leader is a zombie: etcd is multi-threaded, and its other threads
  // still hold its sockets while they exit, so a member started then found its peer port taken.
  const running = (): boolean => {
    let tasks: string[];
    try {
      tasks = fs.readdirSync(`/proc/${pid}/task`);
    } catch {
      return false;
    }
    return tasks.some((task) => {
      try {
        const stat = fs.readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8');
        return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
      } catch {
        return false;
      }
    });
  };
  const deadline = Date.now() + 5000;
  while (running() && Date.now() < deadline) spawnSync('sleep', ['0.05']);
}

function url(host: string, port: number): string {
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

async function ensureCertificates(
  dir: string,
  ca: KeyPair,
  sans: string[],
): Promise<{ server: { cert: string; key: string }; client: { cert: string; key: string }; caFile: string }> {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const caFile = path.join(dir, 'ca.crt');
  writeFileAtomic(caFile, ca.certificatePem, 0o644);
  const pair = async (name: string, make: () => Promise<KeyPair>): Promise<{ cert: string; key: string }> => {
    const cert = path.join(dir, `${name}.crt`);
    const key = path.join(dir, `${name}.key`);
    if (!fs.existsSync(cert) || !fs.existsSync(key)) {
      const issued = await make();
      writeFileAtomic(key, issued.privateKeyPem, 0o600);
      writeFileAtomic(cert, issued.certificatePem, 0o644);
    }
    return { cert, key };
  };
  const server = await pair('member', () => issueCertificate(ca, { commonName: 'etcd-member', subjectAltNames: sans, usage: 'peer' }));
  const client = await pair('client', () => issueCertificate(ca, { commonName: 'drover-etcd-client', usage: 'client' }));
  return { server, client, caFile };
}

/** Whether the member at `endpoint` answers its /health with true (a learner does too). */
export function healthy(endpoint: string, tls: EtcdClientTls): Promise<boolean> {
  return new Promise((resolve) => {
    const req = https.get(`${endpoint}/health`, { ca: tls.ca, cert: tls.cert, key: tls.key, timeout: 1000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(res.statusCode === 200 && body.includes('"true"')));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

export async function startManagedEtcd(options: ManagedEtcdOptions): Promise<ManagedEtcd> {
  const bin = findEtcd();
  const tlsDir = path.join(options.dataDir, 'server', 'tls', 'etcd');
  const certs = await ensureCertificates(tlsDir, options.ca, ['localhost', '127.0.0.1', '::1', options.advertiseIp]);
  const clientTls: EtcdClientTls = {
    ca: options.ca.certificatePem,
    cert: fs.readFileSync(certs.client.cert, 'utf8'),
    key: fs.readFileSync(certs.client.key, 'utf8'),
  };
  const dataDir = etcdDataDir(options.dataDir);
  fs.mkdirSync(path.dirname(dataDir), { recursive: true, mode: 0o700 });
  const peerUrl = url(options.advertiseIp, options.peerPort);
  const clientUrls = [...new Set([url('127.0.0.1', options.clientPort), url(options.advertiseIp, options.clientPort)])];
  const args = [
    '--name', options.name,
    '--data-dir', dataDir,
    '--listen-client-urls', clientUrls.join(','),
    '--advertise-client-urls', url(options.advertiseIp, options.clientPort),
    '--listen-peer-urls', peerUrl,
    '--initial-advertise-peer-urls', peerUrl,
    '--client-cert-auth', '--trusted-ca-file', certs.caFile, '--cert-file', certs.server.cert, '--key-file', certs.server.key,
    '--peer-client-cert-auth', '--peer-trusted-ca-file', certs.caFile,
    '--peer-cert-file', certs.server.cert, '--peer-key-file', certs.server.key,
    '--logger=zap', '--log-level=warn',
    // Room for the largest object the API accepts (3 MiB) plus its envelope.
    '--max-request-bytes', String(8 * 1024 * 1024),
  ];
  if (options.mode === 'new') {
    args.push('--initial-cluster', `${options.name}=${peerUrl}`, '--initial-cluster-state', 'new', '--initial-cluster-token', 'drover');
  } else if (options.mode === 'existing') {
    args.push('--initial-cluster', options.initialCluster!, '--initial-cluster-state', 'existing');
  }
  reapOrphan(path.join(options.dataDir, 'server', 'etcd.pid'), dataDir, options.logger);
  const logFile = path.join(options.dataDir, 'server', 'etcd.log');
  const log = fs.openSync(logFile, 'a', 0o600);
  // The server's own settings (DROVER_TOKEN among them) are none of etcd's business: the member
  // gets the server's environment without them (its ETCD_* and Go runtime variables still apply).
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('DROVER_')));
  const child: ChildProcess = spawn(bin, args, { env, stdio: ['ignore', log, log] });
  fs.closeSync(log);
  writeFileAtomic(path.join(options.dataDir, 'server', 'etcd.pid'), `${child.pid}\n`, 0o644);
  let exited = false;
  let stopping = false;
  const exit = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      exited = true;
      resolve(code);
    }),
  );
  void exit.then((code) => {
    if (stopping) return;
    options.logger.error({ code, log: logFile }, 'the managed etcd member exited unexpectedly');
    options.onUnexpectedExit?.(code);
  });
  const endpoint = url('127.0.0.1', options.clientPort);
  const deadline = Date.now() + 60_000;
  while (!(await healthy(endpoint, clientTls))) {
    if (exited) throw new ManagedEtcdError(`etcd exited during start-up; see ${logFile}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new ManagedEtcdError(`etcd did not become healthy within 60 s; see ${logFile}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  options.logger.info({ member: options.name, client: endpoint, peer: peerUrl, mode: options.mode, pid: child.pid }, 'managed etcd member is up');
  return {
    endpoint,
    peerUrl,
    clientTls,
    hasExited: () => exited,
    stop: async () => {
      stopping = true;
      if (exited) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exit;
      clearTimeout(timer);
    },
  };
}
