import assert from 'node:assert/strict';
import https from 'node:https';
import { after, describe, it } from 'node:test';
import { cleanup, eventually, request, startServer, tempDir } from '../helpers/server.js';

/**
 * Crash safety: kill -9 the server while clients write; after a restart on the same data dir every
 * write a client saw acknowledged is present, and revisions keep increasing (none reused).
 */
describe('crash safety (kill -9 during writes)', () => {
  const dataDir = tempDir('crash');
  after(() => cleanup(dataDir));

  it('keeps every acknowledged write and never reuses a revision', async () => {
    const first = await startServer({ dataDir });
    const acknowledged = new Map<string, number>();
    let stop = false;
    const agent = new https.Agent({ keepAlive: true, maxSockets: 8 });
    const writer = async (id: number): Promise<void> => {
      for (let i = 0; !stop; i++) {
        const name = `w${id}-${i}`;
        try {
          const res = await request(first, 'POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', {
            agent,
            body: { metadata: { name }, spec: { holderIdentity: name } },
          });
          if (res.status === 201) {
            const rv = Number((res.json as { metadata: { resourceVersion: string } }).metadata.resourceVersion);
            acknowledged.set(name, rv);
          }
        } catch {
          return; // the server is gone; this write was never acknowledged
        }
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    await eventually(() => acknowledged.size >= 300, '300 acknowledged writes', 30_000);
    // Kill in the middle of the stream of writes.
    first.process.kill('SIGKILL');
    await first.exited;
    stop = true;
    await Promise.all(writers);
    agent.destroy();
    const maxAcknowledged = Math.max(...acknowledged.values());

    const second = await startServer({ dataDir });
    const list = await request(second, 'GET', '/apis/coordination.k8s.io/v1/namespaces/default/leases');
    assert.equal(list.status, 200);
    const body = list.json as { metadata: { resourceVersion: string }; items: { metadata: { name: string; resourceVersion: string } }[] };
    const present = new Map(body.items.map((item) => [item.metadata.name, Number(item.metadata.resourceVersion)]));
    const missing = [...acknowledged.keys()].filter((name) => !present.has(name));
    assert.deepEqual(missing, [], 'every acknowledged write survives the crash');
    for (const [name, rv] of acknowledged) assert.equal(present.get(name), rv, `${name} keeps its revision`);
    assert.ok(Number(body.metadata.resourceVersion) >= maxAcknowledged, 'the store revision did not go back');

    const next = await request(second, 'POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', {
      body: { metadata: { name: 'after-restart' }, spec: {} },
    });
    assert.equal(next.status, 201);
    const nextRv = Number((next.json as { metadata: { resourceVersion: string } }).metadata.resourceVersion);
    assert.ok(nextRv > Number(body.metadata.resourceVersion), `new revision ${nextRv} is above every earlier one`);
    assert.equal(await second.stop(), 0);
  });
});
