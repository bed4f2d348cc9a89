import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { listPodDirs } from './pods/launch.js';
import { readRunSpec, readRunState } from './pods/run-spec.js';
import { CGROUP_MOUNT, cgroupMode } from './pods/runtime/cgroups.js';
import { cgroupsPath } from './pods/runtime/names.js';

/**
 * Resource usage of this node and of its pods, for `kubectl top` (the server's metrics.k8s.io
 * asks each agent for it on `/stats/summary`, in the shape of kubelet's Summary API).
 *
 * Figures are cumulative CPU time and the memory working set, read from cgroups as kubelet's
 * cAdvisor reads them: on cgroup v1 `cpuacct.usage` and `memory.usage_in_bytes` less the inactive
 * file cache (`total_inactive_file`), on v2 (a unified hierarchy at /sys/fs/cgroup) `cpu.stat`'s
 * usage_usec and `memory.current` less `inactive_file`. The node is the root cgroup (on v2, where
 * the root has no memory files, /proc/meminfo). A runc container is its cgroup
 * (`/drover/<pod uid>/<container>`); a process-runtime container, which has no cgroup, is the
 * processes of its process group (/proc: utime+stime, resident set).
 *
 * CPU usage is a rate, so it takes two samples: as metrics-server does, the rate is over the
 * window between this sample and the last one (when that is 1 to 60 s old), else between two
 * samples a second apart. Answers within a second of the last share it.
 */

/** Where agents serve the summary, as kubelet does. */
export const STATS_SUMMARY_PATH = '/stats/summary';

/** Cumulative CPU time (ns) and the working set (bytes) of one thing at one instant. */
export interface Usage {
  cpuNs: number;
  memoryBytes: number;
}

export interface ContainerSample extends Usage {
  name: string;
  startedAt: string;
}

export interface PodSample {
  uid: string;
  namespace: string;
  name: string;
  containers: ContainerSample[];
}

export interface Sample {
  /** Monotonic milliseconds (performance.now()). */
  at: number;
  /** Wall time, RFC 3339. */
  time: string;
  node: Usage | undefined;
  pods: PodSample[];
}

/** kubelet's Summary API, the part Drover fills in (plus the window its CPU rates are over). */
export interface CpuStats {
  time: string;
  usageNanoCores: number;
  usageCoreNanoSeconds: number;
}
export interface MemoryStats {
  time: string;
  workingSetBytes: number;
}
export interface StatsSummary {
  node: { nodeName: string; cpu?: CpuStats; memory?: MemoryStats };
  pods: {
    podRef: { name: string; namespace: string; uid: string };
    containers: { name: string; startTime: string; cpu: CpuStats; memory: MemoryStats }[];
  }[];
  /** Seconds between the two samples the CPU rates come from. */
  windowSeconds: number;
}

// --------------------------------------------------------------------------------------------
// Reading the figures

function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function readNumber(file: string): number | undefined {
  const text = readText(file)?.trim();
  if (!text) return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
}

/** A key's value in a flat keyed file (memory.stat, cpu.stat, /proc/meminfo with its `kB`). */
export function keyedValue(text: string | undefined, key: string): number | undefined {
  if (text === undefined) return undefined;
  for (const line of text.split('\n')) {
    const [name, value] = line.trim().split(/\s+/);
    if (name === key || name === `${key}:`) {
      const number = Number(value);
      return Number.isFinite(number) ? number : undefined;
    }
  }
  return undefined;
}

/** The first of v1's CPU accounting hierarchies that is mounted (`cpuacct`, or `cpu,cpuacct` joined). */
function v1CpuacctDir(root: string): string | undefined {
  return ['cpuacct', 'cpu,cpuacct', 'cpuacct,cpu'].map((d) => path.join(root, d)).find((d) => fs.existsSync(d));
}

/** A cgroup's usage (`relative` from each hierarchy's root: '' for the root itself), or undefined when it is not there. */
export function cgroupUsage(relative: string, root = CGROUP_MOUNT): Usage | undefined {
  const rel = relative.replace(/^\/+/, '');
  if (cgroupMode(root) === 'v2') {
    const dir = path.join(root, rel);
    const usec = keyedValue(readText(path.join(dir, 'cpu.stat')), 'usage_usec');
    const current = readNumber(path.join(dir, 'memory.current'));
    if (usec === undefined || current === undefined) return undefined;
    const inactive = keyedValue(readText(path.join(dir, 'memory.stat')), 'inactive_file') ?? 0;
    return { cpuNs: usec * 1000, memoryBytes: Math.max(0, current - inactive) };
  }
  const cpuacct = v1CpuacctDir(root);
  const cpuNs = cpuacct ? readNumber(path.join(cpuacct, rel, 'cpuacct.usage')) : undefined;
  const memoryDir = path.join(root, 'memory', rel);
  const usage = readNumber(path.join(memoryDir, 'memory.usage_in_bytes'));
  if (cpuNs === undefined || usage === undefined) return undefined;
  const stat = readText(path.join(memoryDir, 'memory.stat'));
  const inactive = keyedValue(stat, 'total_inactive_file') ?? keyedValue(stat, 'inactive_file') ?? 0;
  return { cpuNs, memoryBytes: Math.max(0, usage - inactive) };
}

/** USER_HZ: the unit of /proc's CPU times on every Linux Drover runs on. */
const CLOCK_TICKS_PER_SECOND = 100;
const PAGE_SIZE = 4096;

