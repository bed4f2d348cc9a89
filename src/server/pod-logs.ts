import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, errors } from '../apiserver/errors.js';
import type { PodLogParams } from '../apiserver/handler.js';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import { type ApiClient, NODES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * `kubectl logs` through the API server: find the pod's node, and stream from that node's agent
 * (`/containerLogs/...` on its HTTPS port, as kubelet serves it). The API server proves itself
 * to the agent with a client certificate from the cluster CA, and checks the agent's serving
 * certificate against the same CA.
 */

export interface PodLogProxyOptions {
  client: ApiClient;
  caPem: string;
  clientCertificatePem: string;
  clientKeyPem: string;
  logger: Logger;
}

export function podLogProxy(options: PodLogProxyOptions) {
  return async (pod: KubeObject, params: PodLogParams, req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const nodeName = getPath(pod, ['spec', 'nodeName']);
    const podName = `${pod.metadata.namespace}/${pod.metadata.name}`;
    if (typeof nodeName !== 'string' || !nodeName) {
      throw errors.badRequest(`pod ${podName} is not scheduled to a node yet: no logs`);
    }
    const node = await options.client.get(NODES, undefined, nodeName);
    const addresses = (getPath(node ?? { metadata: {} }, ['status', 'addresses']) as { type?: string; address?: string }[] | undefined) ?? [];
    const ip = addresses.find((a) => a.type === 'InternalIP')?.address;
    const port = node ? getPath(node, ['status', 'daemonEndpoints', 'kubeletEndpoint', 'Port']) : undefined;
    if (!ip || typeof port !== 'number') {
      throw new ApiError(503, 'ServiceUnavailable', `node ${nodeName} does not publish an agent endpoint; cannot fetch logs of ${podName}`);
    }
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
          ca: options.caPem,
          cert: options.clientCertificatePem,
          key: options.clientKeyPem,
          // The agent's certificate names its IP; node names need not resolve.
          servername: '',
          checkServerIdentity: () => undefined,
          timeout: params.follow ? 0 : 30_000,
        },
        (answer) => {
          if (answer.statusCode !== 200) {
            const chunks: Buffer[] = [];
            answer.on('data', (c: Buffer) => chunks.push(c));
            answer.on('end', () => {
              const text = Buffer.concat(chunks).toString('utf8').trim();
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
        options.logger.warn({ err: error, node: nodeName, pod: podName }, 'could not reach the agent for logs');
        reject(new ApiError(503, 'ServiceUnavailable', `could not reach the agent on node ${nodeName} (${ip}:${port}) for logs of ${podName}: ${error.message}`));
      });
      upstream.end();
    });
  };
}
