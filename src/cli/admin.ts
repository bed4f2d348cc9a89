import fs from 'node:fs';
import path from 'node:path';
import { ApiError } from '../apiserver/errors.js';
import { formatDrift, type DriftReport } from '../config/drift.js';
import { EXIT_CONFIG } from '../config/resolve.js';
import { defaultOf } from '../config/schema.js';
import { adminClient } from './kubeconfig.js';
import { EXIT_FAILURE } from './run.js';

/**
 * The commands that read a data dir or talk to a running cluster as its admin: `token show`,
 * `config drift`, `node forget`, `cluster config set`. Each prints one result or one error line.
 */

/** $KUBECONFIG, else the admin kubeconfig in the default data dir. */
export function defaultKubeconfig(): string {
  return process.env.KUBECONFIG ?? path.join(defaultOf('data-dir'), 'kubeconfig.yaml');
}

export function tokenShow(opts: { dataDir: string; agent?: boolean }): void {
  const file = path.join(opts.dataDir, opts.agent ? 'agent-token' : 'token');
  if (!fs.existsSync(file)) {
    process.stderr.write(`drover token show: no token at ${file}; has a server run with --data-dir ${opts.dataDir}?\n`);
    process.exit(EXIT_FAILURE);
  }
  process.stdout.write(fs.readFileSync(file, 'utf8'));
}

export async function configDrift(opts: { kubeconfig?: string; json?: boolean }): Promise<void> {
  try {
    const client = adminClient(opts.kubeconfig ?? defaultKubeconfig());
    const report = (await client.request('GET', '/drover/v1/config/drift')) as DriftReport;
    client.close();
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatDrift(report));
    if (report.rows.some((r) => r.severity === 'error')) process.exitCode = 1;
  } catch (error) {
    process.stderr.write(`drover config drift: ${(error as Error).message}\n`);
    process.exit(EXIT_FAILURE);
  }
}

export async function nodeForget(name: string, opts: { kubeconfig?: string }): Promise<void> {
  try {
    const client = adminClient(opts.kubeconfig ?? defaultKubeconfig());
    const result = (await client.request('DELETE', `/drover/v1/nodes/${encodeURIComponent(name)}`)) as {
      registrationRemoved: boolean;
      nodeId?: string;
      nodeDeleted: boolean;
      advertisementDeleted?: boolean;
    };
    client.close();
    process.stdout.write(
      `node ${name} forgotten: ` +
        `${result.registrationRemoved ? `registration of node id ${result.nodeId} removed, its credential revoked on every server` : 'it had no registration'}; ` +
        `${result.nodeDeleted ? 'Node object deleted' : 'there was no Node object'}` +
        `${result.advertisementDeleted ? '; its embedded-registry advertisement deleted' : ''}.\n` +
        `The next host to register ${name} takes the name; an agent of the old host still running would register it again, so stop it first.\n`,
    );
  } catch (error) {
    process.stderr.write(`drover node forget: ${(error as Error).message}\n`);
    process.exit(EXIT_FAILURE);
  }
}

export async function clusterConfigSet(assignment: string, opts: { kubeconfig?: string }): Promise<void> {
  const eq = assignment.indexOf('=');
  if (eq <= 0) {
    process.stderr.write(`drover cluster config set: expected KEY=VALUE, got "${assignment}"\n`);
    process.exit(EXIT_CONFIG);
  }
  try {
    const client = adminClient(opts.kubeconfig ?? defaultKubeconfig());
    const result = (await client.request('PUT', '/drover/v1/cluster-config', {
      key: assignment.slice(0, eq),
      value: assignment.slice(eq + 1),
    })) as { key: string; previous?: string; value: string };
    client.close();
    process.stdout.write(
      `${result.key}: ${result.previous ?? '(unset)'} -> ${result.value}\n` +
        'Update each server’s local config to the new value and restart it; until then it shows as drifted (drover config drift).\n',
    );
  } catch (error) {
    process.stderr.write(`drover cluster config set: ${(error as Error).message}\n`);
    process.exit(error instanceof ApiError && error.code === 422 ? EXIT_CONFIG : EXIT_FAILURE);
  }
}
