import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Transport } from '../../src/images/registry/http.js';
import type { PeerEndpoint, PeerPullStats, PeerSource } from '../../src/images/registry/peers.js';
import { PullError, Puller } from '../../src/images/registry/pull.js';
import { loadRegistries, type RegistriesConfig } from '../../src/images/registry/registries.js';
import { parseImageRef } from '../../src/images/reference.js';
import { ImageStore } from '../../src/images/store.js';
import { decodeAdvertisement } from '../../src/node-protocol/registry-peers.js';
import { agentClientCertificate, type AgentProcess, cleanupAgents, freePort, killRunningDrover, nodeCaPem, registerNode, startAgent } from '../helpers/agent.js';
import { isolateFromDroverEnv } from '../helpers/config-env.js';
import { importTestImage } from '../helpers/containers.js';
import { buildTestImage, type TestImage } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Pulls through embedded-registry peers (docs/registry.md). First the puller alone, over real
 * registries on 127.0.0.1 standing in for peers: the order it is given, the next peer after one
 * that sends content not matching its digest (counted), no credentials sent to peers, `:latest`
 * not resolved through peers. Then real agents: each node with `embedded-registry` advertises its
 * images in one ConfigMap of its own (node restriction: it writes only its own, reads all); a pod
 * pinned to a node without the image starts from a peer's copy, with no upstream registry
 * reachable; a peer whose copy was tampered on disk is passed over for the next source and the
 * metrics count it; no peer having the image fails with ErrImagePull naming where it looked; with
 * the first holder SIGKILLed, another holder serves.
 */

const { suiteDir } = isolateFromDroverEnv('registry-peers-suite');

after(async () => {
  killRunningDrover();
  await cleanupAgents();
  await cleanup(suiteDir);
});

function registriesYaml(text: string): RegistriesConfig {
  const file = path.join(suiteDir, `registries-${Math.random().toString(16).slice(2)}.yaml`);
  fs.writeFileSync(file, text, { mode: 0o600 });
  return loadRegistries(file);
}

class CountingStats implements PeerPullStats {
  hits = 0;
  misses = 0;
  fallbacks = 0;
  corrupts = 0;
  hit(): void {
    this.hits++;
  }
  miss(): void {
    this.misses++;
  }
  fallback(): void {
    this.fallbacks++;
  }
  corrupt(): void {
    this.corrupts++;
  }
}

