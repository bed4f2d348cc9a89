import {
  BUILT_IN_RUNTIME_CLASSES,
  effectiveRuntimeClass,
  RUNC_HANDLER,
  RUNTIME_CLASS_GROUP,
  type RuntimeClassView,
} from '../../node-protocol/runtime-classes.js';
import { parseQuantity, QuantityError } from '../../node-protocol/quantity.js';
import type { Toleration } from '../../node-protocol/taints.js';
import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { ApiError, errors, type StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import { getString, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { dnsLabelProblem, dnsSubdomainProblem, labelValueProblem, qualifiedNameProblem } from '../validation.js';

/**
 * node.k8s.io/v1 RuntimeClass, cluster-scoped: which runtime handler a pod runs under (`runc`:
 * containers, `process`: local processes), the overhead its pods are charged, and where they may
 * be scheduled. Validated as kube-apiserver validates it; `handler` is immutable; the built-in
 * classes (`runc`, `process`, created at every server start) cannot be deleted.
 *
 * Also the pods' side, as Kubernetes' RuntimeClass admission plug-in does it, for every pod
 * created (by any caller): the class must exist; a pod without one gets the cluster's
 * `default-runtime-class` written into `spec.runtimeClassName`; it gets the class's overhead and
 * its scheduling constraints (nodeSelector merged, tolerations added).
 */

type Json = Record<string, unknown>;

/** The `default-runtime-class` setting's default (src/config/schema.ts), for contexts that do not say. */
export const DEFAULT_RUNTIME_CLASS = RUNC_HANDLER;

/** Resources a RuntimeClass may charge as overhead (kube's podFixed accepts these standard ones). */
const OVERHEAD_RESOURCES = ['cpu', 'memory', 'ephemeral-storage'];
const TOLERATION_OPERATORS = ['Equal', 'Exists'];
const TAINT_EFFECTS = ['NoExecute', 'NoSchedule', 'PreferNoSchedule'];

const invalid = (field: string, value: unknown, detail: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  message: `Invalid value: ${JSON.stringify(value)}: ${detail}`,
  field,
});
const unsupported = (field: string, value: unknown, supported: readonly string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => `"${s}"`).join(', ')}`,
  field,
});

// ---------------------------------------------------------------------------------------------
// Validation of the kind

/** A ResourceList (`{cpu: "250m", memory: "64Mi"}`): known names, non-negative quantities. */
export function validateResourceList(list: unknown, field: string, names: readonly string[], causes: StatusCause[]): void {
  if (list === undefined || list === null) return;
  if (!isJsonObject(list)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field });
    return;
  }
  for (const [name, value] of Object.entries(list)) {
    const at = `${field}[${name}]`;
    if (!names.includes(name)) {
      causes.push(unsupported(at, name, names));
      continue;
    }
    try {
      if (typeof value !== 'string' && typeof value !== 'number') throw new QuantityError('quantities must be strings');
      const amount = typeof value === 'number' ? value : parseQuantity(value);
      if (amount < 0) causes.push(invalid(at, value, 'must be greater than or equal to 0'));
    } catch (error) {
      if (!(error instanceof QuantityError)) throw error;
      causes.push(invalid(at, value, error.message));
    }
  }
}

/** A nodeSelector: label keys and values. */
export function validateNodeSelector(selector: unknown, field: string, causes: StatusCause[]): void {
  if (selector === undefined || selector === null) return;
  if (!isJsonObject(selector) || !Object.values(selector).every((v) => typeof v === 'string')) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a map of string to string', field });
    return;
  }
  for (const [key, value] of Object.entries(selector as Record<string, string>)) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem) causes.push(invalid(field, key, keyProblem));
    const valueProblem = labelValueProblem(value);
    if (valueProblem) causes.push(invalid(`${field}[${key}]`, value, valueProblem));
  }
}

/** Tolerations as kube validates them (operator, effect, value with Exists, tolerationSeconds). */
export function validateTolerations(list: unknown, field: string, causes: StatusCause[]): void {
  if (list === undefined || list === null) return;
  if (!Array.isArray(list)) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a list', field });
    return;
  }
  list.forEach((entry: unknown, i) => {
    const at = `${field}[${i}]`;
    if (!isJsonObject(entry)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: at });
      return;
    }
    const t = entry as Json;
    const key = typeof t.key === 'string' ? t.key : '';
    if (key) {
      const problem = qualifiedNameProblem(key);
      if (problem) causes.push(invalid(`${at}.key`, key, problem));
    }
    const operator = t.operator ?? 'Equal';
    if (!key && operator !== 'Exists') {
      causes.push(invalid(`${at}.operator`, operator, 'operator must be Exists when `key` is empty, which means "match all values and all keys"'));
    }
    if (!TOLERATION_OPERATORS.includes(operator as string)) causes.push(unsupported(`${at}.operator`, operator, TOLERATION_OPERATORS));
    if (operator === 'Exists' && typeof t.value === 'string' && t.value) {
      causes.push(invalid(`${at}.operator`, t.value, "value must be empty when `operator` is 'Exists'"));
    }
    if (t.effect !== undefined && t.effect !== '' && !TAINT_EFFECTS.includes(t.effect as string)) {
      causes.push(unsupported(`${at}.effect`, t.effect, TAINT_EFFECTS));
    }
    if (t.tolerationSeconds !== undefined && t.tolerationSeconds !== null && t.effect !== 'NoExecute') {
      causes.push(invalid(`${at}.effect`, t.effect ?? '', "effect must be 'NoExecute' when `tolerationSeconds` is set"));
    }
  });
}

export function validateRuntimeClass(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const handler = obj.handler;
  if (handler === undefined || handler === '') {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'handler' });
  } else if (typeof handler !== 'string') {
    causes.push(invalid('handler', handler, 'must be a string'));
  } else {
    const problem = dnsLabelProblem(handler);
    if (problem) causes.push(invalid('handler', handler, problem));
  }
  const overhead = obj.overhead;
  if (overhead !== undefined && overhead !== null) {
    if (!isJsonObject(overhead)) causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'overhead' });
    else validateResourceList(overhead.podFixed, 'overhead.podFixed', OVERHEAD_RESOURCES, causes);
  }
  const scheduling = obj.scheduling;
  if (scheduling !== undefined && scheduling !== null) {
    if (!isJsonObject(scheduling)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'scheduling' });
    } else {
      validateNodeSelector(scheduling.nodeSelector, 'scheduling.nodeSelector', causes);
      validateTolerations(scheduling.tolerations, 'scheduling.tolerations', causes);
    }
  }
  return causes;
}

function validateRuntimeClassUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  if (next.handler === current.handler) return [];
  return [invalid('handler', next.handler, 'field is immutable')];
}

const RUNTIME_CLASS_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Handler', 'Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.'), AGE_COLUMN],
  cells: (obj, now) => [obj.metadata.name ?? '', getString(obj, ['handler']), ageOf(obj.metadata.creationTimestamp, now)],
};

// ---------------------------------------------------------------------------------------------
// Pods: admission (create) and the update rule

/**
 * kube's RuntimeClass admission refuses with 403 Forbidden (`pod rejected: …`); Drover adds a
 * field cause, so a client can tell which field to change.
 */
function podRejected(pod: KubeObject, why: string, cause: StatusCause): ApiError {
  const name = pod.metadata.name ?? pod.metadata.generateName ?? '';
  return new ApiError(403, 'Forbidden', `pods "${name}" is forbidden: pod rejected: ${why}`, {
    name,
    group: '',
    kind: 'pods',
    causes: [cause],
  });
}

/**
 * What Kubernetes' RuntimeClass admission does to a pod being created, plus Drover's default:
 * a pod without `runtimeClassName` gets `defaultClass` (the `default-runtime-class` setting);
 * the class must exist (403 otherwise); its `overhead.podFixed` becomes the pod's
 * `spec.overhead` (a pod that sets another overhead is refused); its `scheduling.nodeSelector` is
 * merged into the pod's (a conflicting key is refused) and its tolerations are added.
 */
export async function admitPodRuntimeClass(context: KindContext, pod: KubeObject): Promise<void> {
  if (!isJsonObject(pod.spec)) return; // validation refuses it with its own message
  const spec = pod.spec as Json;
  const defaultClass = context.defaultRuntimeClass ?? DEFAULT_RUNTIME_CLASS;
  const named = typeof spec.runtimeClassName === 'string' && spec.runtimeClassName !== '';
  if (spec.runtimeClassName !== undefined && spec.runtimeClassName !== null && spec.runtimeClassName !== '') {
    const problem = typeof spec.runtimeClassName === 'string' ? dnsSubdomainProblem(spec.runtimeClassName) : 'must be a string';
    if (problem) {
      throw errors.invalid('Pod', pod.metadata.name ?? pod.metadata.generateName ?? '', '', [
        invalid('spec.runtimeClassName', spec.runtimeClassName, problem),
      ]);
    }
  }
  const className = named ? (spec.runtimeClassName as string) : defaultClass;
  const classDef = context.kinds.lookup(RUNTIME_CLASS_GROUP, 'v1', 'runtimeclasses');
  let stored: RuntimeClassView | undefined;
  if (classDef) {
    try {
      stored = (await context.store.get(classDef, undefined, className)) as unknown as RuntimeClassView;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 404)) throw error;
    }
  }
  const runtimeClass = effectiveRuntimeClass(className, stored);
  if (!runtimeClass) {
    const why = named
      ? `RuntimeClass "${className}" not found`
      : `RuntimeClass "${className}" not found (the cluster's default-runtime-class, used because the pod names none)`;
    throw podRejected(pod, why, { reason: 'FieldValueNotFound', message: `Not found: "${className}"`, field: 'spec.runtimeClassName' });
  }
  spec.runtimeClassName = className;

  const podFixed = runtimeClass.overhead?.podFixed;
  const hasOverhead = isJsonObject(podFixed) && Object.keys(podFixed).length > 0;
  if (spec.overhead !== undefined && spec.overhead !== null) {
    if (!hasOverhead) {
      throw podRejected(pod, `Pod Overhead set without corresponding RuntimeClass defined Overhead (RuntimeClass "${className}" defines none)`, {
        reason: 'FieldValueForbidden',
        message: 'Forbidden: set by the RuntimeClass, not by the pod',
        field: 'spec.overhead',
      });
    }
    if (!jsonEqual(spec.overhead, podFixed)) {
      throw podRejected(pod, `Pod's Overhead doesn't match RuntimeClass's defined Overhead (RuntimeClass "${className}")`, {
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(spec.overhead)}: must be the RuntimeClass's overhead ${JSON.stringify(podFixed)}`,
        field: 'spec.overhead',
      });
    }
  }
  if (hasOverhead) spec.overhead = { ...(podFixed as Json) };

  const scheduling = runtimeClass.scheduling;
  const classSelector = scheduling?.nodeSelector;
  if (isJsonObject(classSelector) && Object.keys(classSelector).length) {
    const podSelector = isJsonObject(spec.nodeSelector) ? (spec.nodeSelector as Record<string, string>) : {};
    for (const [key, value] of Object.entries(classSelector as Record<string, string>)) {
      if (key in podSelector && podSelector[key] !== value) {
        throw podRejected(pod, `conflict: runtimeClass.scheduling.nodeSelector[${key}] = ${value}; pod.spec.nodeSelector[${key}] = ${podSelector[key]}`, {
          reason: 'FieldValueInvalid',
          message: `Invalid value: ${JSON.stringify(podSelector[key])}: RuntimeClass "${className}" needs ${JSON.stringify(value)}`,
          field: `spec.nodeSelector[${key}]`,
        });
      }
    }
    spec.nodeSelector = { ...podSelector, ...(classSelector as Record<string, string>) };
  }
  const classTolerations = scheduling?.tolerations;
  if (Array.isArray(classTolerations) && classTolerations.length) {
    const podTolerations: Toleration[] = Array.isArray(spec.tolerations) ? (spec.tolerations as Toleration[]) : [];
    const added = classTolerations.filter((t) => !podTolerations.some((p) => jsonEqual(p, t)));
    spec.tolerations = [...podTolerations, ...added];
  }
}

