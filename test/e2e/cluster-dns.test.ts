import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { createTestNetwork, netnsProblem, type TestNetwork } from '../helpers/netns.js';
import { cleanup, eventually, REPO_ROOT, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * The cluster DNS server (src/agent/dns/server.ts) for real: a ClusterDns process inside a network
 * namespace this test makes, following a real API server through a veth on a test bridge (test/helpers/netns.ts), with cluster-dns
 * (10.43.0.10) on its own device there. Answers are checked with real resolver clients from inside
 * the namespace: busybox nslookup, and dns-packet queries over UDP and TCP (test/helpers/dns-query.ts)
 * for the wire details. Names outside the cluster go to the upstreams of the namespace's
 * resolv.conf (`ip netns exec` mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf): a loopback
 * stub and cluster-dns itself (skipped), an unroutable one and a silent one (each fails, the next
 * is tried), then a stand-in upstream (test/helpers/fake-dns-upstream.ts) that logs what it gets.
 * Needs root, iproute2 and /bin/busybox.
 */

const run = promisify(execFile);
// Set in `before` from the test network (test/helpers/netns.ts): the node's namespace and address,
// the host's address on its link, an address on the link owned by nobody (queries to it go
// unanswered: the timeout path), and the namespace's own /etc.
let NETNS = '';
let NS_IP = '';
let HOST_IP = '';
let SILENT_IP = '';
let NETNS_ETC = '';
const CLUSTER_DNS = '10.43.0.10';
const TSX = ['--import', 'tsx'];

function preconditions(): string | undefined {
  if (!fs.existsSync('/bin/busybox')) return 'needs /bin/busybox (busybox-static) for nslookup';
  return netnsProblem();
}

const skip = preconditions();

interface Child {
  process: ChildProcess;
  output: () => string;
}

/** A process inside the namespace (`ip netns exec` execs in place: the PID is the program's). */
function spawnInNetns(args: string[]): Child {
  const child = spawn('ip', ['netns', 'exec', NETNS, process.execPath, ...TSX, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  return { process: child, output: () => output };
}

async function waitReady(child: Child, what: string): Promise<void> {
  await eventually(
    () => {
      if (child.process.exitCode !== null) throw new Error(`${what} exited ${child.process.exitCode}:\n${child.output()}`);
      return child.output().includes('"ready":true');
    },
    what,
    60_000,
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}\n${what} output:\n${child.output()}`);
  });
}

async function nslookup(name: string, type = 'a'): Promise<string> {
  // busybox exits non-zero on NXDOMAIN; its output says why either way.
  try {
    const { stdout, stderr } = await run('ip', ['netns', 'exec', NETNS, '/bin/busybox', 'nslookup', `-type=${type}`, name, CLUSTER_DNS], { timeout: 30_000 });
    return stdout + stderr;
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    return `${e.stdout ?? ''}${e.stderr ?? ''}`;
  }
}

interface WireReply {
  id: boolean;
  rcode: string;
  aa: boolean;
  tc: boolean;
  ra: boolean;
  questions: Array<{ name: string; type: string }>;
  answers: Array<{ name: string; type: string; ttl: number; data: unknown }>;
  authorities: Array<{ name: string; type: string; ttl: number; data: unknown }>;
  additionals: Array<{ name: string; type: string; data?: unknown }>;
  bytes: number;
}

async function query(name: string, type: string, options: { tcp?: boolean; edns?: number } = {}): Promise<WireReply> {
  const { stdout } = await run(
    'ip',
    ['netns', 'exec', NETNS, process.execPath, ...TSX, 'test/helpers/dns-query.ts', JSON.stringify({ server: CLUSTER_DNS, name, type, ...options })],
    { cwd: REPO_ROOT, timeout: 60_000 },
  );
  return JSON.parse(stdout) as WireReply;
}

function addresses(output: string): string[] {
  // The server's own address is printed first (`Server:`/`Address: 10.43.0.10:53`); answers follow.
  return [...output.matchAll(/^Address:\s*(\S+)$/gm)].map((m) => m[1]!).filter((a) => !a.includes(':'));
}

describe('cluster DNS in a network namespace (real server, informers, busybox and dns-packet clients)', { concurrency: false, ...(skip ? { skip } : {}) }, () => {
  let server: ServerProcess;
  let work: string;
  let dns: Child | undefined;
  let upstream: Child | undefined;
  let webIp = '';
  let madeEtcNetns = false;
  let net: TestNetwork | undefined;

  before(async () => {
    work = tempDir('dns');
    // No default route: an upstream off the link is unroutable (fails at once), as the test wants.
    net = createTestNetwork(1, { tag: 'd', defaultRoute: false });
    ({ netns: NETNS, ip: NS_IP } = net.hosts[0]!);
    HOST_IP = net.hostIp;
    SILENT_IP = `${net.prefix}.77`;
    NETNS_ETC = `/etc/netns/${NETNS}`;
    madeEtcNetns = !fs.existsSync(path.dirname(NETNS_ETC));
    fs.mkdirSync(NETNS_ETC, { recursive: true });
    fs.writeFileSync(
      path.join(NETNS_ETC, 'resolv.conf'),
      [
        'search example.test',
        'nameserver 127.0.0.53',
        `nameserver ${CLUSTER_DNS}`,
        'nameserver 203.0.113.9',
        `nameserver ${SILENT_IP}`,
        `nameserver ${NS_IP}`,
        'options ndots:1',
        '',
      ].join('\n'),
    );
    server = await startServer({ args: ['--bind-address', '0.0.0.0', '--tls-san', HOST_IP] });

    const create = async (urlPath: string, body: unknown): Promise<Record<string, unknown>> => {
      const res = await request(server, 'POST', urlPath, { body });
      assert.equal(res.status, 201, res.text);
      return res.json as Record<string, unknown>;
    };
    const web = await create('/api/v1/namespaces/default/services', {
      metadata: { name: 'web' },
      spec: { ports: [{ name: 'http', port: 80, targetPort: 8080 }, { name: 'metrics', port: 9100, protocol: 'UDP' }] },
    });
    webIp = (web.spec as { clusterIP: string }).clusterIP;
    await create('/api/v1/namespaces/default/services', { metadata: { name: 'db' }, spec: { clusterIP: 'None', ports: [{ name: 'pg', port: 5432 }] } });
    await create('/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', {
      metadata: { name: 'db-1', labels: { 'kubernetes.io/service-name': 'db' } },
      addressType: 'IPv4',
      endpoints: [
        { addresses: ['10.42.1.7'], hostname: 'db-0', conditions: { ready: true } },
        { addresses: ['10.42.2.9'], conditions: { ready: true } },
        { addresses: ['10.42.3.3'], hostname: 'db-2', conditions: { ready: false } },
      ],
      ports: [{ name: 'pg', port: 5433, protocol: 'TCP' }],
    });
    await create('/api/v1/namespaces/default/services', { metadata: { name: 'ext' }, spec: { type: 'ExternalName', externalName: 'other.example.test' } });

    upstream = spawnInNetns(['test/helpers/fake-dns-upstream.ts', NS_IP, '53']);
    await waitReady(upstream, 'the stand-in upstream');
    dns = spawnInNetns([
      'test/helpers/cluster-dns-node.ts',
      JSON.stringify({ server: `https://${HOST_IP}:${server.port}`, caPem: server.caPem, token: server.token, upstreamTimeoutMs: 500 }),
    ]);
    await waitReady(dns, 'the cluster DNS process');
  });

  after(async () => {
    for (const child of [dns, upstream]) {
      if (child?.process.pid && child.process.exitCode === null) {
        try {
          process.kill(child.process.pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
    }
    await cleanup(work);
    net?.remove();
    if (NETNS_ETC) fs.rmSync(NETNS_ETC, { recursive: true, force: true });
    if (madeEtcNetns) {
      try {
        fs.rmdirSync(path.dirname(NETNS_ETC));
      } catch {
        // another namespace's files are there now: theirs
      }
    }
  });

  it('serves on cluster-dns, on its own device, and logs its address and the usable upstreams', async () => {
    const { stdout } = await run('ip', ['netns', 'exec', NETNS, 'ip', '-j', '-4', 'addr', 'show', 'dev', 'drover-dns']);
    const [link] = JSON.parse(stdout) as Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>;
    assert.deepEqual(link!.addr_info.map((a) => `${a.local}/${a.prefixlen}`), [`${CLUSTER_DNS}/32`]);
    const started = dns!.output().split('\n').find((line) => line.includes('cluster DNS serving'));
    assert.ok(started, dns!.output());
    const logged = JSON.parse(started) as { address: string; port: number; upstreams: string[] };
    assert.equal(logged.address, CLUSTER_DNS);
    assert.equal(logged.port, 53);
    // The loopback stub and cluster-dns itself are skipped; the rest kept in order.
    assert.deepEqual(logged.upstreams, ['203.0.113.9:53', `${SILENT_IP}:53`, `${NS_IP}:53`]);
  });

  it('A for a ClusterIP Service (any case), with TTL 5 and authority, over UDP and TCP', async () => {
    assert.deepEqual(addresses(await nslookup('web.default.svc.cluster.local')), [webIp]);
    assert.deepEqual(addresses(await nslookup('WEB.Default.svc.Cluster.Local')), [webIp]);
    for (const tcp of [false, true]) {
      const reply = await query('web.default.svc.cluster.local', 'A', { tcp });
      assert.equal(reply.rcode, 'NOERROR');
      assert.ok(reply.id && reply.aa);
      assert.deepEqual(reply.answers.map((a) => [a.type, a.ttl, a.data]), [['A', 5, webIp]]);
    }
    // AAAA of an existing name: NOERROR, no records, the zone's SOA for negative caching.
    const aaaa = await query('web.default.svc.cluster.local', 'AAAA');
    assert.equal(aaaa.rcode, 'NOERROR');
    assert.deepEqual(aaaa.answers, []);
    assert.deepEqual(aaaa.authorities.map((a) => [a.name, a.type]), [['cluster.local', 'SOA']]);
  });

  it('SRV for named ports: ClusterIP and headless forms', async () => {
    const srv = await nslookup('_http._tcp.web.default.svc.cluster.local', 'srv');
    assert.match(srv, /0 100 80 web\.default\.svc\.cluster\.local/, srv);
    const udp = await query('_metrics._udp.web.default.svc.cluster.local', 'SRV');
    assert.deepEqual(udp.answers.map((a) => a.data), [{ priority: 0, weight: 100, port: 9100, target: 'web.default.svc.cluster.local' }]);
    const headless = await query('_pg._tcp.db.default.svc.cluster.local', 'SRV');
    assert.deepEqual(
      headless.answers.map((a) => a.data),
      [
        { priority: 0, weight: 50, port: 5433, target: 'db-0.db.default.svc.cluster.local' },
        { priority: 0, weight: 50, port: 5433, target: '10-42-2-9.db.default.svc.cluster.local' },
      ],
    );
    assert.deepEqual(headless.additionals.filter((a) => a.type === 'A').map((a) => [a.name, a.data]), [
      ['db-0.db.default.svc.cluster.local', '10.42.1.7'],
      ['10-42-2-9.db.default.svc.cluster.local', '10.42.2.9'],
    ]);
    const busy = await nslookup('_pg._tcp.db.default.svc.cluster.local', 'srv');
    assert.match(busy, /5433 db-0\.db\.default\.svc\.cluster\.local/, busy);
  });

  it('headless: one A per ready endpoint, hostname records; ExternalName CNAME; pod names; PTR; dns-version', async () => {
    assert.deepEqual(addresses(await nslookup('db.default.svc.cluster.local')).sort(), ['10.42.1.7', '10.42.2.9']);
    assert.deepEqual(addresses(await nslookup('db-0.db.default.svc.cluster.local')), ['10.42.1.7']);
    assert.match(await nslookup('db-2.db.default.svc.cluster.local'), /NXDOMAIN/);
    const ext = await query('ext.default.svc.cluster.local', 'A');
    // The CNAME followed upstream (stub resolvers do not chase it themselves).
    assert.deepEqual(ext.answers.map((a) => [a.type, a.data]), [['CNAME', 'other.example.test'], ['A', '192.0.2.45']]);
    assert.ok(addresses(await nslookup('ext.default.svc.cluster.local')).includes('192.0.2.45'));
    assert.deepEqual(addresses(await nslookup('10-42-0-9.default.pod.cluster.local')), ['10.42.0.9']);
    const ptr = await nslookup(webIp.split('.').reverse().join('.') + '.in-addr.arpa', 'ptr');
    assert.match(ptr, /name = web\.default\.svc\.cluster\.local/, ptr);
    const version = await query('dns-version.cluster.local', 'TXT');
    assert.deepEqual(version.answers.map((a) => a.data), [[Buffer.from('1.0.1').toJSON()]]);
  });

  it('glibc\'s resolver (getent, through the namespace resolv.conf) gets Service and ExternalName addresses', async () => {
    // The resolv.conf lists 127.0.0.53 first (nothing there: refused at once), then cluster-dns.
    const getent = async (name: string): Promise<string> => (await run('ip', ['netns', 'exec', NETNS, 'getent', 'ahostsv4', name], { timeout: 60_000 })).stdout;
    assert.match(await getent('web.default.svc.cluster.local'), new RegExp(`^${webIp.replaceAll('.', '\\.')}\\s`, 'm'));
    // glibc does not chase a CNAME itself: the address comes from the server following it.
    assert.match(await getent('ext.default.svc.cluster.local'), /^192\.0\.2\.45\s/m);
    assert.match(await getent('db-0.db.default.svc.cluster.local'), /^10\.42\.1\.7\s/m);
  });

  it('NXDOMAIN for unknown names in the cluster domain, with the SOA', async () => {
    for (const name of ['nosuch.default.svc.cluster.local', 'www.example.test.default.svc.cluster.local']) {
      const reply = await query(name, 'A');
      assert.equal(reply.rcode, 'NXDOMAIN', name);
      assert.ok(reply.aa);
      assert.deepEqual(reply.authorities.map((a) => [a.name, a.type, a.ttl]), [['cluster.local', 'SOA', 5]]);
    }
  });

  it('forwards other names past failing upstreams to the working one, caches the answer, NXDOMAIN passes through', async () => {
    const before = upstream!.output().split('\n').filter((l) => l.includes('"www.example.test"')).length;
    const first = await query('www.example.test', 'A');
    assert.equal(first.rcode, 'NOERROR');
    assert.deepEqual(first.answers.map((a) => [a.type, a.data]), [['A', '192.0.2.44']]);
    assert.ok(!first.aa, 'a forwarded answer is not authoritative');
    assert.deepEqual(addresses(await nslookup('www.example.test')), ['192.0.2.44']);
    const second = await query('WWW.example.test', 'A');
    // The cached answer echoes the asker's spelling of the question (resolvers may check it).
    assert.deepEqual(second.questions.map((q) => q.name), ['WWW.example.test']);
    assert.deepEqual(second.answers.map((a) => a.data), ['192.0.2.44']);
    assert.ok(second.answers[0]!.ttl <= 60);
    // Asked three times; the upstream saw it once (the cache answered the rest).
    const seen = upstream!.output().split('\n').filter((l) => l.includes('"www.example.test"')).length;
    assert.equal(seen - before, 1, upstream!.output());
    const missing = await query('missing.example.test', 'A');
    assert.equal(missing.rcode, 'NXDOMAIN');
    assert.deepEqual(missing.authorities.map((a) => [a.name, a.type]), [['example.test', 'SOA']]);
  });

  it('truncates over plain UDP (TC), answers in full over TCP and with EDNS', async () => {
    const plain = await query('big.example.test', 'TXT');
    assert.ok(plain.tc, 'a large answer over plain UDP has TC');
    assert.ok(plain.bytes <= 512, `${plain.bytes} bytes`);
    const tcp = await query('big.example.test', 'TXT', { tcp: true });
    assert.ok(!tcp.tc);
    assert.equal((tcp.answers[0]!.data as unknown[]).length, 40);
    assert.ok(tcp.bytes > 512);
    const edns = await query('big.example.test', 'TXT', { edns: 4096 });
    assert.ok(!edns.tc);
    assert.equal((edns.answers[0]!.data as unknown[]).length, 40);
    // Our own answers too: many endpoints' SRV records do not fit 512 bytes.
    const res = await request(server, 'POST', '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices', {
      body: {
        metadata: { name: 'db-many', labels: { 'kubernetes.io/service-name': 'db' } },
        addressType: 'IPv4',
        endpoints: Array.from({ length: 30 }, (_, i) => ({ addresses: [`10.42.9.${i + 1}`], conditions: { ready: true } })),
        ports: [{ name: 'pg', port: 5433, protocol: 'TCP' }],
      },
    });
    assert.equal(res.status, 201, res.text);
    const big = await eventually(async () => {
      const reply = await query('_pg._tcp.db.default.svc.cluster.local', 'SRV', { tcp: true });
      return reply.answers.length === 32 ? reply : undefined;
    }, 'the new slice in the SRV answer', 60_000);
    assert.ok(big.bytes > 512);
    const small = await query('_pg._tcp.db.default.svc.cluster.local', 'SRV');
    assert.ok(small.tc && small.answers.length === 0 && small.bytes <= 512);
  });

  it('follows changes: a new Service is answered, a deleted one is NXDOMAIN', async () => {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/services', { body: { metadata: { name: 'late' }, spec: { ports: [{ port: 80 }] } } });
    assert.equal(res.status, 201, res.text);
    const lateIp = (res.json as { spec: { clusterIP: string } }).spec.clusterIP;
    await eventually(async () => addresses(await nslookup('late.default.svc.cluster.local'))[0] === lateIp, 'the new Service answered', 60_000);
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/services/late')).status, 200);
    await eventually(async () => /NXDOMAIN/.test(await nslookup('late.default.svc.cluster.local')), 'the deleted Service gone', 60_000);
  });

  it('a stopped ClusterDns starts again: the device comes back and the answers follow the API', async () => {
    process.kill(dns!.process.pid!, 'SIGUSR2');
    await eventually(() => dns!.output().includes('"restarted":1'), 'the restart', 60_000).catch((error: unknown) => {
      throw new Error(`${String(error)}\n${dns!.output()}`);
    });
    assert.deepEqual(addresses(await nslookup('web.default.svc.cluster.local')), [webIp]);
    assert.deepEqual(addresses(await nslookup('www.example.test')), ['192.0.2.44']);
    // Its informers are new ones, following the API again: a Service made now is answered.
    const res = await request(server, 'POST', '/api/v1/namespaces/default/services', { body: { metadata: { name: 'after-restart' }, spec: { ports: [{ port: 80 }] } } });
    assert.equal(res.status, 201, res.text);
    const ip = (res.json as { spec: { clusterIP: string } }).spec.clusterIP;
    await eventually(async () => addresses(await nslookup('after-restart.default.svc.cluster.local'))[0] === ip, 'the new Service answered after the restart', 60_000);
  });

  it('stop() closes the sockets and removes its device', async () => {
    const exited = new Promise<number | null>((resolve) => dns!.process.once('exit', (code) => resolve(code)));
    process.kill(dns!.process.pid!, 'SIGTERM');
    assert.equal(await exited, 0, dns!.output());
    await assert.rejects(run('ip', ['netns', 'exec', NETNS, 'ip', 'link', 'show', 'dev', 'drover-dns']), /does not exist/);
  });
});
