/**
 * Secrets encryption at rest with real `drover server` processes (`secrets-encryption: true`):
 * Secrets created with kubectl never reach the SQLite files (database and WAL) or etcd
 * (`etcdctl get`) in plaintext, raw or base64, while a ConfigMap's plaintext does (so the search
 * can fail); `drover secrets-encrypt status` and `rotate-keys`; a rotation while a writer keeps
 * creating and updating Secrets through two servers on one etcd loses no write and leaves only
 * the new key in etcd; reads from before a finished rotation answer 410 Expired; the endpoints
 * refuse nodes; the setting turned on and off on an existing cluster.
 *
 * Needs kubectl, etcd and etcdctl. Run:
 *   node --import tsx --test --test-timeout=600000 test/e2e/secrets-encryption.test.ts
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { SecretsEncryptionStatus } from '../../src/cluster/secrets-encryption.js';
import { joinSecret, joinToken, killRunningDrover, registerNode, runDrover } from '../helpers/agent.js';
import { type EtcdServer, startEtcd } from '../helpers/etcd.js';
import { holdWatch } from '../helpers/hostile.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, serverArgs, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const EXIT_CONFIG = 78;
const ENVELOPE = 'drover:enc:aesgcm:v1:';
const b64 = (text: string): string => Buffer.from(text).toString('base64');
const unb64 = (text: string | undefined): string => Buffer.from(text ?? '', 'base64').toString('utf8');
/** A value no ciphertext will contain by chance. */
const canary = (what: string): string => `${what}-canary-${randomBytes(12).toString('hex')}`;

const kubectlCache = tempDir('enc-kubectl');
function kubectl(server: Pick<ServerProcess, 'kubeconfig'>, args: string[], input?: string) {
  return runKubectl(MODERN_KUBECTL, server.kubeconfig, kubectlCache, args, input === undefined ? {} : { input });
}
async function kubectlOk(server: Pick<ServerProcess, 'kubeconfig'>, args: string[], input?: string): Promise<string> {
  const result = await kubectl(server, args, input);
  assert.equal(result.code, 0, `kubectl ${args.join(' ')}: ${result.stderr}`);
  return result.stdout;
}

/** Every byte SQLite holds for the server's datastore: the database, its WAL and shared memory. */
function sqliteBytes(server: Pick<ServerProcess, 'dataDir'>): Buffer {
  const dir = path.join(server.dataDir, 'server', 'db');
  const files = fs.readdirSync(dir).filter((f) => f.startsWith('state.db'));
  assert.ok(files.includes('state.db'), `the database file is in ${dir}: ${files.join(', ')}`);
  return Buffer.concat(files.map((f) => fs.readFileSync(path.join(dir, f))));
}

/** `etcdctl get --prefix`: every current key and value under the prefix, bytes as etcd holds them. */
function etcdctlGet(etcd: EtcdServer, prefix: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    execFile(
      'etcdctl',
      ['--endpoints', etcd.endpoint, 'get', '--prefix', prefix],
      { env: { ...process.env, ETCDCTL_API: '3' }, encoding: 'buffer', maxBuffer: 64 << 20, timeout: 30_000 },
      (error, stdout, stderr) => (error ? reject(new Error(`etcdctl get: ${error.message} ${stderr.toString()}`)) : resolve(stdout)),
    );
  });
}

function count(haystack: Buffer, needle: string): number {
  let n = 0;
  for (let at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) n++;
  return n;
}

/** The plaintext neither as is nor base64-encoded (as a Secret's data holds it). */
function assertAbsent(bytes: Buffer, plaintext: string, where: string): void {
  assert.equal(bytes.includes(plaintext), false, `${where} holds the plaintext ${plaintext}`);
  assert.equal(bytes.includes(b64(plaintext)), false, `${where} holds the base64 of ${plaintext}`);
}

async function status(server: Pick<ServerProcess, 'kubeconfig'>): Promise<SecretsEncryptionStatus> {
  const result = await runDrover(['secrets-encrypt', 'status', '--json', '--kubeconfig', server.kubeconfig]);
  assert.equal(result.code, 0, `secrets-encrypt status: ${result.stderr}`);
  return JSON.parse(result.stdout) as SecretsEncryptionStatus;
}

