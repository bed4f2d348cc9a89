/**
 * The ServiceAccount controllers in-process, run by a real ControllerManager on a FakeClock over
 * an in-memory store and the real LocalClient: the `default` account in every namespace (created
 * again when deleted, not in a namespace being deleted), and legacy token Secrets (filled with a
 * token that authenticates, ca.crt and namespace; deleted when their account does not exist or
 * goes; taken out of the account's secrets list when deleted).
 *
 * Run: node --import tsx --test test/unit/service-account-controllers.test.ts
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';

import type { TokenIssuer } from '../../src/apiserver/definition.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { NAMESPACES, SECRETS, SERVICEACCOUNTS } from '../../src/client/types.js';
import { ServiceAccountAuthenticator } from '../../src/cluster/service-account-authenticator.js';
import { FakeClock, settle } from '../../src/controllers/clock.js';
import { ControllerManager } from '../../src/controllers/controller-manager.js';
import { LegacyTokensController, SERVICE_ACCOUNT_UID_ANNOTATION } from '../../src/controllers/legacy-tokens.js';
import { ServiceAccountsController } from '../../src/controllers/service-accounts.js';
import {
  defaultApiAudiences,
  defaultIssuer,
  generateServiceAccountKeyPem,
  issueServiceAccountToken,
  signingKeyFromPem,
} from '../../src/security/service-account-tokens.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

const TIMINGS = { nodeLeaseRenewIntervalMs: 1000, nodeMonitorGracePeriodMs: 4000, fencingTimeoutMs: 3000, defaultUnavailableTolerationMs: 0 };
const ISSUER = defaultIssuer();
const API_AUDIENCES = defaultApiAudiences(ISSUER);
const CA_PEM = '-----BEGIN CERTIFICATE-----\nnot a real one, only carried\n-----END CERTIFICATE-----\n';
const b64 = (text: string): string => Buffer.from(text).toString('base64');
const unb64 = (text: string | undefined): string => Buffer.from(text ?? '', 'base64').toString('utf8');

/** Polls an in-process condition: the controllers run on the event loop, not on the fake clock. */
const until = <T>(check: () => Promise<T | undefined | false>, what: string): Promise<T> => eventually(check, what, 10_000, 5);

