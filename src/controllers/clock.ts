/**
 * The controllers' clock for time spans (how long a node has been silent, how long a lease has
 * gone unrenewed): monotonic (`performance.now()`, CLOCK_MONOTONIC), so a step of this host's
 * wall clock (an NTP correction, `date -s`, a VM restored from a snapshot) can neither keep a dead
 * node looking alive nor make live nodes look late. The wall clock is used only for timestamps
 * written for people to read, and to measure other hosts' clock offsets (clock-skew.ts), never to
 * judge a node.
 */
export function monotonicMs(): number {
  return performance.now();
}

/** The wall-clock time of a moment given on the monotonic clock, for timestamps people read. */
export function wallTimeOf(monotonic: number): number {
  return Date.now() - (monotonicMs() - monotonic);
}
