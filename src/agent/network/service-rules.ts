import { createHash } from 'node:crypto';
import { isIPv4 } from 'node:net';
import type { KubeObject } from '../../apiserver/objects.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import { type ServiceEndpoint, type ServicePortModel, serviceKey, servicePorts, slicesByService } from './service-model.js';

/**
 * The node's Service datapath as one nftables script (pure): table `ip drover-proxy`, laid out
 * after kube-proxy's nftables mode (docs/networking.md, "The Services datapath").
 *
 * The script is one transaction for `nft -f -`: every chain and map it owns is added (a no-op
 * when present) and flushed, then refilled, so applying it twice leaves one copy of each rule
 * (`add rule` alone appends duplicates); told what the last applied script left (`existing`), it
 * writes only the chains and elements that differ. Chains and sets of the table that the new
 * rules no longer name are flushed in that transaction and deleted by the next (`flushed`). The
 * session-affinity sets are added but never flushed, so a rebuild keeps which client sticks to
 * which endpoint; a set's name carries its timeout, so a new timeout is a new set.
 *
 * Written for nft 1.0.6: numeric hook priorities (symbolic `dstnat` is refused on the output
 * hook before 1.0.9), `;` before every `}`, one command a line.
 */

export const PROXY_TABLE = 'drover-proxy';
const T = `ip ${PROXY_TABLE}`;
/** The mark that asks nat-postrouting to masquerade (bit 14, as kube-proxy's; portmap uses 0x2000). */
export const MASQUERADE_MARK = '0x4000';
/** kube-proxy's `nodeport-addresses` default in nftables mode is the node's addresses; loopback never. */
const LOOPBACK = '127.0.0.0/8';
/** Readable part of a chain or set name is cut at this length (the kernel allows 255 bytes). */
const NAME_LIMIT = 200;

export interface ExistingObjects {
  chains: readonly string[];
  sets: readonly string[];
  /** What the last applied plan wrote in each chain (its `contents`): chains still so are not rewritten. */
  contents?: ReadonlyMap<string, string>;
  /** What the last applied plan put in each map and set (its `elements`): only the difference is written. Unknown: refilled whole. */
  elements?: ReadonlyMap<string, readonly string[]>;
  /** What the last applied plan emptied (its `flushed`): deleted now if still unnamed. */
  flushed?: { chains: readonly string[]; sets: readonly string[] };
}

export interface ServiceRulesInput {
  /** Never edited in place (as informers' objects): a Service's rules are reused while it and its slices are the same objects. */
  services: readonly KubeObject[];
  endpointSlices: readonly KubeObject[];
  nodeName: string;
  /** The node's addresses where node ports answer; loopback and the cluster DNS address are left out. Empty: every local address. */
  nodeAddresses: readonly string[];
  network: ServiceNetwork;
  /** The chains and sets the table holds now (from the kernel); unnamed ones are deleted. Unknown: nothing is deleted. */
  existing?: ExistingObjects;
}

export interface ServiceRulesPlan {
  script: string;
  /** The chains the rules use (the table also keeps `flushed` until the next plan). */
  chains: string[];
  /** The sets and maps the rules use. */
  sets: string[];
  /** How many rules the table holds once the script is applied. */
  rules: number;
  /** Service ports programmed (with a ClusterIP). */
  servicePorts: number;
  /**
   * Chains and sets the table holds that the rules no longer name, emptied by `script` and left
   * in the table: hand them back as `existing.flushed` and the next plan deletes them.
   */
  flushed: { chains: string[]; sets: string[] };
  /** Chains and sets `script` deletes (emptied by an earlier plan). */
  deleted: number;
  /** Chains the script (re)writes; the others are left as they are. */
  writtenChains: number;
  /** Each chain's rules as text: hand it back as `existing.contents` once this plan is applied. */
  contents: Map<string, string>;
  /** Each map's and set's elements: hand them back as `existing.elements` once this plan is applied. */
  elements: Map<string, string[]>;
  /** Elements left out because an earlier Service (in name order) has the same key. */
  conflicts: string[];
}

