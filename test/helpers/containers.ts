import fs from 'node:fs';
import path from 'node:path';
import { runcState } from '../../src/agent/pods/runtime/runc.js';
import { execInContainer } from '../../src/agent/pods/runtime/exec.js';
import { readRunSpec } from '../../src/agent/pods/run-spec.js';
import { mountsUnder } from '../../src/agent/pods/runtime/host-mounts.js';
import { cgroupDirs } from '../../src/agent/pods/runtime/cgroups.js';
import { podCgroupPath, RUNC_STATE_DIR, runcContainerId } from '../../src/agent/pods/runtime/names.js';
import { ImageStore } from '../../src/images/store.js';
import { type TestImage, writeOciArchive } from './images.js';

/**
 * Containers in tests: a test image put into a node's store, a command run in a container
 * (`runc exec`, through the runtime's exec entry point), and what a node still holds for a pod
 * (runc containers, mounts, cgroups) so teardown can prove it is gone.
 */

export function agentDirOf(dataDir: string): string {
  return path.join(dataDir, 'agent');
}

/** Imports `image` into the node store of the data dir (`<data-dir>/agent/image-store`). */
export async function importTestImage(dataDir: string, image: TestImage, workDir: string): Promise<void> {
  const file = path.join(workDir, `${image.configDigest.slice(7, 19)}.tar`);
  writeOciArchive(image, file);
  await new ImageStore(path.join(agentDirOf(dataDir), 'image-store')).importArchive(file);
}

export function podDirOf(dataDir: string, uid: string): string {
  return path.join(agentDirOf(dataDir), 'pods', uid);
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs argv in a container of the pod (by uid) on the node of `dataDir`. */
export function execIn(dataDir: string, uid: string, container: string, argv: string[]): Promise<ExecResult> {
  const dir = podDirOf(dataDir, uid);
  const spec = readRunSpec(dir);
  const child = execInContainer(dir, spec, container, argv, { tty: false, stdin: false });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The host PID of a container's init, from runc. */
export async function containerInitPid(dataDir: string, uid: string, container: string): Promise<number | undefined> {
  const state = await runcState(path.join(agentDirOf(dataDir), RUNC_STATE_DIR), runcContainerId(uid, container));
  return state?.status === 'running' ? state.pid : undefined;
}

/** What a node still holds for a pod: runc state, mounts under its dir, cgroup directories. */
export function podLeftovers(dataDir: string, uid: string): string[] {
  const found: string[] = [];
  const runcRoot = path.join(agentDirOf(dataDir), RUNC_STATE_DIR);
  if (fs.existsSync(runcRoot)) {
    for (const id of fs.readdirSync(runcRoot)) if (id.startsWith(`${uid}_`)) found.push(`runc container ${id}`);
  }
  for (const mount of mountsUnder(podDirOf(dataDir, uid))) found.push(`mount ${mount}`);
  for (const dir of cgroupDirs(podCgroupPath(uid))) if (fs.existsSync(dir)) found.push(`cgroup ${dir}`);
  return found;
}

/** Whatever a node's data dir still has mounted, and runc containers under its root. */
export function nodeLeftovers(dataDir: string): string[] {
  const found = mountsUnder(dataDir).map((m) => `mount ${m}`);
  const runcRoot = path.join(agentDirOf(dataDir), RUNC_STATE_DIR);
  if (fs.existsSync(runcRoot)) for (const id of fs.readdirSync(runcRoot)) found.push(`runc container ${id}`);
  return found;
}

export { readRunSpec };
