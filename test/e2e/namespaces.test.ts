import assert from 'node:assert/strict';
import https from 'node:https';
import { after, describe, it } from 'node:test';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Namespace deletion through a real server: the answer of a DELETE, namespaces/finalize and the
 * status rules over HTTP; and a delete cut short by kill -9 of the server, which the namespace
 * finisher completes after the restart on the same SQLite file.
 */

interface Namespace {
  metadata: { name: string; deletionTimestamp?: string; resourceVersion: string; finalizers?: string[] };
  spec?: { finalizers?: string[] };
  status?: { phase?: string };
}

async function createNamespace(server: ServerProcess, name: string): Promise<Namespace> {
  const res = await request(server, 'POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name } } });
  assert.equal(res.status, 201, res.text);
  return res.json as Namespace;
}

/** `count` ConfigMaps in `namespace`, `writers` at a time over keep-alive connections. */
async function fillNamespace(server: ServerProcess, namespace: string, count: number, writers = 8): Promise<void> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: writers });
  let next = 0;
  const writer = async (): Promise<void> => {
    for (let i = next++; i < count; i = next++) {
      const res = await request(server, 'POST', `/api/v1/namespaces/${namespace}/configmaps`, {
        agent,
        body: { metadata: { name: `cm-${i}` }, data: { index: String(i) } },
      });
      assert.equal(res.status, 201, res.text);
    }
  };
  await Promise.all(Array.from({ length: writers }, writer));
  agent.destroy();
}

async function configMapCount(server: ServerProcess, namespace: string): Promise<number> {
  const res = await request(server, 'GET', `/api/v1/namespaces/${namespace}/configmaps`);
  assert.equal(res.status, 200, res.text);
  return (res.json as { items: unknown[] }).items.length;
}

