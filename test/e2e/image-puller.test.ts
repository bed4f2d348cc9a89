import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { ConfigObjectCache } from '../../src/agent/config-objects.js';
import { type ImageOutcome, ImagePuller, PULL_BACKOFF_INITIAL_MS } from '../../src/agent/image-pull.js';
import { EVENTS, SECRETS } from '../../src/client/types.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { loadRegistries, type RegistriesConfig } from '../../src/images/registry/registries.js';
import { ImageStore } from '../../src/images/store.js';
import { podConfigReferences } from '../../src/node-protocol/pod-references.js';
import { buildTestImage, writeOciArchive } from '../helpers/images.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { tempDir } from '../helpers/server.js';

/**
 * `ImagePuller.ensureImage`, the agent's image manager, in-process over the real pieces: the API
 * (LocalClient on SQLite, where its Events land and pull secrets are read through the agent's
 * object cache), the node's ImageStore, and test registries on 127.0.0.1. Time is fake only for
 * the back-off. Pull policies (and Kubernetes' default), kubelet's waiting reasons and events,
 * the back-off after a failed pull, and imagePullSecrets.
 */

const NS = 'default';
const image = buildTestImage({ name: 'team/app:1.0', files: { '/hello': 'hi\n' } });

describe('ensureImage', () => {
  const dir = tempDir('image-puller');
  let api: InProcessApi;
  let registry: TestRegistry;
  let secured: TestRegistry;
  let cache: ConfigObjectCache;
  let nowMs = 0;
  const pullers: ImagePuller[] = [];
  let podCount = 0;

  before(async () => {
    api = await inProcessApi();
    registry = await startRegistry();
    registry.addTestImage('team/app', '1.0', image);
    registry.addTestImage('team/app', 'latest', image);
    secured = await startRegistry({ auth: 'bearer', username: 'robot', password: 'pw' });
    secured.addTestImage('team/app', '1.0', image);
    cache = new ConfigObjectCache(api.client, () => undefined, api.logger);
  });
  after(async () => {
    for (const p of pullers) p.close();
    cache.stop();
    await Promise.all([registry.stop(), secured.stop()]);
    await api.close();
  });

  /** registries.yaml trusting each test registry's CA, read as the agent reads it. */
  const registriesFor = (...servers: TestRegistry[]): RegistriesConfig => {
    const file = path.join(dir, 'registries.yaml');
    fs.writeFileSync(file, `configs:\n${servers.map((s) => `  "${s.host}":\n    tls:\n      ca_file: ${s.caFile}\n`).join('')}`);
    return loadRegistries(file);
  };

  function newPuller(store: ImageStore): ImagePuller {
    const puller = new ImagePuller({
      store,
      registries: registriesFor(registry, secured),
      lookupSecret: (namespace, name) => cache.lookup({ kind: 'Secret', namespace, name }),
      events: new EventRecorder(api.client, 'drover-agent', 'node-1', api.logger),
      logger: api.logger,
      now: () => nowMs,
      secretWaitMs: 5000,
    });
    pullers.push(puller);
    return puller;
  }

  function pod(container: Record<string, unknown>, extra: Record<string, unknown> = {}): KubeObject {
    podCount++;
    const p: KubeObject = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `p${podCount}`, namespace: NS, uid: `uid-${podCount}` },
      spec: { containers: [{ name: 'main', ...container }], ...extra },
    };
    cache.setPodReferences(p.metadata.uid!, podConfigReferences(p));
    return p;
  }

  /** The events about `p`, as `reason: message`, once the recorder's writes are in. */
  async function eventsOf(p: KubeObject, expected: number): Promise<string[]> {
    for (let i = 0; i < 100; i++) {
      const list = await api.client.list(EVENTS, NS);
      const mine = list.items.filter((e) => (e.involvedObject as { uid?: string }).uid === p.metadata.uid).map((e) => `${String(e.reason)}: ${String(e.message)}`);
      if (mine.length >= expected) return mine;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`fewer than ${expected} events for ${p.metadata.name}`);
  }

  const waiting = (outcome: ImageOutcome): { reason: string; message: string } => {
    assert.equal(outcome.kind, 'waiting', JSON.stringify(outcome));
    return outcome as { reason: string; message: string };
  };

  it('Never: a missing image is ErrImageNeverPull, saying where it looked; nothing is asked of a registry', async () => {
    const puller = newPuller(new ImageStore(path.join(dir, 'never')));
    const p = pod({ image: `${registry.host}/team/app:1.0`, imagePullPolicy: 'Never' });
    const before = registry.requests.length;
    const out = waiting(await puller.ensureImage(p, { image: `${registry.host}/team/app:1.0`, imagePullPolicy: 'Never' }));
    assert.equal(out.reason, 'ErrImageNeverPull');
    assert.equal(out.message, `Container image "${registry.host}/team/app:1.0" is not present with pull policy of Never (looked for ${registry.host}/team/app:1.0 in this node's image store)`);
    assert.equal(registry.requests.length, before);
    assert.deepEqual(await eventsOf(p, 1), [`ErrImageNeverPull: ${out.message}`]);
  });

  it('Never and IfNotPresent with the image imported: ready with its layers unpacked, no registry asked', async () => {
    const store = new ImageStore(path.join(dir, 'present'));
    const archive = path.join(dir, 'app.tar');
    const local = buildTestImage({ name: 'local.test/app:2', files: { '/hello': 'local\n' } });
    writeOciArchive(local, archive);
    await store.importArchive(archive);
    const puller = newPuller(store);
    const before = registry.requests.length;
    for (const policy of ['Never', 'IfNotPresent']) {
      const p = pod({ image: 'local.test/app:2', imagePullPolicy: policy });
      const out = await puller.ensureImage(p, { image: 'local.test/app:2', imagePullPolicy: policy });
      assert.equal(out.kind, 'ready');
      if (out.kind !== 'ready') return;
      assert.equal(out.image.manifestDigest, local.manifestDigest);
      assert.equal(out.layerDirs.length, local.layers.length);
      assert.deepEqual(await eventsOf(p, 1), ['Pulled: Container image "local.test/app:2" already present on machine']);
    }
    assert.equal(registry.requests.length, before);
  });

  it('IfNotPresent pulls a missing image once; Always (the default for :latest) asks the registry every time', async () => {
    const puller = newPuller(new ImageStore(path.join(dir, 'pull')));
    const ref = `${registry.host}/team/app:1.0`;
    const first = pod({ image: ref, imagePullPolicy: 'IfNotPresent' });
    const out = await puller.ensureImage(first, { image: ref, imagePullPolicy: 'IfNotPresent' });
    assert.equal(out.kind, 'ready', JSON.stringify(out));
    const events = await eventsOf(first, 2);
    assert.equal(events[0], `Pulling: Pulling image "${ref}"`);
    assert.match(events[1]!, new RegExp(`^Pulled: Successfully pulled image "${ref.replace(/\./g, '\\.')}" in [\\d.]+s from ${registry.url}/v2\\. Image size: \\d+ bytes\\.$`));

    const manifestAsks = (): number => registry.contentRequests().filter((r) => r.path.includes('/manifests/')).length;
    const asked = manifestAsks();
    assert.equal((await puller.ensureImage(pod({}), { image: ref, imagePullPolicy: 'IfNotPresent' })).kind, 'ready');
    assert.equal(manifestAsks(), asked, 'IfNotPresent: present, not asked');
    // No policy and :latest: Always. The registry is asked; no blob is fetched again.
    const blobs = registry.contentRequests().filter((r) => r.path.includes('/blobs/')).length;
    const latest = `${registry.host}/team/app`;
    const again = pod({ image: latest });
    assert.equal((await puller.ensureImage(again, { image: latest })).kind, 'ready');
    assert.ok(manifestAsks() > asked, 'Always: asked');
    assert.equal(registry.contentRequests().filter((r) => r.path.includes('/blobs/')).length, blobs);
    assert.match((await eventsOf(again, 2))[1]!, /\(image already present\)/);
  });

  it('an invalid image name is InvalidImageName', async () => {
    const puller = newPuller(new ImageStore(path.join(dir, 'invalid')));
    const out = waiting(await puller.ensureImage(pod({}), { image: 'Team//App' }));
    assert.equal(out.reason, 'InvalidImageName');
    assert.match(out.message, /^Failed to apply default image tag "Team\/\/App": /);
  });

  it('a failed pull is ErrImagePull naming each endpoint; then ImagePullBackOff until the back-off passes, doubling', async () => {
    const store = new ImageStore(path.join(dir, 'backoff'));
    const puller = newPuller(store);
    const ref = `${registry.host}/team/app:1.0`;
    const p = pod({ image: ref });
    const c = { image: ref, imagePullPolicy: 'IfNotPresent' };
    registry.corruptBlobs = true;
    try {
      nowMs = 1_000_000;
      const failed = waiting(await puller.ensureImage(p, c));
      assert.equal(failed.reason, 'ErrImagePull');
      assert.match(failed.message, new RegExp(`^failed to pull image "${ref.replace(/\./g, '\\.')}": tried registry ${registry.url}/v2: blob sha256:[0-9a-f]{64} from ${registry.url}/v2/team/app/blobs/sha256:[0-9a-f]{64}: content does not match its digest`));
      const asked = registry.requests.length;
      const backingOff = waiting(await puller.ensureImage(p, c));
      assert.equal(backingOff.reason, 'ImagePullBackOff');
      assert.equal(backingOff.message, `Back-off pulling image "${ref}": ErrImagePull: ${failed.message}`);
      assert.equal(registry.requests.length, asked, 'no pull during the back-off');

      nowMs += PULL_BACKOFF_INITIAL_MS;
      assert.equal(waiting(await puller.ensureImage(p, c)).reason, 'ErrImagePull', 'tried again once 10 s passed');
      nowMs += PULL_BACKOFF_INITIAL_MS;
      assert.equal(waiting(await puller.ensureImage(p, c)).reason, 'ImagePullBackOff', 'the second back-off is 20 s');
      registry.corruptBlobs = false;
      nowMs += PULL_BACKOFF_INITIAL_MS;
      assert.equal((await puller.ensureImage(p, c)).kind, 'ready');
      const events = await eventsOf(p, 6);
      assert.ok(events.some((e) => e.startsWith(`Failed: Failed to pull image "${ref}": tried registry`)), events.join('\n'));
      assert.ok(events.includes('Failed: Error: ErrImagePull'));
      assert.ok(events.includes(`BackOff: Back-off pulling image "${ref}"`));
    } finally {
      registry.corruptBlobs = false;
    }
  });

  it('imagePullSecrets: a dockerconfigjson Secret of the pod’s namespace authenticates the pull; a missing one is said and the pull refused', async () => {
    const puller = newPuller(new ImageStore(path.join(dir, 'secrets')));
    const ref = `${secured.host}/team/app:1.0`;
    const missing = pod({ image: ref }, { imagePullSecrets: [{ name: 'absent-secret' }] });
    const refused = waiting(await puller.ensureImage(missing, { image: ref, imagePullPolicy: 'IfNotPresent' }));
    assert.equal(refused.reason, 'ErrImagePull');
    assert.match(refused.message, /401 Unauthorized, then token service .* asked anonymously: 401 \(credentials refused\)/);
    const events = await eventsOf(missing, 1);
    assert.ok(events.includes('FailedToRetrieveImagePullSecret: Unable to retrieve some image pull secrets (absent-secret); attempting to pull the image may not succeed.'), events.join('\n'));

    const config = { auths: { [secured.host]: { username: 'robot', password: 'pw' } } };
    await api.client.create(SECRETS, NS, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'pull' },
      type: 'kubernetes.io/dockerconfigjson',
      data: { '.dockerconfigjson': Buffer.from(JSON.stringify(config)).toString('base64') },
    });
    const withSecret = pod({ image: ref }, { imagePullSecrets: [{ name: 'pull' }] });
    const out = await puller.ensureImage(withSecret, { image: ref, imagePullPolicy: 'IfNotPresent' });
    assert.equal(out.kind, 'ready', JSON.stringify(out));
    assert.ok(secured.requests.some((r) => r.path === '/token' && r.authorization === `Basic ${Buffer.from('robot:pw').toString('base64')}`));
  });
});
