import { type KindContext, type LogQuery, type PodLogParams, type ResourceDefinition, standardFields } from '../definition.js';
import { errors, type StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import { MAX_INT32 } from '../limits.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import type { WriteOptions } from '../storage-types.js';
import { defaultPullPolicy } from '../../images/registry/reference.js';
import { spendDisruption } from './disruption-budgets.js';
import { validateContainerConfig, validateVolumes } from './pod-config-validation.js';
import { validateContainerSecurityContext, validatePodSecurityContext, validateResources } from './pod-security-validation.js';
import { defaultProbes, validateProbes } from './probe-validation.js';
import { POD_PRINTER } from './pod-printer.js';
import { admitPodRuntimeClass, keepPodRuntimeClass, validatePodRuntimeClassUpdate } from './runtime-classes.js';
import { validateEphemeralContainers, validateEphemeralContainersOnCreate, validateEphemeralContainersUpdate } from './ephemeral-containers.js';
import { admitPodServiceAccount, keepPodServiceAccount } from './pod-service-accounts.js';

/**
 * Pods: defaults, validation, the rules of updates and graceful deletion, and the two pod-only
 * subresources: eviction (which spends the pod's disruption budget) and log (whose query is
 * checked here; the server streams it). Its printer is in pod-printer.ts.
 */

export const COMMAND_REQUIRED_MESSAGE =
  'Required value: the process runtime runs each container as a local process and does not use its image; set command (or args, which then run as the command), or run the pod under runc (runtimeClassName: runc)';

/**
 * The runtime class a pod without runtimeClassName gets when validation is not told the
 * cluster's `default-runtime-class`: process, so a command is required unless a pod asks for runc.
 */
export const VALIDATION_DEFAULT_RUNTIME_CLASS = 'process';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// ---------------------------------------------------------------------------------------------
// Defaults and validation (shared with the pod templates of workloads)

function defaultContainers(containers: unknown): void {
  if (!Array.isArray(containers)) return;
  for (const c of containers) {
    if (!isObject(c)) continue;
    c.terminationMessagePolicy ??= 'File';
    if (typeof c.image === 'string' && c.image) c.imagePullPolicy ??= defaultPullPolicy(c.image);
    defaultProbes(c);
  }
}

/** What kube-apiserver's defaulting fills in a PodSpec, as far as Drover acts on it. */
export function defaultPodSpec(spec: unknown): void {
  if (!isObject(spec)) return;
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.schedulerName ??= 'default-scheduler';
  defaultContainers(spec.containers);
  defaultContainers(spec.initContainers);
  defaultContainers(spec.ephemeralContainers);
}

function validateContainers(
  list: unknown,
  field: string,
  required: boolean,
  causes: StatusCause[],
  seen: Set<string>,
  volumes: ReadonlySet<string>,
  /** true: process runtime; false: runc; undefined: not known yet (a template: admission checks it). */
  commandRequired: boolean | undefined,
): void {
  if (list === undefined && !required) return;
  if (!Array.isArray(list) || (required && list.length === 0)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field });
    return;
  }
  list.forEach((c, i) => {
    const at = `${field}[${i}]`;
    if (!isObject(c)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: at });
      return;
    }
    if (typeof c.name !== 'string' || !c.name) {
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.name` });
    } else if (seen.has(c.name)) {
      causes.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: "${c.name}"`, field: `${at}.name` });
    } else {
      seen.add(c.name);
    }
    if (c.image !== undefined && typeof c.image !== 'string') {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a string', field: `${at}.image` });
    } else if (commandRequired === false && !c.image) {
      // A container runtime makes the root file system from the image: there is no container without one.
      causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${at}.image` });
    }
    const command = c.command;
    // Process runtime: with no command, args run as the command (there is no image entrypoint to
    // give them to; this is what `kubectl run NAME --image=busybox -- sh -c ...` means on a busybox
    // image). runc: the image's Entrypoint and Cmd fill in what is missing (the agent says so if
    // the image has neither).
    const absent = command === undefined || command === null || (Array.isArray(command) && command.length === 0);
    const argsOnly = absent && Array.isArray(c.args) && c.args.length > 0;
    if (argsOnly || (absent && commandRequired !== true)) {
      // fine: checked as args below
    } else if (!Array.isArray(command) || command.length === 0) {
      causes.push({ reason: 'FieldValueRequired', message: COMMAND_REQUIRED_MESSAGE, field: `${at}.command` });
    } else if (!command.every((part) => typeof part === 'string')) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: `${at}.command` });
    }
    if (c.args !== undefined && (!Array.isArray(c.args) || !c.args.every((part) => typeof part === 'string'))) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be a list of strings', field: `${at}.args` });
    }
    validateContainerConfig(c, at, volumes, causes);
    validateContainerSecurityContext(c.securityContext, `${at}.securityContext`, causes);
    validateResources(c.resources, `${at}.resources`, causes);
    validateProbes(c, at, causes, !required);
  });
}

/**
 * A PodSpec's rules; `prefix` names where it sits (`spec`, `spec.template.spec`).
 * `defaultRuntimeClass` is the cluster's, for a pod that names none: under the process runtime
 * every container needs a command, under runc an image; null when it is not known here (a
 * template: admitTemplateRuntime checks those two rules).
 */
export function validatePodSpec(spec: unknown, prefix: string, defaultRuntimeClass: string | null = VALIDATION_DEFAULT_RUNTIME_CLASS): StatusCause[] {
  const causes: StatusCause[] = [];
  if (spec === undefined) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${prefix}.containers` });
    return causes;
  }
  if (!isObject(spec)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: prefix });
    return causes;
  }
  const seen = new Set<string>();
  const volumes = validateVolumes(spec.volumes, `${prefix}.volumes`, causes);
  const runtimeClass = typeof spec.runtimeClassName === 'string' && spec.runtimeClassName ? spec.runtimeClassName : defaultRuntimeClass;
  const commandRequired = runtimeClass === null ? undefined : runtimeClass === 'process';
  validateContainers(spec.containers, `${prefix}.containers`, true, causes, seen, volumes, commandRequired);
  validateContainers(spec.initContainers, `${prefix}.initContainers`, false, causes, seen, volumes, commandRequired);
  validatePodSecurityContext(spec.securityContext, `${prefix}.securityContext`, causes);
  const grace = spec.terminationGracePeriodSeconds;
  if (grace !== undefined && (!Number.isInteger(grace) || (grace as number) < 0)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'must be greater than or equal to 0',
      field: `${prefix}.terminationGracePeriodSeconds`,
    });
  } else if (typeof grace === 'number' && grace > MAX_INT32) {
    // Bounded as kube-apiserver bounds activeDeadlineSeconds: far beyond any real grace period,
    // and a deletion timestamp that far ahead would not be a valid date.
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${grace}: must be less than or equal to ${MAX_INT32}`,
      field: `${prefix}.terminationGracePeriodSeconds`,
    });
  }
  const restartPolicy = spec.restartPolicy;
  if (restartPolicy !== undefined && !['Always', 'OnFailure', 'Never'].includes(restartPolicy as string)) {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(restartPolicy)}: supported values: "Always", "OnFailure", "Never"`,
      field: `${prefix}.restartPolicy`,
    });
  }
  return causes;
}

