import { randomInt } from 'node:crypto';
import type { KubeObject } from '../apiserver/objects.js';
import { labelSelectorFromObject, type LabelSelectorObject, matchesLabels } from '../apiserver/selectors.js';
import { isPodReady } from '../node-protocol/pods.js';
import type * as kube from './kube-types.js';
import { type PodTemplateSpec, podStatus, replicaSetSpec } from './kube-types.js';
import { isPodTerminated, podNodeName } from './scheduling.js';
import { CONTROLLER_REVISION_HASH_LABEL, POD_TEMPLATE_HASH_LABEL } from './workloads.js';

/**
 * The decisions of the ReplicaSet, Deployment and StatefulSet controllers, as pure functions of
 * what the controllers observed. The loops (replicaset.ts, deployment.ts, statefulset.ts) only
 * gather the inputs and carry out the result.
 */

export const REVISION_ANNOTATION = 'deployment.kubernetes.io/revision';
export const DESIRED_REPLICAS_ANNOTATION = 'deployment.kubernetes.io/desired-replicas';
export const MAX_REPLICAS_ANNOTATION = 'deployment.kubernetes.io/max-replicas';
export const POD_INDEX_LABEL = 'apps.kubernetes.io/pod-index';

// ---------------------------------------------------------------------------------------------
// Label selectors (metav1.LabelSelector)

export type LabelSelectorSpec = LabelSelectorObject;

const KNOWN_OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

/** An empty selector matches nothing here: a workload without a selector must not grab every pod. */
export function selectorMatches(selector: LabelSelectorSpec | undefined, labels: Record<string, string> | undefined): boolean {
  const requirements = labelSelectorFromObject(selector);
  if (requirements.length === 0) return false;
  // The apiserver's conversion skips an unknown operator; here it must select nothing instead
  // (validation refuses such selectors, so only an unvalidated object can carry one).
  if (selector?.matchExpressions?.some((e) => !KNOWN_OPERATORS.has(e.operator))) return false;
  return matchesLabels(requirements, labels);
}

// ---------------------------------------------------------------------------------------------
// Pods


/** Counts toward the replicas: not being deleted and not finished. */
export function isPodActive(pod: KubeObject): boolean {
  return !pod.metadata.deletionTimestamp && !isPodTerminated(pod);
}

/** Ready for at least minReadySeconds (by the Ready condition's transition time). */
export function isPodAvailable(pod: KubeObject, minReadySeconds: number, now: number): boolean {
  if (!isPodReady(pod)) return false;
  if (minReadySeconds <= 0) return true;
  const ready = (podStatus(pod).conditions ?? []).find((c) => c.type === 'Ready');
  const since = ready?.lastTransitionTime ? Date.parse(ready.lastTransitionTime) : NaN;
  return Number.isFinite(since) && since + minReadySeconds * 1000 <= now;
}

/** 0 unscheduled, 1 pending, 2 running but not ready, 3 ready: lower is deleted first on scale-down. */
export function podValue(pod: KubeObject): number {
  if (!podNodeName(pod)) return 0;
  const phase = podStatus(pod).phase;
  if (phase !== 'Running') return 1;
  return isPodReady(pod) ? 3 : 2;
}

function creationTime(obj: KubeObject): number {
  const time = Date.parse(obj.metadata.creationTimestamp ?? '');
  return Number.isFinite(time) ? time : 0;
}

/** Pods in the order a scale-down removes them: least valuable first, newer before older. */
export function rankForScaleDown(pods: readonly KubeObject[]): KubeObject[] {
  return [...pods].sort(
    (a, b) =>
      podValue(a) - podValue(b) ||
      creationTime(b) - creationTime(a) ||
      // Same second: the later name is as good a guess as any, and it is stable.
      (b.metadata.name! < a.metadata.name! ? -1 : b.metadata.name! > a.metadata.name! ? 1 : 0),
  );
}

const SUFFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** The 5 random characters Kubernetes appends to a generateName. */
export function randomSuffix(length = 5): string {
  let out = '';
  for (let i = 0; i < length; i++) out += SUFFIX_ALPHABET[randomInt(SUFFIX_ALPHABET.length)];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Template hashes

/** JSON with object keys sorted, so equal data gives equal text whatever the key order. */
export function stableStringify(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => stableStringify(v === undefined ? null : v)).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableStringify(v)}`).join(',')}}`;
}

