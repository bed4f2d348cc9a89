import { errors, type StatusCause } from './errors.js';
import type { JsonObject } from './json.js';

/**
 * How a DELETE treats an object's dependents, as kube-apiserver's generic registry decides it
 * (store.go: shouldOrphanDependents, shouldDeleteDependents, deletionFinalizersForGarbageCollection).
 * The API only records the choice, as a finalizer on the owner; the garbage collector
 * (src/controllers/garbage-collector.ts) carries it out and then removes the finalizer.
 *
 * - Background (the default): the owner goes at once; the collector deletes the dependents after.
 * - Orphan: the owner gets the `orphan` finalizer; the collector removes the owner's
 *   ownerReference from every dependent, then the finalizer, and the owner is gone.
 * - Foreground: the owner gets the `foregroundDeletion` finalizer and stays (with its
 *   deletionTimestamp) while the collector deletes the dependents; it goes once no dependent
 *   that blocks it (`blockOwnerDeletion: true`) is left.
 */

export const ORPHAN_FINALIZER = 'orphan';
export const FOREGROUND_FINALIZER = 'foregroundDeletion';

export type PropagationPolicy = 'Orphan' | 'Background' | 'Foreground';
const POLICIES: readonly PropagationPolicy[] = ['Foreground', 'Background', 'Orphan'];

/** What a DELETE asked for its dependents: the deprecated orphanDependents, or propagationPolicy. */
export interface DependentsChoice {
  propagationPolicy?: PropagationPolicy;
  /** Deprecated in Kubernetes, still honoured: true is Orphan, false is Background (and a 202). */
  orphanDependents?: boolean;
}

/**
 * The dependents choice in a DeleteOptions body, checked as ValidateDeleteOptions does: an unknown
 * policy, or both fields at once, is `422 Invalid` (DeleteOptions.meta.k8s.io).
 */
export function dependentsChoiceOf(options: JsonObject): DependentsChoice {
  const causes: StatusCause[] = [];
  const policy = options.propagationPolicy;
  const orphan = options.orphanDependents;
  const hasPolicy = policy !== undefined && policy !== null;
  const hasOrphan = orphan !== undefined && orphan !== null;
  if (hasOrphan && typeof orphan !== 'boolean') {
    throw errors.badRequest(`orphanDependents must be a boolean (got ${JSON.stringify(orphan)})`);
  }
  if (hasOrphan && hasPolicy) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(policy)}: orphanDependents and deletionPropagation cannot be both set`,
      field: 'propagationPolicy',
    });
  }
  if (hasPolicy && !POLICIES.includes(policy as PropagationPolicy)) {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(policy)}: supported values: ${[...POLICIES, 'nil'].map((p) => `"${p}"`).join(', ')}`,
      field: 'propagationPolicy',
    });
  }
  if (causes.length) throw errors.invalid('DeleteOptions', '', 'meta.k8s.io', causes);
  return {
    ...(hasPolicy ? { propagationPolicy: policy as PropagationPolicy } : {}),
    ...(hasOrphan ? { orphanDependents: orphan as boolean } : {}),
  };
}

/** Orphan or not: an explicit choice wins, then a finalizer already on the object; never by default. */
function shouldOrphan(finalizers: readonly string[], choice: DependentsChoice): boolean {
  if (choice.orphanDependents !== undefined) return choice.orphanDependents;
  if (choice.propagationPolicy !== undefined) return choice.propagationPolicy === 'Orphan';
  for (const f of finalizers) {
    if (f === ORPHAN_FINALIZER) return true;
    if (f === FOREGROUND_FINALIZER) return false;
  }
  return false;
}

function shouldDeleteInForeground(finalizers: readonly string[], choice: DependentsChoice): boolean {
  if (choice.orphanDependents !== undefined) return false;
  if (choice.propagationPolicy !== undefined) return choice.propagationPolicy === 'Foreground';
  return finalizers.includes(FOREGROUND_FINALIZER);
}

/**
 * The object's finalizers after this DELETE, or undefined when they stay as they are: both garbage
 * collection finalizers are taken off, and the one the choice (or the finalizers already there)
 * calls for is put back at the end. So a Background DELETE of an object waiting to be orphaned
 * takes the orphan finalizer off, and the object goes.
 */
export function finalizersForDeletion(current: readonly string[] | undefined, choice: DependentsChoice): string[] | undefined {
  const existing = current ?? [];
  const next = existing.filter((f) => f !== ORPHAN_FINALIZER && f !== FOREGROUND_FINALIZER);
  if (shouldOrphan(existing, choice)) next.push(ORPHAN_FINALIZER);
  if (shouldDeleteInForeground(existing, choice)) next.push(FOREGROUND_FINALIZER);
  const same = new Set(existing).size === new Set(next).size && next.every((f) => existing.includes(f));
  return same ? undefined : next;
}

