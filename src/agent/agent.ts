import fs from 'node:fs';
import path from 'node:path';
import type { KubeObject } from '../apiserver/objects.js';
import { shutdownTimings } from '../config/timings.js';
import type { ResourceReservation } from '../node-protocol/node-resources.js';
import type { Taint } from '../node-protocol/taints.js';
import type { Logger } from '../logging/logger.js';
import type { GcPolicy } from '../images/gc.js';
import { type NodeImages, startNodeImages } from '../images/node-images.js';
import type { AgentMetrics } from '../metrics/metrics.js';
import { EMPTY_REGISTRIES, loadRegistries, type RegistriesConfig } from '../images/registry/registries.js';
import { JoinError } from './bootstrap.js';
import { type DrainContext, drainNode, recordShutdown } from './drain.js';
import { AgentEndpoint } from './endpoint.js';
import { HealthCheck } from './health.js';
import { loadOrCreateIdentity, type NodeIdentity } from './identity.js';
import { LeaseRenewal } from './lease-renewal.js';
import { RuntimeHandlers } from './node-resources.js';
import { StatsSampler } from './stats.js';
import { PodManager } from './pod-manager.js';
import { NodeRegistration } from './registration.js';
import { NodeNetwork } from './network/node-network.js';
import { ServiceProxy } from './network/service-proxy.js';
import { ClusterDns } from './dns/server.js';
import { listPodDirs } from './pods/launch.js';
import { ServerConnection } from './servers.js';
import { RegistryServer } from '../images/registry-server/server.js';
import type { PeerCredentials } from './registry-peers/directory.js';
import { startRegistryPeers, type RegistryPeers } from './registry-peers/wiring.js';

/**
 * `drover agent`: joins the cluster, keeps its Node object, and renews its Lease. The agent is
 * the only source of truth about planned stops: on SIGTERM it writes a durable shutdown record
 * before it stops renewing, which is how the control plane tells Down from Unavailable.
 *
 * This class puts the parts together and orders start and stop: servers.ts (which server it
 * talks to), registration.ts (join, the Node, registering again), lease-renewal.ts (heartbeats,
 * moving to another server), endpoint.ts (its HTTPS endpoint), health.ts, drain.ts (the shutdown
 * record and the drain) and pod-manager.ts (the pods bound here).
 */

export interface AgentOptions {
  server: string;
  token: string;
  nodeName: string;
  dataDir: string;
  labels: Record<string, string>;
  taints: Taint[];
  agentPort: number;
  nodeIp?: string;
  shutdownGracePeriodMs: number;
  /**
   * Serve Prometheus metrics on /metrics of the agent port: this node's own `supervisor-metrics`
   * setting (K3s's name for it; it has nothing to do with the per-pod supervisor processes).
   */
  supervisorMetrics: boolean;
  /**
   * Serve this node's image store read-only to the other nodes on `/v2/…` of the agent port:
   * this node's own `embedded-registry` setting (docs/registry.md), read at start.
   */
  embeddedRegistry?: boolean;
  /** registries.yaml (K3s's format): where this node pulls images from; unset or missing = no mirrors. */
  privateRegistry?: string;
  /** Image garbage collection thresholds (this node's image-gc-high/low-threshold settings). */
  imageGc?: GcPolicy;
  /** What this node holds back from pods (`system-reserved`): allocatable is capacity minus it. */
  systemReserved: ResourceReservation;
  /** This agent's effective settings, published for `drover config drift` (standalone agents). */
  publishedConfig?: Record<string, string>;
  /**
   * Called after each registration of the Node (a new incarnation too). A server uses it to add
   * the role labels that node restriction keeps from the node's own credential.
   */
  onNodeRegistered?: (node: KubeObject) => Promise<void>;
  logger: Logger;
}

