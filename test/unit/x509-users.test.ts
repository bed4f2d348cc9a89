import 'reflect-metadata';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { IncomingMessage } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { webcrypto, X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import { ApiError } from '../../src/apiserver/errors.js';
import { clientCertificateUser, X509Authenticator } from '../../src/apiserver/x509-auth.js';
import {
  issueUserCertificate,
  parseUserCertificateRequest,
  userCertificateProblems,
} from '../../src/cluster/user-certificates.js';
import { createCertificateAuthority, createCertificateRequest, issueCertificate, type KeyPair } from '../../src/security/pki.js';

/**
 * Client certificates as users (src/apiserver/x509-auth.ts): the mapping from a certificate to a
 * user, as kube-apiserver's x509 authenticator makes it, and the rules for issuing one
 * (src/cluster/user-certificates.ts). That TLS accepts only the client CA's certificates is shown
 * against a real server in test/e2e/kubeconfig-users.test.ts.
 */

const HOUR = 3_600_000;
const der = (pem: string): Uint8Array => new Uint8Array(x509.PemConverter.decode(pem)[0]!);
const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

let authority: KeyPair | undefined;
async function ca(): Promise<KeyPair> {
  authority ??= await createCertificateAuthority('test-client-ca');
  return authority;
}

/** A certificate with exactly the subject and extensions a case needs (self-signed: the chain is TLS's business). */
async function handMade(subject: x509.JsonName, extensions: x509.Extension[]): Promise<Uint8Array> {
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: subject,
    keys: keys as unknown as webcrypto.CryptoKeyPair,
    notBefore: new Date(now - HOUR),
    notAfter: new Date(now + HOUR),
    signingAlgorithm: ALGORITHM,
    extensions,
  });
  return new Uint8Array(cert.rawData);
}

const clientUsage = new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]);

describe('a client certificate as a user (x509 authenticator)', () => {
  it('CN is the user name, each O a group, in order, plus system:authenticated', async () => {
    const cert = await issueCertificate(await ca(), { commonName: 'alice', organizations: ['dev', 'ops'], usage: 'client' });
    assert.deepEqual(clientCertificateUser(der(cert.certificatePem), Date.now()), {
      user: { name: 'alice', groups: ['dev', 'ops', 'system:authenticated'] },
    });
  });

  it('no organization: only system:authenticated; listed already: not twice', async () => {
    const bare = await issueCertificate(await ca(), { commonName: 'bob', usage: 'client' });
    assert.deepEqual(clientCertificateUser(der(bare.certificatePem), Date.now()), { user: { name: 'bob', groups: ['system:authenticated'] } });
    const listed = await issueCertificate(await ca(), { commonName: 'carol', organizations: ['system:authenticated', 'x'], usage: 'client' });
    assert.deepEqual(clientCertificateUser(der(listed.certificatePem), Date.now()), {
      user: { name: 'carol', groups: ['system:authenticated', 'x'] },
    });
  });

  it('values holding "," "+" "=" stay one name and one group each', async () => {
    const cert = await issueCertificate(await ca(), { commonName: 'a,O=system:masters', organizations: ['b+CN=x'], usage: 'client' });
    assert.deepEqual(clientCertificateUser(der(cert.certificatePem), Date.now()), {
      user: { name: 'a,O=system:masters', groups: ['b+CN=x', 'system:authenticated'] },
    });
  });

  it('is refused before its start and after its end', async () => {
    const now = Date.now();
    const cert = der((await issueCertificate(await ca(), {
      commonName: 'dave',
      usage: 'client',
      notBefore: new Date(now),
      notAfter: new Date(now + HOUR),
    })).certificatePem);
    assert.ok('user' in clientCertificateUser(cert, now + HOUR / 2));
    const early = clientCertificateUser(cert, now - 60_000);
    assert.match('refused' in early ? early.refused : '', /not valid before/);
    const late = clientCertificateUser(cert, now + HOUR + 2000);
    assert.match('refused' in late ? late.refused : '', /expired at/);
  });

  it('a server certificate (extended key usage serverAuth only) is no user', async () => {
    const cert = await issueCertificate(await ca(), { commonName: 'web', usage: 'server' });
    const result = clientCertificateUser(der(cert.certificatePem), Date.now());
    assert.match('refused' in result ? result.refused : '', /not for client authentication/);
  });

  it('no extended key usage at all means any usage, as in Go; a peer certificate (server and client) is a user', async () => {
    const none = await handMade([{ CN: ['eve'] }, { O: ['g'] }], []);
    assert.deepEqual(clientCertificateUser(none, Date.now()), { user: { name: 'eve', groups: ['g', 'system:authenticated'] } });
    const peer = await issueCertificate(await ca(), { commonName: 'etcd-ish', usage: 'peer' });
    assert.ok('user' in clientCertificateUser(der(peer.certificatePem), Date.now()));
  });

  it('no common name, an empty one or two are refused; a CA certificate is refused', async () => {
    for (const subject of [[{ O: ['g'] }], [{ CN: [''] }], [{ CN: ['a'] }, { CN: ['b'] }]] as x509.JsonName[]) {
      const result = clientCertificateUser(await handMade(subject, [clientUsage]), Date.now());
      assert.match('refused' in result ? result.refused : '', /exactly one user/, JSON.stringify(subject));
    }
    const result = clientCertificateUser(der((await ca()).certificatePem), Date.now());
    assert.match('refused' in result ? result.refused : '', /CA certificate/);
  });

  it('bytes that are not a certificate are refused', () => {
    const result = clientCertificateUser(new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x01]), Date.now());
    assert.match('refused' in result ? result.refused : '', /does not parse/);
  });
});

