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
