import path from 'node:path';
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
import { ImageNotFoundError, type Image, type ImageStore } from '../images/store.js';
import { podRuntime, resolvedImage, runcContainerSpec } from './container-spec.js';
import type { ContainerMount, ContainerRunSpec, PodRuntime } from './pods/run-spec.js';
import { CommandError } from './pods/runtime/command.js';

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
  | {
      kind: 'ready';
      env: Map<string, Record<string, string>>;
      runtime: PodRuntime;
      /** runc: each container's run spec, complete (command, env, image, mounts, user …). */
      containers?: Map<string, ContainerRunSpec>;
    }
  /** `waiting`: per container, why it is not created (containers not named are ContainerCreating). */
  | { kind: 'waiting'; waiting: Record<string, ContainerWaiting> };

/** An image made present on the node for a container (pulled if policy says so), or why not yet. */
export type ImageResult = { kind: 'ready'; image: Image; layerDirs: string[] } | { kind: 'waiting'; reason: string; message: string };
export type EnsureImage = (pod: KubeObject, container: Record<string, unknown>) => Promise<ImageResult>;

export interface PodConfigOptions {
  client: ApiClient;
  nodeIp: string;
  events: EventRecorder;
  logger: Logger;
  /** Ask the pod manager for a pass (an object appeared or changed). */
  kick: () => void;
  /** The node's image store (runc pods' images). */
  images?: ImageStore;
  /** Makes a container's image present; default: the store's, which does not pull. */
  ensureImage?: EnsureImage;
  /** The runtime of pods without runtimeClassName (the cluster's default-runtime-class). */
  defaultRuntimeClass?: () => string;
}

/** Until the cluster says otherwise, pods without runtimeClassName run as processes. */
export const FALLBACK_RUNTIME_CLASS = 'process';

/** Images already in the node's store only (what a node without a registry client can do). */
export function storeOnlyImages(store: ImageStore): EnsureImage {
  return async (_pod, container) => {
    const ref = String(container.image ?? '');
    try {
      const image = await store.resolve(ref);
      return { kind: 'ready', image, layerDirs: await store.layerDirs(image) };
    } catch (error) {
      if (error instanceof ImageNotFoundError && container.imagePullPolicy === 'Never') {
        return { kind: 'waiting', reason: 'ErrImageNeverPull', message: `Container image "${ref}" is not present with pull policy of Never` };
      }
      const why = error instanceof ImageNotFoundError ? `${error.message}; import it with \`drover image import\`` : (error as Error).message;
      return { kind: 'waiting', reason: 'ErrImagePull', message: `Failed to pull image "${ref}": ${why}` };
    }
  };
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

  async prepare(pod: KubeObject, dir: string): Promise<Preparation> {
    const choice = podRuntime(pod, this.options.defaultRuntimeClass?.() ?? FALLBACK_RUNTIME_CLASS);
    if (choice.kind === 'unknown') {
      const message = `RuntimeClass "${choice.name}" is not handled by this node (it runs runc and process)`;
      this.once(pod, 'FailedCreatePodSandBox', message);
      return { kind: 'waiting', waiting: Object.fromEntries(this.containerNames(pod).map((n) => [n, { reason: 'CreateContainerConfigError', message }])) };
    }
    const runtime = choice.runtime;
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

    // runc: the images, then each container's process from its image and spec.
    const runc = new Map<string, ContainerRunSpec>();
    if (runtime === 'runc') {
      const ensure = this.options.ensureImage ?? (this.options.images ? storeOnlyImages(this.options.images) : undefined);
      if (!ensure) throw new Error('this agent has no image store: it cannot run pods under runc');
      const mounts = new Map(plan.containers.map((c) => [c.container, c.links.map((link): ContainerMount => ({
        destination: link.mountPath,
        source: link.target,
        type: 'bind',
        // ConfigMap and Secret volumes are read-only in a container, as in Kubernetes.
        readOnly: volumes.find((v) => v.name === link.volume)?.kind !== 'emptyDir' || this.mountReadOnly(pod, String(c.container), link.mountPath),
      }))]));
      for (const container of containers) {
        const name = String(container.name);
        const image = await ensure(pod, container);
        if (image.kind === 'waiting') {
          // The image source records kubelet's events for it (image-pull.ts).
          waiting[name] = { reason: image.reason, message: image.message };
          continue;
        }
        try {
          const built = runcContainerSpec(pod, container, resolvedImage(image.image, image.layerDirs), env.get(name) ?? {});
          const own = mounts.get(name) ?? [];
          if (own.length) built.mounts = own;
          runc.set(name, built);
        } catch (error) {
          if (!(error instanceof CommandError)) throw error;
          waiting[name] = { reason: error.reason, message: error.message };
          this.once(pod, 'Failed', `Error: ${error.message}`);
        }
      }
      if (Object.keys(waiting).length > 0) return { kind: 'waiting', waiting };
    }

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
    if (runtime === 'runc') return { kind: 'ready', env, runtime, containers: runc };
    for (const mounts of plan.containers) {
      // Only where there is something to find under it: a container with mounts.
      if (mounts.links.length === 0) continue;
      env.set(mounts.container, { [CONTAINER_ROOT_ENV]: mounts.root, ...env.get(mounts.container) });
    }
    return { kind: 'ready', env, runtime };
  }

  private containerNames(pod: KubeObject): string[] {
    const containers = isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers : [];
    return containers.filter(isObject).map((c) => String(c.name));
  }

  /** A volumeMount's own readOnly. */
  private mountReadOnly(pod: KubeObject, container: string, mountPath: string): boolean {
    const containers = isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers.filter(isObject) : [];
    const mounts = containers.find((c) => c.name === container)?.volumeMounts;
    const found = (Array.isArray(mounts) ? mounts.filter(isObject) : []).find((m) => typeof m.mountPath === 'string' && path.posix.resolve('/', m.mountPath) === mountPath);
    return found?.readOnly === true;
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
