import { createCipheriv, createDecipheriv, createHash, createSecretKey, type KeyObject, randomBytes, randomFillSync } from 'node:crypto';
import {
  ConflictError,
  type Datastore,
  DatastoreError,
  KeyNotFoundError,
  type KeyValue,
  type ListOptions,
  type ListResult,
  type Watch,
  type WatchCallbacks,
  type WatchEvent,
  type WriteGuard,
} from './types.js';
import { DEFAULT_PLAINTEXT_CACHE_BYTES, PlaintextCache } from './plaintext-cache.js';

/**
 * Encryption at rest for chosen key prefixes (Secrets): a Datastore decorator that stores the
 * values under those prefixes AES-256-GCM encrypted and hands every caller (get, list, watch,
 * the value a delete returns) the plaintext. Everything above the seam is unchanged; everything
 * below it (the SQLite file, etcd, their backups) sees only ciphertext.
 *
 * A stored value is either plaintext (written before encryption was on) or an envelope:
 *
 *     drover:enc:aesgcm:v1:<key name>:<12-byte nonce><ciphertext><16-byte tag>
 *
 * The key name says which key of the {@link KeySet} decrypts it, so values written under
 * several keys (during a rotation) and old plaintext values are all readable. Kubernetes objects
 * are JSON, which starts with `{`, so a plaintext value is never mistaken for an envelope. The
 * datastore key is the GCM additional data: a ciphertext copied to another key (another Secret's
 * name) does not decrypt. Nonces are random; with 96 bits, one key is good for far more writes
 * than a cluster makes between rotations.
 */

export const ENVELOPE_PREFIX = 'drover:enc:aesgcm:v1:';
const ENVELOPE_PREFIX_BYTES = Buffer.from(ENVELOPE_PREFIX, 'ascii');
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
export const KEY_BYTES = 32;
/** Key names appear inside every envelope: short, and never the separator. */
const KEY_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * Where the API server keeps Secrets: ObjectStore's `/registry/<storagePath>/` with the
 * `core/secrets` storage path every core kind follows. The wiring should pass
 * `store.keyPrefix(secretsDefinition)` and may check it against this.
 */
export const SECRETS_PREFIX = '/registry/core/secrets/';

export interface EncryptionKey {
  /** Unique within a key set; stored in every value it encrypts. */
  name: string;
  /** 32 random bytes. */
  secret: Buffer;
}

export interface KeySet {
  /** The key new writes use; undefined writes plaintext (reads still decrypt with `keys`). */
  active: string | undefined;
  /** Every key that may be needed to read: the active one and the ones being rotated out. */
  keys: readonly EncryptionKey[];
}

/** A stored value that cannot be decrypted: a key this server does not hold, or tampering. */
export class DecryptionError extends DatastoreError {
  override name = 'DecryptionError';
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(`cannot decrypt the value of ${key}: ${message}`);
  }
}

export class KeySetError extends Error {
  override name = 'KeySetError';
}

export function generateEncryptionKey(name: string): EncryptionKey {
  return { name, secret: randomBytes(KEY_BYTES) };
}

/** Throws {@link KeySetError} unless names are valid and unique, secrets 32 bytes, active held. */
export function validateKeySet(keySet: KeySet): void {
  const names = new Set<string>();
  for (const key of keySet.keys) {
    if (!KEY_NAME.test(key.name)) throw new KeySetError(`invalid encryption key name ${JSON.stringify(key.name)}`);
    if (names.has(key.name)) throw new KeySetError(`encryption key name ${key.name} is used twice`);
    if (key.secret.length !== KEY_BYTES) throw new KeySetError(`encryption key ${key.name} is not ${KEY_BYTES} bytes`);
    names.add(key.name);
  }
  if (keySet.active !== undefined && !names.has(keySet.active)) {
    throw new KeySetError(`the active encryption key ${keySet.active} is not in the key set`);
  }
}

