/**
 * Workload failover: how long from an agent's abrupt loss until its Deployment pods and its
 * singleton (a StatefulSet pod) run Ready on another node, and whether two copies of the
 * singleton ever ran at the same time — for runc containers and for process pods, in one run.
 *
 *   npm run build && node --import tsx bench/failover.ts [--runtime both|runc|process] [--trials 8] [--agents 4] [--replicas N] [--poll-ms 50] [--skip-k8s-note] [--keep-logs DIR]
 *
 * Real processes only: one `drover server --disable-agent` and N `drover agent`s (node IPs
 * 127.0.0.2, 127.0.0.3, …), each in its own temporary data dir, running real pods. For each
 * runtime (runc and process by default; runc needs root) a Deployment `web-<runtime>` (a shell
 * loop) and a StatefulSet `solo-<runtime>` (replicas 1) are applied through the API with that
 * `runtimeClassName`. The runc pods run a test image built from Debian's static busybox
 * (test/helpers/images.ts) that is imported into every agent's image store before the agent
 * starts, so the image is present. Each singleton appends "<its pod uid> <host uptime>" to a
 * journal file of its runtime every 50 ms (the runc one through a hostPath volume).
 *
 * A trial waits until the cluster is settled (every node Ready; exactly the desired pods, all
 * Running and Ready, none terminating; exactly that many live pod supervisors), picks the agent
 * that runs the singleton of the trial's runtime (the runtimes alternate, and so do SIGKILL and
 * SIGSTOP), waits a random fraction of a second and sends it the signal. It then polls the pods
 * every --poll-ms and records, from the signal, when each Deployment pod of either runtime that
 * was on the victim has a new replica Running and Ready on another node, and when each singleton
 * that was on the victim has a new copy (new uid) Running and Ready elsewhere. So each signal
 * gives a runc and a process figure on the same machine at the same moment: their ratio is the
 * cost of containers. The controller's events (NodeUnavailable, TaintManagerEviction,
 * SingletonFailover, Scheduled), the supervisors' `fencing pod` lines and the journals split that
 * time into its stages. The victim is then restored (SIGCONT, or a restart on the same data dir,
 * node name and IP).
 *
 * After the trials, each journal gives the overlap: for every two copies of a singleton, how long
 * both were writing (the earlier one's last write after the later one's first).
 *
 * Pod supervisors and runc containers outlive their agent on purpose, so every pod is reaped from
 * the agents' pod dirs at the end (processes by PID, runc containers through their cgroups, their
 * mounts and cgroups removed), also on errors and Ctrl-C. Writes bench/results/failover.json
 * (failover-runc.json / failover-process.json with --runtime runc / process).
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { listPodDirs, liveSupervisor } from '../src/agent/pods/launch.js';
import { ImageStore } from '../src/images/store.js';
import { buildTestImage, writeOciArchive } from '../test/helpers/images.js';
import { reapPods } from '../test/helpers/pods.js';
import {
  alive,
  BenchApi,
  type BenchServer,
  benchTempDir,
  checkBuild,
  fileTail,
  installCleanup,
  machineInfo,
  onCleanup,
  percentile,
  printMachine,
  removeBenchTempDir,
  round,
  sleep,
  spawnBenchAgent,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';
import { bootEpochMs, journalScript, type OverlapReport, overlapReport, readCopies } from './failover-journal.js';

const { values: args } = parseArgs({
  options: {
    runtime: { type: 'string', default: 'both' },
    trials: { type: 'string', default: '8' },
    agents: { type: 'string', default: '4' },
    replicas: { type: 'string' },
    'poll-ms': { type: 'string', default: '50' },
    'skip-k8s-note': { type: 'boolean', default: false },
    /** Copy the server's and agents' logs and the journals here before the temporary dir goes. */
    'keep-logs': { type: 'string' },
  },
});
const ALL_RUNTIMES = ['runc', 'process'] as const;
type Runtime = (typeof ALL_RUNTIMES)[number];
if (!['both', ...ALL_RUNTIMES].includes(args.runtime!)) throw new Error(`--runtime takes both, runc or process, not ${args.runtime}`);
const RUNTIMES: readonly Runtime[] = args.runtime === 'both' ? ALL_RUNTIMES : [args.runtime as Runtime];
const TRIALS = Number(args.trials);
const AGENTS = Number(args.agents);
// One Deployment replica per node: the scheduler spreads replicas and then prefers the emptiest
// node, so with fewer replicas than nodes a singleton lands on a node without a web pod and the
// victim would have no Deployment pod to move.
const REPLICAS = Number(args.replicas ?? AGENTS);
const POLL_MS = Number(args['poll-ms']);
const K8S_NOTE = !args['skip-k8s-note'];
const KEEP_LOGS = args['keep-logs'];

