import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeMicroTime } from '../apiserver/objects.js';
import { LEASES } from '../client/types.js';
import { HEALTH_ANNOTATION, leaseHolderIdentity, NODE_LEASE_NAMESPACE, RELEASED_ANNOTATION } from '../node-protocol/names.js';
import type { AgentHealth } from '../node-protocol/records.js';
import type { Logger } from '../logging/logger.js';
import type { AgentMetrics } from '../metrics/metrics.js';
import { clockHint, JoinError } from './bootstrap.js';
import type { PodManager } from './pod-manager.js';
import { monoNowMs } from './pods/fencing.js';
import type { NodeRegistration } from './registration.js';
import type { ServerConnection } from './servers.js';

/**
 * The node's heartbeat: its Lease, renewed every `node-lease-renew-interval`, carrying the
 * agent's health. A renewal the server cannot be reached for moves the agent to another server
 * (the node credential and the CA are the same on every server); one the server refuses because
 * the node's credential or Node is gone registers the node again. Each confirmed renewal feeds
 * the fencing file that singleton pods' supervisors judge the control plane by. A planned stop
 * ends renewals for good and releases the lease.
 */

export interface LeaseRenewalContext {
  nodeName: string;
  connection: ServerConnection;
  registration: NodeRegistration;
  health: () => AgentHealth;
  /** Present once the node is registered. */
  pods: () => PodManager | undefined;
  /** Present when this node's own `supervisor-metrics` setting is on. */
  metrics: () => AgentMetrics | undefined;
  logger: Logger;
}

/**
 * The server, not the request, failed: no answer, or a 5xx (a server whose datastore cannot
 * commit is as useless to a heartbeat as one that is down). A 4xx is about the request or the
 * node, and another server would say the same.
 */
function serverFailed(error: unknown): boolean {
  if (error instanceof ApiError) return error.code >= 500;
  return !(error instanceof JoinError && error.fatal);
}

export class LeaseRenewal {
  private timer: NodeJS.Timeout | undefined;
  /** Renewals continue through a drain; this stops them for good. */
  private released = false;

  constructor(private readonly context: LeaseRenewalContext) {}

  /** Renew every renew interval from now on, until stop(). */
  start(): void {
    this.schedule();
  }

  /** No renewal after this one (one in flight finishes and schedules none). */
  stop(): void {
    this.released = true;
    clearTimeout(this.timer);
  }

  /** Stop renewing and tell the control plane the lease was let go on purpose: a planned stop. */
  async release(): Promise<void> {
    this.stop();
    const name = this.context.nodeName;
    await this.context.connection.client!.patch(LEASES, NODE_LEASE_NAMESPACE, name, 'merge', {
      metadata: { annotations: { [RELEASED_ANNOTATION]: 'true' } },
      spec: { holderIdentity: leaseHolderIdentity(name, this.context.registration.nodeUid) },
    });
  }

  /**
   * One renewal, moving to another server when this one cannot be reached or fails it (a 5xx:
   * its etcd member lost its leader, its datastore is gone): the node credential and the CA are
   * the same on every server, so any live one will do.
   */
  async renewAnywhere(): Promise<void> {
    const { connection, logger } = this.context;
    try {
      await this.renew();
      return;
    } catch (error) {
      if (!serverFailed(error)) throw error;
      const failed = connection.server;
      for (const server of connection.candidates().filter((s) => s !== failed)) {
        connection.connect(server);
        try {
          await this.renew();
          logger.warn({ from: failed, to: server, reason: (error as Error).message }, 'server unreachable or failing; moved to another server');
          return;
        } catch (next) {
          if (!serverFailed(next)) throw next;
        }
      }
      if (failed) connection.connect(failed);
      throw error;
    }
  }

  private schedule(): void {
    if (this.released) return;
    const interval = this.context.registration.timings.nodeLeaseRenewIntervalMs;
    this.timer = setTimeout(() => {
      this.renewAnywhere()
        .catch((error: unknown) => {
          if (error instanceof JoinError && error.fatal) {
            this.context.logger.error({ reason: error.message }, 'this node can no longer join the cluster');
          } else {
            const hint = clockHint(error);
            this.context.logger.warn({ reason: (error as Error).message, ...(hint ? { hint } : {}) }, 'lease renewal failed; retrying');
          }
        })
        .finally(() => this.schedule());
    }, interval);
  }

  /** One renewal. Patches are blind merges (no read first): one request per heartbeat. */
  private async renew(): Promise<void> {
    const { registration, logger } = this.context;
    const client = this.context.connection.client!;
    const metrics = this.context.metrics();
    const now = Date.now();
    const started = performance.now();
    const sentAtMono = monoNowMs();
    try {
      await client.patch(LEASES, NODE_LEASE_NAMESPACE, this.context.nodeName, 'merge', {
        metadata: { annotations: { [HEALTH_ANNOTATION]: JSON.stringify(this.context.health()), [RELEASED_ANNOTATION]: null } },
        spec: this.leaseSpec(now),
      });
    } catch (error) {
      metrics?.leaseRenewal.observe({ result: 'error' }, (performance.now() - started) / 1000);
      if (!(error instanceof ApiError)) throw error;
      const refused = (e: unknown): boolean => e instanceof ApiError && (e.code === 403 || e.code === 401);
      if (error.code === 404) {
        try {
          await client.create(LEASES, NODE_LEASE_NAMESPACE, this.leaseObject(now));
        } catch (createError) {
          if (!refused(createError)) throw createError;
          // The lease went with our Node (kubectl delete node): register again, which recreates both.
          logger.warn({ reason: (createError as Error).message }, 'our Node is gone; registering again');
          await registration.reregister();
          return;
        }
      } else if (refused(error)) {
        // Our node incarnation or credential is gone (node deleted, name re-registered).
        logger.warn({ reason: error.message }, 'lease renewal refused; registering again');
        await registration.reregister();
        return;
      } else {
        throw error;
      }
    }
    this.context.pods()?.renewalConfirmed(sentAtMono);
    metrics?.leaseRenewal.observe({ result: 'ok' }, (performance.now() - started) / 1000);
  }

  private leaseObject(now: number): KubeObject {
    const name = this.context.nodeName;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: NODE_LEASE_NAMESPACE,
        annotations: { [HEALTH_ANNOTATION]: JSON.stringify(this.context.health()) },
        ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: this.context.registration.nodeUid }],
      },
      spec: this.leaseSpec(now),
    };
  }

  /** What every renewal writes, and a new lease starts with. */
  private leaseSpec(now: number): Record<string, unknown> {
    return {
      holderIdentity: leaseHolderIdentity(this.context.nodeName, this.context.registration.nodeUid),
      leaseDurationSeconds: this.context.registration.timings.nodeLeaseDurationSeconds,
      renewTime: kubeMicroTime(now),
    };
  }
}
