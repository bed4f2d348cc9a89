import type { StatusCause } from './errors.js';
import type { KubeObject } from './objects.js';

/** Object metadata rules shared by every kind, as Kubernetes enforces them. */

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

export function dnsLabelProblem(value: string): string | undefined {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (!DNS_LABEL.test(value)) {
    return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
  }
  return undefined;
}

export function dnsSubdomainProblem(value: string): string | undefined {
  if (value.length > 253) return 'must be no more than 253 characters';
  if (!DNS_SUBDOMAIN.test(value)) {
    return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

/** RBAC objects' names (`system:discovery`): anything that is a single path segment, as kube's ValidatePathSegmentName. */
export function pathSegmentNameProblem(value: string): string | undefined {
  if (value === '.' || value === '..') return `may not be '${value}'`;
  if (value.includes('/')) return "may not contain '/'";
  if (value.includes('%')) return "may not contain '%'";
  return undefined;
}

export function qualifiedNameProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (slash >= 0) {
    const prefix = key.slice(0, slash);
    const problem = prefix ? dnsSubdomainProblem(prefix) : 'prefix part must be non-empty';
    if (problem) return `prefix part ${problem}`;
  }
  if (!name) return 'name part must be non-empty';
  if (name.length > 63) return 'name part must be no more than 63 characters';
  if (!QUALIFIED_NAME_PART.test(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

export function labelValueProblem(value: string): string | undefined {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (value && !QUALIFIED_NAME_PART.test(value)) {
    return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

function isStringMap(value: unknown): value is Record<string, string> {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    Object.values(value).every((v) => typeof v === 'string')
  );
}

const MAX_ANNOTATIONS_BYTES = 256 * 1024;

export function validateObjectMeta(
  obj: KubeObject,
  nameRule: 'dns-subdomain' | 'dns-label' | 'path-segment',
): StatusCause[] {
  const causes: StatusCause[] = [];
  const meta = obj.metadata;
  const name = meta.name;
  if (typeof name !== 'string' || !name) {
    causes.push({
      reason: 'FieldValueRequired',
      message: 'Required value: name or generateName is required',
      field: 'metadata.name',
    });
  } else {
    const problem =
      nameRule === 'dns-label' ? dnsLabelProblem(name) : nameRule === 'path-segment' ? pathSegmentNameProblem(name) : dnsSubdomainProblem(name);
    if (problem) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${name}": ${problem}`, field: 'metadata.name' });
    }
  }
  if (meta.labels !== undefined) {
    if (!isStringMap(meta.labels)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a map of string to string', field: 'metadata.labels' });
    } else {
      for (const [key, value] of Object.entries(meta.labels)) {
        const keyProblem = qualifiedNameProblem(key);
        if (keyProblem) {
          causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${key}": ${keyProblem}`, field: 'metadata.labels' });
        }
        const valueProblem = labelValueProblem(value);
        if (valueProblem) {
          causes.push({
            reason: 'FieldValueInvalid',
            message: `Invalid value: "${value}": ${valueProblem}`,
            field: `metadata.labels`,
          });
        }
      }
    }
  }
  if (meta.annotations !== undefined) {
    if (!isStringMap(meta.annotations)) {
      causes.push({
        reason: 'FieldValueInvalid',
        message: 'must be a map of string to string',
        field: 'metadata.annotations',
      });
    } else {
      let size = 0;
      for (const [key, value] of Object.entries(meta.annotations)) {
        size += key.length + value.length;
        const keyProblem = qualifiedNameProblem(key.toLowerCase());
        if (keyProblem) {
          causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${key}": ${keyProblem}`, field: 'metadata.annotations' });
        }
      }
      if (size > MAX_ANNOTATIONS_BYTES) {
        causes.push({
          reason: 'FieldValueTooLong',
          message: `Too long: must have at most ${MAX_ANNOTATIONS_BYTES} bytes`,
          field: 'metadata.annotations',
        });
      }
    }
  }
  if (meta.finalizers !== undefined) {
    if (!Array.isArray(meta.finalizers) || !meta.finalizers.every((f) => typeof f === 'string')) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: 'metadata.finalizers' });
    } else if (meta.finalizers.includes('orphan') && meta.finalizers.includes('foregroundDeletion')) {
      // The garbage collector could not do both (docs/api.md, deletion).
      causes.push({
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(meta.finalizers)}: finalizer orphan and foregroundDeletion cannot be both set`,
        field: 'metadata.finalizers',
      });
    }
  }
  if (meta.ownerReferences !== undefined && !Array.isArray(meta.ownerReferences)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list', field: 'metadata.ownerReferences' });
  }
  return causes;
}
