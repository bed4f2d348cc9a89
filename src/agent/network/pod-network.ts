import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from '../../logging/logger.js';
import { type Cidr, nodeCidrGateway, type ServiceNetwork } from '../../node-protocol/service-network.js';
import { namespacesDir } from '../pods/runtime/names.js';
import { isNsfs, pinNetworkNamespace } from '../pods/runtime/sandbox.js';
import { unmount } from '../pods/runtime/host-mounts.js';
import { Nft } from './nftables.js';
import { addNetworkList, type CniResult, type CniTarget, DEFAULT_CNI_BIN_DIRS, delNetworkList, type NetworkConfigList, resultIpv4 } from './cni.js';

const execFileAsync = promisify(execFile);

/**
 * The node's pod network, as a CRI runtime and flannel's CNI config give it on K3s: one bridge
 * (`drover0`) holding the node's pod CIDR, each runc pod in a network namespace of its own
 * wired to it by the standard CNI plugins (bridge with host-local IPAM, loopback, portmap for
 * hostPort), pod traffic leaving the cluster masqueraded. The routes to other nodes' pod CIDRs
 * are overlay.ts's.
 *
 * The ADD result of each pod is cached in `<data-dir>/agent/cni/results/<pod uid>.json`: DEL
 * needs it, the pod's address comes from it, and at start the cache is compared with the pods
 * there are, so a pod that went while the agent was down (kill -9) gives its address back.
 */

export const BRIDGE_NAME = 'drover0';
export const NETWORK_NAME = 'drover';
export const MASQUERADE_TABLE = 'drover-net';
const CNI_VERSION = '1.0.0';

export interface PortMapping {
  hostPort: number;
  containerPort: number;
  protocol: 'tcp' | 'udp' | 'sctp';
  hostIP?: string;
}

export interface PodNetworkOptions {
  agentDir: string;
  network: ServiceNetwork;
  podCidr: Cidr;
  /** The pods' MTU: the node's interface MTU, less the overlay's overhead. */
  mtu: number;
  logger: Logger;
  cniBinDirs?: readonly string[];
}

interface CachedAttachment {
  uid: string;
  namespace: string;
  name: string;
  netns: string;
  portMappings: PortMapping[];
  result: CniResult;
}

export interface Attachment {
  podIp: string;
}

function writeSysctl(name: string, value: string): boolean {
  try {
    fs.writeFileSync(path.join('/proc/sys', ...name.split('.')), value);
    return true;
  } catch {
    return false;
  }
}

/** The masquerade rules of the pod network: one table of its own, replaced whole. */
export function masqueradeRules(clusterCidr: string): string {
  return [
    `table ip ${MASQUERADE_TABLE}`,
    `delete table ip ${MASQUERADE_TABLE}`,
    `table ip ${MASQUERADE_TABLE} {`,
    '  chain postrouting {',
    '    type nat hook postrouting priority 100; policy accept;',
    // Pod to pod (on this node or another) keeps its source; anything leaving the cluster's
    // pod network looks like the node, as flannel's ip-masq does. Multicast is left alone.
    `    ip saddr ${clusterCidr} ip daddr != ${clusterCidr} ip daddr != 224.0.0.0/4 masquerade fully-random`,
    '  }',
    '  chain forward {',
    // A host firewall whose forward policy is drop (Docker's) would cut pods off: accept theirs.
    '    type filter hook forward priority 0; policy accept;',
    `    ip saddr ${clusterCidr} accept`,
    `    ip daddr ${clusterCidr} accept`,
    '  }',
    '}',
    '',
  ].join('\n');
}

export class PodNetwork {
  private readonly binDirs: readonly string[];
  private readonly resultsDir: string;
  private readonly ipamDir: string;
  private readonly list: NetworkConfigList;
  /** One CNI operation at a time per pod (the specification forbids parallel ones). */
  private readonly busy = new Map<string, Promise<unknown>>();
  /**
   * Each attached pod's address, as its cached result has it: read from the cache files once at
   * setUp, then kept with every attach and release. Every status report asks for it, so it is
   * never read from disk there.
   */
  private readonly addresses = new Map<string, string>();

