import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT } from './server.js';

/**
 * The official Python client (Debian's python3-kubernetes), run by Debian's /usr/bin/python3: a
 * pyenv `python3` earlier on PATH does not see Debian's modules. test.sh installs the package.
 * The scripts in test/python/ print one `PYTHON-SUMMARY {json}` line with at least the number of
 * checks they ran, so a script cut short by an early return is caught by its count.
 */

export const PYTHON = '/usr/bin/python3';

const SUMMARY_PREFIX = 'PYTHON-SUMMARY ';

export interface PythonRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved as they came, for failure messages. */
  output: string;
}

/** Run python with `args` (unbuffered, so the interleaved output keeps its order); killed at `ceilingMs`, a safety ceiling. */
export function runPython(args: readonly string[], ceilingMs = 120_000): Promise<PythonRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PYTHONUNBUFFERED: '1' } });
    let stdout = '';
    let stderr = '';
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), ceilingMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, output });
    });
  });
}

/** Throws with what to install unless /usr/bin/python3 can import the kubernetes package. */
export function assertPythonClient(): void {
  const probe = spawnSync(PYTHON, ['-c', 'import kubernetes'], { encoding: 'utf8' });
  assert.equal(probe.status, 0, `${PYTHON} cannot import kubernetes: install Debian's python3-kubernetes (test.sh does)\n${probe.stderr ?? probe.error}`);
}

export interface PythonSummary {
  checks: number;
  [field: string]: unknown;
}

export interface PythonScriptOptions {
  /** The script must report at least this many checks. */
  minChecks?: number;
  /** Safety ceiling for the whole script. */
  ceilingMs?: number;
  /** More to show when the script fails (the server's log, say). */
  context?: () => string;
}

/**
 * Run `script` (a path, or a name in test/python/) with `args` (kubeconfigs, a work dir): it must
 * exit 0 and print its summary line, with at least `minChecks` checks when given. Returns the
 * summary and the output, for the caller's own checks.
 */
export async function runPythonClientScript(
  script: string,
  args: readonly string[],
  options: PythonScriptOptions = {},
): Promise<{ summary: PythonSummary; output: string }> {
  assertPythonClient();
  const file = path.isAbsolute(script) ? script : path.join(REPO_ROOT, 'test/python', script);
  const name = path.basename(file);
  const run = await runPython([file, ...args], options.ceilingMs);
  const context = options.context ? `\n${options.context()}` : '';
  assert.equal(run.code, 0, `${name} failed (exit ${run.code}${run.signal ? `, ${run.signal}` : ''}):\n${run.output}${context}`);
  const line = run.output.split('\n').find((l) => l.startsWith(SUMMARY_PREFIX));
  assert.ok(line, `no summary line from ${name} in:\n${run.output}`);
  const summary = JSON.parse(line.slice(SUMMARY_PREFIX.length)) as PythonSummary;
  if (options.minChecks !== undefined) {
    assert.ok(summary.checks >= options.minChecks, `only ${summary.checks} checks of ${name} ran:\n${run.output}`);
  }
  return { summary, output: run.output };
}
