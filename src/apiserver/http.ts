import type { IncomingMessage, ServerResponse } from 'node:http';
import { isAlias, isMap, isPair, isScalar, isSeq, Lexer, parseDocument } from 'yaml';
import { ApiError, errors } from './errors.js';
import { checkDecoded, MAX_NESTING_DEPTH, MAX_YAML_TOKENS } from './limits.js';
import { decodeKubernetesProtobuf } from './protobuf.js';
import type { IncludeObject } from './table.js';

/** Request bodies above this are refused with 413, as kube-apiserver does (3 MiB). */
export const MAX_BODY_BYTES = 3 * 1024 * 1024;

/**
 * The client went away before its request body was complete: nobody is left to answer, and it
 * is not the server's fault, so it is neither logged as an error nor answered.
 */
export class ClientGoneError extends Error {
  override name = 'ClientGoneError';
}

export function readBody(req: IncomingMessage, limit: number = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  // Past the limit the rest is still read, and dropped, and the 413 comes once the client has
  // sent everything: answering (and closing) while it still sends would reset the connection,
  // answer and all. The server's request timeout bounds how long a client may take.
  let tooLarge = Number.isFinite(declared) && declared > limit;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const fail = (error: Error): void => {
      if (settled) return;
      settled = true;
      chunks.length = 0;
      reject(error);
    };
    req.on('data', (chunk: Buffer) => {
      if (settled || tooLarge) return;
      size += chunk.length;
      if (size > limit) {
        tooLarge = true;
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooLarge) {
        fail(errors.tooLarge(limit));
        return;
      }
      if (settled) return;
      settled = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    // An aborted upload ends in 'error' (ECONNRESET) or in 'close' without 'end'.
    // The error is made only when it is news: 'close' follows every request, and an Error's stack
    // trace costs more than the rest of this function.
    const gone = (): void => {
      if (!settled) fail(new ClientGoneError('the client closed the connection while sending its request'));
    };
    req.on('error', gone);
    req.on('close', gone);
  });
}

export function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

/**
 * A YAML body as JSON. The parser is slow (tens of microseconds a token) and its duplicate-key
 * check is quadratic, so the tokens are counted first (the lexer is fast and stops early), keys
 * are checked here in one pass, and aliases may not expand into a billion nodes.
 */
function decodeYaml(text: string): unknown {
  const fail = (why: string): never => {
    throw errors.badRequest(`error decoding YAML request body: ${why}`);
  };
  let tokens = 0;
  let flowDepth = 0;
  for (const token of new Lexer().lex(text)) {
    if (++tokens > MAX_YAML_TOKENS) {
      fail(`it has more than ${MAX_YAML_TOKENS} tokens; send large objects as JSON (as kubectl does)`);
    }
    // Flow collections ([...], {...}) nest without indentation; deeper ones are refused here,
    // before the recursive parser. Block nesting needs indentation, which the token cap bounds.
    if (token === '[' || token === '{') {
      if (++flowDepth > MAX_NESTING_DEPTH) fail(`it is nested deeper than ${MAX_NESTING_DEPTH} levels`);
    } else if (token === ']' || token === '}') {
      flowDepth--;
    }
  }
  try {
    const doc = parseDocument(text, { uniqueKeys: false });
    if (doc.errors.length) fail(doc.errors[0]!.message);
    // Every mapping: scalar keys, each once (kube-apiserver's YAML decoder refuses duplicates).
    const nodes: unknown[] = [doc.contents];
    for (let node = nodes.pop(); node !== undefined; node = nodes.pop()) {
      if (isSeq(node)) nodes.push(...node.items);
      if (!isMap(node)) continue;
      const seen = new Set<string>();
      for (const pair of node.items) {
        if (!isPair(pair)) continue;
        const key = pair.key;
        if (isAlias(key) || !isScalar(key) || (key.value !== null && typeof key.value === 'object')) {
          fail(`a mapping key must be a string, number or boolean (at line ${lineOf(text, pair)})`);
        }
        const name = String((key as { value: unknown }).value);
        if (seen.has(name)) fail(`mapping key "${name}" already defined (at line ${lineOf(text, pair)})`);
        seen.add(name);
        nodes.push(pair.value);
      }
    }
    return doc.toJS({ maxAliasCount: 100 });
  } catch (error) {
    if (error instanceof ApiError) throw error;
    // The parser's own errors, "excessive alias count", a stack overflow on deep nesting.
    return fail(error instanceof Error ? error.message : String(error));
  }
}

