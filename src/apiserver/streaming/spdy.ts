import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import zlib from 'node:zlib';

/**
 * The server side of a SPDY/3.1 session, as much of it as `kubectl port-forward` (always: over a
 * WebSocket tunnel since kubectl 1.31, by HTTP Upgrade before) and kubectl 1.20's `exec`/`attach`/
 * `cp` (by HTTP Upgrade) use: the client opens streams (SYN_STREAM, with headers such as
 * `streamtype: stdout`), the server accepts each (SYN_REPLY), both send DATA and half-close with
 * FIN; PING is answered; GOAWAY and RST_STREAM end things. No maintained npm library frames SPDY
 * (`spdy`/`spdy-transport` are unmaintained since 2018), and this subset is small.
 *
 * Header blocks are zlib streams with the SPDY/3 dictionary, one compression context per
 * direction for the whole session (each block ends with a sync flush). Flow control windows are
 * not enforced: the Go client (moby/spdystream) neither sends nor honours WINDOW_UPDATE, so this
 * side stays within the same assumptions; backpressure comes from the transport instead.
 * Protocol reference: "SPDY Protocol - Draft 3.1" (chromium.org).
 */

const VERSION = 3;
const FLAG_FIN = 0x01;
const TYPE = { SYN_STREAM: 1, SYN_REPLY: 2, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, HEADERS: 8, WINDOW_UPDATE: 9 } as const;
/** RST_STREAM status codes used here. */
export const RST = { PROTOCOL_ERROR: 1, INVALID_STREAM: 2, REFUSED_STREAM: 3, CANCEL: 5, INTERNAL_ERROR: 6, STREAM_IN_USE: 8, STREAM_ALREADY_CLOSED: 9 } as const;
/** The largest DATA payload written at once (the format allows 16 MiB; small frames keep streams fair). */
const MAX_DATA_FRAME = 32 * 1024;
/** A peer's frame larger than this is a protocol error, not a reason to buffer without end. */
const MAX_FRAME = 1024 * 1024;
/** Decompressed header blocks larger than this are refused. */
const MAX_HEADER_BLOCK = 256 * 1024;

/**
 * The SPDY/3 header compression dictionary, as the draft 3 specification lists it: header names
 * and common values, each prefixed by its length as 4 bytes, then a run of common text.
 */
const DICTIONARY_WORDS = [
  'options', 'head', 'post', 'put', 'delete', 'trace', 'accept', 'accept-charset', 'accept-encoding', 'accept-language',
  'accept-ranges', 'age', 'allow', 'authorization', 'cache-control', 'connection', 'content-base', 'content-encoding',
  'content-language', 'content-length', 'content-location', 'content-md5', 'content-range', 'content-type', 'date', 'etag',
  'expect', 'expires', 'from', 'host', 'if-match', 'if-modified-since', 'if-none-match', 'if-range', 'if-unmodified-since',
  'last-modified', 'location', 'max-forwards', 'pragma', 'proxy-authenticate', 'proxy-authorization', 'range', 'referer',
  'retry-after', 'server', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'user-agent', 'vary', 'via', 'warning',
  'www-authenticate', 'method', 'get', 'status', '200 OK', 'version', 'HTTP/1.1', 'url', 'public', 'set-cookie', 'keep-alive',
  'origin',
];
const DICTIONARY_TAIL =
  '100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505' +
  '203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized' +
  '403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable' +
  'Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT' +
  'chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,' +
  'text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.';

export const SPDY_DICTIONARY: Buffer = Buffer.concat([
  ...DICTIONARY_WORDS.map((word) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(word.length);
    return Buffer.concat([length, Buffer.from(word, 'latin1')]);
  }),
  Buffer.from(DICTIONARY_TAIL, 'latin1'),
]);

export type SpdyHeaders = Record<string, string>;

export class SpdyProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SpdyProtocolError';
  }
}

