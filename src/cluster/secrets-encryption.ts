import fs from 'node:fs';
import path from 'node:path';
import {
  type EncryptingDatastore,
  type EncryptionKey,
  generateEncryptionKey,
  type KeySet,
  keySetHash,
  KEY_BYTES,
} from '../datastore/encryption.js';
import { ConflictError, type Datastore, KeyExistsError, type Watch } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { BootstrapTokenError, open, seal } from './bootstrap-data.js';

/**
 * Secrets encryption for the cluster (`secrets-encryption: true`): the key set every server
 * encrypts Secrets with, and rotation without downtime (`drover secrets-encrypt rotate-keys`).
 *
 * The key set lives sealed in the datastore (like the cluster identity: a key derived from the
 * join secret, so a datastore backup does not reveal it) and in each server's data dir
 * (`server/cred/encryption-config.json`, mode 0600). Each server watches the record, loads
 * changes into its EncryptingDatastore, and then acknowledges them under
 * `/drover/secrets-encryption/servers/<id>` with the hash of the key set it holds.
 *
 * A rotation walks K3s's stages, each one waiting until every live server acknowledged the last:
 *   prepare            the new key is added, not yet used: every server can read it first;
 *   rotate             the new key is active: every server writes with it (old key still read);
 *   reencrypt_active   every Secret not yet under the new key is rewritten by compare-and-swap;
 *   reencrypt_finished the old keys are dropped: nothing is encrypted with them any more.
 * A rotation interrupted anywhere resumes with the next `rotate-keys`.
 */

export type RotationStage = 'start' | 'prepare' | 'rotate' | 'reencrypt_active' | 'reencrypt_finished';

interface StoredKey {
  name: string;
  /** base64 of 32 bytes */
  secret: string;
}

export interface EncryptionRecord {
  version: 1;
  stage: RotationStage;
  active: string;
  keys: StoredKey[];
}

interface ServerAck {
  id: string;
  hash: string;
  stage: RotationStage;
  at: number;
}

export const ENCRYPTION_RECORD = '/drover/secrets-encryption/config';
const SERVERS_PREFIX = '/drover/secrets-encryption/servers/';

/** `<data-dir>/server/cred/encryption-config.json`. */
export function encryptionConfigFile(dataDir: string): string {
  return path.join(dataDir, 'server', 'cred', 'encryption-config.json');
}

/**
 * Why a key operation cannot go on: `not-enabled` (the setting is off, or no key set exists: the
 * caller asked for something impossible), `unfinished` (a server has not caught up, or Secrets
 * keep being written under an old key: try again later, the rotation resumes), `record` (the
 * stored key set cannot be opened or is damaged).
 */
export type SecretsEncryptionProblem = 'not-enabled' | 'unfinished' | 'record';

export class SecretsEncryptionError extends Error {
  override name = 'SecretsEncryptionError';
  constructor(
    message: string,
    readonly problem: SecretsEncryptionProblem = 'record',
  ) {
    super(message);
  }
}

export interface SecretsEncryptionOptions {
  /** The decorator the API server's store writes through; records go to its inner datastore. */
  encrypting: EncryptingDatastore;
  dataDir: string;
  /** The cluster's join secret: unlocks the sealed record. */
  joinSecret: string;
  /** This server's id (server/server-id), under which it acknowledges key sets. */
  serverId: string;
  /** `secrets-encryption`. Off: an existing key set is still loaded to read, but writes are plaintext. */
  enabled: boolean;
  /** Ids of the servers that must acknowledge each step (the live API servers); default this one. */
  peers?: () => Promise<string[]>;
  logger: Logger;
}

export interface RotateOptions {
  /** Ceiling on waiting for every server to acknowledge a step (default 60 s). */
  peerTimeoutMs?: number;
}

export interface RotationResult {
  activeKey: string;
  /** Secrets rewritten under the new key. */
  rewritten: number;
}