for (const [name, value] of [['trials', TRIALS], ['agents', AGENTS], ['replicas', REPLICAS], ['poll-ms', POLL_MS]] as const) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`);
}
if (AGENTS < 2) throw new Error('--agents must be at least 2 (one victim, somewhere to move to)');
if (AGENTS > 200) throw new Error('--agents must be at most 200 (node IPs are 127.0.0.2 and up)');
if (RUNTIMES.includes('runc') && process.getuid?.() !== 0) throw new Error('runc pods need root: run as root or pass --runtime process');

const GOAL_DEPLOYMENT_P99_S = 7;
const GOAL_SINGLETON_P99_S = 10;
const SIGNALS = ['SIGKILL', 'SIGSTOP'] as const;
type Kind = (typeof SIGNALS)[number];
const NS = 'default';
const STATE_LABEL = 'drover.io/state';
const IMAGE = 'drover.test/failover-bench:1';
// Generous: runc pods on a loaded 2-core host take seconds to start and stop.
const SETTLE_TIMEOUT_MS = 180_000;
const FAILOVER_TIMEOUT_MS = 90_000;

/**
 * Kubernetes' defaults for the same events, not measured (docs/benchmarks.md gives the sources):
 * Ready=Unknown 40–55 s after the kill (grace 50 s since v1.32, renewals every 10 s), pods
 * deleted after the 300 s default toleration, so replaced at ≈ 5 m 45 s – 6 m. A StatefulSet pod
 * stays Terminating until a person force-deletes it.
 */
const K8S_TIMELINE = {
  notReadySeconds: [40, 55] as [number, number],
  defaultTolerationSeconds: 300,
  deploymentReplacedSeconds: [345, 360] as [number, number],
  statefulSetReplaced: 'never without a person (the pod stays Terminating)',
};
const K8S_DEPLOYMENT_MIDPOINT_S = (K8S_TIMELINE.deploymentReplacedSeconds[0] + K8S_TIMELINE.deploymentReplacedSeconds[1]) / 2;

installCleanup();

// ---------------------------------------------------------------------------------------------
// The cluster under test.

interface PodView {
  name: string;
  uid: string;
  app: string | undefined;
  node: string | undefined;
  phase: string | undefined;
  ready: boolean;
  terminating: boolean;
}

interface KubeList<T> {
  items: T[];
}

interface RawPod {
  metadata: { name: string; uid: string; labels?: Record<string, string>; deletionTimestamp?: string };
  spec?: { nodeName?: string };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
}

interface RawNode {
  metadata: { name: string; labels?: Record<string, string> };
}

interface RawEvent {
  reason?: string;
  message?: string;
  source?: { host?: string };
  involvedObject?: { kind?: string; name?: string; uid?: string };
  eventTime?: string;
  lastTimestamp?: string;
}

function viewOf(pod: RawPod): PodView {
  return {
    name: pod.metadata.name,
    uid: pod.metadata.uid,
    app: pod.metadata.labels?.app,
    node: pod.spec?.nodeName,
    phase: pod.status?.phase,
    ready: pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    terminating: pod.metadata.deletionTimestamp !== undefined,
  };
}

const up = (p: PodView): boolean => p.phase === 'Running' && p.ready && !p.terminating;
const webApp = (r: Runtime): string => `web-${r}`;
const soloPod = (r: Runtime): string => `solo-${r}-0`;

interface AgentSlot {
  name: string;
  ip: string;
  dataDir: string;
  logFile: string;
  child: ChildProcess;
}

class Cluster {
  readonly root = benchTempDir('drover-bench-failover-');
  /** The singletons' journals, one per runtime; the runc singleton reaches it through a hostPath volume. */
  readonly journalDir = path.join(this.root, 'journal');
  readonly bootMs = bootEpochMs();
  server: BenchServer | undefined;
  api: BenchApi | undefined;
  readonly agents = new Map<string, AgentSlot>();

  constructor() {
    fs.mkdirSync(this.journalDir);
    // Runs after the agents are killed on any exit path: their pods' supervisors and containers live on otherwise.
    onCleanup(() => this.reapAllPods());
  }

  journalFile(r: Runtime): string {
    return path.join(this.journalDir, `solo-${r}.log`);
  }

  async start(): Promise<void> {
    this.server = await startBenchServer(path.join(this.root, 'server'), path.join(this.root, 'server.log'));
    this.api = new BenchApi(this.server);
    const archive = path.join(this.root, 'image.tar');
    if (RUNTIMES.includes('runc')) writeOciArchive(buildTestImage({ name: IMAGE, entrypoint: ['/bin/sleep'], cmd: ['1000000'] }), archive);
    for (let i = 0; i < AGENTS; i++) {
      const name = `fo-${i}`;
      const where = { name, ip: `127.0.0.${i + 2}`, dataDir: path.join(this.root, name), logFile: path.join(this.root, `${name}.log`) };
      // The image is present on every node before its agent starts: failover measures no pull.
      if (RUNTIMES.includes('runc')) await new ImageStore(path.join(where.dataDir, 'agent', 'image-store')).importArchive(archive);
      this.agents.set(name, { ...where, child: this.spawnAgent(where) });
    }
    await this.poll(
      async () => {
        const states = await this.nodeStates();
        return states.size === AGENTS && [...states.values()].every((s) => s === 'Ready');
      },
      60_000,
      'all agents Ready',
    );
  }

  spawnAgent(slot: Omit<AgentSlot, 'child'>): ChildProcess {
    return spawnBenchAgent({ server: this.server!, name: slot.name, dataDir: slot.dataDir, logFile: slot.logFile, nodeIp: slot.ip });
  }

  podDirsOf(slot: AgentSlot): string[] {
    return listPodDirs(path.join(slot.dataDir, 'agent', 'pods'));
  }

  liveSupervisors(): number {
    let n = 0;
    for (const slot of this.agents.values()) for (const dir of this.podDirsOf(slot)) if (liveSupervisor(dir) !== undefined) n++;
    return n;
  }

  /** Every pod of every agent: processes by PID, runc containers through their cgroups, then mounts and cgroups. */
  reapAllPods(): number {
    let n = 0;
    for (const slot of this.agents.values()) n += reapPods(slot.dataDir);
    return n;
  }

  async apply(): Promise<void> {
    for (const r of RUNTIMES) {
      // runc: the image's own shell; process: the host's. Both are busybox-compatible sh scripts.
      const container = (script: string, env: unknown[] = []): Record<string, unknown> => ({
        name: 'main',
        image: r === 'runc' ? IMAGE : 'process',
        command: ['sh', '-c', script],
        env,
      });
      await this.api!.json('POST', `/apis/apps/v1/namespaces/${NS}/deployments`, {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: webApp(r) },
        spec: {
          replicas: REPLICAS,
          selector: { matchLabels: { app: webApp(r) } },
          template: {
            metadata: { labels: { app: webApp(r) } },
            spec: { runtimeClassName: r, terminationGracePeriodSeconds: 5, containers: [container('while :; do sleep 1; done')] },
          },
        },
      });
      const journal = r === 'runc' ? `/journal/${path.basename(this.journalFile(r))}` : this.journalFile(r);
      const solo = container(journalScript(journal), [{ name: 'POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } }]);
      if (r === 'runc') solo.volumeMounts = [{ name: 'journal', mountPath: '/journal' }];
      await this.api!.json('POST', `/apis/apps/v1/namespaces/${NS}/statefulsets`, {
        apiVersion: 'apps/v1',
        kind: 'StatefulSet',
        metadata: { name: `solo-${r}` },
        spec: {
          replicas: 1,
          serviceName: `solo-${r}`,
          selector: { matchLabels: { app: `solo-${r}` } },
          template: {
            metadata: { labels: { app: `solo-${r}` } },
            spec: {
              runtimeClassName: r,
              terminationGracePeriodSeconds: 5,
              containers: [solo],
              ...(r === 'runc' ? { volumes: [{ name: 'journal', hostPath: { path: this.journalDir, type: 'Directory' } }] } : {}),
            },
          },
        },
      });
    }
  }

  async pods(): Promise<PodView[]> {
    return (await this.api!.json<KubeList<RawPod>>('GET', `/api/v1/namespaces/${NS}/pods`)).items.map(viewOf);
  }

  async nodeStates(): Promise<Map<string, string | undefined>> {
    const list = await this.api!.json<KubeList<RawNode>>('GET', '/api/v1/nodes');
    return new Map(list.items.map((n) => [n.metadata.name, n.metadata.labels?.[STATE_LABEL]]));
  }

  async events(): Promise<RawEvent[]> {
    return (await this.api!.json<KubeList<RawEvent>>('GET', `/api/v1/namespaces/${NS}/events`)).items;
  }

  /** Why the cluster is not settled yet, or undefined when it is. */
  async unsettled(): Promise<string | undefined> {
    const states = await this.nodeStates();
    const notReady = [...this.agents.keys()].filter((n) => states.get(n) !== 'Ready');
    if (notReady.length) return `nodes not Ready: ${notReady.map((n) => `${n}=${states.get(n)}`).join(' ')}`;
    const pods = await this.pods();
    const terminating = pods.filter((p) => p.terminating);
    if (terminating.length) return `pods terminating: ${terminating.map((p) => `${p.name}@${p.node}`).join(' ')}`;
    for (const r of RUNTIMES) {
      const web = pods.filter((p) => p.app === webApp(r));
      const solo = pods.filter((p) => p.name === soloPod(r));
      if (web.length !== REPLICAS || !web.every(up)) return `${webApp(r)} pods: ${web.filter(up).length} up of ${web.length} (want ${REPLICAS})`;
      if (solo.length !== 1 || !up(solo[0]!)) return `${soloPod(r)} not up (${solo.map((p) => `${p.phase}/${p.ready}`).join(' ') || 'missing'})`;
    }
    const supervisors = this.liveSupervisors();
    if (supervisors !== pods.length) return `${supervisors} live pod supervisors for ${pods.length} pods`;
    return undefined;
  }

  async waitSettled(what: string): Promise<number> {
    const started = performance.now();
    let why: string | undefined = 'not checked';
    await this.poll(async () => (why = await this.unsettled()) === undefined, SETTLE_TIMEOUT_MS, () => `${what} (${why})`);
    return (performance.now() - started) / 1000;
  }

  /** Calls `done` every POLL_MS until it holds; API errors count as "not yet" until the deadline. */
  async poll(done: () => Promise<boolean>, timeoutMs: number, what: string | (() => string)): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    let lastError: unknown;
    for (;;) {
      const started = performance.now();
      try {
        if (await done()) return;
      } catch (error) {
        lastError = error;
      }
      if (performance.now() > deadline) {
        const label = typeof what === 'string' ? what : what();
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${label}${lastError ? ` (last error: ${String(lastError)})` : ''}`);
      }
      await sleep(Math.max(0, POLL_MS - (performance.now() - started)));
    }
  }

  logTail(name: string, chars = 3000): string {
    return fileTail(path.join(this.root, `${name}.log`), chars);
  }

  async stop(): Promise<void> {
    // SIGKILL, not SIGTERM: a terminated agent drains its node first, which only adds noise here.
    await Promise.all([...this.agents.values()].map((a) => stopChild(a.child, 'SIGKILL')));
    this.reapAllPods();
    if (this.server) await stopChild(this.server.child, 'SIGTERM', 10_000);
    this.api?.destroy();
    if (KEEP_LOGS) {
      fs.mkdirSync(KEEP_LOGS, { recursive: true });
      for (const entry of fs.readdirSync(this.root)) if (entry.endsWith('.log')) fs.copyFileSync(path.join(this.root, entry), path.join(KEEP_LOGS, entry));
      fs.cpSync(this.journalDir, path.join(KEEP_LOGS, 'journal'), { recursive: true });
      console.log(`logs kept in ${KEEP_LOGS}`);
    }
    removeBenchTempDir(this.root);
  }
}

