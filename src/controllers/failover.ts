import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, PODS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, type TimerHandle } from './clock.js';
import type { EventRecorder } from './events.js';
import { decideFailover, type FailoverSettings, majoritySilentDuring, NodeRateLimiter } from './failover-logic.js';
import type { Informer } from '../client/informer.js';
import { STATE_LABEL, UNREACHABLE_TAINT } from '../node-protocol/names.js';
import { nodeSpec, podSpec } from './kube-types.js';
import type { NodeHealthView } from './node-lifecycle.js';

/**
 * The failover controller: moves pods off lost nodes (failover-logic.ts decides when). It runs on
 * the controller leader beside the node lifecycle controller, whose observations it uses. Its
 * times are that controller's monotonic clock (clock.ts): a step of the wall clock must not make a
 * node look silent long enough to replace its singletons.
 */

/** Nodes whose failover may start at once; beyond that, one more every two seconds. */
const FAILOVER_NODE_BURST = 3;
const FAILOVER_NODES_PER_SECOND = 0.5;
const TICK_MS = 200;
/** A pod's node must be gone at least this long before the pod is collected. */
const ORPHAN_MIN_WAIT_MS = 10_000;

interface LostNode {
  since: number;
  admitted: boolean;
  announced: boolean;
  /** When the outage rule first held one of its singletons (its SingletonFailover says so: that wait is not the node's). */
  outageHoldSince?: number;
}

/**
 * For a SingletonFailover message: how long past its safe time (`safeAt`, the last renewal +
 * fencing-timeout + margin) the singleton waited, when the outage rule held it.
 */
function outageHold(lost: LostNode, now: number, safeAt: number): string {
  if (lost.outageHoldSince === undefined || now <= safeAt) return '';
  return `; held ${((now - safeAt) / 1000).toFixed(1)}s past that because most nodes were silent at once within fencing-timeout + margin (the outage rule)`;
}

function isLost(node: KubeObject): boolean {
  if (node.metadata.labels?.[STATE_LABEL] === 'Down') return true;
  return (nodeSpec(node).taints ?? []).some((t) => t.key === UNREACHABLE_TAINT && t.effect === 'NoExecute');
}

export class FailoverController {
  private readonly lost = new Map<string, LostNode>();
  /** Node names that pods are bound to but that have no Node object: since when (this clock). */
  private readonly orphanedSince = new Map<string, number>();
  /** Pods already acted on (uid → action), so each gets one delete and one event. */
  private readonly handled = new Map<string, string>();
  private readonly limiter: NodeRateLimiter;
  private timer: TimerHandle | undefined;
  private running = false;
  private busy = false;

  constructor(
    private readonly client: ApiClient,
    private readonly view: NodeHealthView,
    /** The leader's shared pod informer (all namespaces); its owner starts and stops it. */
    private readonly pods: Informer,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    private readonly settings: FailoverSettings,
    /** The node lifecycle controller's clock: the times the view gives are on it. */
    private readonly clock: Clock = systemClock,
  ) {
    this.limiter = new NodeRateLimiter(FAILOVER_NODE_BURST, FAILOVER_NODES_PER_SECOND, clock.now());
  }

  start(): void {
    this.running = true;
    this.logger.info(
      {
        defaultTolerationMs: this.settings.defaultTolerationMs,
        fencingTimeoutMs: this.settings.fencingTimeoutMs,
        fencingMarginMs: this.settings.fencingMarginMs,
      },
      'failover controller started',
    );
    this.schedule();
  }

  stop(): void {
    this.running = false;
    this.clock.clearTimeout(this.timer);
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = this.clock.setTimeout(() => {
      void this.reconcile()
        .catch((error: unknown) => this.logger.warn({ err: error }, 'failover pass failed; retrying'))
        .finally(() => this.schedule());
    }, TICK_MS);
  }

  /** One pass over the pods on lost nodes. Exposed for tests. */
  async reconcile(): Promise<void> {
    if (this.busy || !this.pods.hasSynced) return;
    this.busy = true;
    try {
      const now = this.clock.now();
      const byNode = new Map<string, KubeObject[]>();
      for (const pod of this.pods.items()) {
        const nodeName = podSpec(pod).nodeName;
        if (!nodeName) continue;
        const list = byNode.get(nodeName) ?? [];
        list.push(pod);
        byNode.set(nodeName, list);
      }
      for (const name of [...this.lost.keys()]) {
        const node = this.view.node(name);
        if (!node || !isLost(node)) {
          this.lost.delete(name);
          this.logger.info({ node: name }, 'node is back or gone; failover for it ends');
        }
      }
      // One answer per pass for every lost node: the outage window is the cluster's, not a node's.
      let majoritySilentRecently: boolean | undefined;
      const outageWindow = (): boolean => {
        const { fencingTimeoutMs, fencingMarginMs, silenceThresholdMs } = this.settings;
        majoritySilentRecently ??= majoritySilentDuring(this.view.silenceHistories(), now - fencingTimeoutMs - fencingMarginMs, now, silenceThresholdMs);
        return majoritySilentRecently;
      };
      for (const [name, pods] of byNode) {
        const node = this.view.node(name);
        if (!node) {
          await this.collectOrphans(name, pods, now);
          continue;
        }
        this.orphanedSince.delete(name);
        if (!isLost(node)) continue;
        let lost = this.lost.get(name);
        if (!lost) {
          lost = { since: now, admitted: false, announced: false };
          this.lost.set(name, lost);
        }
        if (!lost.admitted) {
          if (!this.limiter.tryTake(now)) continue;
          lost.admitted = true;
        }
        await this.failOver(name, node, lost, pods, now, outageWindow());
      }
    } finally {
      this.busy = false;
    }
  }

