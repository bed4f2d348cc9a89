import type { Logger } from '../logging/logger.js';
import { type ChangeHandler, Informer } from './informer.js';
import type { ApiClient, ResourceRef } from './types.js';

/**
 * One informer per resource (and namespace), shared by every controller on the leader (the node
 * lifecycle controller, the scheduler, the ReplicaSet and StatefulSet controllers, failover and
 * the garbage collector all follow nodes or pods): one list and one watch each, with every
 * controller's handler called on each change, as client-go's shared informer factory does.
 */
export class SharedInformers {
  private readonly informers = new Map<string, Informer>();
  private readonly handlers = new Map<string, ChangeHandler[]>();

  constructor(
    private readonly client: ApiClient,
    private readonly logger: Logger,
  ) {}

  /** The informer of `ref` in `namespace` (all namespaces when undefined), created on first use. */
  get(ref: ResourceRef, namespace?: string): Informer {
    const id = refId(ref, namespace);
    let informer = this.informers.get(id);
    if (!informer) {
      const handlers: ChangeHandler[] = [];
      this.handlers.set(id, handlers);
      informer = new Informer(
        this.client,
        ref,
        namespace,
        (type, obj, old) => {
          for (const handler of handlers) handler(type, obj, old);
        },
        this.logger.child({ informer: ref.plural }),
      );
      this.informers.set(id, informer);
    }
    return informer;
  }

  /** Call `handler` on every change; register before start() to see the first list. */
  on(ref: ResourceRef, handler: ChangeHandler, namespace?: string): void {
    this.get(ref, namespace);
    this.handlers.get(refId(ref, namespace))!.push(handler);
  }

  /** Starts every informer; resolves after each first list (or its first failure: it keeps retrying). */
  async start(): Promise<void> {
    await Promise.all([...this.informers.values()].map((informer) => informer.start()));
  }

  /** Every informer has listed at least once (a failed first list leaves start() resolved but this false). */
  get hasSynced(): boolean {
    return [...this.informers.values()].every((informer) => informer.hasSynced);
  }

  stop(): void {
    for (const informer of this.informers.values()) informer.stop();
  }
}

function refId(ref: ResourceRef, namespace: string | undefined): string {
  return `${ref.group}/${ref.version}/${ref.plural}${namespace === undefined ? '' : ` in ${namespace}`}`;
}
