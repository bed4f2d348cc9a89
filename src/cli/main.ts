#!/usr/bin/env node
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { Agent, type Taint } from '../agent/agent.js';
import { JoinError } from '../agent/bootstrap.js';
import { JoinTokenError } from '../cluster/join-token.js';
import { DurationError, parseDuration } from '../config/duration.js';
import { createLogger, LOG_LEVELS, type LogLevel } from '../logging/logger.js';
import { DataDirLockedError, lockDataDir } from '../server/lock.js';
import { defaultDataDir, ServerConfigError, startServer } from '../server/server.js';
import { DROVER_VERSION, versionInfo } from '../version.js';

/** Exit codes: 1 runtime failure, 78 bad configuration (EX_CONFIG). */
const EXIT_FAILURE = 1;
const EXIT_CONFIG = 78;

function port(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 0 || parsed > 65535) {
    throw new InvalidArgumentError('must be a port number between 0 and 65535 (0 picks a free port)');
  }
  return parsed;
}

function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (error) {
    throw new InvalidArgumentError((error as DurationError).message);
  }
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, ...value.split(',').map((v) => v.trim()).filter(Boolean)];
}

function label(value: string, previous: Record<string, string>): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected key=value, got "${value}"`);
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

function taint(value: string, previous: Taint[]): Taint[] {
  const match = /^([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$/.exec(value);
  if (!match) throw new InvalidArgumentError(`expected key[=value]:Effect with Effect NoSchedule, PreferNoSchedule or NoExecute, got "${value}"`);
  return [...previous, { key: match[1]!, ...(match[2] ? { value: match[2] } : {}), effect: match[3] as Taint['effect'] }];
}

function fail(command: string, error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  const config = error instanceof ServerConfigError || error instanceof JoinTokenError;
  process.stderr.write(`drover ${command}: ${config || error instanceof DataDirLockedError || error instanceof JoinError ? '' : 'failed to start: '}${message}\n`);
  process.exit(config ? EXIT_CONFIG : EXIT_FAILURE);
}

/** SIGTERM/SIGINT run `stop` once, and the process exits when it is done or after `limitMs`. */
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

const nodeOptions = (command: Command): Command =>
  command
    .option('--node-name <name>', 'name of this node', os.hostname().toLowerCase())
    .option('--node-label <key=value>', 'label for this node (repeatable)', label, {})
    .option('--node-taint <key=value:Effect>', 'taint this node registers with (repeatable)', taint, [])
    .option('--node-ip <address>', 'address other nodes reach this one at (default: first non-loopback IPv4)')
    .option('--agent-port <port>', "port of the agent's own HTTPS endpoint (0 picks a free port)", port, 10250)
    .option('--shutdown-grace-period <duration>', 'how long a planned shutdown may take', duration, 10_000);

interface NodeFlags {
  nodeName: string;
  nodeLabel: Record<string, string>;
  nodeTaint: Taint[];
  nodeIp?: string;
  agentPort: number;
  shutdownGracePeriod: number;
}

nodeOptions(
  program
    .command('server')
    .description('Run a Drover server: datastore, API server, controllers, and an agent for its own node')
    .option('--data-dir <dir>', 'folder for state, certificates and credentials', defaultDataDir())
    .option('--https-listen-port <port>', 'HTTPS port of the API server (0 picks a free port)', port, 6443)
    .option('--bind-address <address>', 'address the API server listens on', '0.0.0.0')
    .option('--tls-san <name>', 'extra host name or IP for the serving certificate (repeatable)', collect, [])
    .option('--write-kubeconfig <path>', 'also write the admin kubeconfig to this path (mode 0600)')
    .option('--node-lease-renew-interval <duration>', 'how often agents renew their node lease', duration, 1000)
    .option('--node-monitor-grace-period <duration>', 'silence after which a node is declared lost (>= 3 renew intervals)', duration, 4000)
    .option('--disable-agent', 'do not run an agent for this server’s own node', false)
    .addOption(new Option('--log-level <level>', 'log verbosity').choices(LOG_LEVELS as string[]).default('info')),
).action(
  async (
    opts: NodeFlags & {
      dataDir: string;
      httpsListenPort: number;
      bindAddress: string;
      tlsSan: string[];
      writeKubeconfig?: string;
      nodeLeaseRenewInterval: number;
      nodeMonitorGracePeriod: number;
      disableAgent: boolean;
      logLevel: LogLevel;
    },
  ) => {
    let running: Awaited<ReturnType<typeof startServer>>;
    try {
      running = await startServer({
        dataDir: opts.dataDir,
        httpsListenPort: opts.httpsListenPort,
        bindAddress: opts.bindAddress,
        tlsSans: opts.tlsSan,
        ...(opts.writeKubeconfig ? { writeKubeconfig: opts.writeKubeconfig } : {}),
        logLevel: opts.logLevel,
        nodeLeaseRenewIntervalMs: opts.nodeLeaseRenewInterval,
        nodeMonitorGracePeriodMs: opts.nodeMonitorGracePeriod,
        disableAgent: opts.disableAgent,
        nodeName: opts.nodeName,
        nodeLabels: opts.nodeLabel,
        nodeTaints: opts.nodeTaint,
        agentPort: opts.agentPort,
        ...(opts.nodeIp ? { nodeIp: opts.nodeIp } : {}),
        shutdownGracePeriodMs: opts.shutdownGracePeriod,
      });
    } catch (error) {
      fail('server', error);
    }
    onSignals(() => running.stop(), opts.shutdownGracePeriod + 5000, (msg) => running.logger.info(msg));
  },
);

nodeOptions(
  program
    .command('agent')
    .description('Run a Drover agent: join a cluster and keep this node registered and heartbeating')
    .requiredOption('--server <url>', 'URL of a Drover server, e.g. https://10.0.0.1:6443')
    .requiredOption('--token <token>', 'join token (drover token show on the server)', process.env.DROVER_TOKEN)
    .option('--data-dir <dir>', 'folder for this node’s identity', defaultDataDir())
    .addOption(new Option('--log-level <level>', 'log verbosity').choices(LOG_LEVELS as string[]).default('info')),
).action(async (opts: NodeFlags & { server: string; token: string; dataDir: string; logLevel: LogLevel }) => {
  const logger = createLogger(opts.logLevel, 'drover-agent');
  let agent: Agent;
  let lock: ReturnType<typeof lockDataDir>;
  try {
    fs.mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
    lock = lockDataDir(path.resolve(opts.dataDir), 'agent');
    agent = new Agent({
      server: opts.server,
      token: opts.token,
      nodeName: opts.nodeName,
      dataDir: path.resolve(opts.dataDir),
      labels: opts.nodeLabel,
      taints: opts.nodeTaint,
      agentPort: opts.agentPort,
      ...(opts.nodeIp ? { nodeIp: opts.nodeIp } : {}),
      shutdownGracePeriodMs: opts.shutdownGracePeriod,
      logger,
    });
    onSignals(
      async () => {
        await agent.shutdown('SIGTERM');
        lock.release();
      },
      opts.shutdownGracePeriod,
      (msg) => logger.info(msg),
    );
    await agent.start();
  } catch (error) {
    fail('agent', error);
  }
});

const token = program.command('token').description('Show join tokens');
token
  .command('show')
  .description('Print the join token agents use to join this server')
  .option('--data-dir <dir>', 'the server’s data dir', defaultDataDir())
  .action((opts: { dataDir: string }) => {
    const file = path.join(opts.dataDir, 'token');
    if (!fs.existsSync(file)) {
      process.stderr.write(`drover token show: no token at ${file}; has a server run with --data-dir ${opts.dataDir}?\n`);
      process.exit(EXIT_FAILURE);
    }
    process.stdout.write(fs.readFileSync(file, 'utf8'));
  });

await program.parseAsync(process.argv);
