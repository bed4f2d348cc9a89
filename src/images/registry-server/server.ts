import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from '../../logging/logger.js';
import { BlobNotFoundError, CorruptBlobError } from '../blobs.js';
import { ImageFormatError, MEDIA_TYPES, parseManifestDocument } from '../oci.js';
import type { ImageStore } from '../store.js';
import { type DistributionRequest, DistributionError, errorBody, parseDistributionRequest, storeReference } from './distribution.js';

/**
 * A node's embedded registry: its image store, read-only, over the OCI Distribution API
 * (docs/registry.md). The agent's endpoint authenticates the caller and routes `/v2/…` here only
 * when this node's own `embedded-registry` setting is on.
 *
 * Content is streamed from the store with back-pressure (1 MiB reads), and at most
 * `maxTransfers` manifests and blobs are in flight at once: one more is answered
 * 429 TOOMANYREQUESTS at once (the asking peer moves on to its next source) rather than queued,
 * so a crowd of peers never holds the agent's event loop, disk or memory away from its pods.
 * Every byte is hashed on the way out as the store reads it, and the last chunk is held back
 * until the hash matched: a blob that no longer matches its digest is removed from the store and
 * the answer is cut short of its Content-Length, which the client sees as a failed transfer,
 * never as complete content.
 */

export interface RegistryServerOptions {
  /** This node's image store; undefined until the agent has opened it. */
  store: () => ImageStore | undefined;
  logger: Logger;
  /** Transfers served at once (default 4). */
  maxTransfers?: number;
  /** What to count (the agent's metrics when supervisor-metrics is on). */
  stats?: () => RegistryServeStats | undefined;
}

export interface RegistryServeStats {
  /** A manifest or blob served whole. */
  served(kind: 'manifest' | 'blob', bytes: number): void;
  /** A copy in the store that did not match its digest, found while serving (and removed). */
  corrupt(): void;
}

