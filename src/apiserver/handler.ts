import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ServiceNetwork } from '../node-protocol/service-network.js';
import type { Logger } from '../logging/logger.js';
import { METRICS_CONTENT_TYPE } from '../metrics/content-type.js';
import type { ServerMetrics } from '../metrics/metrics.js';
import type { Admission, Authenticator, Authorizer, RequestAttributes, UserInfo } from './auth.js';
import type { TokenIssuer } from './definition.js';
import {
  AGGREGATED_CONTENT_TYPE,
  aggregatedDiscovery,
  apiGroup,
  apiGroupList,
  apiResourceList,
  apiVersions,
} from './discovery.js';
import { ApiError, errors } from './errors.js';
import { ClientGoneError, negotiate, sendError, sendJson, sendText } from './http.js';
import {
  DEFAULT_LONG_RUNNING_LIMITS,
  LongRunningLimiter,
  type LongRunningLimits,
  MAX_WATCH_UNREAD_BYTES,
} from './limits.js';
import type { OpenApiDocuments } from './openapi.js';
import { forbiddenRefusal } from './rbac/authorizer.js';
import type { RbacSource } from './rbac/types.js';
import { queryBool } from './query.js';
import { nameFromFieldSelector, parseResourcePath, type ResourceRequest, verbOf } from './request-info.js';
import { checkWriteOptions } from './request-options.js';
import type { ResourceRegistry } from './resources.js';
import { type HttpCall, serveGet, serveList, serveWatch, type WatchSettings } from './serve-reads.js';
import {
  type PodLogHook,
  serveCreate,
  serveDelete,
  serveDeleteCollection,
  serveEviction,
  serveLog,
  servePatch,
  serveScale,
  serveTokenRequest,
  serveUpdate,
} from './serve-writes.js';
import type { ObjectStore } from './storage.js';
import type { RequestContext } from './verbs/context.js';
import { ResourceVerbs } from './verbs/verbs.js';
import { presentsClientCertificate } from './x509-auth.js';
import { type PodStreamBackend, refuseUpgrade, serveStreamUpgrade } from './streaming/upgrade.js';
import { STREAM_SUBRESOURCES } from './streaming/options.js';
import type { Duplex } from 'node:stream';
import type { VersionInfo } from '../version.js';
import { DatastoreError } from '../datastore/types.js';
import { DISCOVERY_CACHE_CONTROL, JWKS_CONTENT_TYPE, JWKS_PATH, OPENID_CONFIGURATION_PATH } from '../security/service-account-tokens.js';
import { type RenewalTracker, renewedLease } from './renewal-tracker.js';
import { type Classification, classify } from './flow-control/classify.js';
import type { FlowController, Release } from './flow-control/dispatcher.js';

export type { PodLogParams } from './definition.js';

/**
 * The request path of the API: parse the URL into a request (as Kubernetes' RequestInfo does,
 * src/apiserver/request-info.ts), authenticate, authorize, then call the verb layer
 * (src/apiserver/verbs/), which runs admission and the kinds' hooks, and encode its answer
 * (serve-reads.ts, serve-writes.ts). LocalClient calls the same verb layer in-process.
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
  /** The RBAC objects the authorizer reads, for SelfSubjectRulesReview (`kubectl auth can-i --list`). */
  rbac?: RbacSource;
  /** Signs ServiceAccount tokens (`serviceaccounts/<name>/token`); without it, that is a 404. */
  tokens?: TokenIssuer;
  /** The cluster's `default-runtime-class`: the class of pods created without one. */
  defaultRuntimeClass?: string;
  /** The cluster's Service network (service-cidr, node port range): what Services are allocated from. */
  serviceNetwork?: ServiceNetwork;
  /**
   * The service account issuer's OpenID discovery documents, for external verifiers of tokens
   * (/.well-known/openid-configuration, /openid/v1/jwks); without it, both are 404.
   */
  issuerDiscovery?: () => { openIdConfiguration: object; jwks: object };
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
  podLogs?: PodLogHook;
  /**
   * Reaches a pod's agent for `pods/exec|attach|portforward` (src/apiserver/streaming/); without
   * it, those are a 404 after authorization.
   */
  podStreams?: PodStreamBackend;
  /** How many watches and followed logs a user, and the server, may hold open at once. */
  longRunning?: LongRunningLimits;
  /** Bytes of events a watch's client may leave unread (beyond its initial list) before the watch is cut. */
  watchUnreadBytes?: number;
  /** Told when a node lease renewal arrives and when it is answered (renewal-tracker.ts). */
  renewals?: Pick<RenewalTracker, 'arrived'>;
  /**
   * Seats and queues per priority level (src/apiserver/flow-control/, docs/flow-control.md):
   * resource requests wait for a seat or are refused with 429. Without it, nothing is bounded.
   */
  flowControl?: FlowController;
}

