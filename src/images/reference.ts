/**
 * Image references as containerd and the kubelet read them (the grammar of the distribution
 * project's reference package): `busybox` is `docker.io/library/busybox:latest`, a first path
 * component is a registry host only when it has a dot or a port or is `localhost`, a digest pins
 * the content and then no tag is implied. Written from the documented grammar, not copied.
 */

export class ImageRefError extends Error {
  override name = 'ImageRefError';
}

export interface ImageRef {
  /** Registry host, with its port when given: `docker.io`, `localhost:5000`, `[::1]:5000`. */
  domain: string;
  /** Repository path in the registry: `library/busybox`, `team/app`. */
  path: string;
  /** The tag; `latest` when neither a tag nor a digest was given. */
  tag?: string;
  /** `sha256:<64 hex>` when the reference pins the content. */
  digest?: string;
  /** `domain/path`. */
  name: string;
  /** The whole normalized reference: `name:tag`, `name@digest` or `name:tag@digest`. */
  ref: string;
}

export const DEFAULT_DOMAIN = 'docker.io';
const LEGACY_DEFAULT_DOMAIN = 'index.docker.io';
const OFFICIAL_PREFIX = 'library/';
const MAX_NAME_LENGTH = 255;

// One path component: lowercase alphanumerics joined by single separators (`.`, `_`, `__`, dashes).
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
// A host name label sequence, or an IPv6 address in brackets; then an optional port.
const DOMAIN = /^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^([a-z0-9]+(?:[.+_-][a-z0-9]+)*):([a-zA-Z0-9=_-]+)$/;
export const SHA256_DIGEST = /^sha256:[a-f0-9]{64}$/;

/** Whether `text` is a `sha256:<64 lowercase hex>` digest. */
export function isSha256Digest(text: string): boolean {
  return SHA256_DIGEST.test(text);
}

function checkDigest(digest: string, whole: string): string {
  const match = DIGEST.exec(digest);
  if (!match) throw new ImageRefError(`image reference "${whole}": "${digest}" is not a digest (algorithm:hex)`);
  if (match[1] !== 'sha256') {
    throw new ImageRefError(`image reference "${whole}": digest algorithm ${match[1]} is not supported (sha256 only)`);
  }
  if (!SHA256_DIGEST.test(digest)) {
    throw new ImageRefError(`image reference "${whole}": a sha256 digest is 64 lowercase hex characters, got "${match[2]}"`);
  }
  return digest;
}

/** Splits and checks a reference, filling in the default registry, `library/` and `latest`. */
export function parseImageRef(input: string): ImageRef {
  const whole = input;
  if (typeof input !== 'string' || input.trim() === '') throw new ImageRefError('image reference is empty');
  if (input !== input.trim() || /\s/.test(input)) throw new ImageRefError(`image reference "${whole}" contains whitespace`);
  let rest = input;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = checkDigest(rest.slice(at + 1), whole);
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.indexOf(':', lastSlash + 1);
  if (colon >= 0) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) {
      throw new ImageRefError(`image reference "${whole}": tag "${tag}" is not valid (letters, digits, _ . -, at most 128, not starting with . or -)`);
    }
  }
  if (rest === '') throw new ImageRefError(`image reference "${whole}" has no repository name`);
  let domain = DEFAULT_DOMAIN;
  let path = rest;
  const slash = rest.indexOf('/');
  if (slash >= 0) {
    const first = rest.slice(0, slash);
    // The first component is a registry only when it cannot be a repository path component.
    if (first.includes('.') || first.includes(':') || first === 'localhost' || first.toLowerCase() !== first) {
      domain = first;
      path = rest.slice(slash + 1);
      if (!DOMAIN.test(domain)) throw new ImageRefError(`image reference "${whole}": "${domain}" is not a valid registry host[:port]`);
    }
  }
  if (domain === LEGACY_DEFAULT_DOMAIN) domain = DEFAULT_DOMAIN;
  if (domain === DEFAULT_DOMAIN && !path.includes('/')) path = OFFICIAL_PREFIX + path;
  for (const component of path.split('/')) {
    if (component.toLowerCase() !== component) {
      throw new ImageRefError(`image reference "${whole}": repository name must be lowercase`);
    }
    if (!PATH_COMPONENT.test(component)) {
      throw new ImageRefError(
        `image reference "${whole}": "${component}" is not a valid repository path component (lowercase letters, digits, separated by . _ __ or -)`,
      );
    }
  }
  const name = `${domain}/${path}`;
  if (name.length > MAX_NAME_LENGTH) throw new ImageRefError(`image reference "${whole}": repository name is longer than ${MAX_NAME_LENGTH} characters`);
  if (tag === undefined && digest === undefined) tag = 'latest';
  const ref = `${name}${tag !== undefined ? `:${tag}` : ''}${digest !== undefined ? `@${digest}` : ''}`;
  return { domain, path, name, ref, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/** `busybox` → `docker.io/library/busybox:latest`, as containerd and Kubernetes normalize it. */
export function normalizeImageRef(input: string): string {
  return parseImageRef(input).ref;
}

/**
 * Whether a reference's tag is `latest`, given or implied (no tag and no digest): Kubernetes'
 * default pull policy is Always for those and IfNotPresent otherwise.
 */
export function isLatestTag(input: string): boolean {
  return parseImageRef(input).tag === 'latest';
}

/**
 * An image's repo digest, as kubelet shows a container's imageID: the name without its tag, `@`,
 * the manifest digest (`docker.io/library/busybox@sha256:…`).
 */
export function repoDigest(ref: string, digest: string): string {
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  const name = ref.includes('@') ? ref.slice(0, ref.indexOf('@')) : colon > slash ? ref.slice(0, colon) : ref;
  return `${name}@${digest}`;
}
