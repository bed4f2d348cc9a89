import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoDigest } from '../../images/reference.js';
import type { Logger } from '../../logging/logger.js';
import { exitStatus, killGroup, restorePriority, SIGNAL_NAMES, SIGNAL_NUMBERS, spawnContainerProcess } from './container-process.js';
import { FenceWatch } from './fence-watch.js';
import { monoNowMs } from './fencing.js';
import { containerEnvironment, supervisorEnvironment } from './environment.js';
import { InstanceLogWriter, pruneInstanceLogs } from './logs.js';
import { planExec } from './probe-handlers.js';
import { execPlan } from './runtime/exec.js';
import { type ContainerProbes, startContainerProbes, updateReadiness } from './probes.js';
import {
  DEFAULT_LOG_MAX_BYTES,
  LOGS_DIR,
  SUPERVISOR_PID_FILE,
  WORK_DIR,
  instanceLogFile,
  readRunState,
  writeRunState,
  type ContainerRunSpec,
  type ContainerRunState,
  type EphemeralContainerRunSpec,
  type ContainerRunStatus,
  type PodFinishReason,
  type PodRunSpec,
  type PodRunState,
} from './run-spec.js';
import { podCgroupPath } from './runtime/names.js';
import { removeCgroup } from './runtime/cgroups.js';
import { RuncContainer } from './runtime/runc-container.js';
import { runcState } from './runtime/runc.js';
import { teardownSandbox } from './runtime/sandbox.js';
import { ContainerStdin } from './stdin.js';

/**
 * One pod's supervisor: starts its containers as process groups, restarts them per restartPolicy
 * with back-off, stops them on request, fences `atMostOne` pods when the node has lost the control
 * plane, and keeps `state.json` current. It runs in its own process so an agent crash leaves the
 * workload supervised.
 */

export const BACKOFF_INITIAL_MS = 1000;
export const BACKOFF_MAX_MS = 60_000;
/** A container that ran this long before failing restarts after the initial back-off again. */
export const BACKOFF_RESET_AFTER_MS = 60_000;
/** After its main process exits, how long to wait for the rest of the output before closing the log. */
const OUTPUT_DRAIN_MS = 1000;
const FENCE_FINISH_CEILING_MS = 2000;

export interface SupervisorOptions {
  dir: string;
  spec: PodRunSpec;
  logger: Logger;
  /** Called once, when the supervisor has finished and written its final state. */
  onFinished: (reason: PodFinishReason) => void;
}

interface ContainerRunner {
  spec: ContainerRunSpec;
  status: ContainerRunStatus;
  child?: ChildProcess;
  startedAt?: string;
  startedAtMono?: number;
  /** The delay before the next restart. */
  nextBackoffMs: number;
  restartTimer?: NodeJS.Timeout;
  log?: InstanceLogWriter;
  /** Terminated for good: no restart will follow. */
  done: boolean;
  /** Set when the supervisor killed it, to name the termination. */
  killedBy?: 'stop' | 'fence' | 'probe';
  /** The running instance's probes (probes.ts). */
  probes?: ContainerProbes;
  /** SIGKILL after a failed liveness or startup probe's grace period. */
  probeKillTimer?: NodeJS.Timeout;
  /** Under runc: the container's bundle, cgroup and runc calls. */
  runc?: RuncContainer;
  /** Under runc: its bundle is being made (nothing to signal yet). */
  creating?: boolean;
  /** `stdin: true`: the socket `kubectl attach -i` writes the container's stdin through (stdin.ts). */
  stdin?: ContainerStdin;
  /** An ephemeral container (`kubectl debug`): runs once, never restarted, does not keep the pod going. */
  ephemeral?: EphemeralContainerRunSpec;
}

function nowIso(): string {
  return new Date().toISOString();
}

export class PodSupervisor {
  private readonly dir: string;
  private readonly spec: PodRunSpec;
  private readonly logger: Logger;
  private readonly runners: ContainerRunner[];
  private readonly startedAt = nowIso();
  private readonly startedAtMono = monoNowMs();
  private stopping = false;
  private fencedAt: { at: string; message: string } | undefined;
  private finishReason: PodFinishReason | undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  /** Set for an `atMostOne` pod with a fencing file: fences it when the node loses the control plane. */
  private fenceWatch: FenceWatch | undefined;
  private finishing = false;

