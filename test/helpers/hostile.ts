import assert from 'node:assert/strict';
import https from 'node:https';
import tls from 'node:tls';
import { eventually, type ServerProcess } from './server.js';

/**
 * Helpers for the hostile-input tests: raw TLS exchanges (requests Node's client would not send),
 * a held-open watch, and checks on what a request left in the server's log.
 */

export interface RawAnswer {
  status: number;
  headers: string;
  body: string;
  /** ms from the first byte sent to the server closing the connection. */
  closedAfterMs: number;
}

/** Connect over TLS (verifying the server), resolved once the handshake is done. */
export function connectTls(server: Pick<ServerProcess, 'port' | 'caPem'>): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: server.port, ca: server.caPem }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Everything the server sends until it closes the connection (or `ceilingMs` passes: an error). */
export function readUntilClosed(socket: tls.TLSSocket, started: number, ceilingMs: number): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', () => undefined); // a reset after the answer still ends the exchange
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server did not close the connection within ${ceilingMs} ms; got: ${text.slice(0, 300)}`));
    }, ceilingMs);
    socket.once('close', () => {
      clearTimeout(timer);
      const split = text.indexOf('\r\n\r\n');
      const headers = split >= 0 ? text.slice(0, split) : text;
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)?.[1] ?? 0);
      resolve({ status, headers, body: split >= 0 ? text.slice(split + 4) : '', closedAfterMs: Date.now() - started });
    });
  });
}

/** Send raw bytes over a fresh TLS connection and read until the server closes it. */
export async function rawExchange(server: Pick<ServerProcess, 'port' | 'caPem'>, data: string | Buffer, ceilingMs = 20_000): Promise<RawAnswer> {
  const socket = await connectTls(server);
  const started = Date.now();
  const answer = readUntilClosed(socket, started, ceilingMs);
  socket.write(data);
  return answer;
}

export interface HeldWatch {
  status: number;
  /** Lines received so far (watch events, or a Status body). */
  lines(): string[];
  ended(): boolean;
  close(): void;
}

/** A watch request kept open until close(); resolves once the response headers are in. */
export function holdWatch(server: Pick<ServerProcess, 'port' | 'caPem'>, path: string, token: string): Promise<HeldWatch> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port: server.port, path, ca: server.caPem, agent: false, headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' } },
      (res) => {
        let text = '';
        let ended = false;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => (ended = true));
        res.on('error', () => (ended = true));
        res.on('close', () => (ended = true));
        resolve({
          status: res.statusCode ?? 0,
          lines: () => text.split('\n').filter(Boolean),
          ended: () => ended,
          close: () => req.destroy(),
        });
      },
    );
    req.on('error', (error) => reject(error));
    req.end();
  });
}

/** The log lines a server wrote since `mark` (an offset into its output). */
export function logSince(server: Pick<ServerProcess, 'output'>, mark: number): string[] {
  return server
    .output()
    .slice(mark)
    .split('\n')
    .filter((line) => line.trim());
}

/**
 * Waits until the server logged the end of a request (`--log-level debug` logs every request,
 * after anything the request itself logged), then asserts that nothing since `mark` is an
 * error-level line or carries a stack trace.
 */
export async function expectQuietLog(server: Pick<ServerProcess, 'output'>, mark: number, what: string): Promise<void> {
  await eventually(
    () => logSince(server, mark).some((line) => /"msg":"(request|refused a malformed or slow request|the client closed the connection while sending its request)"/.test(line)),
    `the server to log the end of the request (${what})`,
    20_000,
  );
  for (const line of logSince(server, mark)) {
    assert.doesNotMatch(line, /"level":"(error|fatal)"/, `${what}: the server logged an error: ${line.slice(0, 600)}`);
    assert.doesNotMatch(line, /"stack"|\n\s+at |^\s+at /, `${what}: the server logged a stack trace: ${line.slice(0, 600)}`);
    assert.ok(line.startsWith('{'), `${what}: the server wrote something that is not a log record: ${line.slice(0, 600)}`);
  }
}

/** A failure Status body with this code, reason and a message matching `message`. */
export function expectStatusBody(text: string, code: number, reason: string | undefined, message: RegExp, what: string): Record<string, unknown> {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    assert.fail(`${what}: expected a Status body, got: ${text.slice(0, 300)}`);
  }
  assert.equal(body.kind, 'Status', `${what}: ${text.slice(0, 300)}`);
  assert.equal(body.status, 'Failure', what);
  assert.equal(body.code, code, `${what}: ${text.slice(0, 300)}`);
  if (reason !== undefined) assert.equal(body.reason, reason, `${what}: ${text.slice(0, 300)}`);
  assert.match(String(body.message), message, `${what}: unclear message`);
  return body;
}
