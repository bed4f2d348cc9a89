import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, ENDPOINTS, ENDPOINTSLICES, NODES, PODS, SERVICES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { STATE_LABEL } from '../node-protocol/names.js';
import type { Clock } from './clock.js';
import { desiredEndpoints, MANAGED_BY, MANAGED_BY_LABEL, podMatches, sameEndpointContent, selectorOf, SERVICE_NAME_LABEL } from './endpoints-logic.js';
import { QueuedController } from './work-queue.js';

/**
 * The endpoints controller, as kube-controller-manager's endpoints and endpointslice controllers:
 * for every Service with a selector, its v1 Endpoints and its discovery.k8s.io/v1 EndpointSlices
 * follow the pods the selector matches (./endpoints-logic.ts computes them). It works per Service
 * through a work queue over the leader's shared informers; a pod's change queues the Services of
 * its namespace that match it (before or after), a node's state change queues the Services with
 * pods on it. Selector-less Services are the user's: their Endpoints and slices are left alone.
 * The `kubernetes` Service's are the servers' own (src/server/kubernetes-service.ts).
 */

const LOST_STATES = new Set(['Unavailable', 'Down']);

export class EndpointsController extends QueuedController {
  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    options: { clock?: Clock } = {},
  ) {
    super('endpoints', logger, options.clock);
    informers.on(SERVICES, (_type, svc) => this.enqueue(svc));
    informers.on(PODS, (_type, pod, old) => {
      this.enqueueFor(pod);
      if (old && JSON.stringify(old.metadata.labels) !== JSON.stringify(pod.metadata.labels)) this.enqueueFor(old);
    });
    informers.on(NODES, (_type, node, old) => {
      if (old && old.metadata.labels?.[STATE_LABEL] === node.metadata.labels?.[STATE_LABEL]) return;
      for (const pod of this.informers.get(PODS).items()) if ((pod.spec as { nodeName?: string } | undefined)?.nodeName === node.metadata.name) this.enqueueFor(pod);
    });
    // A slice or Endpoints changed or removed by someone else is put back.
    informers.on(ENDPOINTS, (_type, ep) => this.enqueueKey(ep.metadata.namespace!, ep.metadata.name!));
    informers.on(ENDPOINTSLICES, (_type, slice) => {
      const service = slice.metadata.labels?.[SERVICE_NAME_LABEL];
      if (service && slice.metadata.labels?.[MANAGED_BY_LABEL] === MANAGED_BY) this.enqueueKey(slice.metadata.namespace!, service);
    });
  }

  start(): void {
    this.started = true;
    for (const svc of this.informers.get(SERVICES).items()) this.enqueue(svc);
  }

  private enqueue(svc: KubeObject): void {
    this.enqueueKey(svc.metadata.namespace!, svc.metadata.name!);
  }

  private enqueueKey(namespace: string, name: string): void {
    if (this.started) this.queue.add(`${namespace}/${name}`);
  }

  private enqueueFor(pod: KubeObject): void {
    for (const svc of this.informers.get(SERVICES).items()) {
      if (svc.metadata.namespace !== pod.metadata.namespace) continue;
      const selector = selectorOf(svc);
      if (selector && podMatches(selector, pod)) this.enqueue(svc);
    }
  }

  private nodeUsable = (name: string): boolean => {
    const node = this.informers.get(NODES).get(undefined, name);
    return node !== undefined && !LOST_STATES.has(node.metadata.labels?.[STATE_LABEL] ?? '');
  };

  protected async sync(key: string): Promise<void> {
    const [namespace, name] = key.split('/') as [string, string];
    const svc = this.informers.get(SERVICES).get(namespace, name);
    const ourSlices = this.informers
      .get(ENDPOINTSLICES)
      .items()
      .filter((s) => s.metadata.namespace === namespace && s.metadata.labels?.[SERVICE_NAME_LABEL] === name && s.metadata.labels?.[MANAGED_BY_LABEL] === MANAGED_BY);
    if (!svc) {
      // Gone: its Endpoints go too (the slices also have it as owner; removing them now is quicker).
      if (this.informers.get(ENDPOINTS).get(namespace, name)) await this.ignoreMissing(this.client.delete(ENDPOINTS, namespace, name));
      for (const slice of ourSlices) await this.ignoreMissing(this.client.delete(ENDPOINTSLICES, namespace, slice.metadata.name!));
      return;
    }
    const desired = desiredEndpoints(svc, this.informers.get(PODS).items(), this.nodeUsable);
    if (!desired) return; // no selector: the user's
    await this.apply(ENDPOINTS, this.informers.get(ENDPOINTS).get(namespace, name), desired.endpoints);
    const wanted = new Set(desired.slices.map((s) => s.metadata.name));
    for (const slice of desired.slices) await this.apply(ENDPOINTSLICES, ourSlices.find((s) => s.metadata.name === slice.metadata.name), slice);
    for (const slice of ourSlices) if (!wanted.has(slice.metadata.name)) await this.ignoreMissing(this.client.delete(ENDPOINTSLICES, namespace, slice.metadata.name!));
  }

  private async apply(ref: typeof ENDPOINTS, current: KubeObject | undefined, desired: KubeObject): Promise<void> {
    const namespace = desired.metadata.namespace!;
    if (!current) {
      // A 409 (the cache lagged behind an object that exists) comes back through the queue's retry.
      await this.client.create(ref, namespace, desired);
      return;
    }
    if (sameEndpointContent(current, desired)) return;
    const next: KubeObject = { ...current, ...desired, metadata: { ...current.metadata, labels: desired.metadata.labels ?? {} } };
    if (desired.subsets === undefined) delete next.subsets;
    await this.client.update(ref, namespace, next);
    this.logger.debug({ kind: desired.kind, namespace, name: desired.metadata.name }, 'updated endpoints');
  }

  private async ignoreMissing(promise: Promise<void>): Promise<void> {
    try {
      await promise;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 404)) throw error;
    }
  }
}