async function rotate(server: Pick<ServerProcess, 'kubeconfig'>): Promise<string> {
  const result = await runDrover(['secrets-encrypt', 'rotate-keys', '--kubeconfig', server.kubeconfig], 300_000);
  assert.equal(result.code, 0, `secrets-encrypt rotate-keys: ${result.stderr}`);
  const key = /Keys rotated: (aesgcmkey-\S+) is the active key/.exec(result.stdout)?.[1];
  assert.ok(key, `rotate-keys names the new key: ${result.stdout}`);
  return key;
}

async function secretValue(server: ServerProcess, name: string, field: string): Promise<string> {
  const res = await request(server, 'GET', `/api/v1/namespaces/default/secrets/${name}`);
  assert.equal(res.status, 200, `GET secret ${name}: ${res.text}`);
  return unb64((res.json as { data?: Record<string, string> }).data?.[field]);
}

after(() => killRunningDrover());

describe('secrets-encryption on SQLite', { concurrency: false }, () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer({ args: ['--secrets-encryption'] });
  });
  after(() => cleanup());

  it('the SQLite files hold no Secret plaintext, raw or base64, while a ConfigMap’s plaintext is there', async () => {
    const literal = canary('literal');
    const applied = canary('string-data');
    const plain = canary('configmap');
    await kubectlOk(server, ['create', 'secret', 'generic', 'db-password', `--from-literal=password=${literal}`]);
    // stringData is merged into data; kubectl apply also keeps the whole object in an annotation.
    await kubectlOk(server, ['apply', '-f', '-'], `apiVersion: v1\nkind: Secret\nmetadata:\n  name: applied\nstringData:\n  token: ${applied}\n`);
    await kubectlOk(server, ['create', 'configmap', 'settings', `--from-literal=note=${plain}`]);

    // Reads decrypt: kubectl gets back what it wrote.
    assert.equal(unb64(await kubectlOk(server, ['get', 'secret', 'db-password', '-o', 'jsonpath={.data.password}'])), literal);
    assert.equal(unb64(await kubectlOk(server, ['get', 'secret', 'applied', '-o', 'jsonpath={.data.token}'])), applied);

    const bytes = sqliteBytes(server);
    assert.ok(bytes.includes(plain), 'the ConfigMap’s plaintext is in the files: the search finds what is there');
    assert.ok(bytes.includes(ENVELOPE), 'Secrets are stored as envelopes');
    assertAbsent(bytes, literal, 'the SQLite files');
    assertAbsent(bytes, applied, 'the SQLite files');
  });

  it('drover secrets-encrypt status prints the state, the active key and where the Secrets are', async () => {
    const result = await runDrover(['secrets-encrypt', 'status', '--kubeconfig', server.kubeconfig]);
    assert.equal(result.code, 0, result.stderr);
    const key = /^ \*      AES-GCM   (aesgcmkey-\S+)$/m.exec(result.stdout)?.[1];
    assert.ok(key, `one active AES-GCM key: ${result.stdout}`);
    const stored = Number(/^\s+(\d+)\s+aesgcmkey-/m.exec(result.stdout)?.[1]);
    assert.match(
      result.stdout,
      new RegExp(
        `^Encryption Status: Enabled\nCurrent Rotation Stage: start\nServer Encryption Hashes: All hashes match\n\n` +
          `Active  Key Type  Name\n------  --------  ----\n \\*      AES-GCM   ${key}\n\nStored Secrets:\n\\s+${stored}  ${key}\n$`,
      ),
    );
    assert.ok(stored >= 2, 'the census counts the Secrets stored so far');
    const json = await status(server);
    assert.equal(json.enabled, true);
    assert.equal(json.activeKey, key);
    assert.equal(json.servers.length, 1);
    assert.equal(fs.statSync(path.join(server.dataDir, 'server/cred/encryption-config.json')).mode & 0o777, 0o600);

    const help = await runDrover(['secrets-encrypt', '--help']);
    assert.match(help.stdout, /status/);
    assert.match(help.stdout, /rotate-keys/);
    const missing = await runDrover(['secrets-encrypt', 'status', '--kubeconfig', path.join(server.dataDir, 'nope.yaml')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^drover secrets-encrypt status: kubeconfig .*nope\.yaml does not exist; pass --kubeconfig\n$/);
  });

  it('after a rotation, a list page or a watch from before it answers 410 Expired, and a new list reads every Secret', async () => {
    for (let i = 0; i < 3; i++) await kubectlOk(server, ['create', 'secret', 'generic', `page-${i}`, `--from-literal=n=${i}`]);
    const first = await request(server, 'GET', '/api/v1/namespaces/default/secrets?limit=1');
    assert.equal(first.status, 200, first.text);
    const { resourceVersion, continue: token } = (first.json as { metadata: { resourceVersion: string; continue?: string } }).metadata;
    assert.ok(token, 'a continue token');
    // Written after the watch's starting point, under the key the rotation is about to drop.
    await kubectlOk(server, ['create', 'secret', 'generic', 'late', '--from-literal=n=late']);
    const before = await status(server);

    const newKey = await rotate(server);
    assert.notEqual(newKey, before.activeKey);
    const after = await status(server);
    assert.equal(after.stage, 'reencrypt_finished');
    assert.deepEqual(after.keys, [{ name: newKey, active: true }]);
    assert.deepEqual(after.values, { [newKey]: Object.values(before.values).reduce((a, b) => a + b, 0) }, 'every Secret under the new key');

    const page = await request(server, 'GET', `/api/v1/namespaces/default/secrets?limit=1&continue=${encodeURIComponent(token)}`);
    assert.equal(page.status, 410, page.text);
    assert.equal((page.json as { reason: string }).reason, 'Expired');
    assert.match((page.json as { message: string }).message, /continue parameter is too old.*a key that a finished rotation dropped/);

    const watch = await holdWatch(server, `/api/v1/namespaces/default/secrets?watch=1&resourceVersion=${resourceVersion}`, server.token);
    try {
      assert.equal(watch.status, 200);
      const error = await eventually(() => watch.lines().map((l) => JSON.parse(l) as { type: string; object: { code?: number; reason?: string } }).find((e) => e.type === 'ERROR'), 'the watch’s ERROR event');
      assert.equal(error.object.code, 410);
      assert.equal(error.object.reason, 'Expired');
    } finally {
      watch.close();
    }

    const fresh = await request(server, 'GET', '/api/v1/namespaces/default/secrets');
    assert.equal(fresh.status, 200, fresh.text);
    const names = (fresh.json as { items: { metadata: { name: string } }[] }).items.map((s) => s.metadata.name);
    for (const name of ['db-password', 'applied', 'page-0', 'page-1', 'page-2', 'late']) assert.ok(names.includes(name), `${name} in ${names.join(', ')}`);
    assert.equal(await secretValue(server, 'late', 'n'), 'late');
    assertAbsent(sqliteBytes(server), 'late-canary', 'the SQLite files');
  });

  it('only administrators and the server token may use the endpoints: a node and a non-admin get 403, no credential 401', async () => {
    const nodeToken = await registerNode(server, 'enc-node', 'enc-node-password');
    // A ServiceAccount's token, even bound to cluster-admin by RBAC: key management is not an API verb.
    await kubectlOk(server, ['create', 'serviceaccount', 'enc-operator']);
    await kubectlOk(server, ['create', 'clusterrolebinding', 'enc-operator-admin', '--clusterrole=cluster-admin', '--serviceaccount=default:enc-operator']);
    const userToken = (await kubectlOk(server, ['create', 'token', 'enc-operator'])).trim();
    const whoAmI = await request(server, 'GET', '/api/v1/namespaces/default/secrets', { token: userToken });
    assert.equal(whoAmI.status, 200, `the account's token works on the API, as cluster-admin: ${whoAmI.text}`);
    for (const [method, urlPath] of [
      ['GET', '/drover/v1/secrets-encryption/status'],
      ['POST', '/drover/v1/secrets-encryption/rotate-keys'],
    ] as const) {
      const asNode = await request(server, method, urlPath, { token: nodeToken });
      assert.equal(asNode.status, 403, `${method} ${urlPath} as a node: ${asNode.text}`);
      assert.match((asNode.json as { message: string }).message, /User "system:node:enc-node" cannot manage secrets encryption/);
      const asUser = await request(server, method, urlPath, { token: userToken });
      assert.equal(asUser.status, 403, `${method} ${urlPath} as a ServiceAccount bound to cluster-admin: ${asUser.text}`);
      assert.match((asUser.json as { message: string }).message, /User "system:serviceaccount:default:enc-operator" cannot manage secrets encryption/);
      const anonymous = await request(server, method, urlPath, { token: null });
      assert.equal(anonymous.status, 401, `${method} ${urlPath} without a credential: ${anonymous.text}`);
      const wrong = await request(server, method, urlPath, { token: 'not-a-token' });
      assert.equal(wrong.status, 401, `${method} ${urlPath} with a made-up token: ${wrong.text}`);
    }
    const stage = (await status(server)).stage;
    assert.equal(stage, 'reencrypt_finished', 'the refused rotate-keys started nothing');
    const asServer = await request(server, 'GET', '/drover/v1/secrets-encryption/status', { token: joinSecret(server) });
    assert.equal(asServer.status, 200, `the server token may: ${asServer.text}`);
    const wrongMethod = await request(server, 'GET', '/drover/v1/secrets-encryption/rotate-keys');
    assert.equal(wrongMethod.status, 405, wrongMethod.text);
  });
});

