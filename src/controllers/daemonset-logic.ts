import type { KubeObject } from '../apiserver/objects.js';
import { UNREACHABLE_TAINT } from '../node-protocol/names.js';
import { isPodReady } from '../node-protocol/pods.js';
import type { Toleration } from '../node-protocol/taints.js';
import type { PodSpec } from './kube-types.js';
import { nodeSpec, podStatus } from './kube-types.js';
import { toleratesTaint } from './scheduling.js';
import { isPodAvailable, resolveIntOrPercent } from './workload-logic.js';
import { CONTROLLER_REVISION_HASH_LABEL } from './workloads.js';

/**
 * The DaemonSet controller's decisions, pure: which nodes should run a daemon pod, which pods to
 * create and delete (placement, rolling update) and the status, from what the controller
 * observed. daemonset.ts gathers the inputs and carries out the result.
 */

export const NOT_READY_TAINT = 'node.kubernetes.io/not-ready';

/**
 * The tolerations kube's DaemonSet controller adds to every daemon pod: a daemon belongs to its
 * node, so it is never evicted for the node being unreachable or not ready, and it still lands on
 * nodes under pressure or cordoned.
 */
export function daemonTolerations(spec: PodSpec): Toleration[] {
  const own: Toleration[] = Array.isArray(spec.tolerations) ? (spec.tolerations as Toleration[]) : [];
  const added: Toleration[] = [
    { key: NOT_READY_TAINT, operator: 'Exists', effect: 'NoExecute' },
    { key: UNREACHABLE_TAINT, operator: 'Exists', effect: 'NoExecute' },
    { key: 'node.kubernetes.io/disk-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/memory-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/pid-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/unschedulable', operator: 'Exists', effect: 'NoSchedule' },
  ];
  if (spec.hostNetwork === true) added.push({ key: 'node.kubernetes.io/network-unavailable', operator: 'Exists', effect: 'NoSchedule' });
  const out = [...own];
  for (const t of added) {
    if (!out.some((o) => o.key === t.key && o.effect === t.effect && (o.operator ?? 'Equal') === t.operator)) out.push(t);
  }
  return out;
}

interface SelectorRequirement {
  key?: string;
  operator?: string;
  values?: string[];
}

function requirementMatches(req: SelectorRequirement, value: string | undefined): boolean {
  const values = req.values ?? [];
  switch (req.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      const n = Number(value);
      const bound = Number(values[0]);
      if (value === undefined || !Number.isInteger(n) || !Number.isInteger(bound)) return false;
      return req.operator === 'Gt' ? n > bound : n < bound;
    }
    default:
      return false;
  }
}

/**
 * Required node affinity (nodeSelectorTerms, ORed; within a term every expression ANDed), with
 * matchFields on metadata.name as kube supports it. No terms: every node.
 */
export function matchesNodeAffinity(spec: PodSpec, node: KubeObject): boolean {
  const terms = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (!Array.isArray(terms) || terms.length === 0) return true;
  const labels = node.metadata.labels ?? {};
  return terms.some((term) => {
    const exprs = (term.matchExpressions ?? []) as SelectorRequirement[];
    const fields = (term.matchFields ?? []) as SelectorRequirement[];
    // An empty term matches nothing, as in kube.
    if (exprs.length === 0 && fields.length === 0) return false;
    return (
      exprs.every((e) => requirementMatches(e, e.key === undefined ? undefined : labels[e.key])) &&
      fields.every((f) => f.key === 'metadata.name' && requirementMatches(f, node.metadata.name))
    );
  });
}

export interface NodeVerdict {
  /** A daemon pod should be here (counts in desiredNumberScheduled; one is created if missing). */
  shouldRun: boolean;
  /** A daemon pod already here may stay (only an untolerated NoExecute taint, or not matching, removes it). */
  shouldContinueRunning: boolean;
}

/** kube's NodeShouldRunDaemonPod: node name, nodeSelector and required affinity, then taints. */
export function nodeShouldRunDaemonPod(template: PodSpec, node: KubeObject): NodeVerdict {
  const name = node.metadata.name!;
  if (template.nodeName && template.nodeName !== name) return { shouldRun: false, shouldContinueRunning: false };
  const labels = node.metadata.labels ?? {};
  const selected = Object.entries(template.nodeSelector ?? {}).every(([k, v]) => labels[k] === v);
  if (!selected || !matchesNodeAffinity(template, node)) return { shouldRun: false, shouldContinueRunning: false };
  const tolerations = daemonTolerations(template);
  const taints = nodeSpec(node).taints ?? [];
  const untolerated = taints.filter(
    (t) => (t.effect === 'NoSchedule' || t.effect === 'NoExecute') && !tolerations.some((tol) => toleratesTaint(tol, t)),
  );
  if (untolerated.length === 0) return { shouldRun: true, shouldContinueRunning: true };
  return { shouldRun: false, shouldContinueRunning: !untolerated.some((t) => t.effect === 'NoExecute') };
}

