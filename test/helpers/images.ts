import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { gzipSync } from 'node:zlib';
import { Header, Pax } from 'tar';
import { hostPlatform, MEDIA_TYPES } from '../../src/images/oci.js';
import { normalizeImageRef, parseImageRef } from '../../src/images/reference.js';

/**
 * Test images, built at test time without a network: a base layer with Debian's static busybox
 * (`/bin/busybox` from the `busybox-static` package) and its applet links, `/etc/passwd` and
 * `/etc/group` with a non-root user, then whatever layers a test adds (files, directories,
 * symlinks, hard links, whiteouts, opaque directories), and an image config with the
 * Entrypoint/Cmd/Env/WorkingDir/User/ExposedPorts the test chooses. Archives are written as an
 * OCI image layout or as `docker save` writes them, gzip or not, with the tar package's own
 * header encoder (no shell tar). Content is deterministic: the same options give the same digests.
 *
 * `TestImage.blobs` holds every blob by digest, which is what a test registry serves.
 */

export const BUSYBOX = '/bin/busybox';
export const BUSYBOX_PACKAGE = 'busybox-static';
const MTIME = new Date('2024-01-01T00:00:00Z');
const PT_INTERP = 3;

/** Applets linked in /bin by default (all are in Debian's busybox-static). */
export const DEFAULT_APPLETS = [
  'sh', 'ash', 'ls', 'cat', 'echo', 'sleep', 'id', 'hostname', 'tar', 'wget', 'httpd', 'nc', 'ps', 'env', 'true', 'false',
  'test', '[', 'mkdir', 'rm', 'rmdir', 'cp', 'mv', 'ln', 'touch', 'chmod', 'chown', 'grep', 'sed', 'awk', 'head', 'tail',
  'wc', 'cut', 'tr', 'sort', 'uniq', 'pwd', 'whoami', 'kill', 'date', 'printf', 'readlink', 'stat', 'df', 'du', 'mount',
  'umount', 'dd', 'find', 'xargs', 'seq', 'yes', 'uname', 'basename', 'dirname', 'sha256sum', 'md5sum', 'base64', 'tee',
  'timeout', 'free', 'top', 'uptime', 'nslookup', 'ping', 'ip', 'ifconfig', 'mkfifo', 'sync', 'vi', 'less', 'more',
  'hexdump', 'od', 'gzip', 'gunzip', 'zcat', 'nproc', 'realpath', 'su', 'setsid', 'pidof', 'killall', 'watch',
];

export type LayerEntry =
  | { path: string; type?: 'file'; content: string | Buffer; mode?: number; uid?: number; gid?: number }
  | { path: string; type: 'dir'; mode?: number; uid?: number; gid?: number }
  | { path: string; type: 'symlink'; target: string }
  | { path: string; type: 'hardlink'; target: string }
  /** `path` deleted from the layers below (`dir/.wh.name` in the tar). */
  | { path: string; type: 'whiteout' }
  /** `path` (a directory) hides what the layers below have in it (`path/.wh..wh..opq`). */
  | { path: string; type: 'opaque' };

export interface TestUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export interface TestImageOptions {
  /** The image's name (any reference form; normalized). Default `drover.test/busybox:latest`. */
  name?: string;
  /** `busybox` (default): the busybox base layer; `empty`: only the layers given. */
  base?: 'busybox' | 'empty';
  /** Applets linked to /bin/busybox; 'all' asks busybox for its list (spawns it). */
  applets?: string[] | 'all';
  entrypoint?: string[];
  /** Default `['sh']` on a busybox base. */
  cmd?: string[];
  /** Added after PATH. */
  env?: string[];
  workingDir?: string;
  user?: string;
  /** e.g. `['8080/tcp']`. */
  exposedPorts?: string[];
  labels?: Record<string, string>;
  stopSignal?: string;
  /** The non-root user in /etc/passwd (default `user`, 1000:1000, /home/user). */
  nonRootUser?: TestUser;
  /** Extra files in a layer of their own, on top of the base. */
  files?: Record<string, string | Buffer>;
  /** More layers, each a list of entries, after `files`. */
  layers?: LayerEntry[][];
  /** Gzip the layer blobs (default true). */
  gzipLayers?: boolean;
  /** Put the manifest in an OCI index with this platform and a second (absent) one, as a multi-platform image. */
  multiPlatform?: boolean;
  architecture?: string;
}