const BASE_CHAINS: readonly { name: string; type: 'filter' | 'nat'; hook: string; priority: number }[] = [
  { name: 'filter-input', type: 'filter', hook: 'input', priority: -110 },
  { name: 'filter-forward', type: 'filter', hook: 'forward', priority: -110 },
  { name: 'filter-output', type: 'filter', hook: 'output', priority: -110 },
  { name: 'filter-output-post-dnat', type: 'filter', hook: 'output', priority: -90 },
  { name: 'nat-prerouting', type: 'nat', hook: 'prerouting', priority: -100 },
  { name: 'nat-output', type: 'nat', hook: 'output', priority: -100 },
  { name: 'nat-postrouting', type: 'nat', hook: 'postrouting', priority: 100 },
];

const MAPS: readonly { name: string; type: string }[] = [
  { name: 'service-ips', type: 'ipv4_addr . inet_proto . inet_service : verdict' },
  { name: 'service-nodeports', type: 'inet_proto . inet_service : verdict' },
  { name: 'no-endpoint-services', type: 'ipv4_addr . inet_proto . inet_service : verdict' },
  { name: 'no-endpoint-nodeports', type: 'inet_proto . inet_service : verdict' },
];
const MAP_NAMES = new Set(MAPS.map((m) => m.name));
const SETS: readonly { name: string; type: string }[] = [
  { name: 'cluster-ips', type: 'ipv4_addr' },
  { name: 'nodeport-ips', type: 'ipv4_addr' },
];

function base32(bytes: Buffer): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out;
}

/**
 * `<prefix>-<HASH>-<readable>`: HASH (8 base32 characters of the sha256 of the full readable
 * part and `salt`) keeps names unique when the readable part is cut to NAME_LIMIT or has
 * characters nft identifiers may not hold (replaced by `_`).
 */
export function objectName(prefix: string, readable: string, salt = ''): string {
  const key = `${prefix}\0${readable}\0${salt}`;
  let name = nameCache.get(key);
  if (name === undefined) {
    const hash = base32(createHash('sha256').update(`${readable}${salt}`).digest()).slice(0, 8);
    const safe = readable.replace(/[^A-Za-z0-9_./-]/g, '_').slice(0, NAME_LIMIT);
    name = `${prefix}-${hash}-${safe}`;
    // Every sync names the same chains again: remember them (bounded; cleared when full).
    if (nameCache.size >= NAME_CACHE_LIMIT) nameCache.clear();
    nameCache.set(key, name);
  }
  return name;
}

const NAME_CACHE_LIMIT = 200_000;
const nameCache = new Map<string, string>();

function portId(p: ServicePortModel): string {
  return `${p.namespace}/${p.name}/${p.protocol}/${p.portName}`;
}

/**
 * Writes the script and counts what it leaves behind. A chain whose rules are the same as the
 * ones `unchanged` says the table already holds is left alone (kube-proxy's partial sync): one
 * endpoint's change rewrites its Service's chains and the maps, not every chain.
 */
class ScriptWriter {
  /** Table, sets and maps; then chain declarations (a rule may only name a declared chain); then rules. */
  readonly lines: string[] = [];
  readonly sets: string[] = [];
  private readonly chainRules = new Map<string, { base?: (typeof BASE_CHAINS)[number]; rules: string[]; text?: string }>();
  /** How many chains writeChains declared and filled. */
  writtenChains = 0;

  constructor(private readonly unchanged: (chain: string, rules: string) => boolean) {}

  get chains(): string[] {
    return [...this.chainRules.keys()];
  }

  get rules(): number {
    let n = 0;
    for (const chain of this.chainRules.values()) n += chain.rules.length;
    return n;
  }

  chain(name: string, base?: (typeof BASE_CHAINS)[number]): void {
    this.chainRules.set(name, { ...(base ? { base } : {}), rules: [] });
  }

  rule(chain: string, body: string): void {
    this.chainRules.get(chain)!.rules.push(body);
  }

  /** A Service's chains, as serviceBlock wrote them. */
  addBlock(block: ServiceBlock): void {
    for (const [name, rules] of block.chains) this.chainRules.set(name, { rules, text: block.texts.get(name)! });
  }

