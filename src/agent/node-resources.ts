import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import type { Logger } from '../logging/logger.js';
import { DEFAULT_PATH } from './pods/environment.js';
import { RUNC_BINARY } from './pods/runtime/names.js';
import { DEFAULT_MAX_PODS, type NodeResourceAmounts } from '../node-protocol/node-resources.js';
import { type NodeRuntimeHandler, PROCESS_HANDLER, RUNC_HANDLER } from '../node-protocol/runtime-classes.js';

/**
 * What this node offers pods, as its Node status reports it: the runtime handlers it has
 * (`status.runtimeHandlers`, Kubernetes 1.30's NodeRuntimeHandler) and its capacity from the host.
 *
 * `process` is always there. `runc` only where the agent runs as root (runc needs root to make
 * namespaces, mounts and cgroups) and `runc --version` answers, found the way pod supervisors find
 * it (on their PATH, DEFAULT_PATH). A node without it still runs process pods, and the scheduler
 * sends it no runc pod.
 *
 * `DROVER_HIDE_RUNC=1` in the agent's environment makes it report no runc even where runc works:
 * for tests (and experiments) of a mixed cluster on one machine. It changes only what the node
 * reports, and so where pods are scheduled; it does not disable runc on the node.
 */

/** The environment variable that hides runc from what the node reports (see above). */
export const HIDE_RUNC_ENV = 'DROVER_HIDE_RUNC';

const PROBE_TIMEOUT_MS = 10_000;

/** Neither handler offers recursive read-only mounts or user namespaces (Drover implements neither). */
const FEATURES = { recursiveReadOnlyMounts: false, userNamespaces: false };

/** Why runc cannot be used here, or undefined when `<binary> --version` answers as runc does. */
export function probeRunc(env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  if (env[HIDE_RUNC_ENV] === '1') return Promise.resolve(`hidden by ${HIDE_RUNC_ENV}=1`);
  if (process.getuid?.() !== 0) return Promise.resolve('the agent does not run as root');
  return new Promise((resolve) => {
    execFile(RUNC_BINARY, ['--version'], { timeout: PROBE_TIMEOUT_MS, env: { PATH: DEFAULT_PATH } }, (error, stdout) => {
      if (error) resolve(`${RUNC_BINARY} --version failed: ${error.message.split('\n')[0]}`);
      else if (!/^runc version /m.test(stdout)) resolve(`${RUNC_BINARY} --version did not answer as runc does`);
      else resolve(undefined);
    });
  });
}

/** The handlers this node has, probed again at each status report (runc may be installed later). */
export class RuntimeHandlers {
  private handlers: NodeRuntimeHandler[] = [{ name: PROCESS_HANDLER, features: FEATURES }];
  private lastProblem: string | undefined | null = null;

  constructor(private readonly logger: Logger) {}

  /** The names of the handlers found at the last probe (`process` before the first). */
  get names(): string[] {
    return this.handlers.map((h) => h.name);
  }

  async probe(): Promise<NodeRuntimeHandler[]> {
    const problem = await probeRunc();
    if (problem !== this.lastProblem) {
      // Said once per change, not at every status report.
      if (problem) this.logger.info({ reason: problem }, 'no runc runtime on this node: it runs process pods only');
      else this.logger.info('runc found: this node runs containers');
      this.lastProblem = problem;
    }
    this.handlers = [
      ...(problem ? [] : [{ name: RUNC_HANDLER, features: FEATURES }]),
      { name: PROCESS_HANDLER, features: FEATURES },
    ];
    return this.handlers;
  }
}

/** The host's capacity: its CPUs, its memory, the disk of the agent's data dir, kubelet's pod limit. */
export function hostCapacity(dataDir: string): NodeResourceAmounts {
  let storage = 0;
  try {
    const stats = fs.statfsSync(dataDir);
    storage = stats.blocks * stats.bsize;
  } catch {
    // A data dir that cannot be read says nothing about storage; the health check reports it.
  }
  return {
    cpuMilli: os.cpus().length * 1000,
    memoryBytes: os.totalmem(),
    ephemeralStorageBytes: storage,
    pods: DEFAULT_MAX_PODS,
  };
}
