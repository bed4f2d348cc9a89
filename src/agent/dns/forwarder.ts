import { randomInt } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import type { Logger } from '../../logging/logger.js';
import type { Upstream } from './upstreams.js';

/**
 * Names outside the cluster domain go to the node's upstream resolvers, in order: each gets
 * `timeoutMs`, then the next is tried (an unreachable one fails at once); a SERVFAIL or REFUSED
 * moves on too, and is what the client gets if no upstream does better. Queries are relayed as
 * the client sent them (its EDNS size and flags included), with an ID of ours. A truncated UDP
 * answer for a client on TCP is asked again over TCP.
 *
 * Answers are cached for their smallest TTL, at most `maxTtlSeconds` (K3s's CoreDNS runs
 * `cache 30`), with TTLs counted down on the way out, so a busy node does not ask its upstream
 * for every pod's lookup of the same name.
 */

export interface ForwarderOptions {
  upstreams: Upstream[];
  timeoutMs: number;
  logger: Logger;
  /** Cached answers kept at most (oldest dropped first). */
  cacheEntries?: number;
  maxTtlSeconds?: number;
  /** Milliseconds now (tests move time). */
  now?: () => number;
}

interface Pending {
  upstream: Upstream;
  question: Buffer;
  resolve: (response: Buffer | Error) => void;
}

interface CacheEntry {
  response: Buffer;
  storedAt: number;
  expiresAt: number;
}

const HEADER = 12;
const SOCKET_ROTATE_MS = 10_000;
const TYPE_OPT = 41;
/** DNS response codes (RFC 1035 4.1.1, RFC 6895), for the forwarder and the responder alike. */
export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;

export class WireError extends Error {
  override name = 'WireError';
}

/** The offset after the (possibly compressed) name at `offset`. */
function skipName(buf: Buffer, offset: number): number {
  for (;;) {
    if (offset >= buf.length) throw new WireError('name runs past the message');
    const length = buf[offset]!;
    if (length === 0) return offset + 1;
    if ((length & 0xc0) === 0xc0) return offset + 2;
    offset += length + 1;
  }
}

/** The offset after the question section. */
export function questionEnd(buf: Buffer): number {
  if (buf.length < HEADER) throw new WireError('shorter than a DNS header');
  let offset = HEADER;
  for (let i = buf.readUInt16BE(4); i > 0; i--) offset = skipName(buf, offset) + 4;
  if (offset > buf.length) throw new WireError('question runs past the message');
  return offset;
}

/**
 * Walks the resource records after the question: the smallest TTL (OPT's field is not a TTL), and
 * with `subtract` every TTL lowered by that many seconds, in place.
 */
export function recordTtls(buf: Buffer, subtract = 0): number | undefined {
  let offset = questionEnd(buf);
  const count = buf.readUInt16BE(6) + buf.readUInt16BE(8) + buf.readUInt16BE(10);
  let min: number | undefined;
  for (let i = 0; i < count; i++) {
    offset = skipName(buf, offset);
    if (offset + 10 > buf.length) throw new WireError('record runs past the message');
    const type = buf.readUInt16BE(offset);
    const ttlAt = offset + 4;
    if (type !== TYPE_OPT) {
      const ttl = buf.readUInt32BE(ttlAt);
      if (subtract > 0) buf.writeUInt32BE(Math.max(0, ttl - subtract), ttlAt);
      min = min === undefined ? ttl : Math.min(min, ttl);
    }
    offset += 10 + buf.readUInt16BE(offset + 8);
  }
  if (offset > buf.length) throw new WireError('record data runs past the message');
  return min;
}

export function rcodeOf(buf: Buffer): number {
  return buf.readUInt16BE(2) & 0xf;
}

export function truncated(buf: Buffer): boolean {
  return (buf.readUInt16BE(2) & 0x0200) !== 0;
}

export class Forwarder {
  private readonly sockets = new Map<4 | 6, { socket: dgram.Socket; since: number }>();
  /** Sockets replaced, open a while longer for the answers still on their way. */
  private readonly retiring = new Set<dgram.Socket>();
  private readonly pending = new Map<number, Pending>();
  private readonly cache = new Map<string, CacheEntry>();
  private readonly now: () => number;
  private closed = false;

  constructor(private readonly options: ForwarderOptions) {
    this.now = options.now ?? Date.now;
  }

  get upstreams(): Upstream[] {
    return this.options.upstreams;
  }

  /**
   * The upstream answer to `query` with the client's ID, or undefined when no upstream answered.
   * `key` names the question for the cache (undefined: not cached); `limit` is the largest answer
   * the client takes (its UDP size; 65535 on TCP).
   */
  async resolve(query: Buffer, key: string | undefined, limit: number, tcp: boolean): Promise<Buffer | undefined> {
    const id = query.readUInt16BE(0);
    const questionBytes = query.subarray(HEADER, questionEnd(query));
    if (key !== undefined) {
      const hit = this.cached(key, id, questionBytes);
      if (hit && hit.length <= limit) return hit;
    }
    let fallback: Buffer | undefined;
    for (const upstream of this.options.upstreams) {
      if (this.closed) return undefined;
      let response: Buffer | undefined;
      try {
        response = await this.exchangeUdp(upstream, query, questionBytes);
        if (tcp && truncated(response)) response = await this.exchangeTcp(upstream, query);
      } catch (error) {
        this.options.logger.debug({ upstream: `${upstream.address}:${upstream.port}`, err: error }, 'upstream resolver failed; trying the next');
        continue;
      }
      const rcode = rcodeOf(response);
      if (rcode === RCODE.SERVFAIL || rcode === RCODE.REFUSED) {
        fallback ??= response;
        continue;
      }
      response.writeUInt16BE(id, 0);
      if (key !== undefined) this.store(key, response);
      return response;
    }
    if (fallback) fallback.writeUInt16BE(id, 0);
    return fallback;
  }

