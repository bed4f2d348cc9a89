import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { cleanupAgents, joinToken, killRunningDrover, runDrover, startAgent, waitForState } from '../helpers/agent.js';
import { cleanup, serverArgs, startServer, tempDir } from '../helpers/server.js';

/**
 * `token-file` (flag `--token-file`, env DROVER_TOKEN_FILE, config key `token-file`): the cluster
 * token read from a file, so it need not be on a command line, where every local user can read
 * it. `drover config show` (the resolver every start uses) for sources, conflicts and refusals;
 * a real server and a real agent for the token actually used.
 */

const EXIT_CONFIG = 78;

// Servers and agents spawned by the shared helpers inherit this process's environment.
for (const key of Object.keys(process.env)) if (key.startsWith('DROVER_')) delete process.env[key];
const suiteDir = tempDir('token-file');
const emptyConfig = path.join(suiteDir, 'empty.yaml');
fs.writeFileSync(emptyConfig, '');
process.env.DROVER_CONFIG_FILE = emptyConfig;

after(async () => {
  killRunningDrover();
  await cleanupAgents();
  await cleanup(suiteDir);
});

/** The runner's environment without any DROVER_* variable, plus `extra`. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('DROVER_')) env[key] = value;
  return { ...env, DROVER_CONFIG_FILE: emptyConfig, ...extra };
}

let files = 0;
/** A file in the suite dir with `content` and `mode`. */
function writeFile(content: string, mode = 0o600, name = `file-${++files}`): string {
  const file = path.join(suiteDir, name);
  fs.writeFileSync(file, content, { mode });
  fs.chmodSync(file, mode); // whatever the umask
  return file;
}

function secretToken(): { token: string; secret: string } {
  const secret = `tokfile${randomBytes(16).toString('hex')}`;
  return { token: `D10${'ab'.repeat(32)}::server:${secret}`, secret };
}

interface Row {
  key: string;
  value: string;
  source: string;
  scope: string;
}

async function showAgent(args: string[], env: Record<string, string>): Promise<{ rows: Row[]; warnings: string[]; stdout: string }> {
  const result = await runDrover(['config', 'show', '--agent', '--json', ...args], 30_000, { env: cleanEnv(env), cwd: suiteDir });
  assert.equal(result.code, 0, `config show exited ${result.code}:\n${result.stderr}`);
  const parsed = JSON.parse(result.stdout) as { settings: Row[]; warnings: string[] };
  return { rows: parsed.settings, warnings: parsed.warnings, stdout: result.stdout };
}

/** Lines of an exit-78 message, without the header and indentation. */
function problems(stderr: string): string[] {
  return stderr
    .split('\n')
    .slice(1)
    .map((l) => l.trim())
    .filter(Boolean);
}

