/**
 * Overload (docs/flow-control.md): the simulated nodes of bench/scale.ts on SQLite, each renewing
 * as itself (a client certificate `system:node:<name>` in `system:nodes`, one connection each, as
 * agents do), plus a bulk lister (its own user, allowed to list Nodes) sending lists of every Node
 * in an open loop at a rate that, with the renewals, asks about twice one thread's worth of server
 * CPU (calibrated in the first pass: server CPU of the renewals alone, and of 10 lists one after
 * the other; or --list-rate). Three passes under the same load, on a fresh server each: flow
 * control off (the baseline: DROVER_BENCH_FLOW_CONTROL=off, the bench's hidden switch); flow
 * control on with the API socket's own accept handle only (DROVER_BENCH_EXTRA_ACCEPTORS=off, as
 * before src/apiserver/extra-acceptors.ts); and as shipped (flow control on, the defaults or
 * --max-requests-inflight, and the extra accept handles). Each reports renewals and lists answered, 429s and
 * timeouts (no answer within 10 s), renewal latency, and, with the overload going on, how fast the
 * silenced nodes are called Unavailable and the false verdicts. Writes
 * bench/results/scale-overload.json.
 *
 *   npm run build && node --import tsx bench/scale-overload.ts [--nodes 500] [--list-rate 0]
 *        [--max-outstanding-lists 200] [--max-requests-inflight 0] [--measure-s 15]
 *        [--warmup-s 10] [--silent-percent 5] [--detect-ceiling-s 20] [--renew-ms 1000]
 *
 * (It was `bench/scale.ts --overload 1`; an `--overload` given here is ignored, so that command
 * line still works with the file name changed.) --nodes defaults to 2000, as in bench/scale.ts;
 * the recorded runs used 500. Every process started here is stopped by PID and every temp dir
 * removed, also on errors and Ctrl-C.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  installCleanup,
  machineInfo,
  nodeName,
  parseBenchArgs,
  printMachine,
  removeBenchTempDir,
  round,
  sleep,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';
import { cpu, describeDetection, NodeStates, type RenewalReport, SIMULATION_OPTIONS, SimulatedNodes, silenceAndDetect, untilAllReady } from './scale-harness.js';
import { issueCertificate } from '../src/security/pki.js';

const { n } = parseBenchArgs({
  ...SIMULATION_OPTIONS,
  'list-rate': { default: 0, min: 0 },
  'max-outstanding-lists': { default: 200, min: 1 },
  'max-requests-inflight': { default: 0, min: 0 },
  // The mode switch of bench/scale.ts this bench came from: accepted and ignored.
  overload: { default: 1, min: 0 },
});
const NODES = n.nodes;
const SILENT_PERCENT = n['silent-percent'];
const WARMUP_S = n['warmup-s'];
const MEASURE_S = n['measure-s'];
const DETECT_CEILING_S = n['detect-ceiling-s'];
const RENEW_MS = n['renew-ms'];

const LISTER = 'bench-lister';

interface ListReport extends RenewalReport {
  timeouts: number;
  skipped: number;
}

/** A certificate of the cluster's client CA for every simulated node and for the lister, in a file for the simulator. */
async function issueCredentials(dataDir: string, file: string): Promise<void> {
  const tls = path.join(dataDir, 'server', 'tls');
  const ca = { certificatePem: fs.readFileSync(path.join(tls, 'client-ca.crt'), 'utf8'), privateKeyPem: fs.readFileSync(path.join(tls, 'client-ca.key'), 'utf8') };
  const nodes: { cert: string; key: string }[] = [];
  for (let k = 0; k < NODES; k += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, NODES - k) }, (_, j) => issueCertificate(ca, { commonName: `system:node:${nodeName(k + j)}`, organization: 'system:nodes', usage: 'client' })),
    );
    nodes.push(...batch.map((c) => ({ cert: c.certificatePem, key: c.privateKeyPem })));
  }
  const lister = await issueCertificate(ca, { commonName: LISTER, organization: 'bench-listers', usage: 'client' });
  fs.writeFileSync(file, JSON.stringify({ nodes, lister: { cert: lister.certificatePem, key: lister.privateKeyPem } }), { mode: 0o600 });
}

/** Server CPU (cores) of the renewals alone, over 5 s. */
async function renewalCores(server: { child: ChildProcess }): Promise<number> {
  const c0 = cpu(server.child.pid);
  const t0 = performance.now();
  await sleep(5000);
  return (cpu(server.child.pid) - c0) / ((performance.now() - t0) / 1000);
}

