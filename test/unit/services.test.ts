/**
 * v1 Service rules without a server: kube-apiserver's defaults and validation
 * (src/apiserver/kinds/service-validation.ts), and ClusterIP / NodePort allocation against a real
 * in-memory SQLite datastore (src/apiserver/kinds/service-allocation.ts): requested addresses
 * outside the range or taken are refused with kube-apiserver's words, concurrent creates through
 * two stores on one datastore (two servers) never share an address, deletes and type changes give
 * addresses back, and the repair pass frees what no Service holds.
 *
 * Run: node --import tsx --test test/unit/services.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import type { Authorizer } from '../../src/apiserver/auth.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../../src/apiserver/resources.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { NODE_PORT_PREFIX, repairReservations, SERVICE_IP_PREFIX } from '../../src/apiserver/kinds/service-allocation.js';
import { applyServiceDefaults, validateService } from '../../src/apiserver/kinds/service-validation.js';
import { LocalClient } from '../../src/client/local.js';
import { NAMESPACES, type ResourceRef } from '../../src/client/types.js';
import { openSqliteDatastore, type SqliteDatastore } from '../../src/datastore/sqlite.js';
import { type Cidr, defaultServiceNetwork, nextNodeCidr, nodeCidrGateway, parseCidr, parseServiceNetwork, SERVICE_NETWORK_DEFAULTS, type ServiceNetwork } from '../../src/node-protocol/service-network.js';
import { ApiServerDirectory } from '../../src/cluster/apiservers.js';
import { NodeAuthorizer } from '../../src/cluster/node-authorization.js';
import { createLogger } from '../../src/logging/logger.js';
import { KubernetesServiceReconciler } from '../../src/server/kubernetes-service.js';

const SERVICES: ResourceRef = { group: '', version: 'v1', plural: 'services', namespaced: true };

const svc = (name: string, spec: Record<string, unknown>): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name }, spec });

function network(serviceCidr: string, serviceNodePortRange: string, clusterDns: string): ServiceNetwork {
  const { network: parsed, problems } = parseServiceNetwork({ clusterCidr: '10.42.0.0/16', serviceCidr, serviceNodePortRange, clusterDns, clusterDomain: 'cluster.local' });
  assert.deepEqual(problems, []);
  return parsed!;
}

async function refused(promise: Promise<unknown>, code: number, pattern: RegExp): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof ApiError, String(error));
    assert.equal(error.code, code, error.message);
    assert.match(error.message, pattern);
    return true;
  });
}

describe('Service defaults and validation', () => {
  const checked = (spec: Record<string, unknown>): string[] => {
    const s = svc('x', spec);
    applyServiceDefaults(s);
    return validateService(s).map((c) => `${c.field}: ${c.message}`);
  };

  it('defaults a ClusterIP Service as kube-apiserver does', () => {
    const s = svc('x', { ports: [{ port: 80 }], selector: { app: 'web' } });
    applyServiceDefaults(s);
    assert.deepEqual(s.spec, {
      ports: [{ port: 80, protocol: 'TCP', targetPort: 80 }],
      selector: { app: 'web' },
      type: 'ClusterIP',
      sessionAffinity: 'None',
      internalTrafficPolicy: 'Cluster',
      ipFamilyPolicy: 'SingleStack',
      ipFamilies: ['IPv4'],
    });
    const affinity = svc('y', { type: 'NodePort', ports: [{ port: 80 }], sessionAffinity: 'ClientIP' });
    applyServiceDefaults(affinity);
    assert.deepEqual((affinity.spec as Record<string, unknown>).sessionAffinityConfig, { clientIP: { timeoutSeconds: 10800 } });
    assert.equal((affinity.spec as Record<string, unknown>).externalTrafficPolicy, 'Cluster');
  });

  it('refuses what kube-apiserver refuses, naming the field', () => {
    assert.deepEqual(checked({ ports: [] }), ['spec.ports: Required value']);
    assert.deepEqual(checked({ ports: [{ port: 80 }, { port: 81 }] }), ['spec.ports[0].name: Required value', 'spec.ports[1].name: Required value']);
    assert.match(checked({ ports: [{ port: 70000 }] }).join(), /spec.ports\[0\].port: Invalid value: 70000: must be between 1 and 65535, inclusive/);
    assert.match(checked({ ports: [{ port: 80, protocol: 'ICMP' }] }).join(), /spec.ports\[0\].protocol: Unsupported value: "ICMP"/);
    assert.match(checked({ ports: [{ port: 80, targetPort: 'Not_A_Name' }] }).join(), /spec.ports\[0\].targetPort: Invalid value: "Not_A_Name"/);
    assert.match(checked({ ports: [{ port: 80, nodePort: 30000 }] }).join(), /spec.ports\[0\].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'/);
    assert.match(checked({ type: 'Foo', ports: [{ port: 80 }] }).join(), /spec.type: Unsupported value: "Foo": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"/);
    assert.match(checked({ type: 'NodePort', clusterIP: 'None', ports: [{ port: 80 }] }).join(), /may not be set to 'None' for LoadBalancer or NodePort services/);
    assert.match(checked({ type: 'ExternalName' }).join(), /spec.externalName: Required value/);
    assert.match(checked({ type: 'ExternalName', externalName: 'db.example.com', clusterIP: '10.43.0.5' }).join(), /spec.clusterIPs: Forbidden: may not be set for ExternalName services/);
    assert.match(checked({ ports: [{ port: 80 }], clusterIP: '10.43.0.5', clusterIPs: ['10.43.0.6'] }).join(), /spec.clusterIPs\[0\]: Invalid value: "10.43.0.6": must match `clusterIP`/);
    assert.match(checked({ ports: [{ port: 80 }], ipFamilyPolicy: 'RequireDualStack' }).join(), /not configured for dual-stack/);
    assert.match(checked({ ports: [{ port: 80 }], externalTrafficPolicy: 'Local' }).join(), /spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services/);
    assert.match(checked({ ports: [{ port: 80 }], sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } } }).join(), /timeoutSeconds/);
  });

  it('takes headless, ExternalName, named target ports and several named ports', () => {
    assert.deepEqual(checked({ clusterIP: 'None', selector: { app: 'db' } }), []);
    assert.deepEqual(checked({ type: 'ExternalName', externalName: 'db.example.com.' }), []);
    assert.deepEqual(checked({ ports: [{ name: 'http', port: 80, targetPort: 'web' }, { name: 'https', port: 443, targetPort: 8443 }] }), []);
    assert.deepEqual(checked({ type: 'LoadBalancer', ports: [{ port: 80 }], externalTrafficPolicy: 'Local' }), []);
  });
});

describe('the Service network settings', () => {
  it('refuses CIDRs that do not parse, a cluster-dns outside service-cidr, overlaps and bad ranges, naming key and source', () => {
    const problems = parseServiceNetwork(
      { clusterCidr: '10.42.0.0/16', serviceCidr: '10.43.0.0/16', serviceNodePortRange: '32767-30000', clusterDns: '10.44.0.10', clusterDomain: 'cluster.local' },
      (key) => `flag:--${key}`,
    ).problems;
    assert.deepEqual(problems, [
      'service-node-port-range (flag:--service-node-port-range): "32767-30000": the ports must satisfy 1 <= first <= last <= 65535',
      'cluster-dns 10.44.0.10 (flag:--cluster-dns) must lie inside service-cidr 10.43.0.0/16 (flag:--service-cidr)',
    ]);
    assert.match(parseServiceNetwork({ clusterCidr: '10.42.0.1/16', serviceCidr: 'nope', serviceNodePortRange: '1-2', clusterDns: '10.43.0.10', clusterDomain: 'Bad_Domain' }).problems.join('\n'),
      /cluster-cidr \(default\): "10.42.0.1\/16" has host bits set[\s\S]*service-cidr \(default\): "nope" is not an IPv4 CIDR[\s\S]*cluster-domain/);
    assert.match(parseServiceNetwork({ clusterCidr: '10.0.0.0/8', serviceCidr: '10.43.0.0/16', serviceNodePortRange: '30000-32767', clusterDns: '10.43.0.10', clusterDomain: 'cluster.local' }).problems.join(), /overlap/);
  });
});

describe('ClusterIP and NodePort allocation', () => {
  let datastore: SqliteDatastore;
  let a: LocalClient;
  let b: LocalClient;
  // A /28: 16 addresses, 12 to hand out dynamically (not .0, .1, .15 or the DNS address .10).
  const small = network('10.96.0.0/28', '30000-30009', '10.96.0.10');

  before(async () => {
    datastore = openSqliteDatastore(':memory:');
    // Two stores and clients on one datastore: what two servers sharing it are.
    a = new LocalClient(new ObjectStore(datastore), new ResourceRegistry(), { serviceNetwork: small });
    b = new LocalClient(new ObjectStore(datastore), new ResourceRegistry(), { serviceNetwork: small });
    for (const name of BUILT_IN_NAMESPACES) await a.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  });
  after(() => datastore.close());

  it('refuses a clusterIP outside the range or already used, and a duplicate or out-of-range nodePort, with 422 and kube-apiserver’s words', async () => {
    await refused(a.create(SERVICES, 'default', svc('out', { ports: [{ port: 80 }], clusterIP: '10.0.0.5' })), 422,
      /^Service "out" is invalid: spec.clusterIPs: Invalid value: \[\]string\{"10.0.0.5"\}: failed to allocate IP 10.0.0.5: the provided IP \(10.0.0.5\) is not in the valid range. The range of valid IPs is 10.96.0.0\/28$/);
    const taken = await a.create(SERVICES, 'default', svc('fixed', { ports: [{ port: 80 }], clusterIP: '10.96.0.5' }));
    assert.equal((taken.spec as { clusterIP: string }).clusterIP, '10.96.0.5');
    await refused(b.create(SERVICES, 'default', svc('again', { ports: [{ port: 80 }], clusterIP: '10.96.0.5' })), 422, /failed to allocate IP 10.96.0.5: provided IP is already allocated/);
    await a.create(SERVICES, 'default', svc('np', { type: 'NodePort', ports: [{ port: 80, nodePort: 30003 }] }));
    await refused(b.create(SERVICES, 'default', svc('np2', { type: 'NodePort', ports: [{ port: 80, nodePort: 30003 }] })), 422,
      /^Service "np2" is invalid: spec.ports\[0\].nodePort: Invalid value: 30003: provided port is already allocated$/);
    await refused(b.create(SERVICES, 'default', svc('np3', { type: 'NodePort', ports: [{ port: 80, nodePort: 80 }] })), 422,
      /provided port is not in the valid range. The range of valid ports is 30000-30009/);
    // The refused creates left nothing reserved behind them.
    const ips = (await datastore.list(SERVICE_IP_PREFIX)).items.map((kv) => kv.key);
    assert.deepEqual(ips.sort(), [SERVICE_IP_PREFIX + '10.96.0.5', SERVICE_IP_PREFIX + ((await a.get(SERVICES, 'default', 'np'))!.spec as { clusterIP: string }).clusterIP].sort());
    for (const name of ['fixed', 'np']) await a.delete(SERVICES, 'default', name);
    assert.equal((await datastore.list(SERVICE_IP_PREFIX)).items.length, 0, 'a delete gives the addresses back');
    assert.equal((await datastore.list(NODE_PORT_PREFIX)).items.length, 0, 'and the node ports');
  });

  it('hands out every free address exactly once to creates racing through two servers, then says the range is full', async () => {
    const creates = Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).create(SERVICES, 'default', svc(`race-${i}`, { type: i < 10 ? 'NodePort' : 'ClusterIP', ports: [{ port: 80 }] })));
    const made = await Promise.all(creates);
    const ips = made.map((s) => (s.spec as { clusterIP: string }).clusterIP);
    assert.equal(new Set(ips).size, 12, `distinct addresses: ${ips.join(' ')}`);
    for (const ip of ips) assert.ok(!['10.96.0.0', '10.96.0.1', '10.96.0.10', '10.96.0.15'].includes(ip), ip);
    const ports = made.slice(0, 10).map((s) => (s.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort);
    assert.equal(new Set(ports).size, 10, `distinct node ports: ${ports.join(' ')}`);
    await refused(a.create(SERVICES, 'default', svc('one-too-many', { ports: [{ port: 80 }] })), 422, /range is full/);
    for (let i = 0; i < 12; i++) await a.delete(SERVICES, 'default', `race-${i}`);
  });

  it('keeps the allocated values on an update that leaves them out, allocates node ports on a change to NodePort, and repair frees what was let go', async () => {
    const created = await a.create(SERVICES, 'default', svc('change', { ports: [{ port: 80 }] }));
    const ip = (created.spec as { clusterIP: string }).clusterIP;
    const updated = await b.update(SERVICES, 'default', svc('change', { type: 'NodePort', ports: [{ port: 80 }] }));
    assert.equal((updated.spec as { clusterIP: string }).clusterIP, ip, 'the ClusterIP stays');
    const nodePort = (updated.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort;
    assert.ok(nodePort >= 30000 && nodePort <= 30009, String(nodePort));
    const back = await a.update(SERVICES, 'default', svc('change', { type: 'ClusterIP', ports: [{ port: 80 }] }));
    assert.equal((back.spec as { ports: { nodePort?: number }[] }).ports[0]!.nodePort, undefined);
    // Another address than the one handed out (which is random).
    const other = ip === '10.96.0.9' ? '10.96.0.8' : '10.96.0.9';
    await refused(
      a.update(SERVICES, 'default', svc('change', { ports: [{ port: 80 }], clusterIP: other })),
      422,
      new RegExp(`spec.clusterIPs\\[0\\]: Invalid value: "${other.replaceAll('.', '\\.')}": may not change once set`),
    );
    // The node port let go by the type change is still reserved until the repair pass runs.
    const services = (await a.list(SERVICES, undefined)).items;
    assert.deepEqual(await repairReservations(datastore, services, 60_000), [], 'young reservations are left alone');
    assert.deepEqual(await repairReservations(datastore, services, 0), [NODE_PORT_PREFIX + nodePort]);
    assert.deepEqual((await datastore.list(SERVICE_IP_PREFIX)).items.map((kv) => kv.key), [SERVICE_IP_PREFIX + ip], 'the held address stays');
  });
});

describe('the repair pass of the kubernetes Service reconciler', () => {
  it('frees a reservation older than a minute that no Service holds, and keeps the held ones', async () => {
    const datastore = openSqliteDatastore(':memory:');
    try {
      const client = new LocalClient(new ObjectStore(datastore), new ResourceRegistry());
      for (const name of BUILT_IN_NAMESPACES) await client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
      const held = await client.create(SERVICES, 'default', svc('held', { type: 'NodePort', ports: [{ port: 80 }] }));
      // What a Service deleted with its namespace leaves behind: a key nobody holds, made long ago.
      const stale = Buffer.from(JSON.stringify({ owner: 'gone/old', at: new Date(Date.now() - 120_000).toISOString() }));
      await datastore.create(`${NODE_PORT_PREFIX}30999`, stale);
      const reconciler = new KubernetesServiceReconciler(client, new ApiServerDirectory(datastore, createLogger('silent')), defaultServiceNetwork(), createLogger('silent'), datastore);
      assert.deepEqual(await reconciler.repair(), [`${NODE_PORT_PREFIX}30999`]);
      const keys = [...(await datastore.list(SERVICE_IP_PREFIX)).items, ...(await datastore.list(NODE_PORT_PREFIX)).items].map((kv) => kv.key);
      const spec = held.spec as { clusterIP: string; ports: { nodePort: number }[] };
      assert.deepEqual(keys, [SERVICE_IP_PREFIX + spec.clusterIP, NODE_PORT_PREFIX + spec.ports[0]!.nodePort]);
    } finally {
      await datastore.close();
    }
  });
});

describe('node authorization of Services and their endpoints', () => {
  const nobody: Authorizer = { authorize: () => ({ allowed: false, reason: 'rbac says no' }) };
  const node = { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };
  const kinds = [
    { group: '', resource: 'services' },
    { group: '', resource: 'endpoints' },
    { group: 'discovery.k8s.io', resource: 'endpointslices' },
  ];
  it('a node may read them (its Service datapath and DNS), and write none', () => {
    const authorizer = new NodeAuthorizer(nobody);
    for (const kind of kinds) {
      for (const verb of ['get', 'list', 'watch']) {
        assert.equal(authorizer.authorize(node, { ...kind, verb, namespace: 'default', ...(verb === 'get' ? { name: 'web' } : {}) }).allowed, true, `${verb} ${kind.resource}`);
      }
      for (const verb of ['create', 'update', 'patch', 'delete', 'deletecollection']) {
        const decision = authorizer.authorize(node, { ...kind, verb, namespace: 'default', name: 'web' });
        assert.equal(decision.allowed, false, `${verb} ${kind.resource}`);
        assert.match(decision.reason ?? '', /a node may only read services, endpoints and endpoint slices/);
      }
    }
    assert.equal(authorizer.authorize(node, { group: '', resource: 'services', subresource: 'status', verb: 'update', namespace: 'default', name: 'web' }).allowed, false);
  });
});

describe('node pod CIDRs from cluster-cidr', () => {
  it('each node gets the lowest free /24; none when the range is used up', () => {
    const cidr = parseCidr('10.42.0.0/22') as Cidr;
    assert.equal(nextNodeCidr(cidr, []), '10.42.0.0/24');
    assert.equal(nextNodeCidr(cidr, ['10.42.0.0/24', '10.42.2.0/24']), '10.42.1.0/24');
    assert.equal(nextNodeCidr(cidr, ['10.42.0.0/24', '10.42.1.0/24', '10.42.2.0/24', '10.42.3.0/24']), undefined);
    assert.equal(nextNodeCidr(cidr, ['10.99.0.0/24']), '10.42.0.0/24', 'a CIDR of another plan is not in the way');
    assert.equal(nodeCidrGateway(parseCidr('10.42.7.0/24') as Cidr), '10.42.7.1');
  });

  it('a cluster-cidr smaller than a /24 is refused at start, with its key', () => {
    const { problems } = parseServiceNetwork({ ...SERVICE_NETWORK_DEFAULTS, clusterCidr: '10.42.0.0/25' });
    assert.deepEqual(problems, ['cluster-cidr (default): "10.42.0.0/25" is too small to give each node a /24 (at most /24)']);
  });
});
