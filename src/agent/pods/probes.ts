import { monoNowMs } from './fencing.js';
import { containerReadiness, newTracker, type ProbeOutcome, probeActive, probeStatus, type ProbeTracker, recordResult } from './probe-logic.js';
import { type ProbeExec, runProbe } from './probe-handlers.js';
import type { ContainerProbeSpecs, ContainerRunStatus, ProbeKind, ProbeRunStatus, ProbeSpec } from './run-spec.js';

/**
 * One running container's probes, in its pod's supervisor (which outlives the agent, so probes
 * keep their rhythm through an agent restart): each probe on its own timer, so a slow liveness
 * probe never holds up readiness; results through probe-logic.ts's rules. The supervisor makes one
 * when a container starts and stops it when the container exits; a restarted container starts
 * over, not ready and not started, as in kubelet.
 */

export interface ProbeEvents {
  /** `ready`, `started` or a probe's status changed: write state.json. */
  onChange: () => void;
  /** A liveness or startup probe failed for good: kill the container (grace in seconds, or the pod's). */
  onKill: (kind: ProbeKind, message: string, graceSeconds: number | undefined) => void;
}

export interface ContainerProbesOptions extends ProbeEvents {
  probes: ContainerProbeSpecs;
  exec: ProbeExec;
  /** The pod's own address (pod network); absent: the node's network, probed at loopback. */
  podIp?: string;
  /** Monotonic ms when the container started. */
  startedAtMs: number;
  /** The probes' status from the container's earlier instances (their counts carry on). */
  previous?: Partial<Record<ProbeKind, ProbeRunStatus>>;
  /** For tests: how one probe runs (default: runProbe with `exec`). */
  run?: (spec: ProbeSpec) => Promise<ProbeOutcome>;
  /** For tests: the clock (default: the monotonic one). */
  now?: () => number;
}

const KINDS: readonly ProbeKind[] = ['startup', 'liveness', 'readiness'];

export class ContainerProbes {
  private readonly trackers = new Map<ProbeKind, ProbeTracker>();
  private readonly timers = new Map<ProbeKind, NodeJS.Timeout>();
  private readonly running = new Set<ProbeKind>();
  private readonly now: () => number;
  private readonly run: (spec: ProbeSpec) => Promise<ProbeOutcome>;
  private stopped = false;

  constructor(private readonly options: ContainerProbesOptions) {
    this.now = options.now ?? monoNowMs;
    this.run = options.run ?? ((spec) => runProbe(spec.handler, spec.timeoutSeconds, options.exec, options.podIp));
    for (const kind of KINDS) {
      const spec = options.probes[kind];
      if (spec) this.trackers.set(kind, newTracker(kind, spec, options.startedAtMs, options.previous?.[kind]));
    }
  }

  /** Whether this container has any probe at all. */
  get empty(): boolean {
    return this.trackers.size === 0;
  }

  /** Called once the container runs (under runc: once runc has started it, supervisor.ts markRunning). */
  start(): void {
    for (const kind of this.trackers.keys()) this.schedule(kind);
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  /** `started` and `ready` of the running container. */
  readiness(): { started: boolean; ready: boolean } {
    return containerReadiness(this.trackers, true);
  }

  statuses(): Partial<Record<ProbeKind, ProbeRunStatus>> {
    return Object.fromEntries([...this.trackers].map(([kind, tracker]) => [kind, probeStatus(tracker)]));
  }

  private schedule(kind: ProbeKind): void {
    if (this.stopped || this.running.has(kind) || !probeActive(kind, this.trackers)) return;
    const tracker = this.trackers.get(kind)!;
    clearTimeout(this.timers.get(kind));
    // A timer cannot wait longer than 2^31-1 ms; a longer initial delay just re-arms.
    const delay = Math.min(Math.max(0, tracker.nextAtMs - this.now()), 2_147_483_647);
    this.timers.set(
      kind,
      setTimeout(() => {
        this.timers.delete(kind);
        if (tracker.nextAtMs > this.now()) this.schedule(kind);
        else void this.probe(kind);
      }, delay),
    );
  }

  private async probe(kind: ProbeKind): Promise<void> {
    const tracker = this.trackers.get(kind)!;
    if (this.stopped || !probeActive(kind, this.trackers)) return;
    this.running.add(kind);
    const startedAt = this.now();
    let outcome: ProbeOutcome;
    try {
      outcome = await this.run(tracker.spec);
    } catch (error) {
      outcome = { ok: false, message: (error as Error).message };
    } finally {
      this.running.delete(kind);
    }
    if (this.stopped) return;
    const { changed, kill } = recordResult(tracker, outcome, startedAt);
    if (kind === 'startup' && tracker.result === 'success') {
      // Started: liveness and readiness begin, no sooner than their own initial delays.
      for (const other of ['liveness', 'readiness'] as const) if (this.trackers.has(other)) this.schedule(other);
    }
    if (changed) this.options.onChange();
    if (kill) {
      this.stop();
      this.options.onKill(kind, tracker.lastFailure ?? '', tracker.spec.terminationGracePeriodSeconds);
      return;
    }
    this.schedule(kind);
  }
}

/** The event kubelet records for a failed probe: `Liveness probe failed: ...`. */
export function probeFailedMessage(kind: ProbeKind, message: string): string {
  return `${kind[0]!.toUpperCase()}${kind.slice(1)} probe failed: ${message}`;
}

/**
 * Bring a container's `ready`, `started` and probe statuses up to date: from its probes while it
 * runs (none: both true), false once it has stopped. The probe statuses stay after it stops, so
 * the agent still sees the failure that killed it.
 */
export function updateReadiness(status: ContainerRunStatus, probes: ContainerProbes | undefined, running: boolean, now = new Date().toISOString()): void {
  const { started, ready } = !running ? { started: false, ready: false } : (probes?.readiness() ?? { started: true, ready: true });
  if (status.ready !== ready) status.readyChangedAt = now;
  status.ready = ready;
  status.started = started;
  if (probes && !probes.empty) status.probes = probes.statuses();
}

export interface ProbeHooks {
  exec: ProbeExec;
  /** The pod's own address, where probes without a host connect (absent: loopback). */
  podIp?: string;
  /** Monotonic ms when the container started. */
  startedAtMs: number;
  /** Whether the container still runs. */
  running: () => boolean;
  writeState: () => void;
  kill: ProbeEvents['onKill'];
}

/**
 * The supervisor's one call when a container starts: its probes, started, with `status` kept
 * current (undefined when it has none: then it is ready and started at once).
 */
export function startContainerProbes(specs: ContainerProbeSpecs | undefined, status: ContainerRunStatus, hooks: ProbeHooks): ContainerProbes | undefined {
  const probes = specs
    ? new ContainerProbes({
        probes: specs,
        exec: hooks.exec,
        ...(hooks.podIp ? { podIp: hooks.podIp } : {}),
        startedAtMs: hooks.startedAtMs,
        ...(status.probes ? { previous: status.probes } : {}),
        onChange: () => {
          updateReadiness(status, probes, hooks.running());
          hooks.writeState();
        },
        onKill: hooks.kill,
      })
    : undefined;
  updateReadiness(status, probes, true);
  probes?.start();
  return probes;
}
