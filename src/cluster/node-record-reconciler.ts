import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, NODES } from '../client/types.js';
import { Informer } from '../client/informer.js';
import type { Logger } from '../logging/logger.js';
import type { NodeRecord, NodeRegistry } from './node-registry.js';

/**
 * Keeps node registration records in step with Node objects, on the controller leader only (one
 * writer, and a leader change runs a full sweep at once, so nothing seen by no leader is lost):
 *
 * - A record is bound to the Node its credential serves (`nodeUid`, and `activeAt` the first time).
 * - When that Node is deleted (`kubectl delete node`), its credential is revoked: every server
 *   refuses it (401) from the next watch event on, and the agent, if it still runs, registers
 *   again with its password and comes back as a new incarnation. The password binding stays:
 *   only `drover node forget` frees the name.
 * - A record that never had a Node (a registration that went nowhere) is removed once it is
 *   older than the unused-record TTL, so registrations do not accumulate forever.
 *
 * Why a Node informer here rather than a hook in the node lifecycle controller: this needs only
 * Node add/delete, and keeping it apart keeps credential rules out of health judgement.
 *
 * Every revocation is of a Node UID that is verified gone, and UIDs are never reused, so a late
 * or repeated event cannot revoke the credential of a newer incarnation: registration rebinds the
 * record (to the Node that exists then, or to none) and every write here is compare-and-swap.
 */

/** Records of names that never had a Node object are removed this long after their last registration. */
export const UNUSED_RECORD_TTL_MS = 60 * 60_000;
/** Test hook: the TTL in milliseconds, so a test can watch the collection happen in seconds. */
export const UNUSED_RECORD_TTL_ENV = 'DROVER_TEST_UNUSED_NODE_RECORD_TTL_MS';

export function unusedRecordTtlMs(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env[UNUSED_RECORD_TTL_ENV]);
  return Number.isFinite(value) && value > 0 ? value : UNUSED_RECORD_TTL_MS;
}

export interface NodeRecordReconcilerOptions {
  unusedTtlMs: number;
  /** How often every record is checked (missed events, garbage collection). */
  sweepIntervalMs?: number;
}

export class NodeRecordReconciler {
  private informer: Informer | undefined;
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;
  private running = false;
  private readonly sweepIntervalMs: number;

  constructor(
    private readonly registry: NodeRegistry,
    private readonly client: ApiClient,
    private readonly logger: Logger,
    private readonly options: NodeRecordReconcilerOptions,
  ) {
    this.sweepIntervalMs = options.sweepIntervalMs ?? Math.min(60_000, Math.max(1000, options.unusedTtlMs / 4));
  }

  async start(): Promise<void> {
    this.running = true;
    this.informer = new Informer(this.client, NODES, undefined, (type, node, old) => this.onNode(type, node, old), this.logger);
    await this.informer.start();
    this.timer = setInterval(() => void this.sweep(), this.sweepIntervalMs);
    this.timer.unref();
    void this.sweep();
  }

  stop(): void {
    this.running = false;
    clearInterval(this.timer);
    this.informer?.stop();
  }

  private onNode(type: string, node: KubeObject, old: KubeObject | undefined): void {
    const name = node.metadata.name!;
    const work = async (): Promise<void> => {
      if (type === 'DELETED') {
        await this.revoke(name, node);
        return;
      }
      // A re-list may show a Node replaced under the same name: the old one is gone for good.
      if (old && old.metadata.uid !== node.metadata.uid) await this.revoke(name, old);
      const record = this.registry.cached(name);
      if (record && !record.nodeUid) await this.bind(name);
    };
    work().catch((error: unknown) => this.logger.warn({ err: error, node: name }, 'could not update the node registration record'));
  }

  /**
   * Revoke the credential that served `gone` (a Node deleted for good): the record's, if it is
   * bound to that Node, or if it is bound to none yet and was registered before the Node's last
   * write (its credential was issued before the deletion, and the agent created that Node before
   * this leader bound the record to it). A registration after the deletion is a new incarnation's
   * and is kept.
   */
  private revoke(name: string, gone: KubeObject): Promise<void> {
    const uid = gone.metadata.uid!;
    const goneRevision = Number(gone.metadata.resourceVersion);
    return this.revokeIf(name, uid, (record, revision) => record.nodeUid === uid || (!record.nodeUid && revision < goneRevision));
  }

  private async revokeIf(name: string, uid: string, served: (record: NodeRecord, revision: number) => boolean): Promise<void> {
    const revoked = await this.registry.update(name, (record, revision) =>
      record.tokenHash && served(record, revision)
        ? withoutBinding({
            ...record,
            tokenHash: '',
            // It served a Node: never garbage-collected as unused (the binding must outlive the Node).
            activeAt: record.activeAt ?? new Date().toISOString(),
            revokedAt: new Date().toISOString(),
            revokedBecause: 'its Node was deleted',
          })
        : undefined,
    );
    if (revoked) this.logger.info({ node: name, uid }, 'revoked the node credential: its Node was deleted (the password binding stays)');
  }

  /** Bind an unbound record to the Node that exists now (read fresh: the informer may lag). */
  private async bind(name: string): Promise<void> {
    const node = await this.client.get(NODES, undefined, name);
    const uid = node?.metadata.uid;
    if (!uid) return;
    await this.registry.update(name, (record) =>
      record.nodeUid ? undefined : { ...record, nodeUid: uid, activeAt: record.activeAt ?? new Date().toISOString() },
    );
  }

  /** Every record against the Nodes: missed deletions, unbound records, never-active leftovers. */
  async sweep(): Promise<void> {
    if (this.sweeping || !this.running || !this.informer?.hasSynced) return;
    this.sweeping = true;
    try {
      for (const record of await this.registry.list()) {
        if (!this.running) return;
        await this.check(record).catch((error: unknown) =>
          this.logger.warn({ err: error, node: record.nodeName }, 'could not check the node registration record'),
        );
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'node registration sweep failed; will retry');
    } finally {
      this.sweeping = false;
    }
  }

  private async check(record: NodeRecord): Promise<void> {
    const name = record.nodeName;
    const cachedUid = this.informer!.get(undefined, name)?.metadata.uid;
    if (record.nodeUid) {
      if (cachedUid === record.nodeUid || !record.tokenHash) return;
      const current = await this.client.get(NODES, undefined, name);
      if (current?.metadata.uid === record.nodeUid) return;
      // Bound to a Node that no longer exists: a deletion no leader saw (leadership was changing).
      const uid = record.nodeUid;
      await this.revokeIf(name, uid, (now) => now.nodeUid === uid);
      return;
    }
    if (cachedUid) {
      await this.bind(name);
      return;
    }
    const age = Date.now() - Date.parse(record.registeredAt);
    if (record.activeAt || !(age > this.options.unusedTtlMs)) return;
    if (await this.client.get(NODES, undefined, name)) return;
    const removed = await this.registry.removeIf(
      name,
      (now) => !now.nodeUid && !now.activeAt && now.registeredAt === record.registeredAt,
    );
    if (removed) {
      this.logger.info(
        { node: name, nodeId: record.nodeId, registeredAt: record.registeredAt },
        'removed the registration of a node name that never had a Node object',
      );
    }
  }
}

function withoutBinding(record: NodeRecord): NodeRecord {
  const { nodeUid: _dropped, ...rest } = record;
  return rest;
}
