import path from 'node:path';
import type { KubeObject } from '../../apiserver/objects.js';
import type { Payload } from './atomic-writer.js';
import { configMapBinaryData, configMapData, type Lookup, notFoundMessage, secretData } from './env-resolution.js';

/**
 * A pod's volumes for the process runtime, as pure functions: what files a ConfigMap or Secret
 * volume holds (kubelet's payload rules: items, modes, optional), and where each container's
 * volumeMounts appear. Process pods have no mount namespace, so a container sees its mounts under
 * its own root directory, `<pod dir>/roots/<container>/<mountPath>`, which its environment names
 * as DROVER_CONTAINER_ROOT (docs/workloads.md, "Volumes"). This file is the one place that rule
 * lives: a runtime with real mounts (runc) replaces mountPlan and leaves the payloads as they are.
 */

/** The directories under a pod dir that volumes use. */
export const VOLUMES_DIR = 'volumes';
export const ROOTS_DIR = 'roots';
export const SUBPATHS_DIR = 'subpaths';
/** In each container's environment: the directory that stands for `/` in its volumeMounts. */
export const CONTAINER_ROOT_ENV = 'DROVER_CONTAINER_ROOT';

/** Kubernetes' defaultMode for ConfigMap volumes. */
export const CONFIGMAP_DEFAULT_MODE = 0o644;
/**
 * Drover's default for Secret volumes (Kubernetes' is 0644): every pod on a node runs as the
 * agent's user, so a secret file is kept to its owner unless the pod asks for more.
 */
export const SECRET_DEFAULT_MODE = 0o400;

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export type VolumeKind = 'configMap' | 'secret' | 'emptyDir' | 'unsupported';

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
    const kind: VolumeKind = type === 'configMap' || type === 'secret' || type === 'emptyDir' ? type : 'unsupported';
    return [{ name: v.name, kind, source: isObject(v[type]) ? (v[type] as Json) : {}, type }];
  });
}

export type PayloadResult =
  | { kind: 'ready'; payload: Payload }
  /** kubelet's FailedMount: the volume cannot be set up (the message follows `MountVolume.SetUp failed for volume "x" : `). */
  | { kind: 'failed'; message: string }
  | { kind: 'pending'; what: string };

function validMode(value: unknown): number | undefined {
  return Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 0o777 ? (value as number) : undefined;
}

/** The files a configMap or secret volume holds now, per kubelet's rules. */
export function volumePayload(volume: PodVolume, namespace: string, lookup: Lookup): PayloadResult {
  const source = volume.source;
  const isConfigMap = volume.kind === 'configMap';
  const kind = isConfigMap ? 'ConfigMap' : 'Secret';
  const name = isConfigMap ? source.name : source.secretName;
  if (typeof name !== 'string' || !name) return { kind: 'failed', message: `${kind} volume ${volume.name} names no ${kind}` };
  const optional = source.optional === true;
  const defaultMode = validMode(source.defaultMode) ?? (isConfigMap ? CONFIGMAP_DEFAULT_MODE : SECRET_DEFAULT_MODE);
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

/** One entry of a container's root: `link` (a path under the root) leads to `target`. */
export interface MountLink {
  volume: string;
  /** The mountPath, made absolute and normal (`/etc/app`). */
  mountPath: string;
  /** Absolute path of the symlink under the container's root. */
  link: string;
  /** Absolute path it points to. */
  target: string;
  /**
   * A subPath of a ConfigMap or Secret volume: a copy made when the pod starts, which later
   * updates do not reach (a bind mount of one version, in Kubernetes). `target` is the copy,
   * `copyFrom` the path inside the volume. An emptyDir subPath is a plain link (its writes are
   * the volume's).
   */
  copyFrom?: string;
  /** An emptyDir subPath directory kubelet creates when it is missing. */
  createTarget?: boolean;
}

export interface ContainerMounts {
  container: string;
  root: string;
  links: MountLink[];
}

export type MountPlan = { kind: 'ready'; containers: ContainerMounts[] } | { kind: 'failed'; container: string; message: string };

/**
 * Where each container's volumeMounts appear under its root. A mount of a volume Drover does not
 * materialise (hostPath, persistentVolumeClaim, projected, …) is left out; the caller reports it.
 * A mount inside another mount's path cannot be expressed with links (it would write into the
 * outer volume), so it fails the container, as does a mount at `/`.
 */
export function mountPlan(pod: KubeObject, podDir: string): MountPlan {
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
      const volumeDir = path.join(podDir, VOLUMES_DIR, volume.name);
      const subPath = typeof mount.subPath === 'string' && mount.subPath ? path.posix.normalize(mount.subPath) : undefined;
      const link: MountLink = { volume: volume.name, mountPath, link: path.join(root, mountPath), target: volumeDir };
      if (subPath !== undefined) {
        if (subPath.startsWith('/') || subPath === '..' || subPath.startsWith('../')) return;
        if (volume.kind === 'emptyDir') {
          link.target = path.join(volumeDir, subPath);
          link.createTarget = true;
        } else {
          link.copyFrom = path.join(volumeDir, subPath);
          link.target = path.join(podDir, SUBPATHS_DIR, containerName, String(index));
        }
      }
      links.push(link);
    });
    links.sort((a, b) => a.mountPath.localeCompare(b.mountPath));
    for (const link of links) {
      if (link.mountPath === '/') {
        return { kind: 'failed', container: containerName, message: `volume "${link.volume}" cannot be mounted at / in Drover's process runtime` };
      }
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
