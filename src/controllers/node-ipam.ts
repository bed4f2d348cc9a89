import { ApiError } from '../apiserver/errors.js';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, NODES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Cidr, nextNodeCidr } from '../node-protocol/service-network.js';
import type { Clock } from './clock.js';
import { QueuedController } from './work-queue.js';

/**
 * Node IPAM, as kube-controller-manager's range allocator: every Node gets a /24 of
 * `cluster-cidr` in `spec.podCIDR` and `spec.podCIDRs`, the pods of that node take their
 * addresses from it (the agent's bridge and host-local IPAM, src/agent/network/). A CIDR, once
 * set, stays with its Node (the API refuses a change, as Kubernetes' node validation does); it
 * is free again when the Node is deleted. Runs on the leading server only, so there is one
 * allocator; what it hands out it remembers until the informer shows the write, so two nodes
 * registering at once never get the same range.
 */
export class NodeIpamController extends QueuedController {
  /** Written but perhaps not yet in the informer: node name → CIDR. */
  private readonly pending = new Map<string, string>();
  private fullWarned = false;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    private readonly clusterCidr: Cidr,
    clock?: Clock,
  ) {
    super('node-ipam', logger, clock);
    informers.on(NODES, (type, node) => {
      if (!this.started) return;
      if (type === 'DELETED') {
        this.pending.delete(node.metadata.name!);
        // Its range is free again: a node waiting for one (the range was used up) may take it.
        if (podCidrOf(node)) this.queueWaiting();
      } else if (!podCidrOf(node)) this.queue.add(node.metadata.name!);
    });
  }

  start(): void {
    this.started = true;
    this.queueWaiting();
  }

  private queueWaiting(): void {
    for (const node of this.informers.get(NODES).items()) if (!podCidrOf(node)) this.queue.add(node.metadata.name!);
  }

  protected async sync(name: string): Promise<void> {
    const node = this.informers.get(NODES).get(undefined, name);
    if (!node || podCidrOf(node)) {
      this.pending.delete(name);
      return;
    }
    const used = new Set<string>(this.pending.values());
    for (const other of this.informers.get(NODES).items()) {
      const cidr = podCidrOf(other);
      if (cidr) used.add(cidr);
    }
    const cidr = this.pending.get(name) ?? nextNodeCidr(this.clusterCidr, used);
    if (!cidr) {
      // Looked at again when a Node (and so its range) goes.
      if (!this.fullWarned) this.logger.warn({ node: name, clusterCidr: this.clusterCidr.text }, 'cluster-cidr has no free node CIDR left; the node gets no pod network');
      this.fullWarned = true;
      return;
    }
    this.pending.set(name, cidr);
    try {
      // The cached version is the precondition: a node changed meanwhile is looked at again.
      await this.client.patch(NODES, undefined, name, 'merge', {
        metadata: { resourceVersion: node.metadata.resourceVersion },
        spec: { podCIDR: cidr, podCIDRs: [cidr] },
      });
      this.fullWarned = false;
      this.logger.info({ node: name, podCIDR: cidr }, 'allocated the node’s pod CIDR');
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) {
        this.pending.delete(name);
        return;
      }
      throw error;
    }
  }
}

export function podCidrOf(node: KubeObject): string | undefined {
  const cidr = getPath(node, ['spec', 'podCIDR']);
  return typeof cidr === 'string' && cidr ? cidr : undefined;
}
