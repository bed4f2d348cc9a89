import { type ApiError, errors } from '../errors.js';
import { ClientGoneError } from '../http.js';
import type { Classification } from './classify.js';
import { DEFAULT_LEVELS, type LevelSettings, type QueuedLevel, seatsPerLevel } from './levels.js';

/**
 * Seats and queues per priority level (kube-apiserver's API Priority and Fairness, its dispatching
 * part). A level runs at most its seats' worth of requests at once; the rest wait in its queues,
 * where a flow (one user, or one user in one namespace) is dealt a few of the level's queues and
 * joins the shortest, and a freed seat goes to the queues in turn, so that a client sending a
 * hundred lists waits behind its own requests, not in front of everyone else's. A request that
 * finds its queues full, or waits longer than its level allows, is refused with 429 and a
 * Retry-After: the client learns at once that the server is busy, instead of timing out.
 *
 * Why it matters on a one-thread server: every request admitted competes for the same event loop,
 * so twenty bulk lists in progress delay a lease renewal by twenty lists' worth of CPU. Bounding the
 * lists' seats bounds that delay, and refusing the excess costs almost nothing.
 */

export interface Clock {
  now(): number;
  /** Calls `fn` after `ms`; the returned function cancels it. */
  after(ms: number, fn: () => void): () => void;
}

export const REAL_CLOCK: Clock = {
  now: () => performance.now(),
  after: (ms, fn) => {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return () => clearTimeout(timer);
  },
};

/** Registers a function to call when the request's client goes away (the response's 'close'). */
export type WhenGone = (gone: () => void) => void;

/** Call once, when the request's answer is done (or its client gone). */
export type Release = () => void;

export type RejectReason = 'queue-full' | 'time-out';

export interface LevelStats {
  level: QueuedLevel;
  seats: number;
  executing: number;
  queued: number;
  rejected: Record<RejectReason, number>;
}

export interface FlowControlOptions {
  /** All levels' seats together (the `max-requests-inflight` setting). */
  totalSeats: number;
  /** Per-level settings over the defaults (tests). */
  levels?: Partial<Record<QueuedLevel, Partial<LevelSettings>>>;
  clock?: Clock;
}

interface Waiter {
  queue: Waiter[];
  seats: number;
  enqueuedAt: number;
  admit(release: Release): void;
  cancelTimer: () => void;
}

/** Longest Retry-After the server suggests: past that, a client had better look again. */
const MAX_RETRY_AFTER_S = 30;

class Level {
  executing = 0;
  queued = 0;
  readonly queues: Waiter[][];
  readonly rejected: Record<RejectReason, number> = { 'queue-full': 0, 'time-out': 0 };
  /** The next queue a freed seat looks at (round robin over the queues). */
  private next = 0;
  /** Moving average of how long a request holds a seat, for Retry-After. */
  private holdMs = 0;

  constructor(
    readonly name: QueuedLevel,
    readonly settings: LevelSettings,
    readonly seats: number,
    private readonly clock: Clock,
  ) {
    this.queues = Array.from({ length: settings.queues }, () => []);
  }