/** Server CPU seconds per list of every Node: 10 lists, one after the other, as the lister, with nothing else going on. */
async function listCpu(server: { child: ChildProcess; url: string; caPem: string }, credentialsFile: string): Promise<{ listCpuS: number; listMs: number }> {
  const { lister } = JSON.parse(fs.readFileSync(credentialsFile, 'utf8')) as { lister: { cert: string; key: string } };
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  const list = (): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      https
        .get(`${server.url}/api/v1/nodes`, { agent, ca: server.caPem, cert: lister.cert, key: lister.key }, (res) => {
          if (res.statusCode !== 200) reject(new Error(`calibration list: HTTP ${res.statusCode}`));
          res.resume();
          res.on('end', () => resolve());
        })
        .on('error', reject);
    });
  await list(); // the connection, and the watch cache of Nodes
  const c0 = cpu(server.child.pid);
  const t0 = performance.now();
  for (let k = 0; k < 10; k++) await list();
  agent.destroy();
  return { listCpuS: Math.max(0.0005, (cpu(server.child.pid) - c0) / 10), listMs: (performance.now() - t0) / 10 };
}

/** The three servers compared: no flow control; flow control with one accept handle; as shipped. */
type Pass = 'off' | 'one-accept-handle' | 'on';
const PASS_LABELS: Record<Pass, string> = { off: 'flow control off', 'one-accept-handle': 'flow control on, one accept handle', on: 'flow control on (as shipped)' };