// ---------------------------------------------------------------------------------------------
// Trials.

/** A singleton that was on the victim, and its replacement. */
interface SingletonTrial {
  /** Signal to the new copy Running+Ready on another node (first poll showing it). */
  seconds: number;
  oldUid: string;
  newUid: string | undefined;
  /** From the journal: the old copy's last write and the new one's first, seconds from the signal. */
  lastOldWrite: number | null;
  firstNewWrite: number | null;
  /** The old copy's supervisor, on the victim: when it fenced the pod and how old the last confirmed renewal was then. */
  fence: { seconds: number | null; renewalAgeMs: number | null; message: string } | null;
  singletonFailover: number | null;
  scheduled: number | null;
  /** The new copy's Started event (its agent started the container: for runc, `runc run` spawned). */
  started: number | null;
  /** From the journal after all trials: how long the old and new copy both wrote (0 unless they overlapped), and the gap between them. */
  overlapMs: number | null;
  gapMs: number | null;
}

interface RuntimeTrial {
  /** Deployment pods of this runtime on the victim at the signal. */
  deploymentPodsOnVictim: number;
  /** Signal to each replacement Deployment pod Running+Ready on another node (first poll showing it). */
  deploymentSeconds: number[];
  taintManagerEviction: number[];
  scheduledDeployment: number[];
  /** The replacements' Started events (the agent started the container). */
  startedDeployment: number[];
  /** Null when this runtime's singleton was not on the victim. */
  singleton: SingletonTrial | null;
}