describe('token-file', () => {
  it('from a flag, the environment or a config file: the token is the file’s, redacted, with the file as its source', async () => {
    const { token, secret } = secretToken();
    const file = writeFile(`\n  ${token}  \n`);
    const config = writeFile(`server: https://127.0.0.1:1\ntoken-file: ${file}\n`, 0o644, 'token-file-config.yaml');
    const cases: [string[], Record<string, string>, string][] = [
      [['--token-file', file], { DROVER_SERVER: 'https://127.0.0.1:1' }, 'flag:--token-file'],
      [[], { DROVER_SERVER: 'https://127.0.0.1:1', DROVER_TOKEN_FILE: file }, 'env:DROVER_TOKEN_FILE'],
      [[], { DROVER_CONFIG_FILE: config }, `file:${config}:2`],
    ];
    for (const [args, env, source] of cases) {
      const shown = await showAgent(args, env);
      assert.ok(!shown.stdout.includes(secret), `config show printed the token:\n${shown.stdout}`);
      assert.deepEqual(
        shown.rows.find((r) => r.key === 'token'),
        { key: 'token', value: '[redacted]', source: `token-file:${file}`, scope: 'node' },
      );
      assert.deepEqual(shown.rows.find((r) => r.key === 'token-file'), { key: 'token-file', value: file, source, scope: 'node' });
      assert.deepEqual(shown.warnings, []);
    }
  });

  it('token and token-file both set, from any sources: exit 78 naming both, for the agent and the server', async () => {
    const { token } = secretToken();
    const file = writeFile(token);
    const config = writeFile(`token: "${token}"\n`, 0o600, 'token-in-config.yaml');
    const cases: [string[], Record<string, string>, string][] = [
      [['--token', token, '--token-file', file], {}, `token (flag:--token) and token-file (flag:--token-file) are both set`],
      [['--token-file', file], { DROVER_TOKEN: token }, `token (env:DROVER_TOKEN) and token-file (flag:--token-file) are both set`],
      [['--token', token], { DROVER_TOKEN_FILE: file }, `token (flag:--token) and token-file (env:DROVER_TOKEN_FILE) are both set`],
      [['--token-file', file], { DROVER_CONFIG_FILE: config }, `token (file:${config}:1) and token-file (flag:--token-file) are both set`],
    ];
    for (const [args, env, expected] of cases) {
      const line = `${expected}: give the token one way (token-file keeps it off the command line)`;
      const agent = await runDrover(['config', 'show', '--agent', ...args], 30_000, { env: cleanEnv({ DROVER_SERVER: 'https://127.0.0.1:1', ...env }) });
      assert.equal(agent.code, EXIT_CONFIG, agent.stderr);
      assert.deepEqual(problems(agent.stderr), [line]);
      // A real server start is refused the same way, before it writes anything.
      const dataDir = path.join(suiteDir, `refused-${++files}`);
      const server = await runDrover([...serverArgs(dataDir), ...args], 30_000, { env: cleanEnv(env) });
      assert.equal(server.code, EXIT_CONFIG, server.stderr);
      assert.deepEqual(problems(server.stderr), [line]);
      assert.ok(!fs.existsSync(dataDir), 'the refused server created its data dir');
    }
  });

  it('a file every user can read is refused; one its group can read is taken with a warning', async () => {
    const { token } = secretToken();
    const env = { DROVER_SERVER: 'https://127.0.0.1:1' };
    for (const mode of [0o644, 0o604, 0o666]) {
      const file = writeFile(token, mode);
      const result = await runDrover(['config', 'show', '--agent', '--token-file', file], 30_000, { env: cleanEnv(env) });
      assert.equal(result.code, EXIT_CONFIG, result.stderr);
      const shown = `0${mode.toString(8)}`;
      assert.deepEqual(problems(result.stderr), [
        `token-file ${file} (flag:--token-file): is readable by every user (mode ${shown}); make it private: chmod 600 ${file}`,
      ]);
    }
    const grouped = writeFile(token, 0o640);
    const shown = await showAgent(['--token-file', grouped], env);
    assert.deepEqual(shown.warnings, [
      `token-file ${grouped} (flag:--token-file): is readable by its group (mode 0640); chmod 600 ${grouped} unless that group is meant to hold the token`,
    ]);
    assert.equal(shown.rows.find((r) => r.key === 'token')?.source, `token-file:${grouped}`);
  });

  it('a missing, empty, multi-word or directory token file: exit 78 saying which', async () => {
    const missing = path.join(suiteDir, 'no-such-token');
    const empty = writeFile(' \n\n');
    const twoWords = writeFile('D10x::server:a b\n');
    const dir = path.join(suiteDir, 'token-dir');
    fs.mkdirSync(dir, { mode: 0o700 });
    const cases: [string, string][] = [
      [missing, 'it does not exist'],
      [empty, 'is empty'],
      [twoWords, 'holds more than one word; it must hold only the token'],
      [dir, 'is a directory, not a file'],
    ];
    for (const [file, why] of cases) {
      const result = await runDrover(['config', 'show', '--agent', '--token-file', file], 30_000, {
        env: cleanEnv({ DROVER_SERVER: 'https://127.0.0.1:1' }),
      });
      assert.equal(result.code, EXIT_CONFIG, result.stderr);
      assert.deepEqual(problems(result.stderr), [`token-file ${file} (flag:--token-file): ${why}`]);
    }
    const blank = await runDrover(['config', 'show', '--agent'], 30_000, { env: cleanEnv({ DROVER_SERVER: 'https://127.0.0.1:1', DROVER_TOKEN_FILE: '' }) });
    assert.equal(blank.code, EXIT_CONFIG, blank.stderr);
    assert.deepEqual(problems(blank.stderr), ['token-file (env:DROVER_TOKEN_FILE) is empty: name the file that holds the token']);
  });

  it('an agent without any token names token-file first', async () => {
    const result = await runDrover(['config', 'show', '--agent'], 30_000, { env: cleanEnv({ DROVER_SERVER: 'https://127.0.0.1:1' }) });
    assert.equal(result.code, EXIT_CONFIG, result.stderr);
    assert.deepEqual(problems(result.stderr), [
      'the agent needs "token": pass --token-file (or --token), set DROVER_TOKEN_FILE (or DROVER_TOKEN), or put "token-file:" (or "token:") in the config file',
    ]);
  });

  it('a real server takes its token from the file, and a real agent joins with one', async () => {
    // A first server given a bare secret makes it the cluster's join secret.
    const secret = randomBytes(24).toString('hex');
    const serverFile = writeFile(`${secret}\n`);
    const server = await startServer({ args: ['--token-file', serverFile] });
    const token = joinToken(server);
    assert.ok(token.endsWith(`::server:${secret}`), `the cluster's join token is not the file's secret: ${token}`);
    assert.ok(!server.output().includes(secret), 'the server printed its token');

    // Readable by its group: taken, with the warning config show gives.
    const agentFile = writeFile(`${token}\n`, 0o640);
    const agent = await startAgent({ server, name: 'token-file-agent', tokenFile: agentFile, env: cleanEnv() });
    await waitForState(server, 'token-file-agent', 'Ready', 30_000);
    assert.ok(!agent.output().includes(secret), 'the agent printed its token');
    assert.ok(agent.output().includes(`drover agent: warning: token-file ${agentFile} (flag:--token-file): is readable by its group (mode 0640)`), agent.output());
    for (const pid of [server.pid, agent.pid]) {
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      assert.ok(!argv.includes(secret), `pid ${pid} has the secret on its command line: ${argv.replace(/\0/g, ' ')}`);
    }
    await agent.stop();
    await server.stop();
  });
});
