/**
 * Embedded-registry peer advertisements (docs/registry.md): which images a node's embedded
 * registry can serve, in ONE ConfigMap per node, named after the node, in the node namespace
 * (`kube-node-lease`, beside its Lease) and labelled REGISTRY_PEER_LABEL. The agent writes it when
 * its image store changes (debounced), never on heartbeats; pulling nodes watch them all. Node
 * restriction lets a node write only its own and read everyone's
 * (src/cluster/node-authorization.ts). Pure: agents and the node authorizer share it.
 *
 * Content, one image a line: `<reference> <digest>[ <platform manifest digest>]`, where the
 * digest is what the reference points at (an index for a multi-platform image) and the third
 * field, when present, the manifest for the node's platform. No blobs are listed: a node that
 * advertises a manifest holds all its blobs (it advertises only complete images), so a line is
 * about 150 bytes and 200 images about 30 KB, whatever the layers.
 */

import { NODE_LEASE_NAMESPACE } from './names.js';

export const REGISTRY_PEER_NAMESPACE = NODE_LEASE_NAMESPACE;
export const REGISTRY_PEER_LABEL = 'drover.io/registry-peer';
/** The uid of the Node that wrote it: an advertisement from an older incarnation is ignored. */
export const REGISTRY_PEER_NODE_UID_ANNOTATION = 'drover.io/node-uid';
/** The data key holding the lines. */
export const REGISTRY_PEER_DATA_KEY = 'images';
/** At most this many lines are advertised (the least recently used images are left out beyond it). */
export const MAX_ADVERTISED_IMAGES = 2000;

const DIGEST = /^sha256:[a-f0-9]{64}$/;

export interface AdvertisedImage {
  /** Normalized reference (`docker.io/library/busybox:1.36`), or a digest for an unnamed image. */
  ref: string;
  digest: string;
  /** The platform manifest, when `digest` is an index. */
  manifestDigest?: string;
}

/** The data value for `images` (sorted, so the same content is the same text: no needless writes). */
export function encodeAdvertisement(images: readonly AdvertisedImage[]): string {
  const lines = images
    .filter((i) => DIGEST.test(i.digest) && !/\s/.test(i.ref) && i.ref !== '')
    .map((i) => [i.ref, i.digest, ...(i.manifestDigest && i.manifestDigest !== i.digest ? [i.manifestDigest] : [])].join(' '))
    .sort();
  return lines.slice(0, MAX_ADVERTISED_IMAGES).join('\n');
}

/** The lines of an advertisement; malformed lines (another writer's, a newer format's) are skipped. */
export function decodeAdvertisement(text: string | undefined): AdvertisedImage[] {
  const out: AdvertisedImage[] = [];
  for (const line of (text ?? '').split('\n')) {
    const [ref, digest, manifestDigest, extra] = line.trim().split(/\s+/);
    if (!ref || !digest || !DIGEST.test(digest) || extra !== undefined) continue;
    if (manifestDigest !== undefined && !DIGEST.test(manifestDigest)) continue;
    out.push({ ref, digest, ...(manifestDigest ? { manifestDigest } : {}) });
  }
  return out;
}
