import net from 'node:net';

/**
 * A slow link, for tests that must act between two steps of a client's sequence: a TCP relay on
 * 127.0.0.1 in front of a server that passes every byte unchanged (TLS stays end to end, the
 * server's certificate names 127.0.0.1) but holds each chunk from the server to the client for
 * `delayMs`. A write reaches the server, and the server's watchers, at once; the client hears the
 * answer only `delayMs` later, so it cannot take its next step before then. That turns "act right
 * after the client's write" from a race into a window of `delayMs`.
 */
export interface DelayingProxy {
  port: number;
  /** `https://127.0.0.1:<port>`: give this to the client as its server. */
  url: string;
  /**
   * Change the delay for what the server sends from now on. Lowering it also releases what is
   * held sooner, in order: chunks are never reordered (that would corrupt the TLS stream).
   */
  setDelay(ms: number): void;
  close(): Promise<void>;
}

interface Held {
  at: number;
  chunk: Buffer;
}

export async function delayingProxy(target: { port: number }, delayMs: number): Promise<DelayingProxy> {
  let delay = delayMs;
  const sockets = new Set<net.Socket>();
  const pumps = new Set<() => void>();
  const relay = net.createServer((client) => {
    const upstream = net.connect(target.port, '127.0.0.1');
    const queue: Held[] = [];
    let timer: NodeJS.Timeout | undefined;
    let upstreamEnded = false;
    const pump = (): void => {
      clearTimeout(timer);
      timer = undefined;
      const now = Date.now();
      while (queue.length && queue[0]!.at <= now) {
        if (!client.destroyed) client.write(queue.shift()!.chunk);
        else queue.shift();
      }
      if (queue.length) timer = setTimeout(pump, queue[0]!.at - now);
      else if (upstreamEnded) client.end();
    };
    const retime = (): void => {
      const latest = Date.now() + delay;
      for (const held of queue) held.at = Math.min(held.at, latest);
      pump();
    };
    pumps.add(retime);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
      socket.on('close', () => {
        sockets.delete(socket);
        pumps.delete(retime);
        clearTimeout(timer);
      });
    }
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      // Never earlier than the chunk before it: the stream keeps its order.
      queue.push({ at: Math.max(Date.now() + delay, queue.at(-1)?.at ?? 0), chunk });
      if (!timer) pump();
    });
    upstream.on('end', () => {
      upstreamEnded = true;
      if (!timer && !queue.length) client.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    relay.once('error', reject);
    relay.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (relay.address() as net.AddressInfo).port;
  return {
    port,
    url: `https://127.0.0.1:${port}`,
    setDelay(ms: number) {
      delay = ms;
      for (const retime of pumps) retime();
    },
    async close() {
      const closed = new Promise<void>((resolve) => relay.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
