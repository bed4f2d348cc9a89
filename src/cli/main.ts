#!/usr/bin/env node
import { Command } from 'commander';
import { addSettingOptions } from '../config/cli.js';
import { type Command as DroverCommand, defaultOf } from '../config/schema.js';
import { showConfig } from '../config/show.js';
import { DROVER_VERSION, versionInfo } from '../version.js';
import { clusterConfigSet, configDrift, defaultKubeconfig, nodeForget, tokenShow } from './admin.js';
import { fail, resolveFrom, runAgent, runServer } from './run.js';
import { secretsEncryptRotateKeys, secretsEncryptStatus } from './secrets-encrypt.js';
import { addImageCommands } from './images.js';
import { addKubeconfigCommand } from './users.js';

/**
 * `drover`: the commands and their flags (commander). The flags of `server` and `agent` are
 * generated from the config schema; what each command does is in run.ts (the server and the
 * agent as processes), admin.ts and secrets-encrypt.ts (the rest).
 */

const program = new Command('drover')
  .description('Drover: a lightweight, Kubernetes-compatible cluster control plane')
  .version(`drover ${DROVER_VERSION} (Kubernetes API ${versionInfo().gitVersion})`, '-v, --version')
  .showHelpAfterError('(run with --help for usage)');

const server = program
  .command('server')
  .description('Run a Drover server: datastore, API server, controllers, and an agent for its own node');
const serverAttributes = addSettingOptions(server, 'server');
server.action(() => runServer(server, serverAttributes));

const agent = program
  .command('agent')
  .description('Run a Drover agent: join a cluster and keep this node registered and heartbeating');
const agentAttributes = addSettingOptions(agent, 'agent');
agent.action(() => runAgent(agent, agentAttributes));

const token = program.command('token').description('Show join tokens');
token
  .command('show')
  .description('Print the server token (joins servers and agents), or with --agent the agent token (joins agents only)')
  .option('--data-dir <dir>', 'the server’s data dir', defaultOf('data-dir'))
  .option('--agent', 'the agent token: it can register nodes but not fetch the cluster identity')
  .action(tokenShow);

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
    process.stdout.write(showConfig(resolveFrom(which, show, showAttributes), opts.json === true));
  } catch (error) {
    fail('config show', error);
  }
});

configCommand
  .command('drift')
  .description('Show how nodes’ effective configurations differ (cluster-wide differences are errors)')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .option('--json', 'machine-readable output')
  .action(configDrift);

const nodeCommand = program.command('node').description('Node names and registrations');
nodeCommand
  .command('forget')
  .description(
    'Free a node name: remove its registration (password binding and credential, on every server) and its Node object, ' +
      'so another host may register the name (kubectl delete node alone does not free it)',
  )
  .argument('<name>', 'the node name')
  .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
  .action(nodeForget);

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
  .action(clusterConfigSet);

addKubeconfigCommand(program);
addImageCommands(program);

await program.parseAsync(process.argv);
