import { isSha256Digest } from './reference.js';

/**
 * The OCI image format's documents (image-spec v1.1) and their Docker schema 2 equivalents, as
 * far as a node needs them: descriptors, manifests, indexes (manifest lists), image configs.
 * Every document read from a blob or an archive goes through the parsers here, so nothing below
 * trusts a field it did not check.
 */

export const MEDIA_TYPES = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  ociLayerZstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerManifestList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayer: 'application/vnd.docker.image.rootfs.diff.tar',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  dockerForeignLayerGzip: 'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
} as const;

const MANIFEST_TYPES: ReadonlySet<string> = new Set([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);
const INDEX_TYPES: ReadonlySet<string> = new Set([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerManifestList]);

/** The annotation that names an image in an OCI layout written by containerd, BuildKit or Drover's tests. */
export const ANNOTATION_IMAGE_NAME = 'io.containerd.image.name';
/** The OCI layout's own name annotation: a full reference, or (commonly) just the tag. */
export const ANNOTATION_REF_NAME = 'org.opencontainers.image.ref.name';

export class ImageFormatError extends Error {
  override name = 'ImageFormatError';
}

export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: Platform;
}

export interface ImageManifest {
  schemaVersion: 2;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

export interface ImageIndex {
  schemaVersion: 2;
  mediaType?: string;
  manifests: Descriptor[];
  annotations?: Record<string, string>;
}

/** What a container starts with, from the image (its `config` object). */
export interface ImageRunConfig {
  User?: string;
  Env?: string[];
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  WorkingDir?: string;
  ExposedPorts?: Record<string, object>;
  Volumes?: Record<string, object>;
  Labels?: Record<string, string>;
  StopSignal?: string;
}

export interface ImageConfig {
  architecture: string;
  os: string;
  variant?: string;
  created?: string;
  config?: ImageRunConfig;
  rootfs: { type: 'layers'; diff_ids: string[] };
  history?: unknown[];
}

export type ManifestDocument = { kind: 'manifest'; manifest: ImageManifest } | { kind: 'index'; index: ImageIndex };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringMap(value: unknown, what: string): Record<string, string> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isRecord(value) || Object.values(value).some((v) => typeof v !== 'string')) {
    throw new ImageFormatError(`${what} must be a map of strings`);
  }
  return value as Record<string, string>;
}

export function parseDescriptor(value: unknown, what: string): Descriptor {
  if (!isRecord(value)) throw new ImageFormatError(`${what} is not a descriptor object`);
  const { mediaType, digest, size } = value;
  if (typeof mediaType !== 'string' || mediaType === '') throw new ImageFormatError(`${what} has no mediaType`);
  if (typeof digest !== 'string' || !isSha256Digest(digest)) {
    throw new ImageFormatError(`${what} digest ${JSON.stringify(digest)} is not a sha256 digest`);
  }
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) throw new ImageFormatError(`${what} size must be a whole number >= 0`);
  const descriptor: Descriptor = { mediaType, digest, size };
  const annotations = stringMap(value.annotations, `${what} annotations`);
  if (annotations) descriptor.annotations = annotations;
  if (value.platform !== undefined) {
    const p = value.platform;
    if (!isRecord(p) || typeof p.architecture !== 'string' || typeof p.os !== 'string') {
      throw new ImageFormatError(`${what} platform needs architecture and os`);
    }
    descriptor.platform = { architecture: p.architecture, os: p.os, ...(typeof p.variant === 'string' ? { variant: p.variant } : {}) };
  }
  return descriptor;
}

function parseJson(bytes: Buffer | string, what: string): unknown {
  try {
    return JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch (error) {
    throw new ImageFormatError(`${what} is not valid JSON: ${(error as Error).message}`);
  }
}

/** A manifest or an index, told apart by its mediaType or, where that is absent, by its fields. */
export function parseManifestDocument(bytes: Buffer | string, what = 'manifest'): ManifestDocument {
  const value = parseJson(bytes, what);
  if (!isRecord(value)) throw new ImageFormatError(`${what} is not a JSON object`);
  if (value.schemaVersion !== 2) throw new ImageFormatError(`${what} has schemaVersion ${JSON.stringify(value.schemaVersion)}; only 2 is supported`);
  const mediaType = typeof value.mediaType === 'string' ? value.mediaType : undefined;
  const annotations = stringMap(value.annotations, `${what} annotations`);
  const isIndex = mediaType ? INDEX_TYPES.has(mediaType) : Array.isArray(value.manifests);
  if (isIndex) {
    if (!Array.isArray(value.manifests)) throw new ImageFormatError(`${what} is an index without a manifests list`);
    const manifests = value.manifests.map((m, i) => parseDescriptor(m, `${what} manifests[${i}]`));
    return { kind: 'index', index: { schemaVersion: 2, ...(mediaType ? { mediaType } : {}), manifests, ...(annotations ? { annotations } : {}) } };
  }
  if (mediaType && !MANIFEST_TYPES.has(mediaType)) throw new ImageFormatError(`${what} has media type ${mediaType}, which is not an image manifest or index`);
  if (!Array.isArray(value.layers)) throw new ImageFormatError(`${what} has no layers list`);
  const config = parseDescriptor(value.config, `${what} config`);
  const layers = value.layers.map((l, i) => parseDescriptor(l, `${what} layers[${i}]`));
  for (const layer of layers) {
    if (layer.mediaType === MEDIA_TYPES.ociLayerZstd || layer.mediaType.endsWith('+zstd')) {
      throw new ImageFormatError(`${what}: layer ${layer.digest} is zstd-compressed (${layer.mediaType}), which Drover does not unpack; use gzip or uncompressed layers`);
    }
  }
  return {
    kind: 'manifest',
    manifest: { schemaVersion: 2, ...(mediaType ? { mediaType } : {}), config, layers, ...(annotations ? { annotations } : {}) },
  };
}

function stringList(value: unknown, what: string): string[] | null | undefined {
  if (value === undefined || value === null) return value as null | undefined;
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) throw new ImageFormatError(`${what} must be a list of strings`);
  return value as string[];
}

