import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logging/logger.js';
import type { Admission, Authenticator, Authorizer, UserInfo } from './auth.js';
import {
  AGGREGATED_CONTENT_TYPE,
  aggregatedDiscovery,
  apiGroup,
  apiGroupList,
  apiResourceList,
  apiVersions,
} from './discovery.js';
import { ApiError, deletedStatus, errors } from './errors.js';
import {
  ClientGoneError,
  decodeBody,
  includeObjectParam,
  mediaType,
  type Negotiated,
  negotiate,
  parseJson,
  readBody,
  sendError,
  sendJson,
  sendText,
} from './http.js';
import { isJsonObject, type JsonObject } from './json.js';
import {
  checkDecoded,
  DEFAULT_LONG_RUNNING_LIMITS,
  duplicateJsonKey,
  integerParam,
  LongRunningLimiter,
  type LongRunningLimits,
  MAX_FIELD_MANAGER_LENGTH,
  MAX_INT32,
  MAX_WATCH_UNREAD_BYTES,
  resourceVersionParam,
} from './limits.js';
import { decodeKubernetesProtobuf } from './protobuf.js';
import { type KubeObject, OBJECT_META_FIELDS } from './objects.js';
import { queryBool } from './query.js';
import type { OpenApiDocuments } from './openapi.js';
import { applyPatch, PATCH_CONTENT_TYPES, PatchError, type PatchType, patchTypeFromContentType } from './patch/index.js';
import { apiVersionOf, type ResourceDefinition, type ResourceRegistry } from './resources.js';
import { scaleOf, validateReplicas } from './workloads.js';
import { labelSelectorFromObject, type LabelSelectorObject, matchesLabels } from './selectors.js';
import {
  checkPreconditions,
  type DeleteOptions,
  type DeleteResult,
  type ObjectStore,
  parseSelection,
  type Selection,
  type WatchEventType,
} from './storage.js';
import { dependentsChoiceOf } from './deletion.js';
import { type IncludeObject, toTable } from './table.js';
import { METRICS_CONTENT_TYPE } from '../metrics/content-type.js';
import { isPodReady } from '../node-protocol/pods.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import type { VersionInfo } from '../version.js';

/**
 * The request path of the API: parse the URL into a request (as Kubernetes' RequestInfo does),
 * authenticate, authorize, then run the verb against the generic object store.
 */

export interface HandlerOptions {
  store: ObjectStore;
  registry: ResourceRegistry;
  openapi: OpenApiDocuments;
  authenticator: Authenticator;
  authorizer: Authorizer;
  logger: Logger;
  version: VersionInfo;
  caCertificatePem: string;
  /** Undefined when ready, else why not. */
  readiness(): Promise<string | undefined>;
  /** How often a watch that allows bookmarks gets one. */
  bookmarkIntervalMs?: number;
  /** Checks on objects about to be written (node restriction). */
  admission?: Admission;
  /**
   * Drover's own endpoints beside the Kubernetes API (join, bootstrap). Called before
   * authentication; answers true when it served the request.
   */
  droverEndpoints?: (req: IncomingMessage, res: ServerResponse, path: string) => Promise<boolean>;
  /** Present when this node's own `supervisor-metrics` is on: /metrics serves it, requests feed it. */
  metrics?: ServerMetrics;
  /** False on an etcd-only server: only Drover's own endpoints (/drover/v1/*) and health are served. */
  kubernetesApi?: boolean;
  /**
   * Serves `GET .../pods/P/log` once the caller is authorized and the pod and container are
   * known (the server proxies it to the pod's agent). Without it, logs are a 404.
   */
  podLogs?(pod: KubeObject, params: PodLogParams, req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** How many watches and followed logs a user, and the server, may hold open at once. */
  longRunning?: LongRunningLimits;
  /** Bytes of events a watch's client may leave unread (beyond its initial list) before the watch is cut. */
  watchUnreadBytes?: number;
}

/** The query of a pods/log request, as kubectl sends it. */
export interface PodLogParams {
  /** Always set when the hook is called: the named container, or the pod's only one. */
  container?: string;
  follow: boolean;
  tailLines?: number;
  previous: boolean;
  limitBytes?: number;
}

interface ResourceRequest {
  def: ResourceDefinition;
  namespace?: string;
  name?: string;
  subresource?: string;
  /** `/api/v1/watch/...` legacy watch path. */
  legacyWatch: boolean;
}

const PUBLIC_PATHS = new Set(['/healthz', '/livez', '/readyz', '/version', '/cacerts']);
const NAMESPACE_SUBRESOURCES = new Set(['status', 'finalize']);

type FieldValidation = 'Ignore' | 'Warn' | 'Strict';

/** How long before a watch's timeout its last bookmark is asked for (kube-apiserver: 2 s). */
const PRE_TIMEOUT_BOOKMARK_MS = 2000;

function fieldValidationParam(value: string | null): FieldValidation {
  if (value === null || value === '' || value === 'Warn') return 'Warn';
  if (value === 'Ignore' || value === 'Strict') return value;
  throw errors.badRequest(`fieldValidation parameter must be one of Ignore, Warn or Strict (got "${value}")`);
}

/**
 * Drover knows the top-level fields of each kind and every ObjectMeta field; an unknown one is
 * dropped with a warning (Warn, the default), dropped silently (Ignore) or refused (Strict).
 * Inside spec and status, fields are kept as sent.
 */
function pruneUnknownFields(def: ResourceDefinition, obj: KubeObject, mode: FieldValidation): string[] {
  const unknown: string[] = [];
  for (const field of Object.keys(obj)) {
    if (!def.topLevelFields.has(field)) unknown.push(field);
  }
  for (const field of Object.keys(obj.metadata)) {
    if (!OBJECT_META_FIELDS.has(field)) unknown.push(`metadata.${field}`);
  }
  if (unknown.length && mode === 'Strict') {
    throw errors.badRequest(`strict decoding error: ${unknown.map((f) => `unknown field "${f}"`).join(', ')}`);
  }
  for (const field of unknown) {
    if (field.startsWith('metadata.')) delete obj.metadata[field.slice('metadata.'.length)];
    else delete obj[field];
  }
  return mode === 'Warn' ? unknown : [];
}

function patchTypeOf(req: IncomingMessage): PatchType {
  const contentType = mediaType(req.headers['content-type']);
  const patchType = patchTypeFromContentType(contentType);
  if (!patchType) throw errors.unsupportedMediaType(contentType, PATCH_CONTENT_TYPES);
  return patchType;
}

function parsePatch(body: Buffer, mode: FieldValidation = 'Warn'): unknown {
  const text = body.toString('utf8');
  const patch = parseJson(text, 'error decoding patch');
  checkDecoded(patch, 'the patch');
  if (mode === 'Strict') refuseDuplicateKeys(text);
  return patch;
}

/** fieldValidation=Strict: a key twice in one object is an error (JSON.parse would keep the last). */
function refuseDuplicateKeys(text: string): void {
  const duplicate = duplicateJsonKey(text);
  if (duplicate !== undefined) throw errors.badRequest(`strict decoding error: duplicate field ${JSON.stringify(duplicate)}`);
}

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

/** The options kind a write's query belongs to, as kube-apiserver names it in its errors. */
const OPTIONS_KIND: Readonly<Record<string, string>> = {
  create: 'CreateOptions',
  update: 'UpdateOptions',
  patch: 'PatchOptions',
  delete: 'DeleteOptions',
  deletecollection: 'DeleteOptions',
};

/** dryRun (only `All`) and fieldManager (printable, at most 128 characters), as kube-apiserver validates them. */
function checkWriteOptions(verb: string, params: URLSearchParams): void {
  const kind = OPTIONS_KIND[verb];
  if (!kind) return;
  const causes: { reason: string; message: string; field: string }[] = [];
  params.getAll('dryRun').forEach((value, i) => {
    if (value !== 'All') {
      causes.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(value)}: supported values: "All"`, field: `dryRun[${i}]` });
    }
  });
  const manager = params.get('fieldManager');
  if (manager !== null && kind !== 'DeleteOptions') {
    if (manager.length > MAX_FIELD_MANAGER_LENGTH) {
      causes.push({ reason: 'FieldValueTooLong', message: `Too long: may not be more than ${MAX_FIELD_MANAGER_LENGTH} bytes`, field: 'fieldManager' });
    } else if (!/^[\x20-\x7e]*$/.test(manager)) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(manager)}: must only contain printable characters`, field: 'fieldManager' });
    }
  }
  if (causes.length) throw errors.invalid(kind, '', 'meta.k8s.io', causes);
}

