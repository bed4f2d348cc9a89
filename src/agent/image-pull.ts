import type { KubeObject } from '../apiserver/objects.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Logger } from '../logging/logger.js';
import { type KeyedCredential, parseDockerConfigSecret } from '../images/registry/credentials.js';
import { PullError, Puller, type PullResult } from '../images/registry/pull.js';
import { defaultPullPolicy } from '../images/registry/reference.js';
import { type ImageRef, parseImageRef } from '../images/reference.js';
import type { Image, ImageStore } from '../images/store.js';
import type { RegistriesConfig } from '../images/registry/registries.js';
import type { PeerPullStats, PeerSource } from '../images/registry/peers.js';
import type { LookupResult } from './pods/env-resolution.js';

/**
 * Making sure a container's image is in the node's store before the agent builds its run spec,
 * the way kubelet's image manager does: `imagePullPolicy` Always, IfNotPresent or Never
 * (absent: Kubernetes' default, Always for `:latest` or no tag, else IfNotPresent), credentials
 * from the pod's imagePullSecrets (read from its namespace through the agent's object cache),
 * a back-off per pod and image after a failed pull (10 s doubling to 5 min), and the container's
 * waiting reasons and events in kubelet's words. A failed pull's message lists every endpoint
 * tried and what it answered.
 *
 * Pulls happen when the agent (re)creates a pod's run spec; a container restarted by its
 * supervisor runs the image already resolved (kubelet would check `Always` at every restart).
 */

export type PullPolicy = 'Always' | 'IfNotPresent' | 'Never';
export type ImageWaitingReason = 'ErrImagePull' | 'ImagePullBackOff' | 'ErrImageNeverPull' | 'InvalidImageName';

export type ImageOutcome =
  /** In the store (pulled now or before), its layers unpacked (lowest first). */
  | { kind: 'ready'; image: Image; layerDirs: string[] }
  | { kind: 'waiting'; reason: ImageWaitingReason; message: string };

export interface ContainerImageSpec {
  name?: unknown;
  image?: unknown;
  imagePullPolicy?: unknown;
}

export interface ImagePullerOptions {
  store: ImageStore;
  registries: RegistriesConfig;
  /** A Secret in the pod's namespace, as the agent's object cache has it. */
  lookupSecret: (namespace: string, name: string) => LookupResult;
  events: EventRecorder;
  logger: Logger;
  /** Monotonic milliseconds (tests move it). */
  now?: () => number;
  /** How long a pull waits for the agent to have read the pod's pull secrets (default 10 s). */
  secretWaitMs?: number;
  /** Embedded-registry peers, tried first for the registries listed under `mirrors` (docs/registry.md). */
  peers?: { source: PeerSource; stats?: PeerPullStats };
}

/** kubelet's image back-off: 10 s, doubling, at most 5 min. */
export const PULL_BACKOFF_INITIAL_MS = 10_000;
export const PULL_BACKOFF_MAX_MS = 300_000;

interface BackOff {
  /** When the next pull may start. */
  untilMs: number;
  periodMs: number;
  /** The last pull's failure, quoted in ImagePullBackOff's message. */
  message: string;
}

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

export function pullPolicyOf(container: ContainerImageSpec): PullPolicy {
  const policy = container.imagePullPolicy;
  if (policy === 'Always' || policy === 'IfNotPresent' || policy === 'Never') return policy;
  return defaultPullPolicy(typeof container.image === 'string' ? container.image : '');
}

const SECRET_WAIT_MS = 10_000;
const SECRET_POLL_MS = 100;

export class ImagePuller {
  private readonly puller: Puller;
  private readonly now: () => number;
  /** `<pod uid>/<image>` → back-off after a failed pull. */
  private readonly backOff = new Map<string, BackOff>();
  /** Events recorded once per pod uid (`reason/message`). */
  private readonly announced = new Map<string, Set<string>>();

