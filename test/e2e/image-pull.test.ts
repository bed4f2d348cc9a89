import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ImageStore } from '../../src/images/store.js';
import { freePort } from '../helpers/agent.js';
import { execIn, nodeLeftovers } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Pods whose images are pulled by their node, end to end: a real server with its own agent, a
 * registries.yaml (its `private-registry`) sending images of registries that do not exist to test
 * registries on 127.0.0.1 (test/helpers/registry.ts) that serve images built from busybox. The
 * pull through a mirror with basic auth and a rewrite runs the pod under runc from the pulled
 * image; a corrupt blob, a wrong password and `Never` with a missing image leave the container
 * waiting with kubelet's reason and a message naming where the node looked; a pull secret in the
 * pod's namespace is read with the node's credentials and used.
 */

interface ContainerStatus {
  imageID?: string;
  state?: { waiting?: { reason?: string; message?: string }; running?: object };
}

interface RawPod {
  metadata: { name: string; uid: string };
  status?: { phase?: string; containerStatuses?: ContainerStatus[] };
}

interface RawEvent {
  reason: string;
  message: string;
  type: string;
  involvedObject: { name: string };
}

describe('pulling images for pods', { concurrency: false }, () => {
  const work = tempDir('image-pull');
  let server: ServerProcess;
  let mirror: TestRegistry;
  let locked: TestRegistry;
  let secured: TestRegistry;
  /** Registries that do not exist (nothing listens): every image is named after one of them. */
  let upstream: string;
  let upstreamB: string;
  const web = buildTestImage({ name: 'team/web:1', entrypoint: ['/bin/sleep'], cmd: ['1000000'], files: { '/marker.txt': 'pulled through the mirror\n' } });
  const other = buildTestImage({ name: 'team/other:1', entrypoint: ['/bin/sleep'], cmd: ['1000000'], files: { '/other.txt': 'other\n' } });

  before(async () => {
    mirror = await startRegistry({ auth: 'basic', username: 'puller', password: 'right-pw' });
    mirror.addTestImage('mirrored/web', '1', web);
    mirror.addTestImage('mirrored/other', '1', other);
    locked = await startRegistry({ auth: 'basic', username: 'puller', password: 'right-pw' });
    locked.addTestImage('team/web', '1', web);
    secured = await startRegistry({ auth: 'bearer', username: 'robot', password: 'robot-pw' });
    secured.addTestImage('team/web', '1', web);
    upstream = `127.0.0.1:${await freePort()}`;
    upstreamB = `127.0.0.1:${await freePort()}`;
    const registries = path.join(work, 'registries.yaml');
    fs.writeFileSync(
      registries,
      `mirrors:
  "${upstream}":
    endpoint: ["${mirror.url}"]
    rewrite:
      "^team/(.*)$": "mirrored/$1"
  "${upstreamB}":
    endpoint: ["${locked.url}"]
configs:
  "${mirror.host}":
    auth: {username: puller, password: right-pw}
    tls: {ca_file: ${mirror.caFile}}
  "${locked.host}":
    auth: {username: puller, password: wrong-pw}
    tls: {ca_file: ${locked.caFile}}
  "${secured.host}":
    tls: {ca_file: ${secured.caFile}}
`,
    );
    server = await startServer({ embeddedAgent: true, args: ['--private-registry', registries] });
  });

  after(async () => {
    const dataDir = server?.dataDir;
    await cleanup(work);
    await Promise.all([mirror?.stop(), locked?.stop(), secured?.stop()]);
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  async function createPod(name: string, container: Record<string, unknown>, spec: Record<string, unknown> = {}): Promise<RawPod> {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name },
        spec: { runtimeClassName: 'runc', terminationGracePeriodSeconds: 1, containers: [{ name: 'main', ...container }], ...spec },
      },
    });
    assert.equal(res.status, 201, res.text);
    return res.json as RawPod;
  }

  async function getPod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  async function eventsOf(name: string): Promise<RawEvent[]> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=${name}`);
    assert.equal(res.status, 200, res.text);
    return (res.json as { items: RawEvent[] }).items;
  }

  /** The container's waiting state once its reason is one of `reasons`. */
  function waitingFor(name: string, reasons: string[]): Promise<{ reason: string; message: string }> {
    return eventually(
      async () => {
        const waiting = (await getPod(name)).status?.containerStatuses?.[0]?.state?.waiting;
        return waiting?.reason && reasons.includes(waiting.reason) ? (waiting as { reason: string; message: string }) : undefined;
      },
      `${name} waiting with ${reasons.join(' or ')}`,
      60_000,
    );
  }

  const store = (): ImageStore => new ImageStore(path.join(server.dataDir, 'agent', 'image-store'));

  it('through a registries.yaml mirror with basic auth: the image is in the store under its own name and the pod runs it', async () => {
    const image = `${upstream}/team/web:1`;
    await createPod('pulled', { image });
    const running = await eventually(
      async () => {
        const found = await getPod('pulled');
        return found.status?.containerStatuses?.[0]?.state?.running ? found : undefined;
      },
      'pulled running',
      90_000,
    );
    const resolved = await store().resolve(image);
    assert.equal(resolved.manifestDigest, web.manifestDigest);
    assert.match(running.status!.containerStatuses![0]!.imageID ?? '', new RegExp(`@${web.manifestDigest}$`));
    // `running` is reported once runc has started the container: an exec works at once.
    const marker = await execIn(server.dataDir, running.metadata.uid, 'main', ['cat', '/marker.txt']);
    assert.equal(marker.code, 0, marker.stderr);
    assert.equal(marker.stdout, 'pulled through the mirror\n');
    // Events are written while the pod starts, not before: wait for them.
    await eventually(async () => {
      const events = await eventsOf('pulled');
      return events.some((e) => e.reason === 'Pulling' && e.message === `Pulling image "${image}"`) &&
        events.some((e) => e.reason === 'Pulled' && e.message.includes(`from ${mirror.url}/v2`));
    }, 'Pulling and Pulled events');
    // Asked with the credentials, for the rewritten name, saying which registry it stands for.
    const asked = mirror.contentRequests().find((r) => r.path === '/v2/mirrored/web/manifests/1' && r.authorization?.startsWith('Basic '));
    assert.equal(asked?.query.get('ns'), upstream);
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/pods/pulled')).status, 200);
  });

  it('a blob that does not match its digest is rejected: ErrImagePull (then back-off), an event that says so, nothing stored', async () => {
    mirror.corruptBlobs = true;
    try {
      const image = `${upstream}/team/other:1`;
      await createPod('corrupt', { image });
      const waiting = await waitingFor('corrupt', ['ErrImagePull', 'ImagePullBackOff']);
      assert.match(waiting.message, /content does not match its digest/);
      const failed = await eventually(
        async () => (await eventsOf('corrupt')).find((e) => e.reason === 'Failed' && e.message.startsWith('Failed to pull image')),
        'a Failed event',
      );
      assert.equal(failed.type, 'Warning');
      assert.match(
        failed.message,
        new RegExp(`^Failed to pull image "${image.replace(/\./g, '\\.')}": tried mirror ${mirror.url}/v2: blob sha256:[0-9a-f]{64} from ${mirror.url}/v2/mirrored/other/blobs/sha256:[0-9a-f]{64}: content does not match its digest \\(got sha256:[0-9a-f]{64}\\); rejected; registry https://${upstream}/v2: https://${upstream}/v2/team/other/manifests/1: connection refused$`),
      );
      await assert.rejects(store().resolve(image), /not in this node's image store/);
      for (const layer of other.layers.slice(-1)) assert.equal(store().hasBlob(layer.digest), false);
      await waitingFor('corrupt', ['ImagePullBackOff']);
    } finally {
      mirror.corruptBlobs = false;
    }
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/pods/corrupt')).status, 200);
  });

  it('Never with an image the node does not have: ErrImageNeverPull, saying where it looked', async () => {
    const image = `${upstream}/team/absent:1`;
    await createPod('never', { image, imagePullPolicy: 'Never' });
    const waiting = await waitingFor('never', ['ErrImageNeverPull']);
    assert.equal(waiting.message, `Container image "${image}" is not present with pull policy of Never (looked for ${image} in this node's image store)`);
    await eventually(async () => (await eventsOf('never')).some((e) => e.reason === 'ErrImageNeverPull' && e.type === 'Warning'), 'an ErrImageNeverPull event');
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/pods/never')).status, 200);
  });

  it('a wrong password: ErrImagePull naming the endpoint, its 401 and who asked (never the password)', async () => {
    const image = `${upstreamB}/team/web:1`;
    await createPod('bad-password', { image });
    const waiting = await waitingFor('bad-password', ['ErrImagePull', 'ImagePullBackOff']);
    assert.match(
      waiting.message,
      new RegExp(`tried mirror ${locked.url}/v2: ${locked.url}/v2/team/web/manifests/1\\?ns=127\\.0\\.0\\.1%3A\\d+: 401 Unauthorized \\(UNAUTHORIZED: authentication required\\) \\(asked as "puller" \\(registries\\.yaml configs for ${locked.host.replace(/\./g, '\\.')}\\)\\); registry https://${upstreamB}/v2: .*connection refused`),
    );
    assert.ok(!JSON.stringify(await getPod('bad-password')).includes('wrong-pw'));
    assert.ok(!JSON.stringify(await eventsOf('bad-password')).includes('wrong-pw'));
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/pods/bad-password')).status, 200);
  });

  it("imagePullSecrets: the node reads the pod's dockerconfigjson Secret and pulls with it", async () => {
    const config = { auths: { [secured.host]: { auth: Buffer.from('robot:robot-pw').toString('base64') } } };
    const secret = await request(server, 'POST', '/api/v1/namespaces/default/secrets', {
      body: {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'pull' },
        type: 'kubernetes.io/dockerconfigjson',
        data: { '.dockerconfigjson': Buffer.from(JSON.stringify(config)).toString('base64') },
      },
    });
    assert.equal(secret.status, 201, secret.text);
    await createPod('with-secret', { image: `${secured.host}/team/web:1` }, { imagePullSecrets: [{ name: 'pull' }] });
    await eventually(async () => ((await getPod('with-secret')).status?.containerStatuses?.[0]?.state?.running ? true : undefined), 'with-secret running', 90_000);
    assert.ok(secured.requests.some((r) => r.path === '/token' && r.authorization === `Basic ${Buffer.from('robot:robot-pw').toString('base64')}`));
    assert.equal((await request(server, 'DELETE', '/api/v1/namespaces/default/pods/with-secret')).status, 200);
  });
});
