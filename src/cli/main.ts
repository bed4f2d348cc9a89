#!/usr/bin/env node
import fs from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { Agent, type AgentOptions } from '../agent/agent.js';
import { JoinError } from '../agent/bootstrap.js';
import { ApiError } from '../apiserver/errors.js';
import { JoinTokenError } from '../cluster/join-token.js';
import { nodeLabelViolation } from '../cluster/node-authorization.js';
import { addSettingOptions, flagValues } from '../config/cli.js';
import { ConfigError, EXIT_CONFIG, type ResolvedConfig, resolveConfig } from '../config/resolve.js';
import { type Command as DroverCommand, defaultOf, labelRecord } from '../config/schema.js';
import { shutdownTimings } from '../config/timings.js';
import { formatDrift, type DriftReport, publishedValues } from '../config/drift.js';
import { showConfig } from '../config/show.js';
import { adminClient } from './kubeconfig.js';
import { secretsEncryptRotateKeys, secretsEncryptStatus } from './secrets-encrypt.js';
import { createLogger, type Logger } from '../logging/logger.js';
import { DataDirLockedError, lockDataDir } from '../server/lock.js';
import { ClusterJoinError } from '../server/bootstrap.js';
import { ServerConfigError, type ServerOptions, startServer } from '../server/server.js';
import { DROVER_VERSION, versionInfo } from '../version.js';

/** Exit codes: 1 runtime failure, 78 bad configuration (EX_CONFIG). */
const EXIT_FAILURE = 1;

function fail(command: string, error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  const config =
    error instanceof ConfigError ||
    error instanceof ServerConfigError ||
    error instanceof JoinTokenError ||
    error instanceof ClusterJoinError;
  const known = config || error instanceof DataDirLockedError || error instanceof JoinError;
  if (error instanceof ConfigError) {
    process.stderr.write(`drover ${command}: invalid configuration:\n${error.problems.map((p) => `  ${p}`).join('\n')}\n`);
  } else {
    process.stderr.write(`drover ${command}: ${known ? '' : 'failed to start: '}${message}\n`);
  }
  process.exit(config ? EXIT_CONFIG : EXIT_FAILURE);
}

/** Resolves as `which` would start: this command's flags, the environment and the config files. */
function resolveFrom<C extends DroverCommand>(which: C, command: Command, attributes: Map<string, string>): ResolvedConfig<C> {
  const configFlag = command.opts<{ config?: string }>().config;
  return resolveConfig({
    command: which,
    flags: flagValues(command, attributes),
    env: process.env,
    ...(configFlag ? { configFlag } : {}),
  });
}

function resolveFor<C extends DroverCommand>(which: C, command: Command, attributes: Map<string, string>): ResolvedConfig<C> {
  try {
    const config = resolveFrom(which, command, attributes);
    for (const warning of config.warnings) process.stderr.write(`drover ${which}: warning: ${warning}\n`);
    return config;
  } catch (error) {
    fail(which, error);
  }
}

/** Refuses at start the `node-label`s node restriction would refuse at registration. */
function checkNodeLabels(config: ResolvedConfig<'server' | 'agent'>): void {
  const problems = config.values.nodeLabels.flatMap((l) => {
    const violation = nodeLabelViolation(l.key);
    return violation ? [`node-label: a node ${violation} (${config.source('node-label')})`] : [];
  });
  if (problems.length) throw new ConfigError(problems);
}

/** `drover server`'s options: its typed settings (the server reads them from the config). */
function serverOptions(config: ResolvedConfig<'server'>): ServerOptions {
  checkNodeLabels(config);
  return { config };
}

/** `drover agent`'s options, from its typed settings. */
function agentOptions(config: ResolvedConfig<'agent'>, logger: Logger): AgentOptions {
  checkNodeLabels(config);
  const settings = config.values;
  // The resolver refuses an agent configuration without them.
  if (!settings.server || !settings.token) throw new ConfigError(['the agent needs "server" and "token"']);
  return {
    server: settings.server,
    token: settings.token,
    nodeName: settings.nodeName,
    dataDir: path.resolve(settings.dataDir),
    labels: labelRecord(settings.nodeLabels),
    taints: settings.nodeTaints,
    agentPort: settings.agentPort,
    ...(settings.nodeIp ? { nodeIp: settings.nodeIp } : {}),
    shutdownGracePeriodMs: settings.shutdownGracePeriodMs,
    supervisorMetrics: settings.supervisorMetrics,
    publishedConfig: publishedValues(config),
    logger,
  };
}

