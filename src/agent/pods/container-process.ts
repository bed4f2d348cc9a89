import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';

/**
 * The supervisor's dealings with a container's main process as an OS process (whether it is the
 * container's own command or a foreground `runc run`): spawning it in a process group of its own,
 * at the priority the supervisor was started with, signalling the whole group, and reading its
 * exit as a status.
 */

/** How much better than its agent's a supervisor's CPU priority is (nice steps). */
export const SUPERVISOR_PRIORITY_BOOST = 10;
/** The priority the supervisor was started with, for its containers (set by supervisor-main). */
export const INHERITED_PRIORITY_ENV = 'DROVER_SUPERVISOR_INHERITED_PRIORITY';

/** Containers run at the priority the supervisor was started with, not at its own boosted one. */
export function restorePriority(pid: number): void {
  const inherited = Number(process.env[INHERITED_PRIORITY_ENV]);
  if (!Number.isInteger(inherited) || inherited === os.getPriority()) return;
  try {
    os.setPriority(pid, inherited);
  } catch {
    // the process is gone already, or not permitted: nothing to undo
  }
}

export const SIGNAL_NUMBERS = os.constants.signals as Record<string, number>;
export const SIGNAL_NAMES = new Map(Object.entries(SIGNAL_NUMBERS).map(([name, n]) => [n, name as NodeJS.Signals]));

/** A process's exit as a shell reports it: its code, or 128 + the number of the signal that ended it. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  return code ?? 128 + (signal ? (SIGNAL_NUMBERS[signal] ?? 0) : 0);
}

/** Signal a container's whole process group (never PID 0 or 1). */
export function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (!pid || pid <= 1) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the whole group is gone already.
  }
}

/**
 * Spawn a container's main process as the leader of a new process group, stdout and stderr piped
 * (to its log), stdin piped only for `stdin: true`. A spawn that fails, at once or as its 'error'
 * event, is handed to `failed` and gives undefined.
 */
export function spawnContainerProcess(
  file: string,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; stdin: boolean },
  failed: (message: string) => void,
): ChildProcess | undefined {
  let child: ChildProcess;
  try {
    child = spawn(file, args, { cwd: options.cwd, env: options.env, detached: true, stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  } catch (error) {
    failed((error as Error).message);
    return undefined;
  }
  if (child.pid === undefined) {
    child.once('error', (error) => failed(error.message));
    return undefined;
  }
  return child;
}
