import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { ServerConnection } from '../../src/agent/servers.js';
import { createLogger } from '../../src/logging/logger.js';

/**
 * The order in which an agent tries servers (src/agent/servers.ts): the one in use first, then the
 * `--server` it was given, then those it learned (servers.json), each once. Registration and
 * renewals both walk this list, so a failover depends on it. Real servers moving agents around
 * are in test/e2e/ha-etcd.test.ts.
 */

const FIRST = 'https://10.0.0.1:6443';
const timings = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000 };
const credentials = { caPem: '', token: 'node-token', timings };

describe('the servers an agent tries', () => {
  const dirs: string[] = [];
  after(() => {
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });
  const connection = (): { servers: ServerConnection; dir: string } => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-agent-servers-'));
    dirs.push(dir);
    return { servers: new ServerConnection(FIRST, dir, createLogger('silent')), dir };
  };

  it('before anything is learned: only the --server it was given', () => {
    const { servers } = connection();
    assert.deepEqual(servers.candidates(), [FIRST]);
    assert.equal(servers.client, undefined);
  });

  it('then the learned servers from servers.json, each once', () => {
    const { servers, dir } = connection();
    fs.writeFileSync(path.join(dir, 'servers.json'), JSON.stringify(['https://10.0.0.2:6443', FIRST, 'https://10.0.0.3:6443']));
    assert.deepEqual(servers.candidates(), [FIRST, 'https://10.0.0.2:6443', 'https://10.0.0.3:6443']);
  });

  it('the server in use comes first; an unreadable servers.json counts as none learned', () => {
    const { servers, dir } = connection();
    fs.writeFileSync(path.join(dir, 'servers.json'), JSON.stringify(['https://10.0.0.2:6443', 'https://10.0.0.3:6443']));
    servers.connect('https://10.0.0.3:6443', credentials);
    try {
      assert.equal(servers.server, 'https://10.0.0.3:6443');
      assert.ok(servers.client, 'a client for the server in use');
      assert.deepEqual(servers.candidates(), ['https://10.0.0.3:6443', FIRST, 'https://10.0.0.2:6443']);
      // A move keeps the credentials of the registration: no second argument needed.
      servers.connect('https://10.0.0.2:6443');
      assert.deepEqual(servers.candidates(), ['https://10.0.0.2:6443', FIRST, 'https://10.0.0.3:6443']);
      fs.writeFileSync(path.join(dir, 'servers.json'), '{ not json');
      assert.deepEqual(servers.candidates(), ['https://10.0.0.2:6443', FIRST]);
    } finally {
      servers.close();
    }
  });

  it('no connection before a registration gave credentials', () => {
    const { servers } = connection();
    assert.throws(() => servers.connect('https://10.0.0.2:6443'), /before this node is registered/);
    assert.equal(servers.client, undefined);
  });
});
