import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { checkPreconditions } from '../write-rules.js';
import { isJsonObject } from '../json.js';
import { getString } from '../objects.js';
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

/**
 * A namespace goes Terminating (from then on, creates in it are refused), its contents are
 * deleted, then the namespace itself. kube-apiserver leaves the contents to the namespace
 * controller; Drover does it in the request, so the namespace is gone when the DELETE answers.
 * A dry run only checks that the namespace could go.
 */
async function deleteNamespace(context: KindContext, name: string, options: DeleteOptions): Promise<DeleteResult> {
  const { store } = context;
  if (options.dryRun) return store.delete(NAMESPACE_DEFINITION, undefined, name, options);
  // Every write below is the request's: a fenced caller's (a deposed leader's) is refused, each one.
  const guarded = options.writeGuard ? { writeGuard: options.writeGuard } : {};
  checkPreconditions(NAMESPACE_DEFINITION, name, await store.get(NAMESPACE_DEFINITION, undefined, name), options.preconditions);
  await store.guaranteedUpdate(
    NAMESPACE_DEFINITION,
    undefined,
    name,
    (ns) => ({ ...ns, status: { ...(isJsonObject(ns.status) ? ns.status : {}), phase: 'Terminating' } }),
    { ...guarded, subresource: 'status' },
  );
  const count = await store.deleteNamespaceContents(context.kinds.all, name, guarded);
  context.logger?.info({ namespace: name, objects: count }, 'deleted namespace and its contents');
  return store.delete(NAMESPACE_DEFINITION, undefined, name, guarded);
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
  subresources: ['status'],
  printer: NAMESPACE_PRINTER,
  fieldLabels: { 'status.phase': (ns) => getString(ns, ['status', 'phase']) },
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'core/namespaces',
  nameRule: 'dns-label',
  prepareForCreate: (ns) => {
    ns.spec = { finalizers: ['kubernetes'], ...(ns.spec as object | undefined) };
    ns.status = { phase: 'Active' };
  },
  validate: validateSpecAndStatus,
  undeletable: new Set(['default', 'kube-system', 'kube-public']),
  returnsDeletedObject: true,
  delete: deleteNamespace,
};
