/**
 * The pod network across real nodes: two agents, each in a network namespace of its own joined
 * by a bridge (test/helpers/netns.ts), the server in the test's namespace. Per backend (vxlan and
 * host-gw): every runc pod gets an address of its node's pod CIDR, a pod on one node reaches a pod
 * on the other by that address (busybox wget to busybox httpd), a pod reaches outside the pod
 * network through the masquerade (the server's address), an agent killed with -9 and started
 * again finds the same pods with the same addresses and leaks none (host-local's reservations are
 * exactly the running pods and the node's spare sandbox), a new pod takes the spare sandbox
 * made ahead, and a deleted pod gives its address back.
 *
 * (busybox's `wget -T` crashes in Debian's busybox-static 1.35: timeouts come from `timeout`.)
 *
 * Run: node --import tsx --test test/e2e/pod-network.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent } from '../helpers/agent.js';
import { containerInitPid, execIn, importTestImage } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL } from '../helpers/kubectl.js';
import { createTestNetwork, inNetns, netnsProblem, type TestNetwork } from '../helpers/netns.js';
import { spawnForward } from '../helpers/streams.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const IMAGE = 'drover.test/net:1';
const skip = netnsProblem();

interface PodView {
  metadata: { uid: string };
  spec: { nodeName?: string };
  status?: { phase?: string; podIP?: string; hostIP?: string; containerStatuses?: { ready?: boolean; restartCount?: number }[] };
}

function webPod(name: string, node: string): unknown {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: {
      nodeName: node,
      runtimeClassName: 'runc',
      // httpd as PID 1 ignores SIGTERM: no point waiting the default 30 s for it.
      terminationGracePeriodSeconds: 1,
      // The agent killed with -9 below is back in seconds, but on a loaded machine not always
      // before the server declares its node lost; with the cluster's default toleration (0 s) the
      // pod would be evicted then. Failover is not this suite's subject (failover*.test.ts).
      tolerations: [{ key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 }],
      containers: [
        {
          name: 'web',
          image: IMAGE,
          imagePullPolicy: 'Never',
          command: ['sh', '-c', `mkdir -p /www && echo "hello from ${name}" > /www/index.html && exec httpd -f -p 8080 -h /www`],
        },
      ],
    },
  };
}

/** How many rules the node's Service table holds. */
function proxyRules(netns: string): number {
  const listed = JSON.parse(inNetns(netns, ['nft', '-j', 'list', 'table', 'ip', 'drover-proxy'])) as { nftables: Record<string, unknown>[] };
  return listed.nftables.filter((entry) => 'rule' in entry).length;
}

