import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Host mounts the runc runtime makes under a pod dir (rootfs overlays, the pinned namespaces,
 * the pod's /dev/shm), found through /proc/self/mountinfo and made or removed with util-linux's
 * mount(8) and umount(8). Nothing here follows a path out of the dir it is given.
 */

export class MountError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MountError';
  }
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMountPath(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

export interface MountInfo {
  mountPoint: string;
  fsType: string;
}

export function mountTable(): MountInfo[] {
  let text: string;
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').flatMap((line): MountInfo[] => {
    const fields = line.split(' ');
    const dash = fields.indexOf('-');
    if (fields.length < 5 || dash < 0) return [];
    return [{ mountPoint: unescapeMountPath(fields[4]!), fsType: fields[dash + 1] ?? '' }];
  });
}

export function isMountPoint(target: string): boolean {
  const resolved = path.resolve(target);
  return mountTable().some((m) => m.mountPoint === resolved);
}

/** Mount points at or under `dir`, deepest first (the order to unmount them). */
export function mountsUnder(dir: string): string[] {
  const root = path.resolve(dir);
  const found = mountTable()
    .map((m) => m.mountPoint)
    .filter((p) => p === root || p.startsWith(`${root}/`));
  return [...new Set(found)].sort((a, b) => b.length - a.length);
}

export function run(command: string, args: readonly string[], cwd?: string): { ok: boolean; stderr: string } {
  const result = spawnSync(command, args, { encoding: 'utf8', timeout: 15_000, ...(cwd ? { cwd } : {}), env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' } });
  if (result.error) return { ok: false, stderr: result.error.message };
  return { ok: result.status === 0, stderr: (result.stderr ?? '').trim() };
}

/** Unmount `target` (every mount stacked on it); lazily when it is busy. Not mounted: nothing to do. */
export function unmount(target: string): void {
  for (let i = 0; i < 8 && isMountPoint(target); i++) {
    const result = run('umount', [target]);
    if (!result.ok && isMountPoint(target)) {
      const lazy = run('umount', ['-l', target]);
      if (!lazy.ok && isMountPoint(target)) throw new MountError(`cannot unmount ${target}: ${lazy.stderr || result.stderr}`);
    }
  }
}

/** Unmount everything at or under `dir`, deepest first. */
export function unmountAllUnder(dir: string): void {
  for (const mountPoint of mountsUnder(dir)) unmount(mountPoint);
}
