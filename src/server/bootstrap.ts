import fs from 'node:fs';
import path from 'node:path';
import { BootstrapTokenError, type BootstrapData, clusterExists, type CompleteBootstrapData, loadOrCreateBootstrap } from '../cluster/bootstrap-data.js';
import { agentSecretFor, caHash, formatJoinToken, parseJoinToken } from '../cluster/join-token.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { createCertificateAuthority, type KeyPair } from '../security/pki.js';
import { generateSecret } from '../security/tokens.js';

/**
 * The cluster's identity on this server: the CA, the admin token and the join token. The first
 * server of a cluster creates them; every other server sharing the datastore reads them from the
 * encrypted bootstrap data with the server token it was given, and writes them into its own data
 * dir. The datastore's copy wins over local files, so all servers agree.
 */

export class ClusterJoinError extends Error {
  override name = 'ClusterJoinError';
}

export interface ClusterIdentity {
  /** The server CA's certificate (API serving certificates; what join tokens pin). */
  caCertificatePem: string;
  /** Signs agents' serving certificates; only API servers and peers' supervisors trust it. */
  nodeCa: KeyPair;
  /** Signs client certificates: the API servers' to the agents. */
  clientCa: KeyPair;
  adminToken: string;
  /** The server token: joins agents and servers, and unlocks the cluster identity. */
  joinToken: string;
  joinSecret: string;
  /** The agent token: joins agents only. */
  agentToken: string;
  agentSecret: string;
}

function readIfPresent(file: string): string | undefined {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').trim() || undefined : undefined;
}

export async function establishClusterIdentity(options: {
  datastore: Datastore;
  dataDir: string;
  tokenOption?: string;
  logger: Logger;
}): Promise<ClusterIdentity> {
  const { datastore, dataDir, logger } = options;
  const tlsDir = path.join(dataDir, 'server', 'tls');
  const caCertFile = path.join(tlsDir, 'server-ca.crt');
  const caKeyFile = path.join(tlsDir, 'server-ca.key');
  const adminFile = path.join(dataDir, 'server', 'cred', 'admin.token');
  const tokenFile = path.join(dataDir, 'token');

  const given = options.tokenOption ? parseJoinToken(options.tokenOption) : undefined;
  const local = readIfPresent(tokenFile);
  let secret = given?.secret ?? (local ? parseJoinToken(local).secret : undefined);
  if (!secret) {
    if (await clusterExists(datastore)) {
      throw new ClusterJoinError(
        'this datastore already holds a cluster: start this server with that cluster’s token (--token-file or --token; `drover token show` on one of its servers)',
      );
    }
    secret = generateSecret(24);
  }

  let bootstrap: { data: CompleteBootstrapData; created: boolean };
  try {
    bootstrap = await loadOrCreateBootstrap(datastore, secret, async () => {
      // First server of the cluster. An existing data dir from before bootstrap data existed
      // keeps its CA and admin token.
      const caCert = readIfPresent(caCertFile);
      const caKey = readIfPresent(caKeyFile);
      const ca = caCert && caKey ? { certificatePem: `${caCert}\n`, privateKeyPem: `${caKey}\n` } : await createCertificateAuthority(`drover-server-ca@${Math.floor(Date.now() / 1000)}`);
      return {
        caCertificatePem: ca.certificatePem,
        caKeyPem: ca.privateKeyPem,
        adminToken: readIfPresent(adminFile) ?? generateSecret(),
        joinSecret: secret!,
      };
    }, completeAuthorities);
  } catch (error) {
    if (error instanceof BootstrapTokenError) throw new ClusterJoinError(error.message);
    throw error;
  }
  const data = bootstrap.data;
  if (given?.caHash && given.caHash !== caHash(data.caCertificatePem)) {
    throw new ClusterJoinError('the --token pins a CA that is not this cluster’s CA: wrong token for this datastore');
  }
  if (bootstrap.created) logger.info('created the cluster identity (CA, admin token, join token) and stored it, encrypted, in the datastore');
  else logger.info('loaded the cluster identity from the datastore');

  const writeIfChanged = (file: string, content: string, mode: number): void => {
    if (readIfPresent(file) !== content.trim()) writeFileAtomic(file, content.endsWith('\n') ? content : `${content}\n`, mode);
  };
  writeIfChanged(caCertFile, data.caCertificatePem, 0o644);
  writeIfChanged(caKeyFile, data.caKeyPem, 0o600);
  writeIfChanged(path.join(tlsDir, 'node-ca.crt'), data.nodeCaCertificatePem, 0o644);
  writeIfChanged(path.join(tlsDir, 'node-ca.key'), data.nodeCaKeyPem, 0o600);
  writeIfChanged(path.join(tlsDir, 'client-ca.crt'), data.clientCaCertificatePem, 0o644);
  writeIfChanged(path.join(tlsDir, 'client-ca.key'), data.clientCaKeyPem, 0o600);
  writeIfChanged(adminFile, data.adminToken, 0o600);
  const caPem = fs.readFileSync(caCertFile, 'utf8');
  const joinToken = formatJoinToken({ caHash: caHash(caPem), user: 'server', secret: data.joinSecret });
  writeIfChanged(tokenFile, joinToken, 0o600);
  const agentSecret = agentSecretFor(data.joinSecret);
  const agentToken = formatJoinToken({ caHash: caHash(caPem), user: 'node', secret: agentSecret });
  writeIfChanged(path.join(dataDir, 'agent-token'), agentToken, 0o600);
  return {
    caCertificatePem: caPem,
    nodeCa: { certificatePem: data.nodeCaCertificatePem, privateKeyPem: data.nodeCaKeyPem },
    clientCa: { certificatePem: data.clientCaCertificatePem, privateKeyPem: data.clientCaKeyPem },
    adminToken: data.adminToken,
    joinToken,
    joinSecret: data.joinSecret,
    agentToken,
    agentSecret,
  };
}

/**
 * The node and client CAs, made when the cluster is (or, for a cluster from before them, once by
 * whichever server starts first). Separate from the server CA, so that nothing a node can obtain
 * is a certificate that kubectl or an agent would accept for an API server.
 */
async function completeAuthorities(data: BootstrapData): Promise<CompleteBootstrapData> {
  const stamp = Math.floor(Date.now() / 1000);
  const nodeCa = data.nodeCaCertificatePem && data.nodeCaKeyPem
    ? { certificatePem: data.nodeCaCertificatePem, privateKeyPem: data.nodeCaKeyPem }
    : await createCertificateAuthority(`drover-node-ca@${stamp}`);
  const clientCa = data.clientCaCertificatePem && data.clientCaKeyPem
    ? { certificatePem: data.clientCaCertificatePem, privateKeyPem: data.clientCaKeyPem }
    : await createCertificateAuthority(`drover-client-ca@${stamp}`);
  return {
    ...data,
    nodeCaCertificatePem: nodeCa.certificatePem,
    nodeCaKeyPem: nodeCa.privateKeyPem,
    clientCaCertificatePem: clientCa.certificatePem,
    clientCaKeyPem: clientCa.privateKeyPem,
  };
}
