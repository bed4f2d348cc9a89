/**
 * Slow, idle and greedy clients against a real `drover server`: a client that sends its headers
 * a byte at a time, never finishes its TLS handshake, stops halfway through a body or sits idle
 * on a keep-alive connection is cut within the configured bound; one user cannot open more than
 * max-watches-per-user watches, nor all users together more than max-watches. An unexpected
 * exception (a server bug) is a generic 500, logged once with its stack; a datastore failure is a
 * 503 with Retry-After. docs/security.md
 * ("Hostile input") lists these by test name.
 *
 * Run: node --import tsx --test test/e2e/hostile-connections.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { LISTEN_BACKLOG } from '../../src/apiserver/server.js';
import { DatastoreError } from '../../src/datastore/types.js';
import type { ObjectStore } from '../../src/apiserver/storage.js';
import { startInProcessApiServer } from '../helpers/api-server.js';
import { connectTls, expectQuietLog, expectStatusBody, type HeldWatch, holdWatch, readUntilClosed } from '../helpers/hostile.js';
import { cleanup, eventually, request, type ServerProcess, startServer } from '../helpers/server.js';

const LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases';

describe('slow and idle clients', () => {
  let server: ServerProcess;
  // Short bounds so the tests run fast; the defaults are 32 s, 60 s and 90 s.
  const HEADER_MS = 1000;
  const REQUEST_MS = 3000;
  const IDLE_MS = 1000;

  before(async () => {
    server = await startServer({
      args: ['--log-level', 'debug', '--https-header-timeout', '1s', '--https-request-timeout', '3s', '--https-idle-timeout', '1s'],
    });
  });

  after(() => cleanup());

  it('slowloris: headers sent a byte at a time are cut with 408 after https-header-timeout', async (t) => {
    const mark = server.output().length;
    const socket = await connectTls(server);
    const started = Date.now();
    const answer = readUntilClosed(socket, started, 30_000);
    socket.write('GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    const header = `X-Slow: ${'a'.repeat(1000)}`;
    let sent = 0;
    const drip = setInterval(() => {
      if (socket.writable && sent < header.length) socket.write(header[sent++]!);
    }, 50);
    const { status, body, closedAfterMs } = await answer.finally(() => clearInterval(drip));
    t.diagnostic(`cut after ${closedAfterMs} ms (header timeout ${HEADER_MS} ms), ${sent} header bytes dripped`);
    assert.equal(status, 408, body);
    expectStatusBody(body, 408, 'Timeout', /not received in time/, 'slowloris');
    assert.ok(sent < header.length, 'the server cut the client while it was still sending its headers');
    assert.ok(closedAfterMs >= HEADER_MS, `cut after ${closedAfterMs} ms, before the header timeout`);
    await expectQuietLog(server, mark, 'slowloris');
  });

  it('a TLS handshake that never starts is cut after https-header-timeout', async (t) => {
    const mark = server.output().length;
    const started = Date.now();
    const socket = net.connect({ host: '127.0.0.1', port: server.port });
    socket.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => {
      const ceiling = setTimeout(() => reject(new Error('the server kept a silent TCP connection open for 30 s')), 30_000);
      socket.once('close', () => {
        clearTimeout(ceiling);
        resolve();
      });
    });
    const closedAfterMs = Date.now() - started;
    t.diagnostic(`cut after ${closedAfterMs} ms (handshake bound ${HEADER_MS} ms)`);
    assert.ok(closedAfterMs >= HEADER_MS, `cut after ${closedAfterMs} ms, before the bound`);
    await expectQuietLog(server, mark, 'silent TCP connection');
  });

  it('a burst of connections to a stopped server all get through the TCP handshake: the listen queue is deeper than Node’s 511', async (t) => {
    const somaxconn = Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8').trim());
    const queue = Math.min(LISTEN_BACKLOG, somaxconn);
    // More than Node's default queue, and within this one (the kernel holds queue + 1).
    const burst = Math.min(700, queue);
    t.diagnostic(`somaxconn ${somaxconn}: queue ${queue}, burst ${burst}`);
    // The server accepts nothing while stopped: every connection of the burst waits in the queue.
    process.kill(server.pid, 'SIGSTOP');
    const sockets: net.Socket[] = [];
    try {
      const connected = await Promise.all(
        Array.from(
          { length: burst },
          () =>
            new Promise<boolean>((resolve) => {
              const socket = net.connect({ host: '127.0.0.1', port: server.port });
              sockets.push(socket);
              // A dropped SYN is retried after 1 s: connected within 900 ms means it was queued at once.
              const timer = setTimeout(() => resolve(false), 900);
              socket.once('connect', () => {
                clearTimeout(timer);
                resolve(true);
              });
              socket.on('error', () => resolve(false));
            }),
        ),
      );
      const waiting = connected.filter((c) => !c).length;
      assert.equal(waiting, 0, `${waiting} of ${burst} connections were not queued at once (their SYNs dropped: a queue of Node's default 511?)`);
    } finally {
      for (const socket of sockets) socket.destroy();
      process.kill(server.pid, 'SIGCONT');
    }
    // Back, it still answers (the burst's connections are already closed).
    await eventually(async () => (await request(server, 'GET', '/version')).status === 200, 'the server answers after the burst', 30_000);
  });

  it('plain HTTP on the HTTPS port is closed at once', async () => {
    const mark = server.output().length;
    const socket = net.connect({ host: '127.0.0.1', port: server.port });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => undefined);
    socket.write('GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await new Promise<void>((resolve, reject) => {
      const ceiling = setTimeout(() => reject(new Error('the server kept a plain-HTTP connection open for 30 s')), 30_000);
      socket.once('close', () => {
        clearTimeout(ceiling);
        resolve();
      });
    });
    assert.doesNotMatch(received, /version|gitVersion/, 'nothing is served over plain HTTP');
    await expectQuietLog(server, mark, 'plain HTTP');
  });

  it('a body that stops arriving is cut with 408 after https-request-timeout', async (t) => {
    const mark = server.output().length;
    const socket = await connectTls(server);
    const started = Date.now();
    const answer = readUntilClosed(socket, started, 30_000);
    // Declares 1000 bytes, sends 12, then nothing: a lying or stalled uploader.
    socket.write(
      `POST ${LEASES} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.token}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"metadata":',
    );
    const { status, body, closedAfterMs } = await answer;
    t.diagnostic(`cut after ${closedAfterMs} ms (request timeout ${REQUEST_MS} ms)`);
    assert.equal(status, 408, body);
    expectStatusBody(body, 408, 'Timeout', /not received in time/, 'stalled body');
    assert.ok(closedAfterMs >= REQUEST_MS, `cut after ${closedAfterMs} ms, before the request timeout`);
    await expectQuietLog(server, mark, 'stalled body');
  });

  it('an idle keep-alive connection is closed after https-idle-timeout', async (t) => {
    const socket = await connectTls(server);
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.write('GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n');
    await eventually(() => /\r\n\r\n\{.*\}$/s.test(text), 'the answer to the first request');
    assert.match(text, /^HTTP\/1\.1 200/);
    assert.doesNotMatch(text, /Connection: close/i, 'the connection was kept alive after the first request');
    const idleSince = Date.now();
    const answer = readUntilClosed(socket, idleSince, 30_000);
    const { closedAfterMs } = await answer;
    t.diagnostic(`closed after ${closedAfterMs} ms idle (idle timeout ${IDLE_MS} ms)`);
    assert.ok(closedAfterMs >= IDLE_MS * 0.9, `closed after ${closedAfterMs} ms idle, before the idle timeout`);
  });

  it('a watch outlives https-request-timeout and https-idle-timeout', async () => {
    const created = await request(server, 'POST', LEASES, { body: { metadata: { name: 'watched' }, spec: { holderIdentity: 'a' } } });
    assert.equal(created.status, 201, created.text);
    const watch = await holdWatch(server, `${LEASES}?watch=1&fieldSelector=metadata.name%3Dwatched`, server.token);
    try {
      assert.equal(watch.status, 200);
      // The scenario is a quiet watch: nothing happens on it for longer than both bounds.
      await new Promise((resolve) => setTimeout(resolve, REQUEST_MS + IDLE_MS + 1500));
      const patched = await request(server, 'PATCH', `${LEASES}/watched`, {
        headers: { 'Content-Type': 'application/merge-patch+json' },
        body: { spec: { holderIdentity: 'after-the-bounds' } },
      });
      assert.equal(patched.status, 200, patched.text);
      await eventually(() => watch.lines().some((line) => line.includes('"after-the-bounds"')), 'the change to arrive on the quiet watch');
      assert.equal(watch.ended(), false, 'the watch is still open');
    } finally {
      watch.close();
    }
  });
});

describe('watch limits', () => {
  let server: ServerProcess;
  const watches: HeldWatch[] = [];
  /** Node credentials: each one is a different user to the limiter. */
  const nodeTokens: string[] = [];

  before(async () => {
    server = await startServer({ args: ['--log-level', 'debug', '--max-watches-per-user', '3', '--max-watches', '5'] });
    const secret = fs.readFileSync(path.join(server.dataDir, 'token'), 'utf8').trim().split('::server:')[1]!;
    for (const name of ['limit-a', 'limit-b']) {
      const res = await request(server, 'POST', '/drover/v1/register', {
        token: secret,
        body: { nodeName: name, nodeId: name, password: randomBytes(8).toString('hex'), addresses: ['127.0.0.1'] },
      });
      assert.equal(res.status, 200, res.text);
      nodeTokens.push((res.json as { token: string }).token);
    }
  });

  after(async () => {
    for (const watch of watches) watch.close();
    await cleanup();
  });

  const open = async (token: string): Promise<HeldWatch> => {
    const watch = await holdWatch(server, '/api/v1/pods?watch=1', token);
    watches.push(watch);
    return watch;
  };

  it('max-watches-per-user: the 4th watch of one user is a 429 with Retry-After; closing one frees its slot', async () => {
    const mine = [await open(server.token), await open(server.token), await open(server.token)];
    assert.deepEqual(mine.map((w) => w.status), [200, 200, 200]);
    const mark = server.output().length;
    const refused = await request(server, 'GET', '/api/v1/pods?watch=1', { agent: false });
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.headers['retry-after'], '1');
    const status = expectStatusBody(refused.text, 429, 'TooManyRequests', /user "system:admin" already holds 3.*max-watches-per-user/, 'per-user limit');
    assert.equal((status.details as { retryAfterSeconds?: number }).retryAfterSeconds, 1);
    await expectQuietLog(server, mark, 'per-user limit');
    // A followed log is long-running too: it counts against the same slots.
    const follow = await request(server, 'GET', '/api/v1/namespaces/default/pods/any/log?follow=true', { agent: false });
    expectStatusBody(follow.text, 429, 'TooManyRequests', /too many open followed logs/, 'followed log');
    // Other requests of the same user are not limited.
    assert.equal((await request(server, 'GET', '/api/v1/pods', { agent: false })).status, 200);

    mine[0]!.close();
    const again = await eventually(async () => {
      const watch = await holdWatch(server, '/api/v1/pods?watch=1', server.token);
      if (watch.status === 200) return watch;
      watch.close();
      return undefined;
    }, 'a watch to be admitted once one was closed');
    watches.push(again);
    mine[1]!.close();
    mine[2]!.close();
    again.close();
  });

  it('max-watches: with 5 watches open across users, another user gets a 429', async () => {
    // Wait until the previous test's watches are gone from the server's count.
    const admin = await eventually(async () => {
      const opened = [await open(server.token), await open(server.token), await open(server.token)];
      if (opened.every((w) => w.status === 200)) return opened;
      for (const w of opened) w.close();
      return undefined;
    }, 'three admin watches');
    const nodeA = [await open(nodeTokens[0]!), await open(nodeTokens[0]!)];
    assert.deepEqual(nodeA.map((w) => w.status), [200, 200]);
    const mark = server.output().length;
    const refused = await request(server, 'GET', '/api/v1/pods?watch=1', { token: nodeTokens[1]!, agent: false });
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.headers['retry-after'], '1');
    expectStatusBody(refused.text, 429, 'TooManyRequests', /too many open watches on this server: 5.*max-watches/, 'server-wide limit');
    await expectQuietLog(server, mark, 'server-wide limit');
    for (const w of [...admin, ...nodeA]) w.close();
    const admitted = await eventually(async () => {
      const watch = await holdWatch(server, '/api/v1/pods?watch=1', nodeTokens[1]!);
      watches.push(watch);
      return watch.status === 200 ? watch : (watch.close(), undefined);
    }, 'the other user admitted once the watches closed');
    admitted.close();
  });
});

