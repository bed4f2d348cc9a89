import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { Parser, type ReadEntry } from 'tar';
import { type StagedBlob, sha256Digest } from './blobs.js';
import {
  ANNOTATION_IMAGE_NAME,
  ANNOTATION_REF_NAME,
  type Descriptor,
  ImageFormatError,
  MEDIA_TYPES,
  parseDescriptor,
  parseImageConfig,
} from './oci.js';
import { ImageRefError, parseImageRef } from './reference.js';

/**
 * Importing an image archive: an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`)
 * or a `docker save` archive (`manifest.json`, `<id>.json` configs, `<id>/layer.tar` layers, or
 * Docker 25's mix of both), as a tar, gzip or not. The archive is read once, as a stream: every
 * blob goes straight into the store (checked against its name where the archive names it by
 * digest), small documents are kept in memory, and the images are named once all is in.
 * A `docker save` image gets an OCI manifest made for it here (as containerd does on import).
 */

export class ArchiveError extends Error {
  override name = 'ArchiveError';
}

/** What archive.ts needs of the store (ImageStore has it; an interface, so the store may import this file). */
export interface ArchiveTarget {
  hasBlob(digest: string): boolean;
  putBlob(digest: string, content: Readable | NodeJS.ReadableStream, what?: string): Promise<void>;
  /** Writes and verifies a blob without naming it; commitBlobs names a batch, discardBlobs drops one. */
  stageBlob(expected: string | undefined, content: Readable | NodeJS.ReadableStream, what: string): Promise<StagedBlob>;
  commitBlobs(staged: readonly StagedBlob[]): Promise<void>;
  discardBlobs(staged: readonly StagedBlob[]): void;
  readBlob(digest: string): Promise<Buffer>;
  blobFile(digest: string): string;
  addImage(ref: string | undefined, digest: string, source?: string): Promise<{ ref: string; digest: string }>;
}

export interface ImportOptions {
  /** Name for images the archive leaves unnamed (or names by tag only, as `org.opencontainers.image.ref.name: 1.0`). */
  name?: string;
}

export interface ArchiveImport {
  format: 'oci' | 'docker';
  /** Each image named (or kept unnamed, `ref` = its digest). */
  images: { ref: string; digest: string }[];
  blobs: number;
  bytes: number;
}

/** Documents larger than this are not kept in memory (a layer, not a document). */
const SMALL_FILE = 4 * 1024 * 1024;

interface Member {
  /** Set for files ingested as blobs. */
  digest?: string;
  size?: number;
  /** Set for small files outside blobs/ (documents, possibly a small layer). */
  data?: Buffer;
  /** Set for symlinks and hard links: the member they point at. */
  link?: string;
}

function cleanName(name: string): string {
  return name.replace(/^(\.\/|\/)+/, '').replace(/\/+$/, '');
}

function readAll(entry: ReadEntry): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    entry.on('data', (chunk: Buffer) => chunks.push(chunk));
    entry.on('end', () => resolve(Buffer.concat(chunks)));
    entry.on('error', reject);
  });
}

/**
 * Reads every member of the archive: blobs into the store, small files into memory. The blobs
 * are staged as they stream and committed together at the end (synced at once, then named), or
 * all dropped when anything failed: an import that fails names no blob.
 */
