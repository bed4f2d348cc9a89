import { type ApiClient, DEPLOYMENTS, NODES, PODS, REPLICASETS, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { DeploymentController } from './deployment.js';
import { DisruptionController, PODDISRUPTIONBUDGETS } from './disruption.js';
import type { EventRecorder } from './events.js';
import { GarbageCollector } from './garbage-collector.js';
import { ReplicaSetController } from './replicaset.js';
import { Scheduler } from './scheduler.js';
import { StatefulSetController } from './statefulset.js';
import { SharedInformers } from '../client/shared-informers.js';

/**
 * The workload controllers in one piece, for the controller leader: the scheduler, the
 * ReplicaSet, Deployment, StatefulSet and disruption controllers and the garbage collector, over one shared
 * set of informers. Each is level-triggered: informer events queue keys, a periodic resync
 * queues every key again, and failures are retried with back-off.
 */

export interface WorkloadControllersOptions {
  logger: Logger;
  events: EventRecorder;
  /** ms between full resyncs (and garbage-collector sweeps); 30 s by default. */
  resyncMs?: number;
}

export interface WorkloadControllers {
  /** The informers the controllers share; others on the leader (failover) read them too. */
  readonly informers: SharedInformers;
  stop(): void;
}

export async function startWorkloadControllers(client: ApiClient, options: WorkloadControllersOptions): Promise<WorkloadControllers> {
  const { logger, events } = options;
  const informers = new SharedInformers(client, logger);
  const scheduler = new Scheduler(client, informers, events, logger.child({ controller: 'scheduler' }));
  const replicaSets = new ReplicaSetController(client, informers, events, logger.child({ controller: 'replicaset' }));
  const deployments = new DeploymentController(client, informers, events, logger.child({ controller: 'deployment' }));
  const statefulSets = new StatefulSetController(client, informers, events, logger.child({ controller: 'statefulset' }));
  const disruption = new DisruptionController(client, informers, logger.child({ controller: 'disruption' }));
  const collector = new GarbageCollector(client, informers, logger.child({ controller: 'garbage-collector' }));
  // Every resource is made known before the first list, so no controller misses an early event.
  for (const ref of [NODES, PODS, REPLICASETS, DEPLOYMENTS, STATEFULSETS, PODDISRUPTIONBUDGETS]) informers.get(ref);

  let stopped = false;
  const resyncMs = options.resyncMs ?? 30_000;
  const resync = (): void => {
    scheduler.resync();
    replicaSets.resync();
    deployments.resync();
    statefulSets.resync();
    disruption.resync();
    collector.sweep();
  };
  const timer = setInterval(resync, resyncMs);
  timer.unref?.();
  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
    informers.stop();
    scheduler.stop();
    replicaSets.stop();
    deployments.stop();
    statefulSets.stop();
    disruption.stop();
    collector.stop();
  };
  await informers.start();
  // A sweep right after the first lists catches dependents orphaned while no leader ran.
  if (!stopped) collector.sweep();
  logger.info({ resyncMs }, 'workload controllers started');
  return { informers, stop };
}
