/**
 * Losing the controller leader's whole host, against losing any other server's host, in an
 * all-in-one cluster of three servers on managed etcd (each runs its etcd member, the API, a
 * candidate for the controller lease and its embedded agent with its pods; process pods, no
 * flannel, the test defaults), with the default timings (renew 1 s, grace 4 s, fencing-timeout
 * 3 s; the controller lease 3 s, step-down 2 s, derived from the grace).
 *
 *   npm run build && node --import tsx bench/leader-failover.ts [--trials 6] [--poll-ms 100] [--keep-logs FILE]
 *
 * A Deployment `web` (3 replicas, one per node) and a journaling singleton StatefulSet `solo`.
 * Trials alternate: the host of the server holding the controller lease, then the host of a
 * server that does not (the baseline: what losing any node costs, measured in the same run on
 * the same machine). Before each trial the singleton and a web pod are put on the victim (the
 * others cordoned while they move). "Losing the host" is SIGKILL, at a random phase, to the
 * victim's server (and so its embedded agent), its etcd member and its pod supervisors with
 * their processes. Then, polling a surviving server every --poll-ms, from the kill:
 *
 *   handover     another server holds the controller lease (leader trials only)
 *   unavailable  the victim's node is Unavailable
 *   deployment   every web replica runs Ready on another node
 *   singleton    a new copy of `solo` runs Ready on another node
 *   overlap      the longest time two copies of the singleton both wrote the journal (must be 0)
 *   wrong        other nodes judged lost or not ready (must be 0); Unknown (suspect) is counted apart
 *
 * The victim is then restarted on its data dir and the cluster settles before the next trial.
 * Prints each trial, the percentiles per kind and the leader/baseline ratios; writes
 * bench/results/leader-failover.json. Every process is killed by PID and every temp dir removed
 * at the end, also on errors and Ctrl-C.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { controllerLeaseTimings } from '../src/config/timings.js';
import { cleanupCluster, dumpLogs } from '../test/helpers/cluster.js';
import {
  allReady,
  controllerLease,
  createWorkloads,
  type HaMember,
  hostLossTrial,
  type HostLossTrial,
  identityOf,
  restartMember,
  startHaCluster,
  target,
} from '../test/helpers/leader-failover.js';
import { tempDir } from '../test/helpers/server.js';
import { checkBuild, machineInfo, percentile, printMachine, round, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    trials: { type: 'string', default: '6' },
    'poll-ms': { type: 'string', default: '100' },
    /** Copy every server's log and etcd log here before the temporary dirs go. */
    'keep-logs': { type: 'string' },
  },
});
const TRIALS = Math.max(1, Number(args.trials));
const POLL_MS = Math.max(20, Number(args['poll-ms']));
const REPLICAS = 3;
const GOALS = { deploymentP99Ms: 10_000, singletonP99Ms: 15_000 };

type Kind = 'leader' | 'baseline';
const METRICS = ['handoverMs', 'unavailableMs', 'deploymentMs', 'singletonMs'] as const;
type Metric = (typeof METRICS)[number];

interface Summary {
  trials: number;
  missing: Record<Metric, number>;
  p50: Partial<Record<Metric, number>>;
  p99: Partial<Record<Metric, number>>;
  max: Partial<Record<Metric, number>>;
  maxOverlapMs: number;
  wronglyMarked: number;
  suspectedTrials: number;
}

function summarize(trials: HostLossTrial[], kind: Kind): Summary {
  const summary: Summary = {
    trials: trials.length,
    missing: { handoverMs: 0, unavailableMs: 0, deploymentMs: 0, singletonMs: 0 },
    p50: {},
    p99: {},
    max: {},
    maxOverlapMs: Math.max(0, ...trials.map((t) => t.overlapMs)),
    wronglyMarked: trials.reduce((n, t) => n + t.wronglyMarked.length, 0),
    suspectedTrials: trials.filter((t) => t.suspected.length > 0).length,
  };
  for (const metric of METRICS) {
    if (metric === 'handoverMs' && kind === 'baseline') continue;
    const values = trials.map((t) => t[metric]).filter((v): v is number => v !== undefined).sort((a, b) => a - b);
    summary.missing[metric] = trials.length - values.length;
    if (!values.length) continue;
    summary.p50[metric] = percentile(values, 50);
    summary.p99[metric] = percentile(values, 99);
    summary.max[metric] = values.at(-1)!;
  }
  return summary;
}

const seconds = (ms: number | undefined): string => (ms === undefined ? '—' : `${(ms / 1000).toFixed(2)} s`);

