/**
 * The cluster DNS answers (src/agent/dns/records.ts), without a server: Services and EndpointSlices
 * → A, SRV, CNAME, PTR, TXT per the Kubernetes DNS specification 1.0.1; pod names; NXDOMAIN for
 * unknown names in the cluster domain; everything else forwarded. Also the upstream list read
 * from resolv.conf (src/agent/dns/upstreams.ts).
 *
 * Run: node --import tsx --test test/unit/dns-records.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Answer, Question, RecordType } from 'dns-packet';

import type { KubeObject } from '../../src/apiserver/objects.js';
import { answer, buildSnapshot, type DnsAnswer, type DnsRecords, DNS_TTL, type DnsSnapshot, soaRecord } from '../../src/agent/dns/records.js';
import { parseUpstream, UpstreamError, upstreamsFromResolvConf } from '../../src/agent/dns/upstreams.js';
import { defaultServiceNetwork, parseServiceNetwork } from '../../src/node-protocol/service-network.js';

const network = defaultServiceNetwork();

function service(name: string, namespace: string, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec };
}

interface EndpointInput {
  ip: string;
  ready?: boolean | null;
  hostname?: string;
}

function slice(
  service: string,
  namespace: string,
  endpoints: EndpointInput[],
  ports: Array<{ name?: string; port: number; protocol?: string }> = [],
  addressType = 'IPv4',
  name = `${service}-abc`,
): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace, labels: { 'kubernetes.io/service-name': service } },
    addressType,
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      ...(e.hostname ? { hostname: e.hostname } : {}),
      conditions: e.ready === null ? {} : { ready: e.ready ?? true },
    })),
    ports: ports.map((p) => ({ ...(p.name ? { name: p.name } : {}), port: p.port, protocol: p.protocol ?? 'TCP' })),
  };
}

const SERVICES: KubeObject[] = [
  service('web', 'default', {
    type: 'ClusterIP',
    clusterIP: '10.43.0.20',
    ports: [
      { name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 },
      { name: 'dns', port: 53, protocol: 'UDP' },
      { port: 9000, protocol: 'TCP' },
    ],
  }),
  service('db', 'prod', { clusterIP: 'None', ports: [{ name: 'pg', port: 5432 }] }),
  service('empty', 'prod', { clusterIP: 'None', ports: [{ name: 'pg', port: 5432 }] }),
  service('nameless', 'prod', { clusterIP: 'None' }),
  service('ext', 'default', { type: 'ExternalName', externalName: 'Example.COM.' }),
  service('np', 'default', { type: 'NodePort', clusterIP: '10.43.0.30', ports: [{ name: 'web', port: 8080, nodePort: 30080 }] }),
];

const SLICES: KubeObject[] = [
  slice('web', 'default', [{ ip: '10.42.0.5' }], [{ name: 'http', port: 8080 }]),
  slice(
    'db',
    'prod',
    [
      { ip: '10.42.1.7', hostname: 'db-0' },
      { ip: '10.42.2.9' },
      { ip: '10.42.3.3', ready: false, hostname: 'db-2' },
      { ip: '10.42.4.4', ready: null },
    ],
    [{ name: 'pg', port: 5433 }, { port: 9999 }],
  ),
  // A second slice repeating an address: it is answered once.
  slice('db', 'prod', [{ ip: '10.42.1.7', hostname: 'db-0' }], [{ name: 'pg', port: 5433 }], 'IPv4', 'db-def'),
  slice('db', 'prod', [{ ip: 'fd00::1' }], [{ name: 'pg', port: 5433 }], 'IPv6', 'db-v6'),
  slice('empty', 'prod', [{ ip: '10.42.5.5', ready: false }], [{ name: 'pg', port: 5432 }]),
  slice('nameless', 'prod', [{ ip: '10.42.6.6' }], [{ port: 1234 }]),
];

const snapshot: DnsSnapshot = buildSnapshot(SERVICES, SLICES, network, 1234);

function ask(name: string, type: string = 'A', snap: DnsSnapshot = snapshot, net = network): DnsAnswer {
  return answer({ name, type: type as RecordType } as Question, snap, net);
}

function found(result: DnsAnswer): DnsRecords {
  assert.notEqual(result, 'forward');
  assert.notEqual(result, 'nxdomain');
  return result as DnsRecords;
}

function data(result: DnsAnswer): unknown[] {
  return found(result).answers.map((a) => (a as { data: unknown }).data);
}

function types(answers: Answer[]): string[] {
  return answers.map((a) => a.type);
}

describe('cluster DNS answers: ClusterIP Services', () => {
  it('A <svc>.<ns>.svc.<domain> is the ClusterIP, TTL 5, the owner as asked', () => {
    const result = found(ask('web.default.svc.cluster.local'));
    assert.deepEqual(result.answers, [{ name: 'web.default.svc.cluster.local', type: 'A', ttl: DNS_TTL, data: '10.43.0.20' }]);
    assert.equal(DNS_TTL, 5);
    assert.deepEqual(data(ask('np.default.svc.cluster.local')), ['10.43.0.30']);
  });

  it('is case-insensitive, echoes the asked case, and takes a trailing dot', () => {
    const result = found(ask('WEB.Default.SVC.Cluster.Local.'));
    assert.deepEqual(result.answers, [{ name: 'WEB.Default.SVC.Cluster.Local', type: 'A', ttl: 5, data: '10.43.0.20' }]);
    assert.deepEqual(data(ask('_HTTP._TCP.web.DEFAULT.svc.cluster.local', 'SRV')), [{ priority: 0, weight: 100, port: 80, target: 'web.default.svc.cluster.local' }]);
  });

  it('AAAA and other types of an existing name are NODATA (IPv4-only cluster), not NXDOMAIN', () => {
    for (const type of ['AAAA', 'TXT', 'MX', 'SRV']) assert.deepEqual(found(ask('web.default.svc.cluster.local', type)).answers, [], type);
  });

  it('SRV _<port>._<proto> for named ports: the Service port and name, the address in additionals', () => {
    const result = found(ask('_http._tcp.web.default.svc.cluster.local', 'SRV'));
    assert.deepEqual(result.answers, [
      { name: '_http._tcp.web.default.svc.cluster.local', type: 'SRV', ttl: 5, data: { priority: 0, weight: 100, port: 80, target: 'web.default.svc.cluster.local' } },
    ]);
    assert.deepEqual(result.additionals, [{ name: 'web.default.svc.cluster.local', type: 'A', ttl: 5, data: '10.43.0.20' }]);
    assert.deepEqual(data(ask('_dns._udp.web.default.svc.cluster.local', 'SRV')), [{ priority: 0, weight: 100, port: 53, target: 'web.default.svc.cluster.local' }]);
  });

  it('SRV for a port that is not there (wrong protocol, unnamed, unknown) is NXDOMAIN; A on an SRV name is NODATA', () => {
    assert.equal(ask('_http._udp.web.default.svc.cluster.local', 'SRV'), 'nxdomain');
    assert.equal(ask('_dns._tcp.web.default.svc.cluster.local', 'SRV'), 'nxdomain');
    assert.equal(ask('_9000._tcp.web.default.svc.cluster.local', 'SRV'), 'nxdomain');
    assert.equal(ask('_http._tcp.nosuch.default.svc.cluster.local', 'SRV'), 'nxdomain');
    assert.deepEqual(found(ask('_http._tcp.web.default.svc.cluster.local', 'A')).answers, []);
  });

  it('PTR of a ClusterIP names the Service', () => {
    assert.deepEqual(data(ask('20.0.43.10.in-addr.arpa', 'PTR')), ['web.default.svc.cluster.local']);
    assert.deepEqual(data(ask('20.0.43.10.IN-ADDR.ARPA.', 'PTR')), ['web.default.svc.cluster.local']);
  });

  it('an endpoint name under a ClusterIP Service is NXDOMAIN (hostname records are for headless Services)', () => {
    assert.equal(ask('10-42-0-5.web.default.svc.cluster.local'), 'nxdomain');
  });
});

describe('cluster DNS answers: headless Services', () => {
  it('A is one record per ready IPv4 endpoint (unknown readiness counts as ready), each once', () => {
    assert.deepEqual(data(ask('db.prod.svc.cluster.local')), ['10.42.1.7', '10.42.2.9', '10.42.4.4']);
  });

  it('no ready endpoint: NXDOMAIN, for the name and its SRV', () => {
    assert.equal(ask('empty.prod.svc.cluster.local'), 'nxdomain');
    assert.equal(ask('empty.prod.svc.cluster.local', 'AAAA'), 'nxdomain');
    assert.equal(ask('_pg._tcp.empty.prod.svc.cluster.local', 'SRV'), 'nxdomain');
  });

  it('publishNotReadyAddresses puts not-ready endpoints in DNS', () => {
    const published = buildSnapshot(
      [service('empty', 'prod', { clusterIP: 'None', publishNotReadyAddresses: true })],
      SLICES,
      network,
    );
    assert.deepEqual(data(ask('empty.prod.svc.cluster.local', 'A', published)), ['10.42.5.5']);
  });

  it('<hostname>.<svc> answers a ready endpoint by hostname, or by its dashed address when it has none', () => {
    assert.deepEqual(data(ask('db-0.db.prod.svc.cluster.local')), ['10.42.1.7']);
    assert.deepEqual(data(ask('10-42-2-9.db.prod.svc.cluster.local')), ['10.42.2.9']);
    assert.deepEqual(found(ask('DB-0.db.prod.svc.cluster.local', 'AAAA')).answers, []);
    // Not ready: not in DNS.
    assert.equal(ask('db-2.db.prod.svc.cluster.local'), 'nxdomain');
    assert.equal(ask('db-9.db.prod.svc.cluster.local'), 'nxdomain');
  });

  it('SRV is one record per ready endpoint and named port: the endpoint port, its name as target, weights sharing 100', () => {
    const result = found(ask('_pg._tcp.db.prod.svc.cluster.local', 'SRV'));
    assert.deepEqual(
      result.answers.map((a) => (a as { data: unknown }).data),
      [
        { priority: 0, weight: 33, port: 5433, target: 'db-0.db.prod.svc.cluster.local' },
        { priority: 0, weight: 33, port: 5433, target: '10-42-2-9.db.prod.svc.cluster.local' },
        { priority: 0, weight: 33, port: 5433, target: '10-42-4-4.db.prod.svc.cluster.local' },
      ],
    );
    assert.deepEqual(
      result.additionals.map((a) => [a.name, (a as { data: unknown }).data]),
      [
        ['db-0.db.prod.svc.cluster.local', '10.42.1.7'],
        ['10-42-2-9.db.prod.svc.cluster.local', '10.42.2.9'],
        ['10-42-4-4.db.prod.svc.cluster.local', '10.42.4.4'],
      ],
    );
    // Unnamed ports have no SRV.
    assert.equal(ask('_1234._tcp.nameless.prod.svc.cluster.local', 'SRV'), 'nxdomain');
    assert.deepEqual(data(ask('nameless.prod.svc.cluster.local')), ['10.42.6.6']);
  });

  it('PTR of a ready endpoint names it under its Service; a not-ready one is forwarded (not ours)', () => {
    assert.deepEqual(data(ask('7.1.42.10.in-addr.arpa', 'PTR')), ['db-0.db.prod.svc.cluster.local']);
    assert.deepEqual(data(ask('9.2.42.10.in-addr.arpa', 'PTR')), ['10-42-2-9.db.prod.svc.cluster.local']);
    assert.equal(ask('3.3.42.10.in-addr.arpa', 'PTR'), 'forward');
    assert.deepEqual(found(ask('7.1.42.10.in-addr.arpa', 'A')).answers, []);
  });

  it('follows the slices: an endpoint turning ready appears, one removed goes', () => {
    const now = buildSnapshot(SERVICES, [slice('empty', 'prod', [{ ip: '10.42.5.5', ready: true }], [{ name: 'pg', port: 5432 }])], network);
    assert.deepEqual(data(ask('empty.prod.svc.cluster.local', 'A', now)), ['10.42.5.5']);
    assert.equal(ask('db.prod.svc.cluster.local', 'A', now), 'nxdomain');
  });
});

describe('cluster DNS answers: ExternalName, pods, the zone', () => {
  it('ExternalName is a CNAME to the external name, for every type', () => {
    for (const type of ['A', 'AAAA', 'CNAME', 'SRV']) {
      assert.deepEqual(found(ask('ext.default.svc.cluster.local', type)).answers, [
        { name: 'ext.default.svc.cluster.local', type: 'CNAME', ttl: 5, data: 'Example.COM' },
      ]);
    }
  });

  it('a-b-c-d.<ns>.pod.<domain> is a.b.c.d; a malformed one is NXDOMAIN', () => {
    assert.deepEqual(data(ask('10-42-0-7.default.pod.cluster.local')), ['10.42.0.7']);
    assert.deepEqual(data(ask('10-42-0-7.OTHER.pod.cluster.local')), ['10.42.0.7']);
    assert.deepEqual(found(ask('10-42-0-7.default.pod.cluster.local', 'AAAA')).answers, []);
    assert.equal(ask('10-42-0-300.default.pod.cluster.local'), 'nxdomain');
    assert.equal(ask('10-42-0.default.pod.cluster.local'), 'nxdomain');
    assert.equal(ask('web.default.pod.cluster.local'), 'nxdomain');
    assert.equal(ask('x.10-42-0-7.default.pod.cluster.local'), 'nxdomain');
  });

  it('TXT dns-version.<domain> is the schema version', () => {
    assert.deepEqual(data(ask('dns-version.cluster.local', 'TXT')), [['1.0.1']]);
    assert.deepEqual(found(ask('dns-version.cluster.local', 'A')).answers, []);
  });

  it('the zone apex has its SOA and NS; ns.dns.<domain> is the cluster-dns address', () => {
    assert.deepEqual(found(ask('cluster.local', 'SOA')).answers, [soaRecord(network, 1234)]);
    assert.deepEqual(data(ask('cluster.local', 'NS')), ['ns.dns.cluster.local']);
    assert.deepEqual(data(ask('ns.dns.cluster.local')), ['10.43.0.10']);
    assert.deepEqual(found(ask('cluster.local', 'A')).answers, []);
  });

  it('names that exist without records are NODATA: svc.<domain>, a namespace with Services', () => {
    assert.deepEqual(found(ask('svc.cluster.local')).answers, []);
    assert.deepEqual(found(ask('default.svc.cluster.local')).answers, []);
    assert.deepEqual(found(ask('prod.svc.cluster.local')).answers, []);
  });

  it('unknown names inside the domain are NXDOMAIN', () => {
    for (const name of [
      'nosuch.default.svc.cluster.local',
      'web.nosuchns.svc.cluster.local',
      'nosuchns.svc.cluster.local',
      'web.default.cluster.local',
      'foo.cluster.local',
      'a.b.c.d.e.f.svc.cluster.local',
      'x._tcp.web.default.svc.cluster.local',
    ]) {
      assert.equal(ask(name), 'nxdomain', name);
    }
  });

  it('search-path names of outside names end up inside the domain and are NXDOMAIN; the names themselves are forwarded', () => {
    // A pod's resolver tries `example.com.default.svc.cluster.local` (ndots:5) before `example.com`.
    assert.equal(ask('example.com.default.svc.cluster.local'), 'nxdomain');
    assert.equal(ask('example.com.svc.cluster.local'), 'nxdomain');
    assert.equal(ask('example.com.cluster.local'), 'nxdomain');
    assert.equal(ask('example.com'), 'forward');
    assert.equal(ask('example.com.', 'AAAA'), 'forward');
    assert.equal(ask('localhost'), 'forward');
    // A name that merely ends like the domain is not in it.
    assert.equal(ask('notcluster.local'), 'forward');
    assert.equal(ask('web.default.svc.cluster.localhost'), 'forward');
  });

  it('reverse names of unknown or malformed addresses are forwarded', () => {
    assert.equal(ask('1.0.0.127.in-addr.arpa', 'PTR'), 'forward');
    assert.equal(ask('99.0.43.10.in-addr.arpa', 'PTR'), 'forward');
    assert.equal(ask('0.43.10.in-addr.arpa', 'PTR'), 'forward');
  });

  it('follows cluster-domain: another domain is answered, cluster.local is then forwarded', () => {
    const { network: other } = parseServiceNetwork({
      clusterCidr: '10.42.0.0/16',
      serviceCidr: '10.43.0.0/16',
      serviceNodePortRange: '30000-32767',
      clusterDns: '10.43.0.10',
      clusterDomain: 'corp.internal',
    });
    assert.ok(other);
    const snap = buildSnapshot(SERVICES, SLICES, other);
    assert.deepEqual(data(ask('web.default.svc.corp.internal', 'A', snap, other)), ['10.43.0.20']);
    assert.equal(ask('web.default.svc.cluster.local', 'A', snap, other), 'forward');
    assert.deepEqual(data(ask('20.0.43.10.in-addr.arpa', 'PTR', snap, other)), ['web.default.svc.corp.internal']);
  });

  it('a slice without the service-name label or for an unknown Service is ignored; an ExternalName without a name is absent', () => {
    const stray = { ...slice('db', 'prod', [{ ip: '10.42.9.9' }]), metadata: { name: 'stray', namespace: 'prod' } };
    const snap = buildSnapshot([...SERVICES, service('bad', 'default', { type: 'ExternalName' })], [...SLICES, stray], network);
    assert.deepEqual(data(ask('db.prod.svc.cluster.local', 'A', snap)), ['10.42.1.7', '10.42.2.9', '10.42.4.4']);
    assert.equal(ask('bad.default.svc.cluster.local', 'A', snap), 'nxdomain');
    assert.deepEqual(types(found(ask('ext.default.svc.cluster.local', 'A', snap)).answers), ['CNAME']);
  });
});

describe('cluster DNS upstreams', () => {
  it('reads nameservers from resolv.conf in order, skipping loopback ones, cluster-dns, duplicates and junk', () => {
    const text = [
      '# generated',
      'search example.org',
      'nameserver 127.0.0.53',
      'nameserver 192.0.2.1',
      'nameserver ::1',
      'nameserver 10.43.0.10',
      'nameserver 2001:db8::53 # comment',
      'nameserver 192.0.2.1',
      'nameserver not-an-address',
      'options ndots:5',
      '  nameserver 198.51.100.7',
    ].join('\n');
    assert.deepEqual(upstreamsFromResolvConf(text, '10.43.0.10'), [
      { address: '192.0.2.1', port: 53, family: 4 },
      { address: '2001:db8::53', port: 53, family: 6 },
      { address: '198.51.100.7', port: 53, family: 4 },
    ]);
    assert.deepEqual(upstreamsFromResolvConf('nameserver 127.0.0.1\n', '10.43.0.10'), []);
  });

  it('parses an upstream given as ip, ip:port or [ipv6]:port, and refuses others', () => {
    assert.deepEqual(parseUpstream('192.0.2.1'), { address: '192.0.2.1', port: 53, family: 4 });
    assert.deepEqual(parseUpstream('127.0.0.1:5353'), { address: '127.0.0.1', port: 5353, family: 4 });
    assert.deepEqual(parseUpstream('[2001:db8::1]:54'), { address: '2001:db8::1', port: 54, family: 6 });
    assert.deepEqual(parseUpstream('2001:db8::1'), { address: '2001:db8::1', port: 53, family: 6 });
    assert.throws(() => parseUpstream('dns.example'), UpstreamError);
    assert.throws(() => parseUpstream('192.0.2.1:70000'), /port out of range/);
  });
});