export interface TestLayer {
  blob: Buffer;
  digest: string;
  diffId: string;
  mediaType: string;
  /** The uncompressed tar. */
  tar: Buffer;
}

export interface TestImage {
  /** Normalized reference. */
  ref: string;
  /** What the reference resolves to: the index when multiPlatform, else the manifest. */
  digest: string;
  manifest: Buffer;
  manifestDigest: string;
  index?: Buffer;
  indexDigest?: string;
  config: Buffer;
  configDigest: string;
  layers: TestLayer[];
  /** Every blob by digest (index, manifest, config, layers). */
  blobs: Map<string, Buffer>;
}

export function sha256(data: Buffer | string): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

/** Why an ELF file is not a static executable, or undefined when it is one. */
export function staticElfProblem(elf: Buffer): string | undefined {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46) return 'it is not an ELF file';
  const is64 = elf[4] === 2;
  const le = elf[5] === 1;
  const u16 = (o: number): number => (le ? elf.readUInt16LE(o) : elf.readUInt16BE(o));
  const u32 = (o: number): number => (le ? elf.readUInt32LE(o) : elf.readUInt32BE(o));
  const phoff = is64 ? Number(le ? elf.readBigUInt64LE(0x20) : elf.readBigUInt64BE(0x20)) : u32(0x1c);
  const phentsize = u16(is64 ? 0x36 : 0x2a);
  const phnum = u16(is64 ? 0x38 : 0x2c);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > elf.length) return 'its program headers are truncated';
    if (u32(at) === PT_INTERP) {
      const offset = is64 ? Number(le ? elf.readBigUInt64LE(at + 8) : elf.readBigUInt64BE(at + 8)) : u32(at + 4);
      const end = elf.indexOf(0, offset);
      return `it is dynamically linked (program interpreter ${elf.subarray(offset, end > offset ? end : offset + 64).toString()})`;
    }
  }
  return undefined;
}

let busyboxCache: Buffer | undefined;

/** /bin/busybox, checked to be static (a dynamic one would not run inside a container's root). */
export function busyboxBinary(file = BUSYBOX): Buffer {
  if (file === BUSYBOX && busyboxCache) return busyboxCache;
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (error) {
    throw new Error(`test images need ${file} from the Debian package ${BUSYBOX_PACKAGE} (apt-get install ${BUSYBOX_PACKAGE}): ${(error as Error).message}`);
  }
  const problem = staticElfProblem(bytes);
  if (problem) {
    throw new Error(
      `test images need a statically linked busybox at ${file}, from the Debian package ${BUSYBOX_PACKAGE}, but ${problem}; ` +
        `Debian's plain busybox package installs a dynamic one there: apt-get install ${BUSYBOX_PACKAGE}`,
    );
  }
  if (file === BUSYBOX) busyboxCache = bytes;
  return bytes;
}

// --- tar writing ----------------------------------------------------------------------------

export interface TarEntry {
  path: string;
  type: 'File' | 'Directory' | 'SymbolicLink' | 'Link';
  content?: Buffer;
  linkpath?: string;
  mode?: number;
  uid?: number;
  gid?: number;
}

