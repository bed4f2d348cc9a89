import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { mountsUnder } from '../../src/agent/pods/runtime/host-mounts.js';
import { cleanupAgents, type AgentProcess, startAgent, waitForState } from '../helpers/agent.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { createObject, listEvents } from '../helpers/workloads.js';

/**
 * Volumes beyond ConfigMaps and Secrets, end to end with a real server and agent running process
 * pods: a Memory emptyDir is a tmpfs in the pod dir (gone with the pod), hostPath types are
 * checked with kubelet's FailedMount event and the pod starts once the path is right, a subPath
 * cannot be steered out of its volume by a symlink, a downward API file follows the pod's labels,
 * and a projected volume carries a token bound to the pod that the API server accepts.
 */

const NODE = 'vol1';
const CEILING_MS = 60_000;

interface RawPod {
  metadata: { uid: string };
  status?: { phase?: string; containerStatuses?: { state?: { running?: unknown; waiting?: { reason?: string } } }[] };
}

describe('volumes with a real agent', { concurrency: false }, () => {
  let server: ServerProcess;
  let agent: AgentProcess;
  let work: string;

  before(async () => {
    work = tempDir('volumes');
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    agent = await startAgent({ server, name: NODE });
    await waitForState(server, NODE, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  function pod(name: string, spec: Record<string, unknown>): Record<string, unknown> {
    return { apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { app: name } }, spec: { nodeName: NODE, terminationGracePeriodSeconds: 1, ...spec } };
  }

  function sh(name: string, script: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
    return { name, image: 'busybox', command: ['sh', '-c', script], ...extra };
  }

  async function getPod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  function logWith(name: string, marker: string, container?: string): Promise<string> {
    return eventually(async () => {
      const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}/log${container ? `?container=${container}` : ''}`);
      return res.status === 200 && res.text.includes(marker) ? res.text : undefined;
    }, `pod ${name} to print ${JSON.stringify(marker)}`, CEILING_MS);
  }

  function eventFor(name: string, reason: string): Promise<string> {
    return eventually(async () => (await listEvents(server)).find((e) => e.object === `Pod/${name}` && e.reason === reason)?.message, `a ${reason} event for ${name}`, CEILING_MS);
  }

  function podDir(uid: string): string {
    return path.join(agent.dataDir, 'agent', 'pods', uid);
  }

  async function deletePod(name: string, uid: string): Promise<void> {
    const res = await request(server, 'DELETE', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    await eventually(async () => (await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`)).status === 404, `pod ${name} gone`, CEILING_MS);
    await eventually(() => !fs.existsSync(podDir(uid)), `the pod dir of ${name} removed`, CEILING_MS);
  }

  it('emptyDir medium Memory: a tmpfs of its sizeLimit shared by the containers, unmounted when the pod goes', async () => {
    await createObject(
      server,
      '/api/v1/namespaces/default/pods',
      pod('ram', {
        volumes: [{ name: 'cache', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } }],
        containers: [
          sh('writer', 'echo in-memory > "$DROVER_CONTAINER_ROOT/cache/note"; echo WROTE; exec sleep 3600', { volumeMounts: [{ name: 'cache', mountPath: '/cache' }] }),
          sh('reader', 'while [ ! -f "$DROVER_CONTAINER_ROOT/shared/note" ]; do sleep 0.2; done; echo "READ=$(cat "$DROVER_CONTAINER_ROOT/shared/note")"; exec sleep 3600', {
            volumeMounts: [{ name: 'cache', mountPath: '/shared' }],
          }),
        ],
      }),
    );
    const log = await logWith('ram', 'READ=', 'reader');
    assert.match(log, /READ=in-memory/);
    const { metadata } = await getPod('ram');
    const volume = path.join(podDir(metadata.uid), 'volumes', 'cache');
    const line = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === volume);
    assert.ok(line, `a mount at ${volume}`);
    assert.match(line, / - tmpfs tmpfs /, line);
    assert.match(line, /size=16384k/, line);
    assert.equal(fs.readFileSync(path.join(volume, 'note'), 'utf8'), 'in-memory\n');
    await deletePod('ram', metadata.uid);
    assert.deepEqual(mountsUnder(podDir(metadata.uid)), [], 'the tmpfs is unmounted');
  });

  it("hostPath: a path of the wrong type keeps the pod waiting with kubelet's FailedMount event until it is right; DirectoryOrCreate makes its directory", async () => {
    const host = fs.mkdtempSync(path.join(work, 'host-'));
    const conf = path.join(host, 'app.conf');
    const made = path.join(host, 'made', 'here');
    await createObject(
      server,
      '/api/v1/namespaces/default/pods',
      pod('hosted', {
        volumes: [
          { name: 'conf', hostPath: { path: conf, type: 'File' } },
          { name: 'out', hostPath: { path: made, type: 'DirectoryOrCreate' } },
        ],
        containers: [
          sh('main', 'echo "CONF=$(cat "$DROVER_CONTAINER_ROOT/etc/app.conf")"; echo from-pod > "$DROVER_CONTAINER_ROOT/out/result"; echo DONE; exec sleep 3600', {
            volumeMounts: [{ name: 'conf', mountPath: '/etc/app.conf', readOnly: true }, { name: 'out', mountPath: '/out' }],
          }),
        ],
      }),
    );
    assert.equal(await eventFor('hosted', 'FailedMount'), `MountVolume.SetUp failed for volume "conf" : hostPath type check failed: ${conf} is not a file`);
    const waiting = await getPod('hosted');
    assert.equal(waiting.status?.containerStatuses?.[0]?.state?.waiting?.reason, 'ContainerCreating');
    fs.writeFileSync(conf, 'greeting=hi\n');
    const log = await logWith('hosted', 'DONE');
    assert.match(log, /CONF=greeting=hi/);
    assert.ok(fs.statSync(made).isDirectory(), 'DirectoryOrCreate made the directory');
    assert.equal(fs.readFileSync(path.join(made, 'result'), 'utf8'), 'from-pod\n', 'the pod wrote to the host');
    await deletePod('hosted', waiting.metadata.uid);
    assert.equal(fs.readFileSync(conf, 'utf8'), 'greeting=hi\n', 'removing the pod leaves the host path alone');
  });

  it('a subPath that a symlink leads out of its volume is refused with an event; the pod does not start', async () => {
    const host = fs.mkdtempSync(path.join(work, 'escape-'));
    const secretPlace = fs.mkdtempSync(path.join(work, 'elsewhere-'));
    fs.writeFileSync(path.join(secretPlace, 'private'), 'not for pods\n');
    fs.symlinkSync(secretPlace, path.join(host, 'door'));
    await createObject(
      server,
      '/api/v1/namespaces/default/pods',
      pod('escaper', {
        volumes: [{ name: 'h', hostPath: { path: host, type: 'Directory' } }],
        containers: [sh('main', 'cat "$DROVER_CONTAINER_ROOT/data/private"; exec sleep 3600', { volumeMounts: [{ name: 'h', mountPath: '/data', subPath: 'door' }] })],
      }),
    );
    const message = await eventFor('escaper', 'FailedMount');
    assert.match(message, /subPath "door" leads outside its volume/);
    const status = await getPod('escaper');
    assert.ok(!status.status?.containerStatuses?.[0]?.state?.running, 'never started');
    await deletePod('escaper', status.metadata.uid);
  });

  it('a downwardAPI volume holds the pod labels and a limit, and follows a label change', async () => {
    await createObject(
      server,
      '/api/v1/namespaces/default/pods',
      pod('labelled', {
        volumes: [
          {
            name: 'info',
            downwardAPI: {
              items: [
                { path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } },
                { path: 'mem', resourceFieldRef: { containerName: 'main', resource: 'limits.memory', divisor: '1Mi' } },
              ],
            },
          },
        ],
        containers: [sh('main', 'exec sleep 3600', { resources: { limits: { memory: '32Mi' } }, volumeMounts: [{ name: 'info', mountPath: '/etc/podinfo' }] })],
      }),
    );
    const { metadata } = await eventually(async () => {
      const p = await getPod('labelled');
      return p.status?.containerStatuses?.[0]?.state?.running ? p : undefined;
    }, 'the pod to run', CEILING_MS);
    const root = path.join(podDir(metadata.uid), 'roots', 'main', 'etc', 'podinfo');
    assert.equal(fs.readFileSync(path.join(root, 'labels'), 'utf8'), 'app="labelled"');
    assert.equal(fs.readFileSync(path.join(root, 'mem'), 'utf8'), '32');
    const patched = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/labelled', {
      body: { metadata: { labels: { tier: 'gold' } } },
      headers: { 'Content-Type': 'application/merge-patch+json' },
    });
    assert.equal(patched.status, 200, patched.text);
    await eventually(() => fs.readFileSync(path.join(root, 'labels'), 'utf8') === 'app="labelled"\ntier="gold"', 'the labels file to follow', CEILING_MS);
    await deletePod('labelled', metadata.uid);
  });

  it('a projected volume carries a token bound to the pod, which the API server takes as its ServiceAccount', async () => {
    const account = await request(server, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'reader' } } });
    assert.equal(account.status, 201, account.text);
    await createObject(
      server,
      '/api/v1/namespaces/default/pods',
      pod('tokened', {
        serviceAccountName: 'reader',
        volumes: [
          {
            name: 'api',
            projected: {
              sources: [
                { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
                { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } },
              ],
            },
          },
        ],
        containers: [sh('main', 'test -s "$DROVER_CONTAINER_ROOT/var/run/secrets/api/token" && echo HAVE-TOKEN; exec sleep 3600', { volumeMounts: [{ name: 'api', mountPath: '/var/run/secrets/api' }] })],
      }),
    );
    await logWith('tokened', 'HAVE-TOKEN');
    const { metadata } = await getPod('tokened');
    const volume = path.join(podDir(metadata.uid), 'volumes', 'api');
    const tokenFile = path.join(volume, 'token');
    assert.equal(fs.statSync(tokenFile).mode & 0o777, 0o400, "a process pod's token is its user's only");
    assert.equal(fs.readFileSync(path.join(volume, 'namespace'), 'utf8'), 'default');
    const token = fs.readFileSync(tokenFile, 'utf8');
    const review = await request(server, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      token,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    });
    assert.equal(review.status, 201, review.text);
    const user = (review.json as { status: { userInfo: { username: string; extra?: Record<string, string[]> } } }).status.userInfo;
    assert.equal(user.username, 'system:serviceaccount:default:reader');
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/pod-name'], ['tokened']);
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/node-name'], [NODE]);
    await deletePod('tokened', metadata.uid);
    await eventually(async () => {
      const after = await request(server, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
        token,
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
      });
      return after.status === 401;
    }, 'the token to die with its pod', CEILING_MS);
  });

  it('bad volumes are refused at admission with a field cause', async () => {
    const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: pod('bad', {
        volumes: [{ name: 'h', hostPath: { path: '/var/../etc' } }, { name: 'two', emptyDir: {}, hostPath: { path: '/tmp' } }],
        containers: [sh('main', 'true', { volumeMounts: [{ name: 'nope', mountPath: '/x' }, { name: 'h', mountPath: '/x/' }] })],
      }),
    });
    assert.equal(res.status, 422, res.text);
    const causes = (res.json as { details: { causes: { field: string; message: string }[] } }).details.causes.map((c) => `${c.field}: ${c.message}`);
    assert.deepEqual(causes, [
      `spec.volumes[0].hostPath.path: Invalid value: "/var/../etc": must not contain '..'`,
      'spec.volumes[1].emptyDir: Forbidden: may not specify more than 1 volume type',
      'spec.containers[0].volumeMounts[0].name: Not found: "nope"',
      'spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/x/": must be unique',
    ]);
  });
});
