import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ALL_CAPABILITIES, containerCapabilities, DEFAULT_CAPABILITIES } from '../../src/agent/pods/runtime/capabilities.js';
import { buildOciConfig, cpuQuota, cpuShares, MASKED_PATHS, type OciConfigInput, ociResources } from '../../src/agent/pods/runtime/oci-spec.js';
import { defaultSeccompProfile } from '../../src/agent/pods/runtime/seccomp.js';
import type { ContainerRunSpec, PodRunSpec } from '../../src/agent/pods/run-spec.js';

/** The OCI runtime config a container gets: namespaces, mounts, capabilities, seccomp, limits. */

const DIGEST = `sha256:${'b'.repeat(64)}`;

function input(container: Partial<ContainerRunSpec> = {}): OciConfigInput {
  const c: ContainerRunSpec = {
    name: 'main',
    command: ['/bin/sh'],
    args: ['-c', 'sleep 1'],
    env: { PATH: '/bin', A: 'x=y' },
    workingDir: '/srv',
    image: { ref: 'r', digest: DIGEST, layerDirs: ['/l'], config: {} },
    ...container,
  };
  const spec: PodRunSpec = {
    uid: 'u1',
    namespace: 'default',
    name: 'web-7d9',
    hostname: 'web-7d9',
    runtime: 'runc',
    runcRoot: '/r',
    containers: [c],
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 30,
    atMostOne: false,
  };
  return { spec, container: c, rootfs: 'rootfs', namespaces: { ipc: '/pods/u1/ns/ipc', uts: '/pods/u1/ns/uts' }, cgroupsPath: '/drover/u1/main', shmPath: '/pods/u1/shm' };
}

