/**
 * CustomResourceDefinitions on two `drover server`s sharing one real etcd: a CRD created through
 * one server is served, discoverable and in the OpenAPI documents of the other within a few
 * seconds (each server follows CRDs through a watch, not the write path of the server that took
 * the create); objects written through either are read through both; a CRD deleted through the
 * second disappears from the first with its objects.
 *
 * Run: node --import tsx --test test/e2e/crds-ha.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { widget, widgetCrd } from '../helpers/crd.js';
import { type EtcdServer, startEtcd } from '../helpers/etcd.js';
import { cleanup, eventually, report, request, type ServerProcess, startServer } from '../helpers/server.js';

const etcdFlag = (etcd: EtcdServer): string => etcd.endpoint.replace(/^https?:\/\//, 'etcd://');
const WIDGETS = '/apis/ha.example.com/v1/namespaces/default/widgets';
const CRD = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.ha.example.com';

describe('CustomResourceDefinitions on two servers sharing etcd', { concurrency: false, timeout: 300_000 }, () => {
  let etcd: EtcdServer;
  let a: ServerProcess;
  let b: ServerProcess;

  before(async () => {
    etcd = await startEtcd();
    a = await startServer({ args: ['--datastore-endpoint', etcdFlag(etcd), '--node-name', 'crd-a'] });
    const token = fs.readFileSync(path.join(a.dataDir, 'token'), 'utf8').trim();
    b = await startServer({ args: ['--datastore-endpoint', etcdFlag(etcd), '--node-name', 'crd-b', '--token', token] });
  });

  after(async () => {
    await cleanup();
    await etcd?.stop();
  });

  it('a CRD created on one server is served by the other, in discovery and OpenAPI', async (t) => {
    assert.equal((await request(b, 'GET', '/apis/ha.example.com/v1')).status, 404, 'not served before the CRD exists');
    const created = await request(a, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: widgetCrd('ha.example.com') });
    assert.equal(created.status, 201, created.text);
    const createdAt = Date.now();
    await eventually(async () => (await request(b, 'GET', '/apis/ha.example.com/v1')).status === 200, 'server B serving the CRD', 10_000, 10);
    report(t, `server B served the CRD ${Date.now() - createdAt} ms after server A answered its create (polled every 10 ms)`);
    const groups = (await request(b, 'GET', '/apis')).json as { groups: { name: string }[] };
    assert.ok(groups.groups.some((g) => g.name === 'ha.example.com'));
    const index = (await request(b, 'GET', '/openapi/v3')).json as { paths: Record<string, unknown> };
    assert.ok(index.paths['apis/ha.example.com/v1'], 'in server B\'s OpenAPI index');
    const made = await request(b, 'POST', WIDGETS, { body: widget('from-b', { size: 'large' }, 'ha.example.com') });
    assert.equal(made.status, 201, made.text);
    assert.equal((made.json as { spec: { replicas: number } }).spec.replicas, 1, 'server B applies the schema\'s default');
    const invalid = await request(b, 'POST', WIDGETS, { body: widget('bad', { size: 'tiny' }, 'ha.example.com') });
    assert.equal(invalid.status, 422, 'server B validates with the schema');
    const read = await request(a, 'GET', `${WIDGETS}/from-b`);
    assert.equal(read.status, 200, read.text);
  });

  it('the CRD deleted through the other server goes from both, with its objects', async () => {
    const deleted = await request(b, 'DELETE', CRD);
    assert.ok(deleted.status === 200 || deleted.status === 202, deleted.text);
    for (const server of [a, b]) {
      await eventually(async () => (await request(server, 'GET', '/apis/ha.example.com/v1')).status === 404, 'the group version gone', 15_000);
    }
    assert.equal((await request(a, 'GET', CRD)).status, 404);
    // Recreated, it starts empty: the objects went with the first.
    assert.equal((await request(a, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: widgetCrd('ha.example.com') })).status, 201);
    const list = await eventually(async () => {
      const answer = await request(b, 'GET', WIDGETS);
      return answer.status === 200 ? answer : undefined;
    }, 'served again on B', 10_000);
    assert.deepEqual((list.json as { items: unknown[] }).items, []);
  });
});
