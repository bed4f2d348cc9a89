import dnsPacket, { type Answer, type DecodedPacket, type OptAnswer, type Packet } from 'dns-packet';
import type { Logger } from '../../logging/logger.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import { type Forwarder, questionEnd } from './forwarder.js';
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
export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4 } as const;

export class DnsResponder {
  private readonly empty: DnsSnapshot;

  constructor(private readonly options: ResponderOptions) {
    this.empty = buildSnapshot([], [], options.network);
  }

  /** The reply to `message` (undefined: nothing to say, e.g. it is itself a reply). */
  async handle(message: Buffer, tcp: boolean): Promise<Buffer | undefined> {
    let query: DecodedPacket;
    try {
      query = dnsPacket.decode(message);
      questionEnd(message);
    } catch {
      return message.length >= 12 && (message.readUInt16BE(2) & FLAG_QR) === 0 ? headerOnly(message, RCODE.FORMERR) : undefined;
    }
    if (query.flag_qr) return undefined;
    const opt = query.additionals?.find((a): a is OptAnswer => a.type === 'OPT');
    const limit = tcp ? 65535 : opt ? Math.min(UDP_EDNS_MAX, Math.max(UDP_PLAIN_LIMIT, opt.udpPayloadSize)) : UDP_PLAIN_LIMIT;
    if ((message.readUInt16BE(2) >> 11) & 0xf) return this.reply(query, RCODE.NOTIMP, undefined, opt, limit);
    const question = query.questions?.length === 1 ? query.questions[0]! : undefined;
    if (!question) return this.reply(query, RCODE.FORMERR, undefined, opt, limit);

    const snapshot = this.options.snapshot();
    const result: DnsAnswer = answer(question, snapshot ?? this.empty, this.options.network);
    if (result === 'forward') {
      const key = `${question.name.toLowerCase().replace(/\.$/, '')}|${question.type}|${question.class ?? 'IN'}|${opt ? `e${opt.flag_do ? 'd' : ''}` : ''}`;
      let response: Buffer | undefined;
      try {
        response = await this.options.forwarder.resolve(message, key, limit, tcp);
      } catch (error) {
        this.options.logger.debug({ err: error }, 'cannot forward');
      }
      return response ?? this.reply(query, RCODE.SERVFAIL, undefined, opt, limit);
    }
    // Before the first lists, an unknown name may be one not seen yet: no false NXDOMAIN.
    if (!snapshot) return this.reply(query, RCODE.SERVFAIL, undefined, opt, limit);
    if (result === 'nxdomain') return this.reply(query, RCODE.NXDOMAIN, { answers: [], additionals: [] }, opt, limit, snapshot);
    return this.reply(query, RCODE.NOERROR, result, opt, limit, snapshot);
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
    let encoded = dnsPacket.encode(packet);
    if (encoded.length > limit) {
      // Too big for this client over UDP: the header says so and it asks again over TCP.
      encoded = dnsPacket.encode({ ...packet, flags: packet.flags! | FLAG_TC, answers: [], authorities: [], additionals: ours });
    }
    return encoded;
  }
}

/** A reply that is only the query's header (no question could be read): FORMERR. */
function headerOnly(message: Buffer, rcode: number): Buffer {
  const reply = Buffer.alloc(12);
  message.copy(reply, 0, 0, 4);
  reply.writeUInt16BE(((message.readUInt16BE(2) & ~0x0f) | FLAG_QR | rcode) & 0xffff, 2);
  return reply;
}
