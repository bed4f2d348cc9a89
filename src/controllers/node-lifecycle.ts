import { kubeTime, type KubeObject } from '../apiserver/objects.js';
import type { Informer } from '../client/informer.js';
import { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, LEASES, NODES } from '../client/types.js';
import { lifecycleTickMs } from '../config/timings.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, wallTimeOf } from './clock.js';
import { addSample, clockSkewCondition, emptySamples, estimateOffset, isSkewed, type OffsetSamples, SKEW_MESSAGE_STEP_MS } from './clock-skew.js';
import type { EventRecorder } from './events.js';
import type { SilenceHistory } from './failover-logic.js';
import {
  HEALTH_ANNOTATION,
  leaseHolderIdentity,
  NODE_ID_ANNOTATION,
  NODE_LEASE_NAMESPACE,
  type NodeState,
  RELEASED_ANNOTATION,
  SHUTDOWN_ANNOTATION,
  STATE_LABEL,
  UNREACHABLE_TAINT,
} from '../node-protocol/names.js';
import { type AgentHealth, parseAgentHealth, parseShutdownRecord } from '../node-protocol/records.js';
import { leaseSpec, nodeCondition, nodeSpec, nodeStatus } from './kube-types.js';
import {
  type BehindTransition,
  classifyNode,
  DISRUPTION_LIMIT_GRACES,
  type DisruptionMode,
  isStale,
  type NodeObservation,
  reduceDisruption,
  type Verdict,
} from './node-state.js';

/**
 * The node lifecycle controller: one reconcile loop over Nodes and their Leases in
 * kube-node-lease. It times every renewal by its own monotonic clock (clock.ts), classifies each
 * node (node-state.ts), and writes the verdict where users look: the Ready condition, the
 * `drover.io/state` label, the unreachable taints, and an Event per transition. Beside that, and
 * never feeding into it, it estimates each node's clock offset from the same renewals
 * (clock-skew.ts) and reports a large one as the `ClockSkew` condition and event. It runs only on
 * the controller leader.
 */

const UNKNOWN_EVENT_INTERVAL_MS = 60_000;

/** Renewal history older than this is of no use to the outage rule (its window is a few seconds). */
const HISTORY_KEEP_MS = 60_000;

function recordObservation(tracked: Tracked, at: number): void {
  tracked.history.push(at);
  while (tracked.history.length > 2 && tracked.history[1]! < at - HISTORY_KEEP_MS) tracked.history.shift();
}

interface Tracked {
  uid: string;
  /** The controller's monotonic clock (clock.ts), as every time in here unless named wall. */
  observedAt: number;
  heardFrom: boolean;
  renewTime?: string;
  /** The lease's resourceVersion when its last renewal was observed: a fresh read compares it. */
  leaseVersion?: string;
  /** This controller's clock at recent renewals (and when it began tracking), for the outage rule. */
  history: number[];
  /** The grace was restarted at the end of a disruption and no renewal has been seen since. */
  awaitingRenewal: boolean;
  released: boolean;
  health?: AgentHealth;
  bootId?: string;
  applied?: Verdict;
  lastUnknownEventAt: number;
  /** Lease renewals as clock-offset samples; for reporting only. */
  clock: OffsetSamples;
  /** The ClockSkew condition this controller last wrote: whether True, and the offset (ms) in it. */
  reportedSkewed?: boolean;
  reportedOffsetMs?: number;
  /** The offset last handed to onClockOffset. */
  publishedOffsetMs?: number;
}

