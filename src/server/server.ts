import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { deriveTimings, shutdownTimings, timingProblems } from '../config/timings.js';
import { Agent } from '../agent/agent.js';
import { labelRecord, type ServerSettings } from '../config/schema.js';
import { TokenAuthenticator, UnionAuthenticator } from '../apiserver/auth.js';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { OpenApiDocuments } from '../apiserver/openapi.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../apiserver/resources.js';
import { ApiServer } from '../apiserver/server.js';
import { ObjectStore } from '../apiserver/storage.js';
import { LocalClient } from '../client/local.js';
import { NODES } from '../client/types.js';
import { CLUSTER_RECORD_KEY, checkClusterRecord } from '../config/cluster-record.js';
import { computeDrift, publication, publishConfig, publishedValues, readPublished } from '../config/drift.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import type { ListResult } from '../datastore/types.js';
import type { ResolvedConfig } from '../config/resolve.js';
import { NodeAuthorizer, NodeRestrictionAdmission } from '../cluster/node-authorization.js';
import { NodeConfigGraph } from '../cluster/node-graph.js';
import { NodeRegistry } from '../cluster/node-registry.js';
import { RbacAuthorizer } from '../apiserver/rbac/authorizer.js';
import { RbacCache } from '../cluster/rbac-cache.js';
import { reconcileDefaultRbac } from '../cluster/rbac-defaults.js';
import { ClusterRoleAggregationController } from '../controllers/rbac-aggregation.js';
import { NodeRecordReconciler, unusedRecordTtlMs } from '../cluster/node-record-reconciler.js';
import { API_SERVER_CLIENT_NAME, droverEndpoints } from '../cluster/drover-endpoints.js';
import { EventRecorder } from '../controllers/events.js';
import { ControllerManager } from '../controllers/controller-manager.js';
import { podLogProxy } from './pod-logs.js';
import { serviceAccountControllers, setUpServiceAccounts } from './service-accounts.js';
import { CONTROL_PLANE_ROLE_LABEL, ETCD_ROLE_LABEL, STATE_LABEL } from '../node-protocol/names.js';
import { openSqliteDatastore } from '../datastore/sqlite.js';
import { establishClusterIdentity } from './bootstrap.js';
import { etcdMembership } from '../cluster/etcd-membership.js';
import { hasEtcdData, type ManagedEtcd } from '../cluster/managed-etcd.js';
import { type EtcdAccess, openManagedDatastore, openMemberlessDatastore } from './managed-datastore.js';
import { ApiServerDirectory } from '../cluster/apiservers.js';
import { defaultNodeIp } from '../agent/identity.js';
import type { Datastore } from '../datastore/types.js';
import { createLogger, type Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { ensureServingMaterial, issueCertificate, servingNames } from '../security/pki.js';
import { versionInfo } from '../version.js';
import { writeKubeconfig } from './kubeconfig.js';
import { type EncryptionAtRest, startEncryptionAtRest } from './encryption-at-rest.js';
import { type DataDirLock, lockDataDir } from './lock.js';

/**
 * `drover server`: composes the datastore, the API server and (in later releases) the
 * controllers, and owns the data dir layout:
 *
 *   <data-dir>/server.lock              one server per data dir
 *   <data-dir>/server/db/state.db       the SQLite datastore (WAL)
 *   <data-dir>/server/tls/              cluster CA and serving certificate
 *   <data-dir>/server/cred/admin.token  the admin bearer token (0600)
 *   <data-dir>/server/server-id         this server's stable identity (leader election)
 *   <data-dir>/token                    the join token agents use (0600)
 *   <data-dir>/agent/                   the embedded agent's identity
 *   <data-dir>/kubeconfig.yaml          admin kubeconfig (0600)
 */

export class ServerConfigError extends Error {
  override name = 'ServerConfigError';
}

export interface ServerOptions {
  /** The resolved configuration: its typed values, and the whole of it for the cluster record check and the drift view. */
  config: ResolvedConfig<'server'>;
  /** How often history is compacted, and how many revisions are kept; older ones answer 410 Gone. Not settings. */
  compactionIntervalMs?: number;
  compactionKeepRevisions?: number;
}

/** Below this a bookmark timer would spin for nothing: a watch's revision cannot usefully move faster. */
export const MIN_WATCH_BOOKMARK_INTERVAL_MS = 100;

/** Cluster timing rules that must hold before anything starts. */
export function validateTimings(renewMs: number, graceMs: number, fencingMs: number): void {
  const problems = timingProblems({ renewMs, graceMs, fencingMs });
  if (problems.length) throw new ServerConfigError(problems.join('; '));
}

export interface RunningServer {
  port: number;
  kubeconfigPath: string;
  joinToken: string;
  logger: Logger;
  stop(): Promise<void>;
}

function clientHost(bindAddress: string): string {
  if (bindAddress === '0.0.0.0' || bindAddress === '' || bindAddress === '::') return '127.0.0.1';
  return bindAddress.includes(':') ? `[${bindAddress}]` : bindAddress;
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

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const settings = options.config.values;
  validateTimings(settings.nodeLeaseRenewIntervalMs, settings.nodeMonitorGracePeriodMs, settings.fencingTimeoutMs);
  if (settings.watchBookmarkIntervalMs < MIN_WATCH_BOOKMARK_INTERVAL_MS) {
    throw new ServerConfigError(
      `watch-bookmark-interval (${settings.watchBookmarkIntervalMs}ms) must be at least ${MIN_WATCH_BOOKMARK_INTERVAL_MS}ms`,
    );
  }
  const timings = deriveTimings(settings);
  const shutdown = shutdownTimings(settings.shutdownGracePeriodMs);
  const started = Date.now();
  const logger = createLogger(settings.logLevel, 'drover-server');
  const dataDir = path.resolve(settings.dataDir);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const lock: DataDirLock = lockDataDir(dataDir, 'server');
  let datastore: Datastore | undefined;
  let managedEtcd: ManagedEtcd | undefined;
  let etcdAccess: EtcdAccess | undefined;
  let atRest: EncryptionAtRest | undefined;
  try {
    const serverDir = path.join(dataDir, 'server');
    fs.mkdirSync(path.join(serverDir, 'db'), { recursive: true, mode: 0o700 });
    const serverId = ensureServerId(path.join(serverDir, 'server-id'));
    const specificBind = !['0.0.0.0', '::', ''].includes(settings.bindAddress) ? [settings.bindAddress] : [];
    const advertiseHost = specificBind[0] ?? settings.nodeIp ?? defaultNodeIp();
    const role = settings.role;
    const runsApi = role !== 'etcd';
    const managedOptions = {
      dataDir,
      memberName: `${settings.nodeName}-${serverId.slice(0, 8)}`,
      advertiseIp: advertiseHost,
      clientPort: settings.etcdClientPort,
      peerPort: settings.etcdPeerPort,
      clusterInit: settings.clusterInit,
      ...(settings.server ? { joinServer: settings.server } : {}),
      ...(settings.token ? { token: settings.token } : {}),
      logger,
      // Without its member this server can serve nothing; exiting lets agents fail over at once
      // and a service manager restart it (the member then restarts from its data).
      onMemberExit: (code: number | null) => {
        logger.fatal({ code }, 'the managed etcd member died; stopping this server');
        process.exit(1);
      },
    };
    if (role === 'control-plane' && !settings.datastoreEndpoint) {
      const memberless = await openMemberlessDatastore(managedOptions);
      datastore = memberless.datastore;
      etcdAccess = memberless.access;
    } else if ((settings.clusterInit || settings.server || hasEtcdData(dataDir)) && !settings.datastoreEndpoint) {
      // A server with etcd data on disk runs its member again, with or without its first flags.
      const managed = await openManagedDatastore(managedOptions);
      managedEtcd = managed.etcd;
      etcdAccess = { endpoints: [managed.etcd.endpoint], ...managed.etcd.clientTls };
      datastore = managed.datastore;
    } else {
      datastore = await connectDatastore(settings, serverDir, logger);
    }
    // Only a server holding the cluster's token gets further, or writes anything into the cluster.
    const identity = await establishClusterIdentity({
      datastore,
      dataDir,
      ...(settings.token ? { tokenOption: settings.token } : {}),
      logger,
    });
    // Before any component starts: this server's cluster-wide settings must match the record.
    await checkClusterRecord(datastore, options.config, settings.nodeName, logger);
    await publishConfig(datastore, publication(settings.nodeName, 'server', publishedValues(options.config)));
    // Metrics exist only when this node's own setting asks for them, whatever other nodes say.
    let metrics: ServerMetrics | undefined;
    if (settings.supervisorMetrics) {
      const { instrumentDatastore, ServerMetrics } = await import('../metrics/metrics.js');
      const base = datastore;
      metrics = new ServerMetrics(
        async () => nodeStateCounts(await base.list('/registry/core/nodes/')),
        async () => {
          const record = await base.get(CLUSTER_RECORD_KEY);
          const report = computeDrift(await readPublished(base), record ? JSON.parse(record.value.toString('utf8')) : undefined);
          return {
            error: report.rows.filter((r) => r.severity === 'error').length,
            info: report.rows.filter((r) => r.severity === 'info').length,
          };
        },
      );
      datastore = instrumentDatastore(datastore, metrics.datastoreLatency);
      logger.info('supervisor metrics enabled on /metrics (this node’s supervisor-metrics setting)');
    }
    // Secrets encrypted at rest (when the setting is on) under everything that serves the API.
    let directory: ApiServerDirectory | undefined;
    if (runsApi) {
      atRest = await startEncryptionAtRest(datastore, {
        dataDir,
        joinSecret: identity.joinSecret,
        serverId,
        enabled: settings.secretsEncryption,
        peers: async () => (directory ? (await directory.live()).map((r) => r.id) : []),
        logger,
      });
      datastore = atRest.datastore;
    }
    const store = new ObjectStore(datastore);
    const registry = new ResourceRegistry();

    // The advertised address (used by agents failing over) must be in the certificate too.
    const tls = await ensureServingMaterial(
      path.join(serverDir, 'tls'),
      servingNames([...specificBind, advertiseHost, ...settings.tlsSans]),
    );
    for (const what of tls.created) logger.info({ dir: path.join(serverDir, 'tls') }, `generated ${what}`);
    const adminAuthenticator = new TokenAuthenticator();
    adminAuthenticator.add(identity.adminToken, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });
    const join = { token: identity.joinToken, secret: identity.joinSecret, agentSecret: identity.agentSecret };
    const nodeRegistry = new NodeRegistry(datastore);
    await nodeRegistry.start();
    const client = new LocalClient(store, registry);
    // Which ConfigMaps and Secrets each node's pods use: all a node may read of them.
    const nodeGraph = new NodeConfigGraph(client, logger);
    await nodeGraph.start();
    // ServiceAccount tokens: the cluster's signing key, the TokenRequest signer, the authenticator.
    const serviceAccounts = await setUpServiceAccounts({ datastore, dataDir, joinSecret: identity.joinSecret, client, logger });
    directory = new ApiServerDirectory(datastore, logger);
    const leaderIdentity = `${settings.nodeName}-${serverId.slice(0, 8)}`;
    const events = new EventRecorder(client, 'drover-node-lifecycle', leaderIdentity, logger);
    const authenticator = new UnionAuthenticator([adminAuthenticator, nodeRegistry, serviceAccounts.authenticator]);

    await ensureBuiltInNamespaces(store, registry);
    // The default RBAC policy, then the cache of RBAC objects the authorizer reads: every server
    // with an API authorizes its own requests.
    const rbac = new RbacCache(client, logger);
    if (runsApi) {
      await reconcileDefaultRbac(client, logger);
      await rbac.start();
    }
    // How this server proves itself to agents when it fetches a pod's logs from them.
    const logClient = await issueCertificate(identity.clientCa, { commonName: API_SERVER_CLIENT_NAME, usage: 'client' });

    const openDatastore = datastore;
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
        admission: new NodeRestrictionAdmission(client),
        tokens: serviceAccounts.tokens,
        issuerDiscovery: serviceAccounts.discovery,
        ...(metrics ? { metrics } : {}),
        kubernetesApi: runsApi,
        podLogs: podLogProxy({
          client,
          registry: nodeRegistry,
          nodeCaPem: identity.nodeCa.certificatePem,
          clientCertificatePem: logClient.certificatePem,
          clientKeyPem: logClient.privateKeyPem,
          logger,
        }),
        droverEndpoints: droverEndpoints({
          joinSecret: join.secret,
          agentSecret: join.agentSecret,
          registry: nodeRegistry,
          client,
          nodeCa: identity.nodeCa,
          clientCaCertificatePem: identity.clientCa.certificatePem,
          timings: {
            nodeLeaseRenewIntervalMs: timings.nodeLeaseRenewIntervalMs,
            nodeMonitorGracePeriodMs: timings.nodeMonitorGracePeriodMs,
            fencingTimeoutMs: timings.fencingTimeoutMs,
          },
          logger,
          authenticator,
          datastore,
          events,
          directory,
          ...(atRest ? { secretsEncryption: atRest.encryption } : {}),
          ...(managedEtcd && etcdAccess
            ? { etcdMembers: etcdMembership(etcdAccess, { logger, learnerTimeoutMs: settings.etcdLearnerTimeoutMs }) }
            : {}),
        }),
        logger,
        longRunning: { perUser: settings.maxWatchesPerUser, total: settings.maxWatches },
        version: versionInfo(),
        caCertificatePem: tls.ca.certificatePem,
        bookmarkIntervalMs: settings.watchBookmarkIntervalMs,
        readiness: async () => {
          try {
            // A real read, so a datastore that stopped answering makes the server not ready.
            await openDatastore.get('/drover/readyz');
            return undefined;
          } catch (error) {
            return error instanceof Error ? error.message : String(error);
          }
        },
      },
      tls.serving,
      { headerMs: settings.httpsHeaderTimeoutMs, requestMs: settings.httpsRequestTimeoutMs, idleMs: settings.httpsIdleTimeoutMs },
    );
    const address = await api.listen({ host: settings.bindAddress, port: settings.httpsListenPort });
    const serverUrl = `https://${clientHost(settings.bindAddress)}:${address.port}`;
    const advertisedUrl = `https://${advertiseHost.includes(':') ? `[${advertiseHost}]` : advertiseHost}:${address.port}`;
    serviceAccounts.publishAt(advertisedUrl);
    const kubeconfig = {
      serverUrl,
      caCertificatePem: tls.ca.certificatePem,
      token: identity.adminToken,
      clusterName: settings.clusterName,
    };
    const kubeconfigPath = path.join(dataDir, 'kubeconfig.yaml');
    writeKubeconfig(kubeconfigPath, kubeconfig);
    if (settings.writeKubeconfig) writeKubeconfig(path.resolve(settings.writeKubeconfig), kubeconfig);

    // Revokes the credentials of deleted Nodes and collects never-used registrations (leader only).
    const records = new NodeRecordReconciler(nodeRegistry, client, logger.child({ controller: 'node-records' }), {
      unusedTtlMs: unusedRecordTtlMs(),
    });
    // While this server holds the controller lease: the node lifecycle, workload and failover
    // controllers, and the node records, over one set of shared informers.
    const controllers = new ControllerManager({
      client,
      logger,
      identity: leaderIdentity,
      timings: {
        nodeLeaseRenewIntervalMs: timings.nodeLeaseRenewIntervalMs,
        nodeMonitorGracePeriodMs: timings.nodeMonitorGracePeriodMs,
        fencingTimeoutMs: timings.fencingTimeoutMs,
        defaultUnavailableTolerationMs: settings.defaultUnavailableTolerationMs,
      },
      extraControllers: [records, new ClusterRoleAggregationController(client, logger.child({ controller: 'clusterrole-aggregation' }))],
      termControllers: serviceAccountControllers(serviceAccounts, client, logger, tls.ca.certificatePem),
        tickMs: timings.lifecycleTickMs,
      lifecycle: {
        ...(metrics
          ? {
              onUnavailable: (seconds: number) => metrics.detection.observe(seconds),
              onClockOffset: (node: string, seconds: number | undefined) =>
                seconds === undefined ? metrics.nodeClockOffset.remove({ node }) : metrics.nodeClockOffset.set({ node }, seconds),
            }
          : {}),
        ...(etcdAccess
          ? {
              // An etcd server's Node deleted: its member goes too, so quorum counts only real members.
              onNodeDeleted: (node: KubeObject) => {
                if (node.metadata.labels?.[ETCD_ROLE_LABEL] !== 'true') return;
                void etcdMembership(etcdAccess!, { logger })
                  .removeByNode(node.metadata.name!)
                  .then((removed) => removed.length && logger.info({ node: node.metadata.name, members: removed }, 'removed the etcd member of a deleted node'))
                  .catch((error: unknown) => logger.warn({ err: error, node: node.metadata.name }, 'could not remove the etcd member of a deleted node'));
              },
            }
          : {}),
      },
    });
    // An etcd-only server runs no controllers and serves no Kubernetes API.
    if (runsApi) controllers.start();

    let agent: Agent | undefined;
    let stopped = false;
    if (!settings.disableAgent) {
      const roleLabels: Record<string, string> = {
        ...(runsApi ? { [CONTROL_PLANE_ROLE_LABEL]: 'true' } : {}),
        ...(managedEtcd ? { [ETCD_ROLE_LABEL]: 'true' } : {}),
      };
      void (async () => {
        // Its own API when it has one; an etcd-only server's agent registers through whichever
        // control-plane server exists (its settings stay its own: only the URL is borrowed).
        const url = runsApi ? serverUrl : await waitForControlPlane(directory, logger, () => stopped);
        if (stopped || !url) return;
        agent = new Agent({
          server: url,
          token: join.token,
          nodeName: settings.nodeName,
          dataDir,
          labels: labelRecord(settings.nodeLabels),
          taints: settings.nodeTaints,
          agentPort: settings.agentPort,
          ...(settings.nodeIp ? { nodeIp: settings.nodeIp } : {}),
          shutdownGracePeriodMs: settings.shutdownGracePeriodMs,
          supervisorMetrics: settings.supervisorMetrics,
          logger: logger.child({ component: 'agent' }),
          // Role labels are not the node's to set (node restriction): the server writes them itself.
          onNodeRegistered: async (node) => {
            if (Object.entries(roleLabels).every(([key, value]) => node.metadata.labels?.[key] === value)) return;
            await client.patch(NODES, undefined, settings.nodeName, 'merge', { metadata: { labels: roleLabels } });
          },
        });
        await agent.start();
      })().catch((error: unknown) => logger.error({ err: error }, 'the embedded agent failed to start'));
    }

    if (runsApi) await directory.start({
      id: serverId,
      url: advertisedUrl,
      node: settings.nodeName,
    });

    const compactor = startCompactor(
      datastore,
      logger,
      options.compactionIntervalMs ?? 60_000,
      options.compactionKeepRevisions ?? 1000,
    );

    logger.info(
      {
        url: serverUrl,
        bindAddress: settings.bindAddress,
        port: address.port,
        datastore: datastore.name,
        dataDir,
        kubeconfig: kubeconfigPath,
        startupMs: Date.now() - started,
      },
      `Drover server is ready: kubectl --kubeconfig ${kubeconfigPath} get nodes`,
    );

    let stopping: Promise<void> | undefined;
    const stop = (): Promise<void> => {
      stopping ??= (async () => {
        stopped = true;
        if (agent) {
          await Promise.race([agent.shutdown('server shutdown'), new Promise((r) => setTimeout(r, shutdown.embeddedAgentStopMs).unref())]);
        }
        logger.info('shutting down: closing listeners and waiting for requests in flight');
        clearInterval(compactor);
        // Courtesies to the rest of the cluster, bounded: a datastore without quorum must not hold
        // the shutdown hostage.
        const bounded = (work: Promise<void>): Promise<unknown> =>
          Promise.race([work, new Promise((resolve) => setTimeout(resolve, shutdown.courtesyMs).unref())]);
        await bounded(directory.stop());
        await bounded(controllers.stop());
        nodeRegistry.stop();
        nodeGraph.stop();
        rbac.stop();
        await api.close(shutdown.requestDrainMs);
        await atRest?.encryption.stop();
        await openDatastore.close();
        await managedEtcd?.stop();
        lock.release();
        logger.info('shutdown complete');
      })();
      return stopping;
    };
    return { port: address.port, kubeconfigPath, logger, stop, joinToken: join.token };
  } catch (error) {
    await atRest?.encryption.stop();
    await datastore?.close();
    await managedEtcd?.stop();
    lock.release();
    throw error;
  }
}

