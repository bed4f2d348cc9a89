import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { RUNC_BINARY } from './names.js';

/**
 * The runc command line the supervisor and the agent use besides `runc run`: kill, delete,
 * state, list. Every call is bounded; a container that does not exist is not an error for kill
 * and delete (the work is already done).
 */

const RUNC_TIMEOUT_MS = 15_000;

export interface RuncResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function runc(root: string, args: readonly string[], timeoutMs = RUNC_TIMEOUT_MS): Promise<RuncResult> {
  return new Promise((resolve) => {
    execFile(RUNC_BINARY, ['--root', root, ...args], { timeout: timeoutMs, maxBuffer: 8 * 1024 * 1024, env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' } }, (error, stdout, stderr) => {
      const code = error ? (typeof (error as { code?: unknown }).code === 'number' ? ((error as { code: number }).code) : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) + (error && code === 1 && !stderr ? error.message : '') });
    });
  });
}

/** The argv of the foreground `runc run` a supervisor spawns (kept after exit so its cgroup can be read). */
export function runcRunArgs(root: string, bundle: string, id: string): string[] {
  return ['--root', root, 'run', '--keep', '--bundle', bundle, id];
}

const gone = (r: RuncResult): boolean => /does not exist|not exist|container not running|process already finished|no such file/i.test(r.stderr);

/** Signal the container's init (or, with `all`, every process in it). */
export async function runcKill(root: string, id: string, signal: string, all = false): Promise<void> {
  const result = await runc(root, ['kill', ...(all ? ['--all'] : []), id, signal]);
  if (result.code !== 0 && !gone(result)) throw new Error(`runc kill ${id} ${signal}: ${result.stderr.trim()}`);
}

/** Remove the container (killing what is left of it). */
export async function runcDelete(root: string, id: string): Promise<void> {
  const result = await runc(root, ['delete', '--force', id]);
  if (result.code !== 0 && !gone(result)) throw new Error(`runc delete ${id}: ${result.stderr.trim()}`);
}

export interface RuncState {
  id: string;
  pid: number;
  status: 'creating' | 'created' | 'running' | 'stopped' | 'paused';
  bundle: string;
}

export async function runcState(root: string, id: string): Promise<RuncState | undefined> {
  const result = await runc(root, ['state', id]);
  if (result.code !== 0) return undefined;
  try {
    return JSON.parse(result.stdout) as RuncState;
  } catch {
    return undefined;
  }
}

/**
 * Whether runc has started the container, decided as `runc state` decides "running", from the
 * files runc keeps in `<root>/<id>/`: its state.json names the container's init, which is alive,
 * and the exec FIFO is gone (`runc create` makes it; the start opens it, which releases the init
 * into the user's process, and removes it). False for anything short of that, e.g. no state yet.
 */
export function runcStartedOnDisk(root: string, id: string): boolean {
  const dir = path.join(root, id);
  let pid: unknown;
  try {
    pid = (JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8')) as { init_process_pid?: unknown }).init_process_pid;
  } catch {
    return false;
  }
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 1 || fs.existsSync(path.join(dir, 'exec.fifo'))) return false;
  try {
    // A zombie (an init that already exited) is not running.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** The containers runc knows under `root`. */
export async function runcList(root: string): Promise<RuncState[]> {
  const result = await runc(root, ['list', '--format', 'json']);
  if (result.code !== 0) return [];
  try {
    return (JSON.parse(result.stdout || 'null') as RuncState[] | null) ?? [];
  } catch {
    return [];
  }
}
