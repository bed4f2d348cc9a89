import { ImageRefError, parseImageRef } from '../reference.js';

/**
 * The read side of the OCI Distribution API as a node's embedded registry answers it: which
 * request a `/v2/…` path is, and which record of the image store a manifest-by-tag request
 * names. Pure (no I/O), so the rules are unit-tested on their own (test/unit/registry-server.test.ts).
 *
 * A mirrored registry's host travels as the `ns` query parameter, as containerd sends it to a
 * mirror (`GET /v2/library/busybox/manifests/1.36?ns=docker.io`): the path carries the
 * repository inside that registry. Without `ns` the name is read as an image reference's name
 * (`docker.io/library/busybox`, or `library/busybox` for Docker Hub), which is what a person with
 * curl types. By digest, the name only has to be well formed: content is served by its digest,
 * whatever repository asked for it.
 */

/** The Distribution spec's error codes this registry answers with. */
export type DistributionErrorCode =
  | 'BLOB_UNKNOWN'
  | 'DIGEST_INVALID'
  | 'MANIFEST_UNKNOWN'
  | 'NAME_INVALID'
  | 'NAME_UNKNOWN'
  | 'UNAUTHORIZED'
  | 'UNSUPPORTED'
  | 'TOOMANYREQUESTS'
  | 'UNAVAILABLE';

export class DistributionError extends Error {
  override name = 'DistributionError';
  constructor(
    readonly status: number,
    readonly code: DistributionErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** The body of an error answer: `{"errors":[{"code","message","detail"}]}`. */
export function errorBody(code: DistributionErrorCode, message: string): string {
  return JSON.stringify({ errors: [{ code, message, detail: null }] });
}

export type DistributionRequest =
  | { kind: 'version' }
  | { kind: 'manifest'; name: string; digest: string }
  | { kind: 'manifest'; name: string; tag: string; ns: string | undefined }
  | { kind: 'blob'; name: string; digest: string };

/** A repository name: path components of lowercase alphanumerics and separators (distribution-spec). */
const NAME = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$/;
const TAG = /^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$/;
const DIGEST = /^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/;
const SHA256 = /^sha256:[a-f0-9]{64}$/;
/** Many clients cap host + `/` + name at 255 characters; so does this registry. */
const MAX_NAME = 255;

/** Whether a path is the registry's (`/v2` or under `/v2/`): the agent's endpoint routes these here. */
export function isDistributionPath(pathname: string): boolean {
  return pathname === '/v2' || pathname.startsWith('/v2/');
}

/**
 * The request a method, path and query make. Anything that is not a read (push, delete, uploads)
 * is 405; paths of the API this registry does not serve (tags/list, referrers, catalog) are 404
 * UNSUPPORTED; a malformed name, tag or digest is 400.
 */
export function parseDistributionRequest(method: string, pathname: string, query: URLSearchParams): DistributionRequest {
  if (method !== 'GET' && method !== 'HEAD') {
    throw new DistributionError(405, 'UNSUPPORTED', `${method} is not served: this registry is read-only (GET and HEAD only)`);
  }
  if (pathname === '/v2' || pathname === '/v2/') return { kind: 'version' };
  const rest = pathname.slice('/v2/'.length);
  const match = /^(.+)\/(manifests|blobs)\/([^/]+)$/.exec(rest);
  if (!match) throw new DistributionError(404, 'UNSUPPORTED', `${pathname}: only /v2/<name>/manifests/<reference> and /v2/<name>/blobs/<digest> are served`);
  const [, rawName, what, rawReference] = match as unknown as [string, string, 'manifests' | 'blobs', string];
  let name: string;
  let reference: string;
  try {
    name = decodeURIComponent(rawName);
    reference = decodeURIComponent(rawReference);
  } catch {
    throw new DistributionError(400, 'NAME_INVALID', `${pathname}: bad percent-encoding`);
  }
  if (name.length > MAX_NAME || !NAME.test(name)) {
    throw new DistributionError(400, 'NAME_INVALID', `repository name "${name}" is not valid (lowercase path components separated by /, at most ${MAX_NAME} characters)`);
  }
  const isDigest = reference.includes(':');
  if (what === 'blobs' || isDigest) {
    if (!DIGEST.test(reference)) throw new DistributionError(400, 'DIGEST_INVALID', `"${reference}" is not a digest (algorithm:hex)`);
    if (!SHA256.test(reference)) {
      // Well formed but not what this store holds: a miss, so the client tries its next source.
      throw new DistributionError(404, what === 'blobs' ? 'BLOB_UNKNOWN' : 'MANIFEST_UNKNOWN', `${reference}: only sha256 content is held (64 lowercase hex characters)`);
    }
    return what === 'blobs' ? { kind: 'blob', name, digest: reference } : { kind: 'manifest', name, digest: reference };
  }
  if (!TAG.test(reference)) throw new DistributionError(400, 'NAME_INVALID', `tag "${reference}" is not valid (letters, digits, _ . -, at most 128, not starting with . or -)`);
  const ns = query.get('ns') ?? undefined;
  return { kind: 'manifest', name, tag: reference, ns: ns === '' ? undefined : ns };
}

/**
 * The image store's reference for a manifest-by-tag request: `<ns>/<name>:<tag>`, normalized as
 * the store normalizes names (`docker.io` + `busybox` → `docker.io/library/busybox:<tag>`);
 * without `ns`, `<name>:<tag>` read as an image reference.
 */
export function storeReference(name: string, tag: string, ns: string | undefined): string {
  if (ns === undefined) return parseRef(`${name}:${tag}`).ref;
  // `index.docker.io` is Docker Hub's old name; parseImageRef maps it to docker.io.
  const parsed = parseRef(`${ns}/${name}:${tag}`);
  const expected = ns === 'index.docker.io' ? 'docker.io' : ns;
  if (parsed.domain !== expected) {
    // `ns=myregistry` would otherwise read as a Docker Hub repository `myregistry/<name>`.
    throw new DistributionError(400, 'NAME_INVALID', `ns "${ns}" is not a registry host (a host name with a dot or a port, or localhost)`);
  }
  return parsed.ref;
}

function parseRef(text: string): ReturnType<typeof parseImageRef> {
  try {
    return parseImageRef(text);
  } catch (error) {
    if (error instanceof ImageRefError) throw new DistributionError(400, 'NAME_INVALID', error.message);
    throw error;
  }
}
