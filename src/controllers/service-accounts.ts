import { ApiError } from '../apiserver/errors.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, NAMESPACES, SERVICEACCOUNTS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { Clock } from './clock.js';
import { namespaceStatus } from './kube-types.js';
import { QueuedController } from './work-queue.js';

/**
 * The ServiceAccount controller, as kube-controller-manager's: every namespace that is not being
 * deleted has a ServiceAccount named `default`; one deleted is created again. Pods that name no
 * account run as it, so it must exist wherever pods may be created.
 *
 * It follows namespaces and ServiceAccounts on the leader's shared informers and works per
 * namespace through a work queue (failures come back with back-off). Before start() it only
 * watches: the first lists are complete then, so a leader change does not send a create per
 * namespace for accounts that exist.
 */

export const DEFAULT_SERVICE_ACCOUNT = 'default';

export class ServiceAccountsController extends QueuedController {
  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    options: { clock?: Clock } = {},
  ) {
    super('serviceaccounts', logger, options.clock);
    informers.on(NAMESPACES, (type, ns) => {
      if (this.started && type !== 'DELETED') this.queue.add(ns.metadata.name!);
    });
    informers.on(SERVICEACCOUNTS, (type, sa) => {
      if (this.started && type === 'DELETED' && sa.metadata.name === DEFAULT_SERVICE_ACCOUNT) this.queue.add(sa.metadata.namespace!);
    });
  }

  /** Called once the informers have listed: every namespace is looked at once. */
  start(): void {
    this.started = true;
    for (const ns of this.informers.get(NAMESPACES).items()) this.queue.add(ns.metadata.name!);
  }

  protected async sync(namespace: string): Promise<void> {
    const ns = this.informers.get(NAMESPACES).get(undefined, namespace);
    if (!ns || namespaceStatus(ns).phase === 'Terminating') return;
    if (this.informers.get(SERVICEACCOUNTS).get(namespace, DEFAULT_SERVICE_ACCOUNT)) return;
    try {
      await this.client.create(SERVICEACCOUNTS, namespace, {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: DEFAULT_SERVICE_ACCOUNT, namespace },
      });
      this.logger.debug({ namespace }, 'created the default service account');
    } catch (error) {
      // Already there (the cache lagged), or the namespace is gone or going: nothing to do.
      if (error instanceof ApiError && (error.code === 409 || error.code === 404 || error.code === 403)) return;
      throw error;
    }
  }
}
