import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './server.js';

/** The kubectl clients every test runs against: the machine's, and Debian's 1.20 as the floor. */
export interface KubectlClient {
  name: string;
  bin: string;
  /**
   * Debian's kubectl 1.20, the oldest client: it validates against the protobuf /openapi/v2 (not
   * v3) and speaks older wire forms. Tests use it to tell the two clients' objects apart.
   */
  legacy: boolean;
}

export const KUBECTL_1_20 = path.join(REPO_ROOT, '.cache/kubectl-1.20/usr/bin/kubectl');
/** A modern kubectl that ./test.sh fetched because the machine had none (>= 1.27) on PATH. */
const KUBECTL_MODERN_CACHED = path.join(REPO_ROOT, '.cache/kubectl-1.32/kubectl');

/** The modern client (>= 1.27): the one ./test.sh fetched when the machine had none, else the machine's. */
export const MODERN_KUBECTL: KubectlClient = {
  name: 'kubectl (modern)',
  bin: fs.existsSync(KUBECTL_MODERN_CACHED) ? KUBECTL_MODERN_CACHED : 'kubectl',
  legacy: false,
};

export function kubectlClients(): KubectlClient[] {
  if (!fs.existsSync(KUBECTL_1_20)) {
    throw new Error(`${KUBECTL_1_20} is missing: ./test.sh fetches it (apt-get download kubernetes-client)`);
  }
  return [
    MODERN_KUBECTL,
    { name: 'kubectl 1.20 (Debian)', bin: KUBECTL_1_20, legacy: true },
  ];
}

export interface KubectlResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runKubectl(
  client: KubectlClient,
  kubeconfig: string,
  cacheDir: string,
  args: string[],
  /** `env`: extra environment (e.g. KUBE_EDITOR), over this process's. */
  options: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<KubectlResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(client.bin, ['--kubeconfig', kubeconfig, '--cache-dir', cacheDir, ...args], {
      env: { ...process.env, KUBECACHEDIR: cacheDir, KUBECONFIG: kubeconfig, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? '');
  });
}
