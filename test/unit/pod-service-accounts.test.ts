import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ApiError } from '../../src/apiserver/errors.js';
import { mountApiAccess, shouldAutomount } from '../../src/apiserver/kinds/pod-service-accounts.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { NAMESPACES, PODS, SERVICEACCOUNTS } from '../../src/client/types.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';

/** The ServiceAccount admission of pods: the mount rules (pure) and every caller meeting it (in-process). */

const MOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
type Json = Record<string, unknown>;
const sleeper = (name: string, extra: Json = {}): Json => ({ name, command: ['sleep', '1'], ...extra });

describe('kube-api-access mounting (pure)', () => {
  it('every container and init container without a mount at the path gets one; the volume only if one needed it', () => {
    const spec: Json = {
      volumes: [{ name: 'mine', emptyDir: {} }],
      initContainers: [sleeper('init')],
      containers: [sleeper('a', { volumeMounts: [{ name: 'mine', mountPath: `${MOUNT}/` }] }), sleeper('b')],
    };
    mountApiAccess(spec);
    const volumes = spec.volumes as { name: string }[];
    assert.equal(volumes.length, 2);
    const name = volumes[1]!.name;
    assert.match(name, /^kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    const mounts = (c: unknown) => (c as { volumeMounts?: unknown[] }).volumeMounts;
    assert.deepEqual(mounts((spec.initContainers as unknown[])[0]), [{ name, readOnly: true, mountPath: MOUNT }]);
    assert.deepEqual(mounts((spec.containers as unknown[])[0]), [{ name: 'mine', mountPath: `${MOUNT}/` }], 'its own mount (a trailing slash is the same path) stays');
    assert.deepEqual(mounts((spec.containers as unknown[])[1]), [{ name, readOnly: true, mountPath: MOUNT }]);

    const all: Json = { volumes: [{ name: 'mine', emptyDir: {} }], containers: [sleeper('a', { volumeMounts: [{ name: 'mine', mountPath: MOUNT }] })] };
    mountApiAccess(all);
    assert.equal((all.volumes as unknown[]).length, 1, 'no container needs it: no volume');
  });

  it('reuses a kube-api-access volume the pod already has (a manifest exported from a pod)', () => {
    const spec: Json = { volumes: [{ name: 'kube-api-access-abcde', projected: { sources: [] } }], containers: [sleeper('a')] };
    mountApiAccess(spec);
    assert.equal((spec.volumes as unknown[]).length, 1);
    assert.deepEqual((spec.containers as { volumeMounts: unknown[] }[])[0]!.volumeMounts, [{ name: 'kube-api-access-abcde', readOnly: true, mountPath: MOUNT }]);
  });

  it("automount: the pod's word, else the account's, else yes", () => {
    const sa = (value?: boolean): KubeObject => ({ metadata: { name: 'x' }, ...(value === undefined ? {} : { automountServiceAccountToken: value }) });
    assert.equal(shouldAutomount(sa(), {}), true);
    assert.equal(shouldAutomount(sa(false), {}), false);
    assert.equal(shouldAutomount(sa(false), { automountServiceAccountToken: true }), true);
    assert.equal(shouldAutomount(sa(true), { automountServiceAccountToken: false }), false);
  });
});

describe('ServiceAccount admission in-process (the server’s own controllers meet it too)', () => {
  let api: InProcessApi;
  before(async () => {
    api = await inProcessApi();
  });
  after(() => api.close());

  const pod = (name: string, spec: Json = {}, annotations?: Record<string, string>): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, ...(annotations ? { annotations } : {}) },
    spec: { containers: [sleeper('main')], ...spec },
  });

  it("defaults the account, mounts kube-api-access, copies the account's imagePullSecrets, and refuses a missing account", async () => {
    await api.client.create(SERVICEACCOUNTS, 'default', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'puller' }, imagePullSecrets: [{ name: 'regcred' }] });
    const made = await api.client.create(PODS, 'default', pod('p1', { serviceAccountName: 'puller' }));
    const spec = made.spec as { serviceAccount: string; volumes: { name: string }[]; imagePullSecrets: unknown };
    assert.equal(spec.serviceAccount, 'puller');
    assert.match(spec.volumes[0]!.name, /^kube-api-access-/);
    assert.deepEqual(spec.imagePullSecrets, [{ name: 'regcred' }]);

    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'empty' } });
    await assert.rejects(api.client.create(PODS, 'empty', pod('p2')), (error: unknown) => {
      assert.ok(error instanceof ApiError);
      assert.equal(error.code, 403);
      assert.equal(error.message, 'pods "p2" is forbidden: error looking up service account empty/default: serviceaccount "default" not found');
      return true;
    });
    const mirror = await api.client.create(PODS, 'empty', pod('p3', {}, { 'kubernetes.io/config.mirror': 'x' }));
    assert.equal((mirror.spec as Json).volumes, undefined, 'a mirror pod is left alone');
  });

  it('an update leaving out the account keeps it; a changed volume list is not touched again', async () => {
    const made = await api.client.create(PODS, 'default', pod('p4'));
    const { serviceAccountName: _a, serviceAccount: _b, ...rest } = made.spec as Json;
    const updated = await api.client.update(PODS, 'default', { ...made, spec: { ...rest, volumes: [], containers: [sleeper('main')] } });
    assert.equal((updated.spec as Json).serviceAccountName, 'default');
    assert.deepEqual((updated.spec as Json).volumes, []);
  });
});
