/**
 * The controllers' clock. Time spans (how long a node has been silent, how long a lease has gone
 * unrenewed) are measured on a monotonic clock (`performance.now()`, CLOCK_MONOTONIC), so a step
 * of this host's wall clock (an NTP correction, `date -s`, a VM restored from a snapshot) can
 * neither keep a dead node looking alive nor make live nodes look late. The wall clock is used
 * only for timestamps written for people to read, and to measure other hosts' clock offsets
 * (clock-skew.ts), never to judge a node.
 *
 * Controllers take a `Clock` (the system's by default), so tests drive them with a FakeClock:
 * time moves only when the test advances it, and timers fire in order as it does.
 */

export interface TimerHandle {
  /** Opaque. */
  readonly id: unknown;
}

export interface Clock {
  /** Monotonic ms: for spans only, compare only with other readings of this clock. */
  now(): number;
  /** Wall-clock ms since the epoch (Date.now()): for timestamps people read, never for spans. */
  wallNow(): number;
  /** Run `fn` once after `ms` of this clock. Timers do not keep the process alive. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle | undefined): void;
}

class SystemClock implements Clock {
  now(): number {
    return performance.now();
  }

  wallNow(): number {
    return Date.now();
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = setTimeout(fn, ms);
    timer.unref?.();
    return { id: timer };
  }

  clearTimeout(handle: TimerHandle | undefined): void {
    if (handle) clearTimeout(handle.id as NodeJS.Timeout);
  }
}

export const systemClock: Clock = new SystemClock();

/** The system clock's monotonic time. */
export function monotonicMs(): number {
  return systemClock.now();
}

/** The wall-clock time of a moment given on `clock`'s monotonic time, for timestamps people read. */
export function wallTimeOf(monotonic: number, clock: Clock = systemClock): number {
  return clock.wallNow() - (clock.now() - monotonic);
}

interface FakeTimer {
  id: number;
  due: number;
  fn: () => void;
}

/**
 * A clock for tests: `now()` and `wallNow()` move only through `advance()` (or `stepWall()`, which
 * moves the wall clock alone, as an NTP step would), and timers fire when their time is reached,
 * earliest first, each followed by a few turns of the event loop so the work it started (reads
 * and writes through an in-process client) can run before the next one fires.
 */
export class FakeClock implements Clock {
  private monotonic: number;
  private wall: number;
  private nextId = 1;
  private readonly timers = new Map<number, FakeTimer>();

  constructor(start: { monotonic?: number; wall?: number } = {}) {
    this.monotonic = start.monotonic ?? 1_000_000;
    this.wall = start.wall ?? Date.parse('2026-01-01T00:00:00Z');
  }

  now(): number {
    return this.monotonic;
  }

  wallNow(): number {
    return this.wall;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    this.timers.set(id, { id, due: this.monotonic + Math.max(0, ms), fn });
    return { id };
  }

  clearTimeout(handle: TimerHandle | undefined): void {
    if (handle) this.timers.delete(handle.id as number);
  }

  /** Timers waiting to fire. */
  get pending(): number {
    return this.timers.size;
  }

  /**
   * Move both clocks forward by `ms`, firing every timer that comes due on the way (those set by
   * a firing timer too, when they fall within the step), in order of their due time.
   */
  async advance(ms: number, settleTurns = 20): Promise<void> {
    const target = this.monotonic + ms;
    for (;;) {
      let next: FakeTimer | undefined;
      for (const timer of this.timers.values()) {
        if (timer.due <= target && (!next || timer.due < next.due || (timer.due === next.due && timer.id < next.id))) next = timer;
      }
      if (!next) break;
      this.timers.delete(next.id);
      this.moveTo(next.due);
      next.fn();
      await settle(settleTurns);
    }
    this.moveTo(target);
    await settle(settleTurns);
  }

  /**
   * Move both clocks forward by `ms` without firing any timer, as a process stopped (SIGSTOP, a
   * long pause) finds time on resuming: whatever it checks first sees the new time, and the timers
   * now overdue fire at the next `advance()`.
   */
  jump(ms: number): void {
    this.moveTo(this.monotonic + ms);
  }

  /** Step the wall clock alone (an NTP correction, `date -s`): monotonic time and timers are unaffected. */
  stepWall(ms: number): void {
    this.wall += ms;
  }

  private moveTo(monotonic: number): void {
    if (monotonic <= this.monotonic) return;
    this.wall += monotonic - this.monotonic;
    this.monotonic = monotonic;
  }
}

/** Let `turns` rounds of the event loop run (promise jobs and immediates queued meanwhile). */
export async function settle(turns = 20): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
