import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { checkPreconditions, shouldDeleteOnWrite } from '../write-rules.js';
import { isJsonObject } from '../json.js';
import { getString, type KubeObject, kubeTime } from '../objects.js';
import { ApiError, type StatusCause } from '../errors.js';
import { qualifiedNameProblem } from '../validation.js';
import type { DeleteOptions, DeleteResult } from '../storage-types.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { NODE_LEASE_NAMESPACE } from '../../node-protocol/names.js';
import { validateSpecAndStatus } from './shared.js';

/**
 * v1 Namespace: created Active with the `kubernetes` finalizer in its spec; the built-in ones may
 * not be deleted; deleting one takes its contents with it (see deleteNamespace).
 */

export const BUILT_IN_NAMESPACES: ReadonlySet<string> = new Set(['default', 'kube-system', 'kube-public', NODE_LEASE_NAMESPACE]);

const NAMESPACE_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Status', 'The status of the namespace'), AGE_COLUMN],
  cells: (ns, now) => [
    ns.metadata.name ?? '',
    getString(ns, ['status', 'phase']) || 'Active',
    ageOf(ns.metadata.creationTimestamp, now),
  ],
};

/** The finalizer in a namespace's spec that stands for "its contents are not yet known to be gone". */
export const NAMESPACE_CONTENTS_FINALIZER = 'kubernetes';

function specFinalizers(ns: KubeObject): unknown[] {
  const spec = ns.spec as { finalizers?: unknown } | undefined;
  return Array.isArray(spec?.finalizers) ? spec.finalizers : [];
}

/**
 * A delete of this namespace was begun (only a DELETE sets a deletionTimestamp) and has not yet
 * removed its contents: what the namespace finisher (src/controllers/namespace-finisher.ts)
 * completes when the request that began it was cut short.
 */
export function awaitsContentRemoval(ns: KubeObject): boolean {
  return Boolean(ns.metadata.deletionTimestamp) && specFinalizers(ns).includes(NAMESPACE_CONTENTS_FINALIZER);
}

function withSpecFinalizers(ns: KubeObject, finalizers: unknown[]): KubeObject {
  return { ...ns, spec: { ...(isJsonObject(ns.spec) ? ns.spec : {}), finalizers } };
}

/**
 * A namespace delete, as Kubernetes' namespace registry and controller together, in the request:
 * 1. one write marks it deleted (a deletionTimestamp) and Terminating: from then on creates in it
 *    are refused, and the `kubernetes` finalizer in its spec keeps it while its contents go;
 * 2. every object in it is deleted;
 * 3. a finalize write takes `kubernetes` out of its spec, which removes the namespace too (unless
 *    other finalizers, in its metadata or its spec, still hold it: their owners take them off).
 * A request cut short (the server crashed, or a takeover fenced the controller that sent it)
 * leaves the namespace marked with its finalizer, and the namespace finisher on the controller
 * leader runs the delete again. A dry run only checks that the namespace could go.
 */
async function deleteNamespace(context: KindContext, name: string, options: DeleteOptions): Promise<DeleteResult> {
  const { store } = context;
  if (options.dryRun) return store.delete(NAMESPACE_DEFINITION, undefined, name, options);
  // Every write below is the request's: a fenced caller's (a deposed leader's) is refused, each one.
  const guarded = options.writeGuard ? { writeGuard: options.writeGuard } : {};
  const current = await store.get(NAMESPACE_DEFINITION, undefined, name);
  checkPreconditions(NAMESPACE_DEFINITION, name, current, options.preconditions);
  if (!specFinalizers(current).includes(NAMESPACE_CONTENTS_FINALIZER)) {
    // Stored before every namespace got the finalizer at creation, or finalized by hand: without
    // it, the mark below would remove the namespace before its contents.
    await store.guaranteedUpdate(
      NAMESPACE_DEFINITION,
      undefined,
      name,
      (ns) => withSpecFinalizers(ns, [...specFinalizers(ns), NAMESPACE_CONTENTS_FINALIZER]),
      { ...guarded, subresource: 'finalize' },
    );
  }
  const marked = await store.guaranteedUpdate(
    NAMESPACE_DEFINITION,
    undefined,
    name,
    (ns) => ({ ...ns, status: { ...(isJsonObject(ns.status) ? ns.status : {}), phase: 'Terminating' } }),
    {
      ...guarded,
      subresource: 'status',
      // A delete made again (by the finisher, or by hand) keeps the time the first one began.
      ...(current.metadata.deletionTimestamp ? {} : { markDeleted: { deletionTimestamp: kubeTime(), gracePeriodSeconds: 0 } }),
    },
  );
  const count = await store.deleteNamespaceContents(context.kinds.all, name, guarded);
  let finalized: KubeObject;
  try {
    finalized = await store.guaranteedUpdate(
      NAMESPACE_DEFINITION,
      undefined,
      name,
      (ns) => withSpecFinalizers(ns, specFinalizers(ns).filter((f) => f !== NAMESPACE_CONTENTS_FINALIZER)),
      { ...guarded, subresource: 'finalize' },
    );
  } catch (error) {
    // Another delete of it (the finisher, while this long one still ran) finished first: this one's
    // work is done as well, not a 404.
    if (error instanceof ApiError && error.code === 404) return { object: marked, removed: true };
    throw error;
  }
  const removed = shouldDeleteOnWrite(NAMESPACE_DEFINITION, finalized);
  context.logger?.info(
    {
      namespace: name,
      objects: count,
      ...(removed ? {} : { waitingFor: [...(finalized.metadata.finalizers ?? []), ...specFinalizers(finalized)] }),
    },
    removed ? 'deleted namespace and its contents' : 'deleted the contents of namespace; other finalizers hold it',
  );
  return { object: finalized, removed };
}