export interface NodeLifecycleOptions {
  gracePeriodMs: number;
  /** How often verdicts are recomputed. */
  tickMs?: number;
  /** Seconds from the last observed renewal to an Unavailable verdict (metrics). */
  onUnavailable?: (seconds: number) => void;
  /** A Node object was deleted (e.g. to remove its etcd member). */
  onNodeDeleted?: (node: KubeObject) => void;
  /** A node's estimated clock offset in seconds (positive: ahead of this server), or undefined when no longer known (metrics). */
  onClockOffset?: (node: string, seconds: number | undefined) => void;
  /** The system clock unless a test drives one. */
  clock?: Clock;
  /**
   * Node lease renewals still on their way to this controller through this server
   * (src/apiserver/renewal-tracker.ts): silence is judged only up to the oldest of them, so a slow
   * server or datastore cannot make a renewing node look silent.
   */
  renewals?: RenewalsOnTheirWay;
  /**
   * What this server saw of the node leases before it led (lease-witness.ts): a node whose listed
   * lease is the very version it saw is judged from when it saw it, not from this start.
   */
  witness?: { seenAt(name: string, version: string | undefined): number | undefined };
  /**
   * When the datastore committed nothing, by the leader's own lease writes (datastore-stalls.ts):
   * left out of a node's silence before it is judged.
   */
  stalls?: { stalledWithin(from: number, now: number): number };
  /**
   * The leader's shared informers, which their owner (the controller manager) starts and stops.
   * Without them the controller keeps its own, started and stopped with it.
   */
  informers?: SharedInformers;
}

/** What the controller needs of the API server's account of renewals on their way (RenewalTracker). */
export interface RenewalsOnTheirWay {
  observing(on: boolean): void;
  observed(name: string, revision: number): void;
  /** How long the oldest renewal not yet seen by this controller has been on its way (0: none). */
  unobservedForMs(): number;
}

/** Verdicts written at once in a tick (each is two Node patches). */
const VERDICT_WRITERS = 16;

const CONDITION_STATUS: Record<NodeState, 'True' | 'False' | 'Unknown'> = {
  Ready: 'True',
  NotReady: 'False',
  Down: 'False',
  Unknown: 'Unknown',
  Unavailable: 'Unknown',
};

const EVENT_FOR_STATE: Record<NodeState, { type: 'Normal' | 'Warning'; reason: string }> = {
  Ready: { type: 'Normal', reason: 'NodeReady' },
  NotReady: { type: 'Warning', reason: 'NodeNotReady' },
  Unknown: { type: 'Warning', reason: 'NodeStatusUnknown' },
  Down: { type: 'Normal', reason: 'NodeDown' },
  Unavailable: { type: 'Warning', reason: 'NodeUnavailable' },
};

/**
 * What failover needs to know about node silence, by this controller's own clock. Singletons are
 * replaced only on this evidence (see docs/failover.md).
 */
export interface NodeHealthView {
  node(name: string): KubeObject | undefined;
  /**
   * This controller's clock when it last saw the node's current incarnation renew (or started
   * watching): monotonic, compare it only with the same Clock's now() (clock.ts).
   */
  lastRenewalObservedAt(name: string): number | undefined;
  /**
   * Every tracked node's recent renewals as this controller saw them, for the outage rule
   * (`majoritySilentDuring` in failover-logic.ts).
   */
  silenceHistories(): SilenceHistory[];
  /**
   * Read the node's lease from the datastore now: true when no renewal happened since the one
   * observed (a renewal still on its way through a watch would otherwise be missed).
   */
  confirmSilence(name: string): Promise<boolean>;
}

export class NodeLifecycleController implements NodeHealthView {
  private readonly tracked = new Map<string, Tracked>();
  private informers: SharedInformers;
  private nodes: Informer;
  private leases: Informer;
  private timer: ReturnType<Clock['setTimeout']> | undefined;
  private lastTick = 0;
  private running = false;
  private disruption: DisruptionMode = {};
  /** The view's current episode behind the renewals has run past the limit, and the log said so. */
  private behindPastLimitSaid = false;
  /** After a pause of this process, renewals that waited in its queues arrive late: no offset samples until then. */
  private offsetSamplesFrom = 0;

  private reconciling = false;
  private readonly tickMs: number;
  private readonly clock: Clock;
  private readonly ownsInformers: boolean;

  constructor(
    private readonly client: ApiClient,
    private readonly events: EventRecorder,
    private readonly logger: Logger,
    private readonly options: NodeLifecycleOptions,
  ) {
    this.tickMs = options.tickMs ?? lifecycleTickMs(options.gracePeriodMs);
    this.clock = options.clock ?? systemClock;
    this.ownsInformers = !options.informers;
    this.informers = options.informers ?? new SharedInformers(client, logger);
    [this.nodes, this.leases] = this.follow(this.informers);
  }

