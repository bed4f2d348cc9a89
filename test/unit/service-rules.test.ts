/**
 * The Service datapath's rule builder (src/agent/network/service-rules.ts), pure: Services and
 * EndpointSlices → the nft script of table `ip drover-proxy`. ClusterIP and NodePort dispatch,
 * random balancing, the no-endpoint reject, ClientIP affinity, the traffic policies, which
 * endpoints count, named ports, the cluster DNS address left alone, deterministic and bounded
 * names, stale objects emptied then deleted, unchanged chains left alone. The same scripts are loaded into
 * a real kernel by test/e2e/service-datapath.test.ts.
 *
 * Run: node --import tsx --test test/unit/service-rules.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { KubeObject } from '../../src/apiserver/objects.js';
import { buildServiceRules, objectName, planServiceRules, type ServiceRulesInput } from '../../src/agent/network/service-rules.js';
import { defaultServiceNetwork } from '../../src/node-protocol/service-network.js';
import { scriptElements, scriptRules, serviceObject, sliceObject } from '../helpers/service-objects.js';

const network = defaultServiceNetwork();
const HTTP = [{ name: 'http', port: 80, targetPort: 'web', protocol: 'TCP' }];
const SLICE_PORTS = [{ name: 'http', port: 8080 }];

function input(services: KubeObject[], endpointSlices: KubeObject[], extra: Partial<ServiceRulesInput> = {}): ServiceRulesInput {
  return { services, endpointSlices, nodeName: 'n1', nodeAddresses: ['192.168.5.10'], network, ...extra };
}

/** The single chain of `kind` (service, local, external) for the port, from the map or the chain list. */
function chainOf(kind: string, plan: { chains: string[] }, id: string): string {
  const found = plan.chains.filter((c) => c.startsWith(`${kind}-`) && c.endsWith(`-${id}`));
  assert.equal(found.length, 1, `one ${kind} chain for ${id}: ${found.join(' ')}`);
  return found[0]!;
}

function rulesOf(script: string, chain: string): string[] {
  return scriptRules(script, chain).filter((r) => r.chain === chain).map((r) => r.rule);
}