for (const backend of ['vxlan', 'host-gw'] as const) {
  describe(`pod network (${backend}) between nodes in their own network namespaces`, { concurrency: false, ...(skip ? { skip } : {}) }, () => {
    let net: TestNetwork;
    let server: ServerProcess;
    let work: string;
    const agents = new Map<string, AgentProcess>();
    const dataDirs = new Map<string, string>();
    const nodes = ['pn-a', 'pn-b'];

    const api = (method: string, p: string, body?: unknown) => request(server, method, p, body === undefined ? {} : { body });
    const getPod = async (name: string): Promise<PodView | undefined> => {
      const res = await api('GET', `/api/v1/namespaces/default/pods/${name}`);
      return res.status === 200 ? (res.json as PodView) : undefined;
    };
    const runningPod = (name: string) =>
      eventually(async () => {
        const pod = await getPod(name);
        return pod?.status?.phase === 'Running' && pod.status.containerStatuses?.[0]?.ready && pod;
      }, `${name} running`, 120_000);

    async function launch(index: number): Promise<void> {
      const name = nodes[index]!;
      const host = net.hosts[index]!;
      const agent = await startAgent({
        server: { url: `https://${net.hostIp}:${server.port}`, dataDir: server.dataDir },
        name,
        dataDir: dataDirs.get(name)!,
        netns: host.netns,
        args: ['--node-ip', host.ip],
      });
      agents.set(name, agent);
    }

    /**
     * host-local's reservations on a node: the addresses it holds, each by what holds it. host-local
     * names the CNI container id, which is a sandbox's id: its cached entry says which pod took it
     * (its uid), or that it is the node's spare (`spare`); anything else is a leak (`unexplained:`).
     */
    function reservations(node: string): Map<string, string> {
      const dir = path.join(dataDirs.get(node)!, 'agent', 'cni', 'ipam', 'drover');
      const results = path.join(dataDirs.get(node)!, 'agent', 'cni', 'results');
      const holders = new Map<string, string>();
      for (const file of fs.existsSync(results) ? fs.readdirSync(results) : []) {
        // `.pending`: a sandbox being made (the spare, made again after a pod took the last one).
        if (!/\.json(\.pending)?$/.test(file)) continue;
        const entry = JSON.parse(fs.readFileSync(path.join(results, file), 'utf8')) as { uid: string; namespace: string; containerId?: string };
        if (!holders.has(entry.containerId ?? entry.uid) || entry.namespace) holders.set(entry.containerId ?? entry.uid, entry.namespace ? entry.uid : 'spare');
      }
      const held = new Map<string, string>();
      for (const file of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
        if (!/^\d+\.\d+\.\d+\.\d+$/.test(file)) continue;
        const owner = fs.readFileSync(path.join(dir, file), 'utf8').split('\n')[0]!.trim();
        // An empty file: host-local is writing it now (the spare's ADD), which makes it the spare's.
        held.set(file, owner === '' ? 'spare' : (holders.get(owner) ?? `unexplained:${owner}`));
      }
      return held;
    }

    /** The reservations of pods (the node's spare sandbox left out, after checking there is at most one). */
    function podReservations(node: string): Map<string, string> {
      const all = reservations(node);
      assert.ok([...all.values()].filter((v) => v === 'spare').length <= 1, `at most one spare sandbox on ${node}: ${JSON.stringify([...all])}`);
      return new Map([...all].filter(([, holder]) => holder !== 'spare'));
    }

    before(async () => {
      net = createTestNetwork(2, backend === 'vxlan' ? 'a' : 'b');
      work = tempDir(`pod-network-${backend}`);
      server = await startServer({ args: ['--bind-address', '0.0.0.0', '--tls-san', net.hostIp, '--flannel-backend', backend] });
      const image = buildTestImage({ name: IMAGE });
      for (const name of nodes) {
        const dir = path.join(work, name);
        fs.mkdirSync(dir, { recursive: true });
        dataDirs.set(name, dir);
        await importTestImage(dir, image, work);
      }
      for (let i = 0; i < nodes.length; i++) await launch(i);
    });

    after(async () => {
      await cleanupAgents();
      // Whatever the agents left in their namespaces (bridge, VXLAN device, tables) goes with them.
      net?.remove();
      await cleanup(work);
    });

    it('each node gets a pod CIDR; each pod an address of its node’s, reported in status.podIP', async () => {
      for (const name of nodes) {
        await eventually(async () => {
          const res = await api('GET', `/api/v1/nodes/${name}`);
          const node = res.json as { spec?: { podCIDR?: string }; metadata: { annotations?: Record<string, string> } };
          return res.status === 200 && node.spec?.podCIDR && node.metadata.annotations?.['drover.io/backend'] === backend;
        }, `${name} has a pod CIDR and published its ${backend} endpoint`, 60_000);
      }
      // A Service made before the pods: its variables are in their environment (kubelet's links).
      const db = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'db' }, spec: { ports: [{ name: 'pg', port: 5432 }] } };
      assert.equal((await api('POST', '/api/v1/namespaces/default/services', db)).status, 201);
      for (const [i, node] of nodes.entries()) assert.equal((await api('POST', '/api/v1/namespaces/default/pods', webPod(`web-${i}`, node))).status, 201);
      for (const [i, node] of nodes.entries()) {
        const pod = await runningPod(`web-${i}`);
        const cidr = ((await api('GET', `/api/v1/nodes/${node}`)).json as { spec: { podCIDR: string } }).spec.podCIDR;
        const prefix = cidr.split('.').slice(0, 3).join('.');
        assert.ok(pod.status?.podIP?.startsWith(`${prefix}.`), `web-${i} has ${pod.status?.podIP}, expected one of ${cidr}`);
        assert.equal(pod.status?.hostIP, net.hosts[i]!.ip);
        assert.deepEqual([...podReservations(node).values()], [pod.metadata.uid], `${node}'s host-local holds exactly web-${i}`);
      }
    });

    it('a pod takes its node’s spare sandbox, wired ahead, and a new spare is made for the next pod', async () => {
      const results = path.join(dataDirs.get('pn-b')!, 'agent', 'cni', 'results');
      /** The node's spare sandboxes: complete cache entries no pod holds. */
      const spares = (): string[] =>
        fs
          .readdirSync(results)
          .filter((f) => f.endsWith('.json'))
          .map((f) => JSON.parse(fs.readFileSync(path.join(results, f), 'utf8')) as { namespace: string; sandbox?: string })
          .filter((e) => !e.namespace && e.sandbox)
          .map((e) => e.sandbox!);
      const before = await eventually(() => (spares().length === 1 ? spares() : undefined), 'pn-b has its spare sandbox', 60_000);
      assert.equal((await api('POST', '/api/v1/namespaces/default/pods', webPod('taker', 'pn-b'))).status, 201);
      const pod = await runningPod('taker');
      const entry = JSON.parse(fs.readFileSync(path.join(results, `${pod.metadata.uid}.json`), 'utf8')) as { sandbox?: string };
      assert.ok(entry.sandbox && before.includes(entry.sandbox), `the pod took the spare sandbox made before it (${entry.sandbox}; spare ${before.join(', ')})`);
      const spare = entry.sandbox;
      // Its container is in the sandbox's network namespace (the pin's inode is the namespace's).
      const pin = path.join(dataDirs.get('pn-b')!, 'agent', 'sandboxes', spare, 'ns', 'net');
      const init = await eventually(() => containerInitPid(dataDirs.get('pn-b')!, pod.metadata.uid, 'web'), 'taker’s container running', 30_000);
      assert.equal(fs.readlinkSync(`/proc/${init}/ns/net`), `net:[${fs.statSync(pin).ino}]`);
      await eventually(() => spares().some((id) => !before.includes(id)) && spares().length === 1, 'a new spare sandbox is made', 60_000);
      assert.equal((await api('DELETE', '/api/v1/namespaces/default/pods/taker')).status, 200);
      await eventually(async () => (await getPod('taker')) === undefined, 'taker gone', 60_000);
      assert.ok(!fs.existsSync(path.dirname(path.dirname(pin))), 'the pod’s sandbox is removed with it');
      assert.deepEqual([...podReservations('pn-b').values()], [(await getPod('web-1'))!.metadata.uid], 'its address is free again');
    });

    it('the pod network’s files and modes, as docs/security.md lists them', () => {
      const agentDir = path.join(dataDirs.get('pn-a')!, 'agent');
      const mode = (rel: string): string => `0${(fs.statSync(path.join(agentDir, rel)).mode & 0o7777).toString(8)}`;
      // "agent/cni/, cni/results/ and cni/ipam/ are 0700; the cached CNI entries and the conflist 0600."
      for (const dir of ['cni', 'cni/results', 'cni/ipam']) assert.equal(mode(dir), '0700', dir);
      assert.equal(mode('cni/10-drover.conflist'), '0600');
      const entries = fs.readdirSync(path.join(agentDir, 'cni', 'results')).filter((f) => f.endsWith('.json'));
      assert.ok(entries.length >= 2, `a pod's entry and the spare's: ${entries.join(', ')}`);
      for (const file of entries) assert.equal(mode(`cni/results/${file}`), '0600', file);
      // "agent/sandboxes/, each sandbox's directory and its ns/ are 0700, the pins 0600, shm/ (a tmpfs) 1777."
      const sandboxes = fs.readdirSync(path.join(agentDir, 'sandboxes'));
      assert.ok(sandboxes.length >= 2, `web-0's sandbox and the spare: ${sandboxes.join(', ')}`);
      assert.equal(mode('sandboxes'), '0700');
      for (const id of sandboxes) {
        assert.equal(mode(`sandboxes/${id}`), '0700', id);
        assert.equal(mode(`sandboxes/${id}/ns`), '0700', `${id}/ns`);
        assert.equal(mode(`sandboxes/${id}/shm`), '01777', `${id}/shm`);
        assert.deepEqual(fs.readdirSync(path.join(agentDir, 'sandboxes', id)).sort(), ['ns', 'shm']);
        assert.deepEqual(fs.readdirSync(path.join(agentDir, 'sandboxes', id, 'ns')).sort(), ['ipc', 'net', 'uts']);
      }
    });

    it('a pod reaches a pod on the other node by its address, and the node reaches its own pod', async () => {
      const a = (await getPod('web-0'))!;
      const b = (await getPod('web-1'))!;
      const fromA = await eventually(async () => {
        const out = await execIn(dataDirs.get('pn-a')!, a.metadata.uid, 'web', ['timeout', '5', 'wget', '-qO-', `http://${b.status!.podIP}:8080/`]);
        return out.code === 0 && out.stdout;
      }, 'web-0 reaches web-1 across nodes', 60_000);
      assert.match(fromA, /hello from web-1/);
      const fromB = await execIn(dataDirs.get('pn-b')!, b.metadata.uid, 'web', ['timeout', '5', 'wget', '-qO-', `http://${a.status!.podIP}:8080/`]);
      assert.equal(fromB.code, 0, fromB.stderr);
      assert.match(fromB.stdout, /hello from web-0/);
      // The node itself, over its bridge.
      assert.match(inNetns(net.hosts[0]!.netns, ['timeout', '5', 'wget', '-qO-', `http://${a.status!.podIP}:8080/`]), /hello from web-0/);
    });

    it('containers get the Service variables: the kubernetes Service’s and their namespace’s', async () => {
      const a = (await getPod('web-0'))!;
      const db = (await api('GET', '/api/v1/namespaces/default/services/db')).json as { spec: { clusterIP: string } };
      const env = await execIn(dataDirs.get('pn-a')!, a.metadata.uid, 'web', ['env']);
      assert.match(env.stdout, /^KUBERNETES_SERVICE_HOST=10\.43\.0\.1$/m);
      assert.match(env.stdout, /^KUBERNETES_SERVICE_PORT=443$/m);
      assert.match(env.stdout, new RegExp(`^DB_SERVICE_HOST=${db.spec.clusterIP.replace(/\./g, '\\.')}$`, 'm'));
      assert.match(env.stdout, /^DB_SERVICE_PORT_PG=5432$/m);
    });

    if (backend === 'vxlan') {
      it('kubectl port-forward reaches the pod at its own address', async () => {
        const forward = spawnForward(MODERN_KUBECTL, { kubeconfig: server.kubeconfig, cacheDir: path.join(work, 'kube-cache') }, ['port-forward', 'pod/web-0', ':8080']);
        try {
          const local = await forward.localPort;
          const answer = await fetch(`http://127.0.0.1:${local}/`);
          assert.equal(await answer.text(), 'hello from web-0\n');
        } finally {
          forward.child.kill('SIGTERM');
        }
      });

      it('hostPort: a pod’s port on its node’s address (portmap), from outside the node', async () => {
        const hp = webPod('hp', 'pn-a') as { spec: { containers: { ports?: unknown[] }[] } };
        hp.spec.containers[0]!.ports = [{ containerPort: 8080, hostPort: 18080 }];
        assert.equal((await api('POST', '/api/v1/namespaces/default/pods', hp)).status, 201);
        await runningPod('hp');
        const body = await eventually(async () => {
          try {
            return inNetns(net.hosts[1]!.netns, ['busybox', 'timeout', '5', 'busybox', 'wget', '-qO-', `http://${net.hosts[0]!.ip}:18080/`]);
          } catch {
            return undefined;
          }
        }, 'the hostPort answers from the other node', 60_000);
        assert.match(body, /hello from hp/);
        assert.equal((await api('DELETE', '/api/v1/namespaces/default/pods/hp')).status, 200);
        await eventually(async () => (await getPod('hp')) === undefined, 'hp gone', 60_000);
      });

      it('hostNetwork: a runc pod in its node’s network, with the node’s address', async () => {
        const hn = webPod('hn', 'pn-b') as { spec: Record<string, unknown> & { containers: { command: string[] }[] } };
        hn.spec.hostNetwork = true;
        hn.spec.containers[0]!.command = ['sleep', '100000'];
        assert.equal((await api('POST', '/api/v1/namespaces/default/pods', hn)).status, 201);
        const pod = await runningPod('hn');
        assert.equal(pod.status?.podIP, net.hosts[1]!.ip);
        // The container's network namespace is its node's (the agent's), not one of its own. (Not
        // through execIn: a runc exec from this process joins only the namespaces the container has.)
        const init = await eventually(
          () => containerInitPid(dataDirs.get('pn-b')!, pod.metadata.uid, 'web'),
          `hn's container running (${JSON.stringify((pod.status as { containerStatuses?: unknown }).containerStatuses)})`,
          30_000,
        );
        assert.equal(fs.readlinkSync(`/proc/${init}/ns/net`), fs.readlinkSync(`/proc/${agents.get('pn-b')!.pid}/ns/net`));
        assert.ok(!reservations('pn-b').has(pod.status!.podIP!), 'no pod network address for it');
        assert.equal((await api('DELETE', '/api/v1/namespaces/default/pods/hn')).status, 200);
        await eventually(async () => (await getPod('hn')) === undefined, 'hn gone', 60_000);
      });
    }

    it('a pod reaches an address outside the pod network (masqueraded as its node)', async () => {
      const a = (await getPod('web-0'))!;
      // The API server listens on the bridge address; any answer (even 401/403) proves the way there and back.
      const out = await execIn(dataDirs.get('pn-a')!, a.metadata.uid, 'web', ['sh', '-c', `echo | nc -w 3 ${net.hostIp} ${server.port} && echo connected`]);
      assert.match(out.stdout, /connected/, out.stderr);
    });

    it('an agent killed with -9 and started again keeps its pods, their addresses, and leaks none', async () => {
      const before = (await getPod('web-0'))!;
      const rulesBefore = proxyRules(net.hosts[0]!.netns);
      const pidBefore = await containerInitPid(dataDirs.get('pn-a')!, before.metadata.uid, 'web');
      assert.ok(pidBefore, 'web-0 runs');
      assert.ok(rulesBefore > 0, 'the node has Service rules (the kubernetes and db Services)');
      await agents.get('pn-a')!.stop('SIGKILL');
      await launch(0);
      // A pod that went while the agent was away: its reservation must be released at start.
      await eventually(async () => {
        const pod = await getPod('web-0');
        return pod?.status?.phase === 'Running' && pod.status.podIP === before.status!.podIP;
      }, 'web-0 still runs with its address', 60_000);
      const after = (await getPod('web-0'))!;
      assert.equal(after.metadata.uid, before.metadata.uid);
      assert.equal(
        await containerInitPid(dataDirs.get('pn-a')!, before.metadata.uid, 'web'),
        pidBefore,
        `the same container, not a new one; the restarted agent said:\n${agents.get('pn-a')!.output().split('\n').slice(-60).join('\n')}\nthe server said:\n${server
          .output()
          .split('\n')
          .filter((l) => /web-0|pn-a|fail|evict|delet/i.test(l))
          .slice(-40)
          .join('\n')}`,
      );
      assert.equal(after.status?.containerStatuses?.[0]?.restartCount ?? 0, before.status?.containerStatuses?.[0]?.restartCount ?? 0, 'the container was not restarted');
      assert.deepEqual([...podReservations('pn-a').entries()], [[before.status!.podIP, before.metadata.uid]]);
      // The restarted agent rewrote its Service table: the same rules, none twice.
      await eventually(() => agents.get('pn-a')!.output().includes('service rules synced'), 'the Service datapath synced again', 60_000);
      assert.equal(proxyRules(net.hosts[0]!.netns), rulesBefore);
      const b = (await getPod('web-1'))!;
      const out = await execIn(dataDirs.get('pn-b')!, b.metadata.uid, 'web', ['timeout', '5', 'wget', '-qO-', `http://${before.status!.podIP}:8080/`]);
      if (!/hello from web-0/.test(out.stdout)) {
        // Where the address lives now, and what the restarted agent did with the pod network.
        const sandboxes = path.join(dataDirs.get('pn-a')!, 'agent', 'sandboxes');
        const where = fs.readdirSync(sandboxes).map((id) => {
          try {
            return `${id}: ${execFileSync('nsenter', [`--net=${path.join(sandboxes, id, 'ns', 'net')}`, 'ip', '-4', '-o', 'addr'], { encoding: 'utf8' }).trim()}`;
          } catch (error) {
            return `${id}: ${(error as Error).message}`;
          }
        });
        const said = agents.get('pn-a')!.output().split('\n').filter((l) => /network|CNI|sandbox|release|Stopping/i.test(l)).slice(-30);
        said.push('the server said:', ...server.output().split('\n').filter((l) => /web-0|pn-a|fail|evict|delet/i.test(l)).slice(-40));
        assert.fail(`web-1 cannot reach web-0 at ${before.status!.podIP} after the restart: ${out.stderr}\nreservations: ${JSON.stringify([...reservations('pn-a')])}\nsandboxes:\n${where.join('\n')}\nagent:\n${said.join('\n')}`);
      }
    });

    it('a deleted pod gives its address back', async () => {
      assert.equal((await api('DELETE', '/api/v1/namespaces/default/pods/web-1')).status, 200);
      await eventually(async () => (await getPod('web-1')) === undefined, 'web-1 gone', 60_000);
      assert.deepEqual([...podReservations('pn-b').keys()], [], `the address is free again; the agent said:\n${agents.get('pn-b')!.output().split('\n').filter((l) => /network|CNI|release/i.test(l)).join('\n')}`);
    });
  });
}
