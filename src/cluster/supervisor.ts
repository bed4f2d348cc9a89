import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Authenticator, bearerToken, type UserInfo } from '../apiserver/auth.js';
import { CLUSTER_RECORD_KEY, type ClusterRecord, parseClusterRecord, setClusterValue } from '../config/cluster-record.js';
import { readSealed } from './bootstrap-data.js';
import { checkPublishedValues, computeDrift, publication, publishConfig, readPublished } from '../config/drift.js';
import { ConfigError } from '../config/resolve.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Datastore } from '../datastore/types.js';
import type { ApiServerDirectory } from './apiservers.js';
import { nodeNameOf } from './node-authorization.js';
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
  /** Agents fence their singletons after this much time without a confirmed renewal. */
  fencingTimeoutMs: number;
}

export interface RegistrationResponse {
  nodeName: string;
  token: string;
  timings: ClusterTimings;
  servingCertificate: string;
  servingKey: string;
}

export interface SupervisorOptions {
  /** The server token's secret: registers nodes, and alone unlocks the cluster identity. */
  joinSecret: string;
  /** The agent token's secret: registers nodes only. */
  agentSecret: string;
  registry: NodeRegistry;
  client: ApiClient;
  ca: KeyPair;
  timings: ClusterTimings;
  logger: Logger;
  authenticator: Authenticator;
  datastore: Datastore;
  events: EventRecorder;
  directory: ApiServerDirectory;
  /** Present when this server runs a managed etcd member: adds members for joining servers. */
  etcdMembers?: { add(name: string, peerUrl: string): Promise<string>; clientUrls(): Promise<string[]> };
}

function stringField(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (typeof value !== 'string' || !value) throw errors.badRequest(`registration: "${field}" is required`);
  return value;
}

async function readJsonObject(req: IncomingMessage, what: string): Promise<Record<string, unknown>> {
  const body = decodeBody(await readBody(req), req.headers['content-type']);
  if (!isJsonObject(body)) throw errors.badRequest(`${what}: body must be a JSON object`);
  return body;
}

function requireJoinSecret(options: SupervisorOptions, req: IncomingMessage): void {
  const token = bearerToken(req);
  if (!token || !secretsEqual(token, options.joinSecret)) throw errors.unauthorized();
}

function requireAdmin(options: SupervisorOptions, req: IncomingMessage): UserInfo {
  const user = options.authenticator.authenticate(req);
  if (!user) throw errors.unauthorized();
  if (!user.groups.includes('system:masters')) throw errors.forbidden(`User "${user.name}" is not a cluster admin`);
  return user;
}

async function readRecord(datastore: Datastore): Promise<ClusterRecord | undefined> {
  const kv = await datastore.get(CLUSTER_RECORD_KEY);
  return kv ? parseClusterRecord(kv.value) : undefined;
}

/** Cluster configuration endpoints: the record, live changes, drift, node publications. */
async function serveConfig(options: SupervisorOptions, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  if (path === '/drover/v1/cluster-config' && req.method === 'GET') {
    requireAdmin(options, req);
    sendJson(res, 200, (await readRecord(options.datastore)) ?? { values: {} });
    return;
  }
  if (path === '/drover/v1/cluster-config' && req.method === 'PUT') {
    const user = requireAdmin(options, req);
    const body = await readJsonObject(req, 'cluster config');
    const key = stringField(body, 'key');
    const value = stringField(body, 'value');
    let result: { previous: string | undefined; value: string };
    try {
      result = await setClusterValue(options.datastore, key, value, user.name);
    } catch (error) {
      if (error instanceof ConfigError) throw new ApiError(422, 'Invalid', error.problems.join('; '));
      throw error;
    }
    const message = `Cluster setting ${key} changed from ${result.previous ?? '(unset)'} to ${result.value} by ${user.name}; servers still running with the old value show as drifted and must be restarted with the new value`;
    await options.events.record({ kind: 'Namespace', name: 'kube-system', namespace: 'kube-system' }, 'Normal', 'ClusterConfigChanged', message);
    sendJson(res, 200, { key, ...result });
    return;
  }
  if (path === '/drover/v1/bootstrap' && req.method === 'GET') {
    // Servers only: the join secret (a server token). The record stays sealed; the caller opens it.
    requireJoinSecret(options, req);
    const sealed = await readSealed(options.datastore, options.joinSecret);
    if (!sealed) throw errors.pathNotFound();
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(sealed);
    return;
  }
  if (path === '/drover/v1/etcd/members' && req.method === 'POST') {
    requireJoinSecret(options, req);
    if (!options.etcdMembers) throw errors.badRequest('this server does not run a managed etcd member; join a server that does');
    const body = await readJsonObject(req, 'etcd member');
    const initialCluster = await options.etcdMembers.add(stringField(body, 'name'), stringField(body, 'peerURL'));
    options.logger.info({ member: body.name, peerURL: body.peerURL }, 'added an etcd member');
    sendJson(res, 200, { initialCluster });
    return;
  }
  if (path === '/drover/v1/etcd/endpoints' && req.method === 'GET') {
    requireJoinSecret(options, req);
    if (!options.etcdMembers) throw errors.badRequest('this server does not run a managed etcd member; join a server that does');
    sendJson(res, 200, { endpoints: await options.etcdMembers.clientUrls() });
    return;
  }
  if (path === '/drover/v1/apiservers' && req.method === 'GET') {
    // Any authenticated caller (agents, the admin): where else the API is served.
    if (!options.authenticator.authenticate(req)) throw errors.unauthorized();
    sendJson(res, 200, { servers: (await options.directory.live()).map((r) => ({ url: r.url, node: r.node })) });
    return;
  }
  if (path === '/drover/v1/config/drift' && req.method === 'GET') {
    requireAdmin(options, req);
    sendJson(res, 200, computeDrift(await readPublished(options.datastore), await readRecord(options.datastore)));
    return;
  }
  if (path === '/drover/v1/node-config' && req.method === 'PUT') {
    const user = options.authenticator.authenticate(req);
    const node = user ? nodeNameOf(user) : undefined;
    if (!node) throw errors.unauthorized();
    const body = await readJsonObject(req, 'node config');
    const { values, problems } = checkPublishedValues(isJsonObject(body.values) ? body.values : {});
    if (problems.length) throw errors.badRequest(`node config of ${node} refused: ${problems.join('; ')}`);
    await publishConfig(options.datastore, publication(node, 'agent', values));
    sendJson(res, 200, { node });
    return;
  }
  throw errors.pathNotFound();
}

export function supervisorRoutes(options: SupervisorOptions) {
  return async (req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> => {
    if (path !== '/drover/v1/register') {
      if (!path.startsWith('/drover/v1/')) return false;
      try {
        await serveConfig(options, req, res, path);
      } catch (error) {
        sendError(res, error instanceof ApiError ? error : errors.internal(error instanceof Error ? error.message : String(error)));
      }
      return true;
    }
    try {
      if (req.method !== 'POST') throw errors.methodNotAllowed();
      const token = bearerToken(req);
      if (!token || !(secretsEqual(token, options.joinSecret) || secretsEqual(token, options.agentSecret))) {
        throw errors.unauthorized();
      }
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