/**
 * A short fingerprint of a key set (which keys, which active), equal on two servers exactly when
 * they hold the same keys: what servers publish so a rotation knows every one has caught up.
 * A hash of 256-bit random keys reveals nothing about them.
 */
export function keySetHash(keySet: KeySet): string {
  const hash = createHash('sha256').update(`active=${keySet.active ?? ''}\n`);
  for (const key of [...keySet.keys].sort((a, b) => a.name.localeCompare(b.name))) {
    hash.update(`${key.name}=`).update(key.secret).update('\n');
  }
  return hash.digest('hex').slice(0, 32);
}

/** The name of the key a stored value was encrypted with, or undefined for plaintext. */
export function envelopeKeyName(stored: Buffer): string | undefined {
  if (stored.length < ENVELOPE_PREFIX_BYTES.length || !stored.subarray(0, ENVELOPE_PREFIX_BYTES.length).equals(ENVELOPE_PREFIX_BYTES)) {
    return undefined;
  }
  const end = stored.indexOf(0x3a /* ':' */, ENVELOPE_PREFIX_BYTES.length);
  if (end < 0) return '';
  return stored.subarray(ENVELOPE_PREFIX_BYTES.length, end).toString('ascii');
}

/**
 * Per-call costs that dominate small values (measured by bench/secrets-encryption.ts): a cipher
 * made from raw key bytes imports the key every time, so each key's KeyObject (and its envelope
 * header) is made once; and each randomBytes() call is a trip into OpenSSL, so nonces come from a
 * pool filled in one call. What is left is Node's making of one cipher object per value, which
 * AES-GCM's fresh nonce per write requires.
 */
interface PreparedKey {
  object: KeyObject;
  /** `drover:enc:aesgcm:v1:<name>:`, the start of every envelope made with the key. */
  header: Buffer;
}
const preparedKeys = new WeakMap<Buffer, PreparedKey>();
function prepared(key: EncryptionKey): PreparedKey {
  let ready = preparedKeys.get(key.secret);
  if (!ready) {
    ready = { object: createSecretKey(key.secret), header: Buffer.from(`${ENVELOPE_PREFIX}${key.name}:`, 'ascii') };
    preparedKeys.set(key.secret, ready);
  }
  return ready;
}

const NONCE_POOL_BYTES = NONCE_BYTES * 512;
let noncePool = Buffer.alloc(0);
let noncePoolAt = NONCE_POOL_BYTES;
function nextNonce(): Buffer {
  if (noncePoolAt + NONCE_BYTES > noncePool.length) {
    // A fresh buffer each time: envelopes still being built may hold slices of the old one.
    noncePool = randomFillSync(Buffer.allocUnsafe(NONCE_POOL_BYTES));
    noncePoolAt = 0;
  }
  const nonce = noncePool.subarray(noncePoolAt, noncePoolAt + NONCE_BYTES);
  noncePoolAt += NONCE_BYTES;
  return nonce;
}

export function encryptValue(key: EncryptionKey, storageKey: string, plaintext: Buffer): Buffer {
  const { object, header } = prepared(key);
  const nonce = nextNonce();
  const cipher = createCipheriv('aes-256-gcm', object, nonce);
  cipher.setAAD(Buffer.from(storageKey, 'utf8'));
  const body = cipher.update(plaintext);
  const last = cipher.final();
  return Buffer.concat([header, nonce, body, last, cipher.getAuthTag()]);
}

