import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import parsePrometheusTextFormat, { type PrometheusFamily } from 'parse-prometheus-text-format';
import { pino } from 'pino';
import { CLUSTER_RECORD_KEY, checkClusterRecord } from '../../src/config/cluster-record.js';
import { ConfigError, resolveConfig } from '../../src/config/resolve.js';
import { openEtcdDatastore } from '../../src/datastore/etcd.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { startEtcd } from '../helpers/etcd.js';
import {
  agentClientCertificate,
  type AgentProcess,
  type CliResult,
  cleanupAgents,
  freePort,
  joinSecret,
  killRunningDrover,
  nodeCaPem,
  runDrover,
  startAgent,
} from '../helpers/agent.js';
import { droverFreeEnv, isolateFromDroverEnv } from '../helpers/config-env.js';
import { cleanup, eventually, request, serverArgs, type ServerProcess, startServer } from '../helpers/server.js';

/**
 * Cluster-wide configuration with real processes: the cluster record checked at every server
 * start, `drover cluster config set` on a live cluster, `drover config drift`, and per-node
 * `supervisor-metrics` (each node serves /metrics only when its own local setting says so).
 *
 * Servers and agents are spawned by the shared helpers (which inherit this process's
 * environment, scrubbed of DROVER_* below); refused starts are spawned here, with the same
 * arguments, so their exit code and stderr can be read.
 */

const EXIT_CONFIG = 78;
const ISO_TIME = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(?:\\.\\d+)?Z';

const { suiteDir, emptyConfig } = isolateFromDroverEnv('config-cluster-suite');

type RunResult = CliResult;

/** The environment of a CLI run, with DROVER_CONFIG_FILE the empty file unless `extra` says otherwise. */
function cleanEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  return droverFreeEnv({ DROVER_CONFIG_FILE: emptyConfig, ...extra });
}

function drover(args: string[], env: NodeJS.ProcessEnv = cleanEnv(), timeoutMs = 30_000): Promise<RunResult> {
  return runDrover(args, timeoutMs, { env, cwd: suiteDir });
}

/** Start `drover server` on a data dir and expect it to refuse with exit 78; returns stderr. */
async function expectRefused(dataDir: string, extra: string[], env: Record<string, string | undefined> = {}): Promise<string> {
  const result = await drover(serverArgs(dataDir, { args: extra }), cleanEnv(env), 30_000);
  assert.equal(result.code, EXIT_CONFIG, `expected exit 78, got ${result.code} (signal ${result.signal}); stderr:\n${result.stderr}\nstdout:\n${result.stdout}`);
  assert.ok(!result.stdout.includes('Drover server is ready'), 'a refused server must not become ready');
  return result.stderr;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

async function stopped(server: ServerProcess): Promise<void> {
  const code = await server.stop('SIGTERM');
  assert.equal(code, 0, `server exited ${code} on SIGTERM; output:\n${server.output()}`);
}

interface DriftRow {
  key: string;
  scope: 'cluster' | 'node';
  severity: 'error' | 'info';
  values: Record<string, string>;
}
interface DriftReport {
  nodes: { id: string; hash: string; publishedAt: string }[];
  rows: DriftRow[];
}

async function drift(server: ServerProcess): Promise<{ result: RunResult; report: DriftReport; text: RunResult }> {
  const result = await drover(['config', 'drift', '--kubeconfig', server.kubeconfig, '--json']);
  assert.ok(result.code === 0 || result.code === 1, `config drift --json exited ${result.code}: ${result.stderr}`);
  const text = await drover(['config', 'drift', '--kubeconfig', server.kubeconfig]);
  return { result, report: JSON.parse(result.stdout) as DriftReport, text };
}

interface EventObject {
  type: string;
  reason: string;
  message: string;
  involvedObject: { kind: string; name: string; namespace?: string };
}

/** The agent port from an agent's "agent is running" log line. */
function agentPort(agent: AgentProcess): number {
  const line = agent
    .output()
    .split('\n')
    .find((l) => l.includes('agent is running'));
  assert.ok(line, `agent ${agent.name} has not logged "agent is running"`);
  const port = (JSON.parse(line) as { agentPort?: number }).agentPort;
  assert.ok(typeof port === 'number' && port > 0, `no agentPort in ${line}`);
  return port;
}

const PROMETHEUS_TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const SAMPLE_LINE =
  /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*,?)?\})? (-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|NaN|[+-]Inf)(?: -?\d+)?$/;

