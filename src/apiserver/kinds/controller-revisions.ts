import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import type { KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';

/**
 * apps/v1 ControllerRevision: an immutable snapshot of a workload's template, which the DaemonSet
 * controller keeps one of per template so that `kubectl rollout history` and `rollout undo`
 * work for DaemonSets.
 */

export function validateControllerRevision(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const revision = obj.revision;
  if (!Number.isInteger(revision) || (revision as number) < 0 || (revision as number) > Number.MAX_SAFE_INTEGER) {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(revision ?? null)}: must be a non-negative integer`, field: 'revision' });
  }
  const data = obj.data;
  if (data !== undefined && (typeof data !== 'object' || data === null || Array.isArray(data))) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'data' });
  }
  return causes;
}

/** The data of a revision never changes (kube's rule); its revision number may (a rollback renumbers it). */
export function validateControllerRevisionUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  if (JSON.stringify(next.data ?? null) === JSON.stringify(current.data ?? null)) return [];
  return [{ reason: 'FieldValueInvalid', message: 'Invalid value: field is immutable', field: 'data' }];
}

function controllerCell(obj: KubeObject): string {
  const owner = obj.metadata.ownerReferences?.find((r) => r.controller);
  if (!owner) return '<none>';
  const group = owner.apiVersion.includes('/') ? owner.apiVersion.split('/')[0] : '';
  return `${owner.kind.toLowerCase()}${group ? `.${group}` : ''}/${owner.name}`;
}

export const CONTROLLER_REVISION_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Controller', 'Controller of the object'),
    column('Revision', 'Revision indicates the revision of the state represented by Data.', { type: 'integer' }),
    AGE_COLUMN,
  ],
  cells: (obj, now) => [obj.metadata.name ?? '', controllerCell(obj), typeof obj.revision === 'number' ? obj.revision : 0, ageOf(obj.metadata.creationTimestamp, now)],
};

export const CONTROLLER_REVISION_DEFINITION: ResourceDefinition = {
  group: 'apps',
  version: 'v1',
  kind: 'ControllerRevision',
  plural: 'controllerrevisions',
  singular: 'controllerrevision',
  namespaced: true,
  shortNames: [],
  categories: [],
  subresources: [],
  printer: CONTROLLER_REVISION_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('data', 'revision'),
  storagePath: 'apps/controllerrevisions',
  nameRule: 'dns-subdomain',
  validate: validateControllerRevision,
  validateUpdate: (next, current) => validateControllerRevisionUpdate(next, current),
  garbageCollected: true,
};