export interface DaemonSetInput {
  nodes: readonly KubeObject[];
  /** The pods the DaemonSet controls (terminating ones included). */
  pods: readonly KubeObject[];
  template: PodSpec;
  /** The controller-revision-hash of the current template. */
  updateHash: string;
  strategy: 'RollingUpdate' | 'OnDelete';
  maxUnavailable?: number | string;
  maxSurge?: number | string;
  minReadySeconds: number;
  generation?: number;
  now: number;
  /** Nodes whose daemon pod failed recently: no new pod there before this wall-clock ms. */
  backoffUntil?: ReadonlyMap<string, number>;
}

export interface DaemonSetStatus {
  currentNumberScheduled: number;
  numberMisscheduled: number;
  desiredNumberScheduled: number;
  numberReady: number;
  updatedNumberScheduled: number;
  numberAvailable: number;
  numberUnavailable: number;
  observedGeneration?: number;
}

export interface DaemonSetPlan {
  /** Nodes to create a daemon pod on. */
  create: string[];
  /** Pods to delete; `force` ones sit on nodes that no longer exist (no agent will ever confirm). */
  delete: { pod: KubeObject; force: boolean }[];
  status: DaemonSetStatus;
  /** Nodes whose failed daemon pod is deleted now (their back-off grows). */
  failedOn: string[];
  /** When a back-off ends, if a node waits for one. */
  requeueAfterMs?: number;
}

const isActive = (pod: KubeObject): boolean => !pod.metadata.deletionTimestamp;
const isFailed = (pod: KubeObject): boolean => podStatus(pod).phase === 'Failed';
const hashOf = (pod: KubeObject): string | undefined => pod.metadata.labels?.[CONTROLLER_REVISION_HASH_LABEL];
const created = (pod: KubeObject): number => Date.parse(pod.metadata.creationTimestamp ?? '') || 0;

/**
 * One step of the DaemonSet: per node, create the missing pod, remove extras, failed pods and
 * pods that may not stay; then, for RollingUpdate, replace old pods within maxUnavailable (or,
 * with maxSurge, start the new pod first and remove the old one once the new one is available).
 */
export function planDaemonSet(input: DaemonSetInput): DaemonSetPlan {
  const plan: DaemonSetPlan = { create: [], delete: [], status: emptyStatus(input.generation), failedOn: [] };
  const byNode = new Map<string, KubeObject[]>();
  for (const pod of input.pods) {
    const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName ?? '';
    byNode.set(node, [...(byNode.get(node) ?? []), pod]);
  }
  const known = new Set(input.nodes.map((n) => n.metadata.name!));
  for (const [node, pods] of byNode) {
    if (known.has(node)) continue;
    // The node is gone: its pods go with it, at once (no agent will ever report them stopped).
    for (const pod of pods) plan.delete.push({ pod, force: true });
  }

  const available = (pod: KubeObject): boolean => isPodAvailable(pod, input.minReadySeconds, input.now);
  // Nodes whose only live daemon pods are of an old template, for the rolling update.
  const rolling: { node: string; old: KubeObject[]; fresh: KubeObject | undefined }[] = [];
  let unavailable = 0;
  const s = plan.status;

  for (const node of input.nodes) {
    const name = node.metadata.name!;
    const verdict = nodeShouldRunDaemonPod(input.template, node);
    const pods = byNode.get(name) ?? [];
    const live = pods.filter(isActive);
    if (verdict.shouldRun) {
      s.desiredNumberScheduled++;
      if (live.length) s.currentNumberScheduled++;
    } else if (live.length) s.numberMisscheduled++;

    if (!verdict.shouldContinueRunning) {
      for (const pod of live) plan.delete.push({ pod, force: false });
      continue;
    }
    if (!verdict.shouldRun && live.length === 0) continue;
    // Failed pods never come back: remove them so a new one is made.
    const failed = live.filter(isFailed);
    for (const pod of failed) plan.delete.push({ pod, force: false });
    if (failed.length) plan.failedOn.push(name);
    const running = live.filter((p) => !isFailed(p)).sort((a, b) => created(a) - created(b));
    if (running.length === 0) {
      if (verdict.shouldRun && pods.every((p) => !isActive(p) || isFailed(p))) {
        // A terminating pod still holds the node: its replacement waits until it is gone.
        const until = input.backoffUntil?.get(name) ?? 0;
        if (pods.some((p) => !isActive(p) && !isFailed(p))) unavailable++;
        else if (until > input.now) {
          // Its last pod failed: a pod that fails at once must not be made again in a tight loop.
          plan.requeueAfterMs = Math.min(plan.requeueAfterMs ?? Infinity, until - input.now);
          unavailable++;
        } else {
          plan.create.push(name);
          unavailable++;
        }
      }
      continue;
    }
    const updated = running.filter((p) => hashOf(p) === input.updateHash);
    const old = running.filter((p) => hashOf(p) !== input.updateHash);
    if (verdict.shouldRun) {
      if (running.some(isPodReady)) s.numberReady++;
      if (running.some(available)) s.numberAvailable++;
      else unavailable++;
      if (updated.length) s.updatedNumberScheduled++;
    }
    // More than one daemon pod on a node: keep the newest template's oldest pod, drop the rest
    // (but not while a surge replacement is still coming up).
    const keepNew = updated[0];
    const extraNew = updated.slice(1);
    for (const pod of extraNew) plan.delete.push({ pod, force: false });
    if (old.length && keepNew && available(keepNew)) {
      for (const pod of old) plan.delete.push({ pod, force: false });
    } else if (old.length && !keepNew && old.length > 1) {
      for (const pod of old.slice(1)) plan.delete.push({ pod, force: false });
      rolling.push({ node: name, old: old.slice(0, 1), fresh: undefined });
    } else if (old.length) {
      rolling.push({ node: name, old, fresh: keepNew });
    }
  }

  s.numberUnavailable = Math.max(0, s.desiredNumberScheduled - s.numberAvailable);
  if (input.strategy === 'RollingUpdate' && rolling.length) {
    const desired = s.desiredNumberScheduled;
    const surge = resolveIntOrPercent(input.maxSurge ?? 0, desired, true, '0');
    const maxUnavailable = resolveIntOrPercent(input.maxUnavailable ?? 1, desired, true, '1');
    if (surge > 0) {
      // Surge: a new pod beside each old one, at most `surge` nodes at a time.
      const inFlight = rolling.filter((r) => r.fresh).length;
      let budget = surge - inFlight;
      for (const r of rolling) {
        if (budget <= 0) break;
        if (r.fresh) continue;
        plan.create.push(r.node);
        budget--;
      }
    } else {
      // Old pods that are not available cost nothing to replace: first those, then within the budget.
      let budget = Math.max(0, maxUnavailable - unavailable);
      const candidates = rolling.filter((r) => !r.fresh);
      for (const r of candidates.filter((r) => !r.old.some(available))) {
        for (const pod of r.old) plan.delete.push({ pod, force: false });
      }
      for (const r of candidates.filter((r) => r.old.some(available))) {
        if (budget <= 0) break;
        for (const pod of r.old) plan.delete.push({ pod, force: false });
        budget--;
      }
    }
  }
  return plan;
}

