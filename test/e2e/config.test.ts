import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type CliResult, cleanupAgents, joinToken, killRunningDrover, runDrover, startAgent, waitForState } from '../helpers/agent.js';
import { droverFreeEnv, isolateFromDroverEnv } from '../helpers/config-env.js';
import { cleanup, DROVER_BIN, serverArgs, startServer } from '../helpers/server.js';
import { envName, settingsFor } from '../../src/config/schema.js';

/**
 * Configuration from the outside: `drover config show --json` (the same resolver `drover server`
 * and `drover agent` use) for precedence and provenance of every source, and `drover server` /
 * `drover agent` themselves for what bad input does (exit 78, a precise message, nothing written)
 * and for a config file shared between a server and an agent.
 *
 * Every CLI run gets a controlled environment: no DROVER_* variable leaks in from the test
 * runner, and DROVER_CONFIG_FILE names a temp file unless the test is about the default.
 */

const EXIT_CONFIG = 78;
const DEFAULT_CONFIG_FILE = '/etc/drover/config.yaml';

const { suiteDir, emptyConfig } = isolateFromDroverEnv('config-suite');

type RunResult = CliResult;

/** The environment of a CLI run: no DROVER_CONFIG_FILE unless `extra` names one. */
const cleanEnv = droverFreeEnv;

