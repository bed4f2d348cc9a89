import { createHash } from 'node:crypto';
import { type Descriptor, hostPlatform, ImageFormatError, MEDIA_TYPES, type ManifestDocument, parseManifestDocument, type Platform, platformManifests } from '../oci.js';

/**
 * Manifests as a registry serves them, on top of the store's own parsers (../oci.ts): what a
 * pull asks for, what it refuses before fetching any blob (Docker schema 1, artifacts that are
 * not container images, layer types a node cannot unpack), and which manifest of an index this
 * node takes, the one the store resolves too (linux and its architecture, the index's first).
 */

export const SCHEMA1_TYPES = ['application/vnd.docker.distribution.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v1+prettyjws'];

/** What a pull accepts, as containerd asks for it. */
export const MANIFEST_ACCEPT = [MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerManifestList, MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest, '*/*;q=0.1'].join(', ');

const CONFIG_TYPES: ReadonlySet<string> = new Set([MEDIA_TYPES.ociConfig, MEDIA_TYPES.dockerConfig]);
const LAYER_TYPES: ReadonlySet<string> = new Set([
  MEDIA_TYPES.ociLayer,
  MEDIA_TYPES.ociLayerGzip,
  MEDIA_TYPES.dockerLayer,
  MEDIA_TYPES.dockerLayerGzip,
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
]);

export const DIGEST = /^sha256:[a-f0-9]{64}$/;

export class ManifestError extends Error {
  override name = 'ManifestError';
}

export function sha256Digest(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/**
 * A manifest or index body as a registry answered it (`contentType` is the answer's header),
 * checked for what a node can run. Throws ManifestError saying why not.
 */
export function parsePullable(body: Buffer, contentType: string | undefined): ManifestDocument {
  const header = contentType?.split(';')[0]!.trim().toLowerCase();
  if (header && SCHEMA1_TYPES.includes(header)) {
    throw new ManifestError('Docker schema 1 manifests are not supported (push the image again with a current client)');
  }
  let doc: ManifestDocument;
  try {
    doc = parseManifestDocument(body, 'the manifest');
  } catch (error) {
    if (error instanceof ImageFormatError) throw new ManifestError(error.message);
    throw error;
  }
  if (doc.kind === 'manifest') {
    const { config, layers } = doc.manifest;
    if (!CONFIG_TYPES.has(config.mediaType)) throw new ManifestError(`not a container image: its config is ${config.mediaType}`);
    for (const layer of layers) {
      if (!LAYER_TYPES.has(layer.mediaType)) throw new ManifestError(`layer ${layer.digest} has media type ${layer.mediaType}, which a node cannot unpack`);
    }
  }
  return doc;
}

function describe(p: Platform | undefined): string {
  return p ? `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}` : 'no platform';
}

/** The index entry this node runs (the one the store resolves the index to). Throws ManifestError listing what the index has. */
export function choosePlatform(manifests: readonly Descriptor[], platform: Platform = hostPlatform()): Descriptor {
  const chosen = platformManifests({ schemaVersion: 2, manifests: [...manifests] }, platform)[0];
  if (!chosen) {
    const offered = [...new Set(manifests.map((m) => describe(m.platform)))].join(', ') || 'nothing';
    throw new ManifestError(`no manifest for ${describe(platform)} in the image index (it has: ${offered})`);
  }
  return chosen;
}
