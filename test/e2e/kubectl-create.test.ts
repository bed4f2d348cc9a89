import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods, waitForReadyPods } from '../helpers/workloads.js';

/**
 * kubectl's generator commands end to end: `kubectl create deployment` (protobuf from kubectl 1.32,
 * JSON from Debian's 1.20) and `kubectl run` (JSON from both), against a real server whose own
 * agent runs the pods as processes.
 */

const COMMAND_REQUIRED = /command: Required value: the process runtime runs each container as a local process and does not use its image; set command \(or args, which then run as the command\), or run the pod under runc \(runtimeClassName: runc\)/;

interface DeploymentObject {
  spec: {
    replicas: number;
    selector: { matchLabels: Record<string, string> };
    template: { spec: { containers: { name: string; image: string; command?: string[]; ports?: unknown[] }[] } };
  };
}

interface PodObject {
  metadata: { labels?: Record<string, string> };
  spec: { restartPolicy: string; containers: { command?: string[]; args?: string[]; env?: unknown[] }[] };
}

describe('kubectl create deployment and kubectl run', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;

  before(async () => {
    work = tempDir('kubectl-create');
    server = await startServer({ embeddedAgent: true });
  });

  after(async () => {
    await cleanup(work);
  });

  for (const [index, client] of kubectlClients().entries()) {
    const kubectl = (args: string[]) => runKubectl(client, server.kubeconfig, path.join(work, `cache-${index}`), args);
    const suffix = index === 0 ? 'new' : 'old';

    it(`${client.name}: create deployment with a command runs its replicas`, async () => {
      const name = `web-${suffix}`;
      const created = await kubectl([
        'create', 'deployment', name, '--image=busybox', '--replicas=2', '--port=8080', '-v=8',
        '--', 'sh', '-c', 'while :; do echo hi; sleep 1; done',
      ]);
      assert.equal(created.code, 0, created.stderr);
      assert.match(created.stdout, new RegExp(`^deployment.apps/${name} created$`, 'm'));
      // The point of the exercise: the new client really sends protobuf (the old one JSON).
      const sentProtobuf = created.stderr.includes('Content-Type: application/vnd.kubernetes.protobuf');
      assert.equal(sentProtobuf, index === 0, created.stderr);

      const res = await request(server, 'GET', `/apis/apps/v1/namespaces/default/deployments/${name}`);
      assert.equal(res.status, 200, res.text);
      const spec = (res.json as DeploymentObject).spec;
      assert.equal(spec.replicas, 2);
      assert.deepEqual(spec.selector, { matchLabels: { app: name } });
      assert.equal(spec.template.spec.containers.length, 1);
      const container = spec.template.spec.containers[0]!;
      assert.equal(container.name, 'busybox');
      assert.equal(container.image, 'busybox');
      assert.deepEqual(container.command, ['sh', '-c', 'while :; do echo hi; sleep 1; done']);
      assert.equal(container.ports?.length, 1);
      assert.equal((container.ports[0] as { containerPort?: number }).containerPort, 8080);

      const pods = await waitForReadyPods(server, `app=${name}`, 2, 45_000);
      const logs = await eventually(async () => {
        const r = await kubectl(['logs', pods[0]!.name]);
        return r.code === 0 && r.stdout.includes('hi\n') ? r : undefined;
      }, `kubectl logs ${pods[0]!.name} says hi`);
      assert.match(logs.stdout, /^hi$/m);
    });

    it(`${client.name}: create deployment without a command is refused with Drover's message`, async () => {
      const name = `nocmd-${suffix}`;
      const created = await kubectl(['create', 'deployment', name, '--image=busybox']);
      assert.notEqual(created.code, 0, created.stdout);
      // kube-apiserver qualifies the kind (Deployment.apps); Drover's message names it plainly.
      assert.match(created.stderr, new RegExp(`Deployment(\\.apps)? "${name}" is invalid`));
      assert.match(created.stderr, /spec\.template\.spec\.containers\[0\]\.command/);
      assert.match(created.stderr, COMMAND_REQUIRED);
      const res = await request(server, 'GET', `/apis/apps/v1/namespaces/default/deployments/${name}`);
      assert.equal(res.status, 404, 'nothing was stored');
    });

    it(`${client.name}: run --restart=Never --command runs to completion and its logs are readable`, async () => {
      const name = `once-${suffix}`;
      const created = await kubectl([
        'run', name, '--image=busybox', '--restart=Never', '--env=GREETING=hello', '--labels=app=once,tier=batch',
        '--command', '--', 'sh', '-c', 'echo done; echo "$GREETING"',
      ]);
      assert.equal(created.code, 0, created.stderr);
      assert.match(created.stdout, new RegExp(`^pod/${name} created$`, 'm'));

      const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
      const pod = res.json as PodObject;
      assert.deepEqual(pod.metadata.labels, { app: 'once', tier: 'batch' });
      assert.equal(pod.spec.restartPolicy, 'Never');
      assert.deepEqual(pod.spec.containers[0]!.command, ['sh', '-c', 'echo done; echo "$GREETING"']);
      assert.deepEqual(pod.spec.containers[0]!.env, [{ name: 'GREETING', value: 'hello' }]);

      await eventually(async () => {
        const [found] = (await listPods(server)).filter((p) => p.name === name);
        return found?.phase === 'Succeeded';
      }, `pod ${name} Succeeded`, 45_000);
      const logs = await kubectl(['logs', name]);
      assert.equal(logs.code, 0, logs.stderr);
      assert.equal(logs.stdout, 'done\nhello\n');
    });

    it(`${client.name}: run without --command sends args only, which run as the command`, async () => {
      // kubectl run puts what follows `--` in args (for the image's entrypoint); Drover runs no
      // images, so args alone are the command line, as on a busybox image.
      const name = `argsonly-${suffix}`;
      const created = await kubectl(['run', name, '--image=busybox', '--restart=Never', '--', 'sh', '-c', 'echo from args']);
      assert.equal(created.code, 0, created.stderr);
      await eventually(async () => (await listPods(server)).find((p) => p.name === name && p.phase === 'Succeeded'), `pod ${name} Succeeded`, 45_000);
      const logs = await kubectl(['logs', name]);
      assert.equal(logs.stdout, 'from args\n');
    });
  }
});
