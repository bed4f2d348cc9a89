import type { ProbeKind, ProbeRunStatus, ProbeSpec } from './run-spec.js';

/**
 * The probes' rules as kubelet's prober applies them, as pure functions over a clock the caller
 * passes in (probes.ts runs them on real timers, the unit tests on a fake one):
 *
 * - a probe first runs `initialDelaySeconds` after the container started, then every
 *   `periodSeconds` (counted from the start of the previous run);
 * - its result changes only after `successThreshold` consecutive successes or `failureThreshold`
 *   consecutive failures; until then the previous result stands. A readiness probe starts as a
 *   failure (not ready until it passes), a liveness probe as a success, a startup probe unknown;
 * - while a startup probe has not succeeded, the liveness and readiness probes do not run and the
 *   container is not started (so not ready); once it succeeds it never runs again;
 * - a liveness or startup probe whose result becomes a failure kills the container.
 */

export interface ProbeTracker {
  kind: ProbeKind;
  spec: ProbeSpec;
  result: ProbeRunStatus['result'];
  /** Consecutive successes and failures (one of them is 0). */
  successes: number;
  failures: number;
  failureStreaks: number;
  lastFailure?: string;
  kills: number;
  /** Monotonic ms when the probe is next due. */
  nextAtMs: number;
}

export interface ProbeOutcome {
  ok: boolean;
  /** Why it failed, as the event says it (output, status code, connection error). */
  message?: string;
}

/**
 * A probe of a container that just started. `previous`: the same probe's status from the
 * container's earlier instances, whose counts carry on (the agent words one event per streak
 * and per kill, keyed by these counts).
 */
export function newTracker(kind: ProbeKind, spec: ProbeSpec, containerStartMs: number, previous?: ProbeRunStatus): ProbeTracker {
  return {
    kind,
    spec,
    result: kind === 'readiness' ? 'failure' : kind === 'liveness' ? 'success' : 'unknown',
    successes: 0,
    failures: 0,
    failureStreaks: previous?.failureStreaks ?? 0,
    kills: previous?.kills ?? 0,
    ...(previous?.lastFailure !== undefined ? { lastFailure: previous.lastFailure } : {}),
    nextAtMs: containerStartMs + Math.max(0, spec.initialDelaySeconds) * 1000,
  };
}

export interface RecordedResult {
  /** Something the state file shows changed (the result, or a new failure streak began). */
  changed: boolean;
  /** The container must be killed (a liveness or startup probe just failed for good). */
  kill: boolean;
}

/**
 * One probe run's outcome, which started at `startedAtMs`: counts, the result past its
 * thresholds, and when the probe is due next.
 */
export function recordResult(tracker: ProbeTracker, outcome: ProbeOutcome, startedAtMs: number): RecordedResult {
  const t = tracker;
  t.nextAtMs = startedAtMs + Math.max(1, t.spec.periodSeconds) * 1000;
  let changed = false;
  if (outcome.ok) {
    t.failures = 0;
    t.successes++;
    if (t.result !== 'success' && t.successes >= Math.max(1, t.spec.successThreshold)) {
      t.result = 'success';
      changed = true;
    }
    return { changed, kill: false };
  }
  if (t.failures === 0) {
    t.failureStreaks++;
    changed = true;
  }
  t.successes = 0;
  t.failures++;
  t.lastFailure = outcome.message ?? '';
  if (t.failures >= Math.max(1, t.spec.failureThreshold) && t.result !== 'failure') {
    t.result = 'failure';
    changed = true;
    if (t.kind !== 'readiness') {
      t.kills++;
      return { changed, kill: true };
    }
  }
  return { changed, kill: false };
}

/** Whether a probe runs now: startup until it succeeds; liveness and readiness only after it. */
export function probeActive(kind: ProbeKind, trackers: ReadonlyMap<ProbeKind, ProbeTracker>): boolean {
  const startup = trackers.get('startup');
  const started = !startup || startup.result === 'success';
  return kind === 'startup' ? !started : started;
}

/** A running container's `started` and `ready`, from its probes (none: both as soon as it runs). */
export function containerReadiness(trackers: ReadonlyMap<ProbeKind, ProbeTracker>, running: boolean): { started: boolean; ready: boolean } {
  if (!running) return { started: false, ready: false };
  const startup = trackers.get('startup');
  const started = !startup || startup.result === 'success';
  const readiness = trackers.get('readiness');
  return { started, ready: started && (!readiness || readiness.result === 'success') };
}

/** What state.json shows of a probe. */
export function probeStatus(tracker: ProbeTracker): ProbeRunStatus {
  return {
    result: tracker.result,
    failureStreaks: tracker.failureStreaks,
    ...(tracker.lastFailure !== undefined ? { lastFailure: tracker.lastFailure } : {}),
    kills: tracker.kills,
  };
}
