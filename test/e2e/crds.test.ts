import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';
import { widget, widgetCrd } from '../helpers/crd.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * CustomResourceDefinitions end to end against a real `drover server`: created through the API,
 * kubectl (1.32 and 1.20) and the Python client; custom objects validated, defaulted and pruned
 * by the schema; printer columns, short names and categories; status and scale subresources;
 * and deletion taking the objects and the discovery entries with it.
 */

interface Status {
  code: number;
  reason: string;
  message: string;
  details?: { causes?: { field?: string; reason?: string; message?: string }[] };
}

describe('CustomResourceDefinitions', { timeout: 300_000 }, () => {
  let server: ServerProcess;
  let work: string;
  const WIDGETS = '/apis/example.com/v1/namespaces/default/widgets';

  before(async () => {
    server = await startServer();
    work = tempDir('crds');
  });
  after(async () => {
    await server?.stop();
    await cleanup(work);
  });

  const established = async (name: string) =>
    eventually(async () => {
      const crd = await request(server, 'GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
      const conditions = (crd.json as { status?: { conditions?: { type: string; status: string }[] } }).status?.conditions ?? [];
      return conditions.some((c) => c.type === 'Established' && c.status === 'True') ? crd.json : undefined;
    }, `${name} Established`);

  it('a CRD is served and discoverable at once, with NamesAccepted and Established, acceptedNames and storedVersions', async () => {
    const created = await request(server, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: widgetCrd() });
    assert.equal(created.status, 201, created.text);
    const crd = (await established('widgets.example.com')) as { status: Record<string, unknown>; metadata: Record<string, unknown> };
    assert.deepEqual((crd.status.conditions as { type: string }[]).map((c) => c.type).sort(), ['Established', 'NamesAccepted']);
    assert.deepEqual(crd.status.acceptedNames, { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList', shortNames: ['wdg'], categories: ['all'] });
    assert.deepEqual(crd.status.storedVersions, ['v1']);
    const groups = await request(server, 'GET', '/apis');
    assert.ok((groups.json as { groups: { name: string }[] }).groups.some((g) => g.name === 'example.com'));
    const resources = (await request(server, 'GET', '/apis/example.com/v1')).json as { resources: { name: string; shortNames?: string[]; categories?: string[] }[] };
    assert.deepEqual(resources.resources.map((r) => r.name), ['widgets', 'widgets/status', 'widgets/scale']);
    assert.deepEqual(resources.resources[0]!.shortNames, ['wdg']);
    const aggregated = await request(server, 'GET', '/apis', { headers: { Accept: 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList' } });
    assert.match(aggregated.text, /"resource":"widgets"/);
  });

  it('a CRD that breaks the rules is a 422 naming the fields', async () => {
    const bad = widgetCrd('bad.example.com') as { metadata: { name: string }; spec: { versions: { storage: boolean; schema: unknown }[] } };
    bad.metadata.name = 'wrong.bad.example.com';
    bad.spec.versions[0]!.storage = false;
    bad.spec.versions[0]!.schema = { openAPIV3Schema: { type: 'object', properties: { spec: { properties: {} } } } };
    const answer = await request(server, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: bad });
    assert.equal(answer.status, 422, answer.text);
    const status = answer.json as Status;
    assert.deepEqual(status.details?.causes?.map((c) => c.field).sort(), [
      'metadata.name',
      'spec.versions',
      'spec.versions[0].schema.openAPIV3Schema.properties[spec].type',
    ]);
  });

  it('custom objects: defaults applied, unknown fields pruned with a warning (refused when strict), schema violations 422 with the field path', async () => {
    const created = await request(server, 'POST', WIDGETS, { body: { ...widget('w1', { size: 'small', bogus: true }), status: { phase: 'Made' }, junk: 1 } });
    assert.equal(created.status, 201, created.text);
    const obj = created.json as Record<string, Record<string, unknown>>;
    assert.deepEqual(obj.spec, { size: 'small', replicas: 1 });
    assert.equal(obj.junk, undefined);
    assert.equal(obj.status, undefined, 'status is set only through the status subresource');
    assert.match(String(created.headers.warning), /unknown field \\"spec\.bogus\\"/);
    const stored = (await request(server, 'GET', `${WIDGETS}/w1`)).json as Record<string, Record<string, unknown>>;
    assert.deepEqual(stored.spec, { size: 'small', replicas: 1 });

    const strict = await request(server, 'POST', `${WIDGETS}?fieldValidation=Strict`, { body: widget('w-strict', { size: 'small', bogus: true }) });
    assert.equal(strict.status, 400, strict.text);
    assert.match((strict.json as Status).message, /unknown field "spec\.bogus"/);

    const invalid = await request(server, 'POST', WIDGETS, { body: widget('w-bad', { size: 'huge', replicas: 'three' }) });
    assert.equal(invalid.status, 422, invalid.text);
    const status = invalid.json as Status;
    assert.equal(status.reason, 'Invalid');
    assert.deepEqual(status.details?.causes?.map((c) => [c.field, c.reason]), [
      ['spec.replicas', 'FieldValueTypeInvalid'],
      ['spec.size', 'FieldValueNotSupported'],
    ]);
    assert.match(status.message, /Widget\.example\.com "w-bad" is invalid: \[spec\.replicas: Invalid value: "string": spec\.replicas in body must be of type integer/);
    const missing = await request(server, 'POST', WIDGETS, { body: widget('w-missing', {}) });
    assert.equal(missing.status, 422);
    assert.deepEqual((missing.json as Status).details?.causes?.map((c) => c.field), ['spec.size']);
  });

  it('status and scale subresources: each write path changes only its part, generation follows spec', async () => {
    const status = await request(server, 'PUT', `${WIDGETS}/w1/status`, {
      body: { ...widget('w1', { size: 'large' }), status: { phase: 'Ready', replicas: 1 } },
    });
    assert.equal(status.status, 200, status.text);
    let obj = status.json as { spec: { size: string }; status: { phase: string }; metadata: { generation: number } };
    assert.equal(obj.spec.size, 'small', 'a status write ignores spec');
    assert.equal(obj.status.phase, 'Ready');
    assert.equal(obj.metadata.generation, 1);
    const badStatus = await request(server, 'PATCH', `${WIDGETS}/w1/status`, {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { status: { replicas: 'x' } },
    });
    assert.equal(badStatus.status, 422, badStatus.text);
    assert.deepEqual((badStatus.json as Status).details?.causes?.map((c) => c.field), ['status.replicas']);
    const main = await request(server, 'PATCH', `${WIDGETS}/w1`, {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { spec: { color: 'red' }, status: { phase: 'Ignored' } },
    });
    assert.equal(main.status, 200, main.text);
    obj = main.json as typeof obj;
    assert.equal(obj.status.phase, 'Ready', 'a main write ignores status');
    assert.equal(obj.metadata.generation, 2);
    const scale = await request(server, 'PATCH', `${WIDGETS}/w1/scale`, {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { spec: { replicas: 4 } },
    });
    assert.equal(scale.status, 200, scale.text);
    assert.deepEqual((scale.json as { kind: string; spec: unknown; status: unknown }).spec, { replicas: 4 });
    assert.deepEqual((scale.json as { status: unknown }).status, { replicas: 1 });
    assert.equal(((await request(server, 'GET', `${WIDGETS}/w1`)).json as { spec: { replicas: number } }).spec.replicas, 4);
  });

  it('two versions, conversion None: an object written through one is read through both, stored in the storage version', async () => {
    const crd = widgetCrd('multi.example.com', { extraVersion: true, shortNames: ['mwdg'] });
    assert.equal((await request(server, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: crd })).status, 201);
    await established('widgets.multi.example.com');
    const discovery = (await request(server, 'GET', '/apis/multi.example.com')).json as { versions: { version: string }[]; preferredVersion: { version: string } };
    assert.deepEqual(discovery.versions.map((v) => v.version), ['v1', 'v1beta1']);
    assert.equal(discovery.preferredVersion.version, 'v1');
    const beta = '/apis/multi.example.com/v1beta1/namespaces/default/widgets';
    const made = await request(server, 'POST', beta, { body: { apiVersion: 'multi.example.com/v1beta1', kind: 'Widget', metadata: { name: 'm1' }, spec: { size: 'small' } } });
    assert.equal(made.status, 201, made.text);
    assert.equal((made.json as { apiVersion: string }).apiVersion, 'multi.example.com/v1beta1');
    const asV1 = await request(server, 'GET', '/apis/multi.example.com/v1/namespaces/default/widgets/m1');
    assert.equal((asV1.json as { apiVersion: string }).apiVersion, 'multi.example.com/v1');
    const listed = (await request(server, 'GET', beta)).json as { items: { apiVersion: string }[] };
    assert.deepEqual(listed.items.map((i) => i.apiVersion), ['multi.example.com/v1beta1']);
    const status = ((await request(server, 'GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.multi.example.com')).json as { status: { storedVersions: string[] } }).status;
    assert.deepEqual(status.storedVersions, ['v1']);
  });

  it('a CRD whose kind an older CRD of the group holds is not served (NamesAccepted False, KindConflict) until that one is deleted', async () => {
    const clash = widgetCrd('multi.example.com', { shortNames: [] }) as { metadata: { name: string }; spec: { names: { plural: string; singular: string } } };
    clash.metadata.name = 'gizmos.multi.example.com';
    clash.spec.names.plural = 'gizmos';
    clash.spec.names.singular = 'gizmo';
    assert.equal((await request(server, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: clash })).status, 201);
    const conditions = await eventually(async () => {
      const crd = (await request(server, 'GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.multi.example.com')).json as { status?: { conditions?: { type: string; status: string; reason: string }[] } };
      const found = crd.status?.conditions ?? [];
      return found.some((c) => c.type === 'NamesAccepted') ? found : undefined;
    }, 'the naming verdict');
    assert.deepEqual(conditions.find((c) => c.type === 'NamesAccepted'), { ...conditions.find((c) => c.type === 'NamesAccepted'), status: 'False', reason: 'KindConflict' });
    assert.equal(conditions.find((c) => c.type === 'Established')?.status, 'False');
    assert.equal((await request(server, 'GET', '/apis/multi.example.com/v1/namespaces/default/gizmos')).status, 404);
    // The older CRD deleted, the name is free: the second is accepted and served.
    assert.ok([200, 202].includes((await request(server, 'DELETE', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.multi.example.com')).status));
    await eventually(async () => (await request(server, 'GET', '/apis/multi.example.com/v1/namespaces/default/gizmos')).status === 200, 'gizmos served once the kind is free');
    await established('gizmos.multi.example.com');
    assert.ok([200, 202].includes((await request(server, 'DELETE', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.multi.example.com')).status));
  });

  it('field selectors on metadata.name and metadata.namespace; other fields are refused', async () => {
    assert.equal((await request(server, 'POST', WIDGETS, { body: widget('w2', { size: 'large' }) })).status, 201);
    const byName = await request(server, 'GET', `${WIDGETS}?fieldSelector=metadata.name%3Dw2`);
    assert.deepEqual((byName.json as { kind: string; items: { metadata: { name: string } }[] }).items.map((i) => i.metadata.name), ['w2']);
    assert.equal((byName.json as { kind: string }).kind, 'WidgetList');
    const all = await request(server, 'GET', '/apis/example.com/v1/widgets?fieldSelector=metadata.namespace%3Ddefault');
    assert.equal((all.json as { items: unknown[] }).items.length, 2);
    const other = await request(server, 'GET', `${WIDGETS}?fieldSelector=spec.size%3Dlarge`);
    assert.equal(other.status, 400, other.text);
  });

  for (const client of kubectlClients()) {
    it(`${client.name}: apply a CRD and objects, get with printer columns, short name and category, explain, delete`, async () => {
      const cache = fs.mkdtempSync(path.join(work, 'cache-'));
      const group = client.legacy ? 'old.example.com' : 'new.example.com';
      const short = client.legacy ? 'owdg' : 'nwdg';
      // No --validate=false: kubectl 1.20 validates against the protobuf /openapi/v2, 1.32 against /openapi/v3.
      const kubectl = (args: string[], input?: string) => runKubectl(client, server.kubeconfig, cache, args, input === undefined ? {} : { input });
      const file = path.join(work, `${group}.yaml`);
      fs.writeFileSync(file, [widgetCrd(group, { categories: ['all', 'gadgets'], shortNames: [short] })].map((d) => YAML.stringify(d)).join('---\n'));
      assertOk(await kubectl(['apply', '-f', file]), 'apply the CRD');
      assertOk(await kubectl(['wait', '--for', 'condition=established', `crd/widgets.${group}`, '--timeout=30s']), 'wait for Established');
      const objects = path.join(work, `${group}-objects.yaml`);
      fs.writeFileSync(objects, [widget('alpha', { size: 'small', replicas: 2 }, group), widget('beta', { size: 'large' }, group)].map((d) => YAML.stringify(d)).join('---\n'));
      assertOk(await kubectl(['apply', '-f', objects]), 'apply the objects');
      const table = await kubectl(['get', `widgets.${group}`]);
      assertOk(table, 'get widgets');
      const parsed = parseTable(table.stdout);
      assert.deepEqual(parsed.headers, ['NAME', 'SIZE', 'REPLICAS', 'PHASE', 'AGE']);
      assert.equal(rowNamed(parsed, 'alpha').SIZE, 'small');
      assert.equal(rowNamed(parsed, 'alpha').REPLICAS, '2');
      assert.equal(rowNamed(parsed, 'beta').REPLICAS, '1', 'the default');
      const byShortName = await kubectl(['get', short, 'beta', '-o', 'jsonpath={.spec.size}']);
      assertOk(byShortName, 'get by short name');
      assert.equal(byShortName.stdout, 'large');
      const category = await kubectl(['get', 'gadgets']);
      assertOk(category, 'get the category');
      // One kind in the category: kubectl prints it without the kind prefix (1.20 with it).
      assert.match(category.stdout, new RegExp(`^(widget\\.${group.replace(/\./g, '\\.')}/)?alpha\\s`, 'm'));
      const refused = await kubectl(['apply', '-f', '-'], YAML.stringify(widget('gamma', { size: 'medium' }, group)));
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /spec\.size: Unsupported value: "medium"/);
      const explain = await kubectl(['explain', 'widgets.spec', `--api-version=${group}/v1`]);
      assertOk(explain, 'explain');
      assert.match(explain.stdout, /KIND:\s+Widget/);
      assert.match(explain.stdout, /size\s+<string>.*-required-/s);
      assert.match(explain.stdout, /How big the widget is/);
      assertOk(await kubectl(['delete', '-f', file]), 'delete the CRD');
      await eventually(async () => (await request(server, 'GET', `/apis/${group}/v1`)).status === 404, 'the group version gone from discovery');
      const groups = (await request(server, 'GET', '/apis')).json as { groups: { name: string }[] };
      assert.equal(groups.groups.some((g) => g.name === group), false);
      const after = await kubectl(['get', 'crd', `widgets.${group}`]);
      assert.notEqual(after.code, 0, 'the CRD is gone');
    });
  }

  it('deleting a CRD deletes its objects first (the cleanup finalizer), then the CRD; a CRD of the same name starts empty', async () => {
    const deleted = await request(server, 'DELETE', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com');
    assert.ok(deleted.status === 200 || deleted.status === 202, deleted.text);
    await eventually(async () => (await request(server, 'GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com')).status === 404, 'the CRD removed');
    assert.equal((await request(server, 'GET', WIDGETS)).status, 404);
    assert.equal((await request(server, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: widgetCrd() })).status, 201);
    await established('widgets.example.com');
    const list = await eventually(async () => {
      const answer = await request(server, 'GET', WIDGETS);
      return answer.status === 200 ? answer : undefined;
    }, 'the widgets served again');
    assert.deepEqual((list.json as { items: unknown[] }).items, [], 'the objects of the first CRD went with it');
  });

  it('the official Python client creates, lists, patches and deletes custom objects (test/python/crd_test.py)', async () => {
    await runPythonClientScript('crd_test.py', [server.kubeconfig], { minChecks: 8, context: () => server.output().slice(-3000) });
  });
});
