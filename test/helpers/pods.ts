import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { killPodProcesses, listPodDirs } from '../../src/agent/pods/launch.js';
import { readRunSpec } from '../../src/agent/pods/run-spec.js';
import { cgroupPids, removeCgroup } from '../../src/agent/pods/runtime/cgroups.js';
import { unmountAllUnder } from '../../src/agent/pods/runtime/host-mounts.js';
import { cgroupsPath, podCgroupPath, RUNC_STATE_DIR, runcContainerId } from '../../src/agent/pods/runtime/names.js';

/**
 * How long a test lets launchSupervisor() wait for a supervisor started from the TypeScript
 * source: tsx makes it slow to start, and a loaded machine slower (the agent's own 5 s is for the
 * compiled build). A ceiling, not a figure.
 */
export const LAUNCH_CEILING_MS = 60_000;

/**
 * Pod supervisors outlive their agent on purpose, so a test that kills an agent or a server must
 * reap the pods it left: by PID, from the pod directories under the node's data dir.
 */
export function reapPods(dataDir: string): number {
  // The agent's sandboxes (pinned namespaces, /dev/shm): its spare and those of its pods.
  unmountAllUnder(path.join(dataDir, 'agent', 'sandboxes'));
  const podsDir = path.join(dataDir, 'agent', 'pods');
  if (!fs.existsSync(podsDir)) return 0;
  // A supervisor the agent launched a moment before it was killed may not have written its pid
  // file yet: find those by their command line (the pod dir is their argument) first; and the
  // agent's spare supervisor (its argument under agent/spare-supervisor), which may have been
  // handed a pod just before the kill and would go on writing into that pod's dir.
  killSupervisorsUnder(path.join(dataDir, 'agent'));
  const dirs = listPodDirs(podsDir);
  for (const dir of dirs) killPodProcesses(dir);
  for (const dir of dirs) reapRuncPod(dir, path.join(dataDir, 'agent', RUNC_STATE_DIR));
  // Process pods mount too (a Memory emptyDir's tmpfs): the temp dir cannot go while they stay.
  for (const dir of dirs) unmountAllUnder(dir);
  return dirs.length;
}

/**
 * What a runc pod left on the host, removed synchronously (a test's teardown, even after a
 * failure): its containers (killed through their cgroups, then `runc delete --force`), every
 * mount under its dir (root file systems, pinned namespaces, /dev/shm) and its cgroups.
 */
export function reapRuncPod(dir: string, runcRoot: string): void {
  let spec;
  try {
    spec = readRunSpec(dir);
  } catch {
    return;
  }
  if (spec.runtime !== 'runc') return;
  const deadline = Date.now() + 5000;
  for (const container of spec.containers) {
    const cgroup = cgroupsPath(spec.uid, container.name);
    // killPodProcesses sent SIGKILL; wait (bounded) until the cgroup is empty so rmdir succeeds.
    while (cgroupPids(cgroup).length > 0 && Date.now() < deadline) spawnSync('sleep', ['0.05']);
    spawnSync('runc', ['--root', spec.runcRoot ?? runcRoot, 'delete', '--force', runcContainerId(spec.uid, container.name)], { timeout: 15_000 });
    removeCgroup(cgroup);
  }
  unmountAllUnder(dir);
  removeCgroup(podCgroupPath(spec.uid));
}

/** SIGKILL every pod supervisor whose pod dir lies under `podsDir`, pid file or not. */
function killSupervisorsUnder(dir: string): void {
  const prefix = `${path.resolve(dir)}${path.sep}`;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const args = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (args.some((a) => /supervisor-main\.[jt]s$/.test(a)) && args.some((a) => a.startsWith(prefix))) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

/** PIDs of the host's processes whose command line is exactly `argv` (a test's marker command). */
export function pidsRunning(argv: readonly string[]): number[] {
  const cmdline = argv.map((a) => `${a}\0`).join('');
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8') === cmdline) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}
