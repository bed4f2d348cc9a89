import { followingClient } from '../../client/following.js';
import { performance } from 'node:perf_hooks';
import { Informer } from '../../client/informer.js';
import { type ApiClient, ENDPOINTSLICES, SERVICES } from '../../client/types.js';
import type { Logger } from '../../logging/logger.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import { Nft, NftError, nftVersion } from './nftables.js';
import { type ExistingObjects, PROXY_TABLE, planServiceRules } from './service-rules.js';
import { slimServiceObject } from './service-model.js';

/**
 * The node's Service datapath kept current (kube-proxy's job): Services and EndpointSlices are
 * followed with informers through the node's client, and every change rebuilds table
 * `ip drover-proxy` (service-rules.ts) in one `nft -f -` transaction, after a short quiet time so
 * a burst of changes costs one rebuild. Nothing is written before both lists have been read once
 * (a table built from half the picture would drop traffic that works). Each sync is logged with
 * its rule count and how long it took.
 *
 * Only the chains that changed are rewritten (the proxy remembers what it wrote); every
 * `resyncMs` it reads the table's names from the kernel again and rewrites every chain, so rules
 * changed or removed by hand come back. `stop()` leaves the table in place, as kube-proxy does:
 * Services keep working while the agent restarts. `removeServiceRules()` deletes it.
 */

export interface ServiceProxyOptions {
  /** The node's current client (it changes when the agent moves to another server). */
  client: () => ApiClient;
  nodeName: string;
  /** The node's addresses where node ports answer (read at every sync). Empty: every local address. */
  nodeAddresses: () => string[];
  network: ServiceNetwork;
  logger: Logger;
  /** The nft binary, or a command prefix such as `ip netns exec <ns> nft`. Default `nft`. */
  nft?: string | readonly string[];
  /** Quiet time after a change before the rebuild. Default 50 ms. */
  debounceMs?: number;
  /** Full rewrite period. Default 5 minutes. */
  resyncMs?: number;
  /** Called after each sync that reached the kernel (benchmarks time propagation with it). */
  onSync?: (sync: ServiceSync) => void;
}

export interface ServiceSync {
  /** Rules the table holds after the sync. */
  rules: number;
  /** Chains rewritten (the others were unchanged). */
  written: number;
  servicePorts: number;
  ms: number;
  /** performance.now() when the rules were in the kernel. */
  at: number;
  /** The table's chains after the sync. */
  chains: readonly string[];
}

const RETRY_MS = [1000, 2000, 5000, 10_000, 30_000];
/** Chains and sets a sync emptied are deleted by a sync this much later. */
const DELETE_AFTER_MS = 1000;

export class ServiceProxy {
  private readonly nft: Nft;
  private readonly services: Informer;
  private readonly slices: Informer;
  private readonly logger: Logger;
  private readonly debounceMs: number;
  private readonly resyncMs: number;
  private timer: NodeJS.Timeout | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private running = false;
  private syncing: Promise<void> | undefined;
  /** A change came while a sync ran: sync again after it. */
  private pending = false;
  /** The next sync reads the kernel's names and rewrites every chain. */
  private fullNext = true;
  /** What the table holds, as far as this proxy knows (undefined: read it from the kernel). */
  private known: ExistingObjects | undefined;
  private lastScript: string | undefined;
  private failures = 0;
  private last: ServiceSync | undefined;

  constructor(private readonly options: ServiceProxyOptions) {
    this.nft = new Nft(options.nft ?? 'nft');
    this.logger = options.logger.child({ component: 'service-proxy' });
    this.debounceMs = options.debounceMs ?? 50;
    this.resyncMs = options.resyncMs ?? 5 * 60_000;
    const client = followingClient(options.client);
    const changed = (): void => this.schedule();
    this.services = new Informer(client, SERVICES, undefined, changed, this.logger, {}, slimServiceObject);
    this.slices = new Informer(client, ENDPOINTSLICES, undefined, changed, this.logger, {}, slimServiceObject);
  }

