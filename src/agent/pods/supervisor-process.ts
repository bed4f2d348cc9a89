import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { INHERITED_PRIORITY_ENV } from './container-process.js';
import { supervisorEnvironment } from './environment.js';
import { SPARE_SUPERVISOR_FLAG, SUPERVISOR_LOG_FILE } from './run-spec.js';

/**
 * Starting supervisor processes: the one started for a pod (`supervisor-main.js <podDir>`), and
 * the agent's spare, started before a pod needs it. A supervisor is a Node process, and Node's
 * start with the supervisor's imports is most of a pod's start on an idle node (bench/pod-start.ts:
 * ~200 ms of ~300): the spare has done it when the next pod comes, and takes that pod on at once.
 *
 * Once it has its pod, a spare is that pod's supervisor as any other: its own session, its pid
 * file, its log in the pod dir, and nothing tying it to the agent (it closes the pipe it got its
 * pod through), so it outlives the agent the same way.
 */

const runningFromSource = import.meta.url.endsWith('.ts');
/** The supervisor's entry point; under tsx (tests) the TypeScript source next to this module. */
export const SUPERVISOR_SCRIPT = fileURLToPath(new URL(runningFromSource ? './supervisor-main.ts' : './supervisor-main.js', import.meta.url));

/**
 * After a spare is taken, how long before the next one starts: at once, since on a busy host a
 * Node start takes a second or more and the next pod may come as soon (a spare still starting is
 * no worse than a supervisor started for the pod). Its lower priority (SPARE_NICE) keeps its start
 * from slowing the pods starting meanwhile.
 */
const SPARE_REFILL_MS = 0;
/** How much lower than the agent's a spare's CPU priority is while it waits (nice steps; it takes the supervisor's boost with its pod). */
const SPARE_NICE = 5;
/** After a spare ended on its own (it should not), how long before another is tried. */
const SPARE_RETRY_MS = 30_000;

/**
 * The node flags the supervisor inherits: only module loaders (tsx when running from source) and
 * source maps; never our eval script, inspector or test-runner flags. Loader specifiers are
 * resolved here, since the supervisor runs in the pod dir, not in our working dir.
 */
function supervisorExecArgv(): string[] {
  const result: string[] = [];
  const loaderFlags = new Set(['--import', '--loader', '--experimental-loader']);
  const resolveLoader = (specifier: string): string => {
    if (specifier.startsWith('.')) return pathToFileURL(path.resolve(specifier)).href;
    if (specifier.startsWith('/') || specifier.includes(':')) return specifier;
    try {
      return import.meta.resolve(specifier);
    } catch {
      return specifier;
    }
  };
  const args = process.execArgv;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const [flag, inlineValue] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (loaderFlags.has(flag)) {
      const value = inlineValue ?? args[++i];
      if (value !== undefined) result.push(`${flag}=${resolveLoader(value)}`);
    } else if (flag === '--enable-source-maps') {
      result.push(arg);
    }
  }
  return result;
}

/**
 * A supervisor process, detached (a session of its own), in `cwd`, its stdout and stderr appended
 * to `<cwd>/supervisor.log`, with the supervisor's environment (not the agent's: it may hold
 * DROVER_TOKEN). `stdin: 'pipe'` for a spare (its pod comes that way).
 */
export function spawnSupervisor(args: readonly string[], cwd: string, stdin: 'ignore' | 'pipe', env: Record<string, string> = {}): ChildProcess {
  const logFd = fs.openSync(path.join(cwd, SUPERVISOR_LOG_FILE), 'a', 0o600);
  try {
    return spawn(process.execPath, [...supervisorExecArgv(), SUPERVISOR_SCRIPT, ...args], {
      cwd,
      env: { ...supervisorEnvironment(), ...env },
      detached: true,
      stdio: [stdin, logFd, logFd],
    });
  } finally {
    fs.closeSync(logFd);
  }
}

interface Spare {
  child: ChildProcess;
  dir: string;
  exited: boolean;
}

/** A spare handed a pod: its pid, and whether it has ended since (then the pod needs a cold start). */
export interface TakenSpare {
  pid: number;
  exited: () => boolean;
}

/**
 * The agent's one spare supervisor, in `<root>/<random>/` (root: `<agent dir>/spare-supervisor`,
 * on the pods dir's file system, so its log moves into the pod dir by a rename). `take` hands it
 * a pod; another is started SPARE_REFILL_MS later. `close` retires it (so does the agent's death:
 * its stdin ends).
 */
