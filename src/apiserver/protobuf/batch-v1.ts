/**
 * batch/v1 kinds (k8s.io/api/batch/v1/generated.proto): Job, which `kubectl create job` (and
 * `create job --from=cronjob/…`) sends as protobuf in kubectl 1.32.
 */

import { decodePodTemplateSpec } from './core-v1.js';
import { inOrder, type Json, refuseUndecoded } from './go-json.js';
import { decodeLabelSelector, decodeObjectMeta } from './meta.js';
import { bool, embedded, type Field, int32, int64, parseMessage, str } from './reader.js';

/** Repeated int32, packed (one length-delimited field) or not (one varint per value). */
function int32s(f: Field, message: string): number[] {
  if (typeof f.value === 'bigint') return [int32(f, message)];
  const out: number[] = [];
  const bytes = f.value;
  let pos = 0;
  while (pos < bytes.length) {
    let value = 0n;
    let shift = 0n;
    for (;;) {
      const byte = bytes[pos++];
      if (byte === undefined) return out;
      value |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if ((byte & 0x80) === 0) break;
    }
    out.push(int32({ field: f.field, wire: 0, value }, message));
  }
  return out;
}

/** PodFailurePolicy {1 rules: {1 action, 2 onExitCodes {1 containerName, 2 operator, 3 values}, 3 onPodConditions {1 type, 2 status}}}. */
function decodePodFailurePolicy(buf: Uint8Array): Json {
  const rules: Json[] = [];
  for (const r of parseMessage(buf, 'PodFailurePolicy')) {
    if (r.field !== 1 || typeof r.value === 'bigint') continue;
    const m = 'PodFailurePolicyRule';
    const rule: Json = {};
    const conditions: Json[] = [];
    for (const f of parseMessage(r.value, m)) {
      if (f.field === 1) rule.action = str(f, m);
      else if (f.field === 2 && typeof f.value !== 'bigint') {
        const e = 'PodFailurePolicyOnExitCodesRequirement';
        const codes: Json = {};
        const values: number[] = [];
        for (const c of parseMessage(f.value, e)) {
          if (c.field === 1 && str(c, e)) codes.containerName = str(c, e);
          else if (c.field === 2) codes.operator = str(c, e);
          else if (c.field === 3) values.push(...int32s(c, e));
        }
        codes.values = values;
        rule.onExitCodes = inOrder(codes, ['containerName', 'operator', 'values']);
      } else if (f.field === 3 && typeof f.value !== 'bigint') {
        const p = 'PodFailurePolicyOnPodConditionsPattern';
        const pattern: Json = {};
        for (const c of parseMessage(f.value, p)) {
          if (c.field === 1) pattern.type = str(c, p);
          else if (c.field === 2) pattern.status = str(c, p);
        }
        conditions.push(pattern);
      }
    }
    if (conditions.length) rule.onPodConditions = conditions;
    rules.push(inOrder(rule, ['action', 'onExitCodes', 'onPodConditions']));
  }
  return { rules };
}

/**
 * batch/v1 Job {1 metadata, 2 spec, 3 status (ignored: the controller's)}. JobSpec {1 parallelism,
 * 2 completions, 3 activeDeadlineSeconds, 4 selector, 5 manualSelector, 6 template, 7 backoffLimit,
 * 8 ttlSecondsAfterFinished, 9 completionMode, 10 suspend, 11 podFailurePolicy,
 * 12 backoffLimitPerIndex, 13 maxFailedIndexes, 14 podReplacementPolicy, 15 managedBy,
 * 16 successPolicy}: all pointers, so an explicit zero or false is kept.
 */
export function decodeJob(raw: Uint8Array): Json {
  const kind = 'Job';
  const fields = parseMessage(raw, kind);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));
  const spec = decodeJobSpec(embedded(fields, 2, kind), kind, 'spec');
  return { apiVersion: 'batch/v1', kind, metadata, spec };
}