/**
 * A pod template's command and image rules, which depend on the cluster's default-runtime-class
 * when the template names no class: checked at admission, where the setting is known (the
 * store's validation of a template leaves them out). Throws the 422 a pod would get.
 */
export async function admitTemplateRuntime(context: KindContext, obj: KubeObject, kind: string): Promise<void> {
  const template = isObject(obj.spec) && isObject(obj.spec.template) ? obj.spec.template : undefined;
  if (!template || !isObject(template.spec)) return; // validation says what is wrong
  const named = typeof template.spec.runtimeClassName === 'string' && template.spec.runtimeClassName !== '';
  if (named) return;
  const causes = validatePodSpec(template.spec, 'spec.template.spec', context.defaultRuntimeClass ?? 'runc').filter(
    (c) => c.field !== undefined && /\.(command|image)$/.test(c.field) && c.reason === 'FieldValueRequired',
  );
  if (causes.length) throw errors.invalid(kind, obj.metadata.name ?? obj.metadata.generateName ?? '', 'apps', causes);
}

export function validatePod(pod: KubeObject): StatusCause[] {
  return [...validatePodSpec(pod.spec, 'spec'), ...validateEphemeralContainers(pod.spec)];
}

/** Admission of a new pod: no ephemeral containers yet (kube's wording), then its ServiceAccount, then its runtime class. */
async function admitPodCreate(context: KindContext, pod: KubeObject, namespace?: string): Promise<void> {
  const causes = validateEphemeralContainersOnCreate(pod);
  if (causes.length) throw errors.invalid('Pod', pod.metadata.name ?? pod.metadata.generateName ?? '', '', causes);
  // Kubernetes' order: ServiceAccount admission, then RuntimeClass.
  await admitPodServiceAccount(context, pod, namespace);
  await admitPodRuntimeClass(context, pod);
}

/**
 * What an update may not do to a pod: move it to another node once bound (the scheduler binds
 * it once), or change its spec once it is being deleted (its agent is already stopping it).
 */
