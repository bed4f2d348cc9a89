/**
 * The cluster DNS message handling (src/agent/dns/responder.ts) and forwarding (forwarder.ts), in
 * one process: queries as bytes in, replies as bytes out, with stand-in upstreams on 127.0.0.1
 * UDP sockets of this process (answering, SERVFAIL-ing or silent). Header flags, FORMERR/NOTIMP,
 * SERVFAIL before the first lists, NXDOMAIN with the SOA, EDNS and truncation; upstream order,
 * timeout and fallback, the cache (TTL counted down with a moved clock, the 30 s cap, expiry).
 * The sockets and address device (server.ts) are exercised by test/e2e/cluster-dns.test.ts.
 *
 * Run: node --import tsx --test test/unit/dns-responder.test.ts
 */
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { after, before, describe, it } from 'node:test';
import dnsPacket, { type Answer, type DecodedPacket, type Packet, type RecordType } from 'dns-packet';

import type { KubeObject } from '../../src/apiserver/objects.js';
import { Forwarder, questionEnd, recordTtls, WireError } from '../../src/agent/dns/forwarder.js';
import { buildSnapshot, type DnsSnapshot } from '../../src/agent/dns/records.js';
import { DnsResponder } from '../../src/agent/dns/responder.js';
import { parseUpstream } from '../../src/agent/dns/upstreams.js';
import { createLogger } from '../../src/logging/logger.js';
import { defaultServiceNetwork } from '../../src/node-protocol/service-network.js';

const network = defaultServiceNetwork();
const logger = createLogger('silent');

type Behaviour = 'answer' | 'servfail' | 'silent';

/** A stand-in upstream on 127.0.0.1: `www.example.test` A 192.0.2.1 (TTL 60), others NXDOMAIN. */
class Upstream {
  readonly socket = dgram.createSocket('udp4');
  asked: string[] = [];
  /** The source port of each query. */
  ports: number[] = [];
  constructor(public behaviour: Behaviour) {
    this.socket.on('message', (msg, rinfo) => {
      const query = dnsPacket.decode(msg);
      const q = query.questions![0]!;
      this.asked.push(q.name);
      this.ports.push(rinfo.port);
      if (this.behaviour === 'silent') return;
      const known = q.name.toLowerCase() === 'www.example.test';
      const rcode = this.behaviour === 'servfail' ? 2 : known ? 0 : 3;
      const reply = dnsPacket.encode({
        type: 'response',
        id: query.id!,
        flags: 0x0180 | rcode,
        questions: query.questions!,
        answers: rcode === 0 ? [{ name: q.name, type: 'A', ttl: 60, data: '192.0.2.1' }] : [],
        authorities: rcode === 3 ? [{ name: 'example.test', type: 'SOA', ttl: 20, data: { mname: 'ns.example.test', rname: 'h.example.test', serial: 1, minimum: 20 } }] : [],
      });
      this.socket.send(reply, rinfo.port, rinfo.address);
    });
  }
  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.socket.bind(0, '127.0.0.1', () => resolve()));
    return `127.0.0.1:${this.socket.address().port}`;
  }
}

function encodeQuery(name: string, type: string, options: { edns?: number; id?: number; rd?: boolean } = {}): Buffer {
  const packet: Packet = {
    type: 'query',
    id: options.id ?? 4242,
    flags: options.rd === false ? 0 : dnsPacket.RECURSION_DESIRED,
    questions: [{ name, type: type as RecordType, class: 'IN' }],
    additionals: options.edns ? [{ name: '.', type: 'OPT', udpPayloadSize: options.edns, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }] : [],
  };
  return dnsPacket.encode(packet);
}

function decode(reply: Buffer | undefined): DecodedPacket & { rcode: string } {
  assert.ok(reply, 'a reply');
  return dnsPacket.decode(reply) as DecodedPacket & { rcode: string };
}

