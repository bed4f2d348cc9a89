import fs from 'node:fs';
import { isMap, isScalar, isSeq, LineCounter, type Node, parseDocument, type Pair, type YAMLMap } from 'yaml';
import { DEFAULT_DOMAIN as DOCKER_HUB, type ImageRef } from '../reference.js';

/**
 * `registries.yaml` in K3s's format: where a node pulls images from (`mirrors`: endpoints tried
 * in order, then the registry itself, with regex rewrites of the repository for mirrors) and how
 * it talks to each host (`configs`: credentials and TLS). Parsing and resolution are pure; only
 * `loadRegistries` reads files. A missing file means no mirrors and no configs; a malformed one
 * is an error naming the file and the line.
 */

export interface RegistryAuth {
  username?: string;
  password?: string;
  /** base64 of `username:password`. */
  auth?: string;
  /** An OAuth2 refresh token for the registry's token service. */
  identityToken?: string;
}

export interface RegistryTls {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  insecureSkipVerify: boolean;
  /** The files' contents, filled by loadRegistries (PEM). */
  ca?: string;
  cert?: string;
  key?: string;
}

export interface HostConfig {
  auth?: RegistryAuth;
  tls?: RegistryTls;
}

export interface RewriteRule {
  /** As written (RE2 syntax, as K3s reads it). */
  source: string;
  pattern: RegExp;
  replacement: string;
}

export interface MirrorConfig {
  /** Endpoint URLs as written, normalized: scheme (https by default), host, API root path ending in /v2. */
  endpoints: URL[];
  rewrites: RewriteRule[];
}

export interface RegistriesConfig {
  /** The file it came from, for messages; undefined when there was none. */
  file?: string;
  /** Registry host (or `*`) → its mirror; null opts a host out of `*`. */
  mirrors: Map<string, MirrorConfig | null>;
  /** Host contacted (or `*`) → its config; null opts a host out of `*`. */
  configs: Map<string, HostConfig | null>;
  /** Keys Drover does not know (K3s ignores them too), with where they are. */
  warnings: string[];
}

export const EMPTY_REGISTRIES: RegistriesConfig = { mirrors: new Map(), configs: new Map(), warnings: [] };

/** A malformed registries.yaml: every problem, one a line, each with `file:line`. */
export class RegistriesError extends Error {
  override name = 'RegistriesError';
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing

class Reader {
  readonly problems: string[] = [];
  readonly warnings: string[] = [];
  constructor(
    private readonly file: string,
    private readonly lines: LineCounter,
  ) {}

  at(node: Node | Pair | null | undefined): string {
    const target = node && 'range' in node ? node : node && 'key' in node ? (node.key as Node | null) : null;
    const offset = target?.range?.[0] ?? 0;
    return `${this.file}:${this.lines.linePos(offset).line}`;
  }

  fail(node: Node | Pair | null | undefined, message: string): void {
    this.problems.push(`${this.at(node)}: ${message}`);
  }

  map(node: unknown, what: string, where: Node | Pair | null | undefined): YAMLMap | undefined {
    if (node === null || node === undefined || (isScalar(node) && node.value === null)) return undefined;
    if (!isMap(node)) {
      this.fail((node as Node) ?? where, `${what} must be a map`);
      return undefined;
    }
    return node;
  }

  /** Each `key: value` of a map, keys as strings; unknown keys warned about. */
  entries(map: YAMLMap, known?: readonly string[], what = ''): { key: string; pair: Pair; value: unknown }[] {
    const out: { key: string; pair: Pair; value: unknown }[] = [];
    for (const pair of map.items) {
      const key = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
      if (known && !known.includes(key)) {
        this.warnings.push(`${this.at(pair)}: unknown key "${key}"${what ? ` in ${what}` : ''} (ignored)`);
        continue;
      }
      out.push({ key, pair, value: pair.value });
    }
    return out;
  }

  string(value: unknown, what: string, where: Pair): string | undefined {
    if (value === null || value === undefined || (isScalar(value) && value.value === null)) return undefined;
    if (!isScalar(value) || typeof value.value === 'object') {
      this.fail(where, `${what} must be a string`);
      return undefined;
    }
    return String(value.value);
  }

