import path from 'node:path';
import type { KubeObject } from '../../apiserver/objects.js';
import type { Payload } from './atomic-writer.js';
import { configMapBinaryData, configMapData, type Lookup, notFoundMessage, secretData } from './env-resolution.js';

/**
 * A pod's volumes, as pure functions: what files a ConfigMap or Secret volume holds (kubelet's
 * payload rules: items, modes, optional; downward API and projected volumes are in
 * volume-payloads.ts), and where each container's volumeMounts go. Under runc each mount is a
 * bind mount at its mountPath (mounts.ts turns the plan into the run spec's ContainerMounts).
 * Process pods have no mount namespace, so a container sees its mounts under its own root
 * directory, `<pod dir>/roots/<container>/<mountPath>`, which its environment names as
 * DROVER_CONTAINER_ROOT (docs/workloads.md, "Volumes"); that rule lives here too.
 */

/** The directories under a pod dir that volumes use. */
export const VOLUMES_DIR = 'volumes';
export const ROOTS_DIR = 'roots';
export const SUBPATHS_DIR = 'subpaths';
/** In each container's environment: the directory that stands for `/` in its volumeMounts. */
export const CONTAINER_ROOT_ENV = 'DROVER_CONTAINER_ROOT';

/** Kubernetes' defaultMode for ConfigMap, downward API and projected volumes (and Secret ones under runc). */
export const CONFIGMAP_DEFAULT_MODE = 0o644;
/**
 * Drover's default for Secret volumes of process pods (Kubernetes' is 0644): every process pod on
 * a node runs as the agent's user, so a secret file is kept to its owner unless the pod asks for
 * more. Under runc a container may run as another user, so Kubernetes' 0644 holds there.
 */
export const SECRET_DEFAULT_MODE = 0o400;

/** How a pod runs (run-spec.ts's PodRuntime): volumes differ in modes and in how mounts appear. */
export type VolumeRuntime = 'process' | 'runc';

