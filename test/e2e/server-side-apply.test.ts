import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';
import { KUBECTL_1_20, type KubectlClient, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Server-side apply end to end against a real `drover server`: kubectl 1.32 and 1.20 applying
 * with `--server-side` as two field managers (the 409 naming the owner and the field, then
 * `--force-conflicts`), managedFields as `kubectl get --show-managed-fields` prints them, a field
 * dropped from the configuration removed from the object, a CRD's list-map merged by key, the
 * upgrade from client-side apply, the official Python client, and the ordinary writes' Update
 * entries.
 */

interface ManagedFieldsEntry {
  manager: string;
  operation: string;
  apiVersion: string;
  time?: string;
  fieldsType: string;
  fieldsV1: Record<string, unknown>;
  subresource?: string;
}

interface Obj {
  metadata: { name: string; annotations?: Record<string, string>; managedFields?: ManagedFieldsEntry[]; resourceVersion?: string };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}

const LEGACY_KUBECTL: KubectlClient = { name: 'kubectl 1.20 (Debian)', bin: KUBECTL_1_20, legacy: true };

/** A Deployment's manifest; `replicas` undefined leaves the field out; the container is named main. */
function deployment(name: string, replicas: number | undefined, container: Record<string, unknown>): string {
  return YAML.stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, labels: { app: name } },
    spec: {
      ...(replicas === undefined ? {} : { replicas }),
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'main', ...container }] } },
    },
  });
}

const SLEEP = { command: ['sleep', '3600'] };

const entryOf = (obj: Obj, manager: string, operation = 'Apply'): ManagedFieldsEntry | undefined =>
  obj.metadata.managedFields?.find((e) => e.manager === manager && e.operation === operation);

