import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logging/logger.js';
import { isSha256Digest } from './reference.js';
import type { ImageRecord, ImageStore } from './store.js';

/**
 * Which images pods on this node use, and image garbage collection as the kubelet does it: when
 * the filesystem holding the store is at least `image-gc-high-threshold` percent full, images
 * no pod uses are removed, least recently used first, until it is at most
 * `image-gc-low-threshold` percent full. Images younger than two minutes are spared (the
 * kubelet's minimum age): a pod may be about to use an image just pulled for it.
 *
 * "Used" is read from the pod directories (`<agent>/pods/<uid>/pod.json`, whose containers
 * carry `image.digest`), not from the pod runtime's code: the store stays below the agent.
 */

export const IMAGE_GC_MIN_AGE_MS = 2 * 60_000;
export const IMAGE_GC_INTERVAL_MS = 5 * 60_000;

export interface ImageUse {
  /** `namespace/name` of each pod whose containers use the digest. */
  pods: string[];
}

export class PodDirUnreadableError extends Error {
  override name = 'PodDirUnreadableError';
}

interface PodJson {
  namespace?: unknown;
  name?: unknown;
  containers?: unknown;
  initContainers?: unknown;
  ephemeralContainers?: unknown;
}

/**
 * Digests (what each container's image resolved to) used by the pods in `podsDir`. A pod dir
 * without pod.json is one being set up and uses nothing yet; a pod.json that cannot be read is
 * an error (PodDirUnreadableError), so no caller removes an image a pod it cannot see may use.
 */
export function imagesInUse(podsDir: string): Map<string, ImageUse> {
  const uses = new Map<string, ImageUse>();
  let names: string[];
  try {
    names = fs.readdirSync(podsDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return uses;
    throw new PodDirUnreadableError(`cannot list ${podsDir}: ${(error as Error).message}`);
  }
  for (const name of names) {
    const file = path.join(podsDir, name, 'pod.json');
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') continue;
      throw new PodDirUnreadableError(`cannot read ${file}: ${(error as Error).message}`);
    }
    let spec: PodJson;
    try {
      spec = JSON.parse(text) as PodJson;
    } catch (error) {
      throw new PodDirUnreadableError(`${file} is not valid JSON: ${(error as Error).message}`);
    }
    const pod = `${String(spec.namespace ?? '?')}/${String(spec.name ?? name)}`;
    for (const list of [spec.containers, spec.initContainers, spec.ephemeralContainers]) {
      if (!Array.isArray(list)) continue;
      for (const container of list as { image?: unknown }[]) {
        const digest = (container?.image as { digest?: unknown } | undefined)?.digest;
        if (typeof digest !== 'string' || !isSha256Digest(digest)) continue;
        const use = uses.get(digest) ?? { pods: [] };
        if (!use.pods.includes(pod)) use.pods.push(pod);
        uses.set(digest, use);
      }
    }
  }
  return uses;
}

/** The pods using an image: by the digest its name points at, or (for an index) its platform manifest. */
export async function podsUsing(store: ImageStore, record: ImageRecord, uses: Map<string, ImageUse>): Promise<string[]> {
  const direct = uses.get(record.digest)?.pods ?? [];
  if (direct.length) return direct;
  try {
    const image = await store.imageAt(record.digest, record.ref);
    return [...(uses.get(image.manifestDigest)?.pods ?? []), ...(uses.get(image.id)?.pods ?? [])];
  } catch {
    return []; // an image that no longer resolves cannot be running in a new container either
  }
}

export interface DiskUsage {
  usedPercent: number;
  capacityBytes: number;
  availableBytes: number;
}

/** Usage of the filesystem holding `dir`, as the kubelet counts it (what is not available to us is used). */
export function diskUsage(dir: string): DiskUsage {
  const stats = fs.statfsSync(dir);
  const capacityBytes = stats.blocks * stats.bsize;
  const availableBytes = stats.bavail * stats.bsize;
  return { capacityBytes, availableBytes, usedPercent: capacityBytes ? 100 - (availableBytes * 100) / capacityBytes : 0 };
}

export interface GcPolicy {
  highThresholdPercent: number;
  lowThresholdPercent: number;
  minAgeMs?: number;
}

export interface GcReport {
  /** Why nothing was removed, when nothing was. */
  skipped?: string;
  usedPercentBefore: number;
  usedPercentAfter: number;
  removed: ImageRecord[];
  freedBytes: number;
}

/** One round of image garbage collection (the agent runs one every five minutes). */
export async function collectImageGarbage(store: ImageStore, podsDir: string, policy: GcPolicy, logger?: Logger): Promise<GcReport> {
  const before = diskUsage(store.root).usedPercent;
  const report: GcReport = { usedPercentBefore: before, usedPercentAfter: before, removed: [], freedBytes: 0 };
  if (policy.highThresholdPercent >= 100) return { ...report, skipped: 'image-gc-high-threshold is 100: image garbage collection is off' };
  const uses = imagesInUse(podsDir);
  const now = Date.now();
  const unused: ImageRecord[] = [];
  for (const record of store.records()) {
    if ((await podsUsing(store, record, uses)).length) {
      // Least recently used is judged by when pods last used it, so note that they do.
      store.touch(record.ref, new Date(now));
    } else {
      unused.push(record);
    }
  }
  if (before < policy.highThresholdPercent) {
    return { ...report, skipped: `disk usage ${before.toFixed(1)}% is below image-gc-high-threshold ${policy.highThresholdPercent}%` };
  }
  const minAge = policy.minAgeMs ?? IMAGE_GC_MIN_AGE_MS;
  const candidates = unused
    .filter((r) => now - Date.parse(r.created) >= minAge)
    .sort((a, b) => Date.parse(a.lastUsed ?? a.created) - Date.parse(b.lastUsed ?? b.created));
  const keep = [...uses.keys()];
  let used = before;
  for (const record of candidates) {
    if (used <= policy.lowThresholdPercent) break;
    if (!store.removeImage(record.ref)) continue;
    const swept = await store.sweep(keep, minAge);
    report.removed.push(record);
    report.freedBytes += swept.bytes;
    used = diskUsage(store.root).usedPercent;
    logger?.info({ image: record.ref, digest: record.digest, freedBytes: swept.bytes, usedPercent: Number(used.toFixed(1)) }, 'image garbage collection removed an image no pod uses');
  }
  report.usedPercentAfter = used;
  if (used > policy.lowThresholdPercent) {
    logger?.warn(
      { usedPercent: Number(used.toFixed(1)), lowThreshold: policy.lowThresholdPercent, removed: report.removed.length, inUse: keep.length },
      'image garbage collection could not bring disk usage down to image-gc-low-threshold: the rest is used by pods, younger than two minutes, or not images',
    );
  }
  return report;
}