/**
 * Parse Prometheus text exposition with parse-prometheus-text-format, and hold it to the format
 * strictly where that library is lenient: every line is a HELP/TYPE comment or a well-formed
 * sample whose value is a number, and every sample belongs to the family declared before it.
 */
function parseMetrics(text: string): Map<string, PrometheusFamily> {
  assert.ok(text.endsWith('\n'), 'exposition ends with a newline');
  const families = parsePrometheusTextFormat(text);
  const declared = new Map<string, string>();
  for (const [i, line] of text.split('\n').entries()) {
    if (line === '') continue;
    const where = `line ${i + 1}: ${line}`;
    if (line.startsWith('#')) {
      const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) ?(.*)$/.exec(line);
      assert.ok(meta, `malformed comment, ${where}`);
      if (meta[1] === 'TYPE') {
        assert.ok(PROMETHEUS_TYPES.has(meta[3]!), `unknown metric type, ${where}`);
        assert.ok(!declared.has(meta[2]!), `family declared twice, ${where}`);
        declared.set(meta[2]!, meta[3]!);
      }
      continue;
    }
    const sample = SAMPLE_LINE.exec(line);
    assert.ok(sample, `malformed sample, ${where}`);
    const name = sample[1]!;
    const family = [...declared].find(
      ([base, type]) =>
        name === base ||
        ((type === 'histogram' || type === 'summary') && (name === `${base}_sum` || name === `${base}_count`)) ||
        (type === 'histogram' && name === `${base}_bucket`),
    );
    assert.ok(family, `sample of an undeclared family, ${where}`);
  }
  const byName = new Map(families.map((f) => [f.name, f]));
  for (const name of declared.keys()) assert.ok(byName.has(name), `the parser lost family ${name}`);
  return byName;
}

function assertMetricsResponse(res: { status: number; headers: Record<string, string | string[] | undefined>; text: string }, what: string): Map<string, PrometheusFamily> {
  assert.equal(res.status, 200, `${what}: HTTP ${res.status} ${res.text}`);
  assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/, `${what}: content type`);
  return parseMetrics(res.text);
}

after(async () => {
  killRunningDrover();
  await cleanupAgents();
  await cleanup(suiteDir);
});

describe('the cluster record is checked at every server start', () => {
  it('a restart with a changed cluster-wide flag is refused (exit 78) naming key, values and sources; the original value works', async () => {
    const dataDir = path.join(suiteDir, 'restart-flag');
    const first = await startServer({ dataDir, args: ['--node-name', 'srv-restart'] });
    await stopped(first);

    const stderr = await expectRefused(dataDir, ['--node-name', 'srv-restart', '--node-monitor-grace-period', '6s']);
    assert.match(stderr, /^drover server: invalid configuration:$/m);
    assert.match(
      stderr,
      new RegExp(
        `node-monitor-grace-period: this server has 6s \\(flag:--node-monitor-grace-period\\), but the cluster has 4s \\(set by srv-restart at ${ISO_TIME}, default\\)`,
      ),
      stderr,
    );
    assert.ok(!stderr.includes('cluster-name:'), 'only the differing key is named');

    // The same value from the environment: the source says so.
    const byEnv = await expectRefused(dataDir, ['--node-name', 'srv-restart'], { DROVER_CLUSTER_NAME: 'other-cluster' });
    assert.match(
      byEnv,
      new RegExp(`cluster-name: this server has other-cluster \\(env:DROVER_CLUSTER_NAME\\), but the cluster has drover \\(set by srv-restart at ${ISO_TIME}, default\\)`),
      byEnv,
    );

    // The refused starts changed nothing: the original configuration starts, and so does an
    // explicit flag with the recorded value.
    const again = await startServer({ dataDir, args: ['--node-name', 'srv-restart'] });
    const record = await request(again, 'GET', '/drover/v1/cluster-config');
    assert.equal(record.status, 200, record.text);
    const values = (record.json as { values: Record<string, { value: string; source: string; setBy: string }> }).values;
    assert.equal(values['node-monitor-grace-period']?.value, '4s');
    assert.equal(values['node-monitor-grace-period']?.source, 'default');
    assert.equal(values['node-monitor-grace-period']?.setBy, 'srv-restart');
    await stopped(again);
    const explicit = await startServer({ dataDir, args: ['--node-name', 'srv-restart', '--node-monitor-grace-period', '4000ms'] });
    await stopped(explicit);
  });

  it('a config file changed between runs is checked the same way (source file:<path>:<line>)', async () => {
    const dataDir = path.join(suiteDir, 'restart-file');
    const config = path.join(suiteDir, 'restart-file.yaml');
    const write = (grace: string): void =>
      fs.writeFileSync(config, ['# cluster timings', 'node-lease-renew-interval: 1s', `node-monitor-grace-period: ${grace}`, ''].join('\n'));
    write('5s');
    const first = await startServer({ dataDir, args: ['-c', config, '--node-name', 'srv-file'] });
    await stopped(first);

    write('8s');
    const stderr = await expectRefused(dataDir, ['-c', config, '--node-name', 'srv-file']);
    assert.match(
      stderr,
      new RegExp(
        `node-monitor-grace-period: this server has 8s \\(file:${escape(config)}:3\\), but the cluster has 5s \\(set by srv-file at ${ISO_TIME}, file:${escape(config)}:3\\)`,
      ),
      stderr,
    );

    // A drop-in that restores the recorded value is enough.
    fs.mkdirSync(`${config}.d`);
    const dropIn = path.join(`${config}.d`, '10-grace.yaml');
    fs.writeFileSync(dropIn, 'node-monitor-grace-period: 5s\n');
    const restored = await startServer({ dataDir, args: ['-c', config, '--node-name', 'srv-file'] });
    await stopped(restored);

    // Without the file at all, the defaults differ from the record too.
    const defaults = await expectRefused(dataDir, ['--node-name', 'srv-file']);
    assert.match(defaults, /node-monitor-grace-period: this server has 4s \(default\), but the cluster has 5s/, defaults);
  });
});

