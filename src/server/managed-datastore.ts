import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { fetchClusterCa, JoinError } from '../agent/bootstrap.js';
import { open as openSealed } from '../cluster/bootstrap-data.js';
import { caHash, formatJoinToken, parseJoinToken } from '../cluster/join-token.js';
import { hasEtcdData, type ManagedEtcd, startManagedEtcd } from '../cluster/managed-etcd.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { createCertificateAuthority, issueCertificate, type KeyPair } from '../security/pki.js';
import { ClusterJoinError } from './bootstrap.js';

/**
 * The datastore of a server that runs its own etcd member: a new cluster (--cluster-init), a
 * server joining an existing one (--server URL --token T: it fetches the cluster identity with the
 * token, is added as a member through that server, then starts its member), or a restart with
 * etcd data on disk (any live member will do; the server it first joined is not needed).
 */

export interface ManagedDatastoreOptions {
  dataDir: string;
  memberName: string;
  advertiseIp: string;
  clientPort: number;
  peerPort: number;
  clusterInit: boolean;
  joinServer?: string;
  token?: string;
  logger: Logger;
  onMemberExit?: (code: number | null) => void;
}

function tlsFiles(dataDir: string): { cert: string; key: string; admin: string; token: string } {
  return {
    cert: path.join(dataDir, 'server', 'tls', 'server-ca.crt'),
    key: path.join(dataDir, 'server', 'tls', 'server-ca.key'),
    admin: path.join(dataDir, 'server', 'cred', 'admin.token'),
    token: path.join(dataDir, 'token'),
  };
}

function localCa(dataDir: string): KeyPair | undefined {
  const files = tlsFiles(dataDir);
  if (!fs.existsSync(files.cert) || !fs.existsSync(files.key)) return undefined;
  return { certificatePem: fs.readFileSync(files.cert, 'utf8'), privateKeyPem: fs.readFileSync(files.key, 'utf8') };
}

