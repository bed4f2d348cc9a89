import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Status, StatusReason } from './errors.js';
import { EXTRA_ACCEPT_HANDLES, ExtraAcceptors } from './extra-acceptors.js';
import { ApiHandler, type HandlerOptions } from './handler.js';

/**
 * The HTTPS listener around the API handler. It counts requests in flight (watches apart, since
 * they never finish by themselves) so that shutdown can let writes complete before the datastore
 * closes.
 */

export interface TlsMaterial {
  certificatePem: string;
  privateKeyPem: string;
  /**
   * Ask clients for a certificate (without requiring one) and verify it against this CA only:
   * the client CA, whose certificates are users (src/apiserver/x509-auth.ts).
   */
  clientCaPem?: string;
}

export interface ListenOptions {
  host: string;
  port: number;
}

/**
 * How long a client may take over each part of a connection, so that slow or idle clients cannot
 * hold connections forever (kube-apiserver: 32 s for headers, 90 s idle, 60 s per request).
 */
export interface ConnectionTimeouts {
  /** TLS handshake, then each request's headers. */
  headerMs: number;
  /** A whole request, body included (at least headerMs). Watches are requests that ended long ago. */
  requestMs: number;
  /** An idle keep-alive connection between requests. */
  idleMs: number;
}

export const DEFAULT_CONNECTION_TIMEOUTS: ConnectionTimeouts = { headerMs: 32_000, requestMs: 60_000, idleMs: 90_000 };

/** Node's default, stated: a request line and headers larger than this are refused with 431. */
export const MAX_HEADER_BYTES = 16 * 1024;

/**
 * What Node's HTTP parser refused before any handler ran (Node's own answer has no body), as a
 * Status: timeouts are 408, oversized headers 431, anything unparsable 400.
 */
function clientErrorStatus(code: string | undefined): { status: number; text: string; reason: StatusReason; message: string } {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, text: 'Request Timeout', reason: 'Timeout', message: 'the request was not received in time; the connection is closed' };
    case 'HPE_HEADER_OVERFLOW':
      return {
        status: 431,
        text: 'Request Header Fields Too Large',
        reason: 'BadRequest',
        message: `the request line and headers are larger than the limit of ${MAX_HEADER_BYTES} bytes`,
      };
    default:
      return { status: 400, text: 'Bad Request', reason: 'BadRequest', message: `malformed HTTP request (${code ?? 'unknown parse error'})` };
  }
}

/**
 * Connections the kernel may hold for this server before it accepts them (capped by the system's
 * net.core.somaxconn). Node's default is 511, and Node (libuv) accepts one connection per turn of
 * the event loop: when many agents reconnect at once (a server restart, a network coming back) or
 * the loop is busy, a queue of 511 overflows and the kernel drops the next SYNs, which their
 * senders retry after 1, 3 and 7 s. A deeper queue makes them wait their turn instead; Go's
 * servers (kube-apiserver) listen with somaxconn.
 */
export const LISTEN_BACKLOG = 4096;

export class ApiServer {
  private readonly server: https.Server;
  private readonly handler: ApiHandler;
  private inFlight = 0;
  private drained: (() => void) | undefined;
  /** Every TCP connection, including ones still in their TLS handshake (not yet HTTP). */
  private readonly sockets = new Set<Socket>();
  private readonly logger: HandlerOptions['logger'];
  /** More accepts per turn of the event loop (./extra-acceptors.ts). */
  private acceptors: ExtraAcceptors | undefined;

  constructor(options: HandlerOptions, tls: TlsMaterial, timeouts: ConnectionTimeouts = DEFAULT_CONNECTION_TIMEOUTS) {
    this.handler = new ApiHandler(options);
    this.logger = options.logger;
    // Node refuses headersTimeout > requestTimeout: a request cannot outlast itself.
    const headerMs = Math.min(timeouts.headerMs, timeouts.requestMs);
    const serverOptions: https.ServerOptions = {
      cert: tls.certificatePem,
      key: tls.privateKeyPem,
      // A certificate that does not verify is not refused here: the request then has no
      // certificate user, and the authenticators decide (a bearer token may still be valid).
      ...(tls.clientCaPem ? { requestCert: true, rejectUnauthorized: false, ca: tls.clientCaPem } : {}),
      // A TCP connection that never completes its handshake is not HTTP yet; this cuts it.
      handshakeTimeout: headerMs,
      headersTimeout: headerMs,
      requestTimeout: timeouts.requestMs,
      // Node checks the two above only this often (30 s by default): well under the shorter one.
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(headerMs / 4))),
      maxHeaderSize: MAX_HEADER_BYTES,
    };
    this.server = https.createServer(serverOptions, (req, res) => {
      const counted = !/[?&]watch=(true|1)(&|$)/.test(req.url ?? '') && !(req.url ?? '').includes('/watch/');
      if (counted) {
        this.inFlight++;
        res.on('close', () => {
          this.inFlight--;
          if (this.inFlight === 0) this.drained?.();
        });
      }
      this.handler.handle(req, res);
    });
    // pods/exec, attach, portforward: WebSocket and SPDY upgrades.
    this.server.on('upgrade', (req, socket: Duplex, head: Buffer) => this.handler.handleUpgrade(req, socket, head));
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    // Clients keep connections open between heartbeats (every second or so): 90 s idle, as
    // kube-apiserver and Go's client transports, is far beyond that.
    this.server.keepAliveTimeout = timeouts.idleMs;
    this.server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
      options.logger.debug({ code: error.code, message: error.message }, 'refused a malformed or slow request');
      // A reset needs no answer; a response already under way (a pipelined request after a
      // watch) must not get a second status line inside its body. As Node's own handler decides.
      const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
      // A failed or timed-out TLS handshake (Node reports those here too) has no channel to answer on.
      const tlsFailure = /^ERR_(TLS|SSL)_/.test(error.code ?? '');
      if (tlsFailure || error.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
        socket.destroy();
        return;
      }
      const { status, text, reason, message } = clientErrorStatus(error.code);
      const body: Status = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code: status };
      const payload = JSON.stringify(body);
      socket.end(
        `HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n` +
          `Cache-Control: no-cache, private\r\nConnection: close\r\n\r\n${payload}`,
      );
      // end() waits for the client's side to close too; a hostile client never does.
      const cut = setTimeout(() => socket.destroy(), 2000).unref();
      socket.once('close', () => clearTimeout(cut));
    });
  }

  listen(options: ListenOptions): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      this.server.once('error', onError);
      this.server.listen({ port: options.port, host: options.host, backlog: LISTEN_BACKLOG }, () => {
        this.server.off('error', onError);
        // Added in the background: the server serves from now on, one accept per turn until they come.
        // DROVER_BENCH_EXTRA_ACCEPTORS=off is for bench/scale-overload.ts's comparison only.
        const extra = process.env.DROVER_BENCH_EXTRA_ACCEPTORS === 'off' ? 0 : EXTRA_ACCEPT_HANDLES;
        this.acceptors = new ExtraAcceptors(this.server, extra, LISTEN_BACKLOG, this.logger);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  /**
   * Stop accepting connections, wait up to `graceMs` for requests in flight, then cut every
   * remaining connection (watches included).
   */
  async close(graceMs: number): Promise<void> {
    this.acceptors?.close();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    if (this.inFlight > 0) {
      await Promise.race([
        new Promise<void>((resolve) => {
          this.drained = resolve;
        }),
        new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref()),
      ]);
    }
    this.server.closeAllConnections();
    // closeAllConnections() knows only HTTP connections; a client still in its TLS handshake
    // would hold close() open until it gave up by itself.
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }
}
