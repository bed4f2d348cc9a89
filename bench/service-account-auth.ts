/**
 * ServiceAccount token authentication: what one request with a ServiceAccount token costs the
 * server before authorization, against the admin token's digest lookup in the same run.
 *
 *   node --import tsx bench/service-account-auth.ts [--round-ms 300] [--rounds 10]
 *
 * Writes bench/results/service-account-auth.json. In-process, on a SQLite datastore file (WAL),
 * through the real LocalClient, as in the server. Subjects, timed in interleaved rounds:
 *
 * - admin: `TokenAuthenticator` (SHA-256 of the token, one map lookup) - the baseline;
 * - verify: `verifyServiceAccountToken` alone (ES256 signature with jose, claims);
 * - first-use: `ServiceAccountAuthenticator` meeting an unbound token for the first time (verify +
 *   read the account), a new authenticator each call;
 * - account: the same token again (the signature check reused, the account from the informer
 *   cache, as in a server);
 * - account-read: the same with the cache not started: the account read from the store at every
 *   request (what every request paid before the cache);
 * - pod-bound: a pod-bound token again (the account and the pod from the cache);
 * - not-a-jwt: a hex token the authenticator passes on (what other users' requests pay).
 */
import type { IncomingMessage } from 'node:http';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { TokenAuthenticator } from '../src/apiserver/auth.js';
import { BUILT_IN_NAMESPACES, ResourceRegistry } from '../src/apiserver/resources.js';
import { ObjectStore } from '../src/apiserver/storage.js';
import { LocalClient } from '../src/client/local.js';
import { NAMESPACES, PODS, SERVICEACCOUNTS } from '../src/client/types.js';
import { ServiceAccountAuthenticator } from '../src/cluster/service-account-authenticator.js';
import { openSqliteDatastore } from '../src/datastore/sqlite.js';
import { createLogger } from '../src/logging/logger.js';
import {
  defaultApiAudiences,
  defaultIssuer,
  generateServiceAccountKeyPem,
  issueServiceAccountToken,
  signingKeyFromPem,
  verifyServiceAccountToken,
} from '../src/security/service-account-tokens.js';
import { benchTempDir, installCleanup, machineInfo, median, printMachine, removeBenchTempDir, round, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    'round-ms': { type: 'string', default: '300' },
    rounds: { type: 'string', default: '10' },
  },
});
const ROUND_MS = Number(args['round-ms']);
const ROUNDS = Number(args.rounds);

installCleanup();
const machine = machineInfo();
printMachine(machine);
const dir = benchTempDir('sa-auth');
const datastore = openSqliteDatastore(path.join(dir, 'state.db'));
const client = new LocalClient(new ObjectStore(datastore), new ResourceRegistry());
for (const name of BUILT_IN_NAMESPACES) await client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
const account = await client.create(SERVICEACCOUNTS, 'default', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'bench' } });
const pod = await client.create(PODS, 'default', {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'bench' },
  spec: { serviceAccountName: 'bench', containers: [{ name: 'c', image: 'none', command: ['true'] }] },
});
const key = await signingKeyFromPem(generateServiceAccountKeyPem());
const issuer = defaultIssuer();
const apiAudiences = defaultApiAudiences(issuer);
const claims = { issuer, namespace: 'default', serviceAccount: { name: 'bench', uid: account.metadata.uid! }, audiences: apiAudiences, expirationSeconds: 3600 };
const unbound = (await issueServiceAccountToken(key, claims)).token;
const bound = (await issueServiceAccountToken(key, { ...claims, pod: { name: 'bench', uid: pod.metadata.uid! } })).token;
const adminToken = 'a1'.repeat(32);
const admin = new TokenAuthenticator();
admin.add(adminToken, { name: 'system:admin', groups: ['system:masters'] });
const logger = createLogger('silent');
const newAuthenticator = (): ServiceAccountAuthenticator =>
  new ServiceAccountAuthenticator({ client, keys: [key], issuers: [issuer], apiAudiences, logger });
const accounts = newAuthenticator();
await accounts.start();
const uncached = newAuthenticator();
const req = (token: string): IncomingMessage => ({ headers: { authorization: `Bearer ${token}` } }) as IncomingMessage;
const mustAuthenticate = async (token: string, by = accounts): Promise<void> => {
  if (!(await by.authenticate(req(token)))) throw new Error('the benchmark token was refused');
};
// The pod-bound token's first use starts following pods: wait until the cache answers for it.
await mustAuthenticate(bound);
for (let i = 0; !accounts.following('pod'); i++) {
  if (i > 1000) throw new Error('the pod informer never listed');
  await new Promise((resolve) => setTimeout(resolve, 10));
}

const SUBJECTS: Record<string, () => unknown> = {
  admin: () => admin.authenticate(req(adminToken)),
  verify: () => verifyServiceAccountToken(unbound, { keys: [key], issuers: [issuer], apiAudiences }),
  'first-use': async () => {
    if (!(await newAuthenticator().authenticate(req(unbound)))) throw new Error('the benchmark token was refused');
  },
  account: () => mustAuthenticate(unbound),
  'account-read': () => mustAuthenticate(unbound, uncached),
  'pod-bound': () => mustAuthenticate(bound),
  'not-a-jwt': () => accounts.authenticate(req(adminToken)),
};

/** Microseconds per call over one round of about ROUND_MS. */
async function roundOf(fn: () => unknown): Promise<number> {
  let calls = 0;
  const start = performance.now();
  while (performance.now() - start < ROUND_MS) {
    await fn();
    calls++;
  }
  return ((performance.now() - start) * 1000) / calls;
}

const samples: Record<string, number[]> = Object.fromEntries(Object.keys(SUBJECTS).map((name) => [name, []]));
for (const fn of Object.values(SUBJECTS)) await roundOf(fn); // warm-up
for (let r = 0; r < ROUNDS; r++) {
  const names = Object.keys(SUBJECTS);
  if (r % 2) names.reverse();
  for (const name of names) samples[name]!.push(await roundOf(SUBJECTS[name]!));
}
accounts.stop();
await datastore.close();
removeBenchTempDir(dir);

const results = Object.fromEntries(
  Object.entries(samples).map(([name, us]) => [
    name,
    { medianMicroseconds: round(median(us), 1), ratioToAdmin: round(median(us.map((u, i) => u / samples['admin']![i]!)), 1) },
  ]),
);
for (const [name, r] of Object.entries(results)) {
  console.log(`${name.padEnd(12)} ${String(r.medianMicroseconds).padStart(8)} us per request   ${String(r.ratioToAdmin).padStart(6)} x admin`);
}
console.log(`written to ${writeResult('service-account-auth', { machine, roundMs: ROUND_MS, rounds: ROUNDS, results })}`);
