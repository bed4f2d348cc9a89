import { LINUX_CAPABILITIES } from '../../../apiserver/kinds/pod-security-validation.js';
import type { ContainerSecurity } from '../run-spec.js';

/**
 * A container's capabilities: the set container runtimes give by default (Docker's and
 * containerd's fourteen, which images are built to expect: nginx needs CHOWN, SETUID and SETGID
 * to drop to its worker user), changed by securityContext as Kubernetes defines it: `drop` first
 * (`ALL` drops every one), then `add` (`ALL` adds every one); `privileged` gives all of them.
 */

export const DEFAULT_CAPABILITIES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

export const ALL_CAPABILITIES: readonly string[] = LINUX_CAPABILITIES.map((name) => `CAP_${name}`);

/** `NET_ADMIN` or `CAP_NET_ADMIN` (any case) → `CAP_NET_ADMIN`. */
export function capabilityName(name: string): string {
  const upper = name.toUpperCase();
  return upper.startsWith('CAP_') ? upper : `CAP_${upper}`;
}

export function containerCapabilities(security: ContainerSecurity | undefined): string[] {
  if (security?.privileged) return [...ALL_CAPABILITIES];
  const drop = (security?.capabilities?.drop ?? []).map(capabilityName);
  const add = (security?.capabilities?.add ?? []).map(capabilityName);
  let result = drop.includes('CAP_ALL') ? [] : DEFAULT_CAPABILITIES.filter((cap) => !drop.includes(cap));
  if (add.includes('CAP_ALL')) result = [...ALL_CAPABILITIES];
  else for (const cap of add) if (!result.includes(cap)) result.push(cap);
  return result;
}
