import type { NodeState } from '../node-protocol/names.js';
import type { AgentHealth, ShutdownRecord } from '../node-protocol/records.js';

/**
 * What the control plane says about a node, as a pure function of what it has observed. No I/O
 * and no clock of its own: the caller passes `now`, so tests drive every transition directly.
 *
 *   Ready        lease fresh, the agent reports healthy
 *   NotReady     lease fresh, the agent reports a problem (or is shutting down)
 *   Unknown      lease late by more than half the grace, still within it: a suspect (also held
 *                there during a disruption, and after one until the node renews)
 *   Down         the agent announced a planned shutdown, and has since stopped renewing
 *   Unavailable  the lease lapsed past the grace with no shutdown notice: a host-level loss
 */

export interface NodeObservation {
  /**
   * The controller's own clock (ms) when it last saw this incarnation renew its lease. Never the
   * agent's timestamp: clock skew between hosts must not mark nodes lost.
   */
  lastRenewalObservedAt: number;
  /** The agent released its lease on a graceful exit. */
  leaseReleased: boolean;
  /**
   * Whether this controller has seen any lease from this node incarnation (default true). A node
   * never heard from gets no verdict until its grace runs out: no false "Ready" for a node object
   * that nobody runs, and no "Unknown" flicker while a new agent creates its lease.
   */
  heardFrom?: boolean;
  /**
   * The controller restarted this node's grace when a control-plane disruption ended, and has
   * seen no renewal since: the silence so far is the outage's, not the node's, so the node is not
   * lost before a full grace from `lastRenewalObservedAt`, but nothing says it is well either.
   */
  awaitingRenewal?: boolean;
  /** The latest health the agent reported with its heartbeat. */
  health?: AgentHealth;
  shutdown?: ShutdownRecord;
  /**
   * This controller already called the node Unavailable, and no renewal has been seen since. A
   * hold (disruption, a view behind) stops new Unavailable verdicts; it does not take one back:
   * the silence it was judged on is no less real, and calling the node Unknown again would end
   * its failover and start it over later (Kubernetes' disruption mode likewise stops evictions,
   * it does not mark lost nodes otherwise).
   */
  judgedUnavailable?: boolean;
  /**
   * How much of the time since `lastRenewalObservedAt` the datastore committed nothing
   * (datastore-stalls.ts): no renewal could have landed then, so it is not the node's silence.
   */
  stalledMs?: number;
}

export interface Verdict {
  state: NodeState;
  /** For the Ready condition and events: a CamelCase reason and a sentence. */
  reason: string;
  message: string;
}