interface Trial {
  kind: Kind;
  /** The runtime whose singleton chose the victim. */
  victimOf: Runtime;
  node: string;
  /** Date.now() just before process.kill(). */
  signalWallMs: number;
  /** The random wait before the signal, ms. */
  delayMs: number;
  loadAverage1m: number;
  nodeUnavailable: number | null;
  byRuntime: Partial<Record<Runtime, RuntimeTrial>>;
  /** Restore action (SIGCONT / restart) until the cluster is settled again. */
  restoreSeconds: number;
}

/** The fencing line the old singleton's supervisor logged on the victim (pino JSON: time, ageMs, msg). */
async function fenceRecord(slot: AgentSlot, uid: string, signalWall: number): Promise<SingletonTrial['fence']> {
  const file = path.join(slot.dataDir, 'agent', 'pods', uid, 'supervisor.log');
  const deadline = Date.now() + 3000;
  for (;;) {
    let text = '';
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      // not there (yet)
    }
    const line = text.split('\n').find((l) => l.includes('fencing pod'));
    if (line) {
      try {
        const entry = JSON.parse(line) as { time?: number | string; ageMs?: number; message?: string };
        const at = typeof entry.time === 'number' ? entry.time : Date.parse(entry.time ?? '');
        return {
          seconds: Number.isFinite(at) ? round((at - signalWall) / 1000, 3) : null,
          renewalAgeMs: typeof entry.ageMs === 'number' ? Math.round(entry.ageMs) : null,
          message: entry.message ?? line.slice(0, 300),
        };
      } catch {
        return { seconds: null, renewalAgeMs: null, message: line.slice(0, 300) };
      }
    }
    if (Date.now() > deadline) return null;
    await sleep(100);
  }
}

function eventTime(e: RawEvent): number | undefined {
  const t = Date.parse(e.eventTime ?? e.lastTimestamp ?? '');
  return Number.isFinite(t) ? t : undefined;
}

function secondsFrom(startWall: number, wall: number | undefined): number | null {
  return wall === undefined ? null : round((wall - startWall) / 1000, 3);
}

