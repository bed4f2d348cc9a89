import type { StatusCause } from '../errors.js';
import { parseQuantity } from '../quantity.js';

/**
 * The rules kube-apiserver applies to a volume's source, with its wording, for the sources
 * Drover mounts: configMap and secret (items, modes), emptyDir (medium, sizeLimit), hostPath
 * (path, type), downwardAPI (items and their field or resource references) and projected (one
 * kind per source, conflicting paths, a serviceAccountToken's lifetime and path). Where Drover is
 * stricter it says why in the message (a relative hostPath, a medium it cannot provide).
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

export const required = (field: string, detail = ''): StatusCause => ({
  reason: 'FieldValueRequired',
  message: detail ? `Required value: ${detail}` : 'Required value',
  field,
});
export const invalid = (field: string, value: unknown, detail: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  message: `Invalid value: ${JSON.stringify(value)}: ${detail}`,
  field,
});
const notSupported = (field: string, value: unknown, supported: readonly string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => JSON.stringify(s)).join(', ')}`,
  field,
});
const forbidden = (field: string, detail: string): StatusCause => ({ reason: 'FieldValueForbidden', message: `Forbidden: ${detail}`, field });

export const FILE_MODE_MESSAGE = 'must be a number between 0 and 0777 (octal), both inclusive';

export function isMode(value: unknown): boolean {
  return Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 0o777;
}

function modeCauses(value: unknown, field: string): StatusCause[] {
  return value !== undefined && value !== null && !isMode(value) ? [invalid(field, value, FILE_MODE_MESSAGE)] : [];
}

/** A path inside a volume: relative, no `..` segment. */
export function localDescendingPathCauses(value: string, field: string): StatusCause[] {
  const causes: StatusCause[] = [];
  if (value.startsWith('/')) causes.push(invalid(field, value, 'must be a relative path'));
  if (value.split('/').includes('..')) causes.push(invalid(field, value, "must not contain '..'"));
  return causes;
}

/** A file's path in a payload volume: also not starting with `..` (the atomic writer's own names). */
function localNonReservedPathCauses(value: string, field: string): StatusCause[] {
  const causes = localDescendingPathCauses(value, field);
  if (value.startsWith('..') && !value.startsWith('../')) causes.push(invalid(field, value, "must not start with '..'"));
  return causes;
}

export function keyToPathCauses(items: unknown, field: string, paths?: Set<string>, conflictField?: { field: string; value: unknown }): StatusCause[] {
  if (items === undefined || items === null) return [];
  if (!Array.isArray(items)) return [invalid(field, items, 'must be a list')];
  return items.flatMap((item, i) => {
    const at = `${field}[${i}]`;
    const kp = isObject(item) ? item : {};
    const causes: StatusCause[] = [];
    if (typeof kp.key !== 'string' || !kp.key) causes.push(required(`${at}.key`));
    if (typeof kp.path !== 'string' || !kp.path) causes.push(required(`${at}.path`));
    else {
      causes.push(...localNonReservedPathCauses(kp.path, `${at}.path`));
      if (paths && conflictField) {
        if (paths.has(kp.path)) causes.push(invalid(conflictField.field, conflictField.value, 'conflicting duplicate paths'));
        paths.add(kp.path);
      }
    }
    causes.push(...modeCauses(kp.mode, `${at}.mode`));
    return causes;
  });
}

/** The field paths a downward API volume file may name (kube's validVolumeDownwardAPIFieldPathExpressions). */
const VOLUME_FIELD_PATHS = ['metadata.annotations', 'metadata.labels', 'metadata.name', 'metadata.namespace', 'metadata.uid'];
const RESOURCES = ['limits.cpu', 'limits.ephemeral-storage', 'limits.memory', 'requests.cpu', 'requests.ephemeral-storage', 'requests.memory'];