/** An image config: its run config checked field by field, its diff ids as sha256 digests. */
export function parseImageConfig(bytes: Buffer | string, what = 'image config'): ImageConfig {
  const value = parseJson(bytes, what);
  if (!isRecord(value)) throw new ImageFormatError(`${what} is not a JSON object`);
  const { architecture, os, rootfs } = value;
  if (typeof architecture !== 'string' || typeof os !== 'string') throw new ImageFormatError(`${what} needs architecture and os`);
  if (!isRecord(rootfs) || rootfs.type !== 'layers' || !Array.isArray(rootfs.diff_ids)) {
    throw new ImageFormatError(`${what} needs rootfs {type: layers, diff_ids: [...]}`);
  }
  const diffIds = rootfs.diff_ids as unknown[];
  for (const id of diffIds) {
    if (typeof id !== 'string' || !isSha256Digest(id)) throw new ImageFormatError(`${what}: diff id ${JSON.stringify(id)} is not a sha256 digest`);
  }
  const config: ImageConfig = { architecture, os, rootfs: { type: 'layers', diff_ids: diffIds as string[] } };
  if (typeof value.variant === 'string') config.variant = value.variant;
  if (typeof value.created === 'string') config.created = value.created;
  if (Array.isArray(value.history)) config.history = value.history;
  if (value.config !== undefined && value.config !== null) {
    const c = value.config;
    if (!isRecord(c)) throw new ImageFormatError(`${what} config must be an object`);
    const run: ImageRunConfig = {};
    if (c.User !== undefined && c.User !== null) {
      if (typeof c.User !== 'string') throw new ImageFormatError(`${what} config.User must be a string`);
      run.User = c.User;
    }
    if (c.WorkingDir !== undefined && c.WorkingDir !== null) {
      if (typeof c.WorkingDir !== 'string') throw new ImageFormatError(`${what} config.WorkingDir must be a string`);
      run.WorkingDir = c.WorkingDir;
    }
    if (c.StopSignal !== undefined && c.StopSignal !== null) {
      if (typeof c.StopSignal !== 'string') throw new ImageFormatError(`${what} config.StopSignal must be a string`);
      run.StopSignal = c.StopSignal;
    }
    const env = stringList(c.Env, `${what} config.Env`);
    if (env) run.Env = env;
    const entrypoint = stringList(c.Entrypoint, `${what} config.Entrypoint`);
    if (entrypoint !== undefined) run.Entrypoint = entrypoint;
    const cmd = stringList(c.Cmd, `${what} config.Cmd`);
    if (cmd !== undefined) run.Cmd = cmd;
    for (const key of ['ExposedPorts', 'Volumes'] as const) {
      const v = c[key];
      if (v === undefined || v === null) continue;
      if (!isRecord(v)) throw new ImageFormatError(`${what} config.${key} must be a map`);
      run[key] = v as Record<string, object>;
    }
    const labels = stringMap(c.Labels, `${what} config.Labels`);
    if (labels) run.Labels = labels;
    config.config = run;
  }
  return config;
}

/** This machine's platform as OCI names it (Node's `x64` is `amd64`). */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };
  return { os: 'linux', architecture: arch[process.arch] ?? process.arch };
}

/** Whether an index entry is for this platform (an entry without a platform is taken as one). */
export function matchesPlatform(descriptor: Descriptor, platform: Platform = hostPlatform()): boolean {
  if (!descriptor.platform) return true;
  if (descriptor.platform.os !== platform.os || descriptor.platform.architecture !== platform.architecture) return false;
  // arm64 images are v8 whether or not they say so; other variants must match when both name one.
  if (platform.variant && descriptor.platform.variant && descriptor.platform.variant !== platform.variant) return false;
  return true;
}

/**
 * The manifests of an index this platform can run, best first: exact platform entries in the
 * index's order; attestation manifests (BuildKit's `unknown/unknown`) never match.
 */
export function platformManifests(index: ImageIndex, platform: Platform = hostPlatform()): Descriptor[] {
  return index.manifests.filter((m) => (MANIFEST_TYPES.has(m.mediaType) || INDEX_TYPES.has(m.mediaType)) && matchesPlatform(m, platform));
}

export function isIndexMediaType(mediaType: string): boolean {
  return INDEX_TYPES.has(mediaType);
}

export function isManifestMediaType(mediaType: string): boolean {
  return MANIFEST_TYPES.has(mediaType);
}
