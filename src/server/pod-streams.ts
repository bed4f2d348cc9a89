import { type ClientOptions, WebSocket } from 'ws';
import { ApiError, errors } from '../apiserver/errors.js';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import { PROTOCOL_V5 } from '../apiserver/streaming/channels.js';
import type { StreamKind } from '../apiserver/streaming/options.js';
import { type PodStreamBackend } from '../apiserver/streaming/upgrade.js';
import { WebSocketPeer } from '../apiserver/streaming/peers.js';
import type { AgentEndpoint } from '../cluster/node-registry.js';
import type { Logger } from '../logging/logger.js';
import { type AgentClientCredentials, agentTlsOptions } from './agent-tls.js';

/**
 * `kubectl exec`/`attach`/`cp`/`port-forward` through the API server: once the API server has
 * authorized the session and checked the pod, it opens a WebSocket (channel protocol v5) to the
 * pod's agent, as it fetches logs: only to the address and port the node registered, proving
 * itself with its client certificate from the client CA, accepting only that node's serving
 * certificate from the node CA. The agent's paths are kubelet's: `/exec/<ns>/<pod>/<container>`,
 * `/attach/…`, `/portForward/<ns>/<pod>` (one connection per session, `ports=<port>`).
 */

export interface PodStreamProxyOptions extends AgentClientCredentials {
  registry: { agentEndpoint(nodeName: string): AgentEndpoint | undefined };
  logger: Logger;
}

/** How long the agent may take to accept a session. */
const AGENT_HANDSHAKE_TIMEOUT_MS = 15_000;
/** The most of an agent's refusal relayed to the client. */
const MAX_RELAYED_ERROR = 1024;

export function podStreamProxy(options: PodStreamProxyOptions): PodStreamBackend {
  return {
    dial(pod: KubeObject, kind: StreamKind, query: URLSearchParams) {
      const nodeName = getPath(pod, ['spec', 'nodeName']);
      const podName = `${pod.metadata.namespace}/${pod.metadata.name}`;
      if (typeof nodeName !== 'string' || !nodeName) throw errors.badRequest(`pod ${podName} does not have a host assigned`);
      const endpoint = options.registry.agentEndpoint(nodeName);
      const ip = endpoint?.addresses[0];
      if (!endpoint || !ip) {
        throw new ApiError(503, 'ServiceUnavailable', `node ${nodeName} registered no agent endpoint; cannot reach pod ${podName}`);
      }
      const ns = encodeURIComponent(pod.metadata.namespace ?? 'default');
      const name = encodeURIComponent(pod.metadata.name ?? '');
      const agentQuery = new URLSearchParams(query);
      agentQuery.delete('container');
      if (pod.metadata.uid) agentQuery.set('podUID', pod.metadata.uid);
      const path =
        kind === 'portforward'
          ? `/portForward/${ns}/${name}`
          : `/${kind}/${ns}/${name}/${encodeURIComponent(query.get('container') ?? '')}`;
      const host = ip.includes(':') ? `[${ip}]` : ip;
      return new Promise((resolve, reject) => {
        const ws = new WebSocket(`wss://${host}:${endpoint.port}${path}?${agentQuery}`, [PROTOCOL_V5], {
          // Handed to tls.connect as they are (ws's typing of checkServerIdentity is not node's).
          ...(agentTlsOptions(options, nodeName, ip) as unknown as ClientOptions),
          handshakeTimeout: AGENT_HANDSHAKE_TIMEOUT_MS,
          perMessageDeflate: false,
          maxPayload: 16 * 1024 * 1024,
        });
        ws.once('open', () => {
          if (ws.protocol !== PROTOCOL_V5) {
            ws.terminate();
            reject(new ApiError(502, 'InternalError', `the agent on ${nodeName} answered ${kind} without the ${PROTOCOL_V5} protocol`));
            return;
          }
          resolve(new WebSocketPeer(ws, 5));
        });
        ws.once('unexpected-response', (_request, answer) => {
          ws.removeAllListeners('error');
          ws.on('error', () => undefined);
          const chunks: Buffer[] = [];
          answer.on('data', (c: Buffer) => chunks.push(c));
          answer.on('end', () => {
            ws.terminate();
            const text = Buffer.concat(chunks).toString('utf8').trim().slice(0, MAX_RELAYED_ERROR);
            const code = answer.statusCode ?? 502;
            // The agent's refusals (container not running, port not open …) are the client's to read.
            reject(
              code === 404
                ? new ApiError(404, 'NotFound', text || `pod ${podName} is not running on node ${nodeName}`, {})
                : new ApiError(code >= 400 && code < 500 ? 400 : 503, code >= 400 && code < 500 ? 'BadRequest' : 'ServiceUnavailable', text || `agent on ${nodeName} answered ${code}`),
            );
          });
        });
        ws.once('error', (error) => {
          // The detail stays in the server's log; the client learns only that the agent is unreachable.
          options.logger.warn({ err: error, node: nodeName, pod: podName, address: `${ip}:${endpoint.port}` }, `could not reach the agent for ${kind}`);
          reject(new ApiError(503, 'ServiceUnavailable', `agent unreachable: node ${nodeName}, ${kind} for pod ${podName}`));
        });
      });
    },
  };
}