/**
 * Kubernetes' rules for a namespace's status: Active while it is not being deleted, Terminating
 * once it is. Without them a client allowed namespaces/status could make a namespace refuse every
 * create in it by writing Terminating, without deleting anything.
 */
function validateNamespaceStatus(ns: KubeObject): StatusCause[] {
  const phase = getString(ns, ['status', 'phase']);
  if (!ns.metadata.deletionTimestamp && phase !== '' && phase !== 'Active') {
    return [{ reason: 'FieldValueInvalid', message: `Invalid value: "${phase}": may only be 'Active' if \`deletionTimestamp\` is empty`, field: 'status.phase' }];
  }
  if (ns.metadata.deletionTimestamp && phase !== 'Terminating') {
    return [{ reason: 'FieldValueInvalid', message: `Invalid value: "${phase}": may only be 'Terminating' if \`deletionTimestamp\` is not empty`, field: 'status.phase' }];
  }
  return [];
}

function validateNamespace(ns: KubeObject): StatusCause[] {
  const causes = validateSpecAndStatus(ns);
  const finalizers = (ns.spec as { finalizers?: unknown } | undefined)?.finalizers;
  if (finalizers !== undefined && !Array.isArray(finalizers)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of finalizer names', field: 'spec.finalizers' });
  } else {
    (finalizers ?? []).forEach((f: unknown, i: number) => {
      const problem = typeof f === 'string' ? qualifiedNameProblem(f) : 'must be a string';
      if (problem) causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(f)}: ${problem}`, field: `spec.finalizers[${i}]` });
    });
  }
  return causes;
}

export const NAMESPACE_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: 'Namespace',
  plural: 'namespaces',
  singular: 'namespace',
  namespaced: false,
  shortNames: ['ns'],
  categories: [],
  subresources: ['status', 'finalize'],
  printer: NAMESPACE_PRINTER,
  fieldLabels: { 'status.phase': (ns) => getString(ns, ['status', 'phase']) },
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'core/namespaces',
  nameRule: 'dns-label',
  prepareForCreate: (ns) => {
    // Always with the contents finalizer, whatever else the client listed (as Kubernetes).
    const finalizers = specFinalizers(ns);
    ns.spec = withSpecFinalizers(ns, finalizers.includes(NAMESPACE_CONTENTS_FINALIZER) ? finalizers : [...finalizers, NAMESPACE_CONTENTS_FINALIZER]).spec;
    ns.status = { phase: 'Active' };
  },
  // spec.finalizers changes only through namespaces/finalize (a plain update keeps them).
  prepareForUpdate: (next, current) => {
    const kept = (current.spec as { finalizers?: unknown } | undefined)?.finalizers;
    const spec: Record<string, unknown> = isJsonObject(next.spec) ? { ...next.spec } : {};
    if (kept === undefined) delete spec.finalizers;
    else spec.finalizers = kept;
    next.spec = spec;
  },
  awaitsCleanup: (ns) => specFinalizers(ns).length > 0,
  validate: validateNamespace,
  validateStatus: validateNamespaceStatus,
  undeletable: new Set(['default', 'kube-system', 'kube-public']),
  returnsDeletedObject: true,
  delete: deleteNamespace,
};
