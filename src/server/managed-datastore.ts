import fs from 'node:fs';
import path from 'node:path';
import { fetchClusterCa, JoinError } from '../agent/bootstrap.js';
import { open as openSealed } from '../cluster/bootstrap-data.js';
import { caHash, formatJoinToken, parseJoinToken } from '../cluster/join-token.js';
import type { EtcdAccess } from '../cluster/etcd-membership.js';
import { etcdDataDir, hasEtcdData, type ManagedEtcd, ManagedEtcdError, type ManagedEtcdOptions, startManagedEtcd } from '../cluster/managed-etcd.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { createCertificateAuthority, issueCertificate, type KeyPair } from '../security/pki.js';
import { ClusterJoinError } from './bootstrap.js';
import {
  awaitPromotion,
  call,
  clearPendingJoin,
  type JoinTarget,
  memberGone,
  type PendingJoin,
  readPendingJoin,
  requestMembership,
  RetryWait,
  statusMessage,
  writePendingJoin,
} from './etcd-join.js';

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

/**
 * Fetch the cluster identity from a server and write it into this server's data dir. A server
 * that does not answer yet (started at the same moment as this one) is waited for; a wrong token
 * or CA pin is final.
 */
async function joinIdentity(options: ManagedDatastoreOptions): Promise<{ ca: KeyPair; target: JoinTarget }> {
  if (!options.token) throw new ClusterJoinError('joining a cluster with --server needs its token (--token-file or --token; drover token show on a server)');
  const token = parseJoinToken(options.token);
  const server = new URL(options.joinServer!);
  const wait = new RetryWait(options.logger, `${server.origin} to hand over the cluster identity`);
  let caPem: string;
  let sealed: Awaited<ReturnType<typeof call>>;
  for (;;) {
    try {
      ({ caPem } = await fetchClusterCa(server, token));
      sealed = await call(server, caPem, token.secret, 'GET', '/drover/v1/bootstrap');
    } catch (error) {
      if (error instanceof JoinError && error.fatal) throw new ClusterJoinError(error.message);
      await wait.retry(`${server.origin} does not answer (${error instanceof Error ? error.message : String(error)})`);
      continue;
    }
    // 5xx: the server is up but its datastore is not (yet) answering.
    if (sealed.status < 500) break;
    const seconds = Number(sealed.retryAfter);
    await wait.retry(`${server.origin} answered HTTP ${sealed.status}: ${statusMessage(sealed.body)}`, Number.isFinite(seconds) ? seconds : undefined);
  }
  if (sealed.status !== 200) {
    throw new ClusterJoinError(`${server.origin} refused to hand over the cluster identity (HTTP ${sealed.status}): wrong --token?`);
  }
  const data = await openSealed(Buffer.from(sealed.body, 'utf8'), token.secret);
  const files = tlsFiles(options.dataDir);
  writeFileAtomic(files.cert, data.caCertificatePem, 0o644);
  writeFileAtomic(files.key, data.caKeyPem, 0o600);
  writeFileAtomic(files.admin, `${data.adminToken}\n`, 0o600);
  writeFileAtomic(files.token, `${formatJoinToken({ caHash: caHash(fs.readFileSync(files.cert, 'utf8')), user: 'server', secret: data.joinSecret })}\n`, 0o600);
  return { ca: { certificatePem: data.caCertificatePem, privateKeyPem: data.caKeyPem }, target: { server, caPem, secret: token.secret } };
}

type MemberStart = Omit<ManagedEtcdOptions, 'ca' | 'mode' | 'initialCluster'>;

/**
 * Join as a learner and return the member once etcd has promoted it. Also resumes a join that a
 * previous run of this server left unfinished (server/etcd-join.json): a learner with data
 * restarts from it; a learner that was removed meanwhile (it was not promoted in time) is wiped
 * and this server joins again through the server that added it.
 */