/** A tar archive of `entries`, in order, with pax headers where a path is too long for ustar. */
export function tarBytes(entries: readonly TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    const content = entry.content ?? Buffer.alloc(0);
    const fields = {
      path: entry.type === 'Directory' && !entry.path.endsWith('/') ? `${entry.path}/` : entry.path,
      mode: entry.mode ?? (entry.type === 'Directory' ? 0o755 : entry.type === 'SymbolicLink' ? 0o777 : 0o644),
      uid: entry.uid ?? 0,
      gid: entry.gid ?? 0,
      size: entry.type === 'File' ? content.length : 0,
      mtime: MTIME,
      type: entry.type,
      linkpath: entry.linkpath ?? '',
      uname: '',
      gname: '',
    };
    const block = Buffer.alloc(512);
    const needPax = new Header(fields).encode(block, 0);
    if (needPax) parts.push(new Pax({ path: fields.path, linkpath: fields.linkpath || undefined, mtime: MTIME } as never).encode());
    parts.push(block);
    if (entry.type === 'File' && content.length) {
      parts.push(content);
      const pad = (512 - (content.length % 512)) % 512;
      if (pad) parts.push(Buffer.alloc(pad));
    }
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

function layerTarEntries(entries: readonly LayerEntry[]): TarEntry[] {
  const out: TarEntry[] = [];
  for (const entry of entries) {
    const p = entry.path.replace(/^\/+/, '');
    const owner = (e: { uid?: number; gid?: number }) => ({ ...(e.uid !== undefined ? { uid: e.uid } : {}), ...(e.gid !== undefined ? { gid: e.gid } : {}) });
    switch (entry.type) {
      case undefined:
      case 'file':
        out.push({
          path: p,
          type: 'File',
          content: Buffer.isBuffer(entry.content) ? entry.content : Buffer.from(entry.content),
          ...(entry.mode !== undefined ? { mode: entry.mode } : {}),
          ...owner(entry),
        });
        break;
      case 'dir':
        out.push({ path: p, type: 'Directory', ...(entry.mode !== undefined ? { mode: entry.mode } : {}), ...owner(entry) });
        break;
      case 'symlink':
        out.push({ path: p, type: 'SymbolicLink', linkpath: entry.target });
        break;
      case 'hardlink':
        out.push({ path: p, type: 'Link', linkpath: entry.target.replace(/^\/+/, '') });
        break;
      case 'whiteout': {
        const slash = p.lastIndexOf('/');
        out.push({ path: slash < 0 ? `.wh.${p}` : `${p.slice(0, slash)}/.wh.${p.slice(slash + 1)}`, type: 'File' });
        break;
      }
      case 'opaque':
        out.push({ path: p ? `${p}/.wh..wh..opq` : '.wh..wh..opq', type: 'File' });
        break;
    }
  }
  return out;
}

function busyboxApplets(): string[] {
  return execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => a && a !== 'busybox');
}

function baseLayer(applets: readonly string[], user: TestUser): LayerEntry[] {
  const passwd = `root:x:0:0:root:/root:/bin/sh\n${user.name}:x:${user.uid}:${user.gid}:${user.name}:${user.home}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n`;
  const group = `root:x:0:\n${user.name}:x:${user.gid}:\nnogroup:x:65534:\n`;
  return [
    { path: 'bin', type: 'dir' },
    { path: 'bin/busybox', content: busyboxBinary(), mode: 0o755 },
    ...applets.map((a): LayerEntry => ({ path: `bin/${a}`, type: 'symlink', target: 'busybox' })),
    { path: 'dev', type: 'dir' },
    { path: 'etc', type: 'dir' },
    { path: 'etc/passwd', content: passwd },
    { path: 'etc/group', content: group },
    { path: 'home', type: 'dir' },
    { path: user.home.replace(/^\/+/, ''), type: 'dir', uid: user.uid, gid: user.gid },
    { path: 'proc', type: 'dir' },
    { path: 'root', type: 'dir', mode: 0o700 },
    { path: 'sys', type: 'dir' },
    { path: 'tmp', type: 'dir', mode: 0o1777 },
    { path: 'usr', type: 'dir' },
    { path: 'usr/bin', type: 'dir' },
    { path: 'var', type: 'dir' },
    { path: 'var/www', type: 'dir' },
  ];
}

