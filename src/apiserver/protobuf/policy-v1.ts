/** policy/v1 kinds (k8s.io/api/policy/v1/generated.proto): PodDisruptionBudget. */

import { unsupportedField } from './errors.js';
import { decodeIntOrString, decodeLabelSelector, decodeStrictObject } from './meta.js';
import { embedded, parseMessage, str } from './reader.js';

/**
 * policy/v1 PodDisruptionBudget {1 metadata, 2 spec, 3 status (ignored: the controller's)}.
 * Spec {1 minAvailable, 2 selector, 3 maxUnavailable, 4 unhealthyPodEvictionPolicy}; all four are
 * pointers in Go, so presence is kept: an empty selector `{}` selects every pod, an absent one none.
 */
export function decodePodDisruptionBudget(raw: Uint8Array): Record<string, unknown> {
  const kind = 'PodDisruptionBudget';
  const { fields, metadata } = decodeStrictObject(raw, kind);

  const spec: Record<string, unknown> = {};
  const specBytes = embedded(fields, 2, kind);
  if (specBytes) {
    const m = 'PodDisruptionBudgetSpec';
    const specFields = parseMessage(specBytes, m);
    for (const f of specFields) if (f.field > 4) throw unsupportedField(kind, m, f.field);
    const minAvailable = embedded(specFields, 1, m);
    if (minAvailable) spec.minAvailable = decodeIntOrString(minAvailable, kind);
    const selector = embedded(specFields, 2, m);
    if (selector) spec.selector = decodeLabelSelector(selector, kind);
    const maxUnavailable = embedded(specFields, 3, m);
    if (maxUnavailable) spec.maxUnavailable = decodeIntOrString(maxUnavailable, kind);
    for (const f of specFields) if (f.field === 4) spec.unhealthyPodEvictionPolicy = str(f, m);
  }

  return { apiVersion: 'policy/v1', kind, metadata, spec };
}
