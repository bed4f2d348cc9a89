import type { KubeObject } from '../apiserver/objects.js';
import type { ApiClient } from '../client/types.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Logger } from '../logging/logger.js';
import { podConfigReferences } from '../node-protocol/pod-references.js';
import { ConfigObjectCache } from './config-objects.js';
import { type Lookup, resolveContainerEnv } from './pods/env-resolution.js';
import { buildContainerRoots, ensureEmptyDir, writeVolume } from './pods/mounts.js';
import { CONTAINER_ROOT_ENV, mountPlan, type PodVolume, podVolumes, volumePayload } from './pods/volumes.js';
import type { Payload } from './pods/atomic-writer.js';

/**
 * What a pod needs from ConfigMaps and Secrets before it can start, and keeps getting while it
 * runs: the agent's side of kubelet's volume manager and environment builder for process pods.
 * `prepare` resolves every container's environment and every volume; only when all of it is
 * there does it write the volumes and container roots and hand back the environments. Until
 * then the pod waits, and its status says why in kubelet's words: a missing volume source keeps
 * the containers `ContainerCreating` with a `FailedMount` event; a missing env source makes the
 * container `CreateContainerConfigError`. `refresh` brings a running pod's ConfigMap and Secret
 * volumes up to date when their objects change (subPath copies excepted, as in Kubernetes).
 */

type Json = Record<string, unknown>;

export interface ContainerWaiting {
  reason: string;
  message: string;
}

export type Preparation =
  | { kind: 'ready'; env: Map<string, Record<string, string>> }
  /** `waiting`: per container, why it is not created (containers not named are ContainerCreating). */
  | { kind: 'waiting'; waiting: Record<string, ContainerWaiting> };

export interface PodConfigOptions {
  client: ApiClient;
  nodeIp: string;
  events: EventRecorder;
  logger: Logger;
  /** Ask the pod manager for a pass (an object appeared or changed). */
  kick: () => void;
}

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

export class PodConfigurator {
  readonly cache: ConfigObjectCache;
  /** pod uid → volume name → what its files were last made from (skip unchanged volumes). */
  private readonly written = new Map<string, Map<string, string>>();
  /** pod uid → events already recorded (each message once per pod). */
  private readonly announced = new Map<string, Set<string>>();

  constructor(private readonly options: PodConfigOptions) {
    this.cache = new ConfigObjectCache(options.client, options.kick, options.logger);
  }

  /** Keep watching exactly what the pods bound here refer to. */
  track(pods: readonly KubeObject[]): void {
    const uids = new Set<string>();
    for (const pod of pods) {
      const uid = pod.metadata.uid!;
      uids.add(uid);
      this.cache.setPodReferences(uid, podConfigReferences(pod));
    }
    this.cache.retainPods(uids);
    for (const uid of [...this.written.keys()]) if (!uids.has(uid)) this.forget(uid);
  }

  forget(uid: string): void {
    this.cache.forgetPod(uid);
    this.written.delete(uid);
    this.announced.delete(uid);
  }

  stop(): void {
    this.cache.stop();
  }

  private lookupFor(pod: KubeObject): Lookup {
    const namespace = pod.metadata.namespace ?? 'default';
    return (kind, name) => this.cache.lookup({ kind, namespace, name });
  }

  private once(pod: KubeObject, reason: string, message: string): void {
    const uid = pod.metadata.uid!;
    const seen = this.announced.get(uid) ?? new Set<string>();
    this.announced.set(uid, seen);
    if (seen.has(`${reason}/${message}`)) return;
    seen.add(`${reason}/${message}`);
    const involved = { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace ?? 'default', uid };
    void this.options.events.record(involved, 'Warning', reason, message);
  }

  /** What a configMap or secret volume's files are made from now: its spec and its object's version. */
  private sourceVersion(pod: KubeObject, volume: PodVolume): string | undefined {
    const kind = volume.kind === 'configMap' ? 'ConfigMap' : 'Secret';
    const name = volume.kind === 'configMap' ? volume.source.name : volume.source.secretName;
    const found = this.cache.lookup({ kind, namespace: pod.metadata.namespace ?? 'default', name: String(name) });
    if (found.state === 'unknown') return undefined;
    return `${JSON.stringify(volume.source)}@${found.state === 'present' ? found.object.metadata.resourceVersion : 'absent'}`;
  }

