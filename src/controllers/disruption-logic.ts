import { type KubeObject, kubeTime } from '../apiserver/objects.js';
import { labelSelectorFromObject, type LabelSelectorObject, matchesLabels } from '../apiserver/selectors.js';
import { isPodRunningAndReady } from '../node-protocol/pods.js';
import type { Condition, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus } from './kube-types.js';

/**
 * The status of a PodDisruptionBudget as a pure function of the budget, the pods it selects and
 * the scale of their controllers, following kube-controller-manager's disruption controller
 * (pkg/controller/disruption, 1.32). The eviction subresource trusts this status, so every rule
 * here leans towards fewer allowed disruptions.
 */

/** How long an eviction's entry in status.disruptedPods keeps its pod out of the healthy count. */
export const DISRUPTED_POD_TIMEOUT_MS = 2 * 60_000;

export type IntOrPercent = number | string;

/** policy/v1: an absent selector selects no pod, `{}` every pod of the namespace. */
export type DisruptionBudgetSpec = PodDisruptionBudgetSpec;

/**
 * The status this controller writes: every field present. `disruptedPods` lists the pods an
 * eviction has just passed, by name, with when: not healthy until seen terminating. Conditions
 * of other types, if a stored status had any, are kept as they were.
 */
export type DisruptionBudgetStatus = Required<
  Pick<PodDisruptionBudgetStatus, 'observedGeneration' | 'disruptionsAllowed' | 'currentHealthy' | 'desiredHealthy' | 'expectedPods' | 'conditions'>
> &
  Pick<PodDisruptionBudgetStatus, 'disruptedPods'>;

/** The scale of a pod's controlling workload, keyed by that workload's uid (a Deployment for its ReplicaSets' pods). */
export interface ControllerScale {
  uid: string;
  replicas: number;
}

export interface BudgetInput {
  generation: number;
  spec: DisruptionBudgetSpec;
  /** The budget's selected pods that are not terminating. */
  pods: readonly KubeObject[];
  /** The controller scale of a pod, or undefined when its controller is not a known workload. */
  controllerScale(pod: KubeObject): ControllerScale | undefined;
  /** The status as stored. */
  previous?: PodDisruptionBudgetStatus;
  now: number;
}

export interface BudgetResult {
  status: DisruptionBudgetStatus;
  /** When an entry of disruptedPods expires, so the budget should be computed again (ms epoch). */
  recheckAt?: number;
}

export class BudgetSpecError extends Error {
  override name = 'BudgetSpecError';
}

/** Whether a budget's selector picks a pod's labels (policy/v1 semantics: nil none, empty all). */
export function budgetSelects(selector: LabelSelectorObject | null | undefined, labels: Record<string, string> | undefined): boolean {
  if (selector === undefined || selector === null) return false;
  return matchesLabels(labelSelectorFromObject(selector), labels);
}

/**
 * intstr's GetScaledValueFromIntOrPercent: an integer as is, `N%` of `total` rounded up or down.
 * Anything else is a spec error the controller reports in the condition.
 */
export function scaledValue(value: IntOrPercent, total: number, roundUp: boolean, field: string): number {
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0) throw new BudgetSpecError(`${field} must be a non-negative integer or a percentage (got ${value})`);
    return value;
  }
  const match = /^(\d+)%$/.exec(value);
  if (!match) {
    throw new BudgetSpecError(`invalid value for IntOrString: invalid type: string is not a percentage (${field}: "${value}")`);
  }
  const scaled = (Number(match[1]) * total) / 100;
  return roundUp ? Math.ceil(scaled) : Math.floor(scaled);
}

/**
 * The expected number of pods as the disruption controller's getExpectedScale counts it: the
 * summed spec.replicas of the pods' controllers, each counted once. A pod whose controller is
 * unknown counts as itself, so a budget over bare pods still protects them.
 */
export function expectedScale(pods: readonly KubeObject[], controllerScale: (pod: KubeObject) => ControllerScale | undefined): number {
  const scales = new Map<string, number>();
  let unmanaged = 0;
  for (const pod of pods) {
    const scale = controllerScale(pod);
    if (scale) scales.set(scale.uid, scale.replicas);
    else unmanaged++;
  }
  let total = unmanaged;
  for (const replicas of scales.values()) total += replicas;
  return total;
}