/** An API server in this process over a real SQLite store, logging into `lines`. */
async function inProcessServer(options: { watchUnreadBytes?: number; sabotage?: (store: ObjectStore) => void } = {}) {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const server = await startInProcessApiServer({
    logger: pino({ level: 'debug' }, sink),
    ...(options.sabotage ? { sabotage: options.sabotage } : {}),
    handler: options.watchUnreadBytes !== undefined ? { watchUnreadBytes: options.watchUnreadBytes } : {},
  });
  return { target: server.target, lines, close: () => server.close() };
}

describe('watch whose client stops reading (in-process API server)', () => {
  it('is cut once its unread events pass the bound, instead of being buffered without end', async (t) => {
    // A bound well above one event (as the 16 MiB default is above the 1.5 MiB object limit).
    const server = await inProcessServer({ watchUnreadBytes: 1024 * 1024 });
    try {
      // Nodes: cluster-scoped, so no namespace is needed in this bare server; spec is kept as sent.
      const created = await request(server.target, 'POST', '/api/v1/nodes', { body: { metadata: { name: 'flood' }, spec: { blob: 'a' } } });
      assert.equal(created.status, 201, created.text);
      const socket = await connectTls(server.target);
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString('utf8')));
      socket.write(`GET /api/v1/nodes?watch=1&resourceVersion=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.target.token}\r\n\r\n`);
      await eventually(() => received.includes('"flood"'), 'the initial event');
      socket.pause(); // from now on this client reads nothing
      // Another watch whose client keeps reading: it must see every change and stay open.
      const reader = await holdWatch(server.target, '/api/v1/nodes?watch=1&resourceVersion=0', server.target.token);
      let n = 0;
      await eventually(
        async () => {
          const patched = await request(server.target, 'PATCH', '/api/v1/nodes/flood', {
            agent: false,
            headers: { 'Content-Type': 'application/merge-patch+json' },
            body: { spec: { blob: `${++n}-${'x'.repeat(128 * 1024)}` } },
          });
          assert.equal(patched.status, 200, patched.text);
          return server.lines.some((line) => line.includes('cut a watch whose client does not read its events'));
        },
        'the server to cut the watch',
        120_000,
        0,
      );
      t.diagnostic(`cut after ${n} changes of 128 KiB`);
      const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.resume();
      await ended;
      const delivered = received.split('"type":"MODIFIED"').length - 1;
      assert.ok(delivered < n, `the unread events were dropped with the watch (${delivered} of ${n} delivered)`);
      assert.ok(n < 1000, `cut after ${n} changes`);
      await eventually(() => reader.lines().some((line) => line.includes(`"${n}-x`)), 'the reading watch to see the last change');
      assert.equal(reader.ended(), false, 'the watch whose client reads is still open');
      reader.close();
    } finally {
      await server.close();
    }
  });
});

