import fs from 'node:fs';
import { getPath, type KubeObject } from '../../apiserver/objects.js';
import { followingClient } from '../../client/following.js';
import { Informer } from '../../client/informer.js';
import { type ApiClient, NODES, SERVICES } from '../../client/types.js';
import type { Logger } from '../../logging/logger.js';
import { type ClusterNetworkSettings, parseCidr, parseServiceNetwork, type ServiceNetwork } from '../../node-protocol/service-network.js';
import { DEFAULT_CNI_BIN_DIRS, findExecutable, findPlugin } from './cni.js';
import { Overlay, type OverlayBackend, peersFrom, VXLAN_OVERHEAD } from './overlay.js';
import { interfaceMtu, PodNetwork, type PortMapping } from './pod-network.js';
import type { PodNetworkRunSpec, PodRunSpec } from '../pods/run-spec.js';
import { type HostResolv, parseResolvConf, podResolvConf } from './resolv-conf.js';
import { serviceEnvironment } from './service-env.js';
import { slimServiceObject } from './service-model.js';

/**
 * This node's part of the pod network: it waits for the node's pod CIDR (node IPAM on the
 * leading server), then sets up the bridge network (pod-network.ts) and the routes to the other
 * nodes (overlay.ts), publishes how to reach its pods on its Node, and follows the other Nodes.
 * Until it is ready, runc pods wait in ContainerCreating ("network is not ready"), as kubelet
 * makes them wait for its network plugin.
 *
 * A node that cannot have a pod network (not root, no CNI plugins, no `ip` or `nft`) says why
 * once and runs its pods in its own network, as without a pod network.
 */

const REQUIRED_PLUGINS = ['bridge', 'host-local', 'loopback', 'portmap'];

export interface NodeNetworkOptions {
  client: () => ApiClient;
  nodeName: string;
  nodeIp: string;
  agentDir: string;
  settings: ClusterNetworkSettings;
  /** Pods this node still has (their dirs): any other cached attachment is released at set-up. */
  livePodUids: () => ReadonlySet<string>;
  logger: Logger;
}

export class NodeNetwork {
  readonly network: ServiceNetwork;
  readonly backend: OverlayBackend;
  /** The node's own resolvers (pods with dnsPolicy Default, and the search path's tail). */
  readonly hostResolv: HostResolv;
  private nodes: Informer | undefined;
  /** Every Service, for the containers' Service environment variables. */
  private services: Informer | undefined;
  private pods: PodNetwork | undefined;
  private overlay: Overlay | undefined;
  private settingUp: Promise<void> | undefined;
  private syncTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  private constructor(
    private readonly options: NodeNetworkOptions,
    network: ServiceNetwork,
    backend: OverlayBackend,
  ) {
    this.network = network;
    this.backend = backend;
    let text = '';
    try {
      text = fs.readFileSync('/etc/resolv.conf', 'utf8');
    } catch {
      // no resolvers on the host
    }
    this.hostResolv = parseResolvConf(text);
  }

  /** The node's network, or undefined (with the reason logged) when this node runs pods in its own network. */
  static create(options: NodeNetworkOptions): NodeNetwork | undefined {
    const { settings, logger } = options;
    if (settings.backend === 'none') {
      logger.info('no pod network (flannel-backend none): pods use the node’s network');
      return undefined;
    }
    const { network, problems } = parseServiceNetwork(settings, () => 'cluster');
    if (!network) {
      logger.warn({ problems }, 'the cluster’s network settings do not parse; no pod network on this node');
      return undefined;
    }
    const missing = missingPrerequisites();
    if (missing) {
      logger.warn({ reason: missing }, 'this node cannot join the pod network; its pods use the node’s network');
      return undefined;
    }
    return new NodeNetwork(options, network, settings.backend);
  }

  /** Whether pods can be attached now. */
  get ready(): boolean {
    return this.pods !== undefined;
  }

  get podNetwork(): PodNetwork | undefined {
    return this.pods;
  }

  /**
   * The pod's network before its supervisor starts: `host` for pods in the node's network
   * (hostNetwork), `waiting` while this node has no pod network yet, else attached.
   */
  async prepare(pod: KubeObject, podDir: string): Promise<{ kind: 'host' } | { kind: 'waiting'; message: string } | { kind: 'attached'; spec: PodNetworkRunSpec }> {
    if (getPath(pod, ['spec', 'hostNetwork']) === true) return { kind: 'host' };
    if (!this.pods) return { kind: 'waiting', message: 'network is not ready: this node’s pod network is not set up yet (waiting for its pod CIDR)' };
    const { podIp, sandbox } = await this.pods.attach({
      uid: pod.metadata.uid!,
      namespace: pod.metadata.namespace ?? 'default',
      name: pod.metadata.name!,
      podDir,
      portMappings: hostPortMappings(pod),
    });
    const resolvConf = podResolvConf(pod, this.network.clusterDns, this.network.clusterDomain, this.hostResolv);
    return { kind: 'attached', spec: { podIp, resolvConf, ...(sandbox ? { sandbox } : {}) } };
  }

  /** kubelet's Service variables for a container of `pod` (service-env.ts), from the Services seen now. */
  serviceEnv(pod: KubeObject): Record<string, string> {
    return serviceEnvironment(pod, this.services?.items() ?? []);
  }

  /** The pod's address on the pod network, when it has one. */
  podIp(uid: string): string | undefined {
    return this.pods?.podIp(uid);
  }

