import { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, PODS } from '../client/types.js';
import { type ControllerLeaseTimings, controllerLeaseTimings } from '../config/timings.js';
import type { Logger } from '../logging/logger.js';
import type { WriteGuard } from '../datastore/types.js';
import { FENCING_MARGIN_MS, fencingThresholds } from '../node-protocol/fencing.js';
import { type Clock, systemClock } from './clock.js';
import { EventRecorder } from './events.js';
import { FailoverController } from './failover.js';
import { fencedClient } from './fenced-client.js';
import { DatastoreStalls } from './datastore-stalls.js';
import { LeaderElector } from './leader-election.js';
import { LeaseWitness } from './lease-witness.js';
import { NodeLifecycleController, type NodeLifecycleOptions } from './node-lifecycle.js';
import { WorkloadControllers } from './workload-controllers.js';

/**
 * The controller manager, as kube-controller-manager is: it competes for the controller lease
 * and, while it holds it, runs every leader-only controller over one set of shared informers (one
 * list and one watch per resource for all of them): the node lifecycle controller, the workload
 * controllers, failover, and whatever other leader-only controllers the caller passes in (the
 * cluster layer's node record reconciler, which controllers may not import). Each term of
 * leadership gets fresh controllers and informers, started only once every informer has listed
 * (a new leader acts on what the datastore holds, never on what a previous term cached); losing
 * the lease stops them all. The controllers write through a fenced client (fenced-client.ts): a
 * write is refused once the term's deadline has passed by this server's monotonic clock, so a
 * deposed leader writes nothing after another server could have taken over.
 */

/** A controller that runs only on the leader, started and stopped with each term. */
export interface LeaderOnlyController {
  start(): void | Promise<void>;
  stop(): void;
}

/** The cluster timings the controllers judge by (cluster-scoped settings). */
export interface ControllerTimings {
  nodeLeaseRenewIntervalMs: number;
  nodeMonitorGracePeriodMs: number;
  fencingTimeoutMs: number;
  defaultUnavailableTolerationMs: number;
}

/** The controller lease's name; its timings follow from the node grace period (`controllerLeaseTimings`). */
export const CONTROLLER_LEASE = { namespace: 'kube-system', name: 'drover-controllers' } as const;

export interface ControllerManagerOptions {
  client: ApiClient;
  logger: Logger;
  /** This server's identity in the controller lease and as the events' reporting instance. */
  identity: string;
  timings: ControllerTimings;
  /** Metrics and deletion hooks of the node lifecycle controller. */
  lifecycle?: Pick<NodeLifecycleOptions, 'onUnavailable' | 'onNodeDeleted' | 'onClockOffset' | 'tickMs' | 'renewals'>;
  /** Started after the node lifecycle controller, stopped before it. */
  extraControllers?: readonly LeaderOnlyController[];
  /**
   * Controllers built afresh for each term on its shared informers (the ServiceAccount
   * controllers): built before the informers list, started after the extra controllers, stopped
   * before them.
   */
  termControllers?: readonly ((informers: SharedInformers, clock: Clock) => LeaderOnlyController)[];
  /** The controller lease's timings; by default derived from `timings.nodeMonitorGracePeriodMs`. */
  lease?: ControllerLeaseTimings;
  /** The workload controllers' full resync interval. */
  resyncMs?: number;
  /** The system clock unless a test drives one. */
  clock?: Clock;
  /**
   * Where the controller lease lives in the datastore (LocalClient.storageKey), for writeGuard().
   * Absent: no guard, the clock-only fence.
   */
  leaseKey?: string;
  /**
   * The client the controllers write through, under the fence; `client` by default. The server
   * gives `client.withWriteGuard(() => manager.writeGuard())`, so each write carries the guard.
   */
  controllerClient?: ApiClient;
}

/** What one term of leadership runs. */
interface Term {
  /** Every informer has listed: until then the controllers may read but not write. */
  synced: boolean;
  informers: SharedInformers;
  built: LeaderOnlyController[];
  lifecycle: NodeLifecycleController;
  workloads: WorkloadControllers;
  failover: FailoverController;
}

export class ControllerManager {
  private readonly elector: LeaderElector;
  private readonly clock: Clock;
  private readonly lifecycleEvents: EventRecorder;
  private readonly workloadEvents: EventRecorder;
  private term: Term | undefined;
  /** What the controllers write through: refused outside a term (see fenced-client.ts). */
  private readonly client: ApiClient;
  private refusedWrites = 0;
  /** The node leases as this server sees them while it does not lead (lease-witness.ts). */
  private readonly witness: LeaseWitness;
  /** When the datastore committed nothing, by this server's own lease writes (datastore-stalls.ts). */
  private readonly stalls: DatastoreStalls;
  private stopped = false;

  constructor(private readonly options: ControllerManagerOptions) {
    const { logger, identity } = options;
    this.clock = options.clock ?? systemClock;
    this.client = fencedClient(
      options.controllerClient ?? options.client,
      () => this.writeRefusal(),
      identity,
      (verb, why) => {
        // One line per term is enough to tell what happened; the count says how often.
        if (this.refusedWrites++ === 0) logger.warn({ verb, why }, 'refused a controller write');
      },
      () => this.writeGuard(),
    );
    const client = this.client;
    this.witness = new LeaseWitness(options.client, this.clock, logger.child({ component: 'lease-witness' }), 2 * options.timings.nodeLeaseRenewIntervalMs);
    this.lifecycleEvents = new EventRecorder(client, 'drover-node-lifecycle', identity, logger, this.clock);
    this.workloadEvents = new EventRecorder(client, 'drover-controller-manager', identity, logger, this.clock);
    const leaseTimings = options.lease ?? controllerLeaseTimings(options.timings.nodeMonitorGracePeriodMs);
    // A lease write outstanding for half the step-down window: the datastore is not committing.
    this.stalls = new DatastoreStalls(leaseTimings.stepDownMs / 2);
    this.elector = new LeaderElector(
      options.client,
      { ...CONTROLLER_LEASE, ...leaseTimings, identity, clock: this.clock, stalls: this.stalls },
      {
        onStartedLeading: () =>
          void this.startTerm().catch((error: unknown) => logger.error({ err: error }, 'the controllers failed to start')),
        onStoppedLeading: () => this.stopTerm(),
      },
      logger,
    );
  }

