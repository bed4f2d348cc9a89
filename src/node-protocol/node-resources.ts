import { formatBytes, formatMilliCpu, milliCpu, QuantityError, wholeValue } from './quantity.js';

/**
 * A node's resources as agents report them and the scheduler accounts them: capacity (the host),
 * what is reserved for the system (the `system-reserved` setting, as kubelet's
 * `--system-reserved`), and allocatable (capacity minus reserved), which pods' requests are
 * charged against. CPU in millicores, memory and storage in bytes.
 */

export interface NodeResourceAmounts {
  cpuMilli: number;
  memoryBytes: number;
  ephemeralStorageBytes: number;
  pods: number;
}

/** What `system-reserved` may hold back, by its Kubernetes resource name. */
export const RESERVABLE_RESOURCES = ['cpu', 'memory', 'ephemeral-storage'] as const;
export type ReservableResource = (typeof RESERVABLE_RESOURCES)[number];
export type ResourceReservation = Partial<Record<ReservableResource, number>>;

/** kubelet's default `--max-pods`. */
export const DEFAULT_MAX_PODS = 110;

/**
 * `system-reserved` entries (`cpu=500m`, `memory=512Mi,ephemeral-storage=1Gi`, repeatable, as
 * kubelet's flag takes them) into millicores and bytes; problems name the entry.
 */
export function parseReservation(entries: readonly string[]): { reserved: ResourceReservation; problems: string[] } {
  const reserved: ResourceReservation = {};
  const problems: string[] = [];
  for (const entry of entries.flatMap((e) => e.split(',')).map((e) => e.trim()).filter(Boolean)) {
    const eq = entry.indexOf('=');
    const name = eq < 0 ? entry : entry.slice(0, eq);
    const text = eq < 0 ? '' : entry.slice(eq + 1);
    if (!(RESERVABLE_RESOURCES as readonly string[]).includes(name)) {
      problems.push(`"${entry}": the resource must be one of ${RESERVABLE_RESOURCES.join(', ')} (as name=quantity)`);
      continue;
    }
    try {
      const amount = name === 'cpu' ? milliCpu(text) : wholeValue(text);
      if (amount < 0) throw new QuantityError('must not be negative');
      reserved[name as ReservableResource] = amount;
    } catch (error) {
      if (!(error instanceof QuantityError)) throw error;
      problems.push(`"${entry}": ${text ? `"${text}" is not a quantity (${error.message})` : 'needs a quantity after ='}`);
    }
  }
  return { reserved, problems };
}

/** Capacity less what is reserved, never below zero. */
export function allocatableOf(capacity: NodeResourceAmounts, reserved: ResourceReservation): NodeResourceAmounts {
  return {
    cpuMilli: Math.max(0, capacity.cpuMilli - (reserved.cpu ?? 0)),
    memoryBytes: Math.max(0, capacity.memoryBytes - (reserved.memory ?? 0)),
    ephemeralStorageBytes: Math.max(0, capacity.ephemeralStorageBytes - (reserved['ephemeral-storage'] ?? 0)),
    pods: capacity.pods,
  };
}

/** A v1 ResourceList as kubelet writes it in a Node's status. */
export function resourceList(amounts: NodeResourceAmounts): Record<string, string> {
  return {
    cpu: formatMilliCpu(amounts.cpuMilli),
    'ephemeral-storage': formatBytes(amounts.ephemeralStorageBytes),
    memory: formatBytes(amounts.memoryBytes),
    pods: String(amounts.pods),
  };
}
