import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { KubectlClient } from './kubectl.js';
import { eventually, REPO_ROOT } from './server.js';

/**
 * kubectl sessions that outlive one call (port-forward, attach) or need a terminal (exec -it,
 * attach -it): spawned with the test's kubeconfig, their output collected for polling.
 */

export const PYTHON = '/usr/bin/python3';
const PTY_RUN = path.join(REPO_ROOT, 'test/python/pty_run.py');

export interface KubectlTarget {
  kubeconfig: string;
  cacheDir: string;
}

export interface LiveKubectl {
  child: ChildProcess;
  output: () => string;
}

/** kubectl running in the background, stdout and stderr collected together. */
export function spawnKubectl(client: KubectlClient, target: KubectlTarget, args: string[], stdin: 'ignore' | 'pipe' = 'ignore'): LiveKubectl {
  const child = spawn(client.bin, ['--kubeconfig', target.kubeconfig, '--cache-dir', target.cacheDir, ...args], { stdio: [stdin, 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  child.on('error', () => undefined);
  return { child, output: () => output };
}

/** `kubectl port-forward …` and the local port it listens on, once it says so. */
export function spawnForward(client: KubectlClient, target: KubectlTarget, args: string[]): LiveKubectl & { localPort: Promise<number> } {
  const live = spawnKubectl(client, target, args);
  const localPort = eventually(() => {
    const match = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(live.output());
    return match ? Number(match[1]) : undefined;
  }, `kubectl port-forward listening (${client.name})`, 30_000);
  return { ...live, localPort };
}

/**
 * Runs kubectl on a pseudo-terminal of `rows`×`cols` (python3's pty module), typing `lines` once
 * the terminal is quiet: what the terminal showed and kubectl's exit code.
 */
export function runOnTerminal(client: KubectlClient, target: KubectlTarget, rows: number, cols: number, lines: string[], args: string[]): Promise<{ output: string; exitCode: number }> {
  const argv = ['--kubeconfig', target.kubeconfig, '--cache-dir', target.cacheDir, ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [PTY_RUN, String(rows), String(cols), ...lines, '--', client.bin, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('close', () => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(out) as { output: string; exitCode: number });
      } catch {
        reject(new Error(`pty_run.py printed no result: ${out}\n${err}`));
      }
    });
  });
}
