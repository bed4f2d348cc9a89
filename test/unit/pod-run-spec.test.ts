import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { execPlan, shellQuote } from '../../src/agent/pods/runtime/exec.js';
import { runcContainerId, splitRuncContainerId } from '../../src/agent/pods/runtime/names.js';
import { type PodRunSpec, RunSpecError, validateRunSpec } from '../../src/agent/pods/run-spec.js';
import { withTerminal } from '../../src/agent/pod-run-spec.js';

/** pod.json's runc fields are checked before a supervisor trusts them, and the exec entry point's plans. */

const DIGEST = `sha256:${'a'.repeat(64)}`;

function runcSpec(overrides: Partial<PodRunSpec> = {}): PodRunSpec {
  return {
    uid: 'u1',
    namespace: 'default',
    name: 'web',
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 30,
    atMostOne: false,
    runtime: 'runc',
    hostname: 'web',
    runcRoot: '/var/lib/drover/agent/runc',
    containers: [
      {
        name: 'main',
        command: ['/bin/sh'],
        args: ['-c', 'sleep 1000'],
        env: { PATH: '/bin' },
        workingDir: '/',
        image: { ref: 'docker.io/library/busybox:latest', digest: DIGEST, layerDirs: ['/l/1', '/l/2'], config: { cmd: ['sh'] } },
        mounts: [{ destination: '/data', source: '/pods/u1/volumes/data', type: 'bind', readOnly: false }],
        user: { uid: 1000, gid: 1000 },
        securityContext: { readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] } },
        resources: { cpuLimitMilli: 500, memoryLimitBytes: 64 * 1024 * 1024 },
      },
    ],
    ...overrides,
  };
}

function refused(value: unknown, pattern: RegExp): void {
  assert.throws(() => validateRunSpec(JSON.parse(JSON.stringify(value)), 'pod.json'), (error: unknown) => {
    assert.ok(error instanceof RunSpecError);
    assert.match(error.message, pattern);
    return true;
  });
}

describe('pod.json runtime fields', () => {
  it('accepts a complete runc spec and a process spec without the new fields', () => {
    assert.equal(validateRunSpec(runcSpec(), 'pod.json').runtime, 'runc');
    const old = runcSpec({ runtime: undefined, hostname: undefined, runcRoot: undefined });
    delete old.containers[0]!.image;
    assert.equal(validateRunSpec(old, 'pod.json').runtime, undefined);
  });

  it('drops an image given as a string (pod.json from before images were resolved)', () => {
    const old = JSON.parse(JSON.stringify(runcSpec({ runtime: undefined })));
    old.containers[0].image = 'busybox';
    assert.equal(validateRunSpec(old, 'pod.json').containers[0]!.image, undefined);
  });

  it('refuses what a supervisor could not run', () => {
    refused(runcSpec({ runtime: 'docker' as never }), /runtime "docker" is unknown/);
    refused(runcSpec({ runcRoot: 'relative' }), /runcRoot must be an absolute path/);
    refused(runcSpec({ hostname: 'Not_A_Name' }), /hostname/);
    const noImage = runcSpec();
    delete noImage.containers[0]!.image;
    refused(noImage, /container main: image is required when runtime is runc/);
    const badDigest = runcSpec();
    badDigest.containers[0]!.image!.digest = 'sha256:xyz';
    refused(badDigest, /image.digest/);
    const relLayer = runcSpec();
    relLayer.containers[0]!.image!.layerDirs = ['layer'];
    refused(relLayer, /layerDirs must be absolute/);
    const badMount = runcSpec();
    badMount.containers[0]!.mounts = [{ destination: 'data', source: '/x', type: 'bind', readOnly: false }];
    refused(badMount, /mount destination "data" must be an absolute path/);
    const badType = runcSpec();
    badType.containers[0]!.mounts = [{ destination: '/d', source: '/x', type: 'nfs' as never, readOnly: false }];
    refused(badType, /type "nfs" is not bind or tmpfs/);
    const badUser = runcSpec();
    badUser.containers[0]!.user = { uid: -1, gid: 0 };
    refused(badUser, /numeric uid and gid/);
    const badCap = runcSpec();
    badCap.containers[0]!.securityContext = { capabilities: { add: ['NET ADMIN'] } };
    refused(badCap, /capabilities.add/);
    const badMemory = runcSpec();
    badMemory.containers[0]!.resources = { memoryLimitBytes: 0 };
    refused(badMemory, /memoryLimitBytes must be a positive number/);
    const relCwd = runcSpec();
    relCwd.containers[0]!.workingDir = 'app';
    refused(relCwd, /workingDir must be absolute/);
    const badTty = runcSpec();
    (badTty.containers[0] as { tty?: unknown }).tty = 'yes';
    refused(badTty, /tty must be a boolean/);
  });

  it("takes stdin, stdinOnce and tty from a container's spec, only when true", () => {
    assert.deepEqual(withTerminal({ name: 'a', tty: true, stdin: true, stdinOnce: true }), { stdin: true, stdinOnce: true, tty: true });
    assert.deepEqual(withTerminal({ name: 'a', tty: true }), { tty: true });
    assert.deepEqual(withTerminal({ name: 'a', tty: false, stdin: 'true', stdinOnce: true }), {});
    assert.deepEqual(withTerminal(undefined), {});
  });
});