async function runOverload(pass: Pass, listRate: number | undefined): Promise<Record<string, unknown>> {
  const flowControl = pass !== 'off';
  const dir = benchTempDir(`drover-bench-overload-${pass}-`);
  const inflight = n['max-requests-inflight'];
  // The hidden switches are read once, at the server's start: set for that pass's server only.
  if (pass === 'off') process.env.DROVER_BENCH_FLOW_CONTROL = 'off';
  if (pass !== 'on') process.env.DROVER_BENCH_EXTRA_ACCEPTORS = 'off';
  // supervisor-metrics: the priority levels' figures (seats, executing, queued, refused) are read from /metrics.
  const server = await startBenchServer(path.join(dir, 'server'), path.join(dir, 'server.log'), ['--supervisor-metrics', ...(inflight ? ['--max-requests-inflight', String(inflight)] : [])]).finally(
    () => {
      delete process.env.DROVER_BENCH_FLOW_CONTROL;
      delete process.env.DROVER_BENCH_EXTRA_ACCEPTORS;
    },
  );
  const api = new BenchApi(server);
  const caFile = path.join(dir, 'ca.crt');
  const tokenFile = path.join(dir, 'admin.token');
  const credentialsFile = path.join(dir, 'credentials.json');
  fs.writeFileSync(caFile, server.caPem);
  fs.writeFileSync(tokenFile, server.adminToken, { mode: 0o600 });
  await issueCredentials(server.dataDir, credentialsFile);
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  await api.json('POST', `${rbac}/clusterroles`, { metadata: { name: LISTER }, rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['list'] }] });
  await api.json('POST', `${rbac}/clusterrolebindings`, {
    metadata: { name: LISTER },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: LISTER },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: LISTER }],
  });
  const simulator = { url: server.url, caFile, tokenFile, renewMs: RENEW_MS, connections: 0, credentialsFile };
  const nodes = SimulatedNodes.spawn({ ...simulator, count: NODES, logFile: path.join(dir, 'nodes.log') });
  // The lister in a process of its own (the simulator with no nodes): reading its answers must not
  // delay the renewals' timers and sockets, which would count as the server's latency.
  const lister = SimulatedNodes.spawn({ ...simulator, count: 0, logFile: path.join(dir, 'lister.log') });
  const states = new NodeStates();
  const label = PASS_LABELS[pass];
  try {
    const setup = await nodes.ask('setup');
    console.log(`  ${label}: ${NODES} Nodes and Leases created in ${String(setup.ms)} ms`);
    // A list's cost before the renewals start, so that theirs is not counted in it.
    const listCost = listRate === undefined ? await listCpu(server, credentialsFile) : undefined;
    await states.start(server);
    await nodes.ask('start');
    await untilAllReady(nodes, states, NODES);
    const allReadyAt = Date.now();
    await sleep(WARMUP_S * 1000);
    let calibration: { renewalCores: number; listCpuS: number; listMs: number } | undefined;
    let rate = listRate;
    if (rate === undefined) {
      calibration = { ...listCost!, renewalCores: await renewalCores(server) };
      // Renewals plus lists asking for two threads' worth of the server's CPU.
      rate = round(Math.max(1, (2 - calibration.renewalCores) / calibration.listCpuS), 1);
      console.log(
        `  calibration: renewals ${round(calibration.renewalCores, 2)} cores; a list of ${NODES} Nodes ${round(calibration.listCpuS * 1000, 1)} ms of server CPU (${round(calibration.listMs, 1)} ms answered); lists at ${rate}/s`,
      );
    }
    await lister.ask(`bulk ${rate} ${n['max-outstanding-lists']}`);
    console.log(`  ${label}: lists at ${rate}/s; overload for 5 s, then measured for ${MEASURE_S} s`);
    await sleep(5000);
    await nodes.ask('report');
    await lister.ask('report');
    const cpu0 = { server: cpu(server.child.pid), at: performance.now() };
    await sleep(MEASURE_S * 1000);
    const steady = { ...((await nodes.ask('report')) as unknown as RenewalReport), lists: ((await lister.ask('report')) as unknown as { lists: ListReport }).lists };
    const seconds = (performance.now() - cpu0.at) / 1000;
    const serverCores = (cpu(server.child.pid) - cpu0.server) / seconds;

    const { during, detection } = await silenceAndDetect({
      nodes,
      states,
      api,
      count: NODES,
      silentCount: Math.max(1, Math.round((NODES * SILENT_PERCENT) / 100)),
      allReadyAt,
      detectCeilingS: DETECT_CEILING_S,
      during: async () => ({ ...((await nodes.ask('report')) as unknown as RenewalReport), lists: ((await lister.ask('report')) as unknown as { lists: ListReport }).lists }),
    });
    // Last, the overload still on, in both passes alike: a scrape of /metrics costs the server a read
    // of every Node (its node-state gauge) and is suspected of delaying renewals into false suspicions.
    const scraped = await flowControlFigures(server);
    const levels = flowControl || 'unreachable' in scraped ? scraped : undefined;
    await lister.ask('bulk 0 0');
    const renewalTimeouts = (r: RenewalReport): number => r.errors; // every renewal error here was a missing answer, see firstError
    return {
      pass,
      flowControl,
      extraAcceptHandles: pass === 'on',
      ...(flowControl ? { maxRequestsInflight: inflight || 'default (200)' } : {}),
      nodes: NODES,
      listsPerSecondAsked: rate,
      ...(calibration ? { calibration: { renewalCores: round(calibration.renewalCores, 2), listCpuMs: round(calibration.listCpuS * 1000, 1), listMs: round(calibration.listMs, 1) } } : {}),
      serverCores: round(serverCores, 2),
      renewals: {
        perSecond: round(steady.ok / seconds, 1),
        sent: steady.sent,
        ok: steady.ok,
        tooMany: steady.tooMany,
        errors: renewalTimeouts(steady),
        ...(steady.firstError ? { firstError: steady.firstError } : {}),
        p50Ms: steady.p50 === null ? null : round(steady.p50, 1),
        p99Ms: steady.p99 === null ? null : round(steady.p99, 1),
        maxMs: steady.max === null ? null : round(steady.max, 1),
      },
      lists: {
        sent: steady.lists.sent,
        ok: steady.lists.ok,
        okPerSecond: round(steady.lists.ok / seconds, 1),
        tooMany: steady.lists.tooMany,
        timeouts: steady.lists.timeouts,
        errors: steady.lists.errors,
        skipped: steady.lists.skipped,
        ...(steady.lists.firstError ? { firstError: steady.lists.firstError } : {}),
        p99Ms: steady.lists.p99 === null ? null : round(steady.lists.p99, 1),
      },
      ...(levels ? { levelsAtEnd: levels } : {}),
      ...detection,
      duringDetection: {
        renewalP99Ms: during.p99 === null ? null : round(during.p99, 1),
        renewalsOk: during.ok,
        renewalTooMany: during.tooMany,
        renewalErrors: during.errors,
        listsOk: during.lists.ok,
        listTooMany: during.lists.tooMany,
        listTimeouts: during.lists.timeouts,
      },
    };
  } finally {
    states.stop();
    await lister.stop();
    await nodes.stop();
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 15_000);
    removeBenchTempDir(dir);
  }
}

/**
 * The server's flow-control series from /metrics, per level: seats, executing, queued, refused.
 * The scrape needs a new connection: an overloaded server may not accept one for minutes (libuv
 * accepts one connection per turn of the event loop, and the kernel's queue of 511 fills), so it
 * gives up after SCRAPE_CEILING_MS and says so.
 */
