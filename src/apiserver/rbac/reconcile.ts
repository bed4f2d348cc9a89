import { covers } from './escalation.js';
import { AUTOUPDATE_ANNOTATION, type ClusterRole, type ClusterRoleBinding, type LabelSelector, type Subject } from './types.js';

/**
 * Bringing the stored default policy back to defaults.ts at server start, as kube-apiserver
 * does with its bootstrap roles: missing objects are created; existing ones get any missing
 * labels, annotations, rules, aggregation selectors and subjects added, never removed (an
 * administrator's additions stay); an object annotated `rbac.authorization.kubernetes.io/
 * autoupdate: "false"` is left exactly as it is. A binding whose roleRef differs is recreated,
 * because roleRef cannot be changed in place.
 */

export type Reconciliation<T> =
  | { action: 'none' }
  | { action: 'protected' }
  | { action: 'create' | 'update' | 'recreate'; object: T };

function isProtected(object: { metadata: { annotations?: Record<string, string> } }): boolean {
  return object.metadata.annotations?.[AUTOUPDATE_ANNOTATION] === 'false';
}

/** Wanted keys added where missing; the stored value wins where both have one. */
function mergeMap(stored: Record<string, string> | undefined, wanted: Record<string, string> | undefined): { merged: Record<string, string>; changed: boolean } {
  const merged = { ...(wanted ?? {}), ...(stored ?? {}) };
  return { merged, changed: Object.keys(merged).length !== Object.keys(stored ?? {}).length };
}

/** A copy of the stored object with the default's labels and annotations added where missing. */
function withDefaultMetadata<T extends { metadata: { labels?: Record<string, string>; annotations?: Record<string, string> } }>(
  stored: T,
  wanted: T,
): { result: T; changed: boolean } {
  const result = structuredClone(stored);
  const labels = mergeMap(stored.metadata.labels, wanted.metadata.labels);
  const annotations = mergeMap(stored.metadata.annotations, wanted.metadata.annotations);
  result.metadata.labels = labels.merged;
  result.metadata.annotations = annotations.merged;
  return { result, changed: labels.changed || annotations.changed };
}

function sameSelector(a: LabelSelector, b: LabelSelector): boolean {
  const norm = (s: LabelSelector): string =>
    JSON.stringify([Object.entries(s.matchLabels ?? {}).sort(), (s.matchExpressions ?? []).map((e) => [e.key, e.operator, e.values ?? []])]);
  return norm(a) === norm(b);
}

export function reconcileClusterRole(stored: ClusterRole | undefined, wanted: ClusterRole): Reconciliation<ClusterRole> {
  if (!stored) return { action: 'create', object: structuredClone(wanted) };
  const start = withDefaultMetadata(stored, wanted);
  const result = start.result;
  let changed = start.changed;

  const wantedSelectors = wanted.aggregationRule?.clusterRoleSelectors ?? [];
  if (wantedSelectors.length > 0) {
    const selectors = [...(stored.aggregationRule?.clusterRoleSelectors ?? [])];
    for (const selector of wantedSelectors) {
      if (!selectors.some((have) => sameSelector(have, selector))) {
        selectors.push(structuredClone(selector));
        changed = true;
      }
    }
    result.aggregationRule = { clusterRoleSelectors: selectors };
  }
  // Aggregated roles get their rules from the aggregation controller, not from here.
  const bothAggregated = wantedSelectors.length > 0 && (stored.aggregationRule?.clusterRoleSelectors ?? []).length > 0;
  if (!bothAggregated) {
    const have = stored.rules ?? [];
    const missing = (wanted.rules ?? []).filter((rule) => !covers(have, [rule]).covered);
    if (missing.length > 0) {
      result.rules = [...have, ...structuredClone(missing)];
      changed = true;
    }
  }
  if (!changed) return { action: 'none' };
  return isProtected(stored) ? { action: 'protected' } : { action: 'update', object: result };
}

function sameSubject(a: Subject, b: Subject): boolean {
  return a.kind === b.kind && a.name === b.name && (a.namespace ?? '') === (b.namespace ?? '') && (a.apiGroup ?? '') === (b.apiGroup ?? '');
}

export function reconcileClusterRoleBinding(stored: ClusterRoleBinding | undefined, wanted: ClusterRoleBinding): Reconciliation<ClusterRoleBinding> {
  if (!stored) return { action: 'create', object: structuredClone(wanted) };
  const start = withDefaultMetadata(stored, wanted);
  const result = start.result;
  let changed = start.changed;
  const subjects = [...(stored.subjects ?? [])];
  for (const subject of wanted.subjects ?? []) {
    if (!subjects.some((have) => sameSubject(have, subject))) {
      subjects.push({ ...subject });
      changed = true;
    }
  }
  result.subjects = subjects;
  const ref = stored.roleRef;
  const refChanged = ref.apiGroup !== wanted.roleRef.apiGroup || ref.kind !== wanted.roleRef.kind || ref.name !== wanted.roleRef.name;
  if (refChanged) {
    result.roleRef = { ...wanted.roleRef };
    changed = true;
  }
  if (!changed) return { action: 'none' };
  if (isProtected(stored)) return { action: 'protected' };
  if (refChanged) {
    // A new object: the stored identity (uid, resourceVersion) goes with the old one.
    const { uid: _uid, resourceVersion: _rv, creationTimestamp: _created, ...metadata } = result.metadata;
    return { action: 'recreate', object: { ...result, metadata } };
  }
  return { action: 'update', object: result };
}