  /**
   * Pods bound to a node that no longer exists (`kubectl delete node` of a dead machine) are
   * removed, as Kubernetes' pod garbage collector does, once the node has been gone long enough
   * that a singleton there has certainly fenced itself (its agent cannot renew without a Node).
   */
  private async collectOrphans(nodeName: string, pods: KubeObject[], now: number): Promise<void> {
    const since = this.orphanedSince.get(nodeName) ?? now;
    this.orphanedSince.set(nodeName, since);
    const waitMs = Math.max(ORPHAN_MIN_WAIT_MS, this.settings.fencingTimeoutMs + this.settings.fencingMarginMs);
    if (now - since < waitMs) return;
    for (const pod of pods) {
      const uid = pod.metadata.uid!;
      if (this.handled.get(uid) === 'orphan') continue;
      try {
        await this.client.delete(PODS, pod.metadata.namespace, pod.metadata.name!, { gracePeriodSeconds: 0, preconditions: { uid } });
        this.handled.set(uid, 'orphan');
        await this.events.record(
          { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace!, uid },
          'Normal',
          'PodGarbageCollected',
          `Deleted pod ${pod.metadata.namespace}/${pod.metadata.name}: its node ${nodeName} no longer exists (gone for ${((now - since) / 1000).toFixed(1)}s)`,
        );
      } catch (error) {
        if (error instanceof ApiError && (error.code === 404 || error.code === 409)) this.handled.set(uid, 'orphan');
        else this.logger.warn({ err: error, pod: pod.metadata.name, node: nodeName }, 'could not delete an orphaned pod; will retry');
      }
    }
  }

  private async failOver(
    name: string,
    node: KubeObject,
    lost: LostNode,
    pods: KubeObject[],
    now: number,
    majoritySilentRecently: boolean,
  ): Promise<void> {
    const facts = {
      lostSince: lost.since,
      lastRenewalObservedAt: this.view.lastRenewalObservedAt(name) ?? lost.since,
      majoritySilentRecently,
    };
    for (const pod of pods) {
      const uid = pod.metadata.uid!;
      const decision = decideFailover(pod, facts, now, this.settings);
      if (decision.action === 'wait' && decision.outage && lost.outageHoldSince === undefined) {
        lost.outageHoldSince = now;
        this.logger.info({ node: name, pod: pod.metadata.name }, `singleton held: ${decision.why}`);
      }
      if (decision.action !== 'evict' && decision.action !== 'replace-singleton') continue;
      if (this.handled.get(uid) === decision.action) continue;
      const ref = { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace!, uid };
      if (!lost.announced) {
        lost.announced = true;
        const count = pods.length;
        await this.events.record(
          { kind: 'Node', name, uid: node.metadata.uid! },
          'Warning',
          'Failover',
          `Moving ${count} pod(s) off lost node ${name} (${node.metadata.labels?.[STATE_LABEL] ?? 'Unavailable'}); singletons only once the node has certainly fenced them`,
        );
      }
      try {
        if (decision.action === 'evict') {
          await this.client.delete(PODS, pod.metadata.namespace, pod.metadata.name!, { preconditions: { uid } });
          this.handled.set(uid, decision.action);
          await this.events.record(ref, 'Normal', 'TaintManagerEviction', `Marking for deletion Pod ${pod.metadata.namespace}/${pod.metadata.name}: ${decision.message}`);
        } else {
          // The last word before a second copy may exist: read the lease itself, not the watch.
          if (!(await this.view.confirmSilence(name))) {
            this.logger.info({ node: name, pod: pod.metadata.name }, 'a renewal arrived after all; singleton stays');
            continue;
          }
          await this.client.delete(PODS, pod.metadata.namespace, pod.metadata.name!, { gracePeriodSeconds: 0, preconditions: { uid } });
          this.handled.set(uid, decision.action);
          await this.events.record(
            ref,
            'Warning',
            'SingletonFailover',
            `Deleted singleton ${pod.metadata.namespace}/${pod.metadata.name} from lost node ${name} so it can start elsewhere: ${decision.message}${outageHold(lost, now, facts.lastRenewalObservedAt + this.settings.fencingTimeoutMs + this.settings.fencingMarginMs)}`,
          );
        }
      } catch (error) {
        if (error instanceof ApiError && (error.code === 404 || error.code === 409)) {
          this.handled.set(uid, decision.action);
          continue;
        }
        this.logger.warn({ err: error, pod: pod.metadata.name, node: name }, 'failover delete failed; will retry');
      }
    }
    // Forget pods that are gone, so the map does not grow forever.
    if (this.handled.size > 10_000) {
      const live = new Set(this.pods.items().map((p) => p.metadata.uid));
      for (const uid of this.handled.keys()) if (!live.has(uid)) this.handled.delete(uid);
    }
  }
}
