import { isIPv4 } from 'node:net';

/**
 * The cluster's address plan for Services, from its cluster-scoped settings (`cluster-cidr`,
 * `service-cidr`, `service-node-port-range`, `cluster-dns`, `cluster-domain`, named as K3s names
 * them): parsed and checked once, then handed to the Service kind (ClusterIP and NodePort
 * allocation) and, later, to the agents' datapath. IPv4 only: dual stack is not supported yet.
 */

export interface Cidr {
  /** The network address as an unsigned 32-bit number. */
  base: number;
  prefix: number;
  /** How many addresses the block holds (2^(32 - prefix)). */
  size: number;
  text: string;
}

export interface PortRange {
  first: number;
  last: number;
  text: string;
}

export interface ServiceNetwork {
  clusterCidr: Cidr;
  serviceCidr: Cidr;
  nodePortRange: PortRange;
  clusterDns: string;
  clusterDomain: string;
}

/** The settings' defaults, as K3s's. */
export const SERVICE_NETWORK_DEFAULTS = {
  clusterCidr: '10.42.0.0/16',
  serviceCidr: '10.43.0.0/16',
  serviceNodePortRange: '30000-32767',
  clusterDns: '10.43.0.10',
  clusterDomain: 'cluster.local',
} as const;

export class ServiceNetworkError extends Error {
  override name = 'ServiceNetworkError';
}

export function ipv4ToNumber(ip: string): number {
  return ip.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
}

export function numberToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** `a.b.c.d/n` with the host bits zero; a message saying what is wrong otherwise. */
export function parseCidr(text: string): Cidr | string {
  const match = /^([^/]+)\/(\d{1,2})$/.exec(text);
  if (!match || !isIPv4(match[1]!)) return `${JSON.stringify(text)} is not an IPv4 CIDR (a.b.c.d/n; IPv6 is not supported yet)`;
  const prefix = Number(match[2]);
  if (prefix > 30) return `${JSON.stringify(text)}: a /${prefix} is too small (at most /30)`;
  if (prefix < 8) return `${JSON.stringify(text)}: a /${prefix} is too large (at least /8)`;
  const size = 2 ** (32 - prefix);
  const address = ipv4ToNumber(match[1]!);
  const base = address - (address % size);
  if (base !== address) return `${JSON.stringify(text)} has host bits set (the network is ${numberToIpv4(base)}/${prefix})`;
  return { base, prefix, size, text };
}

export function cidrContains(cidr: Cidr, ip: string): boolean {
  if (!isIPv4(ip)) return false;
  const n = ipv4ToNumber(ip);
  return n >= cidr.base && n < cidr.base + cidr.size;
}

export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  return a.base < b.base + b.size && b.base < a.base + a.size;
}

/** `first-last` (kube-apiserver's --service-node-port-range), or a message. */
export function parsePortRange(text: string): PortRange | string {
  const match = /^(\d{1,5})-(\d{1,5})$/.exec(text);
  if (!match) return `${JSON.stringify(text)} is not a port range (first-last, e.g. 30000-32767)`;
  const first = Number(match[1]);
  const last = Number(match[2]);
  if (first < 1 || last > 65535 || first > last) return `${JSON.stringify(text)}: the ports must satisfy 1 <= first <= last <= 65535`;
  return { first, last, text };
}

/** A DNS-1123 subdomain (`cluster.local`). */
function domainProblem(domain: string): string | undefined {
  if (domain.length > 253 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(domain)) {
    return `${JSON.stringify(domain)} is not a DNS domain (lower-case labels of letters, digits and '-', separated by dots)`;
  }
  return undefined;
}

export interface ServiceNetworkInput {
  clusterCidr: string;
  serviceCidr: string;
  serviceNodePortRange: string;
  clusterDns: string;
  clusterDomain: string;
}

