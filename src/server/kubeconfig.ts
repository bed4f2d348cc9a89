import path from 'node:path';
import { stringify } from 'yaml';
import { writeFileAtomic } from '../security/files.js';

export interface KubeconfigParams {
  serverUrl: string;
  caCertificatePem: string;
  token: string;
  clusterName?: string;
  userName?: string;
}

export function renderKubeconfig(params: KubeconfigParams): string {
  const cluster = params.clusterName ?? 'default';
  const user = params.userName ?? 'default';
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: cluster,
        cluster: {
          server: params.serverUrl,
          'certificate-authority-data': Buffer.from(params.caCertificatePem).toString('base64'),
        },
      },
    ],
    contexts: [{ name: cluster, context: { cluster, user } }],
    'current-context': cluster,
    preferences: {},
    users: [{ name: user, user: { token: params.token } }],
  });
}

/** Kubeconfigs carry the admin token: always mode 0600. */
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
