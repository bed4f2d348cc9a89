import type { ResourceDefinition } from './definition.js';
import type { KubeObject } from './objects.js';
import { matchesFields, matchesLabels, parseFieldSelector, parseLabelSelector } from './selectors.js';
import type { Selection } from './storage-types.js';

/** A request's label and field selectors, parsed against a kind and matched against its objects. */

/** The field selectors each kind supports, computed once per kind rather than per request. */
const selectableFields = new WeakMap<ResourceDefinition, ReadonlySet<string>>();

/** A request's labelSelector and fieldSelector, parsed against what the kind can select on. */
export function parseSelection(
  def: ResourceDefinition,
  labelSelector: string | null | undefined,
  fieldSelector: string | null | undefined,
): Selection {
  let supported = selectableFields.get(def);
  if (!supported) {
    supported = new Set(['metadata.name', 'metadata.namespace', ...Object.keys(def.fieldLabels)]);
    selectableFields.set(def, supported);
  }
  return {
    labelSelector: parseLabelSelector(labelSelector),
    fieldSelector: parseFieldSelector(fieldSelector, supported, def.kind),
  };
}

export function matchesSelection(def: ResourceDefinition, obj: KubeObject, selection: Selection): boolean {
  return (
    matchesLabels(selection.labelSelector, obj.metadata.labels) &&
    matchesFields(selection.fieldSelector, (field) => {
      if (field === 'metadata.name') return obj.metadata.name ?? '';
      if (field === 'metadata.namespace') return obj.metadata.namespace ?? '';
      return def.fieldLabels[field]?.(obj) ?? '';
    })
  );
}
