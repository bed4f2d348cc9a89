import type { KubeObject } from '../apiserver/objects.js';
import type { ApiClient } from '../client/types.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Logger } from '../logging/logger.js';
import { podConfigReferences } from '../node-protocol/pod-references.js';
import { ConfigObjectCache } from './config-objects.js';
import { nodeAllocatable, PodVolumes, type VolumeContext } from './pod-volumes.js';
import { type Lookup, resolveContainerEnv } from './pods/env-resolution.js';
import { CONTAINER_ROOT_ENV } from './pods/volumes.js';
import { ImageNotFoundError, type Image, type ImageStore } from '../images/store.js';
import { resolvedImage, runcContainerSpec } from './container-spec.js';
import { BUILT_IN_RUNTIME_CLASSES, podRuntimeClassName, resolvePodRuntime, RUNTIME_HANDLER_NAMES } from '../node-protocol/runtime-classes.js';
import { RUNTIME_CLASSES } from '../client/types.js';
import type { ContainerRunSpec, PodRuntime } from './pods/run-spec.js';
import { CommandError } from './pods/runtime/command.js';
import { ServiceAccountTokens } from './service-account-tokens.js';

/**
 * What a pod needs from ConfigMaps, Secrets, its volumes and (under runc) its images before it
 * can start, and keeps getting while it runs: the agent's side of kubelet's volume manager
 * (pod-volumes.ts) and environment builder. `prepare` resolves every container's environment and
 * every volume; only when all of it is there does it write the volumes and hand back the
 * environments (and under runc each container's run spec, with its mounts). Until then the pod
 * waits, and its status says why in kubelet's words: a volume that cannot be set up keeps the
 * containers `ContainerCreating` with a `FailedMount` event; a missing env source makes the
 * container `CreateContainerConfigError`. `refresh` brings a running pod's ConfigMap, Secret,
 * downward API and projected volumes up to date (subPath copies excepted, as in Kubernetes).
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
  /** The runtime handlers this node has (`process`, and `runc` where it works); default both. */
  runtimeHandlers?: () => readonly string[];
}

