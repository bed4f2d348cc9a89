import type { Logger } from '../logging/logger.js';
import { type ChangeHandler, Informer } from './informer.js';
import type { ApiClient, ResourceRef } from './types.js';

/**
 * One informer per resource, shared by every workload controller (the scheduler, the ReplicaSet
 * and StatefulSet controllers and the garbage collector all follow pods): one list and one watch
 * each, with every controller's handler called on each change.
 */
export class SharedInformers {
  private readonly informers = new Map<string, Informer>();
  private readonly handlers = new Map<string, ChangeHandler[]>();

  constructor(
    private readonly client: ApiClient,
    private readonly logger: Logger,
  ) {}

  /** The informer of `ref` (all namespaces), created on first use. */
  get(ref: ResourceRef): Informer {
    const id = refId(ref);
    let informer = this.informers.get(id);
    if (!informer) {
      const handlers: ChangeHandler[] = [];
      this.handlers.set(id, handlers);
      informer = new Informer(
        this.client,
        ref,
        undefined,
        (type, obj, old) => {
          for (const handler of handlers) handler(type, obj, old);
        },
        this.logger.child({ informer: ref.plural }),
      );
      this.informers.set(id, informer);
    }
    return informer;
  }

  on(ref: ResourceRef, handler: ChangeHandler): void {
    this.get(ref);
    this.handlers.get(refId(ref))!.push(handler);
  }

  /** Starts every informer; resolves after each first list (or its first failure: it keeps retrying). */
  async start(): Promise<void> {
    await Promise.all([...this.informers.values()].map((informer) => informer.start()));
  }

  stop(): void {
    for (const informer of this.informers.values()) informer.stop();
  }
}

function refId(ref: ResourceRef): string {
  return `${ref.group}/${ref.version}/${ref.plural}`;
}