  constructor(private readonly options: ImagePullerOptions) {
    this.puller = new Puller(options.store, options.registries, options.peers);
    this.now = options.now ?? (() => performance.now());
  }

  close(): void {
    this.puller.close();
  }

  /** Drops what is kept about a pod that is gone from this node. */
  forget(uid: string): void {
    this.announced.delete(uid);
    for (const key of [...this.backOff.keys()]) if (key.startsWith(`${uid}/`)) this.backOff.delete(key);
  }

  private event(pod: KubeObject, type: 'Normal' | 'Warning', reason: string, message: string, once = false): void {
    const uid = pod.metadata.uid ?? '';
    if (once) {
      const seen = this.announced.get(uid) ?? new Set<string>();
      this.announced.set(uid, seen);
      if (seen.has(`${reason}/${message}`)) return;
      seen.add(`${reason}/${message}`);
    }
    const involved = { kind: 'Pod', name: pod.metadata.name ?? '', namespace: pod.metadata.namespace ?? 'default', uid };
    void this.options.events.record(involved, type, reason, message);
  }

  /** The image when the store has all of it, else undefined. */
  private async present(ref: string): Promise<Image | undefined> {
    try {
      return await this.options.store.resolve(ref);
    } catch {
      return undefined;
    }
  }

  /** The image with its layers unpacked; a layer that cannot be unpacked fails the pull. */
  private async ready(image: Image, shown: string): Promise<ImageOutcome> {
    try {
      return { kind: 'ready', image, layerDirs: await this.options.store.layerDirs(image) };
    } catch (error) {
      return { kind: 'waiting', reason: 'ErrImagePull', message: `failed to unpack image "${shown}": ${(error as Error).message}` };
    }
  }

  /**
   * The credentials of the pod's imagePullSecrets, once the agent has read them (it starts
   * watching a pod's secrets when the pod arrives). A secret that is missing, unreadable or holds
   * no docker config is reported once and skipped, as kubelet does.
   */
  private async secretsOf(pod: KubeObject): Promise<KeyedCredential[]> {
    // Real time: this waits for a watch to list, not for a back-off.
    const deadline = Date.now() + (this.options.secretWaitMs ?? SECRET_WAIT_MS);
    for (;;) {
      const credentials = this.readSecrets(pod, Date.now() >= deadline);
      if (credentials) return credentials;
      await new Promise((resolve) => setTimeout(resolve, SECRET_POLL_MS));
    }
  }

  /** undefined while a secret is still being read, unless `final` (then it counts as missing). */
  private readSecrets(pod: KubeObject, final: boolean): KeyedCredential[] | undefined {
    const namespace = pod.metadata.namespace ?? 'default';
    const spec = isObject(pod.spec) ? pod.spec : {};
    const names = (Array.isArray(spec.imagePullSecrets) ? spec.imagePullSecrets : [])
      .map((s: unknown) => (isObject(s) && typeof s.name === 'string' ? s.name : ''))
      .filter(Boolean);
    const credentials: KeyedCredential[] = [];
    const missing: string[] = [];
    for (const name of names) {
      const found = this.options.lookupSecret(namespace, name);
      if (found.state === 'unknown' && !final) return undefined;
      if (found.state !== 'present') {
        missing.push(name);
        continue;
      }
      const parsed = parseDockerConfigSecret(found.object.data as Record<string, string> | undefined, `secret ${namespace}/${name}`);
      if (parsed.kind === 'invalid') {
        this.event(pod, 'Warning', 'FailedToRetrieveImagePullSecret', `Unable to use image pull secret "${name}": ${parsed.message}`, true);
        continue;
      }
      credentials.push(...parsed.entries);
    }
    if (missing.length) {
      this.event(
        pod,
        'Warning',
        'FailedToRetrieveImagePullSecret',
        `Unable to retrieve some image pull secrets (${missing.join(', ')}); attempting to pull the image may not succeed.`,
        true,
      );
    }
    return credentials;
  }

