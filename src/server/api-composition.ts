import path from 'node:path';
import { FlowController } from '../apiserver/flow-control/dispatcher.js';
import { serviceNetworkFromSettings } from './service-network.js';
import { TokenAuthenticator, UnionAuthenticator } from '../apiserver/auth.js';
import { X509Authenticator } from '../apiserver/x509-auth.js';
import { RbacAuthorizer } from '../apiserver/rbac/authorizer.js';
import { ApiError, errors } from '../apiserver/errors.js';
import { RESOURCES } from '../apiserver/kinds/index.js';
import { type MetricsSource, metricsDefinitions } from '../apiserver/kinds/metrics.js';
import { OpenApiDocuments } from '../apiserver/openapi.js';
import { CRD_DEFINITION } from '../apiserver/extensions/crd-kind.js';
import { CrdServing } from '../apiserver/extensions/crd-serving.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../apiserver/resources.js';
import { ApiServer } from '../apiserver/server.js';
import { ObjectStore } from '../apiserver/storage.js';
import { LocalClient } from '../client/local.js';
import { ApiServerDirectory } from '../cluster/apiservers.js';
import { etcdMembership } from '../cluster/etcd-membership.js';
import { NodeAuthorizer, NodeRestrictionAdmission } from '../cluster/node-authorization.js';
import { NodeConfigGraph } from '../cluster/node-graph.js';
import { NodeRegistry } from '../cluster/node-registry.js';
import { RbacCache } from '../cluster/rbac-cache.js';
import type { SecretsEncryption } from '../cluster/secrets-encryption.js';
import { reconcileDefaultRbac } from '../cluster/rbac-defaults.js';
import { reconcileBuiltInRuntimeClasses } from '../cluster/runtime-class-defaults.js';
import { API_SERVER_CLIENT_NAME, droverEndpoints } from '../cluster/drover-endpoints.js';
import type { ServerSettings } from '../config/schema.js';
import type { DerivedTimings } from '../config/timings.js';
import { EventRecorder } from '../controllers/events.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import { ensureServingMaterial, issueCertificate, servingNames } from '../security/pki.js';
import { versionInfo } from '../version.js';
import type { AgentClientCredentials } from './agent-tls.js';
import type { ClusterIdentity } from './bootstrap.js';
import type { SelectedDatastore } from './datastore-selection.js';
import { podLogProxy } from './pod-logs.js';
import { resourceMetricsSource } from './resource-metrics.js';
import { podStreamProxy } from './pod-streams.js';
import { type ServiceAccountSetup, setUpServiceAccounts } from './service-accounts.js';
import { RenewalTracker } from '../apiserver/renewal-tracker.js';
import { NODE_LEASE_NAMESPACE } from '../node-protocol/names.js';

/**
 * The API server and what it serves, not yet listening: the object store and resources, the
 * serving certificate, authentication (the admin token, node credentials, ServiceAccount tokens), authorization (the
 * node authorizer, then RBAC, with the default policy reconciled) and node admission, Drover's own /drover/v1 endpoints (registration, etcd membership, drift …), pod logs
 * fetched from agents, and readiness. Also the in-process client, node registry and server
 * directory that the controllers and the embedded agent share.
 */

export interface ApiCompositionInput {
  settings: ServerSettings;
  timings: DerivedTimings;
  /** The datastore to serve from (instrumented when metrics are on). */
  datastore: Datastore;
  /** Which datastore was selected: a managed etcd member answers etcd membership requests. */
  selected: SelectedDatastore;
  identity: ClusterIdentity;
  metrics?: ServerMetrics;
  dataDir: string;
  serverDir: string;
  /** Names the serving certificate must carry: a specific bind address and the advertised host. */
  servingAddresses: string[];
  /** False on an etcd-only server: no Kubernetes API, only Drover's own /drover/v1 endpoints. */
  runsApi: boolean;
  /** This server's identity in events and the controller lease. */
  leaderIdentity: string;
  /** Secrets encryption at rest, on a server that serves the API. */
  secretsEncryption?: SecretsEncryption;
  logger: Logger;
}

export interface ApiComposition {
  api: ApiServer;
  client: LocalClient;
  nodeRegistry: NodeRegistry;
  /** The node authorizer's graph of which ConfigMaps and Secrets each node's pods use. */
  nodeGraph: NodeConfigGraph;
  /** The RBAC objects the authorizer reads (started only where the API runs). */
  rbac: RbacCache;
  /** Serves the kinds of CustomResourceDefinitions, from a watch (started only where the API runs). */
  crds: CrdServing;
  /** ServiceAccount tokens: the signer, the authenticator, the issuer's discovery documents. */
  serviceAccounts: ServiceAccountSetup;
  directory: ApiServerDirectory;
  /** The server CA's certificate, for kubeconfigs. */
  caCertificatePem: string;
  /** Node lease renewals on their way through this server to the node lifecycle controller. */
  renewals: RenewalTracker;
}

