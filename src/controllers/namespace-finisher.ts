import { ApiError } from '../apiserver/errors.js';
import { awaitsContentRemoval } from '../apiserver/kinds/namespaces.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, NAMESPACES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';
import { QueuedController, type ReconcileResult } from './work-queue.js';

/**
 * The namespace finisher: completes a namespace delete that its request did not. Drover deletes
 * a namespace's contents inside the DELETE request (src/apiserver/kinds/namespaces.ts), where
 * Kubernetes leaves them to its namespace controller; a request cut short (its server crashed, or
 * a takeover fenced the deposed leader that sent it) leaves the namespace marked deleted, still
 * holding the `kubernetes` finalizer in its spec, Terminating, with part of its contents. On the
 * controller leader, this controller deletes such a namespace again once it has looked that way
 * for `settleMs` by this server's clock (a request still running elsewhere is left to finish
 * first; if both run, each delete of an object already gone is skipped).
 *
 * The trigger is the deletionTimestamp, which only a DELETE sets, never `status.phase`: a client
 * that may write namespaces/status must not be able to have namespaces deleted.
 */

/** How long a namespace stays begun-but-unfinished before the finisher deletes it again. */
export const NAMESPACE_FINISH_SETTLE_MS = 5_000;

export interface NamespaceFinisherOptions {
  clock?: Clock;
  settleMs?: number;
}

export class NamespaceFinisher extends QueuedController {
  /** When this term first saw each namespace begun but unfinished (by this server's clock). */
  private readonly firstSeen = new Map<string, number>();
  private readonly clock: Clock;
  private readonly settleMs: number;

  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    options: NamespaceFinisherOptions = {},
  ) {
    super('namespace-finisher', logger, options.clock);
    this.clock = options.clock ?? systemClock;
    this.settleMs = options.settleMs ?? NAMESPACE_FINISH_SETTLE_MS;
    informers.on(NAMESPACES, (type, ns) => {
      if (!this.started) return;
      if (type === 'DELETED') this.firstSeen.delete(ns.metadata.name!);
      else if (awaitsContentRemoval(ns)) this.queue.add(ns.metadata.name!);
    });
  }

  /** Called once the informers have listed: every unfinished namespace is looked at once. */
  start(): void {
    this.started = true;
    for (const ns of this.informers.get(NAMESPACES).items()) if (awaitsContentRemoval(ns)) this.queue.add(ns.metadata.name!);
  }

  protected async sync(name: string): Promise<ReconcileResult> {
    const ns = this.informers.get(NAMESPACES).get(undefined, name);
    if (!ns || !awaitsContentRemoval(ns)) {
      this.firstSeen.delete(name);
      return;
    }
    const now = this.clock.now();
    const since = this.firstSeen.get(name) ?? now;
    this.firstSeen.set(name, since);
    const waited = now - since;
    if (waited < this.settleMs) return { requeueAfterMs: this.settleMs - waited };
    this.logger.info(
      { namespace: name, deletionTimestamp: ns.metadata.deletionTimestamp },
      'finishing a namespace delete that its request did not complete (its server stopped, or it lost the controller lease)',
    );
    try {
      await this.client.delete(NAMESPACES, undefined, name);
    } catch (error) {
      // Gone meanwhile: nothing left to finish. Anything else comes back with back-off.
      if (error instanceof ApiError && error.code === 404) return;
      throw error;
    }
    this.firstSeen.delete(name);
  }
}
