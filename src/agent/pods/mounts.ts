import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { type Payload, writePayload } from './atomic-writer.js';
import type { ContainerMount } from './run-spec.js';
import { isMountPoint } from './runtime/host-mounts.js';
import { type ContainerMounts, type MountLink, SUBPATHS_DIR, VOLUMES_DIR, type VolumeRuntime } from './volumes.js';

/**
 * The file-system half of volumes (volumes.ts decides, this does): a volume's directory under
 * `<pod dir>/volumes/` (a tmpfs for `emptyDir.medium: Memory`), hostPath type checks, subPaths
 * resolved without leaving their volume, each container's mounts for the run spec and, for
 * process pods, its root with the mounts as symlinks. Directories are 0700 for process pods (the
 * pod dir already is, and a secret volume must be its user's only); under runc a container may
 * run as another user, so they get the modes kubelet gives them (emptyDir 0777, others 0755), and
 * the 0700 pod dir still keeps other host users out.
 */

const DIR_MODE = 0o700;

/** The mode of a volume directory the agent makes, by kind and runtime. */
export function volumeDirMode(kind: 'emptyDir' | 'payload', runtime: VolumeRuntime): number {
  if (runtime === 'process') return DIR_MODE;
  return kind === 'emptyDir' ? 0o777 : 0o755;
}

export function volumeDir(podDir: string, volume: string): string {
  return path.join(podDir, VOLUMES_DIR, volume);
}

export class VolumeSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VolumeSetupError';
  }
}

export interface EmptyDirOptions {
  /** `Memory`: a tmpfs; anything else: a directory on the node's disk. */
  medium?: string;
  /** For a tmpfs: its size (`sizeLimit`); absent: the kernel's default (half the node's memory). */
  sizeLimitBytes?: number;
  mode: number;
}

/**
 * An emptyDir: a directory that lives as long as the pod on this node (container restarts keep
 * it). With `medium: Memory` it is a tmpfs mounted there (once: a restarted agent finds it
 * mounted), unmounted when the pod is removed (releasePodRuntime unmounts everything under the
 * pod dir). Throws VolumeSetupError.
 */
export function ensureEmptyDir(podDir: string, volume: string, options: EmptyDirOptions = { mode: DIR_MODE }): void {
  const dir = volumeDir(podDir, volume);
  // The parents first, 0700: a recursive mkdir would give them the volume's own mode.
  fs.mkdirSync(path.join(podDir, VOLUMES_DIR), { recursive: true, mode: DIR_MODE });
  fs.mkdirSync(dir, { recursive: true, mode: options.mode });
  if (options.medium !== 'Memory') {
    fs.chmodSync(dir, options.mode);
    return;
  }
  if (isMountPoint(dir)) return;
  const mountOptions = [`mode=${options.mode.toString(8)}`, ...(options.sizeLimitBytes ? [`size=${Math.ceil(options.sizeLimitBytes)}`] : [])];
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', mountOptions.join(','), 'tmpfs', dir], { encoding: 'utf8' });
  if (result.status !== 0) {
    const why = (result.stderr || result.error?.message || `mount exited with ${result.status}`).trim();
    throw new VolumeSetupError(`cannot mount a tmpfs for emptyDir medium Memory (the agent must run as root): ${why}`);
  }
}

/** A ConfigMap, Secret, downward API or projected volume's files, through the atomic writer; true when something changed. */
export function writeVolume(podDir: string, volume: string, payload: Payload, dirMode = DIR_MODE): boolean {
  fs.mkdirSync(path.join(podDir, VOLUMES_DIR), { recursive: true, mode: DIR_MODE });
  return writePayload(volumeDir(podDir, volume), payload, { dirMode });
}

export const HOST_PATH_TYPES = ['', 'DirectoryOrCreate', 'Directory', 'FileOrCreate', 'File', 'Socket', 'CharDevice', 'BlockDevice'] as const;

/**
 * A hostPath's `type` check, as kubelet makes it before mounting: the path must exist and be of
 * the type (following symlinks), or be created (`DirectoryOrCreate`: directories 0755 down to it;
 * `FileOrCreate`: an empty 0644 file, whose parent must exist). Throws VolumeSetupError in
 * kubelet's words.
 */
