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
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { LeaseRenewal } from '../../src/agent/lease-renewal.js';
import type { NodeRegistration } from '../../src/agent/registration.js';
import { ServerConnection } from '../../src/agent/servers.js';
import { deriveTimings } from '../../src/config/timings.js';
import { type Datastore, DatastoreError } from '../../src/datastore/types.js';
import { createLogger } from '../../src/logging/logger.js';
import { type InProcessApiServer, startInProcessApiServer } from '../helpers/api-server.js';
import { request } from '../helpers/server.js';

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
  let healthyServer: InProcessApiServer;
  let failingServer: InProcessApiServer;
  const urls: string[] = [];
  let token: string;
  let caPem: string;

  before(async () => {
    healthyServer = await startInProcessApiServer({ prefix: 'agent-5xx' });
    failingServer = await startInProcessApiServer({ sameClusterAs: healthyServer, wrapDatastore: electing });
    ({ token, caPem } = healthyServer.target);
    urls.push(`https://127.0.0.1:${failingServer.target.port}`, `https://127.0.0.1:${healthyServer.target.port}`);
  });

  after(async () => {
    await failingServer?.close();
    await healthyServer?.close();
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

    const agentDir = path.join(healthyServer.dir, 'agent');
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
