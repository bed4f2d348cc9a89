import fs from 'node:fs';
import { parse } from 'yaml';
import { HttpClient } from '../client/http.js';

/** An HTTPS client from an admin kubeconfig (the current context's cluster and token). */

interface Kubeconfig {
  'current-context'?: string;
  contexts?: { name: string; context: { cluster: string; user: string } }[];
  clusters?: { name: string; cluster: { server: string; 'certificate-authority-data'?: string } }[];
  users?: { name: string; user: { token?: string } }[];
}

export function adminClient(file: string, options: { timeoutMs?: number } = {}): HttpClient {
  if (!fs.existsSync(file)) throw new Error(`kubeconfig ${file} does not exist; pass --kubeconfig`);
  const config = parse(fs.readFileSync(file, 'utf8')) as Kubeconfig;
  const context = config.contexts?.find((c) => c.name === config['current-context']) ?? config.contexts?.[0];
  const cluster = config.clusters?.find((c) => c.name === context?.context.cluster) ?? config.clusters?.[0];
  const user = config.users?.find((u) => u.name === context?.context.user) ?? config.users?.[0];
  if (!cluster || !user?.user.token) throw new Error(`kubeconfig ${file} has no cluster with a bearer token`);
  const ca = cluster.cluster['certificate-authority-data'];
  return new HttpClient({
    server: cluster.cluster.server,
    caPem: ca ? Buffer.from(ca, 'base64').toString('utf8') : '',
    token: user.user.token,
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
  });
}