const manySlices: KubeObject[] = [
  {
    metadata: { name: 'db-x', namespace: 'default', labels: { 'kubernetes.io/service-name': 'db' } },
    addressType: 'IPv4',
    endpoints: Array.from({ length: 40 }, (_, i) => ({ addresses: [`10.42.7.${i + 1}`], conditions: { ready: true } })),
    ports: [{ name: 'pg', port: 5432, protocol: 'TCP' }],
  },
  {
    metadata: { name: 'small-x', namespace: 'default', labels: { 'kubernetes.io/service-name': 'small' } },
    addressType: 'IPv4',
    endpoints: Array.from({ length: 4 }, (_, i) => ({ addresses: [`10.42.8.${i + 1}`], conditions: { ready: true } })),
    ports: [{ name: 'pg', port: 5432, protocol: 'TCP' }],
  },
];
const snapshot: DnsSnapshot = buildSnapshot(
  [
    { metadata: { name: 'web', namespace: 'default' }, spec: { clusterIP: '10.43.0.20', ports: [{ name: 'http', port: 80 }] } },
    { metadata: { name: 'db', namespace: 'default' }, spec: { clusterIP: 'None' } },
    { metadata: { name: 'small', namespace: 'default' }, spec: { clusterIP: 'None' } },
    { metadata: { name: 'ext', namespace: 'default' }, spec: { type: 'ExternalName', externalName: 'www.example.test' } },
    { metadata: { name: 'alias', namespace: 'default' }, spec: { type: 'ExternalName', externalName: 'web.default.svc.cluster.local' } },
    { metadata: { name: 'chain', namespace: 'default' }, spec: { type: 'ExternalName', externalName: 'alias.default.svc.cluster.local' } },
    { metadata: { name: 'dangling', namespace: 'default' }, spec: { type: 'ExternalName', externalName: 'nosuch.default.svc.cluster.local' } },
    { metadata: { name: 'loop', namespace: 'default' }, spec: { type: 'ExternalName', externalName: 'loop.default.svc.cluster.local' } },
  ],
  manySlices,
  network,
  77,
);

