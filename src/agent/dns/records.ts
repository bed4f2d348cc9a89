import { isIPv4 } from 'node:net';
import type { Answer, Question, SoaAnswer } from 'dns-packet';
import type { KubeObject } from '../../apiserver/objects.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';

/**
 * The answers of the cluster DNS, per the Kubernetes DNS-based service discovery specification
 * (schema 1.0.1), from a snapshot of the cluster's Services and EndpointSlices. Pure: no sockets,
 * no clock; the server (server.ts) builds the snapshot from its informers and puts the answers
 * on the wire.
 *
 * Names inside the cluster domain are ours to answer (NXDOMAIN when unknown); everything else is
 * 'forward' (to the node's upstream resolvers), as is a reverse name we hold no record for, as
 * CoreDNS's kubernetes plugin does with `fallthrough in-addr.arpa`.
 */

/** CoreDNS's kubernetes plugin default TTL: answers follow endpoint changes within seconds. */
export const DNS_TTL = 5;
/** The specification's schema version, served as `TXT dns-version.<domain>`. */
export const DNS_SCHEMA_VERSION = '1.0.1';

export interface NamedPort {
  name: string;
  /** Lower-case, as it appears in SRV names (`_tcp`). */
  protocol: string;
  port: number;
}

export interface EndpointEntry {
  ip: string;
  /** The endpoint's hostname, or its address dashed (`10-42-0-5`) as CoreDNS names one without. */
  label: string;
  /** The named ports of the slice(s) listing this address. */
  ports: NamedPort[];
}

export interface ServiceEntry {
  name: string;
  namespace: string;
  /** `<svc>.<ns>.svc.<domain>`, lower-case, no trailing dot. */
  fqdn: string;
  kind: 'clusterIP' | 'headless' | 'externalName' | 'unallocated';
  clusterIp?: string;
  externalName?: string;
  /** The Service's named ports (SRV of a ClusterIP Service). */
  ports: NamedPort[];
  /** Ready IPv4 endpoints (headless answers), one per address. */
  endpoints: EndpointEntry[];
}

export interface DnsSnapshot {
  /** By `<svc>.<ns>`, lower-case. */
  services: Map<string, ServiceEntry>;
  /** Namespaces holding a Service: `<ns>.svc.<domain>` exists (empty) for them. */
  namespaces: Set<string>;
  /** Address → names for PTR: ClusterIPs, and headless Services' ready endpoints. */
  reverse: Map<string, string[]>;
  /** The SOA serial: when this snapshot was built (seconds), so resolvers see it change. */
  serial: number;
}

/** Records found (an empty `answers` is NODATA: the name exists, not with that type). */
export interface DnsRecords {
  answers: Answer[];
  additionals: Answer[];
}

export type DnsAnswer = DnsRecords | 'forward' | 'nxdomain';

interface ServiceSpec {
  type?: string;
  clusterIP?: string;
  externalName?: string;
  publishNotReadyAddresses?: boolean;
  ports?: Array<{ name?: string; protocol?: string; port?: number }>;
}

interface SliceBody {
  addressType?: string;
  endpoints?: Array<{ addresses?: string[]; hostname?: string; conditions?: { ready?: boolean | null } }>;
  ports?: Array<{ name?: string | null; protocol?: string; port?: number | null }>;
}

function namedPorts(ports: Array<{ name?: string | null; protocol?: string; port?: number | null }> | undefined): NamedPort[] {
  const named: NamedPort[] = [];
  for (const port of ports ?? []) {
    // SRV records exist for named ports only (the specification's rule).
    if (!port.name || typeof port.port !== 'number') continue;
    named.push({ name: port.name.toLowerCase(), protocol: (port.protocol ?? 'TCP').toLowerCase(), port: port.port });
  }
  return named;
}

function dashed(ip: string): string {
  return ip.replaceAll('.', '-');
}

function addReverse(reverse: Map<string, string[]>, ip: string, name: string): void {
  const names = reverse.get(ip);
  if (!names) reverse.set(ip, [name]);
  else if (!names.includes(name)) names.push(name);
}

