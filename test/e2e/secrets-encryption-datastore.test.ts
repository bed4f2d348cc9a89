/**
 * Encryption at rest: the EncryptingDatastore decorator and the cluster's key management
 * (SecretsEncryption: key set sealed in the datastore, acknowledgements, rotation), on real
 * SQLite files in temp dirs. The raw database files are read byte for byte to show that no
 * Secret's plaintext reaches the disk.
 *
 * Run: node --import tsx --test test/e2e/secrets-encryption-datastore.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import { encryptionConfigFile, formatStatus, SecretsEncryption, SecretsEncryptionError } from '../../src/cluster/secrets-encryption.js';
import {
  DecryptionError,
  decryptValue,
  EncryptingDatastore,
  encryptValue,
  envelopeKeyName,
  generateEncryptionKey,
  type KeySet,
  SECRETS_PREFIX,
} from '../../src/datastore/encryption.js';
import { PlaintextCache } from '../../src/datastore/plaintext-cache.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { ConflictError, type Datastore, type KeyValue, type WatchCallbacks, type WatchEvent } from '../../src/datastore/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { runDatastoreConformance } from '../datastore/conformance.js';

const logger = createLogger('silent');
const JOIN_SECRET = 'join-secret-for-tests';
const dirs: string[] = [];
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-enc-'));
  dirs.push(dir);
  return dir;
}

const NO_KEYS: KeySet = { active: undefined, keys: [] };
const secretKey = (name: string, ns = 'default'): string => `${SECRETS_PREFIX}${ns}/${name}`;
/** A Secret as the API server stores it: JSON, data base64-encoded. */
function secretValue(name: string, plaintext: string): Buffer {
  return Buffer.from(JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: 'default' }, data: { password: Buffer.from(plaintext).toString('base64') } }));
}

/** Every byte SQLite wrote for this database: the file, its WAL and shared memory. */
function rawBytes(dbFile: string): Buffer {
  const dir = path.dirname(dbFile);
  return Buffer.concat(fs.readdirSync(dir).filter((f) => f.startsWith(path.basename(dbFile))).map((f) => fs.readFileSync(path.join(dir, f))));
}

