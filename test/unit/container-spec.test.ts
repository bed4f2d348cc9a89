import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { podHostname, readImageFile, runcContainerSpec } from '../../src/agent/container-spec.js';
import type { ResolvedImage } from '../../src/agent/pods/run-spec.js';
import { CommandError } from '../../src/agent/pods/runtime/command.js';

/** A runc container's run spec from its Pod and its image, as the agent writes it into pod.json. */

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function layers(files: Record<string, string>[]): string[] {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-container-spec-'));
  dirs.push(root);
  return files.map((entries, i) => {
    const dir = path.join(root, String(i));
    for (const [file, content] of Object.entries(entries)) {
      fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
      fs.writeFileSync(path.join(dir, file), content);
    }
    fs.mkdirSync(dir, { recursive: true });
    return dir;
  });
}

const PASSWD = 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n';
const GROUP = 'root:x:0:\napp:x:1000:\nstaff:x:50:app\n';

function image(config: ResolvedImage['config'] = {}, files: Record<string, string>[] = [{ 'etc/passwd': PASSWD, 'etc/group': GROUP }]): ResolvedImage {
  return { ref: 'drover.test/app:1', digest: `sha256:${'c'.repeat(64)}`, layerDirs: layers(files), config };
}

function pod(spec: Record<string, unknown>, name = 'web-1'): KubeObject {
  return { metadata: { name, namespace: 'default', uid: 'u1' }, spec };
}

describe('hostname', () => {
  it('spec.hostname, else the pod name, at most 63 characters', () => {
    assert.equal(podHostname(pod({ hostname: 'db' })), 'db');
    assert.equal(podHostname(pod({}, `${'a'.repeat(62)}-bcd`)), 'a'.repeat(62));
  });
});

describe('image files', () => {
  it('the topmost layer that has the file wins; a non-regular file (a whiteout, a link) hides it', () => {
    const dirs = layers([{ 'etc/passwd': 'base' }, { 'etc/passwd': 'top' }]);
    assert.equal(readImageFile(dirs, 'etc/passwd'), 'top');
    assert.equal(readImageFile(dirs, 'etc/group'), undefined);
    const linked = layers([{ 'etc/passwd': 'base' }, {}]);
    fs.mkdirSync(path.join(linked[1]!, 'etc'), { recursive: true });
    fs.symlinkSync('/etc/passwd', path.join(linked[1]!, 'etc/passwd'));
    assert.equal(readImageFile(linked, 'etc/passwd'), undefined, 'a symlink is not followed onto the host');
  });
});

describe('runc container spec', () => {
  it('Entrypoint+Cmd, image env under the pod env, image WorkingDir, the image user by name', () => {
    const built = runcContainerSpec(
      pod({}),
      { name: 'main', image: 'drover.test/app:1' },
      image({ entrypoint: ['/entry'], cmd: ['serve'], env: ['MODE=image', 'PATH=/opt/bin'], workingDir: '/srv', user: 'app' }),
      { MODE: 'pod' },
    );
    assert.deepEqual([...built.command, ...built.args], ['/entry', 'serve']);
    assert.deepEqual(built.env, { PATH: '/opt/bin', HOSTNAME: 'web-1', MODE: 'pod' });
    assert.equal(built.workingDir, '/srv');
    assert.deepEqual(built.user, { uid: 1000, gid: 1000, additionalGids: [50] });
    assert.equal(built.securityContext, undefined);
    assert.equal(built.resources, undefined);
  });

  it('securityContext: the container over the pod; supplementalGroups and fsGroup; Unconfined seccomp', () => {
    const built = runcContainerSpec(
      pod({ securityContext: { runAsUser: 2000, runAsGroup: 3000, runAsNonRoot: true, supplementalGroups: [7], fsGroup: 8, seccompProfile: { type: 'Unconfined' } } }),
      {
        name: 'main',
        securityContext: { runAsUser: 2500, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
      },
      image({ cmd: ['sh'] }),
      {},
    );
    assert.deepEqual(built.user, { uid: 2500, gid: 3000, additionalGids: [7, 8] });
    assert.deepEqual(built.securityContext, {
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
      seccompUnconfined: true,
    });
  });

  it('resources in millicores and bytes', () => {
    const built = runcContainerSpec(
      pod({}),
      { name: 'main', resources: { requests: { cpu: '250m', memory: '32Mi' }, limits: { cpu: '1', memory: '64Mi' } } },
      image({ cmd: ['sh'] }),
      {},
    );
    assert.deepEqual(built.resources, { cpuRequestMilli: 250, cpuLimitMilli: 1000, memoryRequestBytes: 33554432, memoryLimitBytes: 67108864 });
  });

  it('errors carry kubelet reasons: no command, runAsNonRoot with root, an unknown user', () => {
    assert.throws(() => runcContainerSpec(pod({}), { name: 'main' }, image({}), {}), (e: unknown) => e instanceof CommandError && e.reason === 'CreateContainerError');
    assert.throws(
      () => runcContainerSpec(pod({ securityContext: { runAsNonRoot: true } }), { name: 'main' }, image({ cmd: ['sh'] }), {}),
      (e: unknown) => e instanceof CommandError && e.reason === 'CreateContainerConfigError',
    );
    assert.throws(() => runcContainerSpec(pod({}), { name: 'main' }, image({ cmd: ['sh'], user: 'nobody' }), {}), /unable to find user nobody/);
  });
});
