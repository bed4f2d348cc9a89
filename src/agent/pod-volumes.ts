import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { KubeObject } from '../apiserver/objects.js';
import { bytesOf } from '../apiserver/quantity.js';
import type { Logger } from '../logging/logger.js';
import type { Payload } from './pods/atomic-writer.js';
import type { Lookup } from './pods/env-resolution.js';
import { buildContainerRoots, checkHostPath, ensureEmptyDir, VolumeSetupError, volumeDirMode, writeVolume } from './pods/mounts.js';
import type { ContainerMount } from './pods/run-spec.js';
import { downwardAPIPayload, type NodeAllocatable, projectedPayload, type TokenLookup } from './pods/volume-payloads.js';
import { type ContainerMounts, mountPlan, type PayloadResult, type PodVolume, podVolumes, volumePayload, volumeTarget, type VolumeRuntime } from './pods/volumes.js';

/**
 * The agent's volume manager for one node, as kubelet's: before a pod starts, every volume is
 * resolved (a payload volume's files, a Memory emptyDir's tmpfs, a hostPath's type check) and
 * only when all are there is anything written; while it runs, ConfigMap, Secret, downward API and
 * projected volumes are rewritten when what they are made of changes (an object, the pod's labels,
 * a token refreshed). A volume that cannot be set up is a `FailedMount` event in kubelet's words
 * (`MountVolume.SetUp failed for volume "x" : ...`) and the pod waits, trying again each pass.
 */

export interface VolumeContext {
  pod: KubeObject;
  dir: string;
  runtime: VolumeRuntime;
  lookup: Lookup;
  tokens: TokenLookup;
  /** Record a Warning event once per pod and message. */
  warn: (reason: string, message: string) => void;
}

export type VolumeResolution =
  | { kind: 'waiting' }
  /** Every volume resolved: `commit` writes them and returns each container's mounts, or undefined when setting one up failed (its event is recorded). */
  | { kind: 'ready'; commit: () => { mounts: Map<string, ContainerMount[]>; containers: ContainerMounts[] } | undefined }
  /** The containers' mounts cannot be laid out (kubelet would not create the container): CreateContainerConfigError. */
  | { kind: 'unplaceable'; container: string; message: string };

/** The node's resources, for a downward API limit the container does not set. */
export function nodeAllocatable(dir: string): NodeAllocatable {
  let ephemeralStorageBytes = 0;
  try {
    const stats = fs.statfsSync(fs.existsSync(dir) ? dir : path.dirname(dir));
    ephemeralStorageBytes = stats.blocks * stats.bsize;
  } catch {
    // unknown: 0
  }
  return { cpuMilli: os.cpus().length * 1000, memoryBytes: os.totalmem(), ephemeralStorageBytes };
}

function payloadDigest(payload: Payload): string {
  const hash = createHash('sha256');
  for (const name of [...payload.keys()].sort()) {
    const file = payload.get(name)!;
    hash.update(`${name}\0${file.mode}\0${file.data.length}\0`).update(file.data);
  }
  return hash.digest('hex');
}

function setUpFailed(volume: string, message: string): string {
  return `MountVolume.SetUp failed for volume "${volume}" : ${message}`;
}

/** How long the node's figures are reused: they change only when the host does. */
const NODE_FIGURES_MS = 60_000;

export class PodVolumes {
  /** pod uid → volume name → the digest of the files last written. */
  private readonly written = new Map<string, Map<string, string>>();
  private node: { figures: NodeAllocatable; atMs: number } | undefined;

  constructor(private readonly logger: Logger) {}

  forget(uid: string): void {
    this.written.delete(uid);
  }

  retainPods(uids: ReadonlySet<string>): void {
    for (const uid of [...this.written.keys()]) if (!uids.has(uid)) this.written.delete(uid);
  }

  /** The node's figures, read at most once a minute (refresh runs every pass). */
  private nodeFigures(dir: string): NodeAllocatable {
    const now = Date.now();
    if (!this.node || now - this.node.atMs > NODE_FIGURES_MS) this.node = { figures: nodeAllocatable(dir), atMs: now };
    return this.node.figures;
  }

  private payloadOf(volume: PodVolume, context: VolumeContext): PayloadResult | undefined {
    const { pod, lookup, runtime } = context;
    const namespace = pod.metadata.namespace ?? 'default';
    switch (volume.kind) {
      case 'configMap':
      case 'secret':
        return volumePayload(volume, namespace, lookup, runtime);
      case 'downwardAPI':
        return downwardAPIPayload(volume, pod, this.nodeFigures(context.dir));
      case 'projected':
        return projectedPayload(volume, { pod, lookup, tokens: context.tokens, node: this.nodeFigures(context.dir), runtime });
      default:
        return undefined;
    }
  }