  admit(flow: string, width: number, whenGone: WhenGone | undefined): Release | Promise<Release> {
    // A request wider than the level takes all of it (it could never run otherwise).
    const seats = Math.min(this.seats, Math.max(1, width));
    if (this.executing + seats <= this.seats && this.queued === 0) return this.seat(seats);
    const queue = this.shortestOfHand(flow);
    if (queue.length >= this.settings.queueLengthLimit) {
      this.rejected['queue-full']++;
      throw this.refusal(`its queues for this client are full (${this.settings.queueLengthLimit} requests each)`);
    }
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = {
        queue,
        seats,
        enqueuedAt: this.clock.now(),
        admit: resolve,
        cancelTimer: () => undefined,
      };
      const leave = (): boolean => {
        const at = queue.indexOf(waiter);
        if (at < 0) return false;
        queue.splice(at, 1);
        this.queued--;
        waiter.cancelTimer();
        return true;
      };
      const onAbort = (): void => {
        if (leave()) reject(new ClientGoneError('the client went away while its request waited for a seat'));
      };
      waiter.cancelTimer = this.clock.after(this.settings.maxWaitMs, () => {
        if (!leave()) return;
        this.rejected['time-out']++;
        reject(this.refusal(`the request waited ${this.settings.maxWaitMs / 1000} s for a seat, the longest this level allows`));
      });
      whenGone?.(onAbort);
      queue.push(waiter);
      this.queued++;
    });
  }

  /** Takes `seats` now; the release gives them to the next waiters in turn. */
  private seat(seats: number): Release {
    this.executing += seats;
    const started = this.clock.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.executing -= seats;
      this.holdMs = this.holdMs === 0 ? this.clock.now() - started : 0.8 * this.holdMs + 0.2 * (this.clock.now() - started);
      this.dispatch();
    };
  }

  /**
   * Seats to the queues in turn. When the next in turn needs more seats than are free, nobody
   * overtakes it: it runs as soon as enough are given back (a wide list is not starved by narrow
   * requests slipping past it).
   */
  private dispatch(): void {
    while (this.queued > 0) {
      let index = -1;
      for (let k = 0; k < this.queues.length; k++) {
        const at = (this.next + k) % this.queues.length;
        if (this.queues[at]!.length) {
          index = at;
          break;
        }
      }
      const waiter = this.queues[index]![0]!;
      if (this.executing + waiter.seats > this.seats) return;
      this.queues[index]!.shift();
      this.next = (index + 1) % this.queues.length;
      this.queued--;
      waiter.cancelTimer();
      waiter.admit(this.seat(waiter.seats));
    }
  }

  /**
   * Shuffle sharding: the flow's hash deals it `handSize` distinct queues; it joins the shortest.
   * Two flows rarely share a whole hand, so a noisy one fills its own queues and a quiet one
   * almost always finds a short queue.
   */
  private shortestOfHand(flow: string): Waiter[] {
    const n = this.queues.length;
    const hand = Math.min(this.settings.handSize, n);
    let hash = flowHash(flow);
    const deck = Array.from({ length: n }, (_, k) => k);
    let best: Waiter[] | undefined;
    for (let k = 0; k < hand; k++) {
      const pick = k + (hash % (n - k));
      hash = Math.floor(hash / (n - k));
      [deck[k], deck[pick]] = [deck[pick]!, deck[k]!];
      const queue = this.queues[deck[k]!]!;
      if (!best || queue.length < best.length) best = queue;
    }
    return best!;
  }

  /**
   * 429 naming the level. Retry-After: about how long the level needs to work off what waits
   * in it now, from how long its requests have held a seat lately; 1 s at least.
   */
  private refusal(why: string): ApiError {
    const backlogMs = ((this.queued + this.executing) / this.seats) * this.holdMs;
    const retryAfter = Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(backlogMs / 1000)));
    return errors.tooManyRequests(
      `the server is busy: priority level "${this.name}" has all its ${this.seats} seats taken and ${why}; retry after ${retryAfter} s`,
      retryAfter,
    );
  }
}

/** A 52-bit hash of the flow (FNV-1a twice, with different bases), enough bits to deal a hand of 6 from 128. */
function flowHash(flow: string): number {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < flow.length; i++) {
    const c = flow.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
  }
  return a * 2 ** 20 + (b & 0xfffff);
}

export class FlowController {
  private readonly levels: Map<QueuedLevel, Level>;

  constructor(options: FlowControlOptions) {
    const clock = options.clock ?? REAL_CLOCK;
    const settings = {} as Record<QueuedLevel, LevelSettings>;
    for (const [name, defaults] of Object.entries(DEFAULT_LEVELS) as [QueuedLevel, LevelSettings][]) {
      settings[name] = { ...defaults, ...options.levels?.[name] };
    }
    const seats = seatsPerLevel(options.totalSeats, settings);
    this.levels = new Map(
      (Object.keys(settings) as QueuedLevel[]).map((name) => [name, new Level(name, settings[name], seats[name], clock)]),
    );
  }

  /**
   * The request's seats (`classification.seats`: one, or more for a list), at once or after its turn in the queue; throws (or rejects with) a
   * 429 ApiError when refused. Exempt and long-running requests take no seat. `whenGone` is
   * given a function to call if the client goes away: a waiting request then leaves its queue.
   */
  admit(classification: Classification, whenGone?: WhenGone): Release | Promise<Release> {
    if (classification.level === 'exempt' || classification.longRunning) return NO_SEAT;
    return this.levels.get(classification.level)!.admit(classification.flow, classification.seats, whenGone);
  }

  stats(): LevelStats[] {
    return [...this.levels.values()].map((l) => ({ level: l.name, seats: l.seats, executing: l.executing, queued: l.queued, rejected: { ...l.rejected } }));
  }
}

const NO_SEAT: Release = () => undefined;