async function runTrial(cluster: Cluster, kind: Kind, victimOf: Runtime): Promise<Trial> {
  await cluster.waitSettled(`a settled cluster before the ${kind} trial`);
  const before = await cluster.pods();
  const node = before.find((p) => p.name === soloPod(victimOf))!.node!;
  const slot = cluster.agents.get(node)!;
  const victimWeb = new Map(RUNTIMES.map((r) => [r, before.filter((p) => p.app === webApp(r) && p.node === node)]));
  const victimSolo = new Map(RUNTIMES.map((r) => [r, before.find((p) => p.name === soloPod(r) && p.node === node)]));
  const beforeUids = new Set(before.map((p) => p.uid));

  const delayMs = Math.round(Math.random() * 1000);
  await sleep(delayMs);
  const loadAverage1m = round(fs.readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number)[0]!, 2);
  const signalWall = Date.now();
  process.kill(slot.child.pid!, kind);
  const t0 = performance.now();

  const webReadyAt = new Map(RUNTIMES.map((r) => [r, new Map<string, number>()]));
  const soloReadyAt = new Map<Runtime, number>();
  const newSoloUid = new Map<Runtime, string>();
  const newWebUids = new Map(RUNTIMES.map((r) => [r, new Set<string>()]));
  const progress = (): string =>
    RUNTIMES.map(
      (r) =>
        `${r}: web ${webReadyAt.get(r)!.size}/${victimWeb.get(r)!.length} up, ${soloPod(r)} ${victimSolo.get(r) ? (soloReadyAt.has(r) ? 'up' : 'not yet') : 'not on the victim'}`,
    ).join('; ');
  await cluster.poll(
    async () => {
      const pods = await cluster.pods();
      const at = performance.now();
      for (const p of pods) {
        if (beforeUids.has(p.uid)) continue;
        for (const r of RUNTIMES) {
          if (p.app === webApp(r)) newWebUids.get(r)!.add(p.uid);
          if (p.name === soloPod(r)) newSoloUid.set(r, p.uid);
          if (!up(p) || p.node === node) continue;
          if (p.app === webApp(r) && !webReadyAt.get(r)!.has(p.uid)) webReadyAt.get(r)!.set(p.uid, at);
          if (p.name === soloPod(r) && !soloReadyAt.has(r)) soloReadyAt.set(r, at);
        }
      }
      return RUNTIMES.every((r) => webReadyAt.get(r)!.size >= victimWeb.get(r)!.length && (!victimSolo.get(r) || soloReadyAt.has(r)));
    },
    FAILOVER_TIMEOUT_MS,
    () => `replacements after ${kind} of ${node} (${progress()})`,
  );

  // The controller's side of the story, from its events (eventTime is written just after the action).
  const events = (await cluster.events()).filter((e) => (eventTime(e) ?? 0) >= signalWall - 1000);
  const first = (pred: (e: RawEvent) => boolean): number | undefined => {
    const times = events.filter(pred).map(eventTime).filter((t): t is number => t !== undefined);
    return times.length ? Math.min(...times) : undefined;
  };
  const each = (uids: Iterable<string>, reason: string): number[] =>
    [...uids]
      .map((uid) => first((e) => e.reason === reason && e.involvedObject?.uid === uid))
      .filter((t): t is number => t !== undefined)
      .map((t) => secondsFrom(signalWall, t)!)
      .sort((a, b) => a - b);

  const byRuntime: Trial['byRuntime'] = {};
  for (const r of RUNTIMES) {
    const lost = victimWeb.get(r)!;
    const oldSolo = victimSolo.get(r);
    let singleton: SingletonTrial | null = null;
    if (oldSolo) {
      const newUid = newSoloUid.get(r);
      const copies = readCopies(cluster.journalFile(r), cluster.bootMs).copies;
      singleton = {
        seconds: round((soloReadyAt.get(r)! - t0) / 1000, 3),
        oldUid: oldSolo.uid,
        newUid,
        lastOldWrite: secondsFrom(signalWall, copies.find((c) => c.uid === oldSolo.uid)?.lastMs),
        firstNewWrite: secondsFrom(signalWall, copies.find((c) => c.uid === newUid)?.firstMs),
        fence: await fenceRecord(slot, oldSolo.uid, signalWall),
        singletonFailover: secondsFrom(signalWall, first((e) => e.reason === 'SingletonFailover' && e.involvedObject?.uid === oldSolo.uid)),
        scheduled: newUid ? secondsFrom(signalWall, first((e) => e.reason === 'Scheduled' && e.involvedObject?.uid === newUid)) : null,
        started: newUid ? secondsFrom(signalWall, first((e) => e.reason === 'Started' && e.involvedObject?.uid === newUid)) : null,
        overlapMs: null,
        gapMs: null,
      };
    }
    byRuntime[r] = {
      deploymentPodsOnVictim: lost.length,
      deploymentSeconds: [...webReadyAt.get(r)!.values()]
        .sort((a, b) => a - b)
        .slice(0, lost.length)
        .map((at) => round((at - t0) / 1000, 3)),
      taintManagerEviction: each(lost.map((p) => p.uid), 'TaintManagerEviction'),
      scheduledDeployment: each(newWebUids.get(r)!, 'Scheduled'),
      startedDeployment: each(newWebUids.get(r)!, 'Started'),
      singleton,
    };
  }

  if (kind === 'SIGSTOP') {
    process.kill(slot.child.pid!, 'SIGCONT');
  } else {
    if (alive(slot.child)) await new Promise((resolve) => slot.child.once('exit', resolve));
    slot.child = cluster.spawnAgent(slot);
  }
  const restoreSeconds = await cluster.waitSettled(`${node} back and the cluster settled after ${kind === 'SIGSTOP' ? 'SIGCONT' : 'restart'}`);

  return {
    kind,
    victimOf,
    node,
    signalWallMs: signalWall,
    delayMs,
    loadAverage1m,
    nodeUnavailable: secondsFrom(signalWall, first((e) => e.reason === 'NodeUnavailable' && e.involvedObject?.name === node)),
    byRuntime,
    restoreSeconds: round(restoreSeconds, 3),
  };
}

interface Stats {
  n: number;
  p50: number;
  p99: number;
  max: number;
  min: number;
}

function stats(values: readonly number[]): Stats | null {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: round(percentile(sorted, 50), 3), p99: round(percentile(sorted, 99), 3), max: round(sorted.at(-1)!, 3), min: round(sorted[0]!, 3) };
}

function median(values: readonly (number | null | undefined)[]): number | null {
  const v = values.filter((x): x is number => typeof x === 'number');
  return v.length ? round(percentile([...v].sort((a, b) => a - b), 50), 3) : null;
}

function fmt(s: Stats | null | undefined): string {
  return s ? `n=${String(s.n).padEnd(2)} p50 ${s.p50.toFixed(2)} s  p99 ${s.p99.toFixed(2)} s  max ${s.max.toFixed(2)} s  (min ${s.min.toFixed(2)} s)` : 'no samples';
}

const f2 = (v: number | null | undefined): string => (typeof v === 'number' ? v.toFixed(2) : '-');