/** Replace the cluster record in a stopped server's SQLite datastore; returns the old bytes. */
async function rewriteRecord(dataDir: string, raw: string | Buffer): Promise<Buffer> {
  const store = openSqliteDatastore(path.join(dataDir, 'server', 'db', 'state.db'));
  try {
    const kv = await store.get(CLUSTER_RECORD_KEY);
    assert.ok(kv, 'the first start wrote the cluster record');
    await store.update(CLUSTER_RECORD_KEY, Buffer.from(raw), kv.modRevision);
    return kv.value;
  } finally {
    await store.close();
  }
}

describe('the cluster-record check never fails open', () => {
  it('a corrupt record refuses the start with exit 78 naming the record: no start with unchecked values, no endless wait', async () => {
    const dataDir = path.join(suiteDir, 'corrupt-record');
    const first = await startServer({ dataDir, args: ['--node-name', 'srv-corrupt'] });
    await stopped(first);

    const cases: { what: string; raw: string; reason: RegExp }[] = [
      { what: 'not JSON', raw: '{"values": {"node-monitor-grace-period"', reason: /is corrupt: not JSON/ },
      { what: 'JSON null', raw: 'null', reason: /is corrupt: it has no "values" object/ },
      // Read leniently, this one looks like a record with nothing recorded: every value would pass.
      { what: 'values is an array', raw: '{"values":[]}', reason: /is corrupt: it has no "values" object/ },
      {
        what: 'an entry that is not a recorded value',
        raw: '{"values":{"node-monitor-grace-period":"4s"}}',
        reason: /is corrupt: the entry for "node-monitor-grace-period" lacks a valid value, setBy, setAt, source/,
      },
    ];
    let original: Buffer | undefined;
    for (const { what, raw, reason } of cases) {
      const previous = await rewriteRecord(dataDir, raw);
      original ??= previous;
      // A value that differs from the recorded 4s: a check that failed open would let it start.
      const stderr = await expectRefused(dataDir, ['--node-name', 'srv-corrupt', '--node-monitor-grace-period', '6s']);
      assert.match(stderr, /the cluster record \(\/drover\/cluster\/config in the datastore\) is corrupt/, `${what}: ${stderr}`);
      assert.match(stderr, reason, `${what}: ${stderr}`);
      assert.match(stderr, /so this server does not start/, `${what}: ${stderr}`);
    }
    // The recorded value itself is refused too: nothing can be checked against a corrupt record.
    const same = await expectRefused(dataDir, ['--node-name', 'srv-corrupt']);
    assert.match(same, /is corrupt/, same);

    // The refusals were about the record alone: restored, it checks and starts as before.
    await rewriteRecord(dataDir, original!);
    const mismatch = await expectRefused(dataDir, ['--node-name', 'srv-corrupt', '--node-monitor-grace-period', '6s']);
    assert.match(mismatch, /node-monitor-grace-period: this server has 6s/, mismatch);
    await stopped(await startServer({ dataDir, args: ['--node-name', 'srv-corrupt'] }));
  });

  it('while the datastore cannot answer, the check waits (saying why) and neither passes nor fails; once it answers, a mismatch is refused and a match passes', async () => {
    const etcd = await startEtcd();
    // Short request deadlines, so reads against the frozen etcd fail (rather than hang) and the
    // check goes round its retry loop.
    // The open's own reachability check runs under the same 500 ms deadline, which a loaded machine
    // can miss (seen at load 28): try again until it answers, within a ceiling.
    const store = await eventually(
      () => openEtcdDatastore({ endpoints: [etcd.endpoint], requestTimeoutMs: 500 }).catch(() => undefined),
      'etcd answers within 500 ms',
      60_000,
      200,
    );
    const logs: { msg: string; reason?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as { msg: string }) });
    const config = (flags: Record<string, string>) => resolveConfig({ command: 'server', flags, env: { DROVER_CONFIG_FILE: emptyConfig } });
    let frozen = false;
    try {
      await checkClusterRecord(store, config({}), 'srv-etcd', logger);
      process.kill(etcd.pid, 'SIGSTOP');
      frozen = true;
      const outcomes: Record<string, string> = {};
      const settle = (name: string, check: Promise<unknown>): Promise<unknown> =>
        check.then(
          () => (outcomes[name] = 'passed'),
          (error: unknown) => {
            outcomes[name] = 'failed';
            return error;
          },
        );
      const differing = settle('differing', checkClusterRecord(store, config({ 'node-monitor-grace-period': '6s' }), 'srv-late', logger, 100));
      const matching = settle('matching', checkClusterRecord(store, config({}), 'srv-same', logger, 100));
      const waitLine = 'cannot read the cluster record yet; waiting (the check is never skipped)';
      // Until both checks say they wait, or one of them settles (which must not happen).
      await eventually(
        () => Object.keys(outcomes).length > 0 || logs.filter((l) => l.msg === waitLine).length >= 2,
        'both checks to log that they wait for the datastore',
        30_000,
      );
      assert.deepEqual(outcomes, {}, 'neither check passed nor failed while the datastore could not answer');
      assert.ok(logs.filter((l) => l.msg === waitLine).every((l) => l.reason), 'the wait says why');

      process.kill(etcd.pid, 'SIGCONT');
      frozen = false;
      const error = await differing;
      assert.ok(error instanceof ConfigError, `the differing value is refused once the record can be read: ${String(error)}`);
      assert.match(error.message, /node-monitor-grace-period: this server has 6s \(flag:--node-monitor-grace-period\), but the cluster has 4s \(set by srv-etcd/);
      await matching;
      assert.deepEqual(outcomes, { differing: 'failed', matching: 'passed' });
    } finally {
      if (frozen) process.kill(etcd.pid, 'SIGCONT');
      await store.close();
      await etcd.stop();
    }
  });
});

