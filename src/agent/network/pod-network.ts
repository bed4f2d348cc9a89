import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from '../../logging/logger.js';
import { type Cidr, nodeCidrGateway, type ServiceNetwork } from '../../node-protocol/service-network.js';
import type { SandboxRunPaths } from '../pods/run-spec.js';
import { namespacesDir } from '../pods/runtime/names.js';
import { isNsfs } from '../pods/runtime/sandbox.js';
import { mountTable, unmount } from '../pods/runtime/host-mounts.js';
import { isSandboxId, listSandboxIds, makeSandbox, newSandboxId, removeSandbox, sandboxIntact, sandboxPaths } from './pod-sandbox.js';
import { Nft } from './nftables.js';
import { addNetworkList, type CniResult, type CniTarget, DEFAULT_CNI_BIN_DIRS, delNetworkList, type NetworkConfigList, resultIpv4 } from './cni.js';

const execFileAsync = promisify(execFile);

/**
 * The node's pod network, as a CRI runtime and flannel's CNI config give it on K3s: one bridge
 * (`drover0`) holding the node's pod CIDR, each runc pod in a sandbox of its own (its network,
 * IPC and UTS namespaces: pod-sandbox.ts) wired to it by the standard CNI plugins (bridge with
 * host-local IPAM, loopback, portmap for hostPort), pod traffic leaving the cluster masqueraded.
 * The routes to other nodes' pod CIDRs are overlay.ts's.
 *
 * One sandbox is kept made and wired ahead of need (the spare), at a low CPU priority, and the
 * next pod takes it: a pod's start then runs no CNI plugin unless it has hostPorts (portmap).
 *
 * The ADD result of each pod is cached in `<data-dir>/agent/cni/results/<pod uid>.json` (the
 * spare's under its sandbox id): DEL needs it, the pod's address comes from it, and at start the
 * cache is compared with the pods there are, so a pod that went while the agent was down (kill
 * -9) gives its address back.
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
  /** The pod's uid; for a spare sandbox not taken yet, the sandbox's id. */
  uid: string;
  /** The pod's namespace and name; empty for a spare. */
  namespace: string;
  name: string;
  netns: string;
  /** CNI's container id: the sandbox's id. Absent in entries from before agent-made sandboxes: the pod's uid. */
  containerId?: string;
  /** The agent-made sandbox (pod-sandbox.ts) holding the namespaces; absent: `netns` pinned in the pod's dir. */
  sandbox?: string;
  portMappings: PortMapping[];
  result: CniResult;
}

export interface Attachment {
  podIp: string;
  sandbox?: SandboxRunPaths;
}

/** The CPU priority of work done ahead of need (the spare sandboxes), below the pods starting now. */
const SPARE_NICENESS = 10;
/**
 * Spare sandboxes kept ready. One: with two, pods started back to back (the pod-start benchmark)
 * were slower, runc and process pods alike, as the refills took the CPU their starts needed.
 */
const SPARES = 1;
/**
 * How long after a pod took the spare the next one is begun: the pod's own start (its supervisor,
 * runc) comes first. Making a sandbox creates a network namespace and runs two Go plugins, which
 * slowed the runc start beside it by a half on a 2-core machine.
 */
const SPARE_REFILL_DELAY_MS = 500;

function writeSysctl(name: string, value: string): boolean {
  try {
    fs.writeFileSync(path.join('/proc/sys', ...name.split('.')), value);
    return true;
  } catch {
    return false;
  }
}

