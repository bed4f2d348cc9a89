import type { KubeObject } from './objects.js';

/**
 * Server-side printing: `kubectl get` asks for `as=Table;g=meta.k8s.io;v=v1` and prints the
 * columns the server chooses. Without it kubectl falls back to NAME and AGE only.
 */

export interface ColumnDefinition {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  format: string;
  description: string;
  /** 0: always shown; 1: only with `-o wide`. */
  priority: number;
}

export type Cell = string | number | boolean | null;

export interface Printer {
  columns: ColumnDefinition[];
  cells(obj: KubeObject, now: number): Cell[];
}

export function column(
  name: string,
  description: string,
  options: { type?: ColumnDefinition['type']; format?: string; priority?: number } = {},
): ColumnDefinition {
  return {
    name,
    type: options.type ?? 'string',
    format: options.format ?? '',
    description,
    priority: options.priority ?? 0,
  };
}

export const NAME_COLUMN = column('Name', 'Name must be unique within a namespace.', { format: 'name' });
export const AGE_COLUMN = column(
  'Age',
  'CreationTimestamp is a timestamp representing the server time when this object was created.',
);

/** The duration format `kubectl get` users know: `45s`, `3m12s`, `2h5m`, `6d`, `2y30d`. */
export function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < -1) return '<invalid>';
  if (seconds < 0) return '0s';
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 10) {
    const s = seconds % 60;
    return s === 0 ? `${minutes}m` : `${minutes}m${s}s`;
  }
  if (minutes < 180) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 8) {
    const m = minutes % 60;
    return m === 0 ? `${hours}h` : `${hours}h${m}m`;
  }
  if (hours < 48) return `${hours}h`;
  if (hours < 24 * 8) {
    const h = hours % 24;
    return h === 0 ? `${Math.floor(hours / 24)}d` : `${Math.floor(hours / 24)}d${h}h`;
  }
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24)}d`;
  const years = Math.floor(hours / 24 / 365);
  if (years < 8) {
    const d = Math.floor(hours / 24) % 365;
    return d === 0 ? `${years}y` : `${years}y${d}d`;
  }
  return `${years}y`;
}

export function ageOf(timestamp: unknown, now: number): string {
  if (typeof timestamp !== 'string' || !timestamp) return '<unknown>';
  const at = Date.parse(timestamp);
  return Number.isNaN(at) ? '<unknown>' : humanDuration(now - at);
}

export type IncludeObject = 'None' | 'Metadata' | 'Object';

export interface TableRow {
  cells: Cell[];
  object?: KubeObject;
}

export interface Table {
  kind: 'Table';
  apiVersion: 'meta.k8s.io/v1';
  metadata: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
  columnDefinitions: ColumnDefinition[];
  rows: TableRow[];
}

function rowObject(obj: KubeObject, include: IncludeObject): KubeObject | undefined {
  if (include === 'None') return undefined;
  if (include === 'Object') return obj;
  // kubectl reads the namespace column (-A) and --show-labels from the row's metadata.
  return { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: obj.metadata };
}

export function toTable(
  printer: Printer,
  objects: readonly KubeObject[],
  include: IncludeObject,
  listMeta: Table['metadata'],
  now: number = Date.now(),
): Table {
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: listMeta,
    columnDefinitions: printer.columns,
    rows: objects.map((obj) => {
      const object = rowObject(obj, include);
      return object ? { cells: printer.cells(obj, now), object } : { cells: printer.cells(obj, now) };
    }),
  };
}

/** For resources without a dedicated printer. */
export const DEFAULT_PRINTER: Printer = {
  columns: [NAME_COLUMN, AGE_COLUMN],
  cells: (obj, now) => [obj.metadata.name ?? '', ageOf(obj.metadata.creationTimestamp, now)],
};