describe('ServiceAccount controllers under the controller manager', () => {
  let api: InProcessApi;
  let manager: ControllerManager;
  let authenticator: ServiceAccountAuthenticator;

  const tokenSecret = (name: string, account: string, extra: Record<string, string> = {}): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, annotations: { 'kubernetes.io/service-account.name': account, ...extra } },
    type: 'kubernetes.io/service-account-token',
  });
  const secretData = async (ns: string, name: string): Promise<Record<string, string> | undefined> =>
    (await api.client.get(SECRETS, ns, name))?.data as Record<string, string> | undefined;
  const authenticates = async (token: string): Promise<string | undefined> =>
    (await authenticator.authenticate({ headers: { authorization: `Bearer ${token}` } } as IncomingMessage))?.name;

  before(async () => {
    api = await inProcessApi();
    const key = await signingKeyFromPem(generateServiceAccountKeyPem());
    const tokens: TokenIssuer = { apiAudiences: API_AUDIENCES, issue: (req) => issueServiceAccountToken(key, { ...req, issuer: ISSUER }) };
    authenticator = new ServiceAccountAuthenticator({ client: api.client, keys: [key], issuers: [ISSUER], apiAudiences: API_AUDIENCES, logger: api.logger });
    // A namespace that exists before the controllers start, with an account of its own.
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'early' } });
    manager = new ControllerManager({
      client: api.client,
      logger: api.logger,
      identity: 'server-a',
      timings: TIMINGS,
      clock: new FakeClock(),
      termControllers: [
        (informers, clock) => new ServiceAccountsController(api.client, informers, api.logger, { clock }),
        (informers, clock) => new LegacyTokensController(api.client, informers, api.logger, { tokens, caCertificatePem: CA_PEM, clock }),
      ],
    });
    manager.start();
    await settle();
    assert.ok(manager.isLeader);
  });

  after(async () => {
    await manager.stop();
    await api.close();
  });

  it('creates the default account in every namespace, existing and new', async () => {
    for (const ns of ['default', 'kube-system', 'kube-public', 'kube-node-lease', 'early']) {
      await until(() => api.client.get(SERVICEACCOUNTS, ns, 'default'), `default account in ${ns}`);
    }
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team' } });
    await until(() => api.client.get(SERVICEACCOUNTS, 'team', 'default'), 'default account in team');
  });

  it('creates it again when deleted, with a new UID', async () => {
    const first = (await api.client.get(SERVICEACCOUNTS, 'team', 'default'))!;
    await api.client.delete(SERVICEACCOUNTS, 'team', 'default');
    const again = await until(async () => {
      const sa = await api.client.get(SERVICEACCOUNTS, 'team', 'default');
      return sa && sa.metadata.uid !== first.metadata.uid ? sa : undefined;
    }, 'default account created again');
    assert.equal(again.metadata.name, 'default');
  });

  it('creates none in a namespace being deleted', async () => {
    // A finalizer of someone else's keeps it Terminating once the delete has taken its contents (the account).
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'brief', finalizers: ['example.com/hold'] } });
    await until(() => api.client.get(SERVICEACCOUNTS, 'brief', 'default'), 'default account in brief');
    await api.client.delete(NAMESPACES, undefined, 'brief');
    assert.equal(((await api.client.get(NAMESPACES, undefined, 'brief'))?.status as { phase?: string } | undefined)?.phase, 'Terminating');
    // A later namespace's account shows the controller has handled the deletion before it.
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'later' } });
    await until(() => api.client.get(SERVICEACCOUNTS, 'later', 'default'), 'default account in later');
    await settle();
    assert.equal(await api.client.get(SERVICEACCOUNTS, 'brief', 'default'), undefined);
  });

  it('fills a token Secret of an existing account: a token that authenticates, ca.crt, namespace, the account UID', async () => {
    await api.client.create(SERVICEACCOUNTS, 'team', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'ci' } });
    const sa = (await api.client.get(SERVICEACCOUNTS, 'team', 'ci'))!;
    await api.client.create(SECRETS, 'team', tokenSecret('ci-token', 'ci'));
    const data = await until(async () => {
      const d = await secretData('team', 'ci-token');
      return d?.['token'] ? d : undefined;
    }, 'the token Secret populated');
    assert.equal(unb64(data['ca.crt']), CA_PEM);
    assert.equal(unb64(data['namespace']), 'team');
    const secret = (await api.client.get(SECRETS, 'team', 'ci-token'))!;
    assert.equal(secret.metadata.annotations?.[SERVICE_ACCOUNT_UID_ANNOTATION], sa.metadata.uid);
    assert.equal(await authenticates(unb64(data['token'])), 'system:serviceaccount:team:ci');
  });

  it('leaves a token the creator supplied, and fills only what is missing', async () => {
    await api.client.create(SECRETS, 'team', { ...tokenSecret('own-token', 'ci'), data: { token: b64('mine') } });
    const data = await until(async () => {
      const d = await secretData('team', 'own-token');
      return d?.['ca.crt'] ? d : undefined;
    }, 'ca.crt added');
    assert.equal(unb64(data['token']), 'mine');
  });

  it('deletes a token Secret naming no account, or the UID of an account since replaced', async () => {
    await api.client.create(SECRETS, 'team', tokenSecret('orphan', 'nobody'));
    await until(async () => (await api.client.get(SECRETS, 'team', 'orphan')) === undefined, 'orphan token Secret deleted');
    await api.client.create(SECRETS, 'team', tokenSecret('stale', 'ci', { [SERVICE_ACCOUNT_UID_ANNOTATION]: 'an-old-uid' }));
    await until(async () => (await api.client.get(SECRETS, 'team', 'stale')) === undefined, 'stale-UID token Secret deleted');
    assert.ok(await api.client.get(SECRETS, 'team', 'ci-token'), 'the good one stays');
  });

  it('deletes the token Secrets of a deleted account; its token stops authenticating', async () => {
    await api.client.create(SERVICEACCOUNTS, 'team', { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'batch' } });
    await api.client.create(SECRETS, 'team', tokenSecret('batch-token', 'batch'));
    const data = await until(async () => {
      const d = await secretData('team', 'batch-token');
      return d?.['token'] ? d : undefined;
    }, 'batch token populated');
    const token = unb64(data['token']);
    assert.equal(await authenticates(token), 'system:serviceaccount:team:batch');
    await api.client.delete(SERVICEACCOUNTS, 'team', 'batch');
    assert.equal(await authenticates(token), undefined, 'refused as soon as the account is gone');
    await until(async () => (await api.client.get(SECRETS, 'team', 'batch-token')) === undefined, 'batch token Secret deleted');
    assert.ok(await api.client.get(SECRETS, 'team', 'ci-token'), 'another account’s Secret stays');
  });

  it('a deleted token Secret is taken out of its account’s secrets list, and its token stops working', async () => {
    const sa = (await api.client.get(SERVICEACCOUNTS, 'team', 'ci'))!;
    await api.client.update(SERVICEACCOUNTS, 'team', { ...sa, secrets: [{ name: 'ci-token' }, { name: 'unrelated' }] });
    const token = unb64((await secretData('team', 'ci-token'))?.['token']);
    await api.client.delete(SECRETS, 'team', 'ci-token');
    assert.equal(await authenticates(token), undefined);
    await until(async () => {
      const current = await api.client.get(SERVICEACCOUNTS, 'team', 'ci');
      return JSON.stringify(current?.secrets) === JSON.stringify([{ name: 'unrelated' }]);
    }, 'the reference removed');
  });
});