  constructor(private readonly options: SupervisorOptions) {
    this.dir = path.resolve(options.dir);
    this.spec = options.spec;
    this.logger = options.logger;
    // A supervisor restarted on the same pod dir carries the restart counts on, so instance
    // numbers (and log file names) never repeat.
    const previous = readRunState(this.dir);
    const wasFenced = previous?.finishReason === 'Fenced';
    this.runners = this.spec.containers.map((spec) => this.newRunner(spec, previous?.containers.find((c) => c.name === spec.name), wasFenced));
    for (const spec of this.spec.ephemeralContainers ?? []) {
      this.runners.push(this.newRunner(spec, previous?.ephemeralContainers?.find((c) => c.name === spec.name), wasFenced, spec));
    }
    if (wasFenced) {
      this.fencedAt = previous.fenced ?? { at: previous.updatedAt, message: 'fenced by an earlier supervisor' };
    }
  }

  /** A container's runner; `before`: its status from an earlier supervisor on this pod dir. */
  private newRunner(spec: ContainerRunSpec, before: ContainerRunStatus | undefined, wasFenced: boolean, ephemeral?: EphemeralContainerRunSpec): ContainerRunner {
    // Fenced, nothing runs again: keep the record as it was. An ephemeral container runs once:
    // one an earlier supervisor started stays as it ended.
    if ((wasFenced || ephemeral) && before) {
      return { spec, status: before, nextBackoffMs: BACKOFF_INITIAL_MS, done: true, ...(ephemeral ? { ephemeral } : {}) };
    }
    const ran = before !== undefined && !('waiting' in before.state && before.state.waiting.reason === 'ContainerCreating');
    const runc =
      this.spec.runtime === 'runc'
        ? new RuncContainer(this.dir, this.spec, spec, (message, details) => this.logger.warn({ container: spec.name, ...details }, message))
        : undefined;
    return {
      spec,
      status: {
        name: spec.name,
        state: { waiting: { reason: 'ContainerCreating' } },
        restartCount: before ? before.restartCount + (ran ? 1 : 0) : 0,
        ...(before?.probes ? { probes: before.probes } : {}),
        ...(runc ? { containerId: `runc://${runc.id}` } : {}),
        ...(spec.image ? { imageId: repoDigest(spec.image.ref, spec.image.digest) } : {}),
      },
      nextBackoffMs: BACKOFF_INITIAL_MS,
      done: false,
      ...(runc ? { runc } : {}),
      ...(spec.stdin ? { stdin: new ContainerStdin(this.dir, spec.name, spec.stdinOnce === true, (message, details) => this.logger.warn(details, message)) } : {}),
      ...(ephemeral ? { ephemeral } : {}),
    };
  }

  /**
   * The agent added ephemeral containers to pod.json (SIGUSR2): start the new ones in the pod's
   * sandbox. Nothing else of the run spec is taken up: the pod's containers run as they were started.
   */
  addEphemeralContainers(spec: PodRunSpec): void {
    if (this.isTerminal() || this.stopping) return;
    for (const added of spec.ephemeralContainers ?? []) {
      if (this.runners.some((r) => r.spec.name === added.name)) continue;
      const runner = this.newRunner(added, undefined, false, added);
      this.runners.push(runner);
      this.logger.info({ container: added.name, target: added.targetContainerName }, 'ephemeral container added');
      try {
        runner.stdin?.listen();
      } catch (error) {
        this.logger.warn({ err: error, container: added.name }, 'cannot open the stdin socket; attach -i is unavailable');
      }
      this.startContainer(runner);
    }
  }

  get state(): PodRunState {
    const state: PodRunState = {
      uid: this.spec.uid,
      supervisorPid: process.pid,
      startedAt: this.startedAt,
      containers: this.runners.filter((r) => !r.ephemeral).map((r) => structuredClone(r.status)),
      ephemeralContainers: this.runners.filter((r) => r.ephemeral).map((r) => structuredClone(r.status)),
      finished: this.finishReason !== undefined,
      updatedAt: nowIso(),
    };
    if (this.finishReason) state.finishReason = this.finishReason;
    if (this.fencedAt) state.fenced = this.fencedAt;
    const outage = this.fenceWatch?.outage;
    if (outage) state.outage = outage;
    return state;
  }

