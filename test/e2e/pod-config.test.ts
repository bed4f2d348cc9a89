import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent, waitForState } from '../helpers/agent.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { createObject, listEvents } from '../helpers/workloads.js';

/**
 * Pods use ConfigMaps and Secrets, end to end: a real server, a real agent, pods that are real
 * processes. The process itself prints what it sees (its environment, its mounted files), and the
 * test reads that from its log; a ConfigMap update must reach the mounted file while the pod runs;
 * missing objects keep a pod waiting in kubelet's words until they appear.
 */

const NODE = 'pc1';
/** How long a test waits for something the agent does within seconds: a ceiling for a loaded machine. */
const CEILING_MS = 60_000;
/** The bound a ConfigMap update must reach a mounted file within (Kubernetes allows about a minute). */
const UPDATE_CEILING_MS = 30_000;

const b64 = (text: string): string => Buffer.from(text).toString('base64');

interface ContainerStatus {
  state?: { waiting?: { reason?: string; message?: string }; running?: unknown };
}
interface RawPod {
  metadata: { uid: string };
  status?: { phase?: string; containerStatuses?: ContainerStatus[] };
}

describe('pods use ConfigMaps and Secrets', { concurrency: false }, () => {
  let server: ServerProcess;
  let agent: AgentProcess;
  let work: string;

  const kubectl = (args: string[]) => runKubectl(MODERN_KUBECTL, server.kubeconfig, path.join(work, 'kube-cache'), args);

  async function create(kind: 'configmaps' | 'secrets' | 'pods', body: Record<string, unknown>): Promise<void> {
    await createObject(server, `/api/v1/namespaces/default/${kind}`, body);
  }

  function configMap(name: string, data: Record<string, string>): Record<string, unknown> {
    return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data };
  }

  function pod(name: string, script: string, extra: Record<string, unknown> = {}, container: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name },
      spec: { nodeName: NODE, terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', script], ...container }], ...extra },
    };
  }

  async function getPod(name: string): Promise<RawPod> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}`);
    assert.equal(res.status, 200, res.text);
    return res.json as RawPod;
  }

  async function logOf(name: string): Promise<string> {
    const res = await request(server, 'GET', `/api/v1/namespaces/default/pods/${name}/log`);
    return res.status === 200 ? res.text : '';
  }

  /** The log once it holds `marker`. */
  function logWith(name: string, marker: string, timeoutMs = CEILING_MS): Promise<string> {
    return eventually(async () => {
      const log = await logOf(name);
      return log.includes(marker) ? log : undefined;
    }, `pod ${name} to print ${JSON.stringify(marker)}`, timeoutMs);
  }

  function podDir(uid: string): string {
    return path.join(agent.dataDir, 'agent', 'pods', uid);
  }

  before(async () => {
    work = tempDir('pod-config');
    server = await startServer({ args: ['--node-monitor-grace-period', '60s'] });
    agent = await startAgent({ server, name: NODE });
    await waitForState(server, NODE, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(work);
  });

  it('a process pod sees ConfigMap and Secret values through env and envFrom, and reads its mounted files', async (t) => {
    await create('configmaps', configMap('app-config', { mode: 'fast', 'app.conf': 'greeting=hello\n', '1badkey': 'skipped' }));
    await create('secrets', { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'db' }, data: { password: b64('s3cret-value') } });
    const script = [
      'echo "MODE=$MODE"',
      'echo "PASSWORD=$DB_PASSWORD"',
      'echo "APP_mode=$APP_mode"',
      'echo "BAD=$(env | grep -c "^1badkey=")"',
      'echo "PREFIXED=$(env | grep "^APP_1badkey=")"',
      'echo "ROOT=$DROVER_CONTAINER_ROOT"',
      'echo "CONF=$(cat "$DROVER_CONTAINER_ROOT/etc/app/app.conf")"',
      'echo "SECRETFILE=$(cat "$DROVER_CONTAINER_ROOT/etc/db/password")"',
      'echo shared > "$DROVER_CONTAINER_ROOT/scratch/note"',
      'echo "SCRATCH=$(cat "$DROVER_CONTAINER_ROOT/scratch/note")"',
      'echo END',
      'exec sleep 3600',
    ].join('; ');
    await create(
      'pods',
      pod(
        'reader',
        script,
        {
          volumes: [
            { name: 'config', configMap: { name: 'app-config', items: [{ key: 'app.conf', path: 'app.conf' }] } },
            { name: 'creds', secret: { secretName: 'db' } },
            { name: 'scratch', emptyDir: {} },
          ],
        },
        {
          env: [
            { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'app-config', key: 'mode' } } },
            { name: 'DB_PASSWORD', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
          ],
          envFrom: [{ configMapRef: { name: 'app-config' } }, { configMapRef: { name: 'app-config' }, prefix: 'APP_' }],
          volumeMounts: [
            { name: 'config', mountPath: '/etc/app', readOnly: true },
            { name: 'creds', mountPath: '/etc/db', readOnly: true },
            { name: 'scratch', mountPath: '/scratch' },
          ],
        },
      ),
    );
    const log = await logWith('reader', 'END');
    const { metadata } = await getPod('reader');
    const dir = podDir(metadata.uid);
    const lines = log.split('\n');
    assert.ok(lines.includes('MODE=fast'), log);
    assert.ok(lines.includes('PASSWORD=s3cret-value'), log);
    assert.ok(lines.includes('APP_mode=fast'), log);
    assert.ok(lines.includes('BAD=0'), `a key that is not a variable name is skipped:\n${log}`);
    assert.ok(lines.includes('PREFIXED=APP_1badkey=skipped'), `with a prefix it is one:\n${log}`);
    assert.ok(lines.includes(`ROOT=${path.join(dir, 'roots', 'main')}`), log);
    assert.ok(lines.includes('CONF=greeting=hello'), log);
    assert.ok(lines.includes('SECRETFILE=s3cret-value'), log);
    assert.ok(lines.includes('SCRATCH=shared'), log);

    // On disk: the atomic writer's layout, the modes, directories only the agent's user reads.
    const secretFile = path.join(dir, 'volumes', 'creds', 'password');
    assert.equal(fs.readlinkSync(secretFile), '..data/password');
    assert.equal(fs.statSync(secretFile).mode & 0o777, 0o400, 'a secret file is 0400 by default');
    assert.equal(fs.statSync(path.join(dir, 'volumes', 'config', 'app.conf')).mode & 0o777, 0o644);
    for (const sub of ['volumes', 'volumes/creds', 'volumes/creds/..data', 'roots/main']) {
      assert.equal(fs.statSync(path.join(dir, sub)).mode & 0o777, 0o700, sub);
    }
    assert.equal(fs.readFileSync(path.join(dir, 'volumes', 'scratch', 'note'), 'utf8'), 'shared\n', 'the emptyDir is the pod dir volume');

    // kubelet's warning about the skipped key, and the secret never in a log.
    const warning = await eventually(
      async () => (await listEvents(server)).find((e) => e.object === 'Pod/reader' && e.reason === 'InvalidEnvironmentVariableNames'),
      'the InvalidEnvironmentVariableNames event',
      CEILING_MS,
    );
    assert.equal(
      warning.message,
      'Keys [1badkey] from the EnvFrom configMap default/app-config were skipped since they are considered invalid environment variable names.',
    );
    const supervisorLog = fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8');
    for (const [who, text] of [['agent', agent.output()], ['server', server.output()], ['supervisor', supervisorLog]] as const) {
      assert.ok(!text.includes('s3cret-value'), `the ${who} logged the secret`);
    }
    t.diagnostic(`pod dir ${dir}`);
  });

  it('a ConfigMap update reaches the mounted file of a running pod within the bound; a subPath mount keeps its version', async (t) => {
    await create('configmaps', configMap('live', { 'level.conf': 'level=1' }));
    // The process itself reports what it reads, twice a second.
    const script = 'while :; do echo "NOW=$(cat "$DROVER_CONTAINER_ROOT/etc/live/level.conf") PINNED=$(cat "$DROVER_CONTAINER_ROOT/etc/pinned.conf")"; sleep 0.5; done';
    await create(
      'pods',
      pod('watcher', script, { volumes: [{ name: 'live', configMap: { name: 'live' } }] }, {
        volumeMounts: [
          { name: 'live', mountPath: '/etc/live' },
          { name: 'live', mountPath: '/etc/pinned.conf', subPath: 'level.conf' },
        ],
      }),
    );
    await logWith('watcher', 'NOW=level=1 PINNED=level=1');
    const { metadata } = await getPod('watcher');
    const file = path.join(podDir(metadata.uid), 'roots', 'main', 'etc', 'live', 'level.conf');
    const patched = await request(server, 'PATCH', '/api/v1/namespaces/default/configmaps/live', {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { data: { 'level.conf': 'level=2' } },
    });
    assert.equal(patched.status, 200, patched.text);
    const changedAt = Date.now();
    await eventually(() => fs.readFileSync(file, 'utf8') === 'level=2', 'the mounted file to hold the new value', UPDATE_CEILING_MS, 20);
    const ms = Date.now() - changedAt;
    t.diagnostic(`ConfigMap update reached the mounted file in ${ms} ms (ceiling ${UPDATE_CEILING_MS} ms)`);
    await logWith('watcher', 'NOW=level=2 PINNED=level=1', CEILING_MS);
    const log = await logOf('watcher');
    assert.ok(!log.includes('PINNED=level=2'), `the subPath mount does not follow updates:\n${log}`);
  });

  it('a missing ConfigMap gives CreateContainerConfigError, then the pod starts once it is created', async () => {
    await create(
      'pods',
      pod('late', 'echo "TOKEN=$TOKEN"; exec sleep 3600', {}, { env: [{ name: 'TOKEN', valueFrom: { configMapKeyRef: { name: 'late-config', key: 'token' } } }] }),
    );
    const waitingWith = (message: string) =>
      eventually(async () => {
        const waiting = (await getPod('late')).status?.containerStatuses?.[0]?.state?.waiting;
        return waiting?.reason === 'CreateContainerConfigError' && waiting.message === message ? waiting : undefined;
      }, `CreateContainerConfigError: ${message}`, CEILING_MS);
    await waitingWith('configmap "late-config" not found');
    const shown = await kubectl(['get', 'pod', 'late', '--no-headers']);
    assert.match(shown.stdout, /^late\s+0\/1\s+CreateContainerConfigError\s+0\s/, shown.stdout + shown.stderr);
    const failed = await eventually(
      async () => (await listEvents(server)).find((e) => e.object === 'Pod/late' && e.reason === 'Failed'),
      'the Failed event',
      CEILING_MS,
    );
    assert.equal(failed.message, 'Error: configmap "late-config" not found');
    assert.equal(failed.type, 'Warning');

    // The object without the key: still waiting, now for the key.
    await create('configmaps', configMap('late-config', { other: 'x' }));
    await waitingWith("couldn't find key token in ConfigMap default/late-config");
    const patched = await request(server, 'PATCH', '/api/v1/namespaces/default/configmaps/late-config', {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { data: { token: 'abc123' } },
    });
    assert.equal(patched.status, 200, patched.text);
    await logWith('late', 'TOKEN=abc123');
    await eventually(async () => (await getPod('late')).status?.phase === 'Running', 'the pod to be Running', CEILING_MS);
  });

  it('a missing volume source keeps the pod ContainerCreating with FailedMount until it appears', async () => {
    await create(
      'pods',
      pod('mounter', 'echo "FILE=$(cat "$DROVER_CONTAINER_ROOT/etc/s/key")"; exec sleep 3600', { volumes: [{ name: 's', secret: { secretName: 'later' } }] }, {
        volumeMounts: [{ name: 's', mountPath: '/etc/s' }],
      }),
    );
    const event = await eventually(
      async () => (await listEvents(server)).find((e) => e.object === 'Pod/mounter' && e.reason === 'FailedMount'),
      'the FailedMount event',
      CEILING_MS,
    );
    assert.equal(event.message, 'MountVolume.SetUp failed for volume "s" : secret "later" not found');
    const pending = await getPod('mounter');
    assert.equal(pending.status?.containerStatuses?.[0]?.state?.waiting?.reason, 'ContainerCreating');
    await create('secrets', { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'later' }, stringData: { key: 'arrived' } });
    await logWith('mounter', 'FILE=arrived');
  });

  it('optional refs: a missing optional ConfigMap, Secret or key leaves variables unset and volumes empty, and the pod runs', async () => {
    await create('configmaps', configMap('partial', { present: 'yes' }));
    await create(
      'pods',
      pod(
        'optional',
        'echo "A=[${A-unset}] B=[${B-unset}] C=[${C-unset}] P=[${P-unset}]"; echo "FILES=[$(ls "$DROVER_CONTAINER_ROOT/etc/opt")]"; echo "PART=[$(ls "$DROVER_CONTAINER_ROOT/etc/part")]"; exec sleep 3600',
        {
          volumes: [
            { name: 'opt', configMap: { name: 'no-such-config', optional: true } },
            { name: 'part', configMap: { name: 'partial', optional: true, items: [{ key: 'present', path: 'present' }, { key: 'absent', path: 'absent' }] } },
          ],
        },
        {
          env: [
            { name: 'A', valueFrom: { configMapKeyRef: { name: 'no-such-config', key: 'k', optional: true } } },
            { name: 'B', valueFrom: { secretKeyRef: { name: 'no-such-secret', key: 'k', optional: true } } },
            { name: 'C', valueFrom: { configMapKeyRef: { name: 'partial', key: 'absent', optional: true } } },
            { name: 'P', valueFrom: { configMapKeyRef: { name: 'partial', key: 'present' } } },
          ],
          envFrom: [{ secretRef: { name: 'no-such-secret', optional: true } }],
          volumeMounts: [
            { name: 'opt', mountPath: '/etc/opt' },
            { name: 'part', mountPath: '/etc/part' },
          ],
        },
      ),
    );
    const log = await logWith('optional', 'PART=');
    assert.ok(log.includes('A=[unset] B=[unset] C=[unset] P=[yes]'), log);
    assert.ok(log.includes('FILES=[]'), log);
    assert.ok(log.includes('PART=[present]'), log);
  });

  it('after an agent restart, a running pod keeps its files and gets the updates made while the agent was down', async () => {
    await create('configmaps', configMap('survivor', { 'v.conf': 'before' }));
    await create(
      'pods',
      pod('survivor', 'while :; do echo "V=$(cat "$DROVER_CONTAINER_ROOT/etc/s/v.conf")"; sleep 0.5; done', { volumes: [{ name: 's', configMap: { name: 'survivor' } }] }, {
        volumeMounts: [{ name: 's', mountPath: '/etc/s' }],
      }),
    );
    await logWith('survivor', 'V=before');
    const { metadata } = await getPod('survivor');
    const file = path.join(podDir(metadata.uid), 'roots', 'main', 'etc', 's', 'v.conf');
    const pidBefore = fs.readFileSync(path.join(podDir(metadata.uid), 'supervisor.pid'), 'utf8');
    await agent.stop('SIGKILL');
    const patched = await request(server, 'PATCH', '/api/v1/namespaces/default/configmaps/survivor', {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { data: { 'v.conf': 'after' } },
    });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(fs.readFileSync(file, 'utf8'), 'before', 'nobody updates the files while the agent is down');
    agent = await startAgent({ server, name: NODE, dataDir: agent.dataDir });
    await eventually(() => fs.readFileSync(file, 'utf8') === 'after', 'the restarted agent to bring the file up to date', CEILING_MS, 20);
    await logWith('survivor', 'V=after');
    assert.equal(fs.readFileSync(path.join(podDir(metadata.uid), 'supervisor.pid'), 'utf8'), pidBefore, 'the same supervisor: the pod was not restarted');
  });
});