describe('OCI config', () => {
  it('process: argv, env, cwd, user, no terminal', () => {
    const config = buildOciConfig(input({ user: { uid: 1000, gid: 1000, additionalGids: [10] } }));
    assert.equal(config.ociVersion, '1.0.2');
    assert.deepEqual(config.process.args, ['/bin/sh', '-c', 'sleep 1']);
    assert.deepEqual(config.process.env, ['PATH=/bin', 'A=x=y']);
    assert.equal(config.process.cwd, '/srv');
    assert.deepEqual(config.process.user, { uid: 1000, gid: 1000, additionalGids: [10] });
    assert.equal(config.process.terminal, false);
    assert.equal(config.process.noNewPrivileges, false);
    assert.equal(buildOciConfig(input()).process.user.uid, 0);
  });

  it('tty: a terminal, TERM=xterm unless the container sets its own', () => {
    const tty = buildOciConfig(input({ tty: true }));
    assert.equal(tty.process.terminal, true);
    assert.deepEqual(tty.process.env, ['TERM=xterm', 'PATH=/bin', 'A=x=y']);
    const own = buildOciConfig(input({ tty: true, env: { TERM: 'vt100' } }));
    assert.deepEqual(own.process.env, ['TERM=vt100']);
    // /dev/pts is a devpts of its own, where runc makes the console.
    assert.ok(tty.mounts.some((m) => m.destination === '/dev/pts' && m.type === 'devpts' && m.options.includes('newinstance')));
  });

  it('namespaces: PID and mount of its own, IPC and UTS joined, the host network; hostname is the pod name', () => {
    const config = buildOciConfig(input());
    assert.deepEqual(config.linux.namespaces, [{ type: 'pid' }, { type: 'mount' }, { type: 'ipc', path: '/pods/u1/ns/ipc' }, { type: 'uts', path: '/pods/u1/ns/uts' }]);
    assert.equal(config.hostname, 'web-7d9');
    const withNet = buildOciConfig({ ...input(), namespaces: { network: '/run/netns/x' } });
    assert.deepEqual(withNet.linux.namespaces.at(-1), { type: 'network', path: '/run/netns/x' });
    assert.equal(config.linux.cgroupsPath, '/drover/u1/main');
  });

  it('mounts: the standard set, the pod /dev/shm, then pod files and volumes', () => {
    const config = buildOciConfig({
      ...input({
        mounts: [
          { destination: '/data', source: '/pods/u1/volumes/data', type: 'bind', readOnly: true },
          { destination: '/cache', source: 'tmpfs', type: 'tmpfs', readOnly: false, options: ['size=64m'] },
        ],
      }),
      podFiles: [{ destination: '/etc/hosts', source: '/pods/u1/etc/hosts', type: 'bind', readOnly: false }],
    });
    assert.deepEqual(
      config.mounts.map((m) => m.destination),
      ['/proc', '/dev', '/dev/pts', '/dev/shm', '/dev/mqueue', '/sys', '/sys/fs/cgroup', '/etc/hosts', '/data', '/cache'],
    );
    const shm = config.mounts.find((m) => m.destination === '/dev/shm')!;
    assert.equal(shm.type, 'bind');
    assert.equal(shm.source, '/pods/u1/shm');
    assert.ok(config.mounts.find((m) => m.destination === '/sys')!.options.includes('ro'));
    assert.deepEqual(config.mounts.find((m) => m.destination === '/data')!.options, ['rbind', 'rprivate', 'ro']);
    assert.deepEqual(config.mounts.find((m) => m.destination === '/cache'), { destination: '/cache', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'rw', 'size=64m'] });
    const ownShm = buildOciConfig({ ...input(), shmPath: undefined }).mounts.find((m) => m.destination === '/dev/shm')!;
    assert.equal(ownShm.type, 'tmpfs');
  });

  it('default: the 14 capabilities, masked and read-only /proc paths, seccomp, writable root', () => {
    const config = buildOciConfig(input());
    assert.equal(DEFAULT_CAPABILITIES.length, 14);
    assert.deepEqual(config.process.capabilities.bounding, [...DEFAULT_CAPABILITIES]);
    assert.deepEqual(config.process.capabilities.effective, [...DEFAULT_CAPABILITIES]);
    assert.deepEqual(config.process.capabilities.inheritable, []);
    assert.deepEqual(config.linux.maskedPaths, [...MASKED_PATHS]);
    assert.ok(config.linux.readonlyPaths!.includes('/proc/sys'));
    assert.ok(config.linux.seccomp);
    assert.equal(config.root.readonly, false);
    assert.deepEqual(config.linux.resources.devices, [{ allow: false, access: 'rwm' }]);
  });

  it('securityContext: readOnlyRootFilesystem, allowPrivilegeEscalation, capabilities, privileged, Unconfined', () => {
    assert.equal(buildOciConfig(input({ securityContext: { readOnlyRootFilesystem: true } })).root.readonly, true);
    assert.equal(buildOciConfig(input({ securityContext: { allowPrivilegeEscalation: false } })).process.noNewPrivileges, true);
    const dropped = buildOciConfig(input({ securityContext: { capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE', 'cap_net_admin'] } } }));
    assert.deepEqual(dropped.process.capabilities.bounding, ['CAP_NET_BIND_SERVICE', 'CAP_NET_ADMIN']);
    const privileged = buildOciConfig(input({ securityContext: { privileged: true } }));
    assert.equal(privileged.process.capabilities.bounding.length, ALL_CAPABILITIES.length);
    assert.equal(privileged.linux.seccomp, undefined);
    assert.equal(privileged.linux.maskedPaths, undefined);
    assert.ok(privileged.mounts.find((m) => m.destination === '/sys')!.options.includes('rw'));
    assert.deepEqual(privileged.linux.resources.devices, [{ allow: true, access: 'rwm' }]);
    assert.equal(buildOciConfig(input({ securityContext: { seccompUnconfined: true } })).linux.seccomp, undefined);
  });

  it('capabilities: drop before add, ALL either way, names with or without CAP_', () => {
    assert.deepEqual(containerCapabilities({ capabilities: { drop: ['CHOWN', 'CAP_KILL'] } }).includes('CAP_CHOWN'), false);
    assert.equal(containerCapabilities({ capabilities: { drop: ['CHOWN', 'CAP_KILL'] } }).length, 12);
    assert.deepEqual(containerCapabilities({ capabilities: { drop: ['ALL'] } }), []);
    assert.equal(containerCapabilities({ capabilities: { add: ['ALL'], drop: ['ALL'] } }).length, ALL_CAPABILITIES.length);
    assert.equal(containerCapabilities({ capabilities: { add: ['SYS_ADMIN', 'CHOWN'] } }).length, 15);
  });
});

describe('cgroup limits', () => {
  it('CPU: shares from the request (a limit alone is the request), quota from the limit, kubelet maths', () => {
    assert.equal(cpuShares(undefined), 2);
    assert.equal(cpuShares(1), 2);
    assert.equal(cpuShares(250), 256);
    assert.equal(cpuShares(1000), 1024);
    assert.equal(cpuShares(1_000_000), 262_144);
    assert.equal(cpuQuota(500), 50_000);
    assert.equal(cpuQuota(5), 1000);
    assert.deepEqual(ociResources({ cpuLimitMilli: 500 }, false).cpu, { shares: 512, quota: 50_000, period: 100_000 });
    assert.deepEqual(ociResources({ cpuRequestMilli: 100, cpuLimitMilli: 2000 }, false).cpu, { shares: 102, quota: 200_000, period: 100_000 });
    assert.deepEqual(ociResources(undefined, false).cpu, { shares: 2 });
  });

  it('memory: the limit in bytes; none without a limit', () => {
    assert.deepEqual(ociResources({ memoryLimitBytes: 64 * 1024 * 1024 }, false).memory, { limit: 67108864 });
    assert.equal(ociResources({ memoryRequestBytes: 1024 }, false).memory, undefined);
  });
});

describe('seccomp profile', () => {
  const blocked = (caps: readonly string[]): string[] => defaultSeccompProfile(caps, 'x64').syscalls.filter((r) => !r.args && r.errnoRet === 1).flatMap((r) => r.names);

  it('allows by default and blocks the documented syscalls with EPERM', () => {
    const profile = defaultSeccompProfile(DEFAULT_CAPABILITIES, 'x64');
    assert.equal(profile.defaultAction, 'SCMP_ACT_ALLOW');
    assert.deepEqual(profile.architectures, ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
    for (const name of ['mount', 'umount2', 'unshare', 'setns', 'keyctl', 'add_key', 'bpf', 'kexec_load', 'reboot', 'init_module', 'open_by_handle_at', 'clock_settime', 'io_uring_setup', 'ptrace'.replace('ptrace', 'process_vm_readv')]) {
      assert.ok(blocked(DEFAULT_CAPABILITIES).includes(name), name);
    }
    for (const name of ['read', 'write', 'ptrace', 'chown', 'personality']) assert.ok(!blocked(DEFAULT_CAPABILITIES).includes(name), name);
  });

  it('clone with a namespace flag is blocked, clone3 answers ENOSYS, unless CAP_SYS_ADMIN', () => {
    const profile = defaultSeccompProfile(DEFAULT_CAPABILITIES, 'x64');
    const clones = profile.syscalls.filter((r) => r.names.includes('clone'));
    assert.equal(clones.length, 7);
    assert.ok(clones.some((r) => r.args?.[0]?.value === 0x10000000 && r.args[0].op === 'SCMP_CMP_MASKED_EQ'));
    assert.equal(profile.syscalls.find((r) => r.names.includes('clone3'))?.errnoRet, 38);
    const admin = defaultSeccompProfile([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN'], 'x64');
    assert.equal(admin.syscalls.filter((r) => r.names.includes('clone') || r.names.includes('clone3')).length, 0);
    assert.ok(!blocked([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN']).includes('mount'));
    assert.ok(blocked([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN']).includes('keyctl'), 'the keyring stays blocked');
    assert.ok(!blocked(['CAP_SYS_TIME']).includes('settimeofday'));
  });
});