function trialLine(i: number, t: Trial): string {
  const parts = RUNTIMES.map((r) => {
    const x = t.byRuntime[r]!;
    const web = x.deploymentSeconds.map((s) => s.toFixed(2)).join(', ') || '(none on victim)';
    const s = x.singleton;
    const solo = s
      ? ` solo ${s.seconds.toFixed(2)} (fenced ${f2(s.fence?.seconds)}, renewal age ${s.fence?.renewalAgeMs ?? '-'} ms, last write ${f2(s.lastOldWrite)}, SingletonFailover ${f2(s.singletonFailover)}, first write ${f2(s.firstNewWrite)})`
      : '';
    return `${r}: web ${web}${solo}`;
  });
  return (
    `  ${String(i + 1).padStart(2)} ${t.kind.padEnd(7)} ${t.node} (${t.victimOf}'s singleton, +${t.delayMs} ms, load ${t.loadAverage1m}) Unavailable ${f2(t.nodeUnavailable)} | ` +
    `${parts.join(' | ')} | settled ${t.restoreSeconds.toFixed(1)} s after restore`
  );
}

interface RuntimeSummary {
  deployment: Partial<Record<Kind | 'all', Stats | null>>;
  singleton: Partial<Record<Kind | 'all', Stats | null>>;
  stages: Record<string, number | null>;
  trialsWithoutDeploymentPodOnVictim: number;
  overlap: OverlapReport;
  goals: {
    deploymentP99: { atMostSeconds: number; measured: number | null; pass: boolean };
    singletonP99: { atMostSeconds: number; measured: number | null; pass: boolean };
    /** copies beyond expectedCopies: the singleton moved outside a trial (e.g. fenced by a lease renewal late under load). */
    overlap: { atMostMs: number; measured: number; copies: number; expectedCopies: number; pass: boolean };
  };
}

function summarize(r: Runtime, trials: readonly Trial[], overlap: OverlapReport): RuntimeSummary {
  const of = (t: Trial): RuntimeTrial => t.byRuntime[r]!;
  const bySignal = (pick: (t: Trial) => number[]): Partial<Record<Kind | 'all', Stats | null>> => {
    const out: Partial<Record<Kind | 'all', Stats | null>> = {};
    for (const kind of SIGNALS) out[kind] = stats(trials.filter((t) => t.kind === kind).flatMap(pick));
    out.all = stats(trials.flatMap(pick));
    return out;
  };
  const deployment = bySignal((t) => of(t).deploymentSeconds);
  const singleton = bySignal((t) => (of(t).singleton ? [of(t).singleton!.seconds] : []));
  const solos = trials.map((t) => of(t).singleton).filter((s): s is SingletonTrial => s !== null);
  const stages = {
    nodeUnavailableP50: median(trials.map((t) => t.nodeUnavailable)),
    taintManagerEvictionP50: median(trials.flatMap((t) => of(t).taintManagerEviction)),
    scheduledDeploymentP50: median(trials.flatMap((t) => of(t).scheduledDeployment)),
    startedDeploymentP50: median(trials.flatMap((t) => of(t).startedDeployment)),
    deploymentRunningP50: deployment.all?.p50 ?? null,
    singletonFenceP50: median(solos.map((s) => s.fence?.seconds)),
    singletonFenceRenewalAgeMsMax: solos.some((s) => s.fence?.renewalAgeMs != null) ? Math.max(...solos.map((s) => s.fence?.renewalAgeMs ?? 0)) : null,
    singletonLastOldWriteP50: median(solos.map((s) => s.lastOldWrite)),
    singletonFailoverP50: median(solos.map((s) => s.singletonFailover)),
    scheduledSingletonP50: median(solos.map((s) => s.scheduled)),
    startedSingletonP50: median(solos.map((s) => s.started)),
    singletonRunningP50: singleton.all?.p50 ?? null,
    singletonFirstNewWriteP50: median(solos.map((s) => s.firstNewWrite)),
  };
  const depP99 = deployment.all?.p99 ?? null;
  const soloP99 = singleton.all?.p99 ?? null;
  const expectedCopies = solos.length + 1;
  return {
    deployment,
    singleton,
    stages,
    trialsWithoutDeploymentPodOnVictim: trials.filter((t) => of(t).deploymentPodsOnVictim === 0).length,
    overlap,
    goals: {
      deploymentP99: { atMostSeconds: GOAL_DEPLOYMENT_P99_S, measured: depP99, pass: depP99 !== null && depP99 <= GOAL_DEPLOYMENT_P99_S },
      singletonP99: { atMostSeconds: GOAL_SINGLETON_P99_S, measured: soloP99, pass: soloP99 !== null && soloP99 <= GOAL_SINGLETON_P99_S },
      overlap: { atMostMs: 0, measured: overlap.maxOverlapMs, copies: overlap.copies, expectedCopies, pass: overlap.maxOverlapMs <= 0 && overlap.copies >= expectedCopies },
    },
  };
}

/** runc over process for one figure: the ratio of the p50s and p99s, and the median of the per-trial ratios (same signal). */
function ratios(trials: readonly Trial[], summary: Partial<Record<Runtime, RuntimeSummary>>) {
  const runc = summary.runc;
  const proc = summary.process;
  if (!runc || !proc) return null;
  const ratio = (a: number | undefined, b: number | undefined): number | null => (a !== undefined && b ? round(a / b, 2) : null);
  const paired = (pick: (x: RuntimeTrial) => number | undefined): number | null =>
    median(
      trials.map((t) => {
        const a = pick(t.byRuntime.runc!);
        const b = pick(t.byRuntime.process!);
        return a !== undefined && b !== undefined && b > 0 ? a / b : null;
      }),
    );
  return {
    deploymentP50: ratio(runc.deployment.all?.p50, proc.deployment.all?.p50),
    deploymentP99: ratio(runc.deployment.all?.p99, proc.deployment.all?.p99),
    deploymentPairedMedian: paired((x) => (x.deploymentSeconds.length ? Math.max(...x.deploymentSeconds) : undefined)),
    singletonP50: ratio(runc.singleton.all?.p50, proc.singleton.all?.p50),
    singletonP99: ratio(runc.singleton.all?.p99, proc.singleton.all?.p99),
    singletonPairedMedian: paired((x) => x.singleton?.seconds),
  };
}