/** The largest manifest or index served (the distribution project's own limit is 4 MiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
export const DEFAULT_MAX_TRANSFERS = 4;

export class RegistryServer {
  private inFlight = 0;
  private readonly maxTransfers: number;

  constructor(private readonly options: RegistryServerOptions) {
    this.maxTransfers = options.maxTransfers ?? DEFAULT_MAX_TRANSFERS;
  }

  /** Transfers in flight now. */
  get transfers(): number {
    return this.inFlight;
  }

  /** Answers one `/v2/…` request of an authenticated caller. Never throws. */
  handle(req: IncomingMessage, res: ServerResponse): void {
    void this.serve(req, res).catch((error: unknown) => {
      if (error instanceof DistributionError) return sendError(res, error);
      this.options.logger.warn({ err: error, url: req.url }, 'embedded registry: could not answer');
      if (!res.headersSent) sendError(res, new DistributionError(500, 'UNAVAILABLE', 'the embedded registry could not read this node’s image store'));
      else res.destroy();
    });
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'https://registry.invalid');
    const request = parseDistributionRequest(req.method ?? 'GET', url.pathname, url.searchParams);
    const head = req.method === 'HEAD';
    if (request.kind === 'version') {
      const body = '{}';
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': String(body.length), 'Docker-Distribution-API-Version': 'registry/2.0' });
      res.end(head ? undefined : body);
      return;
    }
    const store = this.options.store();
    if (!store) throw new DistributionError(503, 'UNAVAILABLE', 'this node’s image store is not open yet; try again shortly');
    if (request.kind === 'manifest') return this.serveManifest(store, request, res, head);
    return this.serveBlob(store, request.digest, res, head);
  }

  private async serveManifest(store: ImageStore, request: Extract<DistributionRequest, { kind: 'manifest' }>, res: ServerResponse, head: boolean): Promise<void> {
    let digest: string;
    if ('digest' in request) {
      digest = request.digest;
    } else {
      const ref = storeReference(request.name, request.tag, request.ns);
      const record = store.record(ref);
      if (!record) throw new DistributionError(404, 'MANIFEST_UNKNOWN', `${ref} is not in this node’s image store`);
      digest = record.digest;
    }
    const size = store.blobs.size(digest);
    if (size === undefined) throw new DistributionError(404, 'MANIFEST_UNKNOWN', `manifest ${digest} is not in this node’s image store`);
    if (size > MAX_MANIFEST_BYTES) throw new DistributionError(404, 'MANIFEST_UNKNOWN', `${digest} is not a manifest (${size} bytes)`);
    const bytes = await this.transfer(() => readVerified(store, digest, 'MANIFEST_UNKNOWN', this.options.stats?.()));
    let mediaType: string;
    try {
      const document = parseManifestDocument(bytes, `blob ${digest}`);
      const declared = document.kind === 'index' ? document.index.mediaType : document.manifest.mediaType;
      mediaType = declared ?? (document.kind === 'index' ? MEDIA_TYPES.ociIndex : MEDIA_TYPES.ociManifest);
    } catch (error) {
      // A layer or config asked for as a manifest: not a manifest this store has.
      if (error instanceof ImageFormatError) throw new DistributionError(404, 'MANIFEST_UNKNOWN', `${digest} is not a manifest or an index`);
      throw error;
    }
    res.writeHead(200, { 'Content-Type': mediaType, 'Content-Length': String(bytes.length), 'Docker-Content-Digest': digest });
    res.end(head ? undefined : bytes);
    if (!head) this.options.stats?.()?.served('manifest', bytes.length);
  }

  private async serveBlob(store: ImageStore, digest: string, res: ServerResponse, head: boolean): Promise<void> {
    const size = store.blobs.size(digest);
    if (size === undefined) throw new DistributionError(404, 'BLOB_UNKNOWN', `blob ${digest} is not in this node’s image store`);
    const headers = { 'Content-Type': 'application/octet-stream', 'Content-Length': String(size), 'Docker-Content-Digest': digest };
    if (head) {
      res.writeHead(200, headers);
      res.end();
      return;
    }
    await this.transfer(async () => {
      let stream;
      try {
        stream = store.blobs.open(digest);
      } catch (error) {
        if (error instanceof BlobNotFoundError) throw new DistributionError(404, 'BLOB_UNKNOWN', `blob ${digest} is not in this node’s image store`);
        throw error;
      }
      res.writeHead(200, headers);
      try {
        await pipeline(stream, new HoldLastChunk(), res);
        this.options.stats?.()?.served('blob', size);
      } catch (error) {
        // Headers are gone: cutting the connection is the only way to say the bytes are void.
        res.destroy();
        if (error instanceof CorruptBlobError) {
          this.options.stats?.()?.corrupt();
          this.options.logger.warn({ digest, reason: error.message }, 'embedded registry: a blob did not match its digest while it was served; removed, transfer cut');
        } else if ((error as NodeJS.ErrnoException).code !== 'ERR_STREAM_PREMATURE_CLOSE') {
          this.options.logger.debug({ err: error, digest }, 'embedded registry: transfer ended early');
        }
      }
    });
  }

  /** Runs one transfer within the bound, or refuses it with 429 when the bound is reached. */
  private async transfer<T>(work: () => Promise<T>): Promise<T> {
    if (this.inFlight >= this.maxTransfers) {
      throw new DistributionError(429, 'TOOMANYREQUESTS', `this node is serving ${this.inFlight} transfers already (at most ${this.maxTransfers}); try another source`);
    }
    this.inFlight++;
    try {
      return await work();
    } finally {
      this.inFlight--;
    }
  }
}

/**
 * Passes chunks on one behind: the last one goes only when the source ended cleanly, i.e. after
 * the store's hash of the whole blob matched (its stream errors at its end otherwise).
 */
class HoldLastChunk extends Transform {
  private held: Buffer | undefined;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const previous = this.held;
    this.held = chunk;
    callback(null, previous);
  }

  override _flush(callback: TransformCallback): void {
    callback(null, this.held);
  }
}

async function readVerified(store: ImageStore, digest: string, unknown: 'MANIFEST_UNKNOWN' | 'BLOB_UNKNOWN', stats?: RegistryServeStats): Promise<Buffer> {
  try {
    return await store.readBlob(digest);
  } catch (error) {
    if (error instanceof CorruptBlobError) stats?.corrupt();
    // A corrupt blob is removed by the store: from now on it is simply not here.
    if (error instanceof BlobNotFoundError || error instanceof CorruptBlobError) {
      throw new DistributionError(404, unknown, `${digest} is not in this node’s image store${error instanceof CorruptBlobError ? ' (its copy did not match its digest and was removed)' : ''}`);
    }
    throw error;
  }
}

/** An error answer in the Distribution format; a 429 says when to come back. */
export function sendError(res: ServerResponse, error: DistributionError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(error.code, error.message);
  res.writeHead(error.status, {
    'Content-Type': 'application/json',
    'Content-Length': String(Buffer.byteLength(body)),
    ...(error.status === 405 ? { Allow: 'GET, HEAD' } : {}),
    ...(error.status === 429 ? { 'Retry-After': '1' } : {}),
  });
  res.end(body);
}
