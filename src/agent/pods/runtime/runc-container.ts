import fs from 'node:fs';
import path from 'node:path';
import type { ContainerRunSpec, PodRunSpec } from '../run-spec.js';
import { killCgroup, oomKills, removeCgroup } from './cgroups.js';
import { unmountAllUnder } from './host-mounts.js';
import { bundleDir, cgroupsPath, containerDir, podCgroupPath, RUNC_BINARY, runcContainerId } from './names.js';
import { buildOciConfig } from './oci-spec.js';
import { makeRootfs, removeRootfs, rootfsPaths, type RootfsKind } from './rootfs.js';
import { runcDelete, runcKill, runcRunArgs, runcStartedOnDisk, runcState } from './runc.js';
import { ensureSandbox, teardownSandbox } from './sandbox.js';
import { onTerminal } from './terminal.js';

/**
 * One container under runc, as the supervisor drives it: `prepare` makes a fresh bundle (root
 * file system, config.json) in the pod's sandbox, `spawnArgs` is the foreground `runc run` the
 * supervisor spawns like any process (runc passes stdio through, or with a TTY copies the
 * container's terminal to it, forwards signals and exits with the container's status), `stop` signals it through runc, `kill` kills every process of its
 * cgroup at once (the fence, the end of a grace period), `cleanup` reads whether the OOM killer
 * struck and removes the container, its mount and its cgroup.
 */

/** How long to wait on runc's state dir before asking `runc state` too (and then how often). */
const STARTED_ASK_RUNC_AFTER_MS = 1000;

export type Warn = (message: string, details: Record<string, unknown>) => void;

export class RuncContainer {
  readonly id: string;
  readonly bundle: string;
  readonly cgroup: string;
  readonly root: string;
  private rootfsKind: RootfsKind | undefined;
  /** Set before `prepare`: the PID namespace to join (`/proc/<pid>/ns/pid` of an ephemeral container's target). */
  pidNamespace: string | undefined;

  constructor(
    private readonly podDir: string,
    private readonly spec: PodRunSpec,
    readonly container: ContainerRunSpec,
    private readonly warn: Warn,
  ) {
    if (!spec.runcRoot) throw new Error(`pod ${spec.namespace}/${spec.name} runs under runc but has no runc root`);
    this.root = spec.runcRoot;
    this.id = runcContainerId(spec.uid, container.name);
    this.bundle = bundleDir(podDir, container.name);
    this.cgroup = cgroupsPath(spec.uid, container.name);
  }

  get rootfs(): RootfsKind | undefined {
    return this.rootfsKind;
  }

  /** A fresh bundle for the next instance; what an earlier instance left (after a crash) is removed first. */
  async prepare(): Promise<void> {
    if (fs.existsSync(path.join(this.root, this.id))) await runcDelete(this.root, this.id);
    const image = this.container.image;
    if (!image) throw new Error(`container ${this.container.name} has no image`);
    const sandbox = ensureSandbox(this.podDir, this.spec.hostname ?? this.spec.name, this.spec.podNetwork);
    fs.mkdirSync(this.bundle, { recursive: true, mode: 0o700 });
    this.rootfsKind = makeRootfs(rootfsPaths(containerDir(this.podDir, this.container.name), this.bundle), image.layerDirs, this.warn);
    const config = buildOciConfig({
      spec: this.spec,
      container: this.container,
      rootfs: 'rootfs',
      namespaces: {
        ipc: sandbox.ipc,
        uts: sandbox.uts,
        ...(sandbox.network ? { network: sandbox.network } : {}),
        ...(this.pidNamespace ? { pid: this.pidNamespace } : {}),
      },
      cgroupsPath: this.cgroup,
      shmPath: sandbox.shm,
      podFiles: sandbox.files,
    });
    fs.writeFileSync(path.join(this.bundle, 'config.json'), JSON.stringify(config), { mode: 0o600 });
  }