/** Name/value pairs as a SPDY/3 header block (before compression); names lower case. */
export function encodeHeaderBlock(headers: SpdyHeaders): Buffer {
  const parts: Buffer[] = [];
  const count = Buffer.alloc(4);
  count.writeUInt32BE(Object.keys(headers).length);
  parts.push(count);
  for (const [name, value] of Object.entries(headers)) {
    for (const text of [name.toLowerCase(), value]) {
      const bytes = Buffer.from(text, 'utf8');
      const length = Buffer.alloc(4);
      length.writeUInt32BE(bytes.length);
      parts.push(length, bytes);
    }
  }
  return Buffer.concat(parts);
}

/** A decompressed header block; several values of one name (NUL-separated) are joined with `,`. */
export function decodeHeaderBlock(block: Buffer): SpdyHeaders {
  const headers: SpdyHeaders = {};
  let at = 0;
  const u32 = (): number => {
    if (at + 4 > block.length) throw new SpdyProtocolError('truncated header block');
    const value = block.readUInt32BE(at);
    at += 4;
    return value;
  };
  const text = (): string => {
    const length = u32();
    if (at + length > block.length) throw new SpdyProtocolError('truncated header block');
    const value = block.toString('utf8', at, at + length);
    at += length;
    return value;
  };
  const count = u32();
  for (let i = 0; i < count; i++) {
    const name = text().toLowerCase();
    headers[name] = text().split('\0').join(',');
  }
  return headers;
}

/** One zlib context for a direction of a session: every header block continues the same stream. */
class HeaderZlib {
  private readonly stream: zlib.Deflate | zlib.Inflate;
  private failed: Error | undefined;

  constructor(kind: 'deflate' | 'inflate') {
    this.stream = kind === 'deflate' ? zlib.createDeflate({ dictionary: SPDY_DICTIONARY }) : zlib.createInflate({ dictionary: SPDY_DICTIONARY });
    this.stream.on('error', (error) => (this.failed = error));
  }

  /** Runs one block through, ending with a sync flush, and returns what came out. */
  run(input: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      if (this.failed) return reject(new SpdyProtocolError(`header block: ${this.failed.message}`));
      // A block that is not zlib fails the stream, and the flush then never calls back.
      const onError = (error: Error): void => reject(new SpdyProtocolError(`header block: ${error.message}`));
      this.stream.once('error', onError);
      this.stream.write(input);
      this.stream.flush(zlib.constants.Z_SYNC_FLUSH, () => {
        this.stream.off('error', onError);
        if (this.failed) return reject(new SpdyProtocolError(`header block: ${this.failed.message}`));
        const chunks: Buffer[] = [];
        let size = 0;
        for (let chunk = this.stream.read() as Buffer | null; chunk !== null; chunk = this.stream.read() as Buffer | null) {
          chunks.push(chunk);
          size += chunk.length;
          if (size > MAX_HEADER_BLOCK) return reject(new SpdyProtocolError('header block too large'));
        }
        resolve(Buffer.concat(chunks));
      });
    });
  }

  close(): void {
    this.stream.destroy();
  }
}

function controlFrame(type: number, flags: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt16BE(0x8000 | VERSION, 0);
  header.writeUInt16BE(type, 2);
  header.writeUInt32BE(((flags & 0xff) << 24) | payload.length, 4);
  return Buffer.concat([header, payload]);
}

function dataFrame(streamId: number, flags: number, data: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt32BE(streamId & 0x7fffffff, 0);
  header.writeUInt32BE(((flags & 0xff) << 24) | data.length, 4);
  return Buffer.concat([header, data]);
}

function u32Payload(...values: number[]): Buffer {
  const payload = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => payload.writeUInt32BE(v >>> 0, i * 4));
  return payload;
}

/** One stream the client opened: a Duplex of its DATA, with the headers it was opened with. */
export class SpdyStream extends Duplex {
  private remoteEnded = false;
  private localEnded = false;
  private paused = false;

  constructor(
    private readonly session: SpdySession,
    readonly id: number,
    readonly headers: SpdyHeaders,
  ) {
    super({ allowHalfOpen: true });
  }