  private follow(informers: SharedInformers): [nodes: Informer, leases: Informer] {
    informers.on(NODES, (type, node, old) => this.onNode(type, node, old));
    informers.on(LEASES, (type, lease) => this.onLease(type, lease), NODE_LEASE_NAMESPACE);
    return [informers.get(NODES), informers.get(LEASES, NODE_LEASE_NAMESPACE)];
  }

  /**
   * Start observing and judging. Every node gets a full grace period from now (or from its last
   * renewal, when the witness saw it: lease-witness.ts). With shared
   * informers, their owner starts them (before or after this); verdicts wait for their first list.
   */
  async start(): Promise<void> {
    this.running = true;
    this.tracked.clear();
    this.disruption = {};
    this.behindPastLimitSaid = false;
    this.options.renewals?.observing(true);
    if (this.ownsInformers) {
      // Informers cannot start twice: a restart (leadership regained) follows new ones.
      this.informers = new SharedInformers(this.client, this.logger);
      [this.nodes, this.leases] = this.follow(this.informers);
      await this.informers.start();
    } else {
      // Nodes (and leases) the shared informers listed before this start are judged from now, or
      // from when the witness saw the very lease version listed (lease-witness.ts).
      for (const node of this.nodes.items()) this.onNode('ADDED', node, undefined);
    }
    this.lastTick = this.clock.now();
    // Nodes whose silence counts from before this start (lease-witness.ts): how many, and the ten
    // silent longest, with how long already (the line stays short however many nodes there are).
    const now = this.clock.now();
    const witnessed = [...this.tracked].map(([name, t]) => [name, Math.round(now - t.observedAt)] as const).filter(([, ms]) => ms > 0);
    const silentForMs = Object.fromEntries(witnessed.sort((a, b) => b[1] - a[1]).slice(0, 10));
    this.logger.info({ gracePeriodMs: this.options.gracePeriodMs, nodes: this.tracked.size, witnessed: witnessed.length, silentForMs }, 'node lifecycle controller started');
    this.schedule();
  }

  node(name: string): KubeObject | undefined {
    return this.nodes.get(undefined, name);
  }

  lastRenewalObservedAt(name: string): number | undefined {
    return this.tracked.get(name)?.observedAt;
  }

  silenceHistories(): SilenceHistory[] {
    return [...this.tracked].map(([name, t]) => {
      const shutdown = this.nodes.get(undefined, name)?.metadata.annotations?.[SHUTDOWN_ANNOTATION];
      return { observations: t.history, ...(shutdown ? { exempt: true } : {}) };
    });
  }

  async confirmSilence(name: string): Promise<boolean> {
    const tracked = this.tracked.get(name);
    if (!tracked) return false;
    const lease = await this.client.get(LEASES, NODE_LEASE_NAMESPACE, name);
    if (!lease) return true;
    if (lease.metadata.resourceVersion === tracked.leaseVersion) return true;
    // Something changed that the watch has not shown yet: take it in, and judge again later.
    this.onLease('MODIFIED', lease);
    const renewTime = leaseSpec(lease).renewTime;
    return renewTime === tracked.renewTime && tracked.leaseVersion === lease.metadata.resourceVersion;
  }

  stop(): void {
    this.running = false;
    this.options.renewals?.observing(false);
    this.clock.clearTimeout(this.timer);
    if (this.ownsInformers) this.informers.stop();
    // Only the leader measures offsets: a server that stops leading stops reporting them.
    for (const [name, t] of this.tracked) if (t.publishedOffsetMs !== undefined) this.options.onClockOffset?.(name, undefined);
    this.tracked.clear();
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = this.clock.setTimeout(() => {
      void this.reconcileAll().finally(() => this.schedule());
    }, this.tickMs);
  }