/** The whole node: its root cgroup; on v2 without root figures, /proc/stat and /proc/meminfo. */
export function nodeUsage(root = CGROUP_MOUNT, proc = '/proc'): Usage | undefined {
  const fromCgroup = cgroupMode(root) === 'v1' ? cgroupUsage('', root) : undefined;
  if (fromCgroup) return fromCgroup;
  const cpuLine = readText(path.join(proc, 'stat'))?.split('\n').find((l) => l.startsWith('cpu '));
  const meminfo = readText(path.join(proc, 'meminfo'));
  if (!cpuLine || !meminfo) return undefined;
  // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
  const [user, nice, system, , , irq, softirq, steal] = cpuLine.trim().split(/\s+/).slice(1).map(Number);
  const busyTicks = [user, nice, system, irq, softirq, steal].reduce<number>((sum, v) => sum + (v ?? 0), 0);
  const kb = (key: string): number => (keyedValue(meminfo, key) ?? 0) * 1024;
  const used = kb('MemTotal') - kb('MemFree');
  return { cpuNs: (busyTicks * 1e9) / CLOCK_TICKS_PER_SECOND, memoryBytes: Math.max(0, used - kb('Inactive(file)')) };
}

/** The processes of a process group (a process-runtime container), summed; undefined when none is left. */
export function processGroupUsage(pgid: number, proc = '/proc'): Usage | undefined {
  let entries: string[];
  try {
    entries = fs.readdirSync(proc);
  } catch {
    return undefined;
  }
  let ticks = 0;
  let pages = 0;
  let found = false;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readText(path.join(proc, entry, 'stat'));
    if (!stat) continue;
    // The command may hold spaces and parentheses: the fields start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) !== pgid) continue;
    found = true;
    ticks += Number(fields[11]) + Number(fields[12]);
    pages += Number(readText(path.join(proc, entry, 'statm'))?.split(' ')[1] ?? 0);
  }
  return found ? { cpuNs: (ticks * 1e9) / CLOCK_TICKS_PER_SECOND, memoryBytes: pages * PAGE_SIZE } : undefined;
}

/** One sample of the node and of every running container of the pods in `podsDir`. */
export function takeSample(podsDir: string, root = CGROUP_MOUNT): Sample {
  const pods: PodSample[] = [];
  for (const dir of listPodDirs(podsDir)) {
    let spec;
    try {
      spec = readRunSpec(dir);
    } catch {
      continue;
    }
    const state = readRunState(dir);
    if (!state || state.finished) continue;
    const containers: ContainerSample[] = [];
    for (const status of state.containers) {
      if (!('running' in status.state)) continue;
      const usage =
        spec.runtime === 'runc' ? cgroupUsage(cgroupsPath(spec.uid, status.name), root) : processGroupUsage(status.state.running.pid);
      if (usage) containers.push({ name: status.name, startedAt: status.state.running.startedAt, ...usage });
    }
    if (containers.length) pods.push({ uid: spec.uid, namespace: spec.namespace, name: spec.name, containers });
  }
  return { at: performance.now(), time: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'), node: nodeUsage(root), pods };
}

// --------------------------------------------------------------------------------------------
// Rates

function cpuStats(time: string, before: number | undefined, after: number, seconds: number): CpuStats {
  // A counter that went back (a container restarted, a process exited) has no rate this window.
  const delta = before === undefined ? 0 : Math.max(0, after - before);
  return { time, usageNanoCores: Math.round(delta / seconds), usageCoreNanoSeconds: Math.round(after) };
}

/** The summary over the window between two samples (pure). */
export function summarize(nodeName: string, before: Sample, after: Sample): StatsSummary {
  const seconds = Math.max(0.001, (after.at - before.at) / 1000);
  const earlier = new Map(before.pods.map((p) => [p.uid, new Map(p.containers.map((c) => [c.name, c]))]));
  return {
    node: {
      nodeName,
      ...(after.node && before.node
        ? {
            cpu: cpuStats(after.time, before.node.cpuNs, after.node.cpuNs, seconds),
            memory: { time: after.time, workingSetBytes: after.node.memoryBytes },
          }
        : {}),
    },
    pods: after.pods
      .map((pod) => ({
        podRef: { name: pod.name, namespace: pod.namespace, uid: pod.uid },
        containers: pod.containers
          // A container that was not running at the first sample (or another instance) has no rate yet.
          .filter((c) => earlier.get(pod.uid)?.get(c.name)?.startedAt === c.startedAt)
          .map((c) => ({
            name: c.name,
            startTime: c.startedAt,
            cpu: cpuStats(after.time, earlier.get(pod.uid)?.get(c.name)?.cpuNs, c.cpuNs, seconds),
            memory: { time: after.time, workingSetBytes: c.memoryBytes },
          })),
      }))
      .filter((pod) => pod.containers.length > 0),
    windowSeconds: Math.round(seconds * 1000) / 1000,
  };
}

const MIN_WINDOW_MS = 1000;
const MAX_WINDOW_MS = 60_000;

/** Samples when asked, and keeps the last sample so the next answer's window ends now. */
export class StatsSampler {
  private last: Sample | undefined;
  private lastSummary: StatsSummary | undefined;
  private inFlight: Promise<StatsSummary> | undefined;

  constructor(
    private readonly nodeName: string,
    private readonly podsDir: string,
    private readonly root = CGROUP_MOUNT,
  ) {}

  summary(): Promise<StatsSummary> {
    this.inFlight ??= this.compute().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  private async compute(): Promise<StatsSummary> {
    const age = this.last ? performance.now() - this.last.at : Infinity;
    if (age < MIN_WINDOW_MS && this.lastSummary) return this.lastSummary;
    let before = this.last;
    if (!before || age > MAX_WINDOW_MS) {
      before = takeSample(this.podsDir, this.root);
      await new Promise((resolve) => setTimeout(resolve, MIN_WINDOW_MS));
    }
    const after = takeSample(this.podsDir, this.root);
    this.last = after;
    this.lastSummary = summarize(this.nodeName, before, after);
    return this.lastSummary;
  }
}