  start(): void {
    fs.writeFileSync(path.join(this.dir, SUPERVISOR_PID_FILE), `${process.pid}\n`, { mode: 0o600 });
    fs.mkdirSync(path.join(this.dir, LOGS_DIR), { recursive: true, mode: 0o700 });
    if (this.fencedAt) {
      // Fencing is permanent: the control plane may have started this pod elsewhere.
      this.logger.warn({ fenced: this.fencedAt }, 'pod was fenced before; refusing to start it again');
      for (const runner of this.runners) runner.done = true;
      this.finish('Fenced');
      return;
    }
    this.writeState();
    this.logger.info(
      {
        pod: `${this.spec.namespace}/${this.spec.name}`,
        containers: this.runners.length,
        atMostOne: this.spec.atMostOne,
        // How long this process had run by now (Node's start, the imports, reading the spec): bench/pod-start.ts.
        bootMs: Math.round(performance.now()),
      },
      'supervisor started',
    );
    if (this.spec.atMostOne && this.spec.fencingFile) {
      this.fenceWatch = new FenceWatch({
        fencingFile: this.spec.fencingFile,
        logger: this.logger,
        startedAtMono: this.startedAtMono,
        target: {
          isTerminal: () => this.isTerminal(),
          fence: (message, figures) => this.fence(message, figures),
          outageChanged: () => this.writeState(),
        },
      });
      this.fenceWatch.start();
    }
    for (const runner of this.runners) {
      try {
        runner.stdin?.listen();
      } catch (error) {
        this.logger.warn({ err: error, container: runner.spec.name }, 'cannot open the stdin socket; attach -i is unavailable');
      }
      if (!this.isTerminal() && !runner.done) this.startContainer(runner);
    }
  }

  /** Stop gracefully: SIGTERM every container group, SIGKILL the survivors after the grace period. */
  stop(): void {
    if (this.stopping || this.isTerminal()) return;
    this.stopping = true;
    const graceMs = Math.max(0, this.spec.terminationGracePeriodSeconds) * 1000;
    this.logger.info({ graceMs }, 'stopping pod');
    for (const runner of this.runners) {
      clearTimeout(runner.restartTimer);
      if (runner.child) {
        runner.killedBy = 'stop';
        this.signalStop(runner);
      } else if (!runner.creating) {
        runner.done = true;
      }
    }
    // A timer cannot wait longer than 2^31-1 ms (24.8 days): a longer one would fire at once.
    this.graceTimer = setTimeout(() => {
      for (const runner of this.runners) {
        if (runner.child) {
          this.logger.warn({ container: runner.spec.name, pid: runner.child.pid, graceMs }, 'container outlived its grace period; killing it');
          this.killRunner(runner);
        }
      }
    }, Math.min(graceMs, 2_147_483_647));
    this.writeState();
    this.maybeFinish();
  }

  /** Kill every container group at once (the supervisor cannot go on supervising them). */
  killAll(): void {
    for (const runner of this.runners) this.killRunner(runner);
  }

  /** Ask a container to stop: SIGTERM to its group, or under runc its stop signal through runc. */
  private signalStop(runner: ContainerRunner): void {
    if (!runner.runc) {
      killGroup(runner.child?.pid, 'SIGTERM');
      return;
    }
    const { runc } = runner;
    runc.stop().catch((error: unknown) => {
      this.logger.warn({ err: error, container: runner.spec.name }, 'cannot signal the container through runc; killing it');
      runc.kill();
    });
  }

  /** SIGKILL a container: its process group, or under runc every process of its cgroup. */
  private killRunner(runner: ContainerRunner): void {
    if (runner.runc) runner.runc.kill();
    killGroup(runner.child?.pid, 'SIGKILL');
  }

  private isTerminal(): boolean {
    return this.fencedAt !== undefined || this.finishReason !== undefined || this.finishing;
  }

  private writeState(): void {
    try {
      writeRunState(this.dir, this.state);
    } catch (error) {
      this.logger.error({ err: error }, 'cannot write state.json');
    }
  }

  private startContainer(runner: ContainerRunner): void {
    if (runner.runc) {
      void this.startRuncContainer(runner, runner.runc);
      return;
    }
    this.startProcessContainer(runner);
  }