const STATUS_REPORT_INTERVAL_MS = 60_000;
const HEALTH_CHECK_INTERVAL_MS = 10_000;
const RETRY_MS = 2000;
const SERVER_LIST_REFRESH_MS = 30_000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class Agent {
  private readonly identity: NodeIdentity;
  private readonly agentDir: string;
  private readonly logger: Logger;
  private readonly connection: ServerConnection;
  private readonly health: HealthCheck;
  private readonly endpoint: AgentEndpoint;
  private readonly registration: NodeRegistration;
  private readonly renewal: LeaseRenewal;
  private statusTimer: NodeJS.Timeout | undefined;
  private healthTimer: NodeJS.Timeout | undefined;
  private serverListTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  /** Runs the pods bound to this node; present once the node is registered. */
  private pods: PodManager | undefined;
  /** Only when this node's own `supervisor-metrics` is on. */
  private metrics: AgentMetrics | undefined;
  /** This node's registries.yaml, read once at start (as K3s does: a change needs a restart). */
  readonly registries: RegistriesConfig;
  /** The node's image store: archives in <data-dir>/agent/images imported, images garbage-collected. */
  private images: NodeImages | undefined;
  /** This node's and its pods' resource usage for metrics.k8s.io; present once pods run. */
  private stats: StatsSampler | undefined;
  /** The runtime handlers this node offers (`process`; `runc` where it works), refreshed with its status. */
  readonly runtimeHandlers: RuntimeHandlers;
  /** The node's part of the pod network; absent without one (flannel-backend none, or no root/plugins). */
  private network: NodeNetwork | undefined;
  /** The node's Service datapath (nftables) and cluster DNS: with the pod network only. */
  private serviceProxy: ServiceProxy | undefined;
  private clusterDns: ClusterDns | undefined;
  /** This node's registration certificates, as the endpoint serves with them (peers' client certificate). */
  private peerCredentials: PeerCredentials | undefined;
  /** Advertising this node's images and finding peers' (docs/registry.md); per this node's own settings. */
  private registryPeers: RegistryPeers | undefined;

  constructor(private readonly options: AgentOptions) {
    this.agentDir = path.join(options.dataDir, 'agent');
    fs.mkdirSync(this.agentDir, { recursive: true, mode: 0o700 });
    this.identity = loadOrCreateIdentity(this.agentDir);
    this.logger = options.logger.child({ node: options.nodeName });
    // A malformed file stops the agent here (RegistriesError names the file and line).
    this.registries = options.privateRegistry ? loadRegistries(options.privateRegistry) : EMPTY_REGISTRIES;
    for (const warning of this.registries.warnings) this.logger.warn(`private-registry: ${warning}`);
    this.connection = new ServerConnection(options.server, this.agentDir, this.logger);
    this.health = new HealthCheck(this.agentDir, this.logger);
    this.endpoint = new AgentEndpoint({
      nodeName: options.nodeName,
      health: () => this.health.current,
      pods: () => this.pods,
      metrics: () => this.metrics,
      stats: () => this.stats,
      logger: this.logger,
      ...(options.embeddedRegistry
        ? {
            registry: new RegistryServer({
              store: () => this.images?.store,
              logger: this.logger.child({ component: 'embedded-registry' }),
              stats: () => this.metrics && { served: (kind, bytes) => (this.metrics!.registryServed.inc({ kind }), this.metrics!.registryServedBytes.inc(bytes)), corrupt: () => this.metrics!.registryCorruptBlobs.inc({ detected_by: 'server' }) },
            }),
          }
        : {}),
    });
    this.runtimeHandlers = new RuntimeHandlers(this.logger);
    this.registration = new NodeRegistration(options, {
      identity: this.identity,
      agentDir: this.agentDir,
      connection: this.connection,
      logger: this.logger,
      endpointPort: () => this.endpoint.port,
      serveWith: (response) => {
        this.endpoint.serveWith(response);
        this.peerCredentials = { nodeCaPem: response.nodeCaCertificate, certificatePem: response.servingCertificate, keyPem: response.servingKey };
      },
      stopping: () => this.stopping,
      runtimeHandlers: this.runtimeHandlers,
    });
    this.renewal = new LeaseRenewal({
      nodeName: options.nodeName,
      connection: this.connection,
      registration: this.registration,
      health: () => this.health.current,
      pods: () => this.pods,
      metrics: () => this.metrics,
      logger: this.logger,
    });
  }

  get port(): number {
    return this.endpoint.port;
  }

  get nodeId(): string {
    return this.identity.nodeId;
  }

  /** Join, register the node, start heartbeats. Retries while the server is unreachable. */
  async start(): Promise<void> {
    if (this.options.supervisorMetrics) {
      // prom-client is loaded only on nodes that serve metrics.
      const { AgentMetrics } = await import('../metrics/metrics.js');
      this.metrics = new AgentMetrics();
    }
    // Registration is several calls; a server that goes away between them (a restart, a failover)
    // means starting over against whichever server answers, not giving up.
    // The endpoint listens first: its port is part of the registration (where API servers may
    // reach it); it serves once registration gave it a certificate.
    await this.endpoint.listen(this.options.agentPort);
    for (;;) {
      await this.registration.join();
      try {
        await this.registration.ensureNode();
        await this.renewal.renewAnywhere();
        break;
      } catch (error) {
        if (this.stopping || (error instanceof JoinError && error.fatal)) throw error;
        this.logger.warn({ reason: (error as Error).message }, 'could not finish registering this node; starting over');
        await sleep(RETRY_MS);
      }
    }
    this.renewal.start();
    const timings = this.registration.timings;
    const clusterNetwork = this.registration.clusterNetwork;
    this.network = clusterNetwork
      ? NodeNetwork.create({
          client: () => this.connection.client!,
          nodeName: this.options.nodeName,
          nodeIp: this.registration.nodeIp(),
          agentDir: this.agentDir,
          settings: clusterNetwork,
          livePodUids: () => new Set(listPodDirs(path.join(this.agentDir, 'pods')).map((dir) => path.basename(dir))),
          logger: this.logger.child({ component: 'pod-network' }),
        })
      : undefined;
    await this.network?.start();
    if (this.network) await this.startServicesAndDns(this.network);
    this.images = await startNodeImages({ agentDir: this.agentDir, logger: this.logger, gc: this.options.imageGc ?? { highThresholdPercent: 85, lowThresholdPercent: 80 } });
    this.registryPeers = await startRegistryPeers({
      client: () => this.connection.client!,
      nodeName: this.options.nodeName,
      nodeUid: () => this.registration.nodeUid,
      credentials: () => this.peerCredentials,
      store: this.images.store,
      serve: this.options.embeddedRegistry === true,
      registries: this.registries,
      metrics: () => this.metrics,
      logger: this.logger.child({ component: 'embedded-registry' }),
    });
    this.pods = new PodManager({
      nodeName: this.options.nodeName,
      nodeIp: this.registration.nodeIp(),
      agentDir: this.agentDir,
      nodeCaPem: this.registration.nodeCaPem,
      fencingTimeoutMs: timings.fencingTimeoutMs,
      peerCutOffMs: timings.peerCutOffMs,
      client: () => this.connection.client!,
      logger: this.logger,
      registries: this.registries,
      ...(this.registryPeers?.pullThrough ? { registryPeers: this.registryPeers.pullThrough } : {}),
      runtimeHandlers: () => this.runtimeHandlers.names,
      network: () => this.network,
    });
    await this.pods.start();
    this.stats = new StatsSampler(this.options.nodeName, this.pods.podsDir);
    await this.connection.refresh();
    this.serverListTimer = setInterval(() => void this.connection.refresh(), SERVER_LIST_REFRESH_MS);
    if (this.options.publishedConfig) {
      await this.connection.client!.request('PUT', '/drover/v1/node-config', { values: this.options.publishedConfig }).catch((error: unknown) =>
        this.logger.warn({ err: error }, 'could not publish this agent’s configuration for the drift view'),
      );
    }
    this.statusTimer = setInterval(
      () => void this.registration.postStatus().catch((e: unknown) => this.logger.warn({ err: e }, 'status report failed')),
      STATUS_REPORT_INTERVAL_MS,
    );
    this.healthTimer = setInterval(() => this.health.check(), HEALTH_CHECK_INTERVAL_MS);
    this.logger.info(
      {
        server: this.options.server,
        nodeId: this.identity.nodeId,
        uid: this.registration.nodeUid,
        agentPort: this.endpoint.port,
        embeddedRegistry: this.options.embeddedRegistry === true,
        renewIntervalMs: timings.nodeLeaseRenewIntervalMs,
      },
      'agent is running: node registered, lease renewals started',
    );
  }

  /**
   * What kube-proxy and the cluster DNS do on a K3s node, here in the agent. Either failing to
   * start (nft missing, port 53 taken) is logged and leaves the rest of the node running.
   */
  private async startServicesAndDns(network: NodeNetwork): Promise<void> {
    const client = () => this.connection.client!;
    this.serviceProxy = new ServiceProxy({
      client,
      nodeName: this.options.nodeName,
      nodeAddresses: () => [this.registration.nodeIp()],
      network: network.network,
      logger: this.logger,
    });
    await this.serviceProxy.start().catch((error: unknown) => {
      this.logger.warn({ err: error }, 'the Service datapath could not start; Services do not answer on this node');
      this.serviceProxy = undefined;
    });
    this.clusterDns = new ClusterDns({ client, network: network.network, logger: this.logger });
    await this.clusterDns.start().catch((error: unknown) => {
      this.logger.warn({ err: error }, 'the cluster DNS could not start; pods on this node cannot resolve Service names');
      this.clusterDns = undefined;
    });
  }

  /**
   * A planned stop. The shutdown record goes first (locally and on the Node), so that whatever
   * happens after it, the control plane knows this was planned; the node is cordoned with it.
   * Then the drain: every pod here is evicted through the API (its owner starts a replacement
   * elsewhere; a singleton's replacement waits until this copy is stopped and gone), and the
   * agent waits, renewing its lease all along, until its pods are gone and their replacements
   * run, within the shutdown grace period. Only then is the lease released: the node is Down.
   */
  async shutdown(reason: string): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    const started = Date.now();
    // Keep a second and a half for the record, the release and closing.
    const drainDeadline = started + shutdownTimings(this.options.shutdownGracePeriodMs).drainMs;
    clearInterval(this.statusTimer);
    clearInterval(this.healthTimer);
    clearInterval(this.serverListTimer);
    try {
      if (this.registered()) {
        const drain: DrainContext = {
          nodeName: this.options.nodeName,
          agentDir: this.agentDir,
          client: () => this.connection.client,
          pods: this.pods,
          logger: this.logger,
        };
        await recordShutdown(drain, reason);
        await drainNode(drain, drainDeadline, started);
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not complete the drain');
    }
    try {
      // Whatever the drain left (no API, a slow owner) stops here: a planned stop leaves nothing running.
      this.pods?.beginDrain();
      await this.pods?.stopAll(Math.max(500, drainDeadline - Date.now()));
      this.pods?.stop();
      this.network?.stop();
      await this.serviceProxy?.stop();
      await this.clusterDns?.stop();
      this.registryPeers?.stop();
      this.images?.stop();
      this.renewal.stop();
      if (this.registered()) {
        await this.renewal.release();
        this.logger.info({ ms: Date.now() - started }, 'lease released');
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not complete the shutdown notice');
    } finally {
      this.renewal.stop();
      await this.endpoint.close();
      this.connection.close();
    }
  }

  /** Whether the Node was registered: only then is there a record to write and a lease to release. */
  private registered(): boolean {
    return this.connection.client !== undefined && this.registration.nodeUid !== '';
  }
}
