import type { IncomingMessage } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import { negotiate, PROTOCOL_V5, type TerminalSize } from '../../apiserver/streaming/channels.js';
import { parsePort, parseStreamQuery, type RemoteCommandOptions } from '../../apiserver/streaming/options.js';
import { WebSocketPeer } from '../../apiserver/streaming/peers.js';
import { PORT_DATA, PORT_ERROR } from '../../apiserver/streaming/port-forward.js';
import { ApiError } from '../../apiserver/errors.js';
import type { Logger } from '../../logging/logger.js';
import { execInContainer } from '../pods/runtime/exec.js';
import { readRunSpec, readRunState, type PodRunSpec } from '../pods/run-spec.js';
import { connectContainerStdin, StdinError } from '../pods/stdin.js';
import { resizeContainerTerminal, runAttachSession } from './attach.js';
import { runProcessSession } from './exec.js';
import { dialPodPort, PortForwardError } from './port-forward.js';

/**
 * The agent's streaming endpoints, kubelet's paths on its HTTPS port: `/exec/<ns>/<pod>/<container>`,
 * `/attach/<ns>/<pod>/<container>` and `/portForward/<ns>/<pod>`, WebSocket upgrades with the
 * channel protocol v5, open only to API servers (the endpoint checks the caller). The API server
 * checked the user's rights and the query already; the agent checks again what it can know
 * better: that the pod runs here (the same uid), that the container is running, that the port
 * answers, and refuses with an HTTP status and a message before upgrading otherwise.
 */

export interface AgentStreamContext {
  nodeName: string;
  /** The pod's directory on this node, if it runs here. */
  findPodDir(namespace: string, name: string): string | undefined;
  logger: Logger;
}

class Refusal extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

function refuse(socket: Duplex, code: number, message: string): void {
  if (socket.destroyed) return;
  socket.end(
    `HTTP/1.1 ${code} ${STATUS_CODES[code] ?? 'Error'}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(message)}\r\nConnection: close\r\n\r\n${message}`,
  );
  setTimeout(() => socket.destroy(), 2000).unref();
}

export class AgentStreams {
  /** Upgraded sockets still open: an agent that stops cuts them. */
  private readonly open = new Set<Duplex>();

  constructor(private readonly context: AgentStreamContext) {}

