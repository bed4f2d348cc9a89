import { ApiError } from '../apiserver/errors.js';
import { type KubeObject, kubeMicroTime } from '../apiserver/objects.js';
import { type ApiClient, LEASES } from '../client/types.js';
import type { ControllerLeaseTimings } from '../config/timings.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, type TimerHandle } from './clock.js';
import type { DatastoreStalls } from './datastore-stalls.js';
import { type LeaseSpec, leaseSpec } from './kube-types.js';

/**
 * Exactly one server runs the controllers: the holder of a Lease. Expiry is judged by this
 * server's own monotonic clock (clock.ts) from when it last saw the lease change, never by
 * comparing timestamps written by another host, nor by this host's wall clock, which may be
 * stepped. Writes are compare-and-swap on resourceVersion, so two candidates cannot both take an
 * expired lease; the datastore (SQLite or etcd) does the arbitration.
 *
 * The leader stops writing by its own clock before anyone else can begin: it counts from when it
 * *sent* its last renewal that was committed, a candidate from when it *saw* that renewal, which
 * is later; the leader's writes are refused from `stepDownMs` on, a candidate takes over only past
 * `durationMs` (src/config/timings.ts, `controllerLeaseTimings`). `mayWrite()` is that deadline
 * read at the instant of each controller write (fenced-client.ts), so a leader that was paused
 * past it and resumes writes nothing, timers or not.
 *
 * Past the deadline the term is *suspended*, not ended: a later renewal of a lease still held by
 * this server (nobody else can have led meanwhile: taking the lease means writing one's own name
 * into it) lifts the fence and the term goes on with its informers and controllers. The term ends
 * when another holder is seen, or `abandonMs` after the last committed renewal's send.
 */

export interface LeaderElectionOptions extends ControllerLeaseTimings {
  namespace: string;
  name: string;
  /** Stable across restarts of the same server, so a restarted leader takes its lease straight back. */
  identity: string;
  /** The system clock unless a test drives one. */
  clock?: Clock;
  /** Told of every lease write's send and end, to measure datastore stalls (datastore-stalls.ts). */
  stalls?: Pick<DatastoreStalls, 'sent' | 'ended'>;
}

export interface LeaderCallbacks {
  onStartedLeading(): void;
  onStoppedLeading(): void;
}

export class LeaderElector {
  private leading = false;
  private suspended = false;
  private timer: TimerHandle | undefined;
  private stepDownTimer: TimerHandle | undefined;
  private stopped = false;
  private observedVersion: string | undefined;
  private observedAt = 0;
  /** When the last renewal that was committed was sent (this clock): the term's deadline counts from it. */
  private lastRenewalSentAt = 0;
  /** The lease's resourceVersion as this server's last committed renewal left it: its writes' guard (fenced-client.ts). */
  private renewedVersion: string | undefined;
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

  /**
   * Whether a controller write may go out now: this server leads and its term's deadline (the last
   * committed renewal's send time + `stepDownMs`) has not passed by its monotonic clock. Read at
   * every write, so it does not depend on the step-down timer having fired.
   */
  mayWrite(): boolean {
    return this.leading && this.clock.now() < this.deadline();
  }

  /**
   * The lease's resourceVersion at this server's last committed renewal while it leads: a write
   * guarded by it is refused once anyone else has written the lease since.
   */
  get termVersion(): string | undefined {
    return this.leading ? this.renewedVersion : undefined;
  }

  start(): void {
    void this.tick();
  }

  /** Stop, and release the lease so another server can take over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    this.clock.clearTimeout(this.stepDownTimer);
    if (!this.leading) return;
    this.setLeading(false, 'stopped');
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

  private deadline(): number {
    return this.lastRenewalSentAt + this.options.stepDownMs;
  }

  private setLeading(leading: boolean, why: string): void {
    if (leading === this.leading) return;
    this.leading = leading;
    this.suspended = false;
    if (leading) {
      this.logger.info({ identity: this.options.identity, lease: `${this.options.namespace}/${this.options.name}` }, 'became the controller leader');
      this.callbacks.onStartedLeading();
    } else {
      this.clock.clearTimeout(this.stepDownTimer);
      this.logger.warn({ identity: this.options.identity, why }, 'stopped being the controller leader');
      this.callbacks.onStoppedLeading();
    }
  }

  /** A renewal sent at `sentAt` was committed, leaving the lease at `version`: extend the term, or begin one. */
  private renewed(sentAt: number, version: string | undefined): void {
    // Whatever its timing, the lease is at this version now: a guard with an older one can only fail.
    this.renewedVersion = version;
    // A renewal that took longer than the whole step-down window is no proof of anything now.
    if (this.clock.now() - sentAt >= this.options.stepDownMs) {
      this.logger.warn({ tookMs: Math.round(this.clock.now() - sentAt) }, 'a controller lease renewal was committed too late to count');
      return;
    }
    this.lastRenewalSentAt = sentAt;
    if (this.suspended) {
      this.suspended = false;
      this.logger.info({ identity: this.options.identity }, 'the controller lease was renewed again: controller writes resume');
    }
    this.setLeading(true, 'renewed');
    this.clock.clearTimeout(this.stepDownTimer);
    this.stepDownTimer = this.clock.setTimeout(() => this.checkDeadline(), this.deadline() - this.clock.now());
  }