function fnv1a32(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

/** k8s.io/apimachinery rand.SafeEncodeString: no vowels, no look-alikes, so no words. */
const SAFE_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

/**
 * The short hash of a pod template, as Kubernetes makes pod-template-hash: FNV-32a, printed in
 * decimal, each digit mapped into the safe alphabet. The hash labels themselves are left out so
 * that a template read back from a ReplicaSet hashes the same as the Deployment's.
 */
/** A copy without null values and empty objects, at any depth (array items are kept). */
function withoutEmpty(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutEmpty);
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    const cleaned = withoutEmpty(child);
    if (cleaned === null || cleaned === undefined) continue;
    if (typeof cleaned === 'object' && !Array.isArray(cleaned) && Object.keys(cleaned).length === 0) continue;
    out[key] = cleaned;
  }
  return out;
}

export function templateHash(template: unknown, collisionCount = 0): string {
  // kubectl rollout undo sends the old template back as Go writes it (`creationTimestamp: null`,
  // `resources: {}`): the same template, which must map to the same ReplicaSet. Empty values are
  // left out of the hash, as Go's typed structs make them indistinguishable from absent ones.
  const copy = withoutEmpty(structuredClone(template ?? {})) as PodTemplateSpec;
  if (copy.metadata?.labels) {
    delete copy.metadata.labels[POD_TEMPLATE_HASH_LABEL];
    delete copy.metadata.labels[CONTROLLER_REVISION_HASH_LABEL];
  }
  const digits = String(fnv1a32(stableStringify(copy) + (collisionCount ? `#${collisionCount}` : '')));
  let out = '';
  for (const ch of digits) out += SAFE_ALPHABET[ch.charCodeAt(0) % SAFE_ALPHABET.length];
  return out;
}

// ---------------------------------------------------------------------------------------------
// ReplicaSet

/**
 * The fields of a status a controller writes, each always present (a view of a stored status,
 * kube-types.ts, has every field optional): Kubernetes' own names and types, not a copy of them.
 */
type Written<T, Always extends keyof T, Maybe extends keyof T = never> = Required<Pick<T, Always>> & Pick<T, Maybe>;

export type ReplicaSetStatus = Written<
  kube.ReplicaSetStatus,
  'replicas' | 'fullyLabeledReplicas' | 'readyReplicas' | 'availableReplicas',
  'observedGeneration'
>;

export interface ReplicaSetPlan {
  /** Pods to create from the template. */
  create: number;
  /** Active pods to delete, least valuable first. */
  scaleDown: KubeObject[];
  /** Finished (Failed/Succeeded) pods to delete so they stop holding their place. */
  finished: KubeObject[];
  status: ReplicaSetStatus;
}

/** `pods` are the pods the ReplicaSet controls (selector matched, controller reference to it). */
export function planReplicaSet(rs: KubeObject, pods: readonly KubeObject[], now: number): ReplicaSetPlan {
  const spec = replicaSetSpec(rs);
  const wanted = spec.replicas ?? 1;
  const active = pods.filter(isPodActive);
  const finished = pods.filter((p) => !p.metadata.deletionTimestamp && isPodTerminated(p));
  const diff = active.length - wanted;
  const templateLabels = Object.entries(spec.template?.metadata?.labels ?? {});
  const status: ReplicaSetStatus = {
    replicas: active.length,
    fullyLabeledReplicas: active.filter((p) => templateLabels.every(([k, v]) => p.metadata.labels?.[k] === v)).length,
    readyReplicas: active.filter(isPodReady).length,
    availableReplicas: active.filter((p) => isPodAvailable(p, spec.minReadySeconds ?? 0, now)).length,
    ...(rs.metadata.generation !== undefined ? { observedGeneration: rs.metadata.generation } : {}),
  };
  return {
    create: diff < 0 ? -diff : 0,
    scaleDown: diff > 0 ? rankForScaleDown(active).slice(0, diff) : [],
    finished,
    status,
  };
}

