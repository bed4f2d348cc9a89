import fs from 'node:fs';
import { parse } from 'yaml';
import { HttpClient } from '../client/http.js';

/** An HTTPS client from an admin kubeconfig (the current context's cluster, and its token or client certificate). */

interface Kubeconfig {
  'current-context'?: string;
  contexts?: { name: string; context: { cluster: string; user: string } }[];
  clusters?: { name: string; cluster: { server: string; 'certificate-authority-data'?: string } }[];
  users?: { name: string; user: { token?: string; 'client-certificate-data'?: string; 'client-key-data'?: string } }[];
}

/** What Drover's commands need from a kubeconfig: where the cluster is, how to trust it, and the credential. */
export interface KubeconfigEntry {
  server: string;
  clusterName: string;
  caPem: string;
  token?: string;
  certificatePem?: string;
  keyPem?: string;
}

const fromBase64 = (data: string | undefined): string => (data ? Buffer.from(data, 'base64').toString('utf8') : '');

export function readKubeconfig(file: string): KubeconfigEntry {
  if (!fs.existsSync(file)) throw new Error(`kubeconfig ${file} does not exist; pass --kubeconfig`);
  const config = parse(fs.readFileSync(file, 'utf8')) as Kubeconfig;
  const context = config.contexts?.find((c) => c.name === config['current-context']) ?? config.contexts?.[0];
  const cluster = config.clusters?.find((c) => c.name === context?.context.cluster) ?? config.clusters?.[0];
  const user = config.users?.find((u) => u.name === context?.context.user) ?? config.users?.[0];
  const certificatePem = fromBase64(user?.user['client-certificate-data']);
  const keyPem = fromBase64(user?.user['client-key-data']);
  if (!cluster || !user || !(user.user.token || (certificatePem && keyPem))) {
    throw new Error(`kubeconfig ${file} has no cluster with a bearer token or an embedded client certificate`);
  }
  return {
    server: cluster.cluster.server,
    clusterName: cluster.name,
    caPem: fromBase64(cluster.cluster['certificate-authority-data']),
    ...(user.user.token ? { token: user.user.token } : { certificatePem, keyPem }),
  };
}

export function clientFor(entry: KubeconfigEntry, options: { timeoutMs?: number } = {}): HttpClient {
  return new HttpClient({
    server: entry.server,
    caPem: entry.caPem,
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    ...(entry.token ? { token: entry.token } : {}),
    ...(entry.certificatePem && entry.keyPem ? { certificatePem: entry.certificatePem, keyPem: entry.keyPem } : {}),
  });
}

export function adminClient(file: string, options: { timeoutMs?: number } = {}): HttpClient {
  return clientFor(readKubeconfig(file), options);
}
