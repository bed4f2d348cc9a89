/**
 * Encryption at rest on etcd: Secrets written through the EncryptingDatastore (with the cluster
 * key set from SecretsEncryption) are ciphertext to `etcdctl get`, reads and watches decrypt,
 * and a key rotation leaves every Secret under the new key, readable by a second server.
 *
 * Needs the `etcd` and `etcdctl` binaries (Debian: etcd-server, etcd-client). Run:
 *   node --import tsx --test test/e2e/secrets-encryption-etcd.test.ts
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';

import { SecretsEncryption } from '../../src/cluster/secrets-encryption.js';
import { EncryptingDatastore, SECRETS_PREFIX } from '../../src/datastore/encryption.js';
import { openEtcdDatastore } from '../../src/datastore/etcd.js';
import type { Datastore, WatchEvent } from '../../src/datastore/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { type EtcdServer, startEtcd } from '../helpers/etcd.js';

const run = promisify(execFile);
const logger = createLogger('silent');

/** `etcdctl get --prefix`: every key and value under the prefix, as etcd holds them. */
async function etcdctlGet(endpoint: string, prefix: string): Promise<string> {
  const { stdout } = await run('etcdctl', ['--endpoints', endpoint, 'get', '--prefix', prefix], { env: { ...process.env, ETCDCTL_API: '3' }, maxBuffer: 16 << 20 });
  return stdout;
}

describe('secrets encryption on etcd', () => {
  let etcd: EtcdServer;
  let dir: string;
  const stores: Datastore[] = [];
  const managers: SecretsEncryption[] = [];

  before(async () => {
    etcd = await startEtcd();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-enc-etcd-'));
  });
  after(async () => {
    for (const m of managers) await m.stop();
    for (const s of stores) await s.close();
    await etcd?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  async function server(id: string): Promise<{ encrypting: EncryptingDatastore; manager: SecretsEncryption }> {
    const inner = await openEtcdDatastore({ endpoints: [etcd.endpoint] });
    const encrypting = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: undefined, keys: [] } });
    stores.push(encrypting);
    const manager = new SecretsEncryption({ encrypting, dataDir: path.join(dir, id), joinSecret: 'etcd-test-join-secret', serverId: id, enabled: true, peers: async () => ['a', 'b'], logger });
    managers.push(manager);
    await manager.start();
    return { encrypting, manager };
  }

  it('etcdctl get never shows a Secret’s plaintext, before or after a key rotation', async () => {
    const a = await server('a');
    const b = await server('b');
    const canary = `etcd-canary-${Date.now()}`;
    const encoded = Buffer.from(canary).toString('base64');
    const events: WatchEvent[] = [];
    const watch = b.encrypting.watch(SECRETS_PREFIX, (await b.encrypting.currentRevision()) + 1, { onEvents: (e) => events.push(...e), onError: (e) => assert.fail(e) });
    for (let i = 0; i < 20; i++) {
      const value = { apiVersion: 'v1', kind: 'Secret', metadata: { name: `s${i}`, namespace: 'default' }, data: { token: encoded } };
      await a.encrypting.create(`${SECRETS_PREFIX}default/s${i}`, Buffer.from(JSON.stringify(value)));
    }

    const stored = await etcdctlGet(etcd.endpoint, SECRETS_PREFIX);
    assert.equal(stored.split('\n').filter((line) => line.startsWith(SECRETS_PREFIX)).length, 20, 'etcdctl sees the 20 Secrets');
    assert.ok(stored.includes('drover:enc:aesgcm:v1:'), 'stored as envelopes');
    assert.equal(stored.includes(canary) || stored.includes(encoded) || stored.includes('"kind":"Secret"'), false, 'no plaintext in etcd');

    // Server b reads and watches them in plaintext.
    const read = await b.encrypting.get(`${SECRETS_PREFIX}default/s7`);
    assert.equal((JSON.parse(read!.value.toString()) as { data: { token: string } }).data.token, encoded);
    const deadline = Date.now() + 30_000;
    while (events.length < 20 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    watch.cancel();
    assert.equal(events.length, 20);
    assert.ok(events.every((e) => e.kv.value.toString().includes(encoded)), 'watch events come decrypted');

    const { activeKey, rewritten } = await a.manager.rotateKeys();
    assert.equal(rewritten, 20);
    const rotated = await etcdctlGet(etcd.endpoint, SECRETS_PREFIX);
    assert.equal(rotated.split(`drover:enc:aesgcm:v1:${activeKey}:`).length - 1, 20, 'every Secret under the new key');
    assert.equal(rotated.includes(canary) || rotated.includes(encoded), false, 'no plaintext in etcd after the rotation');
    const status = await b.manager.status();
    assert.equal(status.stage, 'reencrypt_finished');
    assert.deepEqual(status.values, { [activeKey]: 20 });
    assert.equal((JSON.parse((await b.encrypting.get(`${SECRETS_PREFIX}default/s3`))!.value.toString()) as { data: { token: string } }).data.token, encoded);
  });
});