  /** Under runc: a fresh bundle, then the foreground `runc run`, supervised like any process. */
  private async startRuncContainer(runner: ContainerRunner, runc: RuncContainer): Promise<void> {
    runner.creating = true;
    try {
      if (runner.ephemeral?.targetContainerName) runc.pidNamespace = await this.targetPidNamespace(runner.ephemeral.targetContainerName);
      await runc.prepare();
    } catch (error) {
      runner.creating = false;
      this.createFailed(runner, `cannot create the container: ${(error as Error).message}`);
      return;
    }
    runner.creating = false;
    if (this.isTerminal() || this.stopping) {
      runner.done = true;
      await runc.cleanup().catch((error: unknown) => this.logger.warn({ err: error, container: runner.spec.name }, 'cannot clean up the container'));
      this.maybeFinish();
      return;
    }
    const { file, args, cwd, keepStdin } = runc.spawnArgs();
    const child = spawnContainerProcess(file, args, { cwd, env: supervisorEnvironment(), stdin: runner.stdin !== undefined || keepStdin }, (message) =>
      this.createFailed(runner, message),
    );
    if (child) this.attachChild(runner, child);
  }

  /** The PID namespace of a running container (an ephemeral container's target), by its init's pid as runc reports it. */
  private async targetPidNamespace(name: string): Promise<string> {
    const target = this.runners.find((r) => r.spec.name === name && !r.ephemeral);
    if (!target?.runc || !target.child || !this.spec.runcRoot) throw new Error(`target container ${name} is not running`);
    const state = await runcState(this.spec.runcRoot, target.runc.id);
    if (!state?.pid) throw new Error(`target container ${name} is not running (runc reports ${state?.status ?? 'nothing'})`);
    return `/proc/${state.pid}/ns/pid`;
  }

  private startProcessContainer(runner: ContainerRunner): void {
    const { spec } = runner;
    const argv = [...spec.command, ...spec.args];
    const cwd = spec.workingDir ?? path.join(this.dir, WORK_DIR);
    // Under script its command would be out of the group the supervisor signals (runtime/terminal.ts).
    if (spec.tty) this.logger.warn({ container: spec.name }, 'tty: true has no terminal under the process runtime; the container runs with pipes');
    // Built from nothing: the supervisor's own environment (its priority note) is not the pod's.
    const env = containerEnvironment(spec.env);
    try {
      fs.mkdirSync(cwd, { recursive: true });
    } catch (error) {
      this.createFailed(runner, `cannot create working directory ${cwd}: ${(error as Error).message}`);
      return;
    }
    const child = spawnContainerProcess(argv[0]!, argv.slice(1), { cwd, env, stdin: runner.stdin !== undefined }, (message) => this.createFailed(runner, message));
    if (child) this.attachChild(runner, child);
  }

  /** A container's main process is spawned: its log, its state, and what follows its exit. */
  private attachChild(runner: ContainerRunner, child: ChildProcess): void {
    const { spec } = runner;
    const instance = runner.status.restartCount;
    const pid = child.pid!;
    restorePriority(pid);
    runner.child = child;
    runner.killedBy = undefined;
    runner.startedAt = nowIso();
    runner.startedAtMono = monoNowMs();
    try {
      runner.log = new InstanceLogWriter(instanceLogFile(this.dir, spec.name, instance), this.spec.logMaxBytes ?? DEFAULT_LOG_MAX_BYTES);
      pruneInstanceLogs(this.dir, spec.name, instance);
    } catch (error) {
      this.logger.error({ err: error, container: spec.name }, 'cannot open the container log; its output is discarded');
    }
    const onOutput = (chunk: Buffer): void => {
      try {
        runner.log?.write(chunk);
      } catch (error) {
        this.logger.error({ err: error, container: spec.name }, 'cannot write the container log');
      }
    };
    child.stdout?.on('data', onOutput);
    child.stderr?.on('data', onOutput);
    child.on('error', (error) => this.logger.error({ err: error, container: spec.name }, 'container process error'));
    runner.stdin?.instanceStarted(child.stdin);
    this.logger.info({ container: spec.name, pid, instance }, 'container started');
    if (runner.runc) {
      // `runc run` is spawned, but the container is not there yet: running is what runc reports
      // (kubelet reports it once the runtime has started the container), so an exec works at once.
      const { runc } = runner;
      void runc.whenStarted(() => runner.child !== child).then((started) => {
        if (!started || runner.child !== child) return;
        this.logger.info({ container: spec.name, pid, instance }, 'container running');
        this.markRunning(runner, pid);
      });
    } else {
      this.markRunning(runner, pid);
    }

    child.once('exit', (code, signal) => {
      runner.stdin?.instanceEnded();
      // A container ends with its main process: whatever it left behind in its group goes too.
      killGroup(pid, 'SIGKILL');
      const finishedAt = nowIso();
      let drained = false;
      const finalize = (): void => {
        if (drained) return;
        drained = true;
        clearTimeout(drainTimer);
        runner.log?.close();
        runner.log = undefined;
        if (!runner.runc) {
          this.containerExited(runner, code, signal, finishedAt);
          return;
        }
        // runc exits with the container's status: 128+n when a signal ended it.
        const status = exitStatus(code, signal);
        const bySignal = status > 128 ? (SIGNAL_NAMES.get(status - 128) ?? null) : null;
        void runner.runc
          .cleanup()
          .catch((error: unknown) => {
            this.logger.warn({ err: error, container: spec.name }, 'cannot clean up the exited container');
            return { oomKilled: false };
          })
          .then(({ oomKilled }) => this.containerExited(runner, status, bySignal, finishedAt, oomKilled));
      };
      // 'close' follows 'exit' once the output pipes are drained.
      const drainTimer = setTimeout(finalize, OUTPUT_DRAIN_MS);
      child.once('close', finalize);
    });
  }

