import type { ClusterNetworkSettings } from '../node-protocol/service-network.js';
import fs from 'node:fs';
import os from 'node:os';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { NODES } from '../client/types.js';
import { parseJoinToken } from '../cluster/join-token.js';
import type { RegistrationResponse } from '../cluster/drover-endpoints.js';
import { type DerivedTimings, deriveTimings } from '../config/timings.js';
import { NODE_ID_ANNOTATION, SHUTDOWN_ANNOTATION } from '../node-protocol/names.js';
import { parseShutdownRecord, type ShutdownRecord } from '../node-protocol/records.js';
import { allocatableOf, type ResourceReservation, resourceList } from '../node-protocol/node-resources.js';
import type { Taint } from '../node-protocol/taints.js';
import type { Logger } from '../logging/logger.js';
import { versionInfo } from '../version.js';
import { clockHint, fetchClusterCa, JoinError, register } from './bootstrap.js';
import { shutdownFile } from './drain.js';
import { defaultNodeIp, type NodeIdentity, systemInfo } from './identity.js';
import { hostCapacity, type RuntimeHandlers } from './node-resources.js';
import type { ServerConnection } from './servers.js';

/**
 * Registering this node: joining through any server that answers (the join token, the pinned CA,
 * `/drover/v1/register`), creating or updating the Node, clearing the record of a planned
 * shutdown it comes back from, reporting its status; and registering again when its credential
 * or its Node is gone (the node was deleted, or its name registered by another host).
 */

export interface RegistrationOptions {
  token: string;
  nodeName: string;
  labels: Record<string, string>;
  taints: Taint[];
  nodeIp?: string;
  /** Called after each registration of the Node (a new incarnation too). */
  onNodeRegistered?: (node: KubeObject) => Promise<void>;
  /** Held back from pods: allocatable is the host's capacity minus this (`system-reserved`). */
  systemReserved?: ResourceReservation;
}

export interface RegistrationContext {
  identity: NodeIdentity;
  agentDir: string;
  connection: ServerConnection;
  logger: Logger;
  /** The agent endpoint's port: part of the registration and of the Node's status. */
  endpointPort: () => number;
  /** The agent endpoint serves with each registration's certificate. */
  serveWith: (response: RegistrationResponse) => void;
  /** True once a planned stop began: joining gives up. */
  stopping: () => boolean;
  /** The runtime handlers this node has, probed at each status report. */
  runtimeHandlers: RuntimeHandlers;
}

