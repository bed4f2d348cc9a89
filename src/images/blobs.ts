import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable, Transform, type TransformCallback, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { isSha256Digest } from './reference.js';

/**
 * Content-addressed blobs: `blobs/sha256/<hex>`, each file's name the sha256 of its bytes.
 * Nothing is trusted on its name: a blob is hashed while it is written (and only renamed into
 * place when the hash matches what the caller expected), and again whenever it is read, so a
 * disk that flipped a bit or a hand that edited a file is caught at the next use, not run.
 */

export class DigestMismatchError extends Error {
  override name = 'DigestMismatchError';
  constructor(
    readonly expected: string,
    readonly actual: string,
    where: string,
  ) {
    super(`${where}: content has digest ${actual}, expected ${expected}`);
  }
}

/** A blob on disk whose bytes no longer hash to its name. It has been removed so a new import or pull can replace it. */
export class CorruptBlobError extends Error {
  override name = 'CorruptBlobError';
  constructor(
    readonly digest: string,
    readonly file: string,
    readonly actual: string,
  ) {
    super(`blob ${digest} at ${file} is corrupt (its content hashes to ${actual}); it was removed: import or pull the image again`);
  }
}

export class BlobNotFoundError extends Error {
  override name = 'BlobNotFoundError';
  constructor(readonly digest: string) {
    super(`blob ${digest} is not in the image store`);
  }
}

export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

export function sha256Digest(data: Buffer | string): string {
  return `sha256:${sha256Hex(data)}`;
}

export function checkDigest(digest: string): string {
  if (!isSha256Digest(digest)) throw new TypeError(`${JSON.stringify(digest)} is not a sha256 digest (sha256:<64 hex>)`);
  return digest;
}

/** A pass-through stream that hashes what flows through it. */
export class HashingStream extends Transform {
  private readonly hash = createHash('sha256');
  bytes = 0;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    callback(null, chunk);
  }

  /** `sha256:<hex>` of everything that passed; call once, after the end. */
  digest(): string {
    return `sha256:${this.hash.digest('hex')}`;
  }
}

/**
 * A pass-through that hashes and, at the end, fails the stream when the hash is not `expected`:
 * a reader of a corrupt blob gets an error instead of a clean end.
 */
class VerifyingStream extends Transform {
  private readonly hash = createHash('sha256');

  constructor(
    private readonly expected: string,
    private readonly onMismatch: (actual: string) => Error,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.hash.update(chunk);
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    const actual = `sha256:${this.hash.digest('hex')}`;
    callback(actual === this.expected ? null : this.onMismatch(actual));
  }
}

/** A blob written and verified but not yet synced or named (BlobStore.stage). */
export interface StagedBlob {
  digest: string;
  size: number;
  /** Its temporary file under tmp/. */
  temp: string;
  /** Its fsync, started once it was written and verified (commit waits for it). */
  synced?: Promise<void>;
}

