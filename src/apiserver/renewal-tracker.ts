/**
 * How late the node lifecycle controller may be seeing node lease renewals, measured end to end on
 * this server: from the moment a renewal (a PATCH or PUT of a Lease in kube-node-lease) reaches
 * the API handler, through its wait for the event loop and the datastore, its commit, and the watch
 * that delivers it, until the controller has seen it. While a renewal is on that path, the
 * controller cannot know about it, so the silence it measures for that node may be the server's,
 * not the node's. The controller asks `unobservedForMs()` on every tick and judges silence only up
 * to the oldest renewal still on its way (docs/node-lifecycle.md, "When the control plane is slow").
 *
 * Renewals are tracked only while a controller observes (`observing(true)`: this server leads);
 * renewals through other servers are not seen here (docs/high-availability.md says what that means).
 */

import { NODE_LEASE_NAMESPACE } from '../node-protocol/names.js';

/** A renewal not seen by the controller after this long is dropped from the account (a lost watch event must not hold verdicts forever). */
export const RENEWAL_TRACK_CEILING_MS = 60_000;

interface InFlight {
  name: string;
  arrivedAt: number;
  /** The datastore revision of its commit, once committed. */
  revision?: number;
}

export type NowMs = () => number;

/** How often the event loop's lateness is sampled. */
const LOOP_SAMPLE_MS = 50;

export class RenewalTracker {
  /** Per lease: its renewals on their way, oldest first (an agent has one at a time; a retry may add one). */
  private readonly inFlight = new Map<string, InFlight[]>();
  private active = false;
  /**
   * How late this process runs what is ready (timers, and reading requests off their sockets): a
   * renewal that reached the socket may have waited that long before the handler saw it.
   */
  private loopTimer: NodeJS.Timeout | undefined;
  private loopDelayMs = 0;
  private previousLoopDelayMs = 0;

  constructor(
    private readonly now: NowMs = () => performance.now(),
    private readonly options: { eventLoopDelay?: boolean } = {},
  ) {}

  /** Whether a controller observes renewals now (this server holds the controller lease); off clears the account. */
  observing(on: boolean): void {
    this.active = on;
    if (!on) this.inFlight.clear();
    clearInterval(this.loopTimer);
    this.loopTimer = undefined;
    if (on && this.options.eventLoopDelay !== false) {
      // A timer's lateness is how long whatever became ready meanwhile waited too.
      let expected = performance.now() + LOOP_SAMPLE_MS;
      this.loopTimer = setInterval(() => {
        const at = performance.now();
        this.loopDelayMs = Math.max(this.loopDelayMs, at - expected);
        expected = at + LOOP_SAMPLE_MS;
      }, LOOP_SAMPLE_MS);
      this.loopTimer.unref();
    }
  }

  /**
   * A renewal of node lease `name` reached the handler. The returned function is called when its
   * answer is sent: a renewal that was not committed by then (refused, failed) is dropped.
   */
  arrived(name: string): () => void {
    if (!this.active) return () => undefined;
    const entry: InFlight = { name, arrivedAt: this.now() };
    const list = this.inFlight.get(name);
    if (list) list.push(entry);
    else this.inFlight.set(name, [entry]);
    return () => {
      if (entry.revision === undefined) this.remove(name, (e) => e === entry);
    };
  }

  /** The datastore committed a write of node lease `name` at `revision` (the store's write listener). */
  committed(name: string, revision: number): void {
    const oldest = this.inFlight.get(name)?.find((e) => e.revision === undefined);
    if (oldest) oldest.revision = revision;
  }

  /** The controller has seen node lease `name` at `revision`: every renewal of it committed at or before that is seen. */
  observed(name: string, revision: number): void {
    if (this.inFlight.has(name)) this.remove(name, (e) => e.revision !== undefined && e.revision <= revision);
  }

  /**
   * How long the oldest renewal on its way has been (0: none), or the event loop's longest delay
   * over about the last two calls when that is longer; entries past the ceiling are dropped.
   */
  unobservedForMs(): number {
    const now = this.now();
    let oldest = 0;
    if (this.loopTimer) {
      oldest = Math.max(this.loopDelayMs, this.previousLoopDelayMs);
      this.previousLoopDelayMs = this.loopDelayMs;
      this.loopDelayMs = 0;
    }
    for (const [name, list] of this.inFlight) {
      if (now - list[0]!.arrivedAt > RENEWAL_TRACK_CEILING_MS) this.remove(name, (e) => now - e.arrivedAt > RENEWAL_TRACK_CEILING_MS);
      const first = this.inFlight.get(name)?.[0];
      if (first) oldest = Math.max(oldest, now - first.arrivedAt);
    }
    return oldest;
  }

  /** Renewals on their way now (metrics, tests). */
  get size(): number {
    let n = 0;
    for (const list of this.inFlight.values()) n += list.length;
    return n;
  }

  /** Drops the matching entries in place: this runs for every renewal and every lease event. */
  private remove(name: string, which: (entry: InFlight) => boolean): void {
    const list = this.inFlight.get(name);
    if (!list) return;
    let kept = 0;
    for (const entry of list) if (!which(entry)) list[kept++] = entry;
    if (kept === 0) this.inFlight.delete(name);
    else list.length = kept;
  }
}

// The namespace is a DNS label: nothing in it to escape.
const NODE_LEASE_PATH = new RegExp(`^/apis/coordination\\.k8s\\.io/v1/namespaces/${NODE_LEASE_NAMESPACE}/leases/([^/?]+)(?:\\?|$)`);

/** The node lease a request renews (a PATCH or PUT of a Lease in kube-node-lease), or undefined. */
export function renewedLease(method: string | undefined, url: string | undefined): string | undefined {
  if ((method !== 'PATCH' && method !== 'PUT') || !url) return undefined;
  const match = NODE_LEASE_PATH.exec(url);
  return match ? decodeURIComponent(match[1]!) : undefined;
}