describe('Service rules: ClusterIP', () => {
  const web = serviceObject('web', { clusterIP: '10.43.0.20', ports: HTTP });
  const slice = sliceObject('web', [{ ip: '10.42.0.5', node: 'n1' }, { ip: '10.42.1.7', node: 'n2' }], SLICE_PORTS);

  it('sends the ClusterIP and port to a chain that picks one ready endpoint at random', () => {
    const plan = planServiceRules(input([web], [slice]));
    const service = chainOf('service', plan, 'default/web/tcp/http');
    assert.deepEqual(scriptElements(plan.script, 'service-ips'), [`10.43.0.20 . tcp . 80 : goto ${service}`]);
    assert.deepEqual(scriptElements(plan.script, 'cluster-ips'), ['10.43.0.20']);
    const rules = rulesOf(plan.script, service);
    assert.equal(rules[0], 'ip daddr 10.43.0.20 meta l4proto tcp th dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade');
    const ep5 = chainOf('endpoint', plan, 'default/web/tcp/http__10.42.0.5/8080');
    const ep7 = chainOf('endpoint', plan, 'default/web/tcp/http__10.42.1.7/8080');
    assert.equal(rules[1], `numgen random mod 2 vmap { 0 : goto ${ep5}, 1 : goto ${ep7} }`);
    assert.equal(rules.length, 2);
    assert.deepEqual(rulesOf(plan.script, ep5), ['ip saddr 10.42.0.5 jump mark-for-masquerade', 'meta l4proto tcp dnat to 10.42.0.5:8080']);
    assert.deepEqual(rulesOf(plan.script, ep7), ['ip saddr 10.42.1.7 jump mark-for-masquerade', 'meta l4proto tcp dnat to 10.42.1.7:8080']);
    assert.deepEqual(scriptElements(plan.script, 'no-endpoint-services'), []);
    assert.equal(plan.servicePorts, 1);
  });

  it('writes the base chains at numeric priorities (nft 1.0.6 refuses dstnat on output) and flushes every chain it writes', () => {
    const script = buildServiceRules(input([web], [slice]));
    assert.match(script, /^add chain ip drover-proxy nat-output \{ type nat hook output priority -100 ; policy accept ; \}$/m);
    assert.match(script, /^add chain ip drover-proxy filter-output-post-dnat \{ type filter hook output priority -90 ; policy accept ; \}$/m);
    assert.match(script, /^add chain ip drover-proxy nat-postrouting \{ type nat hook postrouting priority 100 ; policy accept ; \}$/m);
    const added = script.split('\n').filter((l) => l.startsWith('add chain ')).map((l) => l.split(' ')[4]);
    const flushed = script.split('\n').filter((l) => l.startsWith('flush chain ')).map((l) => l.split(' ')[4]);
    assert.deepEqual(flushed, added);
    for (const map of ['service-ips', 'service-nodeports', 'no-endpoint-services', 'no-endpoint-nodeports']) {
      assert.match(script, new RegExp(`^flush map ip drover-proxy ${map}$`, 'm'));
    }
    // A rule may only name a chain declared before it: every declaration precedes every rule.
    const lines = script.split('\n');
    const lastDeclaration = lines.map((l) => l.startsWith('add chain ')).lastIndexOf(true);
    const firstRule = lines.findIndex((l) => l.startsWith('add rule '));
    assert.ok(lastDeclaration < firstRule);
  });

  it('one endpoint: a plain goto, no numgen', () => {
    const plan = planServiceRules(input([web], [sliceObject('web', [{ ip: '10.42.0.5' }], SLICE_PORTS)]));
    const service = chainOf('service', plan, 'default/web/tcp/http');
    const ep = chainOf('endpoint', plan, 'default/web/tcp/http__10.42.0.5/8080');
    assert.equal(rulesOf(plan.script, service)[1], `goto ${ep}`);
  });

  it('UDP and SCTP ports dispatch and DNAT by their protocol', () => {
    const dns = serviceObject('dns', { clusterIP: '10.43.0.53', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }, { name: 's', port: 99, protocol: 'SCTP' }] });
    const s = sliceObject('dns', [{ ip: '10.42.0.9' }], [{ name: 'dns', port: 5353, protocol: 'UDP' }, { name: 's', port: 999, protocol: 'SCTP' }]);
    const plan = planServiceRules(input([dns], [s]));
    const elements = scriptElements(plan.script, 'service-ips');
    assert.equal(elements.length, 2);
    assert.ok(elements[0]!.startsWith('10.43.0.53 . udp . 53 : goto service-'));
    assert.ok(elements[1]!.startsWith('10.43.0.53 . sctp . 99 : goto service-'));
    assert.deepEqual(rulesOf(plan.script, chainOf('endpoint', plan, 'default/dns/udp/dns__10.42.0.9/5353'))[1], 'meta l4proto udp dnat to 10.42.0.9:5353');
    assert.deepEqual(rulesOf(plan.script, chainOf('endpoint', plan, 'default/dns/sctp/s__10.42.0.9/999'))[1], 'meta l4proto sctp dnat to 10.42.0.9:999');
  });

  it('ExternalName and headless Services get no rules', () => {
    const plan = planServiceRules(
      input(
        [serviceObject('ext', { type: 'ExternalName', externalName: 'example.com', ports: HTTP }), serviceObject('headless', { clusterIP: 'None', ports: HTTP })],
        [sliceObject('headless', [{ ip: '10.42.0.5' }], SLICE_PORTS)],
      ),
    );
    assert.equal(plan.servicePorts, 0);
    assert.deepEqual(scriptElements(plan.script, 'service-ips'), []);
    assert.deepEqual(scriptElements(plan.script, 'cluster-ips'), []);
    assert.deepEqual(plan.chains.filter((c) => c.startsWith('endpoint-')), []);
  });
});

