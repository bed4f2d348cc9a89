import type { KubeObject } from '../apiserver/objects.js';
import { UNREACHABLE_TAINT } from '../node-protocol/names.js';
import { isAtMostOne } from '../node-protocol/pods.js';
import { podSpec, podStatus } from './kube-types.js';

/**
 * When a pod on a lost node is moved, as a pure function of what the controller has observed.
 *
 * Ordinary pods follow Kubernetes' taint-based eviction: once their node carries the unreachable
 * NoExecute taint and their toleration of it has run out, they are deleted (gracefully: their
 * owner replaces them at once, the pod object waits for the node to come back and finish it).
 *
 * Singletons are different: a replacement may start only when the original is certainly dead.
 * The node's own supervisor kills them after `fencingTimeoutMs` without a confirmed renewal, so
 * the controller waits until it has seen no renewal for that long plus a margin, by its own
 * clock, and never while most nodes are silent at once (then it is an outage, and nodes keep
 * their singletons running). Then it removes the pod object, so its controller can recreate it.
 */

export interface FailoverSettings {
  /** Toleration for pods that state none: `default-unavailable-toleration`. */
  defaultTolerationMs: number;
  fencingTimeoutMs: number;
  /** Added to the fencing timeout: the supervisor's check interval, the kill, clock rate drift. */
  fencingMarginMs: number;
  /** `controllerSilenceMs` of `fencingThresholds` (src/node-protocol/fencing.ts): silence that counts toward an outage. */
  silenceThresholdMs: number;
}

export interface LostNodeFacts {
  /** This controller's clock when it first saw the node lost (unreachable taint, or Down). */
  lostSince: number;
  /** This controller's clock at the last renewal it saw from the node (or when it began watching). */
  lastRenewalObservedAt: number;
  /**
   * More than half of the nodes were silent at some instant of the last fencing-timeout + margin
   * (`majoritySilentDuring`): a node may have kept its singletons through that as an outage.
   */
  majoritySilentRecently: boolean;
}

export interface SilenceHistory {
  /** This controller's clock at each renewal it saw (and when it began watching the node), ascending. */
  observations: readonly number[];
  /** A node that announced a planned shutdown: its silence is no sign of an outage. */
  exempt?: boolean;
}

/**
 * Whether, at any instant in [from, to], more than half of the nodes had gone more than
 * `thresholdMs` without a renewal. Computed from the observations themselves, not sampled, so a
 * short outage between two passes of the controller is not missed. Before its first observation
 * a node counts as silent (nothing is known of it).
 */
export function majoritySilentDuring(histories: readonly SilenceHistory[], from: number, to: number, thresholdMs: number): boolean {
  const total = histories.length;
  if (total === 0) return false;
  // Silence intervals are half-open, [renewal + threshold, next renewal); the window is closed,
  // so it ends just after `to` (times are whole milliseconds).
  const windowEnd = to + 0.5;
  const edges: [at: number, delta: number][] = [];
  for (const history of histories) {
    if (history.exempt) continue;
    const obs = history.observations;
    const intervals: [number, number][] = [[-Infinity, obs.length ? obs[0]! : Infinity]];
    for (let i = 0; i < obs.length; i++) {
      intervals.push([obs[i]! + thresholdMs, i + 1 < obs.length ? obs[i + 1]! : Infinity]);
    }
    for (const [start, end] of intervals) {
      const a = Math.max(start, from);
      const b = Math.min(end, windowEnd);
      if (a < b) edges.push([a, 1], [b, -1]);
    }
  }
  // Ends before starts at the same instant: the intervals are half-open.
  edges.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let silent = 0;
  for (const [, delta] of edges) {
    silent += delta;
    if (silent * 2 > total) return true;
  }
  return false;
}

export type FailoverDecision =
  | { action: 'keep'; why: string }
  /** `outage`: held by the outage rule (most nodes silent at once), not by the node's own silence. */
  | { action: 'wait'; untilMs: number; why: string; outage?: true }
  | { action: 'evict'; message: string }
  | { action: 'replace-singleton'; message: string };

/** The pod's own toleration of the unreachable NoExecute taint: ms, Infinity (forever), or undefined (none). */
export function unreachableToleranceMs(pod: KubeObject): number | undefined {
  const tolerations = podSpec(pod).tolerations;
  if (!Array.isArray(tolerations)) return undefined;
  let best: number | undefined;
  for (const t of tolerations) {
    const keyMatches = t.key === UNREACHABLE_TAINT || ((t.key === undefined || t.key === '') && t.operator === 'Exists');
    const effectMatches = !t.effect || t.effect === 'NoExecute';
    if (!keyMatches || !effectMatches) continue;
    const ms = typeof t.tolerationSeconds === 'number' ? Math.max(0, t.tolerationSeconds) * 1000 : Infinity;
    best = best === undefined ? ms : Math.max(best, ms);
  }
  return best;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

export function decideFailover(pod: KubeObject, facts: LostNodeFacts, now: number, settings: FailoverSettings): FailoverDecision {
  const phase = podStatus(pod).phase;
  if (phase === 'Succeeded' || phase === 'Failed') return { action: 'keep', why: 'the pod has finished' };
  const tolerance = unreachableToleranceMs(pod) ?? settings.defaultTolerationMs;
  if (tolerance === Infinity) return { action: 'keep', why: 'the pod tolerates an unreachable node forever' };
  const evictAt = facts.lostSince + tolerance;
  if (now < evictAt) return { action: 'wait', untilMs: evictAt, why: `toleration of ${seconds(tolerance)}` };
  const silentFor = now - facts.lastRenewalObservedAt;
  if (!isAtMostOne(pod)) {
    if (pod.metadata.deletionTimestamp) return { action: 'keep', why: 'already being deleted' };
    return {
      action: 'evict',
      message: `node lost ${seconds(now - facts.lostSince)} ago (silent for ${seconds(silentFor)}); toleration ${seconds(tolerance)} ran out`,
    };
  }
  if (facts.majoritySilentRecently) {
    return {
      action: 'wait',
      untilMs: now + settings.fencingMarginMs,
      why: 'most nodes were silent at once within fencing-timeout + margin: an outage, during which nodes keep their singletons',
      outage: true,
    };
  }
  const safeAt = facts.lastRenewalObservedAt + settings.fencingTimeoutMs + settings.fencingMarginMs;
  if (now < safeAt) return { action: 'wait', untilMs: safeAt, why: 'waiting until the node has certainly fenced the pod' };
  return {
    action: 'replace-singleton',
    message: `no renewal seen for ${seconds(now - facts.lastRenewalObservedAt)} (fencing-timeout ${seconds(settings.fencingTimeoutMs)} + margin ${seconds(settings.fencingMarginMs)}): the node has fenced the pod`,
  };
}

/**
 * Mass failover is paced: a few lost nodes are handled at once, more only at a steady rate, so
 * a wrong verdict about many nodes cannot empty the cluster in one go.
 */
export class NodeRateLimiter {
  private tokens: number;
  private last: number;

  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  tryTake(now: number): boolean {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
