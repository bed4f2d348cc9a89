import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../../src/apiserver/resources.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { kubeMicroTime, type KubeObject } from '../../src/apiserver/objects.js';
import { LocalClient } from '../../src/client/local.js';
import { LEASES, NAMESPACES, NODES, SERVICEACCOUNTS } from '../../src/client/types.js';
import type { FakeClock } from '../../src/controllers/clock.js';
import { type SqliteDatastore, openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { createLogger, type Logger } from '../../src/logging/logger.js';
import { leaseHolderIdentity, NODE_LEASE_NAMESPACE, STATE_LABEL } from '../../src/node-protocol/names.js';

/**
 * The API as controllers see it inside a server, without the server: an in-memory SQLite
 * datastore, the ObjectStore and resource registry over it, and the real LocalClient. For unit
 * tests that run controllers in-process on a FakeClock.
 */
export interface InProcessApi {
  datastore: SqliteDatastore;
  store: ObjectStore;
  registry: ResourceRegistry;
  client: LocalClient;
  logger: Logger;
  close(): Promise<void>;
}

export async function inProcessApi(): Promise<InProcessApi> {
  const datastore = openSqliteDatastore(':memory:');
  const store = new ObjectStore(datastore);
  const registry = new ResourceRegistry();
  // As the test servers: pods without a runtimeClassName are processes (nodes here report no handlers, so process only).
  const client = new LocalClient(store, registry, { defaultRuntimeClass: 'process' });
  for (const name of BUILT_IN_NAMESPACES) {
    await client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    // What a server's ServiceAccount controller makes at once: pods are admitted only with their account.
    await client.create(SERVICEACCOUNTS, name, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default', namespace: name } });
  }
  const logger = createLogger(process.env.DROVER_TEST_LOGS ? 'debug' : 'silent');
  return { datastore, store, registry, client, logger, close: () => datastore.close() };
}

/**
 * Plays a node's agent through the client, as src/agent does over HTTPS: registers the Node, then
 * renews its Lease (holder `<name>/<uid>`, renewTime by the fake wall clock) when told to.
 */
export class InProcessNode {
  uid = '';

  constructor(
    private readonly api: InProcessApi,
    private readonly clock: FakeClock,
    readonly name: string,
  ) {}

  async register(): Promise<KubeObject> {
    const node = await this.api.client.create(NODES, undefined, { apiVersion: 'v1', kind: 'Node', metadata: { name: this.name } });
    this.uid = node.metadata.uid!;
    return node;
  }

  async renew(): Promise<void> {
    const spec = { holderIdentity: leaseHolderIdentity(this.name, this.uid), renewTime: kubeMicroTime(this.clock.wallNow()), leaseDurationSeconds: 4 };
    const current = await this.api.client.get(LEASES, NODE_LEASE_NAMESPACE, this.name);
    if (!current) {
      await this.api.client.create(LEASES, NODE_LEASE_NAMESPACE, {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.name, namespace: NODE_LEASE_NAMESPACE },
        spec,
      });
    } else {
      await this.api.client.patch(LEASES, NODE_LEASE_NAMESPACE, this.name, 'merge', { spec });
    }
  }

  async node(): Promise<KubeObject | undefined> {
    return this.api.client.get(NODES, undefined, this.name);
  }

  async state(): Promise<string | undefined> {
    return (await this.node())?.metadata.labels?.[STATE_LABEL];
  }
}

/**
 * Advance the fake clock by `totalMs` in steps of `stepMs`, with `each` (renewals of the nodes
 * still alive, say) run before every step. Small steps let each controller tick finish before
 * the next one is due, as on a real clock.
 */
export async function advance(clock: FakeClock, totalMs: number, each?: () => Promise<void>, stepMs = 250): Promise<void> {
  for (let done = 0; done < totalMs; done += stepMs) {
    await each?.();
    await clock.advance(Math.min(stepMs, totalMs - done));
  }
}
