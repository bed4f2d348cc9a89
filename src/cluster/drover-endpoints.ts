import type { ClusterNetworkSettings } from '../node-protocol/service-network.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { type Authenticator, bearerToken, type UserInfo } from '../apiserver/auth.js';
import { MASTERS_GROUP } from '../apiserver/rbac/types.js';
import { CLUSTER_RECORD_KEY, type ClusterRecord, parseClusterRecord, setClusterValue } from '../config/cluster-record.js';
import { readSealed } from './bootstrap-data.js';
import { checkPublishedValues, computeDrift, publication, publishConfig, readPublished } from '../config/drift.js';
import { ConfigError } from '../config/resolve.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Datastore } from '../datastore/types.js';
import type { ApiServerDirectory } from './apiservers.js';
import { nodeNameOf } from './node-authorization.js';
import { ApiError, errors } from '../apiserver/errors.js';
import { ClientGoneError, decodeBody, readBody, sendError, sendJson } from '../apiserver/http.js';
import { isJsonObject } from '../apiserver/json.js';
import type { KubeObject } from '../apiserver/objects.js';
import { dnsSubdomainProblem } from '../apiserver/validation.js';
import { type ApiClient, CONFIGMAPS, NODES } from '../client/types.js';
import { REGISTRY_PEER_LABEL, REGISTRY_PEER_NAMESPACE } from '../node-protocol/registry-peers.js';
import type { Logger } from '../logging/logger.js';
import { issueCertificate, type KeyPair } from '../security/pki.js';
import { type EtcdMembership, MembershipBusy } from './etcd-membership.js';
import { secretsEqual } from './join-token.js';
import type { NodeRegistry } from './node-registry.js';
import { RegistrationLimiter, registrationSource } from './registration-limits.js';
import type { SecretsEncryption } from './secrets-encryption.js';
import { serveSecretsEncryption } from './secrets-encryption-endpoint.js';
import { CLIENT_CERTIFICATES_PATH, issueUserCertificate, parseUserCertificateRequest } from './user-certificates.js';

/**
 * Drover's own endpoints beside the Kubernetes API, under `/drover/v1/` on the same port (what
 * K3s calls its supervisor; here "supervisor" means only the per-pod process, src/agent/pods):
 * `POST /drover/v1/register` takes the join token and a node's identity, and answers with the
 * node's credential, its serving certificate and the cluster timings it must follow (limited per
 * source: registration-limits.ts); `DELETE /drover/v1/nodes/NAME` (`drover node forget`) frees a
 * node name; the others serve the cluster configuration, its drift, node publications, the
 * bootstrap record, managed etcd membership and the list of live API servers.
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
  /** The agent's serving certificate, from the node CA, naming only this node and its addresses. */
  servingCertificate: string;
  servingKey: string;
  /** What peers' serving certificates are checked against (pod supervisors asking peers). */
  nodeCaCertificate: string;
  /** What callers of the agent's endpoint prove themselves with (the API servers). */
  clientCaCertificate: string;
  /** The cluster's network settings (absent from servers before the pod network: no pod network). */
  network?: ClusterNetworkSettings;
}

/** GET /drover/v1/apiservers: where the API is served (agents remember it to move between servers). */
export interface ApiServersAnswer {
  servers: { url: string; node: string }[];
}

/** The common name of the client certificate API servers present to agents (pods/log). */
export const API_SERVER_CLIENT_NAME = 'system:drover:apiserver';
/** Addresses a node may register: its own IPs, a handful at most. */
const MAX_NODE_ADDRESSES = 8;

export interface DroverEndpointsOptions {
  /** The server token's secret: registers nodes, and alone unlocks the cluster identity. */
  joinSecret: string;
  /** The agent token's secret: registers nodes only. */
  agentSecret: string;
  registry: NodeRegistry;
  client: ApiClient;
  /** Signs agents' serving certificates. */
  nodeCa: KeyPair;
  clientCaCertificatePem: string;
  /** Signs users' client certificates (drover kubeconfig create). */
  clientCa: KeyPair;
  timings: ClusterTimings;
  /** Told to agents at registration: how they wire pods, Services and DNS. */
  network: ClusterNetworkSettings;
  logger: Logger;
  authenticator: Authenticator;
  datastore: Datastore;
  events: EventRecorder;
  directory: ApiServerDirectory;
  /** Present when this server runs a managed etcd member: adds members for joining servers. */
  etcdMembers?: Pick<EtcdMembership, 'add' | 'clientUrls'>;
  /** Per-source registration limits; defaults to the documented ones. */
  limiter?: RegistrationLimiter;
  /** `drover secrets-encrypt`: absent on a server that serves no Kubernetes API. */
  secretsEncryption?: SecretsEncryption;
}