/**
 * An update that leaves out the class and overhead admission wrote at creation keeps them (a PUT
 * of the manifest as first written is not a change of class).
 */
export function keepPodRuntimeClass(next: KubeObject, current: KubeObject): void {
  if (!isJsonObject(next.spec) || !isJsonObject(current.spec)) return;
  const spec = next.spec as Json;
  if (spec.runtimeClassName === undefined && current.spec.runtimeClassName !== undefined) spec.runtimeClassName = current.spec.runtimeClassName;
  if (spec.overhead === undefined && current.spec.overhead !== undefined) spec.overhead = current.spec.overhead;
}

/** A pod's class and the overhead it was charged are fixed at creation, as in Kubernetes. */
export function validatePodRuntimeClassUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const nextSpec = isJsonObject(next.spec) ? next.spec : {};
  const currentSpec = isJsonObject(current.spec) ? current.spec : {};
  if ((nextSpec.runtimeClassName ?? '') !== (currentSpec.runtimeClassName ?? '')) {
    causes.push(invalid('spec.runtimeClassName', nextSpec.runtimeClassName ?? '', 'field is immutable'));
  }
  if (!jsonEqual(nextSpec.overhead ?? null, currentSpec.overhead ?? null)) {
    causes.push(invalid('spec.overhead', nextSpec.overhead ?? null, 'field is immutable'));
  }
  return causes;
}

// ---------------------------------------------------------------------------------------------
// The definition

export const RUNTIME_CLASS_DEFINITION: ResourceDefinition = {
  group: RUNTIME_CLASS_GROUP,
  version: 'v1',
  kind: 'RuntimeClass',
  plural: 'runtimeclasses',
  singular: 'runtimeclass',
  namespaced: false,
  shortNames: [],
  categories: [],
  subresources: [],
  printer: RUNTIME_CLASS_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('handler', 'overhead', 'scheduling'),
  storagePath: 'node.k8s.io/runtimeclasses',
  nameRule: 'dns-subdomain',
  validate: validateRuntimeClass,
  validateUpdate: validateRuntimeClassUpdate,
  undeletable: new Set(BUILT_IN_RUNTIME_CLASSES),
};
