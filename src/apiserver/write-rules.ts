import { apiVersionOf, type ResourceDefinition } from './definition.js';
import { finalizersForDeletion } from './deletion.js';
import { errors } from './errors.js';
import { jsonEqual } from './json.js';
import { type KubeObject, kubeTime } from './objects.js';
import { recordUpdateOf } from './patch/tracking.js';
import type { DeleteOptions, Preconditions, UpdateOptions } from './storage-types.js';

/**
 * The generic rules of writes, as kube-apiserver's generic registry has them: what an update may
 * change (server-owned metadata, status through its own path, generation), preconditions, and
 * how a delete proceeds (grace periods, finalizers). The ObjectStore applies them to every write.
 */

/** Everything but metadata and status: a change there bumps metadata.generation. */
const NOT_SPEC: ReadonlySet<string> = new Set(['metadata', 'status']);

/** Everything a client may not change through an update. */
function carryServerFields(next: KubeObject, current: KubeObject, markDeleted: UpdateOptions['markDeleted']): void {
  const meta = next.metadata;
  meta.uid = current.metadata.uid;
  meta.creationTimestamp = current.metadata.creationTimestamp;
  meta.name = current.metadata.name;
  if (current.metadata.namespace !== undefined) meta.namespace = current.metadata.namespace;
  else delete meta.namespace;
  if (markDeleted) {
    meta.deletionTimestamp = markDeleted.deletionTimestamp;
    meta.deletionGracePeriodSeconds = markDeleted.gracePeriodSeconds;
  } else if (current.metadata.deletionTimestamp) {
    meta.deletionTimestamp = current.metadata.deletionTimestamp;
    if (current.metadata.deletionGracePeriodSeconds !== undefined) {
      meta.deletionGracePeriodSeconds = current.metadata.deletionGracePeriodSeconds;
    } else {
      delete meta.deletionGracePeriodSeconds;
    }
  } else {
    delete meta.deletionTimestamp;
    delete meta.deletionGracePeriodSeconds;
  }
  if (current.metadata.generation !== undefined) meta.generation = current.metadata.generation;
  delete meta.resourceVersion;
  // managedFields: recordUpdateOf() sets them at the end (left here, a retry still sees what was sent).
  delete meta.selfLink;
  delete meta.generateName;
  if (current.metadata.generateName) meta.generateName = current.metadata.generateName;
}

/**
 * The object an update stores, from the stored one and the caller's proposal: a status write
 * changes status only, any other write keeps the stored status (kinds with a status
 * subresource), server-owned metadata is carried over, defaults are applied, and a change beyond
 * metadata and status bumps the generation.
 */
export function prepareForUpdate(
  def: ResourceDefinition,
  current: KubeObject,
  proposed: KubeObject,
  options: UpdateOptions,
): KubeObject {
  // What the write says of managedFields, before the rules below replace the metadata.
  const sentManagedFields: unknown = proposed.metadata?.managedFields;
  let next: KubeObject;
  if (options.subresource === 'ephemeralcontainers') {
    // Only spec.ephemeralContainers comes from the caller; the kind's validateUpdate judges it.
    next = withSpecFieldFrom(current, proposed, 'ephemeralContainers');
  } else if (options.subresource === 'status') {
    next = { ...current, metadata: { ...current.metadata } };
    if (proposed.status === undefined) delete next.status;
    else next.status = proposed.status;
  } else if (options.subresource === 'finalize') {
    // Only spec.finalizers comes from the caller (a namespace's /finalize, as Kubernetes').
    next = withSpecFieldFrom(current, proposed, 'finalizers');
  } else {
    next = proposed;
    if (!next.metadata || typeof next.metadata !== 'object') next.metadata = {};
    if (def.subresources.includes('status')) {
      if (current.status === undefined) delete next.status;
      else next.status = current.status;
    }
  }
  next.apiVersion = apiVersionOf(def);
  next.kind = def.kind;
  carryServerFields(next, current, options.markDeleted);
  // The kind's update rules would undo what a finalize write is for (a namespace keeps its spec.finalizers on any other update).
  if (options.subresource !== 'status' && options.subresource !== 'finalize') def.prepareForUpdate?.(next, current);
  if (options.subresource !== 'status') def.applyDefaults?.(next);
  if (options.subresource !== 'status' && !jsonEqual(next, current, NOT_SPEC)) {
    next.metadata.generation = (current.metadata.generation ?? 1) + 1;
  }
  recordUpdateOf(def, current, next, sentManagedFields, options.fieldManager, options.subresource);
  return next;
}

