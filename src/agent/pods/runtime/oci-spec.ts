import type { ContainerMount, ContainerResources, ContainerRunSpec, PodRunSpec } from '../run-spec.js';
import { containerCapabilities } from './capabilities.js';
import { defaultSeccompProfile, type SeccompProfile } from './seccomp.js';

/**
 * A container's OCI runtime config (`config.json`, runtime-spec 1.0.2 as runc 1.1 reads it) as a
 * pure function of its run spec: the process (argv, env, cwd, user, capabilities), the root file
 * system, the mounts every container gets (/proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys,
 * /sys/fs/cgroup) then the pod's, the namespaces (PID and mount of its own, IPC and UTS joined
 * from the pod's pinned files, network the host's until a pod network joins a pinned one too),
 * masked and read-only /proc paths, the default seccomp profile, and cgroup limits.
 */

export const OCI_VERSION = '1.0.2';

export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options: string[];
}

export interface OciNamespace {
  type: 'pid' | 'network' | 'mount' | 'ipc' | 'uts' | 'user' | 'cgroup';
  path?: string;
}

export interface OciResources {
  devices: { allow: boolean; access: string; type?: string; major?: number; minor?: number }[];
  memory?: { limit: number };
  cpu?: { shares: number; quota?: number; period?: number };
}

export interface OciConfig {
  ociVersion: string;
  process: {
    terminal: boolean;
    user: { uid: number; gid: number; additionalGids?: number[] };
    args: string[];
    env: string[];
    cwd: string;
    capabilities: { bounding: string[]; effective: string[]; permitted: string[]; inheritable: string[]; ambient: string[] };
    noNewPrivileges: boolean;
  };
  root: { path: string; readonly: boolean };
  hostname: string;
  mounts: OciMount[];
  linux: {
    namespaces: OciNamespace[];
    cgroupsPath: string;
    resources: OciResources;
    maskedPaths?: string[];
    readonlyPaths?: string[];
    seccomp?: SeccompProfile;
  };
}

/** The pod sandbox's namespaces to join (pinned files); a missing one is new (IPC, UTS) or the host's (network). */
export interface SandboxNamespaces {
  /** Another container's PID namespace to join (an ephemeral container's target); absent: its own. */
  pid?: string;
  ipc?: string;
  uts?: string;
  network?: string;
}

export interface OciConfigInput {
  spec: PodRunSpec;
  container: ContainerRunSpec;
  /** The root file system, relative to the bundle (`rootfs`) or absolute. */
  rootfs: string;
  namespaces: SandboxNamespaces;
  /** runc's linux.cgroupsPath. */
  cgroupsPath: string;
  /** The pod's /dev/shm on the host, shared by its containers (as their IPC namespace is); absent: one of the container's own. */
  shmPath?: string;
  /** Files the runtime adds for every container (/etc/hosts, /etc/hostname, /etc/resolv.conf), before the pod's own mounts. */
  podFiles?: readonly ContainerMount[];
  /** process.arch of the node (seccomp architectures); default this process'. */
  arch?: string;
}

/** /proc entries that tell about or act on the host: hidden (masked) or read-only, as container runtimes ship them. */
export const MASKED_PATHS: readonly string[] = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/interrupts',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];
export const READONLY_PATHS: readonly string[] = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** CFS period kubelet uses (µs). */
export const CPU_PERIOD_US = 100_000;
const MIN_SHARES = 2;
const MAX_SHARES = 262_144;
const MIN_QUOTA_US = 1000;

/** cpu.shares from a CPU request in millicores (2 when there is none, as kubelet gives BestEffort). */
export function cpuShares(milli: number | undefined): number {
  if (!milli) return MIN_SHARES;
  return Math.min(MAX_SHARES, Math.max(MIN_SHARES, Math.floor((milli * 1024) / 1000)));
}

/** The CFS quota (µs per period) of a CPU limit in millicores. */
export function cpuQuota(milli: number): number {
  return Math.max(MIN_QUOTA_US, Math.floor((milli * CPU_PERIOD_US) / 1000));
}