  /**
   * Runs at the deadline (writes are fenced from then on: this only says so) and at the abandon
   * time, whatever the renewal in flight is doing (it may hang on a datastore without quorum).
   */
  private checkDeadline(): void {
    if (!this.leading) return;
    const now = this.clock.now();
    const abandonAt = this.lastRenewalSentAt + this.options.abandonMs;
    if (now >= abandonAt) {
      this.setLeading(false, `no renewal of the controller lease was committed within ${this.options.abandonMs} ms`);
      return;
    }
    if (now >= this.deadline() && !this.suspended) {
      this.suspended = true;
      this.logger.warn(
        { identity: this.options.identity },
        `no renewal of the controller lease was committed within ${this.options.stepDownMs} ms: controller writes are refused until one is`,
      );
    }
    const next = now < this.deadline() ? this.deadline() : abandonAt;
    this.stepDownTimer = this.clock.setTimeout(() => this.checkDeadline(), next - now);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const sentAt = this.clock.now();
    this.options.stalls?.sent(sentAt);
    try {
      await this.tryAcquireOrRenew();
    } catch (error) {
      this.logger.debug({ err: error }, 'leader election attempt failed');
    } finally {
      this.options.stalls?.ended(sentAt, this.clock.now());
    }
    // Also checked here: a paused process may run this tick before the step-down timer.
    if (this.leading && this.clock.now() >= this.deadline()) {
      this.clock.clearTimeout(this.stepDownTimer);
      this.checkDeadline();
    }
    if (!this.stopped) {
      this.timer = this.clock.setTimeout(() => void this.tick(), this.leading ? this.options.renewIntervalMs : this.options.retryIntervalMs);
    }
  }

  private async tryAcquireOrRenew(): Promise<void> {
    const { namespace, name, identity } = this.options;
    // The send time: the term is counted from it, never from the answer.
    const sentAt = this.clock.now();
    // Written into the lease for people to read; never compared with anything.
    const wallNow = this.clock.wallNow();
    const durationSeconds = Math.max(1, Math.ceil(this.options.durationMs / 1000));
    const lease = await this.client.get(LEASES, namespace, name);
    if (!lease) {
      try {
        const created = await this.client.create(LEASES, namespace, {
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
        this.renewed(sentAt, created.metadata.resourceVersion);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 409)) throw error;
      }
      return;
    }
    const spec = leaseSpec(lease);
    const now = this.clock.now();
    if (lease.metadata.resourceVersion !== this.observedVersion) {
      this.observedVersion = lease.metadata.resourceVersion;
      this.observedAt = now;
    }
    const held = spec.holderIdentity === identity;
    const free = !spec.holderIdentity;
    // The holder's own declared duration, and never less than ours: an older server's longer lease is honoured.
    const durationMs = Math.max((spec.leaseDurationSeconds ?? durationSeconds) * 1000, this.options.durationMs);
    const expired = now - this.observedAt > durationMs;
    if (!held && !free && !expired) {
      this.setLeading(false, `the lease is held by ${spec.holderIdentity}`);
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
      this.observedAt = this.clock.now();
      if (!held && this.leading) {
        // Our lease was taken and we took it back before our own deadline noticed: a new term.
        this.setLeading(false, 'the lease changed hands');
      }
      this.renewed(sentAt, updated.metadata.resourceVersion);
    } catch (error) {
      if (error instanceof ApiError && error.code === 409) {
        if (held) this.logger.debug('controller lease renewal raced with another writer');
        return;
      }
      throw error;
    }
  }
}