/** True when the stored status already says the same (ignoring fields the controller does not own). */
export function sameStatus(current: unknown, wanted: Record<string, unknown>): boolean {
  const have = (current ?? {}) as Record<string, unknown>;
  return Object.entries(wanted).every(([key, value]) => stableStringify(have[key] ?? null) === stableStringify(value ?? null));
}

// ---------------------------------------------------------------------------------------------
// Deployment

/** An int or a percentage of `total` (intstr), surge rounding up and unavailability down. */
export function resolveIntOrPercent(value: number | string | undefined, total: number, roundUp: boolean, fallback: string): number {
  const v = value ?? fallback;
  if (typeof v === 'number') return Math.max(0, Math.floor(v));
  const match = /^(\d+)%$/.exec(v.trim());
  if (!match) {
    const asInt = Number(v);
    return Number.isInteger(asInt) ? Math.max(0, asInt) : 0;
  }
  const scaled = (Number(match[1]) * total) / 100;
  return roundUp ? Math.ceil(scaled) : Math.floor(scaled);
}

/** kube's ResolveFenceposts: both zero would stall a rollout, so unavailable becomes 1. */
export function resolveRollingParams(
  replicas: number,
  maxSurge: number | string | undefined,
  maxUnavailable: number | string | undefined,
): { surge: number; unavailable: number } {
  const surge = resolveIntOrPercent(maxSurge, replicas, true, '25%');
  let unavailable = resolveIntOrPercent(maxUnavailable, replicas, false, '25%');
  if (surge === 0 && unavailable === 0) unavailable = 1;
  return { surge, unavailable: Math.min(unavailable, replicas) };
}

export interface RsCounts {
  name: string;
  replicas: number;
  available: number;
}

export type RolloutStep =
  | { kind: 'scale'; name: string; replicas: number }
  | { kind: 'none' };

/**
 * One step of a RollingUpdate, as Kubernetes takes it (rolling.go): first grow the new
 * ReplicaSet within the surge; otherwise shrink old ones (unhealthy replicas first, then
 * available ones) as far as the unavailability budget allows. `old` is oldest first.
 */
export function rollingUpdateStep(
  replicas: number,
  params: { surge: number; unavailable: number },
  newRs: RsCounts,
  old: readonly RsCounts[],
): RolloutStep[] {
  const all = [newRs, ...old];
  const total = all.reduce((sum, rs) => sum + rs.replicas, 0);
  if (newRs.replicas > replicas) return [{ kind: 'scale', name: newRs.name, replicas }];
  if (newRs.replicas < replicas) {
    const maxTotal = replicas + params.surge;
    const room = Math.min(maxTotal - total, replicas - newRs.replicas);
    if (room > 0) return [{ kind: 'scale', name: newRs.name, replicas: newRs.replicas + room }];
  }
  const oldTotal = old.reduce((sum, rs) => sum + rs.replicas, 0);
  if (oldTotal === 0) return [{ kind: 'none' }];
  const minAvailable = replicas - params.unavailable;
  const newUnavailable = Math.max(0, newRs.replicas - newRs.available);
  let budget = total - minAvailable - newUnavailable;
  if (budget <= 0) return [{ kind: 'none' }];
  const next = new Map(old.map((rs) => [rs.name, rs.replicas]));
  // Replicas that are not available cost nothing to remove: take those first.
  for (const rs of old) {
    if (budget <= 0) break;
    const unhealthy = Math.max(0, rs.replicas - rs.available);
    const take = Math.min(unhealthy, budget);
    if (take > 0) {
      next.set(rs.name, rs.replicas - take);
      budget -= take;
    }
  }
  const available = all.reduce((sum, rs) => sum + Math.min(rs.available, rs === newRs ? rs.replicas : next.get(rs.name)!), 0);
  let scaleDown = available - minAvailable;
  for (const rs of old) {
    if (scaleDown <= 0) break;
    const current = next.get(rs.name)!;
    const take = Math.min(current, scaleDown);
    if (take > 0) {
      next.set(rs.name, current - take);
      scaleDown -= take;
    }
  }
  const steps: RolloutStep[] = old
    .filter((rs) => next.get(rs.name) !== rs.replicas)
    .map((rs) => ({ kind: 'scale', name: rs.name, replicas: next.get(rs.name)! }));
  return steps.length ? steps : [{ kind: 'none' }];
}

