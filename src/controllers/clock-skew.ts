/**
 * How far a node's clock is from the controller's, from the lease renewals it already sends. Each
 * renewal carries the agent's wall-clock time when it sent it (`renewTime`); the controller notes
 * its own wall-clock time when it sees that renewal arrive. Their difference is the offset minus
 * the delay of the trip (request, datastore write, watch), and the delay is never negative, so of
 * the recent samples the largest is the one with the shortest trip and the closest to the truth:
 * the minimum-delay filter NTP's clock filter is built on. The estimate is low by that shortest
 * trip (milliseconds on a healthy cluster); one slow renewal cannot move it.
 *
 * Only reporting depends on this: the `ClockSkew` condition and event, and a metric. Node states
 * and fencing are judged on each host's own monotonic clock and never compare two hosts' clocks.
 */

/** `ClockSkew` turns True when the estimated offset is larger than this, either way. */
export const CLOCK_SKEW_THRESHOLD_MS = 2000;
/** …and False again once it is back under this (a margin, so an offset near the threshold cannot flap). */
export const CLOCK_SKEW_CLEAR_MS = 1000;
/**
 * Samples kept: the estimate follows a clock step within this many renewals. A stall (of the
 * datastore, say) releases renewals that waited in it all at once, each late by up to the stall:
 * they move the estimate only if they fill the whole window, and the most recent of them waited
 * about one renewal timeout at most.
 */
export const OFFSET_WINDOW = 10;
/** No estimate from fewer samples: a few could all have been slow trips. */
export const MIN_OFFSET_SAMPLES = 5;
/** While True, the condition's message is rewritten when the estimate moves by this much. */
export const SKEW_MESSAGE_STEP_MS = 1000;

export interface OffsetSamples {
  /** renewTime − the controller's wall clock at arrival, in ms, oldest first. */
  samples: number[];
}

export function emptySamples(): OffsetSamples {
  return { samples: [] };
}

/**
 * Record one renewal: the agent's `renewTime` (ms since the epoch, by its clock) and the
 * controller's wall clock when it arrived.
 */
export function addSample(s: OffsetSamples, renewTimeMs: number, arrivedWallMs: number): void {
  if (!Number.isFinite(renewTimeMs)) return;
  s.samples.push(renewTimeMs - arrivedWallMs);
  if (s.samples.length > OFFSET_WINDOW) s.samples.shift();
}

/** The node's clock minus the controller's, in ms (positive: the node is ahead); undefined until enough samples. */
export function estimateOffset(s: OffsetSamples): number | undefined {
  if (s.samples.length < MIN_OFFSET_SAMPLES) return undefined;
  return Math.max(...s.samples);
}

/** Whether the condition should be True, given the estimate and whether it is True now. */
export function isSkewed(offsetMs: number, skewedNow: boolean): boolean {
  return Math.abs(offsetMs) > (skewedNow ? CLOCK_SKEW_CLEAR_MS : CLOCK_SKEW_THRESHOLD_MS);
}

/** "600.0 s ahead of" / "0.003 s behind": for messages. */
export function describeOffset(offsetMs: number): string {
  const seconds = Math.abs(offsetMs) / 1000;
  const figure = seconds >= 10 ? seconds.toFixed(1) : seconds.toFixed(3);
  return `${figure} s ${offsetMs >= 0 ? 'ahead of' : 'behind'}`;
}

export interface ClockSkewCondition {
  type: 'ClockSkew';
  status: 'True' | 'False';
  reason: 'ClockAhead' | 'ClockBehind' | 'ClockInSync';
  message: string;
}

/** The node condition for an estimate (and the event that goes with a change to it). */
export function clockSkewCondition(offsetMs: number, skewed: boolean): ClockSkewCondition {
  const rule = `set above ±${CLOCK_SKEW_THRESHOLD_MS / 1000} s, cleared below ±${CLOCK_SKEW_CLEAR_MS / 1000} s`;
  if (!skewed) {
    return {
      type: 'ClockSkew',
      status: 'False',
      reason: 'ClockInSync',
      message: `clock is ${describeOffset(offsetMs)} the control plane's, measured from lease renewals (${rule})`,
    };
  }
  return {
    type: 'ClockSkew',
    status: 'True',
    reason: offsetMs > 0 ? 'ClockAhead' : 'ClockBehind',
    message: `clock is ${describeOffset(offsetMs)} the control plane's, measured from lease renewals (${rule}); node state does not depend on it, but timestamps this node writes are off: synchronise its clock (NTP)`,
  };
}