describe('namespace deletion through the API', () => {
  const dataDir = tempDir('namespaces');
  let server: ServerProcess | undefined;
  after(async () => {
    await server?.stop();
    await cleanup(dataDir);
  });

  it('a DELETE answers the namespace as removed: marked deleted, Terminating, its contents finalizer taken off', async () => {
    server = await startServer({ dataDir });
    const created = await createNamespace(server, 'answer');
    assert.deepEqual(created.spec?.finalizers, ['kubernetes']);
    await fillNamespace(server, 'answer', 3);
    const res = await request(server, 'DELETE', '/api/v1/namespaces/answer');
    assert.equal(res.status, 200, res.text);
    const answered = res.json as Namespace;
    assert.ok(answered.metadata.deletionTimestamp, 'marked deleted');
    assert.equal(answered.status?.phase, 'Terminating');
    assert.deepEqual(answered.spec?.finalizers, []);
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/answer')).status, 404);
    assert.equal(await configMapCount(server, 'answer'), 0);
  });

  it('namespaces/finalize takes a PUT of spec.finalizers only; a plain update keeps them; Terminating needs a delete', async () => {
    server ??= await startServer({ dataDir });
    const created = await createNamespace(server, 'rules');
    const plain = await request(server, 'PUT', '/api/v1/namespaces/rules', { body: { ...created, spec: { finalizers: [] }, metadata: { ...created.metadata, labels: { a: 'b' } } } });
    assert.equal(plain.status, 200, plain.text);
    assert.deepEqual((plain.json as Namespace).spec?.finalizers, ['kubernetes'], 'a plain update does not change spec.finalizers');
    const finalized = await request(server, 'PUT', '/api/v1/namespaces/rules/finalize', { body: { ...(plain.json as Namespace), spec: { finalizers: ['example.com/other'] } } });
    assert.equal(finalized.status, 200, finalized.text);
    assert.deepEqual((finalized.json as Namespace).spec?.finalizers, ['example.com/other']);
    assert.deepEqual((finalized.json as Namespace & { metadata: { labels?: unknown } }).metadata.labels, { a: 'b' }, 'nothing else changed');
    assert.equal((await request(server, 'PATCH', '/api/v1/namespaces/rules/finalize', { body: {}, headers: { 'content-type': 'application/merge-patch+json' } })).status, 405);
    const status = await request(server, 'PUT', '/api/v1/namespaces/rules/status', { body: { ...(finalized.json as Namespace), status: { phase: 'Terminating' } } });
    assert.equal(status.status, 422, status.text);
    assert.match(status.text, /may only be 'Active' if `deletionTimestamp` is empty/);
    // Its contents go with a delete all the same; the other finalizer then holds it, Terminating,
    // until its owner takes it off through namespaces/finalize.
    await fillNamespace(server, 'rules', 2);
    const deleted = await request(server, 'DELETE', '/api/v1/namespaces/rules');
    assert.equal(deleted.status, 200, deleted.text);
    assert.equal(await configMapCount(server, 'rules'), 0);
    const held = await request(server, 'GET', '/api/v1/namespaces/rules');
    assert.equal(held.status, 200, 'held by example.com/other');
    assert.equal((held.json as Namespace).status?.phase, 'Terminating');
    assert.deepEqual((held.json as Namespace).spec?.finalizers, ['example.com/other']);
    const released = await request(server, 'PUT', '/api/v1/namespaces/rules/finalize', { body: { ...(held.json as Namespace), spec: { finalizers: [] } } });
    assert.equal(released.status, 200, released.text);
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/rules')).status, 404, 'gone with the last finalizer');
  });

  it('a namespace delete cut short by kill -9 is finished by the controller leader after the restart', async (t) => {
    server ??= await startServer({ dataDir });
    // Large enough that the delete is still deleting when the kill lands; made larger if it was not.
    for (let attempt = 0, size = 3000; ; attempt++, size *= 2) {
      const name = `cut-${attempt}`;
      await createNamespace(server, name);
      await fillNamespace(server, name, size);
      const deleting = request(server, 'DELETE', `/api/v1/namespaces/${name}`, { agent: false }).catch(() => undefined);
      await eventually(
        async () => Boolean(((await request(server!, 'GET', `/api/v1/namespaces/${name}`, { agent: false })).json as Namespace).metadata?.deletionTimestamp),
        'the delete marked the namespace',
        30_000,
        5,
      );
      // Contents go in key order: cm-0 first. Kill once the delete is among them.
      await eventually(async () => (await request(server!, 'GET', `/api/v1/namespaces/${name}/configmaps/cm-0`, { agent: false })).status === 404, 'the delete reached the contents', 30_000, 5);
      server.process.kill('SIGKILL');
      await server.exited;
      await deleting;
      server = await startServer({ dataDir });
      const after = await request(server, 'GET', `/api/v1/namespaces/${name}`);
      const left = after.status === 200 ? await configMapCount(server, name) : 0;
      if (after.status !== 200 || left === 0) {
        assert.ok(attempt < 2, `the delete of ${size} ConfigMaps finished before kill -9 landed, three times`);
        t.diagnostic(`attempt ${attempt}: the delete finished before the kill; again with ${size * 2} ConfigMaps`);
        continue;
      }
      const marked = after.json as Namespace;
      assert.ok(marked.metadata.deletionTimestamp);
      assert.equal(marked.status?.phase, 'Terminating');
      assert.deepEqual(marked.spec?.finalizers, ['kubernetes'], 'still held for its contents');
      assert.ok(left < size, 'part of the contents went before the kill');
      t.diagnostic(`cut short with ${left} of ${size} ConfigMaps left`);
      const refused = await request(server, 'POST', `/api/v1/namespaces/${name}/configmaps`, { body: { metadata: { name: 'late' } } });
      assert.equal(refused.status, 403, refused.text);

      const started = Date.now();
      await eventually(async () => (await request(server!, 'GET', `/api/v1/namespaces/${name}`)).status === 404, 'the namespace finished', 60_000, 100);
      t.diagnostic(`finished ${((Date.now() - started) / 1000).toFixed(1)} s after the restart answered`);
      assert.equal(await configMapCount(server, name), 0, 'with every object in it');
      assert.match(server.output(), /finishing a namespace delete that its request did not complete/);
      return;
    }
  });
});