  private onNode(type: string, node: KubeObject, old: KubeObject | undefined): void {
    const name = node.metadata.name!;
    // Before start() (shared informers listing) and after stop(): start() takes the nodes in.
    if (!this.running) return;
    if (type === 'DELETED') {
      if (this.tracked.get(name)?.publishedOffsetMs !== undefined) this.options.onClockOffset?.(name, undefined);
      this.tracked.delete(name);
      // Without its node, a lease only confuses; the agent makes a new one if the node returns.
      void this.client.delete(LEASES, NODE_LEASE_NAMESPACE, name).catch(() => undefined);
      this.options.onNodeDeleted?.(node);
      return;
    }
    const bootId = nodeStatus(node).nodeInfo?.bootID;
    const existing = this.tracked.get(name);
    if (!existing || existing.uid !== node.metadata.uid) {
      // A new node, or a new incarnation under an old name: judge it from scratch, with full grace.
      const startedAt = this.clock.now();
      if (existing?.publishedOffsetMs !== undefined) this.options.onClockOffset?.(name, undefined);
      this.tracked.set(name, {
        uid: node.metadata.uid!,
        observedAt: startedAt,
        history: [startedAt],
        awaitingRenewal: false,
        heardFrom: false,
        released: false,
        ...(bootId ? { bootId } : {}),
        lastUnknownEventAt: Number.NEGATIVE_INFINITY,
        clock: emptySamples(),
      });
      // Its lease may have been listed first (informers list in parallel): take it in now.
      const lease = this.leases.get(NODE_LEASE_NAMESPACE, name);
      if (lease) this.onLease('MODIFIED', lease);
      return;
    }
    if (bootId && existing.bootId && bootId !== existing.bootId && old) {
      void this.events.record(
        { kind: 'Node', name, uid: node.metadata.uid! },
        'Warning',
        'NodeRebooted',
        `Node ${name} has been rebooted, boot id: ${bootId}`,
      );
    }
    if (bootId) existing.bootId = bootId;
    if (old?.metadata.annotations?.[SHUTDOWN_ANNOTATION] && !node.metadata.annotations?.[SHUTDOWN_ANNOTATION]) {
      // The agent is back and withdrew its shutdown notice; its first renewal follows right after.
      // Judge it from now, not from the heartbeat it stopped sending when it shut down.
      existing.observedAt = this.clock.now();
      recordObservation(existing, existing.observedAt);
      existing.awaitingRenewal = false;
      existing.released = false;
    }
  }

  private onLease(type: string, lease: KubeObject): void {
    if (type === 'DELETED' || !this.running) return;
    const name = lease.metadata.name!;
    this.options.renewals?.observed(name, Number(lease.metadata.resourceVersion));
    const tracked = this.tracked.get(name);
    if (!tracked) return;
    const spec = leaseSpec(lease);
    // Identity is the node's UID, never its name: a lease held by a deleted incarnation of this
    // name is not a heartbeat of the current node.
    if (spec.holderIdentity !== leaseHolderIdentity(name, tracked.uid)) {
      this.logger.debug({ node: name, holder: spec.holderIdentity }, 'ignoring a lease renewal from another incarnation');
      return;
    }
    const annotations = lease.metadata.annotations ?? {};
    const released = annotations[RELEASED_ANNOTATION] === 'true';
    // A lease held by this incarnation, released or not, is word from the node.
    tracked.heardFrom = true;
    if (spec.renewTime !== tracked.renewTime && !released) {
      const arrivedWall = this.clock.wallNow();
      // The first sight of a lease this term may be a version this server saw before it led: its
      // silence counts from then (never earlier than the renewal: it was seen after its commit).
      const witnessed = tracked.renewTime === undefined ? this.options.witness?.seenAt(name, lease.metadata.resourceVersion) : undefined;
      if (witnessed !== undefined && witnessed < tracked.observedAt) tracked.history = [];
      tracked.observedAt = witnessed !== undefined && witnessed < tracked.observedAt ? witnessed : this.clock.now();
      // The first renewal seen may be an old one (listed at start): only changes seen live are samples.
      if (tracked.renewTime !== undefined && spec.renewTime && tracked.observedAt >= this.offsetSamplesFrom) {
        addSample(tracked.clock, Date.parse(spec.renewTime), arrivedWall);
      }
      tracked.renewTime = spec.renewTime;
      tracked.awaitingRenewal = false;
      recordObservation(tracked, tracked.observedAt);
    }
    tracked.leaseVersion = lease.metadata.resourceVersion;
    tracked.released = released;
    const health = parseAgentHealth(annotations[HEALTH_ANNOTATION]);
    if (health) tracked.health = health;
    else delete tracked.health;
  }