/** The settings parsed, with every problem named by its key (and its source, when `source` tells it). */
export function parseServiceNetwork(
  input: ServiceNetworkInput,
  source: (key: string) => string = () => 'default',
): { network?: ServiceNetwork; problems: string[] } {
  const problems: string[] = [];
  const named = (key: string, problem: string): string => `${key} (${source(key)}): ${problem}`;
  const clusterCidr = parseCidr(input.clusterCidr);
  if (typeof clusterCidr === 'string') problems.push(named('cluster-cidr', clusterCidr));
  else if (clusterCidr.prefix > NODE_CIDR_PREFIX) {
    problems.push(named('cluster-cidr', `${JSON.stringify(input.clusterCidr)} is too small to give each node a /${NODE_CIDR_PREFIX} (at most /${NODE_CIDR_PREFIX})`));
  }
  const serviceCidr = parseCidr(input.serviceCidr);
  if (typeof serviceCidr === 'string') problems.push(named('service-cidr', serviceCidr));
  const nodePortRange = parsePortRange(input.serviceNodePortRange);
  if (typeof nodePortRange === 'string') problems.push(named('service-node-port-range', nodePortRange));
  const domain = domainProblem(input.clusterDomain);
  if (domain) problems.push(named('cluster-domain', domain));
  if (!isIPv4(input.clusterDns)) problems.push(named('cluster-dns', `${JSON.stringify(input.clusterDns)} is not an IPv4 address`));
  if (typeof serviceCidr !== 'string') {
    if (isIPv4(input.clusterDns) && !cidrContains(serviceCidr, input.clusterDns)) {
      problems.push(`cluster-dns ${input.clusterDns} (${source('cluster-dns')}) must lie inside service-cidr ${serviceCidr.text} (${source('service-cidr')})`);
    } else if (isIPv4(input.clusterDns)) {
      const n = ipv4ToNumber(input.clusterDns);
      if (n === serviceCidr.base || n === serviceCidr.base + serviceCidr.size - 1 || n === serviceCidr.base + 1) {
        problems.push(
          `cluster-dns ${input.clusterDns} (${source('cluster-dns')}) may not be the network, broadcast or first address of service-cidr ${serviceCidr.text} (the first is the kubernetes Service's)`,
        );
      }
    }
    if (typeof clusterCidr !== 'string' && cidrsOverlap(clusterCidr, serviceCidr)) {
      problems.push(`cluster-cidr ${clusterCidr.text} (${source('cluster-cidr')}) and service-cidr ${serviceCidr.text} (${source('service-cidr')}) overlap`);
    }
  }
  if (problems.length > 0) return { problems };
  return {
    network: {
      clusterCidr: clusterCidr as Cidr,
      serviceCidr: serviceCidr as Cidr,
      nodePortRange: nodePortRange as PortRange,
      clusterDns: input.clusterDns,
      clusterDomain: input.clusterDomain,
    },
    problems,
  };
}

/** The defaults parsed (they are valid). */
export function defaultServiceNetwork(): ServiceNetwork {
  const { network } = parseServiceNetwork(SERVICE_NETWORK_DEFAULTS);
  if (!network) throw new ServiceNetworkError('the default service network does not parse');
  return network;
}

/** The kubernetes Service's address: the first address after the network's. */
export function firstServiceIp(network: ServiceNetwork): string {
  return numberToIpv4(network.serviceCidr.base + 1);
}

/** Each node's share of cluster-cidr (kube-controller-manager's node-cidr-mask-size, as K3s sets it). */
export const NODE_CIDR_PREFIX = 24;

/** What a server tells an agent at registration: the settings as text (the agent parses them) and the backend. */
export interface ClusterNetworkSettings extends ServiceNetworkInput {
  /** `flannel-backend`: `none` means no pod network, no Service datapath, no cluster DNS on the nodes. */
  backend: 'vxlan' | 'host-gw' | 'none';
}

/**
 * The lowest node CIDR of the cluster CIDR that no node holds, or undefined when all are taken.
 * `used` may hold anything (CIDRs of another plan after a change are simply not in the way).
 */
export function nextNodeCidr(clusterCidr: Cidr, used: Iterable<string>): string | undefined {
  const taken = new Set(used);
  const size = 2 ** (32 - NODE_CIDR_PREFIX);
  for (let base = clusterCidr.base; base < clusterCidr.base + clusterCidr.size; base += size) {
    const text = `${numberToIpv4(base)}/${NODE_CIDR_PREFIX}`;
    if (!taken.has(text)) return text;
  }
  return undefined;
}

/** A node CIDR's gateway (its first address, on the node's pod bridge) and its prefix. */
export function nodeCidrGateway(nodeCidr: Cidr): string {
  return numberToIpv4(nodeCidr.base + 1);
}