/** Written whole or not at all: a temporary file with the final mode, then renamed. */
function writeFileAtomic(file: string, content: string): void {
  const temporary = `${file}.tmp`;
  fs.writeFileSync(temporary, content, { mode: 0o600 });
  fs.renameSync(temporary, file);
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
  /** The list without portmap: a sandbox is wired before its pod, and so before its hostPorts, are known. */
  private readonly bridgeList: NetworkConfigList;
  private readonly portmapList: NetworkConfigList;
  private readonly loopbackList: NetworkConfigList = { cniVersion: CNI_VERSION, name: 'loopback', plugins: [{ type: 'loopback' }] };
  /** One CNI operation at a time per pod (the specification forbids parallel ones). */
  private readonly busy = new Map<string, Promise<unknown>>();
  /**
   * Each attached pod's address, as its cached result has it: read from the cache files once at
   * setUp, then kept with every attach and release. Every status report asks for it, so it is
   * never read from disk there.
   */
  private readonly addresses = new Map<string, string>();
  /** The spare sandboxes, wired and ready: the next pods take them. */
  private readonly spares: CachedAttachment[] = [];
  /** A spare being made (in the background, at a low CPU priority, one at a time), or about to be. */
  private makingSpare: Promise<void> | undefined;
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: PodNetworkOptions) {
    this.binDirs = options.cniBinDirs ?? DEFAULT_CNI_BIN_DIRS;
    this.resultsDir = path.join(options.agentDir, 'cni', 'results');
    this.ipamDir = path.join(options.agentDir, 'cni', 'ipam');
    const bridge = {
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
    };
    const portmap = { type: 'portmap', capabilities: { portMappings: true }, snat: true };
    this.list = { cniVersion: CNI_VERSION, name: NETWORK_NAME, plugins: [bridge, portmap] };
    this.bridgeList = { ...this.list, plugins: [bridge] };
    this.portmapList = { ...this.list, plugins: [portmap] };
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
      if (!file.endsWith('.json') || isSandboxId(file.slice(0, -'.json'.length))) continue;
      const cached = this.readEntry(file.slice(0, -'.json'.length));
      const ip = cached ? resultIpv4(cached.result) : undefined;
      if (cached && ip) this.addresses.set(cached.uid, ip);
    }
    await new Nft().apply(masqueradeRules(this.options.network.clusterCidr.text));
    this.options.logger.info({ podCIDR: this.options.podCidr.text, bridge: BRIDGE_NAME, mtu: this.options.mtu }, 'pod network ready');
  }

  /** No more spares (the agent stops). What is cached stays for the next start. */
  close(): void {
    this.closed = true;
    clearTimeout(this.refillTimer);
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

  private target(cached: Pick<CachedAttachment, 'uid' | 'namespace' | 'name' | 'netns' | 'containerId'>, ifName: string): CniTarget {
    const containerId = cached.containerId ?? cached.uid;
    return {
      containerId,
      netns: cached.netns,
      ifName,
      args: cached.namespace
        ? { K8S_POD_NAMESPACE: cached.namespace, K8S_POD_NAME: cached.name, K8S_POD_UID: cached.uid, K8S_POD_INFRA_CONTAINER_ID: containerId }
        : {},
    };
  }

  private sandboxRunPaths(entry: CachedAttachment): SandboxRunPaths | undefined {
    if (!entry.sandbox) return undefined;
    const { net, ipc, uts, shm } = sandboxPaths(this.options.agentDir, entry.sandbox);
    return { net, ipc, uts, shm };
  }

  /** Whether a cached attachment's namespaces are still there (not after a reboot). */
  private intact(entry: CachedAttachment): boolean {
    if (entry.sandbox) return sandboxIntact(sandboxPaths(this.options.agentDir, entry.sandbox), mountTable());
    return fs.existsSync(entry.netns) && isNsfs(entry.netns);
  }

  /**
   * The pod's network: found again when its cache entry and namespaces are both there (a
   * supervisor restarted), else the spare sandbox (made ahead, wired) or a sandbox made now,
   * given the pod's hostPorts. What a half-done earlier attempt left is released first: ADD is
   * not idempotent.
   */
  attach(pod: { uid: string; namespace: string; name: string; podDir: string; portMappings: PortMapping[] }): Promise<Attachment> {
    return this.serial(pod.uid, async () => {
      const cached = this.readEntry(pod.uid);
      if (cached && this.intact(cached)) {
        const ip = resultIpv4(cached.result);
        if (ip) {
          this.addresses.set(pod.uid, ip);
          const sandbox = this.sandboxRunPaths(cached);
          return { podIp: ip, ...(sandbox ? { sandbox } : {}) };
        }
      }
      if (cached) await this.release(cached);
      const spare = this.spares.shift();
      // A spare still being made is not waited for: it is made at a low priority, and a pod must
      // not wait behind that. This pod makes its own at the agent's; the other stays for the next.
      const made = spare ?? (await this.makeSandbox(newSandboxId(), 0));
      this.refill(SPARE_REFILL_DELAY_MS);
      return this.claim(pod, made);
    });
  }

  /** Keep one sandbox wired and ready, made at a low CPU priority. A failure is logged; the next pod then makes its own. */
  private refill(delayMs = 0): void {
    if (this.closed || this.spares.length >= SPARES || this.makingSpare || this.refillTimer) return;
    if (delayMs > 0) {
      this.refillTimer = setTimeout(() => {
        this.refillTimer = undefined;
        this.refill();
      }, delayMs);
      this.refillTimer.unref();
      return;
    }
    this.makingSpare = this.makeSandbox(newSandboxId(), SPARE_NICENESS)
      .then(
        (made) => {
          this.spares.push(made);
          this.makingSpare = undefined;
          this.refill();
        },
        (error: unknown) => {
          this.makingSpare = undefined;
          this.options.logger.warn({ err: error }, 'cannot make a spare pod sandbox; the next pod makes its own');
        },
      );
  }

  /**
   * A sandbox (pod-sandbox.ts) wired to the pod network: loopback and the bridge with its
   * address, at the same time (different networks of one container, as containerd's CNI library
   * runs them). Cached under the sandbox's id until a pod takes it.
   */
  private async makeSandbox(id: string, niceness: number): Promise<CachedAttachment> {
    const paths = sandboxPaths(this.options.agentDir, id);
    const entry = { uid: id, namespace: '', name: '', netns: paths.net, containerId: id, sandbox: id, portMappings: [] as PortMapping[] };
    // Written before anything is made: a crash in the middle still leaves what DEL needs.
    const pendingFile = `${this.cacheFile(id)}.pending`;
    fs.writeFileSync(pendingFile, JSON.stringify(entry), { mode: 0o600 });
    try {
      await makeSandbox(paths, niceness);
      const [, result] = await Promise.all([
        addNetworkList(this.binDirs, this.loopbackList, this.target(entry, 'lo'), {}, { niceness }),
        addNetworkList(this.binDirs, this.bridgeList, this.target(entry, 'eth0'), {}, { niceness }),
      ]);
      if (!resultIpv4(result)) throw new Error(`the CNI result has no IPv4 address: ${JSON.stringify(result)}`);
      const made: CachedAttachment = { ...entry, result };
      writeFileAtomic(this.cacheFile(id), JSON.stringify(made));
      fs.rmSync(pendingFile, { force: true });
      return made;
    } catch (error) {
      await delNetworkList(this.binDirs, this.list, this.target(entry, 'eth0'), {}, undefined).catch(() => undefined);
      removeSandbox(paths);
      fs.rmSync(pendingFile, { force: true });
      throw error;
    }
  }

  /** The pod takes a made sandbox: its hostPorts mapped (portmap, chained on the bridge's result), its cache entry written. */
  private async claim(pod: { uid: string; namespace: string; name: string; portMappings: PortMapping[] }, sandbox: CachedAttachment): Promise<Attachment> {
    const entry: CachedAttachment = { ...sandbox, uid: pod.uid, namespace: pod.namespace, name: pod.name, portMappings: pod.portMappings };
    if (pod.portMappings.length) {
      try {
        entry.result = await addNetworkList(this.binDirs, this.portmapList, this.target(entry, 'eth0'), { portMappings: pod.portMappings }, { prevResult: sandbox.result });
      } catch (error) {
        await this.release(sandbox).catch(() => undefined);
        throw error;
      }
    }
    // The pod's entry first, then the spare's goes: a crash between leaves both, and the start-up
    // reconcile sees the sandbox is a live pod's (reconcile()).
    writeFileAtomic(this.cacheFile(pod.uid), JSON.stringify(entry));
    fs.rmSync(this.cacheFile(sandbox.uid), { force: true });
    const ip = resultIpv4(entry.result)!;
    this.addresses.set(pod.uid, ip);
    this.options.logger.info({ pod: `${pod.namespace}/${pod.name}`, podIP: ip, sandbox: entry.sandbox }, 'pod network attached');
    return { podIp: ip, sandbox: this.sandboxRunPaths(entry)! };
  }

  /** Give the pod's address back and remove its namespaces. Safe to repeat; a pod never attached is a no-op. */
  detach(uid: string, podDir: string | undefined): Promise<void> {
    return this.serial(uid, async () => {
      const cached = this.readEntry(uid) ?? this.readEntry(uid, 'pending');
      if (cached) await this.release(cached);
      if (!podDir) return;
      // A pod attached before agent-made sandboxes has its network namespace pinned in its own dir.
      const netns = path.join(namespacesDir(podDir), 'net');
      if (isNsfs(netns)) unmount(netns);
    });
  }

  private async release(cached: CachedAttachment): Promise<void> {
    // The namespace may be gone already (the supervisor unpinned it, the host rebooted): plugins
    // then get an empty CNI_NETNS, as the specification allows for DEL, and release the rest.
    const live = isNsfs(cached.netns);
    await delNetworkList(this.binDirs, this.list, { ...this.target(cached, 'eth0'), netns: live ? cached.netns : '' }, { portMappings: cached.portMappings }, cached.result);
    if (cached.sandbox) removeSandbox(sandboxPaths(this.options.agentDir, cached.sandbox));
    fs.rmSync(this.cacheFile(cached.uid), { force: true });
    fs.rmSync(`${this.cacheFile(cached.uid)}.pending`, { force: true });
    this.addresses.delete(cached.uid);
    if (cached.namespace) {
      this.options.logger.info({ pod: `${cached.namespace}/${cached.name}`, podIP: cached.result ? resultIpv4(cached.result) : undefined }, 'pod network released');
    }
  }

  /**
   * At start: every cached attachment of a pod that is not here any more is released; a spare
   * left intact is kept as the spare (an agent restarted at once needs no CNI work for it), any
   * other is released in the background (the start does not wait for its plugins); every sandbox
   * no pod holds is removed, and every host-local reservation no attachment explains (what an
   * agent killed between ADD and its cache write left), so no address leaks.
   */
  async reconcile(livePodUids: ReadonlySet<string>): Promise<{ released: number; freed: number }> {
    let released = 0;
    let freed = 0;
    const keptContainerIds = new Set<string>();
    const keptSandboxes = new Set<string>();
    const files = safeList(this.resultsDir);
    for (const file of files) {
      const uid = file.replace(/\.json(\.pending)?$/, '');
      if (!livePodUids.has(uid)) continue;
      const entry = this.readEntry(uid) ?? this.readEntry(uid, 'pending');
      keptContainerIds.add(entry?.containerId ?? uid);
      if (entry?.sandbox) keptSandboxes.add(entry.sandbox);
    }
    const staleSpares: string[] = [];
    for (const file of files) {
      if (!/\.json(\.pending)?$/.test(file)) continue;
      const uid = file.replace(/\.json(\.pending)?$/, '');
      if (livePodUids.has(uid)) continue;
      if (keptSandboxes.has(uid)) {
        // A spare's entry left by a crash in claim(): the sandbox is a live pod's now.
        fs.rmSync(path.join(this.resultsDir, file), { force: true });
        continue;
      }
      if (isSandboxId(uid)) {
        const spare = file.endsWith('.json') ? this.readEntry(uid) : undefined;
        if (spare && this.spares.length < SPARES && this.intact(spare)) {
          this.spares.push(spare);
          keptContainerIds.add(uid);
          keptSandboxes.add(uid);
        } else if (!staleSpares.includes(uid)) {
          staleSpares.push(uid);
          keptSandboxes.add(uid);
        }
        continue;
      }
      try {
        const entry = this.readEntry(uid) ?? this.readEntry(uid, 'pending');
        // Before agent-made sandboxes, the pin was `<pod dir>/ns/net`.
        await this.detach(uid, entry && !entry.sandbox ? path.dirname(path.dirname(entry.netns)) : undefined);
        released++;
      } catch (error) {
        this.options.logger.warn({ err: error, uid }, 'cannot release the network of a pod that is gone; will retry at the next start');
      }
    }
    for (const id of listSandboxIds(this.options.agentDir)) {
      if (!keptSandboxes.has(id)) removeSandbox(sandboxPaths(this.options.agentDir, id));
    }
    const rangeDir = path.join(this.ipamDir, NETWORK_NAME);
    for (const file of safeList(rangeDir)) {
      if (!/^\d+\.\d+\.\d+\.\d+$/.test(file)) continue;
      const owner = readFirstLine(path.join(rangeDir, file));
      // A stale spare's address goes with its DEL, below.
      if (owner && !keptContainerIds.has(owner) && !livePodUids.has(owner) && !staleSpares.includes(owner)) {
        fs.rmSync(path.join(rangeDir, file), { force: true });
        freed++;
      }
    }
    if (released || freed) this.options.logger.info({ released, freed }, 'released the pod network of pods that went while the agent was down');
    for (const id of staleSpares) {
      void this.detach(id, undefined).catch((error: unknown) => this.options.logger.warn({ err: error, sandbox: id }, 'cannot release a spare sandbox; will retry at the next start'));
    }
    this.refill();
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