  /** Before the pod starts: every volume's content, and the containers' mounts laid out. */
  resolve(context: VolumeContext): VolumeResolution {
    const { pod, dir, runtime } = context;
    const volumes = podVolumes(pod);
    const payloads = new Map<string, Payload>();
    let waiting = false;
    for (const volume of volumes) {
      const result = this.payloadOf(volume, context);
      if (!result) continue;
      if (result.kind === 'pending') waiting = true;
      else if (result.kind === 'failed') {
        context.warn('FailedMount', setUpFailed(volume.name, result.message));
        waiting = true;
      } else payloads.set(volume.name, result.payload);
    }
    if (waiting) return { kind: 'waiting' };
    this.warnUnsupported(context, volumes);
    const plan = mountPlan(pod, dir, runtime);
    if (plan.kind === 'failed') return { kind: 'unplaceable', container: plan.container, message: plan.message };
    return {
      kind: 'ready',
      commit: () => {
        const written = new Map<string, string>();
        for (const volume of volumes) {
          try {
            if (volume.kind === 'emptyDir') {
              const medium = typeof volume.source.medium === 'string' ? volume.source.medium : '';
              const sizeLimitBytes = bytesOf(volume.source.sizeLimit);
              ensureEmptyDir(dir, volume.name, { medium, mode: volumeDirMode('emptyDir', runtime), ...(sizeLimitBytes ? { sizeLimitBytes } : {}) });
            } else if (volume.kind === 'hostPath') {
              checkHostPath(volumeTarget(dir, volume), typeof volume.source.type === 'string' ? volume.source.type : '');
            }
          } catch (error) {
            if (!(error instanceof VolumeSetupError)) throw error;
            context.warn('FailedMount', setUpFailed(volume.name, error.message));
            return undefined;
          }
          const payload = payloads.get(volume.name);
          if (payload) {
            writeVolume(dir, volume.name, payload, volumeDirMode('payload', runtime));
            written.set(volume.name, payloadDigest(payload));
          }
        }
        this.written.set(pod.metadata.uid!, written);
        try {
          return { mounts: buildContainerRoots(dir, plan.containers, runtime), containers: plan.containers };
        } catch (error) {
          if (!(error instanceof VolumeSetupError)) throw error;
          context.warn('FailedMount', error.message);
          return undefined;
        }
      },
    };
  }

  /** A mount of a volume kind Drover does not provide (persistentVolumeClaim, csi, …): the pod runs without it, and says so. */
  private warnUnsupported(context: VolumeContext, volumes: readonly PodVolume[]): void {
    const unsupported = new Map(volumes.filter((v) => v.kind === 'unsupported').map((v) => [v.name, v.type]));
    if (unsupported.size === 0) return;
    const spec = (context.pod.spec ?? {}) as { containers?: { name?: unknown; volumeMounts?: { name?: unknown; mountPath?: unknown }[] }[] };
    for (const container of spec.containers ?? []) {
      for (const mount of container.volumeMounts ?? []) {
        const type = unsupported.get(String(mount.name));
        if (type === undefined) continue;
        context.warn(
          'VolumeNotMounted',
          `volume "${String(mount.name)}" is a ${type} volume, which Drover does not provide: container ${String(container.name)} sees nothing at ${String(mount.mountPath)}`,
        );
      }
    }
  }

  /**
   * A running pod: rewrite each payload volume whose files changed. A ConfigMap or Secret that is
   * gone keeps its last files (a FailedMount event says why), unless the volume is optional, when
   * it empties, as in Kubernetes.
   */
  refresh(context: VolumeContext): void {
    const { pod, dir, runtime } = context;
    const uid = pod.metadata.uid!;
    const written = this.written.get(uid) ?? new Map<string, string>();
    this.written.set(uid, written);
    for (const volume of podVolumes(pod)) {
      const result = this.payloadOf(volume, context);
      if (!result || result.kind === 'pending') continue;
      if (result.kind === 'failed') {
        context.warn('FailedMount', setUpFailed(volume.name, result.message));
        continue;
      }
      const digest = payloadDigest(result.payload);
      if (written.get(volume.name) === digest) continue;
      try {
        const changed = writeVolume(dir, volume.name, result.payload, volumeDirMode('payload', runtime));
        written.set(volume.name, digest);
        // Names only: a volume's content may be secret.
        if (changed) this.logger.info({ pod: `${pod.metadata.namespace}/${pod.metadata.name}`, volume: volume.name }, 'updated volume');
      } catch (error) {
        this.logger.warn({ err: error, pod: `${pod.metadata.namespace}/${pod.metadata.name}`, volume: volume.name }, 'cannot update volume; will retry');
      }
    }
  }
}
