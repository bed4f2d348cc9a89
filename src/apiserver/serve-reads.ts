import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logging/logger.js';
import { apiVersionOf, type ResourceDefinition } from './definition.js';
import { ApiError, errors } from './errors.js';
import { includeObjectParam, type Negotiated, negotiate, sendJson } from './http.js';
import { integerParam, MAX_INT32, resourceVersionParam } from './limits.js';
import type { KubeObject } from './objects.js';
import { queryBool } from './query.js';
import type { ResourceRequest } from './request-info.js';
import type { WatchEventType } from './storage-types.js';
import { type IncludeObject, toTable } from './table.js';
import type { RequestContext } from './verbs/context.js';
import type { ResourceVerbs } from './verbs/verbs.js';

/** The HTTP side of get, list and watch: query parameters in, JSON or Table out, watch streaming. */

/** How long before a watch's timeout its last bookmark is asked for (kube-apiserver: 2 s). */
const PRE_TIMEOUT_BOOKMARK_MS = 2000;

export interface WatchSettings {
  /** How often a watch that allows bookmarks gets one. */
  bookmarkIntervalMs: number;
  /** Bytes of events a watch's client may leave unread (beyond its initial list) before the watch is cut. */
  watchUnreadBytes: number;
  logger: Logger;
}

/** One resource request on its way to the verb layer: what every serve-* function is given. */
export interface HttpCall {
  verbs: ResourceVerbs;
  ctx: RequestContext;
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  request: ResourceRequest;
}

export function listKind(def: ResourceDefinition): string {
  return def.listKind ?? `${def.kind}List`;
}

/** One object, as JSON or (when kubectl asked for it) a one-row Table. */
export function respondObject(
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

export async function serveGet(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  // kube-apiserver serves an eviction by POST only (its storage only creates), so a GET that got
  // past authorization is a 405 without a read: a missing pod gets it too, not a 404.
  if (request.subresource === 'eviction') throw errors.methodNotAllowed();
  const negotiated = negotiate(req.headers.accept);
  const obj = await verbs.get(ctx, request.def, request.namespace, request.name!, resourceVersionParam(url.searchParams));
  respondObject(res, 200, negotiated, request.def, obj, includeObjectParam(url.searchParams.get('includeObject')));
}

export async function serveList(call: HttpCall): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const { def } = request;
  const params = url.searchParams;
  // Any int64 is a valid limit to kube-apiserver; beyond 2^53 a JavaScript number cannot say it.
  const limit = integerParam(params, 'limit', 0, Number.MAX_SAFE_INTEGER) ?? 0;
  const resourceVersion = resourceVersionParam(params);
  const resourceVersionMatch = params.get('resourceVersionMatch');
  const continueToken = params.get('continue');
  const result = await verbs.list(ctx, def, request.namespace, {
    labelSelector: params.get('labelSelector'),
    fieldSelector: params.get('fieldSelector'),
    ...(limit ? { limit } : {}),
    ...(continueToken ? { continueToken } : {}),
    ...(resourceVersion !== undefined ? { resourceVersion } : {}),
    ...(resourceVersionMatch !== null ? { resourceVersionMatch } : {}),
    // Serialized as they are below; a Table is made by the printers from private copies.
    ...(negotiated.table ? {} : { sharedItems: true }),
  });
  const listMeta = {
    resourceVersion: result.resourceVersion,
    ...(result.continueToken ? { continue: result.continueToken } : {}),
  };
  if (negotiated.table) {
    sendJson(res, 200, toTable(def.printer, result.items, includeObjectParam(params.get('includeObject')), listMeta));
    return;
  }
  sendJson(res, 200, { kind: listKind(def), apiVersion: apiVersionOf(def), metadata: listMeta, items: result.items });
}

/**
 * A watch as a chunked stream of JSON lines: the events, bookmarks when allowed, an ERROR event
 * for a failure, until the timeout (30-60 minutes unless asked), the client leaving, or the client
 * leaving too many bytes unread.
 */
export async function serveWatch(call: HttpCall, settings: WatchSettings): Promise<void> {
  const { verbs, ctx, req, res, url, request } = call;
  const negotiated = negotiate(req.headers.accept);
  const { def } = request;
  const params = url.searchParams;
  const include = includeObjectParam(params.get('includeObject'));
  const allowBookmarks = queryBool(params, 'allowWatchBookmarks');
  const fromVersion = resourceVersionParam(params);
  const timeoutSeconds = integerParam(params, 'timeoutSeconds', 0, MAX_INT32);
  const startWatch = verbs.watch(ctx, def, request.namespace, {
    labelSelector: params.get('labelSelector'),
    fieldSelector: params.get('fieldSelector'),
    ...(request.name !== undefined ? { name: request.name } : {}),
    ...(fromVersion !== undefined ? { resourceVersion: fromVersion } : {}),
  });
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
      settings.logger.debug({ path: url.pathname, unreadBytes: res.writableLength }, 'cut a watch whose client does not read its events');
      finish();
      res.destroy();
    }
  };
  const wrap = (obj: KubeObject): unknown =>
    negotiated.table ? toTable(def.printer, [obj], include, { resourceVersion: obj.metadata.resourceVersion ?? '' }) : obj;
  let lastSent = '';
  try {
    handle = await startWatch({
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
    if (!(error instanceof ApiError)) settings.logger.error({ err: error }, 'unexpected error while starting a watch');
    const apiError = error instanceof ApiError ? error : errors.internal('an unexpected error occurred while starting the watch; the server log has the details');
    write('ERROR', apiError.toStatus());
    finish();
    return;
  }
  if (closed) {
    handle.cancel();
    return;
  }
  unreadLimit = res.writableLength + settings.watchUnreadBytes;
  timers.push(setTimeout(finish, timeoutMs));
  if (allowBookmarks) {
    const tick = (): void => {
      handle?.requestProgress();
      timers.push(setTimeout(tick, settings.bookmarkIntervalMs));
    };
    timers.push(setTimeout(tick, settings.bookmarkIntervalMs));
    // As kube-apiserver does: one more shortly before the server ends the watch, so the client
    // re-watches from the latest revision rather than from its last event.
    if (timeoutMs > PRE_TIMEOUT_BOOKMARK_MS) {
      timers.push(setTimeout(() => handle?.requestProgress(), timeoutMs - PRE_TIMEOUT_BOOKMARK_MS));
    }
  }
}
