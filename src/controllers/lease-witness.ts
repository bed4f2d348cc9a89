import { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, LEASES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { NODE_LEASE_NAMESPACE } from '../node-protocol/names.js';
import type { Clock } from './clock.js';

/**
 * What a server that does not lead saw of the node leases: for each one, its resourceVersion and
 * when (this server's monotonic clock) it first saw that version. A server that takes the
 * controller lease over would otherwise give every node a fresh grace from its first list, so a
 * node lost together with the old leader (its host, in an all-in-one cluster) would be judged a
 * whole takeover later than any other lost node. With the witness, the new leader's node lifecycle
 * controller counts such a node's silence from when this server saw its last renewal.
 *
 * Why this can never make a node look silent longer than it is: a version is seen only after it
 * was committed, so "first seen at" is never earlier than the renewal; and it is used only when the
 * new term's fresh list shows the very same version (nothing renewed since). A witness whose watch
 * lagged or broke just has older versions, which the fresh list does not match: those nodes get a
 * fresh grace, as without a witness. Nothing here comes from another server's memory.
 *
 * Silence is credited only while the witness heard renewals go by: a datastore that stopped
 * committing (lost quorum, an etcd leader election after the old leader's host took its member
 * along) silences every node at once, and that silence is not theirs. So the witness keeps the
 * gaps between lease events longer than `maxGapMs` (twice the nodes' renew interval), whole, and
 * leaves them out of a node's silence: the time it vouches for is moved later by every gap since,
 * the one still open at the takeover included (the takeover often comes right after such a stall).
 *
 * It runs only while this server does not lead (ControllerManager stops it once a term's
 * controller has taken its leases in, and starts a new one when the term ends): on the leader, its
 * watch would only repeat the term's own.
 */
/** How far back gaps are kept, and so the most silence the witness vouches for. */
const GAP_KEEP_MS = 60_000;

export class LeaseWitness {
  private informers: SharedInformers | undefined;
  private readonly seen = new Map<string, { version: string; at: number }>();
  /** Stretches without a lease event longer than maxGapMs, oldest first (the last GAP_KEEP_MS). */
  private gaps: { from: number; to: number }[] = [];
  private lastEventAt: number | undefined;

  constructor(
    private readonly client: ApiClient,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly maxGapMs: number,
  ) {}

  start(): void {
    if (this.informers) return;
    const informers = new SharedInformers(this.client, this.logger);
    informers.on(
      LEASES,
      (type, lease) => {
        const name = lease.metadata.name!;
        const version = lease.metadata.resourceVersion;
        const now = this.clock.now();
        if (this.lastEventAt !== undefined && now - this.lastEventAt > this.maxGapMs) {
          this.gaps.push({ from: this.lastEventAt, to: now });
          while (this.gaps.length > 0 && this.gaps[0]!.to < now - GAP_KEEP_MS) this.gaps.shift();
        }
        this.lastEventAt = now;
        if (type === 'DELETED' || version === undefined) {
          this.seen.delete(name);
          return;
        }
        if (this.seen.get(name)?.version !== version) this.seen.set(name, { version, at: now });
      },
      NODE_LEASE_NAMESPACE,
    );
    this.informers = informers;
    void informers.start().catch((error: unknown) => this.logger.debug({ err: error }, 'the lease witness could not start its watch'));
  }

  stop(): void {
    this.informers?.stop();
    this.informers = undefined;
    this.seen.clear();
    this.gaps = [];
    this.lastEventAt = undefined;
  }

  /**
   * From when lease `name` has been silent at `version`, as far as this server can vouch: when it
   * first saw that version, moved later by every stretch without renewals since (the one open now
   * included); undefined if it never saw that version or no longer knows.
   */
  seenAt(name: string, version: string | undefined): number | undefined {
    const entry = this.seen.get(name);
    if (!entry || version === undefined || entry.version !== version || this.lastEventAt === undefined) return undefined;
    const now = this.clock.now();
    // A gap older than what is kept could hide in a long silence: vouch for no more than is kept.
    const from = Math.max(entry.at, now - GAP_KEEP_MS);
    const open = now - this.lastEventAt > this.maxGapMs ? [{ from: this.lastEventAt, to: now }] : [];
    let stalled = 0;
    for (const gap of [...this.gaps, ...open]) stalled += Math.max(0, gap.to - Math.max(gap.from, from));
    return Math.min(from + stalled, now);
  }
}
