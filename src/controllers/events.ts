import { randomBytes } from 'node:crypto';
import { type KubeObject, kubeMicroTime, kubeTime } from '../apiserver/objects.js';
import { type ApiClient, EVENTS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { type Clock, systemClock } from './clock.js';

/**
 * Emits core/v1 Events, the record `kubectl get events` and `kubectl describe` show. Their
 * timestamps (and the time in their names) are the wall time of the controllers' clock, so a test
 * driving a FakeClock sees events dated by it.
 */

export interface InvolvedObject {
  kind: string;
  name: string;
  namespace?: string;
  uid?: string;
  apiVersion?: string;
}

export class EventRecorder {
  constructor(
    private readonly client: ApiClient,
    private readonly component: string,
    private readonly instance: string,
    private readonly logger: Logger,
    private readonly clock: Clock = systemClock,
  ) {}

  async record(
    involved: InvolvedObject,
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
  ): Promise<void> {
    const now = this.clock.wallNow();
    const namespace = involved.namespace || 'default';
    const event: KubeObject = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: {
        name: `${involved.name}.${now.toString(16)}${randomBytes(2).toString('hex')}`,
        namespace,
      },
      involvedObject: { apiVersion: 'v1', ...involved, namespace: involved.namespace ?? '' },
      reason,
      message,
      type,
      source: { component: this.component, host: this.instance },
      firstTimestamp: kubeTime(now),
      lastTimestamp: kubeTime(now),
      eventTime: kubeMicroTime(now),
      count: 1,
      reportingComponent: this.component,
      reportingInstance: this.instance,
    };
    this.logger.info({ object: `${involved.kind.toLowerCase()}/${involved.name}`, reason, type }, message);
    try {
      await this.client.create(EVENTS, namespace, event);
    } catch (error) {
      this.logger.warn({ err: error, reason }, 'could not record event');
    }
  }
}
