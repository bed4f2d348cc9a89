import { ApiError } from '../errors.js';
import { parsePort } from './options.js';
import type { ChannelPeer } from './peers.js';
import type { SpdySession, SpdyStream } from './spdy.js';

/**
 * `kubectl port-forward` on the server side of its SPDY session: for each local connection the
 * client opens two streams, `streamtype: error` and `streamtype: data`, with the same `port` and
 * `requestid` headers. Once both are there, the pair is joined to a connection to that port of the
 * pod (`dial`, through the pod's agent); a failure is written as text on the error stream, which
 * kubectl prints ("an error occurred forwarding 8080 -> 80: ...").
 *
 * The agent's side of one connection is a channel session: channel 0 carries the bytes both ways
 * (a CLOSE of 0 is a half-close), channel 1 carries the agent's error text.
 */

export const PORT_DATA = 0;
export const PORT_ERROR = 1;

export type PortDialer = (port: number) => Promise<ChannelPeer>;

interface Pair {
  port: number;
  data?: SpdyStream;
  error?: SpdyStream;
  started: boolean;
}

/** Pairs still missing their second stream after this long are dropped. */
const PAIR_TIMEOUT_MS = 30_000;

function writeError(stream: SpdyStream | undefined, message: string): void {
  if (stream?.writable) stream.end(message);
}

export function servePortForward(session: SpdySession, dial: PortDialer, allowedPorts: readonly number[] = []): void {
  const pairs = new Map<string, Pair>();
  session.on('stream', (stream: SpdyStream) => {
    const type = stream.headers.streamtype;
    void stream.reply().catch(() => undefined);
    stream.on('error', () => undefined);
    let port: number;
    try {
      port = parsePort(stream.headers.port ?? '', 'port header');
      if (allowedPorts.length && !allowedPorts.includes(port)) throw new ApiError(400, 'BadRequest', `port ${port} is not among the ports of this request (${allowedPorts.join(', ')})`);
    } catch (error) {
      if (type === 'error') writeError(stream, (error as Error).message);
      else stream.reset();
      return;
    }
    if (type !== 'data' && type !== 'error') {
      stream.reset();
      return;
    }
    const key = stream.headers.requestid ?? String(port);
    let pair = pairs.get(key);
    if (!pair) {
      pair = { port, started: false };
      pairs.set(key, pair);
      const timer = setTimeout(() => {
        if (pairs.get(key) === pair && !pair!.started) {
          pairs.delete(key);
          pair!.data?.reset();
          writeError(pair!.error, 'the data stream of this connection never came');
        }
      }, PAIR_TIMEOUT_MS);
      timer.unref();
    }
    if (pair[type]) {
      stream.reset();
      return;
    }
    pair[type] = stream;
    if (pair.data && pair.error && !pair.started) {
      pair.started = true;
      pairs.delete(key);
      void connect(pair as Required<Pair>, dial);
    }
  });
}

async function connect(pair: Required<Pair>, dial: PortDialer): Promise<void> {
  const { data, error, port } = pair;
  // The client closes its side of the error stream at once; only what the server writes matters.
  error.resume();
  let agent: ChannelPeer;
  try {
    agent = await dial(port);
  } catch (failure) {
    writeError(error, (failure as Error).message);
    data.end();
    return;
  }
  let over = false;
  const finish = (): void => {
    if (over) return;
    over = true;
    if (data.writable) data.end();
    if (error.writable) error.end();
    agent.close();
  };
  let inFlight = 0;
  data.on('data', (chunk: Buffer) => {
    inFlight++;
    if (inFlight === 32) data.pause();
    void agent.send(PORT_DATA, chunk).then(() => {
      inFlight--;
      if (inFlight === 31) data.resume();
    });
  });
  data.on('end', () => agent.end(PORT_DATA));
  data.on('close', finish);
  agent.start({
    frame(channel, bytes) {
      if (channel === PORT_DATA && data.writable) {
        if (!data.write(bytes)) {
          agent.pause();
          data.once('drain', () => agent.resume());
        }
      } else if (channel === PORT_ERROR && error.writable) {
        error.write(bytes);
      }
    },
    end(channel) {
      if (channel === PORT_DATA && data.writable) data.end();
    },
    close: finish,
  });
}