export interface ClassifyContext {
  now: number;
  gracePeriodMs: number;
  /** Many nodes went stale at once: the control plane itself is the likely problem. */
  disruption: boolean;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

/** The verdict, or undefined while a node never heard from is still within its grace. */
export function classifyNode(observation: NodeObservation, context: ClassifyContext): Verdict | undefined {
  const stalled = observation.stalledMs ?? 0;
  const late = context.now - observation.lastRenewalObservedAt - stalled;
  // Said with every verdict that counts silence, so a reader can add it up.
  const notCounting = stalled > 0 ? ` (not counting ${seconds(stalled)} in which the datastore committed nothing)` : '';
  const { gracePeriodMs } = context;
  if (observation.heardFrom === false && !observation.shutdown) {
    if (late <= gracePeriodMs) return undefined;
    if (!context.disruption) {
      return {
        state: 'Unavailable',
        reason: 'NodeUnavailable',
        message: `No heartbeat received for ${seconds(late)} since the node appeared, and no shutdown notice.`,
      };
    }
  }
  const shutdown = observation.shutdown;
  if (shutdown && (observation.leaseReleased || late > gracePeriodMs / 2)) {
    return {
      state: 'Down',
      reason: 'NodeShutdown',
      message: `Node was shut down as planned (${shutdown.reason} at ${shutdown.time}${
        shutdown.plannedDurationSeconds ? `, expected back within ${shutdown.plannedDurationSeconds}s` : ''
      }).`,
    };
  }
  if (late <= gracePeriodMs / 2) {
    if (shutdown) {
      return { state: 'NotReady', reason: 'NodeShutdown', message: `Node is shutting down (${shutdown.reason}).` };
    }
    if (observation.awaitingRenewal) {
      return {
        state: 'Unknown',
        reason: 'NodeStatusUnknown',
        message: `No lease renewal since the control-plane disruption ended ${seconds(late)} ago (grace ${seconds(gracePeriodMs)}).`,
      };
    }
    if (observation.health && !observation.health.ready) {
      return { state: 'NotReady', reason: observation.health.reason, message: observation.health.message };
    }
    return { state: 'Ready', reason: 'NodeReady', message: 'Agent is renewing its lease and reports healthy.' };
  }
  if (late <= gracePeriodMs || (context.disruption && !observation.judgedUnavailable)) {
    return {
      state: 'Unknown',
      reason: context.disruption && late > gracePeriodMs ? 'ControlPlaneDisruption' : 'NodeStatusUnknown',
      message:
        context.disruption && late > gracePeriodMs
          ? `No lease renewal for ${seconds(late)}${notCounting}, but most nodes went silent at once: suspecting the control plane, not the node.`
          : `Lease renewal is late by ${seconds(late)}${notCounting} (grace ${seconds(gracePeriodMs)}).`,
    };
  }
  return {
    state: 'Unavailable',
    reason: 'NodeUnavailable',
    message: `No lease renewal for ${seconds(late)}${notCounting} and no shutdown notice: host lost, killed, frozen or partitioned.`,
  };
}

/** Whether a node counts as silent for the disruption rule (a planned Down does not). */
export function isStale(observation: NodeObservation, now: number, gracePeriodMs: number): boolean {
  if (observation.shutdown) return false;
  return now - observation.lastRenewalObservedAt > gracePeriodMs / 2;
}

/**
 * More than half of the nodes, and at least three, silent at once: the likelier story is that the
 * control plane or the datastore lost them, not that they all died together.
 */
export function isDisruption(staleCount: number, nodeCount: number): boolean {
  return staleCount >= 3 && staleCount * 2 > nodeCount;
}

/** How long the disruption rule may hold verdicts back, in grace periods, before the nodes are judged anyway. */
export const DISRUPTION_LIMIT_GRACES = 10;

/**
 * How far behind the renewals the controller's view may be before it cannot trust it, as a share
 * of the grace: half, the point at which a silent node turns suspect.
 */
export const BEHIND_FRACTION_OF_GRACE = 0.5;

/**
 * The node lifecycle controller's disruption mode: since when (its clock) most nodes have been
 * silent, if they are; and since when its view has been behind the renewals, if it is.
 */
export interface DisruptionMode {
  since?: number;
  behindSince?: number;
}

export interface DisruptionInput {
  now: number;
  gracePeriodMs: number;
  /** Nodes silent by `isStale`, and all nodes tracked. */
  staleCount: number;
  nodeCount: number;
  /** How long the oldest renewal the server has taken in, and the controller not yet seen, has been on its way (0: none). */
  behindMs?: number;
}

/**
 * What changed this pass:
 *   entered         most nodes just went silent at once: verdicts are held from now
 *   held            still in disruption mode, verdicts still held
 *   expired         still most nodes silent, but for longer than the limit: judged as they are
 *   ended           renewals are back within the limit: the nodes still silent get a fresh grace
 *                   (their silence is the outage's), and stay Unknown until they renew
 *   ended-expired   renewals are back after the limit ran out: nothing to restart
 *   normal          not in disruption mode, nor entering it
 */
export type DisruptionTransition = 'normal' | 'entered' | 'held' | 'expired' | 'ended' | 'ended-expired';

/**
 * The view's own episodes, the same way: entered, held, expired (behind for longer than the
 * limit: judged anyway, still up to the oldest renewal on its way), ended, or normal.
 */
export type BehindTransition = 'normal' | 'entered' | 'held' | 'expired' | 'ended';

export interface DisruptionStep {
  mode: DisruptionMode;
  transition: DisruptionTransition;
  behind: BehindTransition;
  /** Classify with `disruption: true` (hold Unavailable verdicts) this pass. */
  holdVerdicts: boolean;
}

/**
 * The disruption rule as a pure reducer over one pass of the controller: given the mode so far and
 * this pass's counts, the next mode, what happened, and whether verdicts are held. Kubernetes'
 * node lifecycle controller has the same mode (it stops evicting when a zone is fully disrupted).
 */
export function reduceDisruption(mode: DisruptionMode, input: DisruptionInput): DisruptionStep {
  const limitMs = DISRUPTION_LIMIT_GRACES * input.gracePeriodMs;
  const silent = reduceSilence(mode.since, input, limitMs);
  const view = reduceBehind(mode.behindSince, input, limitMs);
  return {
    mode: { ...(silent.since === undefined ? {} : { since: silent.since }), ...(view.since === undefined ? {} : { behindSince: view.since }) },
    transition: silent.transition,
    behind: view.transition,
    holdVerdicts: silent.hold || view.hold,
  };
}

function reduceSilence(since: number | undefined, input: DisruptionInput, limitMs: number): { since?: number; transition: DisruptionTransition; hold: boolean } {
  if (isDisruption(input.staleCount, input.nodeCount)) {
    if (since === undefined) return { since: input.now, transition: 'entered', hold: true };
    if (input.now - since > limitMs) return { since, transition: 'expired', hold: false };
    return { since, transition: 'held', hold: true };
  }
  if (since === undefined) return { transition: 'normal', hold: false };
  return { transition: input.now - since <= limitMs ? 'ended' : 'ended-expired', hold: false };
}

/**
 * A view behind by more than half the grace holds verdicts too, for the same limit: renewals may
 * be waiting where the server cannot count them yet (its accept queue, a TLS handshake), so the
 * silence it judges is not trusted until the view catches up, or the limit runs out.
 */
function reduceBehind(since: number | undefined, input: DisruptionInput, limitMs: number): { since?: number; transition: BehindTransition; hold: boolean } {
  if ((input.behindMs ?? 0) > input.gracePeriodMs * BEHIND_FRACTION_OF_GRACE) {
    if (since === undefined) return { since: input.now, transition: 'entered', hold: true };
    if (input.now - since > limitMs) return { since, transition: 'expired', hold: false };
    return { since, transition: 'held', hold: true };
  }
  return since === undefined ? { transition: 'normal', hold: false } : { transition: 'ended', hold: false };
}