function warningHeader(unknown: string[]): Record<string, string> {
  if (!unknown.length) return {};
  return { Warning: unknown.map((f) => `299 - "unknown field \\"${f}\\""`).join(', ') };
}

function asKubeObject(value: unknown, what: string): KubeObject {
  if (!isJsonObject(value)) throw errors.badRequest(`${what} must be a JSON object`);
  const metadata = value.metadata;
  if (metadata === undefined || metadata === null) value.metadata = {};
  else if (!isJsonObject(metadata)) throw errors.badRequest('metadata must be an object');
  return value as unknown as KubeObject;
}

function checkTypeMeta(def: ResourceDefinition, obj: KubeObject): void {
  if (obj.kind !== undefined && obj.kind !== '' && obj.kind !== def.kind) {
    throw errors.badRequest(
      `the kind of the provided object (${String(obj.kind)}) does not match the resource (${def.kind})`,
    );
  }
  if (obj.apiVersion !== undefined && obj.apiVersion !== '' && obj.apiVersion !== apiVersionOf(def)) {
    throw errors.badRequest(
      `the API version of the provided object (${String(obj.apiVersion)}) does not match the request (${apiVersionOf(def)})`,
    );
  }
}

function listKind(def: ResourceDefinition): string {
  return `${def.kind}List`;
}

export class ApiHandler {
  private readonly bookmarkIntervalMs: number;
  private readonly longRunning: LongRunningLimiter;
  private readonly watchUnreadBytes: number;
  /** What each request turned out to be, for metrics. */
  private readonly requestKinds = new WeakMap<ServerResponse, { verb: string; resource: string }>();

  constructor(private readonly options: HandlerOptions) {
    this.bookmarkIntervalMs = options.bookmarkIntervalMs ?? 15_000;
    this.longRunning = new LongRunningLimiter(options.longRunning ?? DEFAULT_LONG_RUNNING_LIMITS);
    this.watchUnreadBytes = options.watchUnreadBytes ?? MAX_WATCH_UNREAD_BYTES;
  }