async function joinAsLearner(options: ManagedDatastoreOptions, start: MemberStart): Promise<ManagedEtcd> {
  const { logger, dataDir } = options;
  const peerUrl = `https://${options.advertiseIp.includes(':') ? `[${options.advertiseIp}]` : options.advertiseIp}:${options.peerPort}`;
  let target: JoinTarget | undefined;
  const targetFor = async (pending: PendingJoin | undefined): Promise<{ ca: KeyPair; target: JoinTarget }> => {
    const ca = localCa(dataDir);
    const tokenFile = tlsFiles(dataDir).token;
    if (pending && ca && fs.existsSync(tokenFile)) {
      // Resuming: the identity is on disk already; ask the server that added the member.
      const secret = parseJoinToken(fs.readFileSync(tokenFile, 'utf8').trim()).secret;
      return { ca, target: target ?? { server: new URL(options.joinServer ?? pending.server), caPem: ca.certificatePem, secret } };
    }
    if (!options.joinServer) throw new ClusterJoinError('this server’s etcd join is unfinished and needs --server and --token to start again');
    return joinIdentity(options);
  };
  for (;;) {
    let pending = readPendingJoin(dataDir);
    let etcd: ManagedEtcd;
    if (pending && hasEtcdData(dataDir)) {
      const ca = localCa(dataDir);
      if (!ca) throw new ClusterJoinError('etcd data is on disk but the cluster CA is missing from the data dir');
      try {
        etcd = await startManagedEtcd({ ...start, ca, mode: 'restart' });
      } catch (error) {
        const tls = path.join(dataDir, 'server', 'tls', 'etcd');
        const access = {
          endpoints: pending.endpoints,
          ca: ca.certificatePem,
          cert: fs.readFileSync(path.join(tls, 'client.crt'), 'utf8'),
          key: fs.readFileSync(path.join(tls, 'client.key'), 'utf8'),
        };
        if ((await memberGone(access, pending.memberId)) !== true) throw error;
        logger.warn({ member: options.memberName }, 'this server’s etcd learner was removed while it was down (it was not promoted in time); joining again');
        fs.rmSync(etcdDataDir(dataDir), { recursive: true, force: true });
        // Keep the pending record: it names the server to ask again.
        continue;
      }
    } else {
      const joined = await targetFor(pending);
      target = joined.target;
      const { grant, ...asked } = await requestMembership(target, options.memberName, peerUrl, logger);
      pending = { ...grant, server: target.server.origin };
      // Before the member starts: a restart from here on resumes this join instead of starting over.
      writePendingJoin(dataDir, pending);
      logger.info(
        { initialCluster: grant.initialCluster, ...asked },
        grant.learner ? 'added as an etcd learner; starting its member with the existing cluster state' : 'already an etcd member; starting it with the existing cluster state',
      );
      etcd = await startManagedEtcd({ ...start, ca: joined.ca, mode: 'existing', initialCluster: grant.initialCluster });
    }
    let outcome: 'promoted' | 'removed';
    try {
      outcome = pending.learner ? await awaitPromotion(etcd, pending, logger) : 'promoted';
    } catch (error) {
      await etcd.stop();
      throw error;
    }
    if (outcome === 'promoted') {
      clearPendingJoin(dataDir);
      return etcd;
    }
    logger.warn({ member: options.memberName }, 'this server’s etcd learner was removed before it was promoted; joining again');
    await etcd.stop();
    fs.rmSync(etcdDataDir(dataDir), { recursive: true, force: true });
  }
}

export async function openManagedDatastore(options: ManagedDatastoreOptions): Promise<{ datastore: Datastore; etcd: ManagedEtcd }> {
  let etcd: ManagedEtcd;
  // Until this server's member is a voting member, its exit is handled by the join (which may
  // remove and start it again); from then on, the server cannot go on without it.
  let joined = false;
  const common: MemberStart = {
    onUnexpectedExit: (code) => {
      if (joined) options.onMemberExit?.(code);
    },
    dataDir: options.dataDir,
    name: options.memberName,
    advertiseIp: options.advertiseIp,
    clientPort: options.clientPort,
    peerPort: options.peerPort,
    logger: options.logger,
  };
  if (readPendingJoin(options.dataDir) || (options.joinServer && !hasEtcdData(options.dataDir))) {
    etcd = await joinAsLearner(options, common);
  } else if (hasEtcdData(options.dataDir)) {
    const ca = localCa(options.dataDir);
    if (!ca) throw new ClusterJoinError('etcd data is on disk but the cluster CA is missing from the data dir');
    etcd = await startManagedEtcd({ ...common, ca, mode: 'restart' });
  } else {
    const ca = localCa(options.dataDir) ?? (await createCertificateAuthority(`drover-server-ca@${Math.floor(Date.now() / 1000)}`));
    const files = tlsFiles(options.dataDir);
    if (!fs.existsSync(files.cert)) {
      writeFileAtomic(files.key, `${ca.privateKeyPem.trim()}\n`, 0o600);
      writeFileAtomic(files.cert, `${ca.certificatePem.trim()}\n`, 0o644);
    }
    etcd = await startManagedEtcd({ ...common, ca, mode: 'new' });
  }
  joined = true;
  if (etcd.hasExited()) throw new ManagedEtcdError('the managed etcd member exited during start-up; see server/etcd.log');
  const { openEtcdDatastoreInThread } = await import('../datastore/etcd-thread.js');
  const datastore = await openEtcdDatastoreInThread({
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
export type { EtcdAccess };

export async function openMemberlessDatastore(options: ManagedDatastoreOptions): Promise<{ datastore: Datastore; access: EtcdAccess }> {
  const endpointsFile = path.join(options.dataDir, 'server', 'etcd-endpoints.json');
  let ca = localCa(options.dataDir);
  let endpoints: string[] | undefined;
  if (ca && fs.existsSync(endpointsFile)) {
    endpoints = JSON.parse(fs.readFileSync(endpointsFile, 'utf8')) as string[];
  } else {
    const joined = await joinIdentity(options);
    ca = joined.ca;
    const { server, caPem, secret } = joined.target;
    const answer = await call(server, caPem, secret, 'GET', '/drover/v1/etcd/endpoints');
    if (answer.status !== 200) {
      throw new ClusterJoinError(`${server.origin} did not list its etcd members (HTTP ${answer.status}): join a server that runs one`);
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
  const { openEtcdDatastoreInThread } = await import('../datastore/etcd-thread.js');
  const datastore = await openEtcdDatastoreInThread({ endpoints, ca: ca.certificatePem, certFile, keyFile });
  return {
    datastore,
    access: { endpoints, ca: ca.certificatePem, cert: fs.readFileSync(certFile, 'utf8'), key: fs.readFileSync(keyFile, 'utf8') },
  };
}
