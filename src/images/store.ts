import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { type ArchiveImport, type ArchiveTarget, importArchive, type ImportOptions } from './archive.js';
import { BlobNotFoundError, BlobStore, CorruptBlobError, checkDigest, type StagedBlob, sha256Hex } from './blobs.js';
import { type EarlyLayer, EarlyUnpacks } from './early-unpack.js';
import { compressionOf, type LayerInfo, LayerError, type UnpackedLayer, unpackLayer } from './layers.js';
import { type Descriptor, type ImageConfig, ImageFormatError, hostPlatform, parseImageConfig, parseManifestDocument, platformManifests } from './oci.js';
import { isSha256Digest, parseImageRef } from './reference.js';

/**
 * A node's image store, `<data-dir>/agent/image-store/`:
 *
 *   blobs/sha256/<hex>     manifests, indexes, configs and layer blobs, named by their sha256
 *   refs/<sha256(ref)>.json  one file per name: {ref, digest, ...} (one file each, so two
 *                          writers never lose each other's names)
 *   layers/<hex>/fs        a layer unpacked, keyed by its diff id; layers/<hex>/layer.json says
 *                          what it deletes from the layers below and whether overlayfs can use it
 *   tmp/                   downloads and unpacks in progress (renamed into place when complete)
 *   leases/                what imports and pulls in progress wrote but have not named yet
 *
 * Blobs are checked on write and on read (blobs.ts). A name points at a manifest or an index; an
 * index is resolved to this platform's manifest. Layers are shared by every image that has them.
 * `drover image import` (another process) and the agent may use one store at once: every write is
 * a rename of a complete file or directory, and a sweep spares content younger than its grace.
 */

export class ImageNotFoundError extends Error {
  override name = 'ImageNotFoundError';
  constructor(
    readonly ref: string,
    root: string,
  ) {
    super(`image ${ref} is not in this node's image store (${root})`);
  }
}

/** A name or digest whose content is not all in the store (a pull or import that did not finish). */
export class IncompleteImageError extends Error {
  override name = 'IncompleteImageError';
}

export interface ImageRecord {
  /** The normalized reference, or the digest itself for an image imported without a name. */
  ref: string;
  /** What the name points at: a manifest, or an index (then the image is its manifest for this platform). */
  digest: string;
  created: string;
  /** When a pod on this node last used it (set by image garbage collection). */
  lastUsed?: string;
  /** `import <file>` or `pull <registry>`: where it came from. */
  source?: string;
}

export interface LayerDescriptor extends Descriptor {
  diffId: string;
}

/** An image as this node runs it. */
export interface Image {
  /** The reference it was resolved from (normalized). */
  ref: string;
  /** The digest its name points at (the repo digest; an index for multi-platform images). */
  digest: string;
  /** This platform's manifest. */
  manifestDigest: string;
  /** The config's digest: the image id. */
  id: string;
  config: ImageConfig;
  /** Lowest first. */
  layers: LayerDescriptor[];
  /** Bytes of its config and layer blobs. */
  size: number;
}

export interface SweepResult {
  blobs: number;
  layers: number;
  bytes: number;
}

export interface ImageStoreOptions {
  logger?: Logger | undefined;
  /** Make overlayfs whiteout markers in unpacked layers (default: when running as root). */
  overlayMarks?: boolean;
}

/** Untagged images are kept under their digest; everything else under its normalized reference. */
function recordKey(ref: string | undefined, digest: string): string {
  return ref === undefined ? digest : parseImageRef(ref).ref;
}

export class ImageStore {
  readonly root: string;
  readonly blobs: BlobStore;
  private readonly refsDir: string;
  private readonly layersDir: string;
  private readonly tmpDir: string;
  private readonly leasesDir: string;
  /** The lease files of this object's imports and pulls in progress. */
  private readonly leases = new Set<string>();
  private readonly logger: Logger | undefined;
  private readonly overlayMarks: boolean;
  /** Unpacks in progress in this process, so concurrent callers share one. */
  private readonly unpacking = new Map<string, Promise<UnpackedLayer>>();

