import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeMicroTime } from '../apiserver/objects.js';
import { type ApiClient, LEASES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, type TimerHandle } from './clock.js';
import { type LeaseSpec, leaseSpec } from './kube-types.js';

/**
 * Exactly one server runs the controllers: the holder of a Lease. Expiry is judged by this
 * server's own monotonic clock (clock.ts) from when it last saw the lease change, never by
 * comparing timestamps written by another host, nor by this host's wall clock, which may be stepped. Writes are compare-and-swap on resourceVersion, so two candidates
 * cannot both take an expired lease; the datastore (SQLite or etcd) does the arbitration.
 */

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  /** Stable across restarts of the same server, so a restarted leader takes its lease straight back. */
  identity: string;
  leaseDurationMs: number;
  renewIntervalMs: number;
  /** The system clock unless a test drives one. */
  clock?: Clock;
}

export interface LeaderCallbacks {
  onStartedLeading(): void;
  onStoppedLeading(): void;
}

export class LeaderElector {
  private leading = false;
  private timer: TimerHandle | undefined;
  private stopped = false;
  private observedVersion: string | undefined;
  private observedAt = 0;
  private lastRenewedAt = 0;
  private readonly clock: Clock;

  constructor(
    private readonly client: ApiClient,
    private readonly options: LeaderElectionOptions,
    private readonly callbacks: LeaderCallbacks,
    private readonly logger: Logger,
  ) {
    this.clock = options.clock ?? systemClock;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    void this.tick();
  }

  /** Stop, and release the lease so another server can take over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    if (!this.leading) return;
    this.setLeading(false);
    try {
      const lease = await this.client.get(LEASES, this.options.namespace, this.options.name);
      if (lease && leaseSpec(lease).holderIdentity === this.options.identity) {
        const spec: LeaseSpec = { ...leaseSpec(lease), holderIdentity: '', leaseDurationSeconds: 1 };
        await this.client.update(LEASES, this.options.namespace, { ...lease, spec: spec as KubeObject['spec'] });
      }
    } catch (error) {
      this.logger.debug({ err: error }, 'could not release the controller lease');
    }
  }

  private setLeading(leading: boolean): void {
    if (leading === this.leading) return;
    this.leading = leading;
    if (leading) {
      this.logger.info({ identity: this.options.identity, lease: `${this.options.namespace}/${this.options.name}` }, 'became the controller leader');
      this.callbacks.onStartedLeading();
    } else {
      this.logger.warn({ identity: this.options.identity }, 'stopped being the controller leader');
      this.callbacks.onStoppedLeading();
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.tryAcquireOrRenew();
    } catch (error) {
      this.logger.debug({ err: error }, 'leader election attempt failed');
    }
    // A leader that cannot renew for a whole lease duration must assume someone else took over.
    if (this.leading && this.clock.now() - this.lastRenewedAt > this.options.leaseDurationMs) this.setLeading(false);
    if (!this.stopped) {
      this.timer = this.clock.setTimeout(() => void this.tick(), this.leading ? this.options.renewIntervalMs : this.options.renewIntervalMs / 2);
    }
  }

  private async tryAcquireOrRenew(): Promise<void> {
    const { namespace, name, identity } = this.options;
    const now = this.clock.now();
    // Written into the lease for people to read; never compared with anything.
    const wallNow = this.clock.wallNow();
    const durationSeconds = Math.max(1, Math.ceil(this.options.leaseDurationMs / 1000));
    const lease = await this.client.get(LEASES, namespace, name);
    if (!lease) {
      try {
        await this.client.create(LEASES, namespace, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name, namespace },
          spec: {
            holderIdentity: identity,
            leaseDurationSeconds: durationSeconds,
            acquireTime: kubeMicroTime(wallNow),
            renewTime: kubeMicroTime(wallNow),
            leaseTransitions: 0,
          },
        });
        this.lastRenewedAt = now;
        this.setLeading(true);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 409)) throw error;
      }
      return;
    }
    const spec = leaseSpec(lease);
    if (lease.metadata.resourceVersion !== this.observedVersion) {
      this.observedVersion = lease.metadata.resourceVersion;
      this.observedAt = now;
    }
    const held = spec.holderIdentity === identity;
    const free = !spec.holderIdentity;
    const expired = now - this.observedAt > (spec.leaseDurationSeconds ?? durationSeconds) * 1000;
    if (!held && !free && !expired) {
      this.setLeading(false);
      return;
    }
    const next: LeaseSpec = {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds: durationSeconds,
      renewTime: kubeMicroTime(wallNow),
      ...(held ? {} : { acquireTime: kubeMicroTime(wallNow), leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
    };
    try {
      const updated = await this.client.update(LEASES, namespace, { ...lease, spec: next as KubeObject['spec'] });
      this.observedVersion = updated.metadata.resourceVersion;
      this.observedAt = now;
      this.lastRenewedAt = now;
      this.setLeading(true);
    } catch (error) {
      if (error instanceof ApiError && error.code === 409) {
        if (held) this.logger.debug('controller lease renewal raced with another writer');
        return;
      }
      throw error;
    }
  }
}
