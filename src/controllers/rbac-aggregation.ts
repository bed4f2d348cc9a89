import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { aggregatedRules, sameRules } from '../apiserver/rbac/aggregation.js';
import type { ClusterRole } from '../apiserver/rbac/types.js';
import { Informer } from '../client/informer.js';
import { type ApiClient, CLUSTER_ROLES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import type { Clock } from './clock.js';
import type { LeaderOnlyController } from './controller-manager.js';
import { WorkQueue } from './work-queue.js';

/**
 * The ClusterRole aggregation controller, as kube-controller-manager's: a ClusterRole with an
 * `aggregationRule` gets as its rules the union of the rules of every ClusterRole its selectors
 * pick (../apiserver/rbac/aggregation.ts computes them). Any ClusterRole change may change what an
 * aggregated role should hold, so every change queues every aggregated role; each is written only
 * when its rules differ. Chains settle by themselves: `view` carries the label `edit` selects, so
 * writing `view` queues `edit` again (and `admin` after it).
 *
 * Leader only, one term at a time: start() lists and watches ClusterRoles afresh, stop() ends it.
 */
export class ClusterRoleAggregationController implements LeaderOnlyController {
  private informer: Informer | undefined;
  private queue: WorkQueue | undefined;

  constructor(
    private readonly client: ApiClient,
    private readonly logger: Logger,
    private readonly options: { clock?: Clock } = {},
  ) {}

  async start(): Promise<void> {
    this.stop();
    const queue = new WorkQueue('clusterrole-aggregation', (name) => this.reconcile(informer, name), this.logger, {
      concurrency: 1,
      ...(this.options.clock ? { clock: this.options.clock } : {}),
    });
    const informer = new Informer(this.client, CLUSTER_ROLES, undefined, () => this.queueAggregated(informer, queue), this.logger);
    this.informer = informer;
    this.queue = queue;
    await informer.start();
    this.queueAggregated(informer, queue);
  }

  stop(): void {
    this.queue?.stop();
    this.informer?.stop();
    this.queue = undefined;
    this.informer = undefined;
  }

  /** For tests: nothing queued or being written. */
  get idle(): boolean {
    return this.queue?.idle ?? true;
  }

  private queueAggregated(informer: Informer, queue: WorkQueue): void {
    for (const role of informer.items()) {
      if (isAggregated(role)) queue.add(role.metadata.name ?? '');
    }
  }

  private async reconcile(informer: Informer, name: string): Promise<void> {
    const stored = informer.get(undefined, name);
    if (!stored || !isAggregated(stored)) return;
    const role = clusterRole(stored);
    const { rules, errors } = aggregatedRules(role, informer.items().map(clusterRole));
    if (errors.length) this.logger.warn({ clusterRole: name, errors }, 'aggregation rule has invalid selectors; they select nothing');
    if (sameRules(role.rules ?? [], rules)) return;
    try {
      // A compare-and-swap on the version the cache holds: a newer one brings its own event.
      await this.client.update(CLUSTER_ROLES, undefined, { ...stored, rules });
      this.logger.info({ clusterRole: name, rules: rules.length }, 'aggregated the rules of a ClusterRole');
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return;
      throw error;
    }
  }
}

/** A stored ClusterRole in the authorizer's type (../apiserver/rbac/types.ts), as the RBAC cache reads it. */
function clusterRole(stored: KubeObject): ClusterRole {
  return stored as unknown as ClusterRole;
}

function isAggregated(role: KubeObject): boolean {
  return (clusterRole(role).aggregationRule?.clusterRoleSelectors ?? []).length > 0;
}
