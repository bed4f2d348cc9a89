import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { getPath, type KubeObject } from '../../apiserver/objects.js';
import type { Logger } from '../../logging/logger.js';
import { type Cidr, numberToIpv4, parseCidr } from '../../node-protocol/service-network.js';

const execFileAsync = promisify(execFile);

/**
 * Routes to the other nodes' pods, as flannel programs them (docs/networking.md, "Between
 * nodes"). Each node publishes on its Node how to reach its pods (annotations below); each agent
 * turns every other Node into kernel state through `ip`:
 *
 * - `vxlan`: one VXLAN device `drover.1` (VNI 1, UDP 8472, the kernel's default port, as
 *   flannel's), holding the `.0` address of the node's pod CIDR. Per peer with CIDR S, VTEP MAC M
 *   and address N: a permanent neighbour `S.0 → M`, a forwarding entry `M → N`, and the route
 *   `S via S.0 dev drover.1 onlink`.
 * - `host-gw`: the route `S via N` (the nodes must share an L2 segment).
 *
 * Our routes carry the protocol number 86, so that on a restart the ones of nodes that went are
 * found and removed, and nothing else is touched.
 */

export const VXLAN_DEVICE = 'drover.1';
export const VXLAN_VNI = 1;
export const VXLAN_PORT = 8472;
/** VXLAN's overhead on IPv4: outer IP, UDP, VXLAN and inner Ethernet headers. */
export const VXLAN_OVERHEAD = 50;
export const ROUTE_PROTOCOL = '86';

export const BACKEND_ANNOTATION = 'drover.io/backend';
export const PUBLIC_IP_ANNOTATION = 'drover.io/public-ip';
export const VTEP_MAC_ANNOTATION = 'drover.io/vtep-mac';

export type OverlayBackend = 'vxlan' | 'host-gw';

export interface Peer {
  node: string;
  podCidr: Cidr;
  publicIp: string;
  vtepMac?: string;
}

/** What this node's agent publishes on its Node (merged into metadata.annotations). */
export function nodeAnnotations(backend: OverlayBackend, publicIp: string, vtepMac: string | undefined): Record<string, string> {
  return { [BACKEND_ANNOTATION]: backend, [PUBLIC_IP_ANNOTATION]: publicIp, ...(vtepMac ? { [VTEP_MAC_ANNOTATION]: vtepMac } : {}) };
}

/** The peers this node routes to: other Nodes with a pod CIDR, on the same backend, with what it needs. Pure. */
export function peersFrom(nodes: readonly KubeObject[], self: string, backend: OverlayBackend): Peer[] {
  const peers: Peer[] = [];
  for (const node of nodes) {
    const name = node.metadata.name!;
    if (name === self) continue;
    const annotations = node.metadata.annotations ?? {};
    const cidrText = getPath(node, ['spec', 'podCIDR']);
    const publicIp = annotations[PUBLIC_IP_ANNOTATION];
    if (typeof cidrText !== 'string' || !publicIp || annotations[BACKEND_ANNOTATION] !== backend) continue;
    const podCidr = parseCidr(cidrText);
    if (typeof podCidr === 'string') continue;
    const vtepMac = annotations[VTEP_MAC_ANNOTATION];
    if (backend === 'vxlan' && !vtepMac) continue;
    peers.push({ node: name, podCidr, publicIp, ...(vtepMac ? { vtepMac } : {}) });
  }
  return peers.sort((a, b) => a.podCidr.base - b.podCidr.base);
}


export interface OverlayOptions {
  backend: OverlayBackend;
  podCidr: Cidr;
  /** The node's own address (the tunnel's local end, what peers route to). */
  publicIp: string;
  /** The interface holding publicIp (the tunnel's underlay). */
  underlay: string;
  /** The underlay's MTU: the device gets that less the VXLAN overhead. */
  underlayMtu: number;
  logger: Logger;
  /** For tests: program this named network namespace (`ip -n`) instead of the agent's own. */
  netns?: string;
}

export class Overlay {
  private vtepMac: string | undefined;
  /** Peers programmed, by pod CIDR. */
  private programmed = new Map<string, Peer>();

  constructor(private readonly options: OverlayOptions) {}

  private async ip(...args: string[]): Promise<string> {
    const { stdout } = await execFileAsync('ip', [...(this.options.netns ? ['-n', this.options.netns] : []), ...args]);
    return stdout;
  }

  private async bridge(...args: string[]): Promise<void> {
    await execFileAsync('bridge', [...(this.options.netns ? ['-n', this.options.netns] : []), ...args]);
  }

