import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { allowAuthenticated, TokenAuthenticator } from '../../src/apiserver/auth.js';
import type { HandlerOptions } from '../../src/apiserver/handler.js';
import { OpenApiDocuments } from '../../src/apiserver/openapi.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { ApiServer } from '../../src/apiserver/server.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { openSqliteDatastore, type SqliteDatastore } from '../../src/datastore/sqlite.js';
import type { Datastore } from '../../src/datastore/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { ensureServingMaterial } from '../../src/security/pki.js';
import { versionInfo } from '../../src/version.js';
import { tempDir } from './server.js';

/**
 * An API server in this process on loopback, over a real SQLite file, with one admin token: for
 * tests that need the server's objects at hand (the store, to compact or sabotage it; the registry,
 * for a LocalClient beside the HTTP one) rather than a `drover server` process.
 */
export interface InProcessApiServer {
  dir: string;
  datastore: SqliteDatastore;
  store: ObjectStore;
  registry: ResourceRegistry;
  api: ApiServer;
  /** What request() and HttpClient need: the port, the admin token and the CA. */
  target: { port: number; token: string; caPem: string };
  close(): Promise<void>;
}

export interface InProcessApiServerOptions {
  /** The temp dir's prefix. */
  prefix?: string;
  /** Silent unless given. */
  logger?: HandlerOptions['logger'];
  /** Called with the store before the server uses it (to make it fail on purpose, say). */
  sabotage?: (store: ObjectStore) => void;
  /** More handler options (bookmarkIntervalMs, watchUnreadBytes …). */
  handler?: Partial<HandlerOptions>;
  /**
   * A second server of the same cluster: this one's datastore file, CA and admin token (as two
   * servers of an HA cluster share them). It closes only its own server.
   */
  sameClusterAs?: InProcessApiServer;
  /** The datastore as this server sees it (to make its writes fail on purpose, say). */
  wrapDatastore?: (datastore: Datastore) => Datastore;
}

export async function startInProcessApiServer(options: InProcessApiServerOptions = {}): Promise<InProcessApiServer> {
  const shared = options.sameClusterAs;
  const dir = shared?.dir ?? tempDir(options.prefix ?? 'inproc');
  const datastore = shared?.datastore ?? openSqliteDatastore(path.join(dir, 'state.db'));
  const store = new ObjectStore(options.wrapDatastore ? options.wrapDatastore(datastore) : datastore);
  options.sabotage?.(store);
  const registry = new ResourceRegistry();
  const tls = await ensureServingMaterial(path.join(dir, 'tls'), ['127.0.0.1']);
  const token = shared?.target.token ?? randomBytes(24).toString('hex');
  const authenticator = new TokenAuthenticator();
  authenticator.add(token, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });
  const api = new ApiServer(
    {
      store,
      registry,
      openapi: new OpenApiDocuments(registry),
      authenticator,
      authorizer: allowAuthenticated,
      logger: options.logger ?? createLogger('silent'),
      version: versionInfo(),
      caCertificatePem: tls.ca.certificatePem,
      readiness: async () => undefined,
      // As the test servers: pods without a runtimeClassName are processes.
      defaultRuntimeClass: 'process',
      ...options.handler,
    },
    tls.serving,
  );
  const { port } = await api.listen({ host: '127.0.0.1', port: 0 });
  return {
    dir,
    datastore,
    store,
    registry,
    api,
    target: { port, token, caPem: tls.ca.certificatePem },
    close: async () => {
      await api.close(1000);
      if (!shared) await datastore.close();
    },
  };
}