  /** The container runs (its process spawned; under runc, runc has started it): its state, its probes. */
  private markRunning(runner: ContainerRunner, pid: number): void {
    runner.startedAt = nowIso();
    runner.startedAtMono = monoNowMs();
    runner.status.state = { running: { startedAt: runner.startedAt, pid } };
    this.startProbes(runner);
    this.writeState();
  }

  private createFailed(runner: ContainerRunner, message: string): void {
    if (this.isTerminal() || this.stopping || runner.ephemeral) {
      // An ephemeral container is tried once, as kubelet does: it says why in its status.
      if (runner.ephemeral) runner.status.state = { waiting: { reason: 'CreateContainerError', message } };
      runner.done = true;
      this.writeState();
      this.maybeFinish();
      return;
    }
    runner.status.state = { waiting: { reason: 'CreateContainerError', message } };
    const delay = this.nextBackoff(runner, 0);
    this.logger.warn({ container: runner.spec.name, message, backoffMs: delay }, 'cannot start container');
    this.writeState();
    runner.restartTimer = setTimeout(() => {
      runner.restartTimer = undefined;
      if (!this.isTerminal() && !this.stopping) this.startContainer(runner);
    }, delay);
  }

  private nextBackoff(runner: ContainerRunner, ranMs: number): number {
    if (ranMs >= BACKOFF_RESET_AFTER_MS) runner.nextBackoffMs = BACKOFF_INITIAL_MS;
    const delay = runner.nextBackoffMs;
    runner.nextBackoffMs = Math.min(delay * 2, BACKOFF_MAX_MS);
    return delay;
  }

  private containerExited(runner: ContainerRunner, code: number | null, signal: NodeJS.Signals | null, finishedAt: string, oomKilled = false): void {
    const pid = runner.child?.pid;
    runner.child = undefined;
    runner.probes?.stop();
    clearTimeout(runner.probeKillTimer);
    updateReadiness(runner.status, runner.probes, false);
    runner.probes = undefined;
    const exitCode = exitStatus(code, signal);
    const reason =
      runner.killedBy === 'fence'
        ? 'Fenced'
        : oomKilled && exitCode !== 0
          ? 'OOMKilled'
          : exitCode === 0
            ? 'Completed'
            : runner.killedBy === 'stop' && signal === 'SIGKILL'
              ? 'Killed'
              : 'Error';
    const terminated: ContainerRunState = {
      terminated: { exitCode, ...(signal ? { signal } : {}), reason, startedAt: runner.startedAt ?? finishedAt, finishedAt },
    };
    this.logger.info({ container: runner.spec.name, pid, exitCode, signal, reason }, 'container exited');
    if (runner.done) {
      // Fencing already recorded this termination.
      this.maybeFinish();
      return;
    }
    const restart =
      !runner.ephemeral &&
      !this.stopping &&
      !this.isTerminal() &&
      // A container a probe killed restarts unless the policy is Never, whatever its exit code (kubelet).
      (this.spec.restartPolicy === 'Always' || (this.spec.restartPolicy === 'OnFailure' && (exitCode !== 0 || runner.killedBy === 'probe')));
    if (!restart) {
      runner.status.state = terminated;
      runner.done = true;
      this.writeState();
      this.maybeFinish();
      return;
    }
    const ranMs = monoNowMs() - (runner.startedAtMono ?? monoNowMs());
    const delay = this.nextBackoff(runner, ranMs);
    runner.status.lastState = terminated;
    runner.status.state = {
      waiting: {
        reason: 'CrashLoopBackOff',
        message: `back-off ${delay / 1000}s restarting failed container=${runner.spec.name} pod=${this.spec.namespace}/${this.spec.name}`,
      },
    };
    this.writeState();
    runner.restartTimer = setTimeout(() => {
      runner.restartTimer = undefined;
      if (this.isTerminal() || this.stopping) return;
      runner.status.restartCount++;
      this.startContainer(runner);
    }, delay);
  }