/** The stored object with one field of its spec as the proposal has it: a subresource that writes that field alone. */
function withSpecFieldFrom(current: KubeObject, proposed: KubeObject, field: string): KubeObject {
  const next = structuredClone(current);
  const proposedSpec = proposed.spec as Record<string, unknown> | undefined;
  const spec = (next.spec ?? {}) as Record<string, unknown>;
  if (proposedSpec?.[field] === undefined) delete spec[field];
  else spec[field] = proposedSpec[field];
  next.spec = spec;
  return next;
}

/** Whether two versions hold the same data (key order and resourceVersion aside). */
export function sameContent(current: KubeObject, next: KubeObject): boolean {
  const { resourceVersion: _a, ...currentMeta } = current.metadata;
  const { resourceVersion: _b, ...nextMeta } = next.metadata;
  return jsonEqual(currentMeta, nextMeta) && jsonEqual(current, next, new Set(['metadata']));
}

/** Preconditions (DeleteOptions', or a uid sent in a body) against the stored object: a mismatch is a 409. */
export function checkPreconditions(
  def: Pick<ResourceDefinition, 'group' | 'plural'>,
  name: string,
  current: KubeObject,
  pre: Preconditions | undefined,
): void {
  if (pre?.uid && pre.uid !== current.metadata.uid) {
    throw errors.conflict(def, name, `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`);
  }
  if (pre?.resourceVersion && pre.resourceVersion !== current.metadata.resourceVersion) {
    throw errors.conflict(
      def,
      name,
      `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`,
    );
  }
}

/**
 * An object asked to go away with no finalizer, no grace period and no cleanup of its kind left
 * is removed by the write that gets it there.
 */
export function shouldDeleteOnWrite(def: Pick<ResourceDefinition, 'awaitsCleanup'>, obj: KubeObject): boolean {
  const meta = obj.metadata;
  return Boolean(meta.deletionTimestamp) && !meta.finalizers?.length && !meta.deletionGracePeriodSeconds && !def.awaitsCleanup?.(obj);
}

/**
 * How a delete proceeds: `remove` now; `pending` leaves an object already going away as it is;
 * `mark` writes a deletionTimestamp (and, when set, new finalizers) and the object stays until
 * its finalizers and grace period are done.
 */
export type DeletionPlan =
  | { action: 'remove' }
  | { action: 'pending' }
  | { action: 'mark'; mark: NonNullable<UpdateOptions['markDeleted']>; finalizers?: string[] };

/**
 * How a delete proceeds, as kube-apiserver's BeforeDelete and updateForGracefulDeletionAndFinalizers
 * decide: graceful kinds (pods) get a grace period; the garbage collection finalizers follow
 * the DELETE's propagation choice (kinds whose dependents Drover collects); an object with
 * finalizers is only marked; anything else is removed now.
 */
export function deletionPlan(def: ResourceDefinition, current: KubeObject, options: DeleteOptions): DeletionPlan {
  const meta = current.metadata;
  const finalizers = def.garbageCollected ? finalizersForDeletion(meta.finalizers, options) : undefined;
  const hasFinalizers = Boolean((finalizers ?? meta.finalizers)?.length);
  const withFinalizers = finalizers ? { finalizers } : {};
  if (meta.deletionTimestamp) {
    const granted = meta.deletionGracePeriodSeconds;
    if (!granted) {
      // Waiting for finalizers only: a DELETE may still change the collection finalizers
      // (Background after Orphan lets the object go), nothing else.
      if (!finalizers) return { action: 'pending' };
      return { action: 'mark', mark: { deletionTimestamp: meta.deletionTimestamp, gracePeriodSeconds: 0 }, ...withFinalizers };
    }
    // Being stopped gracefully: a caller may only shorten the grace period (the agent's final
    // delete, or kubectl delete --force --grace-period=0); finalizers stay as they are.
    const requested = options.gracePeriodSeconds;
    if (!def.deletionGracePeriod || requested === undefined) return { action: 'pending' };
    const period = Math.max(requested, 0);
    if (period >= granted) return { action: 'pending' };
    if (period === 0 && !meta.finalizers?.length) return { action: 'remove' };
    const shifted = Date.parse(meta.deletionTimestamp) + (period - granted) * 1000;
    return { action: 'mark', mark: { deletionTimestamp: kubeTime(shifted), gracePeriodSeconds: period } };
  }
  const period = def.deletionGracePeriod ? def.deletionGracePeriod(current, options.gracePeriodSeconds) : 0;
  if (period > 0) {
    return { action: 'mark', mark: { deletionTimestamp: kubeTime(Date.now() + period * 1000), gracePeriodSeconds: period }, ...withFinalizers };
  }
  if (hasFinalizers) return { action: 'mark', mark: { deletionTimestamp: kubeTime(), gracePeriodSeconds: 0 }, ...withFinalizers };
  return { action: 'remove' };
}