export interface SecretsEncryptionStatus {
  enabled: boolean;
  stage: RotationStage | undefined;
  activeKey: string | undefined;
  keys: { name: string; active: boolean }[];
  servers: { id: string; hash: string; stage: RotationStage }[];
  /** Whether every server holds the same key set. */
  hashesMatch: boolean;
  /** Stored values under the encrypted prefixes by key name (`''`: plaintext). */
  values: Record<string, number>;
}

function toKeys(record: EncryptionRecord): EncryptionKey[] {
  return record.keys.map((k) => ({ name: k.name, secret: Buffer.from(k.secret, 'base64') }));
}

function validRecord(value: unknown): value is EncryptionRecord {
  const r = value as EncryptionRecord;
  return (
    typeof r === 'object' && r !== null && r.version === 1 && typeof r.stage === 'string' && typeof r.active === 'string' &&
    Array.isArray(r.keys) && r.keys.length > 0 && r.keys.some((k) => k.name === r.active) &&
    r.keys.every((k) => typeof k.name === 'string' && typeof k.secret === 'string' && Buffer.from(k.secret, 'base64').length === KEY_BYTES)
  );
}

/** `aesgcmkey-<UTC time>`, unique within the record. */
function newKeyName(existing: readonly StoredKey[], now = new Date()): string {
  const base = `aesgcmkey-${now.toISOString().replace(/\.\d+Z$/, 'Z').replace(/:/g, '')}`;
  let name = base;
  for (let i = 2; existing.some((k) => k.name === name); i++) name = `${base}-${i}`;
  return name;
}

