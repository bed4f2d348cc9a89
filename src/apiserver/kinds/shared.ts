import type { StatusCause } from '../errors.js';
import type { KubeObject } from '../objects.js';

/** Validation rules several kinds share. */

/** A top-level field that, when present, must be an object. */
export function requireObjectField(obj: KubeObject, field: string, causes: StatusCause[]): void {
  const value = obj[field];
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field });
  }
}

/** spec and status, when present, are objects (the kinds with no deeper rules). */
export function validateSpecAndStatus(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(obj, 'spec', causes);
  requireObjectField(obj, 'status', causes);
  return causes;
}
