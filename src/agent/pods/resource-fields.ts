import type { KubeObject } from '../../apiserver/objects.js';
import { bytesOf, cpuMillis } from '../../apiserver/quantity.js';

/**
 * A container's resource figures as the downward API gives them (`resourceFieldRef`, in a volume
 * file or an environment variable), as a pure function.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

/** What a container that sets no limit is limited by: the node (kubelet's allocatable). */
export interface NodeAllocatable {
  cpuMilli: number;
  memoryBytes: number;
  ephemeralStorageBytes: number;
}

/**
 * A container's resource figure (`limits.cpu`, `requests.memory`, …) divided by `divisor` and
 * rounded up, as kubelet writes it. A limit the container does not set is the node's allocatable;
 * a request it does not set is 0.
 */
export function resourceFieldValue(pod: KubeObject, containerName: string, resource: string, divisor: unknown, node: NodeAllocatable): string | { error: string } {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const container = [...list(spec.containers), ...list(spec.initContainers)].find((c) => c.name === containerName);
  if (!container) return { error: `container ${JSON.stringify(containerName)} not found in the pod` };
  const resources = isObject(container.resources) ? container.resources : {};
  const [kind, name] = resource.split('.', 2) as [string, string | undefined];
  const values = isObject(resources[kind]) ? (resources[kind] as Json) : {};
  const raw = name !== undefined ? values[name] : undefined;
  if (name === 'cpu') {
    const milli = raw !== undefined ? cpuMillis(raw) : kind === 'limits' ? node.cpuMilli : 0;
    const per = cpuMillis(divisor ?? '1') || 1000;
    return String(Math.ceil((milli ?? 0) / per));
  }
  if (name === 'memory' || name === 'ephemeral-storage' || name?.startsWith('hugepages-')) {
    const fallback = kind === 'limits' ? (name === 'memory' ? node.memoryBytes : name === 'ephemeral-storage' ? node.ephemeralStorageBytes : 0) : 0;
    const bytes = raw !== undefined ? bytesOf(raw) : fallback;
    const per = bytesOf(divisor ?? '1') || 1;
    return String(Math.ceil((bytes ?? 0) / per));
  }
  return { error: `unsupported container resource: ${resource}` };
}