  constructor(root: string, options: ImageStoreOptions = {}) {
    this.root = root;
    this.blobs = new BlobStore(root);
    this.refsDir = path.join(root, 'refs');
    this.layersDir = path.join(root, 'layers');
    this.tmpDir = path.join(root, 'tmp');
    this.leasesDir = path.join(root, 'leases');
    this.logger = options.logger;
    this.overlayMarks = options.overlayMarks ?? process.getuid?.() === 0;
  }

  /** The store of a node's data dir: `<data-dir>/agent/image-store`. */
  static forDataDir(dataDir: string, options: ImageStoreOptions = {}): ImageStore {
    return new ImageStore(path.join(dataDir, 'agent', 'image-store'), options);
  }

  // --- blobs ------------------------------------------------------------------------------------

  hasBlob(digest: string): boolean {
    return this.blobs.has(digest);
  }

  /** Writes a blob whose digest is known; refused (and nothing kept) when the content does not match. */
  async putBlob(digest: string, content: Readable | NodeJS.ReadableStream, what?: string): Promise<void> {
    await this.blobs.ingest(content, digest, what ?? `blob ${digest}`);
    this.leased(digest);
  }

  /**
   * Writes a blob (digest `expected`, or learned from its content) without syncing or naming it:
   * an import stages all its blobs, then commits them together (commitBlobs). With `early`, a
   * blob that looks like a layer is unpacked as it streams (early-unpack.ts).
   */
  async stageBlob(expected: string | undefined, content: Readable | NodeJS.ReadableStream, what: string, early?: EarlyUnpacks): Promise<StagedBlob> {
    // A blob the store has already had its layer unpacked, or will when it is used: no tee.
    const tee = early && !(expected !== undefined && this.blobs.has(expected)) ? early.tee() : undefined;
    try {
      const staged = await this.blobs.stage(content, expected, what, tee ? [tee.stream] : []);
      tee?.done(staged.digest);
      return staged;
    } catch (error) {
      tee?.stream.destroy();
      throw error;
    }
  }

  /** Syncs staged blobs together and names them (listed in this object's leases first). */
  async commitBlobs(staged: readonly StagedBlob[]): Promise<void> {
    for (const blob of staged) this.leased(blob.digest);
    await this.blobs.commit(staged);
  }

  /** Writes a blob whose digest is learned from its content. */
  async ingestBlob(content: Readable | NodeJS.ReadableStream): Promise<{ digest: string; size: number }> {
    const written = await this.blobs.ingest(content);
    this.leased(written.digest);
    return written;
  }

  /**
   * Runs `work` (an import, a pull) under a lease: every blob this store object writes meanwhile
   * is listed in a file under `leases/`, and a sweep in any process keeps what a live process's
   * lease lists, so content is safe between being written and being named.
   */
  async withLease<T>(work: () => Promise<T>): Promise<T> {
    fs.mkdirSync(this.leasesDir, { recursive: true, mode: 0o700 });
    const file = path.join(this.leasesDir, `lease-${process.pid}-${randomBytes(6).toString('hex')}`);
    fs.writeFileSync(file, '', { mode: 0o600 });
    this.leases.add(file);
    try {
      return await work();
    } finally {
      this.leases.delete(file);
      fs.rmSync(file, { force: true });
    }
  }

  private leased(digest: string): void {
    for (const file of this.leases) fs.appendFileSync(file, `${digest}\n`);
  }

  /** Digests held by the leases of live processes; the leases of dead ones are removed. */
  private leasedDigests(): string[] {
    const digests: string[] = [];
    for (const name of readdirOrEmpty(this.leasesDir)) {
      const file = path.join(this.leasesDir, name);
      const pid = Number(/^lease-(\d+)-/.exec(name)?.[1]);
      if (!Number.isInteger(pid)) continue;
      if (pid !== process.pid && !processAlive(pid)) {
        fs.rmSync(file, { force: true });
        continue;
      }
      try {
        digests.push(...fs.readFileSync(file, 'utf8').split('\n').filter(isSha256Digest));
      } catch {
        // released just now
      }
    }
    return digests;
  }

