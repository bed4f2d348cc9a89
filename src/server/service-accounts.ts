import type { TokenIssuer } from '../apiserver/definition.js';
import type { SharedInformers } from '../client/shared-informers.js';
import type { ApiClient } from '../client/types.js';
import type { Clock } from '../controllers/clock.js';
import { LegacyTokensController } from '../controllers/legacy-tokens.js';
import { RootCaPublisher } from '../controllers/root-ca-publisher.js';
import { ServiceAccountsController } from '../controllers/service-accounts.js';
import { loadOrCreateServiceAccountKey } from '../cluster/service-account-key.js';
import { ServiceAccountAuthenticator } from '../cluster/service-account-authenticator.js';
import type { LocalWrites } from '../cluster/service-account-objects.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { ServerConfigError } from './errors.js';
import {
  defaultApiAudiences,
  defaultIssuer,
  defaultJwksUri,
  issuerProblem,
  issueServiceAccountToken,
  jwks,
  openIdConfiguration,
} from '../security/service-account-tokens.js';

/**
 * ServiceAccount tokens on this server: the cluster's signing key (created by the first server,
 * sealed in the datastore, the same on every server: src/cluster/service-account-key.ts), the
 * issuer and API audiences K3s uses, and from them the TokenRequest signer, the authenticator
 * and the OpenID discovery documents.
 */

export interface ServiceAccountSetupOptions {
  datastore: Datastore;
  dataDir: string;
  /** Unlocks the sealed key record (the cluster's join secret). */
  joinSecret: string;
  client: ApiClient;
  /** The server's own writes (its ObjectStore's), which the token authenticator's cache must never be older than. */
  localWrites?: LocalWrites;
  logger: Logger;
  /** The issuer (`iss`, the `service-account-issuer` setting); default K3s's `https://kubernetes.default.svc.cluster.local`. */
  issuer?: string;
}

/** What /.well-known/openid-configuration and /openid/v1/jwks answer. */
export interface IssuerDiscovery {
  openIdConfiguration: object;
  jwks: object;
}

export interface ServiceAccountSetup {
  issuer: string;
  apiAudiences: readonly string[];
  /** Signs TokenRequests (the verb layer) and legacy token Secrets (their controller). */
  tokens: TokenIssuer;
  authenticator: ServiceAccountAuthenticator;
  /** The discovery documents, once publishAt() has said where this server is. */
  discovery(): IssuerDiscovery;
  /** The URL this server is reached at: the JWKS URI in the OpenID configuration is under it. */
  publishAt(serverUrl: string): void;
}

export async function setUpServiceAccounts(options: ServiceAccountSetupOptions): Promise<ServiceAccountSetup> {
  const issuer = options.issuer ?? defaultIssuer();
  // The resolver refuses a bad issuer already (exit 78); this guards other callers.
  const problem = issuerProblem(issuer);
  if (problem) throw new ServerConfigError(`service-account-issuer ${problem}`);
  const { key, created } = await loadOrCreateServiceAccountKey({
    datastore: options.datastore,
    dataDir: options.dataDir,
    joinSecret: options.joinSecret,
  });
  if (created) options.logger.info({ kid: key.kid }, 'generated the service account signing key');
  const apiAudiences = defaultApiAudiences(issuer);
  const tokens: TokenIssuer = {
    apiAudiences,
    issue: (request) => issueServiceAccountToken(key, { ...request, issuer }),
  };
  const authenticator = new ServiceAccountAuthenticator({
    client: options.client,
    keys: [key],
    issuers: [issuer],
    apiAudiences,
    logger: options.logger.child({ component: 'service-account-authenticator' }),
    ...(options.localWrites ? { localWrites: options.localWrites } : {}),
  });
  let documents: IssuerDiscovery | undefined;
  let jwksUri = defaultJwksUri(issuer);
  return {
    issuer,
    apiAudiences,
    tokens,
    authenticator,
    discovery: () => (documents ??= { openIdConfiguration: openIdConfiguration(issuer, jwksUri, [key]), jwks: jwks([key]) }),
    publishAt: (serverUrl) => {
      jwksUri = defaultJwksUri(serverUrl);
      documents = undefined;
    },
  };
}

/**
 * The ServiceAccount controllers for the controller manager, built afresh each term: the
 * `default` account in every namespace, the legacy token Secrets, and the `kube-root-ca.crt`
 * ConfigMap in every namespace (`ca.crt` of both is the CA of the API servers' certificates).
 */
export function serviceAccountControllers(
  setup: ServiceAccountSetup,
  client: ApiClient,
  logger: Logger,
  caCertificatePem: string,
): ((informers: SharedInformers, clock: Clock) => { start(): void; stop(): void })[] {
  return [
    (informers, clock) => new ServiceAccountsController(client, informers, logger.child({ controller: 'serviceaccounts' }), { clock }),
    (informers, clock) =>
      new LegacyTokensController(client, informers, logger.child({ controller: 'legacy-tokens' }), { tokens: setup.tokens, caCertificatePem, clock }),
    (informers, clock) => new RootCaPublisher(client, informers, logger.child({ controller: 'root-ca-cert-publisher' }), { caCertificatePem, clock }),
  ];
}
