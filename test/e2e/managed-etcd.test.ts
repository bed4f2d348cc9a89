import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, STATE_LABEL } from '../helpers/agent.js';
import {
  aliveWith,
  api,
  type ClusterServer,
  clusterTempDir,
  cleanupCluster,
  createLease,
  dumpLogs,
  etcdctl,
  etcdPidOf,
  expectMembers,
  FailureTracker,
  file,
  joinStats,
  killClusterServer,
  LEASES,
  leaderEndpoint,
  memberList,
  mustCreateLease,
  report,
  runToExit,
  startClusterServer,
  stopClusterServer,
  tail,
  url,
  waitGone,
} from '../helpers/cluster.js';
import { DROVER_BIN, eventually } from '../helpers/server.js';

/**
 * Managed etcd, end to end: three all-in-one `drover server` processes, each running its own TLS
 * etcd member (Debian etcd 3.4) as a child and its own embedded agent, on 127.0.0.1, .2 and .3.
 * Every process is stopped by its PID — the servers, and the etcd children a SIGKILLed server
 * leaves behind (found through `<data-dir>/server/etcd.pid`) — and every temp dir is removed.
 *
 *   1. s1 --cluster-init; s2 and s3 join through s1 with its token: three Ready nodes through any
 *      server, three started etcd members, one cluster identity (same CA, admin token, join token).
 *   2. SIGKILL the etcd leader's server and its etcd child: the other two keep serving reads and
 *      writes; the killed server restarts from its data dir alone and its member rejoins.
 *   3. A restart with data on disk needs no particular server: s1 stopped, s2 restarts with s3.
 *   4. The cluster-wide settings check holds on managed etcd (exit 78 on a mismatch).
 *   5. A join with a wrong token is refused before any member is added.
 *   6. A server SIGKILLed alone leaves an orphan etcd member; its next start reaps it.
 *
 * Needs the `etcd` and `etcdctl` binaries (Debian: etcd-server, etcd-client) and `npm run build`.
 */

const EXIT_CONFIG = 78;
const READY_CEILING_MS = 60_000;

// -------------------------------------------------------------------------------------------------
// Server processes

/** An all-in-one server: every one runs an etcd member, on ports fixed for all its runs. */
interface Member extends ClusterServer {
  clientPort: number;
  peerPort: number;
}

function joinTokenOf(m: Member): string {
  return file(m, 'token').trim();
}

/** The flags a server needs on every start: its data dir, addresses and ports (and node name). */
function baseArgs(m: Member): string[] {
  return [
    'server',
    '--data-dir', m.dataDir,
    '--https-listen-port', String(m.httpsPort),
    '--bind-address', m.ip,
    '--node-ip', m.ip,
    '--node-name', m.name,
    '--agent-port', '0',
    '--etcd-client-port', String(m.clientPort),
    '--etcd-peer-port', String(m.peerPort),
  ];
}

/** Start a server and wait for "Drover server is ready"; resolves with the time it took. */
async function startMember(m: Member, extra: string[] = []): Promise<number> {
  return (await startClusterServer(m, [...baseArgs(m), ...extra])).ms;
}

/** Join through `via` (one start: the joiner waits out etcd's refusals itself); with its 503 refusals. */
async function joinMember(m: Member, via: Member): Promise<{ ms: number; refusals: number }> {
  const ms = await startMember(m, ['--server', url(via), '--token', joinTokenOf(via)]);
  const stats = joinStats(m.proc!.output());
  assert.ok(stats, `${m.name} joined as an etcd learner`);
  return { ms, refusals: stats.refusals };
}

/** The `time` of the first pino line of `output` whose msg contains `msg`. */
function logTime(output: string, msg: string): number | undefined {
  for (const line of output.split('\n')) {
    if (!line.includes(msg)) continue;
    try {
      return Date.parse((JSON.parse(line) as { time: string }).time);
    } catch {
      // not a JSON line
    }
  }
  return undefined;
}

