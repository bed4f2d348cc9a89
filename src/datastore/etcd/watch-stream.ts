import type { Etcd3, IDuplexStream, IEvent, IWatchRequest, IWatchResponse } from 'etcd3';

import { DatastoreError } from '../types.js';
import { num } from './encoding.js';

export interface RawHandler {
  /** Events for this watcher, in revision order. */
  events(events: IEvent[]): void;
  /** etcd cancelled the watcher because its next revision was compacted. No further calls. */
  compacted(compactRevision: number): void;
  /** The watcher cannot go on (stream down too long, permission denied...). No further calls. */
  failed(error: Error): void;
}

/** One etcd watcher on the shared stream. It resumes from `nextRevision` after a reconnect. */
export class RawWatcher {
  id = 0;
  /** The stream the create request was written to (a cancel goes to the same stream). */
  sentOn: IDuplexStream<IWatchRequest, IWatchResponse> | undefined;

  constructor(
    readonly key: Buffer,
    readonly rangeEnd: Buffer,
    readonly prevKv: boolean,
    public nextRevision: number,
    readonly handler: RawHandler,
  ) {}
}

/**
 * One bidirectional etcd Watch stream carrying every etcd watcher of the datastore, each under a
 * watch ID chosen here (etcd >= 3.4 accepts client-chosen IDs). When the stream breaks it is
 * re-established with backoff and every watcher is re-created from the revision after the last
 * event it received, so nothing is lost or repeated; after `retryTimeoutMs` without a working
 * stream, every watcher fails.
 */
export class WatchStream {
  private stream: IDuplexStream<IWatchRequest, IWatchResponse> | undefined;
  private connecting = false;
  private readonly watchers = new Map<number, RawWatcher>();
  /** IDs cancelled on the current stream whose cancel confirmation has not arrived yet. */
  private cancelled = new Set<number>();
  private nextId = 1;
  private closed = false;
  private backoffMs = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private brokenSince: number | undefined;

  constructor(
    private readonly client: Etcd3,
    private readonly retryTimeoutMs: number,
  ) {}

  add(watcher: RawWatcher): void {
    if (this.closed) {
      const error = new DatastoreError('the datastore was closed');
      setImmediate(() => watcher.handler.failed(error));
      return;
    }
    watcher.id = this.nextId++;
    this.watchers.set(watcher.id, watcher);
    if (this.stream) this.sendCreate(this.stream, watcher);
    else this.connect();
  }

  remove(watcher: RawWatcher): void {
    if (this.watchers.get(watcher.id) !== watcher) return;
    this.watchers.delete(watcher.id);
    if (this.stream && watcher.sentOn === this.stream) {
      this.cancelled.add(watcher.id);
      this.write(this.stream, { cancel_request: { watch_id: watcher.id } });
    }
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.watchers.clear();
    const stream = this.stream;
    this.stream = undefined;
    if (stream) {
      try {
        stream.cancel();
      } catch {
        // Already gone.
      }
    }
  }

  private write(stream: IDuplexStream<IWatchRequest, IWatchResponse>, request: IWatchRequest): void {
    try {
      stream.write(request);
    } catch (error) {
      this.broken(stream, error instanceof Error ? error : new Error(String(error)));
    }
  }

  private sendCreate(stream: IDuplexStream<IWatchRequest, IWatchResponse>, watcher: RawWatcher): void {
    watcher.sentOn = stream;
    this.write(stream, {
      create_request: {
        key: watcher.key,
        range_end: watcher.rangeEnd,
        start_revision: Math.max(1, watcher.nextRevision),
        prev_kv: watcher.prevKv,
        watch_id: watcher.id,
      },
    });
  }

  private connect(): void {
    if (this.closed || this.stream || this.connecting) return;
    this.connecting = true;
    this.client.watchClient.watch().then(
      (stream) => {
        this.connecting = false;
        if (this.closed) {
          stream.cancel();
          return;
        }
        this.stream = stream;
        this.cancelled = new Set();
        stream.on('data', (response) => this.onResponse(stream, response));
        stream.on('error', (error) => this.broken(stream, error));
        stream.on('end', () => this.broken(stream, new Error('the etcd watch stream ended')));
        for (const watcher of [...this.watchers.values()]) {
          if (this.stream === stream) this.sendCreate(stream, watcher);
        }
      },
      (error: unknown) => {
        this.connecting = false;
        this.broken(undefined, error instanceof Error ? error : new Error(String(error)));
      },
    );
  }

  private broken(stream: IDuplexStream<IWatchRequest, IWatchResponse> | undefined, error: Error): void {
    if (stream !== undefined && stream !== this.stream) return; // an old stream's last words
    if (stream) {
      this.stream = undefined;
      try {
        stream.cancel();
      } catch {
        // Already gone.
      }
    }
    if (this.closed) return;
    const now = Date.now();
    this.brokenSince ??= now;
    if (now - this.brokenSince >= this.retryTimeoutMs) {
      const failure = new DatastoreError(`the etcd watch stream is unavailable: ${error.message}`, { cause: error });
      const watchers = [...this.watchers.values()];
      this.watchers.clear();
      this.brokenSince = undefined;
      this.backoffMs = 0;
      for (const watcher of watchers) watcher.handler.failed(failure);
      return;
    }
    if (this.watchers.size === 0) {
      // Nobody to resume; the next watcher reconnects.
      this.brokenSince = undefined;
      return;
    }
    this.backoffMs = Math.min(2000, Math.max(50, this.backoffMs * 2));
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connect();
    }, this.backoffMs);
  }

  private onResponse(stream: IDuplexStream<IWatchRequest, IWatchResponse>, response: IWatchResponse): void {
    if (stream !== this.stream) return;
    this.brokenSince = undefined;
    this.backoffMs = 0;
    const id = num(response.watch_id);
    if (id === -1) return; // a progress broadcast; not used (see the module comment)
    const watcher = this.watchers.get(id);
    if (!watcher || watcher.sentOn !== stream) {
      if (this.cancelled.has(id)) {
        if (response.canceled) this.cancelled.delete(id);
      } else if (!response.canceled && !watcher) {
        // Not ours (any more): make sure etcd stops sending it.
        this.cancelled.add(id);
        this.write(stream, { cancel_request: { watch_id: id } });
      }
      return;
    }
    try {
      if (response.canceled) {
        this.watchers.delete(id);
        const compactRevision = num(response.compact_revision);
        if (compactRevision > 0) watcher.handler.compacted(compactRevision);
        else {
          watcher.handler.failed(
            new DatastoreError(`etcd cancelled the watch: ${response.cancel_reason || 'no reason given'}`),
          );
        }
        return;
      }
      const events = response.events ?? [];
      if (events.length > 0) {
        watcher.nextRevision = num(events[events.length - 1]!.kv.mod_revision) + 1;
        watcher.handler.events(events);
      }
    } catch (error) {
      // A handler bug must not take the shared stream down; fail just that watcher.
      this.watchers.delete(id);
      this.cancelled.add(id);
      this.write(stream, { cancel_request: { watch_id: id } });
      try {
        watcher.handler.failed(error instanceof Error ? error : new Error(String(error)));
      } catch {
        // Nothing more to do.
      }
    }
  }
}