describe('turning secrets-encryption on and off on an existing cluster (SQLite)', { concurrency: false }, () => {
  after(() => cleanup());

  it('on: refused until the cluster’s setting changes, then the Secrets stored before are encrypted; off: decrypted again', async () => {
    const dataDir = tempDir('enc-toggle');
    const secret = canary('before');
    let server = await startServer({ dataDir });
    await kubectlOk(server, ['create', 'secret', 'generic', 'early', `--from-literal=password=${secret}`]);
    const off = await status(server);
    assert.equal(off.enabled, false);
    assert.equal(off.values[''], 1, 'stored in plaintext');
    const rotateOff = await runDrover(['secrets-encrypt', 'rotate-keys', '--kubeconfig', server.kubeconfig]);
    assert.equal(rotateOff.code, 1);
    assert.match(rotateOff.stderr, /^drover secrets-encrypt rotate-keys: secrets encryption is not enabled on this server/);

    // A server that disagrees with the cluster's record does not start.
    await server.stop();
    const refused = await runDrover(serverArgs(dataDir, { args: ['--secrets-encryption'] }), 60_000);
    assert.equal(refused.code, EXIT_CONFIG, refused.stderr);
    assert.match(refused.stderr, /secrets-encryption: this server has true \(flag:--secrets-encryption\), but the cluster has false/);

    // The cluster's setting changed on the live cluster, then the server restarted with it.
    server = await startServer({ dataDir });
    const set = await runDrover(['cluster', 'config', 'set', 'secrets-encryption=true', '--kubeconfig', server.kubeconfig]);
    assert.equal(set.code, 0, set.stderr);
    await server.stop();
    server = await startServer({ dataDir, args: ['--secrets-encryption'] });
    const on = await status(server);
    assert.equal(on.enabled, true);
    assert.deepEqual(on.values, { [on.activeKey!]: 1 }, 'the Secret stored before is encrypted now');
    assert.equal(await secretValue(server, 'early', 'password'), secret);
    const written = canary('while-on');
    await kubectlOk(server, ['create', 'secret', 'generic', 'while-on', `--from-literal=password=${written}`]);
    assertAbsent(sqliteBytes(server), written, 'the SQLite files');

    // Off again: the Secrets are rewritten in plaintext, and stay readable.
    const unset = await runDrover(['cluster', 'config', 'set', 'secrets-encryption=false', '--kubeconfig', server.kubeconfig]);
    assert.equal(unset.code, 0, unset.stderr);
    await server.stop();
    server = await startServer({ dataDir });
    const offAgain = await status(server);
    assert.equal(offAgain.enabled, false);
    assert.deepEqual(offAgain.values, { '': 2 }, 'both Secrets stored in plaintext again');
    assert.equal(await secretValue(server, 'early', 'password'), secret);
    assert.equal(await secretValue(server, 'while-on', 'password'), written);
    const text = await runDrover(['secrets-encrypt', 'status', '--kubeconfig', server.kubeconfig]);
    assert.match(text.stdout, /^Encryption Status: Disabled\n/);
    assert.match(text.stdout, /^\s+2  \(not encrypted\)$/m);
  });
});

