import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { jobCompletionsCell, jobDurationCell, jobStatusCell, prepareJobForCreate, defaultJobSpec, validateJob } from '../../src/apiserver/kinds/jobs.js';
import {
  BACKOFF_BASE_MS,
  COMPLETION_INDEX_ANNOTATION,
  formatIndexes,
  type JobInput,
  type JobSpecView,
  planJob,
} from '../../src/controllers/job-logic.js';

/** The Job controller's decisions without any API, and the Job kind's defaults, validation and printer cells. */

const T0 = Date.parse('2026-01-01T00:00:00Z');
let created = T0;

function pod(phase: string, options: { index?: number; exitCode?: number; finishedAt?: number; conditions?: { type: string; status: string }[]; ready?: boolean } = {}): KubeObject {
  const name = `p${(created += 1000)}`;
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: name,
      creationTimestamp: new Date(created).toISOString(),
      ...(options.index !== undefined ? { annotations: { [COMPLETION_INDEX_ANNOTATION]: String(options.index) } } : {}),
    },
    spec: { nodeName: 'n1' },
    status: {
      phase,
      conditions: [...(options.conditions ?? []), { type: 'Ready', status: options.ready ? 'True' : 'False' }],
      ...(options.exitCode !== undefined
        ? { containerStatuses: [{ name: 'main', state: { terminated: { exitCode: options.exitCode, finishedAt: new Date(options.finishedAt ?? T0).toISOString() } } }] }
        : {}),
    },
  };
}

const NEVER = { spec: { restartPolicy: 'Never' } };

function input(spec: JobSpecView, pods: KubeObject[], now = T0 + 60_000, status: JobInput['status'] = { startTime: new Date(T0).toISOString() }): JobInput {
  return { spec: { template: NEVER, ...spec }, status, pods, now };
}

