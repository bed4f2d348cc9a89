import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { ApiError } from '../apiserver/errors.js';
import {
  CLIENT_CERTIFICATES_PATH,
  DEFAULT_USER_CERTIFICATE_SECONDS,
  type IssuedUserCertificate,
  MIN_USER_CERTIFICATE_SECONDS,
  userCertificateProblems,
} from '../cluster/user-certificates.js';
import { DurationError, formatDuration, parseDuration } from '../config/duration.js';
import { EXIT_CONFIG } from '../config/resolve.js';
import { createCertificateRequest } from '../security/pki.js';
import { renderKubeconfig, writeKubeconfig } from '../server/kubeconfig.js';
import { defaultKubeconfig } from './admin.js';
import { clientFor, readKubeconfig } from './kubeconfig.js';

/**
 * `drover kubeconfig create NAME --group G…`: a kubeconfig for a new user, whose client
 * certificate the client CA signs (src/cluster/user-certificates.ts). It goes through a server's
 * `/drover/v1/client-certificates` with the admin kubeconfig, like `drover node forget`, so it
 * works from any machine that has the admin kubeconfig, and only for admins (system:masters). The
 * key is made here and never sent: the server sees a certificate signing request only.
 */

interface CreateOptions {
  group: string[];
  expiration: string;
  output?: string;
  force?: boolean;
  allowMasters?: boolean;
  server?: string;
  kubeconfig?: string;
}

class UsageError extends Error {
  override name = 'UsageError';
}

const collect = (value: string, previous: string[]): string[] => [...previous, value];

/** Whole seconds of `--expiration`, refused below Kubernetes' minimum for certificate requests. */
function expirationSeconds(text: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (error) {
    if (error instanceof DurationError) throw new UsageError(`--expiration: ${error.message}`);
    throw error;
  }
  if (ms < MIN_USER_CERTIFICATE_SECONDS * 1000) {
    throw new UsageError(`--expiration ${text} is too short: at least ${formatDuration(MIN_USER_CERTIFICATE_SECONDS * 1000)}`);
  }
  return Math.floor(ms / 1000);
}

async function create(name: string, opts: CreateOptions): Promise<void> {
  const groups = [...new Set(opts.group)];
  const problems = userCertificateProblems(name, groups, opts.allowMasters === true);
  if (problems.length) throw new UsageError(problems.join('\n  '));
  const seconds = expirationSeconds(opts.expiration);
  const output = opts.output ? path.resolve(opts.output) : undefined;
  if (output && fs.existsSync(output) && !opts.force) throw new UsageError(`${output} exists; pass --force to replace it`);
  if (opts.server !== undefined && !/^https:\/\/[^/?#\s]+$/.test(opts.server)) {
    throw new UsageError(`--server must be https://host[:port], not ${JSON.stringify(opts.server)}`);
  }

  const admin = readKubeconfig(opts.kubeconfig ?? defaultKubeconfig());
  const { requestPem, privateKeyPem } = await createCertificateRequest(name, groups);
  const client = clientFor(admin);
  let issued: IssuedUserCertificate;
  try {
    issued = (await client.request('POST', CLIENT_CERTIFICATES_PATH, {
      name,
      groups,
      expirationSeconds: seconds,
      certificateSigningRequest: requestPem,
      allowMasters: opts.allowMasters === true,
    })) as IssuedUserCertificate;
  } finally {
    client.close();
  }
  const kubeconfig = {
    serverUrl: opts.server ?? admin.server,
    caCertificatePem: admin.caPem,
    clusterName: admin.clusterName,
    userName: name,
    contextName: `${name}@${admin.clusterName}`,
    clientCertificatePem: issued.certificate,
    clientKeyPem: privateKeyPem,
  };
  if (output) writeKubeconfig(output, kubeconfig);
  else process.stdout.write(renderKubeconfig(kubeconfig));
  process.stderr.write(
    `user ${JSON.stringify(issued.name)} (groups: ${issued.groups.join(', ') || 'none'}): certificate serial ${issued.serialNumber}, ` +
      `valid until ${issued.notAfter}${output ? `; kubeconfig written to ${output} (mode 0600)` : ''}.\n` +
      'It cannot be revoked before then: keep it as private as a password. What the user may do is up to RBAC ' +
      '(kubectl create rolebinding/clusterrolebinding … --user or --group).\n',
  );
}

export function addKubeconfigCommand(program: Command): void {
  const kubeconfig = program.command('kubeconfig').description('Kubeconfigs for users: client certificates from the cluster’s client CA');
  kubeconfig
    .command('create')
    .description(
      'Issue a client certificate for user NAME in the given groups and write a kubeconfig with it (admins only: ' +
        'uses the admin kubeconfig). The certificate cannot be revoked before it expires; RBAC decides what the user may do.',
    )
    .argument('<name>', 'the user name (the certificate’s common name); names starting with system: are refused')
    .option('--group <group>', 'a group of the user (the certificate’s organization); repeat for several', collect, [])
    .option(
      '--expiration <duration>',
      `how long the certificate is valid, e.g. 720h (at least ${formatDuration(MIN_USER_CERTIFICATE_SECONDS * 1000)})`,
      formatDuration(DEFAULT_USER_CERTIFICATE_SECONDS * 1000),
    )
    .option('-o, --output <file>', 'write the kubeconfig to this file (mode 0600) instead of standard output')
    .option('--force', 'replace an existing --output file')
    .option('--allow-masters', 'allow group system:masters: a full cluster admin that cannot be revoked before expiry')
    .option('--server <url>', 'the API server URL the new kubeconfig points at (default: the admin kubeconfig’s)')
    .option('--kubeconfig <file>', 'admin kubeconfig (default: $KUBECONFIG or <data-dir>/kubeconfig.yaml)')
    .action(async (name: string, opts: CreateOptions) => {
      try {
        await create(name, opts);
      } catch (error) {
        process.stderr.write(`drover kubeconfig create: ${(error as Error).message}\n`);
        const invalid = error instanceof UsageError || (error instanceof ApiError && error.code === 422);
        process.exit(invalid ? EXIT_CONFIG : 1);
      }
    });
}