describe('container ids', () => {
  it('split back into pod uid and container name', () => {
    const id = runcContainerId('3f2a-11', 'web-server');
    assert.equal(id, '3f2a-11_web-server');
    assert.deepEqual(splitRuncContainerId(id), { podUid: '3f2a-11', container: 'web-server' });
    assert.equal(splitRuncContainerId('nounderscore'), undefined);
  });
});

describe('exec plans', () => {
  it('runc: runc exec in the container, by its id, with --tty through script', () => {
    const spec = runcSpec();
    const plain = execPlan('/pods/u1', spec, spec.containers[0]!, ['ls', '-l'], { tty: false });
    assert.equal(plain.file, 'runc');
    assert.deepEqual(plain.args, ['--root', '/var/lib/drover/agent/runc', 'exec', 'u1_main', 'ls', '-l']);
    const tty = execPlan('/pods/u1', spec, spec.containers[0]!, ['sh', '-c', "echo 'hi'"], { tty: true });
    assert.equal(tty.file, 'script');
    assert.deepEqual(tty.args, ['-qfec', `runc --root /var/lib/drover/agent/runc exec --tty --env TERM=xterm u1_main sh -c 'echo '\\''hi'\\'''`, '/dev/null']);
    // A container that sets TERM keeps its own.
    const own = { ...spec.containers[0]!, env: { ...spec.containers[0]!.env, TERM: 'vt100' } };
    assert.equal(execPlan('/pods/u1', spec, own, ['sh'], { tty: true }).args[1], 'runc --root /var/lib/drover/agent/runc exec --tty u1_main sh');
  });

  it('process: the command itself, in the container working dir with its environment', () => {
    const spec = runcSpec({ runtime: 'process' });
    const container = { ...spec.containers[0]!, workingDir: undefined };
    const plan = execPlan('/pods/u1', spec, container, ['env'], { tty: false });
    assert.equal(plan.file, 'env');
    assert.equal(plan.cwd, '/pods/u1/work');
    assert.equal(plan.env.PATH, '/bin');
    assert.equal(plan.env.TERM, undefined);
    assert.equal(execPlan('/pods/u1', spec, container, ['sh'], { tty: true }).env.TERM, 'xterm', 'on a terminal TERM is xterm');
    assert.throws(() => execPlan('/pods/u1', spec, container, [], { tty: false }), /exec needs a command/);
  });

  it('quotes for the shell only what needs it', () => {
    assert.equal(shellQuote('/bin/ls'), '/bin/ls');
    assert.equal(shellQuote('a b'), "'a b'");
    assert.equal(shellQuote(''), "''");
  });
});
