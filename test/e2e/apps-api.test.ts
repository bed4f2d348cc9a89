import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { DEPLOYMENT_PRINTER, REPLICASET_PRINTER, STATEFULSET_PRINTER } from '../../src/apiserver/kinds/workloads.js';
import { type KubectlClient, type KubectlResult, kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTables, rowNamed, type Table } from '../helpers/kubectl-table.js';
import { type ApiResponse, type ServerProcess, cleanup, request, startServer, tempDir } from '../helpers/server.js';

/**
 * apps/v1 on the API server: Deployment, ReplicaSet and StatefulSet through real kubectl binaries
 * (the machine's and Debian's 1.20) against a real `drover server` with no agent, plus the Scale
 * subresource, defaults, validation and generation over raw HTTP. Controllers may run in the
 * server and write status; assertions read only what the API itself decides.
 */

type Obj = KubeObject & { spec?: Record<string, unknown>; status?: Record<string, unknown> };

const COMMAND_MESSAGE =
  'Required value: the process runtime runs each container as a local process and does not use its image; set command (or args, which then run as the command), or run the pod under runc (runtimeClassName: runc)';

function deploymentYaml(ns: string, name: string, options: { image?: string; selector?: string; extraContainers?: string; replicas?: number } = {}): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${name}
  namespace: ${ns}
spec:
${options.replicas !== undefined ? `  replicas: ${options.replicas}\n` : ''}  selector:
    matchLabels:
      app: ${options.selector ?? name}
  template:
    metadata:
      labels:
        app: ${name}
    spec:
      containers:
      - name: main
        image: ${options.image ?? 'nginx:1.27'}
        command: ["sleep", "3600"]
${options.extraContainers ?? ''}`;
}

function replicaSetYaml(ns: string, name: string): string {
  return `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: ${name}
  namespace: ${ns}
spec:
  selector:
    matchExpressions:
    - {key: app, operator: In, values: [${name}, other]}
  template:
    metadata:
      labels:
        app: ${name}
    spec:
      containers:
      - name: worker
        command: ["sleep", "3600"]
`;
}

function statefulSetYaml(ns: string, name: string): string {
  return `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ${name}
  namespace: ${ns}
spec:
  replicas: 2
  selector:
    matchLabels:
      app: ${name}
  template:
    metadata:
      labels:
        app: ${name}
    spec:
      containers:
      - name: db
        image: postgres:16
        command: ["sleep", "3600"]
      - name: exporter
        image: exporter:1
        command: ["sleep", "3600"]
