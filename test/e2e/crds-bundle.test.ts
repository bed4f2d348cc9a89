/**
 * A chart-like bundle in one directory (a CRD, a custom object of it, a Deployment, a Service, a
 * ConfigMap, a Secret, a ServiceAccount, a Role and a RoleBinding that grants the account the
 * custom resource) applied with `kubectl apply -f dir/` by kubectl 1.32 and 1.20 (no
 * --validate=false), against a real server with its embedded agent: the workload runs, the
 * custom object exists, RBAC grants the custom resource like any other; `kubectl delete
 * --ignore-not-found -f dir/`
 * removes all of it.
 *
 * kubectl maps every object of a directory to its resource before it applies any, so the custom
 * object of a CRD that does not exist yet is refused by kubectl itself ("ensure CRDs are
 * installed first"), against kube-apiserver as against Drover; the same `kubectl apply -f dir/`
 * run again (as Helm and GitOps tools do, CRDs first) brings it up. The test checks both.
 *
 * Run: node --import tsx --test test/e2e/crds-bundle.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';

import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { assertOk } from '../helpers/kubectl-table.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods } from '../helpers/workloads.js';

function bundle(namespace: string, group: string): { crd: object[]; app: object[] } {
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `gadgets.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { plural: 'gadgets', kind: 'Gadget' },
      versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', properties: { color: { type: 'string' } } } } } } }],
    },
  };
  const meta = (name: string) => ({ name, namespace });
  const app = [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('app-config'), data: { MODE: 'prod' } },
    { apiVersion: 'v1', kind: 'Secret', metadata: meta('app-secret'), stringData: { password: 'not-a-real-one' } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('app') },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: meta('app'), rules: [{ apiGroups: [group], resources: ['gadgets'], verbs: ['get', 'list', 'watch'] }] },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta('app'),
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'app' },
      subjects: [{ kind: 'ServiceAccount', name: 'app', namespace }],
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta('app'),
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: `bundle-${namespace}` } },
        template: {
          metadata: { labels: { app: `bundle-${namespace}` } },
          spec: {
            serviceAccountName: 'app',
            containers: [{ name: 'app', image: 'busybox', command: ['sleep', '3600'], envFrom: [{ configMapRef: { name: 'app-config' } }], ports: [{ containerPort: 8080 }] }],
          },
        },
      },
    },
    { apiVersion: 'v1', kind: 'Service', metadata: meta('app'), spec: { selector: { app: `bundle-${namespace}` }, ports: [{ port: 80, targetPort: 8080 }] } },
    { apiVersion: `${group}/v1`, kind: 'Gadget', metadata: meta('main'), spec: { color: 'blue' } },
  ];
  return { crd: [crd], app };
}

describe('a chart-like bundle with a CRD, applied and deleted with kubectl -f dir/', { concurrency: false, timeout: 600_000 }, () => {
  let server: ServerProcess;
  let work: string;

  before(async () => {
    server = await startServer({ embeddedAgent: true });
    work = tempDir('crd-bundle');
  });
  after(async () => {
    await server?.stop();
    await cleanup(work);
  });

  for (const client of kubectlClients()) {
    it(`${client.name}: apply -f dir/ brings it all up (the custom object once its CRD is in), delete -f dir/ removes it all`, async () => {
      const suffix = client.legacy ? 'old' : 'new';
      const namespace = `bundle-${suffix}`;
      const group = `${suffix}.bundle.example.com`;
      const dir = path.join(work, suffix);
      fs.mkdirSync(dir);
      const { crd, app } = bundle(namespace, group);
      // Charts put CRDs first; kubectl applies the files of a directory in name order.
      fs.writeFileSync(path.join(dir, '00-crds.yaml'), crd.map((d) => YAML.stringify(d)).join('---\n'));
      fs.writeFileSync(path.join(dir, '10-app.yaml'), app.map((d) => YAML.stringify(d)).join('---\n'));
      const cache = fs.mkdtempSync(path.join(work, `cache-${suffix}-`));
      const kubectl = (args: string[]) => runKubectl(client, server.kubeconfig, cache, args, { timeoutMs: 120_000 });

      // The release's namespace exists beforehand, as `helm install -n` expects.
      assert.equal((await request(server, 'POST', '/api/v1/namespaces', { body: { metadata: { name: namespace } } })).status, 201);
      const first = await kubectl(['apply', '-f', `${dir}/`]);
      // Everything but the custom object, which kubectl could not map before its CRD existed.
      for (const line of [`customresourcedefinition.apiextensions.k8s.io/gadgets.${group} created`, 'deployment.apps/app created', 'service/app created', 'rolebinding.rbac.authorization.k8s.io/app created']) {
        assert.ok(first.stdout.includes(line), `first apply: ${line}\n${first.stdout}\n${first.stderr}`);
      }
      if (first.code !== 0) assert.match(first.stderr, /no matches for kind "Gadget"/, first.stderr);
      assert.equal(first.stderr.includes('Error from server'), false, `the server refused nothing:\n${first.stderr}`);
      const second = await eventually(async () => {
        const run = await kubectl(['apply', '-f', `${dir}/`]);
        return run.code === 0 ? run : undefined;
      }, 'the bundle applied whole', 60_000, 500);
      assert.match(second.stdout, /gadget\.[a-z.]+\/main (created|unchanged)/);

      await eventually(
        async () => (await listPods(server, `app=bundle-${namespace}`, namespace)).filter((p) => p.ready).length === 1,
        'the Deployment\'s pod running and ready',
        120_000,
        200,
      );
      const gadget = await request(server, 'GET', `/apis/${group}/v1/namespaces/${namespace}/gadgets/main`);
      assert.equal(gadget.status, 200, gadget.text);
      // The RoleBinding grants the account the custom resource, judged like any resource.
      const review = async (verb: string) =>
        (
          (
            await request(server, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
              body: {
                apiVersion: 'authorization.k8s.io/v1',
                kind: 'SubjectAccessReview',
                spec: { user: `system:serviceaccount:${namespace}:app`, groups: ['system:serviceaccounts'], resourceAttributes: { namespace, verb, group, resource: 'gadgets' } },
              },
            })
          ).json as { status: { allowed: boolean } }
        ).status.allowed;
      assert.equal(await review('list'), true);
      assert.equal(await review('delete'), false);

      // The CRD comes first in the directory: deleting it takes its objects, so the custom object
      // may be gone (its resource too) by the time kubectl asks; --ignore-not-found, as against kube.
      const deleted = await kubectl(['delete', '--ignore-not-found', '-f', `${dir}/`]);
      assertOk(deleted, 'delete -f dir/');
      for (const [what, url] of [
        ['the CRD', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.${group}`],
        ['the group', `/apis/${group}/v1`],
        ['the Deployment', `/apis/apps/v1/namespaces/${namespace}/deployments/app`],
        ['the ConfigMap', `/api/v1/namespaces/${namespace}/configmaps/app-config`],
        ['the RoleBinding', `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings/app`],
      ] as const) {
        await eventually(async () => (await request(server, 'GET', url)).status === 404, `${what} gone`, 120_000, 200);
      }
      await eventually(async () => ((await request(server, 'GET', `/api/v1/pods?labelSelector=app%3Dbundle-${namespace}`)).json as { items: unknown[] }).items.length === 0, 'the pods gone', 120_000, 200);
    });
  }
});
