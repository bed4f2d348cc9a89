import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { type KubectlClient, kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * CronJobs end to end, in real time: a real server and agent, a CronJob every minute that starts
 * Jobs on schedule (two start times, so at most about 2.5 minutes), `kubectl create job
 * --from=cronjob/…` and get/describe with the machine's kubectl and Debian's 1.20, a bad schedule
 * refused with its field, and the official Python client reading DaemonSets, Jobs and CronJobs.
 */

interface JobView {
  metadata: { name: string; uid: string; annotations?: Record<string, string>; ownerReferences?: { kind: string; name: string; controller?: boolean }[] };
  status?: { succeeded?: number; conditions?: { type: string; status: string }[] };
}

const CRONJOB = [
  'apiVersion: batch/v1',
  'kind: CronJob',
  'metadata: {name: tick}',
  'spec:',
  '  schedule: "* * * * *"',
  '  successfulJobsHistoryLimit: 5',
  '  jobTemplate:',
  '    metadata: {labels: {app: tick}}',
  '    spec:',
  '      template:',
  '        spec:',
  '          restartPolicy: Never',
  '          containers:',
  '          - name: main',
  '            image: busybox:1.36',
  '            command: ["true"]',
].join('\n');

const DAEMONSET = [
  'apiVersion: apps/v1',
  'kind: DaemonSet',
  'metadata: {name: watcher}',
  'spec:',
  '  selector: {matchLabels: {app: watcher}}',
  '  template:',
  '    metadata: {labels: {app: watcher}}',
  '    spec:',
  '      terminationGracePeriodSeconds: 1',
  '      containers:',
  '      - {name: main, image: busybox, command: ["sh", "-c", "while :; do sleep 1; done"]}',
].join('\n');

describe('CronJobs on a real agent, in real time', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;

  const kubectl = (args: string[], client: KubectlClient = MODERN_KUBECTL, input?: string) =>
    runKubectl(client, server.kubeconfig, cacheDir, args, input === undefined ? {} : { input });
  const jobs = async (): Promise<JobView[]> => {
    const res = await request(server, 'GET', '/apis/batch/v1/namespaces/default/jobs');
    assert.equal(res.status, 200, res.text);
    return (res.json as { items: JobView[] }).items;
  };
  const cronJobStatus = async (): Promise<{ active?: { name: string }[]; lastScheduleTime?: string; lastSuccessfulTime?: string }> => {
    const res = await request(server, 'GET', '/apis/batch/v1/namespaces/default/cronjobs/tick');
    return ((res.json as { status?: object }).status ?? {}) as { active?: { name: string }[]; lastScheduleTime?: string };
  };
  const complete = (job: JobView): boolean => Boolean(job.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True'));

  before(async () => {
    work = tempDir('cronjobs');
    cacheDir = path.join(work, 'kube-cache');
    server = await startServer();
    await startAgent({ server, name: 'c1', args: ['--node-ip', '127.0.0.2'] });
    await waitForState(server, 'c1', 'Ready', 60_000);
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('a CronJob every minute starts a Job at each minute, named <cronjob>-<minutes since the epoch>; kubectl create job --from, get and describe work with both kubectls', async () => {
    const createdAt = Date.now();
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, CRONJOB), 'apply cronjob');
    assertOk(await kubectl(['apply', '-f', '-'], MODERN_KUBECTL, DAEMONSET), 'apply daemonset');

    // While the first minute comes: manual runs from the template, with each kubectl.
    for (const [i, client] of kubectlClients().entries()) {
      // kubectl 1.20 decodes what it reads into its own scheme, which knows CronJob only as
      // batch/v1beta1 (served too); it maps `cronjob` to the preferred batch/v1, as against any
      // Kubernetes 1.21+, so it is given the version.
      const from = client === MODERN_KUBECTL ? 'cronjob/tick' : 'cronjobs.v1beta1.batch/tick';
      const created = await kubectl(['create', 'job', `manual-${i}`, `--from=${from}`], client);
      assertOk(created, `create job --from=cronjob with ${client.name}`);
      const res = await request(server, 'GET', `/apis/batch/v1/namespaces/default/jobs/manual-${i}`);
      const job = res.json as JobView;
      assert.equal(job.metadata.annotations?.['cronjob.kubernetes.io/instantiate'], 'manual');
      assert.equal(job.metadata.ownerReferences?.[0]?.kind, 'CronJob');
      assert.equal(job.metadata.ownerReferences?.[0]?.name, 'tick');
      const get = await kubectl(['get', 'cronjobs', '-o', 'wide'], client);
      assertOk(get, `get cronjobs with ${client.name}`);
      const row = rowNamed(parseTable(get.stdout), 'tick');
      assert.equal(row.SCHEDULE, '* * * * *', get.stdout);
      assert.equal(row.SUSPEND, 'False');
      assert.equal(row.CONTAINERS, 'main');
      if (client === MODERN_KUBECTL) assert.equal(row.TIMEZONE, '<none>');
      const describe = await kubectl(['describe', 'cronjob', 'tick'], client);
      assertOk(describe, `describe cronjob with ${client.name}`);
      assert.match(describe.stdout, /Schedule:\s+\* \* \* \* \*/);
      assert.match(describe.stdout, /Concurrency Policy:\s+Allow/);
    }
    await eventually(async () => (await jobs()).filter((j) => j.metadata.name.startsWith('manual-')).every(complete) || undefined, 'manual jobs complete', 60_000, 200);

    // Two start times, on the minute.
    const scheduled = await eventually(
      async () => {
        const found = (await jobs()).filter((j) => /^tick-\d+$/.test(j.metadata.name));
        return found.length >= 2 ? found : undefined;
      },
      'two scheduled jobs',
      150_000,
      500,
    );
    const minutes = scheduled.map((j) => Number(j.metadata.name.slice('tick-'.length))).sort((a, b) => a - b);
    assert.equal(minutes.length, 2, `exactly two start times so far: ${minutes.join(',')}`);
    assert.equal(minutes[1]! - minutes[0]!, 1, 'consecutive minutes');
    assert.ok(minutes[0]! * 60_000 >= createdAt - 60_000 && minutes[0]! * 60_000 <= createdAt + 60_000, 'the first start time is the first minute after creation');
    for (const job of scheduled) {
      const minute = Number(job.metadata.name.slice('tick-'.length));
      assert.equal(job.metadata.annotations?.['batch.kubernetes.io/cronjob-scheduled-timestamp'], new Date(minute * 60_000).toISOString().replace('.000Z', 'Z'));
      assert.equal(job.metadata.ownerReferences?.[0]?.controller, true);
    }
    const status = await eventually(async () => {
      const s = await cronJobStatus();
      return s.lastSuccessfulTime && s.lastScheduleTime === new Date(minutes[1]! * 60_000).toISOString().replace('.000Z', 'Z') ? s : undefined;
    }, 'lastScheduleTime of the second start and a lastSuccessfulTime', 60_000, 200);
    assert.ok(status.lastSuccessfulTime);
    const get = await kubectl(['get', 'cronjob', 'tick']);
    assert.notEqual(rowNamed(parseTable(get.stdout), 'tick')['LAST SCHEDULE'], '<none>');
    for (const job of scheduled) {
      const selector = encodeURIComponent(`batch.kubernetes.io/job-name=${job.metadata.name}`);
      const pods = await request(server, 'GET', `/api/v1/namespaces/default/pods?labelSelector=${selector}`);
      assert.equal((pods.json as { items: unknown[] }).items.length, 1, `${job.metadata.name} ran one pod from the template`);
    }
  });

  it('the Python client lists and reads DaemonSets, Jobs and CronJobs', async () => {
    await eventually(async () => {
      const res = await request(server, 'GET', '/apis/apps/v1/namespaces/default/daemonsets/watcher');
      return (res.json as { status?: { numberReady?: number } }).status?.numberReady === 1 || undefined;
    }, 'the DaemonSet ready', 60_000, 200);
    await runPythonClientScript('batch_test.py', [server.kubeconfig, 'default', 'watcher', 'manual-0', 'tick'], { minChecks: 17 });
  });

  it('kubectl create cronjob works with both kubectls (1.32 sends it as protobuf)', async () => {
    for (const [i, client] of kubectlClients().entries()) {
      const name = `made-${i}`;
      const created = await kubectl(['create', 'cronjob', name, '--image=busybox', '--schedule=*/5 * * * *', '--', 'sh', '-c', 'true'], client);
      assertOk(created, `create cronjob with ${client.name}`);
      const res = await request(server, 'GET', `/apis/batch/v1/namespaces/default/cronjobs/${name}`);
      const cj = res.json as { spec: { schedule: string; concurrencyPolicy: string; jobTemplate: { spec: { template: { spec: { restartPolicy: string; containers: { command: string[] }[] } } } } } };
      assert.equal(cj.spec.schedule, '*/5 * * * *');
      assert.equal(cj.spec.concurrencyPolicy, 'Allow');
      assert.equal(cj.spec.jobTemplate.spec.template.spec.restartPolicy, 'OnFailure');
      assert.deepEqual(cj.spec.jobTemplate.spec.template.spec.containers[0]!.command, ['sh', '-c', 'true']);
    }
  });

  it('refuses a bad schedule and a bad time zone with their field paths (422)', async () => {
    const bad = CRONJOB.replace('name: tick', 'name: bad').replace('"* * * * *"', '"61 * * * *"');
    const result = await kubectl(['create', '-f', '-'], MODERN_KUBECTL, bad);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /spec\.schedule: Invalid value: "61 \* \* \* \*"/);
    const res = await request(server, 'POST', '/apis/batch/v1/namespaces/default/cronjobs', {
      body: {
        apiVersion: 'batch/v1',
        kind: 'CronJob',
        metadata: { name: 'zoned' },
        spec: { schedule: '@hourly', timeZone: 'Mars/Olympus', jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'm', command: ['true'] }] } } } } },
      },
    });
    assert.equal(res.status, 422, res.text);
    assert.match(res.text, /spec\.timeZone/);
  });
});
