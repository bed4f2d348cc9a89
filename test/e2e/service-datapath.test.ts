/**
 * The Service datapath in a real kernel: the rules of src/agent/network/service-rules.ts loaded
 * with the real `nft` into the "node" namespace of a small network (test/helpers/netns-lab.ts: two
 * pods running busybox httpd on a bridge, a client pod, an outside host), then real connections:
 * ClusterIP and NodePort reach both backends over many requests (from a pod, from the node itself,
 * from outside, and a pod reaching itself; TCP and a UDP ClusterIP), a Service without ready endpoints and a port a ClusterIP
 * does not serve are refused, ClientIP affinity sticks, externalTrafficPolicy Local keeps outsiders
 * on local endpoints, re-applying leaves no duplicate rule and stale chains go. Then the
 * ServiceProxy runner against a real server: Services and a hand-written EndpointSlice created
 * through the API become rules, changes follow, a restarted proxy reconciles the table it left.
 *
 * Run (root): npx tsc -p tsconfig.json && node --import tsx --test test/e2e/service-datapath.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { KubeObject } from '../../src/apiserver/objects.js';
import { Nft, type NftTable } from '../../src/agent/network/nftables.js';
import { removeServiceRules, ServiceProxy } from '../../src/agent/network/service-proxy.js';
import { PROXY_TABLE, planServiceRules, type ServiceRulesPlan } from '../../src/agent/network/service-rules.js';
import { HttpClient } from '../../src/client/http.js';
import { CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ENDPOINTSLICES, SERVICEACCOUNTS, SERVICES } from '../../src/client/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { defaultServiceNetwork } from '../../src/node-protocol/service-network.js';
import { createNetnsLab, LAB_NODE_IP, type NetnsLab, netnsLabUnavailable } from '../helpers/netns-lab.js';
import { always, cleanup, eventually, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { type EndpointSpec, serviceObject, sliceObject } from '../helpers/service-objects.js';

const skip = netnsLabUnavailable();
const network = defaultServiceNetwork();
const REQUESTS = 40;

/** Starts busybox httpd on :8080 in each pod, answering its pod's name; waits until each answers. */
async function startBackends(lab: NetnsLab, root: string): Promise<void> {
  for (const [i, pod] of lab.pods.entries()) {
    const dir = path.join(root, `www-p${i}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'index.html'), `p${i}\n`);
    lab.spawn(pod.netns, ['busybox', 'httpd', '-f', '-p', '8080', '-h', dir]);
  }
  for (const pod of lab.pods) {
    await eventually(async () => (await lab.exec(lab.client.netns, ['timeout', '10', 'busybox', 'wget', '-q', '-O', '-', `http://${pod.ip}:8080/`])).code === 0, `httpd in ${pod.netns}`);
  }
}

/** `count` requests from `netns`, each on a new connection: the answers (pod names) and failures (stderr lines). */
async function fetchMany(lab: NetnsLab, netns: string, url: string, count = REQUESTS): Promise<{ answers: string[]; failures: string[] }> {
  const script = `for i in $(seq ${count}); do timeout 10 busybox wget -q -O - '${url}' || echo FAILED; done`;
  const { stdout, stderr } = await lab.exec(netns, ['busybox', 'sh', '-c', script]);
  const lines = stdout.split('\n').filter(Boolean);
  return { answers: lines.filter((l) => l !== 'FAILED'), failures: lines.filter((l) => l === 'FAILED').map(() => stderr.trim().split('\n')[0] ?? '') };
}

async function assertBoth(lab: NetnsLab, netns: string, url: string): Promise<void> {
  const { answers, failures } = await fetchMany(lab, netns, url);
  assert.deepEqual(failures, [], `${url} from ${netns}`);
  assert.equal(answers.length, REQUESTS);
  assert.deepEqual([...new Set(answers)].sort(), ['p0', 'p1'], `${url} from ${netns} reached both backends`);
}

/**
 * One request that must be refused (not time out): busybox wget says "Connection refused".
 * (`timeout` bounds it: busybox 1.35's own `wget -T` crashes.)
 */
async function assertRefused(lab: NetnsLab, netns: string, url: string): Promise<void> {
  const { code, stderr } = await lab.exec(netns, ['timeout', '20', 'busybox', 'wget', '-q', '-O', '-', url]);
  assert.notEqual(code, 0, `${url} from ${netns} answered`);
  assert.match(stderr, /Connection refused/, `${url} from ${netns}: ${stderr}`);
}

/** Every rule of the table once (chain and expression), and how many there are. */
function ruleKeys(table: NftTable): { total: number; distinct: number } {
  const keys = table.rules.map((r) => `${r.chain} ${JSON.stringify(r.expr)}`);
  return { total: keys.length, distinct: new Set(keys).size };
}

function endpoints(lab: NetnsLab, nodes: string[] = ['n1', 'n1'], extra: Partial<EndpointSpec>[] = []): EndpointSpec[] {
  return lab.pods.map((p, i) => ({ ip: p.ip, node: nodes[i]!, ...(extra[i] ?? {}) }));
}

describe('the Service datapath in a network namespace (real nft, real connections)', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  let lab: NetnsLab;
  let nft: Nft;
  let work: string;
  let services: KubeObject[];
  let slices: KubeObject[];
  let applied: ServiceRulesPlan | undefined;
  const HTTP = [{ name: 'http', port: 80, targetPort: 'web' }];
  const SLICE_PORTS = [{ name: 'http', port: 8080 }];

  /** The plan over what the kernel holds; with `last` (the plan applied last), only what differs is written. */
  const plan = (existing?: NftTable, last?: ServiceRulesPlan): ServiceRulesPlan =>
    planServiceRules({
      services,
      endpointSlices: slices,
      nodeName: 'n1',
      nodeAddresses: [LAB_NODE_IP],
      network,
      ...(existing ? { existing: { chains: existing.chains, sets: existing.sets, ...(last ? { contents: last.contents, elements: last.elements } : {}) } } : {}),
    });

  before(async () => {
    work = tempDir('svc-datapath');
    lab = createNetnsLab('svc', 2);
    nft = new Nft(lab.nft);
    await startBackends(lab, work);
    // A UDP echo in each pod answering its pod's name.
    for (const [i, pod] of lab.pods.entries()) {
      lab.spawn(pod.netns, [process.execPath, '-e', `const s = require('dgram').createSocket('udp4'); s.on('message', (m, r) => s.send('p${i}', r.port, r.address)); s.bind(5353);`]);
    }
    services = [
      serviceObject('web', { type: 'NodePort', clusterIP: '10.43.0.20', ports: [{ ...HTTP[0]!, nodePort: 30080 }] }),
      serviceObject('sticky', { clusterIP: '10.43.0.21', sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } }, ports: HTTP }),
      serviceObject('empty', { type: 'NodePort', clusterIP: '10.43.0.22', ports: [{ ...HTTP[0]!, nodePort: 30082 }] }),
      serviceObject('local', { type: 'NodePort', clusterIP: '10.43.0.23', externalTrafficPolicy: 'Local', ports: [{ ...HTTP[0]!, nodePort: 30083 }] }),
      serviceObject('udp', { clusterIP: '10.43.0.24', ports: [{ name: 'echo', port: 53, targetPort: 5353, protocol: 'UDP' }] }),
    ];
    slices = [
      sliceObject('web', endpoints(lab), SLICE_PORTS),
      sliceObject('sticky', endpoints(lab), SLICE_PORTS),
      sliceObject('empty', endpoints(lab, ['n1', 'n1'], [{ ready: false }, { ready: false, terminating: true }]), SLICE_PORTS),
      // p1 stands for a pod on another node: only p0 is local.
      sliceObject('local', endpoints(lab, ['n1', 'n2']), SLICE_PORTS),
      sliceObject('udp', endpoints(lab), [{ name: 'echo', port: 5353, protocol: 'UDP' }]),
    ];
    await nft.apply(plan().script);
  });

  after(async () => {
    lab?.destroy();
    await cleanup(work);
  });

  it('a ClusterIP reaches both backends, from a pod, from the node itself, and from a backend reaching itself', async () => {
    await assertBoth(lab, lab.client.netns, 'http://10.43.0.20/');
    await assertBoth(lab, lab.node, 'http://10.43.0.20/');
    await assertBoth(lab, lab.pods[0]!.netns, 'http://10.43.0.20/');
  });

  it('a node port on the node address reaches both backends from outside and from a pod', async () => {
    await assertBoth(lab, lab.outside.netns, `http://${LAB_NODE_IP}:30080/`);
    await assertBoth(lab, lab.client.netns, `http://${LAB_NODE_IP}:30080/`);
  });

  it('a Service without ready endpoints, and a port its ClusterIP does not serve, are refused at once', async () => {
    await assertRefused(lab, lab.client.netns, 'http://10.43.0.22/');
    await assertRefused(lab, lab.node, 'http://10.43.0.22/');
    await assertRefused(lab, lab.outside.netns, `http://${LAB_NODE_IP}:30082/`);
    await assertRefused(lab, lab.client.netns, 'http://10.43.0.20:81/');
  });

  it('sessionAffinity ClientIP sends each client to one backend', async () => {
    for (const netns of [lab.client.netns, lab.node]) {
      const { answers, failures } = await fetchMany(lab, netns, 'http://10.43.0.21/', 20);
      assert.deepEqual(failures, []);
      assert.equal(answers.length, 20);
      assert.equal(new Set(answers).size, 1, `${netns} stuck to one backend: ${answers.join(' ')}`);
    }
  });

  it('a UDP ClusterIP reaches both backends (each query from a new source port is a new flow)', async () => {
    const client = `
      const dgram = require('dgram');
      const ask = () => new Promise((resolve) => {
        const s = dgram.createSocket('udp4');
        const timer = setTimeout(() => { s.close(); resolve('TIMEOUT'); }, 5000);
        s.on('message', (m) => { clearTimeout(timer); s.close(); resolve(String(m)); });
        s.send('who', 53, '10.43.0.24');
      });
      (async () => { const out = []; for (let i = 0; i < ${REQUESTS}; i++) out.push(await ask()); console.log(out.join(' ')); })();`;
    // The echo servers may still be binding: the first queries can time out, later ones may not.
    await eventually(async () => {
      const { stdout } = await lab.exec(lab.client.netns, [process.execPath, '-e', client], 300_000);
      const answers = stdout.trim().split(' ');
      assert.equal(answers.length, REQUESTS);
      assert.deepEqual(answers.filter((a) => a !== 'p0' && a !== 'p1'), []);
      assert.deepEqual([...new Set(answers)].sort(), ['p0', 'p1']);
      return true;
    }, 'UDP answers from both backends', 120_000, 1000);
  });

  it('externalTrafficPolicy Local: outsiders reach only this node’s endpoint; pods reach every endpoint', async () => {
    const outside = await fetchMany(lab, lab.outside.netns, `http://${LAB_NODE_IP}:30083/`);
    assert.deepEqual(outside.failures, []);
    assert.deepEqual([...new Set(outside.answers)], ['p0']);
    await assertBoth(lab, lab.client.netns, `http://${LAB_NODE_IP}:30083/`);
    await assertBoth(lab, lab.client.netns, 'http://10.43.0.23/');
  });

  it('re-applying (whole, then only what changed) leaves exactly the planned rules, no duplicates', async () => {
    const first = plan();
    for (let i = 0; i < 2; i++) await nft.apply(plan(await nft.readTable('ip', PROXY_TABLE)).script);
    const partial = plan(await nft.readTable('ip', PROXY_TABLE), first);
    assert.ok(partial.writtenChains < first.chains.length, 'the partial plan rewrites fewer chains');
    await nft.apply(partial.script);
    applied = partial;
    const table = (await nft.readTable('ip', PROXY_TABLE))!;
    assert.deepEqual(ruleKeys(table), { total: first.rules, distinct: first.rules });
    assert.deepEqual([...table.chains].sort(), [...first.chains].sort());
    await assertBoth(lab, lab.client.netns, 'http://10.43.0.20/');
  });

  it('a Service removed and an endpoint gone take their chains and sets with them; the rest keeps working', async () => {
    const before = (await nft.readTable('ip', PROXY_TABLE))!;
    services = services.filter((s) => s.metadata.name !== 'sticky');
    slices = slices.map((s) => (s.metadata.name === 'web-a' ? sliceObject('web', endpoints(lab).slice(0, 1), SLICE_PORTS) : s));
    // `contents` and `elements` must be what the table holds: the last plan applied (the partial one above).
    const next = plan(before, applied);
    await nft.apply(next.script);
    assert.ok(next.flushed.chains.length > 0 && next.flushed.sets.length > 0);
    // The next sync deletes what this one emptied.
    const emptied = (await nft.readTable('ip', PROXY_TABLE))!;
    const last = planServiceRules({
      services,
      endpointSlices: slices,
      nodeName: 'n1',
      nodeAddresses: [LAB_NODE_IP],
      network,
      existing: { chains: emptied.chains, sets: emptied.sets, contents: next.contents, elements: next.elements, flushed: next.flushed },
    });
    assert.equal(last.deleted, next.flushed.chains.length + next.flushed.sets.length);
    await nft.apply(last.script);
    const table = (await nft.readTable('ip', PROXY_TABLE))!;
    assert.deepEqual(table.chains.filter((c) => c.includes('/sticky/')), []);
    assert.deepEqual(table.sets.filter((s) => s.startsWith('affinity-')), []);
    assert.deepEqual(table.chains.filter((c) => c.includes('/web/') && c.includes(lab.pods[1]!.ip)), []);
    assert.deepEqual(ruleKeys(table), { total: next.rules, distinct: next.rules });
    // The maps were changed element by element: the kernel holds what the plan wanted, no more.
    for (const [name, wanted] of next.elements) assert.equal(table.elements.get(name)?.length ?? 0, wanted.length, name);
    const { answers, failures } = await fetchMany(lab, lab.client.netns, 'http://10.43.0.20/', 20);
    assert.deepEqual(failures, []);
    assert.deepEqual([...new Set(answers)], ['p0']);
  });

  it('removing the table is idempotent', async () => {
    await removeServiceRules({ nft: lab.nft });
    await removeServiceRules({ nft: lab.nft });
    assert.equal(await nft.readTable('ip', PROXY_TABLE), undefined);
  });
});

