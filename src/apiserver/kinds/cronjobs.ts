import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { getPath, type KubeObject } from '../objects.js';
import { formatLabelSelector, labelSelectorFromObject, type LabelSelectorObject } from '../selectors.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { parseSchedule, ScheduleError } from './cron-schedule.js';
import { CONTAINERS_COLUMN, IMAGES_COLUMN, templateContainers } from './daemonsets.js';
import { admitJobTemplate, defaultJobSpec, validateJobSpec } from './jobs.js';
import { validatePodSpec } from './pods.js';

/**
 * batch/v1 CronJob (and batch/v1beta1, the same object, which kubectl 1.20's `create job
 * --from=cronjob/…` reads): defaults, validation (the schedule parsed as the controller parses
 * it) and the printer. The controller is src/controllers/cronjob.ts.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A CronJob's name leaves room for the `-<minutes>` of its Jobs' names (kube's limit). */
const MAX_CRONJOB_NAME = 52;

export function defaultCronJob(obj: KubeObject): void {
  const spec = isObject(obj.spec) ? obj.spec : undefined;
  if (!spec) return;
  spec.concurrencyPolicy ??= 'Allow';
  spec.suspend ??= false;
  spec.successfulJobsHistoryLimit ??= 3;
  spec.failedJobsHistoryLimit ??= 1;
  const jobTemplate = isObject(spec.jobTemplate) ? spec.jobTemplate : undefined;
  if (jobTemplate && isObject(jobTemplate.spec)) {
    // Only the pod template's defaults: kube leaves the JobSpec's own to the Job's creation.
    const jobSpec = jobTemplate.spec;
    const podTemplate = jobSpec.template;
    if (isObject(podTemplate)) defaultJobSpec({ template: podTemplate });
  }
}