  /** The last sync that reached the kernel. */
  get lastSync(): ServiceSync | undefined {
    return this.last;
  }

  /**
   * Starts following; resolves once both first lists are read (or failed once: they keep
   * retrying). Throws at once, following nothing, when the nft command does not run.
   */
  async start(): Promise<void> {
    const version = await nftVersion(this.options.nft ?? 'nft');
    if (!version) throw new NftError(`cannot run ${JSON.stringify(this.options.nft ?? 'nft')} (Debian package nftables): Services get no datapath on this node`, '', null);
    this.logger.debug({ version }, 'nft found');
    this.running = true;
    await Promise.all([this.services.start(), this.slices.start()]);
    this.schedule();
    this.resyncTimer = setInterval(() => {
      this.fullNext = true;
      this.schedule();
    }, this.resyncMs);
    this.resyncTimer.unref();
  }

  /** Stops following and waits for a sync under way; the table stays (see removeServiceRules). */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    clearInterval(this.resyncTimer);
    this.services.stop();
    this.slices.stop();
    await this.syncing;
  }

  private schedule(delay = this.debounceMs): void {
    if (!this.running) return;
    if (this.syncing) {
      this.pending = true;
      return;
    }
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.syncing = this.sync().finally(() => {
        this.syncing = undefined;
        if (this.pending) {
          this.pending = false;
          this.schedule();
        }
      });
    }, delay);
  }

  private async sync(): Promise<void> {
    if (!this.running || !this.services.hasSynced || !this.slices.hasSynced) return;
    const started = performance.now();
    const full = this.fullNext || !this.known;
    try {
      if (full) {
        const names = await this.nft.readNames('ip', PROXY_TABLE);
        // No `contents`: every chain is written again.
        this.known = names;
        this.lastScript = undefined;
      }
      const plan = planServiceRules({
        services: this.services.items(),
        endpointSlices: this.slices.items(),
        nodeName: this.options.nodeName,
        nodeAddresses: this.options.nodeAddresses(),
        network: this.options.network,
        ...(this.known ? { existing: this.known } : {}),
      });
      if (plan.conflicts.length > 0) this.logger.warn({ conflicts: plan.conflicts.slice(0, 10) }, 'Services claim the same address and port; the first by name keeps it');
      if (plan.script !== this.lastScript) await this.nft.apply(plan.script);
      // What the plan emptied stays in the table until the next sync deletes it, a second from now.
      this.known = {
        chains: [...plan.chains, ...plan.flushed.chains],
        sets: [...plan.sets, ...plan.flushed.sets],
        contents: plan.contents,
        elements: plan.elements,
        flushed: plan.flushed,
      };
      if (plan.flushed.chains.length + plan.flushed.sets.length > 0) setTimeout(() => this.schedule(0), DELETE_AFTER_MS).unref();
      this.lastScript = plan.script;
      this.fullNext = false;
      this.failures = 0;
      const ms = Math.round(performance.now() - started);
      this.last = { rules: plan.rules, written: plan.writtenChains, servicePorts: plan.servicePorts, ms, at: performance.now(), chains: plan.chains };
      this.logger.info(
        { rules: plan.rules, chains: plan.chains.length, written: plan.writtenChains, emptied: plan.flushed.chains.length + plan.flushed.sets.length, deleted: plan.deleted, servicePorts: plan.servicePorts, full, ms },
        'service rules synced',
      );
    } catch (error) {
      // The transaction is all or nothing, but what the table holds is no longer sure: read it again.
      this.known = undefined;
      this.lastScript = undefined;
      const delay = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)]!;
      this.failures++;
      this.logger.error({ err: error, retryMs: delay }, 'service rules sync failed');
      setTimeout(() => this.schedule(0), delay).unref();
      return;
    }
    this.options.onSync?.(this.last);
  }
}

/** Deletes the node's Service datapath table (tests, and cleaning a node up); nothing if absent. */
export async function removeServiceRules(options: { nft?: string | readonly string[] } = {}): Promise<void> {
  await new Nft(options.nft ?? 'nft').deleteTable('ip', PROXY_TABLE);
}
