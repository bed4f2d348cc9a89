import fs from 'node:fs';
import path from 'node:path';

/**
 * The cgroups runc makes for containers (`linux.cgroupsPath`, one directory per hierarchy on
 * cgroup v1, one in the unified tree on v2): reading a container's OOM kills, killing every
 * process in it at once (the fence), and removing the directories runc leaves (it removes only
 * the leaf; the pod's parent stays).
 */

export const CGROUP_MOUNT = '/sys/fs/cgroup';

/** cgroup v2 only (a unified hierarchy at the mount point) or v1 (hybrid included). */
export function cgroupMode(root = CGROUP_MOUNT): 'v1' | 'v2' {
  return fs.existsSync(path.join(root, 'cgroup.controllers')) ? 'v2' : 'v1';
}

/** Every directory a cgroup path has: one per mounted hierarchy (v1, and v1's unified part) or the one (v2). */
export function cgroupDirs(cgroupPath: string, root = CGROUP_MOUNT): string[] {
  const relative = cgroupPath.replace(/^\/+/, '');
  if (cgroupMode(root) === 'v2') return [path.join(root, relative)];
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(root, { withFileTypes: true });
  } catch {
    return [];
  }
  // Named hierarchies (cpu,cpuacct) appear once as a directory and again as symlinks to it.
  return entries.filter((e) => e.isDirectory()).map((e) => path.join(root, e.name, relative));
}

function readCounter(file: string, key: string): number | undefined {
  try {
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      const [name, value] = line.trim().split(/\s+/);
      if (name === key && value !== undefined) return Number(value);
    }
  } catch {
    // not there: no figure
  }
  return undefined;
}

/** How many processes the kernel's OOM killer killed in the cgroup (v1 memory.oom_control, v2 memory.events). */
export function oomKills(cgroupPath: string, root = CGROUP_MOUNT): number {
  const relative = cgroupPath.replace(/^\/+/, '');
  if (cgroupMode(root) === 'v2') return readCounter(path.join(root, relative, 'memory.events'), 'oom_kill') ?? 0;
  return readCounter(path.join(root, 'memory', relative, 'memory.oom_control'), 'oom_kill') ?? 0;
}

/** The pids in the cgroup (and below it). */
export function cgroupPids(cgroupPath: string, root = CGROUP_MOUNT): number[] {
  const pids = new Set<number>();
  const visit = (dir: string): void => {
    try {
      for (const line of fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n')) {
        const pid = Number(line);
        if (Number.isInteger(pid) && pid > 0) pids.add(pid);
      }
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) visit(path.join(dir, entry.name));
    } catch {
      // gone meanwhile
    }
  };
  // The pids (v1) or the memory (v1) hierarchy holds every process; v2 has one tree.
  const base = cgroupMode(root) === 'v2' ? path.join(root, cgroupPath.replace(/^\/+/, '')) : path.join(root, 'pids', cgroupPath.replace(/^\/+/, ''));
  visit(base);
  if (pids.size === 0 && cgroupMode(root) === 'v1') visit(path.join(root, 'memory', cgroupPath.replace(/^\/+/, '')));
  return [...pids];
}

/** SIGKILL every process in the cgroup, synchronously: the fence does not wait for runc. */
export function killCgroup(cgroupPath: string, root = CGROUP_MOUNT): number {
  let killed = 0;
  for (const pid of cgroupPids(cgroupPath, root)) {
    try {
      process.kill(pid, 'SIGKILL');
      killed++;
    } catch {
      // exited meanwhile
    }
  }
  return killed;
}

/** rmdir the cgroup's directories depth-first in every hierarchy; what still holds processes stays. */
export function removeCgroup(cgroupPath: string, root = CGROUP_MOUNT): void {
  const remove = (dir: string): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) if (entry.isDirectory()) remove(path.join(dir, entry.name));
    try {
      fs.rmdirSync(dir);
    } catch {
      // busy (a process is still in it) or gone
    }
  };
  for (const dir of cgroupDirs(cgroupPath, root)) remove(dir);
}
