import fs from 'node:fs';
import path from 'node:path';
import { type Datastore, KeyExistsError } from '../datastore/types.js';
import { writeFileAtomic } from '../security/files.js';
import { generateServiceAccountKeyPem, type SigningKey, signingKeyFromPem } from '../security/service-account-tokens.js';
import { BootstrapTokenError, open, seal } from './bootstrap-data.js';

/**
 * The key that signs ServiceAccount tokens, one for the whole cluster: a token issued by one
 * server must verify on every other. Kept like the cluster identity (bootstrap-data.ts): sealed
 * in the datastore with a key derived from the join secret, so a datastore backup alone does
 * not reveal it, and copied into the data dir (`server/tls/service.key`, mode 0600, where K3s
 * keeps its own). The datastore's copy wins over the local one, so all servers agree.
 */

export const SERVICE_ACCOUNT_KEY_RECORD = '/drover/service-account-key';

/** `<data-dir>/server/tls/service.key`. */
export function serviceAccountKeyFile(dataDir: string): string {
  return path.join(dataDir, 'server', 'tls', 'service.key');
}

interface SealedKey {
  privateKeyPem: string;
}

export class ServiceAccountKeyStoreError extends Error {
  override name = 'ServiceAccountKeyStoreError';
}

export interface ServiceAccountKeyOptions {
  datastore: Datastore;
  dataDir: string;
  /** The cluster's join secret (ClusterIdentity.joinSecret): unlocks the sealed record. */
  joinSecret: string;
}

/**
 * The cluster's signing key: read from the datastore, or created by the first server to get
 * here (a key already in the data dir is kept, e.g. after a datastore restore). Two servers
 * racing both end up with the one that reached the datastore first.
 */
export async function loadOrCreateServiceAccountKey(
  options: ServiceAccountKeyOptions,
): Promise<{ key: SigningKey; pem: string; created: boolean }> {
  const { datastore, joinSecret } = options;
  const file = serviceAccountKeyFile(options.dataDir);
  for (;;) {
    const existing = await datastore.get(SERVICE_ACCOUNT_KEY_RECORD);
    if (existing) {
      let sealed: SealedKey;
      try {
        sealed = (await open(existing.value, joinSecret)) as unknown as SealedKey;
      } catch (error) {
        if (error instanceof BootstrapTokenError) {
          throw new ServiceAccountKeyStoreError('the service account signing key in the datastore cannot be decrypted with this server token');
        }
        throw error;
      }
      if (typeof sealed.privateKeyPem !== 'string') throw new ServiceAccountKeyStoreError('the service account key record in the datastore is malformed');
      const key = await signingKeyFromPem(sealed.privateKeyPem);
      writeIfChanged(file, sealed.privateKeyPem);
      return { key, pem: sealed.privateKeyPem, created: false };
    }
    const local = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined;
    const pem = local?.trim() ? local : generateServiceAccountKeyPem();
    const key = await signingKeyFromPem(pem); // refuse an unusable local key before publishing it
    try {
      await datastore.create(SERVICE_ACCOUNT_KEY_RECORD, await seal({ privateKeyPem: pem } satisfies SealedKey, joinSecret));
    } catch (error) {
      if (error instanceof KeyExistsError) continue; // another server was first: use theirs
      throw error;
    }
    writeIfChanged(file, pem);
    return { key, pem, created: true };
  }
}

function writeIfChanged(file: string, pem: string): void {
  const current = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined;
  if (current !== pem) writeFileAtomic(file, pem, 0o600);
}