  bool(value: unknown, what: string, where: Pair): boolean | undefined {
    if (value === null || value === undefined || (isScalar(value) && value.value === null)) return undefined;
    if (!isScalar(value) || typeof value.value !== 'boolean') {
      this.fail(where, `${what} must be true or false`);
      return undefined;
    }
    return value.value;
  }
}

/**
 * An endpoint as K3s reads it: `host[:port]` or a URL; no scheme means https; the API root is
 * the URL's path with `/v2` appended unless it already ends in `/v2`.
 */
export function parseEndpoint(text: string): URL {
  const withScheme = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(text) ? text : `https://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new Error(`"${text}" is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error(`"${text}": only https:// and http:// endpoints are supported`);
  if (url.username || url.password) throw new Error(`"${text}": credentials belong in configs.<host>.auth, not in the URL`);
  if (url.search || url.hash) throw new Error(`"${text}": an endpoint has no query or fragment`);
  let path = url.pathname.replace(/\/+$/, '');
  if (!path.endsWith('/v2')) path = `${path}/v2`;
  url.pathname = path;
  return url;
}

/** Go's RE2 named groups `(?P<name>…)` are JS's `(?<name>…)`; the rest of the syntax RE2 and JS share. */
function compileRewrite(source: string): RegExp {
  return new RegExp(source.replace(/\(\?P</g, '(?<'), 'g');
}

function parseMirror(reader: Reader, pair: Pair, host: string): MirrorConfig | null | undefined {
  const value = pair.value as Node | null;
  if (value === null || (isScalar(value) && value.value === null)) return null;
  const map = reader.map(value, `mirrors."${host}"`, pair);
  if (!map) return undefined;
  const mirror: MirrorConfig = { endpoints: [], rewrites: [] };
  for (const { key, pair: field, value: v } of reader.entries(map, ['endpoint', 'rewrite'], `mirrors."${host}"`)) {
    if (key === 'endpoint') {
      if (v === null || (isScalar(v) && v.value === null)) continue;
      if (!isSeq(v)) {
        reader.fail(field, `mirrors."${host}".endpoint must be a list of URLs`);
        continue;
      }
      for (const item of v.items) {
        if (!isScalar(item) || typeof item.value !== 'string' || !item.value) {
          reader.fail(item as Node, `mirrors."${host}".endpoint entries must be URLs`);
          continue;
        }
        try {
          mirror.endpoints.push(parseEndpoint(item.value.trim()));
        } catch (error) {
          reader.fail(item, `mirrors."${host}".endpoint ${(error as Error).message}`);
        }
      }
    } else {
      const rules = reader.map(v, `mirrors."${host}".rewrite`, field);
      if (!rules) continue;
      for (const { key: source, pair: rule, value: replacement } of reader.entries(rules)) {
        const text = reader.string(replacement, `mirrors."${host}".rewrite."${source}"`, rule);
        if (text === undefined) continue;
        try {
          mirror.rewrites.push({ source, pattern: compileRewrite(source), replacement: text });
        } catch (error) {
          reader.fail(rule, `mirrors."${host}".rewrite: "${source}" is not a regular expression: ${(error as Error).message}`);
        }
      }
    }
  }
  return mirror;
}

const AUTH_KEYS = ['username', 'password', 'auth', 'identity_token'] as const;
const TLS_KEYS = ['ca_file', 'cert_file', 'key_file', 'insecure_skip_verify'] as const;

function parseHostConfig(reader: Reader, pair: Pair, host: string): HostConfig | null | undefined {
  const value = pair.value as Node | null;
  if (value === null || (isScalar(value) && value.value === null)) return null;
  const map = reader.map(value, `configs."${host}"`, pair);
  if (!map) return undefined;
  const config: HostConfig = {};
  for (const { key, pair: field, value: v } of reader.entries(map, ['auth', 'tls'], `configs."${host}"`)) {
    const section = reader.map(v, `configs."${host}".${key}`, field);
    if (!section) continue;
    if (key === 'auth') {
      const auth: RegistryAuth = {};
      for (const { key: name, pair: entry, value: text } of reader.entries(section, AUTH_KEYS, `configs."${host}".auth`)) {
        const s = reader.string(text, `configs."${host}".auth.${name}`, entry);
        if (s === undefined) continue;
        if (name === 'identity_token') auth.identityToken = s;
        else auth[name as 'username' | 'password' | 'auth'] = s;
      }
      if (auth.auth !== undefined && decodeBasic(auth.auth) === undefined) {
        reader.fail(field, `configs."${host}".auth.auth must be base64 of "username:password"`);
      }
      config.auth = auth;
    } else {
      const tls: RegistryTls = { insecureSkipVerify: false };
      for (const { key: name, pair: entry, value: v2 } of reader.entries(section, TLS_KEYS, `configs."${host}".tls`)) {
        if (name === 'insecure_skip_verify') {
          tls.insecureSkipVerify = reader.bool(v2, `configs."${host}".tls.insecure_skip_verify`, entry) ?? false;
          continue;
        }
        const s = reader.string(v2, `configs."${host}".tls.${name}`, entry);
        if (s === undefined) continue;
        if (name === 'ca_file') tls.caFile = s;
        else if (name === 'cert_file') tls.certFile = s;
        else tls.keyFile = s;
      }
      if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) reader.fail(field, `configs."${host}".tls needs both cert_file and key_file, or neither`);
      config.tls = tls;
    }
  }
  return config;
}

/** `username:password` from base64, or undefined when it is not that. */
export function decodeBasic(auth: string): { username: string; password: string } | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(auth.trim())) return undefined;
  const text = Buffer.from(auth.trim(), 'base64').toString('utf8');
  const colon = text.indexOf(':');
  if (colon < 0) return undefined;
  return { username: text.slice(0, colon), password: text.slice(colon + 1) };
}