function drover(args: string[], env: NodeJS.ProcessEnv, options: { cwd?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  return runDrover(args, options.timeoutMs ?? 30_000, { env, cwd: options.cwd ?? suiteDir });
}

interface ShownSetting {
  key: string;
  value: string;
  source: string;
  scope: string;
}

interface Shown {
  command: string;
  configFile: string;
  filesRead: string[];
  warnings: string[];
  settings: ShownSetting[];
  get(key: string): ShownSetting;
}

/** `drover config show --json` with a controlled environment; asserts success. */
async function show(
  args: string[],
  env: Record<string, string | undefined> = {},
  options: { cwd?: string } = {},
): Promise<Shown> {
  const result = await drover(['config', 'show', '--json', ...args], cleanEnv(env), options);
  assert.equal(result.code, 0, `config show ${args.join(' ')} exited ${result.code}; stderr:\n${result.stderr}`);
  const parsed = JSON.parse(result.stdout) as Omit<Shown, 'get'>;
  return {
    ...parsed,
    get(key: string): ShownSetting {
      const found = parsed.settings.find((s) => s.key === key);
      assert.ok(found, `config show has no row for ${key}: ${result.stdout}`);
      return found;
    },
  };
}

/** A scratch folder for one test, with helpers to write a config file and its drop-ins. */
class Scratch {
  readonly dir = fs.mkdtempSync(path.join(suiteDir, 'case-'));
  readonly main = path.join(this.dir, 'config.yaml');
  readonly dropInDir = `${this.main}.d`;

  write(text: string, file = this.main): string {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
    return file;
  }

  dropIn(name: string, text: string): string {
    return this.write(text, path.join(this.dropInDir, name));
  }
}

/** The 1-based line of the first line of `file` that sets `key` (`key:` or `key+:`). */
function lineOf(file: string, key: string): number {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const index = lines.findIndex((l) => l.startsWith(`${key}:`) || l.startsWith(`${key}+:`));
  assert.ok(index >= 0, `${key} is not set in ${file}`);
  return index + 1;
}

function stderrLines(stderr: string): string[] {
  return stderr.split('\n').map((l) => l.trim());
}

function hasLine(lines: string[], expected: string | RegExp): boolean {
  return lines.some((l) => (typeof expected === 'string' ? l === expected : expected.test(l)));
}

after(async () => {
  killRunningDrover();
  await cleanupAgents();
  await cleanup(suiteDir);
});

describe('drover config show: precedence and provenance', () => {
  it('with an empty config file, every setting is its default with source "default"', async () => {
    const shown = await show([], { DROVER_CONFIG_FILE: emptyConfig });
    assert.equal(shown.command, 'server');
    assert.equal(shown.configFile, emptyConfig);
    assert.deepEqual(shown.filesRead, [emptyConfig]);
    assert.deepEqual(shown.warnings, []);
    assert.deepEqual(
      shown.settings.map((s) => s.key),
      settingsFor('server').map((s) => s.name),
      'config show lists every server setting, in schema order',
    );
    for (const row of shown.settings) assert.equal(row.source, 'default', `${row.key}: ${JSON.stringify(row)}`);
    const expected: Record<string, string> = {
      'cluster-name': 'drover',
      'node-lease-renew-interval': '1s',
      'node-monitor-grace-period': '4s',
      'https-listen-port': '6443',
      'bind-address': '0.0.0.0',
      'tls-san': '[]',
      'write-kubeconfig': '(unset)',
      'disable-agent': 'false',
      'agent-port': '10250',
      'shutdown-grace-period': '10s',
      'supervisor-metrics': 'false',
      'log-level': 'info',
    };
    for (const [key, value] of Object.entries(expected)) assert.equal(shown.get(key).value, value, key);
    for (const key of ['cluster-name', 'node-lease-renew-interval', 'node-monitor-grace-period']) {
      assert.equal(shown.get(key).scope, 'cluster', key);
    }
    assert.equal(shown.get('log-level').scope, 'node');
  });

  it('a config file: values and file:<path>:<line> sources with the right line numbers', async () => {
    const s = new Scratch();
    s.write(
      [
        '# Drover test configuration',
        '',
        'cluster-name: from-file',
        '# the API port',
        'https-listen-port: 7443',
        'node-label:',
        '  - zone=a',
        '  - rack=7',
        'tls-san: [one.example, 10.1.2.3]',
        '',
        'supervisor-metrics: true',
        'node-monitor-grace-period: 1m30s',
        'log-level: warn',
        'node-taint: dedicated=infra:NoSchedule',
        'agent-port: "10260"',
        '',
      ].join('\n'),
    );
    const shown = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.equal(shown.configFile, s.main);
    assert.deepEqual(shown.filesRead, [s.main]);
    const expected: Record<string, [string, number]> = {
      'cluster-name': ['from-file', 3],
      'https-listen-port': ['7443', 5],
      'node-label': ['zone=a,rack=7', 6],
      'tls-san': ['one.example,10.1.2.3', 9],
      'supervisor-metrics': ['true', 11],
      'node-monitor-grace-period': ['1m30s', 12],
      'log-level': ['warn', 13],
      'node-taint': ['dedicated=infra:NoSchedule', 14],
      'agent-port': ['10260', 15],
    };
    for (const [key, [value, line]] of Object.entries(expected)) {
      assert.equal(shown.get(key).value, value, key);
      assert.equal(shown.get(key).source, `file:${s.main}:${line}`, key);
    }
    assert.equal(shown.get('bind-address').source, 'default');
  });

  it('each source overrides the one before it: default < file < drop-in < env < flag', async () => {
    const s = new Scratch();
    s.write('node-name: from-file\nlog-level: debug\ncluster-name: c-file\nshutdown-grace-period: 20s\n');
    const dropIn = s.dropIn('10-override.yaml', '# drop-in\nlog-level: warn\ncluster-name: c-dropin\n');
    const env = { DROVER_CONFIG_FILE: s.main, DROVER_LOG_LEVEL: 'error', DROVER_CLUSTER_NAME: 'c-env' };

    const all = await show(['--log-level', 'trace'], env);
    assert.deepEqual(all.filesRead, [s.main, dropIn]);
    assert.deepEqual(all.get('log-level'), { key: 'log-level', value: 'trace', source: 'flag:--log-level', scope: 'node' });
    assert.deepEqual(all.get('cluster-name'), { key: 'cluster-name', value: 'c-env', source: 'env:DROVER_CLUSTER_NAME', scope: 'cluster' });
    assert.equal(all.get('node-name').value, 'from-file');
    assert.equal(all.get('node-name').source, `file:${s.main}:1`);
    assert.equal(all.get('shutdown-grace-period').value, '20s');
    assert.equal(all.get('shutdown-grace-period').source, `file:${s.main}:4`);
    assert.equal(all.get('bind-address').source, 'default');

    const noFlag = await show([], env);
    assert.equal(noFlag.get('log-level').value, 'error');
    assert.equal(noFlag.get('log-level').source, 'env:DROVER_LOG_LEVEL');

    const noEnv = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.equal(noEnv.get('log-level').value, 'warn');
    assert.equal(noEnv.get('log-level').source, `drop-in:${dropIn}:2`);
    assert.equal(noEnv.get('cluster-name').value, 'c-dropin');
    assert.equal(noEnv.get('cluster-name').source, `drop-in:${dropIn}:3`);

    fs.rmSync(dropIn);
    const fileOnly = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.deepEqual(fileOnly.filesRead, [s.main]);
    assert.equal(fileOnly.get('log-level').value, 'debug');
    assert.equal(fileOnly.get('log-level').source, `file:${s.main}:2`);

    fs.writeFileSync(s.main, '');
    const defaults = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.equal(defaults.get('log-level').value, 'info');
    assert.equal(defaults.get('log-level').source, 'default');
  });

  it('env and flag values of every type are parsed (durations, bools, ports, lists, labels, taints)', async () => {
    const shown = await show(
      ['--node-monitor-grace-period', '1m', '--supervisor-metrics', '--disable-agent', 'false', '--node-label', 'a=1', '--node-label', 'b=2'],
      {
        DROVER_CONFIG_FILE: emptyConfig,
        DROVER_NODE_LEASE_RENEW_INTERVAL: '500ms',
        DROVER_AGENT_PORT: '10999',
        DROVER_TLS_SAN: 'x.example, y.example',
        DROVER_NODE_TAINT: 'gpu:NoExecute,team=ml:PreferNoSchedule',
      },
    );
    const expected: Record<string, [string, string]> = {
      'node-monitor-grace-period': ['1m', 'flag:--node-monitor-grace-period'],
      'supervisor-metrics': ['true', 'flag:--supervisor-metrics'],
      'disable-agent': ['false', 'flag:--disable-agent'],
      'node-label': ['a=1,b=2', 'flag:--node-label'],
      'node-lease-renew-interval': ['500ms', 'env:DROVER_NODE_LEASE_RENEW_INTERVAL'],
      'agent-port': ['10999', 'env:DROVER_AGENT_PORT'],
      'tls-san': ['x.example,y.example', 'env:DROVER_TLS_SAN'],
      'node-taint': ['gpu:NoExecute,team=ml:PreferNoSchedule', 'env:DROVER_NODE_TAINT'],
    };
    for (const [key, [value, source]] of Object.entries(expected)) {
      assert.equal(shown.get(key).value, value, key);
      assert.equal(shown.get(key).source, source, key);
    }
  });

  it('drop-ins are read in lexical order of their names (10- before 20-), the last one wins; only *.yaml and *.yml', async () => {
    const s = new Scratch();
    s.write('log-level: debug\nnode-name: from-main\n');
    // Written out of order on purpose; the names decide.
    const d20 = s.dropIn('20-second.yaml', 'log-level: error\n');
    const d10 = s.dropIn('10-first.yaml', 'log-level: warn\nnode-name: from-10\ncluster-name: c10\n');
    const d30 = s.dropIn('30-third.yml', '\n\ncluster-name: c30\n');
    // Lexical, not numeric: "9-..." sorts after "30-...".
    const d9 = s.dropIn('9-last.yaml', 'agent-port: 10999\nnode-name: from-9\n');
    s.dropIn('50-ignored.txt', 'log-level: trace\n');
    s.dropIn('60-ignored.yaml.bak', 'log-level: trace\n');
    s.dropIn('README', 'not yaml at all: [\n');
    fs.mkdirSync(path.join(s.dropInDir, '70-a-directory.yaml'));

    const shown = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.deepEqual(shown.filesRead, [s.main, d10, d20, d30, d9]);
    assert.equal(shown.get('log-level').value, 'error');
    assert.equal(shown.get('log-level').source, `drop-in:${d20}:1`);
    assert.equal(shown.get('cluster-name').value, 'c30');
    assert.equal(shown.get('cluster-name').source, `drop-in:${d30}:3`);
    assert.equal(shown.get('node-name').value, 'from-9');
    assert.equal(shown.get('node-name').source, `drop-in:${d9}:2`);
    assert.equal(shown.get('agent-port').source, `drop-in:${d9}:1`);
  });

  it('drop-ins apply without a main config file', async () => {
    const s = new Scratch();
    const dropIn = s.dropIn('10-only.yaml', 'log-level: warn\n');
    // The default location is not used here; an explicit file that is absent is an error (see
    // below), so this uses -c on a file that exists but is empty, with drop-ins beside it.
    s.write('');
    const shown = await show(['-c', s.main]);
    assert.deepEqual(shown.filesRead, [s.main, dropIn]);
    assert.equal(shown.get('log-level').source, `drop-in:${dropIn}:1`);
  });

  it('"key+:" appends to a list across the file and drop-ins, and the source lists each contributor', async () => {
    const s = new Scratch();
    s.write('cluster-name: x\nnode-label:\n  - zone=a\ntls-san: [a.example]\nnode-taint+: t1:NoSchedule\n');
    const d10 = s.dropIn('10-labels.yaml', '# more labels\nnode-label+:\n  - rack=7\n  - row=2\ntls-san+: b.example\n');
    const d20 = s.dropIn('20-labels.yaml', 'node-label+: [pool=blue]\n');
    const shown = await show([], { DROVER_CONFIG_FILE: s.main });

    assert.equal(shown.get('node-label').value, 'zone=a,rack=7,row=2,pool=blue');
    assert.equal(
      shown.get('node-label').source,
      `file:${s.main}:${lineOf(s.main, 'node-label')}, drop-in:${d10}:${lineOf(d10, 'node-label')}, drop-in:${d20}:1`,
    );
    assert.equal(shown.get('tls-san').value, 'a.example,b.example');
    assert.equal(shown.get('tls-san').source, `file:${s.main}:4, drop-in:${d10}:5`);
    // `key+` with nothing before it in any file starts the list.
    assert.equal(shown.get('node-taint').value, 't1:NoSchedule');
    assert.equal(shown.get('node-taint').source, `file:${s.main}:5`);

    // A later plain key replaces an appended list.
    const d30 = s.dropIn('30-replace.yaml', 'node-label: [only=this]\n');
    const replaced = await show([], { DROVER_CONFIG_FILE: s.main });
    assert.equal(replaced.get('node-label').value, 'only=this');
    assert.equal(replaced.get('node-label').source, `drop-in:${d30}:1`);

    // The environment replaces the whole list too.
    const fromEnv = await show([], { DROVER_CONFIG_FILE: s.main, DROVER_TLS_SAN: 'c.example' });
    assert.equal(fromEnv.get('tls-san').value, 'c.example');
    assert.equal(fromEnv.get('tls-san').source, 'env:DROVER_TLS_SAN');
  });

  it('a list flag replaces the file’s list (repeated flags make the list)', async () => {
    const s = new Scratch();
    s.write('tls-san:\n  - file-a.example\n  - file-b.example\nnode-label: [zone=a]\n');
    s.dropIn('10-more.yaml', 'tls-san+: [dropin.example]\n');
    const shown = await show(['--tls-san', 'flag-1.example', '--tls-san', 'flag-2.example', '--node-label', 'zone=b'], {
      DROVER_CONFIG_FILE: s.main,
      DROVER_TLS_SAN: 'env.example',
    });
    assert.equal(shown.get('tls-san').value, 'flag-1.example,flag-2.example');
    assert.equal(shown.get('tls-san').source, 'flag:--tls-san');
    assert.equal(shown.get('node-label').value, 'zone=b');
    assert.equal(shown.get('node-label').source, 'flag:--node-label');
  });

  it('-c / --config wins over DROVER_CONFIG_FILE, and drop-ins follow the file actually used', async () => {
    const viaEnv = new Scratch();
    viaEnv.write('cluster-name: from-env-file\nlog-level: debug\n');
    viaEnv.dropIn('10-env.yaml', 'node-name: env-dropin\n');
    const viaFlag = new Scratch();
    viaFlag.write('\ncluster-name: from-flag-file\n');
    const flagDropIn = viaFlag.dropIn('10-flag.yaml', 'agent-port: 10111\n');

    for (const flag of ['-c', '--config']) {
      const shown = await show([flag, viaFlag.main], { DROVER_CONFIG_FILE: viaEnv.main });
      assert.equal(shown.configFile, viaFlag.main, flag);
      assert.deepEqual(shown.filesRead, [viaFlag.main, flagDropIn], flag);
      assert.equal(shown.get('cluster-name').value, 'from-flag-file');
      assert.equal(shown.get('cluster-name').source, `file:${viaFlag.main}:2`);
      assert.equal(shown.get('log-level').source, 'default', 'nothing is read from the file DROVER_CONFIG_FILE names');
      assert.equal(shown.get('node-name').source, 'default');
      assert.equal(shown.get('agent-port').source, `drop-in:${flagDropIn}:1`);
    }

    const byEnv = await show([], { DROVER_CONFIG_FILE: viaEnv.main });
    assert.equal(byEnv.configFile, viaEnv.main);
    assert.equal(byEnv.get('cluster-name').value, 'from-env-file');

    // A relative -c is resolved against the working directory, and printed absolute.
    const relative = await show(['-c', 'config.yaml'], { DROVER_CONFIG_FILE: viaEnv.main }, { cwd: viaFlag.dir });
    assert.equal(relative.configFile, viaFlag.main);
    assert.equal(relative.get('cluster-name').source, `file:${viaFlag.main}:2`);
  });

  it('a missing default config file is fine (everything else still resolves)', async (t) => {
    if (fs.existsSync(DEFAULT_CONFIG_FILE) || fs.existsSync(`${DEFAULT_CONFIG_FILE}.d`)) {
      t.skip(`${DEFAULT_CONFIG_FILE} exists on this machine`);
      return;
    }
    const shown = await show(['--log-level', 'warn'], { DROVER_CONFIG_FILE: undefined });
    assert.equal(shown.configFile, DEFAULT_CONFIG_FILE);
    assert.deepEqual(shown.filesRead, []);
    assert.equal(shown.get('log-level').source, 'flag:--log-level');
    assert.equal(shown.get('cluster-name').source, 'default');

    const text = await drover(['config', 'show'], cleanEnv());
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^# drover server: config file \/etc\/drover\/config\.yaml \(not present\)$/m);
    assert.match(text.stdout, /^KEY\s+VALUE\s+SCOPE\s+SOURCE$/m);
    assert.match(text.stdout, /^node-monitor-grace-period\s+4s\s+cluster\s+default$/m);
  });

  it('a missing explicit config file is an error (exit 78) naming the file and who named it', async () => {
    const s = new Scratch();
    const missing = path.join(s.dir, 'nope.yaml');
    const byFlag = await drover(['config', 'show', '-c', missing], cleanEnv({ DROVER_CONFIG_FILE: emptyConfig }));
    assert.equal(byFlag.code, EXIT_CONFIG, byFlag.stderr);
    assert.equal(byFlag.stdout, '');
    assert.ok(stderrLines(byFlag.stderr).includes(`config file ${missing} does not exist (named by --config)`), byFlag.stderr);

    const byEnv = await drover(['config', 'show'], cleanEnv({ DROVER_CONFIG_FILE: missing }));
    assert.equal(byEnv.code, EXIT_CONFIG, byEnv.stderr);
    assert.ok(stderrLines(byEnv.stderr).includes(`config file ${missing} does not exist (named by DROVER_CONFIG_FILE)`), byEnv.stderr);

    const dataDir = path.join(s.dir, 'fresh-data');
    const server = await drover(serverArgs(dataDir, { args: ['-c', missing] }), cleanEnv());
    assert.equal(server.code, EXIT_CONFIG, server.stderr);
    assert.ok(stderrLines(server.stderr).includes(`config file ${missing} does not exist (named by --config)`), server.stderr);
    assertNothingWritten(dataDir);
  });

  it('the text form shows the same rows', async () => {
    const s = new Scratch();
    s.write('log-level: warn\n');
    const text = await drover(['config', 'show', '-c', s.main], cleanEnv());
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, new RegExp(`^# drover server: config file ${escape(s.main)}$`, 'm'));
    assert.match(text.stdout, new RegExp(`^log-level\\s+warn\\s+node\\s+file:${escape(s.main)}:1$`, 'm'));
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The data dir a refused `drover server` was given: absent, or present and empty. */
function assertNothingWritten(dataDir: string): void {
  if (!fs.existsSync(dataDir)) return;
  assert.deepEqual(fs.readdirSync(dataDir), [], `drover server wrote into ${dataDir} although its configuration was refused`);
}

interface BadCase {
  name: string;
  /** Config file contents; written to <scratch>/config.yaml. */
  file?: string;
  dropIns?: Record<string, string>;
  args?: string[];
  env?: Record<string, string>;
  /**
   * The problem lines stderr must contain, given the files' paths: a string must equal a line
   * (after trimming), a RegExp must match one.
   */
  expect: (paths: { main: string; dropIn: (name: string) => string }) => (string | RegExp)[];
  /** The problems come from the resolver (stderr opens with "invalid configuration:"). */
  resolver?: false;
}

const BAD_CASES: BadCase[] = [
  {
    name: 'YAML syntax error: file:line:col and the parser’s message',
    file: 'cluster-name: a\nlog-level: debug: x\nnode-name: b\n',
    expect: ({ main }) => [`${main}:2:12: YAML syntax error: Nested mappings are not allowed in compact mappings`],
  },
  {
    name: 'YAML syntax error in a drop-in names the drop-in',
    file: 'log-level: debug\n',
    dropIns: { '10-broken.yaml': '# broken\nnode-name: "unterminated\n' },
    // The parser places this error at the end of the input, not at the opening quote.
    expect: ({ dropIn }) => [new RegExp(`^${escape(dropIn('10-broken.yaml'))}:\\d+:\\d+: YAML syntax error: Missing closing "quote$`)],
  },
  {
    name: 'a config file that is not a map',
    file: '- just\n- a list\n',
    expect: ({ main }) => [`${main}:1:1: expected a map of settings (key: value), got a list`],
  },
  {
    name: 'wrong types: key, file:line, expected type and what was given',
    file: 'cluster-name: ok\nsupervisor-metrics: "yes"\nagent-port: [1]\nnode-label: {a: b}\nhttps-listen-port: 70000\nlog-level: loud\n',
    expect: ({ main }) => [
      `${main}:2: "supervisor-metrics": expected a boolean (true or false), got string "yes"`,
      `${main}:3: "agent-port": expected a port number (0-65535), got a list`,
      `${main}:4: "node-label": expected a list of key=value strings, got a map`,
      `${main}:5: "https-listen-port": expected a port number (0-65535), got number 70000`,
      `${main}:6: "log-level": expected one of trace, debug, info, warn, error, fatal, silent, got "loud"`,
    ],
  },
  {
    name: 'a key without a value (null) is reported as null',
    file: 'cluster-name: a\nnode-name:\nsupervisor-metrics: ~\n',
    expect: ({ main }) => [
      `${main}:2: "node-name": expected a string, got null`,
      `${main}:3: "supervisor-metrics": expected a boolean (true or false), got null`,
    ],
  },
  {
    name: 'bad list items: labels and taints',
    file: 'node-label: [novalue]\nnode-taint: [gpu:Sometimes]\n',
    expect: ({ main }) => [
      `${main}:1: "node-label": expected key=value, got "novalue"`,
      `${main}:2: "node-taint": expected key[=value]:Effect, got "gpu:Sometimes"`,
    ],
  },
  {
    name: 'unknown keys, with "did you mean" when one is close',
    file: 'cluster-name: a\nnode-monitor-grace-perod: 5s\nclustername: b\nfrobnicate: true\n',
    expect: ({ main }) => [
      `${main}:2: unknown key "node-monitor-grace-perod" (did you mean "node-monitor-grace-period"?)`,
      `${main}:3: unknown key "clustername" (did you mean "cluster-name"?)`,
      `${main}:4: unknown key "frobnicate"`,
    ],
  },
  {
    name: '"key+:" on a scalar setting',
    file: 'log-level+: debug\nnode-monitor-grace-period+: 5s\n',
    expect: ({ main }) => [
      `${main}:1: "log-level+" appends to a list, but "log-level" is one of trace, debug, info, warn, error, fatal, silent`,
      `${main}:2: "node-monitor-grace-period+" appends to a list, but "node-monitor-grace-period" is a duration such as 500ms, 4s or 1m30s`,
    ],
  },
  {
    name: 'a duplicate key in one file',
    file: 'log-level: debug\nnode-name: a\nlog-level: info\n',
    expect: ({ main }) => [`${main}:3:1: duplicate key: Map keys must be unique`],
  },
  {
    name: 'grace < 3 × renew (file and default): the message names both keys, values and sources',
    file: '\nnode-monitor-grace-period: 2s\n',
    expect: ({ main }) => [
      `node-monitor-grace-period (2s, file:${main}:2) must be at least 3 × node-lease-renew-interval (1s, default), so that one or two late renewals never mark a node lost`,
    ],
  },
  {
    name: 'grace < 3 × renew (drop-in, env and flag)',
    file: 'node-monitor-grace-period: 4s\n',
    dropIns: { '10-grace.yaml': 'node-monitor-grace-period: 5s\n' },
    env: { DROVER_NODE_LEASE_RENEW_INTERVAL: '2s' },
    expect: ({ dropIn }) => [
      `node-monitor-grace-period (5s, drop-in:${dropIn('10-grace.yaml')}:1) must be at least 3 × node-lease-renew-interval (2s, env:DROVER_NODE_LEASE_RENEW_INTERVAL), so that one or two late renewals never mark a node lost`,
    ],
  },
  {
    name: 'grace < 3 × renew (flags)',
    args: ['--node-lease-renew-interval', '1500ms', '--node-monitor-grace-period', '4s'],
    expect: () => [
      'node-monitor-grace-period (4s, flag:--node-monitor-grace-period) must be at least 3 × node-lease-renew-interval (1.5s, flag:--node-lease-renew-interval), so that one or two late renewals never mark a node lost',
    ],
  },
  {
    name: 'bad durations: in a file (bad unit, bare number), env and flag',
    file: 'node-monitor-grace-period: 5x\nshutdown-grace-period: 5\n',
    env: { DROVER_NODE_LEASE_RENEW_INTERVAL: 'fast' },
    args: ['--shutdown-grace-period', '5parsecs'],
    expect: ({ main }) => [
      `${main}:1: "node-monitor-grace-period": invalid duration "5x": expected a number with a unit (ms, s, m, h), e.g. 500ms, 4s or 1m30s`,
      `${main}:2: "shutdown-grace-period": expected a duration such as 500ms, 4s or 1m30s, got number 5`,
      'DROVER_NODE_LEASE_RENEW_INTERVAL: invalid duration "fast": expected a number with a unit (ms, s, m, h), e.g. 500ms, 4s or 1m30s',
      '--shutdown-grace-period: invalid duration "5parsecs": expected a number with a unit (ms, s, m, h), e.g. 500ms, 4s or 1m30s',
    ],
  },
  {
    name: 'bad env values (bool, port, enum)',
    env: { DROVER_SUPERVISOR_METRICS: 'maybe', DROVER_AGENT_PORT: '99999', DROVER_LOG_LEVEL: 'loud' },
    expect: () => [
      'DROVER_AGENT_PORT: expected a port number (0-65535), got "99999"',
      'DROVER_SUPERVISOR_METRICS: expected true or false, got "maybe"',
      'DROVER_LOG_LEVEL: expected one of trace, debug, info, warn, error, fatal, silent, got "loud"',
    ],
  },
  {
    name: 'bad flag values (bool, port)',
    args: ['--disable-agent', 'perhaps', '--agent-port', 'http'],
    expect: () => ['--disable-agent: expected true or false, got "perhaps"', '--agent-port: expected a port number (0-65535), got "http"'],
  },
  {
    name: 'a bad enum flag value is a configuration error too',
    args: ['--log-level', 'loud'],
    resolver: false,
    expect: () => [/--log-level.*loud/],
  },
];

describe('bad configuration: exit 78, a precise message, nothing written', () => {
  for (const badCase of BAD_CASES) {
    it(badCase.name, async () => {
      const s = new Scratch();
      if (badCase.file !== undefined) s.write(badCase.file);
      else s.write('');
      for (const [name, text] of Object.entries(badCase.dropIns ?? {})) s.dropIn(name, text);
      const expected = badCase.expect({ main: s.main, dropIn: (name) => path.join(s.dropInDir, name) });
      const env = cleanEnv({ DROVER_CONFIG_FILE: s.main, ...badCase.env });

      const shown = await drover(['config', 'show', ...(badCase.args ?? [])], env);
      assert.equal(shown.code, EXIT_CONFIG, `config show: exit ${shown.code}; stderr:\n${shown.stderr}`);
      assert.equal(shown.stdout, '', 'nothing on stdout');
      const showLines = stderrLines(shown.stderr);
      if (badCase.resolver !== false) assert.equal(showLines[0], 'drover config show: invalid configuration:', shown.stderr);
      for (const line of expected) assert.ok(hasLine(showLines, line), `config show stderr lacks:\n  ${line}\ngot:\n${shown.stderr}`);

      const dataDir = path.join(s.dir, 'fresh-data-dir');
      const server = await drover(serverArgs(dataDir, { args: badCase.args ?? [] }), env, { timeoutMs: 20_000 });
      assert.equal(server.code, EXIT_CONFIG, `drover server: exit ${server.code} (signal ${server.signal}); stderr:\n${server.stderr}`);
      const serverLines = stderrLines(server.stderr);
      if (badCase.resolver !== false) assert.equal(serverLines[0], 'drover server: invalid configuration:', server.stderr);
      for (const line of expected) assert.ok(hasLine(serverLines, line), `drover server stderr lacks:\n  ${line}\ngot:\n${server.stderr}`);
      assertNothingWritten(dataDir);
    });
  }

  it('drover agent: bad configuration is exit 78 too, and nothing is written in its data dir', async () => {
    const s = new Scratch();
    s.write('# agent config\nnode-nmae: x\nagent-port: [1]\n');
    const dataDir = path.join(s.dir, 'fresh-agent-data');
    const result = await drover(
      ['agent', '--server', 'https://127.0.0.1:1', '--token', 'K10abc::server:secret', '--data-dir', dataDir, '-c', s.main],
      cleanEnv(),
      { timeoutMs: 20_000 },
    );
    assert.equal(result.code, EXIT_CONFIG, `exit ${result.code} (signal ${result.signal}); stderr:\n${result.stderr}`);
    const lines = stderrLines(result.stderr);
    assert.equal(lines[0], 'drover agent: invalid configuration:', result.stderr);
    assert.ok(lines.includes(`${s.main}:2: unknown key "node-nmae" (did you mean "node-name"?)`), result.stderr);
    assert.ok(lines.includes(`${s.main}:3: "agent-port": expected a port number (0-65535), got a list`), result.stderr);
    assertNothingWritten(dataDir);
  });

  it('every problem is reported at once, one a line', async () => {
    const s = new Scratch();
    s.write('clustername: a\nagent-port: [1]\nlog-level+: debug\n');
    const result = await drover(['config', 'show', '--shutdown-grace-period', 'soon'], cleanEnv({ DROVER_CONFIG_FILE: s.main }));
    assert.equal(result.code, EXIT_CONFIG);
    const lines = result.stderr.trimEnd().split('\n');
    assert.equal(lines[0], 'drover config show: invalid configuration:');
    assert.equal(lines.length, 5, result.stderr);
    for (const line of lines.slice(1)) assert.match(line, /^ {2}\S/, 'each problem on its own indented line');
  });
});

describe('agents and server-only settings', () => {
  it('config show --agent: a server-only key gives one warning "ignored by agent", not a failure', async () => {
    const s = new Scratch();
    s.write('cluster-name: shared\nlog-level: warn\nsupervisor-metrics: true\n');
    const shown = await show(['--agent'], {
      DROVER_CONFIG_FILE: s.main,
      DROVER_SERVER: 'https://127.0.0.1:1',
      DROVER_TOKEN: 'K10abc::server:supersecret',
    });
    assert.equal(shown.command, 'agent');
    assert.deepEqual(shown.warnings, [`${s.main}:1: "cluster-name" is a server-only setting, ignored by agent`]);
    assert.equal(shown.settings.find((r) => r.key === 'cluster-name'), undefined, 'the agent has no cluster-name');
    assert.deepEqual(
      shown.settings.map((r) => r.key),
      settingsFor('agent').map((r) => r.name),
    );
    assert.equal(shown.get('log-level').source, `file:${s.main}:2`);
    assert.equal(shown.get('supervisor-metrics').value, 'true');
    assert.equal(shown.get('server').source, 'env:DROVER_SERVER');

    // The text form shows the warning as a comment.
    const text = await drover(
      ['config', 'show', '--agent'],
      cleanEnv({ DROVER_CONFIG_FILE: s.main, DROVER_SERVER: 'https://127.0.0.1:1', DROVER_TOKEN: 'K10abc::server:supersecret' }),
    );
    assert.equal(text.code, 0, text.stderr);
    assert.equal(text.stdout.split('\n').filter((l) => l.includes('ignored by agent')).length, 1, text.stdout);
  });

  it('the agent without server and token: exit 78 naming how to set each', async () => {
    const result = await drover(['config', 'show', '--agent'], cleanEnv({ DROVER_CONFIG_FILE: emptyConfig }));
    assert.equal(result.code, EXIT_CONFIG, result.stderr);
    const lines = stderrLines(result.stderr);
    assert.ok(lines.includes('the agent needs "server": pass --server, set DROVER_SERVER, or put "server:" in the config file'), result.stderr);
    assert.ok(lines.includes('the agent needs "token": pass --token-file (or --token), set DROVER_TOKEN_FILE (or DROVER_TOKEN), or put "token-file:" (or "token:") in the config file'), result.stderr);
  });

  it('secrets are redacted in config show, whatever their source', async () => {
    const secret = 'K10cafe::server:do-not-print-me';
    const s = new Scratch();
    s.write(`server: https://127.0.0.1:1\ntoken: "${secret}"\n`);
    const sources: [string[], Record<string, string>, string][] = [
      [[], { DROVER_CONFIG_FILE: s.main }, `file:${s.main}:2`],
      [[], { DROVER_CONFIG_FILE: s.main, DROVER_TOKEN: `${secret}-env` }, 'env:DROVER_TOKEN'],
      [['--token', `${secret}-flag`], { DROVER_CONFIG_FILE: s.main }, 'flag:--token'],
    ];
    for (const [args, env, source] of sources) {
      const json = await drover(['config', 'show', '--agent', '--json', ...args], cleanEnv(env));
      assert.equal(json.code, 0, json.stderr);
      assert.ok(!json.stdout.includes('do-not-print-me'), `the token leaked:\n${json.stdout}`);
      const token = (JSON.parse(json.stdout) as Omit<Shown, 'get'>).settings.find((r) => r.key === 'token');
      assert.deepEqual(token, { key: 'token', value: '[redacted]', source, scope: 'node' });
      const text = await drover(['config', 'show', '--agent', ...args], cleanEnv(env));
      assert.equal(text.code, 0, text.stderr);
      assert.ok(!text.stdout.includes('do-not-print-me'), `the token leaked:\n${text.stdout}`);
      assert.match(text.stdout, /^token\s+\[redacted\]\s+node\s+/m);
    }
  });

  it('a real agent started with the server’s own config file starts, joins and warns once per server-only key', async () => {
    const s = new Scratch();
    const shared = s.write(
      ['# one file for the server and its agents', 'cluster-name: shared-config', 'tls-san: [shared.example]', 'shutdown-grace-period: 5s', 'log-level: info', ''].join('\n'),
    );
    const server = await startServer({ args: ['-c', shared, '--node-name', 'cfg-shared-server'] });
    assert.ok(!server.output().includes('warning'), `the server warned about its own config:\n${server.output()}`);
    const agent = await startAgent({ server, name: 'cfg-shared-agent', args: ['-c', shared] });
    await waitForState(server, 'cfg-shared-agent', 'Ready', 30_000);

    const warnings = agent
      .output()
      .split('\n')
      .filter((l) => l.includes('ignored by agent'));
    assert.deepEqual(warnings, [
      `drover agent: warning: ${shared}:2: "cluster-name" is a server-only setting, ignored by agent`,
      `drover agent: warning: ${shared}:3: "tls-san" is a server-only setting, ignored by agent`,
    ]);
    // The join token is a secret: it never appears in the agent's output.
    const secret = joinToken(server).slice(joinToken(server).lastIndexOf(':') + 1);
    assert.ok(!agent.output().includes(secret), 'the agent printed its join secret');
    await agent.stop();
    await server.stop();
  });
});

describe('drover server --help', () => {
  /** Option blocks of commander's help, each collapsed to one line. */
  function optionBlocks(help: string): string[] {
    const blocks: string[] = [];
    for (const line of help.split('\n')) {
      if (/^ {2}-/.test(line)) blocks.push(line.trim());
      else if (blocks.length && /^\s{3,}\S/.test(line)) blocks[blocks.length - 1] += ` ${line.trim()}`;
    }
    return blocks;
  }

  for (const command of ['server', 'agent'] as const) {
    it(`drover ${command} --help lists every ${command} setting from the schema with its env var`, async () => {
      const result = await drover([command, '--help'], cleanEnv());
      assert.equal(result.code, 0, result.stderr);
      const blocks = optionBlocks(result.stdout);
      for (const setting of settingsFor(command)) {
        const block = blocks.find((b) => b.startsWith(`--${setting.name} `));
        assert.ok(block, `--${setting.name} is missing from drover ${command} --help:\n${result.stdout}`);
        assert.ok(block.includes(`[env ${envName(setting)}]`), `--${setting.name} does not name ${envName(setting)}: ${block}`);
        if (setting.scope === 'cluster') assert.ok(block.includes('cluster-wide'), `--${setting.name} is not marked cluster-wide: ${block}`);
      }
      const config = blocks.find((b) => b.startsWith('-c, --config'));
      assert.ok(config?.includes('DROVER_CONFIG_FILE'), `--config is missing or does not name DROVER_CONFIG_FILE: ${config}`);
    });
  }
});

before(() => {
  assert.ok(fs.existsSync(DROVER_BIN), `${DROVER_BIN} is missing: run npm run build first`);
});
