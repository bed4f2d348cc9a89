/**
 * When the datastore committed nothing, as this server measures it on its own writes of the
 * controller lease (the elector's renewals, every half second or so): a write outstanding for
 * longer than `thresholdMs` says the datastore was stalled from its sending to its end (an etcd
 * leader election after the old leader's host took its member along: no write anywhere commits
 * until a new leader is elected and the lost proposals time out).
 *
 * The node lifecycle controller leaves those stretches out of a node's silence before it calls
 * the node Unavailable (node-state.ts, `stalledMs`): the agents could not commit a renewal in them
 * either, whichever server they asked. Kept to the running leader's own measurements, so it can
 * never make a node look silent longer than it is, only shorter; and a node that died while the
 * datastore was healthy gets no credit at all (the lease writes were quick). Under a datastore
 * that stays slow, every write past the threshold credits its whole time: detection slows down
 * rather than risk wrong verdicts (docs/node-lifecycle.md).
 */

/** How far back stalls are kept: more than any grace a node is judged by. */
const KEEP_MS = 60_000;

interface Stretch {
  from: number;
  to: number;
}

export class DatastoreStalls {
  /** Oldest first and never overlapping (each is clipped to start where the one before ended). */
  private readonly closed: Stretch[] = [];
  /** Send times of the lease writes still outstanding. */
  private readonly outstanding = new Set<number>();

  constructor(private readonly thresholdMs: number) {}

  /** A lease write was sent at `at` (the controller's monotonic clock). */
  sent(at: number): void {
    this.outstanding.add(at);
  }

  /** The write sent at `sentAt` ended at `at`, committed or failed. */
  ended(sentAt: number, at: number): void {
    this.outstanding.delete(sentAt);
    if (at - sentAt > this.thresholdMs) {
      const from = Math.max(sentAt, this.closed[this.closed.length - 1]?.to ?? sentAt);
      if (at > from) this.closed.push({ from, to: at });
    }
    while (this.closed.length > 0 && this.closed[0]!.to < at - KEEP_MS) this.closed.shift();
  }

  /**
   * How much of [from, now] the datastore was stalled (overlapping stretches counted once). Asked
   * for every node at every tick of the node lifecycle controller: no copies, no sorting.
   */
  stalledWithin(from: number, now: number): number {
    let total = 0;
    let coveredTo = from;
    for (const s of this.closed) {
      const start = Math.max(s.from, coveredTo);
      const end = Math.min(s.to, now);
      if (end > start) {
        total += end - start;
        coveredTo = end;
      }
    }
    let openSince: number | undefined;
    for (const sentAt of this.outstanding) {
      if (now - sentAt > this.thresholdMs && (openSince === undefined || sentAt < openSince)) openSince = sentAt;
    }
    if (openSince !== undefined) total += Math.max(0, now - Math.max(openSince, coveredTo));
    return total;
  }
}
