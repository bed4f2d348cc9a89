/**
 * ServiceAccounts end to end, against a real `drover server` with the real kubectl (1.32, which
 * sends protobuf for `create serviceaccount` and `create token`, and Debian's 1.20, which sends
 * JSON and has no `create token`: it posts the TokenRequest with `create --raw`) and the official
 * Python client (test/python/service_accounts_test.py):
 *
 * - `kubectl get sa` lists `default` in a new namespace (the controller made it);
 * - `kubectl create token` gives a JWT that authenticates as system:serviceaccount:<ns>:<name>
 *   (`kubectl auth whoami`; 1.20 posts the SelfSubjectReview itself), with no rights beyond
 *   RBAC's defaults (a 403 naming the account);
 * - a token of a deleted account, a token for another audience and a pod-bound token of a deleted
 *   pod are 401s; a legacy token Secret is filled in, and goes (with its token) with its account;
 * - the issuer's discovery documents verify a token for an outside verifier (jose), and the key
 *   survives a restart.
 *
 * Expiry is a unit test (test/unit/service-account-auth.test.ts): it needs a fake clock.
 *
 * Run: node --import tsx --test test/e2e/service-accounts.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createLocalJWKSet, decodeJwt, type JSONWebKeySet, jwtVerify } from 'jose';

import { type KubectlClient, kubectlClients, type KubectlResult, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { assertOk, parseTable, rowNamed } from '../helpers/kubectl-table.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const ISSUER = 'https://kubernetes.default.svc.cluster.local';
const API_AUDIENCES = [ISSUER, 'drover'];
const UNAUTHORIZED = /You must be logged in to the server \(Unauthorized\)/;

interface TokenRequestAnswer {
  kind: string;
  spec: { audiences: string[]; expirationSeconds: number };
  status: { token: string; expirationTimestamp: string };
}

describe('ServiceAccounts with kubectl, raw requests and the Python client', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let clients: KubectlClient[];
  const kubectl = (client: KubectlClient, args: string[], input?: string): Promise<KubectlResult> =>
    runKubectl(client, server.kubeconfig, path.join(work, 'cache', client.name.replace(/\W+/g, '-')), args, input === undefined ? {} : { input });
  const ok = async (client: KubectlClient, args: string[], input?: string): Promise<string> => {
    const result = await kubectl(client, args, input);
    assertOk(result, `${client.name} ${args.join(' ')}`);
    return result.stdout;
  };
  /** A token from `kubectl create token` (1.32: protobuf), or from a raw TokenRequest (1.20: JSON). */
  const createToken = async (client: KubectlClient, ns: string, sa: string, spec: Record<string, unknown> = {}): Promise<string> => {
    if (client === MODERN_KUBECTL) {
      const args = ['-n', ns, 'create', 'token', sa];
      if (spec.audiences) for (const a of spec.audiences as string[]) args.push('--audience', a);
      const ref = spec.boundObjectRef as { kind: string; name: string } | undefined;
      if (ref) args.push('--bound-object-kind', ref.kind, '--bound-object-name', ref.name);
      return (await ok(client, args)).trim();
    }
    const file = path.join(work, `token-request-${Date.now()}.json`);
    fs.writeFileSync(file, JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec }));
    const answer = JSON.parse(await ok(client, ['create', '--raw', `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, '-f', file])) as TokenRequestAnswer;
    assert.equal(answer.kind, 'TokenRequest');
    return answer.status.token;
  };
  /** Who the API takes a token for: a SelfSubjectReview (1.32: `auth whoami`; 1.20 has none: a raw POST). */
  const whoIs = async (client: KubectlClient, token: string): Promise<{ username: string; uid?: string; groups: string[]; extra?: Record<string, string[]> }> => {
    let out: string;
    if (client === MODERN_KUBECTL) out = await ok(client, ['--token', token, 'auth', 'whoami', '-o', 'json']);
    else {
      const file = path.join(work, 'self-subject-review.json');
      fs.writeFileSync(file, JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }));
      out = await ok(client, ['--token', token, 'create', '--raw', '/apis/authentication.k8s.io/v1/selfsubjectreviews', '-f', file]);
    }
    return (JSON.parse(out) as { status: { userInfo: { username: string; uid?: string; groups: string[]; extra?: Record<string, string[]> } } }).status.userInfo;
  };
  const assertIs = async (client: KubectlClient, token: string, user: string): Promise<void> => {
    assert.equal((await whoIs(client, token)).username, user, client.name);
  };
  const assertUnauthorized = async (client: KubectlClient, token: string, what: string): Promise<void> => {
    const result = await kubectl(client, ['--token', token, 'get', 'pods']);
    assert.notEqual(result.code, 0, `${what}: ${result.stdout}`);
    assert.match(result.stderr, UNAUTHORIZED, `${what}: ${result.stderr}`);
    const raw = await request(server, 'GET', '/api/v1/namespaces/default/pods', { token });
    assert.equal(raw.status, 401, `${what}: ${raw.text}`);
  };

  before(async () => {
    clients = kubectlClients();
    server = await startServer();
    work = tempDir('service-accounts');
  });

  after(async () => {
    await cleanup();
  });

  it('kubectl get sa lists the default account of a new namespace (both kubectl versions)', async () => {
    for (const [i, client] of clients.entries()) {
      const ns = `accounts-${i}`;
      await ok(client, ['create', 'namespace', ns]);
      const row = await eventually(async () => {
        const result = await kubectl(client, ['-n', ns, 'get', 'sa']);
        return result.code === 0 && result.stdout.includes('default') ? rowNamed(parseTable(result.stdout), 'default') : undefined;
      }, `${client.name}: default in ${ns}`);
      assert.equal(row['SECRETS'], '0');
      assert.match(row['AGE'] ?? '', /^\d+s$/);
      assert.deepEqual(parseTable(await ok(client, ['-n', ns, 'get', 'serviceaccounts'])).headers, ['NAME', 'SECRETS', 'AGE']);
    }
  });

  it('kubectl create serviceaccount (1.32 protobuf, 1.20 JSON), get, describe and delete', async () => {
    for (const [i, client] of clients.entries()) {
      const name = `builder-${i}`;
      assert.match(await ok(client, ['create', 'serviceaccount', name]), new RegExp(`serviceaccount/${name} created`));
      const yaml = await ok(client, ['get', 'sa', name, '-o', 'jsonpath={.kind} {.metadata.uid}']);
      assert.match(yaml, /^ServiceAccount [0-9a-f-]{36}$/);
      assert.match(await ok(client, ['describe', 'sa', name]), new RegExp(`Name:\\s+${name}`));
      const again = await kubectl(client, ['create', 'serviceaccount', name]);
      assert.match(again.stderr, new RegExp(`serviceaccounts "${name}" already exists`));
      assert.match(await ok(client, ['delete', 'sa', name]), /deleted/);
    }
  });

  it('a token from kubectl create token (1.32, protobuf) or a raw TokenRequest (1.20, JSON) authenticates as the account', async () => {
    await ok(MODERN_KUBECTL, ['create', 'namespace', 'tokens']);
    await ok(MODERN_KUBECTL, ['-n', 'tokens', 'create', 'serviceaccount', 'robot']);
    const uid = await ok(MODERN_KUBECTL, ['-n', 'tokens', 'get', 'sa', 'robot', '-o', 'jsonpath={.metadata.uid}']);
    for (const client of clients) {
      const token = await createToken(client, 'tokens', 'robot');
      const claims = decodeJwt(token);
      assert.equal(claims.iss, ISSUER);
      assert.equal(claims.sub, 'system:serviceaccount:tokens:robot');
      assert.deepEqual(claims.aud, API_AUDIENCES);
      assert.equal(claims.exp! - claims.iat!, 3600, 'an hour by default');
      assert.deepEqual((claims['kubernetes.io'] as { serviceaccount: unknown }).serviceaccount, { name: 'robot', uid });
      const me = await whoIs(client, token);
      assert.deepEqual(me.groups, ['system:serviceaccounts', 'system:serviceaccounts:tokens', 'system:authenticated']);
      assert.equal(me.uid, uid);
      assert.match(me.extra?.['authentication.kubernetes.io/credential-id']?.[0] ?? '', /^JTI=/);
      // Authenticated, and allowed nothing RBAC's defaults do not give it.
      const read = await kubectl(client, ['--token', token, '-n', 'tokens', 'get', 'sa']);
      assert.match(read.stderr, /User "system:serviceaccount:tokens:robot" cannot list resource "serviceaccounts" in API group "" in the namespace "tokens"/, `${client.name}: ${read.stderr}`);
    }
  });

  it('TokenRequest refusals: under 10 minutes (422), a missing account (404), a kind that cannot be bound (400), GET (405)', async () => {
    const short = await kubectl(MODERN_KUBECTL, ['-n', 'tokens', 'create', 'token', 'robot', '--duration', '5m']);
    assert.match(short.stderr, /TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes/);
    const missing = await kubectl(MODERN_KUBECTL, ['-n', 'tokens', 'create', 'token', 'nobody']);
    assert.match(missing.stderr, /serviceaccounts "nobody" not found/);
    const base = '/api/v1/namespaces/tokens/serviceaccounts/robot/token';
    const configMap = await request(server, 'POST', base, { body: { spec: { boundObjectRef: { kind: 'ConfigMap', apiVersion: 'v1', name: 'x' } } } });
    assert.equal(configMap.status, 400, configMap.text);
    assert.match(configMap.text, /cannot bind token to object of type \/v1, Kind=ConfigMap/);
    assert.equal((await request(server, 'GET', base)).status, 405);
    assert.equal((await request(server, 'PUT', base, { body: { metadata: { name: 'robot' } } })).status, 405);
    const bad = await request(server, 'POST', base, { body: { spec: { expirationSeconds: 'soon' } } });
    assert.equal(bad.status, 400, bad.text);
  });

  it('a token of a deleted account is refused with 401, also after the account is created again', async () => {
    for (const [i, client] of clients.entries()) {
      const name = `short-lived-${i}`;
      await ok(client, ['-n', 'tokens', 'create', 'serviceaccount', name]);
      const token = await createToken(client, 'tokens', name);
      await assertIs(client, token, `system:serviceaccount:tokens:${name}`);
      await ok(client, ['-n', 'tokens', 'delete', 'serviceaccount', name]);
      await assertUnauthorized(client, token, `${client.name}: token of the deleted ${name}`);
      await ok(client, ['-n', 'tokens', 'create', 'serviceaccount', name]);
      await assertUnauthorized(client, token, `${client.name}: token of ${name} before it was created again`);
    }
  });

  it('a token for another audience is refused with 401', async () => {
    for (const client of clients) {
      const token = await createToken(client, 'tokens', 'robot', { audiences: ['vault'] });
      assert.deepEqual(decodeJwt(token).aud, ['vault']);
      await assertUnauthorized(client, token, `${client.name}: token for vault`);
    }
  });

  it('a pod-bound token works while its pod exists and stops when the pod is deleted', async () => {
    for (const [i, client] of clients.entries()) {
      const pod = `worker-${i}`;
      const manifest = JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: pod, namespace: 'tokens' },
        spec: { serviceAccountName: 'robot', containers: [{ name: 'c', image: 'none', command: ['sleep', '3600'] }] },
      });
      await ok(client, ['apply', '-f', '-'], manifest);
      const token = await createToken(client, 'tokens', 'robot', { boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: pod } });
      const podUid = await ok(client, ['-n', 'tokens', 'get', 'pod', pod, '-o', 'jsonpath={.metadata.uid}']);
      assert.deepEqual((decodeJwt(token)['kubernetes.io'] as { pod: unknown }).pod, { name: pod, uid: podUid });
      const me = await whoIs(client, token);
      assert.equal(me.username, 'system:serviceaccount:tokens:robot');
      assert.deepEqual(me.extra?.['authentication.kubernetes.io/pod-name'], [pod]);
      assert.deepEqual(me.extra?.['authentication.kubernetes.io/pod-uid'], [podUid]);
      await ok(client, ['-n', 'tokens', 'delete', 'pod', pod, '--wait=false']);
      await assertUnauthorized(client, token, `${client.name}: token of the deleted pod ${pod}`);
    }
  });

  it('a legacy token Secret is filled in (token, ca.crt, namespace) and goes, with its token, when its account goes', async () => {
    await ok(MODERN_KUBECTL, ['-n', 'tokens', 'create', 'serviceaccount', 'legacy']);
    for (const [i, client] of clients.entries()) {
      const name = `legacy-token-${i}`;
      const manifest = JSON.stringify({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: 'tokens', annotations: { 'kubernetes.io/service-account.name': 'legacy' } },
        type: 'kubernetes.io/service-account-token',
      });
      await ok(client, ['apply', '-f', '-'], manifest);
      const data = await eventually(async () => {
        const res = await request(server, 'GET', `/api/v1/namespaces/tokens/secrets/${name}`);
        const d = (res.json as { data?: Record<string, string> }).data;
        return d?.['token'] ? d : undefined;
      }, `${name} filled in`);
      assert.equal(Buffer.from(data['ca.crt']!, 'base64').toString(), server.caPem);
      assert.equal(Buffer.from(data['namespace']!, 'base64').toString(), 'tokens');
      const described = await ok(client, ['-n', 'tokens', 'describe', 'secret', name]);
      assert.match(described, /Type:\s+kubernetes.io\/service-account-token/);
      assert.match(described, /kubernetes.io\/service-account.uid: [0-9a-f-]{36}/);
      const token = Buffer.from(data['token']!, 'base64').toString();
      await assertIs(client, token, 'system:serviceaccount:tokens:legacy');
    }
    // A Secret naming an account that does not exist is deleted, as kube-controller-manager does.
    const orphan = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'orphan-token', annotations: { 'kubernetes.io/service-account.name': 'nobody' } }, type: 'kubernetes.io/service-account-token' };
    assert.equal((await request(server, 'POST', '/api/v1/namespaces/tokens/secrets', { body: orphan })).status, 201);
    await eventually(async () => (await request(server, 'GET', '/api/v1/namespaces/tokens/secrets/orphan-token')).status === 404, 'orphan deleted');

    const token = Buffer.from(
      ((await request(server, 'GET', '/api/v1/namespaces/tokens/secrets/legacy-token-0')).json as { data: Record<string, string> }).data['token']!,
      'base64',
    ).toString();
    await ok(MODERN_KUBECTL, ['-n', 'tokens', 'delete', 'serviceaccount', 'legacy']);
    await assertUnauthorized(MODERN_KUBECTL, token, 'the legacy token of a deleted account');
    for (const [i] of clients.entries()) {
      await eventually(async () => (await request(server, 'GET', `/api/v1/namespaces/tokens/secrets/legacy-token-${i}`)).status === 404, `legacy-token-${i} deleted`);
    }
  });

  it('the issuer discovery documents let an outside verifier check a token; anonymous callers get 401', async () => {
    const config = JSON.parse(await ok(MODERN_KUBECTL, ['get', '--raw', '/.well-known/openid-configuration'])) as Record<string, unknown>;
    assert.equal(config.issuer, ISSUER);
    assert.equal(config.jwks_uri, `https://127.0.0.1:${server.port}/openid/v1/jwks`);
    assert.deepEqual(config.id_token_signing_alg_values_supported, ['ES256']);
    const jwksRes = await request(server, 'GET', '/openid/v1/jwks');
    assert.equal(jwksRes.status, 200);
    assert.equal(jwksRes.headers['content-type'], 'application/jwk-set+json');
    assert.equal(jwksRes.headers['cache-control'], 'public, max-age=3600');
    const set = jwksRes.json as JSONWebKeySet;
    for (const k of set.keys) assert.equal((k as { d?: string }).d, undefined, 'no private part');
    const token = await createToken(MODERN_KUBECTL, 'tokens', 'robot', { audiences: ['https://vault.example'] });
    const { payload } = await jwtVerify(token, createLocalJWKSet(set), { issuer: ISSUER, audience: 'https://vault.example' });
    assert.equal(payload.sub, 'system:serviceaccount:tokens:robot');
    // A service account may read them (kube: system:service-account-issuer-discovery); nobody anonymous.
    const apiToken = await createToken(MODERN_KUBECTL, 'tokens', 'robot');
    assert.equal((await request(server, 'GET', '/openid/v1/jwks', { token: apiToken })).status, 200);
    assert.equal((await request(server, 'GET', '/.well-known/openid-configuration', { token: '' })).status, 401);
  });

  it('the official Python client reads the default account, creates one and a token, and is refused once it is deleted (test/python/service_accounts_test.py)', async () => {
    await runPythonClientScript('service_accounts_test.py', [server.kubeconfig], { minChecks: 14 });
  });

  it('the signing key is the cluster’s: a token issued before a restart still authenticates after it', async () => {
    const token = await createToken(MODERN_KUBECTL, 'tokens', 'robot');
    const keyFile = path.join(server.dataDir, 'server/tls/service.key');
    assert.equal(fs.statSync(keyFile).mode & 0o777, 0o600);
    await server.stop();
    server = await startServer({ dataDir: server.dataDir });
    await assertIs(MODERN_KUBECTL, token, 'system:serviceaccount:tokens:robot');
    // No key material in the log.
    assert.equal(server.output().includes('PRIVATE KEY'), false);
  });

  it('the service-account-issuer setting names the issuer of tokens and of the discovery document', async () => {
    const issuer = 'https://issuer.example/cluster-a';
    const other = await startServer({ args: ['--service-account-issuer', issuer] });
    assert.equal((await request(other, 'POST', '/api/v1/namespaces/default/serviceaccounts', { body: { metadata: { name: 'issued' } } })).status, 201);
    const res = await request(other, 'POST', '/api/v1/namespaces/default/serviceaccounts/issued/token', { body: { spec: {} } });
    assert.equal(res.status, 201, res.text);
    const answer = res.json as TokenRequestAnswer;
    assert.deepEqual(answer.spec.audiences, [issuer, 'drover']);
    const token = answer.status.token;
    assert.equal(decodeJwt(token).iss, issuer);
    assert.equal(((await request(other, 'GET', '/.well-known/openid-configuration')).json as { issuer: string }).issuer, issuer);
    assert.equal((await request(other, 'GET', '/api/v1/namespaces/default/serviceaccounts', { token })).status, 403, 'authenticated there');
    // Not a token of the first cluster's issuer (nor signed by its key): passed on, then 401.
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/default/serviceaccounts', { token })).status, 401);
    await other.stop();
  });
});
