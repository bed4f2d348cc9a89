import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { Agent, type AgentOptions } from '../agent/agent.js';
import { JoinError } from '../agent/bootstrap.js';
import { JoinTokenError } from '../cluster/join-token.js';
import { nodeLabelViolation } from '../cluster/node-authorization.js';
import { flagValues } from '../config/cli.js';
import { publishedValues } from '../config/drift.js';
import { ConfigError, EXIT_CONFIG, type ResolvedConfig, resolveConfig } from '../config/resolve.js';
import { type Command as DroverCommand } from '../config/schema.js';
import { agentOptionsOf } from '../agent/node-settings.js';
import { shutdownTimings } from '../config/timings.js';
import { loadRegistries, RegistriesError } from '../images/registry/registries.js';
import { createLogger, type Logger } from '../logging/logger.js';
import { ClusterJoinError } from '../server/bootstrap.js';
import { DataDirLockedError, lockDataDir } from '../server/lock.js';
import { ServerConfigError, type ServerOptions, startServer } from '../server/server.js';

/**
 * `drover server` and `drover agent` as processes: their configuration resolved (and refused
 * with exit code 78 before anything is written), mapped to the server's and agent's options in
 * one typed place, the SIGTERM/SIGINT handlers, and exit codes.
 */

/** Exit codes: 1 runtime failure, 78 bad configuration (EX_CONFIG). */
export const EXIT_FAILURE = 1;

export function fail(command: string, error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  const config =
    error instanceof ConfigError ||
    error instanceof RegistriesError ||
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
export function resolveFrom<C extends DroverCommand>(which: C, command: Command, attributes: Map<string, string>): ResolvedConfig<C> {
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

/** Refuses at start a registries.yaml the agent could not read (a missing file is fine: no mirrors). */
function checkRegistries(config: ResolvedConfig<'server' | 'agent'>): void {
  try {
    loadRegistries(config.values.privateRegistry);
  } catch (error) {
    if (!(error instanceof RegistriesError)) throw error;
    throw new ConfigError(error.problems.map((p) => `private-registry (${config.source('private-registry')}): ${p}`));
  }
}

/** `drover server`'s options: its typed settings (the server reads them from the config). */
function serverOptions(config: ResolvedConfig<'server'>): ServerOptions {
  checkNodeLabels(config);
  if (!config.values.disableAgent) checkRegistries(config);
  return { config };
}

/** `drover agent`'s options, from its typed settings. */
function agentOptions(config: ResolvedConfig<'agent'>, logger: Logger): AgentOptions {
  checkNodeLabels(config);
  checkRegistries(config);
  const settings = config.values;
  // The resolver refuses an agent configuration without them.
  if (!settings.server || !settings.token) throw new ConfigError(['the agent needs "server" and "token"']);
  return {
    server: settings.server,
    token: settings.token,
    ...agentOptionsOf(settings),
    dataDir: path.resolve(settings.dataDir),
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

/** `drover server`: runs until SIGTERM or SIGINT. */
export async function runServer(command: Command, attributes: Map<string, string>): Promise<void> {
  const config = resolveFor('server', command, attributes);
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
}

/** `drover agent`: runs until SIGTERM or SIGINT. */
export async function runAgent(command: Command, attributes: Map<string, string>): Promise<void> {
  const config = resolveFor('agent', command, attributes);
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
}
