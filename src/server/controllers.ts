import type { KubeObject } from '../apiserver/objects.js';
import type { LocalClient } from '../client/local.js';
import { etcdMembership } from '../cluster/etcd-membership.js';
import { NodeRecordReconciler, unusedRecordTtlMs } from '../cluster/node-record-reconciler.js';
import type { NodeRegistry } from '../cluster/node-registry.js';
import type { ServerSettings } from '../config/schema.js';
import type { DerivedTimings } from '../config/timings.js';
import { type ApiClient, LEASES } from '../client/types.js';
import { CONTROLLER_LEASE, ControllerManager } from '../controllers/controller-manager.js';
import { fencedClient } from '../controllers/fenced-client.js';
import { EndpointsController } from '../controllers/endpoints.js';
import { NamespaceFinisher } from '../controllers/namespace-finisher.js';
import { NodeIpamController } from '../controllers/node-ipam.js';
import type { SharedInformers } from '../client/shared-informers.js';
import type { Clock } from '../controllers/clock.js';
import { serviceNetworkFromSettings } from './service-network.js';
import type { KubernetesServiceReconciler } from './kubernetes-service.js';
import { ClusterRoleAggregationController } from '../controllers/rbac-aggregation.js';
import type { Logger } from '../logging/logger.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import { ETCD_ROLE_LABEL } from '../node-protocol/names.js';
import type { EtcdAccess } from './managed-datastore.js';
import { type ServiceAccountSetup, serviceAccountControllers } from './service-accounts.js';
import type { RenewalsOnTheirWay } from '../controllers/node-lifecycle.js';

/**
 * The controllers this server runs while it holds the controller lease (the ControllerManager:
 * node lifecycle, workloads, failover), with the cluster layer's node record reconciler beside
 * them, this server's metrics hooks, and the removal of a deleted etcd server's member.
 */

export interface ControllerDeps {
  /** Node lease renewals on their way through this server: the lifecycle controller judges silence up to the oldest. */
  renewals: RenewalsOnTheirWay;
  client: LocalClient;
  logger: Logger;
  settings: ServerSettings;
  timings: DerivedTimings;
  metrics: ServerMetrics | undefined;
  /** The managed etcd's members, when the cluster has one: a deleted etcd server's member goes too. */
  etcdAccess: EtcdAccess | undefined;
  nodeRegistry: NodeRegistry;
  /** This server's identity in the controller lease and in events. */
  leaderIdentity: string;
  /** False on an etcd-only server: it runs no controllers. */
  runsApi: boolean;
  serviceAccounts: ServiceAccountSetup;
  /** The CA of the API servers' certificates (`ca.crt` of legacy token Secrets). */
  caCertificatePem: string;
  /** Keeps the default `kubernetes` Service and its endpoints while this server leads; built on the fenced client. */
  kubernetesService?: (client: ApiClient) => KubernetesServiceReconciler;
}

export function startControllers(deps: ControllerDeps): ControllerManager {
  const { client, logger, settings, timings, metrics, etcdAccess, nodeRegistry, leaderIdentity, runsApi, serviceAccounts } = deps;
  // The leader-only controllers built here write under the same fence as the manager's own: a
  // write is refused once this server's term is over (src/controllers/fenced-client.ts).
  let manager: ControllerManager | undefined;
  // Every controller write also carries the controller lease's revision at this server's last
  // renewal as a condition of its own transaction (LocalClient.withWriteGuard).
  const guarded = client.withWriteGuard(() => manager?.writeGuard());
  const fenced = fencedClient(
    guarded,
    () => (manager ? manager.writeRefusal() : 'the controller manager has not started'),
    leaderIdentity,
    undefined,
    () => manager?.writeGuard(),
  );
  // Revokes the credentials of deleted Nodes and collects never-used registrations (leader only).
  const records = new NodeRecordReconciler(nodeRegistry, fenced, logger.child({ controller: 'node-records' }), {
    unusedTtlMs: unusedRecordTtlMs(),
  });
  // While this server holds the controller lease: the node lifecycle, workload and failover
  // controllers, and the node records, over one set of shared informers.
  const controllers = new ControllerManager({
    client,
    logger,
    identity: leaderIdentity,
    lease: timings.controllerLease,
    controllerClient: guarded,
    leaseKey: client.storageKey(LEASES, CONTROLLER_LEASE.namespace, CONTROLLER_LEASE.name),
    timings: {
      nodeLeaseRenewIntervalMs: timings.nodeLeaseRenewIntervalMs,
      nodeMonitorGracePeriodMs: timings.nodeMonitorGracePeriodMs,
      fencingTimeoutMs: timings.fencingTimeoutMs,
      defaultUnavailableTolerationMs: settings.defaultUnavailableTolerationMs,
    },
    extraControllers: [
      records,
      new ClusterRoleAggregationController(fenced, logger.child({ controller: 'clusterrole-aggregation' })),
      ...(deps.kubernetesService ? [deps.kubernetesService(fenced)] : []),
    ],
    termControllers: [
      ...serviceAccountControllers(serviceAccounts, fenced, logger, deps.caCertificatePem),
      (informers, clock) => new EndpointsController(fenced, informers, logger.child({ controller: 'endpoints' }), { clock }),
      (informers, clock) => new NamespaceFinisher(fenced, informers, logger.child({ controller: 'namespace-finisher' }), { clock }),
      ...(settings.flannelBackend === 'none'
        ? []
        : [(informers: SharedInformers, clock: Clock) => new NodeIpamController(fenced, informers, logger.child({ controller: 'node-ipam' }), serviceNetworkFromSettings(settings).clusterCidr, clock)]),
    ],
    lifecycle: {
      tickMs: timings.lifecycleTickMs,
      renewals: deps.renewals,
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
              void etcdMembership(etcdAccess, { logger })
                .removeByNode(node.metadata.name!)
                .then((removed) => removed.length && logger.info({ node: node.metadata.name, members: removed }, 'removed the etcd member of a deleted node'))
                .catch((error: unknown) => logger.warn({ err: error, node: node.metadata.name }, 'could not remove the etcd member of a deleted node'));
            },
          }
        : {}),
    },
  });
  manager = controllers;
  // An etcd-only server runs no controllers and serves no Kubernetes API.
  if (runsApi) controllers.start();
  return controllers;
}
