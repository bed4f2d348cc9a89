import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseDockerConfigSecret } from '../../src/images/registry/credentials.js';
import { PullError, Puller } from '../../src/images/registry/pull.js';
import { loadRegistries, type RegistriesConfig } from '../../src/images/registry/registries.js';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';
import { parseImageRef } from '../../src/images/reference.js';
import { ImageStore } from '../../src/images/store.js';
import { freePort } from '../helpers/agent.js';
import { buildTestImage, type TestImage } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { tempDir } from '../helpers/server.js';

/**
 * Pulling into a node's real image store (src/images/store.ts) from real registries on 127.0.0.1
 * (test/helpers/registry.ts) serving test images built from busybox (test/helpers/images.ts),
 * as registries.yaml directs: mirrors tried in order with rewrites and then the registry itself,
 * credentials per host (registries.yaml's, a pull secret's), TLS by the host's ca_file, blobs
 * already stored not fetched again, and a corrupt blob rejected with nothing of it kept.
 */

const dir = tempDir('registry-pull');
const image: TestImage = buildTestImage({ name: 'team/app:1.0', files: { '/etc/app.conf': 'pulled\n' } });
const multi: TestImage = buildTestImage({ name: 'team/multi:2', multiPlatform: true });

/** A registries.yaml with `text`, read as the agent reads it (TLS files included). */
function registriesYaml(text: string): RegistriesConfig {
  const file = path.join(dir, `registries-${Math.random().toString(16).slice(2)}.yaml`);
  fs.writeFileSync(file, text, { mode: 0o600 });
  return loadRegistries(file);
}

