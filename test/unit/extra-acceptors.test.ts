/**
 * Extra accept handles (src/apiserver/extra-acceptors.ts) on real sockets on 127.0.0.1: with the
 * event loop held while clients connect, the first turn after it accepts one connection per
 * handle, where a server with its own handle alone accepts one; every connection is still
 * accepted once, and closing leaves the port free.
 *
 * Run: node --import tsx --test test/unit/extra-acceptors.test.ts
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, it } from 'node:test';

import { EXTRA_ACCEPT_HANDLES, ExtraAcceptors } from '../../src/apiserver/extra-acceptors.js';
import { createLogger } from '../../src/logging/logger.js';
import { eventually } from '../helpers/server.js';

const CLIENTS = 40;

/** Connections accepted in the first turn of the event loop after it was held while CLIENTS connected, and in all. */
async function acceptedPerTurn(extra: number): Promise<{ firstTurn: number; total: number; handles: number; port: number }> {
  const server = net.createServer();
  let accepted = 0;
  server.on('connection', (socket) => {
    accepted++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen({ host: '127.0.0.1', port: 0, backlog: 512 }, resolve));
  const { port } = server.address() as net.AddressInfo;
  const acceptors = new ExtraAcceptors(server, extra, 512, createLogger('silent'));
  const handles = await acceptors.ready;
  const clients: net.Socket[] = [];
  // From a known point of the loop: this callback runs in a check phase; the immediate it queues
  // runs in the next turn's, after exactly one poll for I/O, where each ready listening handle
  // accepts once.
  const firstTurn = await new Promise<number>((resolve) =>
    setImmediate(() => {
      for (let i = 0; i < CLIENTS; i++) {
        const client = net.connect({ host: '127.0.0.1', port });
        client.on('error', () => undefined);
        clients.push(client);
      }
      // Hold the loop: the kernel completes every handshake meanwhile and queues the connections.
      const until = Date.now() + 300;
      while (Date.now() < until) {
        // busy
      }
      setImmediate(() => resolve(accepted));
    }),
  );
  await eventually(() => accepted === CLIENTS, `all ${CLIENTS} connections accepted`, 10_000, 5);
  for (const client of clients) client.destroy();
  acceptors.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return { firstTurn, total: accepted, handles, port };
}

describe('extra accept handles', () => {
  it(`accept ${EXTRA_ACCEPT_HANDLES + 1} connections in a turn of a held event loop where one handle accepts one; each connection once; the port is free after close`, async () => {
    const alone = await acceptedPerTurn(0);
    assert.equal(alone.handles, 0);
    assert.equal(alone.firstTurn, 1, 'the server’s own handle: one accept per turn (libuv/libuv#3696)');
    const withExtra = await acceptedPerTurn(EXTRA_ACCEPT_HANDLES);
    assert.equal(withExtra.handles, EXTRA_ACCEPT_HANDLES);
    assert.equal(withExtra.firstTurn, EXTRA_ACCEPT_HANDLES + 1, 'one accept per handle in the first turn');
    assert.equal(withExtra.total, CLIENTS, 'no connection accepted twice or lost');
    // Every descriptor of the socket is closed: the port can be listened on again.
    const again = net.createServer();
    await new Promise<void>((resolve, reject) => {
      again.once('error', reject);
      again.listen({ host: '127.0.0.1', port: withExtra.port }, resolve);
    });
    await new Promise<void>((resolve) => again.close(() => resolve()));
  });

  it('closed before the helper handed the socket back: no extra handle is left listening', async () => {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen({ host: '127.0.0.1', port: 0 }, resolve));
    const { port } = server.address() as net.AddressInfo;
    const acceptors = new ExtraAcceptors(server, EXTRA_ACCEPT_HANDLES, 511, createLogger('silent'));
    acceptors.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await acceptors.ready;
    const again = net.createServer();
    await new Promise<void>((resolve, reject) => {
      again.once('error', reject);
      again.listen({ host: '127.0.0.1', port }, resolve);
    });
    await new Promise<void>((resolve) => again.close(() => resolve()));
  });
});
