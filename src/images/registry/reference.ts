import { type ImageRef, parseImageRef } from '../reference.js';

/**
 * What the registry side adds to image references (../reference.ts parses and normalizes them):
 * what a pull asks a registry for, and Kubernetes' default pull policy.
 */

/** What a pull asks a registry for: the digest when pinned, else the tag (`latest` by default). */
export function manifestReference(ref: ImageRef): string {
  return ref.digest ?? ref.tag ?? 'latest';
}

/**
 * Kubernetes' default `imagePullPolicy`: `Always` when the image's tag is `latest` or it has no
 * tag and no digest, `IfNotPresent` otherwise. An image that does not parse gets IfNotPresent
 * (it fails with InvalidImageName before any policy matters).
 */
export function defaultPullPolicy(image: string): 'Always' | 'IfNotPresent' {
  try {
    return parseImageRef(image).tag === 'latest' ? 'Always' : 'IfNotPresent';
  } catch {
    return 'IfNotPresent';
  }
}