describe('Service rules: which endpoints count', () => {
  const web = serviceObject('web', { clusterIP: '10.43.0.20', ports: HTTP });

  it('leaves out unready and terminating endpoints; an unset ready condition counts as ready', () => {
    const slice = sliceObject(
      'web',
      [
        { ip: '10.42.0.2', ready: false },
        { ip: '10.42.0.3', ready: false, serving: true, terminating: true },
        { ip: '10.42.0.4' },
        { ip: '10.42.0.5', ready: true },
      ],
      SLICE_PORTS,
    );
    const plan = planServiceRules(input([web], [slice]));
    const endpoints = plan.chains.filter((c) => c.startsWith('endpoint-'));
    assert.deepEqual(endpoints.map((c) => c.split('__')[1]), ['10.42.0.4/8080', '10.42.0.5/8080']);
  });

  it('resolves a named target port through each slice: pods that resolve it differently keep their own numbers', () => {
    const a = sliceObject('web', [{ ip: '10.42.0.2' }], [{ name: 'http', port: 8080 }], { suffix: 'a' });
    const b = sliceObject('web', [{ ip: '10.42.0.3' }], [{ name: 'http', port: 9090 }], { suffix: 'b' });
    const otherPort = sliceObject('web', [{ ip: '10.42.0.4' }], [{ name: 'metrics', port: 9100 }], { suffix: 'c' });
    const plan = planServiceRules(input([web], [a, b, otherPort]));
    const dnats = scriptRules(plan.script, 'endpoint-').map((r) => r.rule).filter((r) => r.includes('dnat'));
    assert.deepEqual(dnats, ['meta l4proto tcp dnat to 10.42.0.2:8080', 'meta l4proto tcp dnat to 10.42.0.3:9090']);
  });

  it('reads only the Service’s own slices (its namespace, its service-name label, IPv4)', () => {
    const elsewhere = sliceObject('web', [{ ip: '10.42.0.8' }], SLICE_PORTS, { namespace: 'other' });
    const ipv6 = { ...sliceObject('web', [{ ip: '10.42.0.9' }], SLICE_PORTS, { suffix: 'v6' }), addressType: 'IPv6' };
    const plan = planServiceRules(input([web], [elsewhere, ipv6]));
    assert.deepEqual(plan.chains.filter((c) => c.startsWith('endpoint-')), []);
  });
});

describe('Service rules: no ready endpoints', () => {
  it('refuses the ClusterIP and the node port at once (reject-chain: tcp reset, else icmp port unreachable)', () => {
    const svc = serviceObject('empty', { type: 'NodePort', clusterIP: '10.43.0.30', ports: [{ name: 'http', port: 80, nodePort: 30080 }] });
    const plan = planServiceRules(input([svc], [sliceObject('empty', [{ ip: '10.42.0.2', ready: false }], SLICE_PORTS)]));
    assert.deepEqual(scriptElements(plan.script, 'no-endpoint-services'), ['10.43.0.30 . tcp . 80 : goto reject-chain']);
    assert.deepEqual(scriptElements(plan.script, 'no-endpoint-nodeports'), ['tcp . 30080 : goto reject-chain']);
    assert.deepEqual(scriptElements(plan.script, 'service-ips'), []);
    assert.deepEqual(scriptElements(plan.script, 'service-nodeports'), []);
    assert.deepEqual(rulesOf(plan.script, 'reject-chain'), ['meta l4proto tcp reject with tcp reset', 'reject']);
    assert.deepEqual(rulesOf(plan.script, 'filter-input'), ['ct state new jump nodeport-endpoints-check', 'ct state new jump service-endpoints-check']);
    assert.deepEqual(rulesOf(plan.script, 'filter-forward'), ['ct state new jump service-endpoints-check', 'ct state new jump cluster-ips-check']);
    assert.deepEqual(rulesOf(plan.script, 'filter-output'), ['ct state new jump service-endpoints-check']);
  });
});