export function validatePodUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const before = getString(current, ['spec', 'nodeName']);
  const after = getString(next, ['spec', 'nodeName']);
  if (before && after !== before) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(after)}: field is immutable`,
      field: 'spec.nodeName',
    });
  }
  if (current.metadata.deletionTimestamp && !jsonEqual(next.spec, current.spec)) {
    causes.push({
      reason: 'FieldValueForbidden',
      message: 'Forbidden: the pod is being deleted; only its metadata and status may change',
      field: 'spec',
    });
  }
  return causes;
}

/**
 * The grace period a pod's deletion gets, in seconds (0: remove it now), as kube-apiserver's pod
 * strategy decides: the caller's, else the pod's own; but at once when no node runs it (unbound)
 * or nothing runs any more (Succeeded, Failed).
 */
export function podDeletionGracePeriod(pod: KubeObject, requested: number | undefined): number {
  const own = getPath(pod, ['spec', 'terminationGracePeriodSeconds']);
  let period = requested ?? (typeof own === 'number' ? own : 30);
  if (!getString(pod, ['spec', 'nodeName'])) period = 0;
  const phase = getString(pod, ['status', 'phase']);
  if (phase === 'Succeeded' || phase === 'Failed') period = 0;
  // A negative grace from a client means "as soon as possible", not "never".
  if (period < 0) period = 1;
  return period;
}


// ---------------------------------------------------------------------------------------------
// pods/log: the query's checks (the server's podLogs hook then streams from the pod's agent)

function logInteger(query: LogQuery, name: 'tailLines' | 'limitBytes', min: number): number | undefined {
  const text = query[name];
  if (text === undefined || text === '') return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min) {
    throw errors.badRequest(`${name} must be an integer of at least ${min} (got "${text}")`);
  }
  return value;
}

function containerNames(pod: KubeObject, field: string): string[] {
  const list = isJsonObject(pod.spec) ? pod.spec[field] : undefined;
  return Array.isArray(list) ? list.filter(isJsonObject).map((c) => String(c.name)) : [];
}

function parseLogQuery(query: LogQuery): PodLogParams {
  const tailLines = logInteger(query, 'tailLines', 0);
  const limitBytes = logInteger(query, 'limitBytes', 1);
  return {
    ...(query.container ? { container: query.container } : {}),
    follow: query.follow === true,
    previous: query.previous === true,
    ...(tailLines !== undefined ? { tailLines } : {}),
    ...(limitBytes !== undefined ? { limitBytes } : {}),
  };
}

/** The container a log request means: the named one (a container or an init container), or the only one. */
function resolveLogContainer(pod: KubeObject, params: PodLogParams): PodLogParams {
  const name = pod.metadata.name;
  const containers = containerNames(pod, 'containers');
  const initContainers = containerNames(pod, 'initContainers');
  const ephemeral = containerNames(pod, 'ephemeralContainers');
  const container = params.container;
  if (container === undefined) {
    if (containers.length !== 1) {
      const init = initContainers.length ? ` or one of the init containers: [${initContainers.join(' ')}]` : '';
      throw errors.badRequest(`a container name must be specified for pod ${name}, choose one of: [${containers.join(' ')}]${init}`);
    }
    return { ...params, container: containers[0]! };
  }
  if (!containers.includes(container) && !initContainers.includes(container) && !ephemeral.includes(container)) {
    throw errors.badRequest(`container ${container} is not valid for pod ${name}`);
  }
  return params;
}

// ---------------------------------------------------------------------------------------------
// pods/eviction

/**
 * Before an eviction deletes a pod: a running pod selected by a PodDisruptionBudget may go only
 * if the budget allows it, and the eviction spends it. Finished, never-started and already
 * terminating pods cost the budget nothing.
 */
async function beforeEviction(context: KindContext, pod: KubeObject, options: WriteOptions): Promise<void> {
  const phase = isJsonObject(pod.status) ? pod.status.phase : undefined;
  if (pod.metadata.deletionTimestamp || phase === 'Succeeded' || phase === 'Failed' || phase === 'Pending') return;
  await spendDisruption(context, pod, options);
}

// ---------------------------------------------------------------------------------------------
// The definition

export const POD_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: 'Pod',
  plural: 'pods',
  singular: 'pod',
  namespaced: true,
  shortNames: ['po'],
  categories: ['all'],
  subresources: ['status', 'eviction', 'log', 'exec', 'attach', 'portforward', 'ephemeralcontainers'],
  printer: POD_PRINTER,
  fieldLabels: {
    'spec.nodeName': (p) => getString(p, ['spec', 'nodeName']),
    'spec.restartPolicy': (p) => getString(p, ['spec', 'restartPolicy']),
    'spec.schedulerName': (p) => getString(p, ['spec', 'schedulerName']),
    'spec.serviceAccountName': (p) => getString(p, ['spec', 'serviceAccountName']),
    'status.phase': (p) => getString(p, ['status', 'phase']),
    'status.podIP': (p) => getString(p, ['status', 'podIP']),
    'status.nominatedNodeName': (p) => getString(p, ['status', 'nominatedNodeName']),
  },
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'core/pods',
  nameRule: 'dns-subdomain',
  prepareForCreate: (pod) => {
    // Status is the node's to report; a client cannot create a pod that claims to be running.
    pod.status = { phase: 'Pending' };
  },
  prepareForUpdate: (next, current) => {
    keepPodRuntimeClass(next, current);
    keepPodServiceAccount(next, current);
  },
  applyDefaults: (pod) => defaultPodSpec(pod.spec),
  validate: validatePod,
  validateUpdate: (next, current, subresource) => [
    ...validatePodUpdate(next, current),
    ...validatePodRuntimeClassUpdate(next, current),
    ...validateEphemeralContainersUpdate(next, current, subresource === 'ephemeralcontainers'),
  ],
  admitCreate: admitPodCreate,
  deletionGracePeriod: podDeletionGracePeriod,
  garbageCollected: true,
  returnsDeletedObject: true,
  eviction: { beforeEviction },
  log: { parse: parseLogQuery, resolve: resolveLogContainer },
};
