import { getPath, type KubeObject } from '../apiserver/objects.js';
import { UNREACHABLE_TAINT } from './node-lifecycle.js';
import { isAtMostOne } from './workloads.js';

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
}

export interface LostNodeFacts {
  /** This controller's clock when it first saw the node lost (unreachable taint, or Down). */
  lostSince: number;
  /** This controller's clock at the last renewal it saw from the node (or when it began watching). */
  lastRenewalObservedAt: number;
  /** More than half of the nodes are silent now. */
  majoritySilent: boolean;
  /** When majority silence last ended (0 if never). */
  majoritySilenceEndedAt: number;
}

export type FailoverDecision =
  | { action: 'keep'; why: string }
  | { action: 'wait'; untilMs: number; why: string }
  | { action: 'evict'; message: string }
  | { action: 'replace-singleton'; message: string };

interface Toleration {
  key?: string;
  operator?: string;
  value?: string;
  effect?: string;
  tolerationSeconds?: number | null;
}

/** The pod's own toleration of the unreachable NoExecute taint: ms, Infinity (forever), or undefined (none). */
export function unreachableToleranceMs(pod: KubeObject): number | undefined {
  const tolerations = getPath(pod, ['spec', 'tolerations']);
  if (!Array.isArray(tolerations)) return undefined;
  let best: number | undefined;
  for (const t of tolerations as Toleration[]) {
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
  const phase = getPath(pod, ['status', 'phase']);
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
  if (facts.majoritySilent) {
    return { action: 'wait', untilMs: now + settings.fencingTimeoutMs, why: 'most nodes are silent: an outage, so nodes keep their singletons' };
  }
  // Time since the node could last have believed itself connected: its last renewal, or the end
  // of an outage during which it may have kept its singletons on purpose.
  const since = Math.max(facts.lastRenewalObservedAt, facts.majoritySilenceEndedAt);
  const safeAt = since + settings.fencingTimeoutMs + settings.fencingMarginMs;
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