const SCRAPE_CEILING_MS = 15_000;
async function flowControlFigures(server: { url: string; adminToken: string; caPem: string }): Promise<Record<string, Record<string, number>> | { unreachable: string }> {
  let text: string;
  try {
    text = await new Promise<string>((resolve, reject) => {
      const req = https.get(`${server.url}/metrics`, { ca: server.caPem, agent: false, headers: { Authorization: `Bearer ${server.adminToken}` } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve(body));
      });
      req.setTimeout(SCRAPE_CEILING_MS, () => req.destroy(new Error(`no answer within ${SCRAPE_CEILING_MS / 1000} s (the connection not accepted, or the request not read)`)));
      req.on('error', reject);
    });
  } catch (error) {
    return { unreachable: error instanceof Error ? error.message : String(error) };
  }
  const levels: Record<string, Record<string, number>> = {};
  for (const match of text.matchAll(/^drover_apiserver_flowcontrol_(\w+)\{level="([^"]+)"(?:,reason="([^"]+)")?\} (\S+)$/gm)) {
    const [, series, level, reason, value] = match;
    (levels[level!] ??= {})[reason ? `${series}_${reason}` : series!] = Number(value);
  }
  return levels;
}

function describeOverload(r: Record<string, unknown>): string {
  const renewals = r.renewals as Record<string, unknown>;
  const lists = r.lists as Record<string, unknown>;
  return [
    `${PASS_LABELS[r.pass as Pass]}: server ${String(r.serverCores)} cores`,
    `    renewals ${String(renewals.perSecond)}/s (${String(renewals.ok)}/${String(renewals.sent)} answered 200), 429s ${String(renewals.tooMany)}, timeouts and errors ${String(renewals.errors)}, p50 ${String(renewals.p50Ms)} ms, p99 ${String(renewals.p99Ms)} ms, max ${String(renewals.maxMs)} ms`,
    `    lists asked ${String(r.listsPerSecondAsked)}/s: ${String(lists.ok)} answered (${String(lists.okPerSecond)}/s), 429s ${String(lists.tooMany)}, timeouts ${String(lists.timeouts)}, errors ${String(lists.errors)}, not sent (${n['max-outstanding-lists']} unanswered) ${String(lists.skipped)}`,
    describeDetection(r, DETECT_CEILING_S),
    ...Object.entries((r.levelsAtEnd ?? {}) as Record<string, Record<string, number>>).map(([level, f]) => `    ${level}: ${JSON.stringify(f)}`),
    ...(r.controlPlaneDisruptions as string[]).map((m) => `    the controller said: ${m}`),
  ].join('\n');
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const off = await runOverload('off', n['list-rate'] || undefined);
  console.log(describeOverload(off));
  const oneHandle = await runOverload('one-accept-handle', Number(off.listsPerSecondAsked));
  console.log(describeOverload(oneHandle));
  const on = await runOverload('on', Number(off.listsPerSecondAsked));
  console.log(describeOverload(on));
  const r = (x: Record<string, unknown>, key: string): number => Number((x.renewals as Record<string, unknown>)[key]);
  const l = (x: Record<string, unknown>, key: string): number => Number((x.lists as Record<string, unknown>)[key]);
  const ratios = {
    renewalP99OnVsOff: round(r(on, 'p99Ms') / r(off, 'p99Ms'), 3),
    renewalsAnsweredOnVsOff: round(r(on, 'ok') / Math.max(1, r(off, 'ok')), 2),
    listTimeouts: { off: l(off, 'timeouts'), oneAcceptHandle: l(oneHandle, 'timeouts'), on: l(on, 'timeouts') },
    list429s: { off: l(off, 'tooMany'), oneAcceptHandle: l(oneHandle, 'tooMany'), on: l(on, 'tooMany') },
  };
  console.log(`on / off: renewal p99 ${ratios.renewalP99OnVsOff}×, renewals answered ${ratios.renewalsAnsweredOnVsOff}×`);
  console.log(`lists timed out (off / one accept handle / on): ${ratios.listTimeouts.off} / ${ratios.listTimeouts.oneAcceptHandle} / ${ratios.listTimeouts.on}; refused with 429: ${ratios.list429s.off} / ${ratios.list429s.oneAcceptHandle} / ${ratios.list429s.on}`);
  const file = writeResult('scale-overload', {
    benchmark: 'scale-overload',
    machine,
    options: { nodes: NODES, silentPercent: SILENT_PERCENT, warmupS: WARMUP_S, measureS: MEASURE_S, detectCeilingS: DETECT_CEILING_S, renewMs: RENEW_MS, listRate: n['list-rate'] || 'calibrated', maxOutstandingLists: n['max-outstanding-lists'], maxRequestsInflight: n['max-requests-inflight'] || 'default' },
    runs: [off, oneHandle, on],
    ratios,
  });
  console.log(`wrote ${file}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