  /** The VXLAN device (vxlan) made or found again; returns what to publish on the Node. */
  async setUp(): Promise<Record<string, string>> {
    if (this.options.backend === 'vxlan') {
      const existing = await this.ip('-j', '-d', 'link', 'show', 'dev', VXLAN_DEVICE).catch(() => '');
      const link = existing ? (JSON.parse(existing) as { address?: string; linkinfo?: { info_data?: { id?: number; local?: string } } }[])[0] : undefined;
      const data = link?.linkinfo?.info_data;
      if (link && (data?.id !== VXLAN_VNI || data?.local !== this.options.publicIp)) {
        // Made for another address (the node moved): made again.
        await this.ip('link', 'del', VXLAN_DEVICE);
      }
      if (!link || data?.id !== VXLAN_VNI || data?.local !== this.options.publicIp) {
        await this.ip('link', 'add', VXLAN_DEVICE, 'type', 'vxlan', 'id', String(VXLAN_VNI), 'local', this.options.publicIp, 'dev', this.options.underlay, 'dstport', String(VXLAN_PORT), 'nolearning');
      }
      await this.ip('link', 'set', VXLAN_DEVICE, 'mtu', String(this.options.underlayMtu - VXLAN_OVERHEAD));
      await this.ip('addr', 'replace', `${numberToIpv4(this.options.podCidr.base)}/32`, 'dev', VXLAN_DEVICE);
      await this.ip('link', 'set', VXLAN_DEVICE, 'up');
      const shown = JSON.parse(await this.ip('-j', 'link', 'show', 'dev', VXLAN_DEVICE)) as { address?: string }[];
      this.vtepMac = shown[0]?.address;
    }
    this.options.logger.info({ backend: this.options.backend, device: this.options.backend === 'vxlan' ? VXLAN_DEVICE : undefined, vtepMac: this.vtepMac }, 'pod network routes between nodes set up');
    return nodeAnnotations(this.options.backend, this.options.publicIp, this.vtepMac);
  }

  /** Bring the kernel's routes to the peers given; removes ours that no peer explains (a node gone). */
  async sync(peers: readonly Peer[]): Promise<void> {
    const wanted = new Map(peers.map((p) => [p.podCidr.text, p]));
    for (const [cidr, peer] of wanted) {
      const before = this.programmed.get(cidr);
      if (before && before.publicIp === peer.publicIp && before.vtepMac === peer.vtepMac) continue;
      try {
        await this.program(peer);
        this.programmed.set(cidr, peer);
        this.options.logger.info({ node: peer.node, podCIDR: cidr, via: peer.publicIp }, before ? 'route to a node’s pods changed' : 'route to a node’s pods added');
      } catch (error) {
        this.options.logger.warn({ err: error, node: peer.node, podCIDR: cidr }, 'cannot route to a node’s pods; will retry');
      }
    }
    for (const route of await this.ourRoutes()) {
      if (wanted.has(route)) continue;
      const peer = this.programmed.get(route);
      await this.unprogram(route, peer).catch((error: unknown) => this.options.logger.warn({ err: error, podCIDR: route }, 'cannot remove a route to pods'));
      this.programmed.delete(route);
      this.options.logger.info({ podCIDR: route, node: peer?.node }, 'route to a node’s pods removed');
    }
  }

  private async program(peer: Peer): Promise<void> {
    const cidr = peer.podCidr.text;
    if (this.options.backend === 'host-gw') {
      await this.ip('route', 'replace', cidr, 'via', peer.publicIp, 'proto', ROUTE_PROTOCOL);
      return;
    }
    const gateway = numberToIpv4(peer.podCidr.base);
    await this.ip('neigh', 'replace', gateway, 'lladdr', peer.vtepMac!, 'dev', VXLAN_DEVICE, 'nud', 'permanent');
    await this.bridge('fdb', 'replace', peer.vtepMac!, 'dev', VXLAN_DEVICE, 'dst', peer.publicIp, 'self', 'permanent');
    await this.ip('route', 'replace', cidr, 'via', gateway, 'dev', VXLAN_DEVICE, 'onlink', 'proto', ROUTE_PROTOCOL);
  }

  private async unprogram(cidr: string, peer: Peer | undefined): Promise<void> {
    await this.ip('route', 'del', cidr, 'proto', ROUTE_PROTOCOL).catch(() => undefined);
    if (this.options.backend !== 'vxlan') return;
    const parsed = parseCidr(cidr);
    if (typeof parsed !== 'string') await this.ip('neigh', 'del', numberToIpv4(parsed.base), 'dev', VXLAN_DEVICE).catch(() => undefined);
    if (peer?.vtepMac) await this.bridge('fdb', 'del', peer.vtepMac, 'dev', VXLAN_DEVICE, 'self').catch(() => undefined);
  }

  /** The routes to pods we made (by their protocol number), this run or an earlier one. */
  private async ourRoutes(): Promise<string[]> {
    const out = await this.ip('-j', 'route', 'show', 'proto', ROUTE_PROTOCOL).catch(() => '[]');
    return (JSON.parse(out || '[]') as { dst?: string }[]).map((r) => r.dst ?? '').filter((d) => d.includes('/'));
  }
}
