import type { KubeObject } from '../apiserver/objects.js';
import { isAtMostOne } from '../node-protocol/pods.js';
import { podHostname } from './container-spec.js';
import { containerProbeSpecs } from './pods/probe-spec.js';
import type { ContainerRunSpec, PodRunSpec } from './pods/run-spec.js';

/**
 * A pod as its supervisor runs it: the run spec (`pod.json`) the agent writes before it starts the
 * supervisor, made from the Pod and what the agent resolved for it (environments; under runc, each
 * container's image, mounts and security settings from pod-config.ts). Pure: no I/O.
 */

/** Kubernetes' default `terminationGracePeriodSeconds`. */
export const DEFAULT_GRACE_SECONDS = 30;

interface ContainerLike {
  name: string;
  command?: string[];
  args?: string[];
  workingDir?: string;
  image?: string;
}

/**
 * The run spec of `pod`. `env` holds each container's resolved environment (env, envFrom, the
 * downward API, its root for volumes: see pod-config.ts); HOSTNAME is the pod's name, as in a
 * Kubernetes container, and the container's own env wins over it.
 */
export function runSpecFor(
  pod: KubeObject,
  fencingFile: string,
  env: ReadonlyMap<string, Record<string, string>>,
  runc?: { runcRoot: string; containers: ReadonlyMap<string, ContainerRunSpec> },
): PodRunSpec {
  const spec = (pod.spec ?? {}) as {
    containers?: ContainerLike[];
    restartPolicy?: string;
    terminationGracePeriodSeconds?: number;
  };
  const restartPolicy = spec.restartPolicy === 'Never' || spec.restartPolicy === 'OnFailure' ? spec.restartPolicy : 'Always';
  if (runc) {
    return {
      uid: pod.metadata.uid!,
      namespace: pod.metadata.namespace ?? 'default',
      name: pod.metadata.name!,
      containers: (spec.containers ?? []).map((c) => {
        const built = runc.containers.get(c.name);
        if (!built) throw new Error(`container ${c.name} has no run spec`);
        return { ...built, ...withProbes(c), ...withTerminal(c) };
      }),
      restartPolicy,
      terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS,
      atMostOne: isAtMostOne(pod),
      fencingFile,
      runtime: 'runc',
      hostname: podHostname(pod),
      runcRoot: runc.runcRoot,
    };
  }
  return {
    uid: pod.metadata.uid!,
    namespace: pod.metadata.namespace ?? 'default',
    name: pod.metadata.name!,
    containers: (spec.containers ?? []).map((c) => ({
      ...withProbes(c),
      ...withTerminal(c),
      name: c.name,
      // No command: the args are the command line (no image entrypoint exists to receive them).
      command: c.command?.length ? c.command : (c.args ?? []),
      args: c.command?.length ? (c.args ?? []) : [],
      env: { HOSTNAME: pod.metadata.name!, ...env.get(c.name) },
      ...(c.workingDir ? { workingDir: c.workingDir } : {}),
    })),
    restartPolicy,
    terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS,
    atMostOne: isAtMostOne(pod),
    fencingFile,
  };
}

/**
 * `stdin`/`stdinOnce` of a container, kept open by its supervisor for `kubectl attach -i`, and
 * `tty`, a pseudo-terminal for its process (under runc).
 */
export function withTerminal(container: unknown): { stdin?: boolean; stdinOnce?: boolean; tty?: boolean } {
  const c = (container ?? {}) as { stdin?: unknown; stdinOnce?: unknown; tty?: unknown };
  return {
    ...(c.stdin === true ? { stdin: true, ...(c.stdinOnce === true ? { stdinOnce: true } : {}) } : {}),
    ...(c.tty === true ? { tty: true } : {}),
  };
}

function withProbes(container: unknown): { probes?: ReturnType<typeof containerProbeSpecs> } {
  const probes = containerProbeSpecs(container);
  return probes ? { probes } : {};
}