/** Agents send a UUID and 32 hex characters; this is generous room and a bound on what is stored. */
const MAX_REGISTRATION_FIELD = 256;

function stringField(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (typeof value !== 'string' || !value) throw errors.badRequest(`registration: "${field}" is required`);
  if (value.length > MAX_REGISTRATION_FIELD) {
    throw errors.badRequest(`registration: "${field}" is longer than ${MAX_REGISTRATION_FIELD} characters`);
  }
  return value;
}

async function readJsonObject(req: IncomingMessage, what: string): Promise<Record<string, unknown>> {
  const body = decodeBody(await readBody(req), req.headers['content-type']);
  if (!isJsonObject(body)) throw errors.badRequest(`${what}: body must be a JSON object`);
  return body;
}

function requireJoinSecret(options: DroverEndpointsOptions, req: IncomingMessage): void {
  const token = bearerToken(req);
  if (!token || !secretsEqual(token, options.joinSecret)) throw errors.unauthorized();
}

async function requireAdmin(options: DroverEndpointsOptions, req: IncomingMessage): Promise<UserInfo> {
  const user = await options.authenticator.authenticate(req);
  if (!user) throw errors.unauthorized();
  if (!user.groups.includes(MASTERS_GROUP)) {
    throw errors.forbidden(`User "${user.name}" is not a cluster admin (not in group ${MASTERS_GROUP}; groups: ${user.groups.join(', ')})`);
  }
  return user;
}

async function readRecord(datastore: Datastore): Promise<ClusterRecord | undefined> {
  const kv = await datastore.get(CLUSTER_RECORD_KEY);
  return kv ? parseClusterRecord(kv.value) : undefined;
}