  /** Accepts the stream (SYN_REPLY); the client's CreateStream waits for it. */
  reply(headers: SpdyHeaders = {}): Promise<void> {
    return this.session.sendReply(this.id, headers);
  }

  /** Ends the stream abruptly (RST_STREAM). */
  reset(status: number = RST.CANCEL): void {
    if (this.destroyed) return;
    this.session.sendReset(this.id, status);
    this.destroy();
  }

  /** @internal DATA from the peer. */
  receive(data: Buffer, fin: boolean): void {
    if (this.remoteEnded) return;
    if (data.length && !this.push(data)) {
      this.paused = true;
      this.session.pauseTransport();
    }
    if (fin) this.remoteClosed();
  }

  /** @internal The peer half-closed (FIN) or the session ended. */
  remoteClosed(): void {
    if (this.remoteEnded) return;
    this.remoteEnded = true;
    this.push(null);
    this.maybeForget();
  }

  override _read(): void {
    if (this.paused) {
      this.paused = false;
      this.session.resumeTransport();
    }
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.session.sendData(this.id, chunk, false, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.localEnded = true;
    this.session.sendData(this.id, Buffer.alloc(0), true, (error) => {
      this.maybeForget();
      callback(error);
    });
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.session.forget(this.id);
    callback(error);
  }

  private maybeForget(): void {
    if (this.remoteEnded && this.localEnded) this.session.forget(this.id);
  }
}

/**
 * The server side of one SPDY/3.1 session over `transport` (a socket after an HTTP Upgrade, or a
 * WebSocket's byte stream). Emits `stream` (a SpdyStream the client opened; call reply() to accept
 * it) and `close` once, when the transport or the session ends.
 */
export class SpdySession extends EventEmitter {
  private buffer: Buffer = Buffer.alloc(0);
  private readonly inflate = new HeaderZlib('inflate');
  private readonly deflate = new HeaderZlib('deflate');
  private readonly streams = new Map<number, SpdyStream>();
  /** Frames are handled one after another: header blocks share one zlib context. */
  private queue: Promise<void> = Promise.resolve();
  /** Writes of header blocks too: the deflate context's order is the wire's order. */
  private writeQueue: Promise<void> = Promise.resolve();
  private lastStreamId = 0;
  private closed = false;
  private pausedStreams = 0;

  constructor(private readonly transport: Duplex) {
    super();
    transport.on('data', (chunk: Buffer) => this.onData(chunk));
    transport.on('end', () => this.close());
    transport.on('close', () => this.close());
    transport.on('error', () => this.close());
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Ends the session: GOAWAY, every stream ended, the transport closed. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.transport.writable) this.transport.write(controlFrame(TYPE.GOAWAY, 0, u32Payload(this.lastStreamId, 0)));
    for (const stream of this.streams.values()) {
      stream.remoteClosed();
      stream.destroy();
    }
    this.streams.clear();
    this.inflate.close();
    this.deflate.close();
    this.transport.end();
    // A peer that never closes its side must not hold the socket.
    setTimeout(() => this.transport.destroy(), 1000).unref();
    this.emit('close');
  }

  /** @internal */
  pauseTransport(): void {
    this.pausedStreams++;
    this.transport.pause();
  }

  /** @internal */
  resumeTransport(): void {
    this.pausedStreams = Math.max(0, this.pausedStreams - 1);
    if (this.pausedStreams === 0) this.transport.resume();
  }

  /** @internal */
  forget(id: number): void {
    this.streams.delete(id);
  }

  /** @internal */
  sendReply(id: number, headers: SpdyHeaders): Promise<void> {
    const done = this.writeQueue.then(async () => {
      if (this.closed) return;
      const block = await this.deflate.run(encodeHeaderBlock(headers));
      this.transport.write(controlFrame(TYPE.SYN_REPLY, 0, Buffer.concat([u32Payload(id & 0x7fffffff), block])));
    });
    this.writeQueue = done.catch(() => undefined);
    return done;
  }