  /** Declares, flushes and fills every chain that changed; returns each chain's rules as text. */
  writeChains(): Map<string, string> {
    const contents = new Map<string, string>();
    const written: string[] = [];
    for (const [name, { base, rules, text: known }] of this.chainRules) {
      const text = known ?? rules.join('\n');
      contents.set(name, text);
      if (this.unchanged(name, text)) continue;
      const spec = base ? ` { type ${base.type} hook ${base.hook} priority ${base.priority} ; policy accept ; }` : '';
      this.lines.push(`add chain ${T} ${name}${spec}`, `flush chain ${T} ${name}`);
      written.push(name);
    }
    for (const name of written) for (const rule of this.chainRules.get(name)!.rules) this.lines.push(`add rule ${T} ${name} ${rule}`);
    this.writtenChains = written.length;
    return contents;
  }

  /** Empties the set or map and adds `elements`. */
  fillElements(set: string, elements: readonly string[]): void {
    this.lines.push(`flush ${MAP_NAMES.has(set) ? 'map' : 'set'} ${T} ${set}`);
    this.elementLines('add', set, elements);
  }

  /**
   * Turns `before` (what the last applied plan put there) into `after`: deletes the keys that
   * went or now map elsewhere, adds the rest that is new, so one changed Service costs a couple of
   * elements rather than a thousand.
   */
  changeElements(set: string, before: readonly string[], after: readonly string[]): void {
    const keyOf = (element: string): string => element.split(' : ')[0]!;
    const wanted = new Set(after);
    const had = new Set(before);
    this.elementLines('delete', set, before.filter((e) => !wanted.has(e)).map(keyOf));
    this.elementLines('add', set, after.filter((e) => !had.has(e)));
  }

  private elementLines(verb: 'add' | 'delete', set: string, elements: readonly string[]): void {
    // A few hundred elements a command keeps each line short without a command per element.
    for (let i = 0; i < elements.length; i += 256) this.lines.push(`${verb} element ${T} ${set} { ${elements.slice(i, i + 256).join(', ')} }`);
  }
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

interface EndpointNames {
  chain: string;
  affinity?: string;
}

/** The endpoint chain and, with ClientIP affinity, its affinity set (hashed once per endpoint). */
const endpointNameCache = new WeakMap<ServiceEndpoint, EndpointNames>();
function endpointNames(p: ServicePortModel, ep: ServiceEndpoint): EndpointNames {
  let names = endpointNameCache.get(ep);
  if (!names) {
    const readable = `${portId(p)}__${ep.ip}/${ep.port}`;
    names = {
      chain: objectName('endpoint', readable),
      ...(p.affinitySeconds ? { affinity: objectName('affinity', readable, `/${p.affinitySeconds}`) } : {}),
    };
    endpointNameCache.set(ep, names);
  }
  return names;
}

/** A chain that picks one of `endpoints` (sticky with affinity, else at random). */
function writeBalancer(w: ChainSink, chain: string, p: ServicePortModel, endpoints: readonly ServiceEndpoint[], masqueradeFrom?: string): void {
  w.chain(chain);
  if (masqueradeFrom) {
    // Off-cluster clients of the ClusterIP (the node itself, other hosts): replies must come back through this node.
    w.rule(chain, `ip daddr ${p.clusterIP} meta l4proto ${p.protocol} th dport ${p.port} ip saddr != ${masqueradeFrom} jump mark-for-masquerade`);
  }
  const targets = endpoints.map((ep) => endpointNames(p, ep));
  for (const target of targets) if (target.affinity) w.rule(chain, `ip saddr @${target.affinity} goto ${target.chain}`);
  if (targets.length === 1) w.rule(chain, `goto ${targets[0]!.chain}`);
  else w.rule(chain, `numgen random mod ${targets.length} vmap { ${targets.map((t, i) => `${i} : goto ${t.chain}`).join(', ')} }`);
}

/** Where chains and their rules are written: the script, or one Service's block. */
interface ChainSink {
  chain(name: string): void;
  rule(chain: string, body: string): void;
}

/** What one Service contributes: its chains and affinity sets, and its map and set elements. */
class ServiceBlock implements ChainSink {
  readonly chains = new Map<string, string[]>();
  /** Each chain's rules as one text (compared with what the table holds). */
  readonly texts = new Map<string, string>();
  readonly affinity = new Map<string, number>();
  readonly clusterIps: string[] = [];
  readonly serviceIps: string[] = [];
  readonly nodePorts: string[] = [];
  readonly noEndpointServices: string[] = [];
  readonly noEndpointNodePorts: string[] = [];
  ports = 0;

