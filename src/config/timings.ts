import { FENCING_MARGIN_MS, fencingThresholds, fencingTimeoutOf } from '../node-protocol/fencing.js';
import { formatDuration } from './duration.js';

/**
 * The cluster's failure timings in one place: the rules that tie the three settings together
 * (`timingProblems`), and every timing derived from settings, computed once (`deriveTimings`,
 * `shutdownTimings`) and read by the server, the controllers, the agent and the CLI instead of
 * being worked out where each is used. docs/node-lifecycle.md and docs/failover.md explain why
 * each value is what it is; test/unit/timings.test.ts pins the table.
 */

/*
 * The protocol facts agents and the controller leader must agree on (the fencing fallback, the
 * fencing margin, the outage rule's thresholds) are defined in src/node-protocol/fencing.ts; this
 * file puts them in the table with the rest.
 *
 * The rules: the CLI checks them on the resolved config, `drover cluster config set` on the
 * cluster record, and the server once more on its settings. Each problem names every key
 * involved, with a source label when known.
 */

export interface ClusterTimingValues {
  renewMs: number;
  graceMs: number;
  fencingMs: number;
}

export type TimingKey = 'node-lease-renew-interval' | 'node-monitor-grace-period' | 'fencing-timeout';

export function timingProblems(values: ClusterTimingValues, sourceOf: (key: TimingKey) => string = () => ''): string[] {
  const named = (key: TimingKey, ms: number): string => {
    const source = sourceOf(key);
    return `${key} (${formatDuration(ms)}${source ? `, ${source}` : ''})`;
  };
  const { renewMs, graceMs, fencingMs } = values;
  if (!(renewMs > 0)) return [`node-lease-renew-interval must be positive${sourceOf('node-lease-renew-interval') ? ` (${sourceOf('node-lease-renew-interval')})` : ''}`];
  const problems: string[] = [];
  if (graceMs < 3 * renewMs) {
    problems.push(
      `${named('node-monitor-grace-period', graceMs)} must be at least 3 × ${named('node-lease-renew-interval', renewMs)}, so that one or two late renewals never mark a node lost`,
    );
  }
  if (fencingMs < 2 * renewMs) {
    problems.push(
      `${named('fencing-timeout', fencingMs)} must be at least 2 × ${named('node-lease-renew-interval', renewMs)}, so that one late renewal never stops a singleton`,
    );
  }
  if (fencingMs >= graceMs) {
    problems.push(
      `${named('fencing-timeout', fencingMs)} must be shorter than ${named('node-monitor-grace-period', graceMs)}: a node must have stopped its singletons before it is declared lost`,
    );
  }
  return problems;
}

/** The cluster-wide timings a server hands its agents at registration (`ClusterTimings`). */
export interface ClusterTimingSettings {
  nodeLeaseRenewIntervalMs: number;
  nodeMonitorGracePeriodMs: number;
  /** Absent when the server predates the fencing-timeout setting: see `deriveTimings`. */
  fencingTimeoutMs?: number;
}

/** Every timing that follows from the cluster's three failure timings. */
export interface DerivedTimings {
  nodeLeaseRenewIntervalMs: number;
  nodeMonitorGracePeriodMs: number;
  /** `fencing-timeout`, or (from a server that sent none) three quarters of the grace period (`fencingTimeoutOf`). */
  fencingTimeoutMs: number;
  /** The node Lease's `leaseDurationSeconds`: the grace period, rounded up to whole seconds. */
  nodeLeaseDurationSeconds: number;
  /**
   * How long the agent waits for one API request: a hung server must be given up on (and another
   * tried) well before the node looks late, so 1.5 renew intervals, at most a third of the grace
   * period, at least 500 ms.
   */
  agentRequestTimeoutMs: number;
  /** The two silences the outage rule compares (`fencingThresholds`, src/node-protocol/fencing.ts). */
  peerCutOffMs: number;
  controllerSilenceMs: number;
  /** What the failover controller adds to fencing-timeout before it replaces a singleton (`FENCING_MARGIN_MS`). */
  fencingMarginMs: number;
  /** How often the node lifecycle controller recomputes verdicts: a sixteenth of the grace, 50-250 ms. */
  lifecycleTickMs: number;
  /** The controller lease (`kube-system/drover-controllers`): see `controllerLeaseTimings`. */
  controllerLease: ControllerLeaseTimings;
}

