import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { column, NAME_COLUMN, type Printer } from '../table.js';
import { crdSpec, defaultCrd, validateCrd } from './crd-validation.js';

/**
 * apiextensions.k8s.io/v1 CustomResourceDefinition as a kind: its own validation and defaults,
 * and kube's deletion (the cleanup finalizer, so a CRD goes only after its objects). What a CRD
 * serves is set up by CrdServing (crd-serving.ts) from a watch, on every server.
 */

export const CRD_CLEANUP_FINALIZER = 'customresourcecleanup.apiextensions.k8s.io';

const CRD_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Created At', 'Creation timestamp of the CRD', { type: 'date' })],
  cells: (crd) => [crd.metadata.name ?? '', crd.metadata.creationTimestamp ?? ''],
};

function validateUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const before = crdSpec(current);
  const after = crdSpec(next);
  if (before.scope !== after.scope) causes.push({ reason: 'FieldValueInvalid', field: 'spec.scope', message: `Invalid value: ${JSON.stringify(after.scope)}: field is immutable` });
  // A storage version that held objects stays listed in status.storedVersions; dropping it from spec.versions would lose them.
  const stored = isJsonObject(current.status) && Array.isArray(current.status.storedVersions) ? current.status.storedVersions : [];
  for (const version of stored) {
    if (typeof version === 'string' && !after.versions.some((v) => v.name === version)) {
      causes.push({ reason: 'FieldValueInvalid', field: 'status.storedVersions', message: `Invalid value: ${JSON.stringify(stored)}: must appear in spec.versions` });
    }
  }
  return causes;
}

export const CRD_DEFINITION: ResourceDefinition = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  kind: 'CustomResourceDefinition',
  plural: 'customresourcedefinitions',
  singular: 'customresourcedefinition',
  namespaced: false,
  shortNames: ['crd', 'crds'],
  categories: ['api-extensions'],
  subresources: ['status'],
  printer: CRD_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'apiextensions.k8s.io/customresourcedefinitions',
  nameRule: 'dns-subdomain',
  prepareForCreate(crd) {
    const storage = crdSpec(crd).versions.find((v) => v.storage)?.name;
    crd.status = { conditions: [], acceptedNames: { plural: '', kind: '' }, storedVersions: storage ? [storage] : [] };
  },
  applyDefaults: defaultCrd,
  validate: validateCrd,
  validateUpdate,
  async delete(context, name, options) {
    // kube's CRD REST Delete: the cleanup finalizer first, so the objects go before the CRD
    // (CrdServing removes them, then the finalizer, on whichever servers see it first).
    if (!options.dryRun) {
      // Under the delete's write guard: a fenced caller's delete leaves no finalizer behind.
      await context.store.guaranteedUpdate(
        CRD_DEFINITION,
        undefined,
        name,
        (crd) => {
          if (crd.metadata.deletionTimestamp) return crd;
          const finalizers = crd.metadata.finalizers ?? [];
          if (!finalizers.includes(CRD_CLEANUP_FINALIZER)) crd.metadata.finalizers = [...finalizers, CRD_CLEANUP_FINALIZER];
          return crd;
        },
        options.writeGuard ? { writeGuard: options.writeGuard } : {},
      );
    }
    return context.store.delete(CRD_DEFINITION, undefined, name, options);
  },
};
