import type { IncomingMessage } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { createWebSocketStream, type WebSocket, WebSocketServer } from 'ws';
import type { Logger } from '../../logging/logger.js';
import type { Authenticator, Authorizer, RequestAttributes } from '../auth.js';
import { ApiError, errors } from '../errors.js';
import type { KubeObject } from '../objects.js';
import { forbiddenRefusal } from '../rbac/authorizer.js';
import { parseResourcePath } from '../request-info.js';
import type { ResourceRegistry } from '../resources.js';
import type { ObjectStore } from '../storage.js';
import { negotiate, PORT_FORWARD_PROTOCOL, PORT_FORWARD_TUNNEL_PROTOCOL, PROTOCOL_V4, PROTOCOL_V5, REMOTE_COMMAND_PROTOCOLS } from './channels.js';
import { agentQuery, parseStreamQuery, resolveStreamTarget, STREAM_SUBRESOURCES, type StreamKind, type StreamOptions } from './options.js';
import { bridge, type ChannelPeer, SpdyCommandPeer, WebSocketPeer } from './peers.js';
import { servePortForward } from './port-forward.js';
import { SpdySession } from './spdy.js';

/**
 * `pods/exec`, `pods/attach` and `pods/portforward`: HTTP requests that upgrade to a stream.
 * kubectl 1.30+ asks for a WebSocket (GET, `v5.channel.k8s.io`; port-forward: a SPDY session
 * tunnelled in it, `SPDY/3.1+portforward.k8s.io`) and falls back to SPDY/3.1 by HTTP Upgrade
 * (POST) when that is refused; older kubectl speaks only SPDY. Either way the caller is
 * authenticated and authorized (verb `create` on the subresource, for GET too, as Kubernetes
 * 1.35 does: reading a pod must never be enough to run commands in it), the query and the pod
 * are checked, and the pod's agent is reached (`backend.dial`) *before* the upgrade, so every
 * refusal is an HTTP status with a Status body that kubectl prints.
 */

export interface PodStreamBackend {
  /**
   * Opens the session on the pod's agent: a channel session (exec/attach: the remote command
   * channels; portforward: one connection to `query.ports`). Throws an ApiError when it cannot.
   */
  dial(pod: KubeObject, kind: StreamKind, query: URLSearchParams): Promise<ChannelPeer>;
}

export interface UpgradeDeps {
  authenticator: Authenticator;
  authorizer: Authorizer;
  registry: ResourceRegistry;
  store: ObjectStore;
  logger: Logger;
  backend?: PodStreamBackend;
  /** Counts the session among the caller's long-running requests; returns its release. */
  acquire?: (user: string) => () => void;
}

/** How long a SPDY client may take to open its streams after the upgrade (kubelet: 30 s). */
const STREAM_CREATION_TIMEOUT_MS = 30_000;

/** The WebSocket answering side (one per upgrade: the subprotocol is chosen before the handshake). */
const WEBSOCKET_OPTIONS = { noServer: true, clientTracking: false, perMessageDeflate: false, maxPayload: 16 * 1024 * 1024 } as const;

