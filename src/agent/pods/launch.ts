import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { supervisorEnvironment } from './environment.js';
import { SUPERVISOR_LOG_FILE, readRunSpec, readRunState, supervisorAlive } from './run-spec.js';
import { cleanupRuncPod, killRuncPod } from './runtime/runc-container.js';
import { unmountAllUnder } from './runtime/host-mounts.js';

/**
 * The agent's side of the pod runtime: start a pod's supervisor, find it again after an agent
 * restart, stop it, and reap what a killed supervisor left behind.
 */

export { podDir, writeRunSpec, readRunState } from './run-spec.js';
export type { PodRunSpec, PodRunState, ContainerRunSpec, ContainerRunState, ContainerRunStatus } from './run-spec.js';

const runningFromSource = import.meta.url.endsWith('.ts');
/** The supervisor's entry point; under tsx (tests) the TypeScript source next to this module. */
export const SUPERVISOR_SCRIPT = fileURLToPath(new URL(runningFromSource ? './supervisor-main.ts' : './supervisor-main.js', import.meta.url));

const LAUNCH_TIMEOUT_MS = 5000;
const POLL_MS = 50;
/** How long past the pod's grace period to wait before killing a supervisor that does not exit. */
const STOP_MARGIN_MS = 2000;

export class SupervisorLaunchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SupervisorLaunchError';
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function supervisorLogTail(dir: string): string {
  try {
    const text = fs.readFileSync(path.join(dir, SUPERVISOR_LOG_FILE), 'utf8');
    return text.length > 4000 ? text.slice(-4000) : text;
  } catch {
    return '(no supervisor.log)';
  }
}

/** Whether a process runs: it exists and is not a zombie waiting for its parent to reap it. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers signal 0; it is not running anything.
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

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
 * Spawns the supervisor detached; resolves once state.json exists (or rejects after `timeoutMs`,
 * 5 s by default, with its log). Tests that launch supervisors from the TypeScript source (slow to
 * start under tsx, and slower on a loaded machine) pass a generous ceiling.
 */
export async function launchSupervisor(dir: string, timeoutMs = LAUNCH_TIMEOUT_MS): Promise<number> {
  const absolute = path.resolve(dir);
  const existing = supervisorAlive(absolute);
  if (existing !== undefined) throw new SupervisorLaunchError(`pod ${absolute} already has a live supervisor (pid ${existing})`);
  const logFd = fs.openSync(path.join(absolute, SUPERVISOR_LOG_FILE), 'a', 0o600);
  const execArgv = supervisorExecArgv();
  let child;
  try {
    child = spawn(process.execPath, [...execArgv, SUPERVISOR_SCRIPT, absolute], {
      cwd: absolute,
      // Not the agent's environment (it may hold DROVER_TOKEN): the pod's processes start clean.
      env: supervisorEnvironment(),
      detached: true,
      stdio: ['ignore', logFd, logFd],
    });
  } finally {
    fs.closeSync(logFd);
  }
  let exit: string | undefined;
  child.once('exit', (code, signal) => {
    exit = signal ? `signal ${signal}` : `exit code ${code}`;
  });
  child.once('error', (error) => {
    exit = error.message;
  });
  child.unref();
  const pid = child.pid;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (pid !== undefined && readRunState(absolute)?.supervisorPid === pid) return pid;
    if (exit !== undefined || Date.now() > deadline) {
      if (exit === undefined && pid !== undefined) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      const why = exit ? `it ended (${exit})` : `it wrote no state within ${timeoutMs} ms`;
      throw new SupervisorLaunchError(`pod supervisor for ${absolute} did not start: ${why}. supervisor.log:\n${supervisorLogTail(absolute)}`);
    }
    await sleep(POLL_MS);
  }
}

/** The live supervisor's pid, or undefined (checks /proc/<pid>/cmdline names this pod dir, so a reused pid is not mistaken). */
export function liveSupervisor(dir: string): number | undefined {
  return supervisorAlive(dir);
}

function containerGroups(dir: string): number[] {
  const state = readRunState(dir);
  if (!state) return [];
  const pids: number[] = [];
  for (const container of state.containers) {
    if ('running' in container.state && Number.isInteger(container.state.running.pid) && container.state.running.pid > 1) {
      pids.push(container.state.running.pid);
    }
  }
  return pids;
}

/** Kill a pod's supervisor and container groups by PID at once (tests' cleanup, orphan reaping). */
export function killPodProcesses(dir: string): void {
  const supervisor = supervisorAlive(dir);
  if (supervisor !== undefined) {
    try {
      process.kill(supervisor, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  try {
    // runc containers are not in their runc process' group: kill them through their cgroups.
    const spec = readRunSpec(dir);
    if (spec.runtime === 'runc') killRuncPod({ ...spec, containers: [...spec.containers, ...(spec.ephemeralContainers ?? [])] });
  } catch {
    // no readable pod.json: nothing ran under runc from it
  }
  for (const pid of containerGroups(dir)) {
    if (pid === process.pid || pid === process.ppid) continue;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // ESRCH: the group is gone
    }
  }
}

/** SIGTERM the supervisor, resolve when it has exited (poll), SIGKILL it and the groups in state.json after graceMs + 2 s. */
export async function stopSupervisor(dir: string, graceMs: number): Promise<void> {
  const pid = supervisorAlive(dir);
  if (pid === undefined) {
    // Nobody supervises what may be left: reap it.
    killPodProcesses(dir);
    return;
  }
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    // exited meanwhile
  }
  const deadline = Date.now() + graceMs + STOP_MARGIN_MS;
  while (processAlive(pid) && supervisorAlive(dir) === pid) {
    if (Date.now() > deadline) {
      killPodProcesses(dir);
      break;
    }
    await sleep(POLL_MS);
  }
}

/** Lists pod dirs under podsDir. */
export function listPodDirs(podsDir: string): string[] {
  try {
    return fs
      .readdirSync(podsDir, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => path.join(podsDir, entry.name))
      .sort();
  } catch {
    return [];
  }
}

/**
 * What a stopped pod holds on the host besides its dir: under runc its containers, root file
 * systems, sandbox namespaces, /dev/shm and cgroups. Call before removing the pod dir (removing
 * it with mounts inside would reach into them).
 */
export async function releasePodRuntime(dir: string): Promise<void> {
  let spec;
  try {
    spec = readRunSpec(dir);
  } catch {
    spec = undefined;
  }
  if (spec?.runtime === 'runc') await cleanupRuncPod(dir, { ...spec, containers: [...spec.containers, ...(spec.ephemeralContainers ?? [])] });
  unmountAllUnder(dir);
}