  /** @internal */
  sendReset(id: number, status: number): void {
    if (this.closed || !this.transport.writable) return;
    this.transport.write(controlFrame(TYPE.RST_STREAM, 0, u32Payload(id & 0x7fffffff, status)));
  }

  /** @internal DATA in frames of at most MAX_DATA_FRAME; `callback` once the transport took it (backpressure). */
  sendData(id: number, data: Buffer, fin: boolean, callback: (error?: Error | null) => void): void {
    // After the stream's SYN_REPLY (queued) so the client never sees data for a stream it has no reply for.
    void this.writeQueue.then(() => {
      if (this.closed || !this.transport.writable) return callback(new Error('the SPDY session is closed'));
      let ok = true;
      let at = 0;
      do {
        const piece = data.subarray(at, at + MAX_DATA_FRAME);
        at += piece.length;
        ok = this.transport.write(dataFrame(id, fin && at >= data.length ? FLAG_FIN : 0, piece));
      } while (at < data.length);
      if (ok) callback();
      else this.transport.once('drain', () => callback());
    });
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    while (this.buffer.length >= 8) {
      const length = this.buffer.readUInt32BE(4) & 0xffffff;
      if (length > MAX_FRAME) return this.fail(`a frame of ${length} bytes is larger than ${MAX_FRAME}`);
      if (this.buffer.length < 8 + length) break;
      const frame = this.buffer.subarray(0, 8 + length);
      this.buffer = this.buffer.subarray(8 + length);
      this.queue = this.queue.then(() => this.handle(frame)).catch((error: Error) => this.fail(error.message));
    }
  }

  private fail(message: string): void {
    this.emit('protocolError', new SpdyProtocolError(message));
    this.close();
  }

  private async handle(frame: Buffer): Promise<void> {
    if (this.closed) return;
    const flags = frame[4]!;
    const payload = frame.subarray(8);
    if ((frame[0]! & 0x80) === 0) {
      const id = frame.readUInt32BE(0) & 0x7fffffff;
      const stream = this.streams.get(id);
      if (!stream) {
        this.sendReset(id, RST.INVALID_STREAM);
        return;
      }
      stream.receive(Buffer.from(payload), (flags & FLAG_FIN) !== 0);
      return;
    }
    const version = frame.readUInt16BE(0) & 0x7fff;
    if (version !== VERSION) throw new SpdyProtocolError(`SPDY version ${version} is not supported (only 3)`);
    const type = frame.readUInt16BE(2);
    switch (type) {
      case TYPE.SYN_STREAM: {
        if (payload.length < 10) throw new SpdyProtocolError('short SYN_STREAM');
        const id = payload.readUInt32BE(0) & 0x7fffffff;
        const headers = decodeHeaderBlock(await this.inflate.run(Buffer.from(payload.subarray(10))));
        if (id === 0 || id % 2 === 0 || id <= this.lastStreamId) {
          this.sendReset(id, RST.PROTOCOL_ERROR);
          return;
        }
        this.lastStreamId = id;
        const stream = new SpdyStream(this, id, headers);
        this.streams.set(id, stream);
        if (flags & FLAG_FIN) stream.remoteClosed();
        this.emit('stream', stream);
        return;
      }
      case TYPE.HEADERS:
      case TYPE.SYN_REPLY:
        // Header blocks must still go through the shared context to keep it in step.
        if (payload.length > 4) await this.inflate.run(Buffer.from(payload.subarray(4)));
        return;
      case TYPE.RST_STREAM: {
        const stream = this.streams.get(payload.readUInt32BE(0) & 0x7fffffff);
        if (stream) {
          stream.remoteClosed();
          stream.destroy();
        }
        return;
      }
      case TYPE.PING:
        this.transport.write(controlFrame(TYPE.PING, 0, Buffer.from(payload)));
        return;
      case TYPE.GOAWAY:
        this.close();
        return;
      case TYPE.SETTINGS:
      case TYPE.WINDOW_UPDATE:
      default:
        // Settings and windows are advisory here (see the header comment); unknown types are ignored, as the draft says.
        return;
    }
  }
}
