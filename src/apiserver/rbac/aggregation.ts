import type { ClusterRole, LabelSelector, PolicyRule } from './types.js';

/**
 * ClusterRole aggregation: a ClusterRole with `aggregationRule.clusterRoleSelectors` has as its
 * rules the union of the rules of every other ClusterRole that one of the selectors matches by
 * label. Kubernetes' aggregation controller keeps `.rules` of such roles up to date; this is the
 * computation it makes, for the controller (and the default policy) to call.
 */

export type LabelMatcher = (labels: Readonly<Record<string, string>>) => boolean;

/**
 * A metav1.LabelSelector as a predicate, or the reason it is invalid. An empty selector (no
 * matchLabels, no matchExpressions) matches everything, as Kubernetes reads it.
 */
export function labelSelectorMatcher(selector: LabelSelector): LabelMatcher | { error: string } {
  // Own keys only: a label map is parsed JSON, and `in` would also see `constructor` and friends.
  const has = (labels: Readonly<Record<string, string>>, key: string): boolean => Object.hasOwn(labels, key);
  const tests: LabelMatcher[] = [];
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) tests.push((labels) => has(labels, key) && labels[key] === value);
  for (const requirement of selector.matchExpressions ?? []) {
    const { key, operator } = requirement;
    const values = requirement.values ?? [];
    switch (operator) {
      case 'In':
      case 'NotIn':
        if (values.length === 0) return { error: `values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty` };
        tests.push(
          operator === 'In'
            ? (labels) => has(labels, key) && values.includes(labels[key]!)
            : (labels) => !has(labels, key) || !values.includes(labels[key]!),
        );
        break;
      case 'Exists':
      case 'DoesNotExist':
        if (values.length > 0) return { error: `values: Invalid value: ${JSON.stringify(values)}: values set must be empty for exists and does not exist` };
        tests.push(operator === 'Exists' ? (labels) => has(labels, key) : (labels) => !has(labels, key));
        break;
      default:
        return { error: `${JSON.stringify(operator)} is not a valid label selector operator` };
    }
  }
  return (labels) => tests.every((test) => test(labels));
}

/** Rules as data: key order and empty-versus-absent lists do not make two rules different. */
function ruleKey(rule: PolicyRule): string {
  const fields: Array<keyof PolicyRule> = ['verbs', 'apiGroups', 'resources', 'resourceNames', 'nonResourceURLs'];
  return JSON.stringify(fields.map((field) => rule[field] ?? []));
}

export interface AggregationResult {
  rules: PolicyRule[];
  /** Invalid selectors (they select nothing). */
  errors: string[];
}

/**
 * The rules `target` should have: each rule of each selected ClusterRole (by name order, the
 * target itself excluded), once. Only `.rules` of the selected roles count, so aggregated roles
 * that select other aggregated roles (admin ⊇ edit ⊇ view) converge as the controller reruns on
 * every change; aggregateAll() runs that to the end.
 */
export function aggregatedRules(target: ClusterRole, clusterRoles: readonly ClusterRole[]): AggregationResult {
  const errors: string[] = [];
  const matchers: LabelMatcher[] = [];
  for (const selector of target.aggregationRule?.clusterRoleSelectors ?? []) {
    const matcher = labelSelectorMatcher(selector);
    if (typeof matcher === 'function') matchers.push(matcher);
    else errors.push(matcher.error);
  }
  const selected = clusterRoles
    .filter((role) => role.metadata.name !== target.metadata.name)
    .filter((role) => matchers.some((matches) => matches(role.metadata.labels ?? {})))
    .sort((a, b) => ((a.metadata.name ?? '') < (b.metadata.name ?? '') ? -1 : 1));
  const seen = new Set<string>();
  const rules: PolicyRule[] = [];
  for (const role of selected) {
    for (const rule of role.rules ?? []) {
      const key = ruleKey(rule);
      if (seen.has(key)) continue;
      seen.add(key);
      rules.push(rule);
    }
  }
  return { rules, errors };
}

export function sameRules(a: readonly PolicyRule[], b: readonly PolicyRule[]): boolean {
  return a.length === b.length && a.every((rule, i) => ruleKey(rule) === ruleKey(b[i]!));
}

/**
 * Every ClusterRole with its aggregated rules filled in, as the controller leaves them once it
 * has nothing more to do: aggregated roles are recomputed one at a time, by name, until a whole
 * pass changes nothing. Roles without an aggregationRule are returned as they are. `converged`
 * is false only if selectors form a loop that never settles (the pass limit stops it).
 */
export function aggregateAll(clusterRoles: readonly ClusterRole[]): { clusterRoles: ClusterRole[]; converged: boolean; errors: string[] } {
  const current = clusterRoles.map((role) => ({ ...role }));
  const aggregated = current
    .filter((role) => (role.aggregationRule?.clusterRoleSelectors ?? []).length > 0)
    .sort((a, b) => ((a.metadata.name ?? '') < (b.metadata.name ?? '') ? -1 : 1));
  const errors = new Set<string>();
  for (let pass = 0; pass <= aggregated.length + 1; pass++) {
    let changed = false;
    for (const role of aggregated) {
      const result = aggregatedRules(role, current);
      for (const error of result.errors) errors.add(`${role.metadata.name}: ${error}`);
      if (!sameRules(role.rules ?? [], result.rules)) {
        role.rules = result.rules;
        changed = true;
      }
    }
    if (!changed) return { clusterRoles: current, converged: true, errors: [...errors] };
  }
  return { clusterRoles: current, converged: false, errors: [...errors] };
}