/** Cluster configuration endpoints: the record, live changes, drift, node publications. */
async function serveConfig(options: DroverEndpointsOptions, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  if (path === '/drover/v1/cluster-config' && req.method === 'GET') {
    await requireAdmin(options, req);
    sendJson(res, 200, (await readRecord(options.datastore)) ?? { values: {} });
    return;
  }
  if (path === '/drover/v1/cluster-config' && req.method === 'PUT') {
    const user = await requireAdmin(options, req);
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
    const name = stringField(body, 'name');
    const peerUrl = stringField(body, 'peerURL');
    // The joiner's --initial-cluster is built from these: no room for separators.
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/.test(name)) throw errors.badRequest(`etcd member: "name" must be letters, digits, ".", "_" and "-", not ${JSON.stringify(name)}`);
    if (!/^https:\/\/[^/?#\s,=]+:\d+$/.test(peerUrl)) throw errors.badRequest(`etcd member: "peerURL" must be https://host:port, not ${JSON.stringify(peerUrl)}`);
    try {
      const grant = await options.etcdMembers.add(name, peerUrl);
      sendJson(res, 200, grant);
    } catch (error) {
      if (!(error instanceof MembershipBusy)) throw error;
      // A temporary refusal by etcd: the joiner waits and asks again (not a server error).
      options.logger.debug({ member: name, reason: error.message }, 'etcd refused a member for now; the joiner will retry');
      res.setHeader('Retry-After', String(error.retryAfterSeconds));
      throw new ApiError(503, 'ServiceUnavailable', error.message, { retryAfterSeconds: error.retryAfterSeconds });
    }
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
    if (!(await options.authenticator.authenticate(req))) throw errors.unauthorized();
    const answer: ApiServersAnswer = { servers: (await options.directory.live()).map((r) => ({ url: r.url, node: r.node })) };
    sendJson(res, 200, answer);
    return;
  }
  if (path === '/drover/v1/config/drift' && req.method === 'GET') {
    await requireAdmin(options, req);
    sendJson(res, 200, computeDrift(await readPublished(options.datastore), await readRecord(options.datastore)));
    return;
  }
  if (path === '/drover/v1/node-config' && req.method === 'PUT') {
    const user = await options.authenticator.authenticate(req);
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

/**
 * `drover node forget NAME`: remove the name's registration (its password binding and credential,
 * on every server through the registry's watch), then its Node object if there is one: a node
 * forgotten is gone from the cluster, and the next host to register the name takes it.
 */
async function forgetNode(options: DroverEndpointsOptions, req: IncomingMessage, res: ServerResponse, encoded: string): Promise<void> {
  const user = await requireAdmin(options, req);
  let nodeName: string;
  try {
    nodeName = decodeURIComponent(encoded);
  } catch {
    throw errors.badRequest(`invalid node name "${encoded.slice(0, 80)}"`);
  }
  const problem = dnsSubdomainProblem(nodeName);
  if (problem) throw errors.badRequest(`invalid node name "${nodeName.slice(0, 80)}": ${problem}`);
  const record = await options.registry.forget(nodeName);
  let nodeDeleted = false;
  try {
    await options.client.delete(NODES, undefined, nodeName);
    nodeDeleted = true;
  } catch (error) {
    if (!(error instanceof ApiError && error.code === 404)) throw error;
  }
  if (!record && !nodeDeleted) {
    throw new ApiError(404, 'NotFound', `node "${nodeName}" has no registration and no Node object`, { name: nodeName, group: '', kind: 'nodes' });
  }
  const advertisementDeleted = await deleteRegistryAdvertisement(options.client, nodeName);
  const message =
    `Node name ${nodeName} forgotten by ${user.name}: ` +
    `${record ? `its registration (node id ${record.nodeId}) and credential removed` : 'it had no registration'}` +
    `${nodeDeleted ? ', its Node object deleted' : ''}` +
    `${advertisementDeleted ? ', its embedded-registry advertisement deleted' : ''}; the next host to register the name takes it`;
  options.logger.info({ node: nodeName, nodeId: record?.nodeId, nodeDeleted, advertisementDeleted, by: user.name }, 'node name forgotten');
  await options.events.record({ kind: 'Namespace', name: 'kube-system', namespace: 'kube-system' }, 'Normal', 'NodeForgotten', message);
  sendJson(res, 200, {
    node: nodeName,
    registrationRemoved: Boolean(record),
    ...(record ? { nodeId: record.nodeId, registeredAt: record.registeredAt } : {}),
    nodeDeleted,
    advertisementDeleted,
  });
}

/**
 * The forgotten node's embedded-registry advertisement (docs/registry.md): peers ignore it once
 * the Node is gone, and with the name free it goes too. Only an object labelled as an
 * advertisement is deleted: a ConfigMap of the same name put there by anyone else stays.
 */
async function deleteRegistryAdvertisement(client: ApiClient, nodeName: string): Promise<boolean> {
  let found: KubeObject | undefined;
  try {
    found = await client.get(CONFIGMAPS, REGISTRY_PEER_NAMESPACE, nodeName);
  } catch (error) {
    if (error instanceof ApiError && error.code === 404) return false;
    throw error;
  }
  if (!found || found.metadata.labels?.[REGISTRY_PEER_LABEL] !== 'true') return false;
  try {
    await client.delete(CONFIGMAPS, REGISTRY_PEER_NAMESPACE, nodeName, { preconditions: { uid: found.metadata.uid! } });
    return true;
  } catch (error) {
    if (error instanceof ApiError && (error.code === 404 || error.code === 409)) return false;
    throw error;
  }
}

/** `drover kubeconfig create`: a user's client certificate from the client CA, for admins only, recorded. */
async function issueClientCertificate(options: DroverEndpointsOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const admin = await requireAdmin(options, req);
  const issued = await issueUserCertificate(options.clientCa, parseUserCertificateRequest(await readJsonObject(req, 'client certificate')));
  // No revocation exists: the Event is the record of who holds what, until when.
  const message =
    `Client certificate for user ${JSON.stringify(issued.name)} (groups: ${issued.groups.join(', ') || 'none'}) issued by ${admin.name}: ` +
    `serial ${issued.serialNumber}, valid until ${issued.notAfter}`;
  await options.events.record({ kind: 'Namespace', name: 'kube-system', namespace: 'kube-system' }, 'Normal', 'ClientCertificateIssued', message);
  sendJson(res, 201, issued);
}

/** The IP addresses a node registers (its serving certificate names them): IP literals only. */
function registrationAddresses(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > MAX_NODE_ADDRESSES) {
    throw errors.badRequest(`registration: "addresses" must be a list of at most ${MAX_NODE_ADDRESSES} IP addresses`);
  }
  for (const address of value) {
    if (typeof address !== 'string' || isIP(address) === 0) {
      throw errors.badRequest(`registration: "addresses" holds ${JSON.stringify(address).slice(0, 80)}, which is not an IP address`);
    }
  }
  return [...new Set(value as string[])];
}

const NODE_PATH = /^\/drover\/v1\/nodes\/([^/]+)$/;

export function droverEndpoints(options: DroverEndpointsOptions) {
  const limiter = options.limiter ?? new RegistrationLimiter();
  return async (req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> => {
    if (path !== '/drover/v1/register') {
      if (!path.startsWith('/drover/v1/')) return false;
      try {
        const node = NODE_PATH.exec(path);
        if (node && req.method === 'DELETE') await forgetNode(options, req, res, node[1]!);
        else if (path === CLIENT_CERTIFICATES_PATH && req.method === 'POST') await issueClientCertificate(options, req, res);
        else if (await serveSecretsEncryption({ ...options, encryption: options.secretsEncryption }, req, res, path)) return true;
        else await serveConfig(options, req, res, path);
      } catch (error) {
        if (error instanceof ClientGoneError) {
          res.destroy();
        } else if (error instanceof ApiError) {
          sendError(res, error);
        } else {
          options.logger.error({ err: error, path }, 'unexpected error while serving a /drover/v1 request');
          sendError(res, errors.internal('an unexpected error occurred while serving the request; the server log has the details'));
        }
      }
      return true;
    }
    const source = registrationSource(req.socket.remoteAddress);
    try {
      if (req.method !== 'POST') throw errors.methodNotAllowed();
      // The cheap checks first: the source's failure allowance, then the token; the scrypt hash
      // (register) only for a caller holding a join token, and a new name only within its allowance.
      limiter.admit(source);
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
      const addresses = registrationAddresses(body.addresses);
      const agentPort = body.agentPort;
      if (agentPort !== undefined && !(Number.isInteger(agentPort) && (agentPort as number) > 0 && (agentPort as number) < 65536)) {
        throw errors.badRequest('registration: "agentPort" must be a port number (1-65535)');
      }
      if (!options.registry.isKnown(nodeName)) limiter.newName(source, nodeName);
      const credential = await options.registry.register(
        { nodeName, nodeId, password, addresses, ...(agentPort !== undefined ? { agentPort: agentPort as number } : {}) },
        async () => (await options.client.get(NODES, undefined, nodeName))?.metadata.uid,
      );
      // From the node CA, which no API client trusts: whatever a node does with it, it is never
      // a certificate for an API server, nor for another node (only this name and these addresses).
      const serving = await issueCertificate(options.nodeCa, {
        commonName: `system:node:${nodeName}`,
        organization: 'system:nodes',
        subjectAltNames: [nodeName, ...addresses],
        // Server and client: the node also presents it to its peers' embedded registries (docs/registry.md).
        usage: 'peer',
      });
      options.logger.info({ node: nodeName, nodeId }, 'node registered');
      const response: RegistrationResponse = {
        nodeName,
        token: credential,
        timings: options.timings,
        network: options.network,
        servingCertificate: serving.certificatePem,
        servingKey: serving.privateKeyPem,
        nodeCaCertificate: options.nodeCa.certificatePem,
        clientCaCertificate: options.clientCaCertificatePem,
      };
      sendJson(res, 200, response);
    } catch (error) {
      if (error instanceof ApiError) {
        if (error.code === 401 || error.code === 403) limiter.failed(source);
        if (error.code === 403) options.logger.warn({ source, reason: error.message }, 'node registration refused');
        if (error.code === 429) {
          // Debug only: a flood of refused requests must not become a flood of log lines.
          options.logger.debug({ source, reason: error.message }, 'node registration limited');
          res.setHeader('Retry-After', String(error.details?.retryAfterSeconds ?? 1));
        }
        sendError(res, error);
      } else if (error instanceof ClientGoneError) {
        res.destroy();
      } else {
        options.logger.error({ err: error }, 'node registration failed');
        sendError(res, errors.internal(error instanceof Error ? error.message : String(error)));
      }
    }
    return true;
  };
}
