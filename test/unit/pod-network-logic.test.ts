/**
 * The pod network's pure parts: kubelet's Service variables, a pod's resolv.conf per dnsPolicy,
 * the peers a node routes to, and the hostPort mappings.
 *
 * Run: node --import tsx --test test/unit/pod-network-logic.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { hostPortMappings } from '../../src/agent/network/node-network.js';
import { peersFrom } from '../../src/agent/network/overlay.js';
import { parseResolvConf, podResolvConf } from '../../src/agent/network/resolv-conf.js';
import { serviceEnvironment } from '../../src/agent/network/service-env.js';

function service(namespace: string, name: string, clusterIP: string, ports: { name?: string; port: number; protocol?: string }[]): KubeObject {
  return { apiVersion: 'v1', kind: 'Service', metadata: { namespace, name }, spec: { clusterIP, ports } };
}

function pod(namespace: string, spec: Record<string, unknown> = {}): KubeObject {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { namespace, name: 'p' }, spec };
}

const SERVICES = [
  service('default', 'kubernetes', '10.43.0.1', [{ name: 'https', port: 443 }]),
  service('shop', 'my-db', '10.43.0.50', [{ name: 'pg', port: 5432 }, { name: 'metrics', port: 9187, protocol: 'TCP' }]),
  service('shop', 'headless', 'None', [{ port: 80 }]),
  service('other', 'elsewhere', '10.43.0.60', [{ port: 80 }]),
];

describe('Service environment variables (kubelet’s)', () => {
  it('a pod sees its namespace’s Services with a ClusterIP, and always the kubernetes Service', () => {
    const env = serviceEnvironment(pod('shop'), SERVICES);
    assert.equal(env.KUBERNETES_SERVICE_HOST, '10.43.0.1');
    assert.equal(env.KUBERNETES_SERVICE_PORT, '443');
    assert.equal(env.KUBERNETES_SERVICE_PORT_HTTPS, '443');
    assert.equal(env.KUBERNETES_PORT, 'tcp://10.43.0.1:443');
    assert.equal(env.KUBERNETES_PORT_443_TCP_ADDR, '10.43.0.1');
    assert.equal(env.MY_DB_SERVICE_HOST, '10.43.0.50');
    assert.equal(env.MY_DB_SERVICE_PORT, '5432');
    assert.equal(env.MY_DB_SERVICE_PORT_METRICS, '9187');
    assert.equal(env.MY_DB_PORT, 'tcp://10.43.0.50:5432');
    assert.equal(env.MY_DB_PORT_9187_TCP, 'tcp://10.43.0.50:9187');
    assert.equal(env.MY_DB_PORT_9187_TCP_PROTO, 'tcp');
    assert.equal(env.MY_DB_PORT_9187_TCP_PORT, '9187');
    assert.equal(Object.keys(env).some((k) => k.startsWith('HEADLESS_')), false, 'no variables for a headless Service');
    assert.equal(Object.keys(env).some((k) => k.startsWith('ELSEWHERE_')), false, 'nor for another namespace’s');
  });

  it('enableServiceLinks: false leaves only the kubernetes Service’s', () => {
    const env = serviceEnvironment(pod('shop', { enableServiceLinks: false }), SERVICES);
    assert.deepEqual(Object.keys(env).filter((k) => !k.startsWith('KUBERNETES_')), []);
    assert.equal(env.KUBERNETES_SERVICE_HOST, '10.43.0.1');
  });
});

describe('a pod’s resolv.conf', () => {
  const host = parseResolvConf('# host\nnameserver 10.255.255.53\nsearch corp.example\noptions timeout:2\n');
  it('ClusterFirst: the cluster DNS, the namespace’s search path then the node’s, ndots:5', () => {
    assert.equal(
      podResolvConf(pod('shop'), '10.43.0.10', 'cluster.local', host),
      'nameserver 10.43.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n',
    );
  });
  it('Default and hostNetwork with ClusterFirst: the node’s; ClusterFirstWithHostNet: the cluster’s', () => {
    const nodes = 'nameserver 10.255.255.53\nsearch corp.example\noptions timeout:2\n';
    assert.equal(podResolvConf(pod('shop', { dnsPolicy: 'Default' }), '10.43.0.10', 'cluster.local', host), nodes);
    assert.equal(podResolvConf(pod('shop', { hostNetwork: true }), '10.43.0.10', 'cluster.local', host), nodes);
    assert.match(podResolvConf(pod('shop', { hostNetwork: true, dnsPolicy: 'ClusterFirstWithHostNet' }), '10.43.0.10', 'cluster.local', host), /^nameserver 10\.43\.0\.10\n/);
  });
  it('None takes dnsConfig alone; dnsConfig is merged into the others (options by name)', () => {
    const dnsConfig = { nameservers: ['1.1.1.1'], searches: ['x.example'], options: [{ name: 'ndots', value: '2' }, { name: 'edns0' }] };
    assert.equal(podResolvConf(pod('shop', { dnsPolicy: 'None', dnsConfig }), '10.43.0.10', 'cluster.local', host), 'nameserver 1.1.1.1\nsearch x.example\noptions ndots:2 edns0\n');
    assert.match(podResolvConf(pod('shop', { dnsConfig }), '10.43.0.10', 'cluster.local', host), /nameserver 10\.43\.0\.10\nnameserver 1\.1\.1\.1\n.*options ndots:2 edns0\n$/s);
  });
});

describe('routes between nodes and host ports', () => {
  const node = (name: string, cidr: string | undefined, annotations: Record<string, string>): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, annotations },
    spec: cidr ? { podCIDR: cidr } : {},
  });
  it('peers: other nodes with a CIDR and the same backend; VXLAN ones need their VTEP MAC', () => {
    const vx = { 'drover.io/backend': 'vxlan', 'drover.io/public-ip': '10.0.0.2', 'drover.io/vtep-mac': 'aa:bb:cc:dd:ee:ff' };
    const nodes = [
      node('self', '10.42.0.0/24', vx),
      node('b', '10.42.2.0/24', { ...vx, 'drover.io/public-ip': '10.0.0.3' }),
      node('a', '10.42.1.0/24', vx),
      node('no-cidr', undefined, vx),
      node('no-mac', '10.42.3.0/24', { 'drover.io/backend': 'vxlan', 'drover.io/public-ip': '10.0.0.4' }),
      node('host-gw', '10.42.4.0/24', { 'drover.io/backend': 'host-gw', 'drover.io/public-ip': '10.0.0.5' }),
    ];
    assert.deepEqual(peersFrom(nodes, 'self', 'vxlan').map((p) => [p.node, p.podCidr.text, p.publicIp]), [
      ['a', '10.42.1.0/24', '10.0.0.2'],
      ['b', '10.42.2.0/24', '10.0.0.3'],
    ]);
    assert.deepEqual(peersFrom(nodes, 'self', 'host-gw').map((p) => p.node), ['host-gw']);
  });
  it('hostPort mappings from every container’s ports, protocol lower-cased', () => {
    const p = pod('shop', {
      containers: [
        { name: 'a', ports: [{ containerPort: 80, hostPort: 8080 }, { containerPort: 81 }] },
        { name: 'b', ports: [{ containerPort: 53, hostPort: 5353, protocol: 'UDP', hostIP: '10.0.0.2' }] },
      ],
    });
    assert.deepEqual(hostPortMappings(p), [
      { hostPort: 8080, containerPort: 80, protocol: 'tcp' },
      { hostPort: 5353, containerPort: 53, protocol: 'udp', hostIP: '10.0.0.2' },
    ]);
  });
});
