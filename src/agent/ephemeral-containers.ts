import type { KubeObject } from '../apiserver/objects.js';
import type { EventRecorder } from '../controllers/events.js';
import type { Logger } from '../logging/logger.js';
import type { ContainerWaiting, PodConfigurator } from './pod-config.js';
import { withTerminal } from './pod-run-spec.js';
import { liveSupervisor, readRunState } from './pods/launch.js';
import { buildContainerRoots, VolumeSetupError } from './pods/mounts.js';
import { type ContainerMount, readRunSpec, writeRunSpec, type EphemeralContainerRunSpec } from './pods/run-spec.js';
import { mountPlan } from './pods/volumes.js';

/**
 * Ephemeral containers (`kubectl debug`) on the agent's side. A running pod whose spec gains one
 * gets it resolved like any container (environment, image pulled per policy) and appended to the
 * pod's run spec (pod.json); then the supervisor is sent SIGUSR2 and starts it in the pod's
 * sandbox (supervisor.ts). The supervisor is not restarted: the pod's containers keep running.
 * Its volumeMounts bind the pod's volumes, which are on the node already (the pod runs): the
 * same directories its containers see, laid out by the same plan (pods/volumes.ts).
 * Until it is handed over its status says why it waits; under the process runtime it cannot run
 * (there is no image and no namespace to join) and its status and an event say so.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

export const PROCESS_RUNTIME_MESSAGE =
  'ephemeral containers need the runc runtime: this pod runs its containers as local processes (runtime class process), which have no image or namespaces for a debug container to use';

/**
 * An ephemeral container's mounts: its volumeMounts planned and made as a container's would be
 * (payload volumes read-only, an emptyDir shared read-write), against the pod's volumes that
 * already exist in the pod dir. Admission refuses a mount of a volume the pod lacks and a subPath;
 * the plan skips the first as it does for any container, and handles the second as it does for
 * any container, should an older server have let one through.
 */
export function ephemeralContainerMounts(pod: KubeObject, dir: string, container: Json): { kind: 'ready'; mounts: ContainerMount[] } | { kind: 'failed'; message: string } {
  const name = String(container.name);
  // The plan reads spec.containers: give it this container alone.
  const alone: KubeObject = { ...pod, spec: { ...(isObject(pod.spec) ? pod.spec : {}), containers: [container], initContainers: [] } };
  const plan = mountPlan(alone, dir, 'runc');
  if (plan.kind === 'failed') return { kind: 'failed', message: plan.message };
  try {
    return { kind: 'ready', mounts: buildContainerRoots(dir, plan.containers, 'runc').get(name) ?? [] };
  } catch (error) {
    if (!(error instanceof VolumeSetupError)) throw error;
    return { kind: 'failed', message: error.message };
  }
}

/** The ephemeral containers a pod's spec holds. */
export function specEphemeralContainers(pod: KubeObject): Json[] {
  const list = isObject(pod.spec) ? pod.spec.ephemeralContainers : undefined;
  return Array.isArray(list) ? list.filter(isObject) : [];
}

export interface EphemeralContainersOptions {
  config: PodConfigurator;
  events: EventRecorder;
  logger: Logger;
}

export class EphemeralContainers {
  /** pod uid → names already in its pod.json (or refused for good). */
  private readonly handed = new Map<string, Set<string>>();
  /** pod uid → why each not-yet-handed container waits. */
  private readonly waiting = new Map<string, Record<string, ContainerWaiting>>();
  private readonly announced = new Set<string>();

  constructor(private readonly options: EphemeralContainersOptions) {}

  /** Whether the pod has an ephemeral container not yet handed to its supervisor (cheap: no file read after the first). */
  pending(pod: KubeObject, dir: string): boolean {
    const wanted = specEphemeralContainers(pod);
    if (wanted.length === 0) return false;
    const handed = this.handedFor(pod.metadata.uid!, dir);
    return wanted.some((c) => !handed.has(String(c.name)));
  }

  /** Why each ephemeral container not yet started waits (for the pod's status). */
  waitingFor(uid: string): Record<string, ContainerWaiting> | undefined {
    return this.waiting.get(uid);
  }

