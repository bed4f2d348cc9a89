import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, errors } from '../apiserver/errors.js';
import type { PodLogParams } from '../apiserver/handler.js';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import type { ApiClient } from '../client/types.js';
import type { AgentEndpoint } from '../cluster/node-registry.js';
import type { Logger } from '../logging/logger.js';
import { type AgentClientCredentials, agentTlsOptions } from './agent-tls.js';

/**
 * `kubectl logs` through the API server: find the pod's node, and stream from that node's agent
 * (`/containerLogs/...` on its HTTPS port, as kubelet serves it). The server connects only to the
 * address and port the node registered (not to whatever its Node status claims), proves itself
 * with a client certificate from the client CA, and accepts only that node's serving certificate
 * from the node CA. A failed connection is reported as "agent unreachable", nothing more: a node
 * cannot use the server to probe addresses and read the answers.
 */

export interface PodLogProxyOptions extends AgentClientCredentials {
  client: ApiClient;
  registry: { agentEndpoint(nodeName: string): AgentEndpoint | undefined };
  logger: Logger;
}

/** The most of an agent's error answer relayed to the client. */
const MAX_RELAYED_ERROR = 1024;

export function podLogProxy(options: PodLogProxyOptions) {
  return async (pod: KubeObject, params: PodLogParams, req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const nodeName = getPath(pod, ['spec', 'nodeName']);
    const podName = `${pod.metadata.namespace}/${pod.metadata.name}`;
    if (typeof nodeName !== 'string' || !nodeName) {
      throw errors.badRequest(`pod ${podName} is not scheduled to a node yet: no logs`);
    }
    const endpoint = options.registry.agentEndpoint(nodeName);
    const ip = endpoint?.addresses[0];
    if (!endpoint || !ip) {
      throw new ApiError(503, 'ServiceUnavailable', `node ${nodeName} registered no agent endpoint; cannot fetch logs of ${podName}`);
    }
    const port = endpoint.port;
    const query = new URLSearchParams();
    if (params.follow) query.set('follow', 'true');
    if (params.previous) query.set('previous', 'true');
    if (params.tailLines !== undefined) query.set('tailLines', String(params.tailLines));
    if (params.limitBytes !== undefined) query.set('limitBytes', String(params.limitBytes));
    const containers = (getPath(pod, ['spec', 'containers']) as { name: string }[] | undefined) ?? [];
    const container = params.container ?? containers[0]?.name ?? '';
    const path = `/containerLogs/${encodeURIComponent(pod.metadata.namespace ?? 'default')}/${encodeURIComponent(pod.metadata.name!)}/${encodeURIComponent(container)}`;
    await new Promise<void>((resolve, reject) => {
      const upstream = https.request(
        {
          host: ip,
          port,
          path: `${path}${query.size ? `?${query}` : ''}`,
          method: 'GET',
          ...agentTlsOptions(options, nodeName, ip),
          timeout: params.follow ? 0 : 30_000,
        },
        (answer) => {
          if (answer.statusCode !== 200) {
            const chunks: Buffer[] = [];
            answer.on('data', (c: Buffer) => chunks.push(c));
            answer.on('end', () => {
              const text = Buffer.concat(chunks).toString('utf8').trim().slice(0, MAX_RELAYED_ERROR);
              reject(new ApiError(answer.statusCode === 404 ? 404 : 400, answer.statusCode === 404 ? 'NotFound' : 'BadRequest', text || `agent on ${nodeName} answered ${answer.statusCode}`));
            });
            return;
          }
          res.writeHead(200, { 'Content-Type': 'text/plain', 'Transfer-Encoding': 'chunked' });
          res.flushHeaders();
          answer.pipe(res);
          answer.on('end', () => resolve());
          answer.on('error', () => resolve());
        },
      );
      // The client went away (kubectl logs -f interrupted): stop streaming from the agent.
      res.on('close', () => upstream.destroy());
      req.on('aborted', () => upstream.destroy());
      upstream.on('timeout', () => upstream.destroy(new Error('timed out')));
      upstream.on('error', (error) => {
        if (res.headersSent) {
          if (!res.writableEnded) res.end();
          resolve();
          return;
        }
        // The detail stays in the server's log; the client learns only that the agent is unreachable.
        options.logger.warn({ err: error, node: nodeName, pod: podName, address: `${ip}:${port}` }, 'could not reach the agent for logs');
        reject(new ApiError(503, 'ServiceUnavailable', `agent unreachable: node ${nodeName}, logs of ${podName}`));
      });
      upstream.end();
    });
  };
}