async function main(): Promise<void> {
  checkBuild();
  const machine = machineInfo();
  printMachine(machine);
  const journalDir = tempDir('leader-failover-bench');
  const journal = path.join(journalDir, 'solo.journal');
  fs.writeFileSync(journal, '');
  let members: HaMember[] = [];
  const trials: { kind: Kind; trial: HostLossTrial }[] = [];
  const started = Date.now();
  try {
    console.log('starting three all-in-one servers on managed etcd …');
    members = await startHaCluster('lb');
    await allReady(target(members[0]!), members.map((m) => m.name), 90_000);
    await createWorkloads(target(members[0]!), REPLICAS, journal);
    let baselineTurn = 0;
    for (let i = 0; i < 2 * TRIALS; i++) {
      const kind: Kind = i % 2 === 0 ? 'leader' : 'baseline';
      const lease = await controllerLease(target(members[0]!)).catch(() => undefined) ?? (await controllerLease(target(members[1]!)));
      const leader = members.find((m) => identityOf(m) === lease?.holder);
      if (!leader) throw new Error(`no running server holds the controller lease (${lease?.holder})`);
      const others = members.filter((m) => m !== leader);
      const victim = kind === 'leader' ? leader : others[baselineTurn++ % others.length]!;
      const observer = members.find((m) => m !== victim && m !== leader) ?? others[0]!;
      const trial = await hostLossTrial(members, victim, observer, { replicas: REPLICAS, journal, pollMs: POLL_MS, ceilingMs: 60_000 });
      trials.push({ kind, trial });
      console.log(
        `${String(i + 1).padStart(2)} ${kind.padEnd(8)} ${trial.victim}: handover ${seconds(trial.handoverMs)}, unavailable ${seconds(trial.unavailableMs)}, ` +
          `deployment ${seconds(trial.deploymentMs)}, singleton ${seconds(trial.singletonMs)}, overlap ${trial.overlapMs} ms, ` +
          `wrong ${trial.wronglyMarked.join(',') || 0}, suspected ${trial.suspected.join(',') || 0}`,
      );
      await restartMember(victim);
      await allReady(target(observer), members.map((m) => m.name), 90_000);
    }
  } finally {
    if (args['keep-logs'] && members.length) fs.copyFileSync(dumpLogs('leader-failover-bench', members), args['keep-logs']);
    await cleanupCluster();
    fs.rmSync(journalDir, { recursive: true, force: true });
  }

  const leader = summarize(trials.filter((t) => t.kind === 'leader').map((t) => t.trial), 'leader');
  const baseline = summarize(trials.filter((t) => t.kind === 'baseline').map((t) => t.trial), 'baseline');
  const ratio = (a: number | undefined, b: number | undefined): number | undefined => (a !== undefined && b ? round(a / b) : undefined);
  const ratios = {
    unavailableP50: ratio(leader.p50.unavailableMs, baseline.p50.unavailableMs),
    deploymentP50: ratio(leader.p50.deploymentMs, baseline.p50.deploymentMs),
    deploymentP99: ratio(leader.p99.deploymentMs, baseline.p99.deploymentMs),
    singletonP50: ratio(leader.p50.singletonMs, baseline.p50.singletonMs),
    singletonP99: ratio(leader.p99.singletonMs, baseline.p99.singletonMs),
  };
  console.log('\n| host lost | trials | handover p50 / p99 | Unavailable p50 / p99 | Deployment p50 / p99 / max | singleton p50 / p99 / max | overlap | wrong | suspect |');
  console.log('|---|---:|---|---|---|---|---:|---:|---:|');
  for (const [name, s] of [['leader', leader], ['non-leader (baseline)', baseline]] as const) {
    console.log(
      `| ${name} | ${s.trials} | ${seconds(s.p50.handoverMs)} / ${seconds(s.p99.handoverMs)} | ${seconds(s.p50.unavailableMs)} / ${seconds(s.p99.unavailableMs)} | ` +
        `${seconds(s.p50.deploymentMs)} / ${seconds(s.p99.deploymentMs)} / ${seconds(s.max.deploymentMs)} | ` +
        `${seconds(s.p50.singletonMs)} / ${seconds(s.p99.singletonMs)} / ${seconds(s.max.singletonMs)} | ${s.maxOverlapMs} ms | ${s.wronglyMarked} | ${s.suspectedTrials} |`,
    );
  }
  console.log(`\nleader / baseline: ${JSON.stringify(ratios)}`);
  const met = {
    deploymentP99: (leader.p99.deploymentMs ?? Infinity) <= GOALS.deploymentP99Ms && leader.missing.deploymentMs === 0,
    singletonP99: (leader.p99.singletonMs ?? Infinity) <= GOALS.singletonP99Ms && leader.missing.singletonMs === 0,
    overlap: leader.maxOverlapMs === 0 && baseline.maxOverlapMs === 0,
    noWrongVerdict: leader.wronglyMarked === 0 && baseline.wronglyMarked === 0,
  };
  console.log(`goals (leader host: Deployment p99 ≤ 10 s, singleton p99 ≤ 15 s, 0 ms overlap, no node marked wrongly): ${JSON.stringify(met)}`);
  const file = writeResult('leader-failover', {
    date: new Date().toISOString(),
    command: `node --import tsx bench/leader-failover.ts --trials ${TRIALS} --poll-ms ${POLL_MS}`,
    machine,
    durationS: Math.round((Date.now() - started) / 1000),
    timings: { renewMs: 1000, graceMs: 4000, fencingMs: 3000, controllerLease: controllerLeaseTimings(4000) },
    goals: GOALS,
    met,
    leader,
    baseline,
    ratios,
    trials,
  });
  console.log(`wrote ${file}`);
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping everything this benchmark started`);
    void cleanupCluster().finally(() => process.exit(130));
  });
}

main().catch(async (error: unknown) => {
  console.error(error);
  await cleanupCluster().catch(() => undefined);
  process.exit(1);
});
