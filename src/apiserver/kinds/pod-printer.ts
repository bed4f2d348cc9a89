import { getPath, getString, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, humanDuration, NAME_COLUMN, type Printer } from '../table.js';

/**
 * kubectl's pod printer: READY, STATUS, RESTARTS and the wide columns, following kubectl's own
 * (kubernetes pkg/printers/internalversion printPod, 1.32), so `kubectl get pods` reads the same
 * as against kube-apiserver.
 */

/** kube-controller-manager's reason for pods on a lost node (kubectl shows them as Unknown). */
const NODE_LOST_REASON = 'NodeLost';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

interface ContainerState {
  waiting?: { reason?: string };
  running?: object;
  terminated?: { reason?: string; exitCode?: number; signal?: number; finishedAt?: string };
}

interface ContainerStatus {
  name?: string;
  ready?: boolean;
  started?: boolean;
  restartCount?: number;
  state?: ContainerState;
  lastState?: ContainerState;
}

function statuses(pod: KubeObject, field: string): ContainerStatus[] {
  const list = getPath(pod, ['status', field]);
  return Array.isArray(list) ? (list.filter(isObject) as ContainerStatus[]) : [];
}

function finishedAt(status: ContainerStatus): number | undefined {
  const at = status.lastState?.terminated?.finishedAt;
  if (typeof at !== 'string') return undefined;
  const ms = Date.parse(at);
  return Number.isNaN(ms) ? undefined : ms;
}

function hasCondition(pod: KubeObject, type: string, status?: string, reason?: string): boolean {
  const conditions = getPath(pod, ['status', 'conditions']);
  if (!Array.isArray(conditions)) return false;
  return conditions.some(
    (c) =>
      isObject(c) &&
      c.type === type &&
      (status === undefined || c.status === status) &&
      (reason === undefined || c.reason === reason),
  );
}

export interface PodSummary {
  ready: string;
  status: string;
  restarts: string;
}

/** READY, STATUS and RESTARTS as kubectl 1.32 prints them. */
export function podSummary(pod: KubeObject, now: number = Date.now()): PodSummary {
  const containers = getPath(pod, ['spec', 'containers']);
  const initContainers = getPath(pod, ['spec', 'initContainers']);
  const initList = Array.isArray(initContainers) ? initContainers.filter(isObject) : [];
  const restartableInit = new Set(
    initList.filter((c) => c.restartPolicy === 'Always').map((c) => String(c.name)),
  );
  const totalContainers = (Array.isArray(containers) ? containers.length : 0) + restartableInit.size;
  let readyContainers = 0;
  let restarts = 0;
  let restartableInitRestarts = 0;
  let lastRestart = 0;
  let lastRestartableInitRestart = 0;

  const phase = getString(pod, ['status', 'phase']);
  const statusReason = getString(pod, ['status', 'reason']);
  let reason = statusReason || phase;
  if (hasCondition(pod, 'PodScheduled', undefined, 'SchedulingGated')) reason = 'SchedulingGated';

  let initializing = false;
  const initStatuses = statuses(pod, 'initContainerStatuses');
  for (let i = 0; i < initStatuses.length; i++) {
    const container = initStatuses[i]!;
    restarts += container.restartCount ?? 0;
    const finished = finishedAt(container);
    if (finished !== undefined && finished > lastRestart) lastRestart = finished;
    const restartable = restartableInit.has(String(container.name));
    if (restartable) {
      restartableInitRestarts += container.restartCount ?? 0;
      if (finished !== undefined && finished > lastRestartableInitRestart) lastRestartableInitRestart = finished;
    }
    const terminated = container.state?.terminated;
    const waiting = container.state?.waiting;
    if (terminated && (terminated.exitCode ?? 0) === 0) continue;
    if (restartable && container.started === true) {
      if (container.ready === true) readyContainers++;
      continue;
    }
    if (terminated) {
      if (!terminated.reason) {
        reason = terminated.signal ? `Init:Signal:${terminated.signal}` : `Init:ExitCode:${terminated.exitCode ?? 0}`;
      } else {
        reason = `Init:${terminated.reason}`;
      }
    } else if (waiting?.reason && waiting.reason !== 'PodInitializing') {
      reason = `Init:${waiting.reason}`;
    } else {
      reason = `Init:${i}/${initList.length}`;
    }
    initializing = true;
    break;
  }

  if (!initializing || hasCondition(pod, 'Initialized', 'True')) {
    restarts = restartableInitRestarts;
    lastRestart = lastRestartableInitRestart;
    let hasRunning = false;
    const containerStatuses = statuses(pod, 'containerStatuses');
    for (let i = containerStatuses.length - 1; i >= 0; i--) {
      const container = containerStatuses[i]!;
      restarts += container.restartCount ?? 0;
      const finished = finishedAt(container);
      if (finished !== undefined && finished > lastRestart) lastRestart = finished;
      const { waiting, terminated, running } = container.state ?? {};
      if (waiting?.reason) reason = waiting.reason;
      else if (terminated?.reason) reason = terminated.reason;
      else if (terminated) {
        reason = terminated.signal ? `Signal:${terminated.signal}` : `ExitCode:${terminated.exitCode ?? 0}`;
      } else if (container.ready === true && running) {
        hasRunning = true;
        readyContainers++;
      }
    }
    // A finished container beside a running one does not make the pod Completed.
    if (reason === 'Completed' && hasRunning) reason = hasCondition(pod, 'Ready', 'True') ? 'Running' : 'NotReady';
  }

  if (pod.metadata.deletionTimestamp && statusReason === NODE_LOST_REASON) reason = 'Unknown';
  else if (pod.metadata.deletionTimestamp && phase !== 'Succeeded' && phase !== 'Failed') reason = 'Terminating';

  const restartsText =
    restarts !== 0 && lastRestart > 0 ? `${restarts} (${humanDuration(now - lastRestart)} ago)` : String(restarts);
  return { ready: `${readyContainers}/${totalContainers}`, status: reason, restarts: restartsText };
}

export function podStatusText(pod: KubeObject, now: number = Date.now()): string {
  return podSummary(pod, now).status;
}

function readinessGates(pod: KubeObject): string {
  const gates = getPath(pod, ['spec', 'readinessGates']);
  if (!Array.isArray(gates) || gates.length === 0) return '<none>';
  let met = 0;
  for (const gate of gates) {
    if (isObject(gate) && typeof gate.conditionType === 'string' && hasCondition(pod, gate.conditionType, 'True')) met++;
  }
  return `${met}/${gates.length}`;
}

const orNone = (value: string): string => value || '<none>';

export const POD_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Ready', 'The aggregate readiness state of this pod for accepting traffic.'),
    column('Status', 'The aggregate status of the containers in this pod.'),
    column('Restarts', 'The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.'),
    AGE_COLUMN,
    column('IP', 'IP address allocated to the pod.', { priority: 1 }),
    column('Node', 'Name of the Node this pod is assigned to.', { priority: 1 }),
    column('Nominated Node', 'Name of the node nominated by the scheduler.', { priority: 1 }),
    column('Readiness Gates', 'Readiness gates of the pod.', { priority: 1 }),
  ],
  cells: (pod, now) => {
    const summary = podSummary(pod, now);
    return [
      pod.metadata.name ?? '',
      summary.ready,
      summary.status,
      summary.restarts,
      ageOf(pod.metadata.creationTimestamp, now),
      orNone(getString(pod, ['status', 'podIP'])),
      orNone(getString(pod, ['spec', 'nodeName'])),
      orNone(getString(pod, ['status', 'nominatedNodeName'])),
      readinessGates(pod),
    ];
  },
};
