import { isPodReady } from '../../node-protocol/pods.js';
import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { ApiError, errors } from '../errors.js';
import { isJsonObject, type JsonObject } from '../json.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import { labelSelectorFromObject, type LabelSelectorObject, matchesLabels } from '../selectors.js';
import type { WriteOptions } from '../storage-types.js';
import { validateSpecAndStatus } from './shared.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';

/**
 * policy/v1 PodDisruptionBudget: its definition, and what an eviction does to it. The budget's
 * status is the disruption controller's (src/controllers/disruption.ts); an eviction only reads
 * it and spends one allowed disruption.
 */

const PDB_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Min Available', 'The minimum number of pods that must be available.'),
    column('Max Unavailable', 'The maximum number of pods that may be unavailable.'),
    column('Allowed Disruptions', 'Calculated number of pods that may be disrupted at this time.', {
      type: 'integer',
    }),
    AGE_COLUMN,
  ],
  cells: (pdb, now) => [
    pdb.metadata.name ?? '',
    getString(pdb, ['spec', 'minAvailable']) || 'N/A',
    getString(pdb, ['spec', 'maxUnavailable']) || 'N/A',
    Number(getPath(pdb, ['status', 'disruptionsAllowed']) ?? 0),
    ageOf(pdb.metadata.creationTimestamp, now),
  ],
};

export const PDB_DEFINITION: ResourceDefinition = {
  group: 'policy',
  version: 'v1',
  kind: 'PodDisruptionBudget',
  plural: 'poddisruptionbudgets',
  singular: 'poddisruptionbudget',
  namespaced: true,
  shortNames: ['pdb'],
  categories: [],
  subresources: ['status'],
  printer: PDB_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'policy/poddisruptionbudgets',
  nameRule: 'dns-subdomain',
  validate: validateSpecAndStatus,
};

const VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget.";

/**
 * kube-apiserver's EvictionREST budget check for a running pod: if one PodDisruptionBudget
 * selects it, the budget must allow a disruption, which the eviction spends (and records in
 * disruptedPods, so the disruption controller does not hand it back before the pod is seen
 * terminating). The decrement is a compare-and-swap, so concurrent evictions cannot share one.
 * A refusal is 429 TooManyRequests, as clients (kubectl drain) expect.
 */
export async function spendDisruption(context: KindContext, pod: KubeObject, options: WriteOptions): Promise<void> {
  const pdbDef = context.kinds.lookup(PDB_DEFINITION.group, PDB_DEFINITION.version, PDB_DEFINITION.plural);
  if (!pdbDef) return;
  const namespace = pod.metadata.namespace ?? 'default';
  const selects = (pdb: KubeObject): boolean => {
    const selector = isJsonObject(pdb.spec) ? pdb.spec.selector : undefined;
    return isJsonObject(selector) && matchesLabels(labelSelectorFromObject(selector as LabelSelectorObject), pod.metadata.labels);
  };
  const budgets = (await context.store.list(pdbDef, namespace, { labelSelector: [], fieldSelector: [] })).items.filter(selects);
  if (budgets.length === 0) return;
  if (budgets.length > 1) {
    throw errors.internal('This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.');
  }
  const budgetName = budgets[0]!.metadata.name!;
  const ready = isPodReady(pod);
  await context.store.guaranteedUpdate(
    pdbDef,
    namespace,
    budgetName,
    (pdb) => {
      const spec = isJsonObject(pdb.spec) ? pdb.spec : {};
      const status = isJsonObject(pdb.status) ? pdb.status : {};
      const count = (field: string): number => (typeof status[field] === 'number' ? status[field] : 0);
      // An unready pod adds nothing to the healthy count (unhealthyPodEvictionPolicy).
      const budgetHealthy = count('desiredHealthy') > 0 && count('currentHealthy') >= count('desiredHealthy');
      if (!ready && (spec.unhealthyPodEvictionPolicy === 'AlwaysAllow' || budgetHealthy)) return pdb;
      if (count('observedGeneration') < (pdb.metadata.generation ?? 1)) {
        throw new ApiError(429, 'TooManyRequests', VIOLATION, {
          causes: [{ reason: 'DisruptionBudget', message: `The disruption budget ${budgetName} is still being processed by the server.` }],
          retryAfterSeconds: 10,
        });
      }
      if (count('disruptionsAllowed') < 1) {
        throw new ApiError(429, 'TooManyRequests', VIOLATION, {
          causes: [{
            reason: 'DisruptionBudget',
            message: `The disruption budget ${budgetName} needs ${count('desiredHealthy')} healthy pods and has ${count('currentHealthy')} currently`,
          }],
        });
      }
      const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
      const disruptionsAllowed = count('disruptionsAllowed') - 1;
      const disruptedPods = { ...(isJsonObject(status.disruptedPods) ? status.disruptedPods : {}), [pod.metadata.name!]: now };
      const next: JsonObject = { ...status, disruptionsAllowed, disruptedPods };
      if (disruptionsAllowed === 0 && Array.isArray(status.conditions)) {
        next.conditions = status.conditions.map((c) =>
          isJsonObject(c) && c.type === 'DisruptionAllowed' && c.status === 'True'
            ? { ...c, status: 'False', reason: 'InsufficientPods', lastTransitionTime: now }
            : c,
        );
      }
      return { ...pdb, status: next };
    },
    { ...options, subresource: 'status' },
  );
}
