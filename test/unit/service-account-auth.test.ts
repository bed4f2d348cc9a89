/**
 * ServiceAccounts in-process: the kind through the real LocalClient (shape checks, printer), the
 * TokenRequest subresource through the real verb layer with a real signing key (kube's defaults,
 * refusals and bindings), and the ServiceAccount token authenticator over the in-memory store:
 * accepted tokens give kube's user; expired (a fake `now`), wrong-audience, deleted or re-created
 * account, deleted or re-created bound pod and Secret are refused; other tokens fall through to
 * the next authenticator of the chain. Then the same authenticator with its informers started:
 * no store read for a token seen lately, and still every refusal (deleted, re-created): at once
 * for a change made through this server's store, once the watch delivers it for one made under it
 * (as another server's), while a token for an account created a moment ago works at once.
 *
 * Run: node --import tsx --test test/unit/service-account-auth.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { after, before, beforeEach, describe, it } from 'node:test';
import { decodeJwt } from 'jose';

import { TokenAuthenticator, UnionAuthenticator, type UserInfo } from '../../src/apiserver/auth.js';
import type { TokenIssuer } from '../../src/apiserver/definition.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { ResourceVerbs } from '../../src/apiserver/verbs/verbs.js';
import { type ApiClient, NAMESPACES, PODS, SECRETS, SERVICEACCOUNTS } from '../../src/client/types.js';
import { ServiceAccountAuthenticator } from '../../src/cluster/service-account-authenticator.js';
import type { LocalWrites } from '../../src/cluster/service-account-objects.js';
import {
  defaultApiAudiences,
  defaultIssuer,
  generateServiceAccountKeyPem,
  issueServiceAccountToken,
  type SigningKey,
  signingKeyFromPem,
} from '../../src/security/service-account-tokens.js';
import { type InProcessApi, inProcessApi } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

const ISSUER = defaultIssuer();
const API_AUDIENCES = defaultApiAudiences(ISSUER);

let api: InProcessApi;
let key: SigningKey;
let verbs: ResourceVerbs;
let authenticator: ServiceAccountAuthenticator;
let clockOffsetMs = 0;

const request = (token: string): IncomingMessage => ({ headers: { authorization: `Bearer ${token}` } }) as IncomingMessage;
const account = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } });
const pod = (name: string, serviceAccountName?: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name },
  spec: { ...(serviceAccountName ? { serviceAccountName } : {}), containers: [{ name: 'c', image: 'none', command: ['sleep', '1'] }] },
});
const tokenRequest = (spec: Record<string, unknown> = {}): KubeObject => ({
  apiVersion: 'authentication.k8s.io/v1',
  kind: 'TokenRequest',
  metadata: {},
  spec,
});

const saDef = () => api.registry.lookup('', 'v1', 'serviceaccounts')!;
const createToken = (namespace: string, name: string, body: KubeObject) => verbs.createToken({}, saDef(), namespace, name, body);
async function tokenFor(namespace: string, name: string, spec: Record<string, unknown> = {}): Promise<string> {
  const { object } = await createToken(namespace, name, tokenRequest(spec));
  return (object.status as { token: string }).token;
}

async function refused(promise: Promise<unknown>, code: number, pattern: RegExp): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ApiError, `expected an ApiError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    assert.match(error.message, pattern);
    return error;
  }
  assert.fail('the request was accepted');
}

before(async () => {
  api = await inProcessApi();
  key = await signingKeyFromPem(generateServiceAccountKeyPem());
  const tokens: TokenIssuer = {
    apiAudiences: API_AUDIENCES,
    issue: (req) => issueServiceAccountToken(key, { ...req, issuer: ISSUER }),
  };
  verbs = new ResourceVerbs({ store: api.store, registry: api.registry, tokens });
  authenticator = new ServiceAccountAuthenticator({
    client: api.client,
    keys: [key],
    issuers: [ISSUER],
    apiAudiences: API_AUDIENCES,
    logger: api.logger,
    now: () => new Date(Date.now() + clockOffsetMs),
  });
  await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ci' } });
});

after(async () => {
  await api.close();
});

beforeEach(() => {
  clockOffsetMs = 0;
});

describe('the ServiceAccount kind', () => {
  it('is created and read through the client, with its references and automount flag', async () => {
    await api.client.create(SERVICEACCOUNTS, 'ci', {
      ...account('robot'),
      secrets: [{ name: 'robot-token' }],
      imagePullSecrets: [{ name: 'registry' }],
      automountServiceAccountToken: false,
    });
    const stored = (await api.client.get(SERVICEACCOUNTS, 'ci', 'robot'))!;
    assert.deepEqual(stored.secrets, [{ name: 'robot-token' }]);
    assert.equal(stored.automountServiceAccountToken, false);
    assert.deepEqual(saDef().printer.cells(stored, Date.now()).slice(0, 2), ['robot', 1]);
    assert.deepEqual(saDef().printer.columns.map((c) => c.name), ['Name', 'Secrets', 'Age']);
    assert.deepEqual(saDef().shortNames, ['sa']);
  });

  it('refuses fields of the wrong type with a 400 naming the field', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ secrets: 'x' }, /cannot unmarshal string into Go struct field ServiceAccount.secrets of type \[\]v1.ObjectReference/],
      [{ secrets: [{ name: 3 }] }, /cannot unmarshal number into Go struct field ServiceAccount.secrets.name of type string/],
      [{ imagePullSecrets: [1] }, /ServiceAccount.imagePullSecrets of type v1.LocalObjectReference/],
      [{ automountServiceAccountToken: 'yes' }, /ServiceAccount.automountServiceAccountToken of type bool/],
    ];
    for (const [fields, pattern] of cases) {
      const error = await refused(api.client.create(SERVICEACCOUNTS, 'ci', { ...account('bad'), ...fields }), 400, pattern);
      assert.ok(error.details?.causes?.[0]?.field, `the 400 names the field: ${error.message}`);
    }
  });
});

describe('TokenRequest (serviceaccounts/<name>/token)', () => {
  before(async () => {
    await api.client.create(SERVICEACCOUNTS, 'ci', account('builder'));
  });

  it('defaults to an hour for the API audiences, and answers the request with its status', async () => {
    const before = Math.floor(Date.now() / 1000);
    const { object, warnings } = await createToken('ci', 'builder', tokenRequest());
    assert.deepEqual(warnings, []);
    assert.equal(object.kind, 'TokenRequest');
    assert.equal(object.apiVersion, 'authentication.k8s.io/v1');
    assert.deepEqual({ name: object.metadata.name, namespace: object.metadata.namespace }, { name: 'builder', namespace: 'ci' });
    assert.deepEqual(object.spec, { audiences: API_AUDIENCES, expirationSeconds: 3600 });
    const status = object.status as { token: string; expirationTimestamp: string };
    const claims = decodeJwt(status.token);
    assert.equal(claims.sub, 'system:serviceaccount:ci:builder');
    assert.equal(claims.iss, ISSUER);
    assert.deepEqual(claims.aud, API_AUDIENCES);
    assert.ok(claims.iat! >= before && claims.exp === claims.iat! + 3600);
    assert.equal(Date.parse(status.expirationTimestamp) / 1000, claims.exp, 'expirationTimestamp is the token’s exp');
    const sa = (await api.client.get(SERVICEACCOUNTS, 'ci', 'builder'))!;
    assert.deepEqual((claims['kubernetes.io'] as { serviceaccount: unknown }).serviceaccount, { name: 'builder', uid: sa.metadata.uid });
  });

  it('refuses what kube-apiserver refuses, in its words', async () => {
    await refused(createToken('ci', 'nobody', tokenRequest()), 404, /serviceaccounts "nobody" not found/);
    const invalid = await refused(
      createToken('ci', 'builder', tokenRequest({ expirationSeconds: 599 })),
      422,
      /^TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes$/,
    );
    assert.deepEqual(invalid.details?.causes, [{ reason: 'FieldValueInvalid', message: 'Invalid value: 599: may not specify a duration less than 10 minutes', field: 'spec.expirationSeconds' }]);
    await refused(createToken('ci', 'builder', tokenRequest({ expirationSeconds: 2 ** 32 + 1 })), 422, /larger than 2\^32 seconds/);
    await refused(createToken('ci', 'builder', tokenRequest({ expirationSeconds: 700.5 })), 400, /cannot unmarshal number 700.5 .* of type int64/);
    await refused(createToken('ci', 'builder', tokenRequest({ audiences: 'x' })), 400, /cannot unmarshal string into Go struct field TokenRequestSpec.spec.audiences/);
    await refused(
      createToken('ci', 'builder', tokenRequest({ boundObjectRef: { kind: 'ConfigMap', apiVersion: 'v1', name: 'x' } })),
      400,
      /^cannot bind token to object of type \/v1, Kind=ConfigMap$/,
    );
    await refused(createToken('ci', 'builder', tokenRequest({ boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'gone' } })), 404, /pods "gone" not found/);
    await refused(
      createToken('ci', 'builder', { ...tokenRequest(), metadata: { name: 'other' } }),
      422,
      /metadata.name: Invalid value: "other": must match the service account name if specified/,
    );
    await refused(createToken('ci', 'builder', { ...tokenRequest(), kind: 'Pod' }), 400, /expected a TokenRequest, got Pod/);
  });

  it('binds to a pod of the same account (default when it names none) and checks the UID', async () => {
    const p = await api.client.create(PODS, 'ci', pod('runner', 'builder'));
    const bound = { kind: 'Pod', apiVersion: 'v1', name: 'runner' };
    const { object } = await createToken('ci', 'builder', tokenRequest({ boundObjectRef: { ...bound, uid: p.metadata.uid } }));
    const claims = decodeJwt((object.status as { token: string }).token);
    assert.deepEqual((claims['kubernetes.io'] as { pod: unknown }).pod, { name: 'runner', uid: p.metadata.uid });
    await refused(createToken('ci', 'builder', tokenRequest({ boundObjectRef: { ...bound, uid: 'old' } })), 409, /the UID in the bound object reference \(old\) does not match/);
    // Admission refuses a pod whose account does not exist, and writes `default` into one naming none.
    await api.client.create(SERVICEACCOUNTS, 'ci', account('default'));
    await api.client.create(PODS, 'ci', pod('anonymous'));
    await refused(
      createToken('ci', 'builder', tokenRequest({ boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'anonymous' } })),
      400,
      /cannot bind token for serviceaccount "builder" to pod running with different serviceaccount name/,
    );
    assert.ok(await tokenFor('ci', 'default', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'anonymous' } }), 'a pod naming no account runs as default');
  });

  it('the 3607 s pod-bound request (the kubelet’s) gets a year, warnafter at 3607 s', async () => {
    const { object } = await createToken('ci', 'builder', tokenRequest({ expirationSeconds: 3607, boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'runner' } }));
    const claims = decodeJwt((object.status as { token: string }).token);
    assert.equal(claims.exp! - claims.iat!, 365 * 24 * 3600);
    assert.equal((claims['kubernetes.io'] as { warnafter: number }).warnafter, claims.iat! + 3607);
    assert.equal(Date.parse((object.status as { expirationTimestamp: string }).expirationTimestamp) / 1000, claims.iat! + 3607);
  });

  it('is a 404 on a server without a signer, and is not a subresource of other kinds', async () => {
    const plain = new ResourceVerbs({ store: api.store, registry: api.registry });
    await refused(plain.createToken({}, saDef(), 'ci', 'builder', tokenRequest()), 404, /does not issue service account tokens/);
    await refused(verbs.createToken({}, api.registry.lookup('', 'v1', 'pods')!, 'ci', 'runner', tokenRequest()), 404, /could not find the requested resource/);
  });
});

describe('the ServiceAccount token authenticator', () => {
  before(async () => {
    await api.client.create(SERVICEACCOUNTS, 'ci', account('deployer'));
  });

  it('authenticates as kube’s service account user, with uid and extra', async () => {
    const p = await api.client.create(PODS, 'ci', pod('job', 'deployer'));
    const token = await tokenFor('ci', 'deployer', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'job' } });
    const user = (await authenticator.authenticate(request(token)))!;
    const sa = (await api.client.get(SERVICEACCOUNTS, 'ci', 'deployer'))!;
    assert.equal(user.name, 'system:serviceaccount:ci:deployer');
    assert.equal(user.uid, sa.metadata.uid);
    assert.deepEqual(user.groups, ['system:serviceaccounts', 'system:serviceaccounts:ci', 'system:authenticated']);
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/pod-name'], ['job']);
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/pod-uid'], [p.metadata.uid]);
    assert.match(user.extra?.['authentication.kubernetes.io/credential-id']?.[0] ?? '', /^JTI=[0-9a-f-]{36}$/);
  });

  it('verifies a token’s signature once for the requests that arrive together, and again only after 10 s', async () => {
    let verifications = 0;
    const keys = [key];
    // Every verification looks its key up by kid in this list.
    Object.defineProperty(keys, 'filter', {
      value: (...args: Parameters<SigningKey[]['filter']>) => {
        verifications++;
        return Array.prototype.filter.apply(keys, args);
      },
    });
    let offsetMs = 0;
    const counting = new ServiceAccountAuthenticator({
      client: api.client,
      keys,
      issuers: [ISSUER],
      apiAudiences: API_AUDIENCES,
      logger: api.logger,
      now: () => new Date(Date.now() + offsetMs),
    });
    const token = await tokenFor('ci', 'deployer');
    const together = async (): Promise<void> => {
      const users = await Promise.all(Array.from({ length: 20 }, () => counting.authenticate(request(token))));
      assert.ok(users.every((user) => user?.name === 'system:serviceaccount:ci:deployer'));
    };
    await together();
    assert.equal(verifications, 1, 'one verification for 20 requests in flight together');
    await together();
    assert.equal(verifications, 1, 'reused');
    offsetMs = 11_000;
    await together();
    assert.equal(verifications, 2, 'verified again after 10 s, once');
  });

  it('refuses an expired token (past exp plus the 60 s leeway), accepting it within the leeway', async () => {
    const token = await tokenFor('ci', 'deployer', { expirationSeconds: 600 });
    clockOffsetMs = (600 + 50) * 1000;
    assert.ok(await authenticator.authenticate(request(token)), 'within the leeway');
    clockOffsetMs = (600 + 70) * 1000;
    assert.equal(await authenticator.authenticate(request(token)), undefined);
    await assert.rejects(authenticator.authenticateToken(token), /service account token has expired/);
  });

  it('refuses a token for another audience', async () => {
    const token = await tokenFor('ci', 'deployer', { audiences: ['vault'] });
    assert.equal(await authenticator.authenticate(request(token)), undefined);
    await assert.rejects(authenticator.authenticateToken(token), /token audiences \["vault"\] is invalid for the target audiences/);
    assert.ok(await authenticator.authenticateToken(token, ['vault']), 'a caller asking for vault accepts it');
  });

  it('refuses tokens of a deleted account, and of the account deleted and created again (UID)', async () => {
    await api.client.create(SERVICEACCOUNTS, 'ci', account('temp'));
    const token = await tokenFor('ci', 'temp');
    assert.ok(await authenticator.authenticate(request(token)));
    await api.client.delete(SERVICEACCOUNTS, 'ci', 'temp');
    await assert.rejects(authenticator.authenticateToken(token), /serviceaccounts "temp" not found/);
    await api.client.create(SERVICEACCOUNTS, 'ci', account('temp'));
    await assert.rejects(authenticator.authenticateToken(token), /service account UID \(.*\) does not match claim/);
    assert.equal(await authenticator.authenticate(request(token)), undefined);
  });

  it('refuses a pod-bound token once the pod is gone or replaced, and a Secret-bound one likewise', async () => {
    await api.client.create(PODS, 'ci', pod('short', 'deployer'));
    const podToken = await tokenFor('ci', 'deployer', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'short' } });
    await api.client.delete(PODS, 'ci', 'short', { gracePeriodSeconds: 0 });
    await assert.rejects(authenticator.authenticateToken(podToken), /service account token has been invalidated/);
    await api.client.create(PODS, 'ci', pod('short', 'deployer'));
    await assert.rejects(authenticator.authenticateToken(podToken), /pod UID \(.*\) does not match service account pod ref claim/);

    await api.client.create(SECRETS, 'ci', { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'anchor' } });
    const secretToken = await tokenFor('ci', 'deployer', { boundObjectRef: { kind: 'Secret', apiVersion: 'v1', name: 'anchor' } });
    assert.ok(await authenticator.authenticate(request(secretToken)));
    await api.client.delete(SECRETS, 'ci', 'anchor');
    assert.equal(await authenticator.authenticate(request(secretToken)), undefined);
  });

  it('refuses a token signed by another key or another issuer’s token; other tokens fall through the chain', async () => {
    const sa = (await api.client.get(SERVICEACCOUNTS, 'ci', 'deployer'))!;
    const other = await signingKeyFromPem(generateServiceAccountKeyPem());
    const claims = { namespace: 'ci', serviceAccount: { name: 'deployer', uid: sa.metadata.uid! }, audiences: API_AUDIENCES, expirationSeconds: 3600 };
    const forged = (await issueServiceAccountToken(other, { ...claims, issuer: ISSUER })).token;
    await assert.rejects(authenticator.authenticateToken(forged), /invalid signature/);
    const foreign = (await issueServiceAccountToken(key, { ...claims, issuer: 'https://elsewhere.example' })).token;

    const admin = new TokenAuthenticator();
    const adminUser: UserInfo = { name: 'system:admin', groups: ['system:masters', 'system:authenticated'] };
    admin.add('0123abcd', adminUser);
    admin.add(foreign, { name: 'static-jwt-user', groups: ['system:authenticated'] });
    const chain = new UnionAuthenticator([authenticator, admin]);
    assert.deepEqual(await chain.authenticate(request('0123abcd')), adminUser, 'a non-JWT token reaches the static tokens');
    assert.equal((await chain.authenticate(request(foreign)))?.name, 'static-jwt-user', 'another issuer’s JWT is passed on');
    assert.equal(await chain.authenticate(request(forged)), undefined);
    assert.equal(await chain.authenticate({ headers: {} } as IncomingMessage), undefined);
    const good = await tokenFor('ci', 'deployer');
    assert.equal((await chain.authenticate(request(good)))?.name, 'system:serviceaccount:ci:deployer');
  });
});

describe('the ServiceAccount token authenticator with its informers started', () => {
  let cached: ServiceAccountAuthenticator;
  /** Reads of the store by the authenticator, by resource. */
  const reads = new Map<string, number>();
  const readsOf = (plural: string): number => reads.get(plural) ?? 0;
  /** Answered without a turn of the event loop: verified lately, and every object in the cache with the token's UID. */
  const fromCache = (authenticator: ServiceAccountAuthenticator, token: string): boolean => !(authenticator.authenticate(request(token)) instanceof Promise);

  before(async () => {
    // The real client, counting the authenticator's reads.
    const counting: ApiClient = Object.create(api.client, {
      get: {
        value: (...args: Parameters<ApiClient['get']>) => {
          reads.set(args[0].plural, readsOf(args[0].plural) + 1);
          return api.client.get(...args);
        },
      },
    }) as ApiClient;
    // This server's own writes reported by its store, as a server wires it.
    const localWrites: LocalWrites = {
      onWrite: (listener) => api.store.onWrite(listener),
      prefix: (ref) => api.store.keyPrefix(api.registry.lookup(ref.group, ref.version, ref.plural)!),
    };
    cached = new ServiceAccountAuthenticator({ client: counting, keys: [key], issuers: [ISSUER], apiAudiences: API_AUDIENCES, logger: api.logger, localWrites });
    await api.client.create(NAMESPACES, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'cached' } });
    await api.client.create(SERVICEACCOUNTS, 'cached', account('steady'));
    await cached.start();
    assert.ok(cached.following('serviceAccount'), 'the accounts are listed and watched');
  });

  after(() => {
    cached.stop();
  });

  it('reads nothing from the store for a token seen lately whose account the cache holds, and answers without waiting', async () => {
    const token = await tokenFor('cached', 'steady');
    assert.equal((await cached.authenticate(request(token)))?.name, 'system:serviceaccount:cached:steady');
    const before = readsOf('serviceaccounts');
    for (let i = 0; i < 20; i++) {
      const answer = cached.authenticate(request(token));
      assert.ok(!(answer instanceof Promise), 'answered without waiting');
      assert.equal(answer?.name, 'system:serviceaccount:cached:steady');
    }
    assert.equal(readsOf('serviceaccounts'), before, 'no read of the account per request');
  });

  it('a token of an account the cache does not hold yet works at once: the store is read', async () => {
    const uid = randomUUID();
    const claims = { issuer: ISSUER, namespace: 'cached', serviceAccount: { name: 'fresh', uid }, audiences: API_AUDIENCES, expirationSeconds: 3600 };
    const token = (await issueServiceAccountToken(key, claims)).token;
    assert.equal(await cached.authenticate(request(token)), undefined, 'no such account yet');
    const before = readsOf('serviceaccounts');
    // Written under the API with the token's UID, so nothing runs between the write and the
    // request: the watch delivers it on a later turn of the event loop.
    const object = { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'fresh', namespace: 'cached', uid, creationTimestamp: new Date().toISOString() } };
    await api.datastore.create(api.store.key(saDef(), 'cached', 'fresh'), Buffer.from(JSON.stringify(object)));
    const answer = cached.authenticate(request(token));
    assert.ok(answer instanceof Promise, 'not in the cache yet: the store is read');
    assert.equal((await answer)?.name, 'system:serviceaccount:cached:fresh');
    assert.equal(readsOf('serviceaccounts'), before + 1);
  });

  it('refuses the token of an account deleted through this server by the next request, before the watch delivers the deletion', async () => {
    await api.client.create(SERVICEACCOUNTS, 'cached', account('doomed'));
    const token = await tokenFor('cached', 'doomed');
    await eventually(() => fromCache(cached, token), 'the account in the cache');
    await api.client.delete(SERVICEACCOUNTS, 'cached', 'doomed');
    // No turn of the event loop since the delete was answered: the cache still holds the account.
    assert.equal(await cached.authenticate(request(token)), undefined);
    await assert.rejects(cached.authenticateToken(token), /serviceaccounts "doomed" not found/);
    await api.client.create(SERVICEACCOUNTS, 'cached', account('doomed'));
    const again = await tokenFor('cached', 'doomed');
    // The re-created account's own token works at once; the old one never again, cached or not.
    assert.equal((await cached.authenticate(request(again)))?.name, 'system:serviceaccount:cached:doomed');
    await assert.rejects(cached.authenticateToken(token), /service account UID \(.*\) does not match claim/);
    await eventually(() => fromCache(cached, again), 'the new account in the cache');
    assert.equal(await cached.authenticate(request(token)), undefined);
    await assert.rejects(cached.authenticateToken(token), /service account UID \(.*\) does not match claim/);
  });

  it('refuses the token of an account deleted elsewhere (not through this server) once the watch delivers the deletion', async () => {
    await api.client.create(SERVICEACCOUNTS, 'cached', account('remote'));
    const token = await tokenFor('cached', 'remote');
    await eventually(() => fromCache(cached, token), 'the account in the cache');
    // Under the API, as another server's write reaches this one: through the datastore's watch only.
    await api.datastore.delete(api.store.key(saDef(), 'cached', 'remote'));
    await eventually(async () => (await cached.authenticate(request(token))) === undefined, 'the deleted account’s token refused');
    await assert.rejects(cached.authenticateToken(token), /serviceaccounts "remote" not found/);
  });

  it('follows pods from the first pod-bound token on: a deleted or replaced pod ends its tokens', async () => {
    const p = await api.client.create(PODS, 'cached', pod('bound', 'steady'));
    const token = await tokenFor('cached', 'steady', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'bound' } });
    assert.equal((await cached.authenticate(request(token)))?.extra?.['authentication.kubernetes.io/pod-uid']?.[0], p.metadata.uid);
    await eventually(() => cached.following('pod') && fromCache(cached, token), 'the pod in the cache');
    const before = readsOf('pods');
    assert.ok(cached.authenticate(request(token)));
    assert.equal(readsOf('pods'), before, 'no read of the pod per request');
    await api.client.delete(PODS, 'cached', 'bound', { gracePeriodSeconds: 0 });
    assert.equal(await cached.authenticate(request(token)), undefined, 'refused by the next request');
    await api.client.create(PODS, 'cached', pod('bound', 'steady'));
    await assert.rejects(cached.authenticateToken(token), /pod UID \(.*\) does not match service account pod ref claim/);
    assert.ok(!cached.following('node'), 'nodes are not followed for tokens not bound to one');
    assert.ok(!cached.following('secret'));
    assert.equal(readsOf('nodes'), 0);
  });

  it('once stopped, reads the store at every request again: a deletion is refused by the next request', async () => {
    const stopped = new ServiceAccountAuthenticator({ client: api.client, keys: [key], issuers: [ISSUER], apiAudiences: API_AUDIENCES, logger: api.logger });
    await stopped.start();
    await api.client.create(SERVICEACCOUNTS, 'cached', account('brief'));
    const token = await tokenFor('cached', 'brief');
    await eventually(() => fromCache(stopped, token), 'the account in the cache');
    stopped.stop();
    assert.ok(!stopped.following('serviceAccount'));
    await api.client.delete(SERVICEACCOUNTS, 'cached', 'brief');
    await assert.rejects(stopped.authenticateToken(token), /serviceaccounts "brief" not found/);
  });
});