/** The snapshot the answers are read from, indexed once per change of the cluster's objects. */
export function buildSnapshot(services: KubeObject[], slices: KubeObject[], network: ServiceNetwork, serial = 0): DnsSnapshot {
  const domain = network.clusterDomain.toLowerCase();
  const slicesByService = new Map<string, SliceBody[]>();
  for (const slice of slices) {
    const serviceName = slice.metadata.labels?.['kubernetes.io/service-name'];
    if (!serviceName || !slice.metadata.namespace) continue;
    const key = `${serviceName}.${slice.metadata.namespace}`.toLowerCase();
    const list = slicesByService.get(key) ?? [];
    list.push(slice as unknown as SliceBody);
    slicesByService.set(key, list);
  }
  const snapshot: DnsSnapshot = { services: new Map(), namespaces: new Set(), reverse: new Map(), serial };
  for (const service of services) {
    const { name, namespace } = service.metadata;
    if (!name || !namespace) continue;
    const spec = (service.spec ?? {}) as ServiceSpec;
    const key = `${name}.${namespace}`.toLowerCase();
    const fqdn = `${key}.svc.${domain}`;
    const entry: ServiceEntry = { name, namespace, fqdn, kind: 'unallocated', ports: namedPorts(spec.ports), endpoints: [] };
    if (spec.type === 'ExternalName') {
      if (!spec.externalName) continue;
      entry.kind = 'externalName';
      entry.externalName = spec.externalName.replace(/\.$/, '');
    } else if (spec.clusterIP === 'None') {
      entry.kind = 'headless';
      const byIp = new Map<string, EndpointEntry>();
      for (const slice of slicesByService.get(key) ?? []) {
        if (slice.addressType !== 'IPv4') continue;
        const ports = namedPorts(slice.ports);
        for (const endpoint of slice.endpoints ?? []) {
          // An unknown readiness counts as ready (the EndpointSlice API's rule); a Service that
          // publishes not-ready addresses has every endpoint in DNS.
          const ready = endpoint.conditions?.ready !== false || spec.publishNotReadyAddresses === true;
          if (!ready) continue;
          for (const ip of endpoint.addresses ?? []) {
            if (!isIPv4(ip)) continue;
            const known = byIp.get(ip);
            if (known) {
              for (const port of ports) {
                if (!known.ports.some((p) => p.name === port.name && p.protocol === port.protocol)) known.ports.push(port);
              }
              continue;
            }
            byIp.set(ip, { ip, label: (endpoint.hostname ?? dashed(ip)).toLowerCase(), ports: [...ports] });
          }
        }
      }
      entry.endpoints = [...byIp.values()].sort((a, b) => a.ip.localeCompare(b.ip));
      for (const endpoint of entry.endpoints) addReverse(snapshot.reverse, endpoint.ip, `${endpoint.label}.${fqdn}`);
    } else if (spec.clusterIP && isIPv4(spec.clusterIP)) {
      entry.kind = 'clusterIP';
      entry.clusterIp = spec.clusterIP;
      addReverse(snapshot.reverse, spec.clusterIP, fqdn);
    }
    snapshot.services.set(key, entry);
    snapshot.namespaces.add(namespace.toLowerCase());
  }
  return snapshot;
}

/** The zone's SOA: in the authority section of negative answers (RFC 2308), TTL-bound caching. */
export function soaRecord(network: ServiceNetwork, serial: number): SoaAnswer {
  const domain = network.clusterDomain.toLowerCase();
  return {
    name: domain,
    type: 'SOA',
    ttl: DNS_TTL,
    data: {
      mname: `ns.dns.${domain}`,
      rname: `hostmaster.${domain}`,
      serial,
      refresh: 7200,
      retry: 1800,
      expire: 86400,
      minimum: DNS_TTL,
    },
  };
}

const NODATA: DnsRecords = { answers: [], additionals: [] };

function records(answers: Answer[], additionals: Answer[] = []): DnsRecords {
  return { answers, additionals };
}

function aRecords(name: string, ips: string[]): Answer[] {
  return ips.map((ip) => ({ name, type: 'A', ttl: DNS_TTL, data: ip }));
}

/** A name holding addresses: A (and ANY) get them; AAAA and the rest get NODATA (IPv4-only cluster). */
function addressAnswer(name: string, type: string, ips: string[]): DnsRecords {
  return type === 'A' || type === 'ANY' ? records(aRecords(name, ips)) : NODATA;
}

/** `a.b.c.d` from `a-b-c-d`, or undefined when it is not a dashed IPv4 address. */
function undashed(label: string): string | undefined {
  if (!/^\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}$/.test(label)) return undefined;
  const ip = label.replaceAll('-', '.');
  return isIPv4(ip) ? ip : undefined;
}

/** `d.c.b.a.in-addr.arpa` → `a.b.c.d`, or undefined. */
function reverseAddress(name: string): string | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.in-addr\.arpa$/.exec(name);
  if (!match) return undefined;
  const ip = `${match[4]}.${match[3]}.${match[2]}.${match[1]}`;
  return isIPv4(ip) ? ip : undefined;
}

/** Weights that share 100 among records of one priority, as CoreDNS does. */
function srvRecords(name: string, targets: Array<{ port: number; target: string }>): Answer[] {
  const weight = Math.floor(100 / Math.max(1, targets.length));
  return targets.map(({ port, target }) => ({ name, type: 'SRV', ttl: DNS_TTL, data: { priority: 0, weight, port, target } }));
}

