import { type ReadStrategy, type ResourceDefinition, standardFields } from '../definition.js';
import type { KubeObject } from '../objects.js';
import type { Selection } from '../storage-types.js';
import { column, NAME_COLUMN, type Printer } from '../table.js';
import { parseQuantity } from '../../node-protocol/quantity.js';

/**
 * metrics.k8s.io/v1beta1 NodeMetrics (`nodes`) and PodMetrics (`pods`), what `kubectl top` reads:
 * not stored, read when asked through a `MetricsSource` the server gives (its agents' usage
 * figures, src/server/resource-metrics.ts), as metrics-server serves them through the aggregation
 * layer. `get` and `list` only; authorized by RBAC like any resource of the group (the default
 * `view`, `edit` and `admin` roles hold them through `system:aggregated-metrics-reader`).
 *
 * These definitions are not in kinds/index.ts: the server adds them to its registry with the
 * source (a registry without one serves no metrics.k8s.io, as a cluster without metrics-server).
 */

export const METRICS_GROUP = 'metrics.k8s.io';
export const METRICS_VERSION = 'v1beta1';
export const METRICS_API_VERSION = `${METRICS_GROUP}/${METRICS_VERSION}`;

/** What the server reads usage from: NodeMetrics and PodMetrics objects, made by the source. */
export interface MetricsSource {
  /** One node's metrics, or a 404 ApiError. */
  node(name: string): Promise<KubeObject>;
  /** The metrics of every node that answered (a node that did not is left out, as metrics-server does). */
  nodes(selection: Selection): Promise<KubeObject[]>;
  /** One pod's metrics, or a 404 ApiError. */
  pod(namespace: string, name: string): Promise<KubeObject>;
  /** The metrics of the running pods in `namespace` (all when undefined) whose nodes answered. */
  pods(namespace: string | undefined, selection: Selection): Promise<KubeObject[]>;
}

/** The usage in a metrics object's `usage` (or summed over its `containers`), for the printer. */
function usageOf(obj: KubeObject, resource: 'cpu' | 'memory'): number {
  const one = (usage: unknown): number => {
    const text = (usage as Record<string, unknown> | undefined)?.[resource];
    try {
      return typeof text === 'string' ? parseQuantity(text) : 0;
    } catch {
      return 0;
    }
  };
  if (Array.isArray(obj.containers)) return obj.containers.reduce<number>((sum, c) => sum + one((c as { usage?: unknown }).usage), 0);
  return one(obj.usage);
}

/** metrics-server's columns: NAME, CPU (millicores), MEMORY (Mi), WINDOW. */
const METRICS_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('CPU', 'CPU usage'),
    column('Memory', 'Memory usage'),
    column('Window', 'The window the usage is measured over'),
  ],
  cells: (obj) => [
    obj.metadata.name ?? '',
    `${Math.round(usageOf(obj, 'cpu') * 1000)}m`,
    `${Math.round(usageOf(obj, 'memory') / 2 ** 20)}Mi`,
    typeof obj.window === 'string' ? obj.window : '',
  ],
};

function definition(kind: 'NodeMetrics' | 'PodMetrics', reads: ReadStrategy): ResourceDefinition {
  const pods = kind === 'PodMetrics';
  return {
    group: METRICS_GROUP,
    version: METRICS_VERSION,
    kind,
    plural: pods ? 'pods' : 'nodes',
    singular: '',
    namespaced: pods,
    shortNames: [],
    categories: [],
    subresources: [],
    printer: METRICS_PRINTER,
    fieldLabels: {},
    topLevelFields: standardFields('timestamp', 'window', pods ? 'containers' : 'usage'),
    // Never written: the path only keeps the definition's shape.
    storagePath: `${METRICS_GROUP}/${pods ? 'pods' : 'nodes'}`,
    nameRule: 'dns-subdomain',
    reads,
  };
}

export function metricsDefinitions(source: MetricsSource): ResourceDefinition[] {
  return [
    definition('NodeMetrics', {
      get: (_namespace, name) => source.node(name),
      list: (_namespace, selection) => source.nodes(selection),
    }),
    definition('PodMetrics', {
      get: (namespace, name) => source.pod(namespace ?? 'default', name),
      list: (namespace, selection) => source.pods(namespace, selection),
    }),
  ];
}
