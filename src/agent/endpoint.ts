import type { IncomingMessage, ServerResponse } from 'node:http';
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { queryBool } from '../apiserver/query.js';
import { API_SERVER_CLIENT_NAME } from '../cluster/drover-endpoints.js';
import type { AgentHealth } from '../node-protocol/records.js';
import { METRICS_CONTENT_TYPE } from '../metrics/content-type.js';
import type { AgentMetrics } from '../metrics/metrics.js';
import type { PodManager } from './pod-manager.js';
import { PEER_CONTROL_PLANE_PATH } from './pods/fencing.js';
import { PodLogError, streamContainerLog } from './pods/logs.js';
import { AgentStreams } from './streams/sessions.js';
import { STATS_SUMMARY_PATH, type StatsSampler } from './stats.js';
import { errorBody, isDistributionPath } from '../images/registry-server/distribution.js';
import type { RegistryServer } from '../images/registry-server/server.js';
import type { Logger } from '../logging/logger.js';
import type { Duplex } from 'node:stream';

/**
 * The agent's own HTTPS endpoint (kubelet's port): `/healthz`, `/containerLogs/…` (what
 * `kubectl logs` reaches through an API server), `/stats/summary` (its and its pods' resource
 * usage, for `kubectl top`), `/metrics` when this node's `supervisor-metrics`
 * setting is on, `/v2/…` (the embedded registry, docs/registry.md) for other nodes, and the peer
 * answer other nodes' pod supervisors ask before they fence.
 *
 * Callers authenticate with a client certificate from the client CA: the API servers'
 * (everything), or an admin's (system:masters: health, metrics and stats), or, for `/v2/` only, a
 * node's serving certificate from the node CA (the peers of the embedded registry). No token opens it: the join
 * token joins nodes, nothing more. It has no certificate until the first registration gives it
 * one (serveWith).
 */

export interface AgentEndpointOptions {
  nodeName: string;
  health: () => AgentHealth;
  /** Present once the node is registered. */
  pods: () => PodManager | undefined;
  /** Present when this node's own `supervisor-metrics` setting is on. */
  metrics: () => AgentMetrics | undefined;
  /** This node's and its pods' resource usage (`/stats/summary`), once the node runs pods. */
  stats?: () => StatsSampler | undefined;
  /** For the streaming sessions' log lines (exec, attach, port-forward). */
  logger: Logger;
  /** Present when this node's own `embedded-registry` setting is on: serves `/v2/…`. */
  registry?: RegistryServer;
}

/** The certificates of one registration: what the endpoint serves with, and whom it trusts. */
export interface EndpointCertificates {
  servingCertificate: string;
  servingKey: string;
  clientCaCertificate: string;
  /** Also trusted for callers, of `/v2/` only: other nodes' serving certificates (embedded registry peers). */
  nodeCaCertificate?: string;
}

/** The CAs whose certificates the endpoint accepts, to tell which one issued a caller's. */
interface TrustedCas {
  client: X509Certificate;
  node: X509Certificate | undefined;
}

export class AgentEndpoint {
  private server: https.Server | undefined;
  private listeningPort = 0;
  private trusted: TrustedCas | undefined;
  /** exec, attach, port-forward: WebSocket upgrades from API servers (src/agent/streams/). */
  private readonly streams: AgentStreams;

  constructor(private readonly options: AgentEndpointOptions) {
    this.streams = new AgentStreams({
      nodeName: options.nodeName,
      findPodDir: (namespace, name) => options.pods()?.findPodDir(namespace, name),
      logger: options.logger,
    });
  }

  /** The port it listens on (0 until it does). */
  get port(): number {
    return this.listeningPort;
  }

