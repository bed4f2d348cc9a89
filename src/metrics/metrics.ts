import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type {
  Datastore,
  KeyValue,
  ListOptions,
  ListResult,
  Watch,
  WatchCallbacks,
  WriteGuard,
} from '../datastore/types.js';

/**
 * A node's metrics, in Prometheus text format via prom-client. Each node serves its own, and
 * only when its own local `supervisor-metrics` setting is on (K3s's name; it is not about the
 * per-pod supervisor processes). One registry per component, so a
 * server's embedded agent and the server itself never mix their series.
 */

export { METRICS_CONTENT_TYPE } from './content-type.js';

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** One priority level's figures, as src/apiserver/flow-control/dispatcher.ts reports them. */
export interface FlowControlFigures {
  level: string;
  seats: number;
  executing: number;
  queued: number;
  rejected: Record<string, number>;
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly apiRequests = new Counter({
    name: 'drover_apiserver_requests_total',
    help: 'API requests by verb, resource and HTTP status code',
    labelNames: ['verb', 'resource', 'code'] as const,
    registers: [this.registry],
  });
  readonly apiLatency = new Histogram({
    name: 'drover_apiserver_request_duration_seconds',
    help: 'API request latency by verb and resource (watches excluded)',
    labelNames: ['verb', 'resource'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly datastoreLatency = new Histogram({
    name: 'drover_datastore_operation_duration_seconds',
    help: 'Datastore operation latency by operation',
    labelNames: ['operation', 'backend'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly detection = new Histogram({
    name: 'drover_node_detection_seconds',
    help: "Seconds from a node's last observed lease renewal to its Unavailable verdict",
    buckets: [1, 2, 3, 4, 5, 6, 8, 10, 15, 30, 60, 120],
    registers: [this.registry],
  });
  readonly nodeClockOffset = new Gauge({
    name: 'drover_node_clock_offset_seconds',
    help: "Each node's clock minus this server's, estimated from its lease renewals (positive: the node is ahead); only on the controller leader",
    labelNames: ['node'] as const,
    registers: [this.registry],
  });

  /** Where the flow-control figures come from (the API server's FlowController), once it exists. */
  private flowControl: (() => FlowControlFigures[]) | undefined;

  /** The API server's priority levels, per level: seats, executing, queued, refused (docs/flow-control.md). */
  observeFlowControl(source: () => FlowControlFigures[]): void {
    this.flowControl = source;
  }

  constructor(
    nodeStates: () => Promise<Record<string, number>>,
    drift: () => Promise<{ error: number; info: number }>,
  ) {
    collectDefaultMetrics({ register: this.registry, prefix: 'drover_server_' });
    new Gauge({
      name: 'drover_nodes',
      help: 'Nodes by Drover state (Ready, NotReady, Unknown, Down, Unavailable, or none yet)',
      labelNames: ['state'] as const,
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const [state, count] of Object.entries(await nodeStates())) this.set({ state }, count);
      },
    });
    const flowControl = (): FlowControlFigures[] => this.flowControl?.() ?? [];
    for (const [name, help, field] of [
      ['drover_apiserver_flowcontrol_seats', 'Seats of each priority level: requests it may work on at once', 'seats'],
      ['drover_apiserver_flowcontrol_executing', 'Requests each priority level works on now', 'executing'],
      ['drover_apiserver_flowcontrol_queued', 'Requests waiting in each priority level’s queues now', 'queued'],
    ] as const) {
      new Gauge({
        name,
        help,
        labelNames: ['level'] as const,
        registers: [this.registry],
        collect() {
          for (const figures of flowControl()) this.set({ level: figures.level }, figures[field]);
        },
      });
    }
    new Counter({
      name: 'drover_apiserver_flowcontrol_rejected_total',
      help: 'Requests refused with 429 by each priority level, by reason (queue-full, time-out)',
      labelNames: ['level', 'reason'] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const figures of flowControl()) {
          for (const [reason, count] of Object.entries(figures.rejected)) this.inc({ level: figures.level, reason }, count);
        }
      },
    });
    new Gauge({
      name: 'drover_config_drift_keys',
      help: 'Settings whose values differ between nodes (severity error: cluster-wide; info: node settings)',
      labelNames: ['severity'] as const,
      registers: [this.registry],
      async collect() {
        const counts = await drift();
        this.set({ severity: 'error' }, counts.error);
        this.set({ severity: 'info' }, counts.info);
      },
    });
  }
}

export class AgentMetrics {
  readonly registry = new Registry();
  readonly leaseRenewal = new Histogram({
    name: 'drover_agent_lease_renewal_duration_seconds',
    help: 'Latency of node lease renewals, by result',
    labelNames: ['result'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  // The embedded registry (docs/registry.md): what this node served, and how its pulls through peers went.
  readonly registryServed = new Counter({
    name: 'drover_embedded_registry_served_total',
    help: 'Manifests and blobs this node served whole to peers, by kind',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly registryServedBytes = new Counter({
    name: 'drover_embedded_registry_served_bytes_total',
    help: 'Bytes of manifests and blobs this node served whole to peers',
    registers: [this.registry],
  });
  readonly registryPeerHits = new Counter({
    name: 'drover_embedded_registry_peer_hits_total',
    help: 'Image pulls served by a peer',
    registers: [this.registry],
  });
  readonly registryPeerMisses = new Counter({
    name: 'drover_embedded_registry_peer_misses_total',
    help: 'Image pulls through peers that found no peer advertising the image',
    registers: [this.registry],
  });
  readonly registryPeerFallbacks = new Counter({
    name: 'drover_embedded_registry_peer_fallbacks_total',
    help: 'Image pulls that peers advertised but none served, so the mirrors and the registry were tried',
    registers: [this.registry],
  });
  readonly registryCorruptBlobs = new Counter({
    name: 'drover_embedded_registry_corrupt_blobs_total',
    help: 'Content rejected for not matching its digest: detected_by="puller" (a peer sent it), "server" (this node\'s copy, removed while serving)',
    labelNames: ['detected_by'] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'drover_agent_' });
  }
}

/** The datastore seam, timed: every operation observed in one histogram. */
export function instrumentDatastore(inner: Datastore, histogram: Histogram<'operation' | 'backend'>): Datastore {
  const time = async <T>(operation: string, run: () => Promise<T>): Promise<T> => {
    const end = histogram.startTimer({ operation, backend: inner.name });
    try {
      return await run();
    } finally {
      end();
    }
  };
  return {
    name: inner.name,
    currentRevision: () => inner.currentRevision(),
    compactRevision: () => inner.compactRevision(),
    get: (key: string): Promise<KeyValue | undefined> => time('get', () => inner.get(key)),
    list: (prefix: string, options?: ListOptions): Promise<ListResult> => time('list', () => inner.list(prefix, options)),
    create: (key: string, value: Buffer, guard?: WriteGuard) => time('create', () => inner.create(key, value, guard)),
    update: (key: string, value: Buffer, rev: number, guard?: WriteGuard) => time('update', () => inner.update(key, value, rev, guard)),
    delete: (key: string, rev?: number, guard?: WriteGuard) => time('delete', () => inner.delete(key, rev, guard)),
    watch: (prefix: string, from: number, callbacks: WatchCallbacks): Watch => inner.watch(prefix, from, callbacks),
    compact: (revision: number) => time('compact', () => inner.compact(revision)),
    close: () => inner.close(),
  };
}