describe('drover cluster config set on a live cluster', () => {
  const dataDir = path.join(suiteDir, 'live-set');
  let server: ServerProcess;

  it('sets the value, records a ClusterConfigChanged event, and the running server shows as drifted', async () => {
    server = await startServer({ dataDir, args: ['--node-name', 'srv-live'] });
    const before = await drift(server);
    assert.equal(before.result.code, 0, before.result.stdout);
    assert.deepEqual(before.report.rows, []);
    assert.match(before.text.stdout, /^no drift: 1 node configuration\(s\) agree$/m);

    const set = await drover(['cluster', 'config', 'set', 'node-monitor-grace-period=6s', '--kubeconfig', server.kubeconfig]);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /^node-monitor-grace-period: 4s -> 6s$/m);

    const event = await eventually(async () => {
      const res = await request(server, 'GET', '/api/v1/namespaces/kube-system/events');
      assert.equal(res.status, 200, res.text);
      return (res.json as { items: EventObject[] }).items.find((e) => e.reason === 'ClusterConfigChanged');
    }, 'a ClusterConfigChanged event');
    assert.equal(event.type, 'Normal');
    assert.match(event.message, /node-monitor-grace-period changed from 4s to 6s/);

    const record = await request(server, 'GET', '/drover/v1/cluster-config');
    const recorded = (record.json as { values: Record<string, { value: string; source: string; previous?: { value: string } }> }).values[
      'node-monitor-grace-period'
    ];
    assert.equal(recorded?.value, '6s');
    assert.equal(recorded?.source, 'drover cluster config set');
    assert.equal(recorded?.previous?.value, '4s');

    const after = await drift(server);
    assert.equal(after.result.code, 1, `drift must exit 1 on cluster-wide drift: ${after.result.stdout}`);
    const row = after.report.rows.find((r) => r.key === 'node-monitor-grace-period');
    assert.deepEqual(row, {
      key: 'node-monitor-grace-period',
      scope: 'cluster',
      severity: 'error',
      values: { 'srv-live/server': '4s', 'cluster record': '6s' },
    });
    assert.equal(after.text.code, 1);
    assert.match(after.text.stdout, /^SEVERITY\s+KEY\s+SCOPE\s+SRV-LIVE\/SERVER\s+CLUSTER RECORD$/m, after.text.stdout);
    assert.match(after.text.stdout, /^ERROR\s+node-monitor-grace-period\s+cluster\s+4s\s+6s$/m, after.text.stdout);
  });

  it('invalid sets are refused with exit 78 and change nothing', async () => {
    const cases: [string, RegExp][] = [
      ['https-listen-port=7443', /"https-listen-port" is not a cluster-wide setting; cluster-wide settings are: cluster-name, node-lease-renew-interval, node-monitor-grace-period/],
      ['no-such-key=1', /"no-such-key" is not a cluster-wide setting/],
      ['node-monitor-grace-period=2s', /node-monitor-grace-period \(2s\) must be at least 3 × node-lease-renew-interval \(1s\)/],
      ['node-lease-renew-interval=3s', /node-monitor-grace-period \(6s\) must be at least 3 × node-lease-renew-interval \(3s\)/],
      ['node-monitor-grace-period=soon', /invalid duration "soon"/],
      ['node-monitor-grace-period', /expected KEY=VALUE/],
    ];
    const wrong: string[] = [];
    for (const [assignment, message] of cases) {
      const result = await drover(['cluster', 'config', 'set', assignment, '--kubeconfig', server.kubeconfig]);
      if (result.code !== EXIT_CONFIG || !message.test(result.stderr)) {
        wrong.push(`${assignment}: exit ${result.code} (want ${EXIT_CONFIG}), stderr ${JSON.stringify(result.stderr)} (want ${message})`);
      }
    }
    const record = await request(server, 'GET', '/drover/v1/cluster-config');
    const values = (record.json as { values: Record<string, { value: string }> }).values;
    assert.equal(values['node-monitor-grace-period']?.value, '6s');
    assert.equal(values['node-lease-renew-interval']?.value, '1s');
    assert.equal(values['cluster-name']?.value, 'drover');
    assert.deepEqual(wrong, [], `invalid sets not refused as configuration errors:\n${wrong.join('\n')}`);
  });

  it('a restart with the old value is refused saying the record changed, when and to what; with the new value it starts and drift is clean', async () => {
    await stopped(server);
    const stderr = await expectRefused(dataDir, ['--node-name', 'srv-live']);
    assert.match(
      stderr,
      new RegExp(
        `node-monitor-grace-period: this server has 4s \\(default\\), but the cluster has 6s \\(set by [^,]+ at ${ISO_TIME}, drover cluster config set\\); ` +
          `the cluster changed it from 4s to 6s at ${ISO_TIME}, so update this server's config`,
      ),
      stderr,
    );

    server = await startServer({ dataDir, args: ['--node-name', 'srv-live', '--node-monitor-grace-period', '6s'] });
    const clean = await drift(server);
    assert.equal(clean.result.code, 0, clean.result.stdout);
    assert.deepEqual(clean.report.rows, []);
    assert.equal(clean.text.code, 0);
    assert.match(clean.text.stdout, /^no drift/m);
    await stopped(server);
  });
});