  /**
   * Listen before registering: the port is part of the registration (where API servers may reach
   * it); it serves once a registration gave it a certificate.
   */
  async listen(port: number): Promise<void> {
    if (this.server) return;
    const server = https.createServer({ requestCert: true, rejectUnauthorized: false }, (req, res) => this.serve(req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      // Only API servers open sessions: they authorized the user already.
      if (endpointCaller(req.socket as TLSSocket, this.trusted) !== 'apiserver') {
        socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\nConnection: close\r\n\r\nUnauthorized');
        return;
      }
      this.streams.handle(req, socket, head);
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, () => resolve());
    });
    this.listeningPort = (server.address() as AddressInfo).port;
  }

  /** Serve with this registration's certificate; trust the client CA for callers, and the node CA for `/v2/` only. */
  serveWith(certificates: EndpointCertificates): void {
    const ca = [certificates.clientCaCertificate, ...(certificates.nodeCaCertificate ? [certificates.nodeCaCertificate] : [])];
    this.trusted = {
      client: new X509Certificate(certificates.clientCaCertificate),
      node: certificates.nodeCaCertificate ? new X509Certificate(certificates.nodeCaCertificate) : undefined,
    };
    this.server!.setSecureContext({ cert: certificates.servingCertificate, key: certificates.servingKey, ca });
  }

  async close(): Promise<void> {
    // Cut idle keep-alive connections first: close() alone would wait for them to time out.
    const closed = new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server?.closeAllConnections();
    this.streams.closeAll();
    await closed;
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const caller = endpointCaller(req.socket as TLSSocket, this.trusted);
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (isDistributionPath(path)) return this.serveRegistry(req, res, caller);
    const authorized =
      caller === 'apiserver' || (caller === 'admin' && (path === '/healthz' || path === '/metrics' || path === STATS_SUMMARY_PATH));
    const pods = this.options.pods();
    const metrics = this.options.metrics();
    if (path === PEER_CONTROL_PLANE_PATH && pods) {
      // Open to any caller: the answer is one number, and its integrity comes from the
      // serving certificate the asking pod supervisor verifies against the node CA.
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(pods.peerAnswer()));
    } else if (!authorized) {
      res.writeHead(401, { 'Content-Type': 'text/plain' });
      res.end('Unauthorized');
    } else if (path === '/healthz') {
      const health = this.options.health();
      res.writeHead(health.ready ? 200 : 503, { 'Content-Type': 'text/plain' });
      res.end(health.ready ? 'ok' : `${health.reason}: ${health.message}`);
    } else if (path.startsWith('/containerLogs/') && req.method === 'GET') {
      void this.serveLogs(req, res, path);
    } else if (path === STATS_SUMMARY_PATH && req.method === 'GET' && this.options.stats?.()) {
      // kubelet's Summary API shape, the part metrics.k8s.io needs (src/agent/stats.ts).
      this.options.stats!()!.summary().then(
        (summary) => {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(summary));
        },
        (error: unknown) => {
          res.writeHead(500, { 'Content-Type': 'text/plain' });
          res.end(`could not read this node's usage: ${(error as Error).message}`);
        },
      );
    } else if (path === '/metrics' && metrics) {
      void metrics.registry.metrics().then((text) => {
        res.writeHead(200, { 'Content-Type': METRICS_CONTENT_TYPE });
        res.end(text);
      });
    } else {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('not found');
    }
  }

  /**
   * The embedded registry: other nodes (their node-CA serving certificate) and administrators
   * may read; anyone else is 401; a node whose own `embedded-registry` is off answers 404.
   */
  private serveRegistry(req: IncomingMessage, res: ServerResponse, caller: EndpointCaller): void {
    const refuse = (status: number, code: 'UNAUTHORIZED' | 'UNSUPPORTED', message: string): void => {
      const body = errorBody(code, message);
      res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(body)) });
      res.end(body);
    };
    if (caller !== 'node' && caller !== 'admin') {
      refuse(401, 'UNAUTHORIZED', 'the embedded registry needs a client certificate of a cluster node (node CA) or of an administrator');
    } else if (!this.options.registry) {
      refuse(404, 'UNSUPPORTED', `embedded-registry is off on this node (${this.options.nodeName}): its own configuration does not turn it on`);
    } else {
      this.options.registry.handle(req, res);
    }
  }

  /** `GET /containerLogs/<namespace>/<pod>/<container>?follow&tailLines&previous&limitBytes`, as kubelet. */
  private async serveLogs(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const [namespace, pod, container] = path.split('/').slice(2).map(decodeURIComponent);
    const query = new URL(req.url ?? '/', 'https://agent.invalid').searchParams;
    const dir = namespace && pod ? this.options.pods()?.findPodDir(namespace, pod) : undefined;
    if (!dir || !container) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end(`pod ${namespace}/${pod} is not running on node ${this.options.nodeName}`);
      return;
    }
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const number = (name: string): number | undefined => {
      const value = Number(query.get(name));
      return query.has(name) && Number.isInteger(value) && value >= 0 ? value : undefined;
    };
    const tailLines = number('tailLines');
    const limitBytes = number('limitBytes');
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    // A followed log with nothing new yet still answers promptly, so the client starts waiting.
    const flush = setTimeout(() => !res.headersSent && res.flushHeaders(), 200);
    try {
      await streamContainerLog(
        dir,
        container,
        {
          follow: queryBool(query, 'follow'),
          previous: queryBool(query, 'previous'),
          ...(tailLines !== undefined ? { tailLines } : {}),
          ...(limitBytes !== undefined ? { limitBytes } : {}),
        },
        res,
        abort.signal,
      );
    } catch (error) {
      clearTimeout(flush);
      if (!res.headersSent) {
        res.writeHead(error instanceof PodLogError ? 400 : 500, { 'Content-Type': 'text/plain' });
      } else if (error instanceof PodLogError) {
        res.write(`${error.message}\n`);
      }
      if (!res.writableEnded) res.end(error instanceof PodLogError ? '' : `${(error as Error).message}\n`);
      return;
    }
    clearTimeout(flush);
    if (!res.writableEnded) res.end();
  }
}

