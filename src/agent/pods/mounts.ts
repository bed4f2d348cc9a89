import fs from 'node:fs';
import path from 'node:path';
import { type Payload, writePayload } from './atomic-writer.js';
import { type ContainerMounts, SUBPATHS_DIR, VOLUMES_DIR } from './volumes.js';

/**
 * The file-system half of volumes (volumes.ts decides, this writes): a volume's directory under
 * `<pod dir>/volumes/`, and each container's root with its mounts as symlinks into them. Every
 * directory is 0700: the pod dir already is, and a secret volume must be its user's only.
 */

const DIR_MODE = 0o700;

export function volumeDir(podDir: string, volume: string): string {
  return path.join(podDir, VOLUMES_DIR, volume);
}

/** An emptyDir: a directory that lives as long as the pod (container restarts keep it). */
export function ensureEmptyDir(podDir: string, volume: string): void {
  fs.mkdirSync(volumeDir(podDir, volume), { recursive: true, mode: DIR_MODE });
}

/** A ConfigMap or Secret volume's files, through the atomic writer; true when something changed. */
export function writeVolume(podDir: string, volume: string, payload: Payload): boolean {
  fs.mkdirSync(path.join(podDir, VOLUMES_DIR), { recursive: true, mode: DIR_MODE });
  return writePayload(volumeDir(podDir, volume), payload, { dirMode: DIR_MODE });
}

/**
 * Build each container's root afresh: directories down to each mountPath's parent, and the
 * mountPath itself a symlink to its volume (or subPath). A subPath of a ConfigMap or Secret
 * volume is copied now, so it keeps this version, as a subPath bind mount does in Kubernetes;
 * one that does not exist becomes an empty directory, as kubelet makes it.
 */
export function buildContainerRoots(podDir: string, containers: readonly ContainerMounts[]): void {
  for (const { container, root, links } of containers) {
    fs.rmSync(root, { recursive: true, force: true });
    fs.rmSync(path.join(podDir, SUBPATHS_DIR, container), { recursive: true, force: true });
    if (links.length === 0) continue;
    fs.mkdirSync(root, { recursive: true, mode: DIR_MODE });
    for (const link of links) {
      if (link.copyFrom !== undefined) {
        fs.mkdirSync(path.dirname(link.target), { recursive: true, mode: DIR_MODE });
        if (fs.existsSync(link.copyFrom)) fs.cpSync(link.copyFrom, link.target, { recursive: true, dereference: true });
        else fs.mkdirSync(link.target, { recursive: true, mode: DIR_MODE });
      } else if (link.createTarget) {
        fs.mkdirSync(link.target, { recursive: true, mode: DIR_MODE });
      }
      fs.mkdirSync(path.dirname(link.link), { recursive: true, mode: DIR_MODE });
      fs.rmSync(link.link, { recursive: true, force: true });
      fs.symlinkSync(link.target, link.link);
    }
  }
}
