/**
 * Node IPAM on a real server: each Node gets a /24 of cluster-cidr in spec.podCIDR(s), nodes
 * registering together never share one, a deleted Node's range is handed out again, and with
 * `--flannel-backend none` nothing is allocated. Nodes are made by hand (no agents).
 *
 * Run: node --import tsx --test test/e2e/node-ipam.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

interface NodeView {
  spec?: { podCIDR?: string; podCIDRs?: string[] };
}

function nodeBody(name: string): unknown {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name } };
}

describe('node IPAM: a pod CIDR per node from cluster-cidr', { concurrency: false }, () => {
  let server: ServerProcess;
  let none: ServerProcess | undefined;
  const dirs: string[] = [];

  before(async () => {
    server = await startServer({ handMadeNodes: true, args: ['--flannel-backend', 'vxlan', '--cluster-cidr', '10.60.0.0/22'] });
  });
  after(async () => {
    await cleanup(...dirs);
  });

  const podCidr = async (srv: ServerProcess, name: string): Promise<string | undefined> => {
    const res = await request(srv, 'GET', `/api/v1/nodes/${name}`);
    return res.status === 200 ? (res.json as NodeView).spec?.podCIDR : undefined;
  };

  it('nodes created together get distinct /24s, in podCIDR and podCIDRs', async () => {
    const names = ['n1', 'n2', 'n3', 'n4'];
    await Promise.all(names.map(async (name) => assert.equal((await request(server, 'POST', '/api/v1/nodes', { body: nodeBody(name) })).status, 201)));
    const cidrs = await eventually(async () => {
      const all = await Promise.all(names.map((n) => podCidr(server, n)));
      return all.every(Boolean) && (all as string[]);
    }, 'every node has a pod CIDR', 60_000);
    assert.deepEqual([...cidrs].sort(), ['10.60.0.0/24', '10.60.1.0/24', '10.60.2.0/24', '10.60.3.0/24']);
    const n1 = (await request(server, 'GET', '/api/v1/nodes/n1')).json as NodeView;
    assert.deepEqual(n1.spec?.podCIDRs, [n1.spec?.podCIDR]);
  });

  it('a fifth node waits while the range is used up, and takes a deleted node’s range', async () => {
    assert.equal((await request(server, 'POST', '/api/v1/nodes', { body: nodeBody('n5') })).status, 201);
    const freed = await podCidr(server, 'n2');
    assert.ok(freed);
    assert.equal(await podCidr(server, 'n5'), undefined, 'no range is left for n5 yet');
    assert.equal((await request(server, 'DELETE', '/api/v1/nodes/n2')).status, 200);
    const taken = await eventually(() => podCidr(server, 'n5'), 'n5 gets the freed range', 60_000);
    assert.equal(taken, freed);
  });

  it('with --flannel-backend none no node gets a pod CIDR', async (t) => {
    const dir = tempDir('ipam-none');
    dirs.push(dir);
    none = await startServer({ dataDir: dir, handMadeNodes: true });
    assert.equal((await request(none, 'POST', '/api/v1/nodes', { body: nodeBody('plain') })).status, 201);
    // Leadership and the controllers' first pass come after ready: the kubernetes Service shows
    // the controllers ran (it is the leader's), and then the node is looked at again.
    await eventually(async () => (await request(none!, 'GET', '/api/v1/namespaces/default/services/kubernetes')).status === 200, 'the leader’s controllers', 60_000);
    await eventually(async () => (await request(none!, 'GET', '/api/v1/namespaces/default/serviceaccounts/default')).status === 200, 'a second controller pass', 60_000);
    t.diagnostic('no pod CIDR on a node of a cluster without a pod network');
    assert.equal(await podCidr(none, 'plain'), undefined);
  });
});