/** Parses the text of a registries.yaml (`file` names it in messages). Throws RegistriesError. */
export function parseRegistries(text: string, file: string): RegistriesConfig {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
  const reader = new Reader(file, lines);
  if (doc.errors.length) {
    throw new RegistriesError(
      doc.errors.map((error) => {
        const pos = lines.linePos(error.pos[0]);
        const what = error.code === 'DUPLICATE_KEY' ? 'duplicate key' : 'YAML syntax error';
        return `${file}:${pos.line}:${pos.col}: ${what}: ${error.message.split('\n')[0]}`;
      }),
    );
  }
  const config: RegistriesConfig = { file, mirrors: new Map(), configs: new Map(), warnings: reader.warnings };
  const root = reader.map(doc.contents, 'registries.yaml (its top level)', doc.contents);
  if (root) {
    for (const { key, pair, value } of reader.entries(root, ['mirrors', 'configs'])) {
      const section = reader.map(value, key, pair);
      if (!section) continue;
      for (const { key: host, pair: entry } of reader.entries(section)) {
        if (host !== '*' && !/^[A-Za-z0-9.[\]:-]+$/.test(host)) {
          reader.fail(entry, `${key}: "${host}" is not a registry host[:port] or "*"`);
          continue;
        }
        const name = host.toLowerCase();
        if (key === 'mirrors') {
          const mirror = parseMirror(reader, entry, host);
          if (mirror !== undefined) config.mirrors.set(name, mirror);
        } else {
          const hostConfig = parseHostConfig(reader, entry, host);
          if (hostConfig !== undefined) config.configs.set(name, hostConfig);
        }
      }
    }
  }
  if (reader.problems.length) throw new RegistriesError(reader.problems);
  return config;
}

/**
 * Reads `file`: a missing file is no configuration at all; an unreadable or malformed one, or a
 * TLS file it names that cannot be read, is a RegistriesError naming the file (and line).
 */