  /** Give back what the pod held on the pod network (safe to repeat; a pod never attached is a no-op). */
  async release(uid: string, podDir: string): Promise<void> {
    await this.pods?.detach(uid, podDir);
  }

  async start(): Promise<void> {
    // Following the agent's client: it is replaced when the agent moves to another server.
    const client = followingClient(this.options.client);
    this.nodes = new Informer(client, NODES, undefined, () => this.kick(), this.options.logger);
    this.services = new Informer(client, SERVICES, undefined, () => undefined, this.options.logger, {}, slimServiceObject);
    await Promise.all([this.nodes.start(), this.services.start()]);
    this.kick();
  }

  stop(): void {
    this.stopped = true;
    this.pods?.close();
    clearTimeout(this.syncTimer);
    this.nodes?.stop();
    this.services?.stop();
  }

  /** Changes come in bursts (a node's status every few seconds): one pass a little later. */
  private kick(): void {
    if (this.stopped || this.syncTimer) return;
    this.syncTimer = setTimeout(() => {
      this.syncTimer = undefined;
      void this.pass().catch((error: unknown) => this.options.logger.warn({ err: error }, 'pod network pass failed; will retry'));
    }, 50);
  }

  private async pass(): Promise<void> {
    const self = this.nodes?.get(undefined, this.options.nodeName);
    if (!self) return;
    if (!this.pods) {
      this.settingUp ??= this.setUp(self).finally(() => (this.settingUp = undefined));
      await this.settingUp;
      if (!this.pods) return;
    }
    await this.overlay?.sync(peersFrom(this.nodes!.items(), this.options.nodeName, this.backend));
  }

  private async setUp(self: KubeObject): Promise<void> {
    const cidrText = getPath(self, ['spec', 'podCIDR']);
    if (typeof cidrText !== 'string') return;
    const podCidr = parseCidr(cidrText);
    if (typeof podCidr === 'string') {
      this.options.logger.warn({ podCIDR: cidrText }, 'this node’s pod CIDR does not parse');
      return;
    }
    const underlay = await interfaceMtu(this.options.nodeIp);
    if (!underlay) {
      this.options.logger.warn({ nodeIp: this.options.nodeIp }, 'no interface holds the node’s address; cannot set up the pod network');
      return;
    }
    const mtu = this.backend === 'vxlan' ? underlay.mtu - VXLAN_OVERHEAD : underlay.mtu;
    const pods = new PodNetwork({ agentDir: this.options.agentDir, network: this.network, podCidr, mtu, logger: this.options.logger });
    await pods.setUp();
    await pods.reconcile(this.options.livePodUids());
    const overlay = new Overlay({
      backend: this.backend,
      podCidr,
      publicIp: this.options.nodeIp,
      underlay: underlay.name,
      underlayMtu: underlay.mtu,
      logger: this.options.logger,
    });
    const annotations = await overlay.setUp();
    const current = self.metadata.annotations ?? {};
    if (Object.entries(annotations).some(([k, v]) => current[k] !== v)) {
      await this.options.client().patch(NODES, undefined, this.options.nodeName, 'merge', { metadata: { annotations } });
    }
    this.overlay = overlay;
    this.pods = pods;
  }
}

function missingPrerequisites(): string | undefined {
  if (process.getuid?.() !== 0) return 'the pod network needs root (network namespaces, the bridge, routes)';
  const missingPlugins = REQUIRED_PLUGINS.filter((p) => !findPlugin(DEFAULT_CNI_BIN_DIRS, p));
  if (missingPlugins.length) return `CNI plugins ${missingPlugins.join(', ')} not found in ${DEFAULT_CNI_BIN_DIRS.join(' or ')} (Debian package containernetworking-plugins)`;
  for (const tool of ['ip', 'nft', 'bridge', 'unshare']) {
    if (!onPath(tool)) return `${tool} not found on PATH (Debian packages iproute2, nftables, util-linux)`;
  }
  return undefined;
}

function onPath(tool: string): boolean {
  return findExecutable((process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':'), tool) !== undefined;
}

/** The hostPorts of a pod's containers, for the portmap plugin. */
export function hostPortMappings(pod: KubeObject): PortMapping[] {
  const mappings: PortMapping[] = [];
  const containers = (getPath(pod, ['spec', 'containers']) as { ports?: { hostPort?: number; containerPort?: number; protocol?: string; hostIP?: string }[] }[] | undefined) ?? [];
  for (const container of containers) {
    for (const port of container.ports ?? []) {
      if (!port.hostPort || !port.containerPort) continue;
      const protocol = (port.protocol ?? 'TCP').toLowerCase() as PortMapping['protocol'];
      mappings.push({ hostPort: port.hostPort, containerPort: port.containerPort, protocol, ...(port.hostIP ? { hostIP: port.hostIP } : {}) });
    }
  }
  return mappings;
}

/**
 * Service variables into each container's environment: over its image's, under its own `env`
 * (`declared`: what the pod spec's env and envFrom gave it), as kubelet orders them.
 */
export function withServiceEnv(spec: PodRunSpec, serviceEnv: Record<string, string>, declared: ReadonlyMap<string, Record<string, string>>): void {
  for (const container of spec.containers) {
    const own = declared.get(container.name) ?? {};
    for (const [key, value] of Object.entries(serviceEnv)) if (!(key in own)) container.env[key] = value;
  }
}