async function waitFor(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('the envelope', () => {
  const k1 = generateEncryptionKey('k1');
  const k2 = generateEncryptionKey('k2');

  it('round-trips, names its key, and passes plaintext through', () => {
    const sealed = encryptValue(k1, '/registry/core/secrets/default/a', Buffer.from('{"x":1}'));
    assert.equal(envelopeKeyName(sealed), 'k1');
    assert.ok(sealed.toString('latin1').startsWith('drover:enc:aesgcm:v1:k1:'));
    assert.equal(decryptValue([k2, k1], '/registry/core/secrets/default/a', sealed).toString(), '{"x":1}');
    assert.equal(decryptValue([k1], '/k', Buffer.from('{"plain":true}')).toString(), '{"plain":true}');
  });

  it('refuses a value moved to another key, altered, or under a key it does not hold', () => {
    const sealed = encryptValue(k1, '/registry/core/secrets/default/a', Buffer.from('{"x":1}'));
    assert.throws(() => decryptValue([k1], '/registry/core/secrets/default/b', sealed), DecryptionError);
    const altered = Buffer.from(sealed);
    altered[altered.length - 20]! ^= 1;
    assert.throws(() => decryptValue([k1], '/registry/core/secrets/default/a', altered), /authentication with key "k1" failed/);
    assert.throws(() => decryptValue([k2], '/registry/core/secrets/default/a', sealed), /encrypted with key "k1", which this server does not hold/);
  });
});

describe('EncryptingDatastore on SQLite', () => {
  it('stores no Secret plaintext in the database files (while other keys stay as they are)', async () => {
    const dbFile = path.join(tempDir(), 'state.db');
    const inner = openSqliteDatastore(dbFile);
    const store = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    const canary = `canary-${Date.now()}-hunter2`;
    const created = await store.create(secretKey('db'), secretValue('db', canary));
    await store.update(secretKey('db'), secretValue('db', `${canary}-v2`), created.modRevision);
    await store.create(secretKey('other', 'kube-system'), secretValue('other', canary));
    const control = `control-${Date.now()}-plain`;
    await store.create('/registry/core/configmaps/default/cm', Buffer.from(JSON.stringify({ data: { v: control } })));
    await store.close();

    const bytes = rawBytes(dbFile);
    assert.ok(bytes.includes(control), 'the scan finds a plaintext value that is not a Secret');
    for (const needle of [canary, Buffer.from(canary).toString('base64'), Buffer.from(`${canary}-v2`).toString('base64'), '"kind":"Secret"']) {
      assert.equal(bytes.includes(needle), false, `${needle} is in the database files`);
    }
  });

  it('hands back plaintext from get, list, delete and watch (puts and deletes, with prevKv)', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const store = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    try {
      const start = (await store.currentRevision()) + 1;
      const events: WatchEvent[] = [];
      const watch = store.watch('/registry/', start, { onEvents: (e) => events.push(...e), onError: (e) => assert.fail(e) });
      const a = await store.create(secretKey('a'), Buffer.from('{"v":"a1"}'));
      assert.equal(a.value.toString(), '{"v":"a1"}', 'create returns what was written');
      await store.update(secretKey('a'), Buffer.from('{"v":"a2"}'), a.modRevision);
      for (const n of ['b', 'c', 'd']) await store.create(secretKey(n), Buffer.from(`{"v":"${n}"}`));
      assert.equal((await store.get(secretKey('a')))!.value.toString(), '{"v":"a2"}');
      assert.notEqual((await inner.get(secretKey('a')))!.value.toString(), '{"v":"a2"}', 'the inner store holds ciphertext');
      const page1 = await store.list(SECRETS_PREFIX, { limit: 2 });
      const page2 = await store.list(SECRETS_PREFIX, { continue: page1.items[1]!.key });
      assert.deepEqual([...page1.items, ...page2.items].map((kv) => kv.value.toString()), ['{"v":"a2"}', '{"v":"b"}', '{"v":"c"}', '{"v":"d"}']);
      const deleted = await store.delete(secretKey('b'));
      assert.equal(deleted.value.toString(), '{"v":"b"}');
      await waitFor(() => events.length === 6, 'six watch events');
      watch.cancel();
      assert.deepEqual(events.map((e) => [e.type, e.kv.value.toString(), e.prevKv?.value.toString()]), [
        ['put', '{"v":"a1"}', undefined],
        ['put', '{"v":"a2"}', '{"v":"a1"}'],
        ['put', '{"v":"b"}', undefined],
        ['put', '{"v":"c"}', undefined],
        ['put', '{"v":"d"}', undefined],
        ['delete', '{"v":"b"}', '{"v":"b"}'],
      ]);
    } finally {
      await store.close();
    }
  });

  it('reads values stored in plaintext before encryption, and reencrypt() encrypts them', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const store = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: NO_KEYS });
    try {
      await store.create(secretKey('old'), Buffer.from('{"v":"old"}'));
      assert.equal((await inner.get(secretKey('old')))!.value.toString(), '{"v":"old"}', 'no key: plaintext');
      await store.setKeySet({ active: 'k1', keys: [generateEncryptionKey('k1')] });
      assert.equal((await store.get(secretKey('old')))!.value.toString(), '{"v":"old"}');
      assert.deepEqual(await store.reencrypt(), { examined: 1, rewritten: 1 });
      assert.equal(envelopeKeyName((await inner.get(secretKey('old')))!.value), 'k1');
      assert.deepEqual(await store.reencrypt(), { examined: 1, rewritten: 0 }, 'nothing left to do');
      assert.equal((await store.get(secretKey('old')))!.value.toString(), '{"v":"old"}');
    } finally {
      await store.close();
    }
  });

  it('reencrypt() loses no write that lands between its read and its compare-and-swap', async () => {
    const sqlite = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    // The real store, with one interleaving forced: just before the rewrite of each key reaches
    // the store, a client's write to that key lands first.
    const racing = new Set<string>();
    let store!: EncryptingDatastore;
    const update = async (key: string, value: Buffer, rev: number) => {
      if (racing.delete(key)) {
        const current = (await store.get(key))!;
        await store.update(key, Buffer.from(`{"v":"client-${key.slice(-1)}"}`), current.modRevision);
      }
      return sqlite.update(key, value, rev);
    };
    const interposed = new Proxy(sqlite, {
      get: (target, property) => {
        if (property === 'update') return update;
        const value = Reflect.get(target, property, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    store = new EncryptingDatastore(interposed, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    try {
      for (const n of ['a', 'b', 'c']) await store.create(secretKey(n), Buffer.from(`{"v":"${n}"}`));
      await store.setKeySet({ active: 'k2', keys: [...store.keySet().keys, generateEncryptionKey('k2')] });
      racing.add(secretKey('a')).add(secretKey('c'));
      const result = await store.reencrypt();
      assert.equal(racing.size, 0, 'both races happened');
      assert.deepEqual(result, { examined: 3, rewritten: 1 }, 'the raced keys were already rewritten by the client');
      for (const [n, v] of [['a', 'client-a'], ['b', 'b'], ['c', 'client-c']]) {
        const kv = (await store.get(secretKey(n!)))!;
        assert.equal(kv.value.toString(), `{"v":"${v}"}`);
        assert.equal(envelopeKeyName((await sqlite.get(secretKey(n!)))!.value), 'k2');
      }
    } finally {
      await sqlite.close();
    }
  });

  it('setKeySet() resolves only after writes encrypted under the previous keys have settled', async () => {
    const sqlite = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const delayed = new Proxy(sqlite, {
      get: (target, property) => {
        if (property === 'create') return async (key: string, value: Buffer) => gate.then(() => target.create(key, value));
        const value = Reflect.get(target, property, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const store = new EncryptingDatastore(delayed, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    try {
      let settled = false;
      const write = store.create(secretKey('slow'), Buffer.from('{}')).then(() => (settled = true));
      const settledWhenSwitched = store.setKeySet({ active: 'k2', keys: [...store.keySet().keys, generateEncryptionKey('k2')] }).then(() => settled);
      release();
      assert.equal(await settledWhenSwitched, true);
      await write;
      assert.equal(envelopeKeyName((await sqlite.get(secretKey('slow')))!.value), 'k1', 'it was encrypted when it started');
    } finally {
      await sqlite.close();
    }
  });

  it('ends a watch with a DecryptionError when a value is under a key it does not hold', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const store = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: NO_KEYS });
    try {
      let failure: Error | undefined;
      store.watch(SECRETS_PREFIX, (await store.currentRevision()) + 1, { onEvents: () => {}, onError: (e) => (failure = e) });
      await inner.create(secretKey('x'), encryptValue(generateEncryptionKey('elsewhere'), secretKey('x'), Buffer.from('{}')));
      await waitFor(() => failure !== undefined, 'the watch to fail');
      assert.ok(failure instanceof DecryptionError);
      await assert.rejects(store.get(secretKey('x')), DecryptionError);
    } finally {
      await store.close();
    }
  });
});

describe('the plaintext cache (decrypt each stored value once)', () => {
  it('keeps the newest revision of each key, drops the least recently used past its bound, forgets deleted keys', () => {
    const cache = new PlaintextCache(10);
    cache.set('/a', 5, Buffer.from('aaaa'));
    cache.set('/a', 4, Buffer.from('old!'));
    assert.equal(cache.get('/a', 5)?.toString(), 'aaaa', 'an older revision never replaces a newer one');
    assert.equal(cache.get('/a', 4), undefined, 'a revision not cached is a miss');
    cache.set('/b', 6, Buffer.from('bbbb'));
    assert.equal(cache.get('/a', 5)?.toString(), 'aaaa'); // /a is now the most recently used
    cache.set('/c', 7, Buffer.from('cccc')); // 12 bytes > 10: the least recently used (/b) goes
    assert.equal(cache.get('/b', 6), undefined);
    assert.deepEqual(cache.size(), { entries: 2, bytes: 8 });
    cache.forget('/a', 4);
    assert.equal(cache.get('/a', 5)?.toString(), 'aaaa', 'a delete older than the cached value forgets nothing');
    cache.forget('/a', 8);
    assert.equal(cache.get('/a', 5), undefined);
    cache.set('/big', 9, Buffer.alloc(11));
    assert.equal(cache.get('/big', 9), undefined, 'a value larger than the bound is not kept');
  });

  it('keeps the value a newer one replaced (a watch event’s prevKv) until the next write, within the same bound', () => {
    const cache = new PlaintextCache(12);
    cache.set('/a', 5, Buffer.from('five'));
    cache.set('/a', 6, Buffer.from('six!'));
    assert.equal(cache.get('/a', 6)?.toString(), 'six!');
    assert.equal(cache.get('/a', 5)?.toString(), 'five', 'the replaced value');
    assert.deepEqual(cache.size(), { entries: 1, bytes: 8 });
    cache.set('/a', 7, Buffer.from('7777'));
    assert.equal(cache.get('/a', 5), undefined, 'only the one value before the latest');
    assert.equal(cache.get('/a', 6)?.toString(), 'six!');
    cache.set('/b', 8, Buffer.from('bbbb')); // 12 bytes: within the bound
    assert.deepEqual(cache.size(), { entries: 2, bytes: 12 });
    cache.get('/a', 7);
    cache.set('/c', 9, Buffer.from('cc')); // 14 > 12: the least recently used (/b) goes, with all it holds
    assert.equal(cache.get('/b', 8), undefined);
    assert.deepEqual(cache.size(), { entries: 2, bytes: 10 });
    cache.forget('/a', 10);
    assert.equal(cache.get('/a', 6), undefined, 'a delete forgets the replaced value too');
  });

  it('a watch event of a write through the decorator decrypts nothing: the value and the one it replaced come from the cache', async () => {
    const sqlite = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    // The stored bytes the watch hands over are altered (the GCM tag): only a decryption would notice.
    const altered = (kv: KeyValue): KeyValue => {
      const value = Buffer.from(kv.value);
      value[value.length - 1]! ^= 0xff;
      return { ...kv, value };
    };
    const tampering = new Proxy(sqlite, {
      get: (target, property) => {
        if (property === 'watch') {
          return (prefix: string, from: number, callbacks: WatchCallbacks) =>
            target.watch(prefix, from, {
              ...callbacks,
              onEvents: (events) => callbacks.onEvents(events.map((e) => ({ ...e, kv: altered(e.kv), ...(e.prevKv ? { prevKv: altered(e.prevKv) } : {}) }))),
            });
        }
        const value = Reflect.get(target, property, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const store = new EncryptingDatastore(tampering, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [generateEncryptionKey('k1')] } });
    try {
      const created = await store.create(secretKey('w'), Buffer.from('{"v":1}'));
      const events: WatchEvent[] = [];
      let failure: Error | undefined;
      store.watch(SECRETS_PREFIX, created.modRevision + 1, { onEvents: (batch) => events.push(...batch), onError: (error) => (failure = error) });
      await store.update(secretKey('w'), Buffer.from('{"v":2}'), created.modRevision);
      await waitFor(() => events.length > 0 || failure !== undefined, 'the write’s event');
      assert.equal(failure, undefined, 'nothing was decrypted');
      assert.equal(events[0]!.kv.value.toString(), '{"v":2}');
      assert.equal(events[0]!.prevKv?.value.toString(), '{"v":1}');
    } finally {
      await sqlite.close();
    }
  });

  it('never answers for another revision, and forgets everything when the keys change', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const k1 = generateEncryptionKey('k1');
    const store = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: 'k1', keys: [k1] } });
    try {
      const written = await store.create(secretKey('x'), Buffer.from('{"v":1}'));
      assert.equal((await store.get(secretKey('x')))!.value.toString(), '{"v":1}');
      // Another server writes: the cached plaintext belongs to the old revision only.
      await inner.update(secretKey('x'), encryptValue(k1, secretKey('x'), Buffer.from('{"v":2}')), written.modRevision);
      assert.equal((await store.get(secretKey('x')))!.value.toString(), '{"v":2}');
      // Deleted and created again elsewhere: the delete's event forgets, the new value is read.
      const deleted = await inner.delete(secretKey('x'));
      await inner.create(secretKey('x'), encryptValue(k1, secretKey('x'), Buffer.from('{"v":3}')));
      assert.ok(deleted.modRevision > written.modRevision);
      assert.equal((await store.get(secretKey('x')))!.value.toString(), '{"v":3}');
      // Read (and so cached), then its key is dropped: the read fails as it would uncached.
      await store.get(secretKey('x'));
      await store.setKeySet({ active: 'k2', keys: [generateEncryptionKey('k2')] });
      await assert.rejects(store.get(secretKey('x')), DecryptionError);
    } finally {
      await store.close();
    }
  });
});

describe('the datastore conformance suite through the decorator (every key encrypted)', () => {
  runDatastoreConformance('sqlite+encryption', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'drover.db');
    const keySet: KeySet = { active: 'k1', keys: [generateEncryptionKey('k1')] };
    const wrap = (inner: Datastore): Datastore => new EncryptingDatastore(inner, { prefixes: [''], keySet });
    return {
      store: wrap(openSqliteDatastore(file)),
      reopen: async () => wrap(openSqliteDatastore(file)),
      cleanup: async () => fs.rmSync(dir, { recursive: true, force: true }),
    };
  });
});

/** One "server": its own data dir and decorator over the shared datastore, and its manager. */
function server(inner: Datastore, id: string, options: { enabled?: boolean; peers?: () => Promise<string[]> } = {}) {
  const dataDir = path.join(tempDir(), id);
  const encrypting = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: NO_KEYS });
  const manager = new SecretsEncryption({
    encrypting, dataDir, joinSecret: JOIN_SECRET, serverId: id, enabled: options.enabled ?? true, logger,
    ...(options.peers ? { peers: options.peers } : {}),
  });
  return { id, dataDir, encrypting, manager };
}