export async function composeApi(input: ApiCompositionInput): Promise<ApiComposition> {
  const { settings, datastore, identity, logger } = input;
  const store = new ObjectStore(datastore);
  // Renewals from their arrival until the controller has seen them (this server's share of how
  // late the controller's view may be): the handler reports arrivals, the store commits.
  const renewals = new RenewalTracker();
  const serviceNetwork = serviceNetworkFromSettings(settings);
  // metrics.k8s.io is read from the agents (resource-metrics.ts), once this server can reach them.
  let metrics: MetricsSource | undefined;
  const metricsSource = (): MetricsSource => {
    if (!metrics) throw errors.unavailable('metrics are not served yet: the server is starting');
    return metrics;
  };
  const registry = new ResourceRegistry([
    ...RESOURCES,
    CRD_DEFINITION,
    ...metricsDefinitions({
      node: (name) => metricsSource().node(name),
      nodes: (selection) => metricsSource().nodes(selection),
      pod: (namespace, name) => metricsSource().pod(namespace, name),
      pods: (namespace, selection) => metricsSource().pods(namespace, selection),
    }),
  ]);

  // The advertised address (used by agents failing over) must be in the certificate too.
  const tlsDir = path.join(input.serverDir, 'tls');
  const tls = await ensureServingMaterial(tlsDir, servingNames([...input.servingAddresses, ...settings.tlsSans]));
  for (const what of tls.created) logger.info({ dir: tlsDir }, `generated ${what}`);
  const adminAuthenticator = new TokenAuthenticator();
  adminAuthenticator.add(identity.adminToken, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });
  const nodeRegistry = new NodeRegistry(datastore);
  await nodeRegistry.start();
  const client = new LocalClient(store, registry, { defaultRuntimeClass: settings.defaultRuntimeClass, serviceNetwork });
  // Which ConfigMaps and Secrets each node's pods use: all a node may read of them.
  const nodeGraph = new NodeConfigGraph(client, logger);
  await nodeGraph.start();
  // ServiceAccount tokens: the cluster's signing key, the TokenRequest signer, the authenticator.
  const serviceAccounts = await setUpServiceAccounts({
    datastore,
    dataDir: input.dataDir,
    joinSecret: identity.joinSecret,
    client,
    localWrites: {
      onWrite: (listener) => store.onWrite(listener),
      prefix: (ref) => store.keyPrefix(registry.lookup(ref.group, ref.version, ref.plural)!),
    },
    logger,
    issuer: settings.serviceAccountIssuer,
  });
  const leasePrefix = store.keyPrefix(registry.lookup('coordination.k8s.io', 'v1', 'leases')!, NODE_LEASE_NAMESPACE);
  store.onWrite((key, revision) => {
    if (key.startsWith(leasePrefix)) renewals.committed(key.slice(leasePrefix.length), revision);
  });
  const directory = new ApiServerDirectory(datastore, logger);
  const events = new EventRecorder(client, 'drover-node-lifecycle', input.leaderIdentity, logger);
  // Client certificates first, as kube-apiserver orders its authenticators.
  const authenticator = new UnionAuthenticator([new X509Authenticator(), adminAuthenticator, nodeRegistry, serviceAccounts.authenticator]);

  await ensureBuiltInNamespaces(store, registry);
  // The default RBAC policy, then the cache of RBAC objects the authorizer reads: every server
  // with an API authorizes its own requests.
  const rbac = new RbacCache(client, logger);
  const crds = new CrdServing(store, registry, logger);
  if (input.runsApi) {
    await reconcileDefaultRbac(client, logger);
    await reconcileBuiltInRuntimeClasses(client, logger);
    await rbac.start();
    await crds.start();
    // ServiceAccount tokens are then checked against informers, not a read of the store each.
    await serviceAccounts.authenticator.start();
  }
  // How this server proves itself to agents (logs, streams, usage figures).
  const logClient = await issueCertificate(identity.clientCa, { commonName: API_SERVER_CLIENT_NAME, usage: 'client' });
  const agentCredentials: AgentClientCredentials = {
    nodeCaPem: identity.nodeCa.certificatePem,
    clientCertificatePem: logClient.certificatePem,
    clientKeyPem: logClient.privateKeyPem,
  };
  metrics = resourceMetricsSource({
    client,
    registry: nodeRegistry,
    ...agentCredentials,
    logger,
  });

  const { managedEtcd, etcdAccess } = input.selected;
  // DROVER_BENCH_FLOW_CONTROL=off is for bench/scale.ts's baseline only (the same load, unbounded).
  const flowControl = process.env.DROVER_BENCH_FLOW_CONTROL === 'off' ? undefined : new FlowController({ totalSeats: settings.maxRequestsInflight });
  if (flowControl) input.metrics?.observeFlowControl(() => flowControl.stats());
  const api = new ApiServer(
    {
      store,
      registry,
      openapi: new OpenApiDocuments(registry),
      authenticator,
      // Node credentials are judged by the node authorizer alone; everyone else by RBAC, where
      // system:masters (the admin) is allowed everything before any rule is read.
      authorizer: new NodeAuthorizer(new RbacAuthorizer(rbac), nodeGraph),
      rbac,
      admission: new NodeRestrictionAdmission(client, (name) => store.peekCached(registry.lookup('', 'v1', 'nodes')!, undefined, name)),
      tokens: serviceAccounts.tokens,
      defaultRuntimeClass: settings.defaultRuntimeClass,
      serviceNetwork,
      issuerDiscovery: serviceAccounts.discovery,
      ...(input.metrics ? { metrics: input.metrics } : {}),
      renewals,
      kubernetesApi: input.runsApi,
      podLogs: podLogProxy({
        client,
        registry: nodeRegistry,
        ...agentCredentials,
        logger,
      }),
      podStreams: podStreamProxy({
        registry: nodeRegistry,
        ...agentCredentials,
        logger,
      }),
      droverEndpoints: droverEndpoints({
        joinSecret: identity.joinSecret,
        agentSecret: identity.agentSecret,
        registry: nodeRegistry,
        client,
        nodeCa: identity.nodeCa,
        clientCaCertificatePem: identity.clientCa.certificatePem,
        clientCa: identity.clientCa,
        // What agents are told at registration, and follow.
        timings: {
          nodeLeaseRenewIntervalMs: input.timings.nodeLeaseRenewIntervalMs,
          nodeMonitorGracePeriodMs: input.timings.nodeMonitorGracePeriodMs,
          fencingTimeoutMs: input.timings.fencingTimeoutMs,
        },
        network: {
          clusterCidr: settings.clusterCidr,
          serviceCidr: settings.serviceCidr,
          serviceNodePortRange: settings.serviceNodePortRange,
          clusterDns: settings.clusterDns,
          clusterDomain: settings.clusterDomain,
          backend: settings.flannelBackend,
        },
        logger,
        authenticator,
        datastore,
        events,
        directory,
        ...(input.secretsEncryption ? { secretsEncryption: input.secretsEncryption } : {}),
        ...(managedEtcd && etcdAccess
          ? { etcdMembers: etcdMembership(etcdAccess, { logger, learnerTimeoutMs: settings.etcdLearnerTimeoutMs }) }
          : {}),
      }),
      logger,
      longRunning: { perUser: settings.maxWatchesPerUser, total: settings.maxWatches },
      ...(flowControl ? { flowControl } : {}),
      version: versionInfo(),
      caCertificatePem: tls.ca.certificatePem,
      bookmarkIntervalMs: settings.watchBookmarkIntervalMs,
      readiness: async () => {
        try {
          // A real read, so a datastore that stopped answering makes the server not ready.
          await datastore.get('/drover/readyz');
          return undefined;
        } catch (error) {
          return error instanceof Error ? error.message : String(error);
        }
      },
    },
    { ...tls.serving, clientCaPem: identity.clientCa.certificatePem },
    { headerMs: settings.httpsHeaderTimeoutMs, requestMs: settings.httpsRequestTimeoutMs, idleMs: settings.httpsIdleTimeoutMs },
  );
  return { api, client, nodeRegistry, nodeGraph, rbac, crds, serviceAccounts, directory, caCertificatePem: tls.ca.certificatePem, renewals };
}

async function ensureBuiltInNamespaces(store: ObjectStore, registry: ResourceRegistry): Promise<void> {
  const def = registry.lookup('', 'v1', 'namespaces')!;
  for (const name of BUILT_IN_NAMESPACES) {
    try {
      await store.create(def, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 409)) throw error;
    }
  }
}