function lineOf(text: string, pair: { key: unknown }): number {
  const range = (pair.key as { range?: [number, number, number] } | null)?.range;
  if (!range) return 0;
  let line = 1;
  for (let i = 0; i < range[0] && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/**
 * Decode a JSON or YAML request body; any parse failure is a 400 that quotes the parser, and the
 * result is checked against the nesting and number limits (limits.ts).
 */
export function decodeBody(body: Buffer, contentType: string | undefined): unknown {
  const type = mediaType(contentType);
  const text = body.toString('utf8');
  let decoded: unknown;
  if (type === 'application/yaml' || type === 'application/x-yaml' || type === 'text/yaml') {
    decoded = decodeYaml(text);
  } else if (type.startsWith('application/vnd.kubernetes.protobuf')) {
    // kubectl's generator commands (create namespace, create pdb) send protobuf.
    decoded = decodeKubernetesProtobuf(body).object;
  } else if (type && !type.endsWith('json')) {
    throw errors.unsupportedMediaType(type, ['application/json', 'application/yaml']);
  } else {
    decoded = parseJson(text, 'error decoding JSON request body');
  }
  checkDecoded(decoded, 'the request body');
  return decoded;
}

/** JSON.parse with its error as a 400. V8's parser is iterative: depth is checked afterwards. */
export function parseJson(text: string, context: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw errors.badRequest(`${context}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

export interface Negotiated {
  /** A meta.k8s.io Table was asked for (kubectl get). */
  table: boolean;
  /** Aggregated discovery was asked for, and which version. */
  aggregatedDiscovery?: 'v2' | 'v2beta1';
}

interface MediaRange {
  type: string;
  params: Record<string, string>;
}

function parseAccept(accept: string): MediaRange[] {
  return accept
    .split(',')
    .map((part) => {
      const [type, ...rest] = part.split(';');
      const params: Record<string, string> = {};
      for (const p of rest) {
        const eq = p.indexOf('=');
        if (eq > 0) params[p.slice(0, eq).trim()] = p.slice(eq + 1).trim();
      }
      return { type: (type ?? '').trim().toLowerCase(), params };
    })
    .filter((range) => range.type);
}

/**
 * Pick the response form from the Accept header, in the client's order of preference. Protobuf is
 * skipped (clients that offer it also offer JSON). Only JSON-compatible forms are served.
 */
export function negotiate(accept: string | undefined): Negotiated {
  if (!accept) return { table: false };
  const ranges = parseAccept(accept);
  for (const range of ranges) {
    const { type, params } = range;
    if (type !== 'application/json' && type !== '*/*' && type !== 'application/*' && type !== 'application/yaml') {
      continue;
    }
    if (params.as === 'Table' && params.g === 'meta.k8s.io' && (params.v === 'v1' || params.v === 'v1beta1')) {
      return { table: true };
    }
    if (params.as === 'APIGroupDiscoveryList' && params.g === 'apidiscovery.k8s.io') {
      if (params.v === 'v2' || params.v === 'v2beta1') return { table: false, aggregatedDiscovery: params.v };
      continue;
    }
    if (params.as) continue;
    return { table: false };
  }
  throw errors.notAcceptable(accept);
}

export function includeObjectParam(value: string | null): IncludeObject {
  if (value === 'None' || value === 'Object') return value;
  return 'Metadata';
}

export function sendJson(
  res: ServerResponse,
  code: number,
  body: unknown,
  contentType: string = 'application/json',
  headers: Record<string, string> = {},
): void {
  const payload = JSON.stringify(body);
  res.writeHead(code, {
    'Content-Type': contentType,
    'Content-Length': Buffer.byteLength(payload),
    'Cache-Control': 'no-cache, private',
    ...headers,
  });
  res.end(payload);
}

export function sendText(res: ServerResponse, code: number, text: string): void {
  res.writeHead(code, {
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-cache, private',
    'X-Content-Type-Options': 'nosniff',
  });
  res.end(text);
}

export function sendError(res: ServerResponse, error: ApiError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const headers: Record<string, string> = {};
  // As kube-apiserver: a Status that says when to retry says it in the header too.
  const retryAfter = error.details?.retryAfterSeconds;
  if (retryAfter !== undefined && retryAfter > 0) headers['Retry-After'] = String(retryAfter);
  sendJson(res, error.code, error.toStatus(), 'application/json', headers);
}
