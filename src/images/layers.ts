import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { Parser, type ReadEntry } from 'tar';
import type { Logger } from '../logging/logger.js';
import { HashingStream } from './blobs.js';
import { LayerWriter } from './layer-writer.js';

/**
 * One layer unpacked into a directory, once, keyed by its diff id (the sha256 of the
 * uncompressed tar, which the image config names, so the unpacked bytes are checked too).
 *
 * OCI layers say "this path is deleted" with an empty `.wh.<name>` file and "this directory
 * hides everything below it" with `.wh..wh..opq`. These markers are never unpacked as files:
 * they are recorded in the layer's `layer.json`, and turned into what overlayfs reads (a 0/0
 * character device for a deleted path, the `trusted.overlay.opaque=y` xattr on an opaque
 * directory), so the layer directories can be overlayfs lower dirs as they are. Where those
 * cannot be made (not root, or `setfattr` missing for an opaque directory) the layer says
 * `overlay: false`, and `applyLayers` (the copy fallback) applies the markers from `layer.json`.
 *
 * The tar package parses the layer; LayerWriter writes files, directories and hard links, with
 * the guards here (no `..`, nothing written through a symlink). Symlinks are made afterwards,
 * verbatim (`/bin/busybox` must stay absolute inside a container's root).
 */

export const WHITEOUT_PREFIX = '.wh.';
export const OPAQUE_MARKER = '.wh..wh..opq';
const OVERLAY_OPAQUE_XATTR = 'trusted.overlay.opaque';

export interface LayerInfo {
  diffId: string;
  /** The blob it was unpacked from (compressed or not). */
  blob: string;
  /** Bytes of the uncompressed tar. */
  size: number;
  /** Paths this layer deletes from the layers below (relative, no leading slash). */
  whiteouts: string[];
  /** Directories whose lower contents this layer hides ('' is the root). */
  opaques: string[];
  /** Whether the directory carries overlayfs' own markers for them (usable as an overlay lower dir). */
  overlay: boolean;
  /** Entries skipped (device nodes, FIFOs; symlinks that would replace a directory). */
  skipped: string[];
  unpackedAt: string;
}

export interface UnpackedLayer extends LayerInfo {
  /** The layer's files: what an overlay mount or the copy fallback reads. */
  dir: string;
}

export class LayerError extends Error {
  override name = 'LayerError';
}

const GZIP_MAGIC = [0x1f, 0x8b];
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];

/** What the first bytes of a blob say about its compression. */
export function compressionOf(file: string): 'gzip' | 'zstd' | 'none' {
  const head = Buffer.alloc(4);
  const fd = fs.openSync(file, 'r');
  let n: number;
  try {
    n = fs.readSync(fd, head, 0, 4, 0);
  } finally {
    fs.closeSync(fd);
  }
  if (n >= 2 && head[0] === GZIP_MAGIC[0] && head[1] === GZIP_MAGIC[1]) return 'gzip';
  if (n >= 4 && ZSTD_MAGIC.every((b, i) => head[i] === b)) return 'zstd';
  return 'none';
}

/** A tar entry's path as a clean relative path ('' for the root), or undefined for one that climbs out. */
function cleanPath(entryPath: string): string | undefined {
  const parts: string[] = [];
  for (const part of entryPath.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') return undefined;
    parts.push(part);
  }
  return parts.join('/');
}

interface PendingLink {
  path: string;
  target: string;
  uid: number | undefined;
  gid: number | undefined;
  mtime: Date | undefined;
}

export interface UnpackOptions {
  /** The layer blob as a (verifying) stream. */
  source: Readable;
  compression: 'gzip' | 'none';
  /**
   * The diff id the image config promises for this layer; undefined while an import unpacks a
   * blob before it knows which config names it (the store then publishes the layer only under
   * the diff id computed here, and only if a config of the import names that one for this blob).
   */
  diffId: string | undefined;
  blob: string;
  /** An empty directory to unpack into (its `fs/` gets the files). */
  workDir: string;
  /** Make overlayfs' markers (root only). */
  overlayMarks: boolean;
  logger?: Logger | undefined;
}

