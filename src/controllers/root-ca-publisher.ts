import { ApiError } from '../apiserver/errors.js';
import { ROOT_CA_CONFIG_MAP, ROOT_CA_KEY } from '../apiserver/kinds/pod-service-accounts.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, CONFIGMAPS, NAMESPACES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { Clock } from './clock.js';
import { namespaceStatus } from './kube-types.js';
import { QueuedController } from './work-queue.js';

/**
 * The root-CA publisher, as kube-controller-manager's: every namespace that is not being deleted
 * has a ConfigMap `kube-root-ca.crt` whose `ca.crt` is the CA of the API servers' certificates,
 * what a client in a pod needs to verify the API server (every pod's kube-api-access volume
 * projects it, src/apiserver/kinds/pod-service-accounts.ts). Created when a namespace appears,
 * created again when deleted, put back when its data is edited.
 *
 * It follows namespaces and ConfigMaps on the leader's shared informers and works per namespace
 * through a work queue (failures, a conflict included, come back with back-off).
 */

/** Says what the ConfigMap is for, to whoever lists ConfigMaps. */
export const ROOT_CA_DESCRIPTION_ANNOTATION = 'kubernetes.io/description';
const DESCRIPTION =
  'The CA bundle that verifies the API server, for clients in pods. Kept by the cluster; edits are undone.';

export interface RootCaPublisherOptions {
  /** The CA of the API servers' serving certificates (PEM). */
  caCertificatePem: string;
  clock?: Clock;
}

export class RootCaPublisher extends QueuedController {
  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    private readonly options: RootCaPublisherOptions,
  ) {
    super('root-ca-cert-publisher', logger, options.clock);
    informers.on(NAMESPACES, (type, ns) => {
      if (this.started && type !== 'DELETED') this.queue.add(ns.metadata.name!);
    });
    informers.on(CONFIGMAPS, (_type, cm) => {
      if (this.started && cm.metadata.name === ROOT_CA_CONFIG_MAP) this.queue.add(cm.metadata.namespace!);
    });
  }

  /** Called once the informers have listed: every namespace is looked at once. */
  start(): void {
    this.started = true;
    for (const ns of this.informers.get(NAMESPACES).items()) this.queue.add(ns.metadata.name!);
  }

  private current(cm: KubeObject): boolean {
    const data = cm.data as Record<string, unknown> | undefined;
    const keys = data && typeof data === 'object' ? Object.keys(data) : [];
    return (
      keys.length === 1 &&
      data![ROOT_CA_KEY] === this.options.caCertificatePem &&
      cm.binaryData === undefined &&
      Boolean(cm.metadata.annotations?.[ROOT_CA_DESCRIPTION_ANNOTATION])
    );
  }

  protected async sync(namespace: string): Promise<void> {
    const ns = this.informers.get(NAMESPACES).get(undefined, namespace);
    if (!ns || namespaceStatus(ns).phase === 'Terminating') return;
    const cached = this.informers.get(CONFIGMAPS).get(namespace, ROOT_CA_CONFIG_MAP);
    if (cached && this.current(cached)) return;
    try {
      if (!cached) {
        await this.client.create(CONFIGMAPS, namespace, {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: ROOT_CA_CONFIG_MAP, namespace, annotations: { [ROOT_CA_DESCRIPTION_ANNOTATION]: DESCRIPTION } },
          data: { [ROOT_CA_KEY]: this.options.caCertificatePem },
        });
        this.logger.debug({ namespace }, 'published the root CA');
        return;
      }
      // The cached version is the precondition: a newer edit fails with 409 and its event brings it back.
      const { binaryData: _dropped, ...rest } = cached;
      await this.client.update(CONFIGMAPS, namespace, {
        ...rest,
        metadata: { ...cached.metadata, annotations: { ...cached.metadata.annotations, [ROOT_CA_DESCRIPTION_ANNOTATION]: DESCRIPTION } },
        data: { [ROOT_CA_KEY]: this.options.caCertificatePem },
      });
      this.logger.info({ namespace }, 'restored the root CA ConfigMap');
    } catch (error) {
      // 409 on create: the cache lagged behind a create (its event follows); 404/403: the
      // namespace is gone or going. A 409 on update is retried by the queue.
      if (error instanceof ApiError && ((error.code === 409 && !cached) || error.code === 404 || error.code === 403)) return;
      throw error;
    }
  }
}