`;
}


function expectStatus(res: ApiResponse, status: number, what: string): Obj {
  assert.equal(res.status, status, `${what}: expected HTTP ${status}, got ${res.status}: ${res.text}`);
  return res.json as Obj;
}

describe('apps/v1 workloads on the API server', () => {
  let server: ServerProcess;
  const dirs: string[] = [];

  const get = async (urlPath: string): Promise<Obj> => expectStatus(await request(server, 'GET', urlPath), 200, `GET ${urlPath}`);
  const createNamespace = async (name: string): Promise<void> => {
    expectStatus(await request(server, 'POST', '/api/v1/namespaces', { body: { metadata: { name } } }), 201, `namespace ${name}`);
  };

  before(async () => {
    server = await startServer({ handMadeNodes: true });
  });

  after(async () => {
    await cleanup(...dirs);
  });

  kubectlClients().forEach((client: KubectlClient, index) => {
    describe(client.name, () => {
      const ns = `apps-${index}`;
      let work: string;
      const kubectl = (args: string[]): Promise<KubectlResult> =>
        runKubectl(client, server.kubeconfig, tempDir('apps-cache'), args);
      const file = (name: string, content: string): string => {
        const target = path.join(work, name);
        fs.writeFileSync(target, content);
        return target;
      };

      before(async () => {
        work = tempDir('apps-work');
        dirs.push(work);
        await createNamespace(ns);
      });

      it('apply -f creates a Deployment, a ReplicaSet and a StatefulSet with their defaults', async () => {
        const manifests = [deploymentYaml(ns, 'web'), replicaSetYaml(ns, 'batch'), statefulSetYaml(ns, 'db')].join('---\n');
        const result = await kubectl(['apply', '-f', file('workloads.yaml', manifests)]);
        assertOk(result, 'apply workloads.yaml');
        assert.deepEqual(result.stdout.trim().split('\n'), [
          'deployment.apps/web created',
          'replicaset.apps/batch created',
          'statefulset.apps/db created',
        ]);

        const deployment = await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`);
        assert.equal(deployment.metadata.generation, 1);
        assert.equal(deployment.spec!.replicas, 1);
        assert.deepEqual(deployment.spec!.strategy, {
          type: 'RollingUpdate',
          rollingUpdate: { maxUnavailable: '25%', maxSurge: '25%' },
        });
        assert.equal(deployment.spec!.revisionHistoryLimit, 10);
        assert.equal(deployment.spec!.progressDeadlineSeconds, 600);
        const podSpec = (deployment.spec!.template as { spec: Record<string, unknown> }).spec;
        assert.equal(podSpec.restartPolicy, 'Always');
        assert.equal(podSpec.terminationGracePeriodSeconds, 30);
        assert.equal(podSpec.dnsPolicy, 'ClusterFirst');
        assert.equal(podSpec.schedulerName, 'default-scheduler');
        assert.deepEqual(podSpec.containers, [
          { name: 'main', image: 'nginx:1.27', command: ['sleep', '3600'], terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent' },
        ]);

        const replicaSet = await get(`/apis/apps/v1/namespaces/${ns}/replicasets/batch`);
        assert.equal(replicaSet.spec!.replicas, 1);
        const worker = (replicaSet.spec!.template as { spec: { containers: Record<string, unknown>[] } }).spec.containers[0]!;
        assert.equal(worker.imagePullPolicy, undefined, 'no image, so no pull policy');

        const statefulSet = await get(`/apis/apps/v1/namespaces/${ns}/statefulsets/db`);
        assert.equal(statefulSet.spec!.replicas, 2);
        assert.equal(statefulSet.spec!.podManagementPolicy, 'OrderedReady');
        assert.deepEqual(statefulSet.spec!.updateStrategy, { type: 'RollingUpdate', rollingUpdate: { partition: 0 } });
        assert.equal(statefulSet.spec!.serviceName, undefined, 'serviceName may be left out');
      });

      it('get deploy,rs,sts prints the kube-apiserver columns, and -o wide adds containers, images, selector', async () => {
        let result = await kubectl(['get', 'deploy,rs,sts', '-n', ns]);
        assertOk(result, 'get deploy,rs,sts');
        let tables = parseTables(result.stdout);
        const byFirstHeader = (tabs: Table[], rowName: string): Table | undefined =>
          tabs.find((t) => t.rows.some((r) => r.NAME === rowName));
        let deployments = byFirstHeader(tables, 'deployment.apps/web');
        assert.deepEqual(deployments?.headers, ['NAME', 'READY', 'UP-TO-DATE', 'AVAILABLE', 'AGE']);
        assert.match(rowNamed(deployments, 'deployment.apps/web').READY!, /^\d+\/1$/);
        let replicaSets = byFirstHeader(tables, 'replicaset.apps/batch');
        assert.deepEqual(replicaSets?.headers, ['NAME', 'DESIRED', 'CURRENT', 'READY', 'AGE']);
        assert.equal(rowNamed(replicaSets, 'replicaset.apps/batch').DESIRED, '1');
        let statefulSets = byFirstHeader(tables, 'statefulset.apps/db');
        assert.deepEqual(statefulSets?.headers, ['NAME', 'READY', 'AGE']);
        assert.equal(rowNamed(statefulSets, 'statefulset.apps/db').READY, '0/2');

        result = await kubectl(['get', 'deploy,rs,sts', '-n', ns, '-o', 'wide']);
        assertOk(result, 'get deploy,rs,sts -o wide');
        tables = parseTables(result.stdout);
        deployments = byFirstHeader(tables, 'deployment.apps/web');
        assert.deepEqual(deployments?.headers, ['NAME', 'READY', 'UP-TO-DATE', 'AVAILABLE', 'AGE', 'CONTAINERS', 'IMAGES', 'SELECTOR']);
        const web = rowNamed(deployments, 'deployment.apps/web');
        assert.equal(web.CONTAINERS, 'main');
        assert.equal(web.IMAGES, 'nginx:1.27');
        assert.equal(web.SELECTOR, 'app=web');
        replicaSets = byFirstHeader(tables, 'replicaset.apps/batch');
        assert.deepEqual(replicaSets?.headers, ['NAME', 'DESIRED', 'CURRENT', 'READY', 'AGE', 'CONTAINERS', 'IMAGES', 'SELECTOR']);
        assert.equal(rowNamed(replicaSets, 'replicaset.apps/batch').SELECTOR, 'app in (batch,other)');
        statefulSets = byFirstHeader(tables, 'statefulset.apps/db');
        assert.deepEqual(statefulSets?.headers, ['NAME', 'READY', 'AGE', 'CONTAINERS', 'IMAGES']);
        const db = rowNamed(statefulSets, 'statefulset.apps/db');
        assert.equal(db.CONTAINERS, 'db,exporter');
        assert.equal(db.IMAGES, 'postgres:16,exporter:1');

        // The short names and the `all` category come from discovery.
        result = await kubectl(['get', 'all', '-n', ns, '-o', 'name']);
        assertOk(result, 'get all');
        for (const name of ['deployment.apps/web', 'replicaset.apps/batch', 'statefulset.apps/db']) {
          assert.ok(result.stdout.split('\n').includes(name), `${name} in get all: ${result.stdout}`);
        }
      });

      it('refuses a selector that does not match the template, and a container without a command', async () => {
        let result = await kubectl(['apply', '-f', file('bad-selector.yaml', deploymentYaml(ns, 'mismatch', { selector: 'other' }))]);
        assert.notEqual(result.code, 0, `apply succeeded: ${result.stdout}`);
        assert.match(result.stderr, /spec\.template\.metadata\.labels: Invalid value: .*selector does not match template labels/);
        assert.equal((await request(server, 'GET', `/apis/apps/v1/namespaces/${ns}/deployments/mismatch`)).status, 404);

        const noCommand = `apiVersion: v1
kind: Pod
metadata:
  name: no-command
  namespace: ${ns}
spec:
  containers:
  - name: main
    image: nginx:1.27
`;
        result = await kubectl(['create', '-f', file('no-command.yaml', noCommand)]);
        assert.notEqual(result.code, 0, `create succeeded: ${result.stdout}`);
        assert.ok(
          result.stderr.includes(`spec.containers[0].command: ${COMMAND_MESSAGE}`),
          `the message names the field and the fix: ${result.stderr}`,
        );
      });

      it('kubectl scale changes spec.replicas through the scale subresource and bumps generation', async () => {
        const before = await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`);
        // -v=8 logs each request with its headers: kubectl sends a JSON merge patch of the Scale
        // (never protobuf) and needs no /apis/autoscaling/v1 discovery.
        let result = await kubectl(['scale', '-n', ns, 'deployment/web', '--replicas=5', '-v=8']);
        assertOk(result, 'scale deployment');
        assert.equal(result.stdout.trim(), 'deployment.apps/web scaled');
        assert.match(result.stderr, /PATCH https:\/\/\S+\/apis\/apps\/v1\/namespaces\/\S+\/deployments\/web\/scale/);
        assert.match(result.stderr, /Content-Type: application\/merge-patch\+json/);
        assert.doesNotMatch(result.stderr, /application\/vnd\.kubernetes\.protobuf\s*$/m);
        assert.doesNotMatch(result.stderr, /\/apis\/autoscaling/);
        const after = await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`);
        assert.equal(after.spec!.replicas, 5);
        assert.equal(after.metadata.generation, before.metadata.generation! + 1);

        // With a precondition kubectl reads the Scale and PUTs it back.
        result = await kubectl(['scale', '-n', ns, 'deployment/web', '--current-replicas=5', '--replicas=3', '-v=8']);
        assertOk(result, 'scale deployment --current-replicas');
        assert.match(result.stderr, /PUT https:\/\/\S+\/deployments\/web\/scale/);
        assert.doesNotMatch(result.stderr, /Content-Type: application\/vnd\.kubernetes\.protobuf/);
        assert.equal((await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`)).spec!.replicas, 3);
        result = await kubectl(['scale', '-n', ns, 'deployment/web', '--current-replicas=7', '--replicas=1']);
        assert.notEqual(result.code, 0, 'a wrong --current-replicas is refused');
        assert.equal((await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`)).spec!.replicas, 3);

        result = await kubectl(['scale', '-n', ns, 'statefulset/db', '--replicas=4']);
        assertOk(result, 'scale statefulset');
        assert.equal(result.stdout.trim(), 'statefulset.apps/db scaled');
        const sts = await get(`/apis/apps/v1/namespaces/${ns}/statefulsets/db`);
        assert.equal(sts.spec!.replicas, 4);
        assert.equal(sts.metadata.generation, 2);

        result = await kubectl(['scale', '-n', ns, 'rs/batch', '--replicas=0']);
        assertOk(result, 'scale replicaset');
        assert.equal((await get(`/apis/apps/v1/namespaces/${ns}/replicasets/batch`)).spec!.replicas, 0);
      });

      it('apply again with a changed template merges containers by name and keeps defaults', async () => {
        const side = `      - name: side
        image: side:1
        command: ["sleep", "60"]
`;
        let result = await kubectl(['apply', '-f', file('web-v2.yaml', deploymentYaml(ns, 'web', { image: 'nginx:1.28', extraContainers: side, replicas: 3 }))]);
        assertOk(result, 'second apply');
        assert.equal(result.stdout.trim(), 'deployment.apps/web configured');
        let deployment = await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`);
        const generation = deployment.metadata.generation!;
        let containers = (deployment.spec!.template as { spec: { containers: Record<string, unknown>[] } }).spec.containers;
        assert.deepEqual(containers.map((c) => c.name), ['main', 'side']);
        assert.equal(containers[0]!.image, 'nginx:1.28');
        assert.equal(containers[0]!.terminationMessagePolicy, 'File', 'defaults survive the patch');
        assert.deepEqual(containers[1]!.command, ['sleep', '60']);

        // The last applied configuration lists `side`; leaving it out removes it.
        result = await kubectl(['apply', '-f', file('web-v3.yaml', deploymentYaml(ns, 'web', { image: 'nginx:1.28', replicas: 3 }))]);
        assertOk(result, 'third apply');
        deployment = await get(`/apis/apps/v1/namespaces/${ns}/deployments/web`);
        containers = (deployment.spec!.template as { spec: { containers: Record<string, unknown>[] } }).spec.containers;
        assert.deepEqual(containers.map((c) => c.name), ['main']);
        assert.equal(deployment.metadata.generation, generation + 1);
        assert.equal(deployment.spec!.revisionHistoryLimit, 10);
      });

      it('delete removes workloads at once', async () => {
        const result = await kubectl(['delete', '-n', ns, 'deployment/web', 'rs/batch', 'sts/db']);
        assertOk(result, 'delete workloads');
        for (const p of ['deployments/web', 'replicasets/batch', 'statefulsets/db']) {
          assert.equal((await request(server, 'GET', `/apis/apps/v1/namespaces/${ns}/${p}`)).status, 404, p);
        }
      });
    });
  });

  describe('over the API', () => {
    const ns = 'apps-api';
    const base = `/apis/apps/v1/namespaces/${ns}`;
    const deployment = (name: string, extra: Record<string, unknown> = {}): Obj => ({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name },
      spec: {
        replicas: 2,
        selector: { matchLabels: { app: name }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['web', 'api'] }] },
        template: {
          metadata: { labels: { app: name, tier: 'web' } },
          spec: { containers: [{ name: 'main', command: ['sleep', '3600'] }] },
        },
        ...extra,
      },
    });
    const patchJson = async (urlPath: string, type: string, body: unknown): Promise<ApiResponse> =>
      request(server, 'PATCH', urlPath, { headers: { 'Content-Type': type }, rawBody: JSON.stringify(body) });

    before(async () => {
      await createNamespace(ns);
    });

    it('discovery lists the apps kinds with status and scale; OpenAPI has their PATCH operations', async () => {
      const list = await get('/apis/apps/v1');
      const resources = new Map((list.resources as unknown as { name: string }[]).map((r) => [r.name, r as Record<string, unknown>]));
      for (const [plural, short] of [['deployments', 'deploy'], ['replicasets', 'rs'], ['statefulsets', 'sts']] as const) {
        assert.deepEqual(resources.get(plural)?.shortNames, [short]);
        assert.deepEqual(resources.get(plural)?.categories, ['all']);
        assert.deepEqual(resources.get(`${plural}/status`)?.verbs, ['get', 'patch', 'update']);
        const scale = resources.get(`${plural}/scale`);
        assert.deepEqual(
          { group: scale?.group, version: scale?.version, kind: scale?.kind, verbs: scale?.verbs },
          { group: 'autoscaling', version: 'v1', kind: 'Scale', verbs: ['get', 'patch', 'update'] },
        );
      }
      const index = JSON.parse((await request(server, 'GET', '/openapi/v3')).text) as { paths: Record<string, { serverRelativeURL: string }> };
      const doc = JSON.parse((await request(server, 'GET', index.paths['apis/apps/v1']!.serverRelativeURL)).text) as {
        paths: Record<string, { patch?: { parameters?: { name: string }[]; 'x-kubernetes-group-version-kind'?: unknown } }>;
      };
      for (const [plural, kind] of [['deployments', 'Deployment'], ['replicasets', 'ReplicaSet'], ['statefulsets', 'StatefulSet']]) {
        const patch = doc.paths[`/apis/apps/v1/namespaces/{namespace}/${plural}/{name}`]?.patch;
        assert.deepEqual(patch?.['x-kubernetes-group-version-kind'], { group: 'apps', version: 'v1', kind });
        assert.ok(patch?.parameters?.some((p) => p.name === 'fieldValidation'));
      }
    });

    it('serves the Scale of a workload and writes only spec.replicas through it', async () => {
      const created = expectStatus(await request(server, 'POST', `${base}/deployments`, { body: deployment('scaled') }), 201, 'create');
      // Controllers may write the deployment's status meanwhile: compare with a parent read that
      // did not change around the Scale read.
      let scale: Obj | undefined;
      let parent: Obj | undefined;
      for (let attempt = 0; attempt < 20 && !scale; attempt++) {
        const first = await get(`${base}/deployments/scaled`);
        const read = await get(`${base}/deployments/scaled/scale`);
        const second = await get(`${base}/deployments/scaled`);
        if (first.metadata.resourceVersion === second.metadata.resourceVersion) {
          scale = read;
          parent = first;
        }
      }
      assert.ok(scale && parent, 'a Scale read between two equal reads of its deployment');
      assert.deepEqual(scale, {
        kind: 'Scale',
        apiVersion: 'autoscaling/v1',
        metadata: {
          name: 'scaled',
          namespace: ns,
          uid: created.metadata.uid,
          resourceVersion: parent.metadata.resourceVersion,
          creationTimestamp: created.metadata.creationTimestamp,
        },
        spec: { replicas: 2 },
        status: { replicas: (parent.status?.replicas as number | undefined) ?? 0, selector: 'app=scaled,tier in (api,web)' },
      });

      const put = expectStatus(
        await request(server, 'PUT', `${base}/deployments/scaled/scale`, {
          body: { kind: 'Scale', apiVersion: 'autoscaling/v1', metadata: { name: 'scaled' }, spec: { replicas: 4 } },
        }),
        200,
        'PUT scale',
      );
      assert.equal((put.spec as { replicas: number }).replicas, 4);
      parent = await get(`${base}/deployments/scaled`);
      assert.equal(parent.spec!.replicas, 4);
      assert.equal(parent.metadata.generation, 2, 'a scale write is a spec change');
      assert.ok(Number(parent.metadata.resourceVersion) >= Number(put.metadata.resourceVersion), 'the Scale carries the write');

      expectStatus(await patchJson(`${base}/deployments/scaled/scale`, 'application/strategic-merge-patch+json', { spec: { replicas: 6 } }), 200, 'SMP scale');
      expectStatus(await patchJson(`${base}/deployments/scaled/scale`, 'application/json-patch+json', [{ op: 'replace', path: '/spec/replicas', value: 7 }]), 200, 'JSON patch scale');
      parent = await get(`${base}/deployments/scaled`);
      assert.equal(parent.spec!.replicas, 7);
      assert.equal(parent.metadata.generation, 4);

      const negative = expectStatus(await patchJson(`${base}/deployments/scaled/scale`, 'application/merge-patch+json', { spec: { replicas: -1 } }), 422, 'negative');
      assert.match(String(negative.message), /spec\.replicas: Invalid value: -1: must be greater than or equal to 0/);
      expectStatus(
        await request(server, 'PUT', `${base}/deployments/scaled/scale`, {
          body: { kind: 'Scale', apiVersion: 'autoscaling/v1', metadata: { name: 'scaled', resourceVersion: created.metadata.resourceVersion }, spec: { replicas: 1 } },
        }),
        409,
        'stale resourceVersion',
      );
      expectStatus(
        await request(server, 'PUT', `${base}/deployments/scaled/scale`, { body: { kind: 'Deployment', metadata: { name: 'scaled' }, spec: { replicas: 1 } } }),
        400,
        'not a Scale',
      );
      assert.equal((await get(`${base}/deployments/scaled`)).spec!.replicas, 7);
      expectStatus(await request(server, 'GET', `${base}/deployments/missing/scale`), 404, 'scale of nothing');
      expectStatus(await request(server, 'DELETE', `${base}/deployments/scaled/scale`), 405, 'DELETE of a subresource');
      assert.equal((await request(server, 'GET', `${base}/deployments/scaled`)).status, 200);
    });

    it('bumps generation on spec changes only; status writes (observedGeneration) leave it', async () => {
      expectStatus(await request(server, 'POST', `${base}/statefulsets`, { body: { ...deployment('gen'), kind: 'StatefulSet' } }), 201, 'create');
      const url = `${base}/statefulsets/gen`;
      const status = expectStatus(
        await patchJson(`${url}/status`, 'application/merge-patch+json', { status: { observedGeneration: 1, replicas: 2, readyReplicas: 1 } }),
        200,
        'status patch',
      );
      assert.equal(status.metadata.generation, 1);
      assert.equal(status.status!.observedGeneration, 1);
      const labelled = expectStatus(await patchJson(url, 'application/merge-patch+json', { metadata: { labels: { x: 'y' } } }), 200, 'label');
      assert.equal(labelled.metadata.generation, 1, 'a metadata change is not a spec change');
      const changed = expectStatus(
        await patchJson(url, 'application/strategic-merge-patch+json', { spec: { template: { spec: { containers: [{ name: 'main', image: 'x:2' }] } } } }),
        200,
        'template change',
      );
      assert.equal(changed.metadata.generation, 2);
      assert.equal(changed.status!.observedGeneration, 1, 'a spec write keeps the status');
      const same = expectStatus(await patchJson(url, 'application/merge-patch+json', { spec: { replicas: 2 } }), 200, 'no-op');
      assert.equal(same.metadata.generation, 2, 'writing what is there is no change');
      // A PUT without the defaulted fields gets them again rather than a spec change.
      const { spec } = (await get(url)) as Obj;
      const stripped = structuredClone(spec!) as Record<string, unknown>;
      delete stripped.podManagementPolicy;
      delete stripped.updateStrategy;
      const put = expectStatus(await request(server, 'PUT', url, { body: { apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'gen' }, spec: stripped } }), 200, 'PUT');
      assert.equal(put.metadata.generation, 2);
      assert.equal(put.spec!.podManagementPolicy, 'OrderedReady');
    });

    it('validates selectors, replicas and the pod template with causes', async () => {
      const cases: [string, Obj, RegExp][] = [
        ['no selector', deployment('v1', { selector: undefined }), /spec\.selector: Required value/],
        ['empty selector', deployment('v2', { selector: {} }), /spec\.selector: Invalid value: \{\}: empty selector/],
        ['mismatch', deployment('v3', { selector: { matchLabels: { app: 'nope' } } }), /selector does not match template labels/],
        ['bad operator', deployment('v4', { selector: { matchExpressions: [{ key: 'app', operator: 'Near' }] } }), /operator: Unsupported value/],
        ['negative replicas', deployment('v5', { replicas: -2 }), /spec\.replicas: Invalid value: -2: must be greater than or equal to 0/],
        ['fractional replicas', deployment('v6', { replicas: 1.5 }), /spec\.replicas: Invalid value: 1\.5: must be an integer/],
        [
          'no command',
          deployment('v7', { template: { metadata: { labels: { app: 'v7', tier: 'web' } }, spec: { containers: [{ name: 'main', image: 'x' }] } } }),
          /spec\.template\.spec\.containers\[0\]\.command: Required value: the process runtime runs each container/,
        ],
        ['no template', deployment('v8', { template: undefined }), /spec\.template: Required value/],
      ];
      for (const [what, body, message] of cases) {
        const res = expectStatus(await request(server, 'POST', `${base}/deployments`, { body }), 422, what);
        assert.equal(res.reason, 'Invalid', what);
        assert.match(String(res.message), message, what);
        assert.ok(((res.details as { causes?: unknown[] } | undefined)?.causes ?? []).length > 0, `${what}: causes`);
      }
      // An update is validated too.
      expectStatus(await request(server, 'POST', `${base}/replicasets`, { body: { ...deployment('upd'), kind: 'ReplicaSet' } }), 201, 'create rs');
      const bad = expectStatus(
        await patchJson(`${base}/replicasets/upd`, 'application/merge-patch+json', { spec: { template: { metadata: { labels: { app: 'other' } } } } }),
        422,
        'update that breaks the selector',
      );
      assert.match(String(bad.message), /selector does not match template labels/);
    });

    it('printers compute each column from spec and status', () => {
      const now = Date.parse('2026-11-30T00:10:00Z');
      const obj = (kind: string, spec: Record<string, unknown>, status: Record<string, unknown>): Obj => ({
        kind,
        metadata: { name: 'x', creationTimestamp: '2026-11-30T00:00:00Z' },
        spec: {
          selector: { matchLabels: { app: 'x' } },
          template: { spec: { containers: [{ name: 'a', image: 'img:1' }, { name: 'b' }] } },
          ...spec,
        },
        status,
      });
      assert.deepEqual(
        DEPLOYMENT_PRINTER.cells(obj('Deployment', { replicas: 3 }, { readyReplicas: 2, updatedReplicas: 3, availableReplicas: 1 }), now),
        ['x', '2/3', 3, 1, '10m', 'a,b', 'img:1,', 'app=x'],
      );
      assert.deepEqual(DEPLOYMENT_PRINTER.cells(obj('Deployment', { replicas: 2 }, {}), now).slice(1, 4), ['0/2', 0, 0]);
      assert.deepEqual(
        REPLICASET_PRINTER.cells(obj('ReplicaSet', { replicas: 4 }, { replicas: 3, readyReplicas: 2 }), now),
        ['x', 4, 3, 2, '10m', 'a,b', 'img:1,', 'app=x'],
      );
      assert.deepEqual(STATEFULSET_PRINTER.cells(obj('StatefulSet', { replicas: 3 }, { readyReplicas: 3 }), now), ['x', '3/3', '10m', 'a,b', 'img:1,']);
      assert.deepEqual(DEPLOYMENT_PRINTER.columns.filter((c) => c.priority === 0).map((c) => c.name), ['Name', 'Ready', 'Up-to-date', 'Available', 'Age']);
    });
  });
});
