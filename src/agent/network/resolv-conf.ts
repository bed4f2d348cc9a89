import { getPath, type KubeObject } from '../../apiserver/objects.js';

/**
 * A pod's /etc/resolv.conf from its dnsPolicy and dnsConfig, as kubelet writes it: ClusterFirst
 * names the cluster DNS with the namespace's search path and `ndots:5`; Default takes the node's
 * resolvers; None takes only dnsConfig; ClusterFirstWithHostNet is ClusterFirst for hostNetwork
 * pods (ClusterFirst on a hostNetwork pod falls back to Default, as in Kubernetes). Pure.
 */

export interface HostResolv {
  nameservers: string[];
  searches: string[];
  options: string[];
}

/** Kubernetes' limits: three nameservers, 32 search domains (as kubelet since 1.28). */
const MAX_NAMESERVERS = 3;
const MAX_SEARCHES = 32;

export function parseResolvConf(text: string): HostResolv {
  const result: HostResolv = { nameservers: [], searches: [], options: [] };
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    const [key, ...values] = line.split(/\s+/);
    if (key === 'nameserver' && values[0]) result.nameservers.push(values[0]);
    else if (key === 'search' || key === 'domain') result.searches = values;
    else if (key === 'options') result.options.push(...values);
  }
  return result;
}

interface DnsConfig {
  nameservers?: string[];
  searches?: string[];
  options?: { name?: string; value?: string }[];
}

function mergeOptions(base: string[], extra: DnsConfig['options']): string[] {
  const byName = new Map<string, string>();
  for (const option of base) byName.set(option.split(':')[0]!, option);
  for (const option of extra ?? []) {
    if (!option.name) continue;
    byName.set(option.name, option.value !== undefined ? `${option.name}:${option.value}` : option.name);
  }
  return [...byName.values()];
}

export function podResolvConf(pod: KubeObject, clusterDns: string, clusterDomain: string, host: HostResolv): string {
  const hostNetwork = getPath(pod, ['spec', 'hostNetwork']) === true;
  const policy = (getPath(pod, ['spec', 'dnsPolicy']) as string | undefined) ?? 'ClusterFirst';
  const config = (getPath(pod, ['spec', 'dnsConfig']) as DnsConfig | undefined) ?? {};
  const namespace = pod.metadata.namespace ?? 'default';
  let nameservers: string[];
  let searches: string[];
  let options: string[];
  const cluster = policy === 'ClusterFirstWithHostNet' || (policy === 'ClusterFirst' && !hostNetwork);
  if (cluster) {
    nameservers = [clusterDns];
    searches = [`${namespace}.svc.${clusterDomain}`, `svc.${clusterDomain}`, clusterDomain, ...host.searches];
    options = ['ndots:5'];
  } else if (policy === 'None') {
    nameservers = [];
    searches = [];
    options = [];
  } else {
    nameservers = host.nameservers;
    searches = host.searches;
    options = host.options;
  }
  nameservers = [...new Set([...nameservers, ...(config.nameservers ?? [])])].slice(0, MAX_NAMESERVERS);
  searches = [...new Set([...searches, ...(config.searches ?? [])])].slice(0, MAX_SEARCHES);
  options = mergeOptions(options, config.options);
  const lines = nameservers.map((ns) => `nameserver ${ns}`);
  if (searches.length) lines.push(`search ${searches.join(' ')}`);
  if (options.length) lines.push(`options ${options.join(' ')}`);
  return lines.length ? `${lines.join('\n')}\n` : '';
}