  forget(uid: string): void {
    this.handed.delete(uid);
    this.waiting.delete(uid);
    for (const key of [...this.announced]) if (key.startsWith(`${uid}/`)) this.announced.delete(key);
  }

  private handedFor(uid: string, dir: string): Set<string> {
    let handed = this.handed.get(uid);
    if (!handed) {
      handed = new Set<string>();
      try {
        for (const c of readRunSpec(dir).ephemeralContainers ?? []) handed.add(c.name);
      } catch {
        // no readable run spec yet: nothing handed
      }
      this.handed.set(uid, handed);
    }
    return handed;
  }

  private once(pod: KubeObject, key: string, reason: string, message: string): void {
    const full = `${pod.metadata.uid}/${key}`;
    if (this.announced.has(full)) return;
    this.announced.add(full);
    const involved = { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace ?? 'default', uid: pod.metadata.uid! };
    void this.options.events.record(involved, 'Warning', reason, message);
  }

  /** Resolve the new ephemeral containers, append the ready ones to pod.json and tell the supervisor. */
  async sync(pod: KubeObject, dir: string): Promise<void> {
    const uid = pod.metadata.uid!;
    const handed = this.handedFor(uid, dir);
    const spec = readRunSpec(dir);
    const waiting: Record<string, ContainerWaiting> = { ...this.waiting.get(uid) };
    const added: EphemeralContainerRunSpec[] = [];
    for (const container of specEphemeralContainers(pod)) {
      const name = String(container.name);
      if (handed.has(name)) continue;
      if (spec.runtime !== 'runc') {
        waiting[name] = { reason: 'CreateContainerError', message: PROCESS_RUNTIME_MESSAGE };
        this.once(pod, `process/${name}`, 'Failed', `Error: ephemeral container ${name}: ${PROCESS_RUNTIME_MESSAGE}`);
        handed.add(name);
        continue;
      }
      const prepared = await this.options.config.prepareEphemeral(pod, dir, container);
      if (prepared.kind === 'waiting') {
        waiting[name] = { reason: prepared.reason, message: prepared.message };
        continue;
      }
      const mounts = ephemeralContainerMounts(pod, dir, container);
      if (mounts.kind === 'failed') {
        // Tried once, as any ephemeral container that cannot be created.
        waiting[name] = { reason: 'CreateContainerConfigError', message: mounts.message };
        this.once(pod, `mounts/${name}`, 'Failed', `Error: ephemeral container ${name}: ${mounts.message}`);
        handed.add(name);
        continue;
      }
      const target = typeof container.targetContainerName === 'string' && container.targetContainerName ? container.targetContainerName : undefined;
      added.push({
        ...prepared.spec,
        ...(mounts.mounts.length ? { mounts: mounts.mounts } : {}),
        ...withTerminal(container),
        ...(target ? { targetContainerName: target } : {}),
      });
    }
    if (added.length > 0) {
      const pid = liveSupervisor(dir);
      const state = readRunState(dir);
      if (pid === undefined || !state || state.finished || !Array.isArray(state.ephemeralContainers)) {
        // A supervisor that is gone, finished, or too old to take SIGUSR2 cannot start them.
        const why = pid === undefined || !state || state.finished ? 'the pod is not running' : "the pod's supervisor predates ephemeral containers";
        for (const c of added) {
          waiting[c.name] = { reason: 'CreateContainerError', message: `cannot start ephemeral container ${c.name}: ${why}` };
          handed.add(c.name);
        }
      } else {
        spec.ephemeralContainers = [...(spec.ephemeralContainers ?? []), ...added];
        writeRunSpec(dir, spec);
        for (const c of added) {
          handed.add(c.name);
          delete waiting[c.name];
        }
        process.kill(pid, 'SIGUSR2');
        this.options.logger.info({ pod: `${spec.namespace}/${spec.name}`, containers: added.map((c) => c.name) }, 'ephemeral containers handed to the supervisor');
      }
    }
    this.waiting.set(uid, waiting);
  }
}
