import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, freePort, startAgent, waitForState } from '../helpers/agent.js';
import { importTestImage } from '../helpers/containers.js';
import { buildTestImage, type TestImage } from '../helpers/images.js';
import { cleanup, eventually, report, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { createObject, listPods, readyPods, waitForReadyPods } from '../helpers/workloads.js';

/**
 * Failover onto a cold node (docs/registry.md): a Deployment's pod runs on a node that holds its
 * image; that node is SIGKILLed; the replacement lands on a node that has never had the image, and
 * no upstream registry is reachable, so it runs only because the node pulls from a peer (a third,
 * cordoned node that holds the image and serves it). Reports the time from the SIGKILL to the
 * replacement Ready and where the image came from.
 */

describe('failover onto a cold node: the replacement pulls its image from a peer', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let upstream: string;
  let image: TestImage;
  const agents = new Map<string, AgentProcess>();

  before(async () => {
    work = tempDir('registry-peers-failover');
    upstream = `127.0.0.1:${await freePort()}`;
    image = buildTestImage({ name: `${upstream}/team/failover:1`, entrypoint: ['/bin/sleep'], cmd: ['1000000'] });
    const registries = path.join(work, 'registries.yaml');
    fs.writeFileSync(registries, `mirrors:\n  "${upstream}":\n`);
    server = await startServer();
    const start = async (name: string, ip: string, withImage: boolean): Promise<void> => {
      const dataDir = path.join(work, `node-${name}`);
      if (withImage) await importTestImage(dataDir, image, work);
      agents.set(name, await startAgent({ server, name, dataDir, args: ['--node-ip', ip, '--embedded-registry', '--private-registry', registries] }));
      await waitForState(server, name, 'Ready');
    };
    await start('hot', '127.0.0.72', true);
    await start('holder', '127.0.0.73', true);
    // The holder serves its copy but takes no pods: the replacement must land on the cold node.
    const cordon = await request(server, 'PATCH', '/api/v1/nodes/holder', { body: { spec: { unschedulable: true } }, headers: { 'Content-Type': 'application/merge-patch+json' } });
    assert.equal(cordon.status, 200, cordon.text);
    await createObject(server, '/apis/apps/v1/namespaces/default/deployments', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'web' } },
        template: {
          metadata: { labels: { app: 'web' } },
          spec: { runtimeClassName: 'runc', terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: image.ref }] },
        },
      },
    });
    const [pod] = await waitForReadyPods(server, 'app=web', 1, 90_000);
    assert.equal(pod!.node, 'hot');
    await start('cold', '127.0.0.74', false);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('the replacement on the cold node is Running from the holder’s copy, with no upstream registry', async (t) => {
    const known = new Set((await listPods(server, 'app=web')).map((p) => p.uid));
    const since = Date.now();
    await agents.get('hot')!.stop('SIGKILL');
    const replacement = await eventually(
      async () => (await readyPods(server, 'app=web')).find((p) => !known.has(p.uid) && p.node === 'cold'),
      'the replacement Ready on the cold node',
      120_000,
    );
    const seconds = (Date.now() - since) / 1000;
    const events = await request(server, 'GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=${replacement.name}`);
    const pulled = (events.json as { items: { reason: string; message: string }[] }).items.find((e) => e.reason === 'Pulled');
    assert.ok(pulled, events.text);
    assert.match(pulled.message, /from peer holder /);
    const pullSeconds = Number(/in ([\d.]+)s/.exec(pulled.message)?.[1]);
    // The cold node serves too: its advertisement names the image it just pulled (the store changed, so it was rewritten).
    await eventually(
      async () => {
        const res = await request(server, 'GET', '/api/v1/namespaces/kube-node-lease/configmaps/cold');
        const text = res.status === 200 ? ((res.json as { data?: { images?: string } }).data?.images ?? '') : '';
        return text.split('\n').some((line) => line.startsWith(`${image.ref} `)) ? true : undefined;
      },
      'the cold node advertising the image it pulled',
      30_000,
    );
    report(t, `replacement Ready on the cold node ${seconds.toFixed(2)} s after the SIGKILL; its pull from the peer took ${pullSeconds} s (${pulled.message})`);
  });
});
