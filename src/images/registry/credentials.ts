import { decodeBasic, type RegistryAuth } from './registries.js';
import { DEFAULT_DOMAIN as DOCKER_HUB } from '../reference.js';

/**
 * Registry credentials: from a pod's imagePullSecrets (a Secret holding `.dockerconfigjson` or
 * the older `.dockercfg`, read as kubelet reads them, whatever the Secret's type) and from the
 * node's registries.yaml `configs.<host>.auth`. Which secret entry applies to a host follows
 * kubelet's keyring: the entry's key is a host (glob labels allowed, `*.example.com`), an
 * optional port that must match, and an optional path that must prefix the repository; longer
 * keys first. Pure.
 */

export interface Credential {
  username?: string;
  password?: string;
  /** OAuth2 refresh token for the token service (docker's `identitytoken`). */
  identityToken?: string;
  /** A bearer token used as is (docker's `registrytoken`). */
  registryToken?: string;
  /** Where it came from, for messages: `secret default/pull`, `registries.yaml configs."host"`. Never the secret itself. */
  source: string;
}

interface KeyedCredential extends Credential {
  key: string;
}

export type DockerConfigResult = { kind: 'ok'; entries: KeyedCredential[] } | { kind: 'invalid'; message: string };

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function entryOf(key: string, value: unknown, source: string): KeyedCredential | undefined {
  if (!isObject(value)) return undefined;
  const text = (field: string): string | undefined => (typeof value[field] === 'string' && value[field] ? (value[field] as string) : undefined);
  const credential: KeyedCredential = { key, source };
  const username = text('username');
  const password = text('password');
  if (username !== undefined) credential.username = username;
  if (password !== undefined) credential.password = password;
  // `auth` (base64 user:password) wins over the separate fields, as docker reads it.
  const auth = text('auth');
  const decoded = auth ? decodeBasic(auth) : undefined;
  if (decoded) {
    credential.username = decoded.username;
    credential.password = decoded.password;
  }
  const identityToken = text('identitytoken');
  const registryToken = text('registrytoken');
  if (identityToken) credential.identityToken = identityToken;
  if (registryToken) credential.registryToken = registryToken;
  return credential;
}

/**
 * The registry entries of a Secret's data (base64 values, as the API returns them):
 * `.dockerconfigjson` (`{"auths": {...}}`) first, else `.dockercfg` (the map itself).
 */
export function parseDockerConfigSecret(data: Record<string, string> | undefined, source: string): DockerConfigResult {
  const raw = data?.['.dockerconfigjson'] ?? data?.['.dockercfg'];
  if (!raw) return { kind: 'invalid', message: `${source} has no .dockerconfigjson or .dockercfg key` };
  const json = data?.['.dockerconfigjson'] !== undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw, 'base64').toString('utf8'));
  } catch {
    return { kind: 'invalid', message: `${source}: ${json ? '.dockerconfigjson' : '.dockercfg'} is not JSON` };
  }
  const auths = json ? (isObject(parsed) ? parsed.auths : undefined) : parsed;
  if (!isObject(auths)) return { kind: 'invalid', message: `${source}: ${json ? '.dockerconfigjson has no "auths" map' : '.dockercfg is not a map'}` };
  const entries: KeyedCredential[] = [];
  for (const [key, value] of Object.entries(auths)) {
    const entry = entryOf(key, value, source);
    if (entry) entries.push(entry);
  }
  return { kind: 'ok', entries };
}

/** A registries.yaml auth block as a credential (undefined when it holds nothing usable). */
export function credentialFromConfig(auth: RegistryAuth | undefined, source: string): Credential | undefined {
  if (!auth) return undefined;
  const credential: Credential = { source };
  if (auth.username !== undefined) credential.username = auth.username;
  if (auth.password !== undefined) credential.password = auth.password;
  const decoded = auth.auth ? decodeBasic(auth.auth) : undefined;
  if (decoded) {
    credential.username = decoded.username;
    credential.password = decoded.password;
  }
  if (auth.identityToken) credential.identityToken = auth.identityToken;
  return credential.username !== undefined || credential.identityToken ? credential : undefined;
}

const HUB_HOSTS = new Set([DOCKER_HUB, 'index.docker.io', 'registry-1.docker.io']);

interface Target {
  host: string;
  port: string;
  path: string;
}

/** A key or image location (`https://host:port/path`, `host/path`) as host, port and path. */
function splitLocation(text: string): Target | undefined {
  let url: URL;
  try {
    url = new URL(/^[a-z]+:\/\//i.test(text) ? text : `https://${text}`);
  } catch {
    return undefined;
  }
  let path = url.pathname;
  // docker's keys often end in /v1/ or /v2/: the same as the host alone.
  if (path.startsWith('/v1/') || path.startsWith('/v2/')) path = path.slice(3);
  path = path.replace(/^\/+|\/+$/g, '');
  const host = HUB_HOSTS.has(url.hostname.toLowerCase()) ? DOCKER_HUB : url.hostname.toLowerCase();
  return { host, port: url.port, path };
}

/** Host labels matched one by one, `*` in a label as a glob. */
function hostMatches(pattern: string, host: string): boolean {
  const p = pattern.split('.');
  const h = host.split('.');
  if (p.length !== h.length) return false;
  return p.every((label, i) => new RegExp(`^${label.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^.]*')}$`).test(h[i]!));
}

/**
 * The secret entries that apply to `host` (host[:port]) and `repository`, most specific key
 * first, as kubelet's keyring orders them.
 */
export function credentialsFor(entries: readonly KeyedCredential[], host: string, repository: string): Credential[] {
  const target = splitLocation(`${host}/${repository}`);
  if (!target) return [];
  const matched = entries
    .map((entry) => ({ entry, key: splitLocation(entry.key) }))
    .filter(({ key }) => {
      if (!key) return false;
      if (!hostMatches(key.host, target.host) || key.port !== target.port) return false;
      // A plain prefix, as kubelet compares them.
      return target.path.startsWith(key.path);
    })
    .sort((a, b) => b.entry.key.length - a.entry.key.length || a.entry.key.localeCompare(b.entry.key));
  return matched.map(({ entry }) => {
    const { key: _key, ...credential } = entry;
    return credential;
  });
}

export type { KeyedCredential };
