import { SecretsEncryption } from '../cluster/secrets-encryption.js';
import { EncryptingDatastore, SECRETS_PREFIX } from '../datastore/encryption.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * Encryption at rest in the server's composition: every component of a server that serves the
 * Kubernetes API reads and writes through an EncryptingDatastore over Secrets' prefix, and
 * SecretsEncryption keeps its keys in step with the cluster's (docs/security.md#encryption-at-rest).
 *
 * The decorator is there whatever the setting: with `secrets-encryption` off it still decrypts
 * Secrets another server (or an earlier setting) encrypted, and otherwise passes values through.
 */

export interface EncryptionAtRestOptions {
  dataDir: string;
  /** The cluster's join secret: unlocks the key set sealed in the datastore. */
  joinSecret: string;
  serverId: string;
  /** `secrets-encryption`. */
  enabled: boolean;
  /** Ids of the live API servers, which must each load a rotation step before the next. */
  peers: () => Promise<string[]>;
  logger: Logger;
}

export interface EncryptionAtRest {
  /** The datastore every component of this server uses from here on. */
  datastore: EncryptingDatastore;
  encryption: SecretsEncryption;
}

/**
 * Wrap the datastore and load (or, on the first server with the setting on, create) the key set.
 * Resolves once the Secrets stored match the setting, so the API serves nothing before.
 */
export async function startEncryptionAtRest(inner: Datastore, options: EncryptionAtRestOptions): Promise<EncryptionAtRest> {
  const datastore = new EncryptingDatastore(inner, { prefixes: [SECRETS_PREFIX], keySet: { active: undefined, keys: [] } });
  const encryption = new SecretsEncryption({ encrypting: datastore, ...options });
  await encryption.start();
  const active = datastore.keySet().active;
  if (options.enabled) options.logger.info({ key: active }, 'secrets encryption: Secrets are stored encrypted (AES-256-GCM)');
  return { datastore, encryption };
}