/**
 * The controller lease's timings, all derived from the node grace period, so every server (they
 * all check the grace against the cluster record at every start) computes the same ones. The
 * argument is in docs/high-availability.md ("Controllers in HA"); in short:
 *
 * - The lifecycle controller already counts a node suspect when no renewal of it has been
 *   committed for grace/2. A leader is held to the same bound: its controllers' writes are
 *   refused once grace/2 has passed since it *sent* its last renewal that was committed
 *   (`stepDownMs`).
 * - Another server takes the lease only after it has seen it unchanged for `durationMs`
 *   (3/4 of the grace) by its own monotonic clock, measured from when it *saw* the change, which
 *   is after the commit, which is after the send. So the old leader has stopped at least grace/4
 *   (1 s by default) before anyone else can start, whatever the hosts' wall clocks say.
 * - The leader renews every grace/8 (4 tries before it must step down); candidates look twice as
 *   often, so a crashed leader is replaced about 3/4 of a grace after its last renewal, before a
 *   node that died with it would have been declared lost.
 * - A leader fenced that way keeps its term (informers, controllers) while nobody else can have
 *   led: a renewal of its own lease, unchanged by anyone, lifts the fence (an etcd leader
 *   election stalls every write for a few seconds, and throwing the term away would cost every
 *   node a fresh grace). It gives the term up on seeing another holder, or once `abandonMs`
 *   (twice the duration) has passed without a committed renewal.
 * - The duration is kept between 1 s (a garbage-collection pause or an etcd leader election must
 *   not move the controllers) and 15 s (the fixed value this replaced, Kubernetes' default).
 */
export interface ControllerLeaseTimings {
  /** How long a candidate must see the lease unchanged before it takes it; written as `leaseDurationSeconds` (rounded up). */
  durationMs: number;
  /** The leader refuses its controllers' writes from this long after sending its last committed renewal. */
  stepDownMs: number;
  /** ... and gives up its term (stops its controllers and informers) from this long after it, if it has not renewed meanwhile. */
  abandonMs: number;
  /** How often the leader renews. */
  renewIntervalMs: number;
  /** How often a candidate looks at the lease. */
  retryIntervalMs: number;
}

export const CONTROLLER_LEASE_MIN_MS = 1000;
export const CONTROLLER_LEASE_MAX_MS = 15_000;

export function controllerLeaseTimings(graceMs: number): ControllerLeaseTimings {
  const durationMs = Math.max(CONTROLLER_LEASE_MIN_MS, Math.min(CONTROLLER_LEASE_MAX_MS, (graceMs * 3) / 4));
  return {
    durationMs,
    stepDownMs: (durationMs * 2) / 3,
    abandonMs: durationMs * 2,
    renewIntervalMs: durationMs / 6,
    retryIntervalMs: durationMs / 12,
  };
}

/** See `DerivedTimings.lifecycleTickMs`. */
export function lifecycleTickMs(graceMs: number): number {
  return Math.max(50, Math.min(250, graceMs / 16));
}

export function deriveTimings(cluster: ClusterTimingSettings): DerivedTimings {
  const renew = cluster.nodeLeaseRenewIntervalMs;
  const grace = cluster.nodeMonitorGracePeriodMs;
  const fencing = fencingTimeoutOf(cluster);
  return {
    nodeLeaseRenewIntervalMs: renew,
    nodeMonitorGracePeriodMs: grace,
    fencingTimeoutMs: fencing,
    nodeLeaseDurationSeconds: Math.ceil(grace / 1000),
    agentRequestTimeoutMs: Math.max(500, Math.min(renew * 1.5, grace / 3)),
    ...fencingThresholds(renew, fencing),
    fencingMarginMs: FENCING_MARGIN_MS,
    lifecycleTickMs: lifecycleTickMs(grace),
    controllerLease: controllerLeaseTimings(grace),
  };
}

/** Every timing that follows from a node's `shutdown-grace-period`. */
export interface ShutdownTimings {
  shutdownGracePeriodMs: number;
  /** The agent's drain: the grace less 1.5 s kept for the shutdown record, the lease release and closing; at least 1 s. */
  drainMs: number;
  /** The server's watchdog (exit 1 after a signal): the grace, then 5 s for the rest of its shutdown. */
  serverExitDeadlineMs: number;
  /** A standalone agent's watchdog: the grace. */
  agentExitDeadlineMs: number;
  /** How long the server waits for its embedded agent's planned shutdown and drain: the grace. */
  embeddedAgentStopMs: number;
  /** How long the listener waits for requests in flight before cutting connections (not a setting). */
  requestDrainMs: number;
  /** Bound on each courtesy to the cluster at shutdown (server directory, controller lease), so a datastore without quorum cannot hold the shutdown hostage. */
  courtesyMs: number;
}

export function shutdownTimings(shutdownGracePeriodMs: number): ShutdownTimings {
  return {
    shutdownGracePeriodMs,
    drainMs: Math.max(1000, shutdownGracePeriodMs - 1500),
    serverExitDeadlineMs: shutdownGracePeriodMs + 5000,
    agentExitDeadlineMs: shutdownGracePeriodMs,
    embeddedAgentStopMs: shutdownGracePeriodMs,
    requestDrainMs: 4000,
    courtesyMs: 2000,
  };
}
