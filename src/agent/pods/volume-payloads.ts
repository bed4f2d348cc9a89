import type { KubeObject } from '../../apiserver/objects.js';
import type { Payload } from './atomic-writer.js';
import type { Lookup } from './env-resolution.js';
import { type NodeAllocatable, resourceFieldValue } from './resource-fields.js';
import { CONFIGMAP_DEFAULT_MODE, objectPayload, type PayloadResult, type PodVolume, secretDefaultMode, validMode, type VolumeRuntime } from './volumes.js';

/**
 * The files of downward API and projected volumes, as pure functions, per kubelet's rules: a
 * downward API file holds one field of the pod (`metadata.labels` as `key="value"` lines) or one
 * resource figure of a container; a projected volume is the files of its sources (ConfigMaps,
 * Secrets, downward API items and a bound ServiceAccount token) in one directory.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

/** Go's %q for a label or annotation value: JSON's quoting, which agrees for every printable string. */
function quoted(value: string): string {
  return JSON.stringify(value);
}

function formatMap(map: Record<string, string> | undefined): string {
  return Object.keys(map ?? {})
    .sort()
    .map((key) => `${key}=${quoted(map![key]!)}`)
    .join('\n');
}

/** A downward API field of the pod, as a volume file holds it; undefined for a path kubelet does not serve in volumes. */
export function downwardFieldValue(pod: KubeObject, fieldPath: string): string | undefined {
  switch (fieldPath) {
    case 'metadata.name':
      return pod.metadata.name ?? '';
    case 'metadata.namespace':
      return pod.metadata.namespace ?? 'default';
    case 'metadata.uid':
      return pod.metadata.uid ?? '';
    case 'metadata.labels':
      return formatMap(pod.metadata.labels);
    case 'metadata.annotations':
      return formatMap(pod.metadata.annotations);
    default: {
      const label = /^metadata\.labels\['(.+)'\]$/.exec(fieldPath);
      if (label) return pod.metadata.labels?.[label[1]!] ?? '';
      const annotation = /^metadata\.annotations\['(.+)'\]$/.exec(fieldPath);
      return annotation ? (pod.metadata.annotations?.[annotation[1]!] ?? '') : undefined;
    }
  }
}

/** The files of a list of downward API items (a downwardAPI volume, or a projected source). */
function downwardItems(items: unknown, pod: KubeObject, defaultMode: number, node: NodeAllocatable, payload: Payload): string | undefined {
  for (const item of list(items)) {
    if (typeof item.path !== 'string' || !item.path) continue;
    let value: string | undefined;
    if (isObject(item.fieldRef) && typeof item.fieldRef.fieldPath === 'string') {
      value = downwardFieldValue(pod, item.fieldRef.fieldPath);
      if (value === undefined) return `unsupported fieldPath: ${item.fieldRef.fieldPath}`;
    } else if (isObject(item.resourceFieldRef) && typeof item.resourceFieldRef.resource === 'string') {
      const ref = item.resourceFieldRef;
      const result = resourceFieldValue(pod, typeof ref.containerName === 'string' ? ref.containerName : '', ref.resource as string, ref.divisor, node);
      if (typeof result !== 'string') return result.error;
      value = result;
    } else continue;
    payload.set(item.path, { data: Buffer.from(value, 'utf8'), mode: validMode(item.mode) ?? defaultMode });
  }
  return undefined;
}

/** A downwardAPI volume's files now (they change with the pod's labels and annotations). */
export function downwardAPIPayload(volume: PodVolume, pod: KubeObject, node: NodeAllocatable): PayloadResult {
  const payload: Payload = new Map();
  const failure = downwardItems(volume.source.items, pod, validMode(volume.source.defaultMode) ?? CONFIGMAP_DEFAULT_MODE, node, payload);
  return failure ? { kind: 'failed', message: failure } : { kind: 'ready', payload };
}

export type { NodeAllocatable };

/** A bound ServiceAccount token as the agent holds it (service-account-tokens.ts). */
export type TokenLookupResult = { state: 'ready'; token: string } | { state: 'pending' } | { state: 'failed'; message: string };

/** The token for this pod with `audience` (empty: the API server's) and lifetime. */
export type TokenLookup = (audience: string, expirationSeconds: number) => TokenLookupResult;

/** Kubernetes' default lifetime of a projected token (the API server fills it in). */
export const DEFAULT_TOKEN_EXPIRATION_SECONDS = 3600;

export interface ProjectedContext {
  pod: KubeObject;
  lookup: Lookup;
  tokens: TokenLookup;
  node: NodeAllocatable;
  runtime: VolumeRuntime;
}

/**
 * A projected volume's files now: each source's in order. Without a `defaultMode`, files are
 * 0644, except a Secret's and the token, which follow the runtime's secret default (0400 for
 * process pods, which all run as the agent's user; 0644 under runc, as Kubernetes).
 */
export function projectedPayload(volume: PodVolume, context: ProjectedContext): PayloadResult {
  const { pod, lookup, tokens, node, runtime } = context;
  const namespace = pod.metadata.namespace ?? 'default';
  const setMode = validMode(volume.source.defaultMode);
  const payload: Payload = new Map();
  for (const source of list(volume.source.sources)) {
    if (isObject(source.configMap) || isObject(source.secret)) {
      const isConfigMap = isObject(source.configMap);
      const ref = (isConfigMap ? source.configMap : source.secret) as Json;
      const mode = setMode ?? (isConfigMap ? CONFIGMAP_DEFAULT_MODE : secretDefaultMode(runtime));
      const result = objectPayload(isConfigMap ? 'ConfigMap' : 'Secret', ref.name, ref, mode, namespace, lookup, `projected volume ${volume.name}`);
      if (result.kind !== 'ready') return result;
      for (const [file, content] of result.payload) payload.set(file, content);
    } else if (isObject(source.downwardAPI)) {
      const failure = downwardItems(source.downwardAPI.items, pod, setMode ?? CONFIGMAP_DEFAULT_MODE, node, payload);
      if (failure) return { kind: 'failed', message: failure };
    } else if (isObject(source.serviceAccountToken)) {
      const token = source.serviceAccountToken;
      if (typeof token.path !== 'string' || !token.path) return { kind: 'failed', message: `projected volume ${volume.name}: a serviceAccountToken source needs a path` };
      const seconds = Number.isInteger(token.expirationSeconds) ? (token.expirationSeconds as number) : DEFAULT_TOKEN_EXPIRATION_SECONDS;
      const got = tokens(typeof token.audience === 'string' ? token.audience : '', seconds);
      if (got.state === 'pending') return { kind: 'pending', what: `a ServiceAccount token for volume ${volume.name}` };
      if (got.state === 'failed') return { kind: 'failed', message: got.message };
      payload.set(token.path, { data: Buffer.from(got.token, 'utf8'), mode: setMode ?? secretDefaultMode(runtime) });
    } else {
      const kind = Object.keys(source)[0] ?? 'an empty source';
      return { kind: 'failed', message: `projected volume ${volume.name}: ${kind} sources are not supported by Drover` };
    }
  }
  return { kind: 'ready', payload };
}
