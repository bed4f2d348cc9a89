import type { PriorityLevel } from './classify.js';

/**
 * How each priority level is served: its share of the server's seats and how it queues what it
 * cannot run at once. Queues, hands and queue lengths are kube-apiserver's defaults. The shares are
 * not: kube-apiserver's (40 / 10 / 40 / 100 / 20) assume threads to run on. Drover runs every request
 * on one event loop, where a renewal holds its seat mostly while it waits for the loop, so
 * heartbeats need many seats, and reads, which are what fill the loop, few (measured:
 * docs/benchmarks.md, overload).
 */
export interface LevelSettings {
  /** Share of the server's total seats; a level's seats are its share of the total, at least one. */
  shares: number;
  /** Queues of the level; a flow is dealt `handSize` of them (shuffle sharding). */
  queues: number;
  handSize: number;
  /** Requests one queue holds; a request whose flow's queues are all this full is refused. */
  queueLengthLimit: number;
  /** Longest a request waits for a seat before it is refused (kube: a quarter of the request timeout). */
  maxWaitMs: number;
}

export type QueuedLevel = Exclude<PriorityLevel, 'exempt'>;

export const DEFAULT_LEVELS: Record<QueuedLevel, LevelSettings> = {
  // A renewal refused is a renewal lost; a renewal that waited 10 s is as good as lost (the grace is 4 s
  // by default): so heartbeats wait longer than anyone before they are refused, and have many seats.
  'node-high': { shares: 80, queues: 64, handSize: 6, queueLengthLimit: 50, maxWaitMs: 10_000 },
  'leader-election': { shares: 10, queues: 16, handSize: 4, queueLengthLimit: 50, maxWaitMs: 10_000 },
  'workload-high': { shares: 40, queues: 128, handSize: 6, queueLengthLimit: 50, maxWaitMs: 5_000 },
  'workload-low': { shares: 50, queues: 128, handSize: 6, queueLengthLimit: 50, maxWaitMs: 5_000 },
  'global-default': { shares: 20, queues: 128, handSize: 6, queueLengthLimit: 50, maxWaitMs: 5_000 },
};

/**
 * Each level's seats: its share of `total` (the `max-requests-inflight` setting), rounded up, at
 * least one (kube's nominal concurrency limits). No level borrows another's seats: a level kept
 * busy by bulk lists never takes the seats heartbeats are owed.
 */
export function seatsPerLevel(total: number, levels: Record<QueuedLevel, LevelSettings> = DEFAULT_LEVELS): Record<QueuedLevel, number> {
  const sum = Object.values(levels).reduce((s, l) => s + l.shares, 0);
  const seats = {} as Record<QueuedLevel, number>;
  for (const [name, level] of Object.entries(levels) as [QueuedLevel, LevelSettings][]) {
    seats[name] = Math.max(1, Math.ceil((total * level.shares) / sum));
  }
  return seats;
}
