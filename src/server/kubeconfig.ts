import path from 'node:path';
import { stringify } from 'yaml';
import { writeFileAtomic } from '../security/files.js';

/** A credential in a kubeconfig: the admin's bearer token, or a user's client certificate. */
export type KubeconfigCredential = { token: string } | { clientCertificatePem: string; clientKeyPem: string };

export type KubeconfigParams = {
  serverUrl: string;
  caCertificatePem: string;
  clusterName?: string;
  userName?: string;
  /** Default: the cluster name. */
  contextName?: string;
} & KubeconfigCredential;

const base64 = (text: string): string => Buffer.from(text).toString('base64');

export function renderKubeconfig(params: KubeconfigParams): string {
  const cluster = params.clusterName ?? 'default';
  const user = params.userName ?? 'default';
  const context = params.contextName ?? cluster;
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: cluster,
        cluster: {
          server: params.serverUrl,
          'certificate-authority-data': base64(params.caCertificatePem),
        },
      },
    ],
    contexts: [{ name: context, context: { cluster, user } }],
    'current-context': context,
    preferences: {},
    users: [
      {
        name: user,
        user:
          'token' in params
            ? { token: params.token }
            : { 'client-certificate-data': base64(params.clientCertificatePem), 'client-key-data': base64(params.clientKeyPem) },
      },
    ],
  });
}

/** Kubeconfigs carry a credential: always mode 0600. */
export function writeKubeconfig(file: string, params: KubeconfigParams): void {
  writeFileAtomic(file, renderKubeconfig(params), 0o600);
}

/**
 * The admin kubeconfig in the data dir (rewritten at every start, after listening, so a port of 0
 * is resolved), and a copy where `write-kubeconfig` asks. Returns the data dir's.
 */
export function writeAdminKubeconfigs(dataDir: string, copyTo: string | undefined, params: KubeconfigParams): string {
  const file = path.join(dataDir, 'kubeconfig.yaml');
  writeKubeconfig(file, params);
  if (copyTo) writeKubeconfig(path.resolve(copyTo), params);
  return file;
}
