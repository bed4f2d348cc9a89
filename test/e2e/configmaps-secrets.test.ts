/**
 * ConfigMaps and Secrets end to end: the real kubectl (1.32, which sends protobuf for `create
 * configmap` and `create secret`, and Debian's 1.20, which sends JSON) against a real `drover
 * server`: create from literals, files and env files, tls and docker-registry Secrets, get (table
 * and -o yaml), describe, the Secret type field selector, apply, edit (KUBE_EDITOR is a small sed
 * script), delete; and every bad input (bad keys, over 1 MiB, a type's missing keys, a type
 * change, an update of an immutable object, a docker config that is not JSON) refused with a 4xx
 * naming its field. Then the same refusals as raw Status bodies, and the official Python client
 * (test/python/secrets_test.py) creating and reading Secrets with string_data.
 *
 * Run: node --import tsx --test test/e2e/configmaps-secrets.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';

import { createCertificateAuthority } from '../../src/security/pki.js';
import { kubectlClients, type KubectlResult, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const MIB = 1024 * 1024;

interface StatusBody {
  code: number;
  reason: string;
  message: string;
  details?: { causes?: { reason?: string; message?: string; field?: string }[] };
}

interface Stored {
  type?: string;
  immutable?: boolean;
  data?: Record<string, string>;
  binaryData?: Record<string, string>;
  stringData?: unknown;
}

const b64 = (text: string | Buffer): string => Buffer.from(text).toString('base64');
const unb64 = (text: string | undefined): string => Buffer.from(text ?? '', 'base64').toString('utf8');

/** kubectl refused the command with a message from the server that contains `pattern`. */
function assertRefused(result: KubectlResult, pattern: RegExp, what: string): void {
  assert.notEqual(result.code, 0, `${what} succeeded: ${result.stdout}`);
  assert.match(result.stderr, pattern, what);
}