describe('SecretsEncryption (cluster key set and rotation)', () => {
  it('a first enable creates the key (0600 in the data dir, sealed in the datastore) and encrypts existing Secrets', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    try {
      await inner.create(secretKey('before'), Buffer.from('{"v":"before"}'));
      const s = server(inner, 'one');
      await s.manager.start();
      const active = s.encrypting.keySet().active!;
      assert.match(active, /^aesgcmkey-\d{4}-\d\d-\d\dT\d{6}Z$/);
      assert.equal(envelopeKeyName((await inner.get(secretKey('before')))!.value), active);
      const file = encryptionConfigFile(s.dataDir);
      assert.equal(fs.statSync(file).mode & 0o777, 0o600);
      const record = (await inner.list('/drover/secrets-encryption/config')).items[0]!;
      const secret = s.encrypting.keySet().keys[0]!.secret.toString('base64');
      assert.ok(fs.readFileSync(file, 'utf8').includes(secret));
      assert.equal(record.value.includes(secret), false, 'the datastore holds the key sealed');
      const status = await s.manager.status();
      assert.equal(status.enabled, true);
      assert.equal(status.stage, 'start');
      assert.deepEqual(status.values, { [active]: 1 });
      assert.match(formatStatus(status), new RegExp(`^Encryption Status: Enabled\nCurrent Rotation Stage: start\nServer Encryption Hashes: All hashes match\n\nActive  Key Type  Name\n------  --------  ----\n \\*      AES-GCM   ${active}\n`));
      await s.manager.stop();
    } finally {
      await inner.close();
    }
  });

  it('refuses to start with another cluster’s token', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    try {
      const a = server(inner, 'a');
      await a.manager.start();
      await a.manager.stop();
      const wrong = new SecretsEncryption({ encrypting: new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: NO_KEYS }), dataDir: tempDir(), joinSecret: 'other', serverId: 'b', enabled: true, logger });
      await assert.rejects(wrong.start(), (e: unknown) => e instanceof SecretsEncryptionError && /cannot be decrypted with this server token/.test(e.message));
    } finally {
      await inner.close();
    }
  });

  it('rotates keys under a concurrent writer without losing a write, then drops the old key', async () => {
    const dbFile = path.join(tempDir(), 'state.db');
    const inner = openSqliteDatastore(dbFile);
    const s = server(inner, 'one');
    try {
      await s.manager.start();
      const oldKey = s.encrypting.keySet().active!;
      const N = 60;
      const last = new Map<string, number>();
      for (let i = 0; i < N; i++) {
        await s.encrypting.create(secretKey(`s${i}`), Buffer.from(JSON.stringify({ n: 0 })));
        last.set(secretKey(`s${i}`), 0);
      }
      // The writer: read-modify-write by compare-and-swap, as ObjectStore does, until told to stop,
      // on the first half of the Secrets (the rest only the rotation rewrites).
      const WRITTEN = N / 2;
      let rotating = true;
      let writesDuringRotation = 0;
      const writer = (async () => {
        for (let i = 0; rotating || i < 20; i++) {
          const key = secretKey(`s${i % WRITTEN}`);
          for (;;) {
            const kv = (await s.encrypting.get(key))!;
            const n = (JSON.parse(kv.value.toString()) as { n: number }).n + 1;
            try {
              await s.encrypting.update(key, Buffer.from(JSON.stringify({ n })), kv.modRevision);
              last.set(key, n);
              if (rotating) writesDuringRotation++;
              break;
            } catch (error) {
              if (!(error instanceof ConflictError)) throw error;
            }
          }
        }
      })();
      const result = await s.manager.rotateKeys();
      rotating = false;
      await writer;

      assert.notEqual(result.activeKey, oldKey);
      assert.ok(writesDuringRotation > 0, 'the writer wrote while the rotation ran');
      assert.ok(result.rewritten >= N - WRITTEN, `rewritten ${result.rewritten}: at least the Secrets the writer left alone`);
      for (const [key, n] of last) {
        assert.equal((JSON.parse((await s.encrypting.get(key))!.value.toString()) as { n: number }).n, n, `${key} kept its last write`);
      }
      const status = await s.manager.status();
      assert.equal(status.stage, 'reencrypt_finished');
      assert.deepEqual(status.keys, [{ name: result.activeKey, active: true }]);
      assert.deepEqual(status.values, { [result.activeKey]: N }, 'every Secret under the new key, none under the old');
      assert.deepEqual(s.encrypting.keySet().keys.map((k) => k.name), [result.activeKey]);
      assert.equal(JSON.parse(fs.readFileSync(encryptionConfigFile(s.dataDir), 'utf8')).active, result.activeKey);
    } finally {
      await s.manager.stop();
      await inner.close();
    }
  });

  it('two servers: the second loads the key, both move through a rotation together', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const peers = async () => ['a', 'b'];
    const a = server(inner, 'a', { peers });
    const b = server(inner, 'b', { peers });
    try {
      await a.manager.start();
      await b.manager.start();
      assert.equal(b.encrypting.keySet().active, a.encrypting.keySet().active);
      await a.encrypting.create(secretKey('from-a'), Buffer.from('{"v":"a"}'));
      assert.equal((await b.encrypting.get(secretKey('from-a')))!.value.toString(), '{"v":"a"}');

      const { activeKey } = await a.manager.rotateKeys();
      await waitFor(() => b.encrypting.keySet().keys.length === 1 && b.encrypting.keySet().active === activeKey, 'b to drop the old key');
      const written = await b.encrypting.create(secretKey('from-b'), Buffer.from('{"v":"b"}'));
      assert.equal(envelopeKeyName((await inner.get(written.key))!.value), activeKey);
      assert.equal((await a.encrypting.get(secretKey('from-b')))!.value.toString(), '{"v":"b"}');
      assert.equal((await b.encrypting.get(secretKey('from-a')))!.value.toString(), '{"v":"a"}');
      await waitFor(async () => (await a.manager.status()).hashesMatch, 'both servers to report the same hash');
    } finally {
      await a.manager.stop();
      await b.manager.stop();
      await inner.close();
    }
  });

  it('waits for a server that has not loaded the new key, stops at prepare, and resumes', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const a = server(inner, 'a', { peers: async () => ['a', 'late'] });
    const late = server(inner, 'late');
    try {
      await a.manager.start();
      const oldKey = a.encrypting.keySet().active!;
      await a.encrypting.create(secretKey('x'), Buffer.from('{"v":"x"}'));
      await assert.rejects(a.manager.rotateKeys({ peerTimeoutMs: 300 }), /late have not loaded the new encryption keys; the rotation stopped at stage prepare/);
      assert.equal(a.encrypting.keySet().active, oldKey, 'the new key is not used before every server has it');
      assert.equal((await a.manager.status()).stage, 'prepare');
      await late.manager.start(); // the late server comes up and loads the prepared key set
      const { activeKey } = await a.manager.rotateKeys();
      assert.notEqual(activeKey, oldKey);
      assert.equal((await a.manager.status()).stage, 'reencrypt_finished');
      assert.equal((await late.encrypting.get(secretKey('x')))!.value.toString(), '{"v":"x"}');
    } finally {
      await a.manager.stop();
      await late.manager.stop();
      await inner.close();
    }
  });

  it('with secrets-encryption off, still reads encrypted Secrets but writes plaintext', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    const on = server(inner, 'on');
    const off = server(inner, 'off', { enabled: false });
    try {
      await on.manager.start();
      await on.encrypting.create(secretKey('enc'), Buffer.from('{"v":"enc"}'));
      await off.manager.start();
      assert.equal((await off.encrypting.get(secretKey('enc')))!.value.toString(), '{"v":"enc"}');
      await off.encrypting.create(secretKey('plain'), Buffer.from('{"v":"plain"}'));
      assert.equal((await inner.get(secretKey('plain')))!.value.toString(), '{"v":"plain"}');
      assert.equal((await off.manager.status()).enabled, false);
      await assert.rejects(off.manager.rotateKeys(), (e: unknown) => e instanceof SecretsEncryptionError && e.problem === 'not-enabled' && /not enabled/.test(e.message));
    } finally {
      await on.manager.stop();
      await off.manager.stop();
      await inner.close();
    }
  });

  it('a server starting brings the stored Secrets to its setting: off decrypts them, on encrypts them again', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    try {
      const on = server(inner, 'on');
      await on.manager.start();
      await on.encrypting.create(secretKey('a'), Buffer.from('{"v":"a"}'));
      await inner.create(secretKey('b'), Buffer.from('{"v":"b"}')); // plaintext, as a server with the setting off writes
      await on.manager.stop();

      // The cluster turned the setting off: the next server to start rewrites them in plaintext.
      const off = server(inner, 'off', { enabled: false });
      await off.manager.start();
      assert.equal((await inner.get(secretKey('a')))!.value.toString(), '{"v":"a"}');
      assert.deepEqual((await off.manager.status()).values, { '': 2 });
      await off.manager.stop();

      // On again: the key set kept in the datastore encrypts them again.
      const again = server(inner, 'again');
      await again.manager.start();
      const active = again.encrypting.keySet().active!;
      assert.equal(envelopeKeyName((await inner.get(secretKey('a')))!.value), active);
      assert.equal(envelopeKeyName((await inner.get(secretKey('b')))!.value), active);
      assert.deepEqual((await again.manager.status()).values, { [active]: 2 });
      await again.manager.stop();
    } finally {
      await inner.close();
    }
  });

  it('status judges the hashes of the live servers only (a removed server’s acknowledgement is ignored)', async () => {
    const inner = openSqliteDatastore(path.join(tempDir(), 'state.db'));
    let live = ['a', 'gone'];
    const peers = async () => live;
    const a = server(inner, 'a', { peers });
    const gone = server(inner, 'gone', { peers });
    try {
      await a.manager.start();
      await gone.manager.start();
      await gone.manager.stop(); // it follows no more: its acknowledgement goes stale
      live = ['a'];
      await a.manager.rotateKeys();
      const status = await a.manager.status();
      assert.deepEqual(status.servers.map((s) => s.id), ['a']);
      assert.equal(status.hashesMatch, true);
      assert.match(formatStatus(status), /Server Encryption Hashes: All hashes match/);
    } finally {
      await a.manager.stop();
      await inner.close();
    }
  });
});
