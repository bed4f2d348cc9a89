import type { WebSocket } from 'ws';
import { CLOSE, closeFrame, decodeFrame, encodeFrame, ERROR, RESIZE, STDERR, STDIN, STDOUT } from './channels.js';
import type { SpdySession, SpdyStream } from './spdy.js';

/**
 * One side of a remote command session (exec, attach, cp), whatever carries it: a WebSocket with
 * the channel protocol (kubectl 1.30+, the Python client, and the API server's hop to the agent),
 * or a SPDY session with one stream per channel (kubectl before 1.30). A bridge joins two of them.
 */

export interface ChannelHandlers {
  /** Data on a channel. */
  frame(channel: number, data: Buffer): void;
  /** The sender will write no more on this channel (stdin EOF). */
  end(channel: number): void;
  /** The session is over (closed by the other side, or broken). */
  close(): void;
}

export interface ChannelPeer {
  /** Delivers what arrives to `handlers`; nothing is delivered (or lost) before. */
  start(handlers: ChannelHandlers): void;
  /** Resolves once the transport took it (for backpressure); never rejects. */
  send(channel: number, data: Buffer): Promise<void>;
  end(channel: number): void;
  /** Ends the session once what was sent is flushed. */
  close(): void;
  pause(): void;
  resume(): void;
}

/** Sends in flight past which the sending side's source is paused. */
const HIGH_WATER_SENDS = 32;

/** The channel protocol over a WebSocket: v5 (with CLOSE frames) or v4 (without). */
export class WebSocketPeer implements ChannelPeer {
  private handlers: ChannelHandlers | undefined;
  private closed = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly version: 4 | 5,
  ) {
    // Nothing is read until a bridge is ready to take it.
    ws.pause();
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return;
      const frame = decodeFrame(data);
      if (!frame) return;
      if (frame.channel === CLOSE) {
        if (this.version === 5 && frame.data.length > 0) this.handlers?.end(frame.data[0]!);
        return;
      }
      this.handlers?.frame(frame.channel, frame.data);
    });
    ws.on('close', () => this.finish());
    ws.on('error', () => this.finish());
  }

  start(handlers: ChannelHandlers): void {
    this.handlers = handlers;
    if (this.closed) handlers.close();
    else this.ws.resume();
  }

  send(channel: number, data: Buffer): Promise<void> {
    if (this.ws.readyState !== this.ws.OPEN) return Promise.resolve();
    return new Promise((resolve) => this.ws.send(encodeFrame(channel, data), { binary: true }, () => resolve()));
  }

  end(channel: number): void {
    if (this.version === 5 && this.ws.readyState === this.ws.OPEN) this.ws.send(closeFrame(channel), { binary: true });
  }

  close(): void {
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(1000);
    // A peer that never answers the close frame must not hold the socket.
    setTimeout(() => this.ws.terminate(), 5000).unref();
  }

  pause(): void {
    this.ws.pause();
  }

  resume(): void {
    this.ws.resume();
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    this.handlers?.close();
  }
}

/** What a SPDY remote command session must open before it starts: the channels the query asked for. */
export interface ExpectedStreams {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

const STREAM_CHANNELS: Readonly<Record<string, number>> = { stdin: STDIN, stdout: STDOUT, stderr: STDERR, error: ERROR, resize: RESIZE };

/**
 * A remote command over SPDY: the client opens one stream per channel (`streamtype` header:
 * error, stdin, stdout, stderr, resize), each accepted with a SYN_REPLY. Ready once every stream
 * the query implies is open, as kubelet waits for them.
 */
export class SpdyCommandPeer implements ChannelPeer {
  private readonly streams = new Map<number, SpdyStream>();
  private handlers: ChannelHandlers | undefined;
  private closed = false;

  private constructor(private readonly session: SpdySession) {
    session.on('close', () => this.finish());
  }

  static accept(session: SpdySession, expected: ExpectedStreams, timeoutMs: number): Promise<SpdyCommandPeer> {
    const peer = new SpdyCommandPeer(session);
    const wanted = new Set<number>([ERROR]);
    if (expected.stdin) wanted.add(STDIN);
    if (expected.stdout) wanted.add(STDOUT);
    if (expected.stderr && !expected.tty) wanted.add(STDERR);
    if (expected.tty) wanted.add(RESIZE);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`the client did not open its streams within ${timeoutMs / 1000}s`));
        session.close();
      }, timeoutMs);
      session.on('close', () => {
        clearTimeout(timer);
        reject(new Error('the client closed the session before opening its streams'));
      });
      session.on('stream', (stream: SpdyStream) => {
        const channel = STREAM_CHANNELS[stream.headers.streamtype ?? ''];
        void stream.reply().catch(() => undefined);
        if (channel === undefined || peer.streams.has(channel)) {
          stream.reset();
          return;
        }
        peer.streams.set(channel, stream);
        peer.listen(channel, stream);
        if ([...wanted].every((c) => peer.streams.has(c))) {
          clearTimeout(timer);
          resolve(peer);
        }
      });
    });
  }

  private listen(channel: number, stream: SpdyStream): void {
    // What the client writes: stdin and resize; what it closes: stdin (EOF). Reads wait for start().
    stream.pause();
    stream.on('data', (data: Buffer) => this.handlers?.frame(channel, data));
    stream.on('end', () => this.handlers?.end(channel));
    stream.on('error', () => undefined);
    // A stream opened after the session started (one the query did not require) is read at once.
    if (this.handlers && (channel === STDIN || channel === RESIZE)) stream.resume();
  }

  start(handlers: ChannelHandlers): void {
    this.handlers = handlers;
    if (this.closed) {
      handlers.close();
      return;
    }
    for (const [channel, stream] of this.streams) if (channel === STDIN || channel === RESIZE) stream.resume();
  }

  send(channel: number, data: Buffer): Promise<void> {
    const stream = this.streams.get(channel);
    if (!stream || !stream.writable || data.length === 0) return Promise.resolve();
    return new Promise((resolve) => stream.write(data, () => resolve()));
  }

  end(channel: number): void {
    const stream = this.streams.get(channel);
    if (stream?.writable) stream.end();
  }

  close(): void {
    if (this.closed) return;
    const ends = [...this.streams.values()].map(
      (stream) =>
        new Promise<void>((resolve) => {
          if (!stream.writable) return resolve();
          stream.end(() => resolve());
          stream.once('error', () => resolve());
        }),
    );
    void Promise.all(ends).then(() => this.session.close());
  }

  pause(): void {
    for (const stream of this.streams.values()) stream.pause();
  }

  resume(): void {
    for (const [channel, stream] of this.streams) if (channel === STDIN || channel === RESIZE) stream.resume();
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    this.handlers?.close();
  }
}

/**
 * Joins two sessions: what one side sends reaches the other, channel closes and the end of the
 * session included. A side that cannot keep up pauses the other (at most HIGH_WATER_SENDS in flight).
 */
export function bridge(a: ChannelPeer, b: ChannelPeer): void {
  let over = false;
  const pipe = (from: ChannelPeer, to: ChannelPeer): ChannelHandlers => {
    let inFlight = 0;
    return {
      frame(channel, data) {
        inFlight++;
        if (inFlight === HIGH_WATER_SENDS) from.pause();
        void to.send(channel, data).then(() => {
          inFlight--;
          if (inFlight === HIGH_WATER_SENDS - 1) from.resume();
        });
      },
      end(channel) {
        to.end(channel);
      },
      close() {
        if (over) return;
        over = true;
        to.close();
        from.close();
      },
    };
  };
  a.start(pipe(a, b));
  b.start(pipe(b, a));
}