describe('Service rules: NodePort', () => {
  const svc = serviceObject('np', { type: 'NodePort', clusterIP: '10.43.0.40', ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30080 }] });
  const slice = sliceObject('np', [{ ip: '10.42.0.5', node: 'n1' }, { ip: '10.42.1.5', node: 'n2' }], SLICE_PORTS);

  it('sends the node port on the node addresses (not loopback, not the DNS address) to an external chain that masquerades', () => {
    const plan = planServiceRules(input([svc], [slice], { nodeAddresses: ['192.168.5.10', '127.0.0.1', '10.43.0.10', '192.168.5.10', '10.0.0.3'] }));
    const external = chainOf('external', plan, 'default/np/tcp/http');
    const service = chainOf('service', plan, 'default/np/tcp/http');
    assert.deepEqual(scriptElements(plan.script, 'service-nodeports'), [`tcp . 30080 : goto ${external}`]);
    assert.deepEqual(scriptElements(plan.script, 'nodeport-ips'), ['10.0.0.3', '192.168.5.10']);
    assert.deepEqual(rulesOf(plan.script, external), ['jump mark-for-masquerade', `goto ${service}`]);
    assert.deepEqual(rulesOf(plan.script, 'services'), [
      'ip daddr . meta l4proto . th dport vmap @service-ips',
      'ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports',
    ]);
  });

  it('without node addresses, every local address but loopback and the DNS address', () => {
    const plan = planServiceRules(input([svc], [slice], { nodeAddresses: [] }));
    assert.deepEqual(rulesOf(plan.script, 'services')[1], 'fib daddr type local ip daddr != { 127.0.0.0/8, 10.43.0.10 } meta l4proto . th dport vmap @service-nodeports');
  });

  it('a ClusterIP Service has no node port rules even if a nodePort is left in its body', () => {
    const clusterOnly = serviceObject('c', { clusterIP: '10.43.0.41', ports: [{ name: 'http', port: 80, nodePort: 30081 }] });
    const plan = planServiceRules(input([clusterOnly], [sliceObject('c', [{ ip: '10.42.0.5' }], SLICE_PORTS)]));
    assert.deepEqual(scriptElements(plan.script, 'service-nodeports'), []);
  });

  it('two Services claiming one node port: the first by name keeps it, the other is reported, the rest is programmed', () => {
    const a = serviceObject('a', { type: 'NodePort', clusterIP: '10.43.0.43', ports: [{ name: 'http', port: 80, nodePort: 30085 }] });
    const b = serviceObject('b', { type: 'NodePort', clusterIP: '10.43.0.44', ports: [{ name: 'http', port: 80, nodePort: 30085 }] });
    const plan = planServiceRules(input([b, a], [sliceObject('a', [{ ip: '10.42.0.5' }], SLICE_PORTS), sliceObject('b', [{ ip: '10.42.0.6' }], SLICE_PORTS)]));
    const nodePorts = scriptElements(plan.script, 'service-nodeports');
    assert.equal(nodePorts.length, 1);
    assert.ok(nodePorts[0]!.includes('-default/a/'), nodePorts[0]);
    assert.equal(plan.conflicts.length, 1);
    assert.ok(plan.conflicts[0]!.includes('-default/b/'));
    assert.equal(scriptElements(plan.script, 'service-ips').length, 2);
  });

  it('LoadBalancer Services get their node ports too', () => {
    const lb = serviceObject('lb', { type: 'LoadBalancer', clusterIP: '10.43.0.42', ports: [{ name: 'http', port: 80, nodePort: 30082 }] });
    const plan = planServiceRules(input([lb], [sliceObject('lb', [{ ip: '10.42.0.5' }], SLICE_PORTS)]));
    assert.equal(scriptElements(plan.script, 'service-nodeports').length, 1);
  });
});

