import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { allowAuthenticated, TokenAuthenticator } from '../apiserver/auth.js';
import { ApiError } from '../apiserver/errors.js';
import { OpenApiDocuments } from '../apiserver/openapi.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../apiserver/resources.js';
import { ApiServer } from '../apiserver/server.js';
import { ObjectStore } from '../apiserver/storage.js';
import { openSqliteDatastore } from '../datastore/sqlite.js';
import type { Datastore } from '../datastore/types.js';
import { createLogger, type LogLevel, type Logger } from '../logging/logger.js';
import { ensureServingMaterial, servingNames } from '../security/pki.js';
import { ensureTokenFile } from '../security/tokens.js';
import { versionInfo } from '../version.js';
import { writeKubeconfig } from './kubeconfig.js';
import { type DataDirLock, lockDataDir } from './lock.js';

/**
 * `drover server`: composes the datastore, the API server and (in later releases) the
 * controllers, and owns the data dir layout:
 *
 *   <data-dir>/server.lock              one server per data dir
 *   <data-dir>/server/db/state.db       the SQLite datastore (WAL)
 *   <data-dir>/server/tls/              cluster CA and serving certificate
 *   <data-dir>/server/cred/admin.token  the admin bearer token (0600)
 *   <data-dir>/kubeconfig.yaml          admin kubeconfig (0600)
 */

export interface ServerOptions {
  dataDir: string;
  httpsListenPort: number;
  bindAddress: string;
  tlsSans: string[];
  writeKubeconfig?: string;
  logLevel: LogLevel;
  /** How long history is kept before compaction; revisions older than this answer 410 Gone. */
  compactionIntervalMs?: number;
  compactionKeepRevisions?: number;
}

export function defaultDataDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/drover' : path.join(os.homedir(), '.drover');
}

export interface RunningServer {
  port: number;
  kubeconfigPath: string;
  logger: Logger;
  stop(): Promise<void>;
}

function clientHost(bindAddress: string): string {
  if (bindAddress === '0.0.0.0' || bindAddress === '' || bindAddress === '::') return '127.0.0.1';
  return bindAddress.includes(':') ? `[${bindAddress}]` : bindAddress;
}

async function ensureBuiltInNamespaces(store: ObjectStore, registry: ResourceRegistry): Promise<void> {
  const def = registry.lookup('', 'v1', 'namespaces')!;
  for (const name of BUILT_IN_NAMESPACES) {
    try {
      await store.create(def, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 409)) throw error;
    }
  }
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const started = Date.now();
  const logger = createLogger(options.logLevel, 'drover-server');
  const dataDir = path.resolve(options.dataDir);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const lock: DataDirLock = lockDataDir(dataDir, 'server');
  let datastore: Datastore | undefined;
  try {
    const serverDir = path.join(dataDir, 'server');
    fs.mkdirSync(path.join(serverDir, 'db'), { recursive: true, mode: 0o700 });
    datastore = openSqliteDatastore(path.join(serverDir, 'db', 'state.db'));
    const store = new ObjectStore(datastore);
    const registry = new ResourceRegistry();

    const specificBind = !['0.0.0.0', '::', ''].includes(options.bindAddress) ? [options.bindAddress] : [];
    const tls = await ensureServingMaterial(path.join(serverDir, 'tls'), servingNames([...specificBind, ...options.tlsSans]));
    for (const what of tls.created) logger.info({ dir: path.join(serverDir, 'tls') }, `generated ${what}`);
    const admin = ensureTokenFile(path.join(serverDir, 'cred', 'admin.token'));
    if (admin.created) logger.info('generated admin token');
    const authenticator = new TokenAuthenticator();
    authenticator.add(admin.token, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });

    await ensureBuiltInNamespaces(store, registry);

    const openDatastore = datastore;
    const api = new ApiServer(
      {
        store,
        registry,
        openapi: new OpenApiDocuments(registry),
        authenticator,
        authorizer: allowAuthenticated,
        logger,
        version: versionInfo(),
        caCertificatePem: tls.ca.certificatePem,
        readiness: async () => {
          try {
            // A real read, so a datastore that stopped answering makes the server not ready.
            await openDatastore.get('/drover/readyz');
            return undefined;
          } catch (error) {
            return error instanceof Error ? error.message : String(error);
          }
        },
      },
      tls.serving,
    );
    const address = await api.listen({ host: options.bindAddress, port: options.httpsListenPort });
    const serverUrl = `https://${clientHost(options.bindAddress)}:${address.port}`;
    const kubeconfig = { serverUrl, caCertificatePem: tls.ca.certificatePem, token: admin.token };
    const kubeconfigPath = path.join(dataDir, 'kubeconfig.yaml');
    writeKubeconfig(kubeconfigPath, kubeconfig);
    if (options.writeKubeconfig) writeKubeconfig(path.resolve(options.writeKubeconfig), kubeconfig);

    const compactor = startCompactor(
      datastore,
      logger,
      options.compactionIntervalMs ?? 5 * 60_000,
      options.compactionKeepRevisions ?? 1000,
    );

    logger.info(
      {
        url: serverUrl,
        bindAddress: options.bindAddress,
        port: address.port,
        datastore: datastore.name,
        dataDir,
        kubeconfig: kubeconfigPath,
        startupMs: Date.now() - started,
      },
      `Drover server is ready: kubectl --kubeconfig ${kubeconfigPath} get nodes`,
    );

    let stopping: Promise<void> | undefined;
    const stop = (): Promise<void> => {
      stopping ??= (async () => {
        logger.info('shutting down: closing listeners and waiting for requests in flight');
        clearInterval(compactor);
        await api.close(4000);
        await openDatastore.close();
        lock.release();
        logger.info('shutdown complete');
      })();
      return stopping;
    };
    return { port: address.port, kubeconfigPath, logger, stop };
  } catch (error) {
    await datastore?.close();
    lock.release();
    throw error;
  }
}

/**
 * Keep a window of recent history so watches can resume after a brief disconnect, and discard
 * the rest, as kube-apiserver asks etcd to every few minutes.
 */
function startCompactor(datastore: Datastore, logger: Logger, intervalMs: number, keep: number): NodeJS.Timeout {
  const timer = setInterval(() => {
    void (async () => {
      try {
        const target = (await datastore.currentRevision()) - keep;
        if (target > (await datastore.compactRevision())) {
          await datastore.compact(target);
          logger.debug({ revision: target }, 'compacted datastore history');
        }
      } catch (error) {
        logger.warn({ err: error }, 'datastore compaction failed; will retry');
      }
    })();
  }, intervalMs);
  timer.unref();
  return timer;
}