// -------------------------------------------------------------------------------------------------
// The API, on any member's address

async function leaseHolder(m: Member, name: string): Promise<string | undefined> {
  const res = await api(m, 'GET', `${LEASES}/${name}`);
  assert.equal(res.status, 200, `get lease ${name} through ${m.name}: ${res.text}`);
  return (res.json as { spec?: { holderIdentity?: string } }).spec?.holderIdentity;
}

/** The renewTime of a node's lease in kube-node-lease (ms since the epoch). */
async function nodeLeaseRenewed(m: Member, node: string): Promise<number | undefined> {
  const res = await api(m, 'GET', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${node}`);
  if (res.status !== 200) return undefined;
  const renew = (res.json as { spec?: { renewTime?: string } }).spec?.renewTime;
  return renew ? Date.parse(renew) : undefined;
}

interface NodeObject {
  metadata: { name: string; labels?: Record<string, string> };
}

async function nodeStates(m: Member): Promise<Record<string, string | undefined>> {
  const res = await api(m, 'GET', '/api/v1/nodes');
  if (res.status !== 200) throw new Error(`list nodes through ${m.name}: HTTP ${res.status} ${res.text}`);
  return Object.fromEntries((res.json as { items: NodeObject[] }).items.map((n) => [n.metadata.name, n.metadata.labels?.[STATE_LABEL]]));
}

/** Every node in `names` is Ready, as seen through each server in `through`. */
async function allReady(through: Member[], names: string[], what: string, ceilingMs = READY_CEILING_MS): Promise<void> {
  let last: Record<string, unknown> = {};
  try {
    await eventually(
      async () => {
        for (const m of through) {
          const states = await nodeStates(m);
          last = { through: m.name, states };
          if (!names.every((n) => states[n] === 'Ready')) return false;
        }
        return true;
      },
      what,
      ceilingMs,
      200,
    );
  } catch (error) {
    throw new Error(`${String(error)}; last seen ${JSON.stringify(last)}`);
  }
}

// -------------------------------------------------------------------------------------------------
// etcdctl

/** `etcdctl endpoint health --cluster -w json`: every member's endpoint and whether it is healthy. */
async function clusterHealth(certsOf: Member, endpoint: Member): Promise<Record<string, boolean>> {
  const out = await etcdctl(certsOf, [endpoint], ['endpoint', 'health', '--cluster', '-w', 'json']);
  // A non-zero exit when some member is unhealthy; the JSON still lists every endpoint.
  const parsed = JSON.parse(out.stdout || '[]') as { endpoint: string; health: boolean }[];
  return Object.fromEntries(parsed.map((e) => [e.endpoint, e.health]));
}

/** etcd reports every given member's endpoint healthy. */
async function expectHealthy(certsOf: Member, endpoint: Member, members: Member[], what: string, ceilingMs = 30_000): Promise<void> {
  let last: Record<string, boolean> = {};
  try {
    await eventually(
      async () => {
        last = await clusterHealth(certsOf, endpoint);
        return members.every((m) => last[`https://${m.ip}:${m.clientPort}`] === true);
      },
      what,
      ceilingMs,
      250,
    );
  } catch (error) {
    throw new Error(`${String(error)}; last health ${JSON.stringify(last)}`);
  }
}

// -------------------------------------------------------------------------------------------------

