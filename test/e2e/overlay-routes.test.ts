/**
 * The routes between nodes, programmed by the real `ip` and `bridge` into a network namespace
 * this test makes: peers added, a peer whose address changed re-pointed, a peer gone removed
 * (also one an earlier run made: found by the route protocol), for VXLAN (device, neighbour,
 * forwarding entry, onlink route) and host-gw (a plain route). Nothing else is touched.
 *
 * Run: node --import tsx --test test/e2e/overlay-routes.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { Overlay, type Peer, VXLAN_DEVICE } from '../../src/agent/network/overlay.js';
import { createLogger } from '../../src/logging/logger.js';
import { type Cidr, parseCidr } from '../../src/node-protocol/service-network.js';
import { netnsProblem } from '../helpers/netns.js';

const NETNS = `drover-t${process.pid % 10000}-ovl`;
const skip = netnsProblem();

function ipIn(...args: string[]): string {
  return execFileSync('ip', ['-n', NETNS, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
}

function cidr(text: string): Cidr {
  return parseCidr(text) as Cidr;
}

function routes(): string[] {
  return (JSON.parse(ipIn('-j', 'route', 'show')) as { dst: string; gateway?: string; dev: string; protocol?: string }[])
    .map((r) => `${r.dst} via ${r.gateway ?? '-'} dev ${r.dev}${r.protocol === '86' ? ' (ours)' : ''}`)
    .sort();
}

describe('routes to other nodes’ pods (ip, bridge) in a network namespace', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  const logger = createLogger('silent');
  before(() => {
    try {
      execFileSync('ip', ['netns', 'del', NETNS], { stdio: 'ignore' });
    } catch {
      // none left over
    }
    execFileSync('ip', ['netns', 'add', NETNS]);
    // A veth pair inside the namespace (this kernel has no dummy devices): eth0 is the underlay.
    ipIn('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
    ipIn('link', 'set', 'eth0p', 'up');
    ipIn('addr', 'add', '192.168.50.1/24', 'dev', 'eth0');
    ipIn('link', 'set', 'eth0', 'up');
    // A route of someone else's, which must survive every sync.
    ipIn('route', 'add', '10.99.0.0/24', 'via', '192.168.50.254');
  });
  after(() => {
    execFileSync('ip', ['netns', 'del', NETNS], { stdio: 'ignore' });
  });

  it('host-gw: a route per peer; a moved peer re-pointed, a gone one removed, other routes left alone', async () => {
    const overlay = new Overlay({ backend: 'host-gw', podCidr: cidr('10.42.0.0/24'), publicIp: '192.168.50.1', underlay: 'eth0', underlayMtu: 1500, logger, netns: NETNS });
    const annotations = await overlay.setUp();
    assert.deepEqual(annotations, { 'drover.io/backend': 'host-gw', 'drover.io/public-ip': '192.168.50.1' });
    const a: Peer = { node: 'a', podCidr: cidr('10.42.1.0/24'), publicIp: '192.168.50.2' };
    const b: Peer = { node: 'b', podCidr: cidr('10.42.2.0/24'), publicIp: '192.168.50.3' };
    await overlay.sync([a, b]);
    assert.deepEqual(routes().filter((r) => r.startsWith('10.')), [
      '10.42.1.0/24 via 192.168.50.2 dev eth0 (ours)',
      '10.42.2.0/24 via 192.168.50.3 dev eth0 (ours)',
      '10.99.0.0/24 via 192.168.50.254 dev eth0',
    ]);
    await overlay.sync([{ ...a, publicIp: '192.168.50.4' }]);
    assert.deepEqual(routes().filter((r) => r.startsWith('10.')), ['10.42.1.0/24 via 192.168.50.4 dev eth0 (ours)', '10.99.0.0/24 via 192.168.50.254 dev eth0']);
    // A fresh agent (a restart) finds a route an earlier run left for a node that is gone.
    const restarted = new Overlay({ backend: 'host-gw', podCidr: cidr('10.42.0.0/24'), publicIp: '192.168.50.1', underlay: 'eth0', underlayMtu: 1500, logger, netns: NETNS });
    await restarted.setUp();
    await restarted.sync([]);
    assert.deepEqual(routes().filter((r) => r.startsWith('10.')), ['10.99.0.0/24 via 192.168.50.254 dev eth0']);
  });

  it('vxlan: the device with the CIDR’s .0, and per peer a neighbour, a forwarding entry and an onlink route', async () => {
    const overlay = new Overlay({ backend: 'vxlan', podCidr: cidr('10.42.0.0/24'), publicIp: '192.168.50.1', underlay: 'eth0', underlayMtu: 1500, logger, netns: NETNS });
    const annotations = await overlay.setUp();
    assert.match(annotations['drover.io/vtep-mac'] ?? '', /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
    const link = (JSON.parse(ipIn('-j', '-d', 'link', 'show', 'dev', VXLAN_DEVICE)) as { mtu: number; linkinfo: { info_data: { id: number; port: number; local: string } } }[])[0]!;
    assert.equal(link.mtu, 1450);
    assert.equal(link.linkinfo.info_data.id, 1);
    assert.equal(link.linkinfo.info_data.port, 8472);
    assert.match(ipIn('-4', 'addr', 'show', 'dev', VXLAN_DEVICE), /inet 10\.42\.0\.0\/32/);
    const peer: Peer = { node: 'c', podCidr: cidr('10.42.3.0/24'), publicIp: '192.168.50.5', vtepMac: '02:00:00:00:00:03' };
    await overlay.sync([peer]);
    assert.deepEqual(routes().filter((r) => r.startsWith('10.42')), ['10.42.3.0/24 via 10.42.3.0 dev drover.1 (ours)']);
    assert.match(ipIn('neigh', 'show', 'dev', VXLAN_DEVICE), /10\.42\.3\.0 lladdr 02:00:00:00:00:03 PERMANENT/);
    assert.match(execFileSync('bridge', ['-n', NETNS, 'fdb', 'show', 'dev', VXLAN_DEVICE]).toString(), /02:00:00:00:00:03 dst 192\.168\.50\.5 self permanent/);
    await overlay.sync([]);
    assert.deepEqual(routes().filter((r) => r.startsWith('10.42')), []);
    assert.doesNotMatch(ipIn('neigh', 'show', 'dev', VXLAN_DEVICE), /10\.42\.3\.0/);
    assert.doesNotMatch(execFileSync('bridge', ['-n', NETNS, 'fdb', 'show', 'dev', VXLAN_DEVICE]).toString(), /02:00:00:00:00:03/);
  });
});
