import type { KubeObject } from '../apiserver/objects.js';
import { Informer } from '../client/informer.js';
import { type ApiClient, PODS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type ConfigReference, podConfigReferences, referenceKey } from '../node-protocol/pod-references.js';

/**
 * Which ConfigMaps and Secrets each node may read, and for which ServiceAccounts it may request
 * tokens: those of the pods bound to it, as in Kubernetes' node authorizer graph (pod → node
 * edges, configmap/secret/serviceaccount → pod edges), kept by an informer over every pod on
 * this server. The authorizer asks it synchronously; until its first list is in, it knows
 * nothing and every such request is refused (the agent retries).
 */

/** Not a ConfigReference kind: its own key space in the same counts. */
function serviceAccountKey(namespace: string, name: string): string {
  return `ServiceAccount/${namespace}/${name}`;
}

interface PodEdges {
  node: string;
  keys: string[];
}

export class NodeConfigGraph {
  private readonly informer: Informer;
  /** node → object key → how many of its pods refer to it */
  private readonly byNode = new Map<string, Map<string, number>>();
  /** pod `namespace/name` → its node and the objects it refers to */
  private readonly byPod = new Map<string, PodEdges>();

  constructor(client: ApiClient, logger: Logger) {
    this.informer = new Informer(client, PODS, undefined, (type, pod) => this.onChange(type, pod), logger);
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): void {
    this.informer.stop();
  }

  /** Whether a pod bound to `node` runs as ServiceAccount `namespace/name`. */
  nodeMayRequestToken(node: string, namespace: string, name: string): boolean {
    return (this.byNode.get(node)?.get(serviceAccountKey(namespace, name)) ?? 0) > 0;
  }

  /** Whether a pod bound to `node` refers to `ref`. */
  nodeMayRead(node: string, ref: ConfigReference): boolean {
    return (this.byNode.get(node)?.get(referenceKey(ref)) ?? 0) > 0;
  }

  private onChange(type: string, pod: KubeObject): void {
    const key = `${pod.metadata.namespace ?? ''}/${pod.metadata.name ?? ''}`;
    // Start from what was added for this pod before, whatever changed.
    this.removePod(key);
    if (type === 'DELETED') return;
    const node = typeof (pod.spec as { nodeName?: unknown } | undefined)?.nodeName === 'string' ? (pod.spec as { nodeName: string }).nodeName : '';
    if (!node) return;
    const spec = (pod.spec ?? {}) as { serviceAccountName?: unknown };
    // A pod naming none runs as `default` (kube-apiserver's ServiceAccount admission sets it).
    const account = typeof spec.serviceAccountName === 'string' && spec.serviceAccountName ? spec.serviceAccountName : 'default';
    const keys = [...podConfigReferences(pod).map(referenceKey), serviceAccountKey(pod.metadata.namespace || 'default', account)];
    this.byPod.set(key, { node, keys });
    const counts = this.byNode.get(node) ?? new Map<string, number>();
    this.byNode.set(node, counts);
    for (const k of keys) counts.set(k, (counts.get(k) ?? 0) + 1);
  }

  private removePod(key: string): void {
    const edges = this.byPod.get(key);
    if (!edges) return;
    this.byPod.delete(key);
    const counts = this.byNode.get(edges.node);
    if (!counts) return;
    for (const k of edges.keys) {
      const left = (counts.get(k) ?? 1) - 1;
      if (left > 0) counts.set(k, left);
      else counts.delete(k);
    }
    if (counts.size === 0) this.byNode.delete(edges.node);
  }
}
