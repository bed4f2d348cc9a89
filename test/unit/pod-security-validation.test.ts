import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validatePodSpec } from '../../src/apiserver/kinds/pods.js';
import { bytesOf, cpuMillis, parseQuantity } from '../../src/apiserver/quantity.js';

/** Admission of what containers need: the command rule per runtime, securityContext, resources. */

function causes(spec: Record<string, unknown>, defaultRuntimeClass?: string): string[] {
  return validatePodSpec(spec, 'spec', defaultRuntimeClass).map((c) => `${c.field}: ${c.message}`);
}

const container = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ name: 'c', image: 'busybox', ...extra });

describe('command per runtime', () => {
  it('process runtime (the default here, or named): a command (or args) is required', () => {
    assert.match(causes({ containers: [container()] }).join('\n'), /spec\.containers\[0\]\.command: Required value: the process runtime runs each container as a local process/);
    assert.match(causes({ runtimeClassName: 'process', containers: [container()] }, 'runc').join('\n'), /command: Required value/);
    assert.deepEqual(causes({ containers: [container({ args: ['sleep', '1'] })] }), []);
  });

  it('runc (named, or the cluster default): no command needed, an image is', () => {
    assert.deepEqual(causes({ runtimeClassName: 'runc', containers: [container()] }), []);
    assert.deepEqual(causes({ containers: [container()] }, 'runc'), []);
    assert.deepEqual(causes({ containers: [{ name: 'c' }] }, 'runc'), ['spec.containers[0].image: Required value']);
  });
});

describe('securityContext', () => {
  const run = (sc: unknown, pod?: unknown): string =>
    causes({ runtimeClassName: 'runc', ...(pod ? { securityContext: pod } : {}), containers: [container({ securityContext: sc })] }).join('\n');

  it('accepts what runtimes honour', () => {
    assert.equal(
      run(
        { runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE', 'CAP_CHOWN'] }, seccompProfile: { type: 'RuntimeDefault' } },
        { runAsUser: 2000, fsGroup: 3000, supplementalGroups: [4000] },
      ),
      '',
    );
    assert.equal(run({ privileged: true }), '');
  });

  it('refuses bad ids, types, capability names and contradictions with the field', () => {
    assert.match(run({ runAsUser: -1 }), /spec\.containers\[0\]\.securityContext\.runAsUser: Invalid value: -1: must be between 0 and 2147483647/);
    assert.match(run({ runAsGroup: 1.5 }), /securityContext\.runAsGroup: Invalid value/);
    assert.match(run({ privileged: 'yes' }), /securityContext\.privileged: Invalid value: "yes": must be a boolean/);
    assert.match(run({ capabilities: { add: ['NET_ADMINN'] } }), /securityContext\.capabilities\.add\[0\]: Unsupported value: "NET_ADMINN": not a Linux capability/);
    assert.match(run({ capabilities: { drop: 'ALL' } }), /capabilities\.drop: must be a list/);
    assert.match(run({ privileged: true, allowPrivilegeEscalation: false }), /allowPrivilegeEscalation: Invalid value: false: cannot set `allowPrivilegeEscalation` to false and `privileged` to true/);
    assert.match(run({ allowPrivilegeEscalation: false, capabilities: { add: ['SYS_ADMIN'] } }), /capabilities\.Add` CAP_SYS_ADMIN/);
    assert.match(run({ runAsNonRoot: true, runAsUser: 0 }), /runAsUser: Invalid value: 0: runAsNonRoot is true/);
    assert.match(run({ seccompProfile: { type: 'Localhost', localhostProfile: 'x.json' } }), /seccompProfile\.type: Unsupported value: "Localhost"/);
    assert.match(run({ procMount: 'Unmasked' }), /procMount: Unsupported value/);
    assert.match(run(undefined, { runAsUser: 'root' }), /spec\.securityContext\.runAsUser: Invalid value/);
    assert.match(run(undefined, { supplementalGroups: [-5] }), /spec\.securityContext\.supplementalGroups\[0\]/);
    assert.match(run('x'), /securityContext: must be an object/);
  });
});

describe('resources', () => {
  const run = (resources: unknown): string => causes({ runtimeClassName: 'runc', containers: [container({ resources })] }).join('\n');

  it('accepts quantities with requests at most the limits', () => {
    assert.equal(run({ requests: { cpu: '100m', memory: '32Mi' }, limits: { cpu: '0.5', memory: '64Mi', 'example.com/dongle': '1' } }), '');
  });

  it('refuses what is not a quantity and requests above limits', () => {
    assert.match(run({ limits: { memory: '64MB' } }), /resources\.limits\[memory\]: Invalid value: "64MB": must be a quantity/);
    assert.match(run({ limits: { cpu: '-1' } }), /limits\[cpu\]: Invalid value: "-1": must be greater than or equal to 0/);
    assert.match(run({ requests: { memory: '1Gi' }, limits: { memory: '64Mi' } }), /requests\[memory\]: Invalid value: "1Gi": must be less than or equal to memory limit of "64Mi"/);
    assert.match(run({ limits: 'lots' }), /resources\.limits: must be an object/);
  });

  it('quantities: binary and decimal suffixes, exponents, millicores', () => {
    assert.equal(bytesOf('64Mi'), 67108864);
    assert.equal(bytesOf('1G'), 1e9);
    assert.equal(bytesOf('1e3'), 1000);
    assert.equal(cpuMillis('250m'), 250);
    assert.equal(cpuMillis('1.5'), 1500);
    assert.equal(cpuMillis(2), 2000);
    assert.equal(cpuMillis('1u'), 1, 'rounded up to a millicore');
    for (const bad of ['', 'abc', '1MB', '1.2.3', 'Mi', ' 1']) assert.equal(parseQuantity(bad), undefined, bad);
  });
});
