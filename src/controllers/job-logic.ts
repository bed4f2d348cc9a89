import type { KubeObject } from '../apiserver/objects.js';
import { isPodReady } from '../node-protocol/pods.js';
import { podStatus } from './kube-types.js';

/**
 * The Job controller's decisions, pure: which pods to create and delete, when the Job is done
 * (Complete, or Failed by backoffLimit, activeDeadlineSeconds or a podFailurePolicy rule), the
 * status and when to look again. job.ts gathers the inputs and carries out the result.
 */

export const COMPLETION_INDEX_ANNOTATION = 'batch.kubernetes.io/job-completion-index';

/** Back-off before a failed pod's replacement: BASE × 2^(failures − 1), at most MAX (simplified from kube's 10 s / 6 min). */
export const BACKOFF_BASE_MS = 2000;
export const BACKOFF_MAX_MS = 5 * 60_000;

export interface JobCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastProbeTime?: string;
  lastTransitionTime?: string;
}

interface ExitCodesRule {
  containerName?: string;
  operator: 'In' | 'NotIn';
  values: number[];
}

export interface PodFailurePolicyRule {
  action: 'FailJob' | 'Ignore' | 'Count' | 'FailIndex';
  onExitCodes?: ExitCodesRule;
  onPodConditions?: { type: string; status?: string }[];
}

export interface JobSpecView {
  parallelism?: number;
  completions?: number;
  backoffLimit?: number;
  activeDeadlineSeconds?: number;
  ttlSecondsAfterFinished?: number;
  completionMode?: string;
  suspend?: boolean;
  podFailurePolicy?: { rules?: PodFailurePolicyRule[] };
  template?: { spec?: { restartPolicy?: string } };
}

export interface JobStatus {
  active?: number;
  ready?: number;
  terminating?: number;
  succeeded?: number;
  failed?: number;
  startTime?: string;
  completionTime?: string;
  completedIndexes?: string;
  conditions?: JobCondition[];
  uncountedTerminatedPods?: Record<string, unknown>;
}

export interface JobInput {
  spec: JobSpecView;
  status: JobStatus;
  /** The pods the Job controls (terminating ones included). */
  pods: readonly KubeObject[];
  /** Wall-clock ms. */
  now: number;
}

export interface JobPlan {
  /** NonIndexed: this many new pods. */
  create: number;
  /** Indexed: these indexes get a new pod. */
  createIndexes: number[];
  delete: KubeObject[];
  status: JobStatus;
  /** Delete the Job itself (ttlSecondsAfterFinished has passed). */
  deleteJob: boolean;
  /** Look again after this long (back-off, deadline, TTL), if anything is due. */
  requeueAfterMs?: number;
}

const iso = (ms: number): string => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
const phaseOf = (pod: KubeObject): string | undefined => podStatus(pod).phase;
const isTerminating = (pod: KubeObject): boolean => Boolean(pod.metadata.deletionTimestamp);

export function conditionOf(status: JobStatus, type: string): JobCondition | undefined {
  return (status.conditions ?? []).find((c) => c.type === type);
}

const isTrue = (status: JobStatus, type: string): boolean => conditionOf(status, type)?.status === 'True';

export function jobFinished(status: JobStatus): 'Complete' | 'Failed' | undefined {
  if (isTrue(status, 'Complete')) return 'Complete';
  if (isTrue(status, 'Failed')) return 'Failed';
  return undefined;
}

/** Sets (or updates) a condition, keeping its transition time when its status does not change. */
export function withCondition(conditions: readonly JobCondition[], next: JobCondition, nowIso: string): JobCondition[] {
  const before = conditions.find((c) => c.type === next.type);
  if (before && before.status === next.status && before.reason === next.reason && before.message === next.message) return [...conditions];
  const updated: JobCondition = {
    ...next,
    lastProbeTime: nowIso,
    lastTransitionTime: before && before.status === next.status ? (before.lastTransitionTime ?? nowIso) : nowIso,
  };
  return before ? conditions.map((c) => (c === before ? updated : c)) : [...conditions, updated];
}

