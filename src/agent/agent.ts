import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeMicroTime } from '../apiserver/objects.js';
import { HttpClient } from '../client/http.js';
import { LEASES, NODES } from '../client/types.js';
import type { TLSSocket } from 'node:tls';
import { queryBool } from '../apiserver/query.js';
import { parseJoinToken } from '../cluster/join-token.js';
import { METRICS_CONTENT_TYPE } from '../metrics/content-type.js';
import type { AgentMetrics } from '../metrics/metrics.js';
import { API_SERVER_CLIENT_NAME, type ClusterTimings } from '../cluster/supervisor.js';
import {
  HEALTH_ANNOTATION,
  leaseHolderIdentity,
  NODE_ID_ANNOTATION,
  NODE_LEASE_NAMESPACE,
  RELEASED_ANNOTATION,
  SHUTDOWN_ANNOTATION,
} from '../controllers/node-lifecycle.js';
import type { AgentHealth, ShutdownRecord } from '../controllers/node-state.js';
import type { Taint } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { versionInfo } from '../version.js';
import { clockHint, fetchClusterCa, JoinError, register } from './bootstrap.js';
import { PodManager } from './pod-manager.js';
import { monoNowMs, PEER_CONTROL_PLANE_PATH } from './pods/fencing.js';
import { PodLogError, streamContainerLog } from './pods/logs.js';
import { PODS } from '../client/types.js';
import { controllerOf } from '../controllers/workloads.js';
import { defaultNodeIp, loadOrCreateIdentity, type NodeIdentity, systemInfo } from './identity.js';

