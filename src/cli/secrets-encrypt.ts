import { formatStatus, type SecretsEncryptionStatus } from '../cluster/secrets-encryption.js';
import type { RotateKeysResponse } from '../cluster/secrets-encryption-endpoint.js';
import { adminClient } from './kubeconfig.js';

/**
 * `drover secrets-encrypt status` and `drover secrets-encrypt rotate-keys`, as K3s's
 * `k3s secrets-encrypt`, through the server's /drover/v1/secrets-encryption endpoints with the
 * admin kubeconfig. Each prints its result, or one error line and exits 1.
 */

const EXIT_FAILURE = 1;
/**
 * A rotation answers when it is finished: every step waits for every live server (up to a minute
 * each) and every Secret is rewritten. The client waits that long rather than give up while the
 * server carries on.
 */
const ROTATE_TIMEOUT_MS = 30 * 60_000;

function failWith(command: string, error: unknown): never {
  process.stderr.write(`drover secrets-encrypt ${command}: ${(error as Error).message}\n`);
  process.exit(EXIT_FAILURE);
}

export async function secretsEncryptStatus(opts: { kubeconfig: string; json?: boolean }): Promise<void> {
  try {
    const client = adminClient(opts.kubeconfig);
    const status = (await client.request('GET', '/drover/v1/secrets-encryption/status')) as SecretsEncryptionStatus;
    client.close();
    process.stdout.write(opts.json ? `${JSON.stringify(status, null, 2)}\n` : formatStatus(status));
  } catch (error) {
    failWith('status', error);
  }
}

export async function secretsEncryptRotateKeys(opts: { kubeconfig: string; json?: boolean }): Promise<void> {
  try {
    const client = adminClient(opts.kubeconfig, { timeoutMs: ROTATE_TIMEOUT_MS });
    const result = (await client.request('POST', '/drover/v1/secrets-encryption/rotate-keys')) as RotateKeysResponse;
    client.close();
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      return;
    }
    process.stdout.write(
      `Keys rotated: ${result.activeKey} is the active key, ${result.rewritten} Secret(s) re-encrypted with it, the old keys removed.\n\n` +
        formatStatus(result.status),
    );
  } catch (error) {
    failWith('rotate-keys', error);
  }
}