const PUBLIC_PATHS = new Set(['/healthz', '/livez', '/readyz', '/version', '/cacerts']);

export class ApiHandler {
  private readonly verbs: ResourceVerbs;
  private readonly watchSettings: WatchSettings;
  private readonly longRunning: LongRunningLimiter;
  /** What each request turned out to be, for metrics. */
  private readonly requestKinds = new WeakMap<ServerResponse, { verb: string; resource: string }>();

  constructor(private readonly options: HandlerOptions) {
    this.verbs = new ResourceVerbs({
      store: options.store,
      registry: options.registry,
      logger: options.logger,
      authorizer: options.authorizer,
      ...(options.admission ? { admission: options.admission } : {}),
      ...(options.rbac ? { rbac: options.rbac } : {}),
      ...(options.tokens ? { tokens: options.tokens } : {}),
      ...(options.defaultRuntimeClass ? { defaultRuntimeClass: options.defaultRuntimeClass } : {}),
      ...(options.serviceNetwork ? { serviceNetwork: options.serviceNetwork } : {}),
    });
    this.watchSettings = {
      bookmarkIntervalMs: options.bookmarkIntervalMs ?? 15_000,
      watchUnreadBytes: options.watchUnreadBytes ?? MAX_WATCH_UNREAD_BYTES,
      logger: options.logger,
    };
    this.longRunning = new LongRunningLimiter(options.longRunning ?? DEFAULT_LONG_RUNNING_LIMITS);
  }

