import https from 'node:https';
import type { Logger } from '../../logging/logger.js';
import { FENCING_TIMEOUT_WITHOUT_FILE_MS } from '../../node-protocol/fencing.js';
import {
  countPeers,
  judgeOutage,
  peerCutOffMs,
  monoNowMs,
  queryPeers,
  readFencingState,
  type FencingState,
  type PeerControlPlaneAnswer,
} from './fencing.js';
import type { PodOutageState } from './run-spec.js';

/**
 * The supervisor's side of split-brain safety for one `atMostOne` pod: it watches the agent's
 * fencing file, and when no renewal has been confirmed for longer than the fencing timeout it asks
 * the peers whether the control plane is gone for a majority (an outage: the workload keeps
 * running) or only for this node (fence: the supervisor kills every container). The rules are
 * pure functions in fencing.ts; this class holds the timing and the state between rounds
 * (docs/failover.md, "Fencing" and "The outage case").
 */

const FENCING_CHECK_MS = 100;
/** While an outage holds, peers are asked again this often: a partition that follows is caught fast. */
const OUTAGE_RECHECK_MS = 500;
/**
 * How far past the fencing timeout an undecided answer may hold the fence back. The controller
 * replaces a singleton only fencing-timeout + FENCING_MARGIN_MS (2 s) after the last renewal it
 * saw, so the fence must land well before that: 300 ms of waiting, one 400 ms round of questions,
 * one 100 ms check, the rest kept for a starved host (node-protocol/fencing.ts).
 */
const UNDECIDED_MS = 300;
/**
 * Once the newest confirmed renewal is this much short of the fencing timeout (at most a third of
 * it), the supervisor opens its connections to the peers, so that the questions that decide go
 * over connections already made: on a busy host a TLS handshake alone can outlast the 400 ms a
 * round of questions is given, and a peer that does not answer counts as no evidence of an outage.
 */
const WARM_AHEAD_MS = 1000;
/** A warming round may take longer than a deciding one: nothing waits for it. */
const WARM_TIMEOUT_MS = 1500;

/** What the watch needs from the pod it guards. */
export interface FenceTarget {
  /** The pod will run nothing again (fenced, finished or finishing): the watch has nothing to do. */
  isTerminal(): boolean;
  /** Kill every container now, for this reason; the figures go to the log. */
  fence(message: string, figures: Record<string, unknown>): void;
  /** The outage began, changed or ended: the supervisor writes its state. */
  outageChanged(): void;
}

export interface FenceWatchOptions {
  fencingFile: string;
  logger: Logger;
  /** Monotonic ms when the supervisor started: a pod never confirmed counts from there. */
  startedAtMono: number;
  target: FenceTarget;
}

export class FenceWatch {
  private timer: NodeJS.Timeout | undefined;
  private outageState: PodOutageState | undefined;
  private peerQuery: Promise<void> | undefined;
  private lastPeerQueryMono = 0;
  /**
   * Monotonic ms when the last round that found an outage began (every answer came later, each
   * from a peer then cut off for more than the peer cut-off: a majority was silent then). Once
   * the peers are back, this node gets one fencing timeout from there for its own renewal.
   */
  private outageHeardMono = 0;
  /** Set while the peers are back from an outage and this node's own renewal is still missing. */
  private peersBackLogged = false;
  /** Kept-alive connections to the peers (the agents' endpoints close them after 5 s idle). */
  private readonly peerAgent = new https.Agent({ keepAlive: true });
  private warming: Promise<void> | undefined;
  private lastWarmMono = 0;
  private lastFencing: FencingState | undefined;

  constructor(private readonly options: FenceWatchOptions) {}

  /** The control-plane outage this node is riding out, if any (for state.json). */
  get outage(): PodOutageState | undefined {
    return this.outageState;
  }

  start(): void {
    this.timer = setInterval(() => this.check(), FENCING_CHECK_MS);
    this.check();
  }

  /** No more rounds: the pod fenced or finished (the supervisor calls it). */
  stop(): void {
    clearInterval(this.timer);
    this.outageState = undefined;
    this.peerAgent.destroy();
  }

  /** Age of the last confirmed renewal, and the figures that go with it. */
  private renewalAge(): { ageMs: number; timeoutMs: number } {
    const now = monoNowMs();
    const read = readFencingState(this.options.fencingFile);
    // A time in the future comes from before a reboot (the monotonic clock restarted): ignore it.
    if (read && read.confirmedAtMonoMs <= now + 1000) this.lastFencing = read;
    // Never confirmed counts from the supervisor's own start.
    const confirmedAt = this.lastFencing?.confirmedAtMonoMs ?? this.options.startedAtMono;
    return { ageMs: now - confirmedAt, timeoutMs: this.lastFencing?.fencingTimeoutMs ?? FENCING_TIMEOUT_WITHOUT_FILE_MS };
  }

