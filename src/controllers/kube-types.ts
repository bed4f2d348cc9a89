import type {
  V1Condition,
  V1DeploymentCondition,
  V1DeploymentSpec,
  V1DeploymentStatus,
  V1LeaseSpec,
  V1NamespaceStatus,
  V1NodeCondition,
  V1NodeSpec,
  V1NodeStatus,
  V1ObjectReference,
  V1PodDisruptionBudgetSpec,
  V1PodDisruptionBudgetStatus,
  V1PodSpec,
  V1PodStatus,
  V1PodTemplateSpec,
  V1ReplicaSetSpec,
  V1ReplicaSetStatus,
  V1StatefulSetSpec,
  V1StatefulSetStatus,
  V1Status,
  V1Taint,
} from '@kubernetes/client-node';
import type { KubeObject } from '../apiserver/objects.js';
import type { LabelSelectorObject } from '../apiserver/selectors.js';

/**
 * Typed views of the spec and status of stored objects, from @kubernetes/client-node's model
 * types (type-only: nothing of that package is loaded at run time). Objects are kept as plain
 * JSON, so every date is the RFC 3339 string it is on the wire, not the Date the package's
 * deserializer would make: `Wire<T>` says so. A view is a reading aid, not a validation: an object
 * written by a client may lack any field, so every field is read as possibly absent. A map
 * (labels, annotations, nodeSelector) is read as a map: the keys it has are there.
 */
export type Wire<T> = T extends Date
  ? string
  : T extends readonly (infer U)[]
    ? Wire<U>[]
    : T extends object
      ? string extends keyof T
        ? { [K in keyof T]: Wire<T[K]> }
        : { [K in keyof T]?: Wire<T[K]> }
      : T;

/**
 * A workload's label selector is read by apiserver/selectors.ts, in its own type (the one the
 * API server validated it against).
 */
type Selecting<T> = Omit<T, 'selector'> & { selector?: LabelSelectorObject };

export type NodeSpec = Wire<V1NodeSpec>;
export type NodeStatus = Wire<V1NodeStatus>;
export type NodeCondition = Wire<V1NodeCondition>;
export type NodeTaint = Wire<V1Taint>;
export type PodSpec = Wire<V1PodSpec>;
export type PodStatus = Wire<V1PodStatus>;
export type PodTemplateSpec = Wire<V1PodTemplateSpec>;
export type LeaseSpec = Wire<V1LeaseSpec>;
export type NamespaceStatus = Wire<V1NamespaceStatus>;
export type ObjectReference = Wire<V1ObjectReference>;
export type DeploymentSpec = Selecting<Wire<V1DeploymentSpec>>;
export type DeploymentStatus = Wire<V1DeploymentStatus>;
export type DeploymentCondition = Wire<V1DeploymentCondition>;
export type ReplicaSetSpec = Selecting<Wire<V1ReplicaSetSpec>>;
export type ReplicaSetStatus = Wire<V1ReplicaSetStatus>;
export type StatefulSetSpec = Selecting<Wire<V1StatefulSetSpec>>;
export type StatefulSetStatus = Wire<V1StatefulSetStatus>;
/** policy/v1 gives a budget's `null` selector a meaning: it selects no pod (and `{}` every pod). */
export type PodDisruptionBudgetSpec = Omit<Wire<V1PodDisruptionBudgetSpec>, 'selector'> & { selector?: LabelSelectorObject | null };
export type PodDisruptionBudgetStatus = Wire<V1PodDisruptionBudgetStatus>;
/** metav1.Condition (a budget's DisruptionAllowed). */
export type Condition = Wire<V1Condition>;
/** The body of an error answer (metav1.Status). */
export type Status = Wire<V1Status>;

function view<T>(value: unknown): T {
  return (typeof value === 'object' && value !== null ? value : {}) as T;
}

export const nodeSpec = (node: KubeObject | undefined): NodeSpec => view<NodeSpec>(node?.spec);
export const nodeStatus = (node: KubeObject | undefined): NodeStatus => view<NodeStatus>(node?.status);
export const podSpec = (pod: KubeObject | undefined): PodSpec => view<PodSpec>(pod?.spec);
export const podStatus = (pod: KubeObject | undefined): PodStatus => view<PodStatus>(pod?.status);
export const leaseSpec = (lease: KubeObject | undefined): LeaseSpec => view<LeaseSpec>(lease?.spec);
export const namespaceStatus = (ns: KubeObject | undefined): NamespaceStatus => view<NamespaceStatus>(ns?.status);
export const deploymentSpec = (d: KubeObject | undefined): DeploymentSpec => view<DeploymentSpec>(d?.spec);
/** As stored (workload-logic.ts computes the status the controller writes). */
export const storedDeploymentStatus = (d: KubeObject | undefined): DeploymentStatus => view<DeploymentStatus>(d?.status);
export const replicaSetSpec = (rs: KubeObject | undefined): ReplicaSetSpec => view<ReplicaSetSpec>(rs?.spec);
export const replicaSetStatus = (rs: KubeObject | undefined): ReplicaSetStatus => view<ReplicaSetStatus>(rs?.status);
export const statefulSetSpec = (sts: KubeObject | undefined): StatefulSetSpec => view<StatefulSetSpec>(sts?.spec);
/** As stored (workload-logic.ts computes the status the controller writes). */
export const storedStatefulSetStatus = (sts: KubeObject | undefined): StatefulSetStatus => view<StatefulSetStatus>(sts?.status);
export const budgetSpec = (pdb: KubeObject | undefined): PodDisruptionBudgetSpec => view<PodDisruptionBudgetSpec>(pdb?.spec);
export const budgetStatus = (pdb: KubeObject | undefined): PodDisruptionBudgetStatus => view<PodDisruptionBudgetStatus>(pdb?.status);

/** A ServiceAccount's `secrets` (the token Secrets it lists), each entry possibly malformed. */
export function serviceAccountSecrets(sa: KubeObject | undefined): (ObjectReference | null | undefined)[] {
  return Array.isArray(sa?.secrets) ? (sa.secrets as (ObjectReference | null | undefined)[]) : [];
}

/** The node's condition of `type` (Ready, ClockSkew …), if it has one. */
export function nodeCondition(node: KubeObject | undefined, type: string): NodeCondition | undefined {
  const conditions = nodeStatus(node).conditions;
  return Array.isArray(conditions) ? conditions.find((c) => c?.type === type) : undefined;
}