async function readMembers(store: ArchiveTarget, file: string): Promise<Map<string, Member>> {
  const members = new Map<string, Member>();
  const pending: Promise<void>[] = [];
  const staged: StagedBlob[] = [];
  /** Members still streaming into the store, failed if the archive breaks off under them. */
  const streaming = new Set<ReadEntry>();
  const problems: string[] = [];
  const parser = new Parser({
    strict: true,
    onReadEntry: (entry: ReadEntry) => {
      const name = cleanName(entry.path);
      if (entry.type === 'SymbolicLink' || entry.type === 'Link') {
        const target = entry.type === 'SymbolicLink' ? path.posix.join(path.posix.dirname(name), String(entry.linkpath)) : cleanName(String(entry.linkpath));
        members.set(name, { link: path.posix.normalize(target) });
        entry.resume();
        return;
      }
      if (entry.type !== 'File' && entry.type !== 'OldFile' && entry.type !== 'ContiguousFile') {
        entry.resume();
        return;
      }
      const blob = /^blobs\/sha256\/([a-f0-9]{64})$/.exec(name);
      const member: Member = {};
      members.set(name, member);
      let work: Promise<void>;
      // A docker save layer goes to the store however small, so it is unpacked as it streams.
      const large = (entry.size ?? 0) > SMALL_FILE || /(^|\/)layer\.tar$/.test(name);
      if (blob || large) {
        streaming.add(entry);
        entry.on('end', () => streaming.delete(entry));
      }
      if (blob) {
        const digest = `sha256:${blob[1]}`;
        work = store.stageBlob(digest, entry as unknown as NodeJS.ReadableStream, `archive member ${name}`).then((blob) => {
          staged.push(blob);
          member.digest = digest;
          member.size = blob.size;
        });
      } else if (!large) {
        work = readAll(entry).then((data) => {
          member.data = data;
        });
      } else {
        work = store.stageBlob(undefined, entry as unknown as NodeJS.ReadableStream, `archive member ${name}`).then((blob) => {
          staged.push(blob);
          member.digest = blob.digest;
          member.size = blob.size;
        });
      }
      pending.push(work.catch((error: unknown) => void problems.push((error as Error).message)));
    },
  });
  try {
    await new Promise<void>((resolve, reject) => {
      // 1 MiB reads: each chunk passes several streams (hash, tee, unpack), so fewer, larger ones cost less.
      const input = fs.createReadStream(file, { highWaterMark: 1024 * 1024 });
      input.on('error', reject);
      parser.on('error', (error: Error) => reject(new ArchiveError(`${file} is not a readable tar archive: ${error.message}`)));
      parser.on('end', () => resolve());
      input.pipe(parser as unknown as NodeJS.WritableStream);
    });
  } catch (error) {
    // The archive broke off: fail what still streams from it, so nothing waits for the rest.
    for (const entry of streaming) entry.destroy(error as Error);
    await Promise.all(pending);
    store.discardBlobs(staged);
    throw error;
  }
  await Promise.all(pending);
  if (problems.length) {
    store.discardBlobs(staged);
    throw new ArchiveError(`${file}: ${problems.join('; ')}`);
  }
  await store.commitBlobs(staged);
  return members;
}

class Members {
  constructor(
    private readonly store: ArchiveTarget,
    private readonly members: Map<string, Member>,
    private readonly file: string,
  ) {}

  private find(name: string): Member | undefined {
    let member = this.members.get(cleanName(name));
    for (let hops = 0; member?.link !== undefined && hops < 8; hops++) member = this.members.get(member.link);
    return member?.link === undefined ? member : undefined;
  }

  has(name: string): boolean {
    return this.find(name) !== undefined;
  }

  /** A member's bytes (a document). */
  async bytes(name: string): Promise<Buffer> {
    const member = this.find(name);
    if (!member) throw new ArchiveError(`${this.file} has no ${name}`);
    if (member.data) return member.data;
    return this.store.readBlob(member.digest!);
  }

  /** A member as a blob in the store: its digest and size. */
  async blob(name: string): Promise<{ digest: string; size: number }> {
    const member = this.find(name);
    if (!member) throw new ArchiveError(`${this.file} has no ${name}`);
    if (member.digest) return { digest: member.digest, size: member.size ?? 0 };
    const data = member.data!;
    const digest = sha256Digest(data);
    await this.store.putBlob(digest, Readable.from([data]));
    member.digest = digest;
    member.size = data.length;
    return { digest, size: data.length };
  }
}

/** A name for an OCI layout entry: containerd's full-name annotation, else the OCI one (a full reference, or a tag for `options.name`). */
function ociName(descriptor: Descriptor, options: ImportOptions): string | undefined {
  const full = descriptor.annotations?.[ANNOTATION_IMAGE_NAME];
  if (full) return full;
  const refName = descriptor.annotations?.[ANNOTATION_REF_NAME];
  if (refName && /[/:@]/.test(refName)) return refName;
  if (refName && options.name) return `${parseImageRef(options.name).name}:${refName}`;
  return options.name;
}

function isGzip(file: string): boolean {
  const head = Buffer.alloc(2);
  const fd = fs.openSync(file, 'r');
  try {
    return fs.readSync(fd, head, 0, 2, 0) === 2 && head[0] === 0x1f && head[1] === 0x8b;
  } finally {
    fs.closeSync(fd);
  }
}

function parseJsonDocument(bytes: Buffer, what: string): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw new ArchiveError(`${what} is not valid JSON: ${(error as Error).message}`);
  }
}

