import { isIPv4 } from 'node:net';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { repairReservations } from '../apiserver/kinds/service-allocation.js';
import type { Datastore } from '../datastore/types.js';
import type { ApiServerDirectory } from '../cluster/apiservers.js';
import { type ApiClient, ENDPOINTS, ENDPOINTSLICES, SERVICES } from '../client/types.js';
import { MANAGED_BY_LABEL, SERVICE_NAME_LABEL } from '../controllers/endpoints-logic.js';
import type { Logger } from '../logging/logger.js';
import { firstServiceIp, type ServiceNetwork } from '../node-protocol/service-network.js';

/**
 * The default `kubernetes` Service in `default`, as kube-apiserver keeps it: ClusterIP the first
 * address of service-cidr, port 443 (`https`) to the API servers, no selector; its Endpoints and
 * EndpointSlice list the live servers of the server directory (address and port of each URL),
 * refreshed while this server leads. Loopback addresses (test clusters on 127.0.0.1) cannot be
 * endpoint addresses, as in Kubernetes: such servers are left out of the list. Once a minute it
 * also runs the repair pass of the Service address reservations.
 */

const NAME = 'kubernetes';
const NAMESPACE = 'default';
const REFRESH_MS = 10_000;
/** The repair pass runs every this many refreshes (a minute), freeing reservations older than a minute that no Service holds. */
const REPAIR_EVERY = 6;
const REPAIR_MIN_AGE_MS = 60_000;
const LABELS = { component: 'apiserver', provider: 'kubernetes' };

export class KubernetesServiceReconciler {
  private timer: NodeJS.Timeout | undefined;
  private ticks = 0;

  constructor(
    private readonly client: ApiClient,
    private readonly directory: ApiServerDirectory,
    private readonly network: ServiceNetwork,
    private readonly logger: Logger,
    /** The datastore of the Service allocators' reservations, for the repair pass. */
    private readonly datastore?: Datastore,
  ) {}

  start(): void {
    const run = (): void => {
      void this.reconcile().catch((error: unknown) => this.logger.warn({ err: error }, 'could not reconcile the kubernetes Service'));
      if (this.ticks++ % REPAIR_EVERY === REPAIR_EVERY - 1) {
        void this.repair().catch((error: unknown) => this.logger.warn({ err: error }, 'could not repair the Service address reservations'));
      }
    };
    run();
    this.timer = setInterval(run, REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Frees the ClusterIP and node port reservations no Service holds (a namespace deleted with its
   * Services, a type change that dropped node ports, a create that failed once reserved), as
   * kube-apiserver's repair controllers do.
   */
  async repair(): Promise<string[]> {
    if (!this.datastore) return [];
    const { items } = await this.client.list(SERVICES, undefined);
    const freed = await repairReservations(this.datastore, items, REPAIR_MIN_AGE_MS);
    if (freed.length) this.logger.info({ freed }, 'freed Service address reservations no Service holds');
    return freed;
  }

  /** The servers' addresses and ports, from their URLs. */
  private async servers(): Promise<{ ip: string; port: number }[]> {
    const out = new Map<string, { ip: string; port: number }>();
    for (const record of await this.directory.live()) {
      const url = new URL(record.url);
      const ip = url.hostname;
      if (!isIPv4(ip) || ip.startsWith('127.') || ip === '0.0.0.0') continue;
      out.set(`${ip}:${url.port}`, { ip, port: Number(url.port || 443) });
    }
    return [...out.values()].sort((a, b) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port));
  }

  async reconcile(): Promise<void> {
    const servers = await this.servers();
    const records = await this.directory.live();
    const targetPort = servers[0]?.port ?? Number(new URL(records[0]?.url ?? 'https://x:6443').port || 6443);
    if (!(await this.client.get(SERVICES, NAMESPACE, NAME))) {
      await this.createIgnoringConflict(SERVICES, {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: NAME, namespace: NAMESPACE, labels: LABELS },
        spec: { type: 'ClusterIP', clusterIP: firstServiceIp(this.network), ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort }] },
      });
    }
    const byPort = new Map<number, string[]>();
    for (const s of servers) byPort.set(s.port, [...(byPort.get(s.port) ?? []), s.ip]);
    const subsets = [...byPort].map(([port, ips]) => ({ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'https', port, protocol: 'TCP' }] }));
    await this.put(ENDPOINTS, { apiVersion: 'v1', kind: 'Endpoints', metadata: { name: NAME, namespace: NAMESPACE, labels: {} }, ...(subsets.length ? { subsets } : {}) });
    await this.put(ENDPOINTSLICES, {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: NAME, namespace: NAMESPACE, labels: { [SERVICE_NAME_LABEL]: NAME, [MANAGED_BY_LABEL]: 'endpointslicemirroring-controller.k8s.io' } },
      addressType: 'IPv4',
      endpoints: servers.map((s) => ({ addresses: [s.ip], conditions: { ready: true, serving: true, terminating: false } })),
      ports: [{ name: 'https', port: targetPort, protocol: 'TCP' }],
    });
  }

  private async createIgnoringConflict(ref: typeof SERVICES, obj: KubeObject): Promise<void> {
    try {
      await this.client.create(ref, NAMESPACE, obj);
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 409)) throw error;
    }
  }

  private async put(ref: typeof ENDPOINTS, desired: KubeObject): Promise<void> {
    const current = await this.client.get(ref, NAMESPACE, NAME);
    if (!current) return this.createIgnoringConflict(ref, desired);
    const content = (o: KubeObject): string => JSON.stringify([o.subsets ?? null, o.endpoints ?? null, o.ports ?? null]);
    if (content(current) === content(desired)) return;
    const next: KubeObject = { ...desired, metadata: { ...current.metadata, labels: desired.metadata.labels ?? {} } };
    await this.client.update(ref, NAMESPACE, next);
  }
}