type EndpointCaller = 'apiserver' | 'admin' | 'node' | undefined;

/**
 * Who is calling the agent's endpoint, from a client certificate TLS verified against the
 * trusted CAs: from the client CA, an API server or an administrator (system:masters); from the
 * node CA, a node (`system:node:<name>`, which only the registry paths accept); anyone else is
 * no one. The issuing CA is checked by signature, not by name, so a node certificate never
 * passes for an API server or an administrator whatever its subject says.
 */
function endpointCaller(socket: TLSSocket, trusted: TrustedCas | undefined): EndpointCaller {
  if (!socket.authorized || !trusted) return undefined;
  // One verdict per connection: its certificate was verified once, at the handshake.
  if (callers.has(socket)) return callers.get(socket);
  const caller = classifyCaller(socket, trusted);
  callers.set(socket, caller);
  return caller;
}

const callers = new WeakMap<TLSSocket, EndpointCaller>();

function classifyCaller(socket: TLSSocket, trusted: TrustedCas): EndpointCaller {
  const peer = socket.getPeerCertificate();
  if (!peer?.raw) return undefined;
  const certificate = new X509Certificate(peer.raw);
  if (issuedBy(certificate, trusted.client)) {
    if (peer.subject?.CN === API_SERVER_CLIENT_NAME) return 'apiserver';
    const organizations = ([] as string[]).concat(peer.subject?.O ?? []);
    return organizations.includes('system:masters') ? 'admin' : undefined;
  }
  if (trusted.node && issuedBy(certificate, trusted.node)) {
    const organizations = ([] as string[]).concat(peer.subject?.O ?? []);
    const commonName = peer.subject?.CN;
    return typeof commonName === 'string' && commonName.startsWith('system:node:') && organizations.includes('system:nodes') ? 'node' : undefined;
  }
  return undefined;
}

function issuedBy(certificate: X509Certificate, ca: X509Certificate): boolean {
  return certificate.checkIssued(ca) && certificate.verify(ca.publicKey);
}
