/**
 * A node's heartbeat moves to another server when its server fails the renewal with a 5xx (its
 * etcd member lost the leader and cannot commit), not only when it cannot be reached: two real
 * API servers over one SQLite file with one CA and token, the first one's datastore failing every
 * write as etcd does during an election. Before, the agent retried the failing server until it
 * answered, and its node looked silent meanwhile.
 *
 * Run: node --import tsx --test test/e2e/agent-server-failing.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { LeaseRenewal } from '../../src/agent/lease-renewal.js';
import type { NodeRegistration } from '../../src/agent/registration.js';
import { ServerConnection } from '../../src/agent/servers.js';
import { allowAuthenticated, TokenAuthenticator } from '../../src/apiserver/auth.js';
import { OpenApiDocuments } from '../../src/apiserver/openapi.js';
import { ResourceRegistry } from '../../src/apiserver/resources.js';
import { ApiServer } from '../../src/apiserver/server.js';
import { ObjectStore } from '../../src/apiserver/storage.js';
import { deriveTimings } from '../../src/config/timings.js';
import { openSqliteDatastore, type SqliteDatastore } from '../../src/datastore/sqlite.js';
import { type Datastore, DatastoreError } from '../../src/datastore/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { ensureServingMaterial } from '../../src/security/pki.js';
import { versionInfo } from '../../src/version.js';
import { request, tempDir } from '../helpers/server.js';

const TIMINGS = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000 };
const NODE = 'n1';

/** The datastore as etcd is during an election: reads work, every write times out. */
function electing(datastore: Datastore): Datastore {
  const fail = async (): Promise<never> => {
    throw new DatastoreError('etcd update failed: 14 UNAVAILABLE: etcdserver: request timed out, possibly due to previous leader failure');
  };
  return new Proxy(datastore, {
    get(target, property, receiver) {
      if (property === 'create' || property === 'update' || property === 'delete') return fail;
      const value = Reflect.get(target, property, receiver) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

describe('agent lease renewal when its server fails', () => {
  let dir: string;
  let datastore: SqliteDatastore;
  const servers: ApiServer[] = [];
  const urls: string[] = [];
  const token = randomBytes(24).toString('hex');
  let caPem: string;

  before(async () => {
    dir = tempDir('agent-5xx');
    datastore = openSqliteDatastore(path.join(dir, 'state.db'));
    const tls = await ensureServingMaterial(path.join(dir, 'tls'), ['127.0.0.1']);
    caPem = tls.ca.certificatePem;
    const authenticator = new TokenAuthenticator();
    authenticator.add(token, { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] });
    for (const store of [new ObjectStore(electing(datastore)), new ObjectStore(datastore)]) {
      const registry = new ResourceRegistry();
      const api = new ApiServer(
        {
          store,
          registry,
          openapi: new OpenApiDocuments(registry),
          authenticator,
          authorizer: allowAuthenticated,
          logger: createLogger('silent'),
          version: versionInfo(),
          caCertificatePem: caPem,
          readiness: async () => undefined,
          defaultRuntimeClass: 'process',
        },
        tls.serving,
      );
      const { port } = await api.listen({ host: '127.0.0.1', port: 0 });
      servers.push(api);
      urls.push(`https://127.0.0.1:${port}`);
    }
  });

  after(async () => {
    for (const api of servers) await api.close(1000);
    await datastore?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a 5xx from the server moves the renewal to another server, which takes it', async () => {
    const [failing, healthy] = urls as [string, string];
    const target = (url: string) => ({ port: Number(new URL(url).port), token, caPem });
    // The lease, as registration leaves it (through the healthy server: the other writes nothing).
    assert.equal((await request(target(healthy), 'POST', '/api/v1/namespaces', { body: { metadata: { name: 'kube-node-lease' } } })).status, 201);
    const lease = { metadata: { name: NODE, namespace: 'kube-node-lease' }, spec: { holderIdentity: NODE, leaseDurationSeconds: 4 } };
    assert.equal((await request(target(healthy), 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { body: lease })).status, 201);
    // What the failing server answers a renewal: a 503 that says why, not a 500.
    const refused = await request(target(failing), 'PATCH', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`, {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { spec: { renewTime: new Date().toISOString() } },
    });
    assert.equal(refused.status, 503, refused.text);

    const agentDir = path.join(dir, 'agent');
    fs.mkdirSync(agentDir);
    fs.writeFileSync(path.join(agentDir, 'servers.json'), JSON.stringify([failing, healthy]));
    const lines: string[] = [];
    const logger = createLogger('silent');
    logger.warn = ((fields: object, message: string) => void lines.push(`${message} ${JSON.stringify(fields)}`)) as typeof logger.warn;
    const connection = new ServerConnection(failing, agentDir, logger);
    connection.connect(failing, { caPem, token, timings: TIMINGS });
    // The registration's fields a renewal reads.
    const registration = { timings: deriveTimings(TIMINGS), nodeUid: 'uid-1', reregister: async () => undefined } as unknown as NodeRegistration;
    const renewal = new LeaseRenewal({
      nodeName: NODE,
      connection,
      registration,
      health: () => ({ healthy: true }) as never,
      pods: () => undefined,
      metrics: () => undefined,
      logger,
    });
    try {
      await renewal.renewAnywhere();
      assert.equal(connection.server, healthy, 'the agent now talks to the healthy server');
      const stored = await request(target(healthy), 'GET', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`);
      const spec = (stored.json as { spec: { renewTime?: string; holderIdentity: string } }).spec;
      assert.ok(spec.renewTime, 'the renewal was stored');
      assert.match(spec.holderIdentity, /uid-1/);
      const moved = lines.find((line) => line.startsWith('server unreachable or failing; moved to another server'));
      assert.ok(moved, lines.join('\n'));
      assert.match(moved, /the datastore did not complete the request/);
    } finally {
      renewal.stop();
      connection.close();
    }
  });
});