const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function buildTestImage(options: TestImageOptions = {}): TestImage {
  const ref = normalizeImageRef(options.name ?? 'drover.test/busybox:latest');
  const user = options.nonRootUser ?? { name: 'user', uid: 1000, gid: 1000, home: '/home/user' };
  const layerLists: LayerEntry[][] = [];
  if ((options.base ?? 'busybox') === 'busybox') {
    const applets = options.applets === 'all' ? busyboxApplets() : (options.applets ?? DEFAULT_APPLETS);
    layerLists.push(baseLayer(applets, user));
  }
  if (options.files && Object.keys(options.files).length) {
    layerLists.push(Object.entries(options.files).map(([p, content]): LayerEntry => ({ path: p, content })));
  }
  layerLists.push(...(options.layers ?? []));
  if (!layerLists.length) throw new Error('buildTestImage: an image needs at least one layer');
  const gzipLayers = options.gzipLayers ?? true;
  const blobs = new Map<string, Buffer>();
  const layers = layerLists.map((entries): TestLayer => {
    const tar = tarBytes(layerTarEntries(entries));
    const blob = gzipLayers ? gzipSync(tar) : tar;
    const layer = { blob, digest: sha256(blob), diffId: sha256(tar), mediaType: gzipLayers ? MEDIA_TYPES.ociLayerGzip : MEDIA_TYPES.ociLayer, tar };
    blobs.set(layer.digest, blob);
    return layer;
  });
  const busybox = (options.base ?? 'busybox') === 'busybox';
  const run: Record<string, unknown> = { Env: [DEFAULT_PATH, ...(options.env ?? [])] };
  if (options.entrypoint) run.Entrypoint = options.entrypoint;
  if (options.cmd ?? busybox) run.Cmd = options.cmd ?? ['sh'];
  if (options.workingDir) run.WorkingDir = options.workingDir;
  if (options.user) run.User = options.user;
  if (options.exposedPorts) run.ExposedPorts = Object.fromEntries(options.exposedPorts.map((p) => [p, {}]));
  if (options.labels) run.Labels = options.labels;
  if (options.stopSignal) run.StopSignal = options.stopSignal;
  const platform = hostPlatform();
  const architecture = options.architecture ?? platform.architecture;
  const config = Buffer.from(
    JSON.stringify({
      architecture,
      os: 'linux',
      created: MTIME.toISOString(),
      config: run,
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
      history: layers.map(() => ({ created: MTIME.toISOString(), created_by: 'drover test image builder' })),
    }),
  );
  const configDigest = sha256(config);
  blobs.set(configDigest, config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.ociManifest,
      config: { mediaType: MEDIA_TYPES.ociConfig, digest: configDigest, size: config.length },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.blob.length })),
    }),
  );
  const manifestDigest = sha256(manifest);
  blobs.set(manifestDigest, manifest);
  const image: TestImage = { ref, digest: manifestDigest, manifest, manifestDigest, config, configDigest, layers, blobs };
  if (options.multiPlatform) {
    const other = architecture === 'arm64' ? 'amd64' : 'arm64';
    const index = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MEDIA_TYPES.ociIndex,
        manifests: [
          // The other platform's manifest is listed but not included: only this platform's is needed.
          { mediaType: MEDIA_TYPES.ociManifest, digest: sha256(`absent ${other} manifest of ${ref}`), size: 1, platform: { architecture: other, os: 'linux' } },
          { mediaType: MEDIA_TYPES.ociManifest, digest: manifestDigest, size: manifest.length, platform: { architecture, os: 'linux' } },
        ],
      }),
    );
    image.index = index;
    image.indexDigest = sha256(index);
    image.digest = image.indexDigest;
    blobs.set(image.indexDigest, index);
  }
  return image;
}

// --- archives -------------------------------------------------------------------------------

function writeArchive(file: string, entries: TarEntry[], gzip: boolean): void {
  const tar = tarBytes(entries);
  fs.writeFileSync(file, gzip ? gzipSync(tar) : tar);
}

export interface OciArchiveOptions {
  gzip?: boolean;
  /**
   * How index.json names each image: `containerd` (default: `io.containerd.image.name` with the
   * full name and `org.opencontainers.image.ref.name` with the tag), `full` (the OCI annotation
   * with the full name), `tag` (the OCI annotation with the tag only), `none`.
   */
  naming?: 'containerd' | 'full' | 'tag' | 'none';
}