/** Unpacks a layer into `workDir/fs` and writes `workDir/layer.json`; the caller renames workDir into place. */
export async function unpackLayer(options: UnpackOptions): Promise<LayerInfo> {
  const fsDir = path.join(options.workDir, 'fs');
  fs.mkdirSync(fsDir, { recursive: true, mode: 0o755 });
  const whiteouts: string[] = [];
  const opaques: string[] = [];
  const skipped: string[] = [];
  const problems: string[] = [];
  // Symlinks to make after the files, by path; a Map keeps the order of their (last) entries.
  const links = new Map<string, PendingLink>();

  const filter = (entryPath: string, e: ReadEntry): boolean => {
    const clean = cleanPath(entryPath);
    if (clean === undefined) {
      problems.push(`entry ${JSON.stringify(entryPath)} climbs out of the layer with ..`);
      return false;
    }
    const base = path.posix.basename(clean);
    if (base.startsWith(WHITEOUT_PREFIX)) {
      const parent = path.posix.dirname(clean) === '.' ? '' : path.posix.dirname(clean);
      if (base === OPAQUE_MARKER) opaques.push(parent);
      else if (base.length > WHITEOUT_PREFIX.length) whiteouts.push(parent ? `${parent}/${base.slice(WHITEOUT_PREFIX.length)}` : base.slice(WHITEOUT_PREFIX.length));
      return false;
    }
    const linkTarget = e.type === 'Link' ? cleanPath(String(e.linkpath)) : undefined;
    if (e.type === 'Link' && linkTarget === undefined) {
      problems.push(`hard link ${JSON.stringify(entryPath)} points out of the layer with .. (${JSON.stringify(String(e.linkpath))})`);
      return false;
    }
    if (e.type === 'SymbolicLink' || (linkTarget !== undefined && links.has(linkTarget))) {
      // A hard link to a symlink is another symlink with the same target.
      const target = e.type === 'SymbolicLink' ? String(e.linkpath) : links.get(linkTarget!)!.target;
      links.delete(clean);
      links.set(clean, { path: clean, target, uid: e.uid, gid: e.gid, mtime: e.mtime });
      return false;
    }
    // A later entry for the same path replaces the symlink, as it would on any tar extraction.
    links.delete(clean);
    // The writer gets the clean, relative paths: nothing absolute, no '..', for the entry and
    // for a hard link's target.
    e.path = clean === '' ? '.' : clean;
    if (linkTarget !== undefined) e.linkpath = linkTarget;
    return true;
  };
  // The tar package parses (headers, pax and GNU long names, checksums); LayerWriter writes each
  // entry on this thread with GNU tar's system calls (layer-writer.ts says why not UnpackSync).
  // Chunks come from the stream, so the event loop runs between them. What makes this safe: the
  // filter above hands it only clean relative paths (no root, no '..', also for hard-link
  // targets), and no symlink exists in the directory while entries are written (they are all
  // made afterwards, below), so nothing can be written through one.
  const writer = new LayerWriter(fsDir, { skipped, problems });
  const unpack = new Parser({
    onReadEntry: (entry: ReadEntry) => {
      if (!filter(entry.path, entry)) {
        entry.resume();
        return;
      }
      writer.write(entry, entry.path === '.' ? '' : entry.path, entry.type === 'Link' ? String(entry.linkpath) : undefined);
    },
    onwarn: (code: string, message: string | Error, data: Record<string, unknown>) => {
      const text = message instanceof Error ? message.message : message;
      const entryPath = (data.entry as ReadEntry | undefined)?.path;
      const where = entryPath ? `${entryPath}: ` : '';
      if (code === 'TAR_ENTRY_INFO') return;
      problems.push(`${where}${text} (${code})`);
    },
  });
  unpack.on('error', (error: Error) => problems.push(error.message));
  const hashing = new HashingStream();
  const sink = async (chunks: AsyncIterable<Buffer>): Promise<void> => {
    for await (const chunk of chunks) unpack.write(chunk);
    unpack.end();
    writer.finish();
  };
  try {
    if (options.compression === 'gzip') await pipeline(options.source, createGunzip({ chunkSize: 256 * 1024 }), hashing, sink);
    else await pipeline(options.source, hashing, sink);
  } catch (error) {
    if (error instanceof Error && error.name === 'CorruptBlobError') throw error;
    throw new LayerError(`layer ${options.blob}: ${(error as Error).message}`);
  }
  const diffId = hashing.digest();
  if (options.diffId !== undefined && diffId !== options.diffId) {
    throw new LayerError(`layer ${options.blob}: its uncompressed content has digest ${diffId}, but the image config says ${options.diffId}`);
  }
  if (problems.length) throw new LayerError(`layer ${options.blob} cannot be unpacked safely: ${problems.slice(0, 5).join('; ')}`);

  for (const link of links.values()) {
    const file = path.join(fsDir, link.path);
    if (!insideWithoutSymlinks(fsDir, path.posix.dirname(link.path))) {
      skipped.push(`${link.path}: symlink below another symlink`);
      continue;
    }
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
    const existing = lstatOrUndefined(file);
    if (existing?.isDirectory()) {
      skipped.push(`${link.path}: symlink would replace a directory`);
      continue;
    }
    if (existing) fs.rmSync(file, { force: true });
    fs.symlinkSync(link.target, file);
    if (process.getuid?.() === 0 && link.uid !== undefined && link.gid !== undefined) fs.lchownSync(file, link.uid, link.gid);
    if (link.mtime) fs.lutimesSync(file, link.mtime, link.mtime);
  }

  for (const w of whiteouts) {
    if (!insideWithoutSymlinks(fsDir, path.posix.dirname(w))) throw new LayerError(`layer ${options.blob}: whiteout ${w} is below a symlink`);
  }
  for (const o of opaques) {
    if (!insideWithoutSymlinks(fsDir, o)) throw new LayerError(`layer ${options.blob}: opaque directory ${o} is below a symlink`);
  }
  let overlay = true;
  if (whiteouts.length || opaques.length) {
    overlay = options.overlayMarks && (await makeOverlayMarks(fsDir, whiteouts, opaques, options.logger));
  }
  const info: LayerInfo = {
    diffId,
    blob: options.blob,
    size: hashing.bytes,
    whiteouts,
    opaques,
    overlay,
    skipped,
    unpackedAt: new Date().toISOString(),
  };
  if (skipped.length) options.logger?.info({ layer: diffId, skipped: skipped.slice(0, 20) }, 'layer entries not unpacked');
  fs.writeFileSync(path.join(options.workDir, 'layer.json'), `${JSON.stringify(info, null, 2)}\n`, { mode: 0o600 });
  return info;
}

