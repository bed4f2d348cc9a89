import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  aliveWith,
  type ClusterServer,
  clusterTempDir,
  cleanupCluster,
  createLease,
  dumpLogs,
  etcdPidOf,
  expectMembers,
  FailureTracker,
  file,
  freePortOn,
  joinStats,
  killClusterServer,
  memberList,
  mustCreateLease,
  report,
  startClusterServer,
  stopClusterServer,
  url,
  waitGone,
} from '../helpers/cluster.js';
import { DROVER_BIN, eventually, request } from '../helpers/server.js';

/**
 * Servers that join a managed-etcd cluster at the same time (issue 10), end to end with real
 * `drover server` processes, each running its etcd 3.4 member, on 127.0.0.6x:
 *
 *   1. Three and five servers started together, ten repetitions in all: one --cluster-init server
 *      and the joiners spawned at the same instant (after the first server is ready, or together
 *      with it on a shared bare secret). Every server becomes ready without a retry from outside,
 *      every member ends up started and voting, and a server that had to wait logs what it waited
 *      for once.
 *   2. The join endpoint answers 503 with Retry-After (not 500) while etcd refuses a member (one
 *      learner at a time); the cluster keeps its quorum; the learner that never started is removed
 *      after the learner timeout and the waiting server then joins.
 *   3. A joiner killed after its learner was added costs no quorum: the others keep writing, its
 *      learner is removed, a later join succeeds, and the killed server started again joins anew.
 *
 * Needs `etcd`, `etcdctl` and `npm run build`. Every process is stopped by its PID and every data
 * dir removed.
 */

/** A safety ceiling only: the joiners of a five-server cluster are added one after the other, each on a loaded machine. */
const READY_CEILING_MS = 300_000;
/** Short, so that the stale-learner tests take seconds (the clock starts at the first join a learner blocks); the default is 2 minutes. */
const LEARNER_TIMEOUT = '3s';

interface Member extends ClusterServer {
  clientPort: number;
  peerPort: number;
}

let serial = 0;

async function newMember(n: number): Promise<Member> {
  const ip = `127.0.0.${60 + n}`;
  return {
    name: `j${n}`,
    ip,
    dataDir: clusterTempDir(`ha-join-${++serial}-j${n}`),
    httpsPort: await freePortOn(ip),
    clientPort: await freePortOn(ip),
    peerPort: await freePortOn(ip),
    runs: [],
  };
}

/**
 * The concurrent repetitions run without agents (`--disable-agent`): what they check is the etcd
 * membership and the API, and five servers with their agents are a lot for a two-core machine.
 */
const NO_AGENT = ['--disable-agent'];

function memberArgs(m: Member, extra: string[] = []): string[] {
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
    ...extra,
  ];
}

interface LogLine {
  msg: string;
  [key: string]: unknown;
}

/** The JSON log lines of a server's current run. */
function logLines(m: Member): LogLine[] {
  return m
    .proc!.output()
    .split('\n')
    .flatMap((line) => {
      try {
        const parsed = JSON.parse(line) as unknown;
        return parsed && typeof parsed === 'object' && typeof (parsed as LogLine).msg === 'string' ? [parsed as LogLine] : [];
      } catch {
        return [];
      }
    });
}

/** What a joiner logged about its join: its 503 refusals, promotion retries and "waiting for …" lines. */
function joinLog(m: Member): { refusals: number; promotionRetries: number; waits: string[] } {
  const lines = logLines(m);
  assert.ok(lines.some((l) => l.msg.startsWith('added as an etcd learner')), `${m.name} logged that it was added as a learner`);
  assert.ok(lines.some((l) => l.msg === 'promoted to a voting etcd member'), `${m.name} logged its promotion`);
  const stats = joinStats(m.proc!.output())!;
  return { ...stats, waits: lines.filter((l) => l.msg.startsWith('waiting for ')).map((l) => l.msg) };
}

