/**
 * Drover through the official Python client: Debian's python3-kubernetes, run by Debian's
 * /usr/bin/python3 (a pyenv `python3` earlier on PATH does not see Debian's modules; test.sh
 * installs the package). The checks themselves are in test/python/client_test.py: watches of
 * nodes and pods from a resourceVersion with timeoutSeconds, bookmarks, a followed pod log, and
 * DynamicClient discovery and CRUD. This file starts the server (with its own agent, so pods run)
 * and fails with the script's output when any check fails.
 *
 * Run: node --import tsx --test test/e2e/python-client.test.ts
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { cleanup, REPO_ROOT, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = path.join(REPO_ROOT, 'test/python/client_test.py');
/** A safety ceiling for the whole script (it takes about 15 s on an idle machine). */
const SCRIPT_CEILING_MS = 300_000;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

function runPython(args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PYTHONUNBUFFERED: '1' } });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), SCRIPT_CEILING_MS);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

describe('the official Python client (python3-kubernetes)', () => {
  let server: ServerProcess;

  before(async () => {
    const probe = spawnSync(PYTHON, ['-c', 'import kubernetes; print(kubernetes.__version__)'], { encoding: 'utf8' });
    if (probe.status !== 0) {
      throw new Error(`${PYTHON} cannot import kubernetes: install Debian's python3-kubernetes (test.sh does)\n${probe.stderr ?? probe.error}`);
    }
    // Bookmarks every second (the default is 15 s) so the script sees one promptly; hand-made
    // nodes are never judged by the lifecycle controller while the script watches them.
    server = await startServer({ embeddedAgent: true, handMadeNodes: true, args: ['--watch-bookmark-interval', '1s'] });
  });

  after(async () => {
    await cleanup();
  });

  it('watches nodes and pods, gets bookmarks, follows a log and does DynamicClient discovery and CRUD (test/python/client_test.py)', async (t) => {
    const work = tempDir('python-client');
    const run = await runPython([SCRIPT, server.kubeconfig, work]);
    assert.equal(
      run.code,
      0,
      `client_test.py failed (exit ${run.code}${run.signal ? `, ${run.signal}` : ''}):\n${run.output}\n--- server output (tail) ---\n${server.output().slice(-4000)}`,
    );
    const line = run.output.split('\n').find((l) => l.startsWith('PYTHON-SUMMARY '));
    assert.ok(line, `no summary line in:\n${run.output}`);
    const summary = JSON.parse(line.slice('PYTHON-SUMMARY '.length)) as { checks: number; events: number; seconds: number };
    // Every section ran (a script cut short by an early return would report fewer).
    assert.ok(summary.checks >= 55, `only ${summary.checks} checks ran:\n${run.output}`);
    t.diagnostic(`python checks: ${summary.checks}, watch events: ${summary.events}, script time: ${summary.seconds}s`);
  });
});
