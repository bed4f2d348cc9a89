/**
 * Services on a real server, through kubectl (1.32 and Debian's 1.20) and the Python client: the
 * default `kubernetes` Service (first address of service-cidr, port 443, read by `kubectl
 * cluster-info`), `kubectl expose` and `kubectl create service nodeport`, the printed columns of
 * `get svc,ep,endpointslices -o wide`, the 422s of a clusterIP outside the range and of a taken
 * nodePort, the endpoints controller following a pod's address and readiness (the pod's status is
 * written here as its agent would: there is no pod network yet), and a selector-less Service with
 * a manual EndpointSlice left alone.
 *
 * Run: node --import tsx --test test/e2e/services.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { assertPythonClient, runPython } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

describe('Services, Endpoints and EndpointSlices on a real server', { concurrency: false }, () => {
  let server: ServerProcess;
  let cache: string;

  before(async () => {
    server = await startServer({ handMadeNodes: true });
    cache = tempDir('kubectl-cache');
  });
  after(() => cleanup(cache));

  const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown; text: string }> =>
    request(server, method, path, body === undefined ? {} : { body });

  it('keeps the default kubernetes Service at the first address of service-cidr, and kubectl cluster-info reads it', async () => {
    const svc = await eventually(async () => {
      const res = await api('GET', '/api/v1/namespaces/default/services/kubernetes');
      return res.status === 200 ? (res.json as { spec: { clusterIP: string; ports: { port: number; name: string; targetPort: number }[] } }) : undefined;
    }, 'the kubernetes Service', 60_000);
    assert.equal(svc.spec.clusterIP, '10.43.0.1');
    assert.deepEqual(svc.spec.ports.map((p) => [p.name, p.port, p.targetPort]), [['https', 443, server.port]]);
    for (const client of kubectlClients()) {
      const info = await runKubectl(client, server.kubeconfig, cache, ['cluster-info']);
      assert.equal(info.code, 0, `${client.name}: ${info.stderr}`);
      assert.match(info.stdout, /Kubernetes control plane.* is running at .*https:\/\/127\.0\.0\.1:\d+/, client.name);
    }
  });

  for (const client of kubectlClients()) {
    it(`${client.name}: expose, create service nodeport, get -o wide, and the 422s of a bad clusterIP and a taken nodePort`, async () => {
      const ns = client.legacy ? 'svc-old' : 'svc-new';
      const k = (...args: string[]) => runKubectl(client, server.kubeconfig, cache, ['-n', ns, ...args]);
      assert.equal((await k('create', 'namespace', ns)).code, 0);
      const deploy = await k('create', 'deployment', 'web', '--image=nginx', '--', 'sleep', '1000');
      assert.equal(deploy.code, 0, deploy.stderr);
      const expose = await k('expose', 'deployment', 'web', '--port', '80', '--target-port', '8080');
      assert.equal(expose.code, 0, expose.stderr);
      const nodePort = await k('create', 'service', 'nodeport', 'np', '--tcp=8080:80');
      assert.equal(nodePort.code, 0, nodePort.stderr);
      const wide = await eventually(async () => {
        const out = await k('get', 'svc,ep,endpointslices', '-o', 'wide');
        return out.code === 0 && /endpointslice.*\/web-/.test(out.stdout) ? out.stdout : undefined;
      }, 'the web EndpointSlice', 60_000);
      assert.match(wide, /NAME\s+TYPE\s+CLUSTER-IP\s+EXTERNAL-IP\s+PORT\(S\)\s+AGE\s+SELECTOR/);
      assert.match(wide, /service\/web\s+ClusterIP\s+10\.43\.\d+\.\d+\s+<none>\s+80\/TCP\s+\S+\s+app=web/);
      assert.match(wide, /service\/np\s+NodePort\s+10\.43\.\d+\.\d+\s+<none>\s+8080:(3\d{4})\/TCP/);
      assert.match(wide, /endpoints\/web\s+<none>/);
      assert.match(wide, /NAME\s+ADDRESSTYPE\s+PORTS\s+ENDPOINTS\s+AGE/);
      const taken = /8080:(3\d{4})\/TCP/.exec(wide)![1]!;
      const dup = await k('create', 'service', 'nodeport', 'np2', '--tcp=80', `--node-port=${taken}`);
      assert.notEqual(dup.code, 0);
      assert.match(dup.stderr, new RegExp(`spec\\.ports\\[0\\]\\.nodePort: Invalid value: ${taken}: provided port is already allocated`));
      const outside = await k('create', 'service', 'clusterip', 'bad', '--tcp=80', '--clusterip=10.0.0.5');
      assert.notEqual(outside.code, 0);
      assert.match(outside.stderr, /failed to allocate IP 10\.0\.0\.5: the provided IP \(10\.0\.0\.5\) is not in the valid range\. The range of valid IPs is 10\.43\.0\.0\/16/);
      const headless = await k('create', 'service', 'clusterip', 'headless', '--clusterip=None');
      assert.equal(headless.code, 0, headless.stderr);
      const external = await k('create', 'service', 'externalname', 'ext', '--external-name', 'db.example.com');
      assert.equal(external.code, 0, external.stderr);
      const list = await k('get', 'svc', 'headless', 'ext');
      assert.match(list.stdout, /headless\s+ClusterIP\s+None/);
      assert.match(list.stdout, /ext\s+ExternalName\s+<none>\s+db\.example\.com/);
      // Deleting a Service gives its node port back: another Service may take it.
      assert.equal((await k('delete', 'svc', 'np')).code, 0);
      const again = await k('create', 'service', 'nodeport', 'np3', '--tcp=80', `--node-port=${taken}`);
      assert.equal(again.code, 0, again.stderr);
    });
  }

  it('the endpoints controller follows a matching pod’s address and readiness into the Endpoints and the EndpointSlice', async () => {
    const node = await api('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'hand-made' } });
    assert.equal(node.status, 201, node.text);
    const svc = await api('POST', '/api/v1/namespaces/default/services', {
      apiVersion: 'v1', kind: 'Service', metadata: { name: 'api' },
      spec: { selector: { app: 'api' }, ports: [{ name: 'http', port: 80, targetPort: 'web' }] },
    });
    assert.equal(svc.status, 201, svc.text);
    const pod = await api('POST', '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1', kind: 'Pod', metadata: { name: 'api-1', labels: { app: 'api' } },
      spec: { nodeName: 'hand-made', containers: [{ name: 'c', command: ['sleep', '1000'], ports: [{ name: 'web', containerPort: 8080 }] }] },
    });
    assert.equal(pod.status, 201, pod.text);
    const setStatus = async (ready: boolean): Promise<void> => {
      const res = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/api-1/status', {
        body: { status: { phase: 'Running', podIP: '10.42.0.5', podIPs: [{ ip: '10.42.0.5' }], conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] } },
        headers: { 'content-type': 'application/merge-patch+json' },
      });
      assert.equal(res.status, 200, res.text);
    };
    await setStatus(true);
    await eventually(async () => {
      const ep = (await api('GET', '/api/v1/namespaces/default/endpoints/api')).json as { subsets?: { addresses?: { ip: string }[]; ports: { port: number }[] }[] };
      return ep.subsets?.[0]?.addresses?.[0]?.ip === '10.42.0.5' && ep.subsets[0].ports[0]!.port === 8080 ? true : undefined;
    }, 'the ready address in the Endpoints', 60_000);
    // The slice for the new port set is written before the port-less one is deleted (consumers never
    // see no slice), so for a moment there are two: wait for the old one to go.
    const slices = await eventually(async () => {
      const list = (await api('GET', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dapi')).json as {
        items: { endpoints: { addresses: string[]; conditions: { ready: boolean } }[]; ports: { port: number }[] }[];
      };
      return list.items.length === 1 ? list : undefined;
    }, 'one EndpointSlice for the Service', 60_000);
    assert.deepEqual(slices.items[0]!.endpoints.map((e) => [e.addresses[0], e.conditions.ready]), [['10.42.0.5', true]]);
    await setStatus(false);
    await eventually(async () => {
      const ep = (await api('GET', '/api/v1/namespaces/default/endpoints/api')).json as { subsets?: { addresses?: unknown[]; notReadyAddresses?: { ip: string }[] }[] };
      return ep.subsets?.[0]?.notReadyAddresses?.[0]?.ip === '10.42.0.5' && !ep.subsets[0].addresses ? true : undefined;
    }, 'the address among notReadyAddresses', 60_000);
  });

  it('a selector-less Service keeps the EndpointSlice its user writes', async () => {
    const svc = await api('POST', '/api/v1/namespaces/default/services', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'manual' }, spec: { ports: [{ port: 5432 }] } });
    assert.equal(svc.status, 201, svc.text);
    const slice = await api('POST', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', {
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
      metadata: { name: 'manual-1', labels: { 'kubernetes.io/service-name': 'manual' } },
      addressType: 'IPv4', endpoints: [{ addresses: ['192.0.2.10'] }], ports: [{ port: 5432 }],
    });
    assert.equal(slice.status, 201, slice.text);
    const bad = await api('POST', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', {
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'manual-2' }, addressType: 'IPv4', endpoints: [{ addresses: ['127.0.0.1'] }],
    });
    assert.equal(bad.status, 422, bad.text);
    assert.match(bad.text, /may not be in the loopback range/);
    // Nothing takes it away or makes Endpoints for it.
    const ep = await api('GET', '/api/v1/namespaces/default/endpoints/manual');
    assert.equal(ep.status, 404);
    const kept = await api('GET', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/manual-1');
    assert.equal(kept.status, 200);
  });

  it('the Python client lists Services', async () => {
    assertPythonClient();
    const script = [
      'import sys',
      'from kubernetes import client, config',
      'config.load_kube_config(sys.argv[1])',
      'v1 = client.CoreV1Api()',
      'svc = v1.list_service_for_all_namespaces()',
      'print(" ".join(sorted(f"{s.metadata.namespace}/{s.metadata.name}={s.spec.cluster_ip}" for s in svc.items)))',
      'print(" ".join(sorted(e.metadata.name for e in v1.list_namespaced_endpoints("default").items)))',
    ].join('\n');
    const run = await runPython(['-c', script, server.kubeconfig]);
    assert.equal(run.code, 0, run.output);
    assert.match(run.stdout, /default\/kubernetes=10\.43\.0\.1/);
    assert.match(run.stdout, /default\/api=10\.43\.\d+\.\d+/);
    assert.match(run.stdout, /\bapi\b.*\bkubernetes\b/);
  });
});
