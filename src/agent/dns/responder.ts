import dnsPacket, { type Answer, type DecodedPacket, type OptAnswer, type Packet, type RecordType } from 'dns-packet';
import type { Logger } from '../../logging/logger.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import { type Forwarder, questionEnd, RCODE } from './forwarder.js';
import { answer, buildSnapshot, type DnsAnswer, type DnsRecords, type DnsSnapshot, soaRecord } from './records.js';

/**
 * One DNS message in, one reply out, transport aside (server.ts owns the sockets): the question
 * answered from the snapshot (records.ts) or forwarded (forwarder.ts), put on the wire with the
 * header flags, EDNS and truncation a resolver expects.
 */

export interface ResponderOptions {
  network: ServiceNetwork;
  /** The snapshot now; undefined until the informers have listed once. */
  snapshot: () => DnsSnapshot | undefined;
  forwarder: Forwarder;
  logger: Logger;
}

/** The classic UDP limit a client without EDNS takes (RFC 1035). */
export const UDP_PLAIN_LIMIT = 512;
/** The most we send over UDP even when a client's EDNS offers more (fragmentation). */
export const UDP_EDNS_MAX = 4096;
const FLAG_QR = 0x8000;
const FLAG_AA = 0x0400;
const FLAG_TC = 0x0200;
const FLAG_RD = 0x0100;
const FLAG_RA = 0x0080;
/** Encoded replies kept per snapshot at most (all dropped when full: a burst of odd names). */
const REPLY_CACHE_ENTRIES = 10_000;

export class DnsResponder {
  private readonly empty: DnsSnapshot;
  /** Encoded replies to cluster names, by query bytes after the ID, for `repliesOf` only. */
  private readonly replies = new Map<string, Buffer>();
  private repliesOf: DnsSnapshot | undefined;

  constructor(private readonly options: ResponderOptions) {
    this.empty = buildSnapshot([], [], options.network);
  }

  /** The reply to `message` (undefined: nothing to say, e.g. it is itself a reply). */
  async handle(message: Buffer, tcp: boolean): Promise<Buffer | undefined> {
    const snapshot = this.options.snapshot();
    if (snapshot !== this.repliesOf) {
      this.replies.clear();
      this.repliesOf = snapshot;
    }
    // The same query bytes (ID aside) against the same snapshot get the same reply: kept encoded.
    const replyKey = snapshot && message.length >= 12 ? `${tcp ? 't' : 'u'}${message.toString('latin1', 2)}` : undefined;
    const known = replyKey === undefined ? undefined : this.replies.get(replyKey);
    if (known) {
      const copy = Buffer.from(known);
      message.copy(copy, 0, 0, 2);
      return copy;
    }
    const computed = await this.computeReply(message, tcp, snapshot);
    if (computed?.cacheable && replyKey !== undefined) {
      if (this.replies.size >= REPLY_CACHE_ENTRIES) this.replies.clear();
      this.replies.set(replyKey, computed.reply);
    }
    return computed?.reply;
  }

  /** The reply, and whether it is ours alone (from the snapshot: kept until the snapshot changes). */
  private async computeReply(message: Buffer, tcp: boolean, snapshot: DnsSnapshot | undefined): Promise<{ reply: Buffer; cacheable: boolean } | undefined> {
    const own = (reply: Buffer): { reply: Buffer; cacheable: boolean } => ({ reply, cacheable: true });
    const passed = (reply: Buffer): { reply: Buffer; cacheable: boolean } => ({ reply, cacheable: false });
    let query: DecodedPacket;
    try {
      query = dnsPacket.decode(message);
      questionEnd(message);
    } catch {
      return message.length >= 12 && (message.readUInt16BE(2) & FLAG_QR) === 0 ? own(headerOnly(message, RCODE.FORMERR)) : undefined;
    }
    if (query.flag_qr) return undefined;
    const opt = query.additionals?.find((a): a is OptAnswer => a.type === 'OPT');
    const limit = tcp ? 65535 : opt ? Math.min(UDP_EDNS_MAX, Math.max(UDP_PLAIN_LIMIT, opt.udpPayloadSize)) : UDP_PLAIN_LIMIT;
    if ((message.readUInt16BE(2) >> 11) & 0xf) return own(this.reply(query, RCODE.NOTIMP, undefined, opt, limit));
    const question = query.questions?.length === 1 ? query.questions[0]! : undefined;
    if (!question) return own(this.reply(query, RCODE.FORMERR, undefined, opt, limit));

    const result: DnsAnswer = answer(question, snapshot ?? this.empty, this.options.network);
    if (result === 'forward') {
      const key = `${question.name.toLowerCase().replace(/\.$/, '')}|${question.type}|${question.class ?? 'IN'}|${opt ? `e${opt.flag_do ? 'd' : ''}` : ''}`;
      let response: Buffer | undefined;
      try {
        response = await this.options.forwarder.resolve(message, key, limit, tcp);
      } catch (error) {
        this.options.logger.debug({ err: error }, 'cannot forward');
      }
      // The forwarder has its own cache, with TTLs counted down: not kept here.
      return passed(response ?? this.reply(query, RCODE.SERVFAIL, undefined, opt, limit));
    }
    // Before the first lists, an unknown name may be one not seen yet: no false NXDOMAIN.
    if (!snapshot) return passed(this.reply(query, RCODE.SERVFAIL, undefined, opt, limit));
    if (result === 'nxdomain') return own(this.reply(query, RCODE.NXDOMAIN, { answers: [], additionals: [] }, opt, limit, snapshot));
    const last = result.answers[result.answers.length - 1];
    if (last?.type === 'CNAME' && question.type !== 'CNAME' && (question.type as string) !== 'ANY') {
      const chased = await this.chase(result, question.type, snapshot);
      // Part of it came from upstream: not kept here.
      return passed(this.reply(query, chased.rcode, chased.records, opt, limit, snapshot));
    }
    return own(this.reply(query, RCODE.NOERROR, result, opt, limit, snapshot));
  }

