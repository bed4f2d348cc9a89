import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { ApiHandler, type HandlerOptions } from './handler.js';

/**
 * The HTTPS listener around the API handler. It counts requests in flight (watches apart, since
 * they never finish by themselves) so that shutdown can let writes complete before the datastore
 * closes.
 */

export interface TlsMaterial {
  certificatePem: string;
  privateKeyPem: string;
}

export interface ListenOptions {
  host: string;
  port: number;
}

export class ApiServer {
  private readonly server: https.Server;
  private readonly handler: ApiHandler;
  private inFlight = 0;
  private drained: (() => void) | undefined;
  /** Every TCP connection, including ones still in their TLS handshake (not yet HTTP). */
  private readonly sockets = new Set<Socket>();

  constructor(options: HandlerOptions, tls: TlsMaterial) {
    this.handler = new ApiHandler(options);
    this.server = https.createServer({ cert: tls.certificatePem, key: tls.privateKeyPem }, (req, res) => {
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
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    // Clients keep connections open between heartbeats; outlive their idle intervals.
    this.server.keepAliveTimeout = 65_000;
    this.server.headersTimeout = 70_000;
    // A watch is a response that never ends; only request bodies are bounded in time.
    this.server.requestTimeout = 60_000;
  }

  listen(options: ListenOptions): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      this.server.once('error', onError);
      this.server.listen(options.port, options.host, () => {
        this.server.off('error', onError);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  /**
   * Stop accepting connections, wait up to `graceMs` for requests in flight, then cut every
   * remaining connection (watches included).
   */
  async close(graceMs: number): Promise<void> {
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