describe('unexpected exceptions (in-process API server)', () => {
  it('a server bug is a 500 with a generic message, logged once with its stack', async () => {
    // The injected fault: a list that fails the way a bug would, with internals in its message.
    const server = await inProcessServer({
      sabotage: (store) => {
        store.list = async () => {
          throw new TypeError('secret internal detail');
        };
      },
    });
    try {
      const res = await request(server.target, 'GET', '/api/v1/pods', { agent: false });
      assert.equal(res.status, 500, res.text);
      const status = expectStatusBody(res.text, 500, 'InternalError', /unexpected error occurred.*server log has the details/, 'server bug');
      assert.doesNotMatch(String(status.message), /secret internal detail/, 'the answer does not echo internals');
      const errors = await eventually(() => {
        const found = server.lines.filter((line) => line.includes('"level":50'));
        return found.length ? found : undefined;
      }, 'the error log line');
      assert.equal(errors.length, 1, `logged once: ${errors.join('\n')}`);
      assert.match(errors[0]!, /"stack":"TypeError: secret internal detail/);
      assert.match(errors[0]!, /"path":"\/api\/v1\/pods"/);
    } finally {
      await server.close();
    }
  });

  it('a datastore that fails a request (etcd electing a leader) is a 503 with Retry-After, not a server bug', async () => {
    const server = await inProcessServer({
      sabotage: (store) => {
        store.list = async () => {
          throw new DatastoreError('etcd range failed: 14 UNAVAILABLE: etcdserver: request timed out');
        };
      },
    });
    try {
      const res = await request(server.target, 'GET', '/api/v1/pods', { agent: false });
      assert.equal(res.status, 503, res.text);
      assert.equal(res.headers['retry-after'], '1');
      expectStatusBody(res.text, 503, 'ServiceUnavailable', /the datastore did not complete the request; try again: .*request timed out/, 'datastore failure');
      const warning = await eventually(() => server.lines.find((line) => line.includes('the datastore failed a request')), 'the warning');
      assert.match(warning, /"level":40/);
      assert.equal(server.lines.filter((line) => line.includes('"level":50')).length, 0, 'not logged as a server bug');
    } finally {
      await server.close();
    }
  });
});
