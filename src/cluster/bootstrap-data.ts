import { createCipheriv, createDecipheriv, createHash, randomBytes, scrypt as scryptCallback } from 'node:crypto';
import { promisify } from 'node:util';
import { ConflictError, type Datastore, KeyExistsError } from '../datastore/types.js';

/**
 * What every server of a cluster must share — the cluster's three CAs and their keys, the admin
 * token and the join secret — kept in the datastore, encrypted with a key derived from the server token.
 * The first server writes it; a server that joins an existing datastore reads it with the token
 * it was given, and cannot read it without. The datastore alone (a stolen etcd backup) does not
 * reveal the CA key.
 */

const scrypt = promisify(scryptCallback) as (secret: string, salt: Buffer, keylen: number) => Promise<Buffer>;

const PREFIX = '/drover/bootstrap/';

export interface BootstrapData {
  /** The server CA: signs API servers' serving certificates, and nothing else. Join tokens pin it. */
  caCertificatePem: string;
  caKeyPem: string;
  /** The node CA: signs agents' serving certificates (absent in records of older clusters). */
  nodeCaCertificatePem?: string;
  nodeCaKeyPem?: string;
  /** The client CA: signs client certificates, e.g. the API servers' to the agents. */
  clientCaCertificatePem?: string;
  clientCaKeyPem?: string;
  adminToken: string;
  joinSecret: string;
}

/** What loadOrCreateBootstrap hands back: every field present. */
export type CompleteBootstrapData = Required<BootstrapData>;

interface Sealed {
  version: 1;
  salt: string;
  iv: string;
  tag: string;
  data: string;
}

export class BootstrapTokenError extends Error {
  override name = 'BootstrapTokenError';
}

/** The record's key names the token (by a short hash), so a server with another token finds nothing. */
function keyFor(secret: string): string {
  return `${PREFIX}${createHash('sha256').update(secret).digest('hex').slice(0, 12)}`;
}

export async function seal(data: object, secret: string): Promise<Buffer> {
  const salt = randomBytes(16);
  const iv = randomBytes(12);
  const key = await scrypt(secret, salt, 32);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const encrypted = Buffer.concat([cipher.update(JSON.stringify(data), 'utf8'), cipher.final()]);
  const sealed: Sealed = {
    version: 1,
    salt: salt.toString('base64'),
    iv: iv.toString('base64'),
    tag: cipher.getAuthTag().toString('base64'),
    data: encrypted.toString('base64'),
  };
  return Buffer.from(JSON.stringify(sealed));
}

export async function open(value: Buffer, secret: string): Promise<BootstrapData> {
  const sealed = JSON.parse(value.toString('utf8')) as Sealed;
  const key = await scrypt(secret, Buffer.from(sealed.salt, 'base64'), 32);
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(sealed.iv, 'base64'));
  decipher.setAuthTag(Buffer.from(sealed.tag, 'base64'));
  try {
    const plain = Buffer.concat([decipher.update(Buffer.from(sealed.data, 'base64')), decipher.final()]);
    return JSON.parse(plain.toString('utf8')) as BootstrapData;
  } catch {
    throw new BootstrapTokenError('the cluster bootstrap data cannot be decrypted with this server token');
  }
}

/** Whether some server already bootstrapped a cluster in this datastore (with any token). */
export async function clusterExists(datastore: Datastore): Promise<boolean> {
  return (await datastore.list(PREFIX, { limit: 1 })).items.length > 0;
}

/**
 * The cluster's bootstrap data for this token: read and decrypted, or created with `create` when
 * this is the first server. A datastore bootstrapped with another token is refused.
 */
export async function loadOrCreateBootstrap(
  datastore: Datastore,
  secret: string,
  create: () => Promise<BootstrapData>,
  complete: (data: BootstrapData) => Promise<CompleteBootstrapData>,
): Promise<{ data: CompleteBootstrapData; created: boolean }> {
  const key = keyFor(secret);
  for (;;) {
    const existing = await datastore.get(key);
    if (existing) {
      const data = await open(existing.value, secret);
      const full = await complete(data);
      if (isComplete(data)) return { data: full, created: false };
      // A record from before the node and client CAs: add them, once, for every server.
      try {
        await datastore.update(key, await seal(full, secret), existing.modRevision);
        return { data: full, created: false };
      } catch (error) {
        if (error instanceof ConflictError) continue; // another server completed it first: use theirs
        throw error;
      }
    }
    if (await clusterExists(datastore)) {
      throw new BootstrapTokenError(
        'this datastore already holds a cluster bootstrapped with a different server token; start this server with that cluster’s --token',
      );
    }
    const data = await complete(await create());
    try {
      await datastore.create(key, await seal(data, secret));
      return { data, created: true };
    } catch (error) {
      if (!(error instanceof KeyExistsError)) throw error; // another server was first: use theirs
    }
  }
}

function isComplete(data: BootstrapData): data is CompleteBootstrapData {
  return Boolean(data.nodeCaCertificatePem && data.nodeCaKeyPem && data.clientCaCertificatePem && data.clientCaKeyPem);
}

/** The sealed record as stored, for a joining server to fetch and open with its token. */
export async function readSealed(datastore: Datastore, secret: string): Promise<Buffer | undefined> {
  return (await datastore.get(keyFor(secret)))?.value;
}