describe('Job controller decisions', () => {
  it('runs at most parallelism pods and no more than the completions still needed', () => {
    assert.equal(planJob(input({ completions: 5, parallelism: 2 }, [])).create, 2);
    assert.equal(planJob(input({ completions: 5, parallelism: 2 }, [pod('Running')])).create, 1);
    const nearlyDone = planJob(input({ completions: 5, parallelism: 2 }, [pod('Succeeded'), pod('Succeeded'), pod('Succeeded'), pod('Succeeded')]));
    assert.equal(nearlyDone.create, 1, 'only one more completion is needed');
    assert.equal(nearlyDone.status.succeeded, 4);
    const done = planJob(input({ completions: 2, parallelism: 2 }, [pod('Succeeded'), pod('Succeeded')]));
    assert.equal(done.create, 0);
    assert.deepEqual(done.status.conditions?.map((c) => [c.type, c.status, c.reason]), [
      ['SuccessCriteriaMet', 'True', 'CompletionsReached'],
      ['Complete', 'True', 'CompletionsReached'],
    ]);
    assert.ok(done.status.completionTime);
    // A work queue (no completions): done once one pod succeeded and none is active.
    assert.equal(planJob(input({ parallelism: 3 }, [])).create, 3);
    assert.equal(planJob(input({ parallelism: 3 }, [pod('Succeeded'), pod('Running')])).create, 0);
  });

  it('backs off exponentially after failures and fails at backoffLimit', () => {
    const firstFailure = pod('Failed', { exitCode: 1, finishedAt: T0 + 59_000 });
    const waiting = planJob(input({ completions: 1, backoffLimit: 2 }, [firstFailure]));
    assert.equal(waiting.create, 0, 'the replacement waits for the back-off');
    assert.equal(waiting.requeueAfterMs, BACKOFF_BASE_MS - 1000);
    assert.equal(planJob(input({ completions: 1, backoffLimit: 2 }, [firstFailure], T0 + 59_000 + BACKOFF_BASE_MS)).create, 1);
    const failures = [pod('Failed', { exitCode: 1 }), pod('Failed', { exitCode: 1 }), pod('Failed', { exitCode: 1 })];
    const failed = planJob(input({ completions: 1, backoffLimit: 2 }, [...failures, pod('Running')]));
    const condition = failed.status.conditions?.find((c) => c.type === 'Failed');
    assert.deepEqual([condition?.status, condition?.reason], ['True', 'BackoffLimitExceeded']);
    assert.equal(failed.status.failed, 3);
    assert.equal(failed.delete.length, 1, 'the running pod of a failed Job is removed');
    assert.equal(failed.create, 0);
  });

  it('fails a Job past activeDeadlineSeconds and looks again at the deadline', () => {
    const before = planJob(input({ completions: 1, activeDeadlineSeconds: 120 }, [pod('Running')]));
    assert.equal(before.requeueAfterMs, 60_000);
    const after = planJob(input({ completions: 1, activeDeadlineSeconds: 30 }, [pod('Running')]));
    assert.equal(after.status.conditions?.find((c) => c.type === 'Failed')?.reason, 'DeadlineExceeded');
    assert.equal(after.delete.length, 1);
  });

  it('applies podFailurePolicy: FailJob on an exit code, Ignore on DisruptionTarget, Count otherwise', () => {
    const rules = [
      { action: 'FailJob' as const, onExitCodes: { operator: 'In' as const, values: [42] } },
      { action: 'Ignore' as const, onPodConditions: [{ type: 'DisruptionTarget' }] },
    ];
    const failJob = planJob(input({ completions: 1, backoffLimit: 6, podFailurePolicy: { rules } }, [pod('Failed', { exitCode: 42 })]));
    const condition = failJob.status.conditions?.find((c) => c.type === 'Failed');
    assert.equal(condition?.reason, 'PodFailurePolicy');
    assert.match(condition?.message ?? '', /failed with exit code 42 matching FailJob rule at index 0/);
    const ignored = planJob(
      input({ completions: 1, backoffLimit: 0, podFailurePolicy: { rules } }, [pod('Failed', { exitCode: 137, conditions: [{ type: 'DisruptionTarget', status: 'True' }] })]),
    );
    assert.equal(ignored.status.failed, 0, 'an ignored failure is not counted');
    assert.equal(ignored.create, 1, 'and is replaced at once');
    const counted = planJob(input({ completions: 1, backoffLimit: 0, podFailurePolicy: { rules } }, [pod('Failed', { exitCode: 1 })]));
    assert.equal(counted.status.conditions?.find((c) => c.type === 'Failed')?.reason, 'BackoffLimitExceeded');
  });

  it('Indexed: one pod per missing index, lowest first; completedIndexes; done when every index succeeded', () => {
    const plan = planJob(input({ completions: 4, parallelism: 2, completionMode: 'Indexed' }, [pod('Succeeded', { index: 0 }), pod('Running', { index: 2 })]));
    assert.deepEqual(plan.createIndexes, [1]);
    assert.equal(plan.status.completedIndexes, '0');
    const done = planJob(
      input({ completions: 3, completionMode: 'Indexed' }, [pod('Succeeded', { index: 0 }), pod('Succeeded', { index: 1 }), pod('Succeeded', { index: 2 })]),
    );
    assert.equal(done.status.completedIndexes, '0-2');
    assert.ok(done.status.conditions?.some((c) => c.type === 'Complete'));
    assert.equal(formatIndexes([7, 0, 1, 2, 4, 6]), '0-2,4,6-7');
  });

  it('suspend removes the active pods and says Suspended; resuming says JobResumed', () => {
    const suspended = planJob(input({ completions: 3, parallelism: 2, suspend: true }, [pod('Running'), pod('Running')]));
    assert.equal(suspended.delete.length, 2);
    assert.equal(suspended.create, 0);
    assert.deepEqual(suspended.status.conditions?.map((c) => [c.type, c.status, c.reason]), [['Suspended', 'True', 'JobSuspended']]);
    assert.ok('startTime' in suspended.status && suspended.status.startTime === undefined, 'the start time is written away');
    const resumed = planJob(input({ completions: 3, parallelism: 2 }, [], T0, { conditions: suspended.status.conditions! }));
    assert.equal(resumed.create, 2);
    assert.deepEqual(resumed.status.conditions?.map((c) => [c.type, c.status, c.reason]), [['Suspended', 'False', 'JobResumed']]);
    assert.ok(resumed.status.startTime);
  });

  it('deletes a finished Job ttlSecondsAfterFinished after it finished', () => {
    const finishedAt = new Date(T0).toISOString();
    const status = { startTime: finishedAt, conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: finishedAt }] };
    const early = planJob(input({ completions: 1, ttlSecondsAfterFinished: 100 }, [pod('Succeeded')], T0 + 40_000, status));
    assert.equal(early.deleteJob, false);
    assert.equal(early.requeueAfterMs, 60_000);
    assert.equal(planJob(input({ completions: 1, ttlSecondsAfterFinished: 100 }, [pod('Succeeded')], T0 + 100_000, status)).deleteJob, true);
  });
});