  /** Where a blob lives (read it through readBlob or layers, which verify it). */
  blobFile(digest: string): string {
    return this.blobs.file(digest);
  }

  /** A blob's bytes, verified. */
  readBlob(digest: string): Promise<Buffer> {
    return this.blobs.read(digest);
  }

  // --- names ------------------------------------------------------------------------------------

  private refFile(key: string): string {
    return path.join(this.refsDir, `${sha256Hex(key)}.json`);
  }

  /**
   * Names `digest` (a manifest or an index already in the store, with everything this platform
   * needs) as `ref`; `ref` undefined keeps an unnamed image under its digest. Naming an image
   * drops its unnamed record.
   */
  async addImage(ref: string | undefined, digest: string, source?: string): Promise<ImageRecord> {
    checkDigest(digest);
    const key = recordKey(ref, digest);
    await this.imageAt(digest, key); // complete and well-formed, or an error saying what is missing
    const previous = this.record(key);
    const record: ImageRecord = {
      ref: key,
      digest,
      created: previous?.digest === digest ? previous.created : new Date().toISOString(),
      ...(previous?.digest === digest && previous.lastUsed ? { lastUsed: previous.lastUsed } : {}),
      ...(source ? { source } : {}),
    };
    writeFileAtomic(this.refFile(key), `${JSON.stringify(record, null, 2)}\n`, 0o600);
    if (key !== digest) fs.rmSync(this.refFile(digest), { force: true });
    return record;
  }

  /** The record of a name (normalized here), or undefined. */
  record(ref: string): ImageRecord | undefined {
    const key = isSha256Digest(ref) ? ref : parseImageRef(ref).ref;
    try {
      const record = JSON.parse(fs.readFileSync(this.refFile(key), 'utf8')) as ImageRecord;
      return record.ref === key ? record : undefined;
    } catch {
      return undefined;
    }
  }

