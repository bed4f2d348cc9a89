/**
 * ServiceAccount tokens: issue and verify with the real jose library and real keys; the
 * TokenRequest rules (600 s minimum, 3607 s extension, bindings); the checks against looked-up
 * objects; the resulting user; discovery documents; and the signing key shared through a real
 * SQLite datastore. Time is the only fake: every call takes `now`.
 *
 * Run: node --import tsx --test test/unit/service-account-tokens.test.ts
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { calculateJwkThumbprint, decodeJwt, decodeProtectedHeader, SignJWT, UnsecuredJWT } from 'jose';

import { loadOrCreateServiceAccountKey, SERVICE_ACCOUNT_KEY_RECORD, serviceAccountKeyFile, ServiceAccountKeyStoreError } from '../../src/cluster/service-account-key.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import {
  boundObjectKind,
  checkTokenObjects,
  planTokenRequest,
  serviceAccountUser,
  TokenRequestError,
  tokenLookups,
} from '../../src/security/service-account-rules.js';
import {
  defaultApiAudiences,
  defaultIssuer,
  EXPIRATION_EXTENSION_SECONDS,
  generateServiceAccountKeyPem,
  issueServiceAccountToken,
  jwks,
  openIdConfiguration,
  parseServiceAccountUsername,
  ServiceAccountTokenError,
  type SigningKey,
  signingKeyFromPem,
  verifyingKeyFromPem,
  verifyServiceAccountToken,
} from '../../src/security/service-account-tokens.js';

const ISSUER = defaultIssuer();
const API_AUDIENCES = defaultApiAudiences(ISSUER);
const T0 = new Date('2026-12-01T12:00:00Z');
const at = (seconds: number): Date => new Date(T0.getTime() + seconds * 1000);
const SA = { name: 'builder', uid: 'sa-uid-1' };

let key: SigningKey;
let otherKey: SigningKey;

before(async () => {
  key = await signingKeyFromPem(generateServiceAccountKeyPem());
  otherKey = await signingKeyFromPem(generateServiceAccountKeyPem());
});

async function issue(overrides: Partial<Parameters<typeof issueServiceAccountToken>[1]> = {}): Promise<string> {
  const { token } = await issueServiceAccountToken(key, {
    issuer: ISSUER,
    namespace: 'ci',
    serviceAccount: SA,
    audiences: API_AUDIENCES,
    expirationSeconds: 3600,
    now: T0,
    ...overrides,
  });
  return token;
}

async function refusal(promise: Promise<unknown>): Promise<ServiceAccountTokenError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ServiceAccountTokenError, `expected a ServiceAccountTokenError, got ${String(error)}`);
    return error;
  }
  assert.fail('the token was accepted');
}

const verify = (token: string, now = at(10), extra: { audiences?: string[]; issuers?: string[] } = {}) =>
  verifyServiceAccountToken(token, { keys: [key], issuers: extra.issuers ?? [ISSUER], apiAudiences: API_AUDIENCES, now, ...(extra.audiences ? { audiences: extra.audiences } : {}) });

describe('issuing and verifying service account tokens', () => {
  it('issues the claim layout kube-apiserver does, signed ES256 with the key thumbprint as kid', async () => {
    const token = await issue({ pod: { name: 'web-0', uid: 'pod-uid' }, node: { name: 'n1', uid: 'node-uid' } });
    const header = decodeProtectedHeader(token);
    assert.deepEqual(header, { alg: 'ES256', kid: await calculateJwkThumbprint(key.publicJwk, 'sha256') });
    const claims = decodeJwt(token);
    assert.deepEqual(Object.keys(claims).sort(), ['aud', 'exp', 'iat', 'iss', 'jti', 'kubernetes.io', 'nbf', 'sub']);
    assert.equal(claims.iss, 'https://kubernetes.default.svc.cluster.local');
    assert.equal(claims.sub, 'system:serviceaccount:ci:builder');
    assert.deepEqual(claims.aud, ['https://kubernetes.default.svc.cluster.local', 'drover']);
    assert.equal(claims.iat, T0.getTime() / 1000);
    assert.equal(claims.nbf, claims.iat);
    assert.equal(claims.exp, claims.iat! + 3600);
    assert.match(claims.jti!, /^[0-9a-f-]{36}$/);
    assert.deepEqual(claims['kubernetes.io'], {
      namespace: 'ci',
      serviceaccount: { name: 'builder', uid: 'sa-uid-1' },
      pod: { name: 'web-0', uid: 'pod-uid' },
      node: { name: 'n1', uid: 'node-uid' },
    });
    const verified = await verify(token);
    assert.deepEqual(verified.claims, claims);
    assert.deepEqual(verified.audiences, API_AUDIENCES);
    assert.deepEqual(tokenLookups(verified.claims), { namespace: 'ci', serviceAccount: 'builder', pod: 'web-0' });
  });

  it('refuses an expired token in kube’s words, but allows 60 s of clock skew', async () => {
    const token = await issue();
    await verify(token, at(3600 + 30)); // within the leeway
    const error = await refusal(verify(token, at(3600 + 61)));
    assert.equal(error.reason, 'expired');
    assert.equal(error.message, 'service account token has expired');
    assert.equal(error.recognised, true);
  });

  it('refuses a token before its nbf, and one issued in the future', async () => {
    const token = await issue();
    assert.equal((await refusal(verify(token, at(-120)))).message, 'service account token is not valid yet');
    const future = await new SignJWT({ ...decodeJwt(token), iat: T0.getTime() / 1000 + 600, nbf: T0.getTime() / 1000 - 10 })
      .setProtectedHeader({ alg: 'ES256', kid: key.kid })
      .sign(key.privateKey);
    assert.equal((await refusal(verify(future, at(0)))).message, 'service account token is issued in the future');
  });

  it('refuses a token for another audience, and accepts it for a caller that asks for that audience', async () => {
    const token = await issue({ audiences: ['vault'] });
    const error = await refusal(verify(token));
    assert.equal(error.reason, 'invalid-audience');
    assert.equal(
      error.message,
      'token audiences ["vault"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local" "drover"]',
    );
    assert.deepEqual((await verify(token, at(10), { audiences: ['vault', 'other'] })).audiences, ['vault']);
  });

  it('passes on a token of another issuer or a non-JWT (another authenticator may know it)', async () => {
    const foreign = await issue({ issuer: 'https://elsewhere.example' });
    const error = await refusal(verify(foreign));
    assert.equal(error.reason, 'not-recognised');
    assert.equal(error.recognised, false);
    assert.equal((await refusal(verify('d3a9c1b2e4f5'))).recognised, false);
    // An issuer added to the accepted list is accepted.
    await verify(foreign, at(10), { issuers: [ISSUER, 'https://elsewhere.example'] });
  });

  it('refuses tampered tokens, tokens of another key and unsigned tokens', async () => {
    const token = await issue();
    const [h, , s] = token.split('.');
    const forged = Buffer.from(JSON.stringify({ ...decodeJwt(token), sub: 'system:serviceaccount:kube-system:admin' })).toString('base64url');
    assert.equal((await refusal(verify(`${h}.${forged}.${s}`))).reason, 'invalid-signature');

    const otherSigned = await issueServiceAccountToken(otherKey, { issuer: ISSUER, namespace: 'ci', serviceAccount: SA, audiences: API_AUDIENCES, expirationSeconds: 3600, now: T0 });
    assert.equal((await refusal(verify(otherSigned.token))).message, 'invalid signature, no keys found');
    // The same, claiming our kid: the signature does not verify.
    const sameKid = await new SignJWT(otherSigned.claims as unknown as Record<string, unknown>).setProtectedHeader({ alg: 'ES256', kid: key.kid }).sign(otherKey.privateKey);
    assert.equal((await refusal(verify(sameKid))).message, 'invalid signature');

    const unsigned = new UnsecuredJWT(decodeJwt(token)).encode();
    assert.equal((await refusal(verify(unsigned))).reason, 'invalid-signature');
  });

  it('refuses a well-signed token without the kubernetes.io claim', async () => {
    const bare = await new SignJWT({ iss: ISSUER, sub: 'system:serviceaccount:ci:builder', aud: API_AUDIENCES, exp: T0.getTime() / 1000 + 600 })
      .setProtectedHeader({ alg: 'ES256', kid: key.kid })
      .sign(key.privateKey);
    assert.equal((await refusal(verify(bare, at(0)))).reason, 'invalid-claims');
  });

  it('verifies with a key set (the old key still accepted after a change) and RSA keys', async () => {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const rsa = await signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
    assert.equal(rsa.alg, 'RS256');
    const token = (await issueServiceAccountToken(rsa, { issuer: ISSUER, namespace: 'ci', serviceAccount: SA, audiences: API_AUDIENCES, expirationSeconds: 3600, now: T0 })).token;
    // A public key alone (SPKI PEM) verifies as well and has the same kid.
    const rsaPublic = await verifyingKeyFromPem(rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString());
    assert.equal(rsaPublic.kid, rsa.kid);
    const verified = await verifyServiceAccountToken(token, { keys: [key, rsaPublic], issuers: [ISSUER], apiAudiences: API_AUDIENCES, now: at(1) });
    assert.equal(verified.claims.sub, 'system:serviceaccount:ci:builder');
    const config = openIdConfiguration(ISSUER, 'https://10.0.0.1:6443/openid/v1/jwks', [key, rsa]);
    assert.deepEqual(config.id_token_signing_alg_values_supported, ['ES256', 'RS256']);
  });
});

describe('TokenRequest rules', () => {
  const sa = { namespace: 'ci', name: 'builder', uid: 'sa-uid-1' };
  const plan = (spec: Parameters<typeof planTokenRequest>[0]['spec'], more: Partial<Parameters<typeof planTokenRequest>[0]> = {}) =>
    planTokenRequest({ spec, serviceAccount: sa, apiAudiences: API_AUDIENCES, ...more });
  const pod = { kind: 'Pod' as const, name: 'web-0', uid: 'pod-uid', serviceAccountName: 'builder', node: { name: 'n1', uid: 'node-uid' } };
  const podRef = { kind: 'Pod', apiVersion: 'v1', name: 'web-0' };

  it('defaults to one hour for the API audiences', () => {
    const p = plan({});
    assert.equal(p.expirationSeconds, 3600);
    assert.equal(p.tokenExpirationSeconds, 3600);
    assert.deepEqual(p.audiences, API_AUDIENCES);
  });

  it('refuses less than 600 s (422, kube’s message) and accepts exactly 600 s', () => {
    assert.throws(() => plan({ expirationSeconds: 599 }), (error: unknown) => {
      assert.ok(error instanceof TokenRequestError);
      assert.equal(error.status, 422);
      assert.equal(error.message, 'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes');
      assert.deepEqual(error.field, { path: 'spec.expirationSeconds', value: 599, detail: 'may not specify a duration less than 10 minutes' });
      return true;
    });
    assert.equal(plan({ expirationSeconds: 600 }).expirationSeconds, 600);
    assert.throws(() => plan({ expirationSeconds: 2 ** 32 + 1 }), /may not specify a duration larger than 2\^32 seconds/);
  });

  it('extends a pod-bound 3607 s request for the API audiences to a year with warnafter at 3607 s', async () => {
    const p = plan({ expirationSeconds: 3607, boundObjectRef: podRef }, { bound: pod });
    assert.equal(p.expirationSeconds, 3607, 'status.expirationTimestamp still says 3607 s');
    assert.equal(p.tokenExpirationSeconds, EXPIRATION_EXTENSION_SECONDS);
    assert.equal(p.warnAfterSeconds, 3607);
    assert.deepEqual(p.pod, { name: 'web-0', uid: 'pod-uid' });
    assert.deepEqual(p.node, { name: 'n1', uid: 'node-uid' });

    const { token } = await issueServiceAccountToken(key, {
      issuer: ISSUER, namespace: 'ci', serviceAccount: SA, audiences: p.audiences, expirationSeconds: p.tokenExpirationSeconds,
      warnAfterSeconds: p.warnAfterSeconds!, pod: p.pod!, node: p.node!, now: T0,
    });
    const claims = decodeJwt(token);
    assert.equal(claims.exp! - claims.iat!, 365 * 24 * 3600);
    assert.equal((claims['kubernetes.io'] as { warnafter: number }).warnafter, claims.iat! + 3607);
    // Still valid after 2 h, but stale.
    const verified = await verify(token, at(7200));
    const found = { serviceAccount: { name: 'builder', uid: 'sa-uid-1' }, pod: { name: 'web-0', uid: 'pod-uid' } };
    assert.equal(checkTokenObjects(verified.claims, found, at(7200)).stale, true);
    assert.equal(checkTokenObjects(verified.claims, found, at(60)).stale, false);
  });

  it('does not extend 3607 s when not pod-bound, for other audiences, with the extension off, or once capped', () => {
    assert.equal(plan({ expirationSeconds: 3607 }).tokenExpirationSeconds, 3607);
    assert.equal(plan({ expirationSeconds: 3607, audiences: ['vault'], boundObjectRef: podRef }, { bound: pod }).tokenExpirationSeconds, 3607);
    assert.equal(plan({ expirationSeconds: 3607, boundObjectRef: podRef }, { bound: pod, extendExpiration: false }).tokenExpirationSeconds, 3607);
    const capped = plan({ expirationSeconds: 3607, boundObjectRef: podRef }, { bound: pod, maxExpirationSeconds: 3600 });
    assert.equal(capped.tokenExpirationSeconds, 3600);
    assert.deepEqual(capped.warnings, ['requested expiration of 3607 seconds shortened to 3600 seconds']);
  });

  it('binds only to core Pods, Secrets and Nodes, of the same account and UID', () => {
    assert.throws(() => boundObjectKind({ kind: 'ConfigMap', apiVersion: 'v1', name: 'c' }), /^TokenRequestError: cannot bind token to object of type \/v1, Kind=ConfigMap$/);
    assert.throws(() => boundObjectKind({ kind: 'Deployment', apiVersion: 'apps/v1', name: 'd' }), /apps\/v1, Kind=Deployment/);
    assert.equal(boundObjectKind({ kind: 'Secret', apiVersion: 'v1', name: 's' }), 'Secret');
    assert.throws(
      () => plan({ boundObjectRef: podRef }, { bound: { ...pod, serviceAccountName: 'default' } }),
      (e: unknown) => e instanceof TokenRequestError && e.status === 400 && e.message === 'cannot bind token for serviceaccount "builder" to pod running with different serviceaccount name.',
    );
    assert.throws(
      () => plan({ boundObjectRef: { ...podRef, uid: 'old-uid' } }, { bound: pod }),
      (e: unknown) => e instanceof TokenRequestError && e.status === 409 && /the UID in the bound object reference \(old-uid\) does not match the UID in record/.test(e.message),
    );
    const secret = plan({ boundObjectRef: { kind: 'Secret', apiVersion: 'v1', name: 's' } }, { bound: { kind: 'Secret', name: 's', uid: 'sec-uid' } });
    assert.deepEqual([secret.secret, secret.pod, secret.node], [{ name: 's', uid: 'sec-uid' }, undefined, undefined]);
  });
});

describe('checks against the store and the resulting user', () => {
  const claimsFor = async (bindings: { pod?: boolean; secret?: boolean; node?: boolean }) => {
    const token = await issue({
      ...(bindings.pod ? { pod: { name: 'web-0', uid: 'pod-uid' }, node: { name: 'n1', uid: 'node-uid' } } : {}),
      ...(bindings.secret ? { secret: { name: 's', uid: 'sec-uid' } } : {}),
      ...(bindings.node ? { node: { name: 'n1', uid: 'node-uid' } } : {}),
    });
    return (await verify(token)).claims;
  };
  const sa = { name: 'builder', uid: 'sa-uid-1' };
  const check = (claims: Awaited<ReturnType<typeof claimsFor>>, found: Parameters<typeof checkTokenObjects>[1]) => {
    try {
      checkTokenObjects(claims, found, at(100));
      return 'accepted';
    } catch (error) {
      assert.ok(error instanceof ServiceAccountTokenError);
      return error.message;
    }
  };

  it('needs the service account, with the token’s UID, not deleted', async () => {
    const claims = await claimsFor({});
    assert.equal(check(claims, {}), 'serviceaccounts "builder" not found');
    assert.equal(check(claims, { serviceAccount: { ...sa, uid: 'new-uid' } }), 'service account UID (new-uid) does not match claim (sa-uid-1)');
    assert.equal(check(claims, { serviceAccount: { ...sa, deletionTimestamp: at(0).toISOString() } }), 'service account ci/builder has been deleted');
    assert.equal(check(claims, { serviceAccount: { ...sa, deletionTimestamp: at(90).toISOString() } }), 'accepted', 'deleting for less than the leeway');
  });

  it('needs the bound pod, secret or node with its UID, not deleting for longer than the leeway', async () => {
    const podClaims = await claimsFor({ pod: true });
    assert.equal(check(podClaims, { serviceAccount: sa }), 'service account token has been invalidated');
    assert.equal(check(podClaims, { serviceAccount: sa, pod: { name: 'web-0', uid: 'other' } }), 'pod UID (other) does not match service account pod ref claim (pod-uid)');
    assert.equal(check(podClaims, { serviceAccount: sa, pod: { name: 'web-0', uid: 'pod-uid', deletionTimestamp: at(0).toISOString() } }), 'service account token has been invalidated');
    assert.equal(check(podClaims, { serviceAccount: sa, pod: { name: 'web-0', uid: 'pod-uid', deletionTimestamp: at(70).toISOString() } }), 'accepted');
    // A pod-bound token's node is information, not a binding: no node lookup.
    assert.equal(tokenLookups(podClaims).node, undefined);

    const secretClaims = await claimsFor({ secret: true });
    assert.equal(check(secretClaims, { serviceAccount: sa }), 'service account token has been invalidated');
    assert.equal(check(secretClaims, { serviceAccount: sa, secret: { name: 's', uid: 'x' } }), 'secret UID (x) does not match service account secret ref claim (sec-uid)');

    const nodeClaims = await claimsFor({ node: true });
    assert.deepEqual(tokenLookups(nodeClaims), { namespace: 'ci', serviceAccount: 'builder', node: 'n1' });
    assert.equal(check(nodeClaims, { serviceAccount: sa, node: { name: 'n1', uid: 'y' } }), 'node UID (y) does not match service account node ref claim (node-uid)');
  });

  it('authenticates as system:serviceaccount:<ns>:<name> with kube’s groups and extra', async () => {
    const claims = await claimsFor({ pod: true });
    const info = checkTokenObjects(claims, { serviceAccount: sa, pod: { name: 'web-0', uid: 'pod-uid' } }, at(100));
    const user = serviceAccountUser(info);
    assert.deepEqual(user, {
      name: 'system:serviceaccount:ci:builder',
      uid: 'sa-uid-1',
      groups: ['system:serviceaccounts', 'system:serviceaccounts:ci', 'system:authenticated'],
      extra: {
        'authentication.kubernetes.io/pod-name': ['web-0'],
        'authentication.kubernetes.io/pod-uid': ['pod-uid'],
        'authentication.kubernetes.io/node-name': ['n1'],
        'authentication.kubernetes.io/node-uid': ['node-uid'],
        'authentication.kubernetes.io/credential-id': [`JTI=${claims.jti}`],
      },
    });
    assert.deepEqual(parseServiceAccountUsername(user.name), { namespace: 'ci', name: 'builder' });
    assert.equal(parseServiceAccountUsername('system:node:n1'), undefined);
  });
});

describe('discovery documents', () => {
  it('publishes the public keys only, and an OpenID configuration pointing at them', () => {
    const doc = jwks([key]);
    assert.equal(doc.keys.length, 1);
    const [jwk] = doc.keys;
    assert.deepEqual(Object.keys(jwk!).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y']);
    assert.equal(jwk!.kid, key.kid);
    assert.equal(jwk!.use, 'sig');
    assert.deepEqual(openIdConfiguration(ISSUER, 'https://10.0.0.1:6443/openid/v1/jwks', [key]), {
      issuer: ISSUER,
      jwks_uri: 'https://10.0.0.1:6443/openid/v1/jwks',
      response_types_supported: ['id_token'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['ES256'],
    });
  });
});

describe('the signing key shared by every server', () => {
  let dir: string;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-sakey-'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is created once, sealed in the datastore, copied (0600) into each server’s data dir', async () => {
    const dbFile = path.join(dir, 'state.db');
    const datastore = openSqliteDatastore(dbFile);
    try {
      const joinSecret = 'join-secret-for-test';
      const a = await loadOrCreateServiceAccountKey({ datastore, dataDir: path.join(dir, 'a'), joinSecret });
      const b = await loadOrCreateServiceAccountKey({ datastore, dataDir: path.join(dir, 'b'), joinSecret });
      assert.equal(a.created, true);
      assert.equal(b.created, false);
      assert.equal(b.key.kid, a.key.kid);
      for (const server of ['a', 'b']) {
        const file = serviceAccountKeyFile(path.join(dir, server));
        assert.equal(fs.statSync(file).mode & 0o777, 0o600);
        assert.equal(fs.readFileSync(file, 'utf8'), a.pem);
      }
      // A token from server a verifies on server b.
      const { token } = await issueServiceAccountToken(a.key, { issuer: ISSUER, namespace: 'ci', serviceAccount: SA, audiences: API_AUDIENCES, expirationSeconds: 600 });
      await verifyServiceAccountToken(token, { keys: [b.key], issuers: [ISSUER], apiAudiences: API_AUDIENCES });
      // The datastore holds it sealed, not as a PEM.
      const record = await datastore.get(SERVICE_ACCOUNT_KEY_RECORD);
      assert.ok(record);
      assert.doesNotMatch(record.value.toString('utf8'), /PRIVATE KEY/);
      await assert.rejects(loadOrCreateServiceAccountKey({ datastore, dataDir: path.join(dir, 'c'), joinSecret: 'wrong' }), ServiceAccountKeyStoreError);
      // The datastore's copy wins over a stale local one.
      fs.writeFileSync(serviceAccountKeyFile(path.join(dir, 'b')), generateServiceAccountKeyPem());
      const again = await loadOrCreateServiceAccountKey({ datastore, dataDir: path.join(dir, 'b'), joinSecret });
      assert.equal(again.key.kid, a.key.kid);
      assert.equal(fs.readFileSync(serviceAccountKeyFile(path.join(dir, 'b')), 'utf8'), a.pem);
    } finally {
      await datastore.close();
    }
  });
});