export function completionIndexOf(pod: KubeObject): number | undefined {
  const raw = pod.metadata.annotations?.[COMPLETION_INDEX_ANNOTATION];
  return raw !== undefined && /^(0|[1-9]\d*)$/.test(raw) ? Number(raw) : undefined;
}

/** `0-2,4,6-7`, as kube writes completedIndexes. */
export function formatIndexes(indexes: Iterable<number>): string {
  const sorted = [...new Set(indexes)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? String(sorted[i]) : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

interface ContainerTermination {
  name?: string;
  state?: { terminated?: { exitCode?: number; finishedAt?: string } };
  lastState?: { terminated?: { exitCode?: number; finishedAt?: string } };
  restartCount?: number;
}

function containerStatuses(pod: KubeObject): ContainerTermination[] {
  const statuses = (podStatus(pod) as { containerStatuses?: ContainerTermination[] }).containerStatuses;
  return Array.isArray(statuses) ? statuses : [];
}

/** The rule of the policy a failed pod matches first, and how (for the Failed message). */
export function matchPodFailurePolicy(
  rules: readonly PodFailurePolicyRule[],
  pod: KubeObject,
): { rule: PodFailurePolicyRule; index: number; message: string } | undefined {
  const name = `${pod.metadata.namespace ?? ''}/${pod.metadata.name ?? ''}`;
  for (const [index, rule] of rules.entries()) {
    if (rule.onExitCodes) {
      const codes = rule.onExitCodes;
      for (const c of containerStatuses(pod)) {
        const exitCode = c.state?.terminated?.exitCode;
        // A container that succeeded never matches (kube's rule).
        if (exitCode === undefined || exitCode === 0) continue;
        if (codes.containerName && codes.containerName !== c.name) continue;
        const listed = codes.values.includes(exitCode);
        if (codes.operator === 'In' ? listed : !listed) {
          return { rule, index, message: `Container ${c.name ?? ''} for pod ${name} failed with exit code ${exitCode} matching ${rule.action} rule at index ${index}` };
        }
      }
    }
    if (rule.onPodConditions) {
      const conditions = podStatus(pod).conditions ?? [];
      for (const want of rule.onPodConditions) {
        if (conditions.some((c) => c.type === want.type && c.status === (want.status ?? 'True'))) {
          return { rule, index, message: `Pod ${name} has condition ${want.type} matching ${rule.action} rule at index ${index}` };
        }
      }
    }
  }
  return undefined;
}

function finishedAt(pod: KubeObject): number {
  let latest = 0;
  for (const c of containerStatuses(pod)) {
    const at = Date.parse(c.state?.terminated?.finishedAt ?? '');
    if (Number.isFinite(at)) latest = Math.max(latest, at);
  }
  return latest || Date.parse(pod.metadata.creationTimestamp ?? '') || 0;
}

/** Newest first, not-ready before ready: the order extra active pods are removed in. */
function rankForRemoval(pods: readonly KubeObject[]): KubeObject[] {
  const created = (p: KubeObject): number => Date.parse(p.metadata.creationTimestamp ?? '') || 0;
  return [...pods].sort((a, b) => Number(isPodReady(a)) - Number(isPodReady(b)) || created(b) - created(a));
}

export function planJob(input: JobInput): JobPlan {
  const { spec, pods, now } = input;
  const nowIso = iso(now);
  const previous = input.status;
  let conditions = [...(previous.conditions ?? [])];
  const plan: JobPlan = { create: 0, createIndexes: [], delete: [], status: {}, deleteJob: false };
  const indexed = spec.completionMode === 'Indexed';
  const completions = spec.completions;
  const parallelism = spec.parallelism ?? 1;
  const backoffLimit = spec.backoffLimit ?? 6;
  const rules = spec.podFailurePolicy?.rules ?? [];

  const active = pods.filter((p) => !isTerminating(p) && phaseOf(p) !== 'Succeeded' && phaseOf(p) !== 'Failed');
  const terminating = pods.filter((p) => isTerminating(p) && phaseOf(p) !== 'Succeeded' && phaseOf(p) !== 'Failed');
  const succeededPods = pods.filter((p) => phaseOf(p) === 'Succeeded');
  const failedPods = pods.filter((p) => phaseOf(p) === 'Failed');

  // podFailurePolicy: Ignore'd failures do not count; the first FailJob match fails the Job.
  let failJob: string | undefined;
  const countedFailures: KubeObject[] = [];
  for (const pod of failedPods) {
    const match = rules.length ? matchPodFailurePolicy(rules, pod) : undefined;
    if (match?.rule.action === 'Ignore') continue;
    if (match?.rule.action === 'FailJob') failJob ??= match.message;
    countedFailures.push(pod);
  }
  // OnFailure restarts containers in place: each restart is a failure, as kube counts them.
  const restarts =
    spec.template?.spec?.restartPolicy === 'OnFailure'
      ? active.reduce((sum, p) => sum + containerStatuses(p).reduce((s, c) => s + (c.restartCount ?? 0), 0), 0)
      : 0;
  // Counters never go down: a finished pod removed by someone else stays counted.
  const failed = Math.max(previous.failed ?? 0, countedFailures.length + restarts);
  const succeededIndexes = new Set<number>();
  for (const pod of succeededPods) {
    const index = completionIndexOf(pod);
    if (index !== undefined && completions !== undefined && index < completions) succeededIndexes.add(index);
  }
  const succeeded = Math.max(previous.succeeded ?? 0, indexed ? succeededIndexes.size : succeededPods.length);

  let startTime = previous.startTime;
  const finished = jobFinished(previous);
  const suspended = spec.suspend === true && !finished;
  if (!suspended && !finished) startTime ??= nowIso;
  let completionTime = previous.completionTime;
  let requeue: number | undefined;
  const requeueIn = (ms: number): void => {
    requeue = requeue === undefined ? Math.max(0, ms) : Math.min(requeue, Math.max(0, ms));
  };

  let verdict: { type: 'Complete' } | { type: 'Failed'; reason: string; message: string } | undefined;
  if (!finished) {
    const deadlineAt = startTime && spec.activeDeadlineSeconds !== undefined ? Date.parse(startTime) + spec.activeDeadlineSeconds * 1000 : undefined;
    if (failJob) verdict = { type: 'Failed', reason: 'PodFailurePolicy', message: failJob };
    else if (failed > backoffLimit) verdict = { type: 'Failed', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' };
    else if (!suspended && deadlineAt !== undefined && now >= deadlineAt) {
      verdict = { type: 'Failed', reason: 'DeadlineExceeded', message: 'Job was active longer than specified deadline' };
    } else if (
      indexed
        ? completions !== undefined && succeededIndexes.size >= completions
        : completions !== undefined
          ? succeeded >= completions
          : succeeded > 0 && active.length === 0
    ) {
      verdict = { type: 'Complete' };
    } else if (!suspended && deadlineAt !== undefined) requeueIn(deadlineAt - now);
  }

  if (verdict?.type === 'Failed') {
    conditions = withCondition(conditions, { type: 'FailureTarget', status: 'True', reason: verdict.reason, message: verdict.message }, nowIso);
    conditions = withCondition(conditions, { type: 'Failed', status: 'True', reason: verdict.reason, message: verdict.message }, nowIso);
  } else if (verdict?.type === 'Complete') {
    conditions = withCondition(conditions, { type: 'SuccessCriteriaMet', status: 'True', reason: 'CompletionsReached', message: 'Reached expected number of succeeded pods' }, nowIso);
    conditions = withCondition(conditions, { type: 'Complete', status: 'True', reason: 'CompletionsReached', message: 'Reached expected number of succeeded pods' }, nowIso);
    completionTime = nowIso;
  }

  const done = finished ?? verdict?.type;
  if (done || suspended) {
    // Nothing more runs: a finished Job's leftover pods and a suspended Job's pods are removed.
    plan.delete.push(...active);
    if (suspended) {
      conditions = withCondition(conditions, { type: 'Suspended', status: 'True', reason: 'JobSuspended', message: 'Job suspended' }, nowIso);
      // kube forgets the start time of a suspended Job: activeDeadlineSeconds counts from its resumption.
      startTime = undefined;
    }
  } else {
    if (conditionOf({ conditions }, 'Suspended')?.status === 'True') {
      conditions = withCondition(conditions, { type: 'Suspended', status: 'False', reason: 'JobResumed', message: 'Job resumed' }, nowIso);
    }
    // Back-off after failures before starting replacements.
    let waitMs = 0;
    if (countedFailures.length > 0) {
      const lastFailure = Math.max(...countedFailures.map(finishedAt));
      const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.min(20, countedFailures.length - 1));
      waitMs = lastFailure + delay - now;
    }
    if (indexed) {
      const busy = new Set<number>();
      for (const pod of [...active, ...terminating]) {
        const index = completionIndexOf(pod);
        if (index !== undefined) busy.add(index);
      }
      // Duplicates of an index, and pods of an index already done, are removed.
      const seen = new Set<number>();
      for (const pod of rankForRemoval(active).reverse()) {
        const index = completionIndexOf(pod);
        if (index === undefined || index >= (completions ?? 0) || succeededIndexes.has(index) || seen.has(index)) plan.delete.push(pod);
        else seen.add(index);
      }
      const running = seen.size;
      const room = Math.max(0, parallelism - running);
      const missing: number[] = [];
      for (let i = 0; i < (completions ?? 0) && missing.length < room; i++) {
        if (!succeededIndexes.has(i) && !busy.has(i)) missing.push(i);
      }
      if (missing.length && waitMs > 0) requeueIn(waitMs);
      else plan.createIndexes = missing;
    } else {
      const remaining = completions !== undefined ? Math.max(0, completions - succeeded) : succeeded > 0 ? 0 : parallelism;
      const wanted = Math.min(parallelism, remaining);
      if (active.length > wanted) plan.delete.push(...rankForRemoval(active).slice(0, active.length - wanted));
      else if (active.length < wanted) {
        if (waitMs > 0) requeueIn(waitMs);
        else plan.create = wanted - active.length;
      }
    }
  }

  const deleted = new Set(plan.delete);
  const stillActive = active.filter((p) => !deleted.has(p));
  const status: JobStatus = {
    active: stillActive.length + plan.create + plan.createIndexes.length,
    ready: stillActive.filter(isPodReady).length,
    terminating: terminating.length + plan.delete.length,
    succeeded,
    failed,
    // Always present (undefined when suspended), so a write takes a forgotten start time away.
    startTime,
    ...(completionTime ? { completionTime } : {}),
    ...(indexed ? { completedIndexes: formatIndexes(succeededIndexes) } : {}),
    ...(conditions.length ? { conditions } : {}),
    uncountedTerminatedPods: {},
  };
  plan.status = status;

  // ttlSecondsAfterFinished: the Job (and its pods, by the garbage collector) goes that long after it finished.
  const finishedCondition = conditions.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
  if (spec.ttlSecondsAfterFinished !== undefined && finishedCondition) {
    const finishedAtMs = Date.parse(finishedCondition.lastTransitionTime ?? nowIso);
    const expireAt = finishedAtMs + spec.ttlSecondsAfterFinished * 1000;
    if (now >= expireAt) plan.deleteJob = true;
    else requeueIn(expireAt - now);
  }
  if (requeue !== undefined) plan.requeueAfterMs = requeue;
  return plan;
}