describe('ServiceProxy: Services and EndpointSlices of a real server become rules', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  let lab: NetnsLab;
  let nft: Nft;
  let work: string;
  let server: ServerProcess;
  let client: HttpClient;
  const proxies: ServiceProxy[] = [];
  let clusterIP = '';
  let nodePort = 0;

  const newProxy = (as: HttpClient = client): ServiceProxy => {
    const proxy = new ServiceProxy({
      client: () => as,
      nodeName: 'lab-node',
      nodeAddresses: () => [LAB_NODE_IP],
      network,
      logger: createLogger(process.env.DROVER_TEST_LOG === '1' ? 'debug' : 'silent'),
      nft: lab.nft,
    });
    proxies.push(proxy);
    return proxy;
  };

  before(async () => {
    work = tempDir('svc-proxy');
    lab = createNetnsLab('proxy', 2);
    nft = new Nft(lab.nft);
    await startBackends(lab, work);
    server = await startServer();
    client = new HttpClient({ server: server.url, caPem: server.caPem, token: server.token });
    // Selector-less: the endpoints controller leaves its hand-written slice alone.
    const svc = await client.create(SERVICES, 'default', serviceObject('web', { type: 'NodePort', ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    const spec = svc.spec as { clusterIP: string; ports: { nodePort: number }[] };
    clusterIP = spec.clusterIP;
    nodePort = spec.ports[0]!.nodePort;
    await client.create(ENDPOINTSLICES, 'default', sliceObject('web', endpoints(lab, ['lab-node', 'other-node']), [{ name: 'http', port: 8080 }], { suffix: 'manual' }));
  });

  after(async () => {
    for (const proxy of proxies) await proxy.stop();
    lab?.destroy();
    await cleanup(work);
  });

  it('refuses to start, following nothing, when the nft command does not run', async () => {
    const proxy = new ServiceProxy({
      client: () => client,
      nodeName: 'lab-node',
      nodeAddresses: () => [],
      network,
      logger: createLogger('silent'),
      nft: path.join(work, 'no-such-nft'),
    });
    await assert.rejects(proxy.start(), /cannot run .*no-such-nft.*nftables/);
    await proxy.stop();
  });

  it('writes nothing while it can read Services but not EndpointSlices; programs both once it can', async () => {
    // A ServiceAccount that may read Services only: the slice informer's list keeps failing (403).
    await client.create(SERVICEACCOUNTS, 'default', { metadata: { name: 'proxy-test' } });
    const role = { metadata: { name: 'proxy-test' }, rules: [{ apiGroups: [''], resources: ['services'], verbs: ['get', 'list', 'watch'] }] };
    await client.create(CLUSTER_ROLES, undefined, role);
    await client.create(CLUSTER_ROLE_BINDINGS, undefined, {
      metadata: { name: 'proxy-test' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'proxy-test' },
      subjects: [{ kind: 'ServiceAccount', name: 'proxy-test', namespace: 'default' }],
    });
    const review = await client.requestToken('default', 'proxy-test', { metadata: {}, spec: { expirationSeconds: 3600 } });
    const limited = new HttpClient({ server: server.url, caPem: server.caPem, token: (review.status as { token: string }).token });
    await eventually(async () => (await limited.list(SERVICES, undefined)).items.length > 0, 'the limited client reads Services');
    const proxy = newProxy(limited);
    await proxy.start();
    await always(async () => (await nft.readTable('ip', PROXY_TABLE)) === undefined, 'no table before the slices are read', 3000, 500);
    assert.equal(proxy.lastSync, undefined);
    await client.update(CLUSTER_ROLES, undefined, {
      ...role,
      rules: [...role.rules, { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] }],
    });
    await eventually(async () => (await nft.readTable('ip', PROXY_TABLE))?.chains.some((c) => c.startsWith('service-') && c.includes('-default/web/')), 'the web Service chain');
    await proxy.stop();
    await removeServiceRules({ nft: lab.nft });
    proxies.length = 0;
  });

  it('programs the ClusterIP and node port once both lists are read, and follows an endpoint leaving', async () => {
    const proxy = newProxy();
    await proxy.start();
    await eventually(async () => (await nft.readTable('ip', PROXY_TABLE))?.chains.some((c) => c.startsWith('service-') && c.includes('-default/web/')), 'the web Service chain');
    assert.ok(proxy.lastSync && proxy.lastSync.rules > 0 && proxy.lastSync.servicePorts >= 2, JSON.stringify(proxy.lastSync));
    await assertBoth(lab, lab.client.netns, `http://${clusterIP}/`);
    await assertBoth(lab, lab.outside.netns, `http://${LAB_NODE_IP}:${nodePort}/`);

    await client.patch(ENDPOINTSLICES, 'default', 'web-manual', 'merge', { endpoints: [{ addresses: [lab.pods[0]!.ip], nodeName: 'lab-node', conditions: { ready: true } }] });
    await eventually(
      async () => !(await nft.readTable('ip', PROXY_TABLE))!.chains.some((c) => c.includes(`${lab.pods[1]!.ip}/8080`)),
      'the second endpoint’s chain gone',
    );
    const { answers, failures } = await fetchMany(lab, lab.client.netns, `http://${clusterIP}/`, 20);
    assert.deepEqual(failures, []);
    assert.deepEqual([...new Set(answers)], ['p0']);
  });

  it('a Service deleted loses its rules; stop() leaves the table for the next proxy, which reconciles it without duplicates', async () => {
    await client.create(SERVICES, 'default', serviceObject('gone', { ports: [{ port: 81 }] }));
    await eventually(async () => await hasNoEndpointEntry(nft, '81'), 'the gone Service in the maps');
    await client.delete(SERVICES, 'default', 'gone');
    await eventually(async () => !(await hasNoEndpointEntry(nft, '81')), 'the gone Service out of the maps');

    await proxies[0]!.stop();
    const left = (await nft.readTable('ip', PROXY_TABLE))!;
    assert.ok(left.rules.length > 0, 'stop() leaves the table');
    const second = newProxy();
    await second.start();
    await eventually(() => second.lastSync, 'the second proxy’s first sync');
    const table = (await nft.readTable('ip', PROXY_TABLE))!;
    assert.deepEqual(ruleKeys(table), { total: second.lastSync!.rules, distinct: second.lastSync!.rules });
    assert.equal(table.rules.length, left.rules.length);
    await assertRefused(lab, lab.client.netns, `http://${clusterIP}:81/`);
    const { answers } = await fetchMany(lab, lab.client.netns, `http://${clusterIP}/`, 10);
    assert.deepEqual([...new Set(answers)], ['p0']);
    await second.stop();
    await removeServiceRules({ nft: lab.nft });
    assert.equal(await nft.readTable('ip', PROXY_TABLE), undefined);
  });
});

/** Whether the no-endpoint-services map holds an element for port `port` (as nft's JSON prints it). */
async function hasNoEndpointEntry(nft: Nft, port: string): Promise<boolean> {
  const table = await nft.readTable('ip', PROXY_TABLE);
  const elements = table?.elements.get('no-endpoint-services') ?? [];
  return elements.some((e) => JSON.stringify(e).includes(`"tcp",${port}]`));
}