function call(server: URL, ca: string, secret: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: server.hostname.replace(/^\[|\]$/g, ''),
        port: server.port || 443,
        method,
        path: route,
        ca,
        timeout: 30_000,
        headers: {
          Authorization: `Bearer ${secret}`,
          ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

/** Fetch the cluster identity from a server and write it into this server's data dir. */
async function joinIdentity(options: ManagedDatastoreOptions): Promise<{ ca: KeyPair; server: URL; caPem: string; secret: string }> {
  if (!options.token) throw new ClusterJoinError('joining a cluster with --server needs its token (--token-file or --token; drover token show on a server)');
  const token = parseJoinToken(options.token);
  const server = new URL(options.joinServer!);
  let caPem: string;
  try {
    ({ caPem } = await fetchClusterCa(server, token));
  } catch (error) {
    if (error instanceof JoinError && error.fatal) throw new ClusterJoinError(error.message);
    throw error;
  }
  const sealed = await call(server, caPem, token.secret, 'GET', '/drover/v1/bootstrap');
  if (sealed.status !== 200) {
    throw new ClusterJoinError(`${server.origin} refused to hand over the cluster identity (HTTP ${sealed.status}): wrong --token?`);
  }
  const data = await openSealed(Buffer.from(sealed.body, 'utf8'), token.secret);
  const files = tlsFiles(options.dataDir);
  writeFileAtomic(files.cert, data.caCertificatePem, 0o644);
  writeFileAtomic(files.key, data.caKeyPem, 0o600);
  writeFileAtomic(files.admin, `${data.adminToken}\n`, 0o600);
  writeFileAtomic(files.token, `${formatJoinToken({ caHash: caHash(fs.readFileSync(files.cert, 'utf8')), user: 'server', secret: data.joinSecret })}\n`, 0o600);
  return { ca: { certificatePem: data.caCertificatePem, privateKeyPem: data.caKeyPem }, server, caPem, secret: token.secret };
}

export async function openManagedDatastore(options: ManagedDatastoreOptions): Promise<{ datastore: Datastore; etcd: ManagedEtcd }> {
  const { logger } = options;
  let etcd: ManagedEtcd;
  const common = {
    ...(options.onMemberExit ? { onUnexpectedExit: options.onMemberExit } : {}),
    dataDir: options.dataDir,
    name: options.memberName,
    advertiseIp: options.advertiseIp,
    clientPort: options.clientPort,
    peerPort: options.peerPort,
    logger,
  };
  if (hasEtcdData(options.dataDir)) {
    const ca = localCa(options.dataDir);
    if (!ca) throw new ClusterJoinError('etcd data is on disk but the cluster CA is missing from the data dir');
    etcd = await startManagedEtcd({ ...common, ca, mode: 'restart' });
  } else if (options.joinServer) {
    const joined = await joinIdentity(options);
    const peerUrl = `https://${options.advertiseIp.includes(':') ? `[${options.advertiseIp}]` : options.advertiseIp}:${options.peerPort}`;
    const added = await call(joined.server, joined.caPem, joined.secret, 'POST', '/drover/v1/etcd/members', {
      name: options.memberName,
      peerURL: peerUrl,
    });
    if (added.status !== 200) {
      // Not a configuration problem: the cluster could not take a member now (exit 1, try again).
      throw new Error(`${joined.server.origin} could not add this server as an etcd member (HTTP ${added.status}): ${added.body}`);
    }
    const { initialCluster } = JSON.parse(added.body) as { initialCluster: string };
    logger.info({ initialCluster }, 'added as an etcd member; starting it with the existing cluster state');
    etcd = await startManagedEtcd({ ...common, ca: joined.ca, mode: 'existing', initialCluster });
  } else {
    const ca = localCa(options.dataDir) ?? (await createCertificateAuthority(`drover-server-ca@${Math.floor(Date.now() / 1000)}`));
    const files = tlsFiles(options.dataDir);
    if (!fs.existsSync(files.cert)) {
      writeFileAtomic(files.key, `${ca.privateKeyPem.trim()}\n`, 0o600);
      writeFileAtomic(files.cert, `${ca.certificatePem.trim()}\n`, 0o644);
    }
    etcd = await startManagedEtcd({ ...common, ca, mode: 'new' });
  }
  const { openEtcdDatastore } = await import('../datastore/etcd.js');
  const datastore = await openEtcdDatastore({
    endpoints: [etcd.endpoint],
    ca: etcd.clientTls.ca,
    cert: etcd.clientTls.cert,
    key: etcd.clientTls.key,
  });
  return { datastore, etcd };
}

/**
 * A control-plane-only server: no member of its own; it connects to the members' client URLs
 * with a client certificate it issues from the cluster CA. The URLs are learned once from the
 * server it joins and kept in the data dir, so a restart does not need that server.
 */
/** How to reach the etcd members with the member API (TLS client credentials). */
export interface EtcdAccess {
  endpoints: string[];
  ca: string;
  cert: string;
  key: string;
}

export async function openMemberlessDatastore(options: ManagedDatastoreOptions): Promise<{ datastore: Datastore; access: EtcdAccess }> {
  const endpointsFile = path.join(options.dataDir, 'server', 'etcd-endpoints.json');
  let ca = localCa(options.dataDir);
  let endpoints: string[] | undefined;
  if (ca && fs.existsSync(endpointsFile)) {
    endpoints = JSON.parse(fs.readFileSync(endpointsFile, 'utf8')) as string[];
  } else {
    const joined = await joinIdentity(options);
    ca = joined.ca;
    const answer = await call(joined.server, joined.caPem, joined.secret, 'GET', '/drover/v1/etcd/endpoints');
    if (answer.status !== 200) {
      throw new ClusterJoinError(`${joined.server.origin} did not list its etcd members (HTTP ${answer.status}): join a server that runs one`);
    }
    endpoints = (JSON.parse(answer.body) as { endpoints: string[] }).endpoints;
    writeFileAtomic(endpointsFile, JSON.stringify(endpoints), 0o644);
  }
  const tlsDir = path.join(options.dataDir, 'server', 'tls', 'etcd');
  const certFile = path.join(tlsDir, 'client.crt');
  const keyFile = path.join(tlsDir, 'client.key');
  if (!fs.existsSync(certFile) || !fs.existsSync(keyFile)) {
    const issued = await issueCertificate(ca, { commonName: 'drover-etcd-client', usage: 'client' });
    writeFileAtomic(keyFile, issued.privateKeyPem, 0o600);
    writeFileAtomic(certFile, issued.certificatePem, 0o644);
  }
  options.logger.info({ endpoints }, 'control-plane only: using the cluster’s etcd members');
  const { openEtcdDatastore } = await import('../datastore/etcd.js');
  const datastore = await openEtcdDatastore({ endpoints, ca: ca.certificatePem, certFile, keyFile });
  return {
    datastore,
    access: { endpoints, ca: ca.certificatePem, cert: fs.readFileSync(certFile, 'utf8'), key: fs.readFileSync(keyFile, 'utf8') },
  };
}
