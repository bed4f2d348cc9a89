import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, CONTROLLER_REVISIONS, CRONJOBS, DAEMONSETS, DEPLOYMENTS, JOBS, NODES, PODS, REPLICASETS, RUNTIME_CLASSES, STATEFULSETS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock, type TimerHandle } from './clock.js';
import { CronJobController } from './cronjob.js';
import { DaemonSetController } from './daemonset.js';
import { DeploymentController } from './deployment.js';
import { DisruptionController, PODDISRUPTIONBUDGETS } from './disruption.js';
import type { EventRecorder } from './events.js';
import { GarbageCollector } from './garbage-collector.js';
import { JobController } from './job.js';
import { ReplicaSetController } from './replicaset.js';
import { Scheduler } from './scheduler.js';
import { StatefulSetController } from './statefulset.js';

/**
 * The workload controllers in one piece, for the controller leader: the scheduler, the
 * ReplicaSet, Deployment, StatefulSet and disruption controllers and the garbage collector, over
 * the leader's shared informers. Each is level-triggered: informer events queue keys, a periodic
 * resync queues every key again, and failures are retried with back-off.
 */

export interface WorkloadControllersOptions {
  logger: Logger;
  events: EventRecorder;
  /** ms between full resyncs (and garbage-collector sweeps); 30 s by default. */
  resyncMs?: number;
  clock?: Clock;
}

/** The resources the workload controllers follow; made known before the first list, so no controller misses an early event. */
export const WORKLOAD_RESOURCES = [NODES, PODS, REPLICASETS, DEPLOYMENTS, STATEFULSETS, PODDISRUPTIONBUDGETS, RUNTIME_CLASSES, DAEMONSETS, JOBS, CRONJOBS, CONTROLLER_REVISIONS];

export class WorkloadControllers {
  private readonly scheduler: Scheduler;
  private readonly replicaSets: ReplicaSetController;
  private readonly deployments: DeploymentController;
  private readonly statefulSets: StatefulSetController;
  private readonly daemonSets: DaemonSetController;
  private readonly jobs: JobController;
  private readonly cronJobs: CronJobController;
  private readonly disruption: DisruptionController;
  private readonly collector: GarbageCollector;
  private readonly clock: Clock;
  private readonly resyncMs: number;
  private timer: TimerHandle | undefined;
  private stopped = false;

  /** Registers every controller's handlers on `informers`, whose owner starts them (then call start()). */
  constructor(
    client: ApiClient,
    informers: SharedInformers,
    private readonly options: WorkloadControllersOptions,
  ) {
    const { logger, events } = options;
    this.clock = options.clock ?? systemClock;
    this.resyncMs = options.resyncMs ?? 30_000;
    for (const ref of WORKLOAD_RESOURCES) informers.get(ref);
    this.scheduler = new Scheduler(client, informers, events, logger.child({ controller: 'scheduler' }), this.clock);
    this.replicaSets = new ReplicaSetController(client, informers, events, logger.child({ controller: 'replicaset' }), this.clock);
    this.deployments = new DeploymentController(client, informers, events, logger.child({ controller: 'deployment' }), this.clock);
    this.statefulSets = new StatefulSetController(client, informers, events, logger.child({ controller: 'statefulset' }), this.clock);
    this.daemonSets = new DaemonSetController(client, informers, events, logger.child({ controller: 'daemonset' }), this.clock);
    this.jobs = new JobController(client, informers, events, logger.child({ controller: 'job' }), this.clock);
    this.cronJobs = new CronJobController(client, informers, events, logger.child({ controller: 'cronjob' }), this.clock);
    this.disruption = new DisruptionController(client, informers, logger.child({ controller: 'disruption' }), this.clock);
    this.collector = new GarbageCollector(client, informers, logger.child({ controller: 'garbage-collector' }), this.clock);
  }

  /** After the informers' first lists: a sweep catches dependents orphaned while no leader ran; then the resyncs. */
  start(): void {
    if (this.stopped) return;
    this.collector.sweep();
    this.scheduleResync();
    this.options.logger.info({ resyncMs: this.resyncMs }, 'workload controllers started');
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    this.scheduler.stop();
    this.replicaSets.stop();
    this.deployments.stop();
    this.statefulSets.stop();
    this.daemonSets.stop();
    this.jobs.stop();
    this.cronJobs.stop();
    this.disruption.stop();
    this.collector.stop();
  }

  private scheduleResync(): void {
    this.timer = this.clock.setTimeout(() => {
      if (this.stopped) return;
      this.scheduler.resync();
      this.replicaSets.resync();
      this.deployments.resync();
      this.statefulSets.resync();
      this.daemonSets.resync();
      this.jobs.resync();
      this.cronJobs.resync();
      this.disruption.resync();
      this.collector.sweep();
      this.scheduleResync();
    }, this.resyncMs);
  }
}
