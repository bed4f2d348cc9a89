import type { KubeObject } from '../../apiserver/objects.js';
import type { ConfigKind } from '../../node-protocol/pod-references.js';
import { type NodeAllocatable, resourceFieldValue } from './resource-fields.js';

/**
 * A container's environment from its pod spec, as kubelet builds it before it creates the
 * container: the `envFrom` sources in order (a later source wins), then each `env` entry (which
 * wins over them), with values from ConfigMaps, Secrets and the downward API. Pure: the objects
 * come through `lookup`, so the same rules run over the agent's cache and over test fixtures.
 */

/** What the agent knows of one referenced object. `unknown`: not read yet (or not readable now). */
export type LookupResult = { state: 'present'; object: KubeObject } | { state: 'absent' } | { state: 'unknown' };

export type Lookup = (kind: ConfigKind, name: string) => LookupResult;

/** kubelet's event when envFrom keys are not environment variable names. */
export interface EnvWarning {
  reason: 'InvalidEnvironmentVariableNames';
  message: string;
}

export type EnvResolution =
  | { kind: 'ready'; env: Record<string, string>; warnings: EnvWarning[] }
  /** A missing object or key that is not optional: the container cannot be created (CreateContainerConfigError). */
  | { kind: 'failed'; message: string }
  /** An object not read yet: wait, say nothing. */
  | { kind: 'pending'; what: string };

