import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { MEDIA_TYPES } from '../../src/images/oci.js';
import { createCertificateAuthority, issueCertificate, type KeyPair } from '../../src/security/pki.js';
import type { TestImage } from './images.js';
import { tempDir } from './server.js';

/**
 * A small OCI distribution server for tests (the read side of the spec): node https on
 * 127.0.0.1 with an ephemeral port and a certificate from a CA made for it (its PEM is written
 * to `caFile`, for registries.yaml's `ca_file`), or plain http. It serves manifests by tag or
 * digest and blobs by digest, with no auth, basic auth, or the bearer-token flow (401 with a
 * `Bearer realm=…` challenge; the realm `/token` on the same server issues tokens, to the
 * configured username/password or an identity token, or anonymously when no user is set).
 * Images come from test/helpers/images.ts (`addTestImage`) or an OCI layout directory.
 * Switches: `corruptBlobs` serves every blob with one byte changed (same length); `cdn` answers
 * blob GETs with a 307 to a second listener (another origin). Every request is recorded.
 */

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  authorization: string | undefined;
  /** Which listener answered: the registry or its blob CDN. */
  listener: 'registry' | 'cdn';
}

export interface RegistryOptions {
  /** `basic`: HTTP basic auth; `bearer`: the token flow; default: none. */
  auth?: 'basic' | 'bearer';
  username?: string;
  password?: string;
  /** Bearer only: an identity (refresh) token the token service also takes, by OAuth2 POST. */
  identityToken?: string;
  /** Plain HTTP instead of HTTPS. */
  http?: boolean;
  /** Require a client certificate issued by this CA (mutual TLS). */
  clientCa?: KeyPair;
  /** Blob GETs redirect (307) to a second listener, as Docker Hub sends them to a CDN. */
  cdn?: boolean;
}

interface Manifest {
  mediaType: string;
  body: Buffer;
}

export interface TestRegistry {
  /** `https://127.0.0.1:<port>` */
  url: string;
  /** `127.0.0.1:<port>`: the registry host as image names and registries.yaml keys write it. */
  host: string;
  ca: KeyPair;
  caFile: string;
  dir: string;
  requests: RecordedRequest[];
  corruptBlobs: boolean;
  /** Stores a blob; returns its digest. */
  addBlob(content: Buffer | string): string;
  /** Stores a manifest under its digest and, when given, a tag of `repository`; returns its digest. */
  addManifest(repository: string, tag: string | undefined, mediaType: string, body: Buffer | string): string;
  /** Serves a test image (test/helpers/images.ts) as `repository:tag`: its blobs, manifest and index; returns what the tag names. */
  addTestImage(repository: string, tag: string, image: TestImage): string;
  /** Serves an OCI image layout directory (`index.json`, `blobs/sha256/…`) as `repository:tag`; returns the top digest. */
  addOciLayout(repository: string, tag: string, layoutDir: string): string;
  /** Requests for manifests and blobs (not /v2/ or /token). */
  contentRequests(): RecordedRequest[];
  stop(): Promise<void>;
}

const sha256 = (data: Buffer): string => `sha256:${createHash('sha256').update(data).digest('hex')}`;

function errorBody(code: string, message: string): string {
  return JSON.stringify({ errors: [{ code, message }] });
}

