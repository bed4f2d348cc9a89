import { CLUSTER_RECORD_KEY } from '../config/cluster-record.js';
import { computeDrift, readPublished } from '../config/drift.js';
import type { Datastore, ListResult } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import { STATE_LABEL } from '../node-protocol/names.js';

/**
 * The server's Prometheus metrics, only when this node's own `supervisor-metrics` asks for them
 * (whatever other nodes say): the registry, and the datastore wrapped so that every operation is
 * timed. Without them the datastore is returned as it is.
 */
export async function withServerMetrics(
  datastore: Datastore,
  enabled: boolean,
  logger: Logger,
): Promise<{ datastore: Datastore; metrics?: ServerMetrics }> {
  if (!enabled) return { datastore };
  // Loaded only when used, like the metrics themselves.
  const { instrumentDatastore, ServerMetrics } = await import('../metrics/metrics.js');
  const base = datastore;
  const metrics = new ServerMetrics(
    async () => nodeStateCounts(await base.list('/registry/core/nodes/')),
    async () => {
      const record = await base.get(CLUSTER_RECORD_KEY);
      const report = computeDrift(await readPublished(base), record ? JSON.parse(record.value.toString('utf8')) : undefined);
      return {
        error: report.rows.filter((r) => r.severity === 'error').length,
        info: report.rows.filter((r) => r.severity === 'info').length,
      };
    },
  );
  logger.info('supervisor metrics enabled on /metrics (this node’s supervisor-metrics setting)');
  return { datastore: instrumentDatastore(datastore, metrics.datastoreLatency), metrics };
}

/** Nodes by their `drover.io/state` label, for the node state gauge. */
function nodeStateCounts(nodes: ListResult): Record<string, number> {
  const counts: Record<string, number> = { Ready: 0, NotReady: 0, Unknown: 0, Down: 0, Unavailable: 0 };
  for (const kv of nodes.items) {
    const node = JSON.parse(kv.value.toString('utf8')) as { metadata?: { labels?: Record<string, string> } };
    const state = node.metadata?.labels?.[STATE_LABEL] ?? 'none';
    counts[state] = (counts[state] ?? 0) + 1;
  }
  return counts;
}
