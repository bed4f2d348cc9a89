import { defaultNodeIp } from '../agent/identity.js';
import { KubernetesServiceReconciler } from './kubernetes-service.js';
import { serviceNetworkFromSettings } from './service-network.js';
import type { ApiServerDirectory } from '../cluster/apiservers.js';
import { checkClusterRecord } from '../config/cluster-record.js';
import { publication, publishConfig, publishedValues } from '../config/drift.js';
import type { ResolvedConfig } from '../config/resolve.js';
import type { ServerSettings } from '../config/schema.js';
import { deriveTimings, shutdownTimings, timingProblems } from '../config/timings.js';
import { createLogger, type Logger } from '../logging/logger.js';
import { composeApi } from './api-composition.js';
import { establishClusterIdentity } from './bootstrap.js';
import { startCompactor } from './compactor.js';
import { startControllers } from './controllers.js';
import { lockServerDataDir, prepareServerDir } from './data-dir.js';
import { openServerDatastore, type SelectedDatastore } from './datastore-selection.js';
import { type EmbeddedAgent, startEmbeddedAgent } from './embedded-agent.js';
import { type EncryptionAtRest, startEncryptionAtRest } from './encryption-at-rest.js';
import { ServerConfigError } from './errors.js';
import { writeAdminKubeconfigs } from './kubeconfig.js';
import { withServerMetrics } from './server-metrics.js';
import { shutdownSequence } from './shutdown.js';

/**
 * `drover server`: composes the datastore, the API server, the controllers and the embedded
 * agent, in the order docs/architecture.md#startup describes. Each step lives in the file named
 * for it; this is the one place that wires them together.
 */

export { ServerConfigError };

export interface ServerOptions {
  /** The resolved configuration: its typed values, and the whole of it for the cluster record check and the drift view. */
  config: ResolvedConfig<'server'>;
  /** How often history is compacted, and how many revisions are kept; older ones answer 410 Gone. Not settings. */
  compactionIntervalMs?: number;
  compactionKeepRevisions?: number;
}

export interface RunningServer {
  port: number;
  kubeconfigPath: string;
  joinToken: string;
  logger: Logger;
  stop(): Promise<void>;
}

/** Below this a bookmark timer would spin for nothing: a watch's revision cannot usefully move faster. */
export const MIN_WATCH_BOOKMARK_INTERVAL_MS = 100;

/** What must hold before anything starts (the resolver checks the same; this guards other callers). */
function checkSettings(settings: ServerSettings): void {
  const problems = timingProblems({
    renewMs: settings.nodeLeaseRenewIntervalMs,
    graceMs: settings.nodeMonitorGracePeriodMs,
    fencingMs: settings.fencingTimeoutMs,
  });
  if (problems.length) throw new ServerConfigError(problems.join('; '));
  if (settings.watchBookmarkIntervalMs < MIN_WATCH_BOOKMARK_INTERVAL_MS) {
    throw new ServerConfigError(
      `watch-bookmark-interval (${settings.watchBookmarkIntervalMs}ms) must be at least ${MIN_WATCH_BOOKMARK_INTERVAL_MS}ms`,
    );
  }
}

const ANY_ADDRESS = ['0.0.0.0', '::', ''];