  /** For the endpoint's 'upgrade' event, once the caller is known to be an API server. */
  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined);
    this.serve(req, socket, head).catch((error: unknown) => {
      if (error instanceof Refusal) return refuse(socket, error.code, error.message);
      if (error instanceof ApiError) return refuse(socket, error.code, error.message);
      this.context.logger.error({ err: error, path: req.url?.split('?')[0] }, 'unexpected error in a stream session');
      refuse(socket, 500, 'the agent failed to start the session; its log has the details');
    });
  }

  /** Ends every open session (the agent is stopping). */
  closeAll(): void {
    for (const socket of this.open) socket.destroy();
    this.open.clear();
  }

  private async serve(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const url = new URL(req.url ?? '/', 'https://agent.invalid');
    const [kind, ...rest] = url.pathname.split('/').slice(1).map((part) => {
      try {
        return decodeURIComponent(part);
      } catch {
        throw new Refusal(400, 'invalid percent-encoding in the path');
      }
    });
    if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') throw new Refusal(400, 'Upgrade request required (websocket)');
    if (!negotiate(req.headers['sec-websocket-protocol'], [PROTOCOL_V5])) throw new Refusal(400, `the ${PROTOCOL_V5} subprotocol is required`);
    const [namespace, podName, container] = rest;
    if (!namespace || !podName) throw new Refusal(404, 'not found');
    const { dir, spec } = this.findPod(namespace, podName, url.searchParams.get('podUID'));
    if (kind === 'portForward' && rest.length === 2) {
      const ports = url.searchParams.getAll('ports');
      if (ports.length !== 1) throw new Refusal(400, 'exactly one port is forwarded per session (ports=<port>)');
      const port = parsePort(ports[0]!);
      let connection;
      try {
        connection = await dialPodPort(dir, spec, port);
      } catch (error) {
        if (error instanceof PortForwardError) throw new Refusal(400, error.message);
        throw error;
      }
      const ws = await this.upgrade(req, socket, head);
      const peer = new WebSocketPeer(ws, 5);
      let over = false;
      const finish = (): void => {
        if (over) return;
        over = true;
        connection.destroy();
        peer.close();
      };
      peer.start({
        frame(channel, data) {
          if (channel === PORT_DATA && !connection.write(data)) {
            peer.pause();
            connection.once('drain', () => peer.resume());
          }
        },
        end(channel) {
          if (channel === PORT_DATA) connection.end();
        },
        close: finish,
      });
      let inFlight = 0;
      connection.on('data', (chunk: Buffer) => {
        inFlight++;
        if (inFlight === 16) connection.pause();
        void peer.send(PORT_DATA, chunk).then(() => {
          inFlight--;
          if (inFlight === 15) connection.resume();
        });
      });
      connection.on('end', () => peer.end(PORT_DATA));
      connection.on('error', (error) => void peer.send(PORT_ERROR, Buffer.from(error.message)));
      connection.on('close', finish);
      return;
    }
    if ((kind !== 'exec' && kind !== 'attach') || rest.length !== 3 || !container) throw new Refusal(404, 'not found');
    let options: RemoteCommandOptions;
    try {
      options = parseStreamQuery(kind, url.searchParams) as RemoteCommandOptions;
    } catch (error) {
      throw new Refusal(400, (error as Error).message);
    }
    // An ephemeral container too: `kubectl debug` attaches to the one it added.
    const containerSpec = [...spec.containers, ...(spec.ephemeralContainers ?? [])].find((c) => c.name === container);
    if (!containerSpec) throw new Refusal(404, `container ${container} is not valid for pod ${podName}`);
    this.checkRunning(dir, spec, container);
    if (kind === 'attach') {
      let stdin: net.Socket | undefined;
      if (options.stdin) {
        if (!containerSpec.stdin) {
          throw new Refusal(400, `container ${container} in pod ${namespace}/${podName} does not keep its stdin open (its spec has no stdin: true): attach -i cannot write to it; attach without -i shows its output, exec -i runs a command with input`);
        }
        try {
          stdin = await connectContainerStdin(dir, container);
        } catch (error) {
          if (error instanceof StdinError) throw new Refusal(400, error.message);
          throw error;
        }
      }
      let ws: WebSocket;
      try {
        ws = await this.upgrade(req, socket, head);
      } catch (error) {
        stdin?.destroy();
        throw error;
      }
      this.context.logger.info({ pod: `${namespace}/${podName}`, container, stdin: options.stdin }, 'attach session');
      // Only a container on a terminal can be resized: under runc with tty: true (pods/runtime/terminal.ts).
      const resize = containerSpec.tty === true && spec.runtime === 'runc' ? (size: TerminalSize) => resizeContainerTerminal(dir, container, size) : undefined;
      runAttachSession(dir, container, new WebSocketPeer(ws, 5), options, stdin, resize);
      return;
    }
    const ws = await this.upgrade(req, socket, head);
    this.context.logger.info({ pod: `${namespace}/${podName}`, container, command: options.command[0], tty: options.tty }, 'exec session');
    const start = () => execInContainer(dir, spec, containerSpec, options.command, { tty: options.tty, stdin: options.stdin });
    runProcessSession(start, options.command[0]!, new WebSocketPeer(ws, 5), options);
  }

  private findPod(namespace: string, name: string, uid: string | null): { dir: string; spec: PodRunSpec } {
    const dir = this.context.findPodDir(namespace, name);
    if (!dir || (uid && path.basename(dir) !== uid)) throw new Refusal(404, `pod ${namespace}/${name} is not running on node ${this.context.nodeName}`);
    try {
      return { dir, spec: readRunSpec(dir) };
    } catch {
      throw new Refusal(404, `pod ${namespace}/${name} is not running on node ${this.context.nodeName}`);
    }
  }

  private checkRunning(dir: string, spec: PodRunSpec, container: string): void {
    const run = readRunState(dir);
    const state = [...(run?.containers ?? []), ...(run?.ephemeralContainers ?? [])].find((c) => c.name === container)?.state;
    if (state && 'running' in state) return;
    const why = !state ? 'it has not started' : 'waiting' in state ? `waiting: ${state.waiting.reason}` : `terminated: ${state.terminated.reason}`;
    throw new Refusal(400, `container ${container} is not running in pod ${spec.namespace}/${spec.name} (${why})`);
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<WebSocket> {
    return new Promise((resolve, reject) => {
      const server = new WebSocketServer({
        noServer: true,
        clientTracking: false,
        perMessageDeflate: false,
        maxPayload: 16 * 1024 * 1024,
        handleProtocols: () => PROTOCOL_V5,
      });
      socket.once('close', () => {
        this.open.delete(socket);
        reject(new Error('the WebSocket handshake failed'));
      });
      server.handleUpgrade(req, socket, head, (ws) => {
        this.open.add(socket);
        resolve(ws);
      });
    });
  }
}
