import type { StatusCause } from '../errors.js';
import { jsonEqual } from '../json.js';
import type { KubeObject } from '../objects.js';
import { validateContainerConfig } from './pod-config-validation.js';
import { validateContainerSecurityContext } from './pod-security-validation.js';

/**
 * A pod's ephemeral containers (`kubectl debug`), as kube-apiserver rules them: they are never
 * part of a created pod, they are added through the pods/ephemeralcontainers subresource only,
 * one added is never changed or removed, their names are unique among all the pod's containers,
 * they may not declare ports, probes, resources or lifecycle hooks (nothing would honour them for
 * a container that is never restarted), their volumeMounts name volumes the pod has and set no
 * subPath, and targetContainerName names one of the pod's containers (whose process namespace
 * the debugger joins). Pure functions.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Fields a container has that an ephemeral container may not set. */
export const EPHEMERAL_FORBIDDEN_FIELDS: readonly string[] = [
  'ports',
  'livenessProbe',
  'readinessProbe',
  'startupProbe',
  'resources',
  'resizePolicy',
  'lifecycle',
  'restartPolicy',
];

const FIELD = 'spec.ephemeralContainers';

function isSet(value: unknown): boolean {
  if (value === undefined || value === null || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (isObject(value)) return Object.values(value).some(isSet);
  return true;
}

function list(spec: Json, field: string): unknown[] {
  const value = spec[field];
  return Array.isArray(value) ? value : [];
}

function names(spec: Json, field: string): string[] {
  return list(spec, field)
    .filter(isObject)
    .map((c) => c.name)
    .filter((n): n is string => typeof n === 'string');
}

function volumeNames(spec: Json): Set<string> {
  return new Set(names(spec, 'volumes'));
}

/** The rules of the ephemeral containers a pod spec holds (any write). */
export function validateEphemeralContainers(spec: unknown): StatusCause[] {
  const causes: StatusCause[] = [];
  if (!isObject(spec) || spec.ephemeralContainers === undefined || spec.ephemeralContainers === null) return causes;
  if (!Array.isArray(spec.ephemeralContainers)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list', field: FIELD });
    return causes;
  }
  const taken = new Set([...names(spec, 'containers'), ...names(spec, 'initContainers')]);
  const targets = new Set(names(spec, 'containers'));
  const volumes = volumeNames(spec);
  spec.ephemeralContainers.forEach((c, i) => {
    const at = `${FIELD}[${i}]`;
    if (!isObject(c)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: at });
      return;
    }
    if (typeof c.name !== 'string' || !c.name) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.name` });
    } else if (taken.has(c.name)) {
      causes.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: "${c.name}"`, field: `${at}.name` });
    } else {
      taken.add(c.name);
    }
    if (typeof c.image !== 'string' || !c.image) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.image` });
    }
    for (const field of EPHEMERAL_FORBIDDEN_FIELDS) {
      // Set means non-empty: kubectl debug sends `resources: {}`, which Kubernetes takes as unset.
      if (isSet(c[field])) {
        causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: cannot be set for an Ephemeral Container', field: `${at}.${field}` });
      }
    }
    for (const field of ['command', 'args'] as const) {
      const value = c[field];
      if (value !== undefined && value !== null && (!Array.isArray(value) || !value.every((part) => typeof part === 'string'))) {
        causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: `${at}.${field}` });
      }
    }
    // A subPath is a bind mount kept until the pod ends, and implies the container is part of
    // the workload: Kubernetes refuses it for a debugger (the volume's root is mounted instead).
    if (Array.isArray(c.volumeMounts)) {
      c.volumeMounts.forEach((m, j) => {
        if (!isObject(m)) return;
        for (const field of ['subPath', 'subPathExpr']) {
          if (isSet(m[field])) {
            causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: cannot be set for an Ephemeral Container', field: `${at}.volumeMounts[${j}].${field}` });
          }
        }
      });
    }
    const target = c.targetContainerName;
    if (target !== undefined && target !== null && target !== '') {
      if (typeof target !== 'string' || !targets.has(target)) {
        causes.push({ reason: 'FieldValueNotFound', message: `Not found: ${JSON.stringify(target)}`, field: `${at}.targetContainerName` });
      }
    }
    // The checks every container gets, but those of the fields refused above.
    const common: Json = { ...c };
    for (const field of EPHEMERAL_FORBIDDEN_FIELDS) delete common[field];
    validateContainerConfig(common, at, volumes, causes);
    validateContainerSecurityContext(c.securityContext, `${at}.securityContext`, causes);
  });
  return causes;
}

/** A pod is created without ephemeral containers: they are added to a running pod. */
export function validateEphemeralContainersOnCreate(pod: KubeObject): StatusCause[] {
  const spec = pod.spec;
  if (!isObject(spec) || !Array.isArray(spec.ephemeralContainers) || spec.ephemeralContainers.length === 0) return [];
  return [{ reason: 'FieldValueForbidden', message: 'Forbidden: cannot be set on create', field: FIELD }];
}

function byName(spec: unknown): Map<string, unknown> {
  const result = new Map<string, unknown>();
  if (!isObject(spec)) return result;
  for (const c of list(spec, 'ephemeralContainers')) if (isObject(c) && typeof c.name === 'string') result.set(c.name, c);
  return result;
}

/**
 * An update's change to the ephemeral containers. Through the subresource (`viaSubresource`)
 * containers may only be added: each existing one must stay as it is. Through the pod itself
 * they may not change at all (the subresource is authorized on its own, as in Kubernetes, so
 * that adding a container into a running pod is a separate grant).
 */
export function validateEphemeralContainersUpdate(next: KubeObject, current: KubeObject, viaSubresource: boolean): StatusCause[] {
  const before = byName(current.spec);
  const afterList = isObject(next.spec) ? list(next.spec, 'ephemeralContainers') : [];
  if (!viaSubresource) {
    const previous = isObject(current.spec) ? list(current.spec, 'ephemeralContainers') : [];
    if (jsonEqual(previous, afterList)) return [];
    return [
      {
        reason: 'FieldValueForbidden',
        message: 'Forbidden: ephemeral containers may only be added through the pods/ephemeralcontainers subresource (kubectl debug)',
        field: FIELD,
      },
    ];
  }
  const causes: StatusCause[] = [];
  const after = byName(next.spec);
  afterList.forEach((c, i) => {
    if (!isObject(c) || typeof c.name !== 'string') return;
    const old = before.get(c.name);
    if (old !== undefined && !jsonEqual(old, c)) {
      causes.push({ reason: 'FieldValueForbidden', message: `Forbidden: existing ephemeral containers "${c.name}" may not be changed`, field: `${FIELD}[${i}]` });
    }
  });
  const removed = [...before.keys()].filter((name) => !after.has(name));
  if (removed.length) {
    causes.push({
      reason: 'FieldValueForbidden',
      message: `Forbidden: existing ephemeral containers ${removed.map((n) => JSON.stringify(n)).join(', ')} may not be removed`,
      field: FIELD,
    });
  }
  return causes;
}
