import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { DistributionError, parseDistributionRequest, storeReference } from '../../src/images/registry-server/distribution.js';
import { RegistryServer } from '../../src/images/registry-server/server.js';
import { ImageStore } from '../../src/images/store.js';
import { createLogger } from '../../src/logging/logger.js';
import { buildTestImage, sha256, type TestImage } from '../helpers/images.js';
import os from 'node:os';
import { eventually } from '../helpers/server.js';

/**
 * The embedded registry's read side (src/images/registry-server/), in process: which request a
 * `/v2/…` path is and which store record a tag names (pure), then a RegistryServer over a real
 * image store behind a plain HTTP server: headers, error bodies, re-verification of a blob
 * corrupted on disk, and the bound on transfers in flight. Authentication and the setting are the
 * agent's (test/e2e/embedded-registry.test.ts).
 */

const HEX = 'a'.repeat(64);
const DIGEST = `sha256:${HEX}`;

function parse(method: string, url: string) {
  const u = new URL(url, 'https://x.invalid');
  return parseDistributionRequest(method, u.pathname, u.searchParams);
}

function refused(fn: () => unknown, status: number, code: string, message?: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof DistributionError, String(error));
    assert.equal(error.status, status, error.message);
    assert.equal(error.code, code, error.message);
    if (message) assert.match(error.message, message);
    return true;
  });
}

