import type { KubeObject } from '../apiserver/objects.js';
import { controllerOf, isNodeReady } from '../node-protocol/pods.js';
import type { Toleration } from '../node-protocol/taints.js';
import { effectiveRuntimeClass, nodeRuntimeHandlerNames, podRuntimeClassName } from '../node-protocol/runtime-classes.js';
import { type NodeTaint, nodeSpec, podSpec, podStatus } from './kube-types.js';
import { insufficientResources, nodeAllocatable } from './resource-fit.js';

/**
 * The scheduler's decision, pure: which node a pod goes to, or why none fits, worded as
 * kube-scheduler words it so that `kubectl describe pod` reads the same as on Kubernetes.
 */

export type ScheduleResult = { node: string } | { reasons: string };

/** Kubernetes' toleration matching (k8s.io/api/core/v1 Toleration.ToleratesTaint). */
export function toleratesTaint(toleration: Toleration, taint: NodeTaint): boolean {
  if (toleration.effect && toleration.effect !== taint.effect) return false;
  if (toleration.key && toleration.key !== taint.key) return false;
  const operator = toleration.operator || 'Equal';
  if (operator === 'Exists') return true;
  if (operator !== 'Equal') return false;
  // An empty key means "every key", which only makes sense with Exists.
  if (!toleration.key) return false;
  return (toleration.value ?? '') === (taint.value ?? '');
}

/** The first NoSchedule/NoExecute taint no toleration covers, as kube-scheduler reports it. */
export function firstUntoleratedTaint(taints: readonly NodeTaint[], tolerations: readonly Toleration[]): NodeTaint | undefined {
  return taints.find(
    (taint) =>
      (taint.effect === 'NoSchedule' || taint.effect === 'NoExecute') && !tolerations.some((t) => toleratesTaint(t, taint)),
  );
}

export function isPodTerminated(pod: KubeObject): boolean {
  const phase = podStatus(pod).phase;
  return phase === 'Succeeded' || phase === 'Failed';
}

export function podNodeName(pod: KubeObject): string | undefined {
  return podSpec(pod).nodeName || undefined;
}

/**
 * Why a node cannot take the pod, in kube-scheduler's words, by the checks that do not depend on
 * what else runs there; undefined when it can.
 */
export function nodeRejection(pod: KubeObject, node: KubeObject): string | undefined {
  const spec = podSpec(pod);
  const onNode = nodeSpec(node);
  // Filter order follows kube-scheduler's default profile: NodeUnschedulable, TaintToleration,
  // then readiness (older releases' CheckNodeCondition), then NodeAffinity (nodeSelector).
  if (onNode.unschedulable === true) return 'node(s) were unschedulable';
  const taint = firstUntoleratedTaint(onNode.taints ?? [], spec.tolerations ?? []);
  if (taint) return `node(s) had untolerated taint {${taint.key}: ${taint.value ?? ''}}`;
  if (!isNodeReady(node)) return 'node(s) were not ready';
  const labels = node.metadata.labels ?? {};
  for (const [key, value] of Object.entries(spec.nodeSelector ?? {})) {
    if (labels[key] !== value) return "node(s) didn't match Pod's node affinity/selector";
  }
  return undefined;
}

/**
 * Every reason a node cannot take the pod (empty when it can): the first failing check of
 * nodeRejection(), else the runtime handler its class needs (`handler`), else each resource the
 * pods already there (`podsOnNode`, finished ones left out) leave too little of.
 */
export function nodeRejections(pod: KubeObject, node: KubeObject, handler: string, podsOnNode: readonly KubeObject[]): string[] {
  const why = nodeRejection(pod, node);
  if (why) return [why];
  if (!nodeRuntimeHandlerNames(node).includes(handler)) return [`node(s) didn't have the runtime handler ${handler}`];
  return insufficientResources(pod, nodeAllocatable(node), podsOnNode);
}

/** The handler a pod's class needs when the caller has not looked the class up: its built-in's. */
function builtInHandler(pod: KubeObject): string {
  const name = podRuntimeClassName(pod);
  const handler = effectiveRuntimeClass(name, undefined)?.handler;
  return typeof handler === 'string' ? handler : name;
}

/** kube-scheduler's FitError message: counts per reason, sorted as Go's sort.Strings sorts them. */
export function failureMessage(totalNodes: number, rejections: readonly string[]): string {
  if (totalNodes === 0) return 'no nodes available to schedule pods';
  const counts = new Map<string, number>();
  for (const reason of rejections) counts.set(reason, (counts.get(reason) ?? 0) + 1);
  const parts = [...counts].map(([reason, count]) => `${count} ${reason}`);
  parts.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return `0/${totalNodes} nodes are available: ${parts.join(', ')}.`;
}

/**
 * Pick a node: feasible ones only (nodeRejections); then the fewest pods of the same controller (replicas spread),
 * the fewest pods overall, and the name, so the choice is deterministic.
 * `podsByNode` holds the pods on each node (terminated ones are skipped here).
 */
export function chooseNode(
  pod: KubeObject,
  nodes: readonly KubeObject[],
  podsByNode: ReadonlyMap<string, readonly KubeObject[]>,
  /** The runtime handler the pod's class needs (the scheduler reads the class); its built-in's when absent. */
  handler: string = builtInHandler(pod),
): ScheduleResult {
  const rejections: string[] = [];
  const feasible: KubeObject[] = [];
  for (const node of nodes) {
    const running = (podsByNode.get(node.metadata.name!) ?? []).filter((p) => !isPodTerminated(p));
    const why = nodeRejections(pod, node, handler, running);
    if (why.length) rejections.push(...why);
    else feasible.push(node);
  }
  if (feasible.length === 0) return { reasons: failureMessage(nodes.length, rejections) };
  const ownerUid = controllerOf(pod)?.uid;
  const score = (node: KubeObject): [number, number] => {
    const pods = (podsByNode.get(node.metadata.name!) ?? []).filter((p) => !isPodTerminated(p));
    // A terminating sibling is on its way out: it should not push its replacement elsewhere.
    const siblings = ownerUid
      ? pods.filter((p) => !p.metadata.deletionTimestamp && controllerOf(p)?.uid === ownerUid).length
      : 0;
    return [siblings, pods.length];
  };
  const ranked = feasible.map((node) => ({ name: node.metadata.name!, score: score(node) }));
  ranked.sort((a, b) => a.score[0] - b.score[0] || a.score[1] - b.score[1] || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { node: ranked[0]!.name };
}
