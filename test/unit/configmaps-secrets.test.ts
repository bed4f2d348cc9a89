/**
 * ConfigMap and Secret rules as kube-apiserver has them (key names, 1 MiB, base64, stringData,
 * Secret types and their keys, type and immutable on update), run through a real ObjectStore on
 * a SQLite file, so each refusal is the ApiError a client would get. Also: the Secret kind's
 * storage prefix is the one encryption at rest covers, and a Secret written through the store
 * reaches the database encrypted.
 *
 * Run: node --import tsx --test test/unit/configmaps-secrets.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { ApiError, type StatusCause } from '../../src/apiserver/errors.js';
import { base64ErrorOffset, configKeyProblems, MAX_CONFIG_BYTES } from '../../src/apiserver/kinds/config-data.js';
import { CONFIGMAP_DEFINITION } from '../../src/apiserver/kinds/configmaps.js';
import { RESOURCES } from '../../src/apiserver/kinds/index.js';
import { NAMESPACE_DEFINITION } from '../../src/apiserver/kinds/namespaces.js';
import { goJsonSyntaxError } from '../../src/apiserver/kinds/go-json-syntax.js';
import { dockerConfigProblem, SECRET_DEFINITION } from '../../src/apiserver/kinds/secrets.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { EncryptingDatastore, generateEncryptionKey, SECRETS_PREFIX } from '../../src/datastore/encryption.js';
import { openSqliteDatastore, type SqliteDatastore } from '../../src/datastore/sqlite.js';

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-cm-secrets-'));
  dirs.push(dir);
  return dir;
}

const b64 = (text: string | Buffer): string => Buffer.from(text).toString('base64');
const KEY_REGEX_MESSAGE =
  "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/** The ApiError a promise rejects with. */
async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  assert.fail('expected the write to be refused');
}

const causesOf = (error: ApiError): StatusCause[] => error.details?.causes ?? [];