describe('pulling into the image store', () => {
  let mirror: TestRegistry;
  let open: TestRegistry;
  /** The image's registry (nothing listens there) and a dead mirror listed first. */
  let closedPort: number;
  let deadMirrorPort: number;
  const pullers: Puller[] = [];
  const storeDir = (name: string): string => path.join(dir, name);

  before(async () => {
    // The mirror wants basic auth and serves the image under a rewritten name.
    mirror = await startRegistry({ auth: 'basic', username: 'puller', password: 'pw-1' });
    mirror.addTestImage('mirrored/team/app', '1.0', image);
    mirror.addTestImage('mirrored/team/multi', '2', multi);
    open = await startRegistry();
    open.addTestImage('team/app', '1.0', image);
    closedPort = await freePort();
    deadMirrorPort = await freePort();
  });
  after(async () => {
    for (const p of pullers) p.close();
    await Promise.all([mirror.stop(), open.stop()]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const puller = (store: ImageStore, config: RegistriesConfig): Puller => {
    const p = new Puller(store, config);
    pullers.push(p);
    return p;
  };

  const mirrorConfig = (password = 'pw-1'): RegistriesConfig =>
    registriesYaml(`mirrors:
  "127.0.0.1:${closedPort}":
    endpoint:
      - "https://127.0.0.1:${deadMirrorPort}"
      - "${mirror.url}"
      - "https://127.0.0.1:${closedPort}"
    rewrite:
      "^team/(.*)": "mirrored/team/$1"
configs:
  "${mirror.host}":
    auth:
      username: puller
      password: ${password}
    tls:
      ca_file: ${mirror.caFile}
`);

  it('through a mirror with basic auth and a rewrite: stored under the original name, resolvable, unpackable', async () => {
    const store = new ImageStore(storeDir('a'));
    const name = parseImageRef(`127.0.0.1:${closedPort}/team/app:1.0`);
    const result = await puller(store, mirrorConfig()).pull({ image: name });
    assert.equal(result.name, `127.0.0.1:${closedPort}/team/app:1.0`);
    assert.equal(result.endpoint, `${mirror.url}/v2`);
    assert.equal(result.manifestDigest, image.manifestDigest);
    assert.ok(result.fetched > 0);
    const resolved = await store.resolve(name.ref);
    assert.equal(resolved.manifestDigest, image.manifestDigest);
    const dirs = await store.layerDirs(resolved);
    assert.equal(fs.readFileSync(path.join(dirs.at(-1)!, 'etc/app.conf'), 'utf8'), 'pulled\n');
    // The mirror was asked for the rewritten name, told which registry it stands for.
    const asked = mirror.contentRequests().find((r) => r.path === '/v2/mirrored/team/app/manifests/1.0' && r.authorization);
    assert.ok(asked, JSON.stringify(mirror.contentRequests().map((r) => r.path)));
    assert.equal(asked.query.get('ns'), `127.0.0.1:${closedPort}`);

    // Again: the manifest is checked, no blob is fetched twice.
    const before = mirror.contentRequests().filter((r) => r.path.includes('/blobs/')).length;
    const again = await puller(store, mirrorConfig()).pull({ image: name });
    assert.equal(again.fetched, 0);
    assert.equal(mirror.contentRequests().filter((r) => r.path.includes('/blobs/')).length, before);
  });

  it('a multi-platform image: the index is followed to this platform’s manifest, the name points at the index', async () => {
    const store = new ImageStore(storeDir('b'));
    const name = parseImageRef(`127.0.0.1:${closedPort}/team/multi:2`);
    const result = await puller(store, mirrorConfig()).pull({ image: name });
    assert.equal(result.resolvedDigest, multi.indexDigest);
    assert.equal(result.manifestDigest, multi.manifestDigest);
    const resolved = await store.resolve(name.ref);
    assert.equal(resolved.digest, multi.indexDigest);
    assert.equal(resolved.manifestDigest, multi.manifestDigest);
  });

  it('a corrupt blob is rejected: the error names each endpoint and what it answered, and nothing of it is stored', async () => {
    const store = new ImageStore(storeDir('c'));
    mirror.corruptBlobs = true;
    try {
      const name = parseImageRef(`127.0.0.1:${closedPort}/team/app:1.0`);
      await assert.rejects(puller(store, mirrorConfig()).pull({ image: name }), (e: unknown) => {
        assert.ok(e instanceof PullError);
        assert.deepEqual(
          e.attempts.map((a) => [a.endpoint, a.mirror]),
          [
            [`https://127.0.0.1:${deadMirrorPort}/v2`, true],
            [`${mirror.url}/v2`, true],
            [`https://127.0.0.1:${closedPort}/v2`, false],
          ],
        );
        assert.match(e.attempts[0]!.outcome, new RegExp(`^https://127\\.0\\.0\\.1:${deadMirrorPort}/v2/mirrored/team/app/manifests/1\\.0\\?ns=127\\.0\\.0\\.1%3A${closedPort}: connection refused$`));
        // The registry itself is asked for the original name, and last, although the file lists it.
        assert.match(e.attempts[2]!.outcome, new RegExp(`^https://127\\.0\\.0\\.1:${closedPort}/v2/team/app/manifests/1\\.0: connection refused$`));
        assert.match(e.attempts[1]!.outcome, new RegExp(`^blob sha256:[0-9a-f]{64} from ${mirror.url}/v2/mirrored/team/app/blobs/sha256:[0-9a-f]{64}: content does not match its digest \\(got sha256:[0-9a-f]{64}\\); rejected$`));
        assert.match(e.message, /^mirror https:\/\/127\.0\.0\.1:\d+\/v2: .*connection refused; mirror .*rejected; registry .*connection refused$/);
        return true;
      });
      await assert.rejects(store.resolve(`127.0.0.1:${closedPort}/team/app:1.0`), /not in this node's image store/);
      for (const layer of image.layers) assert.equal(store.hasBlob(layer.digest), false, `no ${layer.digest}`);
      assert.deepEqual(fs.readdirSync(path.join(storeDir('c'), 'tmp')).length, 0, 'no partial download left');
    } finally {
      mirror.corruptBlobs = false;
    }
  });

  it('a wrong password is 401 at the mirror, named in the attempt (never the password)', async () => {
    const store = new ImageStore(storeDir('d'));
    const config = mirrorConfig('wrong-pw');
    await assert.rejects(puller(store, config).pull({ image: parseImageRef(`127.0.0.1:${closedPort}/team/app:1.0`) }), (e: unknown) => {
      assert.ok(e instanceof PullError);
      assert.match(e.attempts[1]!.outcome, new RegExp(`^${mirror.url}/v2/mirrored/team/app/manifests/1\\.0\\?ns=127\\.0\\.0\\.1%3A${closedPort}: 401 Unauthorized \\(UNAUTHORIZED: authentication required\\) \\(asked as "puller" \\(registries\\.yaml configs for ${mirror.host.replace(/\./g, '\\.')}\\)\\)$`));
      assert.ok(!e.message.includes('wrong-pw'));
      return true;
    });
  });

  it('a pull secret for the registry host is used there; without one the registry refuses', async () => {
    const store = new ImageStore(storeDir('e'));
    const basic = await startRegistry({ auth: 'bearer', username: 'sec', password: 'ret' });
    try {
      basic.addTestImage('team/app', '1.0', image);
      const config = registriesYaml(`configs:\n  "${basic.host}":\n    tls:\n      ca_file: ${basic.caFile}\n`);
      const name = parseImageRef(`${basic.host}/team/app:1.0`);
      await assert.rejects(puller(store, config).pull({ image: name }), /credentials refused|401/);
      const secret = parseDockerConfigSecret(
        { '.dockerconfigjson': Buffer.from(JSON.stringify({ auths: { [basic.host]: { auth: Buffer.from('sec:ret').toString('base64') } } })).toString('base64') },
        'secret default/pull',
      );
      assert.equal(secret.kind, 'ok');
      const result = await puller(store, config).pull({ image: name, secrets: secret.kind === 'ok' ? secret.entries : [] });
      assert.equal(result.endpoint, `${basic.url}/v2`);
      await store.resolve(name.ref);
    } finally {
      await basic.stop();
    }
  });

  it("a pull secret for the image's registry is not offered to its mirror", async () => {
    const store = new ImageStore(storeDir('g'));
    // The mirror wants a password; registries.yaml gives none, the secret names the registry the mirror stands for.
    const config = registriesYaml(`mirrors:\n  "127.0.0.1:${closedPort}":\n    endpoint: ["${mirror.url}"]\n    rewrite: {"^team/(.*)": "mirrored/team/$1"}\nconfigs:\n  "${mirror.host}":\n    tls: {ca_file: ${mirror.caFile}}\n`);
    const secret = parseDockerConfigSecret(
      { '.dockerconfigjson': Buffer.from(JSON.stringify({ auths: { [`127.0.0.1:${closedPort}`]: { username: 'puller', password: 'pw-1' } } })).toString('base64') },
      'secret default/upstream',
    );
    assert.equal(secret.kind, 'ok');
    await assert.rejects(
      puller(store, config).pull({ image: parseImageRef(`127.0.0.1:${closedPort}/team/app:1.0`), secrets: secret.kind === 'ok' ? secret.entries : [] }),
      (e: unknown) => e instanceof PullError && /401 Unauthorized .*asked anonymously/.test(e.attempts[0]!.outcome),
    );
  });

  it('mutual TLS from registries.yaml: cert_file and key_file are read at load and presented', async () => {
    const clientCa = await createCertificateAuthority('drover-test-node-client-ca');
    const client = await issueCertificate(clientCa, { commonName: 'node-1', usage: 'client' });
    const mtls = await startRegistry({ clientCa });
    try {
      mtls.addTestImage('team/app', '1.0', image);
      fs.writeFileSync(path.join(dir, 'node.crt'), client.certificatePem);
      fs.writeFileSync(path.join(dir, 'node.key'), client.privateKeyPem, { mode: 0o600 });
      const file = path.join(dir, 'mtls.yaml');
      const yaml = (withCert: boolean): string =>
        `configs:\n  "${mtls.host}":\n    tls:\n      ca_file: ${mtls.caFile}\n${withCert ? `      cert_file: ${dir}/node.crt\n      key_file: ${dir}/node.key\n` : ''}`;
      const name = parseImageRef(`${mtls.host}/team/app:1.0`);
      fs.writeFileSync(file, yaml(false));
      await assert.rejects(puller(new ImageStore(storeDir('h1')), loadRegistries(file)).pull({ image: name }), PullError);
      fs.writeFileSync(file, yaml(true));
      const store = new ImageStore(storeDir('h2'));
      await puller(store, loadRegistries(file)).pull({ image: name });
      await store.resolve(name.ref);
    } finally {
      await mtls.stop();
    }
  });

  it('no registries.yaml: the registry itself, verified against the system roots (a test CA is not trusted)', async () => {
    const store = new ImageStore(storeDir('f'));
    await assert.rejects(puller(store, registriesYaml('')).pull({ image: parseImageRef(`${open.host}/team/app:1.0`) }), /certificate not trusted/);
  });
});