  private check(): void {
    if (this.options.target.isTerminal()) return;
    const { ageMs, timeoutMs } = this.renewalAge();
    if (ageMs <= timeoutMs) {
      if (this.outageState) {
        this.options.logger.info({ ageMs, timeoutMs, outageSince: this.outageState.since }, 'lease renewals confirmed again; control-plane outage over');
        this.outageState = undefined;
        this.peersBackLogged = false;
        this.options.target.outageChanged();
      }
      if (ageMs > timeoutMs - Math.min(WARM_AHEAD_MS, timeoutMs / 3)) this.warmPeers();
      return;
    }
    if (this.peerQuery) return;
    const now = monoNowMs();
    // Once the peers are back from an outage, this node's fresh fencing timeout ends at a fixed
    // time: the round that fences then is not put off to the next half second.
    const holdOver = this.peersBackLogged && now - this.outageHeardMono > timeoutMs;
    if (this.outageState && !holdOver && now - this.lastPeerQueryMono < OUTAGE_RECHECK_MS) return;
    this.lastPeerQueryMono = now;
    this.peerQuery = this.decide().finally(() => {
      this.peerQuery = undefined;
    });
  }

  /**
   * Renewals are late enough that questions may follow: ask the peers now, answers unused, only to
   * have the connections open by the time the answers count. It changes no verdict and no timing
   * of the fence; a deciding round never waits for it.
   */
  private warmPeers(): void {
    const fencing = this.lastFencing;
    const now = monoNowMs();
    if (!fencing?.peers.length || this.warming || now - this.lastWarmMono < WARM_AHEAD_MS) return;
    this.lastWarmMono = now;
    this.warming = queryPeers(fencing, WARM_TIMEOUT_MS, this.peerAgent).then(
      () => undefined,
      () => undefined,
    );
    void this.warming.finally(() => {
      this.warming = undefined;
    });
  }

  private async decide(): Promise<void> {
    const { logger, target } = this.options;
    const askedAtMono = monoNowMs();
    const fencing = this.lastFencing;
    let answers: (PeerControlPlaneAnswer | undefined)[] = [];
    try {
      answers = fencing ? await queryPeers(fencing, undefined, this.peerAgent) : [];
    } catch (error) {
      logger.error({ err: error }, 'asking peers failed');
    }
    if (target.isTerminal()) return;
    // The renewal may have been confirmed while the peers were asked.
    const { ageMs, timeoutMs } = this.renewalAge();
    if (ageMs <= timeoutMs) return;
    // Without the fencing file there is no cluster size to compare with: no evidence of an outage.
    const nodeCount = fencing?.nodeCount ?? Number.POSITIVE_INFINITY;
    const cutOffMs = peerCutOffMs(fencing, timeoutMs);
    const { cutOff, maybe } = countPeers(answers, cutOffMs);
    const answered = answers.filter((a) => a !== undefined).length;
    const figures = { ageMs, timeoutMs, nodeCount: fencing?.nodeCount ?? null, peers: answers.length, answered, cutOff, maybe, cutOffMs };
    const verdict = judgeOutage(ageMs, answers, nodeCount, cutOffMs, timeoutMs + UNDECIDED_MS);
    if (verdict === 'undecided') {
      // Ask again at the next check rather than in a second.
      logger.info(figures, 'no confirmed lease renewal; peers are on the edge of an outage: asking again');
      this.lastPeerQueryMono = 0;
      return;
    }
    if (verdict === 'outage') {
      this.outageHeardMono = askedAtMono;
      this.peersBackLogged = false;
      if (!this.outageState) {
        logger.warn(figures, 'no confirmed lease renewal, but a majority of nodes is cut off too: control-plane outage, workload keeps running');
      }
      const changed = !this.outageState || this.outageState.cutOff !== cutOff || this.outageState.nodeCount !== nodeCount;
      this.outageState = { since: this.outageState?.since ?? new Date().toISOString(), cutOff, nodeCount };
      if (changed) target.outageChanged();
      return;
    }
    if (this.outageState && monoNowMs() - this.outageHeardMono <= timeoutMs) {
      // The outage is over for the peers, not yet for this node: its renewals may simply come a
      // little later than theirs (a renewal under way, a server still reconnecting to its
      // datastore). The controller gives silent nodes a fresh grace when an outage ends, and
      // replaces a singleton no sooner than fencing-timeout + margin after the majority was last
      // silent; so this node gets one fencing timeout from then, and fences at its end (check).
      if (!this.peersBackLogged) {
        this.peersBackLogged = true;
        logger.warn(figures, 'the peers reach the control plane again, this node not yet: fencing unless a renewal is confirmed within the fencing timeout');
      }
      return;
    }
    const message =
      `no confirmed lease renewal for ${Math.round(ageMs)} ms (fencing timeout ${timeoutMs} ms); ` +
      `${cutOff} of ${fencing?.nodeCount ?? 'unknown'} nodes cut off (${answered} of ${answers.length} peers answered), not a control-plane outage`;
    target.fence(message, figures);
  }
}
