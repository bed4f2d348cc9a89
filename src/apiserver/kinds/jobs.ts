import { type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { errors, type StatusCause } from '../errors.js';
import { MAX_INT32 } from '../limits.js';
import { getPath, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, humanDuration, NAME_COLUMN, type Printer } from '../table.js';
import { CONTAINERS_COLUMN, IMAGES_COLUMN, templateContainers } from './daemonsets.js';
import { defaultPodSpec, validatePodSpec } from './pods.js';
import { selectorString, validateWorkload } from './workloads.js';

/**
 * batch/v1 Job: defaults (the generated selector and its labels among them), validation and the
 * printer as kube-apiserver has them. The controller is src/controllers/job.ts.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The labels kube puts on a Job's pods (and into its generated selector). */
export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid';
export const JOB_NAME_LABEL = 'batch.kubernetes.io/job-name';
export const LEGACY_CONTROLLER_UID_LABEL = 'controller-uid';
export const LEGACY_JOB_NAME_LABEL = 'job-name';

/**
 * On create, unless `manualSelector`: the selector is the Job's uid, and the template carries the
 * labels it matches (plus the job name), as kube's Job strategy generates them. A Job without
 * labels of its own takes its template's.
 */
export function prepareJobForCreate(obj: KubeObject): void {
  const spec = isObject(obj.spec) ? obj.spec : undefined;
  if (!spec || !isObject(spec.template)) return;
  const template = spec.template;
  const templateMeta = isObject(template.metadata) ? template.metadata : (template.metadata = {});
  const userLabels = isObject(templateMeta.labels) ? { ...(templateMeta.labels as Record<string, string>) } : {};
  if (!obj.metadata.labels || Object.keys(obj.metadata.labels).length === 0) {
    if (Object.keys(userLabels).length) obj.metadata.labels = userLabels;
  }
  if (spec.manualSelector === true) return;
  const uid = obj.metadata.uid!;
  const name = obj.metadata.name ?? '';
  spec.selector = { matchLabels: { [CONTROLLER_UID_LABEL]: uid } };
  templateMeta.labels = {
    ...userLabels,
    [CONTROLLER_UID_LABEL]: uid,
    [JOB_NAME_LABEL]: name,
    [LEGACY_CONTROLLER_UID_LABEL]: uid,
    [LEGACY_JOB_NAME_LABEL]: name,
  };
}

/** kube's Job defaults; a template's restartPolicy is not defaulted (it must be OnFailure or Never). */
export function defaultJobSpec(spec: Json): void {
  if (spec.completions === undefined && spec.parallelism === undefined) spec.completions = 1;
  spec.parallelism ??= 1;
  spec.backoffLimit ??= spec.backoffLimitPerIndex !== undefined ? MAX_INT32 : 6;
  spec.completionMode ??= 'NonIndexed';
  spec.suspend ??= false;
  spec.podReplacementPolicy ??= spec.podFailurePolicy !== undefined ? 'Failed' : 'TerminatingOrFailed';
  if (isObject(spec.podFailurePolicy) && Array.isArray(spec.podFailurePolicy.rules)) {
    for (const rule of spec.podFailurePolicy.rules) {
      if (!isObject(rule) || !Array.isArray(rule.onPodConditions)) continue;
      for (const c of rule.onPodConditions) if (isObject(c)) c.status ??= 'True';
    }
  }
  if (isObject(spec.template) && isObject(spec.template.spec)) {
    const podSpec = spec.template.spec;
    const restartPolicy = podSpec.restartPolicy;
    defaultPodSpec(podSpec);
    if (restartPolicy === undefined) delete podSpec.restartPolicy;
  }
}

function defaultJob(obj: KubeObject): void {
  if (isObject(obj.spec)) defaultJobSpec(obj.spec);
}

function nonNegative(value: unknown, field: string, causes: StatusCause[], positive = false): void {
  if (value === undefined) return;
  if (!Number.isInteger(value) || (value as number) < (positive ? 1 : 0) || (value as number) > MAX_INT32) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(value)}: must be ${positive ? 'greater than 0' : 'greater than or equal to 0'}`,
      field,
    });
  }
}

const POLICY_ACTIONS = ['Count', 'FailIndex', 'FailJob', 'Ignore'];

function validatePodFailurePolicy(policy: unknown, restartPolicy: unknown, prefix: string, causes: StatusCause[]): void {
  if (policy === undefined) return;
  if (!isObject(policy) || !Array.isArray(policy.rules)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: `${prefix}.rules` });
    return;
  }
  if (restartPolicy !== 'Never') {
    causes.push({
      reason: 'FieldValueInvalid',
      message: `Invalid value: ${JSON.stringify(restartPolicy)}: only "Never" is supported when podFailurePolicy is specified`,
      field: `${prefix.replace(/podFailurePolicy$/, '')}template.spec.restartPolicy`,
    });
  }
  policy.rules.forEach((rule: unknown, i: number) => {
    const at = `${prefix}.rules[${i}]`;
    if (!isObject(rule)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: at });
      return;
    }
    if (!POLICY_ACTIONS.includes(rule.action as string)) {
      causes.push({
        reason: 'FieldValueNotSupported',
        message: `Unsupported value: ${JSON.stringify(rule.action)}: supported values: "Count", "FailIndex", "FailJob", "Ignore"`,
        field: `${at}.action`,
      });
    }
    const codes = rule.onExitCodes;
    const conditions = rule.onPodConditions;
    if ((codes === undefined) === (conditions === undefined)) {
      causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: specifying one of OnExitCodes and OnPodConditions is required', field: at });
      return;
    }
    if (codes !== undefined) {
      if (!isObject(codes) || (codes.operator !== 'In' && codes.operator !== 'NotIn')) {
        causes.push({
          reason: 'FieldValueNotSupported',
          message: `Unsupported value: ${JSON.stringify(isObject(codes) ? codes.operator : codes)}: supported values: "In", "NotIn"`,
          field: `${at}.onExitCodes.operator`,
        });
      } else if (!Array.isArray(codes.values) || codes.values.length === 0 || !codes.values.every((v) => Number.isInteger(v))) {
        causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: must be a non-empty list of integers', field: `${at}.onExitCodes.values` });
      } else if (codes.operator === 'In' && codes.values.includes(0)) {
        causes.push({ reason: 'FieldValueInvalid', message: 'Invalid value: 0: must not be 0 for the In operator', field: `${at}.onExitCodes.values` });
      }
    }
    if (conditions !== undefined) {
      if (!Array.isArray(conditions) || !conditions.every((c) => isObject(c) && typeof c.type === 'string' && c.type !== '')) {
        causes.push({ reason: 'FieldValueRequired', message: 'Required value: each condition needs a type', field: `${at}.onPodConditions` });
      }
    }
  });
}

/** A JobSpec's own rules, at `prefix` (`spec`, or a CronJob's `spec.jobTemplate.spec`). */
export function validateJobSpec(spec: Json, prefix: string): StatusCause[] {
  const causes: StatusCause[] = [];
  nonNegative(spec.parallelism, `${prefix}.parallelism`, causes);
  nonNegative(spec.completions, `${prefix}.completions`, causes);
  nonNegative(spec.backoffLimit, `${prefix}.backoffLimit`, causes);
  nonNegative(spec.activeDeadlineSeconds, `${prefix}.activeDeadlineSeconds`, causes, true);
  nonNegative(spec.ttlSecondsAfterFinished, `${prefix}.ttlSecondsAfterFinished`, causes);
  if (spec.completionMode !== undefined && spec.completionMode !== 'NonIndexed' && spec.completionMode !== 'Indexed') {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(spec.completionMode)}: supported values: "NonIndexed", "Indexed"`,
      field: `${prefix}.completionMode`,
    });
  }
  if (spec.completionMode === 'Indexed' && spec.completions === undefined) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value: when completion mode is Indexed', field: `${prefix}.completions` });
  }
  if (spec.suspend !== undefined && typeof spec.suspend !== 'boolean') {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a boolean', field: `${prefix}.suspend` });
  }
  const restartPolicy = getPath({ metadata: {}, spec } as KubeObject, ['spec', 'template', 'spec', 'restartPolicy']);
  if (restartPolicy === undefined) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value: valid values: "OnFailure", "Never"', field: `${prefix}.template.spec.restartPolicy` });
  } else if (restartPolicy !== 'OnFailure' && restartPolicy !== 'Never') {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(restartPolicy)}: supported values: "OnFailure", "Never"`,
      field: `${prefix}.template.spec.restartPolicy`,
    });
  }
  validatePodFailurePolicy(spec.podFailurePolicy, restartPolicy, `${prefix}.podFailurePolicy`, causes);
  return causes;
}

export function validateJob(obj: KubeObject): StatusCause[] {
  const causes = validateWorkload(obj);
  if (isObject(obj.spec)) causes.push(...validateJobSpec(obj.spec, 'spec'));
  return causes;
}

/** What a Job's update may not change: the selector, completions, the completion mode and the pod template. */
export function validateJobUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  for (const field of ['selector', 'completions', 'completionMode', 'template']) {
    const before = JSON.stringify(getPath(current, ['spec', field]) ?? null);
    const after = JSON.stringify(getPath(next, ['spec', field]) ?? null);
    if (before !== after) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${after.slice(0, 200)}: field is immutable`, field: `spec.${field}` });
    }
  }
  return causes;
}

