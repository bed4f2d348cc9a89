import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Authenticator, bearerToken } from '../apiserver/auth.js';
import { ApiError, errors } from '../apiserver/errors.js';
import { sendJson } from '../apiserver/http.js';
import type { Logger } from '../logging/logger.js';
import { secretsEqual } from './join-token.js';
import { type RotationResult, type SecretsEncryption, SecretsEncryptionError, type SecretsEncryptionStatus } from './secrets-encryption.js';

/**
 * `drover secrets-encrypt status|rotate-keys` on the server side, under /drover/v1 (what K3s
 * serves as `/v1-k3s/encrypt/*` to its server token only):
 *
 *   GET  /drover/v1/secrets-encryption/status       the key set, each live server's hash, a census
 *   POST /drover/v1/secrets-encryption/rotate-keys  a whole rotation; answers when it is finished
 *
 * Only the cluster's administrators (system:masters) and the server token may call them: key
 * management is not something a node or an ordinary user may trigger or even inspect, whatever
 * RBAC grants them on the Kubernetes API.
 */

export const SECRETS_ENCRYPTION_PATH = '/drover/v1/secrets-encryption/';

export interface SecretsEncryptionEndpointOptions {
  authenticator: Authenticator;
  /** The server token's secret, which other servers hold. */
  joinSecret: string;
  /** Absent on a server that serves no Kubernetes API (role etcd): it holds no keys. */
  encryption: SecretsEncryption | undefined;
  logger: Logger;
}

export interface RotateKeysResponse extends RotationResult {
  status: SecretsEncryptionStatus;
}

/** Who may manage the keys: an administrator, or a caller holding the server token. */
async function authorize(options: SecretsEncryptionEndpointOptions, req: IncomingMessage): Promise<string> {
  const token = bearerToken(req);
  if (token && secretsEqual(token, options.joinSecret)) return 'server token';
  // (awaited: the authenticator may become asynchronous, as token verification does)
  const user = await options.authenticator.authenticate(req);
  if (!user) throw errors.unauthorized();
  if (!user.groups.includes('system:masters')) {
    throw errors.forbidden(`User "${user.name}" cannot manage secrets encryption: only cluster administrators (system:masters) and servers may`);
  }
  return user.name;
}

function asApiError(error: SecretsEncryptionError): ApiError {
  switch (error.problem) {
    case 'not-enabled':
      return errors.badRequest(error.message);
    case 'unfinished':
      return new ApiError(503, 'ServiceUnavailable', error.message);
    case 'record':
      return new ApiError(500, 'InternalError', error.message);
  }
}

/** Serves the two paths; answers false for any other path. Errors are thrown as ApiErrors. */
export async function serveSecretsEncryption(
  options: SecretsEncryptionEndpointOptions,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<boolean> {
  if (!path.startsWith(SECRETS_ENCRYPTION_PATH)) return false;
  const action = path.slice(SECRETS_ENCRYPTION_PATH.length);
  const method = action === 'status' ? 'GET' : action === 'rotate-keys' ? 'POST' : undefined;
  if (!method) throw errors.pathNotFound();
  if (req.method !== method) throw errors.methodNotAllowed();
  const caller = await authorize(options, req);
  const { encryption } = options;
  if (!encryption) {
    throw errors.badRequest('this server serves no Kubernetes API (role etcd) and holds no encryption keys; ask a control-plane server');
  }
  try {
    if (action === 'status') {
      sendJson(res, 200, await encryption.status());
      return true;
    }
    options.logger.info({ by: caller }, 'secrets encryption: key rotation requested');
    const result = await encryption.rotateKeys();
    const body: RotateKeysResponse = { ...result, status: await encryption.status() };
    sendJson(res, 200, body);
    return true;
  } catch (error) {
    if (error instanceof SecretsEncryptionError) throw asApiError(error);
    throw error;
  }
}
