import { createHash } from 'node:crypto';

/**
 * Manifests as a registry serves them: OCI image indexes and Docker manifest lists (one
 * manifest per platform; this node takes linux and its own architecture), OCI and Docker v2
 * image manifests (a config and layers). Schema 1 manifests are refused, as containerd refuses
 * them. Pure: parsing, checking and choosing.
 */

export const MEDIA = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerSchema1: 'application/vnd.docker.distribution.manifest.v1+json',
  dockerSchema1Signed: 'application/vnd.docker.distribution.manifest.v1+prettyjws',
} as const;

/** What a pull accepts, the way containerd asks for it (the most capable first). */
export const MANIFEST_ACCEPT = [MEDIA.ociIndex, MEDIA.dockerList, MEDIA.ociManifest, MEDIA.dockerManifest, '*/*;q=0.1'].join(', ');

/** Layer media types a node can unpack (tar, gzip; zstd is the store's to refuse or not). */
const LAYER_TYPES = new Set([
  'application/vnd.oci.image.layer.v1.tar',
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd',
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.diff.tar',
]);

const CONFIG_TYPES = new Set(['application/vnd.oci.image.config.v1+json', 'application/vnd.docker.container.image.v1+json']);

export const DIGEST = /^sha256:[a-f0-9]{64}$/;

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
}

export type ParsedManifest =
  | { kind: 'index'; mediaType: string; manifests: Descriptor[] }
  | { kind: 'image'; mediaType: string; config: Descriptor; layers: Descriptor[] };

export class ManifestError extends Error {
  override name = 'ManifestError';
}

export function sha256Digest(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function descriptor(value: unknown, what: string): Descriptor {
  if (!isObject(value)) throw new ManifestError(`${what} is not a descriptor`);
  const { mediaType, digest, size } = value;
  if (typeof mediaType !== 'string' || !mediaType) throw new ManifestError(`${what} has no mediaType`);
  if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new ManifestError(`${what} has no sha256 digest (${String(digest)})`);
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) throw new ManifestError(`${what} has no size`);
  const out: Descriptor = { mediaType, digest, size };
  if (isObject(value.platform)) {
    const p = value.platform;
    if (typeof p.os === 'string' && typeof p.architecture === 'string') {
      out.platform = { os: p.os, architecture: p.architecture, ...(typeof p.variant === 'string' && p.variant ? { variant: p.variant } : {}) };
    }
  }
  if (isObject(value.annotations)) out.annotations = value.annotations as Record<string, string>;
  return out;
}

/**
 * Parses a manifest body. `contentType` is the answer's Content-Type (parameters dropped); the
 * body's own `mediaType` decides when the header is generic.
 */
export function parseManifest(body: Buffer, contentType: string | undefined): ParsedManifest {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    throw new ManifestError('the manifest is not JSON');
  }
  if (!isObject(json)) throw new ManifestError('the manifest is not a JSON object');
  const header = contentType?.split(';')[0]!.trim().toLowerCase();
  const declared = typeof json.mediaType === 'string' ? json.mediaType : undefined;
  let type = header && header !== 'application/json' && header !== 'application/octet-stream' && header !== 'text/plain' ? header : declared;
  if (!type) type = Array.isArray(json.manifests) ? MEDIA.ociIndex : MEDIA.ociManifest;
  if (type === MEDIA.dockerSchema1 || type === MEDIA.dockerSchema1Signed || json.schemaVersion === 1) {
    throw new ManifestError('Docker schema 1 manifests are not supported (push the image again with a current client)');
  }
  if (json.schemaVersion !== 2) throw new ManifestError(`unsupported manifest schemaVersion ${String(json.schemaVersion)}`);
  if (type === MEDIA.ociIndex || type === MEDIA.dockerList) {
    if (!Array.isArray(json.manifests)) throw new ManifestError('the index has no manifests list');
    return { kind: 'index', mediaType: type, manifests: json.manifests.map((m, i) => descriptor(m, `manifests[${i}]`)) };
  }
  if (type === MEDIA.ociManifest || type === MEDIA.dockerManifest) {
    const config = descriptor(json.config, 'config');
    if (!CONFIG_TYPES.has(config.mediaType)) throw new ManifestError(`not a container image: its config is ${config.mediaType}`);
    if (!Array.isArray(json.layers)) throw new ManifestError('the manifest has no layers list');
    const layers = json.layers.map((l, i) => descriptor(l, `layers[${i}]`));
    for (const layer of layers) {
      if (!LAYER_TYPES.has(layer.mediaType)) throw new ManifestError(`layer ${layer.digest} has unsupported media type ${layer.mediaType}`);
    }
    return { kind: 'image', mediaType: type, config, layers };
  }
  throw new ManifestError(`unsupported manifest media type ${type}`);
}

/** This node's platform as OCI names it: linux and node's architecture (with the ARM variant). */
export function hostPlatform(arch: string = process.arch): Platform {
  switch (arch) {
    case 'x64':
      return { os: 'linux', architecture: 'amd64' };
    case 'arm64':
      return { os: 'linux', architecture: 'arm64', variant: 'v8' };
    case 'arm': {
      const version = (process.config.variables as { arm_version?: string }).arm_version;
      return { os: 'linux', architecture: 'arm', variant: `v${version ?? '7'}` };
    }
    case 'ia32':
      return { os: 'linux', architecture: '386' };
    case 'ppc64':
      return { os: 'linux', architecture: 'ppc64le' };
    default:
      return { os: 'linux', architecture: arch };
  }
}

function describePlatform(p: Platform | undefined): string {
  return p ? `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}` : 'unknown';
}

/**
 * The index entry for `platform`: same os and architecture; a matching variant preferred, then
 * one without a variant (arm64's `v8` is the default variant). Attestation manifests
 * (`unknown/unknown`) never match. Throws ManifestError listing what the index offers.
 */
export function choosePlatform(manifests: readonly Descriptor[], platform: Platform): Descriptor {
  const candidates = manifests.filter(
    (m) => m.platform && m.platform.os === platform.os && m.platform.architecture === platform.architecture && m.mediaType !== MEDIA.ociIndex && m.mediaType !== MEDIA.dockerList,
  );
  const defaultVariant = platform.architecture === 'arm64' ? 'v8' : undefined;
  const exact = candidates.find((m) => (m.platform!.variant ?? defaultVariant) === platform.variant);
  const plain = candidates.find((m) => !m.platform!.variant);
  const chosen = exact ?? plain ?? (platform.variant ? undefined : candidates[0]);
  if (!chosen) {
    const offered = [...new Set(manifests.map((m) => describePlatform(m.platform)))].join(', ') || 'nothing';
    throw new ManifestError(`no manifest for ${describePlatform(platform)} in the image index (it has: ${offered})`);
  }
  return chosen;
}
