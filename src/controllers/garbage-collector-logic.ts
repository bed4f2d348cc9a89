import { FOREGROUND_FINALIZER, ORPHAN_FINALIZER, type PropagationPolicy } from '../apiserver/deletion.js';
import type { KubeObject, OwnerReference } from '../apiserver/objects.js';

/**
 * The garbage collector's decisions, without I/O (as kube-controller-manager's garbagecollector
 * makes them in attemptToDeleteItem, processDeletingDependentsItem and orphanDependents):
 *
 * - a dependent is judged by the state of each of its owners;
 * - an owner being deleted with the `orphan` or `foregroundDeletion` finalizer is judged by its
 *   dependents.
 */

/**
 * An owner as a dependent sees it: `solid` exists (even while being deleted in the background
 * or orphaning: it is not waiting for anyone), `dangling` is gone (or another object took its
 * name), `waiting` is being deleted in the foreground and waits for its dependents to go.
 */
export type OwnerState = 'solid' | 'dangling' | 'waiting';

export function ownerRefsOf(obj: KubeObject): OwnerReference[] {
  const refs = obj.metadata.ownerReferences;
  return Array.isArray(refs) ? refs : [];
}

/** An owner found under the reference's name: its state for the dependent that names it. */
export function ownerStateOf(ref: OwnerReference, found: KubeObject | undefined): OwnerState {
  if (!found || found.metadata.uid !== ref.uid) return 'dangling';
  if (found.metadata.deletionTimestamp && found.metadata.finalizers?.includes(FOREGROUND_FINALIZER)) return 'waiting';
  return 'solid';
}

export type DependentDecision =
  | { action: 'keep' }
  /** Take these owners' references off and keep the object: another owner still holds it. */
  | { action: 'unlink'; ownerUids: string[] }
  | { action: 'delete'; propagationPolicy: PropagationPolicy };

/**
 * What to do with a dependent, given the state of each owner (by uid) and whether it has
 * dependents of its own. Owners missing from `states` count as solid (kinds the collector does
 * not know are not its to judge).
 */
export function decideDependent(dependent: KubeObject, states: ReadonlyMap<string, OwnerState>, hasDependents: boolean): DependentDecision {
  const refs = ownerRefsOf(dependent);
  if (refs.length === 0 || dependent.metadata.deletionTimestamp) return { action: 'keep' };
  const stateOf = (ref: OwnerReference): OwnerState => states.get(ref.uid) ?? 'solid';
  const solid = refs.filter((r) => stateOf(r) === 'solid');
  const gone = refs.filter((r) => stateOf(r) !== 'solid');
  if (solid.length > 0) {
    // Still owned: only the references to owners that are gone or going are dropped.
    return gone.length === 0 ? { action: 'keep' } : { action: 'unlink', ownerUids: gone.map((r) => r.uid) };
  }
  // Every owner is gone or waiting for it. An owner waiting in the foreground passes that on to
  // a dependent with dependents of its own, so the whole tree goes before the owner does.
  if (refs.some((r) => stateOf(r) === 'waiting') && hasDependents) return { action: 'delete', propagationPolicy: 'Foreground' };
  const finalizers = dependent.metadata.finalizers ?? [];
  if (finalizers.includes(ORPHAN_FINALIZER)) return { action: 'delete', propagationPolicy: 'Orphan' };
  if (finalizers.includes(FOREGROUND_FINALIZER)) return { action: 'delete', propagationPolicy: 'Foreground' };
  return { action: 'delete', propagationPolicy: 'Background' };
}

export type OwnerDecision =
  | { action: 'none' }
  /** Orphan: take the owner's reference off these dependents; once there are none, remove the finalizer. */
  | { action: 'orphan'; unlink: KubeObject[]; removeFinalizer: boolean }
  /**
   * Foreground: judge these dependents (not yet being deleted) as dependents of a waiting owner;
   * remove the finalizer once no dependent that blocks the owner's deletion is left, even one
   * still terminating.
   */
  | { action: 'foreground'; judge: KubeObject[]; blocking: KubeObject[]; removeFinalizer: boolean };

/** What to do for an owner being deleted, given every object that names it as an owner. */
export function decideOwner(owner: KubeObject, dependents: readonly KubeObject[]): OwnerDecision {
  const { deletionTimestamp, finalizers = [], uid } = owner.metadata;
  if (!deletionTimestamp) return { action: 'none' };
  const mine = dependents.filter((d) => ownerRefsOf(d).some((r) => r.uid === uid));
  if (finalizers.includes(ORPHAN_FINALIZER)) {
    return { action: 'orphan', unlink: mine, removeFinalizer: mine.length === 0 };
  }
  if (finalizers.includes(FOREGROUND_FINALIZER)) {
    const blocking = mine.filter((d) => ownerRefsOf(d).some((r) => r.uid === uid && r.blockOwnerDeletion === true));
    return {
      action: 'foreground',
      judge: mine.filter((d) => !d.metadata.deletionTimestamp),
      blocking,
      removeFinalizer: blocking.length === 0,
    };
  }
  return { action: 'none' };
}

/** The ownerReferences left once these owners' are taken off (undefined: none left). */
export function withoutOwners(obj: KubeObject, ownerUids: readonly string[]): OwnerReference[] | undefined {
  const left = ownerRefsOf(obj).filter((r) => !ownerUids.includes(r.uid));
  return left.length ? left : undefined;
}

/** The finalizers left once this one is taken off (undefined: none left). */
export function withoutFinalizer(obj: KubeObject, finalizer: string): string[] | undefined {
  const left = (obj.metadata.finalizers ?? []).filter((f) => f !== finalizer);
  return left.length ? left : undefined;
}
