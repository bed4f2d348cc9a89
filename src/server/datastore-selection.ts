import path from 'node:path';
import { hasEtcdData, type ManagedEtcd } from '../cluster/managed-etcd.js';
import type { ServerSettings } from '../config/schema.js';
import { openSqliteDatastore } from '../datastore/sqlite.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { ServerConfigError } from './errors.js';
import { type EtcdAccess, type ManagedDatastoreOptions, openManagedDatastore, openMemberlessDatastore } from './managed-datastore.js';

/**
 * Which datastore this server keeps its state in, and opening it. The only place that chooses a
 * concrete backend:
 *
 * - `role: control-plane` without `datastore-endpoint`: the cluster's managed etcd, as a client
 *   only (no member of its own), found through the server it joins;
 * - `cluster-init`, `server` (joining), or etcd data already on disk: a managed etcd member of
 *   its own, started or joined (managed-datastore.ts), then used as the datastore;
 * - `datastore-endpoint etcd://…`: an external etcd;
 * - otherwise the embedded SQLite file in the data dir.
 */

export interface SelectedDatastore {
  datastore: Datastore;
  /** This server's own etcd member, when it runs one. */
  managedEtcd?: ManagedEtcd;
  /** How to reach the managed etcd's members (membership changes), when the cluster has one. */
  etcdAccess?: EtcdAccess;
}

export interface DatastoreSelectionContext {
  dataDir: string;
  /** `<data-dir>/server`: holds `db/state.db` for SQLite. */
  serverDir: string;
  /** This server's etcd member name: node name and the start of its server id. */
  memberName: string;
  /** The address its etcd member advertises to its peers. */
  advertiseHost: string;
  logger: Logger;
}

export async function openServerDatastore(settings: ServerSettings, context: DatastoreSelectionContext): Promise<SelectedDatastore> {
  const { logger } = context;
  const managedOptions: ManagedDatastoreOptions = {
    dataDir: context.dataDir,
    memberName: context.memberName,
    advertiseIp: context.advertiseHost,
    clientPort: settings.etcdClientPort,
    peerPort: settings.etcdPeerPort,
    clusterInit: settings.clusterInit,
    ...(settings.server ? { joinServer: settings.server } : {}),
    ...(settings.token ? { token: settings.token } : {}),
    logger,
    // Without its member this server can serve nothing; exiting lets agents fail over at once
    // and a service manager restart it (the member then restarts from its data).
    onMemberExit: (code: number | null) => {
      logger.fatal({ code }, 'the managed etcd member died; stopping this server');
      process.exit(1);
    },
  };
  if (settings.role === 'control-plane' && !settings.datastoreEndpoint) {
    const memberless = await openMemberlessDatastore(managedOptions);
    return { datastore: memberless.datastore, etcdAccess: memberless.access };
  }
  if ((settings.clusterInit || settings.server || hasEtcdData(context.dataDir)) && !settings.datastoreEndpoint) {
    // A server with etcd data on disk runs its member again, with or without its first flags.
    const managed = await openManagedDatastore(managedOptions);
    return {
      datastore: managed.datastore,
      managedEtcd: managed.etcd,
      etcdAccess: { endpoints: [managed.etcd.endpoint], ...managed.etcd.clientTls },
    };
  }
  return { datastore: await connectDatastore(settings, context.serverDir, logger) };
}

/** The embedded SQLite file, or the external etcd of `datastore-endpoint`. */
async function connectDatastore(settings: ServerSettings, serverDir: string, logger: Logger): Promise<Datastore> {
  const endpoint = settings.datastoreEndpoint;
  if (!endpoint) return openSqliteDatastore(path.join(serverDir, 'db', 'state.db'));
  const match = /^etcd:\/\/(.+)$/.exec(endpoint);
  if (!match) {
    throw new ServerConfigError(`datastore-endpoint "${endpoint}" is not supported: use etcd://host:port[,host:port...]`);
  }
  const tls = { caFile: settings.datastoreCafile, certFile: settings.datastoreCertfile, keyFile: settings.datastoreKeyfile };
  const scheme = tls.caFile || tls.certFile ? 'https' : 'http';
  const endpoints = match[1]!.split(',').map((h) => `${scheme}://${h.trim()}`);
  logger.info({ endpoints }, 'using an external etcd datastore');
  // Loaded only when used: the gRPC stack costs a few hundred milliseconds of start-up.
  const { openEtcdDatastoreInThread } = await import('../datastore/etcd-thread.js');
  return openEtcdDatastoreInThread({
    endpoints,
    ...(tls.caFile ? { caFile: tls.caFile } : {}),
    ...(tls.certFile ? { certFile: tls.certFile } : {}),
    ...(tls.keyFile ? { keyFile: tls.keyFile } : {}),
  });
}
