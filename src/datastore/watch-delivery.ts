import type { WatchCallbacks, WatchEvent } from './types.js';

/**
 * The consumer side of one watch, the same for every backend: events and progress reports are
 * queued and handed to the callbacks together on a later turn of the event loop, so a consumer
 * never runs inside the store's own code (a write transaction, a gRPC stream handler), and a
 * consumer that throws ends only its own watch.
 */
export class WatchDelivery {
  private queue: WatchEvent[] = [];
  private scheduled = false;
  private progressDue = false;
  /** Cancelled or failed: nothing more is delivered. */
  private done = false;
  /** Also silences an onError that is scheduled but not yet delivered. */
  private cancelled = false;

  constructor(
    private readonly callbacks: WatchCallbacks,
    /**
     * The revision a due progress report carries, read when it is delivered (after every event
     * queued so far); undefined holds the report back until a later delivery.
     */
    private readonly progressRevision: () => number | undefined,
    /** Frees what the store holds for this watch; called once, when it is cancelled or fails. */
    private readonly release: () => void,
  ) {}

  get active(): boolean {
    return !this.done;
  }

  push(event: WatchEvent): void {
    if (this.done) return;
    this.queue.push(event);
    this.schedule();
  }

  /** Report progress once everything queued so far has been delivered. */
  progress(): void {
    if (this.done) return;
    this.progressDue = true;
    this.schedule();
  }

  cancel(): void {
    this.cancelled = true;
    this.end();
  }

  fail(error: Error): void {
    if (this.done) return;
    this.end();
    setImmediate(() => {
      if (!this.cancelled) this.callbacks.onError(error);
    });
  }

  private end(): void {
    if (this.done) return;
    this.done = true;
    this.queue = [];
    this.release();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.deliver());
  }

  private deliver(): void {
    this.scheduled = false;
    if (this.done) return;
    try {
      if (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        this.callbacks.onEvents(batch);
      }
      if (this.progressDue && !this.done) {
        const revision = this.progressRevision();
        if (revision !== undefined) {
          this.progressDue = false;
          this.callbacks.onProgress?.(revision);
        }
      }
    } catch (error) {
      // A failing consumer ends its own watch, not the process.
      this.fail(error instanceof Error ? error : new Error(String(error)));
    }
  }
}