  get isLeader(): boolean {
    return this.elector.isLeader;
  }

  /**
   * Whether a controller write may go out now: a term is running and the elector's deadline has
   * not passed. Leader-only controllers built outside the manager write through `fencedClient`
   * with this gate.
   */
  mayWrite(): boolean {
    return this.writeRefusal() === undefined;
  }

  /**
   * The guard of a controller write made now: the lease's key at this server's last committed
   * renewal. Undefined without `leaseKey`, or between terms (the fence refuses those writes anyway).
   */
  writeGuard(): WriteGuard | undefined {
    const version = this.elector.termVersion;
    const revision = version === undefined ? NaN : Number(version);
    return this.options.leaseKey !== undefined && Number.isSafeInteger(revision) ? { key: this.options.leaseKey, modRevision: revision } : undefined;
  }

  /** Why a controller write may not go out now; undefined when it may. */
  writeRefusal(): string | undefined {
    if (!this.term || !this.elector.isLeader) return 'this server does not hold the controller lease (another server may lead now)';
    if (!this.elector.mayWrite()) return 'no renewal of the controller lease was committed recently enough (another server may take over)';
    // A work queue runs as soon as its first key arrives, which may be while another informer is
    // still listing: a ReplicaSet seen before its pods would be given new ones.
    if (!this.term.synced) return 'this term’s informers have not all listed yet';
    return undefined;
  }

  /** Controller writes refused since this manager started (a deposed leader's attempts). */
  get refusedWriteCount(): number {
    return this.refusedWrites;
  }

  /** The node lifecycle controller of the current term, if leading (tests drive it). */
  get lifecycle(): NodeLifecycleController | undefined {
    return this.term?.lifecycle;
  }

  /** Compete for the controller lease; the controllers run while this server holds it. */
  start(): void {
    this.stopped = false;
    this.witness.start();
    this.elector.start();
  }

  /**
   * Stop competing: the controllers stop at once, then the lease is released (holder cleared) so
   * another server can take over without waiting for it to expire.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    const released = this.elector.stop();
    this.stopTerm();
    this.witness.stop();
    await released;
  }

  private async startTerm(): Promise<void> {
    const { logger, timings } = this.options;
    const client = this.client;
    this.refusedWrites = 0;
    const clock = this.clock;
    const informers = new SharedInformers(client, logger);
    // Every controller registers its handlers before the first list, so none misses an event.
    const lifecycle = new NodeLifecycleController(client, this.lifecycleEvents, logger.child({ controller: 'node-lifecycle' }), {
      ...this.options.lifecycle,
      gracePeriodMs: timings.nodeMonitorGracePeriodMs,
      clock,
      informers,
      witness: this.witness,
      stalls: this.stalls,
    });
    const workloads = new WorkloadControllers(client, informers, {
      logger,
      events: this.workloadEvents,
      clock,
      ...(this.options.resyncMs !== undefined ? { resyncMs: this.options.resyncMs } : {}),
    });
    // Failover reads the lifecycle controller's observations and the shared pod informer.
    const failover = new FailoverController(
      client,
      lifecycle,
      informers.get(PODS),
      this.lifecycleEvents,
      logger.child({ controller: 'failover' }),
      {
        defaultTolerationMs: timings.defaultUnavailableTolerationMs,
        fencingTimeoutMs: timings.fencingTimeoutMs,
        fencingMarginMs: FENCING_MARGIN_MS,
        silenceThresholdMs: fencingThresholds(timings.nodeLeaseRenewIntervalMs, timings.fencingTimeoutMs).controllerSilenceMs,
      },
      clock,
    );
    const built = (this.options.termControllers ?? []).map((build) => build(informers, clock));
    const term: Term = { synced: false, informers, built, lifecycle, workloads, failover };
    this.term = term;
    const current = (): boolean => this.term === term;
    await informers.start();
    // A list that failed is retried; nothing acts before every informer holds a fresh one.
    while (!informers.hasSynced && current()) await new Promise((resolve) => setTimeout(resolve, 50));
    if (!current()) return;
    term.synced = true;
    await lifecycle.start();
    // The term's controller has taken in what the witness saw; from here its own watch sees all.
    this.witness.stop();
    for (const extra of this.options.extraControllers ?? []) {
      await extra.start();
      // The lease was lost while it started: stopTerm stopped it before it was up; stop it now.
      if (!current()) return extra.stop();
    }
    for (const controller of built) {
      await controller.start();
      if (!current()) return; // stopTerm stopped every built one
    }
    if (!current()) return;
    workloads.start();
    failover.start();
  }

  private stopTerm(): void {
    const term = this.term;
    if (!term) return;
    this.term = undefined;
    // Failover first: it reads the lifecycle controller and the pod informer.
    term.failover.stop();
    term.workloads.stop();
    for (const controller of term.built) controller.stop();
    for (const extra of this.options.extraControllers ?? []) extra.stop();
    term.lifecycle.stop();
    term.informers.stop();
    if (!this.stopped) this.witness.start();
  }
}
