import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { readRunState } from '../../src/agent/pods/run-spec.js';
import { CGROUP_MOUNT } from '../../src/agent/pods/runtime/cgroups.js';
import { CGROUP_ROOT } from '../../src/agent/pods/runtime/names.js';
import { importTestImage, nodeLeftovers, podDirOf } from '../helpers/containers.js';
import { buildTestImage } from '../helpers/images.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { always, cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * A runc container is reported running only once runc has started it, as kubelet reports it once
 * the runtime has: not when the supervisor has merely spawned `runc run`. The test holds runc's
 * create back by making the container's cgroup before the agent starts it, with a CPU quota of
 * 1 ms a second: runc's init, which joins it, crawls through its set-up, so `runc run` waits for
 * it for many seconds (runc refuses a frozen cgroup, and leaves a quota the pod does not set as it
 * finds it). Meanwhile the pod must not be Running; once the quota is lifted it is, and a
 * `kubectl exec` works at the first try.
 *
 * Run: node --import tsx --test --test-timeout=600000 test/e2e/runc-running.test.ts
 */

const IMAGE = 'drover.test/held:1';
const CPU = path.join(CGROUP_MOUNT, 'cpu');
const QUOTA = 'cpu.cfs_quota_us';

interface RawPod {
  metadata: { name: string; uid: string };
  status?: { phase?: string; containerStatuses?: { ready?: boolean; state?: Record<string, { reason?: string }> }[] };
}

describe('a runc container is running once runc has started it', { concurrency: false, skip: !fs.existsSync(path.join(CPU, QUOTA)) && 'needs the cgroup v1 cpu controller' }, () => {
  let server: ServerProcess;
  let work: string;
  const held: string[] = [];

  before(async () => {
    work = tempDir('runc-running');
    server = await startServer({ embeddedAgent: true, args: ['--default-runtime-class', 'runc'] });
  });

  after(async () => {
    // Lift the quota first, so what is left of the container can go at once.
    for (const dir of held) {
      try {
        fs.writeFileSync(path.join(dir, QUOTA), '-1');
      } catch {
        // the agent removed it with the pod
      }
    }
    const dataDir = server?.dataDir;
    await cleanup(work);
    for (const dir of held.reverse()) {
      try {
        fs.rmdirSync(dir);
      } catch {
        // the agent removed it with the pod
      }
    }
    if (dataDir) assert.deepEqual(nodeLeftovers(dataDir), [], 'the node holds no mount and no runc container after teardown');
  });

  async function getPod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  it('not while runc is still creating it; at once after, and an exec works then', async () => {
    // The image is not on the node yet (pull policy Never): the pod waits, so its uid is known
    // before its container can start.
    const created = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'held' },
        spec: { terminationGracePeriodSeconds: 0, containers: [{ name: 'main', image: IMAGE, imagePullPolicy: 'Never' }] },
      },
    });
    assert.equal(created.status, 201, created.text);
    const uid = (created.json as RawPod).metadata.uid;
    await eventually(async () => (await getPod('held')).status?.containerStatuses?.[0]?.state?.waiting?.reason === 'ErrImageNeverPull', 'the pod waiting for its image', 60_000);

    // The container's cgroup, made with the quota before runc makes it (runc uses it as it finds it).
    for (const dir of [path.join(CPU, CGROUP_ROOT, uid), path.join(CPU, CGROUP_ROOT, uid, 'main')]) {
      fs.mkdirSync(dir, { recursive: true });
      held.push(dir);
    }
    const leaf = held.at(-1)!;
    fs.writeFileSync(path.join(leaf, 'cpu.cfs_period_us'), '1000000');
    fs.writeFileSync(path.join(leaf, QUOTA), '1000');

    await importTestImage(server.dataDir, buildTestImage({ name: IMAGE, entrypoint: ['/bin/sleep'], cmd: ['1000000'], stopSignal: 'SIGKILL' }), work);
    const dir = podDirOf(server.dataDir, uid);
    // The supervisor has spawned `runc run`, and runc's init sits in the held cgroup.
    await eventually(() => fs.existsSync(path.join(dir, 'supervisor.log')) && /"container started"/.test(fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8')), 'runc run spawned', 60_000);
    await eventually(() => fs.readFileSync(path.join(leaf, 'cgroup.procs'), 'utf8').trim() !== '', "runc's init in the held cgroup", 30_000);
    await always(
      async () => {
        const state = readRunState(dir)?.containers[0]?.state;
        const pod = await getPod('held');
        const ok = state !== undefined && !('running' in state) && pod.status?.phase !== 'Running' && !pod.status?.containerStatuses?.[0]?.state?.running;
        return ok;
      },
      'the container not reported running while runc creates it',
      3000,
    );

    fs.writeFileSync(path.join(leaf, QUOTA), '-1');
    await eventually(async () => {
      const pod = await getPod('held');
      return pod.status?.phase === 'Running' && pod.status.containerStatuses?.[0]?.ready === true;
    }, 'the pod Running and ready once the quota is lifted', 60_000);
    // Once, not polled: Running means the container is there.
    const exec = await runKubectl(MODERN_KUBECTL, server.kubeconfig, path.join(work, 'cache'), ['exec', 'held', '--', 'cat', '/proc/1/cmdline']);
    assert.equal(exec.code, 0, exec.stderr);
    assert.deepEqual(exec.stdout.split('\0').filter(Boolean), ['/bin/sleep', '1000000']);

    const deleted = await request(server, 'DELETE', '/api/v1/namespaces/default/pods/held?gracePeriodSeconds=0');
    assert.ok(deleted.status === 200 || deleted.status === 202, deleted.text);
    await eventually(async () => (await request(server, 'GET', '/api/v1/namespaces/default/pods/held')).status === 404, 'the pod gone', 60_000);
  });
});