export class SecretsEncryption {
  private readonly store: Datastore;
  private appliedRevision = 0;
  /** The store revision of the last read of the record: following starts after it. */
  private seenRevision = 0;
  private applied: EncryptionRecord | undefined;
  /** Record changes are applied one at a time, in revision order. */
  private chain: Promise<void> = Promise.resolve();
  private watch: Watch | undefined;
  private rewatchTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly options: SecretsEncryptionOptions) {
    this.store = options.encrypting.inner;
  }

  /**
   * Load the cluster's key set (creating it when encryption is on and this is the first server
   * to get here), acknowledge it, and follow changes. A first enable encrypts the Secrets that
   * were stored in plaintext before.
   */
  async start(): Promise<void> {
    const { logger } = this.options;
    for (;;) {
      const found = await this.read();
      if (found) {
        await this.apply(found.record, found.revision);
        await this.converge();
        break;
      }
      if (!this.options.enabled) break; // nothing to read, nothing to write: a plain pass-through
      const record = this.initialRecord();
      try {
        const kv = await this.store.create(ENCRYPTION_RECORD, await seal(record, this.options.joinSecret));
        logger.info({ key: record.active }, 'secrets encryption: created the cluster’s encryption key');
        await this.apply(record, kv.modRevision);
        const { rewritten } = await this.options.encrypting.reencrypt();
        if (rewritten > 0) logger.info({ rewritten }, 'secrets encryption: encrypted the Secrets stored before it was enabled');
        break;
      } catch (error) {
        if (!(error instanceof KeyExistsError)) throw error; // another server was first: use theirs
      }
    }
    this.follow();
  }

  /**
   * Bring the stored Secrets in line with this server's setting: plaintext ones encrypted when
   * encryption is on (Secrets a server still running with it off wrote while the cluster turned
   * it on), encrypted ones rewritten in plaintext when it is off (turning it off). One list pass
   * when there is nothing to do. A value no key opens is left as it is: status counts it.
   */
  private async converge(): Promise<void> {
    const { logger, enabled } = this.options;
    try {
      const { rewritten } = await this.options.encrypting.reencrypt();
      if (rewritten > 0) {
        logger.info({ rewritten }, enabled ? 'secrets encryption: encrypted Secrets stored in plaintext' : 'secrets encryption is off: rewrote the encrypted Secrets in plaintext');
      }
    } catch (error) {
      logger.warn({ err: error }, 'secrets encryption: could not rewrite every stored Secret to match this server’s setting; drover secrets-encrypt status counts them');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.rewatchTimer);
    this.watch?.cancel();
    await this.chain;
  }

  /** The key from the data dir when there is one (a restored datastore), else a new one. */
  private initialRecord(): EncryptionRecord {
    const file = encryptionConfigFile(this.options.dataDir);
    if (fs.existsSync(file)) {
      const local = JSON.parse(fs.readFileSync(file, 'utf8')) as unknown;
      if (validRecord(local)) return local;
      this.options.logger.warn({ file }, 'secrets encryption: ignoring an unreadable local encryption config');
    }
    const key = generateEncryptionKey(newKeyName([]));
    return { version: 1, stage: 'start', active: key.name, keys: [{ name: key.name, secret: key.secret.toString('base64') }] };
  }

  private async read(): Promise<{ record: EncryptionRecord; revision: number } | undefined> {
    // A list, not a get: its revision tells where to follow from even when the record is absent.
    const result = await this.store.list(ENCRYPTION_RECORD, { limit: 1 });
    this.seenRevision = Math.max(this.seenRevision, result.revision);
    const kv = result.items.find((item) => item.key === ENCRYPTION_RECORD);
    if (!kv) return undefined;
    let record: unknown;
    try {
      record = await open(kv.value, this.options.joinSecret);
    } catch (error) {
      if (error instanceof BootstrapTokenError) {
        throw new SecretsEncryptionError('the secrets encryption keys in the datastore cannot be decrypted with this server token');
      }
      throw error;
    }
    if (!validRecord(record)) throw new SecretsEncryptionError('the secrets encryption record in the datastore is malformed');
    return { record, revision: kv.modRevision };
  }

  private keySetFor(record: EncryptionRecord): KeySet {
    return { active: this.options.enabled ? record.active : undefined, keys: toKeys(record) };
  }

  /** Load a record (if newer than the one loaded), copy it to the data dir, acknowledge it. */
  private apply(record: EncryptionRecord, revision: number): Promise<void> {
    const step = this.chain.then(async () => {
      if (revision <= this.appliedRevision) return;
      const keySet = this.keySetFor(record);
      await this.options.encrypting.setKeySet(keySet); // resolves once older writes settled
      this.appliedRevision = revision;
      this.applied = record;
      const file = encryptionConfigFile(this.options.dataDir);
      const content = `${JSON.stringify(record, null, 2)}\n`;
      if (!fs.existsSync(file) || fs.readFileSync(file, 'utf8') !== content) writeFileAtomic(file, content, 0o600);
      await this.acknowledge(keySetHash(keySet), record.stage);
    });
    this.chain = step.catch((error: unknown) => {
      this.options.logger.warn({ err: error }, 'secrets encryption: could not load the new key set');
    });
    return step;
  }

  private async acknowledge(hash: string, stage: RotationStage): Promise<void> {
    const key = `${SERVERS_PREFIX}${this.options.serverId}`;
    const value = Buffer.from(JSON.stringify({ id: this.options.serverId, hash, stage, at: Date.now() } satisfies ServerAck));
    for (;;) {
      const existing = await this.store.get(key);
      try {
        if (existing) await this.store.update(key, value, existing.modRevision);
        else await this.store.create(key, value);
        return;
      } catch (error) {
        if (!(error instanceof ConflictError || error instanceof KeyExistsError)) throw error;
      }
    }
  }

  /** Follow the record: another server's rotation step reaches this one within a watch event. */
  private follow(): void {
    if (this.stopped) return;
    const from = Math.max(this.appliedRevision, this.seenRevision) + 1;
    const retry = (): void => {
      if (this.stopped) return;
      this.rewatchTimer = setTimeout(() => {
        void this.catchUp().finally(() => this.follow());
      }, 1000);
      this.rewatchTimer.unref();
    };
    this.watch = this.store.watch(ENCRYPTION_RECORD, from, {
      onEvents: (events) => {
        for (const event of events) {
          if (event.type !== 'put' || event.kv.key !== ENCRYPTION_RECORD) continue;
          const revision = event.kv.modRevision;
          void open(event.kv.value, this.options.joinSecret)
            .then((record) => (validRecord(record) ? this.apply(record, revision) : undefined))
            .catch((error: unknown) => this.options.logger.warn({ err: error }, 'secrets encryption: unreadable key set change'));
        }
      },
      onError: () => {
        this.watch = undefined;
        retry();
      },
    });
  }

  private async catchUp(): Promise<void> {
    try {
      const found = await this.read();
      if (found) await this.apply(found.record, found.revision);
    } catch (error) {
      this.options.logger.warn({ err: error }, 'secrets encryption: could not re-read the key set');
    }
  }

  /** Write the next stage's record by compare-and-swap, and load it here at once. */
  private async write(record: EncryptionRecord, expectedRevision: number): Promise<number> {
    const kv = await this.store.update(ENCRYPTION_RECORD, await seal(record, this.options.joinSecret), expectedRevision);
    await this.apply(record, kv.modRevision);
    return kv.modRevision;
  }

  /** Wait until every live server acknowledged this record's key set. */
  private async waitForPeers(record: EncryptionRecord, timeoutMs: number): Promise<void> {
    const hash = keySetHash(this.keySetFor(record));
    const deadline = Date.now() + timeoutMs;
    for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
      const peers = await this.livePeers();
      const acks = await this.acks();
      const behind = [...peers].filter((id) => acks.get(id)?.hash !== hash);
      if (behind.length === 0) return;
      if (Date.now() > deadline) {
        throw new SecretsEncryptionError(
          `server(s) ${behind.join(', ')} have not loaded the new encryption keys; the rotation stopped at stage ${record.stage} and resumes with the next rotate-keys`,
          'unfinished',
        );
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  /** This server and the others that must follow each step. */
  private async livePeers(): Promise<Set<string>> {
    return new Set([this.options.serverId, ...((await this.options.peers?.()) ?? [])]);
  }

  private async acks(): Promise<Map<string, ServerAck>> {
    const { items } = await this.store.list(SERVERS_PREFIX);
    const acks = new Map<string, ServerAck>();
    for (const kv of items) {
      try {
        const ack = JSON.parse(kv.value.toString('utf8')) as ServerAck;
        acks.set(ack.id, ack);
      } catch {
        // a malformed entry counts as no acknowledgement
      }
    }
    return acks;
  }

  /**
   * `rotate-keys`: a new key, made active, every Secret re-encrypted, old keys dropped, all
   * while the API keeps serving. Resumes an interrupted rotation; a rotation another server runs
   * at the same time is joined rather than doubled.
   */
  async rotateKeys(options: RotateOptions = {}): Promise<RotationResult> {
    const peerTimeoutMs = options.peerTimeoutMs ?? 60_000;
    if (!this.options.enabled) throw new SecretsEncryptionError('secrets encryption is not enabled on this server (secrets-encryption: true)', 'not-enabled');
    let rewritten = 0;
    let begun = false;
    for (;;) {
      const found = await this.read();
      if (!found) throw new SecretsEncryptionError('secrets encryption has no key set yet: start the server with secrets-encryption: true', 'not-enabled');
      let { record, revision } = found;
      try {
        if (record.stage === 'start' || record.stage === 'reencrypt_finished') {
          if (begun) return { activeKey: record.active, rewritten }; // finished (here or by a peer)
          const name = newKeyName(record.keys);
          const key = generateEncryptionKey(name);
          record = { ...record, stage: 'prepare', keys: [...record.keys, { name, secret: key.secret.toString('base64') }] };
          revision = await this.write(record, revision);
          this.options.logger.info({ key: name }, 'secrets encryption: rotation: new key added (prepare)');
        }
        begun = true;
        if (record.stage === 'prepare') {
          await this.waitForPeers(record, peerTimeoutMs);
          record = { ...record, stage: 'rotate', active: record.keys[record.keys.length - 1]!.name };
          revision = await this.write(record, revision);
          this.options.logger.info({ key: record.active }, 'secrets encryption: rotation: new key active (rotate)');
        }
        if (record.stage === 'rotate') {
          await this.waitForPeers(record, peerTimeoutMs);
          record = { ...record, stage: 'reencrypt_active' };
          revision = await this.write(record, revision);
        }
        if (record.stage === 'reencrypt_active') {
          rewritten += await this.reencryptAll();
          record = { ...record, stage: 'reencrypt_finished', keys: record.keys.filter((k) => k.name === record.active) };
          revision = await this.write(record, revision);
          this.options.logger.info({ key: record.active, rewritten }, 'secrets encryption: rotation finished (reencrypt_finished)');
        }
      } catch (error) {
        if (error instanceof ConflictError) continue; // a peer moved the record: carry on from its stage
        throw error;
      }
    }
  }

  /** Passes until one finds nothing left under an older key (normally the second). */
  private async reencryptAll(): Promise<number> {
    let total = 0;
    for (let pass = 0; pass < 5; pass++) {
      const { rewritten } = await this.options.encrypting.reencrypt();
      total += rewritten;
      if (rewritten === 0) return total;
    }
    throw new SecretsEncryptionError('Secrets keep being written under an old key; the rotation stays at reencrypt_active and resumes with the next rotate-keys', 'unfinished');
  }

  /** What `drover secrets-encrypt status` shows. */
  async status(): Promise<SecretsEncryptionStatus> {
    const found = await this.read();
    // Only the servers that are up now: an acknowledgement a removed server left behind says nothing.
    const live = await this.livePeers();
    const acks = [...(await this.acks()).values()].filter((a) => live.has(a.id)).sort((a, b) => a.id.localeCompare(b.id));
    const census = await this.options.encrypting.census();
    return {
      enabled: this.options.enabled && found !== undefined,
      stage: found?.record.stage,
      activeKey: this.options.enabled ? found?.record.active : undefined,
      keys: (found?.record.keys ?? []).map((k) => ({ name: k.name, active: this.options.enabled && k.name === found!.record.active })),
      servers: acks.map((a) => ({ id: a.id, hash: a.hash, stage: a.stage })),
      hashesMatch: new Set(acks.map((a) => a.hash)).size <= 1,
      values: Object.fromEntries(census),
    };
  }

  /** The record this server has loaded (for tests and the status of one server). */
  loaded(): EncryptionRecord | undefined {
    return this.applied;
  }
}

/** `secrets-encrypt status` as K3s prints it, plus how many Secrets sit under each key. */
export function formatStatus(status: SecretsEncryptionStatus): string {
  const lines = [`Encryption Status: ${status.enabled ? 'Enabled' : 'Disabled'}`];
  if (status.stage) lines.push(`Current Rotation Stage: ${status.stage}`);
  if (status.servers.length > 0) {
    const first = status.servers[0]!;
    const other = status.servers.find((s) => s.hash !== first.hash);
    lines.push(`Server Encryption Hashes: ${other ? `hash does not match between ${first.id} and ${other.id}` : 'All hashes match'}`);
  }
  if (status.keys.length > 0) {
    lines.push('', 'Active  Key Type  Name', '------  --------  ----');
    for (const key of status.keys) lines.push(` ${key.active ? '*' : ' '}      AES-GCM   ${key.name}`);
  }
  const counts = Object.entries(status.values);
  if (counts.length > 0) {
    lines.push('', 'Stored Secrets:');
    for (const [name, count] of counts.sort()) lines.push(`  ${String(count).padStart(6)}  ${name === '' ? '(not encrypted)' : name}`);
  }
  return `${lines.join('\n')}\n`;
}
