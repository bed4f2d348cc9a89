import fs from 'node:fs';
import path from 'node:path';
import type { ContainerMount } from '../run-spec.js';
import { isMountPoint, MountError, mountTable, run, unmount, unmountAllUnder } from './host-mounts.js';
import { namespacesDir } from './names.js';

/**
 * A pod's sandbox under runc: what its containers share. The IPC and UTS namespaces are made
 * once per pod and pinned as files in `<pod dir>/ns/` (bind mounts of nsfs made by util-linux
 * `unshare --ipc=FILE --uts=FILE`, on a private bind mount of that directory so the pins do not
 * propagate into other mount namespaces); every container joins them by path, so they share
 * System V IPC and the hostname (the pod's name). A per-pod tmpfs is their /dev/shm. Pod files
 * (/etc/hostname, /etc/hosts, /etc/resolv.conf) are written under `<pod dir>/etc/`.
 *
 * The network namespace stays the host's until a pod network exists: that work adds `net` here,
 * pinned the same way, and the containers join it as they join `ipc`.
 */

export const SHM_DIR = 'shm';
export const POD_ETC_DIR = 'etc';
const SHM_SIZE = '64m';

export interface Sandbox {
  ipc: string;
  uts: string;
  shm: string;
  /** Bind mounts every container of the pod gets. */
  files: ContainerMount[];
}

function isNsfs(file: string): boolean {
  const resolved = path.resolve(file);
  return mountTable().some((m) => m.mountPoint === resolved && m.fsType === 'nsfs');
}

function must(result: { ok: boolean; stderr: string }, what: string): void {
  if (!result.ok) throw new MountError(`${what}: ${result.stderr}`);
}

function hostsFile(hostname: string): string {
  return [
    '# Kubernetes-managed hosts file (host network).',
    '127.0.0.1\tlocalhost',
    '::1\tlocalhost ip6-localhost ip6-loopback',
    'fe00::0\tip6-localnet',
    'fe00::1\tip6-allnodes',
    'fe00::2\tip6-allrouters',
    `127.0.1.1\t${hostname}`,
    '',
  ].join('\n');
}

function writeIfChanged(file: string, content: string): void {
  try {
    if (fs.readFileSync(file, 'utf8') === content) return;
  } catch {
    // not there yet
  }
  fs.writeFileSync(file, content, { mode: 0o644 });
}

/** Make (or find again) the pod's sandbox. Idempotent: a supervisor restarted on the pod keeps its namespaces. */
export function ensureSandbox(podDir: string, hostname: string): Sandbox {
  const nsDir = namespacesDir(podDir);
  const ipc = path.join(nsDir, 'ipc');
  const uts = path.join(nsDir, 'uts');
  fs.mkdirSync(nsDir, { recursive: true, mode: 0o700 });
  if (!isMountPoint(nsDir)) {
    must(run('mount', ['--bind', nsDir, nsDir]), `bind-mounting ${nsDir}`);
    must(run('mount', ['--make-private', nsDir]), `making ${nsDir} private`);
  }
  if (!isNsfs(ipc) || !isNsfs(uts)) {
    for (const file of [ipc, uts]) {
      if (isMountPoint(file)) unmount(file);
      fs.writeFileSync(file, '', { mode: 0o600 });
    }
    must(run('unshare', [`--ipc=${ipc}`, `--uts=${uts}`, 'hostname', hostname]), 'creating the pod IPC and UTS namespaces');
  }
  const shm = path.join(podDir, SHM_DIR);
  fs.mkdirSync(shm, { recursive: true, mode: 0o1777 });
  if (!isMountPoint(shm)) must(run('mount', ['-t', 'tmpfs', '-o', `nosuid,nodev,noexec,mode=1777,size=${SHM_SIZE}`, 'shm', shm]), `mounting the pod /dev/shm at ${shm}`);
  const etc = path.join(podDir, POD_ETC_DIR);
  fs.mkdirSync(etc, { recursive: true, mode: 0o755 });
  writeIfChanged(path.join(etc, 'hostname'), `${hostname}\n`);
  writeIfChanged(path.join(etc, 'hosts'), hostsFile(hostname));
  let resolv = '';
  try {
    // Host network: the host's resolvers, as kubelet gives hostNetwork pods.
    resolv = fs.readFileSync('/etc/resolv.conf', 'utf8');
  } catch {
    // none on the host
  }
  writeIfChanged(path.join(etc, 'resolv.conf'), resolv);
  const files: ContainerMount[] = ['hostname', 'hosts', 'resolv.conf'].map((name) => ({
    destination: `/etc/${name}`,
    source: path.join(etc, name),
    type: 'bind',
    readOnly: false,
  }));
  return { ipc, uts, shm, files };
}

/** Unpin the namespaces and unmount the pod's /dev/shm. Safe to call again, and on a pod that never had one. */
export function teardownSandbox(podDir: string): void {
  const nsDir = namespacesDir(podDir);
  unmountAllUnder(nsDir);
  unmount(path.join(podDir, SHM_DIR));
}