  private observation(name: string, tracked: Tracked): NodeObservation {
    const node = this.nodes.get(undefined, name);
    const shutdown = parseShutdownRecord(node?.metadata.annotations?.[SHUTDOWN_ANNOTATION]);
    return {
      lastRenewalObservedAt: tracked.observedAt,
      leaseReleased: tracked.released,
      heardFrom: tracked.heardFrom,
      ...(tracked.awaitingRenewal ? { awaitingRenewal: true } : {}),
      ...(tracked.health ? { health: tracked.health } : {}),
      ...(shutdown ? { shutdown } : {}),
      ...(tracked.applied?.state === 'Unavailable' ? { judgedUnavailable: true } : {}),
    };
  }

  /** One pass over every node. Exposed for tests that drive the loop. */
  async reconcileAll(): Promise<void> {
    if (this.reconciling || !this.nodes.hasSynced) return;
    this.reconciling = true;
    try {
      const now = this.clock.now();
      const grace = this.options.gracePeriodMs;
      if (now - this.lastTick > grace / 2) {
        // This process was not running (stopped, swapped, starved) for a while: it did not see
        // renewals it may have missed. Give everyone a fresh grace rather than blame the nodes.
        this.logger.warn({ pausedMs: now - this.lastTick }, 'controller loop was paused; restarting grace periods for all nodes');
        for (const t of this.tracked.values()) {
          t.observedAt = now;
          recordObservation(t, now);
        }
        this.offsetSamplesFrom = now + grace;
      }
      this.lastTick = now;
      // Silence is judged up to the oldest renewal still on its way to this controller: the node
      // sent it, the server has not shown it yet. Without that, a server that falls behind (too
      // much load, a slow datastore) makes the nodes it is slow for look silent.
      const behindMs = this.options.renewals?.unobservedForMs() ?? 0;
      const judgedAt = now - behindMs;
      let observations = [...this.tracked].map(([name, t]) => [name, t, this.observation(name, t)] as const);
      const stale = observations.filter(([, , o]) => isStale(o, judgedAt, grace)).length;
      const step = reduceDisruption(this.disruption, { now, gracePeriodMs: grace, staleCount: stale, nodeCount: observations.length, behindMs });
      this.noteBehind(step.behind, behindMs, now, this.disruption.behindSince);
      this.disruption = step.mode;
      if (step.transition === 'entered') {
        this.logger.warn({ stale, nodes: observations.length }, 'most nodes went silent at once; holding verdicts');
        void this.events.record(
          { kind: 'Namespace', name: NODE_LEASE_NAMESPACE, namespace: NODE_LEASE_NAMESPACE },
          'Warning',
          'ControlPlaneDisruption',
          `${stale} of ${observations.length} nodes stopped renewing at once; suspecting the control plane or datastore, not the nodes. No node is marked Unavailable for up to ${(DISRUPTION_LIMIT_GRACES * grace) / 1000}s.`,
        );
      } else if (step.transition === 'ended') {
        // Renewals come back one node at a time (each agent on its own timer), so the episode
        // ends as soon as most are heard from again, while the others' next renewal may be a
        // moment away. Judged now, by silence that the outage caused, they would be Unavailable
        // and failed over within the tick. Give the nodes still silent a fresh grace instead,
        // as Kubernetes resets its probe timestamps when it leaves its disruption mode; they
        // stay Unknown until a renewal is seen (node-state.ts, awaitingRenewal).
        // A node already called Unavailable keeps its verdict and its silence (node-state.ts, judgedUnavailable).
        const silent = observations.filter(([, t, o]) => isStale(o, judgedAt, grace) && t.applied?.state !== 'Unavailable').map(([name, t]) => {
          t.observedAt = now;
          t.awaitingRenewal = true;
          recordObservation(t, now);
          return name;
        });
        this.logger.info({ restarted: silent }, 'node renewals are back to normal; disruption mode over; restarting the grace of nodes still silent');
        observations = observations.map(([name, t]) => [name, t, this.observation(name, t)] as const);
      } else if (step.transition === 'ended-expired') {
        this.logger.info('node renewals are back to normal; disruption mode over');
      }
      const disruption = step.holdVerdicts;
      // Several writers at once: one at a time, a tick that must write many verdicts (a new
      // leader, hundreds of nodes joining) waited a round trip per node, behind the renewals, and
      // a node lost meanwhile was called so only seconds later.
      let next = 0;
      const writer = async (): Promise<void> => {
        while (next < observations.length) {
          const [name, tracked, observation] = observations[next++]!;
          // Not in the disruption count above: a stall silences every node at once, which is what that count is for.
          const stalledMs = this.options.stalls?.stalledWithin(observation.lastRenewalObservedAt, judgedAt) ?? 0;
          const verdict = classifyNode(stalledMs > 0 ? { ...observation, stalledMs } : observation, { now: judgedAt, gracePeriodMs: grace, disruption });
          if (verdict) await this.apply(name, tracked, verdict, now);
          await this.reportClock(name, tracked);
        }
      };
      await Promise.all(Array.from({ length: Math.min(VERDICT_WRITERS, observations.length) }, writer));
    } finally {
      this.reconciling = false;
    }
  }