describe('Service rules: traffic policies', () => {
  const ports = [{ name: 'http', port: 80, nodePort: 30090 }];

  it('externalTrafficPolicy Local: outsiders only to this node’s endpoints without masquerade; pods and the node to all', () => {
    const svc = serviceObject('loc', { type: 'NodePort', clusterIP: '10.43.0.50', externalTrafficPolicy: 'Local', ports });
    const slice = sliceObject('loc', [{ ip: '10.42.0.5', node: 'n1' }, { ip: '10.42.1.5', node: 'n2' }], SLICE_PORTS);
    const plan = planServiceRules(input([svc], [slice]));
    const external = chainOf('external', plan, 'default/loc/tcp/http');
    const service = chainOf('service', plan, 'default/loc/tcp/http');
    const local = chainOf('local', plan, 'default/loc/tcp/http');
    assert.deepEqual(rulesOf(plan.script, external), [
      `ip saddr 10.42.0.0/16 goto ${service}`,
      'fib saddr type local jump mark-for-masquerade',
      `fib saddr type local goto ${service}`,
      `goto ${local}`,
    ]);
    const ep = chainOf('endpoint', plan, 'default/loc/tcp/http__10.42.0.5/8080');
    assert.deepEqual(rulesOf(plan.script, local), [`goto ${ep}`]);
    // ClusterIP traffic still goes to every endpoint.
    assert.deepEqual(scriptElements(plan.script, 'service-ips'), [`10.43.0.50 . tcp . 80 : goto ${service}`]);
  });

  it('externalTrafficPolicy Local without a local endpoint: outsiders dropped, pods and the node still served', () => {
    const svc = serviceObject('loc', { type: 'NodePort', clusterIP: '10.43.0.50', externalTrafficPolicy: 'Local', ports });
    const plan = planServiceRules(input([svc], [sliceObject('loc', [{ ip: '10.42.1.5', node: 'n2' }], SLICE_PORTS)]));
    const external = chainOf('external', plan, 'default/loc/tcp/http');
    assert.equal(rulesOf(plan.script, external).length, 3);
    assert.deepEqual(scriptElements(plan.script, 'no-endpoint-nodeports'), ['tcp . 30090 : drop']);
    assert.deepEqual(plan.chains.filter((c) => c.startsWith('local-')), []);
  });

  it('internalTrafficPolicy Local: the ClusterIP goes to this node’s endpoints; none here is a drop, not a reject', () => {
    const svc = serviceObject('itp', { clusterIP: '10.43.0.51', internalTrafficPolicy: 'Local', ports: HTTP });
    const both = sliceObject('itp', [{ ip: '10.42.0.5', node: 'n1' }, { ip: '10.42.1.5', node: 'n2' }], SLICE_PORTS);
    const plan = planServiceRules(input([svc], [both]));
    const local = chainOf('local', plan, 'default/itp/tcp/http');
    assert.deepEqual(scriptElements(plan.script, 'service-ips'), [`10.43.0.51 . tcp . 80 : goto ${local}`]);
    assert.equal(rulesOf(plan.script, local)[0], 'ip daddr 10.43.0.51 meta l4proto tcp th dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade');
    assert.deepEqual(plan.chains.filter((c) => c.startsWith('endpoint-')).length, 2, 'the cluster chain still has both (for node ports)');

    const remoteOnly = planServiceRules(input([svc], [sliceObject('itp', [{ ip: '10.42.1.5', node: 'n2' }], SLICE_PORTS)]));
    assert.deepEqual(scriptElements(remoteOnly.script, 'service-ips'), []);
    assert.deepEqual(scriptElements(remoteOnly.script, 'no-endpoint-services'), ['10.43.0.51 . tcp . 80 : drop']);
  });
});

