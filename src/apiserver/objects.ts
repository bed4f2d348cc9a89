/**
 * The generic shape of every stored object. Drover keeps objects as plain JSON and knows only the
 * fields it acts on; everything else a client sends inside `spec` or `status` is kept verbatim.
 */

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  [field: string]: unknown;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** ObjectMeta fields the server understands; others are unknown fields (see docs/api.md). */
export const OBJECT_META_FIELDS: ReadonlySet<string> = new Set([
  'name',
  'generateName',
  'namespace',
  'selfLink',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'labels',
  'annotations',
  'ownerReferences',
  'finalizers',
  'managedFields',
]);

/** RFC 3339 with second precision, as Kubernetes writes metav1.Time. */
export function kubeTime(ms: number = Date.now()): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** RFC 3339 with microseconds, as Kubernetes writes metav1.MicroTime (lease renewTime). */
export function kubeMicroTime(ms: number = Date.now()): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export function getPath(obj: unknown, path: readonly string[]): unknown {
  let cursor: unknown = obj;
  for (const segment of path) {
    if (typeof cursor !== 'object' || cursor === null) return undefined;
    cursor = (cursor as Record<string, unknown>)[segment];
  }
  return cursor;
}

export function getString(obj: unknown, path: readonly string[]): string {
  const value = getPath(obj, path);
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : String(value);
}