describe('the Job kind', () => {
  const job = (spec: Record<string, unknown>): KubeObject => ({
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: 'pi', namespace: 'default', uid: '1234' },
    spec: { template: { spec: { containers: [{ name: 'main', command: ['true'] }], ...spec } } },
  });

  it('generates the selector and labels, and defaults as kube does', () => {
    const obj = job({ restartPolicy: 'Never' });
    prepareJobForCreate(obj);
    defaultJobSpec(obj.spec as Record<string, unknown>);
    const spec = obj.spec as Record<string, unknown>;
    assert.deepEqual(spec.selector, { matchLabels: { 'batch.kubernetes.io/controller-uid': '1234' } });
    assert.deepEqual((spec.template as { metadata: { labels: Record<string, string> } }).metadata.labels, {
      'batch.kubernetes.io/controller-uid': '1234',
      'batch.kubernetes.io/job-name': 'pi',
      'controller-uid': '1234',
      'job-name': 'pi',
    });
    assert.deepEqual([spec.completions, spec.parallelism, spec.backoffLimit, spec.completionMode, spec.suspend], [1, 1, 6, 'NonIndexed', false]);
    assert.deepEqual(validateJob(obj), []);
  });

  it('refuses restartPolicy Always (or none) and Indexed without completions, with the field path', () => {
    for (const [restartPolicy, reason] of [['Always', 'FieldValueNotSupported'], [undefined, 'FieldValueRequired']] as const) {
      const obj = job(restartPolicy ? { restartPolicy } : {});
      prepareJobForCreate(obj);
      defaultJobSpec(obj.spec as Record<string, unknown>);
      const causes = validateJob(obj);
      assert.deepEqual(causes.map((c) => [c.field, c.reason]), [['spec.template.spec.restartPolicy', reason]]);
    }
    const indexed = job({ restartPolicy: 'Never' });
    prepareJobForCreate(indexed);
    (indexed.spec as Record<string, unknown>).completionMode = 'Indexed';
    (indexed.spec as Record<string, unknown>).parallelism = 2;
    assert.deepEqual(validateJob(indexed).map((c) => c.field), ['spec.completions']);
  });

  it('prints STATUS, COMPLETIONS and DURATION as kubectl 1.32 shows them', () => {
    const obj: KubeObject = {
      metadata: { name: 'pi' },
      spec: { completions: 5, parallelism: 2 },
      status: { succeeded: 3, startTime: '2026-01-01T00:00:00Z', conditions: [] },
    };
    assert.equal(jobStatusCell(obj), 'Running');
    assert.equal(jobCompletionsCell(obj), '3/5');
    assert.equal(jobDurationCell(obj, T0 + 75_000), '75s');
    assert.equal(jobCompletionsCell({ metadata: {}, spec: { parallelism: 3 }, status: {} }), '0/1 of 3');
    const done: KubeObject = { ...obj, status: { ...(obj.status as object), completionTime: '2026-01-01T00:03:00Z', conditions: [{ type: 'Complete', status: 'True' }] } };
    assert.equal(jobStatusCell(done), 'Complete');
    assert.equal(jobDurationCell(done, T0 + 999_999), '3m');
  });
});