  prepare(pod: KubeObject, dir: string): Preparation {
    const namespace = pod.metadata.namespace ?? 'default';
    const lookup = this.lookupFor(pod);
    const containers = (isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers : []).filter(isObject);

    // Volumes first, as kubelet mounts them before it creates any container.
    const volumes = podVolumes(pod);
    const payloads = new Map<string, { payload: Payload; version: string }>();
    for (const volume of volumes) {
      if (volume.kind !== 'configMap' && volume.kind !== 'secret') continue;
      const version = this.sourceVersion(pod, volume);
      const result = volumePayload(volume, namespace, lookup);
      if (result.kind === 'pending' || version === undefined) return { kind: 'waiting', waiting: {} };
      if (result.kind === 'failed') {
        this.once(pod, 'FailedMount', `MountVolume.SetUp failed for volume "${volume.name}" : ${result.message}`);
        return { kind: 'waiting', waiting: {} };
      }
      payloads.set(volume.name, { payload: result.payload, version });
    }

    const env = new Map<string, Record<string, string>>();
    const waiting: Record<string, ContainerWaiting> = {};
    let pending = false;
    for (const container of containers) {
      const name = String(container.name);
      const resolved = resolveContainerEnv(container, { pod, nodeIp: this.options.nodeIp, lookup });
      if (resolved.kind === 'pending') pending = true;
      else if (resolved.kind === 'failed') {
        waiting[name] = { reason: 'CreateContainerConfigError', message: resolved.message };
        this.once(pod, 'Failed', `Error: ${resolved.message}`);
      } else {
        for (const warning of resolved.warnings) this.once(pod, warning.reason, warning.message);
        env.set(name, resolved.env);
      }
    }
    const plan = mountPlan(pod, dir);
    if (plan.kind === 'failed') {
      waiting[plan.container] = { reason: 'CreateContainerConfigError', message: plan.message };
      this.once(pod, 'Failed', `Error: ${plan.message}`);
    }
    if (pending || Object.keys(waiting).length > 0 || plan.kind === 'failed') return { kind: 'waiting', waiting };

    // Everything resolved: now the disk.
    const written = new Map<string, string>();
    for (const volume of volumes) {
      if (volume.kind === 'emptyDir') ensureEmptyDir(dir, volume.name);
      const made = payloads.get(volume.name);
      if (made) {
        writeVolume(dir, volume.name, made.payload);
        written.set(volume.name, made.version);
      }
    }
    this.written.set(pod.metadata.uid!, written);
    buildContainerRoots(dir, plan.containers);
    for (const mounts of plan.containers) {
      // Only where there is something to find under it: a container with mounts.
      if (mounts.links.length === 0) continue;
      env.set(mounts.container, { [CONTAINER_ROOT_ENV]: mounts.root, ...env.get(mounts.container) });
    }
    return { kind: 'ready', env };
  }

  /**
   * A running pod: rewrite each ConfigMap or Secret volume whose object changed. A source that is
   * gone keeps its last files (a FailedMount event says why), unless the volume is optional, when
   * it empties, as in Kubernetes.
   */
  refresh(pod: KubeObject, dir: string): void {
    const uid = pod.metadata.uid!;
    const written = this.written.get(uid) ?? new Map<string, string>();
    this.written.set(uid, written);
    const lookup = this.lookupFor(pod);
    for (const volume of podVolumes(pod)) {
      if (volume.kind !== 'configMap' && volume.kind !== 'secret') continue;
      const version = this.sourceVersion(pod, volume);
      if (version === undefined || written.get(volume.name) === version) continue;
      const result = volumePayload(volume, pod.metadata.namespace ?? 'default', lookup);
      if (result.kind === 'pending') continue;
      written.set(volume.name, version);
      if (result.kind === 'failed') {
        this.once(pod, 'FailedMount', `MountVolume.SetUp failed for volume "${volume.name}" : ${result.message}`);
        continue;
      }
      try {
        if (writeVolume(dir, volume.name, result.payload)) {
          // Names only: a volume's content may be secret.
          this.options.logger.info({ pod: `${pod.metadata.namespace}/${pod.metadata.name}`, volume: volume.name }, 'updated volume');
        }
      } catch (error) {
        written.delete(volume.name);
        this.options.logger.warn({ err: error, pod: `${pod.metadata.namespace}/${pod.metadata.name}`, volume: volume.name }, 'cannot update volume; will retry');
      }
    }
  }
}
