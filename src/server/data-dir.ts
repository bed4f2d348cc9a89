import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../security/files.js';
import { type DataDirLock, lockDataDir } from './lock.js';

/**
 * The server's data dir (docs/architecture.md#the-data-dir):
 *
 *   <data-dir>/server.lock              one server per data dir
 *   <data-dir>/server/db/state.db       the SQLite datastore (WAL)
 *   <data-dir>/server/tls/              cluster CA and serving certificate
 *   <data-dir>/server/cred/admin.token  the admin bearer token (0600)
 *   <data-dir>/server/server-id         this server's stable identity (leader election)
 *   <data-dir>/token                    the join token agents use (0600)
 *   <data-dir>/agent/                   the embedded agent's identity
 *   <data-dir>/kubeconfig.yaml          admin kubeconfig (0600)
 */

export interface ServerDataDir {
  /** Absolute. */
  dataDir: string;
  /** `<data-dir>/server`. */
  serverDir: string;
  lock: DataDirLock;
}

/** Creates the data dir (0700 when Drover creates it) and takes its lock. */
export function lockServerDataDir(dataDirSetting: string): ServerDataDir {
  const dataDir = path.resolve(dataDirSetting);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const lock = lockDataDir(dataDir, 'server');
  return { dataDir, serverDir: path.join(dataDir, 'server'), lock };
}

/** `server/` and `server/db/`, and this server's id (made once, kept across restarts). */
export function prepareServerDir(serverDir: string): { serverId: string } {
  fs.mkdirSync(path.join(serverDir, 'db'), { recursive: true, mode: 0o700 });
  return { serverId: ensureServerId(path.join(serverDir, 'server-id')) };
}

function ensureServerId(file: string): string {
  if (fs.existsSync(file)) {
    const id = fs.readFileSync(file, 'utf8').trim();
    if (id) return id;
  }
  const id = randomUUID();
  writeFileAtomic(file, `${id}\n`, 0o644);
  return id;
}