describe('cluster DNS responder and forwarder', () => {
  const good = new Upstream('answer');
  const failing = new Upstream('servfail');
  const silent = new Upstream('silent');
  const addresses: Record<string, string> = {};
  let clock = 1_000_000;
  const forwarders: Forwarder[] = [];

  function responder(upstreams: string[], synced = true): DnsResponder {
    const forwarder = new Forwarder({ upstreams: upstreams.map(parseUpstream), timeoutMs: 200, logger, now: () => clock });
    forwarders.push(forwarder);
    return new DnsResponder({ network, snapshot: () => (synced ? snapshot : undefined), forwarder, logger });
  }

  before(async () => {
    addresses.good = await good.start();
    addresses.failing = await failing.start();
    addresses.silent = await silent.start();
  });

  after(() => {
    for (const forwarder of forwarders) forwarder.close();
    for (const upstream of [good, failing, silent]) upstream.socket.close();
  });

  it('answers cluster names authoritatively, the ID and RD echoed, RA set', async () => {
    const r = responder([addresses.good!]);
    const reply = decode(await r.handle(encodeQuery('web.default.svc.cluster.local', 'A', { id: 999 }), false));
    assert.equal(reply.id, 999);
    assert.equal(reply.rcode, 'NOERROR');
    assert.ok(reply.flag_qr && reply.flag_aa && reply.flag_rd && reply.flag_ra && !reply.flag_tc);
    assert.deepEqual(reply.questions, [{ name: 'web.default.svc.cluster.local', type: 'A', class: 'IN' }]);
    assert.deepEqual(reply.answers!.map((a) => [a.type, (a as { ttl: number }).ttl, (a as { data: unknown }).data]), [['A', 5, '10.43.0.20']]);
    const noRd = decode(await r.handle(encodeQuery('web.default.svc.cluster.local', 'A', { rd: false }), false));
    assert.ok(!noRd.flag_rd);
  });

  it('NXDOMAIN and NODATA carry the zone SOA with the snapshot serial', async () => {
    const r = responder([addresses.good!]);
    const nx = decode(await r.handle(encodeQuery('nosuch.default.svc.cluster.local', 'A'), false));
    assert.equal(nx.rcode, 'NXDOMAIN');
    assert.ok(nx.flag_aa);
    assert.deepEqual(nx.authorities!.map((a) => [a.name, a.type, (a as { data: { serial: number; minimum: number } }).data.serial]), [['cluster.local', 'SOA', 77]]);
    const nodata = decode(await r.handle(encodeQuery('web.default.svc.cluster.local', 'AAAA'), false));
    assert.equal(nodata.rcode, 'NOERROR');
    assert.deepEqual(nodata.answers, []);
    assert.equal(nodata.authorities!.length, 1);
  });

  it('SERVFAIL for cluster names before the first lists; outside names are forwarded meanwhile', async () => {
    const r = responder([addresses.good!], false);
    assert.equal(decode(await r.handle(encodeQuery('web.default.svc.cluster.local', 'A'), false)).rcode, 'SERVFAIL');
    assert.equal(decode(await r.handle(encodeQuery('www.example.test', 'A'), false)).rcode, 'NOERROR');
  });

  it('FORMERR for a malformed query or several questions, NOTIMP for other opcodes, silence for replies and scraps', async () => {
    const r = responder([addresses.good!]);
    const garbage = Buffer.concat([encodeQuery('web.default.svc.cluster.local', 'A', { id: 7 }).subarray(0, 20)]);
    const formerr = decode(await r.handle(garbage, false));
    assert.equal(formerr.id, 7);
    assert.equal(formerr.rcode, 'FORMERR');
    const two = dnsPacket.encode({ type: 'query', id: 8, questions: [{ name: 'a.example.test', type: 'A' }, { name: 'b.example.test', type: 'A' }] });
    assert.equal(decode(await r.handle(two, false)).rcode, 'FORMERR');
    const status = encodeQuery('web.default.svc.cluster.local', 'A');
    status.writeUInt16BE(status.readUInt16BE(2) | (2 << 11), 2);
    assert.equal(decode(await r.handle(status, false)).rcode, 'NOTIMP');
    assert.equal(await r.handle(Buffer.from([1, 2, 3]), false), undefined);
    const aReply = dnsPacket.encode({ type: 'response', id: 9, questions: [{ name: 'x.example.test', type: 'A' }] });
    assert.equal(await r.handle(aReply, false), undefined);
  });

  it('truncates over plain UDP past 512 bytes (TC, no records); EDNS raises the limit and is echoed; TCP has none', async () => {
    const r = responder([addresses.good!]);
    const plain = await r.handle(encodeQuery('db.default.svc.cluster.local', 'A'), false);
    const p = decode(plain);
    assert.ok(p.flag_tc && plain!.length <= 512);
    assert.deepEqual(p.answers, []);
    const edns = decode(await r.handle(encodeQuery('db.default.svc.cluster.local', 'A', { edns: 4096 }), false));
    assert.ok(!edns.flag_tc);
    assert.equal(edns.answers!.length, 40);
    assert.deepEqual(edns.additionals!.map((a) => a.type), ['OPT']);
    const tcp = decode(await r.handle(encodeQuery('db.default.svc.cluster.local', 'A'), true));
    assert.ok(!tcp.flag_tc);
    assert.equal(tcp.answers!.length, 40);
  });

  it('over plain UDP an answer that fits without its additional section is sent without it, not truncated', async () => {
    const r = responder([addresses.good!]);
    // 4 SRV answers (one per endpoint) fit in 512 bytes; with their 4 A records they do not (dns-packet
    // writes names uncompressed, so replies are larger than other servers' and the room is small).
    const srv = decode(await r.handle(encodeQuery('_pg._tcp.small.default.svc.cluster.local', 'SRV'), false));
    assert.ok(!srv.flag_tc);
    assert.equal(srv.answers!.length, 4);
    assert.deepEqual(srv.additionals, []);
    const tcp = decode(await r.handle(encodeQuery('_pg._tcp.small.default.svc.cluster.local', 'SRV'), true));
    assert.equal(tcp.additionals!.length, 4, 'over TCP the addresses come along');
  });

  it('forwards past a silent upstream (timeout) and a SERVFAIL-ing one to a working one, not authoritative', async () => {
    const r = responder([addresses.silent!, addresses.failing!, addresses.good!]);
    const before = { silent: silent.asked.length, failing: failing.asked.length };
    const reply = decode(await r.handle(encodeQuery('www.example.test', 'A', { id: 321 }), false));
    assert.equal(reply.id, 321);
    assert.equal(reply.rcode, 'NOERROR');
    assert.ok(!reply.flag_aa);
    assert.deepEqual(reply.answers!.map((a) => (a as { data: unknown }).data), ['192.0.2.1']);
    assert.equal(silent.asked.length, before.silent + 1);
    assert.equal(failing.asked.length, before.failing + 1);
  });

  it('SERVFAIL when every upstream is silent; the upstream SERVFAIL when that is all there is; SERVFAIL with no upstream at all', async () => {
    assert.equal(decode(await responder([addresses.silent!]).handle(encodeQuery('nothing.example.test', 'A', { id: 5 }), false)).rcode, 'SERVFAIL');
    const relayed = decode(await responder([addresses.failing!]).handle(encodeQuery('www.example.test', 'A', { id: 6 }), false));
    assert.equal(relayed.rcode, 'SERVFAIL');
    assert.equal(relayed.id, 6);
    assert.equal(decode(await responder([]).handle(encodeQuery('www.example.test', 'A'), false)).rcode, 'SERVFAIL');
  });

  it('caches forwarded answers: TTLs counted down, at most 30 s, then asked again; the asker spelling echoed', async () => {
    const r = responder([addresses.good!]);
    const start = good.asked.length;
    const first = decode(await r.handle(encodeQuery('www.example.test', 'A'), false));
    assert.equal((first.answers![0] as { ttl: number }).ttl, 60);
    clock += 10_000;
    const cached = decode(await r.handle(encodeQuery('WWW.Example.Test', 'A', { id: 77 }), false));
    assert.equal(cached.id, 77);
    assert.deepEqual(cached.questions!.map((q) => q.name), ['WWW.Example.Test']);
    assert.equal((cached.answers![0] as { ttl: number }).ttl, 50);
    assert.equal(good.asked.length, start + 1, 'the second came from the cache');
    // The 60 s TTL is kept 30 s at most.
    clock += 21_000;
    decode(await r.handle(encodeQuery('www.example.test', 'A'), false));
    assert.equal(good.asked.length, start + 2);
    // A negative answer with an SOA is kept for the SOA's TTL.
    decode(await r.handle(encodeQuery('gone.example.test', 'A'), false));
    decode(await r.handle(encodeQuery('gone.example.test', 'A'), false));
    assert.equal(good.asked.length, start + 3);
    clock += 21_000;
    assert.equal(decode(await r.handle(encodeQuery('gone.example.test', 'A'), false)).rcode, 'NXDOMAIN');
    assert.equal(good.asked.length, start + 4);
    // Another type is another entry.
    decode(await r.handle(encodeQuery('www.example.test', 'AAAA'), false));
    assert.equal(good.asked.length, start + 5);
  });

  it('asks upstreams from a new source port every 10 s (the port and the ID are what a forger must guess)', async () => {
    const r = responder([addresses.good!]);
    await r.handle(encodeQuery('p1.example.test', 'A'), false);
    await r.handle(encodeQuery('p2.example.test', 'A'), false);
    const [a, b] = good.ports.slice(-2);
    assert.equal(a, b, 'the same socket within 10 s');
    clock += 10_001;
    const reply = decode(await r.handle(encodeQuery('p3.example.test', 'A'), false));
    assert.equal(reply.rcode, 'NXDOMAIN');
    assert.notEqual(good.ports[good.ports.length - 1], b, 'a new socket after 10 s');
  });

  it('follows an ExternalName CNAME to the records asked for: upstream, in-cluster, chained; NXDOMAIN at a dead end; a loop stops', async () => {
    const r = responder([addresses.good!]);
    const data = (reply: DecodedPacket): unknown[] => reply.answers!.map((a) => [a.type, (a as { data: unknown }).data]);
    const outside = decode(await r.handle(encodeQuery('ext.default.svc.cluster.local', 'A'), false));
    assert.equal(outside.rcode, 'NOERROR');
    assert.deepEqual(data(outside), [['CNAME', 'www.example.test'], ['A', '192.0.2.1']]);
    const inside = decode(await r.handle(encodeQuery('alias.default.svc.cluster.local', 'A'), false));
    assert.deepEqual(data(inside), [['CNAME', 'web.default.svc.cluster.local'], ['A', '10.43.0.20']]);
    const chained = decode(await r.handle(encodeQuery('chain.default.svc.cluster.local', 'A'), false));
    assert.deepEqual(data(chained), [['CNAME', 'alias.default.svc.cluster.local'], ['CNAME', 'web.default.svc.cluster.local'], ['A', '10.43.0.20']]);
    const dangling = decode(await r.handle(encodeQuery('dangling.default.svc.cluster.local', 'A'), false));
    assert.equal(dangling.rcode, 'NXDOMAIN');
    assert.deepEqual(data(dangling), [['CNAME', 'nosuch.default.svc.cluster.local']]);
    const loop = decode(await r.handle(encodeQuery('loop.default.svc.cluster.local', 'A'), false));
    assert.equal(loop.rcode, 'NOERROR');
    assert.ok(loop.answers!.length <= 9);
    // Asked for the CNAME itself: just the CNAME.
    assert.deepEqual(data(decode(await r.handle(encodeQuery('ext.default.svc.cluster.local', 'CNAME'), false))), [['CNAME', 'www.example.test']]);
    // No upstream answers: the CNAME alone.
    const alone = decode(await responder([addresses.silent!]).handle(encodeQuery('ext.default.svc.cluster.local', 'A'), false));
    assert.equal(alone.rcode, 'NOERROR');
    assert.deepEqual(data(alone), [['CNAME', 'www.example.test']]);
  });

  it('keeps encoded replies to cluster names only while the snapshot stays: the ID and spelling are each query\'s own', async () => {
    const webAt = (ip: string): DnsSnapshot => buildSnapshot([{ metadata: { name: 'web', namespace: 'default' }, spec: { clusterIP: ip } }], [], network);
    let current = webAt('10.43.0.20');
    const forwarder = new Forwarder({ upstreams: [], timeoutMs: 200, logger });
    forwarders.push(forwarder);
    const r = new DnsResponder({ network, snapshot: () => current, forwarder, logger });
    const ask = async (name: string, id: number): Promise<DecodedPacket> => decode(await r.handle(encodeQuery(name, 'A', { id }), false));
    const first = await ask('web.default.svc.cluster.local', 1);
    const again = await ask('web.default.svc.cluster.local', 2);
    assert.equal(first.id, 1);
    assert.equal(again.id, 2);
    assert.deepEqual(again.answers!.map((a) => (a as { data: unknown }).data), ['10.43.0.20']);
    const upper = await ask('WEB.default.svc.cluster.local', 3);
    assert.deepEqual(upper.questions!.map((q) => q.name), ['WEB.default.svc.cluster.local']);
    assert.deepEqual(upper.answers!.map((a) => a.name), ['WEB.default.svc.cluster.local']);
    current = webAt('10.43.0.21');
    const moved = await ask('web.default.svc.cluster.local', 4);
    assert.equal(moved.id, 4);
    assert.deepEqual(moved.answers!.map((a) => (a as { data: unknown }).data), ['10.43.0.21']);
  });

  it('the wire walkers refuse messages that run short', () => {
    const message = dnsPacket.encode({
      type: 'response',
      id: 1,
      questions: [{ name: 'a.example.test', type: 'A' }],
      answers: [{ name: 'a.example.test', type: 'A', ttl: 100, data: '192.0.2.9' } as Answer],
    });
    assert.equal(questionEnd(message), 12 + 16 + 4);
    assert.equal(recordTtls(Buffer.from(message)), 100);
    const lowered = Buffer.from(message);
    recordTtls(lowered, 30);
    assert.equal((dnsPacket.decode(lowered).answers![0] as { ttl: number }).ttl, 70);
    assert.throws(() => recordTtls(message.subarray(0, message.length - 6)), WireError);
    assert.throws(() => questionEnd(message.subarray(0, 8)), WireError);
  });
});