describe('ConfigMaps and Secrets with kubectl and the Python client', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  /** Values that must never show up in the server's log. */
  const canaries: string[] = [];

  const file = (name: string, content: string | Buffer): string => {
    const p = path.join(work, name);
    fs.writeFileSync(p, content);
    return p;
  };
  const getStored = async (ns: string, plural: 'configmaps' | 'secrets', name: string): Promise<Stored> => {
    const res = await request(server, 'GET', `/api/v1/namespaces/${ns}/${plural}/${name}`);
    assert.equal(res.status, 200, `GET ${plural}/${name}: ${res.text}`);
    return res.json as Stored;
  };

  before(async () => {
    server = await startServer();
    work = tempDir('cm-secrets');
    fs.mkdirSync(path.join(work, 'tmp'));
    file('app.properties', 'lives=3\nenemies=aliens\n');
    file('game.env', '# a comment\nMODE=easy\nLEVEL=2\n');
    file('logo.bin', Buffer.from([0x00, 0x01, 0xff, 0xfe]));
    file('big.txt', 'a'.repeat(MIB + 1));
    const pair = await createCertificateAuthority('web.example');
    file('tls.crt', pair.certificatePem);
    file('tls.key', pair.privateKeyPem);
    // kubectl runs the editor with the file's path last; the change comes from the environment.
    fs.writeFileSync(path.join(work, 'editor.sh'), '#!/bin/sh\nexec sed -i -e "s|$EDIT_FROM|$EDIT_TO|" "$1"\n', { mode: 0o755 });
  });

  after(async () => {
    await cleanup(work);
  });

  for (const [index, client] of kubectlClients().entries()) {
    const suffix = index === 0 ? 'new' : 'old';
    const ns = `cs-${suffix}`;
    const kubectl = (args: string[], env: NodeJS.ProcessEnv = {}): Promise<KubectlResult> =>
      runKubectl(client, server.kubeconfig, path.join(work, `cache-${index}`), ['-n', ns, ...args], {
        // kubectl edit keeps a copy of a refused edit in TMPDIR: inside the test's own dir.
        env: { TMPDIR: path.join(work, 'tmp'), ...env },
      });
    const edit = (kind: string, name: string, from: string, to: string): Promise<KubectlResult> =>
      kubectl(['edit', kind, name], { KUBE_EDITOR: path.join(work, 'editor.sh'), EDIT_FROM: from, EDIT_TO: to });
    /** The Content-Type of the create kubectl sent (-v=8 logs it): protobuf from 1.32, JSON from 1.20. */
    const assertSentAs = (result: KubectlResult): void => {
      const protobuf = result.stderr.includes('Content-Type: application/vnd.kubernetes.protobuf');
      assert.equal(protobuf, index === 0, `${client.name} should send ${index === 0 ? 'protobuf' : 'JSON'}`);
    };

    it(`${client.name}: create configmap from a literal, files and an env file; get; apply; edit; delete`, async () => {
      assertOk(await kubectl(['create', 'namespace', ns]), 'create namespace');
      const created = await kubectl([
        'create', 'configmap', 'game', '--from-literal=player=one', `--from-file=${path.join(work, 'app.properties')}`,
        `--from-file=${path.join(work, 'logo.bin')}`, '-v=8',
      ]);
      assertOk(created, 'create configmap game');
      assert.match(created.stdout, /^configmap\/game created$/m);
      assertSentAs(created);
      const fromEnv = await kubectl(['create', 'configmap', 'game-env', `--from-env-file=${path.join(work, 'game.env')}`]);
      assertOk(fromEnv, 'create configmap --from-env-file');

      const game = await getStored(ns, 'configmaps', 'game');
      assert.deepEqual(game.data, { player: 'one', 'app.properties': 'lives=3\nenemies=aliens\n' });
      assert.deepEqual(game.binaryData, { 'logo.bin': b64(Buffer.from([0x00, 0x01, 0xff, 0xfe])) }, 'a file that is not UTF-8 is binaryData');
      assert.deepEqual((await getStored(ns, 'configmaps', 'game-env')).data, { MODE: 'easy', LEVEL: '2' });

      const listed = await kubectl(['get', 'cm']);
      assertOk(listed, 'get cm');
      const table = parseTable(listed.stdout);
      assert.deepEqual(table.headers, ['NAME', 'DATA', 'AGE']);
      assert.equal(rowNamed(table, 'game').DATA, '3');
      assert.equal(rowNamed(table, 'game-env').DATA, '2');

      const asYaml = await kubectl(['get', 'configmap', 'game', '-o', 'yaml']);
      assertOk(asYaml, 'get -o yaml');
      const parsed = YAML.parse(asYaml.stdout) as Stored & { kind: string; metadata: { name: string; namespace: string } };
      assert.equal(parsed.kind, 'ConfigMap');
      assert.deepEqual(parsed.metadata.namespace, ns);
      assert.deepEqual(parsed.data, game.data);
      assert.deepEqual(parsed.binaryData, game.binaryData);

      // apply creates, a second apply with a change updates (1.32 checks the server's OpenAPI first).
      const manifest = (level: string): string => `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  level: "${level}"\n`;
      assertOk(await kubectl(['apply', '-f', file(`applied-${suffix}.yaml`, manifest('1'))]), 'apply');
      assertOk(await kubectl(['apply', '-f', file(`applied-${suffix}.yaml`, manifest('2'))]), 'second apply');
      assert.deepEqual((await getStored(ns, 'configmaps', 'applied')).data, { level: '2' });

      const edited = await edit('configmap', 'game', 'lives=3', 'lives=5');
      assertOk(edited, 'edit configmap');
      assert.match(edited.stdout, /configmap\/game edited/);
      assert.equal((await getStored(ns, 'configmaps', 'game')).data?.['app.properties'], 'lives=5\nenemies=aliens\n');

      const deleted = await kubectl(['delete', 'configmap', 'game', 'game-env', 'applied']);
      assertOk(deleted, 'delete');
      assert.match(deleted.stdout, /configmap "game" deleted/);
      for (const name of ['game', 'game-env', 'applied']) {
        assert.equal((await request(server, 'GET', `/api/v1/namespaces/${ns}/configmaps/${name}`)).status, 404, `${name} is gone`);
      }
    });

    it(`${client.name}: create secret generic from a literal, a file and an env file; get; describe; edit; delete`, async () => {
      const password = `s3cr3t-${suffix}-${process.pid}`;
      canaries.push(password);
      const created = await kubectl([
        'create', 'secret', 'generic', 'creds', `--from-literal=password=${password}`, `--from-file=${path.join(work, 'app.properties')}`, '-v=8',
      ]);
      assertOk(created, 'create secret generic');
      assert.match(created.stdout, /^secret\/creds created$/m);
      assertSentAs(created);
      assertOk(await kubectl(['create', 'secret', 'generic', 'creds-env', `--from-env-file=${path.join(work, 'game.env')}`]), 'from env file');

      const creds = await getStored(ns, 'secrets', 'creds');
      assert.equal(creds.type, 'Opaque');
      assert.equal(unb64(creds.data?.password), password);
      assert.equal(unb64(creds.data?.['app.properties']), 'lives=3\nenemies=aliens\n');
      assert.deepEqual(Object.keys((await getStored(ns, 'secrets', 'creds-env')).data ?? {}).sort(), ['LEVEL', 'MODE']);

      const listed = await kubectl(['get', 'secrets']);
      assertOk(listed, 'get secrets');
      const table = parseTable(listed.stdout);
      assert.deepEqual(table.headers, ['NAME', 'TYPE', 'DATA', 'AGE']);
      assert.deepEqual({ ...rowNamed(table, 'creds'), AGE: '' }, { NAME: 'creds', TYPE: 'Opaque', DATA: '2', AGE: '' });
      assert.equal(listed.stdout.includes(password) || listed.stdout.includes(b64(password)), false, 'no value in the table');

      const asYaml = await kubectl(['get', 'secret', 'creds', '-o', 'yaml']);
      assertOk(asYaml, 'get -o yaml');
      const parsed = YAML.parse(asYaml.stdout) as Stored;
      assert.equal(unb64(parsed.data?.password), password);
      assert.equal(parsed.stringData, undefined);

      const described = await kubectl(['describe', 'secret', 'creds']);
      assertOk(described, 'describe');
      assert.match(described.stdout, /Type:\s+Opaque/);
      assert.match(described.stdout, new RegExp(`password:\\s+${password.length} bytes`));
      assert.equal(described.stdout.includes(password), false, 'describe shows sizes only');

      const rotated = `rotated-${suffix}-${process.pid}`;
      canaries.push(rotated);
      const edited = await edit('secret', 'creds', b64(password), b64(rotated));
      assertOk(edited, 'edit secret');
      assert.equal(unb64((await getStored(ns, 'secrets', 'creds')).data?.password), rotated);

      const deleted = await kubectl(['delete', 'secret', 'creds', 'creds-env']);
      assertOk(deleted, 'delete');
      assert.match(deleted.stdout, /secret "creds" deleted/);
      assert.equal((await request(server, 'GET', `/api/v1/namespaces/${ns}/secrets/creds`)).status, 404);
    });

    it(`${client.name}: create secret tls and docker-registry; the type field selector`, async () => {
      const tls = await kubectl(['create', 'secret', 'tls', 'web-tls', `--cert=${path.join(work, 'tls.crt')}`, `--key=${path.join(work, 'tls.key')}`, '-v=8']);
      assertOk(tls, 'create secret tls');
      assertSentAs(tls);
      const stored = await getStored(ns, 'secrets', 'web-tls');
      assert.equal(stored.type, 'kubernetes.io/tls');
      assert.equal(unb64(stored.data?.['tls.crt']), fs.readFileSync(path.join(work, 'tls.crt'), 'utf8'));
      assert.equal(unb64(stored.data?.['tls.key']), fs.readFileSync(path.join(work, 'tls.key'), 'utf8'));

      const dockerPassword = `docker-pw-${suffix}-${process.pid}`;
      canaries.push(dockerPassword);
      assertOk(await kubectl([
        'create', 'secret', 'docker-registry', 'regcred', '--docker-server=registry.example:5000', '--docker-username=robot',
        `--docker-password=${dockerPassword}`,
      ]), 'create secret docker-registry');
      const regcred = await getStored(ns, 'secrets', 'regcred');
      assert.equal(regcred.type, 'kubernetes.io/dockerconfigjson');
      const config = JSON.parse(unb64(regcred.data?.['.dockerconfigjson'])) as { auths: Record<string, { username: string; password: string; auth: string }> };
      assert.equal(config.auths['registry.example:5000']?.username, 'robot');
      assert.equal(config.auths['registry.example:5000']?.auth, b64(`robot:${dockerPassword}`));

      const listed = await kubectl(['get', 'secrets']);
      assertOk(listed, 'get secrets');
      const table = parseTable(listed.stdout);
      assert.equal(rowNamed(table, 'web-tls').TYPE, 'kubernetes.io/tls');
      assert.equal(rowNamed(table, 'web-tls').DATA, '2');
      assert.equal(rowNamed(table, 'regcred').TYPE, 'kubernetes.io/dockerconfigjson');
      const selected = await kubectl(['get', 'secrets', '--field-selector', 'type=kubernetes.io/tls', '-o', 'name']);
      assertOk(selected, 'field selector');
      assert.equal(selected.stdout.trim(), 'secret/web-tls');
      assertOk(await kubectl(['delete', 'secret', 'web-tls', 'regcred']), 'delete');
    });

    it(`${client.name}: every bad input is refused with its field`, async () => {
      // Bad keys (kubectl create configmap checks keys itself, so they come from a manifest).
      const badKeys = await kubectl(['create', '-f', file(`bad-keys-${suffix}.yaml`, [
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-keys\ndata:\n  "a b": "value"\n',
        'apiVersion: v1\nkind: Secret\nmetadata:\n  name: bad-keys\nstringData:\n  "..x": "value"\n',
      ].join('---\n'))]);
      assertRefused(badKeys, /ConfigMap "bad-keys" is invalid: data\[a b\]: Invalid value: "a b": a valid config key must consist of alphanumeric characters/, 'bad configmap key');
      assertRefused(badKeys, /Secret "bad-keys" is invalid: data\[\.\.x\]: Invalid value: "\.\.x": must not start with '\.\.'/, 'bad secret key');

      // Over 1 MiB, through kubectl's own generators.
      const bigFile = `--from-file=${path.join(work, 'big.txt')}`;
      assertRefused(await kubectl(['create', 'configmap', 'big', bigFile]), /ConfigMap "big" is invalid: \[\]: Too long: must have at most 1048576 bytes/, 'big configmap');
      assertRefused(await kubectl(['create', 'secret', 'generic', 'big', bigFile]), /Secret "big" is invalid: data: Too long: must have at most 1048576 bytes/, 'big secret');

      // A type without its keys, and a type change.
      // (kubectl prints several causes as a list of its own, one per line.)
      const typed = await kubectl(['create', 'secret', 'generic', 'typed', '--from-literal=a=b', '--type=kubernetes.io/tls']);
      assertRefused(typed, /Secret "typed" is invalid/, 'tls without its keys');
      assertRefused(typed, /data\[tls\.crt\]: Required value/, 'tls without tls.crt');
      assertRefused(typed, /data\[tls\.key\]: Required value/, 'tls without tls.key');
      assertOk(await kubectl(['create', 'secret', 'generic', 'opaque', '--from-literal=a=b']), 'create opaque');
      const retyped = await kubectl(['patch', 'secret', 'opaque', '--type=merge', '-p', '{"type":"kubernetes.io/tls"}']);
      assertRefused(retyped, /Secret "opaque" is invalid/, 'type change');
      assertRefused(retyped, /type: Invalid value: "kubernetes\.io\/tls": field is immutable/, 'type change');

      // Immutable objects: a patch and an edit of their data are refused, and so is unsetting the flag.
      assertOk(await kubectl(['create', 'configmap', 'frozen', '--from-literal=a=b']), 'create frozen');
      assertOk(await kubectl(['patch', 'configmap', 'frozen', '-p', '{"immutable":true}']), 'make it immutable');
      assertRefused(
        await kubectl(['patch', 'configmap', 'frozen', '-p', '{"data":{"a":"changed"}}']),
        /ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set/,
        'patch of immutable data',
      );
      assertRefused(
        await kubectl(['patch', 'configmap', 'frozen', '-p', '{"immutable":false}']),
        /ConfigMap "frozen" is invalid: immutable: Forbidden: field is immutable when `immutable` is set/,
        'unsetting immutable',
      );
      const refusedEdit = await edit('configmap', 'frozen', 'a: b', 'a: edited');
      assertRefused(refusedEdit, /configmaps "frozen" is invalid/, 'edit of immutable data');
      // kubectl keeps the refused edit with the server's causes written at its top.
      const copy = /stored to "([^"]+)"/.exec(refusedEdit.stderr)?.[1];
      assert.ok(copy && copy.startsWith(path.join(work, 'tmp')), refusedEdit.stderr);
      assert.match(fs.readFileSync(copy, 'utf8'), /# \* data: Forbidden: field is immutable when `immutable` is set/);
      assert.deepEqual((await getStored(ns, 'configmaps', 'frozen')).data, { a: 'b' });

      assertOk(await kubectl(['create', 'secret', 'generic', 'frozen', '--from-literal=a=b']), 'create frozen secret');
      assertOk(await kubectl(['patch', 'secret', 'frozen', '-p', '{"immutable":true}']), 'make it immutable');
      assertRefused(
        await kubectl(['patch', 'secret', 'frozen', '-p', '{"stringData":{"a":"changed"}}']),
        /Secret "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set/,
        'stringData patch of an immutable secret',
      );

      // A docker config that is not JSON: the field, and never the contents.
      const canary = `hunter2-${suffix}-${process.pid}`;
      canaries.push(canary);
      const docker = await kubectl(['create', '-f', file(`bad-docker-${suffix}.yaml`,
        `apiVersion: v1\nkind: Secret\nmetadata:\n  name: bad-docker\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{"auths": ${canary}'\n`)]);
      assertRefused(docker, /Secret "bad-docker" is invalid: data\[\.dockerconfigjson\]: Invalid value: "<secret contents redacted>": invalid character 'h' looking for beginning of value/, 'bad docker config');
      assert.equal(docker.stderr.includes(canary), false, 'the contents are not echoed');

      for (const name of ['opaque', 'frozen']) assertOk(await kubectl(['delete', 'secret', name]), `delete ${name}`);
      assertOk(await kubectl(['delete', 'configmap', 'frozen']), 'delete an immutable configmap');
    });
  }

  it('every bad input is a 4xx Status with a field cause (the raw API)', async () => {
    const ns = 'default';
    const post = (plural: string, body: object) => request(server, 'POST', `/api/v1/namespaces/${ns}/${plural}`, { body });
    const patch = (plural: string, name: string, body: object) =>
      request(server, 'PATCH', `/api/v1/namespaces/${ns}/${plural}/${name}`, { body, headers: { 'Content-Type': 'application/merge-patch+json' } });
    const cm = (name: string, extra: object) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, ...extra });
    const secret = (name: string, extra: object, annotations?: Record<string, string>) =>
      ({ apiVersion: 'v1', kind: 'Secret', metadata: { name, ...(annotations ? { annotations } : {}) }, ...extra });
    assert.equal((await post('configmaps', cm('frozen', { data: { a: 'b' }, immutable: true }))).status, 201);
    assert.equal((await post('secrets', secret('frozen', { stringData: { a: 'b' }, immutable: true }))).status, 201);
    assert.equal((await post('secrets', secret('tls', { type: 'kubernetes.io/tls', stringData: { 'tls.crt': 'c', 'tls.key': 'k' } }))).status, 201);

    const cases: [string, Promise<{ status: number; json: unknown; text: string }>, number, string[]][] = [
      ['bad configmap key', post('configmaps', cm('k', { data: { 'a b': 'x' } })), 422, ['data[a b]']],
      ['bad binaryData key', post('configmaps', cm('k', { binaryData: { '..': b64('x') } })), 422, ['binaryData[..]']],
      ['a key in data and binaryData', post('configmaps', cm('k', { data: { k: 'v' }, binaryData: { k: b64('v') } })), 422, ['data[k]']],
      ['configmap over 1 MiB', post('configmaps', cm('k', { data: { a: 'a'.repeat(MIB / 2) }, binaryData: { b: b64(Buffer.alloc(MIB / 2 + 1)) } })), 422, ['[]']],
      ['bad secret key', post('secrets', secret('k', { stringData: { 'a/b': 'x' } })), 422, ['data[a/b]']],
      ['secret over 1 MiB', post('secrets', secret('k', { data: { a: b64(Buffer.alloc(MIB + 1)) } })), 422, ['data']],
      ['secret data not base64', post('secrets', secret('k', { data: { a: 'not base64' } })), 400, ['data[a]']],
      ['secret data of the wrong type', post('secrets', secret('k', { data: { a: 1 } })), 400, ['data[a]']],
      ['tls without its keys', post('secrets', secret('k', { type: 'kubernetes.io/tls' })), 422, ['data[tls.crt]', 'data[tls.key]']],
      ['dockerconfigjson without its key', post('secrets', secret('k', { type: 'kubernetes.io/dockerconfigjson' })), 422, ['data[.dockerconfigjson]']],
      ['dockercfg that is not JSON', post('secrets', secret('k', { type: 'kubernetes.io/dockercfg', stringData: { '.dockercfg': 'x' } })), 422, ['data[.dockercfg]']],
      ['basic-auth without a username or password', post('secrets', secret('k', { type: 'kubernetes.io/basic-auth' })), 422, ['data[username]', 'data[password]']],
      ['ssh-auth without its key', post('secrets', secret('k', { type: 'kubernetes.io/ssh-auth' })), 422, ['data[ssh-privatekey]']],
      ['service-account-token without its account', post('secrets', secret('k', { type: 'kubernetes.io/service-account-token' })), 422, ['metadata.annotations[kubernetes.io/service-account.name]']],
      ['type change', patch('secrets', 'tls', { type: 'Opaque' }), 422, ['type']],
      ['immutable configmap data', patch('configmaps', 'frozen', { data: { a: 'c' } }), 422, ['data']],
      ['immutable configmap flag', patch('configmaps', 'frozen', { immutable: false }), 422, ['immutable']],
      ['immutable secret data', patch('secrets', 'frozen', { data: { a: b64('c') } }), 422, ['data']],
    ];
    for (const [what, response, code, fields] of cases) {
      const res = await response;
      assert.equal(res.status, code, `${what}: ${res.text}`);
      const status = res.json as StatusBody;
      assert.equal(status.code, code, what);
      assert.equal(status.reason, code === 422 ? 'Invalid' : 'BadRequest', what);
      assert.deepEqual(status.details?.causes?.map((c) => c.field), fields, `${what}: ${res.text}`);
    }
    for (const name of ['frozen', 'tls']) assert.equal((await request(server, 'DELETE', `/api/v1/namespaces/${ns}/secrets/${name}`)).status, 200);
    assert.equal((await request(server, 'DELETE', `/api/v1/namespaces/${ns}/configmaps/frozen`)).status, 200);
  });

  it('the official Python client creates, reads, patches and deletes Secrets with string_data (test/python/secrets_test.py)', async () => {
    canaries.push('s3cr3t');
    await runPythonClientScript('secrets_test.py', [server.kubeconfig], { minChecks: 23 });
  });

  it('the server logged none of the secret values', () => {
    assert.ok(canaries.length >= 7, 'the tests above recorded their values');
    const log = server.output();
    for (const canary of canaries) assert.equal(log.includes(canary), false, `the server logged ${canary}`);
  });
});
