import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NodeSampler } from '../helpers/agent.js';
import { cleanupCluster, dumpLogs, etcdPidOf, FailureTracker, report, sleep } from '../helpers/cluster.js';
import {
  allReady,
  controllerLease,
  createWorkloads,
  type HaMember,
  hostLossTrial,
  identityOf,
  leaderOf,
  restartMember,
  startHaCluster,
  target,
  waitSettled,
} from '../helpers/leader-failover.js';
import { DROVER_BIN, eventually, request, tempDir } from '../helpers/server.js';

/**
 * The controller leader of an all-in-one cluster of three servers on managed etcd (each with its
 * etcd member, its embedded agent and its pods), with the default timings (renew 1 s, grace 4 s,
 * fencing-timeout 3 s; the controller lease 3 s, step-down 2 s):
 *
 *   1. Deposed while paused: the leader and its etcd member are SIGSTOPped until another server
 *      holds the lease; then the leader alone resumes, its own member still frozen, so it cannot
 *      read that it was deposed: only its clock tells it. It must make no controller write after
 *      the new leader started (no event of its own, no verdict on any node), even once its member
 *      resumes and anything it had queued could reach the datastore.
 *   2. Its whole host lost (server, embedded agent, etcd member and pod supervisors SIGKILLed at
 *      once): another server takes the lease, the host's node becomes Unavailable, its Deployment
 *      pod and its singleton run elsewhere, the singleton never ran twice at once, and no other node
 *      was ever judged lost or not ready (Unknown, a suspect with no consequence, is reported).
 *
 * Only order and outcome are asserted (generous ceilings, no timed asserts); the figures are
 * reported as diagnostics, and measured over many trials by bench/leader-failover.ts.
 * Needs the `etcd` binary (Debian: etcd-server) and `npm run build`.
 */

const REPLICAS = 3;
/** How long the deposed leader runs on its frozen view: past a grace (4 s) since its resume, when an unfenced one would judge every node. */
const STALE_RUN_MS = 7000;