function downwardFileCauses(file: Json, field: string, paths?: Set<string>, conflictField?: string): StatusCause[] {
  const causes: StatusCause[] = [];
  if (typeof file.path !== 'string' || !file.path) causes.push(required(`${field}.path`));
  else {
    causes.push(...localNonReservedPathCauses(file.path, `${field}.path`));
    if (paths && conflictField) {
      if (paths.has(file.path)) causes.push(invalid(conflictField, file.path, 'conflicting duplicate paths'));
      paths.add(file.path);
    }
  }
  const fieldRef = file.fieldRef;
  const resourceRef = file.resourceFieldRef;
  if (isObject(fieldRef)) {
    const fieldPath = fieldRef.fieldPath;
    if (typeof fieldPath !== 'string' || !fieldPath) causes.push(required(`${field}.fieldRef.fieldPath`));
    else if (!/^metadata\.(labels|annotations)\['.+'\]$/.test(fieldPath) && !VOLUME_FIELD_PATHS.includes(fieldPath)) {
      causes.push(notSupported(`${field}.fieldRef.fieldPath`, fieldPath, VOLUME_FIELD_PATHS));
    }
    if (isObject(resourceRef)) causes.push(invalid(field, 'resource', 'fieldRef and resourceFieldRef can not be specified simultaneously'));
  } else if (isObject(resourceRef)) {
    if (typeof resourceRef.containerName !== 'string' || !resourceRef.containerName) causes.push(required(`${field}.resourceFieldRef.containerName`));
    const resource = resourceRef.resource;
    if (typeof resource !== 'string' || !resource) causes.push(required(`${field}.resourceFieldRef.resource`));
    else if (!RESOURCES.includes(resource) && !/^(limits|requests)\.hugepages-/.test(resource)) {
      causes.push(notSupported(`${field}.resourceFieldRef.resource`, resource, RESOURCES));
    }
    const divisor = resourceRef.divisor;
    if (divisor !== undefined && divisor !== null && !(parseQuantity(divisor)! > 0)) {
      causes.push(invalid(`${field}.resourceFieldRef.divisor`, divisor, 'must be a positive quantity'));
    }
  } else {
    causes.push(required(field, 'one of fieldRef and resourceFieldRef is required'));
  }
  causes.push(...modeCauses(file.mode, `${field}.mode`));
  return causes;
}

/** kube names every item's errors by the downwardAPI source itself, not by the item's index (a quirk kept). */
function downwardItemsCauses(items: unknown, field: string, paths?: Set<string>, conflictField?: string): StatusCause[] {
  if (items === undefined || items === null) return [];
  if (!Array.isArray(items)) return [invalid(`${field}.items`, items, 'must be a list')];
  return items.flatMap((item) => downwardFileCauses(isObject(item) ? item : {}, field, paths, conflictField));
}

export const HOST_PATH_TYPES = ['', 'BlockDevice', 'CharDevice', 'Directory', 'DirectoryOrCreate', 'File', 'FileOrCreate', 'Socket'];
const EMPTY_DIR_MEDIA = ['', 'Memory'];
const PROJECTION_KINDS = ['secret', 'configMap', 'downwardAPI', 'serviceAccountToken', 'clusterTrustBundle'];

function projectedCauses(source: Json, at: string): StatusCause[] {
  const causes = modeCauses(source.defaultMode, `${at}.defaultMode`);
  const sources = source.sources;
  if (sources === undefined || sources === null) return causes;
  if (!Array.isArray(sources)) return [...causes, invalid(`${at}.sources`, sources, 'must be a list')];
  const paths = new Set<string>();
  sources.forEach((entry, i) => {
    const src = isObject(entry) ? entry : {};
    const srcPath = `${at}.sources[${i}]`;
    const kinds = PROJECTION_KINDS.filter((k) => src[k] !== undefined && src[k] !== null);
    if (kinds.length === 0) causes.push(required(srcPath, 'must specify one of: `secret`, `configMap`, `downwardAPI`, `serviceAccountToken`'));
    if (kinds.length > 1) causes.push(forbidden(srcPath, 'may not specify more than 1 volume type'));
    for (const kind of kinds) {
      const body = isObject(src[kind]) ? (src[kind] as Json) : {};
      const here = `${srcPath}.${kind}`;
      if (kind === 'secret' || kind === 'configMap') {
        if (typeof body.name !== 'string' || !body.name) causes.push(required(`${here}.name`));
        causes.push(...keyToPathCauses(body.items, `${here}.items`, paths, { field: at, value: body.name ?? '' }));
      } else if (kind === 'downwardAPI') {
        causes.push(...downwardItemsCauses(body.items, here, paths, at));
      } else if (kind === 'serviceAccountToken') {
        const seconds = body.expirationSeconds ?? 3600;
        if (!Number.isInteger(seconds)) causes.push(invalid(`${here}.expirationSeconds`, seconds, 'must be an integer'));
        else if ((seconds as number) < 600) causes.push(invalid(`${here}.expirationSeconds`, seconds, 'may not specify a duration less than 10 minutes'));
        else if ((seconds as number) > 2 ** 32) causes.push(invalid(`${here}.expirationSeconds`, seconds, 'may not specify a duration larger than 2^32 seconds'));
        if (body.audience !== undefined && typeof body.audience !== 'string') causes.push(invalid(`${here}.audience`, body.audience, 'must be a string'));
        if (typeof body.path !== 'string' || !body.path) causes.push(required(`${at}.path`));
        else {
          causes.push(...localNonReservedPathCauses(body.path, `${at}.path`));
          if (paths.has(body.path)) causes.push(invalid(at, body.path, 'conflicting duplicate paths'));
          paths.add(body.path);
        }
      } else {
        causes.push(forbidden(here, 'clusterTrustBundle sources are not supported by Drover'));
      }
    }
  });
  return causes;
}