function lstatOrUndefined(file: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(file);
  } catch {
    return undefined;
  }
}

/** Whether `rel` (a directory path under root) exists only as real directories, or not at all: nothing on the way is a symlink. */
function insideWithoutSymlinks(root: string, rel: string): boolean {
  let current = root;
  for (const part of rel.split('/')) {
    if (part === '' || part === '.') continue;
    current = path.join(current, part);
    const stat = lstatOrUndefined(current);
    if (!stat) return true;
    if (!stat.isDirectory()) return false;
  }
  return true;
}

function run(file: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 60_000 }, (error, _stdout, stderr) => {
      if (error) reject(new Error(`${file}: ${stderr.trim() || error.message}`));
      else resolve();
    });
  });
}

const BATCH = 200;

/**
 * Overlayfs' markers for a layer: `mknod c 0 0` for each whiteout (coreutils), the opaque xattr
 * for each opaque directory (`setfattr`, Debian's `attr`). Node has no mknod or setxattr, so a
 * shell loop makes the devices in batches rather than one process each.
 */
async function makeOverlayMarks(fsDir: string, whiteouts: string[], opaques: string[], logger: Logger | undefined): Promise<boolean> {
  try {
    const devices: string[] = [];
    for (const w of whiteouts) {
      const file = path.join(fsDir, w);
      if (lstatOrUndefined(file)) continue; // the layer also has the path itself: it wins
      fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
      devices.push(file);
    }
    for (let i = 0; i < devices.length; i += BATCH) {
      await run('/bin/sh', ['-c', 'for f; do mknod -- "$f" c 0 0 || exit 1; done', 'sh', ...devices.slice(i, i + BATCH)]);
    }
    const dirs = opaques.map((o) => path.join(fsDir, o));
    for (const dir of dirs) fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
    for (let i = 0; i < dirs.length; i += BATCH) {
      await run('setfattr', ['-n', OVERLAY_OPAQUE_XATTR, '-v', 'y', '--', ...dirs.slice(i, i + BATCH)]);
    }
    return true;
  } catch (error) {
    logger?.warn(
      { err: (error as Error).message },
      'could not make overlayfs whiteout markers for a layer (needs root, mknod, and setfattr from the attr package); its containers will get a copied root filesystem',
    );
    return false;
  }
}