describe('embedded registry: paths and references (pure)', () => {
  it('reads the version check, manifests by tag and digest, blobs by digest', () => {
    assert.deepEqual(parse('GET', '/v2/'), { kind: 'version' });
    assert.deepEqual(parse('HEAD', '/v2'), { kind: 'version' });
    assert.deepEqual(parse('GET', '/v2/library/busybox/manifests/1.36?ns=docker.io'), { kind: 'manifest', name: 'library/busybox', tag: '1.36', ns: 'docker.io' });
    assert.deepEqual(parse('GET', '/v2/a/b/c/manifests/v1'), { kind: 'manifest', name: 'a/b/c', tag: 'v1', ns: undefined });
    assert.deepEqual(parse('HEAD', `/v2/team/app/manifests/${DIGEST}`), { kind: 'manifest', name: 'team/app', digest: DIGEST });
    assert.deepEqual(parse('GET', `/v2/team/app/blobs/${DIGEST}?ns=registry.example:5000`), { kind: 'blob', name: 'team/app', digest: DIGEST });
    // A repository may itself be called "manifests" or "blobs": the last two segments decide.
    assert.deepEqual(parse('GET', `/v2/x/blobs/blobs/${DIGEST}`), { kind: 'blob', name: 'x/blobs', digest: DIGEST });
  });

  it('refuses writes with 405, unserved parts of the API with 404, malformed input with 400', () => {
    for (const method of ['PUT', 'POST', 'PATCH', 'DELETE']) refused(() => parse(method, `/v2/a/manifests/v1`), 405, 'UNSUPPORTED', /read-only/);
    refused(() => parse('POST', '/v2/a/blobs/uploads/'), 405, 'UNSUPPORTED');
    refused(() => parse('GET', '/v2/a/tags/list'), 404, 'UNSUPPORTED');
    refused(() => parse('GET', '/v2/_catalog'), 404, 'UNSUPPORTED');
    refused(() => parse('GET', '/v2/a/blobs/uploads/123'), 404, 'UNSUPPORTED');
    refused(() => parse('GET', '/v2/Upper/manifests/v1'), 400, 'NAME_INVALID', /repository name "Upper"/);
    refused(() => parse('GET', '/v2/a//b/manifests/v1'), 400, 'NAME_INVALID');
    refused(() => parse('GET', `/v2/${'a'.repeat(256)}/manifests/v1`), 400, 'NAME_INVALID');
    refused(() => parse('GET', '/v2/a/manifests/.hidden'), 400, 'NAME_INVALID', /tag ".hidden"/);
    refused(() => parse('GET', '/v2/a/blobs/v1'), 400, 'DIGEST_INVALID');
    refused(() => parse('GET', '/v2/a/blobs/sha256:XYZ!'), 400, 'DIGEST_INVALID');
    refused(() => parse('GET', '/v2/a/manifests/%ZZ'), 400, 'NAME_INVALID', /percent-encoding/);
    // Well formed but not sha256: a miss (the client moves on), not a client error.
    refused(() => parse('GET', `/v2/a/blobs/sha512:${'b'.repeat(128)}`), 404, 'BLOB_UNKNOWN', /only sha256/);
    refused(() => parse('GET', `/v2/a/manifests/sha256:${'A'.repeat(64)}`), 404, 'MANIFEST_UNKNOWN');
  });

  it('maps a tag to the store’s reference: ns is the registry host, the path its repository', () => {
    assert.equal(storeReference('library/busybox', '1.36', 'docker.io'), 'docker.io/library/busybox:1.36');
    assert.equal(storeReference('busybox', 'latest', 'docker.io'), 'docker.io/library/busybox:latest');
    assert.equal(storeReference('busybox', 'latest', 'index.docker.io'), 'docker.io/library/busybox:latest');
    assert.equal(storeReference('team/app', 'v2', 'registry.example:5000'), 'registry.example:5000/team/app:v2');
    assert.equal(storeReference('app', 'v2', 'localhost:5000'), 'localhost:5000/app:v2');
    // Without ns the name is an image reference's name.
    assert.equal(storeReference('library/busybox', '1', undefined), 'docker.io/library/busybox:1');
    assert.equal(storeReference('drover.test/app', '1', undefined), 'drover.test/app:1');
    refused(() => storeReference('app', 'v1', 'myregistry'), 400, 'NAME_INVALID', /not a registry host/);
    refused(() => storeReference('app', 'v1', 'bad host'), 400, 'NAME_INVALID');
  });
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

describe('embedded registry: serving a real image store', () => {
  let store: ImageStore;
  let registry: RegistryServer;
  let server: http.Server;
  let port: number;
  let image: TestImage;
  const big = Buffer.alloc(48 * 1024 * 1024, 7);
  const bigDigest = sha256(big);

  const get = (urlPath: string, method = 'GET'): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, path: urlPath, method, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end();
    });

  const errorCode = (answer: Answer): string => {
    assert.equal(answer.headers['content-type'], 'application/json');
    const parsed = JSON.parse(answer.body.toString()) as { errors: { code: string; message: string }[] };
    assert.equal(parsed.errors.length, 1);
    assert.ok(parsed.errors[0]!.message.length > 0);
    return parsed.errors[0]!.code;
  };

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-registry-server-'));
  before(async () => {
    store = new ImageStore(path.join(dir, 'image-store'), { overlayMarks: false });
    image = buildTestImage({ name: 'registry.example:5000/team/app:v1', base: 'empty', files: { 'etc/hello': 'hello from a peer\n' }, cmd: ['/bin/hello'] });
    for (const [digest, blob] of image.blobs) await store.putBlob(digest, Readable.from([blob]));
    await store.addImage(image.ref, image.digest);
    await store.putBlob(bigDigest, Readable.from([big]));
    registry = new RegistryServer({ store: () => store, logger: createLogger('silent'), maxTransfers: 1 });
    server = http.createServer((req, res) => registry.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('GET /v2/ answers 200 with the API version header', async () => {
    const answer = await get('/v2/');
    assert.equal(answer.status, 200);
    assert.equal(answer.headers['docker-distribution-api-version'], 'registry/2.0');
  });

  it('a manifest by tag (ns) and by digest: its bytes, media type, length and digest; HEAD the same headers', async () => {
    for (const urlPath of ['/v2/team/app/manifests/v1?ns=registry.example:5000', `/v2/team/app/manifests/${image.digest}`, `/v2/other/name/manifests/${image.digest}`]) {
      const answer = await get(urlPath);
      assert.equal(answer.status, 200, `${urlPath}: ${answer.body.toString()}`);
      assert.deepEqual(answer.body, image.manifest);
      assert.equal(answer.headers['content-type'], 'application/vnd.oci.image.manifest.v1+json');
      assert.equal(answer.headers['content-length'], String(image.manifest.length));
      assert.equal(answer.headers['docker-content-digest'], image.digest);
      const head = await get(urlPath, 'HEAD');
      assert.equal(head.status, 200);
      assert.equal(head.body.length, 0);
      assert.equal(head.headers['content-length'], String(image.manifest.length));
      assert.equal(head.headers['docker-content-digest'], image.digest);
      assert.equal(head.headers['content-type'], 'application/vnd.oci.image.manifest.v1+json');
    }
  });

  it('blobs by digest: the bytes hash to the digest; HEAD gives the size', async () => {
    for (const digest of [image.configDigest, image.layers[0]!.digest]) {
      const answer = await get(`/v2/team/app/blobs/${digest}`);
      assert.equal(answer.status, 200);
      assert.equal(sha256(answer.body), digest);
      assert.equal(answer.headers['docker-content-digest'], digest);
      assert.equal(answer.headers['content-type'], 'application/octet-stream');
      assert.equal(answer.headers['content-length'], String(answer.body.length));
      const head = await get(`/v2/team/app/blobs/${digest}`, 'HEAD');
      assert.equal(head.headers['content-length'], String(answer.body.length));
    }
  });

  it('misses are 404 in the Distribution error format: unknown tag, digest, blob; a layer asked for as a manifest', async () => {
    const unknownTag = await get('/v2/team/app/manifests/v2?ns=registry.example:5000');
    assert.equal(unknownTag.status, 404);
    assert.equal(errorCode(unknownTag), 'MANIFEST_UNKNOWN');
    assert.match(unknownTag.body.toString(), /registry\.example:5000\/team\/app:v2 is not in this node/);
    assert.equal(errorCode(await get('/v2/team/app/manifests/v1?ns=docker.io')), 'MANIFEST_UNKNOWN', 'the same repository under another registry is another image');
    assert.equal(errorCode(await get(`/v2/team/app/manifests/${DIGEST}`)), 'MANIFEST_UNKNOWN');
    assert.equal(errorCode(await get(`/v2/team/app/blobs/${DIGEST}`)), 'BLOB_UNKNOWN');
    assert.equal((await get(`/v2/team/app/blobs/${DIGEST}`, 'HEAD')).status, 404);
    const layerAsManifest = await get(`/v2/team/app/manifests/${image.layers[0]!.digest}`);
    assert.equal(layerAsManifest.status, 404);
    assert.equal(errorCode(layerAsManifest), 'MANIFEST_UNKNOWN');
    const put = await get('/v2/team/app/manifests/v1', 'PUT');
    assert.equal(put.status, 405);
    assert.equal(put.headers.allow, 'GET, HEAD');
    assert.equal(errorCode(put), 'UNSUPPORTED');
  });

  it('at most maxTransfers in flight: one more is 429 TOOMANYREQUESTS at once; the first completes intact', async () => {
    // A client that does not read holds its transfer open (back-pressure), as a slow peer would.
    let held: http.IncomingMessage | undefined;
    const first = new Promise<Buffer>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, path: `/v2/x/blobs/${bigDigest}`, agent: false }, (res) => {
        held = res;
        res.pause();
      });
      req.on('error', reject);
      req.end();
      void eventually(async () => held, 'the first transfer’s headers').then((res) => {
        const hash = createHash('sha256');
        let length = 0;
        res.on('data', (c: Buffer) => {
          hash.update(c);
          length += c.length;
        });
        res.on('end', () => resolve(Buffer.from(`sha256:${hash.digest('hex')} ${length}`)));
        res.on('error', reject);
      });
    });
    await eventually(async () => registry.transfers === 1 && held !== undefined, 'one transfer in flight');
    const second = await get(`/v2/x/blobs/${image.configDigest}`);
    assert.equal(second.status, 429);
    assert.equal(second.headers['retry-after'], '1');
    assert.equal(errorCode(second), 'TOOMANYREQUESTS');
    held!.resume();
    assert.equal((await first).toString(), `${bigDigest} ${big.length}`);
    await eventually(async () => registry.transfers === 0, 'the transfer finished');
    assert.equal((await get(`/v2/x/blobs/${image.configDigest}`)).status, 200);
  });

  it('a blob corrupted on disk is caught while it is served: the transfer is cut, the blob removed, then 404', async () => {
    const digest = image.layers[0]!.digest;
    const file = store.blobFile(digest);
    const bytes = fs.readFileSync(file);
    bytes[bytes.length >> 1]! ^= 0xff;
    fs.chmodSync(file, 0o644);
    fs.writeFileSync(file, bytes);
    const outcome = await get(`/v2/team/app/blobs/${digest}`).then(
      (answer) => `complete ${answer.status} ${sha256(answer.body)}`,
      (error: unknown) => `cut: ${(error as Error).message}`,
    );
    assert.match(outcome, /^cut: /, `a corrupt blob must not arrive as a complete answer: ${outcome}`);
    assert.equal(store.hasBlob(digest), false, 'the corrupt copy is removed');
    assert.equal((await get(`/v2/team/app/blobs/${digest}`)).status, 404);
  });

  it('before the node’s store is open: 503 UNAVAILABLE, the version check still answers', async () => {
    const closed = new RegistryServer({ store: () => undefined, logger: createLogger('silent') });
    const s = http.createServer((req, res) => closed.handle(req, res));
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
    const saved = port;
    port = (s.address() as AddressInfo).port;
    try {
      assert.equal((await get('/v2/')).status, 200);
      const answer = await get(`/v2/x/blobs/${DIGEST}`);
      assert.equal(answer.status, 503);
      assert.equal(errorCode(answer), 'UNAVAILABLE');
    } finally {
      port = saved;
      s.closeAllConnections();
      await new Promise((resolve) => s.close(resolve));
    }
  });
});
