/**
 * Drover's default seccomp profile, written from the documented behaviour of container runtimes'
 * defaults (Docker's "Seccomp security profiles" page lists the significant syscalls its default
 * blocks and why): every syscall is allowed except those below, which fail with EPERM. Most are
 * gated by a capability, as Docker gates them: a container granted that capability (by
 * securityContext, or privileged, which runs with no filter) may use them. A denylist is simpler
 * than Docker's allowlist and shorter to audit, at a cost said in docs/security.md: a syscall the
 * kernel adds later is allowed until it is listed here.
 */

export interface SeccompRule {
  names: string[];
  action: 'SCMP_ACT_ERRNO';
  errnoRet: number;
  args?: { index: number; value: number; valueTwo: number; op: 'SCMP_CMP_MASKED_EQ' }[];
}

export interface SeccompProfile {
  defaultAction: 'SCMP_ACT_ALLOW';
  architectures: string[];
  syscalls: SeccompRule[];
}

const EPERM = 1;
const ENOSYS = 38;

/** Syscalls blocked unless the container holds the capability (undefined: blocked for everyone). */
const BLOCKED: readonly { names: string[]; unless?: string; why: string }[] = [
  { names: ['acct'], unless: 'CAP_SYS_PACCT', why: 'process accounting is host-wide' },
  { names: ['add_key', 'keyctl', 'request_key'], why: 'the kernel keyring is not namespaced' },
  { names: ['bpf'], unless: 'CAP_SYS_ADMIN', why: 'loading BPF programs into the kernel' },
  { names: ['clock_adjtime', 'clock_settime', 'settimeofday', 'stime'], unless: 'CAP_SYS_TIME', why: 'the clock is not namespaced' },
  {
    names: ['create_module', 'delete_module', 'finit_module', 'init_module', 'get_kernel_syms', 'query_module'],
    unless: 'CAP_SYS_MODULE',
    why: 'kernel modules',
  },
  { names: ['get_mempolicy', 'mbind', 'set_mempolicy', 'move_pages'], unless: 'CAP_SYS_NICE', why: 'NUMA memory policy of the host' },
  { names: ['ioperm', 'iopl'], unless: 'CAP_SYS_RAWIO', why: 'I/O port access' },
  { names: ['kcmp', 'process_vm_readv', 'process_vm_writev', 'userfaultfd'], unless: 'CAP_SYS_PTRACE', why: 'inspecting other processes' },
  { names: ['kexec_file_load', 'kexec_load', 'reboot'], unless: 'CAP_SYS_BOOT', why: 'loading or rebooting a kernel' },
  { names: ['lookup_dcookie', 'perf_event_open', 'quotactl', 'swapon', 'swapoff'], unless: 'CAP_SYS_ADMIN', why: 'host-wide tracing, quotas, swap' },
  { names: ['mount', 'umount', 'umount2', 'pivot_root', 'fsopen', 'fsmount', 'fsconfig', 'move_mount', 'open_tree'], unless: 'CAP_SYS_ADMIN', why: 'mounting file systems' },
  { names: ['unshare', 'setns'], unless: 'CAP_SYS_ADMIN', why: 'new or other namespaces' },
  { names: ['open_by_handle_at', 'name_to_handle_at'], unless: 'CAP_DAC_READ_SEARCH', why: 'file handles escape the mount namespace' },
  { names: ['nfsservctl', '_sysctl', 'sysfs', 'uselib', 'ustat', 'vm86', 'vm86old'], why: 'obsolete' },
  { names: ['io_uring_setup', 'io_uring_enter', 'io_uring_register'], why: 'io_uring has been a frequent source of kernel exploits' },
];

/** clone's namespace flags (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET). */
const CLONE_NAMESPACE_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000];

export function seccompArchitectures(arch: string = process.arch): string[] {
  if (arch === 'x64') return ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'];
  if (arch === 'arm64') return ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'];
  if (arch === 'ia32') return ['SCMP_ARCH_X86'];
  if (arch === 'arm') return ['SCMP_ARCH_ARM'];
  return [];
}

/** The profile for a container holding `capabilities` (CAP_ names). */
export function defaultSeccompProfile(capabilities: readonly string[], arch: string = process.arch): SeccompProfile {
  const has = (cap: string | undefined): boolean => cap !== undefined && capabilities.includes(cap);
  const names = BLOCKED.filter((rule) => !has(rule.unless)).flatMap((rule) => rule.names);
  const syscalls: SeccompRule[] = [{ names, action: 'SCMP_ACT_ERRNO', errnoRet: EPERM }];
  if (!has('CAP_SYS_ADMIN')) {
    // clone with any namespace flag: one rule per flag (rules for one syscall are OR-ed).
    for (const flag of CLONE_NAMESPACE_FLAGS) {
      syscalls.push({ names: ['clone'], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM, args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }] });
    }
    // clone3 passes its flags in memory, out of a filter's sight: ENOSYS makes libc fall back to clone.
    syscalls.push({ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS });
  }
  return { defaultAction: 'SCMP_ACT_ALLOW', architectures: seccompArchitectures(arch), syscalls };
}