describe('server-side apply', { timeout: 600_000 }, () => {
  let server: ServerProcess;
  let work: string;

  before(async () => {
    server = await startServer();
    work = tempDir('ssa');
  });
  after(async () => {
    await server?.stop();
    await cleanup(work);
  });

  const kubectl = async (args: string[], client: KubectlClient = MODERN_KUBECTL, input?: string) =>
    runKubectl(client, server.kubeconfig, path.join(work, `cache-${client.legacy ? '120' : 'modern'}`), args, input === undefined ? {} : { input });
  const ok = async (args: string[], client: KubectlClient = MODERN_KUBECTL, input?: string) => {
    const result = await kubectl(args, client, input);
    assert.equal(result.code, 0, `kubectl ${args.join(' ')} (${client.name}) failed:\n${result.stderr}\n${result.stdout}`);
    return result.stdout;
  };
  const file = (name: string, text: string): string => {
    const at = path.join(work, name);
    fs.writeFileSync(at, text);
    return at;
  };
  const getJson = async (urlPath: string): Promise<Obj> => {
    const got = await request(server, 'GET', urlPath);
    assert.equal(got.status, 200, got.text);
    return got.json as Obj;
  };
  const DEPLOYMENTS = '/apis/apps/v1/namespaces/default/deployments';
  const CONFIGMAPS = '/api/v1/namespaces/default/configmaps';

  it('two managers with kubectl 1.32: a 409 naming the owner and the field, --force-conflicts takes it, managedFields as kube-apiserver shows them', async () => {
    const alice = file('web-alice.yaml', deployment('web', 2, { image: 'nginx:1', ...SLEEP }));
    assert.match(await ok(['apply', '--server-side', '--field-manager=alice', '-f', alice]), /deployment.apps\/web serverside-applied/);
    const bob = file('web-bob.yaml', deployment('web', 5, { image: 'nginx:1', ...SLEEP }));
    const refused = await kubectl(['apply', '--server-side', '--field-manager=bob', '-f', bob]);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /Apply failed with 1 conflict: conflict with "alice": \.spec\.replicas/);
    assert.match(refused.stderr, /--force-conflicts/);

    // The raw 409, as kube-apiserver words it.
    const raw = await request(server, 'PATCH', `${DEPLOYMENTS}/web?fieldManager=bob`, {
      rawBody: fs.readFileSync(bob, 'utf8'),
      headers: { 'Content-Type': 'application/apply-patch+yaml' },
    });
    assert.equal(raw.status, 409, raw.text);
    const status = raw.json as { reason: string; message: string; details: { causes: { reason: string; message: string; field: string }[] } };
    assert.equal(status.reason, 'Conflict');
    assert.equal(status.message, 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas');
    assert.deepEqual(status.details.causes, [{ reason: 'FieldManagerConflict', message: 'conflict with "alice"', field: '.spec.replicas' }]);

    await ok(['apply', '--server-side', '--field-manager=bob', '--force-conflicts', '-f', bob]);
    const yaml = await ok(['get', 'deployment', 'web', '-o', 'yaml', '--show-managed-fields']);
    const obj = YAML.parse(yaml) as Obj;
    assert.equal(obj.spec!.replicas, 5);
    const aliceEntry = entryOf(obj, 'alice')!;
    const bobEntry = entryOf(obj, 'bob')!;
    assert.ok(aliceEntry && bobEntry, yaml);
    assert.equal(aliceEntry.apiVersion, 'apps/v1');
    assert.equal(aliceEntry.fieldsType, 'FieldsV1');
    assert.match(aliceEntry.time!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    // alice lost .spec.replicas to bob; both own the rest of what they applied, with the same values.
    const containers = { 'k:{"name":"main"}': { '.': {}, 'f:command': {}, 'f:image': {}, 'f:name': {} } };
    const common = {
      'f:metadata': { 'f:labels': { 'f:app': {} } },
      'f:selector': {},
      'f:template': { 'f:metadata': { 'f:labels': { 'f:app': {} } }, 'f:spec': { 'f:containers': containers } },
    };
    assert.deepEqual(aliceEntry.fieldsV1, { 'f:metadata': common['f:metadata'], 'f:spec': { 'f:selector': {}, 'f:template': common['f:template'] } });
    assert.deepEqual(bobEntry.fieldsV1, {
      'f:metadata': common['f:metadata'],
      'f:spec': { 'f:replicas': {}, 'f:selector': {}, 'f:template': common['f:template'] },
    });
    // Apply entries come first, as kube-apiserver sorts them; the controller's status write is an
    // Update through the status subresource.
    const operations = obj.metadata.managedFields!.map((e) => e.operation);
    assert.deepEqual(operations, [...operations].sort());
    await eventually(async () => {
      const live = await getJson(`${DEPLOYMENTS}/web`);
      return live.metadata.managedFields?.some((e) => e.subresource === 'status' && e.operation === 'Update' && 'f:status' in e.fieldsV1);
    }, 'the status writer recorded through the status subresource');
    // The shape kubectl prints without --show-managed-fields: none.
    assert.doesNotMatch(await ok(['get', 'deployment', 'web', '-o', 'yaml']), /managedFields/);
  });

  it('a field the applier stops applying is removed when no one else owns it, kept when another does', async () => {
    // alice drops the container's command and replicas (bob applied the command too: it stays).
    await ok(['apply', '--server-side', '--field-manager=alice', '-f', file('web-alice2.yaml', deployment('web', undefined, { image: 'nginx:1' }))]);
    let obj = await getJson(`${DEPLOYMENTS}/web`);
    let container = (obj.spec!.template as { spec: { containers: Record<string, unknown>[] } }).spec.containers[0]!;
    assert.deepEqual(container.command, ['sleep', '3600'], 'bob still owns the command');
    // bob drops it too and adds an env var: now nobody owns the command, so it goes.
    const bobYaml = deployment('web', 5, { image: 'nginx:1', env: [{ name: 'A', value: '1' }] });
    await ok(['apply', '--server-side', '--field-manager=bob', '-f', file('web-bob2.yaml', bobYaml)]);
    obj = await getJson(`${DEPLOYMENTS}/web`);
    container = (obj.spec!.template as { spec: { containers: Record<string, unknown>[] } }).spec.containers[0]!;
    assert.equal(container.command, undefined, JSON.stringify(container));
    assert.deepEqual(container.env, [{ name: 'A', value: '1' }]);
    assert.match(JSON.stringify(entryOf(obj, 'bob')!.fieldsV1), /"f:env":\{"k:\{\\"name\\":\\"A\\"\}":\{"\.":\{\},"f:name":\{\},"f:value":\{\}\}\}/);
  });

  it('a CRD object with a list-map in its schema merges by key between managers', async () => {
    const crd = {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: 'gadgets.ssa.example.com' },
      spec: {
        group: 'ssa.example.com',
        scope: 'Namespaced',
        names: { plural: 'gadgets', singular: 'gadget', kind: 'Gadget' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: 'object',
                properties: {
                  spec: {
                    type: 'object',
                    properties: {
                      size: { type: 'integer' },
                      parts: {
                        type: 'array',
                        'x-kubernetes-list-type': 'map',
                        'x-kubernetes-list-map-keys': ['name'],
                        items: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, count: { type: 'integer' } } },
                      },
                      tags: { type: 'array', 'x-kubernetes-list-type': 'set', items: { type: 'string' } },
                    },
                  },
                },
              },
            },
          },
        ],
      },
    };
    await ok(['apply', '--server-side', '--field-manager=setup', '-f', file('gadget-crd.yaml', YAML.stringify(crd))]);
    await ok(['wait', '--for=condition=Established', 'crd/gadgets.ssa.example.com', '--timeout=30s']);
    const gadget = (spec: object) => YAML.stringify({ apiVersion: 'ssa.example.com/v1', kind: 'Gadget', metadata: { name: 'g1' }, spec });
    await eventually(async () => (await kubectl(['apply', '--server-side', '--field-manager=one', '-f', file('g-one.yaml', gadget({ size: 1, parts: [{ name: 'a', count: 1 }], tags: ['tag-x'] }))])).code === 0, 'first apply of the custom object');
    await ok(['apply', '--server-side', '--field-manager=two', '-f', file('g-two.yaml', gadget({ parts: [{ name: 'b', count: 2 }], tags: ['tag-y'] }))]);
    const obj = YAML.parse(await ok(['get', 'gadget', 'g1', '-o', 'yaml', '--show-managed-fields'])) as Obj;
    assert.deepEqual(obj.spec, { size: 1, parts: [{ name: 'a', count: 1 }, { name: 'b', count: 2 }], tags: ['tag-x', 'tag-y'] });
    assert.deepEqual(entryOf(obj, 'two')!.fieldsV1, {
      'f:spec': { 'f:parts': { 'k:{"name":"b"}': { '.': {}, 'f:count': {}, 'f:name': {} } }, 'f:tags': { 'v:"tag-y"': {} } },
    });
    // one changes its item's count: no conflict (two does not own it); then claims b's count: a conflict naming the item by key.
    await ok(['apply', '--server-side', '--field-manager=one', '-f', file('g-one2.yaml', gadget({ size: 1, parts: [{ name: 'a', count: 7 }], tags: ['tag-x'] }))]);
    const refused = await kubectl(['apply', '--server-side', '--field-manager=one', '-f', file('g-one3.yaml', gadget({ size: 1, parts: [{ name: 'a', count: 7 }, { name: 'b', count: 9 }] }))]);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /conflict with "two": \.spec\.parts\[name="b"\]\.count/);
    // one stops applying its item and tag: they go; two's stay.
    await ok(['apply', '--server-side', '--field-manager=one', '-f', file('g-one4.yaml', gadget({ size: 1 }))]);
    const after = YAML.parse(await ok(['get', 'gadget', 'g1', '-o', 'yaml'])) as Obj;
    assert.deepEqual(after.spec, { size: 1, parts: [{ name: 'b', count: 2 }], tags: ['tag-y'] });
  });

  it('client-side apply, then --server-side: kubectl takes the fields over without a conflict', async () => {
    const v1 = file('csa-1.yaml', deployment('csa', 1, { image: 'nginx:1', ...SLEEP }));
    await ok(['apply', '-f', v1]);
    let obj = await getJson(`${DEPLOYMENTS}/csa`);
    assert.ok(entryOf(obj, 'kubectl-client-side-apply', 'Update'), JSON.stringify(obj.metadata.managedFields));
    assert.ok(obj.metadata.annotations?.['kubectl.kubernetes.io/last-applied-configuration']);
    // A changed replicas would conflict with kubectl-client-side-apply for another manager...
    const v2 = file('csa-2.yaml', deployment('csa', 3, { image: 'nginx:2', ...SLEEP }));
    const other = await kubectl(['apply', '--server-side', '--field-manager=someone', '-f', v2]);
    assert.match(other.stderr, /conflicts with "kubectl-client-side-apply" using apps\/v1:\n- \.spec\.replicas\n- \.spec\.template\.spec\.containers\[name="main"\]\.image/);
    // ...but kubectl itself upgrades: the server lets it take what the annotation says it applied.
    await ok(['apply', '--server-side', '-f', v2]);
    obj = await getJson(`${DEPLOYMENTS}/csa`);
    assert.equal(obj.spec!.replicas, 3);
    const managers = obj.metadata.managedFields!.map((e) => `${e.manager}/${e.operation}`);
    assert.ok(managers.includes('kubectl/Apply'), managers.join(' '));
    // kubectl's csaupgrade moved the client-side entry into its own (a JSON patch of managedFields).
    assert.ok(!managers.includes('kubectl-client-side-apply/Update'), managers.join(' '));
    const lastApplied = JSON.parse(obj.metadata.annotations!['kubectl.kubernetes.io/last-applied-configuration']!) as Obj;
    assert.equal(lastApplied.spec!.replicas, 3, 'the annotation follows the server-side apply');
    // Then a plain client-side apply again still works (kubectl reads the annotation).
    await ok(['apply', '-f', file('csa-3.yaml', deployment('csa', 4, { image: 'nginx:2', ...SLEEP }))]);
    assert.equal((await getJson(`${DEPLOYMENTS}/csa`)).spec!.replicas, 4);
  });

  it('kubectl 1.20 applies server-side too: create, update, conflict and force', async () => {
    const cm = (value: string) => YAML.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'old-client' }, data: { key: value } });
    assert.match(await ok(['apply', '--server-side', '--field-manager=old-one', '-f', file('old-1.yaml', cm('a'))], LEGACY_KUBECTL), /serverside-applied/);
    await ok(['apply', '--server-side', '--field-manager=old-one', '-f', file('old-2.yaml', cm('b'))], LEGACY_KUBECTL);
    const refused = await kubectl(['apply', '--server-side', '--field-manager=old-two', '-f', file('old-3.yaml', cm('c'))], LEGACY_KUBECTL);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /conflict with "old-one": \.data\.key/);
    await ok(['apply', '--server-side', '--field-manager=old-two', '--force-conflicts', '-f', file('old-3.yaml', cm('c'))], LEGACY_KUBECTL);
    const obj = await getJson(`${CONFIGMAPS}/old-client`);
    assert.equal(obj.data!.key, 'c');
    assert.deepEqual(entryOf(obj, 'old-two')!.fieldsV1, { 'f:data': { 'f:key': {} } });
    assert.equal(entryOf(obj, 'old-one'), undefined, 'old-one owned only data.key, lost it, and its entry went');
  });

  it('the official Python client applies with application/apply-patch+yaml', async () => {
    // Debian's client (22.6) has no _content_type on the typed methods: its apply is the dynamic
    // client's server_side_apply (the same PATCH), and the typed API reads the result.
    const script = file(
      'apply.py',
      `
import json, sys
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException
config.load_kube_config(sys.argv[1])
api = client.ApiClient()
v1 = client.CoreV1Api(api)
configmaps = dynamic.DynamicClient(api).resources.get(api_version="v1", kind="ConfigMap")
checks = 0
def body(value):
    # This client's rest layer sends a non-JSON content type only from a string.
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-python"}, "data": {"a": value}})
created = configmaps.server_side_apply(body=body("1"), name="from-python", namespace="default", field_manager="py")
assert created.data.a == "1", created
cm = v1.read_namespaced_config_map("from-python", "default")
assert [(e.manager, e.operation) for e in cm.metadata.managed_fields] == [("py", "Apply")], cm.metadata.managed_fields
assert cm.metadata.managed_fields[0].fields_v1 == {"f:data": {"f:a": {}}}, cm.metadata.managed_fields[0].fields_v1
checks += 1
try:
    configmaps.server_side_apply(body=body("2"), name="from-python", namespace="default", field_manager="other")
    raise SystemExit("no conflict")
except ApiException as e:
    assert e.status == 409, e
    status = json.loads(e.body)
    assert status["details"]["causes"][0]["field"] == ".data.a", status
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "py": .data.a', status
    checks += 1
forced = configmaps.server_side_apply(body=body("2"), name="from-python", namespace="default", field_manager="other", force_conflicts=True)
assert forced.data.a == "2", forced
assert [(e.manager, e.operation) for e in v1.read_namespaced_config_map("from-python", "default").metadata.managed_fields] == [("other", "Apply")]
checks += 1
print("PYTHON-SUMMARY " + json.dumps({"checks": checks}))
`,
    );
    const { summary } = await runPythonClientScript(script, [server.kubeconfig], { minChecks: 3, context: () => server.output().slice(-3000) });
    assert.equal(summary.checks, 3);
  });

  it('ordinary writes record Update entries: fieldManager, else the User-Agent before its first "/"; managedFields sent are honoured', async () => {
    await ok(['create', 'configmap', 'plain', '--from-literal=a=1']);
    let obj = await getJson(`${CONFIGMAPS}/plain`);
    assert.deepEqual(
      obj.metadata.managedFields!.map((e) => [e.manager, e.operation, e.apiVersion, e.fieldsV1]),
      [['kubectl-create', 'Update', 'v1', { 'f:data': { '.': {}, 'f:a': {} } }]],
    );
    const patched = await request(server, 'PATCH', `${CONFIGMAPS}/plain`, {
      rawBody: JSON.stringify({ data: { b: '2' } }),
      headers: { 'Content-Type': 'application/merge-patch+json', 'User-Agent': 'my-tool/1.2 (linux)' },
    });
    assert.equal(patched.status, 200, patched.text);
    obj = patched.json as Obj;
    assert.deepEqual(entryOf(obj, 'my-tool', 'Update')!.fieldsV1, { 'f:data': { 'f:b': {} } });
    // A PUT that sends back what it read keeps the entries; a no-op write does not move their times.
    const put = await request(server, 'PUT', `${CONFIGMAPS}/plain?fieldManager=putter`, { body: { ...obj, data: { a: '1', b: '3' } } });
    assert.equal(put.status, 200, put.text);
    obj = put.json as Obj;
    assert.deepEqual(obj.metadata.managedFields!.map((e) => e.manager), ['kubectl-create', 'putter']);
    // An empty list clears them before this write is recorded (the write itself changed nothing: none left).
    const reset = await request(server, 'PATCH', `${CONFIGMAPS}/plain`, {
      rawBody: JSON.stringify({ metadata: { managedFields: [] } }),
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(reset.status, 200, reset.text);
    assert.equal((reset.json as Obj).metadata.managedFields, undefined);
  });

  it('dry-run and fieldValidation work for apply as for the other writes', async () => {
    const apply = (query: string, body: object | string) =>
      request(server, 'PATCH', `${CONFIGMAPS}/dry${query}`, {
        rawBody: typeof body === 'string' ? body : JSON.stringify(body),
        headers: { 'Content-Type': 'application/apply-patch+yaml' },
      });
    const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'dry' }, data: { a: '1' } };
    const dry = await apply('?fieldManager=m&dryRun=All', cm);
    assert.equal(dry.status, 201, dry.text);
    assert.equal((await request(server, 'GET', `${CONFIGMAPS}/dry`)).status, 404, 'a dry-run apply-create stores nothing');
    const strict = await apply('?fieldManager=m&fieldValidation=Strict', { ...cm, bogus: 1 });
    assert.equal(strict.status, 400, strict.text);
    assert.match(strict.text, /unknown field \\"bogus\\"/);
    const warned = await apply('?fieldManager=m', `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\nbogus: 1\ndata:\n  a: "1"\n`);
    assert.equal(warned.status, 201, warned.text);
    assert.match(String(warned.headers.warning), /unknown field \\"bogus\\"/);
    const again = await apply('?fieldManager=m&dryRun=All', { ...cm, data: { a: '2' } });
    assert.equal(again.status, 200, again.text);
    assert.equal((await getJson(`${CONFIGMAPS}/dry`)).data!.a, '1', 'a dry-run apply changes nothing');
    // kubectl's --dry-run=server: the answer shows the change, the object keeps it out.
    const manifest = file('dry.yaml', YAML.stringify({ ...cm, data: { a: '3' } }));
    assert.equal(await ok(['apply', '--server-side', '--field-manager=m', '--dry-run=server', '-f', manifest, '-o', 'jsonpath={.data.a}']), '3');
    assert.equal((await getJson(`${CONFIGMAPS}/dry`)).data!.a, '1');
  });

  it('bad input is a 4xx with a clear message, never a 500', async () => {
    const send = (query: string, body: string, contentType = 'application/apply-patch+yaml', method = 'PATCH', name = 'bad') =>
      request(server, method, `${CONFIGMAPS}/${name}${query}`, { rawBody: body, headers: { 'Content-Type': contentType } });
    const cm = JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'bad' }, data: { a: '1' } });
    const cases: [string, Promise<{ status: number; text: string }>, number, RegExp][] = [
      ['no fieldManager', send('', cm), 422, /fieldManager: Required value: is required for apply patch/],
      ['a list', send('?fieldManager=m', '[1, 2]'), 400, /must be an object.*got a list/],
      ['a string', send('?fieldManager=m', '"text"'), 400, /must be an object/],
      ['bad YAML', send('?fieldManager=m', 'a: [unclosed'), 400, /error decoding YAML/],
      ['the wrong kind', send('?fieldManager=m', JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'bad' } })), 400, /invalid object type: \/v1, Kind=Secret/],
      ['no kind', send('?fieldManager=m', JSON.stringify({ metadata: { name: 'bad' } })), 400, /invalid object type/],
      ['managedFields in the configuration', send('?fieldManager=m', JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'bad', managedFields: [] } })), 400, /metadata.managedFields must be nil/],
      ['another name', send('?fieldManager=m', JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'other' } })), 400, /does not match the name on the URL/],
      ['force on a merge patch', send('?force=true', '{}', 'application/merge-patch+json'), 422, /force: Forbidden: may not be specified for non-apply patch/],
      [
        'a list-map item without its key',
        request(server, 'PATCH', `${DEPLOYMENTS}/keyless?fieldManager=m`, {
          rawBody: JSON.stringify({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'keyless' }, spec: { template: { spec: { containers: [{ image: 'x' }] } } } }),
          headers: { 'Content-Type': 'application/apply-patch+yaml' },
        }),
        422,
        /omits key field \\"name\\"/,
      ],
    ];
    for (const [what, pending, code, message] of cases) {
      const answer = await pending;
      assert.equal(answer.status, code, `${what}: ${answer.text}`);
      assert.match(answer.text, message, what);
    }
    // Malformed managedFields on an ordinary write: 422 naming each bad field.
    assert.equal((await send('?fieldManager=m', cm)).status, 201);
    const malformed = await send(
      '',
      JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'bad', managedFields: [{ manager: 'x', operation: 'Bogus', apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { nope: {} } }] } }),
      'application/json',
      'PUT',
    );
    assert.equal(malformed.status, 422, malformed.text);
    const message = (malformed.json as { message: string }).message;
    assert.match(message, /metadata.managedFields\[0\].operation: Invalid value: "Bogus": must be `Apply` or `Update`/);
    assert.match(message, /metadata.managedFields\[0\].fieldsV1: Invalid value: fieldsV1: "nope" is not a path element/);
    const notList = await send('', JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'bad', managedFields: { a: 1 } } }), 'application/json', 'PUT');
    assert.ok(notList.status >= 400 && notList.status < 500, notList.text);
  });
});