/** The default mode of a secret's files (and a projected token's) under a runtime. */
export function secretDefaultMode(runtime: VolumeRuntime): number {
  return runtime === 'runc' ? CONFIGMAP_DEFAULT_MODE : SECRET_DEFAULT_MODE;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export type VolumeKind = 'configMap' | 'secret' | 'emptyDir' | 'hostPath' | 'downwardAPI' | 'projected' | 'unsupported';

const SUPPORTED: ReadonlySet<string> = new Set(['configMap', 'secret', 'emptyDir', 'hostPath', 'downwardAPI', 'projected']);

/** Volumes whose files the agent writes (atomic writer): always mounted read-only, as kubelet does. */
export function isPayloadVolume(kind: VolumeKind): kind is 'configMap' | 'secret' | 'downwardAPI' | 'projected' {
  return kind === 'configMap' || kind === 'secret' || kind === 'downwardAPI' || kind === 'projected';
}

export interface PodVolume {
  name: string;
  kind: VolumeKind;
  /** The volume's source object (`configMap`, `secret`, `emptyDir`, …), as in the spec. */
  source: Json;
  /** For `unsupported`: the source's field name (hostPath, persistentVolumeClaim, …). */
  type: string;
}

/** The pod's volumes whose names can name a directory (API validation refuses the others). */
export function podVolumes(pod: KubeObject): PodVolume[] {
  const spec = isObject(pod.spec) ? pod.spec : {};
  return list(spec.volumes).flatMap((v): PodVolume[] => {
    if (typeof v.name !== 'string' || !DNS_LABEL.test(v.name)) return [];
    const type = Object.keys(v).find((k) => k !== 'name' && isObject(v[k])) ?? 'none';
    const kind = (SUPPORTED.has(type) ? type : 'unsupported') as VolumeKind;
    return [{ name: v.name, kind, source: isObject(v[type]) ? (v[type] as Json) : {}, type }];
  });
}

export type PayloadResult =
  | { kind: 'ready'; payload: Payload }
  /** kubelet's FailedMount: the volume cannot be set up (the message follows `MountVolume.SetUp failed for volume "x" : `). */
  | { kind: 'failed'; message: string }
  | { kind: 'pending'; what: string };

export function validMode(value: unknown): number | undefined {
  return Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 0o777 ? (value as number) : undefined;
}

/** The files a configMap or secret volume holds now, per kubelet's rules. */
export function volumePayload(volume: PodVolume, namespace: string, lookup: Lookup, runtime: VolumeRuntime = 'process'): PayloadResult {
  const source = volume.source;
  const isConfigMap = volume.kind === 'configMap';
  return objectPayload(
    isConfigMap ? 'ConfigMap' : 'Secret',
    isConfigMap ? source.name : source.secretName,
    source,
    validMode(source.defaultMode) ?? (isConfigMap ? CONFIGMAP_DEFAULT_MODE : secretDefaultMode(runtime)),
    namespace,
    lookup,
    `${isConfigMap ? 'ConfigMap' : 'Secret'} volume ${volume.name}`,
  );
}

/**
 * The files from one ConfigMap or Secret (a volume, or a projected volume's source): every key,
 * or the `items` listed, at `defaultMode` unless an item sets its `mode`.
 */
export function objectPayload(
  kind: 'ConfigMap' | 'Secret',
  name: unknown,
  source: Json,
  defaultMode: number,
  namespace: string,
  lookup: Lookup,
  what: string,
): PayloadResult {
  const isConfigMap = kind === 'ConfigMap';
  if (typeof name !== 'string' || !name) return { kind: 'failed', message: `${what} names no ${kind}` };
  const optional = source.optional === true;
  const found = lookup(kind, name);
  if (found.state === 'unknown') return { kind: 'pending', what: `${kind} ${namespace}/${name}` };
  if (found.state === 'absent') {
    // An optional volume whose object is missing is an empty directory.
    return optional ? { kind: 'ready', payload: new Map() } : { kind: 'failed', message: notFoundMessage(kind, name) };
  }
  const values = new Map<string, Buffer>();
  if (isConfigMap) {
    for (const [key, value] of Object.entries(configMapData(found.object))) values.set(key, Buffer.from(value, 'utf8'));
    for (const [key, value] of Object.entries(configMapBinaryData(found.object))) values.set(key, value);
  } else {
    for (const [key, value] of Object.entries(secretData(found.object))) values.set(key, value);
  }
  const payload: Payload = new Map();
  const items = list(source.items);
  if (items.length === 0) {
    for (const [key, data] of values) payload.set(key, { data, mode: defaultMode });
    return { kind: 'ready', payload };
  }
  for (const item of items) {
    if (typeof item.key !== 'string' || typeof item.path !== 'string') continue;
    const data = values.get(item.key);
    if (data === undefined) {
      if (optional) continue;
      return {
        kind: 'failed',
        message: isConfigMap
          ? `configmap references non-existent config key: ${item.key}`
          : `secret references non-existent secret key: ${item.key}`,
      };
    }
    payload.set(item.path, { data, mode: validMode(item.mode) ?? defaultMode });
  }
  return { kind: 'ready', payload };
}

/**
 * One volumeMount of a container. Under runc a bind mount of `target` at `mountPath`; under the
 * process runtime `link` (a path under the container's root) leads to `target`.
 */
export interface MountLink {
  volume: string;
  kind: VolumeKind;
  /** The mountPath, made absolute and normal (`/etc/app`). */
  mountPath: string;
  /** Absolute path of the symlink under the container's root (process runtime). */
  link: string;
  /** The host path the mount shows: the volume's directory or hostPath, or a subPath in it. */
  target: string;
  /**
   * A subPath of a volume whose files the agent writes (ConfigMap, Secret, downward API,
   * projected): a copy made when the pod starts, which later updates do not reach (a bind mount
   * of one version, in Kubernetes). `target` is the copy, `copyFrom` the path inside the volume.
   */
  copyFrom?: string;
  /**
   * A subPath of an emptyDir or hostPath: `target` is `root/path` once resolved without leaving
   * `root` (mounts.ts follows symlinks one step at a time), created as a directory when missing,
   * as kubelet does. A pod cannot reach outside its volume by planting a symlink there.
   */
  subPath?: { root: string; path: string };
  readOnly: boolean;
  /** mountPropagation other than None. */
  propagation?: 'HostToContainer' | 'Bidirectional';
}

export interface ContainerMounts {
  container: string;
  root: string;
  links: MountLink[];
}

export type MountPlan = { kind: 'ready'; containers: ContainerMounts[] } | { kind: 'failed'; container: string; message: string };

/** The host directory (or file) a volume is: under the pod dir, or a hostPath's own path. */
export function volumeTarget(podDir: string, volume: PodVolume): string {
  if (volume.kind === 'hostPath') return path.posix.resolve('/', typeof volume.source.path === 'string' ? volume.source.path : '/');
  return path.join(podDir, VOLUMES_DIR, volume.name);
}

/**
 * Where each container's volumeMounts go. A mount of a volume Drover does not materialise
 * (persistentVolumeClaim, csi, …) is left out; the caller reports it. A mount at `/` fails the
 * container; under the process runtime so does a mount inside another mount's path, which links
 * cannot express (it would write into the outer volume).
 */
export function mountPlan(pod: KubeObject, podDir: string, runtime: VolumeRuntime = 'process'): MountPlan {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const volumes = new Map(podVolumes(pod).map((v) => [v.name, v]));
  const containers: ContainerMounts[] = [];
  for (const container of list(spec.containers)) {
    const containerName = container.name;
    if (typeof containerName !== 'string') continue;
    const root = path.join(podDir, ROOTS_DIR, containerName);
    const links: MountLink[] = [];
    list(container.volumeMounts).forEach((mount, index) => {
      if (typeof mount.name !== 'string' || typeof mount.mountPath !== 'string') return;
      const volume = volumes.get(mount.name);
      if (!volume || volume.kind === 'unsupported') return;
      // resolve() against `/` keeps every mountPath inside the root, `..` or not.
      const mountPath = path.posix.resolve('/', mount.mountPath);
      const volumeDir = volumeTarget(podDir, volume);
      const subPath = typeof mount.subPath === 'string' && mount.subPath ? path.posix.normalize(mount.subPath) : undefined;
      const link: MountLink = {
        volume: volume.name,
        kind: volume.kind,
        mountPath,
        link: path.join(root, mountPath),
        target: volumeDir,
        // Files the agent writes are read-only in the container whatever the mount says (kubelet).
        readOnly: isPayloadVolume(volume.kind) || mount.readOnly === true,
      };
      if (mount.mountPropagation === 'HostToContainer' || mount.mountPropagation === 'Bidirectional') link.propagation = mount.mountPropagation;
      if (subPath !== undefined) {
        // Admission refuses these; the node checks again, as kubelet does.
        if (subPath.startsWith('/') || subPath === '..' || subPath.startsWith('../')) return;
        if (isPayloadVolume(volume.kind)) {
          link.copyFrom = path.join(volumeDir, subPath);
          link.target = path.join(podDir, SUBPATHS_DIR, containerName, String(index));
        } else {
          link.subPath = { root: volumeDir, path: subPath };
          link.target = path.join(volumeDir, subPath);
        }
      }
      links.push(link);
    });
    links.sort((a, b) => a.mountPath.localeCompare(b.mountPath));
    for (const link of links) {
      if (link.mountPath === '/') {
        return { kind: 'failed', container: containerName, message: `volume "${link.volume}" cannot be mounted at /: it would hide the container's root filesystem` };
      }
      if (runtime !== 'process') continue;
      const outer = links.find((other) => other !== link && link.mountPath.startsWith(`${other.mountPath}/`));
      if (outer) {
        return {
          kind: 'failed',
          container: containerName,
          message: `volume "${link.volume}" at ${link.mountPath} is inside the mount of volume "${outer.volume}" at ${outer.mountPath}: Drover's process runtime cannot nest mounts`,
        };
      }
    }
    containers.push({ container: containerName, root, links });
  }
  return { kind: 'ready', containers };
}