/** The URL of some control-plane server, waiting (and saying so) until one has announced itself. */
async function waitForControlPlane(
  directory: ApiServerDirectory,
  logger: Logger,
  stopped: () => boolean,
): Promise<string | undefined> {
  for (let attempt = 0; !stopped(); attempt++) {
    const live = await directory.live().catch(() => []);
    if (live.length) return live[0]!.url;
    if (attempt % 10 === 0) logger.info('etcd-only server: waiting for a control-plane server to register this node through');
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  return undefined;
}


async function connectDatastore(settings: ServerSettings, serverDir: string, logger: Logger): Promise<Datastore> {
  const endpoint = settings.datastoreEndpoint;
  if (!endpoint) return openSqliteDatastore(path.join(serverDir, 'db', 'state.db'));
  const match = /^etcd:\/\/(.+)$/.exec(endpoint);
  if (!match) {
    throw new ServerConfigError(`datastore-endpoint "${endpoint}" is not supported: use etcd://host:port[,host:port...]`);
  }
  const tlsOptions = { caFile: settings.datastoreCafile, certFile: settings.datastoreCertfile, keyFile: settings.datastoreKeyfile };
  const scheme = tlsOptions.caFile || tlsOptions.certFile ? 'https' : 'http';
  const endpoints = match[1]!.split(',').map((h) => `${scheme}://${h.trim()}`);
  logger.info({ endpoints }, 'using an external etcd datastore');
  // Loaded only when used: the gRPC stack costs a few hundred milliseconds of start-up.
  const { openEtcdDatastore } = await import('../datastore/etcd.js');
  return openEtcdDatastore({
    endpoints,
    ...(tlsOptions.caFile ? { caFile: tlsOptions.caFile } : {}),
    ...(tlsOptions.certFile ? { certFile: tlsOptions.certFile } : {}),
    ...(tlsOptions.keyFile ? { keyFile: tlsOptions.keyFile } : {}),
  });
}

function nodeStateCounts(nodes: ListResult): Record<string, number> {
  const counts: Record<string, number> = { Ready: 0, NotReady: 0, Unknown: 0, Down: 0, Unavailable: 0 };
  for (const kv of nodes.items) {
    const node = JSON.parse(kv.value.toString('utf8')) as { metadata?: { labels?: Record<string, string> } };
    const state = node.metadata?.labels?.[STATE_LABEL] ?? 'none';
    counts[state] = (counts[state] ?? 0) + 1;
  }
  return counts;
}

function ensureServerId(file: string): string {
  if (fs.existsSync(file)) {
    const id = fs.readFileSync(file, 'utf8').trim();
    if (id) return id;
  }
  const id = randomUUID();
  writeFileAtomic(file, `${id}\n`, 0o644);
  return id;
}

/**
 * Keep a window of recent history so watches can resume after a brief disconnect, and discard
 * the rest, as kube-apiserver asks etcd to. Compaction goes in steps of a few thousand revisions
 * with a turn of the event loop between them: one big synchronous delete would stall every
 * request for seconds on a busy store.
 */
const COMPACTION_STEP = 5000;

function startCompactor(datastore: Datastore, logger: Logger, intervalMs: number, keep: number): NodeJS.Timeout {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void (async () => {
      try {
        const target = (await datastore.currentRevision()) - keep;
        let compacted = await datastore.compactRevision();
        while (compacted < target) {
          compacted = Math.min(target, compacted + COMPACTION_STEP);
          await datastore.compact(compacted);
          await new Promise((resolve) => setImmediate(resolve));
        }
        logger.debug({ revision: compacted }, 'compacted datastore history');
      } catch (error) {
        logger.warn({ err: error }, 'datastore compaction failed; will retry');
      } finally {
        running = false;
      }
    })();
  }, intervalMs);
  timer.unref();
  return timer;
}