/** The plaintext of a stored value: plaintext as is, an envelope decrypted with its key. */
export function decryptValue(keys: readonly EncryptionKey[], storageKey: string, stored: Buffer): Buffer {
  const name = envelopeKeyName(stored);
  if (name === undefined) return stored;
  const key = keys.find((k) => k.name === name);
  if (!key) throw new DecryptionError(storageKey, `it was encrypted with key ${JSON.stringify(name)}, which this server does not hold`);
  const start = ENVELOPE_PREFIX_BYTES.length + Buffer.byteLength(name, 'ascii') + 1;
  if (stored.length < start + NONCE_BYTES + TAG_BYTES) throw new DecryptionError(storageKey, 'the envelope is truncated');
  const nonce = stored.subarray(start, start + NONCE_BYTES);
  const tag = stored.subarray(stored.length - TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', prepared(key).object, nonce);
  decipher.setAAD(Buffer.from(storageKey, 'utf8'));
  decipher.setAuthTag(tag);
  try {
    return Buffer.concat([decipher.update(stored.subarray(start + NONCE_BYTES, stored.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new DecryptionError(storageKey, `authentication with key ${JSON.stringify(name)} failed (the value was altered or belongs to another key)`);
  }
}

export interface EncryptingDatastoreOptions {
  /** Key prefixes whose values are encrypted (e.g. {@link SECRETS_PREFIX}). */
  prefixes: readonly string[];
  keySet: KeySet;
  /** Plaintext of recently read or written values kept to spare decryptions (0: none); default 32 MiB. */
  plaintextCacheBytes?: number;
}

export interface ReencryptOptions {
  /** Keys read per list page. */
  pageSize?: number;
  /** Called after each rewritten value (progress, throttling). */
  onRewrite?: (key: string) => void | Promise<void>;
}

export interface ReencryptResult {
  /** Values looked at under the prefixes. */
  examined: number;
  /** Values written again under the active key (or as plaintext when none is active). */
  rewritten: number;
}

/**
 * The decorator. `setKeySet` swaps keys at run time (a rotation step, or another server's change
 * arriving); `reencrypt` rewrites every value not yet under the active key, each by
 * compare-and-swap so a concurrent write is never lost.
 */
export class EncryptingDatastore implements Datastore {
  readonly name: string;
  private current: KeySet;
  private activeKey: EncryptionKey | undefined;
  private generation = 0;
  /** Writes in flight and the key-set generation they encrypted under (see setKeySet). */
  private readonly inflight = new Set<{ generation: number; done: Promise<unknown> }>();
  /** Decrypting costs more than the read it follows (bench/secrets-encryption.ts): do it once per value. */
  private readonly plaintexts: PlaintextCache;

  constructor(
    readonly inner: Datastore,
    private readonly options: EncryptingDatastoreOptions,
  ) {
    this.name = inner.name;
    validateKeySet(options.keySet);
    this.current = options.keySet;
    this.activeKey = options.keySet.keys.find((k) => k.name === options.keySet.active);
    this.plaintexts = new PlaintextCache(options.plaintextCacheBytes ?? DEFAULT_PLAINTEXT_CACHE_BYTES);
  }

  keySet(): KeySet {
    return this.current;
  }

  /**
   * Use another key set from now on. Resolves once every write that encrypted under an earlier
   * set has settled, so after it a caller may claim "nothing new is written with the old key"
   * (what a server acknowledges before a rotation moves on, and what reencrypt relies on).
   */
  async setKeySet(keySet: KeySet): Promise<void> {
    validateKeySet(keySet);
    this.current = keySet;
    this.activeKey = keySet.keys.find((k) => k.name === keySet.active);
    // Nothing read under a key that is gone may be served from memory (reads at old revisions
    // must fail as they would without the cache: 410 for the API's clients).
    this.plaintexts.clear();
    const generation = ++this.generation;
    const older = [...this.inflight].filter((w) => w.generation < generation).map((w) => w.done);
    await Promise.allSettled(older);
  }

  /** Whether a datastore key's value is encrypted (it lies under one of the prefixes). */
  covers(key: string): boolean {
    for (const prefix of this.options.prefixes) if (key.startsWith(prefix)) return true;
    return false;
  }

  /** Prefixes the decorator encrypts. */
  prefixes(): readonly string[] {
    return this.options.prefixes;
  }

  private seal(key: string, value: Buffer): Buffer {
    if (!this.covers(key) || !this.activeKey) return value;
    return encryptValue(this.activeKey, key, value);
  }

  /**
   * The plaintext of a stored value. `deleted`: the value a delete removed, whose modRevision is
   * the delete's (so it names no stored value and is neither looked up nor cached).
   */
  private open(kv: KeyValue, deleted = false): KeyValue {
    if (!this.covers(kv.key)) return kv;
    if (deleted) {
      this.plaintexts.forget(kv.key, kv.modRevision);
      return envelopeKeyName(kv.value) === undefined ? kv : { ...kv, value: decryptValue(this.current.keys, kv.key, kv.value) };
    }
    // Only envelopes are ever cached, so a hit needs no look at the stored bytes.
    let value = this.plaintexts.get(kv.key, kv.modRevision);
    if (!value) {
      if (envelopeKeyName(kv.value) === undefined) return kv;
      value = decryptValue(this.current.keys, kv.key, kv.value);
      this.plaintexts.set(kv.key, kv.modRevision, value);
    }
    return { ...kv, value };
  }

  /** After a write that stored `stored` for `plaintext`: its next read needs no decryption. */
  private remember(kv: KeyValue, stored: Buffer, plaintext: Buffer): KeyValue {
    if (stored !== plaintext) this.plaintexts.set(kv.key, kv.modRevision, plaintext);
    return { ...kv, value: plaintext };
  }

  private track<T>(write: Promise<T>): Promise<T> {
    const entry = { generation: this.generation, done: write };
    this.inflight.add(entry);
    const untrack = (): void => void this.inflight.delete(entry);
    write.then(untrack, untrack);
    return write;
  }

  currentRevision(): Promise<number> {
    return this.inner.currentRevision();
  }

  compactRevision(): Promise<number> {
    return this.inner.compactRevision();
  }

  async get(key: string): Promise<KeyValue | undefined> {
    const kv = await this.inner.get(key);
    return kv && this.open(kv);
  }

  async list(prefix: string, options?: ListOptions): Promise<ListResult> {
    const result = await this.inner.list(prefix, options);
    return { ...result, items: result.items.map((kv) => this.open(kv)) };
  }

  /** The value returned is the plaintext the caller wrote, like an unencrypted store's. */
  async create(key: string, value: Buffer, guard?: WriteGuard): Promise<KeyValue> {
    const stored = this.seal(key, value);
    return this.remember(await this.track(this.inner.create(key, stored, guard)), stored, value);
  }

  async update(key: string, value: Buffer, expectedModRevision: number, guard?: WriteGuard): Promise<KeyValue> {
    const stored = this.seal(key, value);
    try {
      return this.remember(await this.track(this.inner.update(key, stored, expectedModRevision, guard)), stored, value);
    } catch (error) {
      throw this.openConflict(error);
    }
  }

  async delete(key: string, expectedModRevision?: number, guard?: WriteGuard): Promise<KeyValue> {
    try {
      return this.open(await this.inner.delete(key, expectedModRevision, guard), true);
    } catch (error) {
      throw this.openConflict(error);
    }
  }

  /** A conflict's current value is stored bytes: hand it on as plaintext, or not at all if it cannot be. */
  private openConflict(error: unknown): unknown {
    if (!(error instanceof ConflictError) || !error.current) return error;
    let current: KeyValue | undefined;
    try {
      current = this.open(error.current);
    } catch {
      // The retry then reads the key itself, and fails with the decryption's own clear error.
    }
    return new ConflictError(error.key, error.expectedModRevision, error.actualModRevision, current);
  }

  /**
   * Events decrypted in order (decryption is synchronous, so order is kept). A value this server
   * cannot decrypt ends the watch with a {@link DecryptionError}, as a broken watch would: the
   * consumer re-lists, and the read then fails with the same clear error instead of a corrupt object.
   */
  watch(prefix: string, fromRevision: number, callbacks: WatchCallbacks): Watch {
    let failed = false;
    let inner: Watch | undefined;
    const fail = (error: Error): void => {
      failed = true;
      inner?.cancel(); // (when the inner watch delivered before returning, cancelled below)
      callbacks.onError(error);
    };
    inner = this.inner.watch(prefix, fromRevision, {
      onEvents: (events) => {
        if (failed) return;
        let opened: WatchEvent[];
        try {
          opened = events.map((event) => ({
            ...event,
            kv: this.open(event.kv, event.type === 'delete'),
            ...(event.prevKv ? { prevKv: this.open(event.prevKv) } : {}),
          }));
        } catch (error) {
          fail(error as Error);
          return;
        }
        callbacks.onEvents(opened);
      },
      onError: (error) => {
        if (!failed) callbacks.onError(error);
      },
      ...(callbacks.onProgress
        ? {
            onProgress: (revision: number) => {
              if (!failed) callbacks.onProgress!(revision);
            },
          }
        : {}),
    });
    if (failed) inner.cancel();
    return inner;
  }

  compact(revision: number): Promise<void> {
    return this.inner.compact(revision);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  /** Whether a stored value must be rewritten to be under the active key. */
  needsRewrite(stored: Buffer): boolean {
    const name = envelopeKeyName(stored);
    return this.current.active === undefined ? name !== undefined : name !== this.current.active;
  }

  /**
   * Rewrite every value under the prefixes that is not under the active key (plaintext, or an
   * older key), one compare-and-swap each. A write that lands in between wins: the rewrite reads
   * the new value and looks again (that write was itself encrypted under the current key, unless
   * it started before the last setKeySet, which setKeySet waited for). Keys deleted meanwhile are
   * skipped. Safe to run again, and on several servers at once.
   */
  async reencrypt(options: ReencryptOptions = {}): Promise<ReencryptResult> {
    const pageSize = options.pageSize ?? 100;
    const result: ReencryptResult = { examined: 0, rewritten: 0 };
    for (const prefix of this.options.prefixes) {
      let after: string | undefined;
      for (;;) {
        const page = await this.inner.list(prefix, { limit: pageSize, ...(after !== undefined ? { continue: after } : {}) });
        for (const kv of page.items) {
          result.examined++;
          if (await this.rewrite(kv)) {
            result.rewritten++;
            await options.onRewrite?.(kv.key);
          }
        }
        if (!page.more || page.items.length === 0) break;
        after = page.items[page.items.length - 1]!.key;
      }
    }
    return result;
  }

  private async rewrite(stored: KeyValue): Promise<boolean> {
    let kv: KeyValue | undefined = stored;
    for (;;) {
      if (!kv || !this.needsRewrite(kv.value)) return false;
      const plaintext = decryptValue(this.current.keys, kv.key, kv.value);
      try {
        await this.track(this.inner.update(kv.key, this.seal(kv.key, plaintext), kv.modRevision));
        return true;
      } catch (error) {
        if (error instanceof KeyNotFoundError) return false;
        if (!(error instanceof ConflictError)) throw error;
        kv = await this.inner.get(kv.key); // someone wrote meanwhile: judge their value
      }
    }
  }

  /** How many values under the prefixes are under each key (`''` for plaintext): for status. */
  async census(pageSize = 500): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    for (const prefix of this.options.prefixes) {
      let after: string | undefined;
      for (;;) {
        const page = await this.inner.list(prefix, { limit: pageSize, ...(after !== undefined ? { continue: after } : {}) });
        for (const kv of page.items) {
          const name = envelopeKeyName(kv.value) ?? '';
          counts.set(name, (counts.get(name) ?? 0) + 1);
        }
        if (!page.more || page.items.length === 0) break;
        after = page.items[page.items.length - 1]!.key;
      }
    }
    return counts;
  }
}
