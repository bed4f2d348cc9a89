import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { getPath, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { admitTemplateRuntime, defaultPodSpec } from './pods.js';
import { selectorString, validateWorkload } from './workloads.js';

/**
 * apps/v1 DaemonSet: defaults, validation and the printer as kube-apiserver has them. The
 * controller (src/controllers/daemonset.ts) runs one pod per eligible node.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export function defaultDaemonSet(obj: KubeObject): void {
  const spec = isObject(obj.spec) ? obj.spec : undefined;
  if (!spec) return;
  if (isObject(spec.template)) defaultPodSpec(spec.template.spec);
  const strategy = isObject(spec.updateStrategy) ? spec.updateStrategy : (spec.updateStrategy = {});
  strategy.type ??= 'RollingUpdate';
  if (strategy.type === 'RollingUpdate') {
    const rolling = isObject(strategy.rollingUpdate) ? strategy.rollingUpdate : (strategy.rollingUpdate = {});
    rolling.maxUnavailable ??= 1;
    rolling.maxSurge ??= 0;
  }
  spec.revisionHistoryLimit ??= 10;
  spec.minReadySeconds ??= 0;
}

/** An int >= 0 or a percentage (intstr), as kube's ValidatePositiveIntOrPercent. */
export function validateIntOrPercent(value: unknown, field: string): StatusCause[] {
  if (value === undefined) return [];
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0) return [];
  if (typeof value === 'string' && /^(\d+)%$/.test(value) && Number(value.slice(0, -1)) <= 100) return [];
  return [
    {
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(value)}: must be a non-negative integer or a percentage between 0% and 100% (e.g. '5%')`,
      field,
    },
  ];
}

const isZero = (value: unknown): boolean => value === undefined || value === 0 || value === '0%';

export function validateDaemonSet(obj: KubeObject): StatusCause[] {
  const causes = validateWorkload(obj);
  const spec = isObject(obj.spec) ? obj.spec : undefined;
  if (!spec) return causes;
  const restartPolicy = getPath(obj, ['spec', 'template', 'spec', 'restartPolicy']);
  if (restartPolicy !== undefined && restartPolicy !== 'Always') {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(restartPolicy)}: supported values: "Always"`,
      field: 'spec.template.spec.restartPolicy',
    });
  }
  const minReady = spec.minReadySeconds;
  if (minReady !== undefined && (!Number.isInteger(minReady) || (minReady as number) < 0)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be greater than or equal to 0', field: 'spec.minReadySeconds' });
  }
  const strategy = spec.updateStrategy;
  if (strategy !== undefined) {
    if (!isObject(strategy)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'spec.updateStrategy' });
      return causes;
    }
    if (strategy.type !== 'RollingUpdate' && strategy.type !== 'OnDelete') {
      causes.push({
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(strategy.type)}: supported values: "OnDelete", "RollingUpdate"`,
        field: 'spec.updateStrategy.type',
      });
    }
    const rolling = strategy.rollingUpdate;
    if (strategy.type === 'RollingUpdate' && isObject(rolling)) {
      const before = causes.length;
      causes.push(...validateIntOrPercent(rolling.maxUnavailable, 'spec.updateStrategy.rollingUpdate.maxUnavailable'));
      causes.push(...validateIntOrPercent(rolling.maxSurge, 'spec.updateStrategy.rollingUpdate.maxSurge'));
      // Both zero would never let a pod be replaced.
      if (causes.length === before && isZero(rolling.maxUnavailable) && isZero(rolling.maxSurge)) {
        causes.push({
          reason: 'FieldValueInvalid',
          message: 'Invalid value: 0: cannot be 0 when maxSurge is 0',
          field: 'spec.updateStrategy.rollingUpdate.maxUnavailable',
        });
      }
    }
  }
  return causes;
}

/** A selector is fixed once set, as in apps/v1 (the pods it picked would be orphaned). */
export function validateSelectorUnchanged(next: KubeObject, current: KubeObject): StatusCause[] {
  const before = JSON.stringify(getPath(current, ['spec', 'selector']) ?? null);
  const after = JSON.stringify(getPath(next, ['spec', 'selector']) ?? null);
  if (before === after) return [];
  return [{ reason: 'FieldValueInvalid', message: `Invalid value: ${after}: field is immutable`, field: 'spec.selector' }];
}

function count(obj: KubeObject, ...path: string[]): number {
  const value = getPath(obj, path);
  return typeof value === 'number' ? value : 0;
}

export function templateContainers(obj: KubeObject, path: readonly string[] = ['spec', 'template', 'spec', 'containers']): Json[] {
  const containers = getPath(obj, [...path]);
  return Array.isArray(containers) ? containers.filter(isObject) : [];
}

export const CONTAINERS_COLUMN = column('Containers', 'Names of each container in the template.', { priority: 1 });
export const IMAGES_COLUMN = column('Images', 'Images referenced by each container in the template.', { priority: 1 });

function nodeSelectorCell(obj: KubeObject): string {
  const selector = getPath(obj, ['spec', 'template', 'spec', 'nodeSelector']);
  if (!isObject(selector) || Object.keys(selector).length === 0) return '<none>';
  return Object.entries(selector)
    .map(([k, v]) => `${k}=${String(v)}`)
    .sort()
    .join(',');
}

export const DAEMONSET_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Desired', 'The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).', { type: 'integer' }),
    column('Current', 'The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.', { type: 'integer' }),
    column('Ready', 'The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.', { type: 'integer' }),
    column('Up-to-date', 'The total number of nodes that are running updated daemon pod', { type: 'integer' }),
    column('Available', 'The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)', { type: 'integer' }),
    column('Node Selector', 'NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node\'s labels for the pod to be scheduled on that node.'),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
    column('Selector', 'A label query over pods that are managed by the daemon set.', { priority: 1 }),
  ],
  cells: (ds, now) => [
    ds.metadata.name ?? '',
    count(ds, 'status', 'desiredNumberScheduled'),
    count(ds, 'status', 'currentNumberScheduled'),
    count(ds, 'status', 'numberReady'),
    count(ds, 'status', 'updatedNumberScheduled'),
    count(ds, 'status', 'numberAvailable'),
    nodeSelectorCell(ds),
    ageOf(ds.metadata.creationTimestamp, now),
    templateContainers(ds).map((c) => String(c.name ?? '')).join(','),
    templateContainers(ds).map((c) => String(c.image ?? '')).join(','),
    selectorString(ds) || '<none>',
  ],
};

export const DAEMONSET_DEFINITION: ResourceDefinition = {
  group: 'apps',
  version: 'v1',
  kind: 'DaemonSet',
  admitCreate: (context, obj) => admitTemplateRuntime(context, obj, 'DaemonSet'),
  plural: 'daemonsets',
  singular: 'daemonset',
  namespaced: true,
  shortNames: ['ds'],
  categories: ['all'],
  subresources: ['status'],
  printer: DAEMONSET_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'apps/daemonsets',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultDaemonSet,
  validate: validateDaemonSet,
  validateUpdate: (next, current, subresource) => (subresource ? [] : validateSelectorUnchanged(next, current)),
  garbageCollected: true,
};