describe('Service rules: sessionAffinity ClientIP', () => {
  const sticky = (timeoutSeconds?: number): KubeObject =>
    serviceObject('sticky', {
      clusterIP: '10.43.0.60',
      sessionAffinity: 'ClientIP',
      ...(timeoutSeconds ? { sessionAffinityConfig: { clientIP: { timeoutSeconds } } } : {}),
      ports: HTTP,
    });
  const slice = sliceObject('sticky', [{ ip: '10.42.0.5' }, { ip: '10.42.0.6' }], SLICE_PORTS);

  it('remembers each client in a dynamic timeout set per endpoint and sends it back there first', () => {
    const plan = planServiceRules(input([sticky(60)], [slice]));
    const sets = plan.sets.filter((s) => s.startsWith('affinity-'));
    assert.equal(sets.length, 2);
    for (const set of sets) assert.match(plan.script, new RegExp(`^add set ip drover-proxy ${set.replace(/[.]/g, '\\.')} \\{ type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; \\}$`, 'm'));
    // Never flushed: a rebuild keeps the clients' stickiness.
    for (const set of sets) assert.ok(!plan.script.includes(`flush set ip drover-proxy ${set}`));
    const service = chainOf('service', plan, 'default/sticky/tcp/http');
    const rules = rulesOf(plan.script, service);
    const ep5 = chainOf('endpoint', plan, 'default/sticky/tcp/http__10.42.0.5/8080');
    const set5 = sets.find((s) => s.endsWith('__10.42.0.5/8080'))!;
    assert.equal(rules[1], `ip saddr @${set5} goto ${ep5}`);
    assert.match(rules[3]!, /^numgen random mod 2 vmap/);
    assert.deepEqual(rulesOf(plan.script, ep5), ['ip saddr 10.42.0.5 jump mark-for-masquerade', `update @${set5} { ip saddr }`, 'meta l4proto tcp dnat to 10.42.0.5:8080']);
  });

  it('defaults the timeout to 10800 s; a new timeout is a new set and the old one is deleted', () => {
    const first = planServiceRules(input([sticky()], [slice]));
    assert.match(first.script, /timeout 10800s/);
    const second = planServiceRules(input([sticky(30)], [slice], { existing: { chains: first.chains, sets: first.sets, contents: first.contents } }));
    const oldSets = first.sets.filter((s) => s.startsWith('affinity-'));
    const newSets = second.sets.filter((s) => s.startsWith('affinity-'));
    assert.equal(newSets.length, 2);
    for (const s of newSets) assert.ok(!oldSets.includes(s));
    // Left in place by this plan (a rule it replaces may still name them), deleted by the next.
    assert.deepEqual(second.flushed.sets, [...oldSets].sort());
    assert.ok(!second.script.includes('delete set'));
    const third = planServiceRules(
      input([sticky(30)], [slice], { existing: { chains: second.chains, sets: [...second.sets, ...second.flushed.sets], contents: second.contents, flushed: second.flushed } }),
    );
    for (const s of oldSets) assert.match(third.script, new RegExp(`^delete set ip drover-proxy ${s.replace(/[.]/g, '\\.')}$`, 'm'));
    assert.equal(third.deleted, 2);
  });
});

