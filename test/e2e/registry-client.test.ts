import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TokenCache } from '../../src/images/registry/auth.js';
import { EndpointSession, RegistryError } from '../../src/images/registry/client.js';
import type { Credential } from '../../src/images/registry/credentials.js';
import { Transport, type TlsSettings } from '../../src/images/registry/http.js';
import { MEDIA_TYPES as MEDIA } from '../../src/images/oci.js';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/**
 * The registry client against a real OCI distribution server on 127.0.0.1 (test/helpers/registry.ts):
 * TLS verification with the registry's CA, client certificates, plain http, basic auth, the
 * bearer-token flow (anonymous, with a password, with an identity token), redirects to another
 * origin, manifests by tag and by digest, indexes, and blobs that do not match their digest.
 */

const REPO = 'team/app';

interface Served {
  index: string;
  manifest: string;
  config: string;
  layer: string;
  layerBytes: Buffer;
}

/** An image as a registry holds it: a config, one layer, an image manifest, and an index naming it for two platforms. */
function serveImage(registry: TestRegistry): Served {
  const layerBytes = Buffer.from('pretend this is a gzip tar layer '.repeat(100));
  const layer = registry.addBlob(layerBytes);
  const configBody = JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Cmd: ['sh'] }, rootfs: { type: 'layers', diff_ids: [layer] } });
  const config = registry.addBlob(configBody);
  const manifestBody = JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA.ociManifest,
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: config, size: Buffer.byteLength(configBody) },
    layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: layer, size: layerBytes.length }],
  });
  const manifest = registry.addManifest(REPO, undefined, MEDIA.ociManifest, manifestBody);
  const index = registry.addManifest(
    REPO,
    '1.0',
    MEDIA.ociIndex,
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociIndex,
      manifests: [
        { mediaType: MEDIA.ociManifest, digest: manifest, size: Buffer.byteLength(manifestBody), platform: { os: 'linux', architecture: 'amd64' } },
        { mediaType: MEDIA.ociManifest, digest: manifest, size: Buffer.byteLength(manifestBody), platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
      ],
    }),
  );
  registry.addManifest(REPO, 'single', MEDIA.ociManifest, manifestBody);
  return { index, manifest, config, layer, layerBytes };
}

