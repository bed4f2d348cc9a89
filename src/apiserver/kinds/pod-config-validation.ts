import path from 'node:path';
import type { StatusCause } from '../errors.js';
import { dnsLabelProblem, dnsSubdomainProblem } from '../validation.js';
import { localDescendingPathCauses, mountPropagationCauses, volumeSourceCauses } from './volume-validation.js';

/**
 * The rules kube-apiserver applies to a pod's volumes, volumeMounts, env and envFrom, with its
 * wording (field paths included, quirks too: an envFrom entry's errors name the list, a subPath's
 * the volumeMounts list). Environment variable names follow Kubernetes 1.32's default
 * (RelaxedEnvironmentVariableValidation): any printable ASCII but `=`.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

const required = (field: string, detail = ''): StatusCause => ({
  reason: 'FieldValueRequired',
  message: detail ? `Required value: ${detail}` : 'Required value',
  field,
});
const invalid = (field: string, value: unknown, detail: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  message: `Invalid value: ${JSON.stringify(value)}: ${detail}`,
  field,
});

/** The volume sources Kubernetes knows (a volume must have exactly one). */
const VOLUME_SOURCES = [
  'hostPath', 'emptyDir', 'gcePersistentDisk', 'awsElasticBlockStore', 'gitRepo', 'secret', 'nfs', 'iscsi', 'glusterfs',
  'persistentVolumeClaim', 'rbd', 'flexVolume', 'cinder', 'cephfs', 'flocker', 'downwardAPI', 'fc', 'azureFile', 'configMap',
  'vsphereVolume', 'quobyte', 'azureDisk', 'photonPersistentDisk', 'projected', 'portworxVolume', 'scaleIO', 'storageos', 'csi',
  'ephemeral', 'image',
];

/** The field paths an env var's fieldRef may name (kube's validEnvDownwardAPIFieldPathExpressions). */
const ENV_FIELD_PATHS = [
  'metadata.name', 'metadata.namespace', 'metadata.uid', 'spec.nodeName', 'spec.serviceAccountName',
  'status.hostIP', 'status.hostIPs', 'status.podIP', 'status.podIPs',
];
/** Paths the downward API can convert at all; others are "not supported" before anything else. */
const CONVERTIBLE_FIELD_PATHS = new Set([...ENV_FIELD_PATHS, 'spec.restartPolicy', 'spec.schedulerName', 'status.phase']);

function relaxedEnvNameProblem(name: string): string | undefined {
  if (name === '') return 'environment variable name must be non-empty';
  return /^[\x20-\x3c\x3e-\x7e]+$/.test(name) ? undefined : "a valid environment variable name must consist only of printable ASCII characters other than '='";
}

/** apimachinery's IsConfigMapKey (also a Secret key's rule). */
export function configMapKeyProblems(key: string): string[] {
  const problems: string[] = [];
  if (key.length > 253) problems.push('must be no more than 253 characters');
  if (!/^[-._a-zA-Z0-9]+$/.test(key)) {
    problems.push(
      "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
    );
  }
  if (key === '.') problems.push("must not be '.'");
  else if (key === '..') problems.push("must not be '..'");
  else if (key.startsWith('..')) problems.push("must not start with '..'");
  return problems;
}

/** spec.volumes: names unique DNS labels, exactly one source each, configMap and secret sources well formed. The names, for the mounts. */
export function validateVolumes(volumes: unknown, field: string, causes: StatusCause[]): Set<string> {
  const names = new Set<string>();
  if (volumes === undefined) return names;
  if (!Array.isArray(volumes)) {
    causes.push(invalid(field, volumes, 'must be a list'));
    return names;
  }
  volumes.forEach((volume, i) => {
    const at = `${field}[${i}]`;
    const v = isObject(volume) ? volume : {};
    const name = v.name;
    if (typeof name !== 'string' || !name) causes.push(required(`${at}.name`));
    else {
      const problem = dnsLabelProblem(name);
      if (problem) causes.push(invalid(`${at}.name`, name, problem));
      else if (names.has(name)) causes.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: ${JSON.stringify(name)}`, field: `${at}.name` });
      names.add(name);
    }
    const sources = VOLUME_SOURCES.filter((s) => v[s] !== undefined && v[s] !== null);
    if (sources.length === 0) {
      causes.push(required(at, 'must specify a volume type'));
      return;
    }
    if (sources.length > 1) {
      causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: may not specify more than 1 volume type', field: `${at}.${sources[1]}` });
      return;
    }
    const type = sources[0]!;
    const source = isObject(v[type]) ? (v[type] as Json) : {};
    causes.push(...volumeSourceCauses(type, source, `${at}.${type}`));
  });
  return names;
}

function volumeMountCauses(mounts: unknown, field: string, volumes: ReadonlySet<string>, container: Json): StatusCause[] {
  if (mounts === undefined) return [];
  if (!Array.isArray(mounts)) return [invalid(field, mounts, 'must be a list')];
  const causes: StatusCause[] = [];
  const mountPoints = new Set<string>();
  mounts.forEach((mount, i) => {
    const at = `${field}[${i}]`;
    const m = isObject(mount) ? mount : {};
    const name = typeof m.name === 'string' ? m.name : '';
    if (!name) causes.push(required(`${at}.name`));
    if (!volumes.has(name)) causes.push({ reason: 'FieldValueNotFound', message: `Not found: ${JSON.stringify(name)}`, field: `${at}.name` });
    const mountPath = typeof m.mountPath === 'string' ? m.mountPath : '';
    // `/data` and `/data/` are one mount point: compared as the node will lay them out.
    const normal = mountPath ? path.posix.resolve('/', mountPath) : '';
    if (!mountPath) causes.push(required(`${at}.mountPath`));
    else if (mountPoints.has(normal)) causes.push(invalid(`${at}.mountPath`, mountPath, 'must be unique'));
    mountPoints.add(normal);
    if (typeof m.subPath === 'string' && m.subPath) causes.push(...localDescendingPathCauses(m.subPath, `${field}.subPath`));
    causes.push(...mountPropagationCauses(m, container, `${at}.mountPropagation`));
  });
  return causes;
}

function keySelectorCauses(selector: Json, field: string): StatusCause[] {
  const causes: StatusCause[] = [];
  if (typeof selector.name !== 'string' || !selector.name) causes.push(required(`${field}.name`));
  else {
    const problem = dnsSubdomainProblem(selector.name);
    if (problem) causes.push(invalid(`${field}.name`, selector.name, problem));
  }
  if (typeof selector.key !== 'string' || !selector.key) causes.push(required(`${field}.key`));
  else for (const problem of configMapKeyProblems(selector.key)) causes.push(invalid(`${field}.key`, selector.key, problem));
  return causes;
}

function fieldRefCauses(ref: Json, field: string): StatusCause[] {
  const fieldPath = ref.fieldPath;
  if (typeof fieldPath !== 'string' || !fieldPath) return [required(`${field}.fieldPath`)];
  const subscripted = /^(metadata\.(labels|annotations))\['.*'\]$/.exec(fieldPath);
  if (subscripted) return [];
  if (!CONVERTIBLE_FIELD_PATHS.has(fieldPath) && fieldPath !== 'metadata.labels' && fieldPath !== 'metadata.annotations') {
    return [invalid(`${field}.fieldPath`, fieldPath, `error converting fieldPath: field label not supported: ${fieldPath}`)];
  }
  if (!ENV_FIELD_PATHS.includes(fieldPath)) {
    return [
      {
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(fieldPath)}: supported values: ${ENV_FIELD_PATHS.map((p) => JSON.stringify(p)).join(', ')}`,
        field: `${field}.fieldPath`,
      },
    ];
  }
  return [];
}