/** An OCI image layout archive (`oci-layout`, `index.json`, `blobs/sha256/…`) holding the images. */
export function writeOciArchive(images: TestImage | TestImage[], file: string, options: OciArchiveOptions = {}): void {
  const list = Array.isArray(images) ? images : [images];
  const naming = options.naming ?? 'containerd';
  const manifests = list.map((image) => {
    const tag = parseImageRef(image.ref).tag ?? 'latest';
    const annotations: Record<string, string> =
      naming === 'containerd'
        ? { 'io.containerd.image.name': image.ref, 'org.opencontainers.image.ref.name': tag }
        : naming === 'full'
          ? { 'org.opencontainers.image.ref.name': image.ref }
          : naming === 'tag'
            ? { 'org.opencontainers.image.ref.name': tag }
            : {};
    const top = image.index ?? image.manifest;
    return {
      mediaType: image.index ? MEDIA_TYPES.ociIndex : MEDIA_TYPES.ociManifest,
      digest: image.digest,
      size: top.length,
      ...(Object.keys(annotations).length ? { annotations } : {}),
    };
  });
  const blobs = new Map<string, Buffer>();
  for (const image of list) for (const [digest, blob] of image.blobs) blobs.set(digest, blob);
  writeArchive(
    file,
    [
      { path: 'oci-layout', type: 'File', content: Buffer.from(JSON.stringify({ imageLayoutVersion: '1.0.0' })) },
      { path: 'index.json', type: 'File', content: Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MEDIA_TYPES.ociIndex, manifests })) },
      { path: 'blobs', type: 'Directory' },
      { path: 'blobs/sha256', type: 'Directory' },
      ...[...blobs].map(([digest, content]): TarEntry => ({ path: `blobs/sha256/${digest.slice(7)}`, type: 'File', content })),
    ],
    options.gzip ?? false,
  );
}

export interface DockerArchiveOptions {
  gzip?: boolean;
  /** Tags in manifest.json as `docker save` writes them (default: the image's reference); [] for an untagged image. */
  repoTags?: string[];
  /** Write a layer another image already wrote as a symlink to it (as docker save does), not twice. */
  linkDuplicateLayers?: boolean;
}

/** A `docker save` archive (legacy layout: manifest.json, `<id>.json`, `<layer>/layer.tar`, uncompressed layers). */
export function writeDockerArchive(images: TestImage | TestImage[], file: string, options: DockerArchiveOptions = {}): void {
  const list = Array.isArray(images) ? images : [images];
  const entries: TarEntry[] = [];
  const written = new Map<string, string>();
  const manifest: { Config: string; RepoTags: string[] | null; Layers: string[] }[] = [];
  const repositories: Record<string, Record<string, string>> = {};
  for (const [i, image] of list.entries()) {
    const configName = `${image.configDigest.slice(7)}.json`;
    if (!entries.some((e) => e.path === configName)) entries.push({ path: configName, type: 'File', content: image.config });
    const layerNames: string[] = [];
    for (const layer of image.layers) {
      const first = written.get(layer.diffId);
      if (!options.linkDuplicateLayers) {
        const name = `${layer.diffId.slice(7)}/layer.tar`;
        if (first === undefined) {
          entries.push({ path: layer.diffId.slice(7), type: 'Directory' }, { path: name, type: 'File', content: layer.tar });
          written.set(layer.diffId, name);
        }
        layerNames.push(name);
        continue;
      }
      // docker save names a layer per image chain; the same content again is a symlink to the first.
      const id = createHash('sha256').update(`${i}/${layer.diffId}`).digest('hex');
      const name = `${id}/layer.tar`;
      entries.push({ path: id, type: 'Directory' });
      if (first === undefined) {
        entries.push({ path: name, type: 'File', content: layer.tar });
        written.set(layer.diffId, name);
      } else {
        entries.push({ path: name, type: 'SymbolicLink', linkpath: `../${first}` });
      }
      layerNames.push(name);
    }
    const tags = options.repoTags ?? [image.ref];
    manifest.push({ Config: configName, RepoTags: tags.length ? tags : null, Layers: layerNames });
    for (const tag of tags) {
      const parsed = parseImageRef(tag);
      (repositories[parsed.name] ??= {})[parsed.tag ?? 'latest'] = layerNames[layerNames.length - 1]!.split('/')[0]!;
    }
  }
  entries.push({ path: 'manifest.json', type: 'File', content: Buffer.from(JSON.stringify(manifest)) });
  entries.push({ path: 'repositories', type: 'File', content: Buffer.from(JSON.stringify(repositories)) });
  writeArchive(file, entries, options.gzip ?? false);
}