describe('managed etcd: three all-in-one servers, each running its own etcd member', () => {
  const members: Member[] = [];
  let s1: Member;
  let s2: Member;
  let s3: Member;
  const names = ['m1', 'm2', 'm3'];

  async function newMember(n: number): Promise<Member> {
    const dataDir = clusterTempDir(`managed-etcd-s${n}`);
    return {
      name: `m${n}`,
      ip: `127.0.0.${n}`,
      dataDir,
      httpsPort: await freePort(),
      clientPort: await freePort(),
      peerPort: await freePort(),
      runs: [],
    };
  }

  before(async () => {
    if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
    s1 = await newMember(1);
    s2 = await newMember(2);
    s3 = await newMember(3);
    members.push(s1, s2, s3);
  });

  /** Records a failure so that after() keeps the logs. */
  const run = new FailureTracker();
  const step = run.step;

  after(async () => {
    if (run.failed) process.stderr.write(`managed-etcd: logs of the failed run in ${dumpLogs('managed-etcd', members)}\n`);
    await cleanupCluster();
  });

  it('s1 --cluster-init, s2 and s3 join through s1: three Ready nodes, three started members, one identity', step(async (t) => {
    const initMs = await startMember(s1, ['--cluster-init']);
    assert.match(s1.proc!.output(), /"mode":"new"[^\n]*managed etcd member is up/);
    const token = joinTokenOf(s1);
    assert.match(token, /^D10[0-9a-f]{64}::server:.+$/);

    const join2 = await joinMember(s2, s1);
    const join3 = await joinMember(s3, s1);
    for (const m of [s2, s3]) {
      assert.match(m.proc!.output(), /added as an etcd learner; starting its member with the existing cluster state/);
      assert.match(m.proc!.output(), /promoted to a voting etcd member/);
      assert.match(m.proc!.output(), /"mode":"existing"[^\n]*managed etcd member is up/);
      assert.match(m.proc!.output(), /loaded the cluster identity from the datastore/);
    }
    assert.equal(s1.proc!.output().match(/added an etcd learner for a joining server/g)?.length, 2, 's1 added both members');

    const readyStart = Date.now();
    await allReady(members, names, 'all three nodes Ready through every server');
    const readyMs = Date.now() - readyStart;

    const { list } = await expectMembers(s1, [s1], members, 'three started members');
    await expectHealthy(s1, s1, members, 'three healthy members');
    // Any member answers for the whole cluster, with the same list.
    for (const m of [s2, s3]) assert.deepEqual((await memberList(s1, [m])).map((e) => e.id).sort(), list.map((e) => e.id).sort());

    // One identity. The PEM files are compared up to trailing whitespace: s1 (--cluster-init) writes
    // its CA certificate without a final newline, joiners write it with one (the join pin is normalised).
    const differences: string[] = [];
    for (const rel of ['server/tls/server-ca.crt', 'server/tls/server-ca.key', 'server/cred/admin.token', 'token', 'server/tls/etcd/ca.crt']) {
      for (const m of [s2, s3]) {
        assert.equal(file(m, rel).trimEnd(), file(s1, rel).trimEnd(), `${m.name} has the same ${rel} as s1`);
        if (file(m, rel) !== file(s1, rel)) differences.push(rel);
      }
    }
    // Each member's certificate is its own; the CA is shared.
    assert.notEqual(file(s2, 'server/tls/etcd/member.crt'), file(s1, 'server/tls/etcd/member.crt'));

    // One datastore: a write through each server is read through the others.
    for (const m of members) await mustCreateLease(m, `written-by-${m.name}`);
    for (const reader of members) for (const m of members) assert.equal(await leaseHolder(reader, `written-by-${m.name}`), m.name);

    report(
      t,
      `start s1 (--cluster-init): ${initMs} ms; join s2: ${join2.ms} ms; join s3: ${join3.ms} ms (first spawn to "ready")\n` +
        `join requests refused for now (503, waited out by the joiner): s2 ${join2.refusals}, s3 ${join3.refusals}\n` +
        `all three nodes Ready through every server ${readyMs} ms after s3 was ready\n` +
        `members: ${list.map((e) => `${e.name} ${e.peerURL} ${e.status}`).join('; ')}\n` +
        `identity files byte-identical: ${differences.length ? `no, m1's ${[...new Set(differences)].join(', ')} lack(s) the joiners' final newline` : 'yes'}`,
    );
  }));

  it('SIGKILL the etcd leader’s server and its etcd child: the other two keep serving; the killed one restarts from its data dir and rejoins', step(async (t) => {
    const leaderUrl = await leaderEndpoint(s1, [s2]);
    const victim = members.find((m) => leaderUrl === `https://${m.ip}:${m.clientPort}`);
    assert.ok(victim, `leader ${leaderUrl} is one of our members`);
    const survivors = members.filter((m) => m !== victim);
    await mustCreateLease(victim, 'before-kill');

    const killedAt = Date.now();
    const { etcdPid } = await killClusterServer(victim);
    assert.ok(etcdPid !== undefined && !aliveWith(etcdPid, victim.dataDir), 'the etcd child is gone');

    // Each survivor serves a write (and reads) — measured from the kill.
    const servedMs: Record<string, number> = {};
    await Promise.all(
      survivors.map(async (m) => {
        await eventually(
          async () => {
            const res = await createLease(m, `during-kill-${m.name}`, 3000);
            if (res.status === 201) return true;
            if (res.status === 409) return true; // an earlier attempt that timed out client-side went through
            throw new Error(`HTTP ${res.status} ${res.text}`);
          },
          `a write through ${m.name} after the kill`,
          30_000,
          100,
        );
        servedMs[m.name] = Date.now() - killedAt;
      }),
    );
    for (const reader of survivors) {
      assert.equal(await leaseHolder(reader, 'before-kill'), victim.name);
      for (const m of survivors) assert.equal(await leaseHolder(reader, `during-kill-${m.name}`), m.name);
    }
    const newLeader = await eventually(async () => leaderEndpoint(s1, [survivors[0]!]), 'a new etcd leader', 15_000, 200);
    assert.notEqual(newLeader, leaderUrl, 'a surviving member leads');
    // More writes while the victim is down, through both.
    for (const m of survivors) await mustCreateLease(m, `while-down-${m.name}`);
    const downMs = Date.now() - killedAt;
    const stateWhileDown = (await nodeStates(survivors[0]!))[victim.name];

    // Restart with only its data dir, addresses and ports: no --server, no --cluster-init, no token.
    const restartedAt = Date.now();
    const restartMs = await startMember(victim);
    assert.match(victim.proc!.output(), /"mode":"restart"[^\n]*managed etcd member is up/);
    assert.doesNotMatch(victim.proc!.output(), /added as an etcd learner|created the cluster identity/);
    await expectMembers(s1, [survivors[0]!], members, 'three started members after the restart');
    await expectHealthy(s1, victim, members, 'three healthy members after the restart');
    const readyStart = Date.now();
    await allReady(members, names, `node ${victim.name} Ready again`);
    const readyMs = Date.now() - readyStart;
    // Its agent renews its node lease again (seen through a survivor).
    await eventually(
      async () => ((await nodeLeaseRenewed(survivors[0]!, victim.name)) ?? 0) > restartedAt,
      `${victim.name}'s node lease renewed after the restart`,
      20_000,
      200,
    );
    // It sees what was written while it was down.
    for (const m of survivors) {
      assert.equal(await leaseHolder(victim, `during-kill-${m.name}`), m.name);
      assert.equal(await leaseHolder(victim, `while-down-${m.name}`), m.name);
    }
    await mustCreateLease(victim, 'after-restart');
    for (const m of survivors) assert.equal(await leaseHolder(m, 'after-restart'), victim.name);

    report(
      t,
      `killed ${victim.name} (etcd leader ${leaderUrl}); new leader ${newLeader}\n` +
        `first successful write after the kill: ${survivors.map((m) => `${m.name} ${servedMs[m.name]} ms`).join(', ')}\n` +
        `${victim.name} down ${downMs} ms (its node's state through ${survivors[0]!.name} just before the restart: ${stateWhileDown}); ` +
        `restart to ready ${restartMs} ms; its node Ready ${readyMs} ms after that`,
    );
  }));

  it('a restart with data on disk needs no particular server: s1 stopped, s2 restarts and serves with s3; s1 comes back', step(async (t) => {
    const s1Exit = await stopClusterServer(s1);
    assert.equal(s1Exit.code, 0, `s1 stopped cleanly: ${tail(s1.proc!.output(), 10)}`);
    for (const m of [s2, s3]) {
      await eventually(async () => (await createLease(m, `s1-down-${m.name}`, 3000)).status === 201, `a write through ${m.name} with s1 stopped`, 30_000, 100);
    }

    const s2Exit = await stopClusterServer(s2);
    assert.equal(s2Exit.code, 0, `s2 stopped cleanly: ${tail(s2.proc!.output(), 10)}`);
    // s3 alone is one member of three: no quorum, so no write (nor linearizable read) succeeds.
    const alone = await createLease(s3, 'no-quorum', 3000).catch((e: unknown) => ({ status: 0, text: String(e), json: undefined }));
    assert.notEqual(alone.status, 201, 's3 alone cannot write');

    const restartMs = await startMember(s2);
    assert.match(s2.proc!.output(), /"mode":"restart"[^\n]*managed etcd member is up/);
    assert.doesNotMatch(s2.proc!.output(), /refused|could not add/);
    for (const m of [s2, s3]) {
      await eventually(async () => (await createLease(m, `quorum-back-${m.name}`, 3000)).status === 201, `a write through ${m.name}`, 30_000, 100);
    }
    assert.equal(await leaseHolder(s2, 's1-down-m3'), 'm3');
    await expectHealthy(s2, s2, [s2, s3], 's2 and s3 healthy with s1 down');
    const health = await clusterHealth(s2, s2);
    assert.equal(health[`https://${s1.ip}:${s1.clientPort}`], false, 's1’s member is reported down');
    await allReady([s2, s3], ['m2', 'm3'], 'm2 and m3 Ready with s1 down');

    const backMs = await startMember(s1);
    assert.match(s1.proc!.output(), /"mode":"restart"[^\n]*managed etcd member is up/);
    await expectMembers(s2, [s3], members, 'three started members with s1 back');
    await expectHealthy(s2, s1, members, 'three healthy members with s1 back');
    await allReady(members, names, 'all three nodes Ready with s1 back');
    assert.equal(await leaseHolder(s1, 'quorum-back-m2'), 'm2');

    report(t, `s2 restart (s1 down, s3 up): ${restartMs} ms to ready; s1 back: ${backMs} ms to ready`);
  }));

  it('the cluster-wide settings check applies on managed etcd: a different node-monitor-grace-period exits 78; a normal restart works', step(async (t) => {
    const s3Exit = await stopClusterServer(s3);
    assert.equal(s3Exit.code, 0);

    const refused = await runToExit([...baseArgs(s3), '--node-monitor-grace-period', '6s']);
    assert.equal(refused.code, EXIT_CONFIG, `exit 78; output:\n${tail(refused.output)}`);
    assert.match(refused.output, /node-monitor-grace-period: this server has 6s \(flag[^)]*\), but the cluster has 4s/);
    // It stopped the member it had started.
    const pid = etcdPidOf(s3);
    assert.ok(pid === undefined || !aliveWith(pid, s3.dataDir), `the refused server left its etcd child (pid ${pid}) running`);
    // The cluster was not changed by the refused start.
    await expectMembers(s1, [s1], members, 'still three members');

    const restartMs = await startMember(s3);
    await expectHealthy(s1, s3, members, 'three healthy members after s3’s restart');
    await allReady(members, names, 'all three nodes Ready after s3’s restart');
    await mustCreateLease(s3, 'after-refusal');
    report(t, `refused start exited ${refused.code} after ${refused.ms} ms; normal restart ${restartMs} ms to ready`);
  }));

  it('a join with a wrong token is refused before any member is added', step(async (t) => {
    const s4 = await newMember(4);
    const good = joinTokenOf(s1);
    const wrongSecret = good.replace(/:[^:]+$/, ':not-the-cluster-secret');
    const refused = await runToExit([...baseArgs(s4), '--server', url(s1), '--token', wrongSecret]);
    assert.equal(refused.code, EXIT_CONFIG, `exit 78; output:\n${tail(refused.output)}`);
    assert.match(refused.output, /refused to hand over the cluster identity \(HTTP 401\): wrong --token\?/);

    // A token pinning another CA: the joiner does not even send its secret.
    const wrongCa = `D10${'0'.repeat(64)}::server:${good.slice(good.lastIndexOf(':') + 1)}`;
    const pinned = await runToExit([...baseArgs(s4), '--server', url(s1), '--token', wrongCa]);
    assert.notEqual(pinned.code, 0, `non-zero exit; output:\n${tail(pinned.output)}`);
    assert.match(pinned.output, /does not match the join token/);

    // No member was added; the joiner started no etcd and holds no cluster secrets.
    await expectMembers(s1, [s2], members, 'still exactly three members');
    assert.ok(!fs.existsSync(path.join(s4.dataDir, 'server/db/etcd/member')), 'no etcd data in the refused data dir');
    assert.ok(!fs.existsSync(path.join(s4.dataDir, 'server/etcd.pid')), 'no etcd started');
    assert.ok(!fs.existsSync(path.join(s4.dataDir, 'server/tls/server-ca.key')), 'no CA key written');
    assert.ok(!fs.existsSync(path.join(s4.dataDir, 'server/cred/admin.token')), 'no admin token written');
    report(t, `wrong secret: exit ${refused.code} in ${refused.ms} ms; wrong CA pin: exit ${pinned.code} in ${pinned.ms} ms`);
  }));

  it('a server SIGKILLed alone leaves its etcd member running; its next start stops that orphan and starts a new member', step(async (t) => {
    const { etcdPid: orphan } = await killClusterServer(s2, false);
    assert.ok(orphan !== undefined && aliveWith(orphan, s2.dataDir), 'the etcd child outlived its server');
    // The orphan is still a healthy member of the cluster.
    await expectHealthy(s1, s1, members, 'the orphan still counts as a healthy member');

    const restartMs = await startMember(s2);
    assert.match(s2.proc!.output(), /stopping the etcd member left behind by a previous run of this server/);
    await waitGone(orphan, s2.dataDir, 1000);
    const fresh = etcdPidOf(s2);
    assert.ok(fresh !== undefined && fresh !== orphan && aliveWith(fresh, s2.dataDir), 'a new etcd child runs');
    await expectMembers(s1, [s3], members, 'three started members after the reaping restart');
    await expectHealthy(s1, s2, members, 'three healthy members after the reaping restart');
    await allReady(members, names, 'all three nodes Ready after the reaping restart');
    await mustCreateLease(s2, 'after-reap');
    for (const m of [s1, s3]) assert.equal(await leaseHolder(m, 'after-reap'), 'm2');
    const reaping = logTime(s2.proc!.output(), 'stopping the etcd member left behind');
    const memberUp = logTime(s2.proc!.output(), 'managed etcd member is up');
    report(
      t,
      `orphan etcd ${orphan} reaped; s2 restart ${restartMs} ms to ready (new etcd ${fresh}); ` +
        `reaping to new member up: ${reaping && memberUp ? memberUp - reaping : '?'} ms`,
    );
  }));

  it('no process survives a planned stop of all three', step(async () => {
    const pids = members.map((m) => ({ m, etcd: etcdPidOf(m) }));
    for (const m of members) assert.equal((await stopClusterServer(m)).code, 0, `${m.name} stopped cleanly`);
    for (const { m, etcd } of pids) assert.ok(etcd === undefined || !aliveWith(etcd, m.dataDir), `${m.name}'s etcd (${etcd}) is gone`);
  }));
});
