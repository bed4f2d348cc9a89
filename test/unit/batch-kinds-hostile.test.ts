import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defaultCronJob, validateCronJob } from '../../src/apiserver/kinds/cronjobs.js';
import { defaultDaemonSet, validateDaemonSet } from '../../src/apiserver/kinds/daemonsets.js';
import { defaultJobSpec, prepareJobForCreate, validateJob } from '../../src/apiserver/kinds/jobs.js';
import type { KubeObject } from '../../src/apiserver/objects.js';

/**
 * Bad input to the DaemonSet, Job and CronJob kinds is a list of causes (a 422), never an
 * exception (a 500): every defaulting and validation hook over odd shapes in every field.
 */

const ODD: unknown[] = [null, 5, 'x', true, [], [1, 'a', null], {}, { a: 1 }, -1, 1.5];

function variants(base: Record<string, unknown>, paths: string[][]): KubeObject[] {
  const out: KubeObject[] = [];
  for (const path of paths) {
    for (const value of ODD) {
      const obj = structuredClone(base) as Record<string, unknown>;
      let at = obj;
      for (const key of path.slice(0, -1)) {
        if (typeof at[key] !== 'object' || at[key] === null) at[key] = {};
        at = at[key] as Record<string, unknown>;
      }
      at[path[path.length - 1]!] = value;
      out.push({ metadata: { name: 'x', uid: 'u' }, ...obj } as KubeObject);
    }
  }
  return out;
}

const POD = { metadata: { labels: { app: 'x' } }, spec: { restartPolicy: 'Never', containers: [{ name: 'm', command: ['true'] }] } };

describe('batch and daemon kinds: hostile shapes are causes, not exceptions', () => {
  it('DaemonSet', () => {
    const base = { spec: { selector: { matchLabels: { app: 'x' } }, template: { ...POD, spec: { containers: [{ name: 'm', command: ['true'] }] } } } };
    const paths = [['spec'], ['status'], ['spec', 'selector'], ['spec', 'template'], ['spec', 'template', 'spec'], ['spec', 'updateStrategy'], ['spec', 'updateStrategy', 'type'], ['spec', 'updateStrategy', 'rollingUpdate'], ['spec', 'updateStrategy', 'rollingUpdate', 'maxUnavailable'], ['spec', 'minReadySeconds']];
    for (const obj of variants(base, paths)) {
      defaultDaemonSet(obj);
      assert.ok(Array.isArray(validateDaemonSet(obj)));
    }
  });

  it('Job', () => {
    const base = { spec: { template: POD } };
    const paths = [['spec'], ['status'], ['spec', 'template'], ['spec', 'template', 'metadata'], ['spec', 'template', 'metadata', 'labels'], ['spec', 'template', 'spec'], ['spec', 'parallelism'], ['spec', 'completions'], ['spec', 'backoffLimit'], ['spec', 'activeDeadlineSeconds'], ['spec', 'completionMode'], ['spec', 'suspend'], ['spec', 'podFailurePolicy'], ['spec', 'podFailurePolicy', 'rules'], ['spec', 'manualSelector'], ['spec', 'selector']];
    for (const obj of variants(base, paths)) {
      prepareJobForCreate(obj);
      if (typeof obj.spec === 'object' && obj.spec !== null && !Array.isArray(obj.spec)) defaultJobSpec(obj.spec as Record<string, unknown>);
      assert.ok(Array.isArray(validateJob(obj)));
    }
    const rules = variants({ spec: { template: POD, podFailurePolicy: { rules: [{ action: 'FailJob', onExitCodes: { operator: 'In', values: [1] } }] } } }, [
      ['spec', 'podFailurePolicy', 'rules', '0'],
      ['spec', 'podFailurePolicy', 'rules', '0', 'onExitCodes'],
      ['spec', 'podFailurePolicy', 'rules', '0', 'onExitCodes', 'values'],
      ['spec', 'podFailurePolicy', 'rules', '0', 'onPodConditions'],
    ]);
    for (const obj of rules) {
      defaultJobSpec(obj.spec as Record<string, unknown>);
      assert.ok(Array.isArray(validateJob(obj)));
    }
  });

  it('CronJob', () => {
    const base = { spec: { schedule: '* * * * *', jobTemplate: { spec: { template: POD } } } };
    const paths = [['spec'], ['status'], ['spec', 'schedule'], ['spec', 'timeZone'], ['spec', 'concurrencyPolicy'], ['spec', 'startingDeadlineSeconds'], ['spec', 'jobTemplate'], ['spec', 'jobTemplate', 'spec'], ['spec', 'jobTemplate', 'spec', 'template'], ['spec', 'jobTemplate', 'spec', 'template', 'spec'], ['spec', 'successfulJobsHistoryLimit']];
    for (const obj of variants(base, paths)) {
      defaultCronJob(obj);
      assert.ok(Array.isArray(validateCronJob(obj)));
    }
  });
});