describe('controller leader failover, three all-in-one servers on managed etcd', { concurrency: false }, () => {
  let members: HaMember[] = [];
  let journal = '';
  const run = new FailureTracker();
  const step = run.step;

  before(async () => {
    if (!fs.existsSync(DROVER_BIN)) throw new Error(`${DROVER_BIN} is missing: run npm run build first`);
    members = await startHaCluster('lf');
    journal = path.join(tempDir('leader-failover-journal'), 'solo.journal');
    fs.writeFileSync(journal, '');
    const via = target(members[0]!);
    await allReady(via, members.map((m) => m.name), 90_000);
    await createWorkloads(via, REPLICAS, journal);
  });

  after(async () => {
    for (const m of members) {
      // A member left stopped by a failed run must be able to die.
      if (m.proc && !m.proc.hasExited) process.kill(m.proc.pid, 'SIGCONT');
      const etcdPid = etcdPidOf(m);
      if (etcdPid !== undefined) {
        try {
          process.kill(etcdPid, 'SIGCONT');
        } catch {
          // gone
        }
      }
    }
    if (run.failed || process.env.DROVER_KEEP_LOGS) {
      const logs = dumpLogs('leader-failover', members);
      // The dump's own dir goes with the suite's temp dirs: keep a copy where asked (always, then).
      if (process.env.DROVER_KEEP_LOGS) fs.copyFileSync(logs, process.env.DROVER_KEEP_LOGS);
      process.stderr.write(`leader-failover: logs of the failed run in ${process.env.DROVER_KEEP_LOGS ?? logs}\n`);
    }
    await cleanupCluster();
    if (journal) fs.rmSync(path.dirname(journal), { recursive: true, force: true });
  });

  it('a leader paused past its lease, then resumed with its etcd member still frozen, makes no controller write after the new leader started', step(async (t) => {
    const leader = await leaderOf(members, target(members[0]!));
    const survivors = members.filter((m) => m !== leader);
    const via = target(survivors[0]!);
    await allReady(via, members.map((m) => m.name));
    const leaderId = identityOf(leader);
    const etcdPid = etcdPidOf(leader);
    assert.ok(etcdPid, `${leader.name} runs an etcd member`);
    // Paused while quiet: a write the leader issued just before the pause, in its term, and that
    // its frozen member forwards only when it resumes is not what this test is about (the fence
    // checks writes as they are issued; see docs/high-availability.md, "What this does not
    // cover"): the workloads settle first, and the controllers' writes that follow have a moment
    // to land.
    await waitSettled(via, REPLICAS);
    await sleep(2000);

    const sampler = new NodeSampler(via, 100).start();
    const stoppedAt = Date.now();
    process.kill(leader.proc!.pid, 'SIGSTOP');
    process.kill(etcdPid, 'SIGSTOP');
    let resumedAt = 0;
    let outputAtResume = 0;
    try {
      const takeover = await eventually(
        async () => {
          const lease = await controllerLease(via).catch(() => undefined);
          return lease && lease.holder !== '' && lease.holder !== leaderId ? lease : undefined;
        },
        'another server to take the controller lease',
        60_000,
        50,
      );
      const takeoverAt = Date.now();
      // Only the server resumes: its reads and writes to its own member hang, so nothing but its
      // own clock can tell it that it was deposed.
      outputAtResume = leader.proc!.output().length;
      resumedAt = Date.now();
      process.kill(leader.proc!.pid, 'SIGCONT');
      await sleep(STALE_RUN_MS);
      process.kill(etcdPid, 'SIGCONT');
      // Its member catches up; anything it had issued meanwhile would now be committed. It is a
      // follower again: its own API answers with the new holder.
      await eventually(
        async () => {
          const lease = await controllerLease(target(leader)).catch(() => undefined);
          return lease && lease.holder === takeover.holder;
        },
        `${leader.name} to see ${takeover.holder} as the holder`,
        60_000,
        200,
      );
      await sleep(3000);
      const end = Date.now();
      await sampler.stop();

      const resumedLog = leader.proc!.output().slice(outputAtResume);
      const stepDown = resumedLog.split('\n').find((l) => l.includes('stopped being the controller leader'));
      assert.ok(stepDown, `${leader.name} logged its step-down after resuming:\n${resumedLog.slice(0, 4000)}`);
      const refused = resumedLog.split('\n').filter((l) => l.includes('refused a controller write')).length;

      // Its controllers' writes: every event names its reporting server; none by the deposed one
      // was committed after the takeover (resourceVersions are the datastore's commit order).
      const events = await request(via, 'GET', '/api/v1/events', { timeoutMs: 5000 });
      assert.equal(events.status, 200, events.text);
      const late = (events.json as { items: { metadata: { resourceVersion: string }; reason: string; source?: { host?: string }; involvedObject: { name: string } }[] }).items.filter(
        (e) => e.source?.host === leaderId && Number(e.metadata.resourceVersion) > Number(takeover.resourceVersion),
      );
      assert.deepEqual(late.map((e) => `${e.reason} ${e.involvedObject.name}`), [], `events written by ${leaderId} after the takeover`);

      // Its verdicts: the other nodes were never judged lost. (Its own node was really silent: its
      // agent runs in the stopped process, and after the resume its renewals go to its own
      // server, which hangs on the frozen member, until it moves to another server; whatever the
      // new leader judged of it is reported, not asserted.)
      // Unknown (a suspect, no action) is allowed: freezing the member that was etcd's leader
      // stalls every write for an election, the other nodes' renewals included.
      const suspected: string[] = [];
      for (const m of survivors) {
        const states = sampler.statesOf(m.name, stoppedAt, end);
        assert.ok(states.length > 0 && states.every((s) => s === 'Ready' || s === 'Unknown'), `${m.name}: ${[...new Set(states)].join(', ')}`);
        if (states.includes('Unknown')) suspected.push(m.name);
      }
      const leaderStates = sampler.statesOf(leader.name, stoppedAt, end).filter((s, i, all) => i === 0 || s !== all[i - 1]);

      report(
        t,
        [
          `${leaderId} SIGSTOPped with its etcd member; ${takeover.holder} took the lease ${takeoverAt - stoppedAt} ms later`,
          `resumed (member still frozen for ${STALE_RUN_MS} ms): ${stepDown}`,
          `controller writes it refused after resuming: logged ${refused ? 'yes' : 'no'}; events of its own after the takeover: 0`,
          `its own node meanwhile (judged by the new leader): ${leaderStates.join(' → ')}; the others Ready${suspected.length ? `, ${suspected.join(' and ')} Unknown for a moment` : ''}`,
        ].join('\n'),
      );
    } finally {
      if (!resumedAt) process.kill(leader.proc!.pid, 'SIGCONT');
      try {
        process.kill(etcdPid, 'SIGCONT');
      } catch {
        // gone
      }
      await sampler.stop();
    }
  }));

  it("the leader's whole host lost: its Deployment pod and singleton run elsewhere, no overlap, no other node judged", step(async (t) => {
    const leader = await leaderOf(members, target(members[0]!));
    const observer = members.find((m) => m !== leader)!;
    const trial = await hostLossTrial(members, leader, observer, { replicas: REPLICAS, journal, ceilingMs: 90_000 });
    report(t, `host of ${trial.victim} (leader: ${trial.wasLeader}) SIGKILLed: ${JSON.stringify(trial)}`);
    assert.ok(trial.wasLeader, `${leader.name} held the controller lease when its host was killed`);
    assert.ok(trial.handoverMs !== undefined, 'another server took the controller lease');
    assert.ok(trial.unavailableMs !== undefined, `${trial.victim} was marked Unavailable`);
    assert.ok(trial.deploymentMs !== undefined, `every web replica ran Ready off ${trial.victim}`);
    assert.ok(trial.singletonMs !== undefined, `the singleton ran Ready off ${trial.victim}`);
    assert.equal(trial.overlapMs, 0, 'two copies of the singleton ran at once');
    assert.deepEqual(trial.wronglyMarked, [], 'other nodes judged lost or not ready');
    const lease = await controllerLease(target(observer));
    assert.notEqual(lease?.holder, identityOf(leader));

    // The host comes back: its server restarts on its data dir and its node is Ready again.
    await restartMember(leader);
    await allReady(target(observer), members.map((m) => m.name), 90_000);
  }));
});