  /**
   * Makes sure `container`'s image is in the store, pulling it when the policy says so. Resolves
   * with the image, `pending`, or the container's waiting reason and message.
   */
  async ensureImage(pod: KubeObject, container: ContainerImageSpec): Promise<ImageOutcome> {
    const image = typeof container.image === 'string' ? container.image : '';
    let parsed: ImageRef;
    try {
      parsed = parseImageRef(image);
    } catch (error) {
      const message = `Failed to apply default image tag "${image}": ${error instanceof Error ? error.message : String(error)}`;
      this.event(pod, 'Warning', 'InspectFailed', message, true);
      return { kind: 'waiting', reason: 'InvalidImageName', message };
    }
    const ref = parsed.ref;
    const policy = pullPolicyOf(container);
    const present = policy === 'Always' ? undefined : await this.present(ref);
    if (present !== undefined) {
      this.event(pod, 'Normal', 'Pulled', `Container image "${image}" already present on machine`, true);
      return this.ready(present, image);
    }
    if (policy === 'Never') {
      const message = `Container image "${image}" is not present with pull policy of Never (looked for ${ref} in this node's image store)`;
      this.event(pod, 'Warning', 'ErrImageNeverPull', message, true);
      return { kind: 'waiting', reason: 'ErrImageNeverPull', message };
    }

    const key = `${pod.metadata.uid ?? ''}/${image}`;
    const backOff = this.backOff.get(key);
    if (backOff && this.now() < backOff.untilMs) {
      this.event(pod, 'Normal', 'BackOff', `Back-off pulling image "${image}"`, true);
      return { kind: 'waiting', reason: 'ImagePullBackOff', message: `Back-off pulling image "${image}": ErrImagePull: ${backOff.message}` };
    }
    const secrets = await this.secretsOf(pod);

    this.event(pod, 'Normal', 'Pulling', `Pulling image "${image}"`);
    const started = this.now();
    let result: PullResult;
    try {
      result = await this.puller.pull({ image: parsed, secrets });
    } catch (error) {
      const why = error instanceof PullError ? `tried ${error.message}` : error instanceof Error ? error.message : String(error);
      const message = `failed to pull image "${image}": ${why}`;
      const periodMs = backOff ? Math.min(backOff.periodMs * 2, PULL_BACKOFF_MAX_MS) : PULL_BACKOFF_INITIAL_MS;
      this.backOff.set(key, { untilMs: this.now() + periodMs, periodMs, message });
      // A new back-off period: its BackOff event may be recorded again.
      this.announced.get(pod.metadata.uid ?? '')?.delete(`BackOff/Back-off pulling image "${image}"`);
      this.options.logger.warn({ pod: `${pod.metadata.namespace}/${pod.metadata.name}`, image, backOffMs: periodMs }, message);
      this.event(pod, 'Warning', 'Failed', `Failed to pull image "${image}": ${why}`);
      this.event(pod, 'Warning', 'Failed', 'Error: ErrImagePull');
      return { kind: 'waiting', reason: 'ErrImagePull', message };
    }
    this.backOff.delete(key);
    const seconds = ((this.now() - started) / 1000).toFixed(3);
    const fetched = result.fetched === 0 ? ' (image already present)' : '';
    const from = result.peer !== undefined ? `peer ${result.peer} (${result.endpoint})` : result.endpoint;
    this.event(pod, 'Normal', 'Pulled', `Successfully pulled image "${image}" in ${seconds}s from ${from}${fetched}. Image size: ${result.size} bytes.`);
    const stored = await this.present(ref);
    if (stored === undefined) {
      // Pulled, yet not resolvable (removed meanwhile, or the store refused what it was given).
      return { kind: 'waiting', reason: 'ErrImagePull', message: `failed to pull image "${image}": pulled from ${result.endpoint}, but the store cannot resolve ${ref}` };
    }
    return this.ready(stored, image);
  }
}
