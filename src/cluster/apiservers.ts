import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * Which servers are up, for agents to fail over between. Each server keeps a small record of its
 * URL fresh in the datastore; a record not refreshed for a while belongs to a server that is gone.
 */

const PREFIX = '/drover/apiservers/';
const REFRESH_MS = 5000;
const STALE_MS = 15_000;

export interface ApiServerRecord {
  id: string;
  url: string;
  node: string;
  refreshedAt: number;
}

export class ApiServerDirectory {
  private timer: NodeJS.Timeout | undefined;
  private self: Omit<ApiServerRecord, 'refreshedAt'> | undefined;

  constructor(
    private readonly datastore: Datastore,
    private readonly logger: Logger,
  ) {}

  private key(): string {
    return `${PREFIX}${this.self!.id}`;
  }

  /** Announce this server (once it listens, so its URL is known). */
  async start(self: Omit<ApiServerRecord, 'refreshedAt'>): Promise<void> {
    this.self = self;
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  private async refresh(): Promise<void> {
    if (!this.self) return;
    const record: ApiServerRecord = { ...this.self, refreshedAt: Date.now() };
    const value = Buffer.from(JSON.stringify(record));
    try {
      const existing = await this.datastore.get(this.key());
      if (existing) await this.datastore.update(this.key(), value, existing.modRevision);
      else await this.datastore.create(this.key(), value);
    } catch (error) {
      this.logger.debug({ err: error }, 'could not refresh this server’s entry in the server directory');
    }
  }

  /** Leaving on purpose: agents should not try this server any more. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    if (!this.self) return;
    try {
      await this.datastore.delete(this.key());
    } catch {
      // already gone
    }
  }

  async live(now = Date.now()): Promise<ApiServerRecord[]> {
    const { items } = await this.datastore.list(PREFIX);
    return items
      .map((kv) => JSON.parse(kv.value.toString('utf8')) as ApiServerRecord)
      .filter((r) => now - r.refreshedAt < STALE_MS);
  }
}