async function importOciLayout(store: ArchiveTarget, members: Members, file: string, options: ImportOptions): Promise<ArchiveImport['images']> {
  if (members.has('oci-layout')) {
    const layout = parseJsonDocument(await members.bytes('oci-layout'), `${file}: oci-layout`) as { imageLayoutVersion?: unknown };
    if (typeof layout?.imageLayoutVersion !== 'string' || !layout.imageLayoutVersion.startsWith('1.')) {
      throw new ArchiveError(`${file}: oci-layout has imageLayoutVersion ${JSON.stringify(layout?.imageLayoutVersion)}; 1.x is supported`);
    }
  }
  const index = parseJsonDocument(await members.bytes('index.json'), `${file}: index.json`) as { manifests?: unknown };
  if (!Array.isArray(index?.manifests)) throw new ArchiveError(`${file}: index.json has no manifests list`);
  const images: ArchiveImport['images'] = [];
  for (const [i, raw] of index.manifests.entries()) {
    const descriptor = parseDescriptor(raw, `${file}: index.json manifests[${i}]`);
    if (!store.hasBlob(descriptor.digest)) throw new ArchiveError(`${file}: index.json names ${descriptor.digest}, which the archive does not hold`);
    const name = ociName(descriptor, options);
    images.push(await store.addImage(name, descriptor.digest, `import ${path.basename(file)}`));
  }
  return images;
}

interface DockerManifestEntry {
  Config: string;
  RepoTags?: string[] | null;
  Layers: string[];
}

async function importDockerSave(store: ArchiveTarget, members: Members, file: string, options: ImportOptions): Promise<ArchiveImport['images']> {
  const list = parseJsonDocument(await members.bytes('manifest.json'), `${file}: manifest.json`);
  if (!Array.isArray(list)) throw new ArchiveError(`${file}: manifest.json is not a list of images`);
  const images: ArchiveImport['images'] = [];
  for (const [i, raw] of list.entries()) {
    const entry = raw as DockerManifestEntry;
    if (typeof entry?.Config !== 'string' || !Array.isArray(entry.Layers) || entry.Layers.some((l) => typeof l !== 'string')) {
      throw new ArchiveError(`${file}: manifest.json[${i}] needs Config and Layers`);
    }
    const configBytes = await members.bytes(entry.Config);
    const config = parseImageConfig(configBytes, `${file}: ${entry.Config}`);
    if (config.rootfs.diff_ids.length !== entry.Layers.length) {
      throw new ArchiveError(`${file}: ${entry.Config} names ${config.rootfs.diff_ids.length} diff ids but manifest.json[${i}] has ${entry.Layers.length} layers`);
    }
    const configBlob = await members.blob(entry.Config);
    const layers: Descriptor[] = [];
    for (const [l, layerName] of entry.Layers.entries()) {
      const blob = await members.blob(layerName);
      const gzip = isGzip(store.blobFile(blob.digest));
      if (!gzip && blob.digest !== config.rootfs.diff_ids[l]) {
        throw new ArchiveError(`${file}: layer ${layerName} has digest ${blob.digest}, but its config says ${config.rootfs.diff_ids[l]}`);
      }
      layers.push({ mediaType: gzip ? MEDIA_TYPES.ociLayerGzip : MEDIA_TYPES.ociLayer, digest: blob.digest, size: blob.size });
    }
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MEDIA_TYPES.ociManifest,
        config: { mediaType: MEDIA_TYPES.ociConfig, digest: configBlob.digest, size: configBlob.size },
        layers,
      }),
    );
    const manifestDigest = sha256Digest(manifest);
    await store.putBlob(manifestDigest, Readable.from([manifest]));
    const tags = (entry.RepoTags ?? []).filter((t) => typeof t === 'string');
    const names = tags.length ? tags : [options.name];
    for (const name of names) images.push(await store.addImage(name, manifestDigest, `import ${path.basename(file)}`));
  }
  return images;
}

export async function importArchive(store: ArchiveTarget, file: string, options: ImportOptions = {}): Promise<ArchiveImport> {
  if (!fs.existsSync(file)) throw new ArchiveError(`${file} does not exist`);
  const raw = await readMembers(store, file);
  const members = new Members(store, raw, file);
  let format: ArchiveImport['format'];
  try {
    let images: ArchiveImport['images'];
    if (members.has('index.json')) {
      format = 'oci';
      images = await importOciLayout(store, members, file, options);
    } else if (members.has('manifest.json')) {
      format = 'docker';
      images = await importDockerSave(store, members, file, options);
    } else {
      throw new ArchiveError(`${file} is neither an OCI image layout (no index.json) nor a docker save archive (no manifest.json)`);
    }
    let blobs = 0;
    let bytes = 0;
    for (const member of raw.values()) {
      if (member.digest) {
        blobs++;
        bytes += member.size ?? 0;
      }
    }
    return { format, images, blobs, bytes };
  } catch (error) {
    if (error instanceof ImageFormatError || error instanceof ImageRefError) throw new ArchiveError(`${file}: ${error.message}`);
    throw error;
  }
}
