import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { INHERITED_PRIORITY_ENV } from '../../src/agent/pods/container-process.js';
import { DEFAULT_PATH } from '../../src/agent/pods/environment.js';
import { type AgentProcess, cleanupAgents, freePort, startAgent, waitForState } from '../helpers/agent.js';
import { api, type ClusterServer, clusterTempDir, cleanupCluster, dumpLogs, etcdPidOf, file, report, startClusterServer, url } from '../helpers/cluster.js';
import { eventually, tempDir } from '../helpers/server.js';

/**
 * Secrets stay off command lines and out of pods, on real processes: a `--cluster-init` server
 * (managed etcd child, embedded agent) given its token in DROVER_TOKEN, and a standalone agent
 * given it with --token-file, each running a pod that prints its environment. Then every process
 * of both trees, read from /proc:
 *
 *   - no command line (world-readable: ps, /proc/<pid>/cmdline) holds a secret: the join secret,
 *     the join and agent tokens, the admin token, a node password, or any long hex string (the
 *     node credentials live in the agents' memory only, and are 64 hex digits);
 *   - a pod supervisor's environment is PATH alone (and, for one started as a spare, the agent's
 *     CPU priority, a number), and a container's is PATH, HOME and the pod's
 *     own variables (DROVER_CONTAINER_ROOT, the root of its volume mounts, among them): nothing of
 *     the agent's (its DROVER_TOKEN, a marker variable);
 *   - the etcd child's environment has none of the server's DROVER_* settings.
 *
 * Needs the `etcd` binary (Debian: etcd-server) and `npm run build`.
 */

const MARKER = 'ARGV_TEST_MARKER';
const MARKER_VALUE = `marker-${randomBytes(6).toString('hex')}`;
/** A node credential is 32 random bytes in hex; a node password 16. Nothing on a command line is that long in hex. */
const LONG_HEX = /[0-9a-f]{32,}/i;

let failed = false;
const servers: ClusterServer[] = [];
let agent: AgentProcess | undefined;

after(async () => {
  if (failed) {
    const logs = dumpLogs('secrets-argv', servers, agent ? [{ name: 'agent', output: agent.output() }] : []);
    process.stderr.write(`secrets-argv: logs kept in ${logs}\n`);
  }
  await cleanupAgents();
  await cleanupCluster();
});

/** The runner's environment without DROVER_* variables, plus `extra`. */
function envWith(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('DROVER_')) env[key] = value;
  return { ...env, ...extra };
}

/** pid → parent pid, for every process now. */
function parents(): Map<number, number> {
  const table = new Map<number, number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces): state, ppid, ...
      table.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  return table;
}

/** The roots and every process below them. */
function tree(roots: number[]): number[] {
  const table = parents();
  const found = new Set(roots);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of table) {
      if (found.has(ppid) && !found.has(pid)) {
        found.add(pid);
        grew = true;
      }
    }
  }
  return [...found].sort((a, b) => a - b);
}

