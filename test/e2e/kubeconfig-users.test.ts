/**
 * Users with client certificates (issue 13): `drover kubeconfig create NAME --group G…` has the
 * client CA sign a certificate for a new user, and the API server's x509 authenticator maps a
 * verified certificate to user = CN, groups = O (+ system:authenticated). Against a real server,
 * with kubectl 1.32 and 1.20, the Python client and raw TLS requests:
 *
 * - a created user is that user, in those groups, for every client (kubectl auth whoami); it may
 *   do nothing until an RBAC binding grants it something (403s name it), and it cannot create
 *   users itself;
 * - certificates from the node CA, the server CA, self-signed ones and expired ones are no users
 *   (401, also on public paths), even when they claim system:masters; a certificate that expires
 *   while its connection stays open is refused at the next request;
 * - the admin kubeconfig (a bearer token: system:admin in system:masters) keeps working with
 *   every client; a certificate in system:masters exists only when asked for with --allow-masters;
 * - only admins may issue (401 without a credential, 403 for a node or a user), and reserved
 *   names, groups, bad lifetimes and an existing output file are refused before anything is issued.
 *
 * Run: node --import tsx --test test/e2e/kubeconfig-users.test.ts
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomUUID, webcrypto, X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import { parse } from 'yaml';
import { renderKubeconfig } from '../../src/server/kubeconfig.js';
import { createCertificateAuthority, issueCertificate, type KeyPair } from '../../src/security/pki.js';
import { joinSecret, killRunningDrover, runDrover } from '../helpers/agent.js';
import { kubectlClients, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { runPython } from '../helpers/python.js';
import { type ApiResponse, cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const HOUR = 3_600_000;

/** Lists namespaces through the official Python client with a kubeconfig; prints the status and the names or the message. */
const PYTHON_LIST_NAMESPACES = `
import json, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
try:
    names = [n.metadata.name for n in client.CoreV1Api().list_namespace().items]
    print(json.dumps({"status": 200, "names": names}))
except ApiException as e:
    print(json.dumps({"status": e.status, "message": json.loads(e.body)["message"]}))
`;