  /**
   * An ExternalName's CNAME followed to the records the client asked for, as a recursive resolver
   * does (RFC 1034 4.3.2): stub resolvers (glibc's, musl's) do not chase a CNAME themselves. A
   * target in the cluster domain is answered here, any other is forwarded (and cached); when the
   * upstreams fail the client still gets the CNAME. At most 8 links.
   */
  private async chase(records: DnsRecords, type: RecordType, snapshot: DnsSnapshot): Promise<{ rcode: number; records: DnsRecords }> {
    const answers = [...records.answers];
    const additionals = [...records.additionals];
    const seen = new Set<string>();
    for (let link = 0; link < 8; link++) {
      const target = String((answers[answers.length - 1] as { data: unknown }).data);
      if (seen.has(target.toLowerCase())) break;
      seen.add(target.toLowerCase());
      const next = answer({ name: target, type, class: 'IN' }, snapshot, this.options.network);
      if (next === 'nxdomain') return { rcode: RCODE.NXDOMAIN, records: { answers, additionals } };
      if (next === 'forward') {
        const reply = await this.forwardQuestion(target, type);
        if (reply) {
          answers.push(...(reply.answers ?? []));
          return { rcode: rcodeNumber(reply), records: { answers, additionals } };
        }
        break;
      }
      answers.push(...next.answers);
      additionals.push(...next.additionals);
      if (next.answers[next.answers.length - 1]?.type !== 'CNAME') break;
    }
    return { rcode: RCODE.NOERROR, records: { answers, additionals } };
  }

  /** A question of our own to the upstreams (through the cache), or undefined when none answers. */
  private async forwardQuestion(name: string, type: RecordType): Promise<DecodedPacket | undefined> {
    const message = dnsPacket.encode({
      type: 'query',
      id: Math.floor(Math.random() * 65536),
      flags: FLAG_RD,
      questions: [{ name, type, class: 'IN' }],
    });
    try {
      // As a TCP client: a truncated UDP answer is asked again over TCP; our reply is truncated later.
      const reply = await this.options.forwarder.resolve(message, `${name.toLowerCase().replace(/\.$/, '')}|${type}|IN|`, 65535, true);
      return reply ? dnsPacket.decode(reply) : undefined;
    } catch (error) {
      this.options.logger.debug({ err: error, name }, 'cannot follow the CNAME upstream');
      return undefined;
    }
  }

  /** Our own reply (authoritative when it has records), truncated with TC when over the client's limit. */
  private reply(
    query: DecodedPacket,
    rcode: number,
    records: DnsRecords | undefined,
    opt: OptAnswer | undefined,
    limit: number,
    snapshot?: DnsSnapshot,
  ): Buffer {
    const negative = records !== undefined && records.answers.length === 0;
    const ours: OptAnswer[] = opt
      ? [{ name: '.', type: 'OPT', udpPayloadSize: UDP_EDNS_MAX, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }]
      : [];
    const authorities: Answer[] = negative ? [soaRecord(this.options.network, snapshot?.serial ?? 0)] : [];
    const packet: Packet = {
      type: 'response',
      id: query.id ?? 0,
      flags: (records ? FLAG_AA : 0) | (query.flag_rd ? FLAG_RD : 0) | FLAG_RA | rcode,
      questions: query.questions ?? [],
      answers: records?.answers ?? [],
      authorities,
      additionals: [...(records?.additionals ?? []), ...ours],
    };
    let encoded: Buffer;
    try {
      encoded = dnsPacket.encode(packet);
    } catch (error) {
      // A record relayed from upstream that the wire library cannot write back: say so plainly.
      this.options.logger.debug({ err: error }, 'cannot encode the reply');
      encoded = dnsPacket.encode({ ...packet, flags: (packet.flags! & ~0xf) | RCODE.SERVFAIL, answers: [], authorities: [], additionals: ours });
    }
    if (encoded.length > limit && packet.additionals!.length > ours.length) {
      // The additional section is a courtesy (RFC 2181 9): dropped first, without TC, since some
      // clients (busybox nslookup) never ask again over TCP.
      encoded = dnsPacket.encode({ ...packet, additionals: ours });
    }
    if (encoded.length > limit) {
      // Too big for this client over UDP: the header says so and it asks again over TCP.
      encoded = dnsPacket.encode({ ...packet, flags: packet.flags! | FLAG_TC, answers: [], authorities: [], additionals: ours });
    }
    return encoded;
  }
}

function rcodeNumber(reply: DecodedPacket): number {
  return (reply.flags ?? 0) & 0xf;
}

/** A reply that is only the query's header (no question could be read): FORMERR. */
function headerOnly(message: Buffer, rcode: number): Buffer {
  const reply = Buffer.alloc(12);
  message.copy(reply, 0, 0, 4);
  reply.writeUInt16BE(((message.readUInt16BE(2) & ~0x0f) | FLAG_QR | rcode) & 0xffff, 2);
  return reply;
}