  /**
   * The view's episodes behind the renewals (reduceDisruption decides them): said once each, as a
   * log line and a ControlPlaneDisruption event, and when they end or run out.
   */
  private noteBehind(transition: BehindTransition, behindMs: number, now: number, since: number | undefined): void {
    const grace = this.options.gracePeriodMs;
    if (transition === 'entered') {
      this.logger.warn({ behindMs: Math.round(behindMs) }, 'node lease renewals reach this controller late; judging silence only up to the oldest one on its way, and holding verdicts');
      void this.events.record(
        { kind: 'Namespace', name: NODE_LEASE_NAMESPACE, namespace: NODE_LEASE_NAMESPACE },
        'Warning',
        'ControlPlaneDisruption',
        `Node lease renewals reach the controller up to ${(behindMs / 1000).toFixed(1)}s late (the API server or its datastore is behind): no node is marked Unavailable while this lasts, for up to ${(DISRUPTION_LIMIT_GRACES * grace) / 1000}s.`,
      );
    } else if (transition === 'expired' && since !== undefined && !this.behindPastLimitSaid) {
      this.behindPastLimitSaid = true;
      this.logger.warn({ behindMs: Math.round(behindMs), lastedMs: Math.round(now - since) }, 'node lease renewals still reach this controller late, past the limit: judging nodes again, up to the oldest renewal on its way');
    } else if (transition === 'ended' && since !== undefined) {
      this.behindPastLimitSaid = false;
      this.logger.info({ lastedMs: Math.round(now - since) }, 'node lease renewals reach this controller in time again');
    }
  }

  /** Writes one condition of a Node's status (strategic merge: the other conditions stay). */
  private async patchCondition(name: string, condition: Record<string, unknown>): Promise<void> {
    await this.client.patch(NODES, undefined, name, 'strategic', { status: { conditions: [condition] } }, 'status');
  }