describe('secrets-encryption on etcd, two servers', { concurrency: false }, () => {
  let etcd: EtcdServer;
  let a: ServerProcess;
  let b: ServerProcess;
  before(async () => {
    etcd = await startEtcd();
    const endpoint = etcd.endpoint.replace(/^https?:\/\//, 'etcd://');
    a = await startServer({ args: ['--datastore-endpoint', endpoint, '--node-name', 'enc-a', '--secrets-encryption'] });
    b = await startServer({ args: ['--datastore-endpoint', endpoint, '--node-name', 'enc-b', '--secrets-encryption', '--token', joinToken(a)] });
  });
  after(async () => {
    await cleanup();
    await etcd?.stop();
  });

  it('etcdctl get shows no Secret plaintext, raw or base64, while a ConfigMap’s plaintext is there', async () => {
    const secret = canary('etcd-secret');
    const plain = canary('etcd-configmap');
    await kubectlOk(a, ['create', 'secret', 'generic', 'etcd-secret', `--from-literal=password=${secret}`]);
    await kubectlOk(a, ['create', 'configmap', 'etcd-settings', `--from-literal=note=${plain}`]);
    assert.equal(unb64(await kubectlOk(b, ['get', 'secret', 'etcd-secret', '-o', 'jsonpath={.data.password}'])), secret, 'the other server reads it');

    const configmaps = await etcdctlGet(etcd, '/registry/core/configmaps/');
    assert.ok(configmaps.includes(plain), 'etcdctl shows the ConfigMap’s plaintext: the search finds what is there');
    const secrets = await etcdctlGet(etcd, '/registry/core/secrets/');
    assert.ok(secrets.includes('/registry/core/secrets/default/etcd-secret'), 'etcdctl lists the Secret');
    assert.ok(secrets.includes(ENVELOPE));
    assertAbsent(secrets, secret, 'etcd');
    assertAbsent(await etcdctlGet(etcd, ''), secret, 'etcd (every key)');
  });

  it('rotate-keys while a writer creates and updates Secrets through both servers loses no write; etcd then holds only the new key', async () => {
    const oldKey = (await status(a)).activeKey!;
    const NAMES = 12;
    const last = new Map<string, string>();
    let rotating = true;
    let duringRotation = 0;
    let failure: string | undefined;
    const writer = (async () => {
      for (let i = 0; (rotating || i < 2 * NAMES) && !failure; i++) {
        const server = i % 2 === 0 ? a : b;
        const name = `w-${i % NAMES}`;
        const value = canary(`w${i}`);
        const res = last.has(name)
          ? await request(server, 'PATCH', `/api/v1/namespaces/default/secrets/${name}`, {
              body: { data: { value: b64(value) } },
              headers: { 'Content-Type': 'application/merge-patch+json' },
            })
          : await request(server, 'POST', '/api/v1/namespaces/default/secrets', {
              body: { apiVersion: 'v1', kind: 'Secret', metadata: { name }, data: { value: b64(value) } },
            });
        if (res.status !== 200 && res.status !== 201) {
          failure = `write ${i} (${name}) through ${server === a ? 'a' : 'b'}: HTTP ${res.status} ${res.text}`;
          break;
        }
        last.set(name, value);
        if (rotating) duringRotation++;
      }
    })();
    await eventually(() => last.size >= NAMES / 2, 'the writer to be under way');
    const newKey = await rotate(a);
    rotating = false;
    await writer;
    assert.equal(failure, undefined, failure);
    assert.ok(duringRotation > NAMES / 2, `the writer kept writing during the rotation (${duringRotation} writes)`);

    // Every Secret reads back its last written value, through the other server.
    assert.equal(last.size, NAMES);
    for (const [name, value] of last) assert.equal(await secretValue(b, name, 'value'), value, `${name} kept its last write`);
    assert.equal(unb64(await kubectlOk(b, ['get', 'secret', 'etcd-secret', '-o', 'jsonpath={.data.password}'])).startsWith('etcd-secret-canary-'), true);

    const stored = await etcdctlGet(etcd, '/registry/core/secrets/');
    const total = count(stored, '/registry/core/secrets/');
    assert.equal(total, NAMES + 1);
    assert.equal(count(stored, `${ENVELOPE}${newKey}:`), total, 'every Secret under the new key');
    assert.equal(count(stored, `${ENVELOPE}${oldKey}:`), 0, 'none under the old key');
    for (const value of last.values()) assertAbsent(stored, value, 'etcd');

    const seen = await status(b);
    assert.equal(seen.stage, 'reencrypt_finished');
    assert.deepEqual(seen.keys, [{ name: newKey, active: true }]);
    assert.equal(seen.servers.length, 2, 'both servers acknowledge the key set');
    assert.equal(seen.hashesMatch, true);
    assert.deepEqual(seen.values, { [newKey]: NAMES + 1 });
  });
});