export type DeploymentCondition = kube.DeploymentCondition;

export interface DeploymentStatusInput {
  replicas: number;
  generation?: number;
  unavailable: number;
  newRs?: { name: string; statusReplicas: number };
  /** Every owned ReplicaSet, new one included. */
  all: readonly { specReplicas: number; statusReplicas: number; ready: number; available: number }[];
}

export type DeploymentStatus = Written<
  kube.DeploymentStatus,
  'replicas' | 'updatedReplicas' | 'readyReplicas' | 'availableReplicas' | 'unavailableReplicas' | 'conditions',
  'observedGeneration'
>;

/** The status `kubectl rollout status` reads (calculateStatus + the conditions of sync/progress.go). */
export function deploymentStatus(input: DeploymentStatusInput, previous: readonly DeploymentCondition[], nowIso: string): DeploymentStatus {
  const sum = (pick: (rs: DeploymentStatusInput['all'][number]) => number): number =>
    input.all.reduce((total, rs) => total + pick(rs), 0);
  const replicas = sum((rs) => rs.statusReplicas);
  const updatedReplicas = input.newRs?.statusReplicas ?? 0;
  const readyReplicas = sum((rs) => rs.ready);
  const availableReplicas = sum((rs) => rs.available);
  const unavailableReplicas = Math.max(0, sum((rs) => rs.specReplicas) - availableReplicas);
  const available = availableReplicas >= input.replicas - input.unavailable;
  const complete =
    updatedReplicas === input.replicas && replicas === input.replicas && availableReplicas === input.replicas;
  const wanted: DeploymentCondition[] = [
    available
      ? { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable', message: 'Deployment has minimum availability.' }
      : { type: 'Available', status: 'False', reason: 'MinimumReplicasUnavailable', message: 'Deployment does not have minimum availability.' },
    complete
      ? { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable', message: `ReplicaSet "${input.newRs?.name ?? ''}" has successfully progressed.` }
      : { type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated', message: `ReplicaSet "${input.newRs?.name ?? ''}" is progressing.` },
  ];
  const conditions = wanted.map((condition) => {
    const before = previous.find((c) => c.type === condition.type);
    // Keep the old timestamps when nothing changed, so an unchanged status is not rewritten.
    if (before && before.status === condition.status && before.reason === condition.reason && before.message === condition.message) {
      return before;
    }
    return {
      ...condition,
      lastUpdateTime: nowIso,
      lastTransitionTime: before && before.status === condition.status ? before.lastTransitionTime ?? nowIso : nowIso,
    };
  });
  return {
    ...(input.generation !== undefined ? { observedGeneration: input.generation } : {}),
    replicas,
    updatedReplicas,
    readyReplicas,
    availableReplicas,
    unavailableReplicas,
    conditions,
  };
}

// ---------------------------------------------------------------------------------------------
// StatefulSet

export interface StatefulPod {
  ordinal: number;
  name: string;
  terminating: boolean;
  finished: boolean;
  runningAndReady: boolean;
  revision: string | undefined;
}

export interface StatefulSetInput {
  name: string;
  replicas: number;
  policy: 'OrderedReady' | 'Parallel';
  updateRevision: string;
  rollingUpdate: boolean;
  /** RollingUpdate updates only ordinals at or above this. */
  partition?: number;
  /** Every pod of the set that still exists, terminating ones included. */
  pods: readonly StatefulPod[];
}

export interface StatefulSetActions {
  create: number[];
  delete: string[];
  /** Why nothing more is done now (for logs and tests). */
  waiting?: string;
}

/**
 * What the StatefulSet controller does next (stateful_set_control.go, simplified). The rule that
 * matters most: a name that still exists, even as a terminating pod, is never created again, so
 * two copies of one ordinal never exist at once.
 */
export function statefulSetStep(input: StatefulSetInput): StatefulSetActions {
  const byOrdinal = new Map(input.pods.map((p) => [p.ordinal, p]));
  const ordered = input.policy === 'OrderedReady';
  const actions: StatefulSetActions = { create: [], delete: [] };
  const finish = (waiting?: string): StatefulSetActions => (waiting ? { ...actions, waiting } : actions);

  for (let ordinal = 0; ordinal < input.replicas; ordinal++) {
    const pod = byOrdinal.get(ordinal);
    if (!pod) {
      actions.create.push(ordinal);
      if (ordered) return finish(`creating ${input.name}-${ordinal}`);
      continue;
    }
    if (pod.terminating) {
      if (ordered) return finish(`waiting for ${pod.name} to be gone before it is created again`);
      continue;
    }
    if (pod.finished) {
      actions.delete.push(pod.name);
      if (ordered) return finish(`deleting finished ${pod.name} so it is created again`);
      continue;
    }
    if (ordered && !pod.runningAndReady) return finish(`waiting for ${pod.name} to be Running and Ready`);
  }

  const condemned = input.pods.filter((p) => p.ordinal >= input.replicas).sort((a, b) => b.ordinal - a.ordinal);
  if (ordered) {
    if (actions.create.length) return finish();
    const busy = condemned.find((p) => p.terminating);
    if (busy) return finish(`waiting for ${busy.name} to terminate`);
    if (condemned.length) {
      actions.delete.push(condemned[0]!.name);
      return finish(`scaling down: ${condemned[0]!.name}`);
    }
  } else {
    for (const pod of condemned) if (!pod.terminating) actions.delete.push(pod.name);
  }
  if (actions.create.length || actions.delete.length) return finish();

  if (!input.rollingUpdate) return finish();
  const members = input.pods.filter((p) => p.ordinal < input.replicas);
  const notReady = members.find((p) => p.terminating || !p.runningAndReady);
  if (notReady) return finish(`waiting for ${notReady.name} before updating`);
  const partition = input.partition ?? 0;
  const stale = members.filter((p) => p.ordinal >= partition && p.revision !== input.updateRevision).sort((a, b) => b.ordinal - a.ordinal);
  if (stale.length) actions.delete.push(stale[0]!.name);
  return finish();
}

export type StatefulSetStatus = Written<
  kube.StatefulSetStatus,
  | 'observedGeneration'
  | 'replicas'
  | 'readyReplicas'
  | 'currentReplicas'
  | 'updatedReplicas'
  | 'availableReplicas'
  | 'currentRevision'
  | 'updateRevision'
  | 'collisionCount'
>;

export function statefulSetStatus(
  input: Pick<StatefulSetInput, 'replicas' | 'updateRevision' | 'pods'>,
  generation: number | undefined,
  previousCurrentRevision: string | undefined,
): StatefulSetStatus {
  const live = input.pods.filter((p) => !p.terminating && !p.finished);
  const updatedReplicas = live.filter((p) => p.revision === input.updateRevision).length;
  const members = live.filter((p) => p.ordinal < input.replicas);
  const allUpdated =
    members.length === input.replicas && members.every((p) => p.revision === input.updateRevision) && live.length === members.length;
  const currentRevision = allUpdated || !previousCurrentRevision ? input.updateRevision : previousCurrentRevision;
  const ready = live.filter((p) => p.runningAndReady).length;
  return {
    // kubectl rollout status waits while observedGeneration is 0, so a server without generations still reports 1.
    observedGeneration: generation ?? 1,
    replicas: live.length,
    readyReplicas: ready,
    currentReplicas: live.filter((p) => p.revision === currentRevision).length,
    updatedReplicas,
    availableReplicas: ready,
    currentRevision,
    updateRevision: input.updateRevision,
    collisionCount: 0,
  };
}

/** `<sts>-<n>` → n, for this set's pods only. */
export function statefulOrdinal(setName: string, podName: string): number | undefined {
  if (!podName.startsWith(`${setName}-`)) return undefined;
  const rest = podName.slice(setName.length + 1);
  return /^(0|[1-9]\d*)$/.test(rest) ? Number(rest) : undefined;
}

export { isPodTerminated, podNodeName };
