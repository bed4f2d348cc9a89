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
  /** Oldest first and disjoint: a stretch that overlaps earlier ones is merged with them as it is recorded. */
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
      // No recorded stretch ends after `at` (each ended earlier), so those this one overlaps are the last ones.
      let from = sentAt;
      let last = this.closed[this.closed.length - 1];
      while (last && last.to >= from) {
        from = Math.min(from, last.from);
        this.closed.pop();
        last = this.closed[this.closed.length - 1];
      }
      this.closed.push({ from, to: at });
    }
    while (this.closed.length > 0 && this.closed[0]!.to < at - KEEP_MS) this.closed.shift();
  }

  /**
   * How much of [from, now] the datastore was stalled (overlapping stretches counted once). Asked
   * for every node at every tick of the node lifecycle controller: one pass, no copies.
   */
  stalledWithin(from: number, now: number): number {
    // Writes still outstanding past the threshold: one open stretch, from the earliest of them.
    let openSince = now;
    for (const sentAt of this.outstanding) {
      if (now - sentAt > this.thresholdMs) openSince = Math.min(openSince, sentAt);
    }
    // The recorded stretches are disjoint: each counts its part before the open one.
    let total = Math.max(0, now - Math.max(openSince, from));
    for (const s of this.closed) total += Math.max(0, Math.min(s.to, openSince) - Math.max(s.from, from));
    return total;
  }
}
