import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { requireObjectField } from './shared.js';

/** coordination.k8s.io/v1 Lease: node heartbeats and the controller lease. */

const str = (obj: KubeObject, ...path: string[]): string => getString(obj, path);

const LEASE_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Holder', 'The holder of the lease.'), AGE_COLUMN],
  cells: (lease, now) => [
    lease.metadata.name ?? '',
    str(lease, 'spec', 'holderIdentity'),
    ageOf(lease.metadata.creationTimestamp, now),
  ],
};

function validateLease(lease: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(lease, 'spec', causes);
  const duration = getPath(lease, ['spec', 'leaseDurationSeconds']);
  if (duration !== undefined && (!Number.isInteger(duration) || (duration as number) <= 0)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'must be a positive integer',
      field: 'spec.leaseDurationSeconds',
    });
  }
  const holder = getPath(lease, ['spec', 'holderIdentity']);
  if (holder !== undefined && holder !== null && typeof holder !== 'string') {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a string', field: 'spec.holderIdentity' });
  }
  return causes;
}

export const LEASE_DEFINITION: ResourceDefinition = {
  group: 'coordination.k8s.io',
  version: 'v1',
  kind: 'Lease',
  plural: 'leases',
  singular: 'lease',
  namespaced: true,
  shortNames: [],
  categories: [],
  subresources: [],
  printer: LEASE_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec'),
  storagePath: 'coordination.k8s.io/leases',
  nameRule: 'dns-subdomain',
  validate: validateLease,
};