/** A request on a TLS connection as Node presents it: verified or not, with this certificate. */
function requestWith(pem: string | undefined, authorized: boolean): IncomingMessage {
  const socket = {
    authorized,
    getPeerCertificate: () => {
      if (!pem) return {};
      const cert = new X509Certificate(pem);
      return { raw: cert.raw, fingerprint256: cert.fingerprint256, valid_from: cert.validFrom, valid_to: cert.validTo };
    },
  };
  return { socket, headers: {} } as unknown as IncomingMessage;
}

describe('X509Authenticator', () => {
  it('only a certificate TLS verified (socket.authorized) is a user; none is none', async () => {
    const cert = await issueCertificate(await ca(), { commonName: 'frank', organizations: ['dev'], usage: 'client' });
    const authenticator = new X509Authenticator();
    assert.deepEqual(authenticator.authenticate(requestWith(cert.certificatePem, true)), { name: 'frank', groups: ['dev', 'system:authenticated'] });
    assert.equal(authenticator.authenticate(requestWith(cert.certificatePem, false)), undefined);
    assert.equal(authenticator.authenticate(requestWith(undefined, true)), undefined);
    // A plain socket (no TLS at all).
    assert.equal(authenticator.authenticate({ socket: {}, headers: {} } as unknown as IncomingMessage), undefined);
  });

  it('reads a connection’s certificate once, and refuses renegotiation on it from then on', async () => {
    const cert = await issueCertificate(await ca(), { commonName: 'hana', usage: 'client' });
    const req = requestWith(cert.certificatePem, true);
    let reads = 0;
    let renegotiationDisabled = 0;
    const socket = req.socket as unknown as { getPeerCertificate: () => unknown; disableRenegotiation: () => void };
    const read = socket.getPeerCertificate;
    socket.getPeerCertificate = () => {
      reads++;
      return read();
    };
    socket.disableRenegotiation = () => void renegotiationDisabled++;
    const authenticator = new X509Authenticator();
    for (let i = 0; i < 5; i++) assert.equal(authenticator.authenticate(req)?.name, 'hana');
    assert.equal(reads, 1, 'the certificate is read at the first request only');
    assert.equal(renegotiationDisabled, 1, 'so no renegotiation may bring another one');
  });

  it('on a real TLS 1.2 connection: a renegotiation after the first request ends the connection', async () => {
    const clientCa = await ca();
    const serverCa = await createCertificateAuthority('test-server-ca');
    const serving = await issueCertificate(serverCa, { commonName: 'server', subjectAltNames: ['127.0.0.1'], usage: 'server' });
    const user = await issueCertificate(clientCa, { commonName: 'iris', organizations: ['ops'], usage: 'client' });
    const authenticator = new X509Authenticator();
    const server = https.createServer(
      { cert: serving.certificatePem, key: serving.privateKeyPem, ca: clientCa.certificatePem, requestCert: true, rejectUnauthorized: false },
      (req, res) => res.end(authenticator.authenticate(req)?.name ?? 'nobody'),
    );
    server.on('tlsClientError', () => undefined);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const socket = tls.connect({
      host: '127.0.0.1',
      port,
      ca: serverCa.certificatePem,
      cert: user.certificatePem,
      key: user.privateKeyPem,
      maxVersion: 'TLSv1.2',
    });
    try {
      await once(socket, 'secureConnect');
      let answer = '';
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
      socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      const deadline = Date.now() + 20_000;
      while (!answer.includes('iris') && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      assert.match(answer, /\r\n\r\niris$/, 'the certificate’s user');
      const closed = once(socket, 'close');
      const outcome = await new Promise<string>((resolve) => {
        socket.on('error', () => resolve('error'));
        socket.on('close', () => resolve('closed'));
        if (!socket.renegotiate({ rejectUnauthorized: true }, (error) => resolve(error ? 'refused' : 'renegotiated'))) resolve('refused');
      });
      assert.notEqual(outcome, 'renegotiated');
      await closed;
    } finally {
      socket.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('judges expiry at every request, also on a connection already judged', async () => {
    const now = Date.now();
    const cert = await issueCertificate(await ca(), { commonName: 'gina', usage: 'client', notBefore: new Date(now - HOUR), notAfter: new Date(now + HOUR) });
    let clock = now;
    const authenticator = new X509Authenticator(() => clock);
    const req = requestWith(cert.certificatePem, true);
    assert.equal(authenticator.authenticate(req)?.name, 'gina');
    clock = now + 2 * HOUR;
    assert.equal(authenticator.authenticate(req), undefined);
  });
});

describe('which user names and groups may be issued', () => {
  it('ordinary names and groups pass', () => {
    assert.deepEqual(userCertificateProblems('alice', ['dev', 'team:web'], false), []);
    assert.deepEqual(userCertificateProblems('alice@example.com', [], false), []);
  });

  it('system: names are refused, in any case; so are system: groups', () => {
    for (const name of ['system:admin', 'system:node:n1', 'System:Admin', 'system:serviceaccount:a:b', 'system:drover:apiserver', 'system:anonymous']) {
      assert.match(userCertificateProblems(name, [], true).join(), /is reserved/, name);
    }
    for (const group of ['system:nodes', 'system:serviceaccounts', 'system:authenticated', 'SYSTEM:NODES']) {
      assert.match(userCertificateProblems('alice', [group], true).join(), /is reserved/, group);
    }
  });

  it('system:masters only with allowMasters', () => {
    assert.match(userCertificateProblems('root', ['system:masters'], false).join(), /--allow-masters/);
    assert.deepEqual(userCertificateProblems('root', ['system:masters'], true), []);
  });

  it('empty, too long, padded, control and bidi characters, too many groups', () => {
    assert.match(userCertificateProblems('', [], false).join(), /must not be empty/);
    assert.match(userCertificateProblems('a'.repeat(65), [], false).join(), /longer than 64/);
    assert.deepEqual(userCertificateProblems('a'.repeat(64), [], false), []);
    assert.match(userCertificateProblems(' alice', [], false).join(), /white space/);
    assert.match(userCertificateProblems('al\u001bice', [], false).join(), /control or formatting/);
    assert.match(userCertificateProblems('alice\u202e', [], false).join(), /control or formatting/);
    assert.match(userCertificateProblems('alice', ['ok', ''], false).join(), /must not be empty/);
    assert.match(userCertificateProblems('alice', Array.from({ length: 21 }, (_, i) => `g${i}`), false).join(), /at most 20 groups/);
  });
});

describe('a request for a user certificate', () => {
  const code = (fn: () => unknown): number => {
    try {
      fn();
    } catch (error) {
      if (error instanceof ApiError) return error.code;
      throw error;
    }
    return 0;
  };

  it('malformed bodies are 400, refused names and lifetimes 422; groups are deduplicated, one year by default', () => {
    const csr = '-----BEGIN CERTIFICATE REQUEST-----';
    assert.equal(code(() => parseUserCertificateRequest([])), 400);
    assert.equal(code(() => parseUserCertificateRequest({ name: 5, certificateSigningRequest: csr })), 400);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a' })), 400);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, groups: 'dev' })), 400);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, allowMasters: 'yes' })), 400);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'system:admin', certificateSigningRequest: csr })), 422);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, groups: ['system:masters'] })), 422);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, expirationSeconds: 599 })), 422);
    assert.equal(code(() => parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, expirationSeconds: 1.5e3 + 0.5 })), 422);
    const parsed = parseUserCertificateRequest({ name: 'a', certificateSigningRequest: csr, groups: ['x', 'y', 'x'] });
    assert.deepEqual(parsed.groups, ['x', 'y']);
    assert.equal(parsed.expirationSeconds, 365 * 24 * 3600);
    assert.equal(parsed.allowMasters, false);
  });

  it('is signed for the request’s key, with the fields’ subject (not the request’s), for client auth, for the asked lifetime', async () => {
    // The request's own subject claims system:masters: it is ignored.
    const { requestPem, privateKeyPem } = await createCertificateRequest('mallory', ['system:masters']);
    const now = Date.now();
    const issued = await issueUserCertificate(
      await ca(),
      { name: 'alice', groups: ['dev'], expirationSeconds: 3600, certificateSigningRequest: requestPem, allowMasters: false },
      now,
    );
    const cert = new X509Certificate(issued.certificate);
    assert.ok(cert.verify(new X509Certificate((await ca()).certificatePem).publicKey), 'signed by the client CA');
    assert.ok(cert.checkPrivateKey((await import('node:crypto')).createPrivateKey(privateKeyPem)), 'for the requester’s key');
    assert.deepEqual(clientCertificateUser(der(issued.certificate), now), { user: { name: 'alice', groups: ['dev', 'system:authenticated'] } });
    assert.ok(Math.abs(Date.parse(issued.notAfter) - (now + 3600_000)) < 2000, issued.notAfter);
    assert.equal(issued.serialNumber.toLowerCase(), cert.serialNumber.toLowerCase());
  });

  it('a request whose signature does not verify is a 400; a lifetime beyond the CA’s a 422', async () => {
    const { requestPem } = await createCertificateRequest('alice', []);
    const bytes = Buffer.from(x509.PemConverter.decode(requestPem)[0]!);
    bytes[bytes.length - 3]! ^= 0x01;
    const tampered = x509.PemConverter.encode(bytes, 'CERTIFICATE REQUEST');
    const request = { name: 'alice', groups: [], expirationSeconds: 3600, allowMasters: false };
    await assert.rejects(issueUserCertificate(await ca(), { ...request, certificateSigningRequest: tampered }), (error: ApiError) => {
      assert.equal(error.code, 400);
      return true;
    });
    await assert.rejects(issueUserCertificate(await ca(), { ...request, certificateSigningRequest: 'garbage' }), (error: ApiError) => error.code === 400);
    await assert.rejects(
      issueUserCertificate(await ca(), { ...request, certificateSigningRequest: requestPem, expirationSeconds: 11 * 365 * 24 * 3600 }),
      (error: ApiError) => error.code === 422 && /outlive the client CA/.test(error.message),
    );
  });
});
