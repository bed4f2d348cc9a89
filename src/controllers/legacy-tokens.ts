import type { TokenIssuer } from '../apiserver/definition.js';
import { ApiError } from '../apiserver/errors.js';
import { SECRET_TYPE, SERVICE_ACCOUNT_NAME_ANNOTATION } from '../apiserver/kinds/secrets.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { SharedInformers } from '../client/shared-informers.js';
import { type ApiClient, SECRETS, SERVICEACCOUNTS } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { MAX_EXPIRATION_SECONDS } from '../security/service-account-tokens.js';
import type { Clock } from './clock.js';
import { serviceAccountSecrets } from './kube-types.js';
import { QueuedController } from './work-queue.js';

/**
 * Legacy ServiceAccount token Secrets, as kube-controller-manager's tokens controller keeps them:
 *
 * - A Secret of type `kubernetes.io/service-account-token` whose `kubernetes.io/service-account.name`
 *   annotation names an existing account gets `token`, `ca.crt` (the cluster's server CA) and
 *   `namespace` in its data, and the account's UID in `kubernetes.io/service-account.uid`.
 * - One that names no existing account (or carries the UID of an account since re-created) is
 *   deleted, with a UID precondition so a newer Secret of that name is left alone.
 * - When an account is deleted, its token Secrets are deleted; a deleted token Secret is taken
 *   out of its account's `secrets` list.
 *
 * Drover does not create such Secrets by itself (Kubernetes stopped in 1.24); they exist only
 * when someone creates one. The token is a JWT bound to the Secret (its `kubernetes.io.secret`
 * claim) for the API audiences, valid for 2^32 s: deleting the Secret or the account, or
 * re-creating either, ends it (the authenticator checks both UIDs). Kubernetes signs these in the
 * older claim layout (issuer `kubernetes/serviceaccount`, no expiry); clients only pass them on.
 */

export const SERVICE_ACCOUNT_UID_ANNOTATION = 'kubernetes.io/service-account.uid';

type Key = ['secret', string, string] | ['account', string, string, string] | ['reference', string, string, string];

const isTokenSecret = (secret: KubeObject): boolean => secret.type === SECRET_TYPE.serviceAccountToken;
const dataOf = (secret: KubeObject): Record<string, string> =>
  secret.data && typeof secret.data === 'object' ? { ...(secret.data as Record<string, string>) } : {};
const b64 = (text: string): string => Buffer.from(text, 'utf8').toString('base64');

export interface LegacyTokensOptions {
  /** Signs the tokens (the server's TokenIssuer). */
  tokens: TokenIssuer;
  /** What `ca.crt` holds: the CA that signs the API servers' certificates (PEM). */
  caCertificatePem: string;
  clock?: Clock;
}

export class LegacyTokensController extends QueuedController {
  constructor(
    private readonly client: ApiClient,
    private readonly informers: SharedInformers,
    private readonly logger: Logger,
    private readonly options: LegacyTokensOptions,
  ) {
    super('legacy-tokens', logger, options.clock);
    informers.on(SECRETS, (type, secret) => {
      if (!this.started || !isTokenSecret(secret)) return;
      const { namespace, name, annotations } = secret.metadata;
      if (type !== 'DELETED') return this.add(['secret', namespace!, name!]);
      const account = annotations?.[SERVICE_ACCOUNT_NAME_ANNOTATION];
      if (account) this.add(['reference', namespace!, account, name!]);
    });
    informers.on(SERVICEACCOUNTS, (type, sa) => {
      if (this.started && type === 'DELETED') this.add(['account', sa.metadata.namespace!, sa.metadata.name!, sa.metadata.uid ?? '']);
    });
  }

  /** Called once the informers have listed: every token Secret is looked at once. */
  start(): void {
    this.started = true;
    for (const secret of this.informers.get(SECRETS).items()) {
      if (isTokenSecret(secret)) this.add(['secret', secret.metadata.namespace!, secret.metadata.name!]);
    }
  }

  private add(key: Key): void {
    this.queue.add(JSON.stringify(key));
  }

  protected sync(json: string): Promise<void> {
    return this.syncKey(JSON.parse(json) as Key);
  }

  private syncKey(key: Key): Promise<void> {
    switch (key[0]) {
      case 'secret':
        return this.syncSecret(key[1], key[2]);
      case 'account':
        return this.deleteTokensOf(key[1], key[2], key[3]);
      case 'reference':
        return this.removeReference(key[1], key[2], key[3]);
    }
  }