  chain(name: string): void {
    this.chains.set(name, []);
  }

  rule(chain: string, body: string): void {
    this.chains.get(chain)!.push(body);
  }
}

/** One Service's block, from its ports (service-model.ts). */
function serviceBlock(model: readonly ServicePortModel[], clusterCidr: string): ServiceBlock {
  const b = new ServiceBlock();
  b.ports = model.length;
  for (const p of model) {
    b.clusterIps.push(p.clusterIP);
    const id = portId(p);
    const localEndpoints = p.endpoints.filter((ep) => ep.local);
    const cluster = p.endpoints.length > 0 ? objectName('service', id) : undefined;
    const local = (p.internalLocal || p.externalLocal) && localEndpoints.length > 0 ? objectName('local', id) : undefined;
    // External traffic needs a chain when something can take it: the cluster chain, or (policy
    // Local) pods and the node itself reaching the node port even without a local endpoint.
    const external = p.nodePort !== undefined && cluster ? objectName('external', id) : undefined;

    const key = `${p.clusterIP} . ${p.protocol} . ${p.port}`;
    const internal = p.internalLocal ? local : cluster;
    if (internal) b.serviceIps.push(`${key} : goto ${internal}`);
    // No endpoint at all: refused at once. Endpoints elsewhere but policy Local: dropped, as kube-proxy does.
    else b.noEndpointServices.push(`${key} : ${p.endpoints.length === 0 ? 'goto reject-chain' : 'drop'}`);
    if (p.nodePort !== undefined) {
      const nodeKey = `${p.protocol} . ${p.nodePort}`;
      if (external) b.nodePorts.push(`${nodeKey} : goto ${external}`);
      if (p.endpoints.length === 0) b.noEndpointNodePorts.push(`${nodeKey} : goto reject-chain`);
      else if (p.externalLocal && !local) b.noEndpointNodePorts.push(`${nodeKey} : drop`);
    }

    if (cluster) writeBalancer(b, cluster, p, p.endpoints, internal === cluster ? clusterCidr : undefined);
    if (local) writeBalancer(b, local, p, localEndpoints, internal === local ? clusterCidr : undefined);
    if (external && cluster) {
      b.chain(external);
      if (!p.externalLocal) {
        b.rule(external, 'jump mark-for-masquerade');
        b.rule(external, `goto ${cluster}`);
      } else {
        // Policy Local keeps the client's address, so only this node's endpoints serve outsiders;
        // pods and the node itself are served by every endpoint (kube-proxy short-circuits them too).
        b.rule(external, `ip saddr ${clusterCidr} goto ${cluster}`);
        b.rule(external, 'fib saddr type local jump mark-for-masquerade');
        b.rule(external, `fib saddr type local goto ${cluster}`);
        if (local) b.rule(external, `goto ${local}`);
      }
    }
    for (const ep of p.endpoints) {
      const { chain, affinity } = endpointNames(p, ep);
      b.chain(chain);
      // Hairpin: a pod reaching itself through the Service must see the reply come from the node.
      b.rule(chain, `ip saddr ${ep.ip} jump mark-for-masquerade`);
      if (affinity) {
        b.rule(chain, `update @${affinity} { ip saddr }`);
        b.affinity.set(affinity, p.affinitySeconds!);
      }
      b.rule(chain, `meta l4proto ${p.protocol} dnat to ${ep.ip}:${ep.port}`);
    }
  }
  for (const [name, rules] of b.chains) b.texts.set(name, rules.join('\n'));
  return b;
}

/**
 * Each Service's block, kept while the Service object and its slice objects stay the same ones:
 * informers replace an object that changed and never edit one in place, so a sync after one
 * endpoint's change recomputes one Service, not a thousand.
 */
const blockCache = new WeakMap<KubeObject, { context: string; slices: readonly KubeObject[]; block: ServiceBlock }>();

function cachedBlock(svc: KubeObject, slices: readonly KubeObject[], nodeName: string, dns: string, clusterCidr: string, context: string): ServiceBlock {
  const hit = blockCache.get(svc);
  if (hit && hit.context === context && hit.slices.length === slices.length && hit.slices.every((s, i) => s === slices[i])) return hit.block;
  const block = serviceBlock(servicePorts(svc, slices, nodeName, dns), clusterCidr);
  blockCache.set(svc, { context, slices, block });
  return block;
}

/** The plan: script, what it leaves, what it deletes. */
export function planServiceRules(input: ServiceRulesInput): ServiceRulesPlan {
  const { network } = input;
  const clusterCidr = network.clusterCidr.text;
  const dns = network.clusterDns;
  const nodeIps = [...new Set(input.nodeAddresses)]
    .filter((ip) => isIPv4(ip) && !ip.startsWith('127.') && ip !== dns)
    .sort(compareText);
  const existingChains = new Set(input.existing?.chains ?? []);
  const previous = input.existing?.contents;
  const w = new ScriptWriter((chain, rules) => existingChains.has(chain) && previous?.get(chain) === rules);
  w.lines.push(`add table ${T} { comment "Drover Service datapath, rebuilt by the agent" ; }`);

  // Sets and maps first: rules refer to them. Their elements come after the chains they name.
  for (const m of MAPS) {
    w.lines.push(`add map ${T} ${m.name} { type ${m.type} ; }`);
    w.sets.push(m.name);
  }
  for (const s of SETS) {
    w.lines.push(`add set ${T} ${s.name} { type ${s.type} ; }`);
    w.sets.push(s.name);
  }
  for (const base of BASE_CHAINS) w.chain(base.name, base);
  for (const name of ['mark-for-masquerade', 'masquerading', 'services', 'service-endpoints-check', 'nodeport-endpoints-check', 'cluster-ips-check', 'reject-chain']) {
    w.chain(name);
  }
  const newConn = 'ct state new';
  w.rule('filter-input', `${newConn} jump nodeport-endpoints-check`);
  w.rule('filter-input', `${newConn} jump service-endpoints-check`);
  w.rule('filter-forward', `${newConn} jump service-endpoints-check`);
  w.rule('filter-forward', `${newConn} jump cluster-ips-check`);
  w.rule('filter-output', `${newConn} jump service-endpoints-check`);
  w.rule('filter-output-post-dnat', `${newConn} jump cluster-ips-check`);
  w.rule('nat-prerouting', 'jump services');
  w.rule('nat-output', 'jump services');
  w.rule('nat-postrouting', 'jump masquerading');
  w.rule('mark-for-masquerade', `meta mark set meta mark | ${MASQUERADE_MARK}`);
  w.rule('masquerading', `meta mark & ${MASQUERADE_MARK} == 0 return`);
  w.rule('masquerading', `meta mark set meta mark ^ ${MASQUERADE_MARK}`);
  w.rule('masquerading', 'masquerade fully-random');
  w.rule('reject-chain', 'meta l4proto tcp reject with tcp reset');
  w.rule('reject-chain', 'reject');
  // Node ports on the node's addresses, or on every local one but loopback and the DNS address.
  const nodePortDaddr = nodeIps.length > 0 ? 'ip daddr @nodeport-ips' : `fib daddr type local ip daddr != { ${LOOPBACK}, ${dns} }`;
  w.rule('services', 'ip daddr . meta l4proto . th dport vmap @service-ips');
  w.rule('services', `${nodePortDaddr} meta l4proto . th dport vmap @service-nodeports`);
  w.rule('service-endpoints-check', 'ip daddr . meta l4proto . th dport vmap @no-endpoint-services');
  w.rule('nodeport-endpoints-check', `${nodePortDaddr} meta l4proto . th dport vmap @no-endpoint-nodeports`);
  // A ClusterIP on a port it does not serve is refused; an address no Service holds is dropped (not
  // routed to the default gateway). The DNS address is the agent's own and is left alone.
  w.rule('cluster-ips-check', `ip daddr @cluster-ips reject`);
  w.rule('cluster-ips-check', `ip daddr ${network.serviceCidr.text} ip daddr != ${dns} drop`);

  const slices = slicesByService(input.endpointSlices);
  const context = `${input.nodeName}\0${dns}\0${clusterCidr}`;
  const blocks = [...input.services]
    .map((svc) => ({ svc, key: serviceKey(svc) }))
    .sort((a, b) => compareText(a.key, b.key))
    .map(({ svc, key }) => cachedBlock(svc, slices.get(key) ?? [], input.nodeName, dns, clusterCidr, context));
  const affinitySets = new Map<string, number>();
  for (const block of blocks) for (const [name, seconds] of block.affinity) affinitySets.set(name, seconds);
  for (const [name, seconds] of [...affinitySets].sort((a, b) => compareText(a[0], b[0]))) {
    // Not flushed: a rebuild keeps the clients' stickiness.
    w.lines.push(`add set ${T} ${name} { type ipv4_addr ; flags dynamic,timeout ; timeout ${seconds}s ; }`);
    w.sets.push(name);
  }
  for (const block of blocks) w.addBlock(block);
  const contents = w.writeChains();
  // A key twice (two Services claiming one node port, which allocation prevents) would fail the
  // whole transaction and with it every Service on the node: the first in name order keeps it.
  const conflicts: string[] = [];
  const all = (pick: (b: ServiceBlock) => readonly string[]): string[] => {
    const seen = new Set<string>();
    return blocks.flatMap(pick).filter((element) => {
      const key = element.split(' : ')[0]!;
      if (!seen.has(key)) return seen.add(key);
      conflicts.push(element);
      return false;
    });
  };
  const elements = new Map<string, string[]>([
    ['cluster-ips', [...new Set(all((b) => b.clusterIps))].sort(compareText)],
    ['nodeport-ips', nodeIps],
    ['service-ips', all((b) => b.serviceIps)],
    ['service-nodeports', all((b) => b.nodePorts)],
    ['no-endpoint-services', all((b) => b.noEndpointServices)],
    ['no-endpoint-nodeports', all((b) => b.noEndpointNodePorts)],
  ]);
  const existingSets = new Set(input.existing?.sets ?? []);
  for (const [name, wanted] of elements) {
    const before = existingSets.has(name) ? input.existing?.elements?.get(name) : undefined;
    if (before) w.changeElements(name, before, wanted);
    else w.fillElements(name, wanted);
  }

  // Last: what the table holds but the rules no longer name. Emptied here (the maps that named
  // them were refilled above, so nothing points at them once this commits), deleted by the next
  // plan: deleting in the same transaction fails (EBUSY) on kernels that release a replaced
  // rule's anonymous numgen map only after the commit (kube-proxy deletes a second later too).
  const flushed = { chains: [] as string[], sets: [] as string[] };
  let deleted = 0;
  if (input.existing) {
    const keepChains = new Set(contents.keys());
    const keepSets = new Set(w.sets);
    const emptied = { chains: new Set(input.existing.flushed?.chains ?? []), sets: new Set(input.existing.flushed?.sets ?? []) };
    const staleChains = input.existing.chains.filter((c) => !keepChains.has(c)).sort(compareText);
    const staleSets = input.existing.sets.filter((s) => !keepSets.has(s)).sort(compareText);
    for (const c of staleChains) {
      if (emptied.chains.has(c)) continue;
      w.lines.push(`flush chain ${T} ${c}`);
      flushed.chains.push(c);
    }
    for (const c of staleChains) {
      if (!emptied.chains.has(c)) continue;
      w.lines.push(`delete chain ${T} ${c}`);
      deleted++;
    }
    for (const set of staleSets) {
      if (emptied.sets.has(set)) {
        w.lines.push(`delete set ${T} ${set}`);
        deleted++;
      } else {
        flushed.sets.push(set);
      }
    }
  }
  return {
    script: `${w.lines.join('\n')}\n`,
    chains: w.chains,
    sets: w.sets,
    rules: w.rules,
    servicePorts: blocks.reduce((n, b) => n + b.ports, 0),
    flushed,
    deleted,
    writtenChains: w.writtenChains,
    contents,
    elements,
    conflicts,
  };
}

/** The nft script of the node's Service datapath (see planServiceRules). */
export function buildServiceRules(input: ServiceRulesInput): string {
  return planServiceRules(input).script;
}