export class SpareSupervisor {
  private spare: Spare | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = true;

  constructor(
    private readonly root: string,
    private readonly warn: (message: string, details: Record<string, unknown>) => void = () => undefined,
  ) {}

  /** Starts keeping a spare; what an earlier agent's spares left under root is removed. */
  start(delayMs = SPARE_REFILL_MS): void {
    this.closed = false;
    try {
      fs.rmSync(this.root, { recursive: true, force: true });
      fs.mkdirSync(this.root, { recursive: true, mode: 0o700 });
    } catch (error) {
      this.warn('cannot make the spare supervisors dir; every pod starts its supervisor cold', { err: error, dir: this.root });
      this.closed = true;
      return;
    }
    this.refill(delayMs);
  }

  /**
   * Hands `podDir` (its pod.json written, no supervisor.log yet) to the spare: its log file is
   * moved there and the dir written to its stdin. Undefined when there is no spare to take (none
   * started yet, it ended, or the pod dir has a log of an earlier supervisor to append to).
   */
  take(podDir: string): TakenSpare | undefined {
    const spare = this.spare;
    if (!spare) return undefined;
    const pid = spare.child.pid;
    if (spare.exited || pid === undefined || !spare.child.stdin) {
      this.spare = undefined;
      this.retire(spare);
      this.refill(SPARE_REFILL_MS);
      return undefined;
    }
    try {
      // link fails if the pod dir has a log already (a restarted pod's): that one is appended to
      // by a supervisor started for it, and the spare waits for the next pod.
      fs.linkSync(path.join(spare.dir, SUPERVISOR_LOG_FILE), path.join(podDir, SUPERVISOR_LOG_FILE));
    } catch {
      return undefined;
    }
    this.spare = undefined;
    this.refill(SPARE_REFILL_MS);
    spare.child.stdin.end(`${podDir}\n`);
    return { pid, exited: () => spare.exited };
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.spare) this.retire(this.spare);
    this.spare = undefined;
  }

  private refill(delayMs: number): void {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.startSpare(), delayMs);
    this.timer.unref();
  }

  private startSpare(): void {
    if (this.closed || this.spare) return;
    const dir = path.join(this.root, randomBytes(6).toString('hex'));
    let child: ChildProcess;
    try {
      fs.mkdirSync(dir, { mode: 0o700 });
      const agentPriority = os.getPriority();
      child = spawnSupervisor([SPARE_SUPERVISOR_FLAG, dir], dir, 'pipe', { [INHERITED_PRIORITY_ENV]: String(agentPriority) });
      // Before anything is written to its stdin: it takes the supervisor's boost only with its pod.
      if (child.pid !== undefined) {
        try {
          os.setPriority(child.pid, Math.min(19, agentPriority + SPARE_NICE));
        } catch {
          // not permitted, or gone already: it waits at the agent's priority
        }
      }
    } catch (error) {
      this.warn('cannot start a spare supervisor', { err: error });
      fs.rmSync(dir, { recursive: true, force: true });
      this.refill(SPARE_RETRY_MS);
      return;
    }
    const spare: Spare = { child, dir, exited: false };
    // The spare may be gone when its pod is written to it: that is seen by its exit, not as an error here.
    child.stdin?.on('error', () => undefined);
    child.once('error', (error) => {
      spare.exited = true;
      this.warn('spare supervisor failed', { err: error });
    });
    child.once('exit', (code, signal) => {
      spare.exited = true;
      if (this.spare !== spare) return;
      // Ended without a pod while it was the spare: a crash at start, most likely.
      this.spare = undefined;
      fs.rmSync(dir, { recursive: true, force: true });
      this.warn('spare supervisor ended on its own', { code, signal, dir });
      this.refill(SPARE_RETRY_MS);
    });
    // Neither the process nor its pipe keeps the agent running.
    child.unref();
    (child.stdin as net.Socket | null)?.unref();
    this.spare = spare;
  }

  /** Ends a spare not handed a pod: its stdin's end retires it (SIGTERM too, should it not read). */
  private retire(spare: Spare): void {
    spare.child.stdin?.end();
    if (!spare.exited && spare.child.pid !== undefined) {
      try {
        process.kill(spare.child.pid, 'SIGTERM');
      } catch {
        // gone already
      }
    }
    fs.rmSync(spare.dir, { recursive: true, force: true });
  }
}