export function checkHostPath(hostPath: string, type: string): void {
  const stat = (): fs.Stats | undefined => {
    try {
      return fs.statSync(hostPath);
    } catch {
      return undefined;
    }
  };
  const fail = (what: string): never => {
    throw new VolumeSetupError(`hostPath type check failed: ${hostPath} is not ${what}`);
  };
  let found = stat();
  switch (type) {
    case '':
      return;
    case 'DirectoryOrCreate':
      if (!found) {
        fs.mkdirSync(hostPath, { recursive: true, mode: 0o755 });
        found = stat();
      }
      if (!found?.isDirectory()) fail('a directory');
      return;
    case 'Directory':
      if (!found?.isDirectory()) fail('a directory');
      return;
    case 'FileOrCreate':
      if (!found) {
        try {
          fs.closeSync(fs.openSync(hostPath, fs.constants.O_CREAT | fs.constants.O_WRONLY, 0o644));
        } catch (error) {
          throw new VolumeSetupError(`hostPath type check failed: cannot create file ${hostPath}: ${(error as Error).message}`);
        }
        found = stat();
      }
      if (!found?.isFile()) fail('a file');
      return;
    case 'File':
      if (!found?.isFile()) fail('a file');
      return;
    case 'Socket':
      if (!found?.isSocket()) fail('a socket file');
      return;
    case 'CharDevice':
      if (!found?.isCharacterDevice()) fail('a character device');
      return;
    case 'BlockDevice':
      if (!found?.isBlockDevice()) fail('a block device');
      return;
    default:
      throw new VolumeSetupError(`hostPath type ${JSON.stringify(type)} is not supported`);
  }
}

/**
 * `root/sub` with every symlink on the way resolved, refusing any step that leads outside
 * `root` (what a container could plant in an emptyDir to have a later mount show the host's
 * files), and each missing directory created. Returns the resolved path.
 */
export function resolveSubPath(root: string, sub: string, mode: number): string {
  const base = fs.realpathSync(root);
  const inside = (p: string): boolean => p === base || p.startsWith(`${base}/`);
  let current = base;
  for (const segment of sub.split('/').filter((s) => s && s !== '.')) {
    if (segment === '..') throw new VolumeSetupError(`subPath ${JSON.stringify(sub)} must not contain '..'`);
    const next = path.join(current, segment);
    let stat: fs.Stats | undefined;
    try {
      stat = fs.lstatSync(next);
    } catch {
      stat = undefined;
    }
    if (!stat) {
      fs.mkdirSync(next, { mode });
      fs.chmodSync(next, mode);
      current = next;
      continue;
    }
    const resolved = fs.realpathSync(next);
    if (!inside(resolved)) throw new VolumeSetupError(`subPath ${JSON.stringify(sub)} leads outside its volume (through ${next})`);
    current = resolved;
  }
  return current;
}

/** A planned mount as the run spec carries it (oci-spec.ts adds rbind, rprivate and ro/rw). */
function containerMount(link: MountLink): ContainerMount {
  const propagation = link.propagation === 'Bidirectional' ? ['rshared'] : link.propagation === 'HostToContainer' ? ['rslave'] : [];
  return { destination: link.mountPath, source: link.target, type: 'bind', readOnly: link.readOnly, ...(propagation.length ? { options: propagation } : {}) };
}

/**
 * Make each container's mounts real and say what they are: subPaths resolved and created, the
 * copies of payload subPaths made now (so they keep this version, as a subPath bind mount does
 * in Kubernetes; one that does not exist becomes an empty directory, as kubelet makes it), and
 * for process pods the container's root rebuilt with each mountPath a symlink. Returns each
 * container's ContainerMounts. Throws VolumeSetupError for a subPath that leaves its volume.
 */
export function buildContainerRoots(podDir: string, containers: readonly ContainerMounts[], runtime: VolumeRuntime = 'process'): Map<string, ContainerMount[]> {
  const mounts = new Map<string, ContainerMount[]>();
  for (const { container, root, links } of containers) {
    fs.rmSync(root, { recursive: true, force: true });
    fs.rmSync(path.join(podDir, SUBPATHS_DIR, container), { recursive: true, force: true });
    mounts.set(container, []);
    if (links.length === 0) continue;
    if (runtime === 'process') fs.mkdirSync(root, { recursive: true, mode: DIR_MODE });
    for (const planned of links) {
      const link = { ...planned };
      if (link.copyFrom !== undefined) {
        fs.mkdirSync(path.dirname(link.target), { recursive: true, mode: DIR_MODE });
        if (fs.existsSync(link.copyFrom)) fs.cpSync(link.copyFrom, link.target, { recursive: true, dereference: true });
        else fs.mkdirSync(link.target, { recursive: true, mode: DIR_MODE });
      } else if (link.subPath) {
        link.target = resolveSubPath(link.subPath.root, link.subPath.path, volumeDirMode('emptyDir', runtime));
      }
      mounts.get(container)!.push(containerMount(link));
      if (runtime !== 'process') continue;
      fs.mkdirSync(path.dirname(link.link), { recursive: true, mode: DIR_MODE });
      fs.rmSync(link.link, { recursive: true, force: true });
      fs.symlinkSync(link.target, link.link);
    }
  }
  return mounts;
}