const RETRY_MS = 2000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class NodeRegistration {
  private clusterTimings: DerivedTimings | undefined;
  /** The cluster's network settings, as the server told them at the last registration (absent: no pod network). */
  clusterNetwork: ClusterNetworkSettings | undefined;
  private uid = '';
  private nodeCa = '';
  private reregistering: Promise<void> | undefined;

  constructor(
    private readonly options: RegistrationOptions,
    private readonly context: RegistrationContext,
  ) {}

  /** The timings the cluster told this node to follow (renewals, fencing). */
  get timings(): DerivedTimings {
    if (!this.clusterTimings) throw new Error('this node is not registered yet');
    return this.clusterTimings;
  }

  /** The uid of this node's Node object ('' before the first registration). */
  get nodeUid(): string {
    return this.uid;
  }

  /** The node CA: what peers' serving certificates are checked against. */
  get nodeCaPem(): string {
    return this.nodeCa;
  }

  nodeIp(): string {
    return this.options.nodeIp ?? defaultNodeIp();
  }

  /** Register with the first server that accepts this node; retries while none does. */
  async join(): Promise<void> {
    const { connection, logger } = this.context;
    const token = parseJoinToken(this.options.token);
    if (!token.caHash) logger.warn('the join token does not pin the CA; use the full token from `drover token show`');
    let lastLog = 0;
    for (let attempt = 0; ; attempt++) {
      if (this.context.stopping()) throw new JoinError('the agent is shutting down', true);
      const candidates = connection.candidates();
      const serverUrl = candidates[attempt % candidates.length]!;
      const server = new URL(serverUrl);
      try {
        const { caPem } = await fetchClusterCa(server, token);
        const response = await register(server, caPem, token.secret, {
          nodeName: this.options.nodeName,
          nodeId: this.context.identity.nodeId,
          password: this.context.identity.password,
          addresses: [this.nodeIp()],
          agentPort: this.context.endpointPort(),
        });
        this.nodeCa = response.nodeCaCertificate;
        this.clusterTimings = deriveTimings(response.timings);
        this.clusterNetwork = response.network;
        this.context.serveWith(response);
        connection.connect(serverUrl, { caPem, token: response.token, timings: response.timings });
        return;
      } catch (error) {
        if (error instanceof JoinError && error.fatal) throw error;
        if (Date.now() - lastLog > 10_000) {
          lastLog = Date.now();
          const hint = clockHint(error);
          logger.warn({ server: serverUrl, reason: (error as Error).message, ...(hint ? { hint } : {}) }, 'waiting for a server to accept this node');
        }
        if ((attempt + 1) % candidates.length === 0) await sleep(RETRY_MS);
      }
    }
  }

  /** Create or update the Node; coming back from a planned stop, withdraw its record. */
  async ensureNode(): Promise<void> {
    const { identity, logger } = this.context;
    const client = this.context.connection.client!;
    const name = this.options.nodeName;
    const info = systemInfo();
    let node = await client.get(NODES, undefined, name);
    const providerID = `drover://${identity.nodeId}`;
    const labels = {
      'kubernetes.io/hostname': name,
      'kubernetes.io/os': info.operatingSystem,
      'kubernetes.io/arch': info.architecture,
      ...this.options.labels,
    };
    if (!node) {
      try {
        node = await client.create(NODES, undefined, {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name, labels, annotations: { [NODE_ID_ANNOTATION]: identity.nodeId } },
          // Taints from the command line apply at registration, as kubelet's --register-with-taints.
          spec: { providerID, ...(this.options.taints.length ? { taints: this.options.taints } : {}) },
        });
        logger.info({ uid: node.metadata.uid }, 'created Node');
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 409)) throw error;
        node = (await client.get(NODES, undefined, name))!;
      }
    }
    // Coming back from a planned shutdown: withdraw the notice, and undo only our own cordon, which
    // the record on the Node proves (node restriction refuses an uncordon the Node does not record).
    const record = this.readShutdownRecord(node);
    const ownCordon = parseShutdownRecord(node.metadata.annotations?.[SHUTDOWN_ANNOTATION])?.cordoned === true;
    node = await client.patch(NODES, undefined, name, 'merge', {
      metadata: {
        labels,
        annotations: { [NODE_ID_ANNOTATION]: identity.nodeId, [SHUTDOWN_ANNOTATION]: null },
      },
      spec: { providerID, ...(ownCordon ? { unschedulable: null } : {}) },
    });
    if (record) {
      logger.info({ cordoned: record.cordoned }, 'back from a planned shutdown: cleared the shutdown record');
      fs.rmSync(shutdownFile(this.context.agentDir), { force: true });
    }
    this.uid = node.metadata.uid!;
    await this.postStatus();
    await this.options.onNodeRegistered?.(node).catch((error: unknown) => {
      logger.warn({ err: error }, 'the server could not label its own node');
    });
  }

  /** Join and register the Node again; concurrent callers share one attempt. */
  reregister(): Promise<void> {
    this.reregistering ??= (async () => {
      try {
        await this.join();
        await this.ensureNode();
      } finally {
        this.reregistering = undefined;
      }
    })();
    return this.reregistering;
  }

  /** The Node's status: addresses, capacity and allocatable, where its endpoint is, what it runs. */
  async postStatus(): Promise<void> {
    const info = systemInfo();
    const ip = this.nodeIp();
    const capacity = hostCapacity(this.context.agentDir);
    const allocatable = allocatableOf(capacity, this.options.systemReserved ?? {});
    const runtimeHandlers = await this.context.runtimeHandlers.probe();
    await this.context.connection.client!.patch(
      NODES,
      undefined,
      this.options.nodeName,
      'strategic',
      {
        status: {
          addresses: [
            { type: 'InternalIP', address: ip },
            { type: 'Hostname', address: os.hostname() },
          ],
          capacity: resourceList(capacity),
          allocatable: resourceList(allocatable),
          runtimeHandlers,
          daemonEndpoints: { kubeletEndpoint: { Port: this.context.endpointPort() } },
          nodeInfo: {
            machineID: info.machineID,
            systemUUID: this.context.identity.nodeId,
            bootID: info.bootID,
            kernelVersion: info.kernelVersion,
            osImage: info.osImage,
            containerRuntimeVersion: 'drover-process://0.1',
            kubeletVersion: versionInfo().gitVersion,
            kubeProxyVersion: '',
            operatingSystem: info.operatingSystem,
            architecture: info.architecture,
          },
        },
      },
      'status',
    );
  }

  /** The record of the planned stop this node comes back from: on the Node, else the local file. */
  private readShutdownRecord(node: KubeObject): ShutdownRecord | undefined {
    const file = shutdownFile(this.context.agentDir);
    return (
      parseShutdownRecord(node.metadata.annotations?.[SHUTDOWN_ANNOTATION]) ??
      parseShutdownRecord(fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined)
    );
  }
}