export type RuntimeResolution = { ok: true; runtime: PodRuntime } | { ok: false; reason: string; message: string };

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
  private readonly volumes: PodVolumes;
  /** Bound ServiceAccount tokens for projected volumes. */
  readonly tokens: ServiceAccountTokens;
  /** pod uid → events already recorded (each message once per pod). */
  private readonly announced = new Map<string, Set<string>>();
  /** pod uid → the runtime handler it was resolved to. */
  private readonly runtimes = new Map<string, PodRuntime>();

  constructor(private readonly options: PodConfigOptions) {
    this.cache = new ConfigObjectCache(options.client, options.kick, options.logger);
    this.volumes = new PodVolumes(options.logger);
    this.tokens = new ServiceAccountTokens(options.client, options.kick, options.logger);
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
    this.volumes.retainPods(uids);
    this.tokens.retainPods(uids);
    for (const uid of [...this.announced.keys()]) if (!uids.has(uid)) this.announced.delete(uid);
  }

  /** Whether a pod's runtime is known here (it is after prepare; an adopted pod's comes from its run spec). */
  knowsRuntime(uid: string): boolean {
    return this.runtimes.has(uid);
  }

  rememberRuntime(uid: string, runtime: PodRuntime): void {
    this.runtimes.set(uid, runtime);
  }

  forget(uid: string): void {
    this.runtimes.delete(uid);
    this.cache.forgetPod(uid);
    this.volumes.forget(uid);
    this.tokens.forgetPod(uid);
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

  private volumeContext(pod: KubeObject, dir: string, runtime: PodRuntime): VolumeContext {
    return {
      pod,
      dir,
      runtime,
      lookup: this.lookupFor(pod),
      tokens: this.tokens.lookupFor(pod),
      warn: (reason, message) => this.once(pod, reason, message),
    };
  }

  /**
   * The handler a pod runs under here: its RuntimeClass's (the API server wrote the cluster's
   * default class into pods created without one; a pod stored before classes existed runs as
   * processes), if this node has it. A built-in class is its own handler and cannot change; any
   * other is read from the API.
   */
  async resolveRuntime(pod: KubeObject): Promise<RuntimeResolution> {
    const className = podRuntimeClassName(pod);
    let stored: KubeObject | undefined;
    if (!(BUILT_IN_RUNTIME_CLASSES as readonly string[]).includes(className)) {
      try {
        stored = await this.options.client.get(RUNTIME_CLASSES, undefined, className);
      } catch (error) {
        return { ok: false, reason: 'FailedCreatePodSandBox', message: `cannot read RuntimeClass "${className}": ${(error as Error).message}` };
      }
    }
    const resolved = resolvePodRuntime(pod, stored, this.options.runtimeHandlers?.() ?? RUNTIME_HANDLER_NAMES);
    if (!resolved.ok) return { ok: false, reason: resolved.reason, message: resolved.message };
    this.runtimes.set(pod.metadata.uid!, resolved.handler);
    return { ok: true, runtime: resolved.handler };
  }

  async prepare(pod: KubeObject, dir: string): Promise<Preparation> {
    const choice = await this.resolveRuntime(pod);
    if (!choice.ok) {
      this.once(pod, choice.reason, choice.message);
      return {
        kind: 'waiting',
        waiting: Object.fromEntries(this.containerNames(pod).map((n) => [n, { reason: 'CreateContainerConfigError', message: choice.message }])),
      };
    }
    const runtime = choice.runtime;
    const lookup = this.lookupFor(pod);
    const containers = (isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers : []).filter(isObject);

    // Volumes first, as kubelet mounts them before it creates any container.
    const volumes = this.volumes.resolve(this.volumeContext(pod, dir, runtime));
    if (volumes.kind === 'waiting') return { kind: 'waiting', waiting: {} };

    const env = new Map<string, Record<string, string>>();
    const waiting: Record<string, ContainerWaiting> = {};
    let pending = false;
    for (const container of containers) {
      const name = String(container.name);
      const resolved = resolveContainerEnv(container, { pod, nodeIp: this.options.nodeIp, lookup, node: nodeAllocatable(dir) });
      if (resolved.kind === 'pending') pending = true;
      else if (resolved.kind === 'failed') {
        waiting[name] = { reason: 'CreateContainerConfigError', message: resolved.message };
        this.once(pod, 'Failed', `Error: ${resolved.message}`);
      } else {
        for (const warning of resolved.warnings) this.once(pod, warning.reason, warning.message);
        env.set(name, resolved.env);
      }
      // The process runtime makes no terminal (pods/runtime/terminal.ts): say so where kubectl describe shows it.
      if (runtime === 'process' && container.tty === true) this.once(pod, 'NoTerminal', `container ${name}: tty: true has no terminal under the process runtime; it runs with pipes (the runc runtime makes one)`);
    }
    if (volumes.kind === 'unplaceable') {
      waiting[volumes.container] = { reason: 'CreateContainerConfigError', message: volumes.message };
      this.once(pod, 'Failed', `Error: ${volumes.message}`);
    }
    if (pending || Object.keys(waiting).length > 0 || volumes.kind !== 'ready') return { kind: 'waiting', waiting };

    // runc: the images, then each container's process from its image and spec.
    const runc = new Map<string, ContainerRunSpec>();
    if (runtime === 'runc') {
      const ensure = this.options.ensureImage ?? (this.options.images ? storeOnlyImages(this.options.images) : undefined);
      if (!ensure) throw new Error('this agent has no image store: it cannot run pods under runc');
      for (const container of containers) {
        const name = String(container.name);
        const image = await ensure(pod, container);
        if (image.kind === 'waiting') {
          // The image source records kubelet's events for it (image-pull.ts).
          waiting[name] = { reason: image.reason, message: image.message };
          continue;
        }
        try {
          runc.set(name, runcContainerSpec(pod, container, resolvedImage(image.image, image.layerDirs), env.get(name) ?? {}));
        } catch (error) {
          if (!(error instanceof CommandError)) throw error;
          waiting[name] = { reason: error.reason, message: error.message };
          this.once(pod, 'Failed', `Error: ${error.message}`);
        }
      }
      if (Object.keys(waiting).length > 0) return { kind: 'waiting', waiting };
    }

    // Everything resolved: now the disk, and each container's mounts (pod-volumes.ts).
    const made = volumes.commit();
    if (!made) return { kind: 'waiting', waiting: {} };
    if (runtime === 'runc') {
      for (const [name, built] of runc) {
        const own = made.mounts.get(name) ?? [];
        if (own.length) built.mounts = own;
      }
      return { kind: 'ready', env, runtime, containers: runc };
    }
    for (const mounts of made.containers) {
      // Only where there is something to find under it: a container with mounts.
      if (mounts.links.length === 0) continue;
      env.set(mounts.container, { [CONTAINER_ROOT_ENV]: mounts.root, ...env.get(mounts.container) });
    }
    return { kind: 'ready', env, runtime };
  }

  /**
   * An ephemeral container's run spec (`kubectl debug`), for a pod already running under runc:
   * its environment and image resolved as any container's (its volume mounts: ephemeral-containers.ts).
   */
  async prepareEphemeral(pod: KubeObject, dir: string, container: Json): Promise<{ kind: 'ready'; spec: ContainerRunSpec } | { kind: 'waiting'; reason: string; message: string }> {
    const name = String(container.name);
    const resolved = resolveContainerEnv(container, { pod, nodeIp: this.options.nodeIp, lookup: this.lookupFor(pod), node: nodeAllocatable(dir) });
    if (resolved.kind === 'pending') return { kind: 'waiting', reason: 'ContainerCreating', message: `waiting for the objects the environment of ${name} refers to` };
    if (resolved.kind === 'failed') return { kind: 'waiting', reason: 'CreateContainerConfigError', message: resolved.message };
    const ensure = this.options.ensureImage ?? (this.options.images ? storeOnlyImages(this.options.images) : undefined);
    if (!ensure) return { kind: 'waiting', reason: 'CreateContainerError', message: 'this agent has no image store' };
    const image = await ensure(pod, container);
    if (image.kind === 'waiting') return image;
    try {
      return { kind: 'ready', spec: runcContainerSpec(pod, container, resolvedImage(image.image, image.layerDirs), resolved.env) };
    } catch (error) {
      if (!(error instanceof CommandError)) throw error;
      return { kind: 'waiting', reason: error.reason, message: error.message };
    }
  }

  private containerNames(pod: KubeObject): string[] {
    const containers = isObject(pod.spec) && Array.isArray(pod.spec.containers) ? pod.spec.containers : [];
    return containers.filter(isObject).map((c) => String(c.name));
  }

  /** A running pod: bring its ConfigMap, Secret, downward API and projected volumes up to date. */
  refresh(pod: KubeObject, dir: string, runtime: PodRuntime | undefined = this.runtimes.get(pod.metadata.uid!)): void {
    // A pod started by an earlier agent: its run spec says how it runs.
    if (!runtime) return;
    this.volumes.refresh(this.volumeContext(pod, dir, runtime));
  }
}
