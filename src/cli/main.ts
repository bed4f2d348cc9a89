#!/usr/bin/env node
import { Command, InvalidArgumentError, Option } from 'commander';
import { LOG_LEVELS, type LogLevel } from '../logging/logger.js';
import { defaultDataDir, startServer } from '../server/server.js';
import { DataDirLockedError } from '../server/lock.js';
import { DROVER_VERSION, versionInfo } from '../version.js';

/** Exit codes: 1 runtime failure, 2 usage error (commander), 78 bad configuration (EX_CONFIG). */
const EXIT_FAILURE = 1;

function port(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 0 || parsed > 65535) {
    throw new InvalidArgumentError('must be a port number between 0 and 65535 (0 picks a free port)');
  }
  return parsed;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, ...value.split(',').map((v) => v.trim()).filter(Boolean)];
}

const program = new Command('drover')
  .description('Drover: a lightweight, Kubernetes-compatible cluster control plane')
  .version(`drover ${DROVER_VERSION} (Kubernetes API ${versionInfo().gitVersion})`, '-v, --version')
  .showHelpAfterError('(run with --help for usage)');

program
  .command('server')
  .description('Run a Drover server: datastore, API server and controllers (embedded SQLite by default)')
  .option('--data-dir <dir>', 'folder for state, certificates and credentials', defaultDataDir())
  .option('--https-listen-port <port>', 'HTTPS port of the API server (0 picks a free port)', port, 6443)
  .option('--bind-address <address>', 'address the API server listens on', '0.0.0.0')
  .option('--tls-san <name>', 'extra host name or IP for the serving certificate (repeatable)', collect, [])
  .option('--write-kubeconfig <path>', 'also write the admin kubeconfig to this path (mode 0600)')
  .addOption(
    new Option('--log-level <level>', 'log verbosity').choices(LOG_LEVELS as string[]).default('info'),
  )
  .action(async (opts: {
    dataDir: string;
    httpsListenPort: number;
    bindAddress: string;
    tlsSan: string[];
    writeKubeconfig?: string;
    logLevel: LogLevel;
  }) => {
    let running: Awaited<ReturnType<typeof startServer>>;
    try {
      running = await startServer({
        dataDir: opts.dataDir,
        httpsListenPort: opts.httpsListenPort,
        bindAddress: opts.bindAddress,
        tlsSans: opts.tlsSan,
        ...(opts.writeKubeconfig ? { writeKubeconfig: opts.writeKubeconfig } : {}),
        logLevel: opts.logLevel,
      });
    } catch (error) {
      if (error instanceof DataDirLockedError) {
        process.stderr.write(`drover server: ${error.message}\n`);
      } else {
        process.stderr.write(`drover server: failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
      }
      process.exit(EXIT_FAILURE);
    }
    const shutdown = (signal: string): void => {
      running.logger.info({ signal }, 'received signal');
      const force = setTimeout(() => {
        running.logger.error('shutdown took longer than 5s; exiting anyway');
        process.exit(EXIT_FAILURE);
      }, 5000);
      force.unref();
      running.stop().then(
        () => process.exit(0),
        (error: unknown) => {
          running.logger.error({ err: error }, 'error during shutdown');
          process.exit(EXIT_FAILURE);
        },
      );
    };
    process.once('SIGTERM', () => shutdown('SIGTERM'));
    process.once('SIGINT', () => shutdown('SIGINT'));
  });

await program.parseAsync(process.argv);
