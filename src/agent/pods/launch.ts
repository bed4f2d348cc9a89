import fs from 'node:fs';
import path from 'node:path';
import { type SpareSupervisor, spawnSupervisor } from './supervisor-process.js';
import { SUPERVISOR_LOG_FILE, readRunSpec, readRunState, supervisorAlive } from './run-spec.js';
import { cleanupRuncPod, killRuncPod } from './runtime/runc-container.js';
import { unmountAllUnder } from './runtime/host-mounts.js';

/**
 * The agent's side of the pod runtime: start a pod's supervisor, find it again after an agent
 * restart, stop it, and reap what a killed supervisor left behind.
 */

export { podDir, writeRunSpec, readRunState } from './run-spec.js';
export type { PodRunSpec, PodRunState, ContainerRunSpec, ContainerRunState, ContainerRunStatus } from './run-spec.js';

export { SUPERVISOR_SCRIPT, SpareSupervisor } from './supervisor-process.js';

const LAUNCH_TIMEOUT_MS = 5000;
/** How often launchSupervisor looks for the supervisor's first state.json (a small file). */
const LAUNCH_POLL_MS = 10;
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

/** Waits until the supervisor `pid` wrote state.json; why not otherwise (it ended, or the deadline passed: then it is killed). */
async function awaitFirstState(dir: string, pid: number, ended: () => string | undefined, timeoutMs: number): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (readRunState(dir)?.supervisorPid === pid) return undefined;
    const exit = ended();
    if (exit !== undefined) return `it ended (${exit})`;
    if (Date.now() > deadline) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
      return `it wrote no state within ${timeoutMs} ms`;
    }
    await sleep(LAUNCH_POLL_MS);
  }
}

/**
 * Starts the pod's supervisor: hands the pod to the agent's spare when there is one (`spare`),
 * else spawns one detached. Resolves once state.json exists (or rejects after `timeoutMs`, 5 s by
 * default, with its log). Tests that launch supervisors from the TypeScript source (slow to start
 * under tsx, and slower on a loaded machine) pass a generous ceiling.
 */
export async function launchSupervisor(dir: string, timeoutMs = LAUNCH_TIMEOUT_MS, spare?: SpareSupervisor): Promise<number> {
  const absolute = path.resolve(dir);
  const existing = supervisorAlive(absolute);
  if (existing !== undefined) throw new SupervisorLaunchError(`pod ${absolute} already has a live supervisor (pid ${existing})`);
  const taken = spare?.take(absolute);
  if (taken) {
    const failed = await awaitFirstState(absolute, taken.pid, () => (taken.exited() ? 'exited' : undefined), timeoutMs);
    if (failed === undefined) return taken.pid;
    // The spare did not take the pod on (it is gone now): a supervisor of its own, as without one.
    killPodProcesses(absolute);
  }
  const child = spawnSupervisor([absolute], absolute, 'ignore');
  let exit: string | undefined;
  child.once('exit', (code, signal) => {
    exit = signal ? `signal ${signal}` : `exit code ${code}`;
  });
  child.once('error', (error) => {
    exit = error.message;
  });
  child.unref();
  const pid = child.pid;
  const failed = pid === undefined ? `it did not spawn (${exit ?? 'no pid'})` : await awaitFirstState(absolute, pid, () => exit, timeoutMs);
  if (failed === undefined) return pid!;
  throw new SupervisorLaunchError(`pod supervisor for ${absolute} did not start: ${failed}. supervisor.log:\n${supervisorLogTail(absolute)}`);
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