/** SIGTERM/SIGINT run `stop` once; the process exits when it is done or after `limitMs`. */
function onSignals(stop: () => Promise<void>, limitMs: number, log: (msg: string) => void): void {
  const handle = (signal: string): void => {
    log(`received ${signal}; shutting down`);
    setTimeout(() => {
      log(`shutdown took longer than ${limitMs}ms; exiting anyway`);
      process.exit(EXIT_FAILURE);
    }, limitMs).unref();
    stop().then(
      () => process.exit(0),
      () => process.exit(EXIT_FAILURE),
    );
  };
  process.once('SIGTERM', () => handle('SIGTERM'));
  process.once('SIGINT', () => handle('SIGINT'));
}

const program = new Command('drover')
  .description('Drover: a lightweight, Kubernetes-compatible cluster control plane')
  .version(`drover ${DROVER_VERSION} (Kubernetes API ${versionInfo().gitVersion})`, '-v, --version')
  .showHelpAfterError('(run with --help for usage)');

const server = program
  .command('server')
  .description('Run a Drover server: datastore, API server, controllers, and an agent for its own node');
const serverAttributes = addSettingOptions(server, 'server');
server.action(async () => {
  const config = resolveFor('server', server, serverAttributes);
  // Signals are handled from the first moment: one that arrives while the server is still
  // starting stops it as soon as it is up, rather than killing it halfway.
  let running: Awaited<ReturnType<typeof startServer>> | undefined;
  let started: () => void = () => undefined;
  const up = new Promise<void>((resolve) => (started = resolve));
  onSignals(
    async () => {
      await up;
      await running!.stop();
    },
    shutdownTimings(config.values.shutdownGracePeriodMs).serverExitDeadlineMs,
    (msg) => (running ? running.logger.info(msg) : process.stderr.write(`drover server: ${msg}\n`)),
  );
  try {
    running = await startServer(serverOptions(config));
    started();
  } catch (error) {
    fail('server', error);
  }
});

const agentCommand = program
  .command('agent')
  .description('Run a Drover agent: join a cluster and keep this node registered and heartbeating');
const agentAttributes = addSettingOptions(agentCommand, 'agent');
agentCommand.action(async () => {
  const config = resolveFor('agent', agentCommand, agentAttributes);
  const logger = createLogger(config.values.logLevel, 'drover-agent');
  let lock: ReturnType<typeof lockDataDir> | undefined;
  try {
    const options = agentOptions(config, logger);
    fs.mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
    lock = lockDataDir(options.dataDir, 'agent');
    const agent = new Agent(options);
    onSignals(
      async () => {
        await agent.shutdown('SIGTERM');
        lock?.release();
      },
      shutdownTimings(options.shutdownGracePeriodMs).agentExitDeadlineMs,
      (msg) => logger.info(msg),
    );
    await agent.start();
  } catch (error) {
    lock?.release();
    fail('agent', error);
  }
});

const token = program.command('token').description('Show join tokens');
token
  .command('show')
  .description('Print the server token (joins servers and agents), or with --agent the agent token (joins agents only)')
  .option('--data-dir <dir>', 'the server’s data dir', defaultOf('data-dir'))
  .option('--agent', 'the agent token: it can register nodes but not fetch the cluster identity')
  .action((opts: { dataDir: string; agent?: boolean }) => {
    const file = path.join(opts.dataDir, opts.agent ? 'agent-token' : 'token');
    if (!fs.existsSync(file)) {
      process.stderr.write(`drover token show: no token at ${file}; has a server run with --data-dir ${opts.dataDir}?\n`);
      process.exit(EXIT_FAILURE);
    }
    process.stdout.write(fs.readFileSync(file, 'utf8'));
  });

