import { isIPv4 } from 'node:net';
import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
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
 * endpoint addresses, as in Kubernetes: such servers are left out of the list.
 */

const NAME = 'kubernetes';
const NAMESPACE = 'default';
const REFRESH_MS = 10_000;
const LABELS = { component: 'apiserver', provider: 'kubernetes' };

export class KubernetesServiceReconciler {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: ApiClient,
    private readonly directory: ApiServerDirectory,
    private readonly network: ServiceNetwork,
    private readonly logger: Logger,
  ) {}

  start(): void {
    const run = (): void => void this.reconcile().catch((error: unknown) => this.logger.warn({ err: error }, 'could not reconcile the kubernetes Service'));
    run();
    this.timer = setInterval(run, REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
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