export interface EnvContext {
  pod: KubeObject;
  /** The node's IP, which is also the pod's (process pods have no address of their own). */
  nodeIp: string;
  lookup: Lookup;
  /** The node's capacity, for a `resourceFieldRef` limit the container does not set (absent: such variables stay unset). */
  node?: NodeAllocatable;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

/**
 * The environment variable names kubelet accepts from envFrom (apimachinery's IsEnvVarName): a
 * letter, `_`, `-` or `.` first, then those or digits; and not `.`, `..` or `..`-prefixed.
 */
export function isEnvVarName(name: string): boolean {
  return /^[-._a-zA-Z][-._a-zA-Z0-9]*$/.test(name) && name !== '.' && !name.startsWith('..');
}

/** A ConfigMap's string data (`binaryData` is for volumes only, as in Kubernetes). */
export function configMapData(object: KubeObject): Record<string, string> {
  const data = object.data;
  if (!isObject(data)) return {};
  return Object.fromEntries(Object.entries(data).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
}

/** A ConfigMap's `binaryData`, decoded. */
export function configMapBinaryData(object: KubeObject): Record<string, Buffer> {
  const data = object.binaryData;
  if (!isObject(data)) return {};
  return Object.fromEntries(
    Object.entries(data).flatMap(([key, value]) => (typeof value === 'string' ? [[key, Buffer.from(value, 'base64')]] : [])),
  );
}

/** A Secret's data, decoded from the base64 it is stored and served in. */
export function secretData(object: KubeObject): Record<string, Buffer> {
  const data = object.data;
  if (!isObject(data)) return {};
  return Object.fromEntries(
    Object.entries(data).flatMap(([key, value]) => (typeof value === 'string' ? [[key, Buffer.from(value, 'base64')]] : [])),
  );
}

/** kubelet's words for an object it cannot find (its cache names the resource in the singular). */
export function notFoundMessage(kind: ConfigKind, name: string): string {
  return `${kind === 'ConfigMap' ? 'configmap' : 'secret'} "${name}" not found`;
}

/** The downward API's field references a process pod can answer; undefined for the rest. */
export function fieldRefValue(pod: KubeObject, fieldPath: string, nodeIp: string): string | undefined {
  const spec = isObject(pod.spec) ? pod.spec : {};
  switch (fieldPath) {
    case 'metadata.name':
      return pod.metadata.name;
    case 'metadata.namespace':
      return pod.metadata.namespace;
    case 'metadata.uid':
      return pod.metadata.uid;
    case 'spec.nodeName':
    case 'spec.serviceAccountName':
      return typeof spec[fieldPath.slice(5)] === 'string' ? (spec[fieldPath.slice(5)] as string) : undefined;
    case 'status.podIP':
    case 'status.hostIP':
    case 'status.podIPs':
    case 'status.hostIPs':
      return nodeIp;
    default: {
      const label = /^metadata\.labels\['(.+)'\]$/.exec(fieldPath);
      if (label) return pod.metadata.labels?.[label[1]!];
      const annotation = /^metadata\.annotations\['(.+)'\]$/.exec(fieldPath);
      return annotation ? pod.metadata.annotations?.[annotation[1]!] : undefined;
    }
  }
}

/** One object by kind and name, or why not. */
type Fetched = { object: KubeObject } | { absent: true } | { pending: string };

function fetch(context: EnvContext, kind: ConfigKind, name: string): Fetched {
  const found = context.lookup(kind, name);
  if (found.state === 'present') return { object: found.object };
  if (found.state === 'absent') return { absent: true };
  return { pending: `${kind} ${context.pod.metadata.namespace ?? 'default'}/${name}` };
}

/**
 * One container's environment (without what the runtime adds: PATH, HOME, HOSTNAME). A field path
 * a process pod cannot answer leaves the variable unset. `$(VAR)` references are not expanded.
 */
export function resolveContainerEnv(container: unknown, context: EnvContext): EnvResolution {
  const c = isObject(container) ? container : {};
  const namespace = context.pod.metadata.namespace ?? 'default';
  const env: Record<string, string> = {};
  const warnings: EnvWarning[] = [];
  for (const source of list(c.envFrom)) {
    const prefix = typeof source.prefix === 'string' ? source.prefix : '';
    const ref = isObject(source.configMapRef) ? source.configMapRef : isObject(source.secretRef) ? source.secretRef : undefined;
    if (!ref || typeof ref.name !== 'string') continue;
    const kind: ConfigKind = isObject(source.configMapRef) ? 'ConfigMap' : 'Secret';
    const got = fetch(context, kind, ref.name);
    if ('pending' in got) return { kind: 'pending', what: got.pending };
    if ('absent' in got) {
      if (ref.optional === true) continue;
      return { kind: 'failed', message: notFoundMessage(kind, ref.name) };
    }
    const values: Record<string, string> =
      kind === 'ConfigMap'
        ? configMapData(got.object)
        : Object.fromEntries(Object.entries(secretData(got.object)).map(([k, v]) => [k, v.toString('utf8')]));
    const invalid: string[] = [];
    for (const [key, value] of Object.entries(values)) {
      const name = prefix + key;
      if (!isEnvVarName(name)) {
        invalid.push(name);
        continue;
      }
      env[name] = value;
    }
    if (invalid.length) {
      invalid.sort();
      warnings.push({
        reason: 'InvalidEnvironmentVariableNames',
        message: `Keys [${invalid.join(', ')}] from the EnvFrom ${kind === 'ConfigMap' ? 'configMap' : 'secret'} ${namespace}/${ref.name} were skipped since they are considered invalid environment variable names.`,
      });
    }
  }
  for (const entry of list(c.env)) {
    if (typeof entry.name !== 'string') continue;
    if (!isObject(entry.valueFrom)) {
      // A variable with neither value nor valueFrom is set, empty, as kubelet sets it.
      env[entry.name] = typeof entry.value === 'string' ? entry.value : '';
      continue;
    }
    const from = entry.valueFrom;
    if (isObject(from.fieldRef) && typeof from.fieldRef.fieldPath === 'string') {
      const value = fieldRefValue(context.pod, from.fieldRef.fieldPath, context.nodeIp);
      if (value !== undefined) env[entry.name] = value;
      continue;
    }
    if (isObject(from.resourceFieldRef) && typeof from.resourceFieldRef.resource === 'string') {
      const ref = from.resourceFieldRef;
      if (!context.node) continue;
      // In env, containerName defaults to the container itself.
      const owner = typeof ref.containerName === 'string' && ref.containerName ? ref.containerName : String(c.name ?? '');
      const value = resourceFieldValue(context.pod, owner, ref.resource as string, ref.divisor, context.node);
      if (typeof value !== 'string') return { kind: 'failed', message: value.error };
      env[entry.name] = value;
      continue;
    }
    const keyRef = isObject(from.configMapKeyRef) ? from.configMapKeyRef : isObject(from.secretKeyRef) ? from.secretKeyRef : undefined;
    if (!keyRef || typeof keyRef.name !== 'string' || typeof keyRef.key !== 'string') continue;
    const kind: ConfigKind = isObject(from.configMapKeyRef) ? 'ConfigMap' : 'Secret';
    const optional = keyRef.optional === true;
    const got = fetch(context, kind, keyRef.name);
    if ('pending' in got) return { kind: 'pending', what: got.pending };
    if ('absent' in got) {
      if (optional) continue;
      return { kind: 'failed', message: notFoundMessage(kind, keyRef.name) };
    }
    const value = kind === 'ConfigMap' ? configMapData(got.object)[keyRef.key] : secretData(got.object)[keyRef.key]?.toString('utf8');
    if (value === undefined) {
      if (optional) continue;
      return { kind: 'failed', message: `couldn't find key ${keyRef.key} in ${kind} ${namespace}/${keyRef.name}` };
    }
    env[entry.name] = value;
  }
  return { kind: 'ready', env, warnings };
}