/**
 * `drover agent`: joins the cluster, keeps its Node object, and renews its Lease. The agent is
 * the only source of truth about planned stops: on SIGTERM it writes a durable shutdown record
 * before it stops renewing, which is how the control plane tells Down from Unavailable.
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
  /** Serve /metrics on the agent port (this node's own setting). */
  supervisorMetrics: boolean;
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
  private client: HttpClient | undefined;
  private currentServer: string | undefined;
  private nodeToken = '';
  private identity: NodeIdentity;
  private timings: ClusterTimings | undefined;
  private nodeUid = '';
  private renewTimer: NodeJS.Timeout | undefined;
  private statusTimer: NodeJS.Timeout | undefined;
  private healthTimer: NodeJS.Timeout | undefined;
  private serverListTimer: NodeJS.Timeout | undefined;
  private endpoint: https.Server | undefined;
  private endpointPort = 0;
  private health: AgentHealth = { ready: true, reason: 'AgentReady', message: 'Drover agent is healthy.' };
  private stopping = false;
  private reregistering: Promise<void> | undefined;
  /** The node CA: what peers' serving certificates are checked against. */
  private nodeCaPem = '';
  private caPem = '';
  /** Runs the pods bound to this node; present once the node is registered. */
  private pods: PodManager | undefined;
  /** Renewals continue through a drain; this stops them for good. */
  private leaseReleased = false;
  private readonly agentDir: string;
  private readonly logger: Logger;
  /** Only when this node's own `supervisor-metrics` is on. */
  private metrics: AgentMetrics | undefined;

  constructor(private readonly options: AgentOptions) {
    this.agentDir = path.join(options.dataDir, 'agent');
    fs.mkdirSync(this.agentDir, { recursive: true, mode: 0o700 });
    this.identity = loadOrCreateIdentity(this.agentDir);
    this.logger = options.logger.child({ node: options.nodeName });
  }

  get port(): number {
    return this.endpointPort;
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
    await this.startEndpoint();
    for (;;) {
      await this.join();
      try {
        await this.ensureNode();
        await this.renewLeaseAnywhere();
        break;
      } catch (error) {
        if (this.stopping || (error instanceof JoinError && error.fatal)) throw error;
        this.logger.warn({ reason: (error as Error).message }, 'could not finish registering this node; starting over');
        await sleep(RETRY_MS);
      }
    }
    this.scheduleRenewal();
    this.pods = new PodManager({
      nodeName: this.options.nodeName,
      nodeIp: this.nodeIp(),
      agentDir: this.agentDir,
      nodeCaPem: this.nodeCaPem,
      fencingTimeoutMs: this.timings!.fencingTimeoutMs ?? Math.floor((this.timings!.nodeMonitorGracePeriodMs * 3) / 4),
      renewIntervalMs: this.timings!.nodeLeaseRenewIntervalMs,
      client: () => this.client!,
      logger: this.logger,
    });
    await this.pods.start();
    await this.refreshServerList();
    this.serverListTimer = setInterval(() => void this.refreshServerList(), SERVER_LIST_REFRESH_MS);
    if (this.options.publishedConfig) {
      await this.client!.request('PUT', '/drover/v1/node-config', { values: this.options.publishedConfig }).catch((error: unknown) =>
        this.logger.warn({ err: error }, 'could not publish this agent’s configuration for the drift view'),
      );
    }
    this.statusTimer = setInterval(() => void this.postStatus().catch((e: unknown) => this.logger.warn({ err: e }, 'status report failed')), STATUS_REPORT_INTERVAL_MS);
    this.healthTimer = setInterval(() => this.checkHealth(), HEALTH_CHECK_INTERVAL_MS);
    this.logger.info(
      {
        server: this.options.server,
        nodeId: this.identity.nodeId,
        uid: this.nodeUid,
        agentPort: this.endpointPort,
        renewIntervalMs: this.timings!.nodeLeaseRenewIntervalMs,
      },
      'agent is running: node registered, lease renewals started',
    );
  }

  /** Servers to try, current first: the one we were given, then those learned from the cluster. */
  private serverList(): string[] {
    let learned: string[] = [];
    try {
      learned = JSON.parse(fs.readFileSync(this.serversFile(), 'utf8')) as string[];
    } catch {
      // none learned yet
    }
    const ordered = [this.currentServer ?? this.options.server, this.options.server, ...learned];
    return [...new Set(ordered)];
  }

  private serversFile(): string {
    return path.join(this.agentDir, 'servers.json');
  }

  /** Learn where else the API is served, and remember it so the first --server is needed once. */
  private async refreshServerList(): Promise<void> {
    try {
      const answer = (await this.client!.request('GET', '/drover/v1/apiservers')) as { servers: { url: string }[] };
      const urls = [...new Set(answer.servers.map((s) => s.url))];
      if (urls.length) writeFileAtomic(this.serversFile(), JSON.stringify(urls), 0o644);
    } catch (error) {
      this.logger.debug({ err: error }, 'could not refresh the server list');
    }
  }

  private connectTo(server: string): void {
    this.client?.close();
    this.currentServer = server;
    const renew = this.timings!.nodeLeaseRenewIntervalMs;
    this.client = new HttpClient({
      server,
      caPem: this.caPem,
      token: this.nodeToken,
      // A hung server must be given up on well before the node looks late (half the grace).
      timeoutMs: Math.max(500, Math.min(renew * 1.5, this.timings!.nodeMonitorGracePeriodMs / 3)),
    });
  }

  private async join(): Promise<void> {
    const token = parseJoinToken(this.options.token);
    if (!token.caHash) this.logger.warn('the join token does not pin the CA; use the full token from `drover token show`');
    let lastLog = 0;
    for (let attempt = 0; ; attempt++) {
      if (this.stopping) throw new JoinError('the agent is shutting down', true);
      const candidates = this.serverList();
      const serverUrl = candidates[attempt % candidates.length]!;
      const server = new URL(serverUrl);
      try {
        const { caPem } = await fetchClusterCa(server, token);
        const response = await register(server, caPem, token.secret, {
          nodeName: this.options.nodeName,
          nodeId: this.identity.nodeId,
          password: this.identity.password,
          addresses: [this.nodeIp()],
          agentPort: this.endpointPort,
        });
        this.caPem = caPem;
        this.nodeCaPem = response.nodeCaCertificate;
        this.timings = response.timings;
        this.nodeToken = response.token;
        // Serve with this registration's certificate; trust only the client CA for callers.
        this.endpoint!.setSecureContext({ cert: response.servingCertificate, key: response.servingKey, ca: response.clientCaCertificate });
        this.connectTo(serverUrl);
        return;
      } catch (error) {
        if (error instanceof JoinError && error.fatal) throw error;
        if (Date.now() - lastLog > 10_000) {
          lastLog = Date.now();
          const hint = clockHint(error);
          this.logger.warn({ server: serverUrl, reason: (error as Error).message, ...(hint ? { hint } : {}) }, 'waiting for a server to accept this node');
        }
        if ((attempt + 1) % candidates.length === 0) await sleep(RETRY_MS);
      }
    }
  }

  private nodeIp(): string {
    return this.options.nodeIp ?? defaultNodeIp();
  }

  /**
   * The agent's own HTTPS endpoint. Callers authenticate with a client certificate from the
   * client CA: the API servers' (everything), or an admin's (system:masters: health and metrics).
   * No token opens it: the join token joins nodes, nothing more. It has no certificate until the
   * first registration gives it one (setSecureContext in join()).
   */
  private async startEndpoint(): Promise<void> {
    if (this.endpoint) return;
    this.endpoint = https.createServer(
      { requestCert: true, rejectUnauthorized: false },
      (req, res) => {
        const caller = endpointCaller(req.socket as TLSSocket);
        const path = (req.url ?? '/').split('?')[0] ?? '/';
        const authorized = caller === 'apiserver' || (caller === 'admin' && (path === '/healthz' || path === '/metrics'));
        if (path === PEER_CONTROL_PLANE_PATH && this.pods) {
          // Open to any caller: the answer is one number, and its integrity comes from the
          // serving certificate the asking supervisor verifies against the cluster CA.
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(this.pods.peerAnswer()));
        } else if (!authorized) {
          res.writeHead(401, { 'Content-Type': 'text/plain' });
          res.end('Unauthorized');
        } else if (path === '/healthz') {
          res.writeHead(this.health.ready ? 200 : 503, { 'Content-Type': 'text/plain' });
          res.end(this.health.ready ? 'ok' : `${this.health.reason}: ${this.health.message}`);
        } else if (path.startsWith('/containerLogs/') && req.method === 'GET') {
          void this.serveLogs(req, res, path);
        } else if (path === '/metrics' && this.metrics) {
          void this.metrics.registry.metrics().then((text) => {
            res.writeHead(200, { 'Content-Type': METRICS_CONTENT_TYPE });
            res.end(text);
          });
        } else {
          res.writeHead(404, { 'Content-Type': 'text/plain' });
          res.end('not found');
        }
      },
    );
    await new Promise<void>((resolve, reject) => {
      this.endpoint!.once('error', reject);
      this.endpoint!.listen(this.options.agentPort, () => resolve());
    });
    this.endpointPort = (this.endpoint.address() as AddressInfo).port;
  }

  /** `GET /containerLogs/<namespace>/<pod>/<container>?follow&tailLines&previous&limitBytes`, as kubelet. */
  private async serveLogs(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, path: string): Promise<void> {
    const [namespace, pod, container] = path.split('/').slice(2).map(decodeURIComponent);
    const query = new URL(req.url ?? '/', 'https://agent.invalid').searchParams;
    const dir = namespace && pod ? this.pods?.findPodDir(namespace, pod) : undefined;
    if (!dir || !container) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end(`pod ${namespace}/${pod} is not running on node ${this.options.nodeName}`);
      return;
    }
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const number = (name: string): number | undefined => {
      const value = Number(query.get(name));
      return query.has(name) && Number.isInteger(value) && value >= 0 ? value : undefined;
    };
    const tailLines = number('tailLines');
    const limitBytes = number('limitBytes');
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    // A followed log with nothing new yet still answers promptly, so the client starts waiting.
    const flush = setTimeout(() => !res.headersSent && res.flushHeaders(), 200);
    try {
      await streamContainerLog(
        dir,
        container,
        {
          follow: queryBool(query, 'follow'),
          previous: queryBool(query, 'previous'),
          ...(tailLines !== undefined ? { tailLines } : {}),
          ...(limitBytes !== undefined ? { limitBytes } : {}),
        },
        res,
        abort.signal,
      );
    } catch (error) {
      clearTimeout(flush);
      if (!res.headersSent) {
        res.writeHead(error instanceof PodLogError ? 400 : 500, { 'Content-Type': 'text/plain' });
      } else if (error instanceof PodLogError) {
        res.write(`${error.message}\n`);
      }
      if (!res.writableEnded) res.end(error instanceof PodLogError ? '' : `${(error as Error).message}\n`);
      return;
    }
    clearTimeout(flush);
    if (!res.writableEnded) res.end();
  }

  private shutdownFile(): string {
    return path.join(this.agentDir, 'shutdown.json');
  }

  private async ensureNode(): Promise<void> {
    const client = this.client!;
    const name = this.options.nodeName;
    const info = systemInfo();
    let node = await client.get(NODES, undefined, name);
    const providerID = `drover://${this.identity.nodeId}`;
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
          metadata: { name, labels, annotations: { [NODE_ID_ANNOTATION]: this.identity.nodeId } },
          // Taints from the command line apply at registration, as kubelet's --register-with-taints.
          spec: { providerID, ...(this.options.taints.length ? { taints: this.options.taints } : {}) },
        });
        this.logger.info({ uid: node.metadata.uid }, 'created Node');
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
        annotations: { [NODE_ID_ANNOTATION]: this.identity.nodeId, [SHUTDOWN_ANNOTATION]: null },
      },
      spec: { providerID, ...(ownCordon ? { unschedulable: null } : {}) },
    });
    if (record) {
      this.logger.info({ cordoned: record.cordoned }, 'back from a planned shutdown: cleared the shutdown record');
      fs.rmSync(this.shutdownFile(), { force: true });
    }
    this.nodeUid = node.metadata.uid!;
    await this.postStatus();
    await this.options.onNodeRegistered?.(node).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'the server could not label its own node');
    });
  }

  private readShutdownRecord(node: KubeObject): ShutdownRecord | undefined {
    return (
      parseShutdownRecord(node.metadata.annotations?.[SHUTDOWN_ANNOTATION]) ??
      parseShutdownRecord(fs.existsSync(this.shutdownFile()) ? fs.readFileSync(this.shutdownFile(), 'utf8') : undefined)
    );
  }

  private async postStatus(): Promise<void> {
    const info = systemInfo();
    const ip = this.nodeIp();
    await this.client!.patch(
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
          capacity: { cpu: String(os.cpus().length), memory: `${Math.floor(os.totalmem() / 1024)}Ki`, pods: '110' },
          allocatable: { cpu: String(os.cpus().length), memory: `${Math.floor(os.totalmem() / 1024)}Ki`, pods: '110' },
          daemonEndpoints: { kubeletEndpoint: { Port: this.endpointPort } },
          nodeInfo: {
            machineID: info.machineID,
            systemUUID: this.identity.nodeId,
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

  private checkHealth(): void {
    let next: AgentHealth = { ready: true, reason: 'AgentReady', message: 'Drover agent is healthy.' };
    try {
      fs.accessSync(this.agentDir, fs.constants.W_OK);
      const stats = fs.statfsSync(this.agentDir);
      if (stats.bavail / stats.blocks < 0.01) {
        next = { ready: false, reason: 'DiskPressure', message: `less than 1% free space on ${this.agentDir}` };
      }
    } catch (error) {
      next = { ready: false, reason: 'DataDirUnavailable', message: `agent data dir ${this.agentDir}: ${(error as Error).message}` };
    }
    if (next.ready !== this.health.ready || next.reason !== this.health.reason) {
      this.logger.warn({ ready: next.ready, reason: next.reason }, next.message);
    }
    this.health = next;
  }

  private leaseObject(now: number): KubeObject {
    const name = this.options.nodeName;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: NODE_LEASE_NAMESPACE,
        annotations: { [HEALTH_ANNOTATION]: JSON.stringify(this.health) },
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: this.nodeUid }],
      },
      spec: this.leaseSpec(now),
    };
  }

  /** What every renewal writes, and a new lease starts with. */
  private leaseSpec(now: number): Record<string, unknown> {
    return {
      holderIdentity: leaseHolderIdentity(this.options.nodeName, this.nodeUid),
      leaseDurationSeconds: Math.ceil(this.timings!.nodeMonitorGracePeriodMs / 1000),
      renewTime: kubeMicroTime(now),
    };
  }

  /**
   * One renewal, moving to another server when this one cannot be reached: the node credential
   * and the CA are the same on every server, so any live one will do.
   */
  private async renewLeaseAnywhere(): Promise<void> {
    try {
      await this.renewLease();
      return;
    } catch (error) {
      if (error instanceof ApiError || (error instanceof JoinError && error.fatal)) throw error;
      const failed = this.currentServer;
      for (const server of this.serverList().filter((s) => s !== failed)) {
        this.connectTo(server);
        try {
          await this.renewLease();
          this.logger.warn({ from: failed, to: server, reason: (error as Error).message }, 'server unreachable; moved to another server');
          return;
        } catch (next) {
          if (next instanceof ApiError) throw next;
        }
      }
      if (failed) this.connectTo(failed);
      throw error;
    }
  }

  /** One renewal. Patches are blind merges (no read first): one request per heartbeat. */
  private async renewLease(): Promise<void> {
    const client = this.client!;
    const name = this.options.nodeName;
    const now = Date.now();
    const started = performance.now();
    const sentAtMono = monoNowMs();
    try {
      await client.patch(LEASES, NODE_LEASE_NAMESPACE, name, 'merge', {
        metadata: { annotations: { [HEALTH_ANNOTATION]: JSON.stringify(this.health), [RELEASED_ANNOTATION]: null } },
        spec: this.leaseSpec(now),
      });
    } catch (error) {
      this.metrics?.leaseRenewal.observe({ result: 'error' }, (performance.now() - started) / 1000);
      if (!(error instanceof ApiError)) throw error;
      const refused = (e: unknown): boolean => e instanceof ApiError && (e.code === 403 || e.code === 401);
      if (error.code === 404) {
        try {
          await client.create(LEASES, NODE_LEASE_NAMESPACE, this.leaseObject(now));
        } catch (createError) {
          if (!refused(createError)) throw createError;
          // The lease went with our Node (kubectl delete node): register again, which recreates both.
          this.logger.warn({ reason: (createError as Error).message }, 'our Node is gone; registering again');
          await this.reregister();
          return;
        }
      } else if (refused(error)) {
        // Our node incarnation or credential is gone (node deleted, name re-registered).
        this.logger.warn({ reason: error.message }, 'lease renewal refused; registering again');
        await this.reregister();
        return;
      } else {
        throw error;
      }
    }
    this.pods?.renewalConfirmed(sentAtMono);
    this.metrics?.leaseRenewal.observe({ result: 'ok' }, (performance.now() - started) / 1000);
  }

  private reregister(): Promise<void> {
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

  private scheduleRenewal(): void {
    if (this.leaseReleased) return;
    const interval = this.timings!.nodeLeaseRenewIntervalMs;
    this.renewTimer = setTimeout(() => {
      this.renewLeaseAnywhere()
        .catch((error: unknown) => {
          if (error instanceof JoinError && error.fatal) {
            this.logger.error({ reason: error.message }, 'this node can no longer join the cluster');
          } else {
            const hint = clockHint(error);
            this.logger.warn({ reason: (error as Error).message, ...(hint ? { hint } : {}) }, 'lease renewal failed; retrying');
          }
        })
        .finally(() => this.scheduleRenewal());
    }, interval);
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
    const drainDeadline = started + Math.max(1000, this.options.shutdownGracePeriodMs - 1500);
    clearInterval(this.statusTimer);
    clearInterval(this.healthTimer);
    clearInterval(this.serverListTimer);
    const name = this.options.nodeName;
    try {
      if (this.client && this.nodeUid) {
        const node = await this.client.get(NODES, undefined, name);
        const alreadyCordoned = (node?.spec as { unschedulable?: boolean } | undefined)?.unschedulable === true;
        const record: ShutdownRecord = { reason, time: new Date().toISOString(), cordoned: !alreadyCordoned };
        writeFileAtomic(this.shutdownFile(), JSON.stringify(record), 0o644);
        await this.client.patch(NODES, undefined, name, 'merge', {
          metadata: { annotations: { [SHUTDOWN_ANNOTATION]: JSON.stringify(record) } },
          spec: { unschedulable: true },
        });
        this.logger.info({ reason, cordoned: record.cordoned }, 'planned shutdown: recorded and cordoned');
        await this.drain(drainDeadline);
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not complete the drain');
    }
    try {
      // Whatever the drain left (no API, a slow owner) stops here: a planned stop leaves nothing running.
      this.pods?.beginDrain();
      await this.pods?.stopAll(Math.max(500, drainDeadline - Date.now()));
      this.pods?.stop();
      this.leaseReleased = true;
      clearTimeout(this.renewTimer);
      if (this.client && this.nodeUid) {
        await this.client.patch(LEASES, NODE_LEASE_NAMESPACE, name, 'merge', {
          metadata: { annotations: { [RELEASED_ANNOTATION]: 'true' } },
          spec: { holderIdentity: leaseHolderIdentity(name, this.nodeUid) },
        });
        this.logger.info({ ms: Date.now() - started }, 'lease released');
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not complete the shutdown notice');
    } finally {
      this.leaseReleased = true;
      clearTimeout(this.renewTimer);
      // Cut idle keep-alive connections first: close() alone would wait for them to time out.
      const closed = new Promise<void>((resolve) => (this.endpoint ? this.endpoint.close(() => resolve()) : resolve()));
      this.endpoint?.closeAllConnections();
      await closed;
      this.client?.close();
    }
  }

  /** Evict every pod bound here; wait until they are gone and their owners have them running elsewhere. */
  private async drain(deadline: number): Promise<void> {
    const pods = this.pods;
    const client = this.client;
    if (!pods || !client) return;
    pods.beginDrain();
    const bound = pods.boundPods().filter((p) => !p.metadata.deletionTimestamp);
    if (!bound.length) return;
    // For each owner: how many of its pods run elsewhere now, and how many leave this node.
    const owners = new Map<string, { before: number; leaving: number }>();
    for (const pod of bound) {
      const owner = controllerOf(pod)?.uid;
      if (owner) owners.set(owner, { before: 0, leaving: (owners.get(owner)?.leaving ?? 0) + 1 });
    }
    const readyElsewhere = async (): Promise<Map<string, number>> => {
      const counts = new Map<string, number>();
      const { items } = await this.client!.list(PODS, undefined);
      for (const pod of items) {
        const owner = controllerOf(pod)?.uid;
        if (!owner || !owners.has(owner) || pod.metadata.deletionTimestamp) continue;
        if ((pod.spec as { nodeName?: string } | undefined)?.nodeName === this.options.nodeName) continue;
        const statuses = ((pod.status as { containerStatuses?: { ready?: boolean }[] } | undefined)?.containerStatuses ?? []);
        const ready = (pod.status as { phase?: string } | undefined)?.phase === 'Running' && statuses.length > 0 && statuses.every((c) => c.ready);
        if (ready) counts.set(owner, (counts.get(owner) ?? 0) + 1);
      }
      return counts;
    };
    for (const [owner, count] of await readyElsewhere()) owners.get(owner)!.before = count;
    // Evict everything; a pod its disruption budget protects right now (429) is asked again until
    // the deadline, as kubectl drain does: another pod's replacement may free the budget.
    let pending = [...bound];
    while (pending.length) {
      const blocked: KubeObject[] = [];
      for (const pod of pending) {
        const path = `/api/v1/namespaces/${encodeURIComponent(pod.metadata.namespace!)}/pods/${encodeURIComponent(pod.metadata.name!)}/eviction`;
        try {
          await client.request('POST', path, {
            apiVersion: 'policy/v1',
            kind: 'Eviction',
            metadata: { name: pod.metadata.name, namespace: pod.metadata.namespace },
          });
        } catch (error) {
          if (error instanceof ApiError && error.code === 429) blocked.push(pod);
          else if (!(error instanceof ApiError && error.code === 404)) {
            this.logger.warn({ err: error, pod: pod.metadata.name }, 'eviction failed; the pod will be stopped with the node');
          }
        }
      }
      pending = blocked;
      if (!pending.length) break;
      if (Date.now() + 500 >= deadline) {
        this.logger.warn(
          { pods: pending.map((p) => `${p.metadata.namespace}/${p.metadata.name}`) },
          'disruption budgets still block these evictions at the deadline; they stop with the node',
        );
        break;
      }
      await sleep(500);
    }
    this.logger.info({ pods: bound.length, blocked: pending.length }, 'draining: evicted the pods on this node');
    const emptied = await pods.waitUntilEmpty(deadline);
    // Replacements need somewhere to run: with no other Ready, schedulable node (a one-node
    // cluster, or the last node standing) waiting for them would only delay the shutdown.
    const { items: nodes } = await client.list(NODES, undefined).catch(() => ({ items: [] as KubeObject[] }));
    const elsewhere = nodes.some(
      (n) =>
        n.metadata.name !== this.options.nodeName &&
        n.metadata.labels?.['drover.io/state'] === 'Ready' &&
        (n.spec as { unschedulable?: boolean } | undefined)?.unschedulable !== true,
    );
    if (!elsewhere && owners.size) this.logger.info('no other Ready node to run replacements; not waiting for them');
    let replaced = owners.size === 0 || !elsewhere;
    while (!replaced && Date.now() < deadline) {
      const counts = await readyElsewhere().catch(() => new Map<string, number>());
      replaced = [...owners].every(([owner, { before, leaving }]) => (counts.get(owner) ?? 0) >= before + leaving);
      if (!replaced) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    this.logger.info(
      { emptied, replaced, ms: Date.now() - (deadline - Math.max(1000, this.options.shutdownGracePeriodMs - 1500)) },
      emptied && replaced ? 'drained: pods gone and running elsewhere' : 'drain incomplete at the deadline; stopping what is left',
    );
  }
}

/** A shutdown record from its JSON text; an unreadable record is as good as none. */
function parseShutdownRecord(text: string | undefined): ShutdownRecord | undefined {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as ShutdownRecord;
  } catch {
    return undefined;
  }
}

/**
 * Who is calling the agent's endpoint, from a client certificate the client CA verified: an API
 * server, or an administrator (system:masters); anyone else is no one.
 */
function endpointCaller(socket: TLSSocket): 'apiserver' | 'admin' | undefined {
  if (!socket.authorized) return undefined;
  const subject = socket.getPeerCertificate().subject;
  if (subject?.CN === API_SERVER_CLIENT_NAME) return 'apiserver';
  const organizations = ([] as string[]).concat(subject?.O ?? []);
  return organizations.includes('system:masters') ? 'admin' : undefined;
}