export function loadRegistries(file: string): RegistriesConfig {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { ...EMPTY_REGISTRIES, mirrors: new Map(), configs: new Map(), warnings: [] };
    throw new RegistriesError([`${file}: cannot read: ${(error as Error).message}`]);
  }
  const config = parseRegistries(text, file);
  const hasCredentials = [...config.configs.values()].some((c) => c?.auth && Object.keys(c.auth).length > 0);
  if (hasCredentials && (fs.statSync(file).mode & 0o004) !== 0) {
    config.warnings.push(`${file} holds registry credentials and every local user can read it (chmod 600 it)`);
  }
  const problems: string[] = [];
  for (const [host, hostConfig] of config.configs) {
    const tls = hostConfig?.tls;
    if (!tls) continue;
    const read = (path: string | undefined, what: string): string | undefined => {
      if (!path) return undefined;
      try {
        return fs.readFileSync(path, 'utf8');
      } catch (error) {
        problems.push(`${file}: configs."${host}".tls.${what} "${path}": ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
        return undefined;
      }
    };
    const ca = read(tls.caFile, 'ca_file');
    const cert = read(tls.certFile, 'cert_file');
    const key = read(tls.keyFile, 'key_file');
    if (ca !== undefined) tls.ca = ca;
    if (cert !== undefined) tls.cert = cert;
    if (key !== undefined) tls.key = key;
  }
  if (problems.length) throw new RegistriesError(problems);
  return config;
}

// ---------------------------------------------------------------------------------------------
// Resolution

export interface Endpoint {
  /** API root (ends in /v2). */
  url: URL;
  /** The repository asked for here: rewritten for a mirror, the original for the registry itself. */
  repository: string;
  /** False for the registry's own (default) endpoint. */
  mirror: boolean;
  /** How to talk to this host: configs[host] or configs["*"]. */
  config: HostConfig | undefined;
}

/** The registry's own endpoint: Docker Hub's API host for docker.io, else https://<host>/v2. */
export function defaultEndpoint(registry: string): URL {
  return new URL(registry === DOCKER_HUB ? 'https://registry-1.docker.io/v2' : `https://${registry}/v2`);
}

/**
 * Go's `Regexp.ReplaceAllString` template: `$1`, `${1}`, `$name`, `${name}` (the longest run of
 * letters, digits and `_` after `$`), `$$` for a dollar; an unknown group is empty.
 */
export function expandTemplate(template: string, match: RegExpExecArray): string {
  return template.replace(/\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))/g, (whole, braced: string | undefined, bare: string | undefined) => {
    if (whole === '$$') return '$';
    const name = braced ?? bare ?? '';
    if (/^\d+$/.test(name)) return match[Number(name)] ?? '';
    return match.groups?.[name] ?? '';
  });
}

/** The first rewrite rule that matches `repository`, applied to every match as Go's ReplaceAllString does. */
export function rewriteRepository(rules: readonly RewriteRule[], repository: string): string {
  for (const rule of rules) {
    rule.pattern.lastIndex = 0;
    if (!rule.pattern.test(repository)) continue;
    rule.pattern.lastIndex = 0;
    let out = '';
    let last = 0;
    for (let m = rule.pattern.exec(repository); m; m = rule.pattern.exec(repository)) {
      out += repository.slice(last, m.index) + expandTemplate(rule.replacement, m);
      last = m.index + m[0].length;
      if (m[0].length === 0) rule.pattern.lastIndex++;
    }
    return out + repository.slice(last);
  }
  return repository;
}

/** The config for a host contacted: its own entry, else `*` (unless it opted out with null). */
export function hostConfig(config: RegistriesConfig, host: string): HostConfig | undefined {
  const own = config.configs.get(host.toLowerCase());
  if (own !== undefined) return own ?? undefined;
  return config.configs.get('*') ?? undefined;
}

/**
 * Where to look for `ref`, in order: the endpoints of its mirror entry (its own, else `*`) with
 * the repository rewritten, then the registry's own endpoint with the original repository. An
 * endpoint equal to the default one is only tried once, last.
 */
export function endpointsFor(config: RegistriesConfig, ref: ImageRef): Endpoint[] {
  const registry = ref.domain.toLowerCase();
  const own = config.mirrors.get(registry);
  const mirror = own !== undefined ? own : config.mirrors.get('*');
  const fallback = defaultEndpoint(registry);
  const out: Endpoint[] = [];
  const seen = new Set<string>([fallback.href]);
  for (const url of mirror?.endpoints ?? []) {
    if (seen.has(url.href)) continue;
    seen.add(url.href);
    out.push({ url, repository: rewriteRepository(mirror!.rewrites, ref.path), mirror: true, config: hostConfig(config, url.host) });
  }
  // The registry's own endpoint: its config by the host contacted, or by the registry's name (docker.io).
  const fallbackConfig = config.configs.has(fallback.host) ? hostConfig(config, fallback.host) : hostConfig(config, registry);
  out.push({ url: fallback, repository: ref.path, mirror: false, config: fallbackConfig });
  return out;
}