/**
 * A server that waited says so once for each thing it waited for, and says what it waits for:
 * the "waiting for" lines are distinct in what they wait for, and a joiner refused with 503 has
 * the one line explaining that wait.
 */
function assertWaitsExplained(m: Member, log: ReturnType<typeof joinLog>): void {
  // "waiting for <what>: <why>": each <what> once.
  const subjects = log.waits.map((w) => w.slice(0, w.indexOf(': ')));
  assert.equal(new Set(subjects).size, subjects.length, `${m.name} logs each wait once:\n${log.waits.join('\n')}`);
  if (log.refusals > 0) {
    const line = log.waits.filter((w) => / to add this server as an etcd member: /.test(w));
    assert.equal(line.length, 1, `${m.name} was refused ${log.refusals} times and logs the wait once:\n${log.waits.join('\n')}`);
    assert.match(line[0]!, /etcd|learner/, 'the line says what etcd is waiting for');
  }
  if (log.promotionRetries > 0) {
    assert.equal(log.waits.filter((w) => w.startsWith('waiting for etcd to promote')).length, 1, `${m.name} logs its promotion wait once`);
  }
  assert.doesNotMatch(m.proc!.output(), /HTTP 500/, `${m.name} saw no HTTP 500`);
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Stop every server of a repetition (SIGTERM, in parallel) and remove its data dirs. */
async function tearDown(members: Member[]): Promise<void> {
  await Promise.all(members.filter((m) => m.proc && !m.proc.hasExited).map((m) => stopClusterServer(m)));
  for (const m of members) fs.rmSync(m.dataDir, { recursive: true, force: true });
}

interface Repetition {
  size: number;
  timing: 'joiners after the first is ready' | 'all at once';
  /** From spawning the joiners to the last one ready. */
  joinMs: number;
  perJoinerMs: number[];
  refusals: number[];
  promotionRetries: number[];
}

const repetitions: Repetition[] = [];
let failedLogs: Member[] | undefined;

/**
 * One repetition: `size` servers, the first with --cluster-init, the others joining through it,
 * all joiners spawned at the same instant.
 */
async function concurrentJoin(size: number, timing: Repetition['timing']): Promise<Repetition> {
  const members: Member[] = [];
  for (let n = 1; n <= size; n++) members.push(await newMember(n));
  const [first, ...joiners] = members as [Member, ...Member[]];
  failedLogs = members;
  let joinMs: number;
  let perJoinerMs: number[];
  if (timing === 'all at once') {
    // A bare secret both sides know beforehand: nobody waits for the first server's token file.
    const secret = `concurrent-${serial}-secret`;
    const started = Date.now();
    const starts = members.map((m, i) =>
      startClusterServer(
        m,
        memberArgs(m, [...NO_AGENT, ...(i === 0 ? ['--cluster-init', '--token', secret] : ['--server', `https://${first.ip}:${first.httpsPort}`, '--token', secret])]),
        READY_CEILING_MS,
      ),
    );
    const results = await Promise.all(starts);
    joinMs = Date.now() - started;
    perJoinerMs = results.slice(1).map((r) => r.ms);
  } else {
    await startClusterServer(first, memberArgs(first, [...NO_AGENT, '--cluster-init']), READY_CEILING_MS);
    const token = file(first, 'token').trim();
    const started = Date.now();
    const results = await Promise.all(
      joiners.map((m) => startClusterServer(m, memberArgs(m, [...NO_AGENT, '--server', url(first), '--token', token]), READY_CEILING_MS)),
    );
    joinMs = Date.now() - started;
    perJoinerMs = results.map((r) => r.ms);
  }
  // Every member started and voting, with its name and URLs (checked through a joiner's member).
  await expectMembers(first, [joiners[joiners.length - 1]!], members, `${size} started voting members`);
  const logs = joiners.map((m) => joinLog(m));
  joiners.forEach((m, i) => assertWaitsExplained(m, logs[i]!));
  // One datastore, written through every server.
  for (const m of members) await mustCreateLease(m, `written-by-${m.name}`);
  await tearDown(members);
  failedLogs = undefined;
  return {
    size,
    timing,
    joinMs,
    perJoinerMs,
    refusals: logs.map((l) => l.refusals),
    promotionRetries: logs.map((l) => l.promotionRetries),
  };
}

function describeRepetition(r: Repetition): string {
  return (
    `${r.size} servers, ${r.timing}: all joined in ${r.joinMs} ms (per joiner ${r.perJoinerMs.join(', ')} ms); ` +
    `503 refusals per joiner ${r.refusals.join(', ')}; promotion retries ${r.promotionRetries.join(', ')}`
  );
}

describe('servers that join at the same time', () => {
  before(() => {
    if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
  });
  after(async () => {
    if (failedLogs) process.stderr.write(`ha-join: logs of the failed repetition in ${dumpLogs('ha-join', failedLogs)}\n`);
    await cleanupCluster();
  });

  const plan: [number, Repetition['timing'], number][] = [
    [3, 'joiners after the first is ready', 5],
    [3, 'all at once', 3],
    [5, 'joiners after the first is ready', 1],
    [5, 'all at once', 1],
  ];
  for (const [size, timing, times] of plan) {
    it(`${size} servers, ${timing}: all join, every member started and voting, each wait explained once (${times} repetitions)`, async (t) => {
      for (let i = 0; i < times; i++) {
        const r = await concurrentJoin(size, timing);
        repetitions.push(r);
        report(t, `repetition ${i + 1}: ${describeRepetition(r)}`);
      }
    });
  }

  it('join figures over all repetitions', (t) => {
    assert.equal(repetitions.length, 10, 'ten repetitions ran');
    for (const size of [3, 5]) {
      const rs = repetitions.filter((r) => r.size === size);
      const times = rs.map((r) => r.joinMs);
      const refusals = rs.flatMap((r) => r.refusals);
      report(
        t,
        `${size} servers (${rs.length} repetitions): join time p50 ${percentile(times, 50)} ms, max ${Math.max(...times)} ms; ` +
          `503 refusals per joiner p50 ${percentile(refusals, 50)}, max ${Math.max(...refusals)}, total ${refusals.reduce((a, b) => a + b, 0)}`,
      );
    }
  });
});

/** A call to a server's join endpoint with the server token's secret. */
function postMember(m: Member, secret: string, body: unknown): ReturnType<typeof request> {
  return request({ port: m.httpsPort, token: secret, caPem: file(m, 'server/tls/server-ca.crt') }, 'POST', '/drover/v1/etcd/members', {
    host: m.ip,
    agent: false,
    body,
    timeoutMs: 15_000,
  });
}

describe('the join endpoint and stale learners', () => {
  let s1: Member;
  let s2: Member;
  let s3: Member;
  let s4: Member;
  const all: Member[] = [];
  const run = new FailureTracker();
  const step = run.step;

  before(async () => {
    s1 = await newMember(1);
    s2 = await newMember(2);
    s3 = await newMember(3);
    s4 = await newMember(4);
    all.push(s1, s2, s3, s4);
  });
  after(async () => {
    if (run.failed) process.stderr.write(`ha-join: logs of the failed run in ${dumpLogs('ha-join-stale', all)}\n`);
    await cleanupCluster();
  });

  it('answers 503 with Retry-After while etcd refuses a member; the learner that never started is removed and the waiting server joins', step(async (t) => {
    await startClusterServer(s1, memberArgs(s1, ['--cluster-init', '--etcd-learner-timeout', LEARNER_TIMEOUT]), READY_CEILING_MS);
    const token = file(s1, 'token').trim();
    const secret = token.slice(token.lastIndexOf(':') + 1);

    // Bad input is a 400 with a message, not a 500.
    const bad = await postMember(s1, secret, { name: 'x', peerURL: 'not a url' });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, /peerURL/);

    // A learner whose server never starts it (nothing listens at its peer URL).
    const ghostUrl = `https://127.0.0.69:${await freePortOn('127.0.0.69')}`;
    const ghost = await postMember(s1, secret, { name: 'ghost-00000000', peerURL: ghostUrl });
    assert.equal(ghost.status, 200, ghost.text);
    assert.equal((ghost.json as { learner: boolean }).learner, true);
    // The same request again finds it (a joiner whose answer was lost asks again).
    const again = await postMember(s1, secret, { name: 'ghost-00000000', peerURL: ghostUrl });
    assert.equal(again.status, 200, again.text);
    assert.equal((again.json as { memberId: string }).memberId, (ghost.json as { memberId: string }).memberId);

    // A second member while the first learner waits: etcd refuses (one learner at a time), answered as 503.
    const otherUrl = `https://127.0.0.68:${await freePortOn('127.0.0.68')}`;
    const refused = await postMember(s1, secret, { name: 'other-00000000', peerURL: otherUrl });
    assert.equal(refused.status, 503, refused.text);
    const retryAfter = Number(refused.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `Retry-After is a number of seconds: ${refused.headers['retry-after']}`);
    const status = refused.json as { kind: string; reason: string; message: string; details?: { retryAfterSeconds?: number } };
    assert.equal(status.kind, 'Status');
    assert.equal(status.reason, 'ServiceUnavailable');
    assert.equal(status.details?.retryAfterSeconds, retryAfter);
    assert.match(status.message, /one learner at a time/);
    assert.ok(status.message.includes(ghostUrl), `the message names the learner in the way: ${status.message}`);

    // The learner does not vote: the one-member cluster keeps its quorum and serves writes.
    await mustCreateLease(s1, 'with-a-stale-learner');
    const list = await memberList(s1, [s1]);
    assert.equal(list.length, 2, JSON.stringify(list));
    assert.equal(list.find((e) => e.peerURL === ghostUrl)?.learner, 'true');

    // Asked again (as a joiner would, after Retry-After): once the ghost has stood in the way for the
    // learner timeout, s1 removes it (its member does not run) and adds the other one.
    let refusals = 1;
    await eventually(
      async () => {
        const res = await postMember(s1, secret, { name: 'other-00000000', peerURL: otherUrl });
        if (res.status === 503) {
          refusals++;
          return false;
        }
        assert.equal(res.status, 200, res.text);
        return true;
      },
      'the stale learner removed and the other one added',
      60_000,
      1000,
    );
    assert.match(s1.proc!.output(), /removed an etcd learner that was not promoted in time/);
    const swapped = await memberList(s1, [s1]);
    assert.equal(swapped.find((e) => e.peerURL === ghostUrl), undefined, `the ghost is gone: ${JSON.stringify(swapped)}`);
    assert.equal(swapped.find((e) => e.peerURL === otherUrl)?.learner, 'true');
    report(t, `the ghost learner was removed after ${refusals} refused requests (503, Retry-After ${retryAfter} s)`);

    // A real joiner is refused while that learner is in the way (its first request starts the
    // learner's clock), logs the wait once, and joins when s1 removes the learner.
    const { ms } = await startClusterServer(s2, memberArgs(s2, ['--server', url(s1), '--token', token]), READY_CEILING_MS);
    const log = joinLog(s2);
    assert.ok(log.refusals >= 1, `s2 was refused while the stale learner was there (${log.refusals})`);
    assertWaitsExplained(s2, log);
    assert.ok(log.waits.some((w) => w.includes(otherUrl)), `s2's wait names the stale learner:\n${log.waits.join('\n')}`);
    assert.equal(s1.proc!.output().match(/removed an etcd learner that was not promoted in time/g)?.length, 2, 'both stale learners removed');
    await expectMembers(s1, [s2], [s1, s2], 's1 and s2 started and voting, the stale learner gone');
    await mustCreateLease(s2, 'after-the-stale-learner');
    report(t, `s2 joined past a stale learner in ${ms} ms with ${log.refusals} refusals (503) and ${log.promotionRetries} promotion retries`);
  }));

  it('a joiner killed after its learner was added costs no quorum; a later join succeeds; the killed server started again joins anew', step(async (t) => {
    const token = file(s1, 'token').trim();
    const joinArgs = (m: Member): string[] => memberArgs(m, ['--server', url(s1), '--token', token]);
    // Kill s3 as soon as it says its learner was added (before or just as its member starts).
    const start3 = startClusterServer(s3, joinArgs(s3), READY_CEILING_MS).catch(() => undefined);
    await eventually(() => /added as an etcd learner/.test(s3.proc?.output() ?? ''), 's3 added as a learner', READY_CEILING_MS, 20);
    await killClusterServer(s3);
    await start3;
    // Its etcd child, if it was spawned in the last instant, goes too (a dead joiner: nothing of it runs).
    const late = etcdPidOf(s3);
    if (late !== undefined && aliveWith(late, s3.dataDir)) {
      process.kill(late, 'SIGKILL');
      await waitGone(late, s3.dataDir);
    }
    const s3Peer = `https://${s3.ip}:${s3.peerPort}`;
    const withLearner = await memberList(s1, [s1, s2]);
    assert.equal(withLearner.find((e) => e.peerURL === s3Peer)?.learner, 'true', `s3 is a learner: ${JSON.stringify(withLearner)}`);

    // Quorum intact: both servers keep writing while the dead learner is listed.
    for (const m of [s1, s2]) {
      const res = await createLease(m, `after-kill-${m.name}`, 10_000);
      assert.equal(res.status, 201, `a write through ${m.name} with a dead learner: ${res.text}`);
    }

    // A later join waits for the dead learner to be removed, then succeeds.
    const { ms } = await startClusterServer(s4, joinArgs(s4), READY_CEILING_MS);
    const log4 = joinLog(s4);
    assert.ok(log4.refusals >= 1, `s4 was refused while s3's learner was there (${log4.refusals})`);
    assertWaitsExplained(s4, log4);
    assert.ok(log4.waits.some((w) => w.includes(s3Peer)), `s4's wait names s3's learner:\n${log4.waits.join('\n')}`);
    await expectMembers(s1, [s4], [s1, s2, s4], 's1, s2 and s4 started and voting; s3’s learner removed');

    // s3 started again on its data dir: its unfinished join (server/etcd-join.json) resumes; its learner
    // was removed, so it joins anew.
    assert.ok(fs.existsSync(path.join(s3.dataDir, 'server/etcd-join.json')), 's3 left its unfinished join on disk');
    const { ms: rejoinMs } = await startClusterServer(s3, joinArgs(s3), READY_CEILING_MS);
    assertWaitsExplained(s3, joinLog(s3));
    assert.ok(!fs.existsSync(path.join(s3.dataDir, 'server/etcd-join.json')), 'the join is finished');
    await expectMembers(s1, [s3], [s1, s2, s3, s4], 'four started voting members');
    await mustCreateLease(s3, 'after-rejoin');
    report(t, `s4 joined past s3's dead learner in ${ms} ms (${log4.refusals} refusals); s3 rejoined in ${rejoinMs} ms`);
  }));

  it('no process survives a planned stop', step(async () => {
    for (const m of all) {
      if (!m.proc || m.proc.hasExited) continue;
      const etcd = etcdPidOf(m);
      assert.equal((await stopClusterServer(m)).code, 0, `${m.name} stopped cleanly`);
      assert.ok(etcd === undefined || !aliveWith(etcd, m.dataDir), `${m.name}'s etcd is gone`);
    }
  }));
});
