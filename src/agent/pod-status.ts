import { getPath, type KubeObject } from '../apiserver/objects.js';
import type { ContainerRunState, PodRunState } from './pods/run-spec.js';

/**
 * A pod's Kubernetes status from what its supervisor reports, as a pure function: phase,
 * conditions and container statuses the way kubelet words them, so `kubectl get pods` and
 * `kubectl describe` read as they would on any cluster.
 */

interface ContainerSpecLike {
  name: string;
  image?: string;
}

function kubeState(state: ContainerRunState | undefined, notCreated?: { reason: string; message: string }): Record<string, unknown> {
  if (!state) return { waiting: notCreated ? { reason: notCreated.reason, message: notCreated.message } : { reason: 'ContainerCreating' } };
  if ('running' in state) return { running: { startedAt: state.running.startedAt } };
  if ('waiting' in state) return { waiting: { reason: state.waiting.reason, ...(state.waiting.message ? { message: state.waiting.message } : {}) } };
  const t = state.terminated;
  return {
    terminated: {
      exitCode: t.exitCode,
      reason: t.reason,
      ...(t.signal ? { signal: signalNumber(t.signal) } : {}),
      ...(t.message ? { message: t.message } : {}),
      startedAt: t.startedAt,
      finishedAt: t.finishedAt,
    },
  };
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGTERM: 15 };

function signalNumber(signal: string): number {
  return SIGNALS[signal] ?? 0;
}

function condition(type: string, ok: boolean, since: string, reason?: string): Record<string, unknown> {
  return { type, status: ok ? 'True' : 'False', lastProbeTime: null, lastTransitionTime: since, ...(reason && !ok ? { reason } : {}) };
}

export interface PodStatusInput {
  pod: KubeObject;
  state: PodRunState | undefined;
  nodeIp: string;
  /** The pod's own address on the pod network; absent: the node's (host network, no pod network). */
  podIp?: string | undefined;
  /** The time conditions changed, when the caller has no better one. */
  now: string;
  /**
   * Before the pod runs: why a container cannot be created yet, per container name (kubelet's
   * `CreateContainerConfigError` and its message); the others are `ContainerCreating`.
   */
  waiting?: Record<string, { reason: string; message: string }>;
  /** Ephemeral containers not handed to the supervisor yet: why, per name. */
  ephemeralWaiting?: Record<string, { reason: string; message: string }>;
}

/** `status.ephemeralContainerStatuses`, as kubelet reports them (never ready, never restarted). */
function ephemeralStatuses(pod: KubeObject, state: PodRunState | undefined, waiting: PodStatusInput['ephemeralWaiting']): Record<string, unknown>[] {
  const specs = (getPath(pod, ['spec', 'ephemeralContainers']) as ContainerSpecLike[] | undefined) ?? [];
  const runByName = new Map((state?.ephemeralContainers ?? []).map((c) => [c.name, c]));
  return specs.map((spec) => {
    const run = runByName.get(spec.name);
    return {
      name: spec.name,
      state: kubeState(run?.state, run ? undefined : waiting?.[spec.name]),
      lastState: {},
      ready: false,
      restartCount: 0,
      image: spec.image ?? '',
      imageID: run?.imageId ?? '',
      ...(run?.containerId && !('waiting' in run.state) ? { containerID: run.containerId } : {}),
    };
  });
}

export function podStatusFrom({ pod, state, nodeIp, podIp, now, waiting, ephemeralWaiting }: PodStatusInput): Record<string, unknown> {
  const containers = (getPath(pod, ['spec', 'containers']) as ContainerSpecLike[] | undefined) ?? [];
  const runByName = new Map((state?.containers ?? []).map((c) => [c.name, c]));
  const statuses = containers.map((spec) => {
    const run = runByName.get(spec.name);
    const running = Boolean(run && 'running' in run.state);
    return {
      name: spec.name,
      state: kubeState(run?.state, state ? undefined : waiting?.[spec.name]),
      ...(run?.lastState ? { lastState: kubeState(run.lastState) } : { lastState: {} }),
      // A supervisor with probes says whether the container is ready (readiness, startup probes);
      // an older one did not, and then a running container is ready.
      ready: (run?.ready ?? running) && running && !state?.finished,
      restartCount: run?.restartCount ?? 0,
      image: spec.image ?? '',
      imageID: run?.imageId ?? '',
      ...(run && 'running' in run.state ? { containerID: run.containerId ?? `drover://${run.state.running.pid}` } : {}),
      started: (run?.started ?? running) && running,
    };
  });
  const allRunning = statuses.length > 0 && statuses.every((s) => s.ready);
  let phase: string;
  let reason: string | undefined;
  let message: string | undefined;
  if (!state) {
    phase = 'Pending';
  } else if (state.finished) {
    const allSucceeded = (state.containers ?? []).every((c) => 'terminated' in c.state && c.state.terminated.exitCode === 0);
    phase = state.finishReason === 'Fenced' ? 'Failed' : allSucceeded ? 'Succeeded' : 'Failed';
    if (state.finishReason === 'Fenced') {
      reason = 'Fenced';
      message = state.fenced?.message ?? 'stopped by its node: no confirmed lease renewal within fencing-timeout';
    }
  } else {
    const everRan = (state.containers ?? []).some((c) => 'running' in c.state || c.restartCount > 0 || c.lastState);
    phase = everRan ? 'Running' : 'Pending';
  }
  // Before the supervisor reports, the pod's creation time: a stable value, so an unchanged
  // status is not written again on every pass.
  const since = state?.startedAt ?? pod.metadata.creationTimestamp ?? now;
  // Ready changes when a container's readiness does: the latest such change, so a Deployment's
  // minReadySeconds counts from when its pod became ready, not from when it started.
  const readySince = (state?.containers ?? []).reduce((latest, c) => (c.readyChangedAt && c.readyChangedAt > latest ? c.readyChangedAt : latest), since);
  const scheduled = getPath(pod, ['status', 'conditions']);
  const scheduledAt =
    (Array.isArray(scheduled) && (scheduled as { type?: string; lastTransitionTime?: string }[]).find((c) => c.type === 'PodScheduled')?.lastTransitionTime) ||
    since;
  return {
    phase,
    ...(reason ? { reason } : {}),
    ...(message ? { message } : {}),
    conditions: [
      condition('Initialized', true, since),
      condition('Ready', allRunning, readySince, 'ContainersNotReady'),
      condition('ContainersReady', allRunning, readySince, 'ContainersNotReady'),
      condition('PodScheduled', true, scheduledAt),
    ],
    hostIP: nodeIp,
    hostIPs: [{ ip: nodeIp }],
    podIP: podIp ?? nodeIp,
    podIPs: [{ ip: podIp ?? nodeIp }],
    ...(state ? { startTime: state.startedAt } : {}),
    containerStatuses: statuses,
    ...(Array.isArray(getPath(pod, ['spec', 'ephemeralContainers'])) ? { ephemeralContainerStatuses: ephemeralStatuses(pod, state, ephemeralWaiting) } : {}),
    qosClass: 'BestEffort',
  };
}
