/**
 * Shared helpers for the benchmarks: machine description, percentiles, result files, and the
 * realistic Node status payloads the datastore and API benchmarks write.
 *
 * The benchmark machine is shared and noisy, so every script measures its own baseline in the
 * same run and reports ratios against it. Nothing here asserts a timing.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(BENCH_DIR, '..');
export const RESULTS_DIR = path.join(BENCH_DIR, 'results');
export const DROVER_BIN = path.join(REPO_ROOT, 'dist/cli/main.js');

export interface MachineInfo {
  date: string;
  node: string;
  platform: string;
  cpus: number;
  cpuModel: string;
  loadAverage: number[];
  totalMemoryMiB: number;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    date: new Date().toISOString(),
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    loadAverage: os.loadavg().map((l) => Math.round(l * 100) / 100),
    totalMemoryMiB: Math.round(os.totalmem() / 1024 / 1024),
  };
}

export function printMachine(info: MachineInfo): void {
  console.log(
    `# ${info.date}  node ${info.node}  ${info.cpus} x ${info.cpuModel}  load ${info.loadAverage.join(' ')}`,
  );
}

/** Nearest-rank percentile of an already sorted array. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}

export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

export function fmtInt(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

export function writeResult(name: string, data: unknown): string {
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, `${name}.json`);
  fs.writeFileSync(file, `${JSON.stringify(data, null, 2)}\n`);
  return file;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Kubernetes times have one-second resolution; `n` seconds after a fixed base keeps them unique. */
export function heartbeatTime(n: number): string {
  return new Date(Date.UTC(2025, 0, 1) + n * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export const CONDITION_TYPES = ['MemoryPressure', 'DiskPressure', 'PIDPressure', 'Ready'] as const;

/**
 * About 300 bytes of JSON: a Node's Ready condition with its heartbeat, as a kubelet posts it,
 * plus node info. `n` varies the heartbeat time so consecutive values differ.
 */
export function nodeStatusValue(n: number): Buffer {
  return Buffer.from(
    JSON.stringify({
      status: {
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            lastHeartbeatTime: heartbeatTime(n),
            lastTransitionTime: heartbeatTime(0),
            reason: 'KubeletReady',
            message: 'kubelet is posting ready status',
          },
        ],
        nodeInfo: { kubeletVersion: 'v1.31.0', containerRuntimeVersion: 'containerd://1.7.22', osImage: 'Debian GNU/Linux 12' },
      },
    }),
  );
}
