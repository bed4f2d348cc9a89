/**
 * Services and cluster DNS across real nodes: three agents, each in a network namespace of its
 * own (test/helpers/netns.ts), the server in the test's, VXLAN between them. Through the real
 * kubectl: a Deployment of three busybox httpd replicas, `kubectl expose`, and from a pod on
 * another node `wget http://web` (the short name through the pod's search path and the node's
 * cluster DNS, then the node's nftables Service rules) answered by every replica; a NodePort on
 * every node's address; SRV and headless answers; and a replica's node lost (agent killed, link
 * down): once the node is judged Unavailable and the rules follow, no request fails, its endpoint
 * leaves the slice, and the replacement joins when Ready.
 *
 * Run: node --import tsx --test test/e2e/cluster-network.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent } from '../helpers/agent.js';
import { execIn, importTestImage } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { createTestNetwork, netnsProblem, type TestNetwork } from '../helpers/netns.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const IMAGE = 'drover.test/web:1';
const NODES = ['cn-0', 'cn-1', 'cn-2'];
const skip = netnsProblem();

interface PodView {
  metadata: { name: string; uid: string; labels?: Record<string, string>; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: { phase?: string; podIP?: string; conditions?: { type: string; status: string }[] };
}

interface SliceView {
  metadata: { labels?: Record<string, string> };
  endpoints?: { addresses: string[]; conditions?: { ready?: boolean } }[];
}

function httpGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: 3000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('timeout', () => req.destroy(new Error(`timed out: ${url}`)));
    req.on('error', reject);
  });
}

describe('Services and cluster DNS across nodes in their own network namespaces', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  let net: TestNetwork;
  let server: ServerProcess;
  let work: string;
  let cache: string;
  const agents = new Map<string, AgentProcess>();
  const dataDirs = new Map<string, string>();

  const api = (method: string, p: string, body?: unknown) => request(server, method, p, body === undefined ? {} : { body });
  const kubectl = (...args: string[]) => runKubectl(MODERN_KUBECTL, server.kubeconfig, cache, args, { timeoutMs: 120_000 });
  const pods = async (selector: string): Promise<PodView[]> =>
    ((await api('GET', `/api/v1/namespaces/default/pods?labelSelector=${encodeURIComponent(selector)}`)).json as { items: PodView[] }).items;
  const ready = (p: PodView) => p.status?.phase === 'Running' && !p.metadata.deletionTimestamp && (p.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
  const slicesOf = async (service: string): Promise<SliceView[]> =>
    ((await api('GET', `/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D${service}`)).json as { items: SliceView[] }).items;
  const readyEndpointIps = async (service: string): Promise<string[]> =>
    (await slicesOf(service))
      .flatMap((s) => s.endpoints ?? [])
      .filter((e) => e.conditions?.ready !== false)
      .flatMap((e) => e.addresses)
      .sort();

  /**
   * busybox nslookup on node cn-0 against the cluster DNS address (from a pod it walks the pod's
   * search path first and prints nothing for names it found after a miss; the pod's own lookups
   * are proven by wget http://web above).
   */
  const nslookup = (type: string, name: string): string =>
    execFileSync('ip', ['netns', 'exec', net.hosts[0]!.netns, '/bin/busybox', 'nslookup', `-type=${type}`, name, '10.43.0.10'], { timeout: 30_000 }).toString();

  /** Run a shell script in the client pod (on cn-0). */
  const fromClient = async (script: string): Promise<string> => {
    const client = (await pods('app=client'))[0]!;
    const out = await execIn(dataDirs.get('cn-0')!, client.metadata.uid, 'client', ['sh', '-c', script]);
    return out.stdout + out.stderr;
  };

  before(async () => {
    net = createTestNetwork(3, 'c');
    work = tempDir('cluster-network');
    cache = path.join(work, 'kube-cache');
    server = await startServer({
      args: ['--bind-address', '0.0.0.0', '--tls-san', net.hostIp, '--flannel-backend', 'vxlan', '--default-runtime-class', 'runc'],
    });
    const image = buildTestImage({ name: IMAGE });
    for (const [i, name] of NODES.entries()) {
      const dir = path.join(work, name);
      fs.mkdirSync(dir, { recursive: true });
      dataDirs.set(name, dir);
      await importTestImage(dir, image, work);
      agents.set(
        name,
        await startAgent({
          server: { url: `https://${net.hostIp}:${server.port}`, dataDir: server.dataDir },
          name,
          dataDir: dir,
          netns: net.hosts[i]!.netns,
          args: ['--node-ip', net.hosts[i]!.ip],
        }),
      );
    }
    // The client: a pod on cn-0 that only waits.
    const client = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'client', labels: { app: 'client' } },
      spec: { nodeName: 'cn-0', terminationGracePeriodSeconds: 1, containers: [{ name: 'client', image: IMAGE, command: ['sleep', '100000'] }] },
    };
    assert.equal((await api('POST', '/api/v1/namespaces/default/pods', client)).status, 201);
  });

  after(async () => {
    await cleanupAgents();
    net?.remove();
    await cleanup(work);
  });

  it('kubectl expose: a pod on another node gets an answer from every replica at http://web', async () => {
    // A stock manifest, with a readiness probe: a replica is an endpoint only once it listens.
    const manifest = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web', labels: { app: 'web' } },
      spec: {
        replicas: 3,
        selector: { matchLabels: { app: 'web' } },
        template: {
          metadata: { labels: { app: 'web' } },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [
              {
                name: 'web',
                image: IMAGE,
                ports: [{ containerPort: 8080, name: 'http' }],
                command: ['sh', '-c', 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www'],
                readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
              },
            ],
          },
        },
      },
    };
    const created = await runKubectl(MODERN_KUBECTL, server.kubeconfig, cache, ['apply', '-f', '-'], { input: JSON.stringify(manifest), timeoutMs: 120_000 });
    assert.equal(created.code, 0, created.stderr);
    const replicas = await eventually(async () => {
      const list = (await pods('app=web')).filter(ready);
      return list.length === 3 && list;
    }, '3 ready web replicas', 180_000);
    await eventually(async () => ready((await pods('app=client'))[0] ?? ({} as PodView)), 'the client pod', 120_000);
    const exposed = await kubectl('expose', 'deployment', 'web', '--port', '80', '--target-port', '8080');
    assert.equal(exposed.code, 0, exposed.stderr);
    await eventually(async () => (await readyEndpointIps('web')).length === 3, 'web has 3 ready endpoints', 60_000);
    const names = new Set(replicas.map((p) => p.metadata.name));
    const seen = await eventually(async () => {
      const out = await fromClient('for i in $(seq 40); do timeout 5 wget -qO- http://web/ || echo FAILED; done');
      const answers = out.split('\n').map((l) => l.trim()).filter(Boolean);
      const got = new Set(answers.filter((a) => names.has(a)));
      return got.size === 3 && !answers.includes('FAILED') && got;
    }, 'every replica answers http://web from cn-0', 120_000);
    assert.deepEqual([...seen].sort(), [...names].sort());
  });

  it('a NodePort answers on every node’s address', async () => {
    const exposed = await kubectl('expose', 'deployment', 'web', '--name', 'web-np', '--type', 'NodePort', '--port', '80', '--target-port', '8080');
    assert.equal(exposed.code, 0, exposed.stderr);
    const svc = (await api('GET', '/api/v1/namespaces/default/services/web-np')).json as { spec: { ports: { nodePort: number }[] } };
    const nodePort = svc.spec.ports[0]!.nodePort;
    const names = new Set((await pods('app=web')).map((p) => p.metadata.name));
    for (const host of net.hosts) {
      const body = await eventually(async () => {
        const answer = await httpGet(`http://${host.ip}:${nodePort}/`).catch(() => '');
        return names.has(answer.trim()) && answer;
      }, `node port ${nodePort} on ${host.ip}`, 60_000);
      assert.ok(names.has(body.trim()));
    }
  });

  it('cluster DNS: A, SRV of a named port and a headless Service’s pod addresses', async () => {
    const svc = (await api('GET', '/api/v1/namespaces/default/services/web')).json as { spec: { clusterIP: string } };
    const a = nslookup('a', 'web.default.svc.cluster.local');
    assert.match(a, new RegExp(`Address:\\s+${svc.spec.clusterIP.replace(/\./g, '\\.')}`), a);
    const headless = await kubectl('create', 'service', 'clusterip', 'web-hl', '--clusterip=None', '--tcp=80:8080');
    assert.equal(headless.code, 0, headless.stderr);
    // `kubectl create service` selects app=web-hl: point it at the replicas.
    assert.equal((await kubectl('set', 'selector', 'service', 'web-hl', 'app=web')).code, 0);
    const podIps = (await pods('app=web')).filter(ready).map((p) => p.status!.podIP!).sort();
    const answered = await eventually(async () => {
      const out = nslookup('a', 'web-hl.default.svc.cluster.local');
      const ips = [...out.matchAll(/Address:\s+(10\.42\.\d+\.\d+)/g)].map((m) => m[1]!).sort();
      return ips.length === 3 && ips;
    }, 'the headless Service answers its 3 pod addresses', 60_000);
    assert.deepEqual(answered, podIps);
    const srv = nslookup('srv', '_80-8080._tcp.web-hl.default.svc.cluster.local');
    assert.match(srv, /port = 8080|8080 /, srv);
  });

  it('a replica’s node lost: once Unavailable its endpoint leaves, no request fails, the replacement joins when Ready', async () => {
    const victim = (await pods('app=web')).find((p) => ready(p) && p.spec.nodeName !== 'cn-0')!;
    const node = victim.spec.nodeName!;
    const index = NODES.indexOf(node);
    await agents.get(node)!.stop('SIGKILL');
    // Host-level loss: the node's link goes too, so its pods are unreachable, as a dead host's are.
    execFileSync('ip', ['netns', 'exec', net.hosts[index]!.netns, 'ip', 'link', 'set', 'eth0', 'down']);
    await eventually(async () => !(await readyEndpointIps('web')).includes(victim.status!.podIP!), `${victim.metadata.name}'s endpoint leaves the slice`, 60_000);
    // One datapath update later (the proxy's debounce; a second is generous) every request answers.
    await new Promise((r) => setTimeout(r, 1000));
    const out = await fromClient('for i in $(seq 30); do timeout 5 wget -qO- http://web/ || echo FAILED; done');
    assert.ok(!out.includes('FAILED'), `a request failed after the endpoint left:\n${out}`);
    const replacement = await eventually(async () => {
      const list = (await pods('app=web')).filter((p) => ready(p) && p.spec.nodeName !== node);
      return list.length === 3 && list;
    }, 'a replacement replica is Ready', 180_000);
    const fresh = replacement.find((p) => p.metadata.name !== victim.metadata.name && !(victim.metadata.uid === p.metadata.uid))!;
    await eventually(async () => {
      const ips = await readyEndpointIps('web');
      return ips.length === 3 && replacement.every((p) => ips.includes(p.status!.podIP!));
    }, 'the replacement is an endpoint', 60_000);
    assert.ok(fresh);
  });
});
