import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { ApiError, errors } from './errors.js';
import { decodeKubernetesProtobuf } from './protobuf.js';
import type { IncludeObject } from './table.js';

/** Request bodies above this are refused with 413, as kube-apiserver does (3 MiB). */
export const MAX_BODY_BYTES = 3 * 1024 * 1024;

export function readBody(req: IncomingMessage, limit: number = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.reject(errors.tooLarge(limit));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        reject(errors.tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!failed) resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    req.on('error', (error) => {
      if (!failed) reject(error);
    });
  });
}

export function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

/** Decode a JSON or YAML request body; any parse failure is a 400 that quotes the parser. */
export function decodeBody(body: Buffer, contentType: string | undefined): unknown {
  const type = mediaType(contentType);
  const text = body.toString('utf8');
  if (type === 'application/yaml' || type === 'application/x-yaml' || type === 'text/yaml') {
    try {
      return parseYaml(text, { uniqueKeys: true });
    } catch (error) {
      const message = error instanceof YAMLParseError ? error.message : String(error);
      throw errors.badRequest(`error decoding YAML request body: ${message}`);
    }
  }
  if (type.startsWith('application/vnd.kubernetes.protobuf')) {
    // kubectl's generator commands (create namespace, create pdb) send protobuf.
    return decodeKubernetesProtobuf(body).object;
  }
  if (type && !type.endsWith('json')) {
    throw errors.unsupportedMediaType(type, ['application/json', 'application/yaml']);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw errors.badRequest(
      `error decoding JSON request body: ${error instanceof Error ? error.message : String(error)}`,
    );
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
  sendJson(res, error.code, error.toStatus());
}