/** A JobSpec (a Job's, or a CronJob's jobTemplate's), `path` naming where it sits. */
function decodeJobSpec(buf: Uint8Array | undefined, kind: string, path: string): Json {
  const m = 'JobSpec';
  const specFields = parseMessage(buf ?? new Uint8Array(0), m);
  const ctx = { kind, path };
  const v: Json = {};
  for (const f of specFields) {
    switch (f.field) {
      case 1: v.parallelism = int32(f, m); break;
      case 2: v.completions = int32(f, m); break;
      case 3: v.activeDeadlineSeconds = int64(f, m); break;
      case 5: v.manualSelector = bool(f, m); break;
      case 7: v.backoffLimit = int32(f, m); break;
      case 8: v.ttlSecondsAfterFinished = int32(f, m); break;
      case 9: v.completionMode = str(f, m); break;
      case 10: v.suspend = bool(f, m); break;
      case 12: v.backoffLimitPerIndex = int32(f, m); break;
      case 13: v.maxFailedIndexes = int32(f, m); break;
      case 14: v.podReplacementPolicy = str(f, m); break;
      case 15: v.managedBy = str(f, m); break;
      default: refuseUndecoded(f, { 16: 'successPolicy' }, ctx); // 4, 6 and 11 are messages, read below
    }
  }
  const selector = embedded(specFields, 4, m);
  if (selector) v.selector = decodeLabelSelector(selector, kind);
  v.template = decodePodTemplateSpec(embedded(specFields, 6, m), { kind, path: `${path}.template` });
  const policy = embedded(specFields, 11, m);
  if (policy) v.podFailurePolicy = decodePodFailurePolicy(policy);
  return inOrder(v, [
    'parallelism', 'completions', 'activeDeadlineSeconds', 'podFailurePolicy', 'backoffLimit', 'backoffLimitPerIndex',
    'maxFailedIndexes', 'selector', 'manualSelector', 'template', 'ttlSecondsAfterFinished', 'completionMode', 'suspend',
    'podReplacementPolicy', 'managedBy',
  ]);
}

/**
 * batch/v1 CronJob {1 metadata, 2 spec, 3 status (ignored)}, as `kubectl create cronjob` sends it.
 * CronJobSpec {1 schedule, 2 startingDeadlineSeconds, 3 concurrencyPolicy, 4 suspend,
 * 5 jobTemplate {1 metadata, 2 spec}, 6 successfulJobsHistoryLimit, 7 failedJobsHistoryLimit,
 * 8 timeZone}; all but schedule and concurrencyPolicy are pointers.
 */
export function decodeCronJob(raw: Uint8Array): Json {
  const kind = 'CronJob';
  const fields = parseMessage(raw, kind);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));
  const m = 'CronJobSpec';
  const specFields = parseMessage(embedded(fields, 2, kind) ?? new Uint8Array(0), m);
  const v: Json = {};
  for (const f of specFields) {
    switch (f.field) {
      case 1: v.schedule = str(f, m); break;
      case 2: v.startingDeadlineSeconds = int64(f, m); break;
      case 3: if (str(f, m)) v.concurrencyPolicy = str(f, m); break;
      case 4: v.suspend = bool(f, m); break;
      case 6: v.successfulJobsHistoryLimit = int32(f, m); break;
      case 7: v.failedJobsHistoryLimit = int32(f, m); break;
      case 8: v.timeZone = str(f, m); break;
      default: break; // 5 is a message, read below
    }
  }
  const t = 'JobTemplateSpec';
  const templateFields = parseMessage(embedded(specFields, 5, m) ?? new Uint8Array(0), t);
  const templateMeta = decodeObjectMeta(embedded(templateFields, 1, t));
  v.jobTemplate = {
    ...(Object.keys(templateMeta).length ? { metadata: templateMeta } : {}),
    spec: decodeJobSpec(embedded(templateFields, 2, t), kind, 'spec.jobTemplate.spec'),
  };
  const spec = inOrder(v, [
    'schedule', 'timeZone', 'startingDeadlineSeconds', 'concurrencyPolicy', 'suspend', 'jobTemplate',
    'successfulJobsHistoryLimit', 'failedJobsHistoryLimit',
  ]);
  return { apiVersion: 'batch/v1', kind, metadata, spec };
}