  /** Entry point for node:http(s). Never throws: every failure becomes a Status response. */
  handle = (req: IncomingMessage, res: ServerResponse): void => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const metrics = this.options.metrics;
      if (metrics) {
        const kind = this.requestKinds.get(res) ?? { verb: (req.method ?? 'GET').toLowerCase(), resource: '' };
        metrics.apiRequests.inc({ ...kind, code: String(res.statusCode) });
        if (kind.verb !== 'watch') {
          metrics.apiLatency.observe(kind, Number(process.hrtime.bigint() - started) / 1e9);
        }
      }
      if (this.options.logger.isLevelEnabled('debug')) {
        this.options.logger.debug(
          {
            method: req.method,
            path: req.url?.split('?')[0],
            status: res.statusCode,
            ms: Number(process.hrtime.bigint() - started) / 1e6,
          },
          'request',
        );
      }
    });
    this.route(req, res).catch((error: unknown) => this.fail(req, res, error));
  };

  /**
   * Client errors are answered with their Status and not logged above debug; anything else is a
   * server bug: logged once with its stack, answered with a 500 that does not echo internals.
   */
  private fail(req: IncomingMessage, res: ServerResponse, error: unknown): void {
    if (error instanceof ApiError) {
      sendError(res, error);
      return;
    }
    if (error instanceof PatchError) {
      sendError(res, error.status === 422 ? new ApiError(422, 'Invalid', error.message) : errors.badRequest(error.message));
      return;
    }
    if (error instanceof ClientGoneError) {
      this.options.logger.debug({ method: req.method, path: req.url?.split('?')[0] }, error.message);
      res.destroy();
      return;
    }
    this.options.logger.error(
      { err: error, method: req.method, path: req.url?.split('?')[0] },
      'unexpected error while serving a request',
    );
    sendError(res, errors.internal('an unexpected error occurred while serving the request; the server log has the details'));
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'https://drover.invalid');
    } catch {
      throw errors.badRequest(`invalid request target ${JSON.stringify((req.url ?? '').slice(0, 200))}`);
    }
    const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
    const method = req.method ?? 'GET';

    if (PUBLIC_PATHS.has(path) || path.startsWith('/readyz/') || path.startsWith('/livez/')) {
      // Anonymous callers may read these, but a token that fails authentication is refused
      // everywhere, as kube-apiserver does.
      if (req.headers.authorization && !this.options.authenticator.authenticate(req)) throw errors.unauthorized();
      await this.servePublic(path, method, res);
      return;
    }
    if (this.options.droverEndpoints && path.startsWith('/drover/') && (await this.options.droverEndpoints(req, res, path))) return;
    if (path === '/metrics') {
      await this.serveMetrics(req, res);
      return;
    }
    if (this.options.kubernetesApi === false) {
      throw new ApiError(404, 'NotFound', `this is an etcd-only server: it serves no Kubernetes API (${path}); use a control-plane server`);
    }
    const user = this.options.authenticator.authenticate(req);
    if (!user) throw errors.unauthorized();

    if (path === '/api' || path === '/apis') {
      this.requireMethod(method, 'GET');
      const negotiated = negotiate(req.headers.accept);
      if (negotiated.aggregatedDiscovery) {
        const version = negotiated.aggregatedDiscovery;
        sendJson(res, 200, aggregatedDiscovery(this.options.registry, path === '/api', version), AGGREGATED_CONTENT_TYPE[version]);
      } else {
        sendJson(res, 200, path === '/api' ? apiVersions() : apiGroupList(this.options.registry));
      }
      return;
    }
    if (path === '/openapi/v3' || path.startsWith('/openapi/v3/')) {
      this.serveOpenApi(path, res);
      return;
    }

    const parts = path.split('/').slice(1).map((part) => {
      try {
        return decodeURIComponent(part);
      } catch {
        throw errors.badRequest(`invalid percent-encoding in the request path segment ${JSON.stringify(part.slice(0, 200))}`);
      }
    });
    let group: string;
    let version: string | undefined;
    let rest: string[];
    if (parts[0] === 'api') {
      group = '';
      version = parts[1];
      rest = parts.slice(2);
    } else if (parts[0] === 'apis' && parts.length >= 2) {
      group = parts[1]!;
      version = parts[2];
      rest = parts.slice(3);
      if (version === undefined) {
        const info = this.options.registry.groups().find((g) => g.name === group);
        if (!info) throw errors.pathNotFound();
        sendJson(res, 200, apiGroup(info.name, info.versions));
        return;
      }
    } else {
      throw errors.pathNotFound();
    }
    if (!version || !this.options.registry.hasGroupVersion(group, version)) throw errors.pathNotFound();
    if (rest.length === 0) {
      sendJson(res, 200, apiResourceList(this.options.registry, group, version));
      return;
    }
    const request = this.parseResourcePath(group, version, rest);
    await this.serveResource(req, res, url, request, user);
  }

  /** 404 unless this node's own supervisor-metrics is on; any authenticated caller may read. */
  private async serveMetrics(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const metrics = this.options.metrics;
    if (!metrics) throw errors.pathNotFound();
    if (!this.options.authenticator.authenticate(req)) throw errors.unauthorized();
    const text = await metrics.registry.metrics();
    res.writeHead(200, { 'Content-Type': METRICS_CONTENT_TYPE, 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }

  private requireMethod(method: string, expected: string): void {
    if (method !== expected) throw errors.methodNotAllowed();
  }

  private async servePublic(path: string, method: string, res: ServerResponse): Promise<void> {
    if (method !== 'GET' && method !== 'HEAD') throw errors.methodNotAllowed();
    switch (path) {
      case '/version':
        sendJson(res, 200, this.options.version);
        return;
      case '/cacerts':
        res.writeHead(200, { 'Content-Type': 'application/x-pem-file' });
        res.end(this.options.caCertificatePem);
        return;
      case '/healthz':
      case '/livez':
        sendText(res, 200, 'ok');
        return;
      default: {
        if (path.startsWith('/readyz')) {
          const problem = await this.options.readiness();
          if (problem) sendText(res, 503, `[-]datastore failed: ${problem}\nreadyz check failed\n`);
          else sendText(res, 200, 'ok');
          return;
        }
        sendText(res, 200, 'ok');
      }
    }
  }

  private serveOpenApi(path: string, res: ServerResponse): void {
    if (path === '/openapi/v3') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(this.options.openapi.index);
      return;
    }
    const doc = this.options.openapi.document(path.slice('/openapi/v3/'.length));
    if (!doc) throw errors.pathNotFound();
    res.writeHead(200, { 'Content-Type': 'application/json', ETag: `"${doc.hash}"` });
    res.end(doc.body);
  }

  private parseResourcePath(group: string, version: string, input: string[]): ResourceRequest {
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
    const def = plural ? this.options.registry.lookup(group, version, plural) : undefined;
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

  private verbOf(method: string, request: ResourceRequest, url: URL): string {
    if (request.subresource === 'log') return method === 'GET' || method === 'HEAD' ? 'get' : 'invalid';
    // A subresource is never deleted by itself (DELETE .../status must not remove the object).
    if (request.subresource !== undefined && method === 'DELETE') return 'invalid';
    const watching = request.legacyWatch || queryBool(url.searchParams, 'watch');
    switch (method) {
      case 'GET':
      case 'HEAD':
        if (watching) return 'watch';
        return request.name === undefined ? 'list' : 'get';
      case 'POST':
        return request.subresource === 'eviction' ? 'create' : request.name === undefined ? 'create' : 'invalid';
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

  private async serveResource(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    user: UserInfo,
  ): Promise<void> {
    const method = req.method ?? 'GET';
    const verb = this.verbOf(method, request, url);
    if (verb === 'invalid') throw errors.methodNotAllowed();
    const { def } = request;
    this.requestKinds.set(res, { verb, resource: request.subresource ? `${def.plural}/${request.subresource}` : def.plural });
    const decision = this.options.authorizer.authorize(user, {
      verb,
      group: def.group,
      resource: def.plural,
      ...(request.subresource ? { subresource: request.subresource } : {}),
      ...(request.namespace ? { namespace: request.namespace } : {}),
      ...(request.name ? { name: request.name } : {}),
    });
    if (!decision.allowed) {
      throw errors.forbidden(
        `${def.group ? `${def.plural}.${def.group}` : def.plural}${request.name ? ` "${request.name}"` : ''} is forbidden: User "${user.name}" cannot ${verb} resource "${def.plural}${request.subresource ? `/${request.subresource}` : ''}"${request.namespace ? ` in the namespace "${request.namespace}"` : ''}: ${decision.reason}`,
        def,
        request.name,
      );
    }
    checkWriteOptions(verb, url.searchParams);
    const dryRun = url.searchParams.getAll('dryRun').includes('All');
    if (request.subresource === 'scale') return this.serveScale(req, res, request, user, verb, dryRun);
    if (verb === 'watch' || (request.subresource === 'log' && queryBool(url.searchParams, 'follow'))) {
      // Taken before any work and given back when the connection goes, however it ends.
      const release = this.longRunning.acquire(user.name, verb === 'watch' ? 'watches' : 'followed logs');
      res.once('close', release);
    }
    if (request.subresource === 'log') return this.serveLog(req, res, url, request);
    switch (verb) {
      case 'get':
        return this.serveGet(req, res, url, request);
      case 'list':
        return this.serveList(req, res, url, request);
      case 'watch':
        return this.serveWatch(req, res, url, request);
      case 'create':
        if (request.subresource === 'eviction') {
          await this.admitExisting(user, 'create', request);
          return this.serveEviction(req, res, request, dryRun);
        }
        return this.serveCreate(req, res, url, request, user, dryRun);
      case 'update':
        return this.serveUpdate(req, res, url, request, user, dryRun);
      case 'patch':
        return this.servePatch(req, res, url, request, user, dryRun);
      case 'delete':
        await this.admitExisting(user, 'delete', request);
        return this.serveDelete(req, res, url, request, dryRun);
      case 'deletecollection':
        return this.serveDeleteCollection(req, res, url, request, dryRun);
    }
  }

  private selection(url: URL, def: ResourceDefinition): Selection {
    return parseSelection(def, url.searchParams.get('labelSelector'), url.searchParams.get('fieldSelector'));
  }

  private respondObject(
    res: ServerResponse,
    code: number,
    negotiated: Negotiated,
    def: ResourceDefinition,
    obj: KubeObject,
    include: IncludeObject,
    headers: Record<string, string> = {},
  ): void {
    if (negotiated.table) {
      sendJson(res, code, toTable(def.printer, [obj], include, { resourceVersion: obj.metadata.resourceVersion ?? '' }), 'application/json', headers);
    } else {
      sendJson(res, code, obj, 'application/json', headers);
    }
  }

  private async serveGet(req: IncomingMessage, res: ServerResponse, url: URL, request: ResourceRequest): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const obj = await this.options.store.get(request.def, request.namespace, request.name!);
    if (request.subresource === 'eviction') throw errors.methodNotAllowed();
    this.respondObject(res, 200, negotiated, request.def, obj, includeObjectParam(url.searchParams.get('includeObject')));
  }

  private async serveList(req: IncomingMessage, res: ServerResponse, url: URL, request: ResourceRequest): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    // Any int64 is a valid limit to kube-apiserver; beyond 2^53 a JavaScript number cannot say it.
    const limit = integerParam(url.searchParams, 'limit', 0, Number.MAX_SAFE_INTEGER) ?? 0;
    const rv = resourceVersionParam(url.searchParams);
    const match = url.searchParams.get('resourceVersionMatch') ?? '';
    if (match !== '' && match !== 'Exact' && match !== 'NotOlderThan') {
      throw errors.badRequest(`invalid resourceVersionMatch "${match}": supported values: "Exact", "NotOlderThan"`);
    }
    const exact = match === 'Exact' && rv !== undefined ? Number(rv) : undefined;
    const continueToken = url.searchParams.get('continue') ?? undefined;
    const result = await this.options.store.list(def, request.namespace, {
      ...this.selection(url, def),
      ...(limit ? { limit } : {}),
      ...(continueToken ? { continueToken } : {}),
      ...(exact !== undefined ? { exactRevision: exact } : {}),
    });
    const listMeta = {
      resourceVersion: result.resourceVersion,
      ...(result.continueToken ? { continue: result.continueToken } : {}),
    };
    if (negotiated.table) {
      sendJson(res, 200, toTable(def.printer, result.items, includeObjectParam(url.searchParams.get('includeObject')), listMeta));
      return;
    }
    sendJson(res, 200, { kind: listKind(def), apiVersion: apiVersionOf(def), metadata: listMeta, items: result.items });
  }

  private async serveWatch(req: IncomingMessage, res: ServerResponse, url: URL, request: ResourceRequest): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    const selection = this.selection(url, def);
    if (request.name !== undefined) {
      selection.fieldSelector.push({ field: 'metadata.name', op: 'eq', value: request.name });
    }
    const include = includeObjectParam(url.searchParams.get('includeObject'));
    const allowBookmarks = queryBool(url.searchParams, 'allowWatchBookmarks');
    const fromVersion = resourceVersionParam(url.searchParams);
    const timeoutSeconds = integerParam(url.searchParams, 'timeoutSeconds', 0, MAX_INT32);
    // Like kube-apiserver, close an unbounded watch after 30-60 minutes; clients re-watch. A
    // timer cannot wait longer than 2^31-1 ms (24.8 days): longer asks end then.
    const timeoutMs = Math.min(
      timeoutSeconds ? timeoutSeconds * 1000 : (1800 + Math.floor(Math.random() * 1800)) * 1000,
      MAX_INT32,
    );

    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Cache-Control': 'no-cache, private',
      'Transfer-Encoding': 'chunked',
    });
    // Without this, clients that wait for headers (client-node's watch()) hang until an event.
    res.flushHeaders();

    let closed = false;
    const timers: NodeJS.Timeout[] = [];
    let handle: { cancel(): void; requestProgress(): void } | undefined;
    const finish = (): void => {
      if (closed) return;
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      handle?.cancel();
      if (!res.writableEnded) res.end();
    };
    res.on('close', finish);

    // Set once the initial objects are written: what a client that stopped reading may leave
    // unread before its watch is cut (a new watch starts with a fresh list).
    let unreadLimit: number | undefined;
    const write = (type: string, object: unknown): void => {
      if (closed) return;
      res.write(`${JSON.stringify({ type, object })}\n`);
      if (unreadLimit !== undefined && res.writableLength > unreadLimit) {
        this.options.logger.debug({ path: url.pathname, unreadBytes: res.writableLength }, 'cut a watch whose client does not read its events');
        finish();
        res.destroy();
      }
    };
    const wrap = (obj: KubeObject): unknown =>
      negotiated.table ? toTable(def.printer, [obj], include, { resourceVersion: obj.metadata.resourceVersion ?? '' }) : obj;
    let lastSent = '';
    try {
      handle = await this.options.store.watch(def, request.namespace, fromVersion, selection, {
        event: (type: WatchEventType, obj: KubeObject) => {
          lastSent = obj.metadata.resourceVersion ?? lastSent;
          write(type, wrap(obj));
        },
        progress: (resourceVersion) => {
          if (!allowBookmarks || resourceVersion === lastSent) return;
          lastSent = resourceVersion;
          write('BOOKMARK', { kind: def.kind, apiVersion: apiVersionOf(def), metadata: { resourceVersion } });
        },
        error: (error) => {
          write('ERROR', error.toStatus());
          finish();
        },
      });
    } catch (error) {
      if (!(error instanceof ApiError)) this.options.logger.error({ err: error }, 'unexpected error while starting a watch');
      const apiError = error instanceof ApiError ? error : errors.internal('an unexpected error occurred while starting the watch; the server log has the details');
      write('ERROR', apiError.toStatus());
      finish();
      return;
    }
    if (closed) {
      handle.cancel();
      return;
    }
    unreadLimit = res.writableLength + this.watchUnreadBytes;
    timers.push(setTimeout(finish, timeoutMs));
    if (allowBookmarks) {
      const tick = (): void => {
        handle?.requestProgress();
        timers.push(setTimeout(tick, this.bookmarkIntervalMs));
      };
      timers.push(setTimeout(tick, this.bookmarkIntervalMs));
      // As kube-apiserver does: one more shortly before the server ends the watch, so the client
      // re-watches from the latest revision rather than from its last event.
      if (timeoutMs > PRE_TIMEOUT_BOOKMARK_MS) {
        timers.push(setTimeout(() => handle?.requestProgress(), timeoutMs - PRE_TIMEOUT_BOOKMARK_MS));
      }
    }
  }

  private async readObject(
    req: IncomingMessage,
    def: ResourceDefinition,
    mode: FieldValidation,
  ): Promise<{ obj: KubeObject; unknown: string[] }> {
    const body = await readBody(req);
    const obj = asKubeObject(decodeBody(body, req.headers['content-type']), 'the request body');
    if (mode === 'Strict' && mediaType(req.headers['content-type']).endsWith('json')) refuseDuplicateKeys(body.toString('utf8'));
    checkTypeMeta(def, obj);
    const unknown = pruneUnknownFields(def, obj, mode);
    return { obj, unknown };
  }

  /**
   * Deletes and evictions carry no object: admission judges the one they would remove (node
   * restriction lets an agent remove only pods bound to its node). A missing object is left to
   * the verb itself, which answers 404.
   */
  private async admitExisting(user: UserInfo, verb: string, request: ResourceRequest): Promise<void> {
    if (!this.options.admission || request.name === undefined) return;
    let current: KubeObject;
    try {
      current = await this.options.store.get(request.def, request.namespace, request.name);
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return;
      throw error;
    }
    await this.admit(user, verb, request, current);
  }

  private async admit(
    user: UserInfo,
    verb: string,
    request: ResourceRequest,
    obj: KubeObject,
    oldObject?: KubeObject,
  ): Promise<void> {
    if (!this.options.admission) return;
    await this.options.admission.admit({
      user,
      verb,
      group: request.def.group,
      resource: request.def.plural,
      object: obj,
      ...(oldObject ? { oldObject } : {}),
      ...(request.subresource ? { subresource: request.subresource } : {}),
      ...(request.namespace ? { namespace: request.namespace } : {}),
      ...(request.name ? { name: request.name } : {}),
    });
  }

  private async serveCreate(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    user: UserInfo,
    dryRun: boolean,
  ): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    const mode = fieldValidationParam(url.searchParams.get('fieldValidation'));
    const { obj, unknown } = await this.readObject(req, def, mode);
    if (def.namespaced) {
      if (!request.namespace) throw errors.methodNotAllowed();
      const bodyNamespace = obj.metadata.namespace;
      if (bodyNamespace && bodyNamespace !== request.namespace) {
        throw errors.badRequest('the namespace of the provided object does not match the namespace sent on the request');
      }
    }
    await this.admit(user, 'create', request, obj);
    const created = await this.options.store.create(def, request.namespace, obj, { dryRun });
    this.respondObject(res, 201, negotiated, def, created, 'Metadata', warningHeader(unknown));
  }

  private async serveUpdate(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    user: UserInfo,
    dryRun: boolean,
  ): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    const mode = fieldValidationParam(url.searchParams.get('fieldValidation'));
    const { obj, unknown } = await this.readObject(req, def, mode);
    if (obj.metadata.name !== undefined && obj.metadata.name !== request.name) {
      throw errors.badRequest(
        `the name of the object (${String(obj.metadata.name)}) does not match the name on the URL (${request.name})`,
      );
    }
    if (def.namespaced && obj.metadata.namespace && obj.metadata.namespace !== request.namespace) {
      throw errors.badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    const uid = obj.metadata.uid;
    const updated = await this.options.store.guaranteedUpdate(def, request.namespace, request.name!, async (current) => {
      // A uid in the body is a precondition, as in Kubernetes: it names one incarnation.
      checkPreconditions(def, request.name!, current, { uid });
      await this.admit(user, 'update', request, obj, current);
      return obj;
    }, {
      dryRun,
      ...(request.subresource === 'status' ? { subresource: 'status' as const } : {}),
    });
    this.respondObject(res, 200, negotiated, def, updated, 'Metadata', warningHeader(unknown));
  }

  private async servePatch(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    user: UserInfo,
    dryRun: boolean,
  ): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    const patchType = patchTypeOf(req);
    const mode = fieldValidationParam(url.searchParams.get('fieldValidation'));
    const patch = parsePatch(await readBody(req), mode);
    let unknown: string[] = [];
    const updated = await this.options.store.guaranteedUpdate(
      def,
      request.namespace,
      request.name!,
      async (current) => {
        const currentUid = current.metadata.uid;
        // The patch consumes `current`; admission judges the stored object as it was.
        const stored = this.options.admission?.judges(user) ? admissionSnapshot(current) : undefined;
        const patched = asKubeObject(
          // `current` is this attempt's private copy: the patch may work in it directly.
          applyPatch(patchType, current as unknown as JsonObject, patch as JsonObject, def.kind, { consumeOriginal: true }),
          'the patched object',
        );
        checkTypeMeta(def, patched);
        if (patched.metadata.name !== request.name) {
          throw errors.badRequest(
            `the name of the object (${String(patched.metadata.name)}) does not match the name on the URL (${request.name})`,
          );
        }
        if (patched.metadata.uid !== undefined && patched.metadata.uid !== currentUid) {
          throw errors.invalid(def.kind, request.name!, def.group, [
            { reason: 'FieldValueInvalid', message: 'field is immutable', field: 'metadata.uid' },
          ]);
        }
        unknown = pruneUnknownFields(def, patched, mode);
        await this.admit(user, 'patch', request, patched, stored);
        return patched;
      },
      { dryRun, ...(request.subresource === 'status' ? { subresource: 'status' as const } : {}) },
    );
    this.respondObject(res, 200, negotiated, def, updated, 'Metadata', warningHeader(unknown));
  }

  private async readDeleteOptions(req: IncomingMessage): Promise<JsonObject> {
    const body = await readBody(req);
    if (body.length === 0) return {};
    const type = mediaType(req.headers['content-type']);
    if (type.startsWith('application/vnd.kubernetes.protobuf')) {
      // kubectl's typed DELETEs (drain without eviction) send protobuf DeleteOptions; their grace
      // period decides whether a pod goes at once. Anything else in protobuf is ignored, as before.
      try {
        const decoded = decodeKubernetesProtobuf(body);
        return decoded.kind === 'DeleteOptions' ? (decoded.object as JsonObject) : {};
      } catch {
        return {};
      }
    }
    if (!type.endsWith('json')) return {};
    const parsed = decodeBody(body, req.headers['content-type']);
    return isJsonObject(parsed) ? parsed : {};
  }

  /**
   * DeleteOptions.gracePeriodSeconds from a body or the query (kubectl sends the body). Negative
   * means "now" (the pod strategy makes it 1 s, as kube-apiserver does); the upper bound keeps
   * deletion timestamps within what a date can hold.
   */
  private gracePeriodOf(options: JsonObject, url?: URL): number | undefined {
    const value = options.gracePeriodSeconds ?? (url ? integerParam(url.searchParams, 'gracePeriodSeconds', -MAX_INT32, MAX_INT32) : undefined);
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'number' || !Number.isInteger(value) || Math.abs(value) > MAX_INT32) {
      throw errors.badRequest(`gracePeriodSeconds must be an integer between ${-MAX_INT32} and ${MAX_INT32} (got ${JSON.stringify(value)})`);
    }
    return value;
  }

  private preconditionsOf(options: JsonObject): DeleteOptions['preconditions'] {
    const pre = options.preconditions;
    if (!isJsonObject(pre)) return undefined;
    return {
      ...(typeof pre.uid === 'string' ? { uid: pre.uid } : {}),
      ...(typeof pre.resourceVersion === 'string' ? { resourceVersion: pre.resourceVersion } : {}),
    };
  }

  private async serveDelete(req: IncomingMessage, res: ServerResponse, url: URL, request: ResourceRequest, dryRun: boolean): Promise<void> {
    const negotiated = negotiate(req.headers.accept);
    const { def } = request;
    const options = await this.readDeleteOptions(req);
    const wantsDryRun = dryRun || (Array.isArray(options.dryRun) && options.dryRun.includes('All'));
    const name = request.name!;
    if (def.undeletable?.has(name)) {
      throw errors.forbidden(`${def.plural} "${name}" is forbidden: this ${def.singular} may not be deleted`, def, name);
    }
    const preconditions = this.preconditionsOf(options);
    const gracePeriodSeconds = this.gracePeriodOf(options, url);
    const choice = dependentsChoiceOf(options);
    const deleteOptions: DeleteOptions = {
      dryRun: wantsDryRun,
      ...choice,
      ...(preconditions ? { preconditions } : {}),
      ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
    };
    const { object, removed } = await this.deleteObject(def, request.namespace, name, deleteOptions);
    // As kube-apiserver: gone at once is a Status of Success (uid included, for kubectl's --wait),
    // except for kinds that return the deleted object; still there (finalizers, a grace period)
    // is the object, with 202 instead of 200 when the deprecated orphanDependents was false.
    if (removed && !def.returnsDeletedObject) {
      sendJson(res, 200, deletedStatus(def, name, object.metadata.uid));
      return;
    }
    this.respondObject(res, !removed && choice.orphanDependents === false ? 202 : 200, negotiated, def, object, 'Metadata');
  }

  /** The store's delete, except that a namespace (not a dry run) takes its contents with it. */
  private deleteObject(def: ResourceDefinition, namespace: string | undefined, name: string, options: DeleteOptions): Promise<DeleteResult> {
    if (def.kind === 'Namespace' && def.group === '' && !options.dryRun) return this.deleteNamespace(def, name, options);
    return this.options.store.delete(def, namespace, name, options);
  }

  /** A namespace goes Terminating, its contents are deleted, then the namespace itself. */
  private async deleteNamespace(def: ResourceDefinition, name: string, options: DeleteOptions): Promise<DeleteResult> {
    const store = this.options.store;
    checkPreconditions(def, name, await store.get(def, undefined, name), options.preconditions);
    // Terminating first: from here on, creates in this namespace are refused.
    await store.guaranteedUpdate(
      def,
      undefined,
      name,
      (ns) => ({ ...ns, status: { ...(isJsonObject(ns.status) ? ns.status : {}), phase: 'Terminating' } }),
      { subresource: 'status' },
    );
    const count = await store.deleteNamespaceContents(this.options.registry.all, name);
    this.options.logger.info({ namespace: name, objects: count }, 'deleted namespace and its contents');
    return store.delete(def, undefined, name);
  }

  private async serveDeleteCollection(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    dryRun: boolean,
  ): Promise<void> {
    const { def } = request;
    const options = await this.readDeleteOptions(req);
    const gracePeriodSeconds = this.gracePeriodOf(options, url);
    const deleteOptions: DeleteOptions = {
      dryRun,
      ...dependentsChoiceOf(options),
      ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
    };
    const { items } = await this.options.store.list(def, request.namespace, this.selection(url, def));
    const deleted: KubeObject[] = [];
    for (const item of items) {
      if (def.undeletable?.has(item.metadata.name ?? '')) continue;
      try {
        deleted.push((await this.deleteObject(def, item.metadata.namespace, item.metadata.name!, deleteOptions)).object);
      } catch (error) {
        if (!(error instanceof ApiError && error.code === 404)) throw error;
      }
    }
    sendJson(res, 200, { kind: listKind(def), apiVersion: apiVersionOf(def), metadata: {}, items: deleted });
  }

  /**
   * policy/v1 (and kubectl 1.20's policy/v1beta1) Eviction: deletes the pod, gracefully when it runs
   * on a node, once its PodDisruptionBudget (if any) allows it.
   */
  private async serveEviction(req: IncomingMessage, res: ServerResponse, request: ResourceRequest, dryRun: boolean): Promise<void> {
    const body = await readBody(req);
    const eviction = asKubeObject(decodeBody(body, req.headers['content-type']), 'the eviction');
    if (eviction.kind !== undefined && eviction.kind !== 'Eviction') {
      throw errors.badRequest(`expected an Eviction, got ${String(eviction.kind)}`);
    }
    if (eviction.metadata.name !== undefined && eviction.metadata.name !== request.name) {
      throw errors.badRequest(`name in URL does not match name in Eviction object`);
    }
    const deleteOptions = isJsonObject(eviction.deleteOptions) ? eviction.deleteOptions : {};
    const preconditions = this.preconditionsOf(deleteOptions);
    const gracePeriodSeconds = this.gracePeriodOf(deleteOptions);
    const pod = await this.options.store.get(request.def, request.namespace, request.name!);
    await this.takeDisruption(pod, request.namespace ?? 'default', dryRun);
    await this.options.store.delete(request.def, request.namespace, request.name!, {
      dryRun,
      ...(preconditions ? { preconditions } : {}),
      ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
    });
    sendJson(res, 201, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 201 });
  }

  /**
   * kube-apiserver's EvictionREST budget check: a running pod selected by one PodDisruptionBudget
   * may go only if the budget allows a disruption, which the eviction spends (and records in
   * disruptedPods, so the disruption controller does not hand it back before the pod is seen
   * terminating). The decrement is a compare-and-swap, so concurrent evictions cannot share one.
   */
  private async takeDisruption(pod: KubeObject, namespace: string, dryRun: boolean): Promise<void> {
    const phase = isJsonObject(pod.status) ? pod.status.phase : undefined;
    // Finished, never-started and already-terminating pods cost the budget nothing.
    if (pod.metadata.deletionTimestamp || phase === 'Succeeded' || phase === 'Failed' || phase === 'Pending') return;
    const pdbDef = this.options.registry.lookup('policy', 'v1', 'poddisruptionbudgets');
    if (!pdbDef) return;
    const selects = (pdb: KubeObject): boolean => {
      const selector = isJsonObject(pdb.spec) ? pdb.spec.selector : undefined;
      return isJsonObject(selector) && matchesLabels(labelSelectorFromObject(selector as LabelSelectorObject), pod.metadata.labels);
    };
    const budgets = (await this.options.store.list(pdbDef, namespace, { labelSelector: [], fieldSelector: [] })).items.filter(selects);
    if (budgets.length === 0) return;
    if (budgets.length > 1) {
      throw errors.internal('This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.');
    }
    const budgetName = budgets[0]!.metadata.name!;
    const ready = isPodReady(pod);
    const violation = 'Cannot evict pod as it would violate the pod\'s disruption budget.';
    await this.options.store.guaranteedUpdate(
      pdbDef,
      namespace,
      budgetName,
      (pdb) => {
        const spec = isJsonObject(pdb.spec) ? pdb.spec : {};
        const status = isJsonObject(pdb.status) ? pdb.status : {};
        const count = (field: string): number => (typeof status[field] === 'number' ? status[field] : 0);
        // An unready pod adds nothing to the healthy count (unhealthyPodEvictionPolicy).
        const budgetHealthy = count('desiredHealthy') > 0 && count('currentHealthy') >= count('desiredHealthy');
        if (!ready && (spec.unhealthyPodEvictionPolicy === 'AlwaysAllow' || budgetHealthy)) return pdb;
        if (count('observedGeneration') < (pdb.metadata.generation ?? 1)) {
          throw new ApiError(429, 'TooManyRequests', violation, {
            causes: [{ reason: 'DisruptionBudget', message: `The disruption budget ${budgetName} is still being processed by the server.` }],
            retryAfterSeconds: 10,
          });
        }
        if (count('disruptionsAllowed') < 1) {
          throw new ApiError(429, 'TooManyRequests', violation, {
            causes: [{
              reason: 'DisruptionBudget',
              message: `The disruption budget ${budgetName} needs ${count('desiredHealthy')} healthy pods and has ${count('currentHealthy')} currently`,
            }],
          });
        }
        const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
        const disruptionsAllowed = count('disruptionsAllowed') - 1;
        const disruptedPods = { ...(isJsonObject(status.disruptedPods) ? status.disruptedPods : {}), [pod.metadata.name!]: now };
        const next: JsonObject = { ...status, disruptionsAllowed, disruptedPods };
        if (disruptionsAllowed === 0 && Array.isArray(status.conditions)) {
          next.conditions = status.conditions.map((c) =>
            isJsonObject(c) && c.type === 'DisruptionAllowed' && c.status === 'True'
              ? { ...c, status: 'False', reason: 'InsufficientPods', lastTransitionTime: now }
              : c,
          );
        }
        return { ...pdb, status: next };
      },
      { subresource: 'status', dryRun },
    );
  }

  /**
   * `<workload>/scale`: the autoscaling/v1 Scale view of spec.replicas. Reads build it from the
   * workload; writes (PUT, or a patch of the Scale) change only the workload's spec.replicas, so
   * they bump its generation like any spec change.
   */
  private async serveScale(
    req: IncomingMessage,
    res: ServerResponse,
    request: ResourceRequest,
    user: UserInfo,
    verb: string,
    dryRun: boolean,
  ): Promise<void> {
    const { def } = request;
    const name = request.name!;
    negotiate(req.headers.accept);
    if (verb === 'get') {
      sendJson(res, 200, scaleOf(await this.options.store.get(def, request.namespace, name)));
      return;
    }
    if (verb !== 'update' && verb !== 'patch') throw errors.methodNotAllowed();
    const body = await readBody(req);
    let input: unknown;
    let patchType: PatchType | undefined;
    if (verb === 'patch') {
      patchType = patchTypeOf(req);
      input = parsePatch(body);
    } else {
      input = asKubeObject(decodeBody(body, req.headers['content-type']), 'the request body');
    }
    const updated = await this.options.store.guaranteedUpdate(
      def,
      request.namespace,
      name,
      async (current) => {
        const currentScale = scaleOf(current);
        let scale: KubeObject;
        if (patchType) {
          scale = asKubeObject(
            applyPatch(patchType, currentScale as unknown as JsonObject, input as JsonObject, 'Scale'),
            'the patched Scale',
          );
        } else {
          scale = input as KubeObject;
          if (scale.kind !== undefined && scale.kind !== '' && scale.kind !== 'Scale') {
            throw errors.badRequest(`expected a Scale, got ${String(scale.kind)}`);
          }
        }
        if (scale.metadata.name !== undefined && scale.metadata.name !== '' && scale.metadata.name !== name) {
          throw errors.badRequest(`the name of the object (${String(scale.metadata.name)}) does not match the name on the URL (${name})`);
        }
        checkPreconditions(def, name, current, { uid: scale.metadata.uid });
        const replicas = isJsonObject(scale.spec) ? scale.spec.replicas : undefined;
        const causes = validateReplicas(replicas ?? 0, 'spec.replicas');
        if (causes.length) throw errors.invalid('Scale', name, 'autoscaling', causes);
        const next: KubeObject = { ...current, spec: { ...(isJsonObject(current.spec) ? current.spec : {}), replicas: replicas ?? 0 } };
        // A resourceVersion in the Scale (sent, or put there by the patch: the current copy has
        // none) is a precondition on the workload, as in Kubernetes.
        const wanted = scale.metadata.resourceVersion;
        if (typeof wanted === 'string' && wanted) next.metadata = { ...next.metadata, resourceVersion: wanted };
        await this.admit(user, verb, request, next);
        return next;
      },
      { dryRun },
    );
    sendJson(res, 200, scaleOf(updated));
  }

  /** `pods/P/log`: checked here, served by the podLogs hook (which reaches the pod's agent). */
  private async serveLog(req: IncomingMessage, res: ServerResponse, url: URL, request: ResourceRequest): Promise<void> {
    const params = url.searchParams;
    const integer = (name: string, min: number): number | undefined => {
      const text = params.get(name);
      if (text === null || text === '') return undefined;
      const value = Number(text);
      if (!Number.isInteger(value) || value < min) {
        throw errors.badRequest(`${name} must be an integer of at least ${min} (got "${text}")`);
      }
      return value;
    };
    const tailLines = integer('tailLines', 0);
    const limitBytes = integer('limitBytes', 1);
    const pod = await this.options.store.get(request.def, request.namespace, request.name!);
    const names = (field: string): string[] => {
      const list = isJsonObject(pod.spec) ? pod.spec[field] : undefined;
      return Array.isArray(list) ? list.filter(isJsonObject).map((c) => String(c.name)) : [];
    };
    const containers = names('containers');
    const initContainers = names('initContainers');
    let container = params.get('container') || undefined;
    if (container === undefined) {
      if (containers.length !== 1) {
        const init = initContainers.length ? ` or one of the init containers: [${initContainers.join(' ')}]` : '';
        throw errors.badRequest(
          `a container name must be specified for pod ${request.name}, choose one of: [${containers.join(' ')}]${init}`,
        );
      }
      container = containers[0];
    } else if (!containers.includes(container) && !initContainers.includes(container)) {
      throw errors.badRequest(`container ${container} is not valid for pod ${request.name}`);
    }
    if (!this.options.podLogs) {
      throw new ApiError(404, 'NotFound', 'this server does not serve container logs', {});
    }
    await this.options.podLogs(
      pod,
      {
        ...(container !== undefined ? { container } : {}),
        follow: queryBool(params, 'follow'),
        previous: queryBool(params, 'previous'),
        ...(tailLines !== undefined ? { tailLines } : {}),
        ...(limitBytes !== undefined ? { limitBytes } : {}),
      },
      req,
      res,
    );
  }
}

/**
 * What admission may read of a stored object that a patch is about to consume in place: a copy of
 * all but its status (the bulk of a Node or Pod, which no admission rule judges), shared as is.
 */
function admissionSnapshot(current: KubeObject): KubeObject {
  const { status, ...rest } = current;
  return { ...structuredClone(rest), ...(status !== undefined ? { status } : {}) };
}