describe('Service rules: the cluster DNS address', () => {
  it('is never programmed: a Service holding it is skipped, and the drop of unallocated Service addresses spares it', () => {
    const kubeDns = serviceObject('kube-dns', { clusterIP: '10.43.0.10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] }, 'kube-system');
    const plan = planServiceRules(input([kubeDns], [sliceObject('kube-dns', [{ ip: '10.42.0.3' }], [{ name: 'dns', port: 53, protocol: 'UDP' }], { namespace: 'kube-system' })]));
    assert.equal(plan.servicePorts, 0);
    assert.deepEqual(scriptElements(plan.script, 'cluster-ips'), []);
    assert.deepEqual(rulesOf(plan.script, 'cluster-ips-check'), ['ip daddr @cluster-ips reject', 'ip daddr 10.43.0.0/16 ip daddr != 10.43.0.10 drop']);
    const mentions = plan.script.split('\n').filter((l) => l.includes('10.43.0.10'));
    assert.deepEqual(mentions, ['add rule ip drover-proxy cluster-ips-check ip daddr 10.43.0.0/16 ip daddr != 10.43.0.10 drop']);
  });
});

describe('Service rules: names and determinism', () => {
  it('gives the same script for the same objects in any order', () => {
    const services = ['a', 'b', 'c'].map((n, i) => serviceObject(n, { type: 'NodePort', clusterIP: `10.43.1.${i + 1}`, ports: [{ name: 'http', port: 80, nodePort: 30100 + i }] }));
    const slices = ['a', 'b', 'c'].map((n, i) => sliceObject(n, [{ ip: `10.42.0.${20 + i}` }, { ip: `10.42.0.${10 - i}` }], SLICE_PORTS));
    const one = buildServiceRules(input(services, slices, { nodeAddresses: ['192.168.5.10', '10.0.0.3'] }));
    const two = buildServiceRules(input([...services].reverse(), [...slices].reverse(), { nodeAddresses: ['10.0.0.3', '192.168.5.10'] }));
    assert.equal(one, two);
  });

  it('bounds long names and keeps them distinct by their hash; characters nft names cannot hold become _', () => {
    const long = 'x'.repeat(250);
    const a = objectName('endpoint', `${long}a`);
    const b = objectName('endpoint', `${long}b`);
    assert.notEqual(a, b);
    assert.ok(a.length <= 220 && b.length <= 220, `${a.length}`);
    assert.match(objectName('service', 'ns/na:me/tcp/p'), /^service-[A-Z2-7]{8}-ns\/na_me\/tcp\/p$/);
    const svc = serviceObject(long.slice(0, 63), { clusterIP: '10.43.0.70', ports: [{ name: 'p'.repeat(15), port: 80 }] }, 'n'.repeat(63));
    const plan = planServiceRules(input([svc], [sliceObject(long.slice(0, 63), [{ ip: '10.42.0.5' }], [{ name: 'p'.repeat(15), port: 80 }], { namespace: 'n'.repeat(63) })]));
    for (const name of [...plan.chains, ...plan.sets]) assert.ok(name.length < 256, name);
  });
});

describe('Service rules: rebuilding over an existing table', () => {
  const web = serviceObject('web', { clusterIP: '10.43.0.20', ports: HTTP });
  const two = sliceObject('web', [{ ip: '10.42.0.5' }, { ip: '10.42.0.6' }], SLICE_PORTS);

  it('empties the chains no Service needs any more after the maps that pointed at them are refilled; the next plan deletes them', () => {
    const first = planServiceRules(input([web], [two]));
    assert.deepEqual(first.flushed, { chains: [], sets: [] });
    const one = sliceObject('web', [{ ip: '10.42.0.5' }], SLICE_PORTS);
    const second = planServiceRules(input([web], [one], { existing: { chains: first.chains, sets: first.sets, contents: first.contents } }));
    const gone = first.chains.find((c) => c.endsWith('__10.42.0.6/8080'))!;
    const lines = second.script.split('\n');
    const flush = lines.indexOf(`flush chain ip drover-proxy ${gone}`);
    const lastElement = lines.map((l) => l.startsWith('add element ')).lastIndexOf(true);
    assert.ok(flush > lastElement, `${lastElement} < ${flush}`);
    assert.ok(!second.script.includes('delete '), 'nothing deleted in the transaction that replaces the rules naming it');
    assert.deepEqual(second.flushed, { chains: [gone], sets: [] });
    assert.ok(!second.chains.includes(gone));
    const third = planServiceRules(input([web], [one], { existing: { chains: [...second.chains, gone], sets: second.sets, contents: second.contents, flushed: second.flushed } }));
    assert.deepEqual(third.script.split('\n').filter((l) => l.includes(gone)), [`delete chain ip drover-proxy ${gone}`]);
    assert.equal(third.deleted, 1);
    assert.deepEqual(third.flushed, { chains: [], sets: [] });
  });

  it('leaves chains whose rules did not change alone (base chains too); the maps are always refilled', () => {
    const first = planServiceRules(input([web], [two]));
    const again = planServiceRules(input([web], [two], { existing: { chains: first.chains, sets: first.sets, contents: first.contents } }));
    assert.equal(again.rules, first.rules);
    assert.equal(again.writtenChains, 0);
    assert.deepEqual(again.script.split('\n').filter((l) => l.startsWith('add chain') || l.startsWith('add rule')), []);
    assert.deepEqual(scriptRules(again.script, 'endpoint-'), []);
    assert.equal(scriptElements(again.script, 'service-ips').length, 1);
    // One endpoint gone: its Service's chain is rewritten, the other endpoint's chain is not.
    const fewer = planServiceRules(input([web], [sliceObject('web', [{ ip: '10.42.0.5' }], SLICE_PORTS)], { existing: { chains: first.chains, sets: first.sets, contents: first.contents } }));
    assert.deepEqual([...new Set(scriptRules(fewer.script, 'service-').map((r) => r.chain))], [chainOf('service', fewer, 'default/web/tcp/http')]);
    assert.deepEqual(scriptRules(fewer.script, 'endpoint-'), []);
  });

  it('reuses a Service’s rules only while its objects and the node are the same: a replaced slice or another node name is recomputed', () => {
    const svc = serviceObject('loc', { type: 'NodePort', clusterIP: '10.43.0.50', externalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, nodePort: 30090 }] });
    const slice = sliceObject('loc', [{ ip: '10.42.0.5', node: 'n1' }], SLICE_PORTS);
    const onN1 = planServiceRules(input([svc], [slice]));
    assert.equal(onN1.chains.filter((c) => c.startsWith('local-')).length, 1);
    const onN2 = planServiceRules(input([svc], [slice], { nodeName: 'n2' }));
    assert.deepEqual(onN2.chains.filter((c) => c.startsWith('local-')), [], 'the endpoint is not local on n2');
    const moved = planServiceRules(input([svc], [sliceObject('loc', [{ ip: '10.42.0.6', node: 'n1' }], SLICE_PORTS)]));
    assert.deepEqual(moved.chains.filter((c) => c.startsWith('endpoint-')).map((c) => c.split('__')[1]), ['10.42.0.6/8080']);
    assert.equal(planServiceRules(input([svc], [slice])).script, onN1.script);
  });

  it('told what the maps hold, writes only the difference: deletes keys that went or changed verdict, adds the new', () => {
    const empty = serviceObject('empty', { clusterIP: '10.43.0.21', ports: HTTP });
    const first = planServiceRules(input([web, empty], [two]));
    const existing = { chains: first.chains, sets: first.sets, contents: first.contents, elements: first.elements };
    const same = planServiceRules(input([web, empty], [two], { existing }));
    assert.deepEqual(same.script.split('\n').filter((l) => / element |^flush (map|set) /.test(l)), [], 'nothing changed, nothing written');
    // `empty` gets an endpoint (reject → its chain), `web` goes (its key is deleted).
    const next = planServiceRules(input([empty], [sliceObject('empty', [{ ip: '10.42.0.9' }], SLICE_PORTS)], { existing }));
    const changes = next.script.split('\n').filter((l) => / element |^flush (map|set) /.test(l));
    const emptyChain = chainOf('service', next, 'default/empty/tcp/http');
    assert.deepEqual(changes, [
      'delete element ip drover-proxy cluster-ips { 10.43.0.20 }',
      'delete element ip drover-proxy service-ips { 10.43.0.20 . tcp . 80 }',
      `add element ip drover-proxy service-ips { 10.43.0.21 . tcp . 80 : goto ${emptyChain} }`,
      'delete element ip drover-proxy no-endpoint-services { 10.43.0.21 . tcp . 80 }',
    ]);
    assert.deepEqual(next.elements.get('service-ips'), [`10.43.0.21 . tcp . 80 : goto ${emptyChain}`]);
  });

  it('a chain the kernel does not hold is written even if remembered (the table was changed behind its back)', () => {
    const first = planServiceRules(input([web], [two]));
    const again = planServiceRules(input([web], [two], { existing: { chains: [], sets: [], contents: first.contents } }));
    assert.equal(again.writtenChains, first.chains.length);
  });
});