  close(): void {
    this.closed = true;
    for (const { socket } of this.sockets.values()) socket.close();
    this.sockets.clear();
    for (const socket of this.retiring) socket.close();
    this.retiring.clear();
    for (const pending of this.pending.values()) pending.resolve(new Error('forwarder closed'));
    this.pending.clear();
    this.cache.clear();
  }

  private cached(key: string, id: number, questionBytes: Buffer): Buffer | undefined {
    const entry = this.cache.get(key);
    if (!entry) return undefined;
    const now = this.now();
    if (now >= entry.expiresAt) {
      this.cache.delete(key);
      return undefined;
    }
    const copy = Buffer.from(entry.response);
    copy.writeUInt16BE(id, 0);
    // The client's own spelling of the name (the key is case-blind; some resolvers check the case).
    questionBytes.copy(copy, HEADER);
    recordTtls(copy, Math.floor((now - entry.storedAt) / 1000));
    return copy;
  }

  private store(key: string, response: Buffer): void {
    const rcode = rcodeOf(response);
    if ((rcode !== 0 && rcode !== RCODE.NXDOMAIN) || truncated(response)) return;
    let ttl: number | undefined;
    try {
      ttl = recordTtls(response);
    } catch {
      return;
    }
    // A negative answer without an SOA says nothing about how long it holds: not kept.
    if (ttl === undefined || ttl <= 0) return;
    const seconds = Math.min(ttl, this.options.maxTtlSeconds ?? 30);
    const now = this.now();
    this.cache.delete(key);
    this.cache.set(key, { response: Buffer.from(response), storedAt: now, expiresAt: now + seconds * 1000 });
    const max = this.options.cacheEntries ?? 10_000;
    while (this.cache.size > max) this.cache.delete(this.cache.keys().next().value!);
  }

  /**
   * The UDP socket for upstream queries, replaced every SOCKET_ROTATE_MS: its source port and the
   * 16-bit ID are what an off-path attacker must guess to slip in a forged answer, so the port
   * does not stay the same for the life of the agent.
   */
  private socket(family: 4 | 6): dgram.Socket {
    const current = this.sockets.get(family);
    const now = this.now();
    if (current && now - current.since < SOCKET_ROTATE_MS) return current.socket;
    if (current) {
      const old = current.socket;
      this.retiring.add(old);
      setTimeout(() => {
        // Not when close() has closed it already.
        if (this.retiring.delete(old)) old.close();
      }, this.options.timeoutMs + 100).unref();
    }
    const socket = dgram.createSocket(family === 4 ? 'udp4' : 'udp6');
    socket.on('message', (msg, rinfo) => this.onResponse(msg, rinfo));
    socket.on('error', (error) => this.options.logger.warn({ err: error }, 'upstream socket error'));
    socket.unref();
    this.sockets.set(family, { socket, since: now });
    return socket;
  }

  private onResponse(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    if (msg.length < HEADER) return;
    const pending = this.pending.get(msg.readUInt16BE(0));
    if (!pending) return;
    // Only the upstream asked, answering the question asked, is believed (spoofing).
    if (rinfo.address !== pending.upstream.address || rinfo.port !== pending.upstream.port) return;
    try {
      if (!msg.subarray(HEADER, questionEnd(msg)).equals(pending.question)) return;
    } catch {
      return;
    }
    this.pending.delete(msg.readUInt16BE(0));
    pending.resolve(msg);
  }

  private exchangeUdp(upstream: Upstream, query: Buffer, question: Buffer): Promise<Buffer> {
    let id = randomInt(0, 65536);
    while (this.pending.has(id)) id = randomInt(0, 65536);
    const message = Buffer.from(query);
    message.writeUInt16BE(id, 0);
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`no answer within ${this.options.timeoutMs} ms`));
      }, this.options.timeoutMs);
      const settle = (result: Buffer | Error): void => {
        clearTimeout(timer);
        if (result instanceof Error) reject(result);
        else resolve(result);
      };
      this.pending.set(id, { upstream, question, resolve: settle });
      this.socket(upstream.family).send(message, upstream.port, upstream.address, (error) => {
        if (!error) return;
        this.pending.delete(id);
        settle(error);
      });
    });
  }

  private exchangeTcp(upstream: Upstream, query: Buffer): Promise<Buffer> {
    return new Promise<Buffer>((resolve, reject) => {
      const socket = net.connect({ host: upstream.address, port: upstream.port });
      let received = Buffer.alloc(0);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`no TCP answer within ${this.options.timeoutMs} ms`));
      }, this.options.timeoutMs);
      socket.on('connect', () => {
        const length = Buffer.alloc(2);
        length.writeUInt16BE(query.length);
        socket.write(Buffer.concat([length, query]));
      });
      socket.on('data', (chunk: Buffer) => {
        received = Buffer.concat([received, chunk]);
        if (received.length >= 2 && received.length >= 2 + received.readUInt16BE(0)) {
          clearTimeout(timer);
          socket.destroy();
          resolve(received.subarray(2, 2 + received.readUInt16BE(0)));
        }
      });
      socket.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      socket.on('close', () => {
        clearTimeout(timer);
        reject(new Error('upstream closed the TCP connection before answering'));
      });
    });
  }
}