async function python(kubeconfig: string): Promise<{ status: number; names?: string[]; message?: string }> {
  const run = await runPython(['-c', PYTHON_LIST_NAMESPACES, kubeconfig], 60_000);
  if (run.code !== 0) throw new Error(`python exited ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').pop()!) as { status: number; names?: string[]; message?: string };
}

function message(res: ApiResponse): string {
  return (res.json as { message?: string } | undefined)?.message ?? res.text;
}

interface KubeconfigFile {
  clusters: { name: string; cluster: { server: string; 'certificate-authority-data': string } }[];
  users: { name: string; user: { 'client-certificate-data'?: string; 'client-key-data'?: string; token?: string } }[];
  contexts: { name: string; context: { cluster: string; user: string } }[];
  'current-context': string;
}

function credentialOf(file: string): { cert: string; key: string } {
  const config = parse(fs.readFileSync(file, 'utf8')) as KubeconfigFile;
  const user = config.users[0]!.user;
  return {
    cert: Buffer.from(user['client-certificate-data']!, 'base64').toString('utf8'),
    key: Buffer.from(user['client-key-data']!, 'base64').toString('utf8'),
  };
}

describe('drover kubeconfig create: users with client certificates from the client CA', () => {
  let server: ServerProcess;
  let work: string;
  let cacheDir: string;
  const tls = (name: string): KeyPair => ({
    certificatePem: fs.readFileSync(path.join(server.dataDir, `server/tls/${name}.crt`), 'utf8'),
    privateKeyPem: fs.readFileSync(path.join(server.dataDir, `server/tls/${name}.key`), 'utf8'),
  });
  /** A kubeconfig for this server with the given client certificate. */
  const kubeconfigWith = (name: string, cert: KeyPair): string => {
    const file = path.join(work, `${name}.yaml`);
    fs.writeFileSync(
      file,
      renderKubeconfig({ serverUrl: server.url, caCertificatePem: server.caPem, clientCertificatePem: cert.certificatePem, clientKeyPem: cert.privateKeyPem }),
      { mode: 0o600 },
    );
    return file;
  };
  const issuedEvents = async (): Promise<string[]> => {
    const res = await request(server, 'GET', '/api/v1/namespaces/kube-system/events');
    assert.equal(res.status, 200, res.text);
    return (res.json as { items: { reason: string; message: string }[] }).items
      .filter((e) => e.reason === 'ClientCertificateIssued')
      .map((e) => e.message);
  };

  before(async () => {
    server = await startServer();
    work = tempDir('users');
    cacheDir = tempDir('users-kubectl-cache');
  });

  after(async () => {
    killRunningDrover();
    await cleanup();
  });

  it('creates a kubeconfig (0600, the server URL and CA) for a user with groups; kubectl 1.32 and 1.20, the Python client and raw TLS are that user, which may do nothing until a binding grants it, and cannot create users', async () => {
    const file = path.join(work, 'alice.yaml');
    const created = await runDrover(['kubeconfig', 'create', 'alice', '--group', 'dev', '--group', 'ops', '-o', file, '--kubeconfig', server.kubeconfig]);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stderr, /user "alice" \(groups: dev, ops\): certificate serial [0-9a-f]+, valid until \S+; kubeconfig written to .*alice\.yaml \(mode 0600\)/);
    assert.match(created.stderr, /cannot be revoked/);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);

    const config = parse(fs.readFileSync(file, 'utf8')) as KubeconfigFile;
    assert.equal(config.clusters[0]!.cluster.server, server.url);
    assert.equal(Buffer.from(config.clusters[0]!.cluster['certificate-authority-data'], 'base64').toString('utf8'), server.caPem);
    assert.equal(config.users[0]!.user.token, undefined, 'a certificate, no token');
    const cert = new X509Certificate(credentialOf(file).cert);
    const clientCa = new X509Certificate(tls('client-ca').certificatePem);
    assert.equal(cert.subject, 'CN=alice\nO=dev\nO=ops');
    assert.ok(cert.verify(clientCa.publicKey), 'signed by the client CA');
    assert.deepEqual(cert.keyUsage, ['1.3.6.1.5.5.7.3.2'], 'for client authentication only');
    const lifetime = Date.parse(cert.validTo) - Date.now();
    assert.ok(lifetime > 364 * 24 * HOUR && lifetime <= 365 * 24 * HOUR, `one year by default (${cert.validTo})`);

    for (const client of kubectlClients()) {
      const pods = await runKubectl(client, file, cacheDir, ['get', 'pods']);
      assert.notEqual(pods.code, 0, `${client.name}: ${pods.stdout}`);
      assert.match(pods.stderr, /pods is forbidden: User "alice" cannot list resource "pods"/, client.name);
    }
    const fromPython = await python(file);
    assert.equal(fromPython.status, 403);
    assert.match(fromPython.message!, /User "alice" cannot list resource "namespaces"/);

    // kubectl auth whoami (SelfSubjectReview; from kubectl 1.26 on, so the modern client only).
    const who = await runKubectl(MODERN_KUBECTL, file, cacheDir, ['auth', 'whoami', '-o', 'json']);
    assert.equal(who.code, 0, who.stderr);
    const userInfo = (JSON.parse(who.stdout) as { status: { userInfo: { username: string; groups: string[] } } }).status.userInfo;
    assert.equal(userInfo.username, 'alice');
    assert.deepEqual(userInfo.groups, ['dev', 'ops', 'system:authenticated']);

    // A binding to one of its groups is what lets it read.
    const bound = await runKubectl(MODERN_KUBECTL, server.kubeconfig, cacheDir, ['create', 'rolebinding', 'dev-view', '--clusterrole=view', '--group=dev', '-n', 'default']);
    assert.equal(bound.code, 0, bound.stderr);
    for (const client of kubectlClients()) {
      await eventually(async () => (await runKubectl(client, file, cacheDir, ['get', 'pods'])).code === 0, `${client.name}: alice reads pods once dev may view`, 30_000);
      const nodes = await runKubectl(client, file, cacheDir, ['get', 'nodes']);
      assert.match(nodes.stderr, /nodes is forbidden: User "alice" cannot list resource "nodes"/, `${client.name}: and nothing beyond the binding`);
    }

    // The groups show too where an admin-only endpoint refuses the user.
    const raw = await request(server, 'GET', '/api/v1/nodes', { token: null, ...credentialOf(file) });
    assert.equal(raw.status, 403, raw.text);
    const asAlice = await runDrover(['kubeconfig', 'create', 'bob', '--kubeconfig', file]);
    assert.equal(asAlice.code, 1, asAlice.stderr);
    assert.match(asAlice.stderr, /User "alice" is not a cluster admin \(not in group system:masters; groups: dev, ops, system:authenticated\)/);

    const events = await issuedEvents();
    assert.ok(events.some((e) => e.includes(`user "alice" (groups: dev, ops) issued by system:admin: serial ${cert.serialNumber.toLowerCase()}`)), events.join('\n'));
    assert.ok(!events.some((e) => e.includes('"bob"')), 'nothing issued for the refused request');
  });

  it('without -o the kubeconfig goes to standard output, and it works', async () => {
    const created = await runDrover(['kubeconfig', 'create', 'dana', '--expiration', '1h', '--kubeconfig', server.kubeconfig]);
    assert.equal(created.code, 0, created.stderr);
    const file = path.join(work, 'dana-from-stdout.yaml');
    fs.writeFileSync(file, created.stdout, { mode: 0o600 });
    const cert = new X509Certificate(credentialOf(file).cert);
    assert.equal(cert.subject, 'CN=dana');
    const lifetime = Date.parse(cert.validTo) - Date.now();
    assert.ok(lifetime > 0.9 * HOUR && lifetime <= HOUR, `--expiration 1h (${cert.validTo})`);
    const res = await request(server, 'GET', '/api/v1/namespaces/default/pods', { token: null, ...credentialOf(file) });
    assert.equal(res.status, 403);
    assert.match(message(res), /User "dana"/);
  });

  it('certificates from the node CA, the server CA, an unknown CA, self-signed or expired are no users (401, public paths too), even claiming system:masters; kubectl too; a valid token still wins', async () => {
    const claim = { commonName: 'mallory', organizations: ['system:masters'], usage: 'client' as const };
    const now = Date.now();
    const keys = await webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']);
    const selfSigned = await x509.X509CertificateGenerator.createSelfSigned({
      name: [{ CN: ['mallory'] }, { O: ['system:masters'] }],
      keys: keys as unknown as webcrypto.CryptoKeyPair,
      notBefore: new Date(now - HOUR),
      notAfter: new Date(now + HOUR),
      signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
      extensions: [new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth])],
    });
    const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
    const refused: Record<string, KeyPair> = {
      'node CA': await issueCertificate(tls('node-ca'), claim),
      'server CA': await issueCertificate(tls('server-ca'), claim),
      'unknown CA': await issueCertificate(await createCertificateAuthority('elsewhere'), claim),
      'self-signed': { certificatePem: selfSigned.toString('pem'), privateKeyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') },
      'expired, client CA': await issueCertificate(tls('client-ca'), { ...claim, notBefore: new Date(now - 2 * HOUR), notAfter: new Date(now - HOUR) }),
    };
    // The control: the same claim from the client CA is an admin, so the refusals are the CAs'.
    const control = await issueCertificate(tls('client-ca'), claim);
    const ok = await request(server, 'GET', '/api/v1/namespaces', { token: null, cert: control.certificatePem, key: control.privateKeyPem, agent: false });
    assert.equal(ok.status, 200, ok.text);

    for (const [what, cert] of Object.entries(refused)) {
      const tlsOptions = { cert: cert.certificatePem, key: cert.privateKeyPem, agent: false as const };
      const api = await request(server, 'GET', '/api/v1/namespaces', { token: null, ...tlsOptions });
      assert.equal(api.status, 401, `${what}: ${api.text}`);
      const version = await request(server, 'GET', '/version', { token: null, ...tlsOptions });
      assert.equal(version.status, 401, `${what} on a public path: ${version.text}`);
      const withToken = await request(server, 'GET', '/api/v1/namespaces', tlsOptions);
      assert.equal(withToken.status, 200, `${what} with the admin token: ${withToken.text}`);
    }
    const noCertificate = await request(server, 'GET', '/version', { token: null });
    assert.equal(noCertificate.status, 200, 'no credential at all reads public paths');

    for (const what of ['node CA', 'self-signed', 'expired, client CA']) {
      const file = kubeconfigWith(what.replace(/\W+/g, '-'), refused[what]!);
      for (const client of kubectlClients()) {
        const res = await runKubectl(client, file, cacheDir, ['get', 'namespaces']);
        assert.notEqual(res.code, 0, `${what}, ${client.name}: ${res.stdout}`);
        assert.match(res.stderr, /Unauthorized/, `${what}, ${client.name}`);
      }
    }
  });

  it('a certificate that expires while its connection stays open is refused at the next request on that connection', async () => {
    const brief = await issueCertificate(tls('client-ca'), { commonName: 'brief', usage: 'client', notAfter: new Date(Date.now() + 3000) });
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    const get = (): Promise<ApiResponse> =>
      new Promise((resolve, reject) => {
        const req = https.request(
          { host: '127.0.0.1', port: server.port, path: '/api/v1/namespaces', ca: server.caPem, cert: brief.certificatePem, key: brief.privateKeyPem, agent },
          (res) => {
            let text = '';
            res.on('data', (c: Buffer) => (text += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: JSON.parse(text) }));
          },
        );
        req.on('socket', (socket) => sockets.add(socket));
        req.on('error', reject);
        req.end();
      });
    try {
      const first = await get();
      assert.equal(first.status, 403, first.text);
      assert.match(message(first), /User "brief"/);
      await eventually(async () => (await get()).status === 401, 'the expired certificate to be refused on its open connection', 30_000);
      assert.equal(sockets.size, 1, 'every request went over the one connection, verified once at its handshake');
    } finally {
      agent.destroy();
    }
  });

  it('the admin kubeconfig (bearer token, system:admin in system:masters) works with kubectl 1.32, 1.20 and the Python client; a certificate in system:masters needs --allow-masters and is then an admin', async () => {
    const admin = parse(fs.readFileSync(server.kubeconfig, 'utf8')) as KubeconfigFile;
    assert.ok(admin.users[0]!.user.token, 'the admin kubeconfig holds the admin token');
    for (const client of kubectlClients()) {
      const res = await runKubectl(client, server.kubeconfig, cacheDir, ['get', 'namespaces', '-o', 'name']);
      assert.equal(res.code, 0, `${client.name}: ${res.stderr}`);
      assert.match(res.stdout, /namespace\/kube-system/);
    }
    const who = await runKubectl(MODERN_KUBECTL, server.kubeconfig, cacheDir, ['auth', 'whoami', '-o', 'json']);
    assert.equal(who.code, 0, who.stderr);
    const userInfo = (JSON.parse(who.stdout) as { status: { userInfo: { username: string; groups: string[] } } }).status.userInfo;
    assert.equal(userInfo.username, 'system:admin');
    assert.deepEqual(userInfo.groups, ['system:masters', 'system:authenticated']);
    const fromPython = await python(server.kubeconfig);
    assert.equal(fromPython.status, 200, fromPython.message);
    assert.ok(fromPython.names!.includes('kube-system'));

    const file = path.join(work, 'carol.yaml');
    const refused = await runDrover(['kubeconfig', 'create', 'carol', '--group', 'system:masters', '-o', file, '--kubeconfig', server.kubeconfig]);
    assert.equal(refused.code, 78, refused.stderr);
    assert.match(refused.stderr, /group system:masters makes the user a full cluster admin .*--allow-masters/);
    assert.equal(fs.existsSync(file), false);

    const created = await runDrover(['kubeconfig', 'create', 'carol', '--group', 'system:masters', '--allow-masters', '-o', file, '--kubeconfig', server.kubeconfig]);
    assert.equal(created.code, 0, created.stderr);
    for (const client of kubectlClients()) {
      const res = await runKubectl(client, file, cacheDir, ['get', 'namespaces', '-o', 'name']);
      assert.equal(res.code, 0, `${client.name}: ${res.stderr}`);
    }
    assert.equal((await python(file)).status, 200);
    // Drover's own admin endpoints take it too: the command reaches the node registry (nothing to forget).
    const forget = await runDrover(['node', 'forget', 'never-was', '--kubeconfig', file]);
    assert.equal(forget.code, 1);
    assert.match(forget.stderr, /node "never-was" has no registration and no Node object/);
  });

  it('only admins issue: no credential is 401, a node credential 403; reserved names and groups, bad lifetimes, an existing file and malformed requests are refused with clear errors, nothing issued', async () => {
    const before = (await issuedEvents()).length;
    const body = { name: 'erin', certificateSigningRequest: 'x' };
    const anonymous = await request(server, 'POST', '/drover/v1/client-certificates', { token: null, body });
    assert.equal(anonymous.status, 401, anonymous.text);
    const registered = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: 'n1', nodeId: randomUUID(), password: 'n1-password-0123456789' },
    });
    assert.equal(registered.status, 200, registered.text);
    const asNode = await request(server, 'POST', '/drover/v1/client-certificates', { token: (registered.json as { token: string }).token, body });
    assert.equal(asNode.status, 403, asNode.text);
    assert.match(message(asNode), /User "system:node:n1" is not a cluster admin/);

    const badCsr = await request(server, 'POST', '/drover/v1/client-certificates', { body });
    assert.equal(badCsr.status, 400, badCsr.text);
    assert.match(message(badCsr), /not a PEM certificate signing request/);
    const shortLived = await request(server, 'POST', '/drover/v1/client-certificates', { body: { ...body, expirationSeconds: 60 } });
    assert.equal(shortLived.status, 422, shortLived.text);
    const notJson = await request(server, 'POST', '/drover/v1/client-certificates', { rawBody: '[1]' });
    assert.equal(notJson.status, 400, notJson.text);

    const existing = path.join(work, 'existing.yaml');
    fs.writeFileSync(existing, 'keep me');
    const cases: [string[], RegExp][] = [
      [['system:node:n1'], /the user name "system:node:n1" is reserved/],
      [['system:admin'], /the user name "system:admin" is reserved/],
      [['erin', '--group', 'system:nodes'], /group "system:nodes" is reserved/],
      [['erin', '--expiration', '1m'], /--expiration 1m is too short: at least 10m/],
      [['erin', '--expiration', 'soon'], /--expiration: invalid duration "soon"/],
      [['erin', '-o', existing], /existing\.yaml exists; pass --force to replace it/],
      [['erin', '--server', 'http://plain:80'], /--server must be https:\/\/host\[:port\]/],
      [[''], /the user name must not be empty/],
    ];
    for (const [args, expected] of cases) {
      const res = await runDrover(['kubeconfig', 'create', ...args, '--kubeconfig', server.kubeconfig]);
      assert.equal(res.code, 78, `${args.join(' ')}: ${res.stderr}`);
      assert.match(res.stderr, expected, args.join(' '));
    }
    assert.equal(fs.readFileSync(existing, 'utf8'), 'keep me');
    const missing = await runDrover(['kubeconfig', 'create', 'erin', '--kubeconfig', path.join(work, 'nope.yaml')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /kubeconfig .*nope\.yaml does not exist/);
    assert.equal((await issuedEvents()).length, before, 'no certificate was issued');

    const forced = await runDrover(['kubeconfig', 'create', 'erin', '-o', existing, '--force', '--server', 'https://localhost:' + server.port, '--kubeconfig', server.kubeconfig]);
    assert.equal(forced.code, 0, forced.stderr);
    const config = parse(fs.readFileSync(existing, 'utf8')) as KubeconfigFile;
    assert.equal(config.clusters[0]!.cluster.server, `https://localhost:${server.port}`);
    assert.equal(config['current-context'], `erin@${config.clusters[0]!.name}`);
    assert.equal(fs.statSync(existing).mode & 0o777, 0o600);
  });

  it('--help says what the command does, its options and that certificates cannot be revoked', async () => {
    const help = await runDrover(['kubeconfig', 'create', '--help']);
    assert.equal(help.code, 0, help.stderr);
    for (const text of ['--group <group>', '--expiration <duration>', '--output <file>', '--allow-masters', '--kubeconfig <file>', 'cannot be revoked', '8760h']) {
      assert.ok(help.stdout.includes(text), `${text} in:\n${help.stdout}`);
    }
  });
});