  /**
   * The foreground `runc run`; for `tty: true` run on a terminal made by script (terminal.ts), whose
   * stdin must then be a pipe kept open for the life of the instance (`keepStdin`).
   */
  spawnArgs(): { file: string; args: string[]; cwd: string; keepStdin: boolean } {
    const args = runcRunArgs(this.root, this.bundle, this.id);
    if (this.container.tty === true) return { ...onTerminal(RUNC_BINARY, args), cwd: this.bundle, keepStdin: true };
    return { file: RUNC_BINARY, args, cwd: this.bundle, keepStdin: false };
  }

  /**
   * Resolves true once runc has started the container (what `runc state` calls running: its init
   * released into the user's process), false once `abandoned()` says the attempt is over. Reads
   * runc's own state dir, which costs two stats a look instead of a runc process (tens of ms on
   * a busy host); `runc state` itself is asked too once the wait gets long, should runc ever keep
   * its state otherwise.
   */
  async whenStarted(abandoned: () => boolean): Promise<boolean> {
    const began = Date.now();
    let askedRuncAt = began;
    for (;;) {
      if (abandoned()) return false;
      if (runcStartedOnDisk(this.root, this.id)) return true;
      const waited = Date.now() - began;
      if (waited > STARTED_ASK_RUNC_AFTER_MS && Date.now() - askedRuncAt >= STARTED_ASK_RUNC_AFTER_MS) {
        askedRuncAt = Date.now();
        if ((await runcState(this.root, this.id))?.status === 'running') return !abandoned();
      }
      // A start takes tens of ms: look often at first, then back off for one that hangs.
      await new Promise((resolve) => setTimeout(resolve, waited < 500 ? 5 : waited < 5000 ? 25 : 250));
    }
  }

  /** The container's stop signal (its image's StopSignal, else SIGTERM) to its init, through runc. */
  async stop(): Promise<void> {
    const signal = this.container.image?.config.stopSignal || 'SIGTERM';
    await runcKill(this.root, this.id, signal.startsWith('SIG') || /^\d+$/.test(signal) ? signal : `SIG${signal}`);
  }

  /** SIGKILL every process in the container now (through its cgroup), then through runc too. */
  kill(): void {
    killCgroup(this.cgroup);
    void runcKill(this.root, this.id, 'KILL', true).catch(() => undefined);
  }

  /** After `runc run` has exited: was it the OOM killer, then remove container, mount and cgroup. */
  async cleanup(): Promise<{ oomKilled: boolean }> {
    const oomKilled = oomKills(this.cgroup) > 0;
    try {
      await runcDelete(this.root, this.id);
    } finally {
      removeRootfs(rootfsPaths(containerDir(this.podDir, this.container.name), this.bundle));
      removeCgroup(this.cgroup);
    }
    return { oomKilled };
  }
}

/**
 * Everything a runc pod holds on the host, removed: its containers (killed first), their root
 * file systems, the sandbox's namespaces and /dev/shm, the pod's cgroups, and any mount left
 * under the pod dir. Safe to call on a pod with none of it; the pod dir may then be removed.
 */
export async function cleanupRuncPod(podDir: string, spec: Pick<PodRunSpec, 'uid' | 'runcRoot' | 'containers'>): Promise<void> {
  const errors: string[] = [];
  for (const container of spec.containers) {
    const cgroup = cgroupsPath(spec.uid, container.name);
    killCgroup(cgroup);
    if (spec.runcRoot) await runcDelete(spec.runcRoot, runcContainerId(spec.uid, container.name)).catch((e: Error) => errors.push(e.message));
    try {
      removeRootfs(rootfsPaths(containerDir(podDir, container.name), bundleDir(podDir, container.name)));
    } catch (error) {
      errors.push((error as Error).message);
    }
    removeCgroup(cgroup);
  }
  try {
    teardownSandbox(podDir);
    unmountAllUnder(podDir);
  } catch (error) {
    errors.push((error as Error).message);
  }
  removeCgroup(podCgroupPath(spec.uid));
  if (errors.length) throw new Error(`cleaning up pod ${spec.uid}: ${errors.join('; ')}`);
}

/** Kill a runc pod's containers through their cgroups, synchronously (a dead supervisor's leftovers). */
export function killRuncPod(spec: Pick<PodRunSpec, 'uid' | 'containers'>): void {
  for (const container of spec.containers) killCgroup(cgroupsPath(spec.uid, container.name));
}
