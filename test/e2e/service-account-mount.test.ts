import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * In-cluster credentials as in Kubernetes, end to end with a real server and agent (process
 * pods): the ServiceAccount admission gives a pod that names no account `default` and mounts
 * kube-api-access (token, ca.crt, namespace) at /var/run/secrets/kubernetes.io/serviceaccount,
 * with which a client in the pod verifies the server and gets 200 where RBAC allows and 403 where
 * it does not; automountServiceAccountToken false (pod, account) is honoured; a missing account
 * is refused; the root-CA publisher keeps kube-root-ca.crt in every namespace.
 */

const NODE = 'samount1';
const NS = 'sa-e2e';
const CEILING_MS = 60_000;
const MOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
const VOLUME_NAME = /^kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}$/;

type Json = Record<string, unknown>;
interface PodSpec {
  serviceAccountName?: string;
  serviceAccount?: string;
  volumes?: { name: string }[];
  containers: { name: string; volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[] }[];
  initContainers?: { name: string; volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[] }[];
}
interface ConfigMap {
  metadata: { uid: string; resourceVersion: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

describe('ServiceAccount admission and kube-root-ca.crt with a real agent', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;

  before(async () => {
    work = tempDir('samount');
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    await startAgent({ server, name: NODE });
    await waitForState(server, NODE, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  const pod = (name: string, spec: Json, metadata: Json = {}): Json => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, ...metadata },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }], ...spec },
  });

  async function create(namespace: string, body: Json): Promise<PodSpec> {
    const res = await request(server, 'POST', `/api/v1/namespaces/${namespace}/pods`, { body });
    assert.equal(res.status, 201, res.text);
    return (res.json as { spec: PodSpec }).spec;
  }

  async function post(path: string, body: Json): Promise<void> {
    const res = await request(server, 'POST', path, { body });
    assert.equal(res.status, 201, res.text);
  }

  function rootCa(namespace: string): Promise<ConfigMap | undefined> {
    return request(server, 'GET', `/api/v1/namespaces/${namespace}/configmaps/kube-root-ca.crt`).then((res) =>
      res.status === 200 ? (res.json as ConfigMap) : undefined,
    );
  }

  it('kube-root-ca.crt holds the server CA in a new namespace, and comes back after deletion and after an edit', async () => {
    await post('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'rootca' } });
    const first = await eventually(() => rootCa('rootca'), 'kube-root-ca.crt in a new namespace', CEILING_MS);
    assert.deepEqual(first.data, { 'ca.crt': server.caPem }, 'the CA a client needs to verify the API server');
    assert.ok(first.metadata.annotations?.['kubernetes.io/description']);
    assert.ok(await rootCa('default'), 'in the built-in namespaces too');
    assert.ok(await rootCa('kube-system'));

    const deleted = await request(server, 'DELETE', '/api/v1/namespaces/rootca/configmaps/kube-root-ca.crt');
    assert.equal(deleted.status, 200, deleted.text);
    const again = await eventually(async () => {
      const cm = await rootCa('rootca');
      return cm && cm.metadata.uid !== first.metadata.uid ? cm : undefined;
    }, 'kube-root-ca.crt created again', CEILING_MS);
    assert.deepEqual(again.data, { 'ca.crt': server.caPem });

    const edited = await request(server, 'PATCH', '/api/v1/namespaces/rootca/configmaps/kube-root-ca.crt', {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { data: { 'ca.crt': 'not a CA', extra: 'x' } },
    });
    assert.equal(edited.status, 200, edited.text);
    await eventually(async () => {
      const cm = await rootCa('rootca');
      return cm && cm.data?.['ca.crt'] === server.caPem && Object.keys(cm.data).length === 1 ? cm : undefined;
    }, 'the edit undone', CEILING_MS);
  });

  it('a pod naming no account, created right after its namespace, runs as default with kube-api-access; its client verifies the server and gets 200 and 403', async () => {
    // The namespace, its RBAC and the pod at once, as `kubectl apply -f` of all three does: the
    // default account is made by a controller a moment later, and admission waits for it as
    // kube-apiserver does. RBAC: the account may list pods in its namespace, nothing else.
    await post('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await post(`/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/roles`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'pod-reader' },
      rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['list'] }],
    });
    await post(`/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/rolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'pod-reader' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'pod-reader' },
      subjects: [{ kind: 'ServiceAccount', name: 'default', namespace: NS }],
    });
    const script = [
      `D="$DROVER_CONTAINER_ROOT${MOUNT}"`,
      'T=$(cat "$D/token"); N=$(cat "$D/namespace")',
      `call() { curl -s -o /dev/null -w '%{http_code}' --cacert "$D/ca.crt" -H "Authorization: Bearer $T" "https://127.0.0.1:${server.port}$1"; }`,
      'echo "NS=$N ALLOWED=$(call /api/v1/namespaces/$N/pods) FORBIDDEN=$(call /api/v1/namespaces/kube-system/secrets) DONE"',
      'exec sleep 3600',
    ].join('\n');
    const spec = await create(
      NS,
      pod('client', {
        initContainers: [{ name: 'init', image: 'busybox', command: ['sh', '-c', `test -s "$DROVER_CONTAINER_ROOT${MOUNT}/token"`] }],
        containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', script] }],
      }),
    );
    assert.equal(spec.serviceAccountName, 'default');
    assert.equal(spec.serviceAccount, 'default', 'the deprecated alias in step');
    assert.equal(spec.volumes?.length, 1);
    const volume = spec.volumes![0]!;
    assert.match(volume.name, VOLUME_NAME);
    assert.deepEqual(volume, {
      name: volume.name,
      projected: {
        defaultMode: 420,
        sources: [
          { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
          { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
          { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
        ],
      },
    });
    for (const container of [...spec.containers, ...(spec.initContainers ?? [])]) {
      assert.deepEqual(container.volumeMounts, [{ name: volume.name, readOnly: true, mountPath: MOUNT }], container.name);
    }
    const line = await eventually(async () => {
      const res = await request(server, 'GET', `/api/v1/namespaces/${NS}/pods/client/log?container=main`);
      return res.status === 200 && res.text.includes('DONE') ? res.text.trim() : undefined;
    }, 'the client in the pod to report', CEILING_MS);
    assert.equal(line, `NS=${NS} ALLOWED=200 FORBIDDEN=403 DONE`);
  });

  it('automountServiceAccountToken: false on the pod, or on the account unless the pod says true, mounts nothing', async () => {
    const none = await create(NS, pod('no-mount', { automountServiceAccountToken: false }));
    assert.equal(none.volumes, undefined);
    assert.equal(none.containers[0]!.volumeMounts, undefined);
    assert.equal(none.serviceAccountName, 'default');

    await post(`/api/v1/namespaces/${NS}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'quiet' }, automountServiceAccountToken: false });
    const quiet = await create(NS, pod('quiet', { serviceAccountName: 'quiet' }));
    assert.equal(quiet.volumes, undefined);
    assert.equal(quiet.containers[0]!.volumeMounts, undefined);
    const overridden = await create(NS, pod('loud', { serviceAccount: 'quiet', automountServiceAccountToken: true }));
    assert.equal(overridden.serviceAccountName, 'quiet', 'the deprecated field names the account');
    assert.match(overridden.volumes?.[0]?.name ?? '', VOLUME_NAME);

    // A container mounting something of its own at the path keeps it; the others get the volume.
    const own = await create(
      NS,
      pod('own-mount', {
        volumes: [{ name: 'mine', emptyDir: {} }],
        containers: [
          { name: 'a', image: 'busybox', command: ['sleep', '3600'], volumeMounts: [{ name: 'mine', mountPath: MOUNT }] },
          { name: 'b', image: 'busybox', command: ['sleep', '3600'] },
        ],
      }),
    );
    assert.deepEqual(own.containers[0]!.volumeMounts, [{ name: 'mine', mountPath: MOUNT }]);
    assert.match(own.containers[1]!.volumeMounts?.[0]?.name ?? '', VOLUME_NAME);
    assert.equal(own.volumes?.length, 2);
  });

  it('a pod naming a missing account is refused with 403 and kube-apiserver’s message; a workload’s pods get the volume too', async () => {
    const res = await request(server, 'POST', `/api/v1/namespaces/${NS}/pods`, { body: pod('orphan', { serviceAccountName: 'ghost' }) });
    assert.equal(res.status, 403, res.text);
    assert.equal(
      (res.json as { message: string }).message,
      `pods "orphan" is forbidden: error looking up service account ${NS}/ghost: serviceaccount "ghost" not found`,
    );
    const bad = await request(server, 'POST', `/api/v1/namespaces/${NS}/pods`, { body: pod('badname', { serviceAccountName: 'Not/Valid' }) });
    assert.equal(bad.status, 422, bad.text);

    await post(`/apis/apps/v1/namespaces/${NS}/replicasets`, {
      apiVersion: 'apps/v1',
      kind: 'ReplicaSet',
      metadata: { name: 'rs' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'rs' } },
        template: { metadata: { labels: { app: 'rs' } }, spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] } },
      },
    });
    const made = await eventually(async () => {
      const list = await request(server, 'GET', `/api/v1/namespaces/${NS}/pods?labelSelector=app%3Drs`);
      return (list.json as { items: { spec: PodSpec }[] }).items[0];
    }, "the ReplicaSet's pod", CEILING_MS);
    assert.match(made.spec.volumes?.[0]?.name ?? '', VOLUME_NAME);
  });
});