  /** Probes for a container that just started (none: ready and started at once). */
  private startProbes(runner: ContainerRunner): void {
    // Under runc this comes once runc has started the container (markRunning), so probes start at once.
    runner.probes = startContainerProbes(runner.spec.probes, runner.status, {
      exec: planExec((argv) => execPlan(this.dir, this.spec, runner.spec, argv, { tty: false })),
      ...(this.spec.podNetwork ? { podIp: this.spec.podNetwork.podIp } : {}),
      startedAtMs: runner.startedAtMono ?? monoNowMs(),
      running: () => runner.child !== undefined,
      writeState: () => this.writeState(),
      kill: (kind, message, graceSeconds) => this.killForProbe(runner, kind, message, graceSeconds),
    });
  }

  /** A liveness or startup probe failed for good: stop the container as a pod stop would, then restart it per policy. */
  private killForProbe(runner: ContainerRunner, kind: string, message: string, graceSeconds: number | undefined): void {
    const child = runner.child;
    if (!child || this.stopping || this.isTerminal()) return;
    const graceMs = Math.max(0, graceSeconds ?? this.spec.terminationGracePeriodSeconds) * 1000;
    this.logger.warn({ container: runner.spec.name, probe: kind, message, graceMs }, 'probe failed; killing the container');
    runner.killedBy = 'probe';
    this.signalStop(runner);
    runner.probeKillTimer = setTimeout(() => {
      if (runner.child === child) this.killRunner(runner);
    }, Math.min(graceMs, 2_147_483_647));
  }

  private maybeFinish(): void {
    if (this.finishing || this.finishReason) return;
    // Ephemeral containers do not keep a pod going: finish() kills those still running.
    if (!this.runners.every((r) => r.ephemeral || (r.done && !r.child))) return;
    this.finish(this.fencedAt ? 'Fenced' : this.stopping ? 'Stopped' : 'Completed');
  }

  private finish(reason: PodFinishReason): void {
    this.finishing = true;
    clearTimeout(this.graceTimer);
    for (const runner of this.runners) {
      clearTimeout(runner.restartTimer);
      runner.probes?.stop();
      runner.stdin?.close();
      if (runner.ephemeral && runner.child) this.killRunner(runner);
    }
    this.finishReason = reason;
    this.fenceWatch?.stop();
    if (this.spec.runtime === 'runc') this.releaseSandbox();
    this.writeState();
    this.logger.info({ reason }, 'pod finished');
    this.options.onFinished(reason);
  }

  /** Nothing will run in the pod again: its namespaces, /dev/shm and cgroup go (the pod dir stays for its logs). */
  private releaseSandbox(): void {
    try {
      teardownSandbox(this.dir);
      removeCgroup(podCgroupPath(this.spec.uid));
    } catch (error) {
      this.logger.warn({ err: error }, 'cannot release the pod sandbox; the agent removes it with the pod');
    }
  }

  // --- fencing (the decision is FenceWatch's) ---

  private fence(message: string, figures: Record<string, unknown>): void {
    const at = nowIso();
    // No grace period: a frozen agent cannot be waited for, and a replacement may be starting.
    for (const runner of this.runners) {
      clearTimeout(runner.restartTimer);
      if (runner.child) {
        runner.killedBy = 'fence';
        this.killRunner(runner);
        runner.status.state = {
          terminated: {
            exitCode: 128 + (SIGNAL_NUMBERS.SIGKILL ?? 9),
            signal: 'SIGKILL',
            reason: 'Fenced',
            message,
            startedAt: runner.startedAt ?? at,
            finishedAt: at,
          },
        };
      }
      runner.done = true;
    }
    this.fencedAt = { at, message };
    this.fenceWatch?.stop();
    this.logger.error({ ...figures, message }, 'fencing pod: killed every container');
    this.writeState();
    this.maybeFinish();
    // A process stuck in the kernel may never report its exit; the pod is fenced regardless.
    setTimeout(() => {
      if (!this.finishReason) this.finish('Fenced');
    }, FENCE_FINISH_CEILING_MS).unref();
  }
}