describe('key names and base64, as apimachinery has them', () => {
  it('takes keys of [-._a-zA-Z0-9]+ up to 253 bytes that do not climb out of a directory', () => {
    for (const good of ['a', 'key.name', 'KEY_NAME', 'key-name', '.dotfile', 'tls.crt', '.dockerconfigjson', 'x'.repeat(253)]) {
      assert.deepEqual(configKeyProblems(good), [], good);
    }
    assert.deepEqual(configKeyProblems('a b'), [KEY_REGEX_MESSAGE]);
    assert.deepEqual(configKeyProblems(''), [KEY_REGEX_MESSAGE]);
    assert.deepEqual(configKeyProblems('a/b'), [KEY_REGEX_MESSAGE]);
    assert.deepEqual(configKeyProblems('.'), ["must not be '.'"]);
    assert.deepEqual(configKeyProblems('..'), ["must not be '..'"]);
    assert.deepEqual(configKeyProblems('..data'), ["must not start with '..'"]);
    assert.deepEqual(configKeyProblems('x'.repeat(254)), ['must be no more than 253 characters']);
    // Go counts bytes: 127 two-byte letters are 254 bytes (and not in the alphabet either).
    assert.deepEqual(configKeyProblems('é'.repeat(127)), ['must be no more than 253 characters', KEY_REGEX_MESSAGE]);
  });

  it("finds the input byte Go's base64.StdEncoding reports", () => {
    for (const good of ['', 'YQ==', 'YWI=', 'YWJj', 'YWJj\nYWJj', 'YW\r\nJj', 'YQ==\n']) assert.equal(base64ErrorOffset(good), undefined, good);
    assert.equal(base64ErrorOffset('YWJ'), 0, 'missing padding: the quantum it starts');
    assert.equal(base64ErrorOffset('YWJjY'), 4);
    assert.equal(base64ErrorOffset('YWJj!'), 4, 'a character outside the alphabet');
    assert.equal(base64ErrorOffset('YW=j'), 2, 'one = where two belong');
    assert.equal(base64ErrorOffset('Y==='), 1, 'padding too early');
    assert.equal(base64ErrorOffset('YQ=='.concat('YQ==')), 4, 'data after the padding');
    assert.equal(base64ErrorOffset('YQ='), 3, 'padding cut short');
    assert.equal(base64ErrorOffset('aé=='), 1, 'a byte outside ASCII');
  });

  it("reports JSON syntax errors in Go's words, quoting one character at most", () => {
    const error = (text: string): string | undefined => goJsonSyntaxError(Buffer.from(text, 'latin1'));
    for (const good of ['{}', '[]', 'null', ' 1 ', '"x"', '[1,{"a":[true,false,null,-0.5e+3,0,1E9]},"\\u00e9\\n"]']) assert.equal(error(good), undefined, good);
    const cases: [string, string][] = [
      ['', 'unexpected end of JSON input'],
      ['   ', 'unexpected end of JSON input'],
      ['{"a":1', 'unexpected end of JSON input'],
      ['"abc', 'unexpected end of JSON input'],
      ['tru', 'unexpected end of JSON input'],
      ['1.', 'unexpected end of JSON input'],
      ['hunter2', "invalid character 'h' looking for beginning of value"],
      ['{"auths": hunter2', "invalid character 'h' looking for beginning of value"],
      ['[1,]', "invalid character ']' looking for beginning of value"],
      ['{a:1}', "invalid character 'a' looking for beginning of object key string"],
      ['{"a":1,}', "invalid character '}' looking for beginning of object key string"],
      ['{"a" 1}', "invalid character '1' after object key"],
      ['{"a":1 "b":2}', `invalid character '"' after object key:value pair`],
      ['[1 2]', "invalid character '2' after array element"],
      ['{"a":1}x', "invalid character 'x' after top-level value"],
      ['01', "invalid character '1' after top-level value"],
      ['trux', "invalid character 'x' in literal true (expecting 'e')"],
      ['nul1', "invalid character '1' in literal null (expecting 'l')"],
      ['fals', 'unexpected end of JSON input'],
      ['-a', "invalid character 'a' in numeric literal"],
      ['1.x', "invalid character 'x' after decimal point in numeric literal"],
      ['1ex', "invalid character 'x' in exponent of numeric literal"],
      ['"a\x01"', "invalid character '\\x01' in string literal"],
      ['"a\tb"', "invalid character '\\t' in string literal"],
      ['"\\q"', "invalid character 'q' in string escape code"],
      ['"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"],
      ["'x'", "invalid character '\\'' looking for beginning of value"],
      ['\x80', "invalid character '\\u0080' looking for beginning of value"],
      ['\xe9', "invalid character 'é' looking for beginning of value"],
    ];
    for (const [text, message] of cases) assert.equal(error(text), message, JSON.stringify(text));
    // Deep nesting is scanned without recursion.
    assert.equal(error('['.repeat(200_000)), 'unexpected end of JSON input');
    assert.equal(error(`${'['.repeat(200_000)}${']'.repeat(200_000)}`), undefined);
  });

  it('words a bad docker config as Go does, never echoing it', () => {
    assert.equal(dockerConfigProblem(Buffer.from('{"auths":{}}')), undefined);
    assert.equal(dockerConfigProblem(Buffer.from('null')), undefined, 'Go unmarshals null into a map without complaint');
    assert.equal(dockerConfigProblem(Buffer.from('')), 'unexpected end of JSON input');
    assert.equal(dockerConfigProblem(Buffer.from('{"auths":')), 'unexpected end of JSON input');
    assert.equal(dockerConfigProblem(Buffer.from('[1]')), 'json: cannot unmarshal array into Go value of type map[string]interface {}');
    assert.equal(dockerConfigProblem(Buffer.from('"s"')), 'json: cannot unmarshal string into Go value of type map[string]interface {}');
    assert.equal(dockerConfigProblem(Buffer.from('hunter2')), "invalid character 'h' looking for beginning of value");
    assert.equal(dockerConfigProblem(Buffer.from('{"auths": {"r": {"password": "hunter2" }')), 'unexpected end of JSON input');
  });
});

describe('ConfigMaps and Secrets through the ObjectStore', () => {
  let datastore: SqliteDatastore;
  let store: ObjectStore;

  before(async () => {
    datastore = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    store = new ObjectStore(datastore);
    await store.create(NAMESPACE_DEFINITION, undefined, { metadata: { name: 'default' } });
  });
  after(async () => {
    await datastore.close();
  });

  const configMap = (name: string, body: Record<string, unknown>): Promise<KubeObject> =>
    store.create(CONFIGMAP_DEFINITION, 'default', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, ...body });
  const secret = (name: string, body: Record<string, unknown>, annotations?: Record<string, string>): Promise<KubeObject> =>
    store.create(SECRET_DEFINITION, 'default', { apiVersion: 'v1', kind: 'Secret', metadata: { name, ...(annotations ? { annotations } : {}) }, ...body });
  const update = (def: typeof SECRET_DEFINITION, name: string, change: (obj: KubeObject) => void): Promise<KubeObject> =>
    store.guaranteedUpdate(def, 'default', name, (obj) => {
      change(obj);
      return obj;
    });

  it('are listed in discovery order, with their short name and the Secret type selector', () => {
    assert.ok(RESOURCES.includes(CONFIGMAP_DEFINITION) && RESOURCES.includes(SECRET_DEFINITION));
    assert.deepEqual(CONFIGMAP_DEFINITION.shortNames, ['cm']);
    assert.deepEqual(Object.keys(SECRET_DEFINITION.fieldLabels), ['type']);
  });

  it('keeps a ConfigMap as sent, with binaryData in canonical base64 and empty maps left out', async () => {
    const cm = await configMap('ok', { data: { 'game.properties': 'lives=3\n', empty: '' }, binaryData: { 'logo.bin': 'AAH/\n' }, immutable: false });
    assert.deepEqual(cm.data, { 'game.properties': 'lives=3\n', empty: '' });
    assert.deepEqual(cm.binaryData, { 'logo.bin': 'AAH/' });
    const bare = await configMap('bare', { data: {}, binaryData: null });
    assert.equal('data' in bare || 'binaryData' in bare, false);
  });

  it('refuses bad ConfigMap keys, a key in both maps and more than 1 MiB, each with its field (422)', async () => {
    const keys = await refusal(configMap('badkeys', { data: { 'a b': 'x', '..x': 'y' }, binaryData: { 'c/d': b64('z') } }));
    assert.equal(keys.code, 422);
    assert.deepEqual(causesOf(keys), [
      { reason: 'FieldValueInvalid', message: `Invalid value: "a b": ${KEY_REGEX_MESSAGE}`, field: 'data[a b]' },
      { reason: 'FieldValueInvalid', message: `Invalid value: "..x": must not start with '..'`, field: 'data[..x]' },
      { reason: 'FieldValueInvalid', message: `Invalid value: "c/d": ${KEY_REGEX_MESSAGE}`, field: 'binaryData[c/d]' },
    ]);
    assert.match(keys.message, /^ConfigMap "badkeys" is invalid: \[data\[a b\]: Invalid value: "a b": a valid config key/);

    const both = await refusal(configMap('both', { data: { k: 'v' }, binaryData: { k: b64('v') } }));
    assert.deepEqual(causesOf(both), [{ reason: 'FieldValueInvalid', message: 'Invalid value: "k": duplicate of key present in binaryData', field: 'data[k]' }]);

    // The bound counts data as UTF-8 bytes plus binaryData's decoded bytes.
    const half = 'é'.repeat(MAX_CONFIG_BYTES / 4);
    await configMap('at-limit', { data: { a: half }, binaryData: { b: b64(Buffer.alloc(MAX_CONFIG_BYTES / 2)) } });
    const big = await refusal(configMap('too-big', { data: { a: half }, binaryData: { b: b64(Buffer.alloc(MAX_CONFIG_BYTES / 2 + 1)) } }));
    assert.equal(big.code, 422);
    assert.equal(big.message, 'ConfigMap "too-big" is invalid: []: Too long: must have at most 1048576 bytes');
    assert.deepEqual(causesOf(big), [{ reason: 'FieldValueTooLong', message: 'Too long: must have at most 1048576 bytes', field: '[]' }]);
  });

  it('answers a body of the wrong shape as kube-apiserver decoding does (400), naming the field', async () => {
    const cases: [Promise<unknown>, string, string][] = [
      [configMap('shape1', { data: { a: 1 } }), 'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string', 'data[a]'],
      [configMap('shape2', { data: ['a'] }), 'json: cannot unmarshal array into Go struct field ConfigMap.data of type map[string]string', 'data'],
      [configMap('shape3', { binaryData: { a: 'not base64!' } }), 'ConfigMap in version "v1" cannot be handled as a ConfigMap: illegal base64 data at input byte 3', 'binaryData[a]'],
      [configMap('shape4', { immutable: 'yes' }), 'json: cannot unmarshal string into Go struct field ConfigMap.immutable of type bool', 'immutable'],
      [secret('shape5', { data: { a: 'YWJ' } }), 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0', 'data[a]'],
      [secret('shape6', { stringData: { a: true } }), 'json: cannot unmarshal bool into Go struct field Secret.stringData of type string', 'stringData[a]'],
      [secret('shape7', { type: 7 }), 'json: cannot unmarshal number into Go struct field Secret.type of type v1.SecretType', 'type'],
    ];
    for (const [write, message, field] of cases) {
      const error = await refusal(write);
      assert.equal(error.code, 400, error.message);
      assert.ok(error.message.includes(message), `${error.message}\n  should include\n${message}`);
      assert.equal(causesOf(error)[0]?.field, field, error.message);
    }
  });

  it('merges stringData into data (stringData wins), never stores it, and defaults the type to Opaque', async () => {
    const created = await secret('merged', { data: { a: b64('from data'), b: b64('kept') }, stringData: { a: 'from stringData', c: 'new' } });
    assert.equal(created.type, 'Opaque');
    assert.equal('stringData' in created, false);
    assert.deepEqual(created.data, { a: b64('from stringData'), b: b64('kept'), c: b64('new') });
    const raw = await datastore.get(`${SECRETS_PREFIX}default/merged`);
    assert.ok(raw, 'stored under the Secrets prefix');
    assert.equal(raw.value.toString().includes('stringData'), false);

    const updated = await update(SECRET_DEFINITION, 'merged', (obj) => {
      obj.stringData = { b: 'changed' };
    });
    assert.deepEqual(updated.data, { a: b64('from stringData'), b: b64('changed'), c: b64('new') });
    assert.equal('stringData' in updated, false);
    assert.equal((await store.get(SECRET_DEFINITION, 'default', 'merged')).stringData, undefined);
  });

  it('refuses bad Secret keys (from data or stringData) and more than 1 MiB of data (422)', async () => {
    const keys = await refusal(secret('badkeys', { data: { 'a b': b64('x') }, stringData: { '.': 'y' } }));
    assert.equal(keys.code, 422);
    assert.deepEqual(causesOf(keys), [
      { reason: 'FieldValueInvalid', message: `Invalid value: "a b": ${KEY_REGEX_MESSAGE}`, field: 'data[a b]' },
      { reason: 'FieldValueInvalid', message: `Invalid value: ".": must not be '.'`, field: 'data[.]' },
    ]);
    await secret('at-limit', { data: { a: b64(Buffer.alloc(MAX_CONFIG_BYTES)) } });
    const big = await refusal(secret('too-big', { data: { a: b64(Buffer.alloc(MAX_CONFIG_BYTES)) }, stringData: { b: 'x' } }));
    assert.equal(big.message, 'Secret "too-big" is invalid: data: Too long: must have at most 1048576 bytes');
    assert.deepEqual(causesOf(big), [{ reason: 'FieldValueTooLong', message: 'Too long: must have at most 1048576 bytes', field: 'data' }]);
  });

  it('requires the keys of each built-in Secret type', async () => {
    const missing: [string, Record<string, unknown>, StatusCause[]][] = [
      ['kubernetes.io/tls', {}, [
        { reason: 'FieldValueRequired', message: 'Required value', field: 'data[tls.crt]' },
        { reason: 'FieldValueRequired', message: 'Required value', field: 'data[tls.key]' },
      ]],
      ['kubernetes.io/tls', { stringData: { 'tls.crt': 'c' } }, [{ reason: 'FieldValueRequired', message: 'Required value', field: 'data[tls.key]' }]],
      ['kubernetes.io/dockerconfigjson', {}, [{ reason: 'FieldValueRequired', message: 'Required value', field: 'data[.dockerconfigjson]' }]],
      ['kubernetes.io/dockerconfigjson', { stringData: { '.dockerconfigjson': '{"auths": ' } }, [
        { reason: 'FieldValueInvalid', message: 'Invalid value: "<secret contents redacted>": unexpected end of JSON input', field: 'data[.dockerconfigjson]' },
      ]],
      ['kubernetes.io/dockercfg', { stringData: { '.dockercfg': '[]' } }, [
        { reason: 'FieldValueInvalid', message: 'Invalid value: "<secret contents redacted>": json: cannot unmarshal array into Go value of type map[string]interface {}', field: 'data[.dockercfg]' },
      ]],
      ['kubernetes.io/basic-auth', { stringData: { other: 'x' } }, [
        { reason: 'FieldValueRequired', message: 'Required value', field: 'data[username]' },
        { reason: 'FieldValueRequired', message: 'Required value', field: 'data[password]' },
      ]],
      ['kubernetes.io/ssh-auth', { stringData: { 'ssh-privatekey': '' } }, [{ reason: 'FieldValueRequired', message: 'Required value', field: 'data[ssh-privatekey]' }]],
      ['kubernetes.io/service-account-token', {}, [
        { reason: 'FieldValueRequired', message: 'Required value', field: 'metadata.annotations[kubernetes.io/service-account.name]' },
      ]],
    ];
    for (const [index, [type, body, causes]] of missing.entries()) {
      const error = await refusal(secret(`typed-${index}`, { type, ...body }));
      assert.equal(error.code, 422, `${type}: ${error.message}`);
      assert.deepEqual(causesOf(error), causes, type);
    }
    // And with them, each is taken.
    await secret('tls', { type: 'kubernetes.io/tls', stringData: { 'tls.crt': 'cert', 'tls.key': 'key' } });
    await secret('docker', { type: 'kubernetes.io/dockerconfigjson', stringData: { '.dockerconfigjson': '{"auths":{}}' } });
    await secret('basic', { type: 'kubernetes.io/basic-auth', stringData: { password: '' } });
    await secret('ssh', { type: 'kubernetes.io/ssh-auth', stringData: { 'ssh-privatekey': 'k' } });
    await secret('sa', { type: 'kubernetes.io/service-account-token' }, { 'kubernetes.io/service-account.name': 'default' });
    await secret('custom', { type: 'example.com/anything' });
  });

  it('fixes the type at create', async () => {
    await secret('typed', { type: 'kubernetes.io/tls', stringData: { 'tls.crt': 'c', 'tls.key': 'k' } });
    const error = await refusal(update(SECRET_DEFINITION, 'typed', (obj) => {
      obj.type = 'Opaque';
    }));
    assert.equal(error.code, 422);
    assert.deepEqual(causesOf(error), [{ reason: 'FieldValueInvalid', message: 'Invalid value: "Opaque": field is immutable', field: 'type' }]);
    // An update that leaves the type out gets the default, which is a change too (as in Kubernetes).
    const omitted = await refusal(update(SECRET_DEFINITION, 'typed', (obj) => {
      delete obj.type;
    }));
    assert.equal(causesOf(omitted)[0]?.field, 'type');
  });

  it('freezes data and the flag of an immutable ConfigMap or Secret, but not its metadata', async () => {
    await configMap('frozen', { data: { a: 'b' }, immutable: true });
    const cmError = await refusal(update(CONFIGMAP_DEFINITION, 'frozen', (obj) => {
      obj.data = { a: 'changed' };
      obj.binaryData = { b: b64('new') };
      obj.immutable = false;
    }));
    assert.equal(cmError.code, 422);
    const forbidden = (field: string): StatusCause => ({ reason: 'FieldValueForbidden', message: 'Forbidden: field is immutable when `immutable` is set', field });
    assert.deepEqual(causesOf(cmError), [forbidden('immutable'), forbidden('data'), forbidden('binaryData')]);
    const unset = await refusal(update(CONFIGMAP_DEFINITION, 'frozen', (obj) => {
      delete obj.immutable;
    }));
    assert.deepEqual(causesOf(unset), [forbidden('immutable')]);
    const labelled = await update(CONFIGMAP_DEFINITION, 'frozen', (obj) => {
      obj.metadata.labels = { team: 'a' };
    });
    assert.deepEqual(labelled.metadata.labels, { team: 'a' });

    await secret('frozen', { stringData: { password: 'hunter2' }, immutable: true });
    const secretError = await refusal(update(SECRET_DEFINITION, 'frozen', (obj) => {
      obj.stringData = { password: 'changed' };
    }));
    assert.deepEqual(causesOf(secretError), [forbidden('data')]);
    assert.equal(secretError.message.includes('hunter2') || secretError.message.includes('changed'), false, 'no value in the message');
    // The same bytes, sent through stringData or in another base64 layout, are no change.
    await update(SECRET_DEFINITION, 'frozen', (obj) => {
      obj.stringData = { password: 'hunter2' };
    });
    await update(SECRET_DEFINITION, 'frozen', (obj) => {
      obj.data = { password: `${b64('hunter2').slice(0, 4)}\n${b64('hunter2').slice(4)}` };
    });
    // Deleting an immutable object is fine.
    assert.equal((await store.delete(SECRET_DEFINITION, 'default', 'frozen')).removed, true);
  });

  it('prints DATA (and TYPE for Secrets) without a value', async () => {
    const cm = await store.get(CONFIGMAP_DEFINITION, 'default', 'ok');
    assert.deepEqual(CONFIGMAP_DEFINITION.printer.columns.map((c) => c.name), ['Name', 'Data', 'Age']);
    assert.deepEqual(CONFIGMAP_DEFINITION.printer.cells(cm, Date.parse(cm.metadata.creationTimestamp!) + 5000), ['ok', 3, '5s']);
    const merged = await store.get(SECRET_DEFINITION, 'default', 'merged');
    assert.deepEqual(SECRET_DEFINITION.printer.columns.map((c) => c.name), ['Name', 'Type', 'Data', 'Age']);
    assert.deepEqual(SECRET_DEFINITION.printer.cells(merged, Date.parse(merged.metadata.creationTimestamp!) + 5000), ['merged', 'Opaque', 3, '5s']);
    assert.equal(SECRET_DEFINITION.fieldLabels.type!(merged), 'Opaque');
  });
});

describe('Secrets and encryption at rest', () => {
  it('are stored under SECRETS_PREFIX, the prefix the encrypting datastore covers', async () => {
    const datastore = openSqliteDatastore(path.join(tempDir(), 'prefix.db'));
    const store = new ObjectStore(datastore);
    assert.equal(store.keyPrefix(SECRET_DEFINITION), SECRETS_PREFIX);
    assert.equal(store.key(SECRET_DEFINITION, 'ns', 'name'), `${SECRETS_PREFIX}ns/name`);
    await datastore.close();
  });

  it('reach the database encrypted when written through the ObjectStore, and read back in plaintext', async () => {
    const dbFile = path.join(tempDir(), 'state.db');
    const inner = openSqliteDatastore(dbFile);
    const encrypting = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    const store = new ObjectStore(encrypting);
    try {
      await store.create(NAMESPACE_DEFINITION, undefined, { metadata: { name: 'default' } });
      const canary = `canary-${process.pid}-${Date.now()}`;
      await store.create(SECRET_DEFINITION, 'default', { metadata: { name: 'db' }, stringData: { password: canary } });
      const raw = await inner.get(`${SECRETS_PREFIX}default/db`);
      assert.ok(raw, 'the Secret is under the prefix');
      assert.ok(raw.value.toString('latin1').startsWith('drover:enc:'), 'and its value is an envelope');
      assert.equal(raw.value.includes(b64(canary)), false);
      const read = await store.get(SECRET_DEFINITION, 'default', 'db');
      assert.equal(Buffer.from((read.data as Record<string, string>).password!, 'base64').toString(), canary);
    } finally {
      await encrypting.close();
    }
  });
});