/**
 * The process and runc rules of a template without a class need the cluster's default class,
 * known at admission only: as admitTemplateRuntime, at any template path.
 */
export async function admitJobTemplate(context: KindContext, obj: KubeObject, kind: string, path: readonly string[]): Promise<void> {
  const podSpec = getPath(obj, [...path, 'spec']);
  if (!isObject(podSpec)) return;
  if (typeof podSpec.runtimeClassName === 'string' && podSpec.runtimeClassName !== '') return;
  const prefix = [...path, 'spec'].join('.');
  const causes = validatePodSpec(podSpec, prefix, context.defaultRuntimeClass ?? 'runc').filter(
    (c) => c.field !== undefined && /\.(command|image)$/.test(c.field) && c.reason === 'FieldValueRequired',
  );
  if (causes.length) throw errors.invalid(kind, obj.metadata.name ?? obj.metadata.generateName ?? '', 'batch', causes);
}

// ---------------------------------------------------------------------------------------------
// Printer

function conditionTrue(obj: KubeObject, type: string): boolean {
  const conditions = getPath(obj, ['status', 'conditions']);
  return Array.isArray(conditions) && conditions.some((c) => isObject(c) && c.type === type && c.status === 'True');
}

/** kubectl's STATUS column of a Job (printers.go, 1.32). */
export function jobStatusCell(job: KubeObject): string {
  if (conditionTrue(job, 'Complete')) return 'Complete';
  if (conditionTrue(job, 'Failed')) return 'Failed';
  if (job.metadata.deletionTimestamp) return 'Terminating';
  if (conditionTrue(job, 'SuccessCriteriaMet')) return 'SuccessCriteriaMet';
  if (conditionTrue(job, 'Suspended')) return 'Suspended';
  if (conditionTrue(job, 'FailureTarget')) return 'FailureTarget';
  return 'Running';
}

