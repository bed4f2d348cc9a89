import type { StatusCause } from './errors.js';
import { jsonEqual } from './json.js';
import { MAX_INT32 } from './limits.js';
import { getPath, getString, type KubeObject } from './objects.js';
import { AGE_COLUMN, ageOf, column, humanDuration, NAME_COLUMN, type Printer } from './table.js';

/**
 * Pods: defaults, validation, the rules of updates and graceful deletion, and the printer. The
 * printer follows kubectl's own (kubernetes pkg/printers/internalversion printPod, 1.32), so
 * `kubectl get pods` reads the same as against kube-apiserver.
 */

export const COMMAND_REQUIRED_MESSAGE =
  'Required value: Drover runs each container as a local process and does not pull images; set command (or args, which then run as the command)';

/** kube-controller-manager's reason for pods on a lost node (kubectl shows them as Unknown). */
const NODE_LOST_REASON = 'NodeLost';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// ---------------------------------------------------------------------------------------------
// Defaults and validation (shared with the pod templates of workloads)

function defaultContainers(containers: unknown): void {
  if (!Array.isArray(containers)) return;
  for (const c of containers) {
    if (!isObject(c)) continue;
    c.terminationMessagePolicy ??= 'File';
    if (typeof c.image === 'string' && c.image) c.imagePullPolicy ??= 'IfNotPresent';
  }
}

/** What kube-apiserver's defaulting fills in a PodSpec, as far as Drover acts on it. */
export function defaultPodSpec(spec: unknown): void {
  if (!isObject(spec)) return;
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.schedulerName ??= 'default-scheduler';
  defaultContainers(spec.containers);
  defaultContainers(spec.initContainers);
}

function validateContainers(list: unknown, field: string, required: boolean, causes: StatusCause[], seen: Set<string>): void {
  if (list === undefined && !required) return;
  if (!Array.isArray(list) || (required && list.length === 0)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field });
    return;
  }
  list.forEach((c, i) => {
    const at = `${field}[${i}]`;
    if (!isObject(c)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: at });
      return;
    }
    if (typeof c.name !== 'string' || !c.name) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.name` });
    } else if (seen.has(c.name)) {
      causes.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: "${c.name}"`, field: `${at}.name` });
    } else {
      seen.add(c.name);
    }
    if (c.image !== undefined && typeof c.image !== 'string') {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a string', field: `${at}.image` });
    }
    const command = c.command;
    // With no command, args run as the command: there is no image entrypoint to give them to, and
    // this is what `kubectl run NAME --image=busybox -- sh -c ...` means on a busybox image.
    const argsOnly = (command === undefined || (Array.isArray(command) && command.length === 0)) && Array.isArray(c.args) && c.args.length > 0;
    if (argsOnly) {
      // fine: checked as args below
    } else if (!Array.isArray(command) || command.length === 0) {
      causes.push({ reason: 'FieldValueRequired', message: COMMAND_REQUIRED_MESSAGE, field: `${at}.command` });
    } else if (!command.every((part) => typeof part === 'string')) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: `${at}.command` });
    }
    if (c.args !== undefined && (!Array.isArray(c.args) || !c.args.every((part) => typeof part === 'string'))) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: `${at}.args` });
    }
  });
}

/** A PodSpec's rules; `prefix` names where it sits (`spec`, `spec.template.spec`). */
export function validatePodSpec(spec: unknown, prefix: string): StatusCause[] {
  const causes: StatusCause[] = [];
  if (spec === undefined) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${prefix}.containers` });
    return causes;
  }
  if (!isObject(spec)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: prefix });
    return causes;
  }
  const seen = new Set<string>();
  validateContainers(spec.containers, `${prefix}.containers`, true, causes, seen);
  validateContainers(spec.initContainers, `${prefix}.initContainers`, false, causes, seen);
  const grace = spec.terminationGracePeriodSeconds;
  if (grace !== undefined && (!Number.isInteger(grace) || (grace as number) < 0)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'must be greater than or equal to 0',
      field: `${prefix}.terminationGracePeriodSeconds`,
    });
  } else if (typeof grace === 'number' && grace > MAX_INT32) {
    // Bounded as kube-apiserver bounds activeDeadlineSeconds: far beyond any real grace period,
    // and a deletion timestamp that far ahead would not be a valid date.
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${grace}: must be less than or equal to ${MAX_INT32}`,
      field: `${prefix}.terminationGracePeriodSeconds`,
    });
  }
  const restartPolicy = spec.restartPolicy;
  if (restartPolicy !== undefined && !['Always', 'OnFailure', 'Never'].includes(restartPolicy as string)) {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(restartPolicy)}: supported values: "Always", "OnFailure", "Never"`,
      field: `${prefix}.restartPolicy`,
    });
  }
  return causes;
}

export function validatePod(pod: KubeObject): StatusCause[] {
  return validatePodSpec(pod.spec, 'spec');
}

/**
 * What an update may not do to a pod: move it to another node once bound (the scheduler binds
 * it once), or change its spec once it is being deleted (its agent is already stopping it).
 */
export function validatePodUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const before = getString(current, ['spec', 'nodeName']);
  const after = getString(next, ['spec', 'nodeName']);
  if (before && after !== before) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(after)}: field is immutable`,
      field: 'spec.nodeName',
    });
  }
  if (current.metadata.deletionTimestamp && !jsonEqual(next.spec, current.spec)) {
    causes.push({
      reason: 'FieldValueForbidden',
      message: 'Forbidden: the pod is being deleted; only its metadata and status may change',
      field: 'spec',
    });
  }
  return causes;
}

/**
 * The grace period a pod's deletion gets, in seconds (0: remove it now), as kube-apiserver's pod
 * strategy decides: the caller's, else the pod's own; but at once when no node runs it (unbound)
 * or nothing runs any more (Succeeded, Failed).
 */
export function podDeletionGracePeriod(pod: KubeObject, requested: number | undefined): number {
  const own = getPath(pod, ['spec', 'terminationGracePeriodSeconds']);
  let period = requested ?? (typeof own === 'number' ? own : 30);
  if (!getString(pod, ['spec', 'nodeName'])) period = 0;
  const phase = getString(pod, ['status', 'phase']);
  if (phase === 'Succeeded' || phase === 'Failed') period = 0;
  // A negative grace from a client means "as soon as possible", not "never".
  if (period < 0) period = 1;
  return period;
}

// ---------------------------------------------------------------------------------------------
// The printer

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