export function ociResources(resources: ContainerResources | undefined, privileged: boolean): OciResources {
  const result: OciResources = { devices: [{ allow: privileged, access: 'rwm' }] };
  // A limit alone is also the request, as the API server defaults it.
  const cpuRequest = resources?.cpuRequestMilli ?? resources?.cpuLimitMilli;
  result.cpu = { shares: cpuShares(cpuRequest) };
  if (resources?.cpuLimitMilli) {
    result.cpu.quota = cpuQuota(resources.cpuLimitMilli);
    result.cpu.period = CPU_PERIOD_US;
  }
  if (resources?.memoryLimitBytes) result.memory = { limit: Math.ceil(resources.memoryLimitBytes) };
  return result;
}

function baseMounts(privileged: boolean, shmPath: string | undefined): OciMount[] {
  const sysOptions = ['nosuid', 'noexec', 'nodev', privileged ? 'rw' : 'ro'];
  return [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
    { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
    shmPath
      ? { destination: '/dev/shm', type: 'bind', source: shmPath, options: ['rbind', 'rprivate', 'nosuid', 'noexec', 'nodev', 'rw'] }
      : { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: sysOptions },
    { destination: '/sys/fs/cgroup', type: 'cgroup', source: 'cgroup', options: ['nosuid', 'noexec', 'nodev', 'relatime', privileged ? 'rw' : 'ro'] },
  ];
}

/** A pod mount (volume, pod file) as an OCI mount. */
export function ociMount(mount: ContainerMount): OciMount {
  const access = mount.readOnly ? 'ro' : 'rw';
  if (mount.type === 'tmpfs') {
    return { destination: mount.destination, type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', access, ...(mount.options ?? [])] };
  }
  // rbind: mounts under the source come along; rprivate: nothing propagates back to the host.
  const options = mount.options ?? [];
  return { destination: mount.destination, type: 'bind', source: mount.source, options: [...(options.includes('bind') ? [] : ['rbind']), 'rprivate', access, ...options] };
}

function namespaces(ns: SandboxNamespaces): OciNamespace[] {
  const list: OciNamespace[] = [ns.pid ? { type: 'pid', path: ns.pid } : { type: 'pid' }, { type: 'mount' }, ns.ipc ? { type: 'ipc', path: ns.ipc } : { type: 'ipc' }, ns.uts ? { type: 'uts', path: ns.uts } : { type: 'uts' }];
  // Without a pod network the container shares the host's network namespace (no entry = the runtime's).
  if (ns.network) list.push({ type: 'network', path: ns.network });
  return list;
}

export function buildOciConfig(input: OciConfigInput): OciConfig {
  const { spec, container } = input;
  const security = container.securityContext ?? {};
  const privileged = security.privileged === true;
  const caps = containerCapabilities(security);
  const user = container.user ?? { uid: 0, gid: 0 };
  const mounts = [...baseMounts(privileged, input.shmPath), ...(input.podFiles ?? []).map(ociMount), ...(container.mounts ?? []).map(ociMount)];
  const config: OciConfig = {
    ociVersion: OCI_VERSION,
    process: {
      // tty: runc makes the container's console and hands its master to the foreground `runc run` (runtime/terminal.ts).
      terminal: container.tty === true,
      user: { uid: user.uid, gid: user.gid, ...(user.additionalGids?.length ? { additionalGids: [...user.additionalGids] } : {}) },
      args: [...container.command, ...container.args],
      // On a terminal TERM is xterm unless the container sets its own, as CRI runtimes do.
      env: [...(container.tty === true && container.env.TERM === undefined ? ['TERM=xterm'] : []), ...Object.entries(container.env).map(([key, value]) => `${key}=${value}`)],
      cwd: container.workingDir ?? '/',
      // Inheritable and ambient stay empty, as runtimes have shipped since CVE-2022-24769.
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
      noNewPrivileges: security.allowPrivilegeEscalation === false,
    },
    root: { path: input.rootfs, readonly: security.readOnlyRootFilesystem === true },
    hostname: spec.hostname ?? spec.name,
    mounts,
    linux: {
      namespaces: namespaces(input.namespaces),
      cgroupsPath: input.cgroupsPath,
      resources: ociResources(container.resources, privileged),
    },
  };
  if (!privileged) {
    config.linux.maskedPaths = [...MASKED_PATHS];
    config.linux.readonlyPaths = [...READONLY_PATHS];
    if (!security.seccompUnconfined) config.linux.seccomp = defaultSeccompProfile(caps, input.arch);
  }
  return config;
}