  /** The account a token Secret names, if it exists with the UID the Secret records (cache, then a live read). */
  private async accountFor(namespace: string, name: string, uid: string | undefined): Promise<KubeObject | undefined> {
    const matches = (sa: KubeObject | undefined): sa is KubeObject => sa !== undefined && (!uid || sa.metadata.uid === uid);
    const cached = this.informers.get(SERVICEACCOUNTS).get(namespace, name);
    if (matches(cached)) return cached;
    // The cache may not have seen an account created just before its Secret.
    const live = await this.client.get(SERVICEACCOUNTS, namespace, name);
    return matches(live) ? live : undefined;
  }

  private async syncSecret(namespace: string, name: string): Promise<void> {
    const cached = this.informers.get(SECRETS).get(namespace, name);
    if (!cached || !isTokenSecret(cached)) return;
    const annotations = cached.metadata.annotations ?? {};
    const accountName = annotations[SERVICE_ACCOUNT_NAME_ANNOTATION] ?? '';
    const account = accountName ? await this.accountFor(namespace, accountName, annotations[SERVICE_ACCOUNT_UID_ANNOTATION]) : undefined;
    if (!account) {
      this.logger.info({ namespace, secret: name, serviceAccount: accountName }, 'deleting a service account token Secret whose account does not exist');
      await this.deleteSecret(namespace, name, cached.metadata.uid);
      return;
    }
    if (!this.needsUpdate(cached)) return;
    // Work on a fresh copy, and only if the cache was current: otherwise its update event follows.
    const live = await this.client.get(SECRETS, namespace, name);
    if (!live || live.metadata.resourceVersion !== cached.metadata.resourceVersion || !this.needsUpdate(live)) return;
    const data = dataOf(live);
    data['ca.crt'] = b64(this.options.caCertificatePem);
    if (!data['namespace']) data['namespace'] = b64(namespace);
    if (!data['token']) {
      const { token } = await this.options.tokens.issue({
        namespace,
        serviceAccount: { name: account.metadata.name!, uid: account.metadata.uid! },
        audiences: this.options.tokens.apiAudiences,
        expirationSeconds: MAX_EXPIRATION_SECONDS,
        secret: { name, uid: live.metadata.uid! },
      });
      data['token'] = b64(token);
    }
    const updated: KubeObject = {
      ...live,
      metadata: {
        ...live.metadata,
        annotations: { ...live.metadata.annotations, [SERVICE_ACCOUNT_NAME_ANNOTATION]: accountName, [SERVICE_ACCOUNT_UID_ANNOTATION]: account.metadata.uid! },
      },
      data,
    };
    try {
      await this.client.update(SECRETS, namespace, updated);
      this.logger.debug({ namespace, secret: name, serviceAccount: accountName }, 'populated a service account token Secret');
    } catch (error) {
      // Changed meanwhile (its event brings it back here) or gone: nothing to do now.
      if (error instanceof ApiError && (error.code === 409 || error.code === 404)) return;
      throw error;
    }
  }

  private needsUpdate(secret: KubeObject): boolean {
    const data = dataOf(secret);
    return !data['token'] || !data['namespace'] || data['ca.crt'] !== b64(this.options.caCertificatePem);
  }

  /** An account is gone: its token Secrets go too (those recording another UID belong to a newer one). */
  private async deleteTokensOf(namespace: string, name: string, uid: string): Promise<void> {
    if (await this.accountFor(namespace, name, uid)) return;
    for (const secret of this.informers.get(SECRETS).items()) {
      const annotations = secret.metadata.annotations ?? {};
      if (secret.metadata.namespace !== namespace || !isTokenSecret(secret) || annotations[SERVICE_ACCOUNT_NAME_ANNOTATION] !== name) continue;
      const recorded = annotations[SERVICE_ACCOUNT_UID_ANNOTATION];
      if (recorded && recorded !== uid) continue;
      this.logger.info({ namespace, secret: secret.metadata.name, serviceAccount: name }, 'deleting the token Secret of a deleted service account');
      await this.deleteSecret(namespace, secret.metadata.name!, secret.metadata.uid);
    }
  }

  private async deleteSecret(namespace: string, name: string, uid: string | undefined): Promise<void> {
    try {
      await this.client.delete(SECRETS, namespace, name, uid ? { preconditions: { uid } } : {});
    } catch (error) {
      // Gone already, or replaced by a newer Secret of that name (the UID precondition).
      if (error instanceof ApiError && (error.code === 404 || error.code === 409)) return;
      throw error;
    }
  }

  /** A token Secret was deleted: its account no longer lists it. */
  private async removeReference(namespace: string, account: string, secret: string): Promise<void> {
    const sa = await this.client.get(SERVICEACCOUNTS, namespace, account);
    const secrets = serviceAccountSecrets(sa);
    if (!sa || !secrets.some((ref) => ref?.name === secret)) return;
    try {
      await this.client.update(SERVICEACCOUNTS, namespace, { ...sa, secrets: secrets.filter((ref) => ref?.name !== secret) });
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return;
      throw error; // 409: the queue tries again with the new version
    }
  }
}