  /** Entry point for node:http(s). Never throws: every failure becomes a Status response. */
  handle = (req: IncomingMessage, res: ServerResponse): void => {
    const started = process.hrtime.bigint();
    const renewed = this.options.renewals && renewedLease(req.method, req.url);
    if (renewed) res.once('close', this.options.renewals!.arrived(renewed));
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
   * Entry point for HTTP upgrades (node:http's 'upgrade' event): the streaming subresources
   * (src/apiserver/streaming/upgrade.ts). Never throws: a refusal is an HTTP error with its Status.
   */
  handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const deps = {
      authenticator: this.options.authenticator,
      authorizer: this.options.authorizer,
      registry: this.options.registry,
      store: this.options.store,
      logger: this.options.logger,
      ...(this.options.podStreams ? { backend: this.options.podStreams } : {}),
      acquire: (user: string) => this.longRunning.acquire(user, 'exec, attach and port-forward sessions'),
    };
    serveStreamUpgrade(deps, req, socket, head).catch((error: unknown) => {
      if (error instanceof ApiError) {
        refuseUpgrade(socket, error);
        return;
      }
      this.options.logger.error({ err: error, path: req.url?.split('?')[0] }, 'unexpected error while upgrading a request');
      refuseUpgrade(socket, errors.internal('an unexpected error occurred while serving the request; the server log has the details'));
    });
  };

  /**
   * Client errors are answered with their Status and not logged above debug; a datastore that
   * failed is a 503 (retry); anything else is a server bug: logged once with its stack, answered
   * with a 500 that does not echo internals.
   */
  private fail(req: IncomingMessage, res: ServerResponse, error: unknown): void {
    if (error instanceof ApiError) {
      sendError(res, error);
      return;
    }
    if (error instanceof ClientGoneError) {
      this.options.logger.debug({ method: req.method, path: req.url?.split('?')[0] }, error.message);
      res.destroy();
      return;
    }
    if (error instanceof DatastoreError && error.constructor === DatastoreError) {
      // The kinds of datastore failure a request can cause (a conflict, a missing key) became
      // their API errors in the store, and a subclass left (a value that cannot be decrypted) is
      // this server's fault; a plain DatastoreError is the datastore's own trouble.
      this.options.logger.warn({ reason: error.message, method: req.method, path: req.url?.split('?')[0] }, 'the datastore failed a request');
      sendError(res, errors.datastoreUnavailable(error.message));
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
      // Anonymous callers may read these, but a token or client certificate that fails
      // authentication is refused everywhere, as kube-apiserver does.
      if ((req.headers.authorization || presentsClientCertificate(req)) && !(await this.options.authenticator.authenticate(req))) throw errors.unauthorized();
      await this.servePublic(path, method, res);
      return;
    }
    if (this.options.droverEndpoints && path.startsWith('/drover/') && (await this.options.droverEndpoints(req, res, path))) return;
    if (path === '/metrics') {
      await this.serveMetrics(req, res, path, method);
      return;
    }
    if (this.options.kubernetesApi === false) {
      throw new ApiError(404, 'NotFound', `this is an etcd-only server: it serves no Kubernetes API (${path}); use a control-plane server`);
    }
    const user = await this.options.authenticator.authenticate(req);
    if (!user) throw errors.unauthorized();
    // Acting as someone else (kubectl --as) is not implemented: refused, rather than silently
    // answering as the caller, which would make `kubectl auth can-i --as x` lie.
    if (Object.keys(req.headers).some((header) => header.startsWith('impersonate-'))) {
      throw errors.badRequest('impersonation (Impersonate-* headers, kubectl --as/--as-group) is not supported by Drover');
    }
    // Discovery and OpenAPI are non-resource paths: the default system:discovery role lets every
    // authenticated user read them.
    const resourceRequest = /^\/(api\/[^/]+|apis\/[^/]+\/[^/]+)\/./.test(path);
    if (!resourceRequest) this.authorizePath(user, path, method);

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
    if (path === '/openapi/v2') {
      this.serveOpenApiV2(req, res);
      return;
    }
    if (path === OPENID_CONFIGURATION_PATH || path === JWKS_PATH) {
      this.serveIssuerDiscovery(path, method, res);
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
    const request = parseResourcePath(this.options.registry, group, version, rest);
    await this.serveResource(req, res, url, request, user);
  }

  /** Waits for the request's seat (or throws its 429); the seat is given back when the response closes. */
  private async takeSeat(flowControl: FlowController, res: ServerResponse, classification: Classification): Promise<void> {
    let closed = false;
    let release: Release | undefined;
    res.once('close', () => {
      closed = true;
      release?.();
    });
    const seat = flowControl.admit(classification, (gone) => res.once('close', gone));
    release = seat instanceof Promise ? await seat : seat;
    if (closed) {
      release();
      throw new ClientGoneError('the client went away while its request waited for a seat');
    }
  }

  /** A request for a path outside the resource API, as authorizers judge it (kube's 403 when refused). */
  private authorizePath(user: UserInfo, path: string, method: string): void {
    const attributes = { verb: method.toLowerCase(), path };
    const decision = this.options.authorizer.authorize(user, attributes);
    if (!decision.allowed) throw errors.forbidden(forbiddenRefusal(user, attributes, decision.reason).message);
  }

  /** 404 unless this node's own supervisor-metrics is on; callers the authorizer lets read it (RBAC: system:monitoring). */
  private async serveMetrics(req: IncomingMessage, res: ServerResponse, path: string, method: string): Promise<void> {
    const metrics = this.options.metrics;
    if (!metrics) throw errors.pathNotFound();
    const user = await this.options.authenticator.authenticate(req);
    if (!user) throw errors.unauthorized();
    this.authorizePath(user, path, method);
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

  /** To any authenticated caller (kube: system:service-account-issuer-discovery); public keys only. */
  private serveIssuerDiscovery(path: string, method: string, res: ServerResponse): void {
    if (method !== 'GET' && method !== 'HEAD') throw errors.methodNotAllowed();
    const documents = this.options.issuerDiscovery?.();
    if (!documents) throw errors.pathNotFound();
    const jwks = path === JWKS_PATH;
    sendJson(res, 200, jwks ? documents.jwks : documents.openIdConfiguration, jwks ? JWKS_CONTENT_TYPE : 'application/json', {
      'Cache-Control': DISCOVERY_CACHE_CONTROL,
    });
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

  /** Swagger 2.0: gnostic protobuf when asked for (kubectl 1.20), else JSON. */
  private serveOpenApiV2(req: IncomingMessage, res: ServerResponse): void {
    const doc = this.options.openapi.version2();
    const protobuf = (req.headers.accept ?? '').includes('application/com.github.proto-openapi.spec.v2');
    const body = protobuf ? doc.protobuf : doc.json;
    res.writeHead(200, {
      // Go's mime parser (kubectl 1.20) refuses the '@' of the requested type: kube-apiserver answers octet-stream.
      'Content-Type': protobuf ? 'application/octet-stream' : 'application/json',
      ETag: `"${doc.etag}"`,
      'Content-Length': Buffer.byteLength(body),
    });
    res.end(body);
  }

  /**
   * One request for a resource: its verb, authorization, the write options of the query, then
   * the verb layer (through the serve-* functions, which read the body and encode the answer).
   */
  private async serveResource(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    request: ResourceRequest,
    user: UserInfo,
  ): Promise<void> {
    const method = req.method ?? 'GET';
    const verb = verbOf(method, request, url.searchParams);
    if (verb === 'invalid') throw errors.methodNotAllowed();
    const { def } = request;
    this.requestKinds.set(res, { verb, resource: request.subresource ? `${def.plural}/${request.subresource}` : def.plural });
    const attributeName = request.name ?? nameFromFieldSelector(verb, url.searchParams);
    const attributes: RequestAttributes = {
      verb,
      group: def.group,
      resource: def.plural,
      ...(request.subresource ? { subresource: request.subresource } : {}),
      ...(request.namespace ? { namespace: request.namespace } : {}),
      ...(attributeName ? { name: attributeName } : {}),
    };
    const decision = this.options.authorizer.authorize(user, attributes);
    if (!decision.allowed) {
      // kube-apiserver's wording, which kubectl prints as is.
      const refusal = forbiddenRefusal(user, attributes, decision.reason);
      throw errors.forbidden(refusal.message, def, refusal.name || undefined);
    }
    if (this.options.flowControl) {
      const follow = request.subresource === 'log' && queryBool(url.searchParams, 'follow');
      // Only a list's seats depend on its page size and on how many objects it would walk.
      const listSize = verb === 'list'
        ? { limit: Number(url.searchParams.get('limit')) || undefined, storedObjects: this.options.store.watchCache(def)?.size }
        : {};
      await this.takeSeat(this.options.flowControl, res, classify({ user: user.name, groups: user.groups, ...attributes, follow, ...listSize }));
    }
    checkWriteOptions(verb, url.searchParams);
    const fieldManager = url.searchParams.get('fieldManager');
    const ctx: RequestContext = {
      user,
      dryRun: url.searchParams.getAll('dryRun').includes('All'),
      userAgent: req.headers['user-agent'] ?? '',
      ...(fieldManager ? { fieldManager } : {}),
      ...(url.searchParams.has('force') ? { force: queryBool(url.searchParams, 'force') } : {}),
    };
    const call: HttpCall = { verbs: this.verbs, ctx, req, res, url, request };
    if (request.subresource === 'scale') return serveScale(call, verb);
    // Reached here without an Upgrade header (upgrades go through handleUpgrade): as kube-apiserver.
    if (request.subresource && STREAM_SUBRESOURCES.has(request.subresource)) throw errors.badRequest('Upgrade request required');
    if (verb === 'watch' || (request.subresource === 'log' && queryBool(url.searchParams, 'follow'))) {
      // Taken before any work and given back when the connection goes, however it ends.
      const release = this.longRunning.acquire(user.name, verb === 'watch' ? 'watches' : 'followed logs');
      res.once('close', release);
    }
    if (request.subresource === 'log') return serveLog(call, this.options.podLogs);
    switch (verb) {
      case 'get':
        return serveGet(call);
      case 'list':
        return serveList(call);
      case 'watch':
        return serveWatch(call, this.watchSettings);
      case 'create':
        if (request.subresource === 'eviction') return serveEviction(call);
        if (request.subresource === 'token') return serveTokenRequest(call);
        return serveCreate(call);
      case 'update':
        return serveUpdate(call);
      case 'patch':
        return servePatch(call);
      case 'delete':
        return serveDelete(call);
      case 'deletecollection':
        return serveDeleteCollection(call);
    }
  }
}
