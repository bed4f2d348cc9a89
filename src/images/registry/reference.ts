/**
 * Image references as container runtimes read them (the distribution reference grammar): an
 * optional registry host, a repository path, an optional tag and an optional digest. A name is
 * a registry host only when its first component has a `.` or a `:` or is `localhost`; otherwise
 * the image is on Docker Hub (`docker.io`), where a one-component name lives under `library/`.
 * Pure: no I/O.
 */

export const DOCKER_HUB = 'docker.io';
export const DEFAULT_TAG = 'latest';

export interface ImageReference {
  /** Registry host[:port], lower case, `docker.io` for Docker Hub. */
  registry: string;
  /** Repository path inside the registry (`library/busybox`). */
  repository: string;
  tag?: string;
  /** `sha256:<64 hex>`. */
  digest?: string;
}

export class ReferenceError extends Error {
  override name = 'ReferenceError';
}

// Path components: lower-case alphanumerics joined by `.`, `_`, `__` or runs of `-`.
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
// A host (labels of letters, digits and `-`, or a bracketed IPv6 address) with an optional port.
const HOST = /^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$/;
const SHA256 = /^sha256:[a-f0-9]{64}$/;
const MAX_NAME = 255;

function looksLikeHost(component: string): boolean {
  return component.includes('.') || component.includes(':') || component === 'localhost' || component.startsWith('[');
}

/**
 * Parses `text` (`busybox`, `busybox:1.36`, `registry.local:5000/team/app@sha256:…`). Throws
 * ReferenceError saying what is wrong, in the words runtimes use ("invalid reference format").
 */
export function parseReference(text: string): ImageReference {
  const invalid = (why: string): ReferenceError => new ReferenceError(`couldn't parse image name "${text}": invalid reference format: ${why}`);
  if (!text) throw invalid('empty');
  if (text !== text.trim()) throw invalid('surrounding white space');
  let rest = text;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid(`"${digest}" is not a digest`);
    if (digest.startsWith('sha256:') && !SHA256.test(digest)) throw invalid(`"${digest}" is not a sha256 digest (64 lower-case hex digits)`);
  }
  let tag: string | undefined;
  // A tag follows the last `:` after the last `/` (a `:` before it is a registry port).
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(`"${tag}" is not a valid tag`);
  }
  if (!rest) throw invalid('no repository name');
  const parts = rest.split('/');
  let registry = DOCKER_HUB;
  if (parts.length > 1 && looksLikeHost(parts[0]!)) {
    registry = parts.shift()!;
    if (!HOST.test(registry)) throw invalid(`"${registry}" is not a registry host`);
    registry = registry.toLowerCase();
  }
  for (const part of parts) {
    if (!COMPONENT.test(part)) {
      throw invalid(/[A-Z]/.test(part) ? `repository name must be lowercase ("${part}")` : `"${part}" is not a valid path component`);
    }
  }
  if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = DOCKER_HUB;
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift('library');
  const repository = parts.join('/');
  if (registry.length + 1 + repository.length > MAX_NAME) throw invalid(`name longer than ${MAX_NAME} characters`);
  return { registry, repository, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/** `registry/repository` (the name the image is known by, whatever mirror served it). */
export function repositoryName(ref: ImageReference): string {
  return `${ref.registry}/${ref.repository}`;
}

/**
 * The full normalized reference: `docker.io/library/busybox:latest`. Without a tag or digest the
 * tag is `latest`; with a digest and no tag, only the digest.
 */
export function formatReference(ref: ImageReference): string {
  const tag = ref.tag ?? (ref.digest ? undefined : DEFAULT_TAG);
  return `${repositoryName(ref)}${tag !== undefined ? `:${tag}` : ''}${ref.digest ? `@${ref.digest}` : ''}`;
}

/** What a pull asks a registry for: the digest when pinned, else the tag (`latest` by default). */
export function manifestReference(ref: ImageReference): string {
  return ref.digest ?? ref.tag ?? DEFAULT_TAG;
}

/**
 * Kubernetes' default `imagePullPolicy`: `Always` when the image's tag is `latest` or it has no
 * tag and no digest, `IfNotPresent` otherwise. An image that does not parse gets IfNotPresent
 * (it fails with InvalidImageName before any policy matters).
 */
export function defaultPullPolicy(image: string): 'Always' | 'IfNotPresent' {
  try {
    const ref = parseReference(image);
    const tag = ref.tag ?? (ref.digest ? undefined : DEFAULT_TAG);
    return tag === DEFAULT_TAG ? 'Always' : 'IfNotPresent';
  } catch {
    return 'IfNotPresent';
  }
}
