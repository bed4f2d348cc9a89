import fs from 'node:fs';
import path from 'node:path';
import type { ContainerMount, SandboxRunPaths } from '../run-spec.js';
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
 * With a pod network the agent makes the whole sandbox instead, ahead of the pod (network, IPC
 * and UTS namespaces and /dev/shm, wired with CNI: src/agent/network/pod-sandbox.ts), and the
 * run spec names its paths (`podNetwork.sandbox`); the containers join them the same way, and the
 * pod files name the pod's address and its cluster DNS. Without one (hostNetwork, or a cluster
 * with `flannel-backend: none`) the containers share the node's network and the supervisor makes
 * the IPC and UTS namespaces here. Pods started before agent-made sandboxes have their network
 * namespace pinned at `ns/net` by the agent.
 */

export const SHM_DIR = 'shm';
export const POD_ETC_DIR = 'etc';
const SHM_SIZE = '64m';

export interface Sandbox {
  ipc: string;
  uts: string;
  /** The pod's pinned network namespace; absent: the node's network. */
  network?: string;
  shm: string;
  /** Bind mounts every container of the pod gets. */
  files: ContainerMount[];
}

/** Whether `file` is a pinned namespace (an nsfs bind mount). */
export function isNsfs(file: string): boolean {
  const resolved = path.resolve(file);
  return mountTable().some((m) => m.mountPoint === resolved && m.fsType === 'nsfs');
}

function must(result: { ok: boolean; stderr: string }, what: string): void {
  if (!result.ok) throw new MountError(`${what}: ${result.stderr}`);
}

function hostsFile(hostname: string, podIp: string | undefined): string {
  return [
    podIp ? '# Kubernetes-managed hosts file.' : '# Kubernetes-managed hosts file (host network).',
    '127.0.0.1\tlocalhost',
    '::1\tlocalhost ip6-localhost ip6-loopback',
    'fe00::0\tip6-localnet',
    'fe00::1\tip6-allnodes',
    'fe00::2\tip6-allrouters',
    podIp ? `${podIp}\t${hostname}` : `127.0.1.1\t${hostname}`,
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

/**
 * `<pod dir>/ns/`, a private bind mount of itself: pins made in it stay out of other mount
 * namespaces. Whoever pins first (the agent for `net`, the supervisor for `ipc`/`uts`) makes it.
 */
export function ensureNamespacesDir(podDir: string): string {
  const nsDir = namespacesDir(podDir);
  fs.mkdirSync(nsDir, { recursive: true, mode: 0o700 });
  // One mount(8) binds it and makes it private (util-linux applies the propagation flag after the bind).
  if (!isMountPoint(nsDir)) must(run('mount', ['--bind', '--make-private', nsDir, nsDir]), `bind-mounting ${nsDir} private`);
  return nsDir;
}

export interface SandboxNetwork {
  podIp: string;
  resolvConf: string;
  /** Namespaces and /dev/shm the agent made ahead (src/agent/network/pod-sandbox.ts); absent: made here, in the pod's dir. */
  sandbox?: SandboxRunPaths;
}

/** The pod files every container gets, under `<pod dir>/etc/`. */
function podFiles(podDir: string, hostname: string, network: SandboxNetwork | undefined): ContainerMount[] {
  const etc = path.join(podDir, POD_ETC_DIR);
  fs.mkdirSync(etc, { recursive: true, mode: 0o755 });
  writeIfChanged(path.join(etc, 'hostname'), `${hostname}\n`);
  writeIfChanged(path.join(etc, 'hosts'), hostsFile(hostname, network?.podIp));
  let resolv = network?.resolvConf;
  if (resolv === undefined) {
    try {
      // Host network: the host's resolvers, as kubelet gives hostNetwork pods.
      resolv = fs.readFileSync('/etc/resolv.conf', 'utf8');
    } catch {
      resolv = '';
    }
  }
  writeIfChanged(path.join(etc, 'resolv.conf'), resolv);
  return ['hostname', 'hosts', 'resolv.conf'].map((name) => ({
    destination: `/etc/${name}`,
    source: path.join(etc, name),
    type: 'bind',
    readOnly: false,
  }));
}

/**
 * Make (or find again) the pod's sandbox. Idempotent: a supervisor restarted on the pod keeps its
 * namespaces. `network`: the pod's own network, whose namespace the agent pinned already.
 */
export function ensureSandbox(podDir: string, hostname: string, network?: SandboxNetwork): Sandbox {
  const made = network?.sandbox;
  if (made) {
    // The agent's sandbox: nothing to make, only to check (gone after a reboot: the agent makes a new one).
    const fsType = new Map(mountTable().map((m) => [m.mountPoint, m.fsType]));
    for (const [file, want] of [[made.net, 'nsfs'], [made.ipc, 'nsfs'], [made.uts, 'nsfs'], [made.shm, 'tmpfs']] as const) {
      if (fsType.get(path.resolve(file)) !== want) throw new MountError(`the pod sandbox is incomplete: ${file} is not a ${want} mount (the agent makes the sandbox before the pod starts)`);
    }
    return { ipc: made.ipc, uts: made.uts, shm: made.shm, network: made.net, files: podFiles(podDir, hostname, network) };
  }
  const nsDir = ensureNamespacesDir(podDir);
  const ipc = path.join(nsDir, 'ipc');
  const uts = path.join(nsDir, 'uts');
  const net = path.join(nsDir, 'net');
  if (network && !isNsfs(net)) throw new MountError(`the pod network namespace ${net} is missing (the agent pins it before the pod starts)`);
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
  return { ipc, uts, shm, files: podFiles(podDir, hostname, network), ...(network ? { network: net } : {}) };
}

/** Unpin the namespaces and unmount the pod's /dev/shm. Safe to call again, and on a pod that never had one. */
export function teardownSandbox(podDir: string): void {
  const nsDir = namespacesDir(podDir);
  unmountAllUnder(nsDir);
  unmount(path.join(podDir, SHM_DIR));
}