/** The overlayfs markers of a layer made again (after `attr` was installed, say); true when done. */
export async function remakeOverlayMarks(layer: UnpackedLayer, logger?: Logger): Promise<boolean> {
  return makeOverlayMarks(layer.dir, layer.whiteouts, layer.opaques, logger);
}

/**
 * The layer whose files are in `dir` (a directory `layerDirs` returned), with what it deletes:
 * what `applyLayers` needs when a caller kept only the directories.
 */
export function unpackedLayerAt(dir: string): UnpackedLayer {
  const file = path.join(dir, '..', 'layer.json');
  let info: LayerInfo;
  try {
    info = JSON.parse(fs.readFileSync(file, 'utf8')) as LayerInfo;
  } catch (error) {
    throw new LayerError(`${dir} is not an unpacked layer of the image store (${file}: ${(error as Error).message})`);
  }
  return { ...info, dir };
}

function isWhiteoutDevice(stat: fs.Stats): boolean {
  return stat.isCharacterDevice() && stat.rdev === 0;
}

function removeChildren(dir: string): void {
  for (const name of fs.readdirSync(dir)) fs.rmSync(path.join(dir, name), { recursive: true, force: true });
}

/**
 * The copy fallback: the layers, lowest first, copied into `target` as overlayfs would show
 * them merged. Each layer's opaque directories and whiteouts are applied first (they hide what
 * the layers below put there, not what the same layer adds), then its files are copied with
 * their modes, owners (as root) and times. Nothing in `target` is ever followed: a layer's
 * directory replaces a lower symlink of the same name rather than writing through it.
 */
export function applyLayers(layers: readonly UnpackedLayer[], target: string): void {
  fs.mkdirSync(target, { recursive: true, mode: 0o755 });
  const root = process.getuid?.() === 0;
  for (const layer of layers) {
    for (const o of layer.opaques) {
      const dir = path.join(target, o);
      if (insideWithoutSymlinks(target, o) && lstatOrUndefined(dir)?.isDirectory()) removeChildren(dir);
    }
    for (const w of layer.whiteouts) {
      if (insideWithoutSymlinks(target, path.posix.dirname(w))) fs.rmSync(path.join(target, w), { recursive: true, force: true });
    }
    copyTree(layer.dir, target, root);
  }
}

function copyTree(from: string, to: string, root: boolean): void {
  for (const name of fs.readdirSync(from)) {
    const source = path.join(from, name);
    const dest = path.join(to, name);
    const stat = fs.lstatSync(source);
    if (isWhiteoutDevice(stat)) continue; // applied from layer.json already
    const existing = lstatOrUndefined(dest);
    if (stat.isDirectory()) {
      if (existing && !existing.isDirectory()) fs.rmSync(dest, { force: true });
      if (!existing || !existing.isDirectory()) fs.mkdirSync(dest);
      copyTree(source, dest, root);
      fs.chmodSync(dest, stat.mode & 0o7777);
      if (root) fs.lchownSync(dest, stat.uid, stat.gid);
      fs.utimesSync(dest, stat.atime, stat.mtime);
      continue;
    }
    if (existing) fs.rmSync(dest, { recursive: true, force: true });
    if (stat.isSymbolicLink()) {
      fs.symlinkSync(fs.readlinkSync(source), dest);
      if (root) fs.lchownSync(dest, stat.uid, stat.gid);
      fs.lutimesSync(dest, stat.atime, stat.mtime);
    } else if (stat.isFile()) {
      fs.copyFileSync(source, dest);
      if (root) fs.lchownSync(dest, stat.uid, stat.gid);
      // chown clears setuid bits: the mode goes last.
      fs.chmodSync(dest, stat.mode & 0o7777);
      fs.utimesSync(dest, stat.atime, stat.mtime);
    }
  }
}