function num(obj: KubeObject, ...path: string[]): number | undefined {
  const value = getPath(obj, path);
  return typeof value === 'number' ? value : undefined;
}

export function jobCompletionsCell(job: KubeObject): string {
  const succeeded = num(job, 'status', 'succeeded') ?? 0;
  const completions = num(job, 'spec', 'completions');
  if (completions !== undefined) return `${succeeded}/${completions}`;
  const parallelism = num(job, 'spec', 'parallelism') ?? 0;
  return parallelism > 1 ? `${succeeded}/1 of ${parallelism}` : `${succeeded}/1`;
}

export function jobDurationCell(job: KubeObject, now: number): string {
  const start = Date.parse(String(getPath(job, ['status', 'startTime']) ?? ''));
  if (!Number.isFinite(start)) return '';
  const end = Date.parse(String(getPath(job, ['status', 'completionTime']) ?? ''));
  return humanDuration((Number.isFinite(end) ? end : now) - start);
}

export const JOB_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Status', 'Status of the job.'),
    column('Completions', 'The number of pods which reached phase Succeeded.'),
    column('Duration', 'Time required to complete the job.'),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
    column('Selector', 'A label query over pods that should match the pod count.', { priority: 1 }),
  ],
  cells: (job, now) => [
    job.metadata.name ?? '',
    jobStatusCell(job),
    jobCompletionsCell(job),
    jobDurationCell(job, now),
    ageOf(job.metadata.creationTimestamp, now),
    templateContainers(job).map((c) => String(c.name ?? '')).join(','),
    templateContainers(job).map((c) => String(c.image ?? '')).join(','),
    selectorString(job) || '<none>',
  ],
};

export const JOB_DEFINITION: ResourceDefinition = {
  group: 'batch',
  version: 'v1',
  kind: 'Job',
  admitCreate: (context, obj) => admitJobTemplate(context, obj, 'Job', ['spec', 'template']),
  plural: 'jobs',
  singular: 'job',
  namespaced: true,
  shortNames: [],
  categories: ['all'],
  subresources: ['status'],
  printer: JOB_PRINTER,
  fieldLabels: { 'status.successful': (job) => String(num(job, 'status', 'succeeded') ?? 0) },
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'batch/jobs',
  nameRule: 'dns-subdomain',
  prepareForCreate: prepareJobForCreate,
  applyDefaults: defaultJob,
  validate: validateJob,
  validateUpdate: (next, current, subresource) => (subresource ? [] : validateJobUpdate(next, current)),
  garbageCollected: true,
};
