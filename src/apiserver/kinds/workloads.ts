import { type ResourceDefinition, type ScaleStrategy, standardFields } from '../definition.js';
import { errors, type StatusCause } from '../errors.js';
import { MAX_INT32 } from '../limits.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import {
  formatLabelSelector,
  labelSelectorFromObject,
  type LabelSelectorObject,
  matchesLabels,
} from '../selectors.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { admitTemplateRuntime, defaultPodSpec, validatePodSpec } from './pods.js';

/**
 * apps/v1 Deployment, ReplicaSet and StatefulSet: defaults, validation and printers as
 * kube-apiserver has them, and their `scale` subresource (the autoscaling/v1 Scale view of
 * spec.replicas).
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// ---------------------------------------------------------------------------------------------
// Defaults

function specOf(obj: KubeObject): Json | undefined {
  return isObject(obj.spec) ? obj.spec : undefined;
}

function defaultCommon(spec: Json): void {
  spec.replicas ??= 1;
  if (isObject(spec.template)) defaultPodSpec(spec.template.spec);
}

export function defaultDeployment(obj: KubeObject): void {
  const spec = specOf(obj);
  if (!spec) return;
  defaultCommon(spec);
  const strategy = isObject(spec.strategy) ? spec.strategy : (spec.strategy = {});
  strategy.type ??= 'RollingUpdate';
  if (strategy.type === 'RollingUpdate') {
    const rolling = isObject(strategy.rollingUpdate) ? strategy.rollingUpdate : (strategy.rollingUpdate = {});
    rolling.maxUnavailable ??= '25%';
    rolling.maxSurge ??= '25%';
  }
  spec.revisionHistoryLimit ??= 10;
  spec.progressDeadlineSeconds ??= 600;
}

export function defaultReplicaSet(obj: KubeObject): void {
  const spec = specOf(obj);
  if (spec) defaultCommon(spec);
}

export function defaultStatefulSet(obj: KubeObject): void {
  const spec = specOf(obj);
  if (!spec) return;
  defaultCommon(spec);
  spec.podManagementPolicy ??= 'OrderedReady';
  const strategy = isObject(spec.updateStrategy) ? spec.updateStrategy : (spec.updateStrategy = {});
  strategy.type ??= 'RollingUpdate';
  if (strategy.type === 'RollingUpdate') {
    const rolling = isObject(strategy.rollingUpdate) ? strategy.rollingUpdate : (strategy.rollingUpdate = {});
    rolling.partition ??= 0;
  }
  spec.revisionHistoryLimit ??= 10;
}

// ---------------------------------------------------------------------------------------------
// Validation

const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

export function validateReplicas(value: unknown, field: string): StatusCause[] {
  if (value === undefined) return [];
  if (!Number.isInteger(value)) {
    return [{ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: must be an integer`, field }];
  }
  if ((value as number) < 0) {
    return [{ reason: 'FieldValueInvalid', message: `Invalid value: ${value as number}: must be greater than or equal to 0`, field }];
  }
  // An int32 in Kubernetes' types: a larger count cannot be stored or sent to any other client.
  if ((value as number) > MAX_INT32) {
    return [{ reason: 'FieldValueInvalid', message: `Invalid value: ${value as number}: must be less than or equal to ${MAX_INT32}`, field }];
  }
  return [];
}

function validateSelector(selector: unknown, causes: StatusCause[]): LabelSelectorObject | undefined {
  if (selector === undefined || selector === null) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.selector' });
    return undefined;
  }
  if (!isObject(selector)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'spec.selector' });
    return undefined;
  }
  const { matchLabels, matchExpressions } = selector;
  if (matchLabels !== undefined && (!isObject(matchLabels) || !Object.values(matchLabels).every((v) => typeof v === 'string'))) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a map of strings', field: 'spec.selector.matchLabels' });
    return undefined;
  }
  if (matchExpressions !== undefined && !Array.isArray(matchExpressions)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list', field: 'spec.selector.matchExpressions' });
    return undefined;
  }
  let valid = true;
  (matchExpressions ?? []).forEach((e: unknown, i: number) => {
    const at = `spec.selector.matchExpressions[${i}]`;
    if (!isObject(e) || typeof e.key !== 'string' || !e.key) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.key` });
      valid = false;
      return;
    }
    if (!OPERATORS.has(e.operator as string)) {
      causes.push({
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(e.operator)}: supported values: "In", "NotIn", "Exists", "DoesNotExist"`,
        field: `${at}.operator`,
      });
      valid = false;
      return;
    }
    const values = e.values;
    const setOperator = e.operator === 'In' || e.operator === 'NotIn';
    if (setOperator && (!Array.isArray(values) || values.length === 0)) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value: must be specified when `operator` is \'In\' or \'NotIn\'', field: `${at}.values` });
      valid = false;
    } else if (!setOperator && Array.isArray(values) && values.length > 0) {
      causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: may not be specified when `operator` is \'Exists\' or \'DoesNotExist\'', field: `${at}.values` });
      valid = false;
    }
  });
  if (!valid) return undefined;
  const empty = Object.keys(matchLabels ?? {}).length === 0 && (matchExpressions ?? []).length === 0;
  if (empty) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'Invalid value: {}: empty selector is invalid; set matchLabels or matchExpressions',
      field: 'spec.selector',
    });
    return undefined;
  }
  return selector as LabelSelectorObject;
}

/** The rules every workload with a selector and a pod template shares. */
export function validateWorkload(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const spec = obj.spec;
  if (!isObject(spec)) {
    causes.push(
      spec === undefined
        ? { reason: 'FieldValueRequired', message: 'Required value', field: 'spec' }
        : { reason: 'FieldValueInvalid', message: 'must be an object', field: 'spec' },
    );
    return causes;
  }
  if (obj.status !== undefined && !isObject(obj.status)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'status' });
  }
  causes.push(...validateReplicas(spec.replicas, 'spec.replicas'));
  const selector = validateSelector(spec.selector, causes);
  const template = spec.template;
  if (!isObject(template)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.template' });
    return causes;
  }
  const templateMeta = isObject(template.metadata) ? template.metadata : {};
  const labels = isObject(templateMeta.labels) ? (templateMeta.labels as Record<string, string>) : {};
  if (selector && !matchesLabels(labelSelectorFromObject(selector), labels)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(labels)}: selector does not match template labels`,
      field: 'spec.template.metadata.labels',
    });
  }
  // The command and image rules of a template without a class need the cluster's default class:
  // admission checks them (admitTemplateRuntime).
  causes.push(...validatePodSpec(template.spec, 'spec.template.spec', null));
  return causes;
}

// ---------------------------------------------------------------------------------------------
// Scale (autoscaling/v1)

/** `status.selector` of a Scale: the workload's selector as a query string. */
export function selectorString(obj: KubeObject): string {
  const selector = getPath(obj, ['spec', 'selector']);
  return formatLabelSelector(labelSelectorFromObject(isObject(selector) ? (selector as LabelSelectorObject) : undefined));
}

/** The autoscaling/v1 Scale view of a workload, as kube-apiserver serves `<kind>/scale`. */
export function scaleOf(obj: KubeObject): KubeObject {
  const meta = obj.metadata;
  const replicas = getPath(obj, ['spec', 'replicas']);
  const current = getPath(obj, ['status', 'replicas']);
  return {
    kind: 'Scale',
    apiVersion: 'autoscaling/v1',
    metadata: {
      name: meta.name,
      namespace: meta.namespace,
      uid: meta.uid,
      resourceVersion: meta.resourceVersion,
      creationTimestamp: meta.creationTimestamp,
    },
    spec: { replicas: typeof replicas === 'number' ? replicas : 0 },
    status: { replicas: typeof current === 'number' ? current : 0, selector: selectorString(obj) },
  };
}

/**
 * A write of the Scale changes only the workload's spec.replicas (so it bumps its generation
 * like any spec change); a missing count is 0.
 */
const WORKLOAD_SCALE: ScaleStrategy = {
  view: scaleOf,
  apply(obj, scale) {
    const replicas = isObject(scale.spec) ? scale.spec.replicas : undefined;
    const causes = validateReplicas(replicas ?? 0, 'spec.replicas');
    if (causes.length) throw errors.invalid('Scale', obj.metadata.name ?? '', 'autoscaling', causes);
    return { ...obj, spec: { ...(specOf(obj) ?? {}), replicas: replicas ?? 0 } };
  },
};

// ---------------------------------------------------------------------------------------------
// Printers

function count(obj: KubeObject, ...path: string[]): number {
  const value = getPath(obj, path);
  return typeof value === 'number' ? value : 0;
}

function templateContainers(obj: KubeObject): Json[] {
  const containers = getPath(obj, ['spec', 'template', 'spec', 'containers']);
  return Array.isArray(containers) ? containers.filter(isObject) : [];
}

const containerNames = (obj: KubeObject): string => templateContainers(obj).map((c) => String(c.name ?? '')).join(',');
const containerImages = (obj: KubeObject): string =>
  templateContainers(obj)
    .map((c) => String(c.image ?? ''))
    .join(',');
const selectorColumn = (obj: KubeObject): string => selectorString(obj) || '<none>';

const CONTAINERS_COLUMN = column('Containers', 'Names of each container in the template.', { priority: 1 });
const IMAGES_COLUMN = column('Images', 'Images referenced by each container in the template.', { priority: 1 });
const SELECTOR_COLUMN = column('Selector', 'Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.', { priority: 1 });

export const DEPLOYMENT_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Ready', 'Number of the pod with ready state'),
    column('Up-to-date', 'Total number of non-terminated pods targeted by this deployment that have the desired template spec.', { type: 'integer' }),
    column('Available', 'Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.', { type: 'integer' }),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
    SELECTOR_COLUMN,
  ],
  cells: (d, now) => [
    d.metadata.name ?? '',
    `${count(d, 'status', 'readyReplicas')}/${count(d, 'spec', 'replicas')}`,
    count(d, 'status', 'updatedReplicas'),
    count(d, 'status', 'availableReplicas'),
    ageOf(d.metadata.creationTimestamp, now),
    containerNames(d),
    containerImages(d),
    selectorColumn(d),
  ],
};

export const REPLICASET_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Desired', 'Number of desired pods.', { type: 'integer' }),
    column('Current', 'Number of actual replicas.', { type: 'integer' }),
    column('Ready', 'The number of ready replicas for this replica set.', { type: 'integer' }),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
    column('Selector', 'Label query over pods that should match the replicas count.', { priority: 1 }),
  ],
  cells: (rs, now) => [
    rs.metadata.name ?? '',
    count(rs, 'spec', 'replicas'),
    count(rs, 'status', 'replicas'),
    count(rs, 'status', 'readyReplicas'),
    ageOf(rs.metadata.creationTimestamp, now),
    containerNames(rs),
    containerImages(rs),
    selectorColumn(rs),
  ],
};

export const STATEFULSET_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Ready', 'Number of the pod with ready state'),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
  ],
  cells: (sts, now) => [
    sts.metadata.name ?? '',
    `${count(sts, 'status', 'readyReplicas')}/${count(sts, 'spec', 'replicas')}`,
    ageOf(sts.metadata.creationTimestamp, now),
    containerNames(sts),
    containerImages(sts),
  ],
};

// ---------------------------------------------------------------------------------------------
// The definitions

export const DEPLOYMENT_DEFINITION: ResourceDefinition = {
  group: 'apps',
  version: 'v1',
  kind: 'Deployment',
  admitCreate: (context, obj) => admitTemplateRuntime(context, obj, 'Deployment'),
  plural: 'deployments',
  singular: 'deployment',
  namespaced: true,
  shortNames: ['deploy'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  printer: DEPLOYMENT_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'apps/deployments',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultDeployment,
  validate: validateWorkload,
  garbageCollected: true,
  scale: WORKLOAD_SCALE,
};

export const REPLICASET_DEFINITION: ResourceDefinition = {
  group: 'apps',
  version: 'v1',
  kind: 'ReplicaSet',
  admitCreate: (context, obj) => admitTemplateRuntime(context, obj, 'ReplicaSet'),
  plural: 'replicasets',
  singular: 'replicaset',
  namespaced: true,
  shortNames: ['rs'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  printer: REPLICASET_PRINTER,
  fieldLabels: { 'status.replicas': (rs) => getString(rs, ['status', 'replicas']) || '0' },
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'apps/replicasets',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultReplicaSet,
  validate: validateWorkload,
  garbageCollected: true,
  scale: WORKLOAD_SCALE,
};

export const STATEFULSET_DEFINITION: ResourceDefinition = {
  group: 'apps',
  version: 'v1',
  kind: 'StatefulSet',
  admitCreate: (context, obj) => admitTemplateRuntime(context, obj, 'StatefulSet'),
  plural: 'statefulsets',
  singular: 'statefulset',
  namespaced: true,
  shortNames: ['sts'],
  categories: ['all'],
  subresources: ['status', 'scale'],
  printer: STATEFULSET_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'apps/statefulsets',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultStatefulSet,
  validate: validateWorkload,
  garbageCollected: true,
  scale: WORKLOAD_SCALE,
};