  /** Every named (and unnamed) image, by name. */
  records(): ImageRecord[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.refsDir);
    } catch {
      return [];
    }
    const records: ImageRecord[] = [];
    for (const name of names.filter((n) => n.endsWith('.json'))) {
      try {
        const record = JSON.parse(fs.readFileSync(path.join(this.refsDir, name), 'utf8')) as ImageRecord;
        if (typeof record.ref === 'string' && isSha256Digest(record.digest)) records.push(record);
      } catch {
        // a record being replaced right now, or not ours
      }
    }
    return records.sort((a, b) => a.ref.localeCompare(b.ref));
  }

  /** Notes that pods use an image (image GC frees the least recently used first). */
  touch(ref: string, when = new Date()): void {
    const record = this.record(ref);
    if (!record) return;
    writeFileAtomic(this.refFile(record.ref), `${JSON.stringify({ ...record, lastUsed: when.toISOString() }, null, 2)}\n`, 0o600);
  }

  /** Removes a name; the content goes at the next sweep if nothing else uses it. */
  removeImage(ref: string): boolean {
    const record = this.record(ref);
    if (!record) return false;
    fs.rmSync(this.refFile(record.ref), { force: true });
    return true;
  }

  // --- images -----------------------------------------------------------------------------------

  /**
   * The image a reference names on this node: by its name, or for `name@sha256:…` by content
   * alone (the digest pins it whatever name it was stored under).
   */
  async resolve(ref: string): Promise<Image> {
    const parsed = parseImageRef(ref);
    const record = this.record(parsed.ref);
    if (record) return this.imageAt(record.digest, parsed.ref);
    if (parsed.digest && this.blobs.has(parsed.digest)) return this.imageAt(parsed.digest, parsed.ref);
    throw new ImageNotFoundError(parsed.ref, this.root);
  }

  /** The image whose manifest or index is `digest`, checked complete for this platform. */
  async imageAt(digest: string, ref: string = digest): Promise<Image> {
    const top = await this.document(digest, ref);
    let manifestDigest = digest;
    let manifest;
    if (top.kind === 'index') {
      const candidates = platformManifests(top.index);
      const present = candidates.find((m) => this.blobs.has(m.digest));
      if (!present) {
        const platform = hostPlatform();
        throw new IncompleteImageError(
          candidates.length
            ? `image ${ref}: the manifest for ${platform.os}/${platform.architecture} (${candidates[0]!.digest}) is not in the store`
            : `image ${ref}: its index has no manifest for ${platform.os}/${platform.architecture} (it has ${top.index.manifests.map((m) => (m.platform ? `${m.platform.os}/${m.platform.architecture}` : m.digest)).join(', ') || 'none'})`,
        );
      }
      manifestDigest = present.digest;
      const inner = await this.document(present.digest, ref);
      if (inner.kind !== 'manifest') throw new ImageFormatError(`image ${ref}: nested index ${present.digest} is not supported`);
      manifest = inner.manifest;
    } else {
      manifest = top.manifest;
    }
    const configBytes = await this.readOrIncomplete(manifest.config.digest, `image ${ref}: config`);
    const config = parseImageConfig(configBytes, `image ${ref} config ${manifest.config.digest}`);
    const diffIds = config.rootfs.diff_ids;
    if (diffIds.length !== manifest.layers.length) {
      throw new ImageFormatError(`image ${ref}: the manifest has ${manifest.layers.length} layers but the config names ${diffIds.length} diff ids`);
    }
    const missing = manifest.layers.filter((l, i) => !this.blobs.has(l.digest) && !this.layerInfo(diffIds[i]!));
    if (missing.length) {
      throw new IncompleteImageError(`image ${ref}: layer blob(s) ${missing.map((l) => l.digest).join(', ')} not in the store`);
    }
    return {
      ref,
      digest,
      manifestDigest,
      id: manifest.config.digest,
      config,
      layers: manifest.layers.map((l, i) => ({ ...l, diffId: diffIds[i]! })),
      size: manifest.config.size + manifest.layers.reduce((sum, l) => sum + l.size, 0),
    };
  }

  private async readOrIncomplete(digest: string, what: string): Promise<Buffer> {
    try {
      return await this.blobs.read(digest);
    } catch (error) {
      if (error instanceof BlobNotFoundError) throw new IncompleteImageError(`${what} ${digest} is not in the store`);
      if (error instanceof CorruptBlobError) this.logger?.error({ digest, file: error.file }, 'corrupt blob in the image store removed');
      throw error;
    }
  }

  private async document(digest: string, ref: string) {
    const bytes = await this.readOrIncomplete(digest, `image ${ref}: manifest`);
    return parseManifestDocument(bytes, `image ${ref} manifest ${digest}`);
  }

  /** The image config (Entrypoint, Cmd, Env, WorkingDir, User, ExposedPorts ...). */
  async config(image: Image | string): Promise<ImageConfig> {
    return typeof image === 'string' ? (await this.resolve(image)).config : image.config;
  }

  // --- layers -----------------------------------------------------------------------------------

  private layerDir(diffId: string): string {
    return path.join(this.layersDir, checkDigest(diffId).slice('sha256:'.length));
  }

  /** A layer already unpacked, or undefined. */
  layerInfo(diffId: string): UnpackedLayer | undefined {
    const dir = this.layerDir(diffId);
    try {
      const info = JSON.parse(fs.readFileSync(path.join(dir, 'layer.json'), 'utf8')) as LayerInfo;
      return info.diffId === diffId ? { ...info, dir: path.join(dir, 'fs') } : undefined;
    } catch {
      return undefined;
    }
  }

  /** The image's layers unpacked (each once, shared by every image that has it), lowest first. */
  async layers(image: Image): Promise<UnpackedLayer[]> {
    const result: UnpackedLayer[] = [];
    for (const layer of image.layers) result.push(await this.unpacked(layer));
    return result;
  }

  /** The directories of the image's layers, lowest first (overlayfs lists lower dirs top first). */
  async layerDirs(image: Image): Promise<string[]> {
    return (await this.layers(image)).map((l) => l.dir);
  }

  private unpacked(layer: LayerDescriptor): Promise<UnpackedLayer> {
    const existing = this.layerInfo(layer.diffId);
    if (existing) return Promise.resolve(existing);
    let running = this.unpacking.get(layer.diffId);
    if (!running) {
      running = this.unpack(layer).finally(() => this.unpacking.delete(layer.diffId));
      this.unpacking.set(layer.diffId, running);
    }
    return running;
  }

  private async unpack(layer: LayerDescriptor): Promise<UnpackedLayer> {
    const file = this.blobs.file(layer.digest);
    if (!fs.existsSync(file)) throw new IncompleteImageError(`layer ${layer.digest} is not in the store`);
    const compression = compressionOf(file);
    if (compression === 'zstd') throw new LayerError(`layer ${layer.digest} is zstd-compressed, which Drover does not unpack`);
    fs.mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
    const work = path.join(this.tmpDir, `layer-${process.pid}-${randomBytes(6).toString('hex')}`);
    fs.mkdirSync(work, { mode: 0o700 });
    const started = Date.now();
    try {
      const info = await unpackLayer({
        source: this.blobs.open(layer.digest),
        compression,
        diffId: layer.diffId,
        blob: layer.digest,
        workDir: work,
        overlayMarks: this.overlayMarks,
        logger: this.logger,
      });
      const dir = this.publishLayerDir(work, layer.diffId);
      this.logger?.debug({ layer: layer.diffId, bytes: info.size, ms: Date.now() - started }, 'layer unpacked');
      return this.layerInfo(layer.diffId) ?? { ...info, dir: path.join(dir, 'fs') };
    } catch (error) {
      fs.rmSync(work, { recursive: true, force: true });
      // A flipped bit in a gzip stream may break the unpacking before the hash at the end can
      // say why: whatever failed, a blob that does not match its name is the error to report.
      let reported = error;
      if (!(error instanceof CorruptBlobError)) reported = await this.blobs.verify(layer.digest).then(() => error, (verifyError: unknown) => verifyError);
      if (reported instanceof CorruptBlobError) this.logger?.error({ digest: reported.digest, file: reported.file }, 'corrupt layer blob in the image store removed');
      throw reported;
    }
  }

  /** Renames an unpacked work dir to layers/<diff id>; if another process got there first, theirs stays. */
  private publishLayerDir(work: string, diffId: string): string {
    fs.mkdirSync(this.layersDir, { recursive: true, mode: 0o700 });
    const dir = this.layerDir(diffId);
    try {
      fs.renameSync(work, dir);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
      fs.rmSync(work, { recursive: true, force: true });
    }
    return dir;
  }

  // --- import and sweep -------------------------------------------------------------------------

  /**
   * Imports an OCI image-layout or `docker save` archive (tar, gzip or not). Its blobs are
   * staged, synced together and named; its layers are unpacked as they stream in, and published
   * only for the images the import named, once their blob digests and diff ids both verified.
   */
  importArchive(file: string, options: ImportOptions = {}): Promise<ArchiveImport> {
    return this.withLease(async () => {
      const early = new EarlyUnpacks({ tmpDir: this.tmpDir, overlayMarks: this.overlayMarks, logger: this.logger });
      const target: ArchiveTarget = {
        hasBlob: (digest) => this.hasBlob(digest),
        putBlob: (digest, content, what) => this.putBlob(digest, content, what),
        stageBlob: (expected, content, what) => this.stageBlob(expected, content, what, early),
        commitBlobs: (staged) => this.commitBlobs(staged),
        discardBlobs: (staged) => this.blobs.discard(staged),
        readBlob: (digest) => this.readBlob(digest),
        blobFile: (digest) => this.blobFile(digest),
        addImage: (ref, digest, source) => this.addImage(ref, digest, source),
      };
      const wanted = new Map<string, Set<string>>();
      try {
        const result = await importArchive(target, file, options);
        for (const image of result.images) {
          try {
            for (const layer of (await this.imageAt(image.digest)).layers) {
              if (!wanted.has(layer.digest)) wanted.set(layer.digest, new Set());
              wanted.get(layer.digest)!.add(layer.diffId);
            }
          } catch {
            // not runnable on this platform: its layers are not unpacked here
          }
        }
        return result;
      } finally {
        await early.finish(wanted, (digest: string, layer: EarlyLayer) => {
          fs.writeFileSync(path.join(layer.workDir, 'layer.json'), `${JSON.stringify({ ...layer.info, blob: digest }, null, 2)}\n`, { mode: 0o600 });
          this.publishLayerDir(layer.workDir, layer.info.diffId);
        });
      }
    });
  }

  /**
   * Removes every blob and unpacked layer no name (and none of `keep`, digests of images pods
   * use, nor a live process's lease) reaches. Content younger than `graceMs` is spared too: an
   * import or pull that holds no lease may not have named it yet.
   */
  async sweep(keep: readonly string[] = [], graceMs = 15 * 60_000): Promise<SweepResult> {
    const liveBlobs = new Set<string>();
    const liveLayers = new Set<string>();
    const roots = [...this.records().map((r) => r.digest), ...keep.filter(isSha256Digest), ...this.leasedDigests()];
    const visit = async (digest: string): Promise<void> => {
      if (liveBlobs.has(digest)) return;
      liveBlobs.add(digest);
      if (!this.blobs.has(digest)) return;
      let doc;
      try {
        doc = parseManifestDocument(await this.blobs.read(digest));
      } catch {
        return; // a config or layer named directly, or not a document: kept, nothing below it
      }
      if (doc.kind === 'index') {
        for (const m of doc.index.manifests) await visit(m.digest);
        return;
      }
      liveBlobs.add(doc.manifest.config.digest);
      for (const layer of doc.manifest.layers) liveBlobs.add(layer.digest);
      try {
        for (const id of parseImageConfig(await this.blobs.read(doc.manifest.config.digest)).rootfs.diff_ids) liveLayers.add(id);
      } catch {
        // config missing or corrupt: its layers cannot be named, and are swept
      }
    };
    for (const root of roots) await visit(root);
    const cutoff = Date.now() - graceMs;
    const result: SweepResult = { blobs: 0, layers: 0, bytes: 0 };
    for (const digest of this.blobs.list()) {
      if (liveBlobs.has(digest)) continue;
      const stat = statOrUndefined(this.blobs.file(digest));
      if (!stat || stat.mtimeMs > cutoff) continue;
      this.blobs.remove(digest);
      result.blobs++;
      result.bytes += stat.size;
    }
    for (const name of readdirOrEmpty(this.layersDir)) {
      if (!/^[a-f0-9]{64}$/.test(name) || liveLayers.has(`sha256:${name}`)) continue;
      const dir = path.join(this.layersDir, name);
      const stat = statOrUndefined(path.join(dir, 'layer.json'));
      if (stat && stat.mtimeMs > cutoff) continue;
      const info = this.layerInfo(`sha256:${name}`);
      fs.rmSync(dir, { recursive: true, force: true });
      result.layers++;
      result.bytes += info?.size ?? 0;
    }
    // Work files are named <kind>-<pid>-<random>: those of a process that is gone are litter.
    for (const name of readdirOrEmpty(this.tmpDir)) {
      const pid = Number(/^[a-z]+-(\d+)-/.exec(name)?.[1]);
      if (Number.isInteger(pid) && pid !== process.pid && !processAlive(pid)) fs.rmSync(path.join(this.tmpDir, name), { recursive: true, force: true });
    }
    return result;
  }
}

function statOrUndefined(file: string): fs.Stats | undefined {
  try {
    return fs.statSync(file);
  } catch {
    return undefined;
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readdirOrEmpty(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}