function readProc(pid: number, what: 'cmdline' | 'environ'): string[] | undefined {
  try {
    return fs.readFileSync(`/proc/${pid}/${what}`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return undefined;
  }
}

function environ(pid: number): Map<string, string> {
  const entries = readProc(pid, 'environ') ?? [];
  return new Map(entries.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

const podLines = (name: string, node: string): Record<string, unknown> => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, labels: { app: 'secrets-argv' } },
  spec: {
    nodeName: node,
    containers: [
      {
        name: 'env',
        image: 'busybox',
        command: ['sh', '-c', 'env; echo END-OF-ENV; exec sleep 3600'],
        env: [
          { name: 'POD_OWN', value: 'own-value' },
          { name: 'POD_UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
        ],
      },
    ],
  },
});

describe('secrets on command lines and in pods', () => {
  it('no process of a server (managed etcd, pods) or an agent (pods) shows a secret; pods get only their own environment', async (t) => {
    try {
      const secret = randomBytes(24).toString('hex');
      const s1: ClusterServer = {
        name: 'argv-s1',
        ip: '127.0.0.1',
        dataDir: clusterTempDir('argv-s1'),
        httpsPort: await freePort(),
        clientPort: await freePort(),
        peerPort: await freePort(),
        runs: [],
      };
      servers.push(s1);
      // The first server of the cluster takes the bare secret from its environment as the join secret.
      await startClusterServer(
        s1,
        [
          'server', '--cluster-init',
          '--data-dir', s1.dataDir,
          '--https-listen-port', String(s1.httpsPort),
          '--bind-address', s1.ip,
          '--node-ip', s1.ip,
          '--node-name', s1.name,
          '--agent-port', '0',
          '--etcd-client-port', String(s1.clientPort!),
          '--etcd-peer-port', String(s1.peerPort!),
        ],
        undefined,
        envWith({ DROVER_TOKEN: secret, [MARKER]: MARKER_VALUE }),
      );
      const joinToken = file(s1, 'token').trim();
      assert.ok(joinToken.endsWith(`:server:${secret}`), `the join token is not made from DROVER_TOKEN: ${joinToken}`);

      // The agent reads the token from a private file.
      const tokenFile = path.join(tempDir('argv-token'), 'token');
      fs.writeFileSync(tokenFile, `${joinToken}\n`, { mode: 0o600 });
      agent = await startAgent({
        server: { url: url(s1), dataDir: s1.dataDir },
        name: 'argv-agent',
        tokenFile,
        env: envWith({ [MARKER]: MARKER_VALUE }),
      });
      const target = { port: s1.httpsPort, token: file(s1, 'server/cred/admin.token').trim(), caPem: file(s1, 'server/tls/server-ca.crt') };
      await waitForState(target, s1.name, 'Ready', 60_000);
      await waitForState(target, 'argv-agent', 'Ready', 60_000);

      const pods = [
        { name: 'env-on-server', node: s1.name },
        { name: 'env-on-agent', node: 'argv-agent' },
      ];
      for (const pod of pods) {
        const res = await api(s1, 'POST', '/api/v1/namespaces/default/pods', { body: podLines(pod.name, pod.node) });
        assert.equal(res.status, 201, `create pod ${pod.name}: ${res.text}`);
      }

      // What each pod printed, through the API (kubectl logs).
      for (const pod of pods) {
        const uid = ((await api(s1, 'GET', `/api/v1/namespaces/default/pods/${pod.name}`)).json as { metadata: { uid: string } }).metadata.uid;
        const log = await eventually(
          async () => {
            const res = await api(s1, 'GET', `/api/v1/namespaces/default/pods/${pod.name}/log`);
            return res.status === 200 && res.text.includes('END-OF-ENV') ? res.text : undefined;
          },
          `the log of ${pod.name}`,
          60_000,
          200,
        );
        const printed = new Map(
          log
            .slice(0, log.indexOf('END-OF-ENV'))
            .split('\n')
            .filter((l) => l.includes('='))
            .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
        );
        t.diagnostic(`${pod.name} printed: ${[...printed.keys()].sort().join(' ')}`);
        assert.ok(!log.includes(secret), `${pod.name} saw the join secret:\n${log}`);
        assert.ok(!log.includes(MARKER_VALUE) && !printed.has(MARKER), `${pod.name} saw the agent's marker variable:\n${log}`);
        // The one DROVER_ variable a pod has is its own: a process pod's root for its volume mounts
        // (every pod has one, kube-api-access), inside its own pod dir.
        assert.deepEqual(
          [...printed.keys()].filter((k) => k.startsWith('DROVER_') && k !== 'DROVER_CONTAINER_ROOT'),
          [],
          `${pod.name} saw DROVER_ variables:\n${log}`,
        );
        const root = printed.get('DROVER_CONTAINER_ROOT');
        assert.ok(root === undefined || root.includes(uid), `${pod.name}'s DROVER_CONTAINER_ROOT is its own: ${root}`);
        assert.equal(printed.get('POD_OWN'), 'own-value');
        assert.equal(printed.get('POD_UID'), uid);
        assert.equal(printed.get('HOSTNAME'), pod.name);
        assert.equal(printed.get('PATH'), DEFAULT_PATH);
      }

      // Every process of both trees, now that all of them run.
      const etcdPid = etcdPidOf(s1);
      assert.ok(etcdPid !== undefined, 'no etcd.pid');
      const pids = tree([s1.proc!.pid, agent.pid]);
      const cmdlines = new Map(pids.flatMap((pid) => {
        const argv = readProc(pid, 'cmdline');
        return argv ? [[pid, argv] as const] : [];
      }));
      // Pod supervisors by working dir (a pod's dir): each agent also keeps an idle spare (its dir
      // under agent/spare-supervisor/), and a spare that took a pod keeps its `--spare` argv.
      const cwdOf = (pid: number): string => {
        try {
          return fs.readlinkSync(`/proc/${pid}/cwd`);
        } catch {
          return '';
        }
      };
      const supervisors = [...cmdlines]
        .filter(([pid, argv]) => argv.some((a) => a.includes('supervisor-main')) && cwdOf(pid).includes('/agent/pods/'))
        .map(([pid]) => pid);
      const containers = [...cmdlines].filter(([, argv]) => argv[0] === 'sleep' && argv[1] === '3600').map(([pid]) => pid);
      report(t, [...cmdlines].map(([pid, argv]) => `${pid}: ${argv.join(' ')}`).join('\n'));
      // The check covers what it claims: the server, its etcd, the agent, two supervisors, two containers.
      assert.ok(cmdlines.has(etcdPid!), `the etcd child ${etcdPid} is not under the server`);
      assert.equal(supervisors.length, 2, 'two pod supervisors');
      assert.equal(containers.length, 2, 'two containers');

      const agentToken = file(s1, 'agent-token').trim();
      const secrets: [string, string][] = [
        ['the join secret', secret],
        ['the join token', joinToken],
        ['the agent token', agentToken.slice(agentToken.lastIndexOf(':') + 1)],
        ['the admin token', file(s1, 'server/cred/admin.token').trim()],
        ['the server node’s password', file(s1, 'agent/node-password').trim()],
        ['the agent’s node password', fs.readFileSync(path.join(agent.dataDir, 'agent/node-password'), 'utf8').trim()],
      ];
      for (const [pid, argv] of cmdlines) {
        const line = argv.join(' ');
        for (const [what, value] of secrets) assert.ok(!line.includes(value), `${what} is on the command line of ${pid}: ${line}`);
        assert.doesNotMatch(line, LONG_HEX, `a long hex string (a credential?) is on the command line of ${pid}: ${line}`);
      }

      // Environments (readable by the same user only, but still no place for the agent's secrets).
      for (const pid of supervisors) {
        // A supervisor started as the agent's spare also has the agent's CPU priority (a number),
        // for its containers (src/agent/pods/supervisor-process.ts).
        const env = [...environ(pid)].filter(([name, value]) => !(name === INHERITED_PRIORITY_ENV && /^-?\d+$/.test(value)));
        assert.deepEqual(env, [['PATH', DEFAULT_PATH]], `supervisor ${pid}'s environment`);
      }
      for (const pid of containers) {
        // What the supervisor gave `sh`, which exported its own PWD (and a bash would add SHLVL and _) before exec.
        const names = [...environ(pid).keys()].filter((k) => !['PWD', 'SHLVL', '_'].includes(k)).sort();
        // DROVER_CONTAINER_ROOT is the pod's own: where its volume mounts are (every pod has kube-api-access).
        assert.deepEqual(names, ['DROVER_CONTAINER_ROOT', 'HOME', 'HOSTNAME', 'PATH', 'POD_OWN', 'POD_UID'], `container ${pid}'s environment`);
      }
      const etcdEnv = environ(etcdPid!);
      assert.ok(etcdEnv.size > 0, 'cannot read the etcd child’s environment');
      assert.deepEqual([...etcdEnv.keys()].filter((k) => k.startsWith('DROVER_')), [], 'the etcd child got DROVER_ variables');
      assert.ok(![...etcdEnv.values()].some((v) => v.includes(secret)), 'the etcd child’s environment holds the join secret');
    } catch (error) {
      failed = true;
      throw error;
    }
  });
});