function envCauses(env: unknown, field: string): StatusCause[] {
  if (env === undefined) return [];
  if (!Array.isArray(env)) return [invalid(field, env, 'must be a list')];
  return env.flatMap((entry, i) => {
    const at = `${field}[${i}]`;
    const e = isObject(entry) ? entry : {};
    const causes: StatusCause[] = [];
    const name = typeof e.name === 'string' ? e.name : '';
    if (!name) causes.push(required(`${at}.name`));
    const nameProblem = relaxedEnvNameProblem(name);
    if (nameProblem) causes.push(invalid(`${at}.name`, name, nameProblem));
    if (e.valueFrom === undefined || e.valueFrom === null) return causes;
    const from = isObject(e.valueFrom) ? e.valueFrom : {};
    const at2 = `${at}.valueFrom`;
    let sources = 0;
    if (isObject(from.fieldRef)) {
      sources++;
      causes.push(...fieldRefCauses(from.fieldRef, `${at2}.fieldRef`));
    }
    if (isObject(from.resourceFieldRef)) sources++;
    if (isObject(from.configMapKeyRef)) {
      sources++;
      causes.push(...keySelectorCauses(from.configMapKeyRef, `${at2}.configMapKeyRef`));
    }
    if (isObject(from.secretKeyRef)) {
      sources++;
      causes.push(...keySelectorCauses(from.secretKeyRef, `${at2}.secretKeyRef`));
    }
    if (sources === 0) causes.push(invalid(at2, '', 'must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`'));
    else if (typeof e.value === 'string' && e.value !== '') causes.push(invalid(at2, '', 'may not be specified when `value` is not empty'));
    else if (sources > 1) causes.push(invalid(at2, '', 'may not have more than one field specified at a time'));
    return causes;
  });
}

function envFromCauses(envFrom: unknown, field: string): StatusCause[] {
  if (envFrom === undefined) return [];
  if (!Array.isArray(envFrom)) return [invalid(field, envFrom, 'must be a list')];
  return envFrom.flatMap((entry, i) => {
    const at = `${field}[${i}]`;
    const e = isObject(entry) ? entry : {};
    const causes: StatusCause[] = [];
    if (typeof e.prefix === 'string' && e.prefix) {
      const problem = relaxedEnvNameProblem(e.prefix);
      if (problem) causes.push(invalid(`${at}.prefix`, e.prefix, problem));
    }
    let sources = 0;
    for (const kind of ['configMapRef', 'secretRef'] as const) {
      const ref = e[kind];
      if (!isObject(ref)) continue;
      sources++;
      if (typeof ref.name !== 'string' || !ref.name) causes.push(required(`${at}.${kind}.name`));
      else {
        const problem = dnsSubdomainProblem(ref.name);
        if (problem) causes.push(invalid(`${at}.${kind}.name`, ref.name, problem));
      }
    }
    if (sources === 0) causes.push(invalid(field, '', 'must specify one of: `configMapRef` or `secretRef`'));
    else if (sources > 1) causes.push(invalid(field, '', 'may not have more than one field specified at a time'));
    return causes;
  });
}

/** A container's env, envFrom and volumeMounts (`at`: its path, e.g. `spec.containers[0]`). */
export function validateContainerConfig(container: Json, at: string, volumes: ReadonlySet<string>, causes: StatusCause[]): void {
  causes.push(...envCauses(container.env, `${at}.env`));
  causes.push(...envFromCauses(container.envFrom, `${at}.envFrom`));
  causes.push(...volumeMountCauses(container.volumeMounts, `${at}.volumeMounts`, volumes, container));
}
