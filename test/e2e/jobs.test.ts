import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods } from '../helpers/workloads.js';

/**
 * Jobs end to end: a real server, two real agents whose pods are processes, the real kubectl (the
 * machine's and Debian's 1.20). Completions with bounded parallelism (proven from the pods' own
 * start/end journal), backoffLimit, podFailurePolicy, Indexed mode, ttlSecondsAfterFinished, and
 * the 422 for a restartPolicy a Job cannot have.
 */

interface JobView {
  metadata: { name: string; uid: string };
  spec: Record<string, unknown>;
  status?: { active?: number; succeeded?: number; failed?: number; completedIndexes?: string; conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}

function jobYaml(name: string, spec: string[], container: string[], restartPolicy = 'Never'): string {
  return [
    'apiVersion: batch/v1',
    'kind: Job',
    `metadata: {name: ${name}}`,
    'spec:',
    ...spec.map((l) => `  ${l}`),
    '  template:',
    '    spec:',
    `      restartPolicy: ${restartPolicy}`,
    '      terminationGracePeriodSeconds: 1',
    '      containers:',
    '      - name: main',
    '        image: busybox:1.36',
    ...container.map((l) => `        ${l}`),
  ].join('\n');
}

describe('Jobs on real agents', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;

  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, input?: string) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, input === undefined ? {} : { input });
  const getJob = async (name: string): Promise<JobView | undefined> => {
    const res = await request(server, 'GET', `/apis/batch/v1/namespaces/default/jobs/${name}`);
    return res.status === 200 ? (res.json as JobView) : undefined;
  };
  const waitForCondition = (name: string, type: string, ceilingMs = 90_000): Promise<JobView> =>
    eventually(
      async () => {
        const job = await getJob(name);
        return job?.status?.conditions?.some((c) => c.type === type && c.status === 'True') ? job : undefined;
      },
      `job ${name} ${type}`,
      ceilingMs,
      200,
    );

  before(async () => {
    work = tempDir('jobs');
    fs.chmodSync(work, 0o777);
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer();
    for (const [i, name] of ['j1', 'j2'].entries()) {
      await startAgent({ server, name, args: ['--node-ip', `127.0.0.${i + 2}`] });
      await waitForState(server, name, 'Ready', 60_000);
    }
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('completions 5 / parallelism 2 completes, never more than 2 pods running at once (from their journal)', async () => {
    const journal = path.join(work, 'parallel.journal');
    fs.writeFileSync(journal, '', { mode: 0o666 });
    const yaml = jobYaml('parallel', ['completions: 5', 'parallelism: 2'], [
      `command: ["sh", "-c", "echo \\"start $(date +%s%3N) $HOSTNAME\\" >> ${journal}; sleep 1; echo \\"end $(date +%s%3N) $HOSTNAME\\" >> ${journal}"]`,
    ]);
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, yaml), 'apply job');
    const job = await waitForCondition('parallel', 'Complete', 120_000);
    assert.equal(job.status?.succeeded, 5);
    assert.equal(job.status?.failed ?? 0, 0);
    const pods = await listPods(server, 'batch.kubernetes.io/job-name=parallel');
    assert.equal(pods.filter((p) => p.phase === 'Succeeded').length, 5, JSON.stringify(pods));

    // Each pod's run as an interval from its own journal lines; the most that overlap at once.
    const events = fs
      .readFileSync(journal, 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.split(' '))
      .map(([what, ms]) => ({ delta: what === 'start' ? 1 : -1, at: Number(ms) }))
      .sort((a, b) => a.at - b.at || a.delta - b.delta);
    assert.equal(events.filter((e) => e.delta === 1).length, 5, 'five pods ran');
    let running = 0;
    let most = 0;
    for (const e of events) {
      running += e.delta;
      most = Math.max(most, running);
    }
    assert.ok(most <= 2, `at most 2 pods ran at once (saw ${most})`);
    assert.equal(most, 2, 'the two-wide parallelism was used');

    for (const client of kubectlClients()) {
      const get = await kubectl(['get', 'jobs', '-o', 'wide'], client);
      assertOk(get, `get jobs with ${client.name}`);
      const table = parseTable(get.stdout);
      const row = rowNamed(table, 'parallel');
      assert.equal(row.COMPLETIONS, '5/5', get.stdout);
      assert.equal(row.CONTAINERS, 'main');
      assert.equal(row.SELECTOR, `batch.kubernetes.io/controller-uid=${job.metadata.uid}`);
      if (client === MODERN_KUBECTL) assert.equal(row.STATUS, 'Complete', get.stdout);
      const describe = await kubectl(['describe', 'job', 'parallel'], client);
      assertOk(describe, `describe job with ${client.name}`);
      assert.match(describe.stdout, /Pods Statuses:\s+0 (Active|Running)( \(0 Ready\))? \/ 5 Succeeded \/ 0 Failed/);
      assert.match(describe.stdout, /Completions:\s+5/);
    }
  });

  it('a failing Job stops at backoffLimit with Failed/BackoffLimitExceeded', async () => {
    const yaml = jobYaml('failing', ['backoffLimit: 2'], ['command: ["sh", "-c", "exit 3"]']);
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, yaml), 'apply failing job');
    const job = await waitForCondition('failing', 'Failed', 120_000);
    const failed = job.status!.conditions!.find((c) => c.type === 'Failed')!;
    assert.equal(failed.reason, 'BackoffLimitExceeded');
    assert.equal(failed.message, 'Job has reached the specified backoff limit');
    assert.equal(job.status?.failed, 3);
    // No pod after the limit: exactly backoffLimit + 1 tries, every one Failed.
    const pods = await listPods(server, 'batch.kubernetes.io/job-name=failing');
    assert.deepEqual(pods.map((p) => p.phase), ['Failed', 'Failed', 'Failed'], JSON.stringify(pods));
    const get = await kubectl(['get', 'job', 'failing']);
    assert.equal(rowNamed(parseTable(get.stdout), 'failing').STATUS, 'Failed');
  });

  it('podFailurePolicy FailJob on exit code 42 fails the Job at the first such failure', async () => {
    const yaml = jobYaml(
      'policy',
      ['backoffLimit: 6', 'podFailurePolicy:', '  rules:', '  - action: FailJob', '    onExitCodes: {operator: In, values: [42]}'],
      ['command: ["sh", "-c", "exit 42"]'],
    );
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, yaml), 'apply policy job');
    const job = await waitForCondition('policy', 'Failed');
    const failed = job.status!.conditions!.find((c) => c.type === 'Failed')!;
    assert.equal(failed.reason, 'PodFailurePolicy');
    assert.match(failed.message ?? '', /Container main for pod default\/policy-\w+ failed with exit code 42 matching FailJob rule at index 0/);
    assert.equal((await listPods(server, 'batch.kubernetes.io/job-name=policy')).length, 1);
  });

  it('Indexed: each pod gets its JOB_COMPLETION_INDEX, annotation and hostname; completedIndexes; ttlSecondsAfterFinished removes the Job and its pods', async () => {
    const out = path.join(work, 'indexed');
    fs.mkdirSync(out, { mode: 0o777 });
    fs.chmodSync(out, 0o777);
    const yaml = jobYaml('indexed', ['completions: 3', 'parallelism: 3', 'completionMode: Indexed', 'ttlSecondsAfterFinished: 5'], [
      `command: ["sh", "-c", "echo $JOB_COMPLETION_INDEX $HOSTNAME > ${out}/$JOB_COMPLETION_INDEX"]`,
    ]);
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, yaml), 'apply indexed job');
    const job = await waitForCondition('indexed', 'Complete');
    assert.equal(job.status?.completedIndexes, '0-2');
    for (const i of [0, 1, 2]) assert.equal(fs.readFileSync(path.join(out, String(i)), 'utf8').trim().split(' ')[0], String(i));
    const res = await request(server, 'GET', '/api/v1/namespaces/default/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Dindexed');
    const pods = (res.json as { items: { metadata: { annotations: Record<string, string>; labels: Record<string, string> }; spec: { hostname: string } }[] }).items;
    assert.deepEqual(pods.map((p) => p.metadata.annotations['batch.kubernetes.io/job-completion-index']).sort(), ['0', '1', '2']);
    for (const p of pods) {
      const index = p.metadata.annotations['batch.kubernetes.io/job-completion-index'];
      assert.equal(p.spec.hostname, `indexed-${index}`);
      assert.equal(p.metadata.labels['batch.kubernetes.io/job-completion-index'], index);
    }
    // ttlSecondsAfterFinished: 5 — the Job goes, and its pods with it.
    await eventually(async () => ((await getJob('indexed')) ? undefined : true), 'the finished Job deleted by its TTL', 60_000, 200);
    await eventually(async () => ((await listPods(server, 'batch.kubernetes.io/job-name=indexed')).length === 0 ? true : undefined), 'its pods gone', 60_000, 200);
  });

  it('a suspended Job runs nothing and says Suspended; resumed, it runs to completion', async () => {
    const yaml = jobYaml('paused', ['suspend: true', 'completions: 2', 'parallelism: 2'], ['command: ["true"]']);
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, yaml), 'apply suspended job');
    const suspended = await waitForCondition('paused', 'Suspended');
    assert.equal(suspended.status?.conditions?.find((c) => c.type === 'Suspended')?.reason, 'JobSuspended');
    assert.equal((suspended.status as { startTime?: string }).startTime, undefined);
    assert.equal((await listPods(server, 'batch.kubernetes.io/job-name=paused')).length, 0);
    const get = await kubectl(['get', 'job', 'paused']);
    assert.equal(rowNamed(parseTable(get.stdout), 'paused').STATUS, 'Suspended');
    assertOk(await kubectl(['patch', 'job', 'paused', '--type=merge', '-p', '{"spec":{"suspend":false}}']), 'resume');
    const done = await waitForCondition('paused', 'Complete');
    assert.equal(done.status?.conditions?.find((c) => c.type === 'Suspended')?.status, 'False');
    assert.equal(done.status?.succeeded, 2);
  });

  it('refuses restartPolicy Always with a 422 naming the field, with both kubectls', async () => {
    for (const client of kubectlClients()) {
      const result = await kubectl(['create', '--validate=false', '-f', '-'], client, jobYaml('always', [], ['command: ["true"]'], 'Always'));
      assert.notEqual(result.code, 0, result.stdout);
      assert.match(result.stderr, /spec\.template\.spec\.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"/);
    }
    const res = await request(server, 'POST', '/apis/batch/v1/namespaces/default/jobs', {
      body: { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'bad' }, spec: { parallelism: -1, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'm', command: ['true'] }] } } } },
    });
    assert.equal(res.status, 422, res.text);
    assert.match(res.text, /spec\.parallelism/);
  });
});
