import type { IncomingMessage, ServerResponse } from 'node:http';
import { bearerToken } from '../apiserver/auth.js';
import { ApiError, errors } from '../apiserver/errors.js';
import { decodeBody, readBody, sendError, sendJson } from '../apiserver/http.js';
import { isJsonObject } from '../apiserver/json.js';
import { dnsSubdomainProblem } from '../apiserver/validation.js';
import { type ApiClient, NODES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { issueCertificate, type KeyPair } from '../security/pki.js';
import { secretsEqual } from './join-token.js';
import type { NodeRegistry } from './node-registry.js';

/**
 * Drover's own endpoints beside the Kubernetes API, on the same port (as K3s' supervisor):
 * `POST /drover/v1/register` takes the join token and a node's identity, and answers with the
 * node's credential, its serving certificate and the cluster timings it must follow.
 */

export interface ClusterTimings {
  nodeLeaseRenewIntervalMs: number;
  nodeMonitorGracePeriodMs: number;
}

export interface RegistrationResponse {
  nodeName: string;
  token: string;
  timings: ClusterTimings;
  servingCertificate: string;
  servingKey: string;
}

export interface SupervisorOptions {
  joinSecret: string;
  registry: NodeRegistry;
  client: ApiClient;
  ca: KeyPair;
  timings: ClusterTimings;
  logger: Logger;
}

function stringField(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (typeof value !== 'string' || !value) throw errors.badRequest(`registration: "${field}" is required`);
  return value;
}

export function supervisorRoutes(options: SupervisorOptions) {
  return async (req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> => {
    if (path !== '/drover/v1/register') return false;
    try {
      if (req.method !== 'POST') throw errors.methodNotAllowed(req.method ?? '', path);
      const token = bearerToken(req);
      if (!token || !secretsEqual(token, options.joinSecret)) throw errors.unauthorized();
      const body = decodeBody(await readBody(req), req.headers['content-type']);
      if (!isJsonObject(body)) throw errors.badRequest('registration: body must be a JSON object');
      const nodeName = stringField(body, 'nodeName');
      const nameProblem = dnsSubdomainProblem(nodeName);
      if (nameProblem) throw errors.badRequest(`registration: invalid node name "${nodeName}": ${nameProblem}`);
      const nodeId = stringField(body, 'nodeId');
      const password = stringField(body, 'password');
      const addresses = Array.isArray(body.addresses) ? body.addresses.filter((a): a is string => typeof a === 'string') : [];
      const credential = await options.registry.register({ nodeName, nodeId, password }, async () =>
        Boolean(await options.client.get(NODES, undefined, nodeName)),
      );
      const serving = await issueCertificate(options.ca, {
        commonName: `system:node:${nodeName}`,
        organization: 'system:nodes',
        subjectAltNames: ['localhost', '127.0.0.1', '::1', nodeName, ...addresses],
        usage: 'server',
      });
      options.logger.info({ node: nodeName, nodeId }, 'node registered');
      const response: RegistrationResponse = {
        nodeName,
        token: credential,
        timings: options.timings,
        servingCertificate: serving.certificatePem,
        servingKey: serving.privateKeyPem,
      };
      sendJson(res, 200, response);
    } catch (error) {
      if (error instanceof ApiError) {
        if (error.code === 403) options.logger.warn({ reason: error.message }, 'node registration refused');
        sendError(res, error);
      } else {
        options.logger.error({ err: error }, 'node registration failed');
        sendError(res, errors.internal(error instanceof Error ? error.message : String(error)));
      }
    }
    return true;
  };
}