/** Answers an upgrade request with an HTTP error and its Status (the socket is not upgraded). */
export function refuseUpgrade(socket: Duplex, error: ApiError): void {
  if (socket.destroyed) return;
  const body = JSON.stringify(error.toStatus());
  socket.end(
    `HTTP/1.1 ${error.code} ${STATUS_CODES[error.code] ?? 'Error'}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-cache, private\r\nConnection: close\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), 2000).unref();
}

type Transport = { kind: 'websocket'; protocol: string } | { kind: 'spdy'; protocol: string };

/** Which transport and protocol the request asks for, or a 400 naming what is served. */
function chooseTransport(req: IncomingMessage, kind: StreamKind): Transport {
  const upgrade = String(req.headers.upgrade ?? '').toLowerCase();
  if (upgrade === 'websocket') {
    const offered = req.headers['sec-websocket-protocol'];
    const ours = kind === 'portforward' ? [PORT_FORWARD_TUNNEL_PROTOCOL] : [...REMOTE_COMMAND_PROTOCOLS];
    const protocol = negotiate(offered, ours);
    if (!protocol) {
      throw errors.badRequest(
        `none of the WebSocket subprotocols offered (${offered ?? 'none'}) is served for ${kind}; this server speaks ${ours.join(', ')}`,
      );
    }
    return { kind: 'websocket', protocol };
  }
  if (upgrade === 'spdy/3.1') {
    const offered = ([] as string[]).concat(req.headers['x-stream-protocol-version'] ?? []).join(',');
    const ours = kind === 'portforward' ? [PORT_FORWARD_PROTOCOL] : [PROTOCOL_V4];
    const protocol = negotiate(offered, ours);
    if (!protocol) {
      throw errors.badRequest(
        `none of the stream protocols offered (${offered || 'none'}) is served for ${kind} over SPDY; this server speaks ${ours.join(', ')}`,
      );
    }
    return { kind: 'spdy', protocol };
  }
  throw errors.badRequest('Upgrade request required');
}

export async function serveStreamUpgrade(deps: UpgradeDeps, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  socket.on('error', () => undefined);
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'https://drover.invalid');
  } catch {
    throw errors.badRequest('invalid request target');
  }
  const parts = url.pathname.replace(/\/+$/, '').split('/').slice(1).map((part) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw errors.badRequest(`invalid percent-encoding in the request path segment ${JSON.stringify(part.slice(0, 200))}`);
    }
  });
  const user = await deps.authenticator.authenticate(req);
  if (!user) throw errors.unauthorized();
  if (Object.keys(req.headers).some((header) => header.startsWith('impersonate-'))) {
    throw errors.badRequest('impersonation (Impersonate-* headers, kubectl --as/--as-group) is not supported by Drover');
  }
  if (parts[0] !== 'api' || parts[1] !== 'v1') {
    throw errors.badRequest('only pods/exec, pods/attach and pods/portforward upgrade to a stream');
  }
  const request = parseResourcePath(deps.registry, '', 'v1', parts.slice(2));
  const kind = request.subresource as StreamKind | undefined;
  if (request.def.plural !== 'pods' || !kind || !STREAM_SUBRESOURCES.has(kind) || !request.name || !request.namespace) {
    throw errors.badRequest('only pods/exec, pods/attach and pods/portforward upgrade to a stream');
  }
  const method = req.method ?? 'GET';
  if (method !== 'GET' && method !== 'POST') throw errors.methodNotAllowed();
  const attributes: RequestAttributes = {
    verb: 'create',
    group: '',
    resource: 'pods',
    subresource: kind,
    namespace: request.namespace,
    name: request.name,
  };
  const decision = deps.authorizer.authorize(user, attributes);
  if (!decision.allowed) {
    const refusal = forbiddenRefusal(user, attributes, decision.reason);
    throw errors.forbidden(refusal.message, request.def, request.name);
  }
  const parsed = parseStreamQuery(kind, url.searchParams);
  const transport = chooseTransport(req, kind);
  const pod = await deps.store.get(request.def, request.namespace, request.name);
  const options = resolveStreamTarget(pod, parsed);
  if (!deps.backend) throw new ApiError(404, 'NotFound', `this server does not serve pods/${kind}`, {});
  const release = deps.acquire?.(user.name);
  socket.once('close', () => release?.());
  const backend = deps.backend;
  if (options.kind === 'portforward') {
    const session = await upgradeToSpdySession(req, socket, head, transport);
    const query = (port: number): URLSearchParams => new URLSearchParams({ ports: String(port) });
    servePortForward(session, (port) => backend.dial(pod, 'portforward', query(port)), options.ports);
    deps.logger.info({ user: user.name, pod: `${request.namespace}/${request.name}`, kind, transport: transport.kind }, 'port-forward session');
    return;
  }
  const query = agentQuery(options);
  query.set('container', options.container!);
  const agent = await backend.dial(pod, kind, query);
  let client: ChannelPeer;
  try {
    client = await upgradeRemoteCommand(req, socket, head, transport, options);
  } catch (error) {
    agent.close();
    deps.logger.debug({ err: error, pod: `${request.namespace}/${request.name}` }, `${kind} session ended before it began`);
    socket.destroy();
    return;
  }
  deps.logger.info(
    { user: user.name, pod: `${request.namespace}/${request.name}`, container: options.container, kind, transport: `${transport.kind} ${transport.protocol}`, ...(options.kind === 'exec' ? { command: options.command[0] } : {}) },
    `${kind} session`,
  );
  bridge(client, agent);
}

/** RFC 6455 subprotocols are tokens; `SPDY/3.1+portforward.k8s.io` is not one (`/`), and ws refuses such a header. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function upgradeWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, protocol: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    // The protocol was chosen already; ws echoes it (and only it). A malformed handshake is
    // answered by ws itself (400) and the socket closed.
    const server = new WebSocketServer({ ...WEBSOCKET_OPTIONS, handleProtocols: () => protocol });
    if (!TOKEN.test(protocol)) {
      // kubectl's port-forward tunnel names a protocol ws cannot parse: answer it by hand.
      delete req.headers['sec-websocket-protocol'];
      server.once('headers', (headers: string[]) => headers.push(`Sec-WebSocket-Protocol: ${protocol}`));
    }
    socket.once('close', () => reject(new Error('the WebSocket handshake failed')));
    server.handleUpgrade(req, socket, head, (ws) => resolve(ws));
  });
}

function writeSpdyUpgrade(socket: Duplex, head: Buffer, protocol: string): void {
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: ${protocol}\r\n\r\n`);
  if (head.length) socket.unshift(head);
}

async function upgradeRemoteCommand(req: IncomingMessage, socket: Duplex, head: Buffer, transport: Transport, options: StreamOptions): Promise<ChannelPeer> {
  if (options.kind === 'portforward') throw new Error('not a remote command');
  if (transport.kind === 'websocket') {
    const ws = await upgradeWebSocket(req, socket, head, transport.protocol);
    return new WebSocketPeer(ws, transport.protocol === PROTOCOL_V5 ? 5 : 4);
  }
  writeSpdyUpgrade(socket, head, transport.protocol);
  return SpdyCommandPeer.accept(new SpdySession(socket), options, STREAM_CREATION_TIMEOUT_MS);
}

async function upgradeToSpdySession(req: IncomingMessage, socket: Duplex, head: Buffer, transport: Transport): Promise<SpdySession> {
  if (transport.kind === 'spdy') {
    writeSpdyUpgrade(socket, head, transport.protocol);
    return new SpdySession(socket);
  }
  // kubectl 1.31+: the SPDY session's bytes travel in binary WebSocket messages, boundaries meaningless.
  const ws = await upgradeWebSocket(req, socket, head, transport.protocol);
  return new SpdySession(createWebSocketStream(ws));
}
