import type { StatusCause } from '../errors.js';
import { cpuMillis, bytesOf } from '../quantity.js';

/**
 * A pod's securityContext (pod and container level) and its containers' resources, checked at
 * admission: what a runtime could not honour is refused here with a field cause, never left to
 * fail on a node. The rules are Kubernetes' (ids within range, no privilege escalation refused to
 * a privileged container or one given CAP_SYS_ADMIN, requests not above limits), plus capability
 * names checked against the kernel's list (Kubernetes leaves that to the runtime, which then fails
 * the container).
 */

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Linux capability names, without CAP_ (capabilities(7), as of Linux 5.9). */
export const LINUX_CAPABILITIES: readonly string[] = [
  'CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'SETPCAP',
  'LINUX_IMMUTABLE', 'NET_BIND_SERVICE', 'NET_BROADCAST', 'NET_ADMIN', 'NET_RAW', 'IPC_LOCK', 'IPC_OWNER',
  'SYS_MODULE', 'SYS_RAWIO', 'SYS_CHROOT', 'SYS_PTRACE', 'SYS_PACCT', 'SYS_ADMIN', 'SYS_BOOT', 'SYS_NICE',
  'SYS_RESOURCE', 'SYS_TIME', 'SYS_TTY_CONFIG', 'MKNOD', 'LEASE', 'AUDIT_WRITE', 'AUDIT_CONTROL', 'SETFCAP',
  'MAC_OVERRIDE', 'MAC_ADMIN', 'SYSLOG', 'WAKE_ALARM', 'BLOCK_SUSPEND', 'AUDIT_READ', 'PERFMON', 'BPF',
  'CHECKPOINT_RESTORE',
];

const MAX_ID = 2147483647;

function checkId(value: unknown, field: string, causes: StatusCause[]): void {
  if (value === undefined || value === null) return;
  if (!Number.isInteger(value) || (value as number) < 0 || (value as number) > MAX_ID) {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: must be between 0 and ${MAX_ID}, inclusive`, field });
  }
}

function checkBool(value: unknown, field: string, causes: StatusCause[]): void {
  if (value !== undefined && value !== null && typeof value !== 'boolean') {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: must be a boolean`, field });
  }
}

