/**
 * ServiceAccount tokens across two `drover server`s sharing one real etcd: one signing key for the
 * cluster (the second server opens the first one's sealed key), so a token issued by either
 * authenticates on both; an account deleted through one server ends its tokens on the other at
 * once (each reads the account from the shared store on every request); a legacy token Secret
 * created on one is filled in by the controller leader and works on both.
 *
 * Run: node --import tsx --test test/e2e/service-accounts-ha.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { type EtcdServer, startEtcd } from '../helpers/etcd.js';
import { cleanup, eventually, request, type ServerProcess, startServer } from '../helpers/server.js';

const etcdFlag = (etcd: EtcdServer): string => etcd.endpoint.replace(/^https?:\/\//, 'etcd://');

interface TokenRequestAnswer {
  status: { token: string };
}

describe('ServiceAccount tokens on two servers sharing etcd', { concurrency: false }, () => {
  let etcd: EtcdServer;
  let a: ServerProcess;
  let b: ServerProcess;

  /** The user a server takes a token for (a SelfSubjectReview), or the HTTP status it refused with. */
  const whoOn = async (server: ServerProcess, token: string): Promise<string | number> => {
    const res = await request(server, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      token,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    });
    return res.status === 201 ? (res.json as { status: { userInfo: { username: string } } }).status.userInfo.username : res.status;
  };
  const tokenFrom = async (server: ServerProcess, ns: string, sa: string): Promise<string> => {
    const res = await request(server, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, { body: { spec: {} } });
    assert.equal(res.status, 201, res.text);
    return (res.json as TokenRequestAnswer).status.token;
  };

  before(async () => {
    etcd = await startEtcd();
    a = await startServer({ args: ['--datastore-endpoint', etcdFlag(etcd), '--node-name', 'sa-a'] });
    const token = fs.readFileSync(path.join(a.dataDir, 'token'), 'utf8').trim();
    b = await startServer({ args: ['--datastore-endpoint', etcdFlag(etcd), '--node-name', 'sa-b', '--token', token] });
  });

  after(async () => {
    await cleanup();
    await etcd?.stop();
  });

  it('both servers hold the one signing key: the same JWKS, and the same key file', async () => {
    const jwksA = (await request(a, 'GET', '/openid/v1/jwks')).json as { keys: { kid: string }[] };
    const jwksB = (await request(b, 'GET', '/openid/v1/jwks')).json as { keys: { kid: string }[] };
    assert.equal(jwksA.keys.length, 1);
    assert.deepEqual(jwksB, jwksA);
    const keyFile = (s: ServerProcess): string => fs.readFileSync(path.join(s.dataDir, 'server/tls/service.key'), 'utf8');
    assert.equal(keyFile(b), keyFile(a));
  });

  it('a token issued by either server authenticates on both; the account deleted through one ends it on that one at once, on the other once its watch delivers the deletion', async () => {
    assert.equal((await request(a, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { metadata: { name: 'shared' } } })).status, 201);
    const fromA = await tokenFrom(a, 'default', 'shared');
    const fromB = await tokenFrom(b, 'default', 'shared');
    for (const [token, server] of [[fromA, a], [fromA, b], [fromB, a], [fromB, b]] as const) {
      assert.equal(await whoOn(server, token), 'system:serviceaccount:default:shared');
    }
    assert.equal((await request(b, 'DELETE', '/api/v1/namespaces/default/serviceaccounts/shared')).status, 200);
    assert.equal(await whoOn(b, fromA), 401, 'refused on the server the deletion went through by the next request');
    assert.equal(await whoOn(b, fromB), 401);
    // Server a learns of the deletion from its watch (milliseconds, longer on a loaded machine):
    // its cache confirms a token only while it holds the account with the token's UID.
    await eventually(async () => (await whoOn(a, fromA)) === 401, 'token refused on the other server once its watch delivers the deletion');
    assert.equal(await whoOn(a, fromB), 401);
  });

  it('a new namespace gets its default account, and a legacy token Secret made on one server works on both', async () => {
    assert.equal((await request(b, 'POST', '/api/v1/namespaces', { body: { metadata: { name: 'ha-team' } } })).status, 201);
    await eventually(async () => (await request(a, 'GET', '/api/v1/namespaces/ha-team/serviceaccounts/default')).status === 200, 'default account in ha-team');
    const secret = {
      metadata: { name: 'default-token', annotations: { 'kubernetes.io/service-account.name': 'default' } },
      type: 'kubernetes.io/service-account-token',
    };
    assert.equal((await request(a, 'POST', '/api/v1/namespaces/ha-team/secrets', { body: secret })).status, 201);
    const data = await eventually(async () => {
      const d = ((await request(b, 'GET', '/api/v1/namespaces/ha-team/secrets/default-token')).json as { data?: Record<string, string> }).data;
      return d?.['token'] ? d : undefined;
    }, 'the legacy token filled in');
    const token = Buffer.from(data['token']!, 'base64').toString();
    assert.equal(await whoOn(a, token), 'system:serviceaccount:ha-team:default');
    assert.equal(await whoOn(b, token), 'system:serviceaccount:ha-team:default');
  });
});