function emptyStatus(generation: number | undefined): DaemonSetStatus {
  return {
    currentNumberScheduled: 0,
    numberMisscheduled: 0,
    desiredNumberScheduled: 0,
    numberReady: 0,
    updatedNumberScheduled: 0,
    numberAvailable: 0,
    numberUnavailable: 0,
    // kubectl rollout status waits while observedGeneration is behind the generation.
    observedGeneration: generation ?? 1,
  };
}

// ---------------------------------------------------------------------------------------------
// ControllerRevisions (what `kubectl rollout history|undo daemonset` reads and applies)

export interface RevisionView {
  name: string;
  hash: string | undefined;
  revision: number;
}

export interface RevisionPlan {
  /** A revision to create for the current template, with this number. */
  create?: number;
  /** The current template's revision is an old one (a rollback): it becomes the newest. */
  renumber?: { name: string; revision: number };
  /** Revisions past revisionHistoryLimit that no live pod uses. */
  delete: string[];
}

/** kube's history rules: one revision per template, the current one numbered highest, old ones pruned. */
export function planRevisions(revisions: readonly RevisionView[], updateHash: string, liveHashes: ReadonlySet<string>, historyLimit: number): RevisionPlan {
  const plan: RevisionPlan = { delete: [] };
  const max = revisions.reduce((m, r) => Math.max(m, r.revision), 0);
  const current = revisions.find((r) => r.hash === updateHash);
  if (!current) plan.create = max + 1;
  else if (current.revision < max) plan.renumber = { name: current.name, revision: max + 1 };
  const old = revisions
    .filter((r) => r !== current && !(r.hash !== undefined && liveHashes.has(r.hash)))
    .sort((a, b) => a.revision - b.revision);
  const excess = old.length - Math.max(0, historyLimit);
  if (excess > 0) plan.delete = old.slice(0, excess).map((r) => r.name);
  return plan;
}

/** Back-off after the n-th failure of a node's daemon pod in a row: 1 s doubling, at most 5 minutes (kube: 1 s to 15 min). */
export function daemonBackoffMs(failures: number): number {
  return Math.min(5 * 60_000, 1000 * 2 ** Math.min(20, Math.max(0, failures - 1)));
}

/** A revision's data, as kube's DaemonSet controller writes it: a patch that puts the template back. */
export function revisionData(template: unknown): Record<string, unknown> {
  const copy = structuredClone((template ?? {}) as Record<string, unknown>);
  return { spec: { template: { ...copy, $patch: 'replace' } } };
}