async function syncFile(file: string): Promise<void> {
  const handle = await fs.promises.open(file, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export class BlobStore {
  readonly dir: string;
  private readonly tmpDir: string;

  constructor(root: string) {
    this.dir = path.join(root, 'blobs', 'sha256');
    this.tmpDir = path.join(root, 'tmp');
  }

  file(digest: string): string {
    return path.join(this.dir, checkDigest(digest).slice('sha256:'.length));
  }

  has(digest: string): boolean {
    return fs.existsSync(this.file(digest));
  }

  size(digest: string): number | undefined {
    try {
      return fs.statSync(this.file(digest)).size;
    } catch {
      return undefined;
    }
  }

  /** Every blob's digest (names that are not a sha256 hex are not blobs and are ignored). */
  list(): string[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      return [];
    }
    return names.filter((n) => /^[a-f0-9]{64}$/.test(n)).map((n) => `sha256:${n}`);
  }

  private tempFile(): string {
    fs.mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
    return path.join(this.tmpDir, `blob-${process.pid}-${randomBytes(6).toString('hex')}`);
  }

  /**
   * Writes a stream as a blob and returns its digest and size. With `expected`, a stream that
   * hashes to anything else is refused (DigestMismatchError) and leaves nothing behind; the blob
   * appears under its name only complete (written to a temporary file, synced, renamed).
   */
  async ingest(source: NodeJS.ReadableStream | Readable, expected?: string, what = 'blob'): Promise<{ digest: string; size: number }> {
    const staged = await this.stage(source, expected, what);
    await this.commit([staged]);
    return { digest: staged.digest, size: staged.size };
  }

  /**
   * The first half of `ingest`: the stream written to a temporary file under tmp/ and hashed
   * (refused, and nothing kept, when it is not `expected`), but not synced and not named yet.
   * `through` are streams the bytes pass on their way to the file (an import's unpack tee).
   * Call `commit` (or `discard`) with it; until then nothing is visible under its digest.
   */
  async stage(source: NodeJS.ReadableStream | Readable, expected?: string, what = 'blob', through: Transform[] = []): Promise<StagedBlob> {
    if (expected !== undefined) checkDigest(expected);
    const temp = this.tempFile();
    const hashing = new HashingStream();
    try {
      const out = fs.createWriteStream(temp, { mode: 0o444, flags: 'wx' });
      await pipeline([source, hashing, ...through, out]);
      const digest = hashing.digest();
      if (expected !== undefined && digest !== expected) throw new DigestMismatchError(expected, digest, what);
      // Its writeback starts now, while an import goes on with the next blobs and layers, rather
      // than all at the end: the disk works while the CPU does. Nothing is named before commit.
      const synced = syncFile(temp);
      synced.catch(() => undefined); // commit reports a failure; a discarded blob's does not matter
      return { digest, size: hashing.bytes, temp, synced };
    } catch (error) {
      fs.rmSync(temp, { force: true });
      throw error;
    }
  }

  /**
   * Names staged blobs: every one synced to disk first (each fsync started when it was staged,
   * in the thread pool, so the disk writes one while the import reads and unpacks the next),
   * then each renamed into place. A blob is never visible under its digest before its bytes are
   * on disk. On failure every staged file is removed and nothing of the batch that was not
   * renamed yet appears.
   */
  async commit(staged: readonly StagedBlob[]): Promise<void> {
    try {
      await Promise.all(staged.map((blob) => blob.synced ?? syncFile(blob.temp)));
      fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      for (const blob of staged) {
        const target = this.file(blob.digest);
        if (fs.existsSync(target)) {
          // Already there: keep the one we have, and mark it fresh so a sweep running now keeps it.
          const now = new Date();
          fs.utimesSync(target, now, now);
          fs.rmSync(blob.temp, { force: true });
        } else {
          fs.renameSync(blob.temp, target);
        }
      }
    } catch (error) {
      this.discard(staged);
      throw error;
    }
  }

  /** Removes staged blobs that will not be committed (those already renamed are gone from tmp/). */
  discard(staged: readonly StagedBlob[]): void {
    for (const blob of staged) fs.rmSync(blob.temp, { force: true });
  }

  /** Writes bytes as a blob (verified against `expected` when given). */
  async put(data: Buffer, expected?: string): Promise<string> {
    return (await this.ingest(Readable.from([data]), expected)).digest;
  }

  /** The whole blob, hashed before it is returned. A blob that does not match its name is removed. */
  async read(digest: string): Promise<Buffer> {
    const file = this.file(digest);
    let data: Buffer;
    try {
      data = await fs.promises.readFile(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobNotFoundError(digest);
      throw error;
    }
    const actual = sha256Digest(data);
    if (actual !== digest) throw this.corrupt(digest, actual);
    return data;
  }

  /**
   * A stream of the blob that errors at its end when the bytes do not hash to the digest: the
   * consumer must treat what it made of the bytes as void until the stream ended cleanly.
   */
  open(digest: string): Readable {
    const file = this.file(digest);
    if (!fs.existsSync(file)) throw new BlobNotFoundError(digest);
    const verifying = new VerifyingStream(digest, (actual) => this.corrupt(digest, actual));
    const input = fs.createReadStream(file, { highWaterMark: 1024 * 1024 });
    input.on('error', (error) => verifying.destroy(error));
    return input.pipe(verifying);
  }

  /** Hashes a blob on disk (streaming); a corrupt one is removed and reported. */
  async verify(digest: string): Promise<void> {
    const hashing = new HashingStream();
    try {
      await pipeline(fs.createReadStream(this.file(digest), { highWaterMark: 1024 * 1024 }), hashing, new Writable({ write: (_c, _e, cb) => cb() }));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobNotFoundError(digest);
      throw error;
    }
    const actual = hashing.digest();
    if (actual !== digest) throw this.corrupt(digest, actual);
  }

  remove(digest: string): void {
    fs.rmSync(this.file(digest), { force: true });
  }

  private corrupt(digest: string, actual: string): CorruptBlobError {
    const file = this.file(digest);
    // A corrupt blob must not look present: remove it so hasBlob is false and a pull replaces it.
    fs.rmSync(file, { force: true });
    return new CorruptBlobError(digest, file, actual);
  }
}