/** `_<port>._<proto>.<svc>.<ns>.svc.<domain>`: SRV for the Service's (or each ready endpoint's) named port. */
function srvAnswer(name: string, type: string, service: ServiceEntry, portName: string, protocol: string): DnsAnswer {
  const matches = (port: NamedPort): boolean => port.name === portName && port.protocol === protocol;
  const targets: Array<{ port: number; target: string }> = [];
  const additionals: Answer[] = [];
  if (service.kind === 'clusterIP') {
    for (const port of service.ports.filter(matches)) targets.push({ port: port.port, target: service.fqdn });
    if (targets.length > 0) additionals.push(...aRecords(service.fqdn, [service.clusterIp!]));
  } else if (service.kind === 'headless') {
    for (const endpoint of service.endpoints) {
      const target = `${endpoint.label}.${service.fqdn}`;
      const ports = endpoint.ports.filter(matches);
      for (const port of ports) targets.push({ port: port.port, target });
      if (ports.length > 0) additionals.push(...aRecords(target, [endpoint.ip]));
    }
  }
  if (targets.length === 0) return 'nxdomain';
  return type === 'SRV' || type === 'ANY' ? records(srvRecords(name, targets), additionals) : NODATA;
}

/** `<svc>.<ns>.svc.<domain>` */
function serviceAnswer(name: string, type: string, service: ServiceEntry): DnsAnswer {
  switch (service.kind) {
    case 'externalName':
      // A CNAME owns its name for every type; the client follows it to the external name.
      return records([{ name, type: 'CNAME', ttl: DNS_TTL, data: service.externalName! }]);
    case 'clusterIP':
      return addressAnswer(name, type, [service.clusterIp!]);
    case 'headless':
      // No ready endpoint: the name does not exist (the specification's rule for headless).
      if (service.endpoints.length === 0) return 'nxdomain';
      return addressAnswer(name, type, service.endpoints.map((e) => e.ip));
    case 'unallocated':
      return NODATA;
  }
}

/** The answer to one question: records (maybe none: NODATA), NXDOMAIN, or 'forward' upstream. */
export function answer(question: Question, snapshot: DnsSnapshot, network: ServiceNetwork): DnsAnswer {
  const name = question.name.replace(/\.$/, '');
  const lower = name.toLowerCase();
  const type: string = question.type;
  const domain = network.clusterDomain.toLowerCase();
  if (question.class !== undefined && question.class !== 'IN' && question.class !== 'ANY') return 'forward';

  if (lower.endsWith('.in-addr.arpa')) {
    const ip = reverseAddress(lower);
    const names = ip === undefined ? undefined : snapshot.reverse.get(ip);
    if (!names) return 'forward';
    if (type !== 'PTR' && type !== 'ANY') return NODATA;
    return records([...names].sort().map((target) => ({ name, type: 'PTR', ttl: DNS_TTL, data: target })));
  }
  if (lower === domain) {
    if (type === 'SOA') return records([soaRecord(network, snapshot.serial)]);
    if (type === 'NS') return records([{ name, type: 'NS', ttl: DNS_TTL, data: `ns.dns.${domain}` }]);
    return NODATA;
  }
  if (!lower.endsWith(`.${domain}`)) return 'forward';

  const labels = lower.slice(0, -(domain.length + 1)).split('.');
  const last = labels[labels.length - 1];
  if (labels.length === 1 && labels[0] === 'dns-version') {
    return type === 'TXT' || type === 'ANY' ? records([{ name, type: 'TXT', ttl: DNS_TTL, data: [DNS_SCHEMA_VERSION] }]) : NODATA;
  }
  if (labels.length === 2 && labels[0] === 'ns' && labels[1] === 'dns') return addressAnswer(name, type, [network.clusterDns]);
  if (labels.length === 1 && (last === 'svc' || last === 'pod' || last === 'dns')) return NODATA;

  if (last === 'pod') {
    // `a-b-c-d.<ns>.pod.<domain>` answers any well-formed address (CoreDNS `pods insecure`, K3s's setting).
    if (labels.length === 2) return NODATA;
    if (labels.length !== 3) return 'nxdomain';
    const ip = undashed(labels[0]!);
    return ip === undefined ? 'nxdomain' : addressAnswer(name, type, [ip]);
  }
  if (last !== 'svc') return 'nxdomain';

  if (labels.length === 2) return snapshot.namespaces.has(labels[0]!) ? NODATA : 'nxdomain';
  if (labels.length === 3) {
    const service = snapshot.services.get(`${labels[0]}.${labels[1]}`);
    return service ? serviceAnswer(name, type, service) : 'nxdomain';
  }
  if (labels.length === 4) {
    // `<hostname>.<svc>.<ns>.svc.<domain>`: a headless Service's ready endpoint by hostname (or dashed address).
    const service = snapshot.services.get(`${labels[1]}.${labels[2]}`);
    if (service?.kind !== 'headless') return 'nxdomain';
    const ips = service.endpoints.filter((e) => e.label === labels[0]).map((e) => e.ip);
    return ips.length === 0 ? 'nxdomain' : addressAnswer(name, type, ips);
  }
  if (labels.length === 5 && labels[0]!.startsWith('_') && labels[1]!.startsWith('_')) {
    const service = snapshot.services.get(`${labels[2]}.${labels[3]}`);
    if (!service) return 'nxdomain';
    return srvAnswer(name, type, service, labels[0]!.slice(1), labels[1]!.slice(1));
  }
  return 'nxdomain';
}