/** The causes for one volume's source (`type` its kind, `at` the source's own path, e.g. `spec.volumes[0].hostPath`). */
export function volumeSourceCauses(type: string, source: Json, at: string): StatusCause[] {
  switch (type) {
    case 'configMap':
    case 'secret': {
      const nameField = type === 'configMap' ? 'name' : 'secretName';
      const causes: StatusCause[] = [];
      if (typeof source[nameField] !== 'string' || !source[nameField]) causes.push(required(`${at}.${nameField}`));
      causes.push(...modeCauses(source.defaultMode, `${at}.defaultMode`));
      causes.push(...keyToPathCauses(source.items, `${at}.items`));
      return causes;
    }
    case 'emptyDir': {
      const causes: StatusCause[] = [];
      const medium = source.medium ?? '';
      if (!EMPTY_DIR_MEDIA.includes(medium as string)) causes.push(notSupported(`${at}.medium`, medium, EMPTY_DIR_MEDIA));
      const limit = source.sizeLimit;
      if (limit !== undefined && limit !== null) {
        const bytes = parseQuantity(limit);
        if (bytes === undefined) causes.push(invalid(`${at}.sizeLimit`, limit, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"));
        else if (bytes < 0) causes.push(forbidden(`${at}.sizeLimit`, 'SizeLimit field must be a valid resource quantity'));
      }
      return causes;
    }
    case 'hostPath': {
      const hostPath = source.path;
      if (typeof hostPath !== 'string' || !hostPath) return [required(`${at}.path`)];
      const causes: StatusCause[] = [];
      if (hostPath.split('/').includes('..')) causes.push(invalid(`${at}.path`, hostPath, "must not contain '..'"));
      else if (!hostPath.startsWith('/')) causes.push(invalid(`${at}.path`, hostPath, 'must be an absolute path (Drover resolves nothing against the agent\'s working directory)'));
      const type = source.type ?? '';
      if (!HOST_PATH_TYPES.includes(type as string)) causes.push(notSupported(`${at}.type`, type, HOST_PATH_TYPES));
      return causes;
    }
    case 'downwardAPI':
      return [...modeCauses(source.defaultMode, `${at}.defaultMode`), ...downwardItemsCauses(source.items, at)];
    case 'projected':
      return projectedCauses(source, at);
    default:
      return [];
  }
}

const PROPAGATION = ['Bidirectional', 'HostToContainer', 'None'];

/** A volumeMount's mountPropagation: known values, Bidirectional only for a privileged container. */
export function mountPropagationCauses(mount: Json, container: Json, field: string): StatusCause[] {
  const value = mount.mountPropagation;
  if (value === undefined || value === null) return [];
  if (!PROPAGATION.includes(value as string)) return [notSupported(field, value, PROPAGATION)];
  const security = isObject(container.securityContext) ? container.securityContext : {};
  if (value === 'Bidirectional' && security.privileged !== true) {
    return [forbidden(field, 'Bidirectional mount propagation is available only to privileged containers')];
  }
  return [];
}
