import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { mountsUnder, unmountAllUnder } from '../pods/runtime/host-mounts.js';

const execFileAsync = promisify(execFile);

/**
 * A pod sandbox made by the agent: the network, IPC and UTS namespaces a runc pod's containers
 * share, pinned as files, and the tmpfs that is their /dev/shm, all under
 * `<data-dir>/agent/sandboxes/<id>/`. It is what a CRI runtime's pause container holds, made
 * without a process: `unshare` pins the three namespaces in one fork.
 *
 * Made ahead of any pod (the agent keeps one spare, wired to the pod network: pod-network.ts), a
 * sandbox takes namespace creation and the CNI plugins (a Go process each, 30–150 ms apiece) off
 * a pod's start. A sandbox is not named after a pod for that reason: the pod that takes it finds
 * it through its cached CNI entry and its run spec (`podNetwork.sandbox`). The hostname is set by
 * runc in each container's start (the UTS namespace is joined by path; runc sets `hostname` in it).
 */

export const SANDBOXES_DIR = 'sandboxes';
const SHM_SIZE = '64m';
const PATH_ENV = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface SandboxPaths {
  id: string;
  dir: string;
  /** `ns/`, a private bind mount of itself, holding the pins. */
  nsDir: string;
  net: string;
  ipc: string;
  uts: string;
  shm: string;
}

/** Sandbox ids: also the CNI container id, so within CNI's `[a-zA-Z0-9][a-zA-Z0-9_.-]*`. */
export function newSandboxId(): string {
  return `sandbox-${crypto.randomBytes(8).toString('hex')}`;
}

export function isSandboxId(text: string): boolean {
  return /^sandbox-[0-9a-f]{16}$/.test(text);
}

export function sandboxPaths(agentDir: string, id: string): SandboxPaths {
  if (!isSandboxId(id)) throw new Error(`not a sandbox id: ${JSON.stringify(id)}`);
  const dir = path.join(agentDir, SANDBOXES_DIR, id);
  const nsDir = path.join(dir, 'ns');
  return { id, dir, nsDir, net: path.join(nsDir, 'net'), ipc: path.join(nsDir, 'ipc'), uts: path.join(nsDir, 'uts'), shm: path.join(dir, 'shm') };
}

/** The sandbox ids present on disk (made, half-made, or taken by a pod). */
export function listSandboxIds(agentDir: string): string[] {
  try {
    return fs.readdirSync(path.join(agentDir, SANDBOXES_DIR)).filter(isSandboxId);
  } catch {
    return [];
  }
}

export class SandboxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxError';
  }
}

async function run(command: string, args: string[], what: string, niceness: number): Promise<void> {
  // Asynchronous on purpose: a spare is made while pods start, and a synchronous spawn would stall
  // the agent's event loop for the length of each fork.
  const child = execFileAsync(command, args, { timeout: 15_000, env: { PATH: PATH_ENV } });
  if (niceness && child.child.pid) {
    try {
      // A spare is made in the background: it must not take the CPU from a pod starting now.
      os.setPriority(child.child.pid, niceness);
    } catch {
      // already gone, or not allowed: it runs at the agent's priority
    }
  }
  try {
    await child;
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new SandboxError(`${what}: ${stderr || (error as Error).message}`);
  }
}

/**
 * Make the sandbox's directories, pin its namespaces and mount its /dev/shm. What a crash left of
 * an earlier attempt with the same id is removed first. `niceness`: the CPU priority of the forks.
 */
export async function makeSandbox(paths: SandboxPaths, niceness = 0): Promise<void> {
  if (mountsUnder(paths.dir).length) removeSandbox(paths);
  fs.mkdirSync(path.dirname(paths.dir), { recursive: true, mode: 0o700 });
  fs.mkdirSync(paths.nsDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(paths.shm, { recursive: true, mode: 0o1777 });
  // Pins made in a private mount do not propagate into other mount namespaces (runc's among them).
  await run('mount', ['--bind', '--make-private', paths.nsDir, paths.nsDir], `bind-mounting ${paths.nsDir} private`, niceness);
  for (const file of [paths.net, paths.ipc, paths.uts]) fs.writeFileSync(file, '', { mode: 0o600 });
  await run('unshare', [`--net=${paths.net}`, `--ipc=${paths.ipc}`, `--uts=${paths.uts}`, 'true'], 'creating the pod namespaces (network, IPC, UTS)', niceness);
  await run('mount', ['-t', 'tmpfs', '-o', `nosuid,nodev,noexec,mode=1777,size=${SHM_SIZE}`, 'shm', paths.shm], `mounting the pod /dev/shm at ${paths.shm}`, niceness);
}

/** Unpin the namespaces (they go with the last process in them), unmount /dev/shm, remove the dir. Safe to repeat. */
export function removeSandbox(paths: SandboxPaths): void {
  unmountAllUnder(paths.dir);
  fs.rmSync(paths.dir, { recursive: true, force: true });
}

/** Whether every part of the sandbox is in place (pins are nsfs, /dev/shm a tmpfs). */
export function sandboxIntact(paths: SandboxPaths, mounts: readonly { mountPoint: string; fsType: string }[]): boolean {
  const fsType = new Map(mounts.map((m) => [m.mountPoint, m.fsType]));
  return [paths.net, paths.ipc, paths.uts].every((p) => fsType.get(path.resolve(p)) === 'nsfs') && fsType.get(path.resolve(paths.shm)) === 'tmpfs';
}
