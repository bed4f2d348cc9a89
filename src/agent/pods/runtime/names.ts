import path from 'node:path';

/**
 * Where a runc container's pieces live, in one place (docs/workloads.md, "Containers"):
 * the runc container id, its bundle, the pod's pinned namespaces and its cgroup path.
 */

/** runc's state directory under `<data-dir>/agent`. */
export const RUNC_STATE_DIR = 'runc';
/** The runc binary; found on the supervisor's PATH (environment.ts DEFAULT_PATH has /usr/sbin). */
export const RUNC_BINARY = 'runc';
/** Per-container directories under the pod dir: `<pod dir>/containers/<name>/`. */
export const CONTAINERS_DIR = 'containers';
/** The pod sandbox's pinned namespaces: `<pod dir>/ns/{ipc,uts}` (issue 15 adds `net`). */
export const NAMESPACES_DIR = 'ns';
/** The cgroup parent of every pod: `drover/<pod uid>/<container>`. */
export const CGROUP_ROOT = 'drover';

/** `<pod uid>_<container name>`: `_` appears in neither, so the id splits back. */
export function runcContainerId(podUid: string, container: string): string {
  return `${podUid}_${container}`;
}

export function splitRuncContainerId(id: string): { podUid: string; container: string } | undefined {
  const at = id.lastIndexOf('_');
  if (at <= 0 || at === id.length - 1) return undefined;
  return { podUid: id.slice(0, at), container: id.slice(at + 1) };
}

export function containerDir(podDir: string, container: string): string {
  return path.join(podDir, CONTAINERS_DIR, container);
}

/** The OCI bundle: `config.json` and the `rootfs/` mount point. */
export function bundleDir(podDir: string, container: string): string {
  return path.join(containerDir(podDir, container), 'bundle');
}

export function rootfsDir(podDir: string, container: string): string {
  return path.join(bundleDir(podDir, container), 'rootfs');
}

export function namespacesDir(podDir: string): string {
  return path.join(podDir, NAMESPACES_DIR);
}

/**
 * runc's `linux.cgroupsPath`: absolute, from each hierarchy's root (a relative one would be taken
 * from the cgroup of whoever runs runc, which differs between a service and a shell).
 */
export function cgroupsPath(podUid: string, container: string): string {
  return `/${CGROUP_ROOT}/${podUid}/${container}`;
}

export function podCgroupPath(podUid: string): string {
  return `/${CGROUP_ROOT}/${podUid}`;
}