describe('the puller through peers (real registries standing in for peers)', () => {
  const image = buildTestImage({ name: 'team/peer:1', files: { '/etc/peer.conf': 'from a peer\n' } });
  let liar: TestRegistry;
  let good: TestRegistry;
  let upstream: string;
  const pullers: Puller[] = [];
  const transports: Transport[] = [];

  before(async () => {
    liar = await startRegistry();
    liar.corruptBlobs = true;
    liar.addTestImage('team/peer', '1', image);
    liar.addTestImage('team/peer', 'latest', image);
    good = await startRegistry();
    good.addTestImage('team/peer', '1', image);
    good.addTestImage('team/peer', 'latest', image);
    upstream = `127.0.0.1:${await freePort()}`;
  });
  after(async () => {
    for (const p of pullers) p.close();
    for (const t of transports) t.close();
    await Promise.all([liar.stop(), good.stop()]);
  });

  /** A peer source listing `peers` in that order, with the registries' CAs trusted. */
  function source(peers: { node: string; registry: TestRegistry }[], log: string[]): PeerSource {
    const cas = new Map(peers.map((p) => [p.registry.host, p.registry.ca.certificatePem]));
    const transport = new Transport((host) => ({ ca: cas.get(host), onlyCa: true }));
    transports.push(transport);
    return {
      peersFor: (): PeerEndpoint[] => peers.map((p) => ({ node: p.node, url: new URL(`${p.registry.url}/v2`) })),
      advertisers: () => peers.length,
      transport: () => transport,
      started: (node) => log.push(`start ${node}`),
      finished: (node, ok) => log.push(`end ${node} ${ok ? 'ok' : 'failed'}`),
    };
  }

  it('a peer sending content that does not match its digest is skipped and counted; the next peer serves; no credential goes to a peer', async () => {
    const store = new ImageStore(path.join(tempDir('peer-pull'), 'store'));
    const stats = new CountingStats();
    const log: string[] = [];
    const config = registriesYaml(`mirrors:\n  "${upstream}":\n`);
    const puller = new Puller(store, config, { source: source([{ node: 'liar', registry: liar }, { node: 'good', registry: good }], log), stats });
    pullers.push(puller);
    const secrets = [{ key: upstream, source: 'secret default/pull', username: 'u', password: 'secret-pw' }];
    const result = await puller.pull({ image: parseImageRef(`${upstream}/team/peer:1`), secrets });
    assert.equal(result.peer, 'good');
    assert.equal(result.manifestDigest, image.manifestDigest);
    assert.deepEqual(log, ['start liar', 'end liar failed', 'start good', 'end good ok']);
    assert.deepEqual([stats.hits, stats.misses, stats.fallbacks, stats.corrupts], [1, 0, 0, 1]);
    const resolved = await store.resolve(`${upstream}/team/peer:1`);
    assert.equal(resolved.manifestDigest, image.manifestDigest);
    // Peers are asked with the original registry in ns, and never with the pod's credentials.
    const asked = good.contentRequests().find((r) => r.path === '/v2/team/peer/manifests/1');
    assert.ok(asked, JSON.stringify(good.contentRequests().map((r) => r.path)));
    assert.equal(asked.query.get('ns'), upstream);
    for (const r of [...liar.requests, ...good.requests]) assert.equal(r.authorization, undefined, `${r.path} carried credentials to a peer`);
  });

  it('every peer failing, then the registry unreachable: PullError names each peer and the registry; a fallback is counted', async () => {
    const store = new ImageStore(path.join(tempDir('peer-pull'), 'store'));
    const stats = new CountingStats();
    const puller = new Puller(store, registriesYaml(`mirrors:\n  "*":\n`), { source: source([{ node: 'liar', registry: liar }], []), stats });
    pullers.push(puller);
    const error = await puller.pull({ image: parseImageRef(`${upstream}/team/peer:1`) }).then(
      () => assert.fail('pulled from a corrupt peer'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof PullError, String(error));
    assert.match(error.message, new RegExp(`^peer liar ${liar.url}/v2: .*does not match its digest.*; registry https://${upstream}/v2: .*connection refused`));
    assert.deepEqual([stats.hits, stats.misses, stats.fallbacks, stats.corrupts], [0, 0, 1, 1]);
  });

  it('a registry not listed under mirrors, and a :latest tag, are not resolved through peers', async () => {
    const log: string[] = [];
    const stats = new CountingStats();
    const other = `127.0.0.1:${await freePort()}`;
    const puller = new Puller(new ImageStore(path.join(tempDir('peer-pull'), 'store')), registriesYaml(`mirrors:\n  "${upstream}":\n`), {
      source: source([{ node: 'good', registry: good }], log),
      stats,
    });
    pullers.push(puller);
    for (const name of [`${other}/team/peer:1`, `${upstream}/team/peer:latest`, `${upstream}/team/peer`]) {
      const error = await puller.pull({ image: parseImageRef(name) }).then(
        () => assert.fail(`${name} was pulled`),
        (e: unknown) => e,
      );
      assert.ok(error instanceof PullError);
      assert.match(error.message, /^registry https:/, `${name}: only the registry was asked`);
    }
    assert.deepEqual(log, [], 'no peer was asked');
    // Pinned by digest, latest or not, the content is the content: peers may serve it.
    const pinned = await puller.pull({ image: parseImageRef(`${upstream}/team/peer:latest@${image.digest}`) });
    assert.equal(pinned.peer, 'good');
  });
});

interface Answer {
  status: number;
  body: string;
}

function agentGet(server: ServerProcess, port: number, urlPath: string, credential: { cert: string; key: string }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path: urlPath, ca: nodeCaPem(server), agent: false, ...credential }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

function agentPortOf(agent: AgentProcess): number {
  const line = agent.output().split('\n').find((l) => l.includes('agent is running'));
  assert.ok(line, agent.output());
  return (JSON.parse(line) as { agentPort: number }).agentPort;
}

/** A counter's value in a Prometheus text exposition (0 when absent). */
function metric(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

interface RawPod {
  status?: { containerStatuses?: { state?: { waiting?: { reason?: string; message?: string }; running?: object } }[] };
}

describe('pulls from peers between real agents, no upstream registry reachable', { concurrency: false }, () => {
  const sleeper = (tag: string, marker: string): TestImage =>
    buildTestImage({ name: `${upstream}/team/shared:${tag}`, entrypoint: ['/bin/sleep'], cmd: ['1000000'], files: { '/marker.txt': `${marker}\n` } });
  let onA: TestImage;
  let onAC: TestImage;
  let tampered: TestImage;
  let server: ServerProcess;
  let a: AgentProcess;
  let b: AgentProcess;
  let c: AgentProcess;
  let aDir: string;
  let mirror: TestRegistry;
  let upstream: string;
  let admin: { cert: string; key: string };

  before(async () => {
    upstream = `127.0.0.1:${await freePort()}`;
    onA = sleeper('a', 'only on A');
    onAC = sleeper('ac', 'on A and C');
    tampered = sleeper('tampered', 'tampered on A, also at the mirror');
    mirror = await startRegistry();
    mirror.addTestImage('team/shared', 'tampered', tampered);
    server = await startServer({});
    admin = await agentClientCertificate(server, 'admin');
    const work = tempDir('registry-peers');
    aDir = tempDir('registry-peer-a');
    const cDir = tempDir('registry-peer-c');
    for (const image of [onA, onAC, tampered]) await importTestImage(aDir, image, work);
    await importTestImage(cDir, onAC, work);
    const registries = path.join(work, 'registries.yaml');
    // B pulls images of the (unreachable) upstream through peers, then the mirror; it does not serve.
    fs.writeFileSync(registries, `mirrors:\n  "${upstream}":\n    endpoint: ["${mirror.url}"]\nconfigs:\n  "${mirror.host}":\n    tls: {ca_file: ${mirror.caFile}}\n`);
    const serving = ['--embedded-registry', '--supervisor-metrics'];
    [a, c] = await Promise.all([
      startAgent({ server, name: 'peer-a', dataDir: aDir, args: serving }),
      startAgent({ server, name: 'peer-c', dataDir: cDir, args: serving }),
    ]);
    b = await startAgent({ server, name: 'peer-b', args: ['--supervisor-metrics', '--private-registry', registries] });
  });
  after(async () => {
    await mirror?.stop();
  });

  const advertisement = async (node: string): Promise<string[] | undefined> => {
    const res = await request(server, 'GET', `/api/v1/namespaces/kube-node-lease/configmaps/${node}`);
    if (res.status !== 200) return undefined;
    return decodeAdvertisement((res.json as { data?: Record<string, string> }).data?.images).map((i) => i.ref);
  };

  it('each serving node advertises its complete images in one ConfigMap of its own; a node that does not serve advertises nothing', async () => {
    const want = (image: TestImage): string => image.ref;
    await eventually(async () => ((await advertisement('peer-a'))?.length === 3 ? true : undefined), 'peer-a’s advertisement of its three images', 60_000);
    assert.deepEqual(await advertisement('peer-a'), [want(onA), want(onAC), want(tampered)].sort());
    await eventually(async () => ((await advertisement('peer-c'))?.length === 1 ? true : undefined), 'peer-c’s advertisement', 60_000);
    assert.deepEqual(await advertisement('peer-c'), [want(onAC)]);
    const res = await request(server, 'GET', '/api/v1/namespaces/kube-node-lease/configmaps/peer-a');
    const object = res.json as { metadata: { labels: Record<string, string>; annotations: Record<string, string> } };
    assert.equal(object.metadata.labels['drover.io/registry-peer'], 'true');
    const node = await request(server, 'GET', '/api/v1/nodes/peer-a');
    assert.equal(object.metadata.annotations['drover.io/node-uid'], (node.json as { metadata: { uid: string } }).metadata.uid);
    assert.equal(await advertisement('peer-b'), undefined, 'peer-b has embedded-registry off');
  });

  it('node restriction: a node reads every advertisement and may create, update or delete only its own', async () => {
    const token = await registerNode(server, 'peer-x', 'peer-x-password-0123456789abcdef');
    const as = { token };
    const list = await request(server, 'GET', '/api/v1/namespaces/kube-node-lease/configmaps?labelSelector=drover.io/registry-peer%3Dtrue', as);
    assert.equal(list.status, 200, list.text);
    const body = (name: string) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, labels: { 'drover.io/registry-peer': 'true' } }, data: { images: '' } });
    const own = await request(server, 'POST', '/api/v1/namespaces/kube-node-lease/configmaps', { ...as, body: body('peer-x') });
    assert.equal(own.status, 201, own.text);
    const forged = await request(server, 'POST', '/api/v1/namespaces/kube-node-lease/configmaps', { ...as, body: body('peer-y') });
    assert.equal(forged.status, 403, forged.text);
    assert.match((forged.json as { message: string }).message, /may only create or modify its own registry advertisement "peer-x"/);
    const current = await request(server, 'GET', '/api/v1/namespaces/kube-node-lease/configmaps/peer-a', as);
    assert.equal(current.status, 200);
    const overwrite = await request(server, 'PUT', '/api/v1/namespaces/kube-node-lease/configmaps/peer-a', { ...as, body: current.json });
    assert.equal(overwrite.status, 403, overwrite.text);
    const patch = await request(server, 'PATCH', '/api/v1/namespaces/kube-node-lease/configmaps/peer-a', {
      ...as,
      body: { data: { images: 'evil' } },
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(patch.status, 403, patch.text);
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/kube-node-lease/configmaps/peer-a', as)).status, 403);
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/kube-node-lease/configmaps/peer-x', as)).status, 200);
    // Elsewhere ConfigMaps stay as they were: only those a pod bound to the node uses.
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/kube-system/configmaps', as)).status, 403);
  });

  async function createPod(name: string, image: TestImage): Promise<void> {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name },
        spec: { nodeName: 'peer-b', runtimeClassName: 'runc', terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: image.ref }] },
      },
    });
    assert.equal(res.status, 201, res.text);
  }

  const running = (name: string): Promise<true> =>
    eventually(
      async () => {
        const pod = (await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`)).json as RawPod;
        return pod.status?.containerStatuses?.[0]?.state?.running ? true : undefined;
      },
      `${name} running`,
      120_000,
    );

  const pulledEvent = async (name: string): Promise<string> => {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=${name}`);
    const events = (res.json as { items: { reason: string; message: string }[] }).items;
    const pulled = events.find((e) => e.reason === 'Pulled');
    assert.ok(pulled, JSON.stringify(events));
    return pulled.message;
  };

  const metricsOf = async (agent: AgentProcess): Promise<string> => {
    const res = await agentGet(server, agentPortOf(agent), '/metrics', admin);
    assert.equal(res.status, 200, res.body);
    return res.body;
  };

  it('a pod pinned to a node without the image starts from the one peer holding it; both nodes’ metrics count it', async () => {
    await createPod('from-a', onA);
    await running('from-a');
    assert.match(await pulledEvent('from-a'), /from peer peer-a \(https:\/\/127\.0\.0\.1:\d+\/v2\)/);
    const served = await metricsOf(a);
    assert.ok(metric(served, 'drover_embedded_registry_served_total{kind="blob"}') >= 2, served);
    assert.ok(metric(served, 'drover_embedded_registry_served_bytes_total') > 0);
    const pulled = await metricsOf(b);
    assert.equal(metric(pulled, 'drover_embedded_registry_peer_hits_total'), 1);
    assert.equal(mirror.contentRequests().length, 0, 'the mirror was not asked');
  });

  it('a blob tampered on disk at the only peer: its transfer is cut, the next source (the mirror) serves, and the peer counts the corrupt blob', async () => {
    const store = new ImageStore(path.join(aDir, 'agent', 'image-store'));
    const file = store.blobFile(tampered.configDigest);
    const bytes = fs.readFileSync(file);
    bytes[0] = bytes[0]! ^ 0xff;
    fs.writeFileSync(file, bytes);
    await createPod('tampered', tampered);
    await running('tampered');
    assert.match(await pulledEvent('tampered'), new RegExp(`from ${mirror.url.replace(/[.]/g, '\\.')}/v2`));
    assert.equal(metric(await metricsOf(a), 'drover_embedded_registry_corrupt_blobs_total{detected_by="server"}'), 1);
    assert.equal(metric(await metricsOf(b), 'drover_embedded_registry_peer_fallbacks_total'), 1);
    assert.equal(fs.existsSync(file), false, 'the corrupt copy was removed from the peer’s store');
  });

  it('no peer holding the image: ErrImagePull names the peers’ answer, the mirror and the registry tried', async () => {
    const missing = sleeper('missing', 'nowhere');
    await createPod('nowhere', missing);
    const waiting = await eventually(
      async () => {
        const pod = (await request(server, 'GET', '/api/v1/namespaces/default/pods/nowhere')).json as RawPod;
        const state = pod.status?.containerStatuses?.[0]?.state?.waiting;
        return state?.reason === 'ErrImagePull' || state?.reason === 'ImagePullBackOff' ? state : undefined;
      },
      'nowhere waiting with ErrImagePull',
      60_000,
    );
    assert.match(waiting.message ?? '', new RegExp(`peers: no node advertises ${upstream}/team/shared:missing`));
    assert.match(waiting.message ?? '', new RegExp(`mirror ${mirror.url}/v2: .*404`));
    assert.match(waiting.message ?? '', new RegExp(`registry https://${upstream}/v2: .*connection refused`));
    assert.ok(metric(await metricsOf(b), 'drover_embedded_registry_peer_misses_total') >= 1);
  });

  it('with the first holder SIGKILLed, another holder of the image serves it', async () => {
    await a.stop('SIGKILL');
    await createPod('from-c', onAC);
    await running('from-c');
    assert.match(await pulledEvent('from-c'), /from peer peer-c /);
    assert.ok(metric(await metricsOf(c), 'drover_embedded_registry_served_total{kind="blob"}') >= 2);
  });
});