/** expectedPods and desiredHealthy from the spec (getExpectedPodCount). */
export function expectedAndDesired(
  spec: DisruptionBudgetSpec,
  pods: readonly KubeObject[],
  controllerScale: (pod: KubeObject) => ControllerScale | undefined,
): { expectedPods: number; desiredHealthy: number } {
  if (spec.maxUnavailable !== undefined && spec.maxUnavailable !== null) {
    const expectedPods = expectedScale(pods, controllerScale);
    const maxUnavailable = scaledValue(spec.maxUnavailable, expectedPods, true, 'spec.maxUnavailable');
    return { expectedPods, desiredHealthy: Math.max(0, expectedPods - maxUnavailable) };
  }
  if (spec.minAvailable !== undefined && spec.minAvailable !== null) {
    if (typeof spec.minAvailable === 'number') {
      return { expectedPods: pods.length, desiredHealthy: scaledValue(spec.minAvailable, pods.length, true, 'spec.minAvailable') };
    }
    const expectedPods = expectedScale(pods, controllerScale);
    return { expectedPods, desiredHealthy: scaledValue(spec.minAvailable, expectedPods, true, 'spec.minAvailable') };
  }
  // Neither field: nothing is expected, so nothing may be disrupted (as Kubernetes computes it).
  return { expectedPods: 0, desiredHealthy: 0 };
}

/**
 * The DisruptionAllowed condition (pdbhelper.UpdateDisruptionAllowedCondition): the transition
 * time moves only when the status flips.
 */
export function disruptionAllowedCondition(
  previous: readonly Condition[] | undefined,
  allowed: boolean,
  observedGeneration: number,
  nowIso: string,
  reason: string = allowed ? 'SufficientPods' : 'InsufficientPods',
  message = '',
): Condition[] {
  const status = allowed ? 'True' : 'False';
  const others = (previous ?? []).filter((c) => c.type !== 'DisruptionAllowed');
  const old = (previous ?? []).find((c) => c.type === 'DisruptionAllowed');
  const lastTransitionTime = old && old.status === status && old.lastTransitionTime ? old.lastTransitionTime : nowIso;
  return [...others, { type: 'DisruptionAllowed', status, reason, message, observedGeneration, lastTransitionTime }];
}

/** The whole status the controller writes for one budget. */
export function computeBudgetStatus(input: BudgetInput): BudgetResult {
  const { generation, spec, pods, previous, now } = input;
  const nowIso = kubeTime(now);

  // Evictions the controller has not seen complete yet: those pods are as good as gone.
  const disruptedPods: Record<string, string> = {};
  let recheckAt: number | undefined;
  for (const pod of pods) {
    const name = pod.metadata.name ?? '';
    const since = previous?.disruptedPods?.[name];
    if (since === undefined) continue;
    const expires = Date.parse(since) + DISRUPTED_POD_TIMEOUT_MS;
    if (!Number.isFinite(expires) || expires <= now) continue;
    disruptedPods[name] = since;
    recheckAt = recheckAt === undefined ? expires : Math.min(recheckAt, expires);
  }
  const currentHealthy = pods.filter((p) => !(p.metadata.name! in disruptedPods) && isPodRunningAndReady(p)).length;

  let expectedPods: number;
  let desiredHealthy: number;
  try {
    ({ expectedPods, desiredHealthy } = expectedAndDesired(spec, pods, input.controllerScale));
  } catch (error) {
    if (!(error instanceof BudgetSpecError)) throw error;
    // Fail safe, as Kubernetes does: a budget it cannot understand allows nothing.
    return {
      status: {
        observedGeneration: generation,
        ...(Object.keys(disruptedPods).length ? { disruptedPods } : {}),
        disruptionsAllowed: 0,
        currentHealthy,
        desiredHealthy: previous?.desiredHealthy ?? 0,
        expectedPods: previous?.expectedPods ?? 0,
        conditions: disruptionAllowedCondition(previous?.conditions, false, generation, nowIso, 'SyncFailed', error.message),
      },
    };
  }
  // A budget that expects no pod allows nothing, so the first pods it sees are safe before the
  // controller has counted them.
  const disruptionsAllowed = expectedPods <= 0 ? 0 : Math.max(0, currentHealthy - desiredHealthy);
  return {
    status: {
      observedGeneration: generation,
      ...(Object.keys(disruptedPods).length ? { disruptedPods } : {}),
      disruptionsAllowed,
      currentHealthy,
      desiredHealthy,
      expectedPods,
      conditions: disruptionAllowedCondition(previous?.conditions, disruptionsAllowed > 0, generation, nowIso),
    },
    ...(recheckAt !== undefined ? { recheckAt } : {}),
  };
}