async function main(): Promise<void> {
  checkBuild();
  const machine = machineInfo();
  printMachine(machine);
  console.log(
    `\n## ${TRIALS} trials (victim: the node of the ${RUNTIMES.join(' / ')} singleton in turn; SIGKILL and SIGSTOP alternating), ${AGENTS} agents,` +
      ` per runtime (${RUNTIMES.join(', ')}): Deployment × ${REPLICAS} + StatefulSet × 1, poll ${POLL_MS} ms`,
  );
  const started = performance.now();
  const cluster = new Cluster();
  const trials: Trial[] = [];
  const overlaps: Partial<Record<Runtime, OverlapReport>> = {};
  /** Every Fenced event of the run: the trials' own, and any outside a trial (a node's renewals late under load). */
  let fenced: { seconds: number | null; pod: string | undefined; node: string | undefined; inTrial: number | null; message: string | undefined }[] = [];
  try {
    await cluster.start();
    await cluster.apply();
    for (let i = 0; i < TRIALS; i++) {
      const victimOf = RUNTIMES[i % RUNTIMES.length]!;
      const kind = SIGNALS[Math.floor(i / RUNTIMES.length) % SIGNALS.length]!;
      let trial: Trial;
      try {
        trial = await runTrial(cluster, kind, victimOf);
      } catch (error) {
        for (const name of cluster.agents.keys()) console.error(`--- ${name} log tail ---\n${cluster.logTail(name, 1500)}`);
        console.error(`--- server log tail ---\n${cluster.logTail('server', 4000)}`);
        throw error;
      }
      trials.push(trial);
      console.log(trialLine(i, trial));
    }
    const runStart = Date.now() - (performance.now() - started);
    fenced = (await cluster.events())
      .filter((e) => e.reason === 'Fenced')
      .map((e) => {
        const at = eventTime(e);
        const trial = trials.findIndex((t) => at !== undefined && at >= t.signalWallMs && at <= t.signalWallMs + 15_000);
        return { seconds: secondsFrom(runStart, at), pod: e.involvedObject?.name, node: e.source?.host, inTrial: trial < 0 ? null : trial + 1, message: e.message };
      })
      .sort((a, b) => (a.seconds ?? 0) - (b.seconds ?? 0));
    for (const f of fenced.filter((x) => x.inTrial === null)) console.log(`  fenced outside a trial, ${f.seconds} s into the run: ${f.pod} on ${f.node ?? '?'}: ${f.message}`);
    for (const r of RUNTIMES) {
      const overlap = overlapReport(cluster.journalFile(r), cluster.bootMs);
      overlaps[r] = overlap;
      const copiesAtEnd = readCopies(cluster.journalFile(r), cluster.bootMs).copies;
      for (const trial of trials) {
        const s = trial.byRuntime[r]?.singleton;
        if (!s) continue;
        const pair = overlap.pairs.find((p) => p.oldUid === s.oldUid && p.newUid === s.newUid);
        s.overlapMs = pair?.overlapMs ?? null;
        s.gapMs = pair?.gapMs ?? null;
        // The journal is complete only now: the old copy may have written after the trial's first look.
        s.lastOldWrite = secondsFrom(trial.signalWallMs, copiesAtEnd.find((c) => c.uid === s.oldUid)?.lastMs);
        // A runc pod reads Running once `runc run` is spawned, before the container's first write.
        s.firstNewWrite = secondsFrom(trial.signalWallMs, copiesAtEnd.find((c) => c.uid === s.newUid)?.firstMs);
      }
    }
  } finally {
    await cluster.stop();
  }
  const loadAfter = machineInfo().loadAverage;

  const summary: Partial<Record<Runtime, RuntimeSummary>> = {};
  for (const r of RUNTIMES) summary[r] = summarize(r, trials, overlaps[r]!);
  const pf = (pass: boolean): string => (pass ? 'PASS' : 'FAIL');
  console.log('\n## Summary (seconds from the signal to the replacement Running and Ready on another node)');
  for (const r of RUNTIMES) {
    const s = summary[r]!;
    console.log(`### ${r}`);
    for (const key of [...SIGNALS, 'all'] as const) console.log(`  Deployment ${key.padEnd(7)} ${fmt(s.deployment[key])}`);
    for (const key of [...SIGNALS, 'all'] as const) console.log(`  singleton  ${key.padEnd(7)} ${fmt(s.singleton[key])}`);
    if (s.trialsWithoutDeploymentPodOnVictim) console.log(`  note: in ${s.trialsWithoutDeploymentPodOnVictim} trial(s) the victim ran no ${webApp(r)} pod`);
    console.log(`  stages (p50, s after the signal): ${Object.entries(s.stages).map(([k, v]) => `${k} ${v ?? '-'}`).join(', ')}`);
    console.log(
      `  singleton copies: ${s.overlap.copies}; max overlap ${s.overlap.maxOverlapMs} ms; smallest gap ${s.overlap.minGapMs ?? '-'} ms` +
        `${s.overlap.malformedLines ? `; ${s.overlap.malformedLines} malformed line(s)` : ''}` +
        `\n  gaps between successive copies (ms): ${s.overlap.pairs.map((p) => p.gapMs).join(', ') || '-'}`,
    );
    const g = s.goals;
    console.log(`  goal Deployment p99 ≤ ${GOAL_DEPLOYMENT_P99_S} s: ${f2(g.deploymentP99.measured)} s  ${pf(g.deploymentP99.pass)}`);
    console.log(`  goal singleton  p99 ≤ ${GOAL_SINGLETON_P99_S} s: ${f2(g.singletonP99.measured)} s  ${pf(g.singletonP99.pass)}`);
    console.log(`  goal singleton overlap 0 ms: ${g.overlap.measured} ms over ${g.overlap.copies} copies (${g.overlap.expectedCopies} from the trials${g.overlap.copies > g.overlap.expectedCopies ? `; ${g.overlap.copies - g.overlap.expectedCopies} move(s) outside a trial` : ''})  ${pf(g.overlap.pass)}`);
  }
  const runcOverProcess = ratios(trials, summary);
  if (runcOverProcess) {
    console.log('\n## runc / process, same run');
    console.log(`  ${Object.entries(runcOverProcess).map(([k, v]) => `${k} ${v ?? '-'}`).join(', ')}`);
  }
  console.log(`  load average at the start ${machine.loadAverage.join(' ')}, at the end ${loadAfter.join(' ')}; at the signals ${median(trials.map((t) => t.loadAverage1m))} (median 1-min)`);

  let k8s: { ratioMidpointOverDeploymentP50: Partial<Record<Runtime, number | null>> } | null = null;
  if (K8S_NOTE) {
    const ratio: Partial<Record<Runtime, number | null>> = {};
    for (const r of RUNTIMES) {
      const p50 = summary[r]!.deployment.all?.p50;
      ratio[r] = p50 ? round(K8S_DEPLOYMENT_MIDPOINT_S / p50, 1) : null;
    }
    k8s = { ratioMidpointOverDeploymentP50: ratio };
    console.log('\n## Kubernetes defaults for the same events (documented timeline, not measured)');
    console.log(
      `  NotReady ~${K8S_TIMELINE.notReadySeconds.join('–')} s (grace 50 s + renew up to 10 s); + ${K8S_TIMELINE.defaultTolerationSeconds} s default toleration` +
        ` → Deployment pods replaced at ≈ 5 m 45 s – 6 m (midpoint ${K8S_DEPLOYMENT_MIDPOINT_S} s); StatefulSet pod: ${K8S_TIMELINE.statefulSetReplaced}`,
    );
    console.log(`  Deployment: Kubernetes midpoint / our p50 = ${RUNTIMES.map((r) => `${r} ${ratio[r] ?? '-'}×`).join(', ')}`);
  }

  // One runtime alone is another configuration: it does not overwrite the same-run comparison.
  const file = writeResult(args.runtime === 'both' ? 'failover' : `failover-${args.runtime}`, {
    benchmark: `workload failover after the abrupt loss of one agent (SIGKILL / SIGSTOP), real pods (${RUNTIMES.join(' and ')})`,
    command: `node --import tsx bench/failover.ts --runtime ${args.runtime} --trials ${TRIALS} --agents ${AGENTS} --replicas ${REPLICAS} --poll-ms ${POLL_MS}`,
    machine,
    loadAverageAtEnd: loadAfter,
    config: {
      runtimes: RUNTIMES,
      agents: AGENTS,
      deploymentReplicasPerRuntime: REPLICAS,
      pollMs: POLL_MS,
      trials: TRIALS,
      image: RUNTIMES.includes('runc') ? `${IMAGE} (busybox-static, imported into every agent's store before it starts)` : null,
      serverDefaults: 'renew 1 s, grace 4 s, default-unavailable-toleration 0 s, fencing-timeout 3 s (+2 s margin)',
    },
    notes: [
      'deploymentSeconds / singleton.seconds: from just after process.kill() to the arrival of the first GET pods response showing the replacement Running and Ready on another node; includes up to one poll interval plus one request.',
      'Every trial measures the Deployment pods of every runtime that were on the victim, and each singleton that was on it; victimOf names the runtime whose singleton chose the victim.',
      'events: eventTime of the controller events minus the signal time (same host clock); each event is written just after its action.',
      'lastOldWrite / firstNewWrite: from the journal each singleton appends to every ~50 ms (host uptime, 10 ms resolution, + the cost of forking cut), so a copy\'s true start and end are known to within ~70 ms.',
      'p99 of fewer than 100 samples (nearest rank) is the maximum.',
    ],
    trials,
    summary,
    runcOverProcess,
    fenced,
    kubernetesDefaults: K8S_NOTE ? { ...K8S_TIMELINE, deploymentMidpointSeconds: K8S_DEPLOYMENT_MIDPOINT_S, ...k8s } : null,
    wallSeconds: round((performance.now() - started) / 1000, 1),
  });
  console.log(`\nwrote ${path.relative(process.cwd(), file)}`);
  const overlapped = RUNTIMES.filter((r) => !summary[r]!.goals.overlap.pass);
  if (overlapped.length) {
    console.error(`FAIL: two copies of a singleton ran at once or copies are missing (${overlapped.map((r) => `${r}: max overlap ${summary[r]!.overlap.maxOverlapMs} ms, ${summary[r]!.overlap.copies} copies`).join('; ')})`);
    process.exitCode = 1;
  }
}

await main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
