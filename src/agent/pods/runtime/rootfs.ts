import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { isMountPoint, MountError, run, unmount } from './host-mounts.js';

/**
 * A container's root file system: an overlay of its image's unpacked layers (read-only, shared by
 * every container of the image) under a writable layer of its own (`upper`, with overlay's `work`
 * beside it), mounted at the bundle's `rootfs/`. Each start gets a fresh writable layer, as a
 * restarted Kubernetes container does. Where overlay cannot be mounted the layers are copied
 * into `rootfs/` instead, in order, honouring their whiteouts; the fallback is logged.
 */

/** Overlay's options must fit one page; past this, lower dirs are given relative to their common parent. */
const MAX_OPTIONS = 3800;

export interface RootfsPaths {
  /** the bundle's `rootfs/` */
  rootfs: string;
  upper: string;
  work: string;
  /** an empty directory: the lower layer of an image with none */
  empty: string;
}

export function rootfsPaths(containerDir: string, bundle: string): RootfsPaths {
  return { rootfs: path.join(bundle, 'rootfs'), upper: path.join(containerDir, 'upper'), work: path.join(containerDir, 'work'), empty: path.join(containerDir, 'empty') };
}

function commonParent(dirs: readonly string[]): string {
  let parent = path.dirname(dirs[0]!);
  while (!dirs.every((d) => d.startsWith(`${parent}/`)) && parent !== '/') parent = path.dirname(parent);
  return parent;
}

/** The overlay mount's options and the directory mount(8) runs in (relative lower dirs need it). */
export function overlayOptions(layerDirs: readonly string[], upper: string, work: string, empty: string): { options: string; cwd?: string } {
  // overlay lists the top layer first; the image lists the base first.
  const lower = layerDirs.length ? [...layerDirs].reverse() : [empty];
  const options = `lowerdir=${lower.join(':')},upperdir=${upper},workdir=${work}`;
  if (options.length <= MAX_OPTIONS) return { options };
  const cwd = commonParent(lower);
  const relative = lower.map((d) => path.relative(cwd, d));
  return { options: `lowerdir=${relative.join(':')},upperdir=${upper},workdir=${work}`, cwd };
}

export type RootfsKind = 'overlay' | 'copy';

/**
 * Mount (or copy) a fresh root file system. `forceCopy` skips overlay (tests of the fallback).
 * `warn` is told when the fallback is taken, and why.
 */
export function makeRootfs(paths: RootfsPaths, layerDirs: readonly string[], warn: (message: string, details: Record<string, unknown>) => void, forceCopy = false): RootfsKind {
  removeRootfs(paths);
  for (const dir of [paths.rootfs, paths.upper, paths.work, paths.empty]) fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  if (!forceCopy) {
    const { options, cwd } = overlayOptions(layerDirs, paths.upper, paths.work, paths.empty);
    const result = run('mount', ['-t', 'overlay', 'overlay', '-o', options, paths.rootfs], cwd);
    if (result.ok) return 'overlay';
    warn('overlay mount failed; copying the image layers instead (slower, uses disk per container)', { error: result.stderr, rootfs: paths.rootfs });
  }
  for (const layer of layerDirs) applyLayerCopy(layer, paths.rootfs);
  return 'copy';
}

/** Unmount and remove the writable layer; the image's layers are untouched. */
export function removeRootfs(paths: RootfsPaths): void {
  if (isMountPoint(paths.rootfs)) unmount(paths.rootfs);
  if (isMountPoint(paths.rootfs)) throw new MountError(`${paths.rootfs} is still mounted`);
  for (const dir of [paths.rootfs, paths.upper, paths.work]) fs.rmSync(dir, { recursive: true, force: true });
}

function isWhiteout(stat: fs.Stats): boolean {
  // overlay's whiteout: a character device 0/0.
  return stat.isCharacterDevice() && stat.rdev === 0;
}

/** The directories of a layer marked opaque (xattr trusted.overlay.opaque=y), in one getfattr run. */
function opaqueDirs(layer: string): Set<string> {
  const result = spawnSync('getfattr', ['-R', '--absolute-names', '-m', '^trusted\\.overlay\\.opaque$', '-d', layer], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const found = new Set<string>();
  let current: string | undefined;
  for (const line of (result.stdout ?? '').split('\n')) {
    if (line.startsWith('# file: ')) current = line.slice('# file: '.length);
    else if (current && /^trusted\.overlay\.opaque="y"$/.test(line.trim())) found.add(path.resolve(current));
  }
  return found;
}

/**
 * Copy one unpacked layer over `target`, as overlay would show it: first what the layer deletes
 * (whiteouts, the lower contents of opaque directories, entries whose type changes), then one
 * `cp -a` of the layer, then the whiteout markers it copied are removed.
 */
export function applyLayerCopy(layer: string, target: string): void {
  const opaque = opaqueDirs(layer);
  const whiteouts: string[] = [];
  const walk = (from: string, to: string): void => {
    for (const entry of fs.readdirSync(from)) {
      const source = path.join(from, entry);
      const dest = path.join(to, entry);
      const stat = fs.lstatSync(source);
      const existing = fs.lstatSync(dest, { throwIfNoEntry: false });
      if (isWhiteout(stat)) {
        whiteouts.push(dest);
        fs.rmSync(dest, { recursive: true, force: true });
      } else if (stat.isDirectory()) {
        if (existing && (!existing.isDirectory() || opaque.has(path.resolve(source)))) fs.rmSync(dest, { recursive: true, force: true });
        walk(source, dest);
      } else if (existing?.isDirectory()) {
        fs.rmSync(dest, { recursive: true, force: true });
      }
    }
  };
  walk(layer, target);
  const copied = run('cp', ['-a', '--no-dereference', `${layer}/.`, `${target}/`]);
  if (!copied.ok) throw new MountError(`cannot copy layer ${layer}: ${copied.stderr}`);
  for (const marker of whiteouts) fs.rmSync(marker, { force: true });
}