function nonNegative(value: unknown, field: string, causes: StatusCause[]): void {
  if (value === undefined) return;
  if (!Number.isInteger(value) || (value as number) < 0) {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: must be greater than or equal to 0`, field });
  }
}

export function validateCronJob(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const name = obj.metadata.name ?? '';
  if (name.length > MAX_CRONJOB_NAME) {
    causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${name}": must be no more than ${MAX_CRONJOB_NAME} characters`, field: 'metadata.name' });
  }
  const spec = obj.spec;
  if (!isObject(spec)) {
    causes.push(spec === undefined ? { reason: 'FieldValueRequired', message: 'Required value', field: 'spec' } : { reason: 'FieldValueInvalid', message: 'must be an object', field: 'spec' });
    return causes;
  }
  if (obj.status !== undefined && !isObject(obj.status)) causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field: 'status' });
  const timeZone = spec.timeZone;
  if (timeZone !== undefined && typeof timeZone !== 'string') {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a string', field: 'spec.timeZone' });
  }
  if (typeof spec.schedule !== 'string' || spec.schedule.trim() === '') {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.schedule' });
  } else {
    try {
      parseSchedule(spec.schedule, typeof timeZone === 'string' ? timeZone : undefined);
    } catch (error) {
      if (!(error instanceof ScheduleError)) throw error;
      const field = /time ?zone/i.test(error.message) && !/TZ or CRON_TZ/.test(error.message) ? 'spec.timeZone' : 'spec.schedule';
      const value = field === 'spec.timeZone' ? timeZone : spec.schedule;
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: ${error.message}`, field });
    }
  }
  const policy = spec.concurrencyPolicy;
  if (policy !== undefined && policy !== 'Allow' && policy !== 'Forbid' && policy !== 'Replace') {
    causes.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(policy)}: supported values: "Allow", "Forbid", "Replace"`,
      field: 'spec.concurrencyPolicy',
    });
  }
  if (spec.suspend !== undefined && typeof spec.suspend !== 'boolean') causes.push({ reason: 'FieldValueInvalid', message: 'must be a boolean', field: 'spec.suspend' });
  nonNegative(spec.startingDeadlineSeconds, 'spec.startingDeadlineSeconds', causes);
  nonNegative(spec.successfulJobsHistoryLimit, 'spec.successfulJobsHistoryLimit', causes);
  nonNegative(spec.failedJobsHistoryLimit, 'spec.failedJobsHistoryLimit', causes);
  const jobTemplate = spec.jobTemplate;
  if (!isObject(jobTemplate) || !isObject(jobTemplate.spec)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.jobTemplate.spec' });
    return causes;
  }
  const jobSpec = jobTemplate.spec;
  if (!isObject(jobSpec.template)) {
    causes.push({ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.jobTemplate.spec.template' });
    return causes;
  }
  causes.push(...validateJobSpec(jobSpec, 'spec.jobTemplate.spec'));
  causes.push(...validatePodSpec(jobSpec.template.spec, 'spec.jobTemplate.spec.template.spec', null));
  return causes;
}

// ---------------------------------------------------------------------------------------------
// Printer

const JOB_TEMPLATE_CONTAINERS = ['spec', 'jobTemplate', 'spec', 'template', 'spec', 'containers'];

export const CRONJOB_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Schedule', 'The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.'),
    column('Timezone', 'The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.'),
    column('Suspend', 'This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.', { type: 'boolean' }),
    column('Active', 'A list of pointers to currently running jobs.', { type: 'integer' }),
    column('Last Schedule', 'Information when was the last time the job was successfully scheduled.'),
    AGE_COLUMN,
    CONTAINERS_COLUMN,
    IMAGES_COLUMN,
    column('Selector', 'A label query over pods that should match the pod count.', { priority: 1 }),
  ],
  cells: (cj, now) => {
    const suspend = getPath(cj, ['spec', 'suspend']);
    const active = getPath(cj, ['status', 'active']);
    const last = getPath(cj, ['status', 'lastScheduleTime']);
    const timeZone = getPath(cj, ['spec', 'timeZone']);
    const selector = getPath(cj, ['spec', 'jobTemplate', 'spec', 'selector']);
    return [
      cj.metadata.name ?? '',
      String(getPath(cj, ['spec', 'schedule']) ?? ''),
      typeof timeZone === 'string' ? timeZone : '<none>',
      typeof suspend === 'boolean' ? (suspend ? 'True' : 'False') : '<unset>',
      Array.isArray(active) ? active.length : 0,
      typeof last === 'string' ? ageOf(last, now) : '<none>',
      ageOf(cj.metadata.creationTimestamp, now),
      templateContainers(cj, JOB_TEMPLATE_CONTAINERS).map((c) => String(c.name ?? '')).join(','),
      templateContainers(cj, JOB_TEMPLATE_CONTAINERS).map((c) => String(c.image ?? '')).join(','),
      formatLabelSelector(labelSelectorFromObject(isObject(selector) ? (selector as LabelSelectorObject) : undefined)) || '<none>',
    ];
  },
};

export const CRONJOB_DEFINITION: ResourceDefinition = {
  group: 'batch',
  version: 'v1',
  kind: 'CronJob',
  admitCreate: (context, obj) => admitJobTemplate(context, obj, 'CronJob', ['spec', 'jobTemplate', 'spec', 'template']),
  plural: 'cronjobs',
  singular: 'cronjob',
  namespaced: true,
  shortNames: ['cj'],
  categories: ['all'],
  subresources: ['status'],
  printer: CRONJOB_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('spec', 'status'),
  storagePath: 'batch/cronjobs',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultCronJob,
  validate: validateCronJob,
  garbageCollected: true,
};

/** The same objects under batch/v1beta1 (its fields are v1's, bar timeZone): for kubectl 1.20. */
const SAME_SHAPE = {
  toStorage: (obj: KubeObject): KubeObject => ({ ...obj, apiVersion: 'batch/v1' }),
  fromStorage: (obj: KubeObject): KubeObject => ({ ...obj, apiVersion: 'batch/v1beta1' }),
};

export const CRONJOB_V1BETA1_DEFINITION: ResourceDefinition = {
  ...CRONJOB_DEFINITION,
  version: 'v1beta1',
  categories: [],
  conversion: SAME_SHAPE,
};