function capabilityList(value: unknown, field: string, allowAll: boolean, causes: StatusCause[]): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of capability names', field });
    return [];
  }
  const names: string[] = [];
  value.forEach((entry, i) => {
    const name = typeof entry === 'string' ? entry.toUpperCase().replace(/^CAP_/, '') : undefined;
    if (name === undefined || !(LINUX_CAPABILITIES.includes(name) || (allowAll && name === 'ALL'))) {
      causes.push({
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(entry)}: not a Linux capability (e.g. "NET_ADMIN"${allowAll ? ' or "ALL"' : ''})`,
        field: `${field}[${i}]`,
      });
    } else {
      names.push(name);
    }
  });
  return names;
}

/**
 * What the pod's and a container's securityContext share: absent is fine, anything but an object
 * is a cause, and runAsUser/runAsGroup are ids. True when `value` is an object to check further.
 */
function checkRunAs(value: unknown, field: string, causes: StatusCause[]): value is Json {
  if (value === undefined || value === null) return false;
  if (!isObject(value)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field });
    return false;
  }
  checkId(value.runAsUser, `${field}.runAsUser`, causes);
  checkId(value.runAsGroup, `${field}.runAsGroup`, causes);
  return true;
}

/** The pod-level securityContext (PodSecurityContext). */
export function validatePodSecurityContext(value: unknown, field: string, causes: StatusCause[]): void {
  if (!checkRunAs(value, field, causes)) return;
  checkId(value.fsGroup, `${field}.fsGroup`, causes);
  checkBool(value.runAsNonRoot, `${field}.runAsNonRoot`, causes);
  if (value.supplementalGroups !== undefined && value.supplementalGroups !== null) {
    if (!Array.isArray(value.supplementalGroups)) causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of group ids', field: `${field}.supplementalGroups` });
    else value.supplementalGroups.forEach((g, i) => checkId(g, `${field}.supplementalGroups[${i}]`, causes));
  }
  if (value.runAsNonRoot === true && value.runAsUser === 0) {
    causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: 0: runAsNonRoot is true, so runAsUser must not be 0', field: `${field}.runAsUser` });
  }
  validateSeccompAndProcMount(value, field, causes);
}

/** seccompProfile RuntimeDefault or Unconfined (no Localhost profiles on nodes); procMount Default only. */
function validateSeccompAndProcMount(value: Json, field: string, causes: StatusCause[]): void {
  const profile = value.seccompProfile;
  if (profile !== undefined && profile !== null) {
    const type = isObject(profile) ? profile.type : undefined;
    if (type !== 'RuntimeDefault' && type !== 'Unconfined') {
      causes.push({
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(type ?? profile)}: supported values: "RuntimeDefault", "Unconfined"`,
        field: `${field}.seccompProfile.type`,
      });
    }
  }
  if (value.procMount !== undefined && value.procMount !== null && value.procMount !== 'Default') {
    causes.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(value.procMount)}: supported values: "Default"`, field: `${field}.procMount` });
  }
}

/** A container's securityContext (SecurityContext). */
export function validateContainerSecurityContext(value: unknown, field: string, causes: StatusCause[]): void {
  if (!checkRunAs(value, field, causes)) return;
  for (const key of ['privileged', 'readOnlyRootFilesystem', 'allowPrivilegeEscalation', 'runAsNonRoot']) checkBool(value[key], `${field}.${key}`, causes);
  let added: string[] = [];
  if (value.capabilities !== undefined && value.capabilities !== null) {
    if (!isObject(value.capabilities)) causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: `${field}.capabilities` });
    else {
      added = capabilityList(value.capabilities.add, `${field}.capabilities.add`, true, causes);
      capabilityList(value.capabilities.drop, `${field}.capabilities.drop`, true, causes);
    }
  }
  if (value.allowPrivilegeEscalation === false && value.privileged === true) {
    causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: false: cannot set `allowPrivilegeEscalation` to false and `privileged` to true', field: `${field}.allowPrivilegeEscalation` });
  }
  if (value.allowPrivilegeEscalation === false && (added.includes('SYS_ADMIN') || added.includes('ALL'))) {
    causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: false: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN', field: `${field}.allowPrivilegeEscalation` });
  }
  if (value.runAsNonRoot === true && value.runAsUser === 0) {
    causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: 0: runAsNonRoot is true, so runAsUser must not be 0', field: `${field}.runAsUser` });
  }
  validateSeccompAndProcMount(value, field, causes);
}

const RESOURCE_NAMES = ['cpu', 'memory'];

/** A container's resources: cpu and memory quantities, requests not above limits. */
export function validateResources(value: unknown, field: string, causes: StatusCause[]): void {
  if (value === undefined || value === null) return;
  if (!isObject(value)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field });
    return;
  }
  const parsed: Record<string, Record<string, number>> = {};
  for (const kind of ['limits', 'requests']) {
    const list = value[kind];
    if (list === undefined || list === null) continue;
    if (!isObject(list)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object of quantities', field: `${field}.${kind}` });
      continue;
    }
    parsed[kind] = {};
    for (const [name, quantity] of Object.entries(list)) {
      const at = `${field}.${kind}[${name}]`;
      const amount = name === 'cpu' ? cpuMillis(quantity) : bytesOf(quantity);
      if (amount === undefined) {
        causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(quantity)}: must be a quantity (e.g. "500m", "64Mi")`, field: at });
      } else if (amount < 0) {
        causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(quantity)}: must be greater than or equal to 0`, field: at });
      } else if (RESOURCE_NAMES.includes(name)) {
        parsed[kind][name] = amount;
      }
    }
  }
  for (const name of RESOURCE_NAMES) {
    const request = parsed.requests?.[name];
    const limit = parsed.limits?.[name];
    if (request !== undefined && limit !== undefined && request > limit) {
      causes.push({
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify((value.requests as Json)[name])}: must be less than or equal to ${name} limit of ${JSON.stringify((value.limits as Json)[name])}`,
        field: `${field}.requests[${name}]`,
      });
    }
  }
}