describe('supervisor-metrics is per node, from each node’s own local config', () => {
  const dataDir = path.join(suiteDir, 'metrics');
  const configB = path.join(suiteDir, 'agent-b.yaml');
  let port: number;
  let server: ServerProcess;
  let agentA: AgentProcess;
  let agentB: AgentProcess;
  let portA: number;
  let portB: number;
  let secret: string;

  /** GET on an agent's endpoint, with a client certificate or a bearer token (or neither). */
  const agentGet = (agentPortNumber: number, credential: { cert: string; key: string } | string | null, urlPath = '/metrics') =>
    request({ port: agentPortNumber, token: '', caPem: nodeCaPem(server) }, 'GET', urlPath, {
      token: typeof credential === 'string' ? credential : null,
      ...(credential && typeof credential === 'object' ? credential : {}),
      agent: false,
    });

  it('only agent B (supervisor-metrics: true in its local file) serves /metrics; A and the server answer 404', async () => {
    port = await freePort();
    server = await startServer({ dataDir, args: ['--node-name', 'srv-metrics', '--https-listen-port', String(port)] });
    assert.equal(server.port, port);
    secret = joinSecret(server);
    fs.writeFileSync(configB, '# agent B only\nsupervisor-metrics: true\n');
    agentA = await startAgent({ server, name: 'cfg-agent-a', args: ['-c', emptyConfig] });
    agentB = await startAgent({ server, name: 'cfg-agent-b', args: ['-c', configB] });
    portA = agentPort(agentA);
    portB = agentPort(agentB);

    const admin = await agentClientCertificate(server, 'admin');
    const b = await agentGet(portB, admin);
    const families = assertMetricsResponse(b, 'agent B /metrics');
    const renewal = families.get('drover_agent_lease_renewal_duration_seconds');
    assert.ok(renewal, `agent B's metrics lack drover_agent_lease_renewal_duration_seconds:\n${b.text}`);
    assert.equal(renewal.type, 'HISTOGRAM');
    assert.match(b.text, /^drover_agent_lease_renewal_duration_seconds_count\{result="ok"\} [1-9]\d*$/m);
    assert.ok(!b.text.includes('drover_apiserver_'), 'the agent serves only its own series');

    const a = await agentGet(portA, admin);
    assert.equal(a.status, 404, `agent A /metrics: HTTP ${a.status} ${a.text}`);
    assert.equal((await agentGet(portA, admin, '/healthz')).status, 200, 'agent A is up');

    // The agent port wants a client certificate from the client CA: no token opens it, not even
    // the join secret, and a certificate of a user without system:masters does not either.
    assert.equal((await agentGet(portB, null)).status, 401);
    assert.equal((await agentGet(portB, 'not-the-secret')).status, 401);
    assert.equal((await agentGet(portB, secret)).status, 401, 'the join secret is not the agent port’s credential');
    assert.equal((await agentGet(portB, server.token)).status, 401, 'the admin token is not the agent port’s credential');
    assert.equal((await agentGet(portB, await agentClientCertificate(server, 'user'))).status, 401, 'a plain user certificate');

    const s = await request(server, 'GET', '/metrics');
    assert.equal(s.status, 404, `server /metrics with supervisor-metrics off: HTTP ${s.status} ${s.text}`);
  });

  it('config drift lists node-scoped differences as INFO rows and exits 0 when only those differ', async () => {
    const { result, report, text } = await eventually(async () => {
      const d = await drift(server);
      return d.report.nodes.length === 3 ? d : undefined;
    }, 'three published node configurations (server, agent A, agent B)');
    assert.equal(result.code, 0, `only node-scoped drift: exit 0; got ${result.code}\n${result.stdout}`);
    assert.deepEqual(
      report.nodes.map((n) => n.id).sort(),
      ['cfg-agent-a/agent', 'cfg-agent-b/agent', 'srv-metrics/server'],
    );
    assert.ok(report.rows.length > 0);
    for (const row of report.rows) {
      assert.equal(row.scope, 'node', JSON.stringify(row));
      assert.equal(row.severity, 'info', JSON.stringify(row));
    }
    const metricsRow = report.rows.find((r) => r.key === 'supervisor-metrics');
    assert.ok(metricsRow, JSON.stringify(report.rows));
    assert.equal(metricsRow.values['cfg-agent-a/agent'], 'false');
    assert.equal(metricsRow.values['cfg-agent-b/agent'], 'true');
    assert.equal(metricsRow.values['srv-metrics/server'], 'false');
    const nameRow = report.rows.find((r) => r.key === 'node-name');
    assert.deepEqual(nameRow?.values, { 'cfg-agent-a/agent': 'cfg-agent-a', 'cfg-agent-b/agent': 'cfg-agent-b', 'srv-metrics/server': 'srv-metrics' });
    assert.equal(report.rows.find((r) => r.key === 'token'), undefined, 'secrets are not compared');
    assert.ok(!result.stdout.includes(secret), 'the join secret is not published');

    assert.equal(text.code, 0);
    assert.match(text.stdout, /^INFO\s+supervisor-metrics\s+node\s/m, text.stdout);
    assert.doesNotMatch(text.stdout, /^ERROR/m);
  });

  it('a server restarted with supervisor-metrics true serves /metrics; the agents are unchanged', async () => {
    await stopped(server);
    server = await startServer({ dataDir, args: ['--node-name', 'srv-metrics', '--https-listen-port', String(port), '--supervisor-metrics', 'true'] });

    // The agents come back to the restarted server (same port) and keep renewing.
    const wanted = [
      'drover_apiserver_requests_total',
      'drover_datastore_operation_duration_seconds',
      'drover_nodes',
      'drover_config_drift_keys',
      'drover_node_detection_seconds',
    ];
    const families = await eventually(
      async () => {
        const res = await request(server, 'GET', '/metrics');
        const parsed = assertMetricsResponse(res, 'server /metrics');
        const nodes = parsed.get('drover_nodes');
        const total = (nodes?.metrics ?? []).reduce((sum, m) => sum + Number(m.value), 0);
        // The counters start at zero after the restart: wait until the agents' renewals arrive.
        const counted = (parsed.get('drover_apiserver_requests_total')?.metrics ?? []).some((m) => Number(m.value) > 0);
        return wanted.every((name) => parsed.has(name)) && total === 2 && counted ? parsed : undefined;
      },
      `server metrics with ${wanted.join(', ')} and two nodes`,
      30_000,
      250,
    );
    assert.equal(families.get('drover_apiserver_requests_total')?.type, 'COUNTER');
    assert.equal(families.get('drover_datastore_operation_duration_seconds')?.type, 'HISTOGRAM');
    assert.equal(families.get('drover_node_detection_seconds')?.type, 'HISTOGRAM');
    assert.equal(families.get('drover_nodes')?.type, 'GAUGE');
    const driftKeys = families.get('drover_config_drift_keys')!;
    assert.equal(driftKeys.type, 'GAUGE');
    const bySeverity = Object.fromEntries(driftKeys.metrics.map((m) => [m.labels?.severity, Number(m.value)]));
    assert.equal(bySeverity.error, 0, JSON.stringify(driftKeys));
    assert.ok((bySeverity.info ?? 0) > 0, JSON.stringify(driftKeys));
    assert.ok(
      families.get('drover_apiserver_requests_total')!.metrics.some((m) => Number(m.value) > 0),
      'some API requests were counted',
    );

    // Authentication: no token or a bad token is 401 on the server.
    assert.equal((await request(server, 'GET', '/metrics', { token: null })).status, 401);
    assert.equal((await request(server, 'GET', '/metrics', { token: 'not-a-token' })).status, 401);

    // The agents are unchanged: the server's setting is its own.
    const admin = await agentClientCertificate(server, 'admin');
    assert.equal((await agentGet(portA, admin)).status, 404, 'agent A still has no /metrics');
    assertMetricsResponse(await agentGet(portB, admin), 'agent B /metrics after the server restart');

    // The server's published configuration now says true; still no cluster-wide drift.
    const d = await eventually(async () => {
      const r = await drift(server);
      return r.report.rows.find((row) => row.key === 'supervisor-metrics')?.values['srv-metrics/server'] === 'true' ? r : undefined;
    }, 'the restarted server’s publication');
    assert.equal(d.result.code, 0);

    await agentA.stop();
    await agentB.stop();
    await stopped(server);
  });
});