/** Where local clients (the admin kubeconfig, the embedded agent) reach this server. */
function clientHost(bindAddress: string): string {
  if (ANY_ADDRESS.includes(bindAddress)) return '127.0.0.1';
  return bindAddress.includes(':') ? `[${bindAddress}]` : bindAddress;
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const settings = options.config.values;
  checkSettings(settings);
  const timings = deriveTimings(settings);
  const started = Date.now();
  const logger = createLogger(settings.logLevel, 'drover-server');
  const { dataDir, serverDir, lock } = lockServerDataDir(settings.dataDir);
  let selected: SelectedDatastore | undefined;
  let atRest: EncryptionAtRest | undefined;
  try {
    const { serverId } = prepareServerDir(serverDir);
    const specificBind = ANY_ADDRESS.includes(settings.bindAddress) ? [] : [settings.bindAddress];
    // What other servers and agents failing over reach this one at.
    const advertiseHost = specificBind[0] ?? settings.nodeIp ?? defaultNodeIp();
    const runsApi = settings.role !== 'etcd';
    const memberName = `${settings.nodeName}-${serverId.slice(0, 8)}`;
    selected = await openServerDatastore(settings, { dataDir, serverDir, memberName, advertiseHost, logger });
    // Only a server holding the cluster's token gets further, or writes anything into the cluster.
    const identity = await establishClusterIdentity({
      datastore: selected.datastore,
      dataDir,
      ...(settings.token ? { tokenOption: settings.token } : {}),
      logger,
    });
    // Before any component starts: this server's cluster-wide settings must match the record.
    await checkClusterRecord(selected.datastore, options.config, settings.nodeName, logger);
    await publishConfig(selected.datastore, publication(settings.nodeName, 'server', publishedValues(options.config)));
    const measured = await withServerMetrics(selected.datastore, settings.supervisorMetrics, logger);
    const { metrics } = measured;
    // From here on the (possibly instrumented) datastore is the one to close.
    selected = { ...selected, datastore: measured.datastore };
    // Secrets encrypted at rest (when the setting is on) under everything that serves the API.
    let liveServers: ApiServerDirectory | undefined;
    if (runsApi) {
      atRest = await startEncryptionAtRest(selected.datastore, {
        dataDir,
        joinSecret: identity.joinSecret,
        serverId,
        enabled: settings.secretsEncryption,
        peers: async () => (liveServers ? (await liveServers.live()).map((r) => r.id) : []),
        logger,
      });
      selected = { ...selected, datastore: atRest.datastore };
    }
    const { datastore } = selected;

    const leaderIdentity = memberName;
    const { api, client, nodeRegistry, nodeGraph, rbac, crds, serviceAccounts, directory, caCertificatePem, renewals } = await composeApi({
      settings,
      timings,
      datastore,
      selected,
      identity,
      ...(metrics ? { metrics } : {}),
      dataDir,
      serverDir,
      servingAddresses: [...specificBind, advertiseHost],
      runsApi,
      leaderIdentity,
      ...(atRest ? { secretsEncryption: atRest.encryption } : {}),
      logger,
    });
    liveServers = directory;
    const address = await api.listen({ host: settings.bindAddress, port: settings.httpsListenPort });
    const serverUrl = `https://${clientHost(settings.bindAddress)}:${address.port}`;
    const advertisedUrl = `https://${advertiseHost.includes(':') ? `[${advertiseHost}]` : advertiseHost}:${address.port}`;
    serviceAccounts.publishAt(advertisedUrl);
    const kubeconfigPath = writeAdminKubeconfigs(dataDir, settings.writeKubeconfig, {
      serverUrl,
      caCertificatePem,
      token: identity.adminToken,
      clusterName: settings.clusterName,
    });

    const controllers = startControllers({
      client,
      logger,
      settings,
      timings,
      metrics,
      etcdAccess: selected.etcdAccess,
      nodeRegistry,
      leaderIdentity,
      runsApi,
      serviceAccounts,
      caCertificatePem,
      renewals,
      kubernetesService: (fenced) => new KubernetesServiceReconciler(fenced, directory, serviceNetworkFromSettings(settings), logger.child({ controller: 'kubernetes-service' }), datastore),
    });
    let embeddedAgent: EmbeddedAgent | undefined;
    if (!settings.disableAgent) {
      embeddedAgent = startEmbeddedAgent({
        settings,
        dataDir,
        ownUrl: runsApi ? serverUrl : undefined,
        joinToken: identity.joinToken,
        controlPlane: runsApi,
        etcdMember: selected.managedEtcd !== undefined,
        client,
        directory,
        logger,
      });
    } else if (settings.embeddedRegistry) {
      // No agent: no image store and no agent port to serve it on (docs/registry.md).
      logger.warn('embedded-registry is on but disable-agent is too: this server runs no agent, so it serves no images');
    }
    if (runsApi) {
      await directory.start({
        id: serverId,
        url: advertisedUrl,
        node: settings.nodeName,
      });
    }
    const compactor = startCompactor(datastore, logger, options.compactionIntervalMs ?? 60_000, options.compactionKeepRevisions ?? 1000);

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
    const stop = shutdownSequence({
      logger,
      timings: shutdownTimings(settings.shutdownGracePeriodMs),
      embeddedAgent,
      compactor,
      directory,
      controllers,
      nodeRegistry,
      nodeGraph,
      rbac,
      crds,
      serviceAccountAuthenticator: serviceAccounts.authenticator,
      api,
      encryption: atRest?.encryption,
      datastore,
      managedEtcd: selected.managedEtcd,
      lock,
    });
    return { port: address.port, kubeconfigPath, logger, stop, joinToken: identity.joinToken };
  } catch (error) {
    await atRest?.encryption.stop();
    await selected?.datastore.close();
    await selected?.managedEtcd?.stop();
    lock.release();
    throw error;
  }
}