  constructor(private readonly options: PodNetworkOptions) {
    this.binDirs = options.cniBinDirs ?? DEFAULT_CNI_BIN_DIRS;
    this.resultsDir = path.join(options.agentDir, 'cni', 'results');
    this.ipamDir = path.join(options.agentDir, 'cni', 'ipam');
    this.list = {
      cniVersion: CNI_VERSION,
      name: NETWORK_NAME,
      plugins: [
        {
          type: 'bridge',
          bridge: BRIDGE_NAME,
          isGateway: true,
          // Masquerading is ours (masqueradeRules), in a table of our own, not the plugin's iptables.
          ipMasq: false,
          hairpinMode: true,
          mtu: options.mtu,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: options.podCidr.text, gateway: nodeCidrGateway(options.podCidr) }]],
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: this.ipamDir,
          },
        },
        { type: 'portmap', capabilities: { portMappings: true }, snat: true },
      ],
    };
  }

  get podCidr(): Cidr {
    return this.options.podCidr;
  }

  /** Node-wide setup: forwarding, bridged traffic through netfilter (Services), the masquerade table. */
  async setUp(): Promise<void> {
    fs.mkdirSync(this.resultsDir, { recursive: true, mode: 0o700 });
    fs.mkdirSync(this.ipamDir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(this.options.agentDir, 'cni', `10-${NETWORK_NAME}.conflist`), `${JSON.stringify(this.list, null, 2)}\n`, { mode: 0o600 });
    if (!writeSysctl('net.ipv4.ip_forward', '1')) this.options.logger.warn('cannot turn on net.ipv4.ip_forward; pods cannot leave this node');
    // Replies of a pod reached through a Service from a pod on the same bridge must pass conntrack.
    if (!writeSysctl('net.bridge.bridge-nf-call-iptables', '1')) {
      this.options.logger.warn('net.bridge.bridge-nf-call-iptables is not available (module br_netfilter); a pod reaching a Service backed by a pod on the same node may hang');
    }
    for (const file of safeList(this.resultsDir)) {
      if (!file.endsWith('.json')) continue;
      const cached = this.readEntry(file.slice(0, -'.json'.length));
      const ip = cached ? resultIpv4(cached.result) : undefined;
      if (cached && ip) this.addresses.set(cached.uid, ip);
    }
    await new Nft().apply(masqueradeRules(this.options.network.clusterCidr.text));
    this.options.logger.info({ podCIDR: this.options.podCidr.text, bridge: BRIDGE_NAME, mtu: this.options.mtu }, 'pod network ready');
  }

  private cacheFile(uid: string): string {
    return path.join(this.resultsDir, `${uid}.json`);
  }

  /** The pod's cached attachment: its ADD result, or (`pending`) what an ADD in progress wrote first. */
  private readEntry(uid: string, which: 'result' | 'pending' = 'result'): CachedAttachment | undefined {
    try {
      return JSON.parse(fs.readFileSync(which === 'result' ? this.cacheFile(uid) : `${this.cacheFile(uid)}.pending`, 'utf8')) as CachedAttachment;
    } catch {
      return undefined;
    }
  }

  /** The pod's address, when it is attached. */
  podIp(uid: string): string | undefined {
    return this.addresses.get(uid);
  }

  private serial<T>(uid: string, work: () => Promise<T>): Promise<T> {
    const previous = this.busy.get(uid) ?? Promise.resolve();
    const next = previous.then(work, work);
    this.busy.set(uid, next);
    void next.finally(() => this.busy.get(uid) === next && this.busy.delete(uid)).catch(() => undefined);
    return next;
  }

  private target(cached: Pick<CachedAttachment, 'uid' | 'namespace' | 'name' | 'netns'>, ifName: string): CniTarget {
    return {
      containerId: cached.uid,
      netns: cached.netns,
      ifName,
      args: { K8S_POD_NAMESPACE: cached.namespace, K8S_POD_NAME: cached.name, K8S_POD_UID: cached.uid, K8S_POD_INFRA_CONTAINER_ID: cached.uid },
    };
  }

  /**
   * The pod's network namespace, wired: found again when the cache and the pinned namespace are
   * both there (a supervisor restarted), else made anew (what a half-done earlier attempt left is
   * deleted first: ADD is not idempotent).
   */
  attach(pod: { uid: string; namespace: string; name: string; podDir: string; portMappings: PortMapping[] }): Promise<Attachment> {
    return this.serial(pod.uid, async () => {
      const cached = this.readEntry(pod.uid);
      const netnsFile = path.join(namespacesDir(pod.podDir), 'net');
      if (cached && cached.netns === netnsFile && fs.existsSync(netnsFile)) {
        const ip = resultIpv4(cached.result);
        if (ip && isNsfs(netnsFile)) {
          this.addresses.set(pod.uid, ip);
          return { podIp: ip };
        }
      }
      if (cached) await this.release(cached);
      const netns = pinNetworkNamespace(pod.podDir);
      const entry = { uid: pod.uid, namespace: pod.namespace, name: pod.name, netns, portMappings: pod.portMappings };
      // Written before ADD: a crash in the middle still leaves what DEL needs.
      const pendingFile = `${this.cacheFile(pod.uid)}.pending`;
      fs.writeFileSync(pendingFile, JSON.stringify(entry), { mode: 0o600 });
      try {
        await addNetworkList(this.binDirs, { cniVersion: CNI_VERSION, name: 'loopback', plugins: [{ type: 'loopback' }] }, this.target(entry, 'lo'), {});
        const result = await addNetworkList(this.binDirs, this.list, this.target(entry, 'eth0'), { portMappings: pod.portMappings });
        const ip = resultIpv4(result);
        if (!ip) throw new Error(`the CNI result has no IPv4 address: ${JSON.stringify(result)}`);
        fs.writeFileSync(this.cacheFile(pod.uid), JSON.stringify({ ...entry, result }), { mode: 0o600 });
        fs.rmSync(pendingFile, { force: true });
        this.addresses.set(pod.uid, ip);
        this.options.logger.info({ pod: `${pod.namespace}/${pod.name}`, podIP: ip }, 'pod network attached');
        return { podIp: ip };
      } catch (error) {
        await delNetworkList(this.binDirs, this.list, this.target(entry, 'eth0'), { portMappings: pod.portMappings }, undefined).catch(() => undefined);
        fs.rmSync(pendingFile, { force: true });
        throw error;
      }
    });
  }

  /** Give the pod's address back and remove its namespace. Safe to repeat; a pod never attached is a no-op. */
  detach(uid: string, podDir: string | undefined): Promise<void> {
    return this.serial(uid, async () => {
      const cached = this.readEntry(uid) ?? this.readEntry(uid, 'pending');
      if (cached) await this.release(cached);
      if (!podDir) return;
      const netns = path.join(namespacesDir(podDir), 'net');
      if (isNsfs(netns)) unmount(netns);
    });
  }

  private async release(cached: CachedAttachment): Promise<void> {
    // The namespace may be gone already (the supervisor unpinned it, the host rebooted): plugins
    // then get an empty CNI_NETNS, as the specification allows for DEL, and release the rest.
    const live = isNsfs(cached.netns);
    await delNetworkList(this.binDirs, this.list, { ...this.target(cached, 'eth0'), netns: live ? cached.netns : '' }, { portMappings: cached.portMappings }, cached.result);
    fs.rmSync(this.cacheFile(cached.uid), { force: true });
    fs.rmSync(`${this.cacheFile(cached.uid)}.pending`, { force: true });
    this.addresses.delete(cached.uid);
    this.options.logger.info({ pod: `${cached.namespace}/${cached.name}`, podIP: cached.result ? resultIpv4(cached.result) : undefined }, 'pod network released');
  }

  /**
   * At start: every cached attachment of a pod that is not here any more is released, and every
   * host-local reservation no attachment explains is removed (what an agent killed between ADD and
   * its cache write left), so no address leaks.
   */
  async reconcile(livePodUids: ReadonlySet<string>): Promise<{ released: number; freed: number }> {
    let released = 0;
    let freed = 0;
    const known = new Set<string>();
    for (const file of safeList(this.resultsDir)) {
      const uid = file.replace(/\.json(\.pending)?$/, '');
      if (livePodUids.has(uid)) {
        known.add(uid);
        continue;
      }
      try {
        const entry = this.readEntry(uid) ?? this.readEntry(uid, 'pending');
        // The pin is `<pod dir>/ns/net`.
        await this.detach(uid, entry ? path.dirname(path.dirname(entry.netns)) : undefined);
        released++;
      } catch (error) {
        this.options.logger.warn({ err: error, uid }, 'cannot release the network of a pod that is gone; will retry at the next start');
      }
    }
    const rangeDir = path.join(this.ipamDir, NETWORK_NAME);
    for (const file of safeList(rangeDir)) {
      if (!/^\d+\.\d+\.\d+\.\d+$/.test(file)) continue;
      const owner = readFirstLine(path.join(rangeDir, file));
      if (owner && !known.has(owner) && !livePodUids.has(owner)) {
        fs.rmSync(path.join(rangeDir, file), { force: true });
        freed++;
      }
    }
    if (released || freed) this.options.logger.info({ released, freed }, 'released the pod network of pods that went while the agent was down');
    return { released, freed };
  }
}

function safeList(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

function readFirstLine(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').split(/\r?\n/)[0]?.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The MTU of the interface holding `ip`, or undefined. */
export async function interfaceMtu(ip: string): Promise<{ name: string; mtu: number } | undefined> {
  try {
    const { stdout } = await execFileAsync('ip', ['-j', 'addr', 'show']);
    const links = JSON.parse(stdout) as { ifname: string; mtu: number; addr_info?: { local?: string }[] }[];
    const link = links.find((l) => (l.addr_info ?? []).some((a) => a.local === ip));
    return link ? { name: link.ifname, mtu: link.mtu } : undefined;
  } catch {
    return undefined;
  }
}