const configCommand = program.command('config').description('Inspect configuration');
const show = configCommand
  .command('show')
  .description('Print every setting’s effective value and where it came from (same resolver as the real start)')
  .option('--server', 'as `drover server` would resolve it (default)')
  .option('--agent', 'as `drover agent` would resolve it')
  .option('--json', 'machine-readable output')
  .allowUnknownOption(false);
// `config show` accepts every server and agent flag, so it can show their effect too; the agent's
// server URL is the one exception (its flag is this command's --server): use DROVER_SERVER or a file.
const showAttributes = addSettingOptions(show, 'all', new Set(['server']));
show.action(() => {
  const opts = show.opts<{ agent?: boolean; json?: boolean }>();
  const which: DroverCommand = opts.agent ? 'agent' : 'server';
  try {
    const config = resolveFrom(which, show, showAttributes);
    process.stdout.write(showConfig(config, opts.json === true));
  } catch (error) {
    fail('config show', error);
  }
});

const defaultKubeconfig = (): string =>
  process.env.KUBECONFIG ?? path.join(defaultOf('data-dir'), 'kubeconfig.yaml');

configCommand
  .command('drift')
  .description('Show how nodes’ effective configurations differ (cluster-wide differences are errors)')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .option('--json', 'machine-readable output')
  .action(async (opts: { kubeconfig?: string; json?: boolean }) => {
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
  });

const nodeCommand = program.command('node').description('Node names and registrations');
nodeCommand
  .command('forget')
  .description(
    'Free a node name: remove its registration (password binding and credential, on every server) and its Node object, ' +
      'so another host may register the name (kubectl delete node alone does not free it)',
  )
  .argument('<name>', 'the node name')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .action(async (name: string, opts: { kubeconfig?: string }) => {
    try {
      const client = adminClient(opts.kubeconfig ?? defaultKubeconfig());
      const result = (await client.request('DELETE', `/drover/v1/nodes/${encodeURIComponent(name)}`)) as {
        registrationRemoved: boolean;
        nodeId?: string;
        nodeDeleted: boolean;
      };
      client.close();
      process.stdout.write(
        `node ${name} forgotten: ` +
          `${result.registrationRemoved ? `registration of node id ${result.nodeId} removed, its credential revoked on every server` : 'it had no registration'}; ` +
          `${result.nodeDeleted ? 'Node object deleted' : 'there was no Node object'}.\n` +
          `The next host to register ${name} takes the name; an agent of the old host still running would register it again, so stop it first.\n`,
      );
    } catch (error) {
      process.stderr.write(`drover node forget: ${(error as Error).message}\n`);
      process.exit(EXIT_FAILURE);
    }
  });

const secretsEncrypt = program
  .command('secrets-encrypt')
  .description('Secrets encryption at rest (secrets-encryption: true): its status, and key rotation');
secretsEncrypt
  .command('status')
  .description('Print whether Secrets are encrypted, the rotation stage, whether every server holds the same keys, the keys, and how many Secrets each key encrypts')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .option('--json', 'machine-readable output')
  .action((opts: { kubeconfig?: string; json?: boolean }) =>
    secretsEncryptStatus({ kubeconfig: opts.kubeconfig ?? defaultKubeconfig(), json: opts.json === true }),
  );
secretsEncrypt
  .command('rotate-keys')
  .description(
    'Rotate the encryption key without downtime: a new key, loaded by every server, made active, every Secret re-encrypted with it, ' +
      'then the old key removed; answers when done (an interrupted rotation resumes with the next rotate-keys)',
  )
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .option('--json', 'machine-readable output')
  .action((opts: { kubeconfig?: string; json?: boolean }) =>
    secretsEncryptRotateKeys({ kubeconfig: opts.kubeconfig ?? defaultKubeconfig(), json: opts.json === true }),
  );

const cluster = program.command('cluster').description('Cluster-wide operations');
const clusterConfig = cluster.command('config').description('Cluster-wide settings');
clusterConfig
  .command('set')
  .description('Change a cluster-wide setting on a live cluster (then restart each server with the new value)')
  .argument('<key=value>', 'e.g. node-monitor-grace-period=6s')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .action(async (assignment: string, opts: { kubeconfig?: string }) => {
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
  });

await program.parseAsync(process.argv);