  private async apply(name: string, tracked: Tracked, verdict: Verdict, now: number): Promise<void> {
    const node = this.nodes.get(undefined, name);
    if (!node) return;
    const currentState = node.metadata.labels?.[STATE_LABEL];
    const ready = nodeCondition(node, 'Ready');
    const status = CONDITION_STATUS[verdict.state];
    const inSync = currentState === verdict.state && ready?.status === status && ready.reason === verdict.reason;
    if (inSync) {
      tracked.applied = verdict;
      return;
    }
    const previous = tracked.applied?.state ?? currentState;
    try {
      await this.patchCondition(name, {
        type: 'Ready',
        status,
        reason: verdict.reason,
        message: verdict.message,
        lastHeartbeatTime: kubeTime(wallTimeOf(tracked.observedAt, this.clock)),
        lastTransitionTime: ready?.status === status ? ready.lastTransitionTime ?? kubeTime(this.clock.wallNow()) : kubeTime(this.clock.wallNow()),
      });
      const taints = (nodeSpec(node).taints ?? []).filter((t) => t.key !== UNREACHABLE_TAINT);
      if (verdict.state === 'Unavailable') {
        const timeAdded = kubeTime(this.clock.wallNow());
        taints.push({ key: UNREACHABLE_TAINT, effect: 'NoSchedule', timeAdded }, { key: UNREACHABLE_TAINT, effect: 'NoExecute', timeAdded });
      }
      await this.client.patch(NODES, undefined, name, 'merge', {
        metadata: { labels: { [STATE_LABEL]: verdict.state } },
        spec: { taints: taints.length ? taints : null },
      });
    } catch (error) {
      this.logger.warn({ err: error, node: name, state: verdict.state }, 'could not record node state; will retry');
      return;
    }
    tracked.applied = verdict;
    if (previous === verdict.state) return;
    if (verdict.state === 'Unavailable') this.options.onUnavailable?.((now - tracked.observedAt) / 1000);
    if (verdict.state === 'Unknown') {
      if (now - tracked.lastUnknownEventAt < UNKNOWN_EVENT_INTERVAL_MS) return;
      tracked.lastUnknownEventAt = now;
    }
    const { type, reason } = EVENT_FOR_STATE[verdict.state];
    const nodeId = node.metadata.annotations?.[NODE_ID_ANNOTATION] ?? 'unknown';
    const message =
      verdict.state === 'Unavailable'
        ? `Node ${name} (id ${nodeId}, uid ${node.metadata.uid}) is Unavailable: last heartbeat at ${kubeTime(wallTimeOf(tracked.observedAt, this.clock))}, no shutdown notice. ${verdict.message}`
        : `Node ${name} is ${verdict.state}${previous ? ` (was ${previous})` : ''}: ${verdict.message}`;
    await this.events.record({ kind: 'Node', name, uid: node.metadata.uid! }, type, reason, message);
  }

  /**
   * The node's clock offset where users look: the metric on every tick, and the `ClockSkew`
   * condition (with an event when it changes). A node whose clock was never off has no condition.
   */
  private async reportClock(name: string, tracked: Tracked): Promise<void> {
    const offset = estimateOffset(tracked.clock);
    if (offset === undefined) return;
    if (tracked.publishedOffsetMs !== offset) {
      tracked.publishedOffsetMs = offset;
      this.options.onClockOffset?.(name, offset / 1000);
    }
    const node = this.nodes.get(undefined, name);
    if (!node) return;
    const current = nodeCondition(node, 'ClockSkew');
    // What this controller wrote last, else what the Node says (a new leader takes over from it).
    const skewedNow = tracked.reportedSkewed ?? current?.status === 'True';
    const skewed = isSkewed(offset, skewedNow);
    if (!skewed && !current && tracked.reportedSkewed === undefined) return;
    const moved = tracked.reportedOffsetMs === undefined || Math.abs(tracked.reportedOffsetMs - offset) >= SKEW_MESSAGE_STEP_MS;
    const written = current?.status === (skewed ? 'True' : 'False');
    if (written && !(skewed && moved)) {
      tracked.reportedSkewed = skewed;
      return;
    }
    const condition = clockSkewCondition(offset, skewed);
    try {
      await this.patchCondition(name, {
        ...condition,
        lastHeartbeatTime: kubeTime(this.clock.wallNow()),
        lastTransitionTime: written ? (current?.lastTransitionTime ?? kubeTime(this.clock.wallNow())) : kubeTime(this.clock.wallNow()),
      });
    } catch (error) {
      this.logger.warn({ err: error, node: name }, 'could not record the node clock offset; will retry');
      return;
    }
    tracked.reportedOffsetMs = offset;
    tracked.reportedSkewed = skewed;
    if (skewed === skewedNow) return;
    this.logger[skewed ? 'warn' : 'info']({ node: name, offsetMs: offset }, skewed ? 'node clock is off' : 'node clock is back in sync');
    await this.events.record(
      { kind: 'Node', name, uid: node.metadata.uid! },
      skewed ? 'Warning' : 'Normal',
      skewed ? 'ClockSkew' : 'ClockSkewResolved',
      `Node ${name}: ${condition.message}`,
    );
  }
}
