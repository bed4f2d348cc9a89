import type { ResourceDefinition } from './definition.js';
import { errors } from './errors.js';
import { queryBool } from './query.js';
import { parseFieldSelector } from './selectors.js';
import type { ResourceRegistry } from './resources.js';

/**
 * What a resource request addresses, parsed from its path the way Kubernetes' RequestInfo does:
 * `/api/v1` or `/apis/<group>/<version>`, then an optional legacy `watch/` segment, then
 * optionally `namespaces/<ns>/`, then `<resource>[/<name>[/<subresource>]]`; and its verb.
 */

export interface ResourceRequest {
  def: ResourceDefinition;
  namespace?: string;
  name?: string;
  subresource?: string;
  /** `/api/v1/watch/...` legacy watch path. */
  legacyWatch: boolean;
}

/** `namespaces/<name>/<these>` is the namespace object's own subresource, not a namespaced resource. */
const NAMESPACE_SUBRESOURCES = new Set(['status', 'finalize']);

/**
 * A namespace or name taken from the URL, checked as kube-apiserver checks path segments: an
 * encoded `/` (`%2F`) must not reach the store, whose keys are paths.
 */
function checkPathSegment(value: string, what: string): void {
  const problem =
    value === '.' || value === '..'
      ? `may not be '${value}'`
      : value.includes('/')
        ? "may not contain '/'"
        : value.includes('%')
          ? "may not contain '%'"
          : undefined;
  if (problem) throw errors.badRequest(`invalid ${what} ${JSON.stringify(value)} in the request path: ${problem}`);
}

/** The request under `/api/v1` or `/apis/<g>/<v>` (`input`: the decoded segments after it). Unknown resources and subresources are 404. */
export function parseResourcePath(registry: ResourceRegistry, group: string, version: string, input: string[]): ResourceRequest {
  let parts = input;
  let legacyWatch = false;
  if (parts[0] === 'watch') {
    legacyWatch = true;
    parts = parts.slice(1);
  }
  // `namespaces/<ns>/<resource>/...` addresses namespaced objects; `namespaces/<name>[/status]`
  // is the namespace object itself.
  let namespace: string | undefined;
  if (parts[0] === 'namespaces' && parts.length >= 3 && !NAMESPACE_SUBRESOURCES.has(parts[2]!)) {
    namespace = parts[1];
    parts = parts.slice(2);
  }
  const [plural, name, subresource, ...extra] = parts;
  if (namespace !== undefined) checkPathSegment(namespace, 'namespace');
  if (name !== undefined) checkPathSegment(name, 'name');
  const def = plural ? registry.lookup(group, version, plural) : undefined;
  if (!def || extra.length || (namespace !== undefined && !def.namespaced)) throw errors.pathNotFound();
  if (subresource !== undefined && !(def.subresources as readonly string[]).includes(subresource)) {
    throw errors.pathNotFound();
  }
  return {
    def,
    legacyWatch,
    ...(namespace !== undefined ? { namespace } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(subresource !== undefined ? { subresource } : {}),
  };
}

/**
 * The verb from the method: GET → get/list/watch, POST → create, PUT → update, PATCH → patch,
 * DELETE → delete/deletecollection; `invalid` for an impossible combination (a 405).
 */
export function verbOf(method: string, request: ResourceRequest, params: URLSearchParams): string {
  if (request.subresource === 'log') return method === 'GET' || method === 'HEAD' ? 'get' : 'invalid';
  // A TokenRequest is only ever created: a read or write of `token` must not reach the account.
  if (request.subresource === 'token' && method !== 'POST') return 'invalid';
  // Only spec.finalizers is written there, by a whole namespace (Kubernetes serves it for PUT alone).
  if (request.subresource === 'finalize' && method !== 'PUT') return 'invalid';
  // A subresource is never deleted by itself (DELETE .../status must not remove the object).
  if (request.subresource !== undefined && method === 'DELETE') return 'invalid';
  const watching = request.legacyWatch || queryBool(params, 'watch');
  switch (method) {
    case 'GET':
    case 'HEAD':
      if (watching) return 'watch';
      return request.name === undefined ? 'list' : 'get';
    case 'POST':
      // POST to an object's subresource creates something of its own (an Eviction, a TokenRequest).
      return request.subresource === 'eviction' || request.subresource === 'token'
        ? 'create'
        : request.name === undefined
          ? 'create'
          : 'invalid';
    case 'PUT':
      return request.name === undefined ? 'invalid' : 'update';
    case 'PATCH':
      return request.name === undefined ? 'invalid' : 'patch';
    case 'DELETE':
      return request.name === undefined ? 'deletecollection' : 'delete';
    default:
      return 'invalid';
  }
}

/**
 * The name a list or watch addresses through `fieldSelector=metadata.name=<name>`, as
 * kube-apiserver's RequestInfo takes it, so an authorizer can allow reading one object by watch
 * (kubelet watches each Secret it needs this way). Parsed by the same parser that filters the
 * list, so the name authorized is the only one the answer can hold. Undefined otherwise.
 */
export function nameFromFieldSelector(verb: string, params: URLSearchParams): string | undefined {
  if (verb !== 'list' && verb !== 'watch') return undefined;
  let requirements;
  try {
    requirements = parseFieldSelector(params.get('fieldSelector'), new Set(['metadata.name']), '');
  } catch {
    return undefined;
  }
  const name = requirements.find((r) => r.field === 'metadata.name' && r.op === 'eq')?.value;
  if (!name || name === '.' || name === '..' || name.includes('/') || name.includes('%')) return undefined;
  return name;
}