export async function startRegistry(options: RegistryOptions = {}): Promise<TestRegistry> {
  const dir = tempDir('registry');
  const ca = await createCertificateAuthority('drover-test-registry-ca');
  const serving = await issueCertificate(ca, { commonName: '127.0.0.1', subjectAltNames: ['127.0.0.1', 'localhost'], usage: 'server' });
  const caFile = path.join(dir, 'ca.crt');
  fs.writeFileSync(caFile, ca.certificatePem);

  const blobs = new Map<string, Buffer>();
  /** `repository` → reference (tag or digest) → manifest */
  const manifests = new Map<string, Map<string, Manifest>>();
  const tokens = new Map<string, string>(); // token → scope
  const requests: RecordedRequest[] = [];
  let registryUrl = '';
  let cdnUrl = '';

  const basicOk = (header: string | undefined): boolean =>
    header === `Basic ${Buffer.from(`${options.username ?? ''}:${options.password ?? ''}`).toString('base64')}`;

  const record = (req: http.IncomingMessage, listener: RecordedRequest['listener']): URL => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push({ method: req.method ?? 'GET', path: url.pathname, query: url.searchParams, authorization: req.headers.authorization, listener });
    return url;
  };

  const sendBlob = (res: http.ServerResponse, req: http.IncomingMessage, digest: string): void => {
    const blob = blobs.get(digest);
    if (!blob) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end(errorBody('BLOB_UNKNOWN', `blob unknown: ${digest}`));
      return;
    }
    let body = blob;
    if (registry.corruptBlobs && blob.length > 0) {
      body = Buffer.from(blob);
      body[body.length - 1] = body[body.length - 1]! ^ 0xff;
    }
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': body.length, 'Docker-Content-Digest': digest });
    res.end(req.method === 'HEAD' ? undefined : body);
  };

  /** Whether the request may read `repository`; answers the 401 itself when not. */
  const authorized = (req: http.IncomingMessage, res: http.ServerResponse, repository: string | undefined): boolean => {
    const header = req.headers.authorization;
    if (options.auth === 'basic') {
      if (basicOk(header)) return true;
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="drover-test-registry"', 'Content-Type': 'application/json' });
      res.end(errorBody('UNAUTHORIZED', 'authentication required'));
      return false;
    }
    if (options.auth === 'bearer') {
      const token = header?.startsWith('Bearer ') ? header.slice('Bearer '.length) : undefined;
      const scope = token ? tokens.get(token) : undefined;
      if (scope !== undefined && (repository === undefined || scope === `repository:${repository}:pull`)) return true;
      const wanted = repository ? `,scope="repository:${repository}:pull"` : '';
      res.writeHead(401, { 'WWW-Authenticate': `Bearer realm="${registryUrl}/token",service="drover-test-registry"${wanted}`, 'Content-Type': 'application/json' });
      res.end(errorBody('UNAUTHORIZED', 'authentication required'));
      return false;
    }
    return true;
  };

  const issueToken = (req: http.IncomingMessage, res: http.ServerResponse, url: URL): void => {
    const respond = (scope: string, field: 'token' | 'access_token'): void => {
      const token = randomBytes(16).toString('hex');
      tokens.set(token, scope);
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ [field]: token, expires_in: 300 }));
    };
    if (req.method === 'POST') {
      let text = '';
      req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      req.on('end', () => {
        const form = new URLSearchParams(text);
        if (options.identityToken && form.get('grant_type') === 'refresh_token' && form.get('refresh_token') === options.identityToken) {
          respond(form.get('scope') ?? '', 'access_token');
        } else {
          res.writeHead(401, { 'Content-Type': 'application/json' }).end(JSON.stringify({ details: 'bad refresh token' }));
        }
      });
      return;
    }
    const needsUser = options.username !== undefined;
    if (needsUser && !basicOk(req.headers.authorization)) {
      res.writeHead(401, { 'Content-Type': 'application/json' }).end(JSON.stringify({ details: 'incorrect username or password' }));
      return;
    }
    respond(url.searchParams.get('scope') ?? '', 'token');
  };

  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const url = record(req, 'registry');
    if (url.pathname === '/token') {
      issueToken(req, res, url);
      return;
    }
    if (url.pathname === '/v2/' || url.pathname === '/v2') {
      if (!authorized(req, res, undefined)) return;
      res.writeHead(200, { 'Docker-Distribution-API-Version': 'registry/2.0', 'Content-Type': 'application/json' }).end('{}');
      return;
    }
    const match = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(url.pathname);
    if (!match || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end(errorBody('NAME_UNKNOWN', 'no such route'));
      return;
    }
    const [, repository, kind, reference] = match as unknown as [string, string, string, string];
    if (!authorized(req, res, repository)) return;
    if (kind === 'blobs') {
      if (options.cdn && req.method === 'GET') {
        res.writeHead(307, { Location: `${cdnUrl}/blobdata/${reference}` }).end();
        return;
      }
      sendBlob(res, req, reference);
      return;
    }
    const manifest = manifests.get(repository)?.get(reference);
    if (!manifest) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end(errorBody('MANIFEST_UNKNOWN', `manifest unknown: ${repository}:${reference}`));
      return;
    }
    res.writeHead(200, { 'Content-Type': manifest.mediaType, 'Content-Length': manifest.body.length, 'Docker-Content-Digest': sha256(manifest.body) });
    res.end(req.method === 'HEAD' ? undefined : manifest.body);
  };

  const tlsOptions: https.ServerOptions = {
    cert: serving.certificatePem,
    key: serving.privateKeyPem,
    ...(options.clientCa ? { ca: options.clientCa.certificatePem, requestCert: true, rejectUnauthorized: true } : {}),
  };
  const server = options.http ? http.createServer(handler) : https.createServer(tlsOptions, handler);
  const cdn = options.cdn
    ? https.createServer({ cert: serving.certificatePem, key: serving.privateKeyPem }, (req, res) => {
        const url = record(req, 'cdn');
        const match = /^\/blobdata\/([^/]+)$/.exec(url.pathname);
        if (!match) res.writeHead(404).end();
        else sendBlob(res, req, match[1]!);
      })
    : undefined;
  const listen = (s: http.Server): Promise<number> =>
    new Promise((resolve, reject) => {
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port));
    });
  const port = await listen(server);
  registryUrl = `${options.http ? 'http' : 'https'}://127.0.0.1:${port}`;
  if (cdn) cdnUrl = `https://127.0.0.1:${await listen(cdn)}`;

  const registry: TestRegistry = {
    url: registryUrl,
    host: `127.0.0.1:${port}`,
    ca,
    caFile,
    dir,
    requests,
    corruptBlobs: false,
    addBlob(content) {
      const data = Buffer.from(content);
      const digest = sha256(data);
      blobs.set(digest, data);
      return digest;
    },
    addManifest(repository, tag, mediaType, body) {
      const data = Buffer.from(body);
      const digest = sha256(data);
      const byRef = manifests.get(repository) ?? new Map<string, Manifest>();
      manifests.set(repository, byRef);
      byRef.set(digest, { mediaType, body: data });
      if (tag !== undefined) byRef.set(tag, { mediaType, body: data });
      // A manifest is a blob too (an index's children are fetched as manifests, but some clients ask blobs/).
      blobs.set(digest, data);
      return digest;
    },
    addTestImage(repository, tag, image) {
      for (const [digest, data] of image.blobs) blobs.set(digest, data);
      const manifest = registry.addManifest(repository, image.index ? undefined : tag, MEDIA_TYPES.ociManifest, image.manifest);
      return image.index ? registry.addManifest(repository, tag, MEDIA_TYPES.ociIndex, image.index) : manifest;
    },
    addOciLayout(repository, tag, layoutDir) {
      const blobDir = path.join(layoutDir, 'blobs', 'sha256');
      for (const name of fs.readdirSync(blobDir)) blobs.set(`sha256:${name}`, fs.readFileSync(path.join(blobDir, name)));
      const index = JSON.parse(fs.readFileSync(path.join(layoutDir, 'index.json'), 'utf8')) as { manifests: { mediaType: string; digest: string }[] };
      const top = index.manifests[0];
      if (!top) throw new Error(`${layoutDir}/index.json names no manifest`);
      // Every manifest-like blob is servable by digest from /manifests/ too (an index's children).
      for (const [digest, data] of blobs) {
        try {
          const doc = JSON.parse(data.toString('utf8')) as { mediaType?: string; manifests?: unknown; layers?: unknown };
          if (doc.mediaType && (doc.manifests || doc.layers)) {
            const byRef = manifests.get(repository) ?? new Map<string, Manifest>();
            manifests.set(repository, byRef);
            byRef.set(digest, { mediaType: doc.mediaType, body: data });
          }
        } catch {
          // a layer
        }
      }
      const body = blobs.get(top.digest);
      if (!body) throw new Error(`${layoutDir}: blob ${top.digest} missing`);
      return registry.addManifest(repository, tag, top.mediaType, body);
    },
    contentRequests() {
      return requests.filter((r) => /\/(manifests|blobs|blobdata)\//.test(r.path));
    },
    async stop() {
      for (const s of [server, cdn]) {
        if (!s) continue;
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
    },
  };
  return registry;
}