function session(registry: TestRegistry, tls: TlsSettings | undefined, credential?: Credential): { s: EndpointSession; transport: Transport } {
  const transport = new Transport(() => tls);
  return { s: new EndpointSession(transport, new TokenCache(transport), new URL(`${registry.url}/v2`), REPO, credential, undefined), transport };
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const transports: Transport[] = [];
function open(registry: TestRegistry, tls: TlsSettings | undefined, credential?: Credential): EndpointSession {
  const { s, transport } = session(registry, tls, credential);
  transports.push(transport);
  return s;
}

describe('registry client', () => {
  const registries: TestRegistry[] = [];
  const start = async (options: Parameters<typeof startRegistry>[0] = {}): Promise<{ registry: TestRegistry; served: Served }> => {
    const registry = await startRegistry(options);
    registries.push(registry);
    return { registry, served: serveImage(registry) };
  };
  after(async () => {
    for (const t of transports) t.close();
    await Promise.all(registries.map((r) => r.stop()));
  });

  describe('over https with the registry CA', () => {
    let registry: TestRegistry;
    let served: Served;
    before(async () => ({ registry, served } = await start()));

    it('a manifest by tag (an index) and by digest (the image), each verified; a blob streamed and verified', async () => {
      const s = open(registry, { ca: registry.ca.certificatePem });
      const top = await s.manifest('1.0');
      assert.equal(top.digest, served.index);
      assert.equal(top.manifest.kind, 'index');
      const image = await s.manifest(served.manifest);
      assert.equal(image.manifest.kind === 'manifest' && image.manifest.manifest.layers[0]!.digest, served.layer);
      assert.deepEqual(await readAll(await s.blob(served.layer, served.layerBytes.length)), served.layerBytes);
      // What the client asked for: every manifest type it handles.
      const asked = registry.requests.find((r) => r.path.endsWith('/manifests/1.0'));
      assert.ok(asked);
    });

    it('a tag that is not there is 404 with the registry’s own words and the URL', async () => {
      const s = open(registry, { ca: registry.ca.certificatePem });
      await assert.rejects(s.manifest('nope'), (e: unknown) => {
        assert.ok(e instanceof RegistryError);
        assert.equal(e.status, 404);
        assert.match(e.message, new RegExp(`^${registry.url}/v2/team/app/manifests/nope: 404 Not Found \\(MANIFEST_UNKNOWN: manifest unknown`));
        return true;
      });
    });

    it('without the CA the certificate is not trusted; insecure_skip_verify skips the check', async () => {
      await assert.rejects(open(registry, undefined).manifest('1.0'), /certificate not trusted .*set configs\.<host>\.tls\.ca_file/);
      assert.equal((await open(registry, { insecureSkipVerify: true }).manifest('single')).digest, served.manifest);
    });

    it('a blob whose bytes do not match its digest is rejected at its end, naming the blob and the registry', async () => {
      registry.corruptBlobs = true;
      try {
        const stream = await open(registry, { ca: registry.ca.certificatePem }).blob(served.layer, served.layerBytes.length);
        await assert.rejects(readAll(stream), new RegExp(`blob ${served.layer} from ${registry.url}/v2/team/app/blobs/${served.layer}: content does not match its digest \\(got sha256:[0-9a-f]{64}\\); rejected`));
      } finally {
        registry.corruptBlobs = false;
      }
    });

    it('a blob longer than its descriptor says is rejected', async () => {
      const stream = await open(registry, { ca: registry.ca.certificatePem }).blob(served.layer, 10);
      await assert.rejects(readAll(stream), /more than the 10 bytes its descriptor says/);
    });
  });

  it('mutual TLS: refused without a client certificate, served with cert_file/key_file', async () => {
    const clientCa = await createCertificateAuthority('drover-test-client-ca');
    const { registry, served } = await start({ clientCa });
    const client = await issueCertificate(clientCa, { commonName: 'node', usage: 'client' });
    await assert.rejects(open(registry, { ca: registry.ca.certificatePem }).manifest('single'), /TLS|reset|EPROTO|socket|certificate/i);
    const image = await open(registry, { ca: registry.ca.certificatePem, cert: client.certificatePem, key: client.privateKeyPem }).manifest('single');
    assert.equal(image.digest, served.manifest);
  });

  it('plain http for an endpoint written http://', async () => {
    const { registry, served } = await start({ http: true });
    assert.match(registry.url, /^http:\/\//);
    assert.equal((await open(registry, undefined).manifest('single')).digest, served.manifest);
  });

  describe('basic auth', () => {
    let registry: TestRegistry;
    let served: Served;
    before(async () => ({ registry, served } = await start({ auth: 'basic', username: 'ann', password: 's3cret', cdn: true })));

    it('the right password is answered to the Basic challenge', async () => {
      const s = open(registry, { ca: registry.ca.certificatePem }, { username: 'ann', password: 's3cret', source: 'test' });
      assert.equal((await s.manifest('single')).digest, served.manifest);
    });

    it('a wrong password or none is 401, naming the URL and who asked (never the password)', async () => {
      for (const credential of [{ username: 'ann', password: 'wrong', source: 'secret default/pull' }, undefined]) {
        await assert.rejects(open(registry, { ca: registry.ca.certificatePem }, credential).manifest('single'), (e: unknown) => {
          assert.ok(e instanceof RegistryError && e.unauthorized);
          assert.match(e.message, new RegExp(`^${registry.url}/v2/team/app/manifests/single: 401 Unauthorized`));
          assert.match(e.message, credential ? /asked as "ann" \(secret default\/pull\)/ : /asked anonymously/);
          assert.ok(!e.message.includes('wrong'));
          return true;
        });
      }
    });

    it('a blob redirected to another origin is fetched there without the Authorization header', async () => {
      const s = open(registry, { ca: registry.ca.certificatePem }, { username: 'ann', password: 's3cret', source: 'test' });
      assert.deepEqual(await readAll(await s.blob(served.layer, served.layerBytes.length)), served.layerBytes);
      const atCdn = registry.requests.filter((r) => r.listener === 'cdn');
      assert.equal(atCdn.length, 1);
      assert.equal(atCdn[0]!.authorization, undefined);
      assert.ok(registry.requests.some((r) => r.listener === 'registry' && r.path.endsWith(`/blobs/${served.layer}`) && r.authorization?.startsWith('Basic ')));
    });
  });

  describe('the bearer-token flow', () => {
    it('anonymous: a 401 challenge, a token from the realm, the request again', async () => {
      const { registry, served } = await start({ auth: 'bearer' });
      const s = open(registry, { ca: registry.ca.certificatePem });
      assert.equal((await s.manifest('single')).digest, served.manifest);
      const paths = registry.requests.map((r) => `${r.path}${r.authorization ? ' (auth)' : ''}`);
      assert.deepEqual(paths, ['/v2/team/app/manifests/single', '/token', '/v2/team/app/manifests/single (auth)']);
      const tokenRequest = registry.requests[1]!;
      assert.equal(tokenRequest.query.get('scope'), 'repository:team/app:pull');
      assert.equal(tokenRequest.query.get('service'), 'drover-test-registry');
      // The token is kept for the next request of the same scope.
      await readAll(await s.blob(served.layer, served.layerBytes.length));
      assert.equal(registry.requests.filter((r) => r.path === '/token').length, 1);
    });

    it('with a username: the token service checks the password; a wrong one is refused, naming the realm', async () => {
      const { registry, served } = await start({ auth: 'bearer', username: 'ann', password: 's3cret' });
      const good = open(registry, { ca: registry.ca.certificatePem }, { username: 'ann', password: 's3cret', source: 'test' });
      assert.equal((await good.manifest('single')).digest, served.manifest);
      const bad = open(registry, { ca: registry.ca.certificatePem }, { username: 'ann', password: 'nope', source: 'registries.yaml' });
      await assert.rejects(bad.manifest('single'), (e: unknown) => {
        assert.ok(e instanceof RegistryError && e.unauthorized);
        assert.match(e.message, new RegExp(`401 Unauthorized, then token service ${registry.url}/token asked as "ann" \\(registries.yaml\\): 401 \\(credentials refused\\)`));
        return true;
      });
    });

    it('an identity token is exchanged for an access token (OAuth2 refresh_token POST)', async () => {
      const { registry, served } = await start({ auth: 'bearer', username: 'ann', password: 'x', identityToken: 'refresh-123' });
      const s = open(registry, { ca: registry.ca.certificatePem }, { identityToken: 'refresh-123', source: 'test' });
      assert.equal((await s.manifest('single')).digest, served.manifest);
      assert.ok(registry.requests.some((r) => r.path === '/token' && r.method === 'POST'));
    });
  });
});
