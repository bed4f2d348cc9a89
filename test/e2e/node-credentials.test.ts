import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';
import {
  cleanupAgents,
  exitWithin,
  getNode,
  joinSecret,
  joinToken,
  NodeSampler,
  nodeState,
  registerNode,
  serverForSuite,
  serverPairForSuite,
  spawnAgent,
  startAgent,
  waitForNode,
  waitForState,
} from '../helpers/agent.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, report, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listEvents } from '../helpers/workloads.js';

/**
 * Node credentials and incarnations, as docs/security.md and docs/node-lifecycle.md describe them,
 * with real servers, real agents and the real kubectl: a lease write by a stale incarnation is
 * refused; `kubectl delete node` on a live agent brings the node back as a new incarnation;
 * registering again replaces the credential, on every server; and the join token's CA pin keeps
 * the join secret from a server whose CA does not match (an impostor HTTPS server that records
 * every request it gets).
 */

const LEASES = '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases';
const MERGE = { 'Content-Type': 'application/merge-patch+json' };
const NODE_ID_ANNOTATION = 'drover.io/node-id';

interface LeaseObject {
  metadata: { name: string; resourceVersion?: string };
  spec?: { holderIdentity?: string; renewTime?: string };
}

function lease(name: string, holderIdentity: string, renewTime = new Date().toISOString().replace('Z', '000Z')): Record<string, unknown> {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, namespace: 'kube-node-lease' },
    spec: { holderIdentity, leaseDurationSeconds: 4, renewTime },
  };
}

// -------------------------------------------------------------------------------------------------

describe('node incarnations and credentials on one server', () => {
  const kubectlCache = tempDir('kubectl-cache');
  const suite = serverForSuite({}, [kubectlCache]);

  it('a lease write by a stale node incarnation is refused with 403 "not the current incarnation"; the current one may write', async () => {
    const { server } = suite;
    const name = 'stale-node';
    const password = 'stale-node-password-0123456789';
    let asNode = { token: await registerNode(server, name, password) };
    const node = { apiVersion: 'v1', kind: 'Node', metadata: { name } };

    const first = await request(server, 'POST', '/api/v1/nodes', { ...asNode, body: node });
    assert.equal(first.status, 201, first.text);
    const oldUid = (first.json as { metadata: { uid: string } }).metadata.uid;
    const created = await request(server, 'POST', LEASES, { ...asNode, body: lease(name, `${name}/${oldUid}`) });
    assert.equal(created.status, 201, `the incarnation that exists may create its lease: ${created.text}`);

    // The admin deletes the Node; its lease goes with it (the lifecycle controller deletes it).
    const deleted = await request(server, 'DELETE', `/api/v1/nodes/${name}`);
    assert.equal(deleted.status, 200, deleted.text);
    await eventually(async () => (await request(server, 'GET', `${LEASES}/${name}`)).status === 404, 'the lease to go with its Node');
    // The deleted Node's credential is revoked (node-registration.test.ts); the host registers
    // again with its password, and its new credential still holds the old incarnation's identity.
    await eventually(async () => (await request(server, 'GET', '/api/v1/nodes', asNode)).status === 401, 'the deleted Node’s credential to be revoked');
    asNode = { token: await registerNode(server, name, password) };

    // No Node at all: no incarnation may hold the lease.
    const orphan = await request(server, 'POST', LEASES, { ...asNode, body: lease(name, `${name}/${oldUid}`) });
    assert.equal(orphan.status, 403, orphan.text);
    assert.match((orphan.json as { message: string }).message, /not the current incarnation of node stale-node \(the Node does not exist\); re-register the agent/);

    // The Node is created again under the same name: a new incarnation with a new UID.
    const second = await request(server, 'POST', '/api/v1/nodes', { ...asNode, body: node });
    assert.equal(second.status, 201, second.text);
    const newUid = (second.json as { metadata: { uid: string } }).metadata.uid;
    assert.notEqual(newUid, oldUid);
    const stale = `${name}/${oldUid}`;
    const refusal = new RegExp(
      `leases is forbidden: User "system:node:${name}" holds lease identity "${stale}", which is not the current incarnation of node ${name} \\(uid ${newUid}\\); re-register the agent`,
    );

    const staleCreate = await request(server, 'POST', LEASES, { ...asNode, body: lease(name, stale) });
    assert.equal(staleCreate.status, 403, `create by the stale incarnation: ${staleCreate.text}`);
    assert.match((staleCreate.json as { message: string }).message, refusal);

    const current = await request(server, 'POST', LEASES, { ...asNode, body: lease(name, `${name}/${newUid}`, '2030-01-01T00:00:00.000000Z') });
    assert.equal(current.status, 201, `create by the current incarnation: ${current.text}`);

    // The writes an agent of the deleted Node would make: a renewal (merge patch, as agents send
    // it) and a full update. Both refused, and the lease is left as the current incarnation wrote it.
    const stalePatch = await request(server, 'PATCH', `${LEASES}/${name}`, {
      ...asNode,
      headers: MERGE,
      body: { spec: { holderIdentity: stale, renewTime: new Date().toISOString().replace('Z', '000Z') } },
    });
    assert.equal(stalePatch.status, 403, `renewal by the stale incarnation: ${stalePatch.text}`);
    assert.match((stalePatch.json as { message: string }).message, refusal);
    const stalePut = await request(server, 'PUT', `${LEASES}/${name}`, {
      ...asNode,
      body: { ...lease(name, stale), metadata: { name, namespace: 'kube-node-lease', resourceVersion: (current.json as LeaseObject).metadata.resourceVersion } },
    });
    assert.equal(stalePut.status, 403, `update by the stale incarnation: ${stalePut.text}`);
    assert.match((stalePut.json as { message: string }).message, refusal);
    const kept = (await request(server, 'GET', `${LEASES}/${name}`)).json as LeaseObject;
    assert.equal(kept.spec?.holderIdentity, `${name}/${newUid}`);
    assert.equal(kept.spec?.renewTime, '2030-01-01T00:00:00.000000Z');

    // The current incarnation renews as usual.
    const renewal = await request(server, 'PATCH', `${LEASES}/${name}`, {
      ...asNode,
      headers: MERGE,
      body: { spec: { holderIdentity: `${name}/${newUid}`, renewTime: new Date().toISOString().replace('Z', '000Z') } },
    });
    assert.equal(renewal.status, 200, `renewal by the current incarnation: ${renewal.text}`);
    await request(server, 'DELETE', `/api/v1/nodes/${name}`);
  });

  it('registering again replaces the node credential: the old one gets 401 at once, the new one works', async () => {
    const { server } = suite;
    const name = 'cred-node';
    const password = 'cred-node-password-0123456789';
    const oldToken = await registerNode(server, name, password);
    const read = (token: string) => request(server, 'GET', '/api/v1/nodes', { token });
    assert.equal((await read(oldToken)).status, 200, 'the first credential works');
    const created = await request(server, 'POST', '/api/v1/nodes', { token: oldToken, body: { apiVersion: 'v1', kind: 'Node', metadata: { name } } });
    assert.equal(created.status, 201, created.text);
    const uid = (created.json as { metadata: { uid: string } }).metadata.uid;

    const newToken = await registerNode(server, name, password);
    assert.notEqual(newToken, oldToken, 'a registration hands out a fresh credential');
    const refused = await read(oldToken);
    assert.equal(refused.status, 401, `the replaced credential: ${refused.text}`);
    const refusedLease = await request(server, 'POST', LEASES, { token: oldToken, body: lease(name, `${name}/${uid}`) });
    assert.equal(refusedLease.status, 401, `a lease write with the replaced credential: ${refusedLease.text}`);
    assert.equal((await read(newToken)).status, 200, 'the new credential works');
    const leaseWrite = await request(server, 'POST', LEASES, { token: newToken, body: lease(name, `${name}/${uid}`) });
    assert.equal(leaseWrite.status, 201, `a lease write with the new credential: ${leaseWrite.text}`);
    await request(server, 'DELETE', `/api/v1/nodes/${name}`);
  });

  it('kubectl delete node on a live agent: the node comes back as a new incarnation (new UID, same host) and Ready, never Unavailable', async (t) => {
    const { server } = suite;
    const name = 'phoenix';
    const agent = await startAgent({ server, name });
    let previous = (await waitForState(server, name, 'Ready')).node;
    const nodeId = previous.metadata.annotations?.[NODE_ID_ANNOTATION];
    assert.ok(nodeId, 'the Node carries the host’s node id');
    const sampler = new NodeSampler(server).start();
    const from = Date.now();
    try {
      for (const kubectl of kubectlClients()) {
        const deletedAt = Date.now();
        const result = await runKubectl(kubectl, server.kubeconfig, kubectlCache, ['delete', 'node', name]);
        assert.equal(result.code, 0, `${kubectl.name}: ${result.stderr}`);
        assert.match(result.stdout, new RegExp(`node "${name}" deleted`), kubectl.name);

        const back = await waitForNode(
          server,
          name,
          (n) => n.metadata.uid !== previous.metadata.uid && nodeState(n) === 'Ready',
          `Ready again under a new UID after ${kubectl.name} deleted it`,
          30_000,
        );
        report(t, `${kubectl.name}: deleted → Ready as a new incarnation in ${back.at - deletedAt} ms (uid ${previous.metadata.uid} → ${back.node.metadata.uid})`);
        assert.equal(back.node.metadata.annotations?.[NODE_ID_ANNOTATION], nodeId, 'the same host (node id)');
        assert.equal(back.node.spec?.providerID, `drover://${nodeId}`);
        // The lease is held by the new incarnation.
        await eventually(
          async () => ((await request(server, 'GET', `${LEASES}/${name}`)).json as LeaseObject).spec?.holderIdentity === `${name}/${back.node.metadata.uid}`,
          `the lease held by ${name}/${back.node.metadata.uid}`,
          10_000,
        );
        assert.equal(agent.hasExited, false, `the agent keeps running; output:\n${agent.output()}`);
        previous = back.node;
      }
      assert.match(agent.output(), /registering again/, 'the agent says it registered again');
      // A new incarnation is judged from scratch: no verdict from the old one's silence.
      await eventually(() => (sampler.rounds.at(-1) ?? 0) > Date.now() - 100 || undefined, 'a fresh sample', 10_000);
      assert.ok(!sampler.everIn(name, 'Unavailable', from), `never Unavailable; transitions: ${sampler.transitions(name, from).join(' → ')}`);
      const unavailable = (await listEvents(server)).filter((e) => e.reason === 'NodeUnavailable' && e.object === `Node/${name}`);
      assert.deepEqual(unavailable.map((e) => e.message), [], 'no NodeUnavailable event');
      assert.equal((await getNode(server, name))?.metadata.uid, previous.metadata.uid);
    } finally {
      await sampler.stop();
      await agent.stop();
    }
  });
});

// -------------------------------------------------------------------------------------------------

describe('node credentials on two servers sharing one etcd', () => {
  const pair = serverPairForSuite('cred');

  it('a credential replaced through one server stops working on the other too (every server indexes credentials from a datastore watch)', async (t) => {
    const { a, b } = pair;
    const name = 'roaming';
    const password = 'roaming-password-0123456789';
    const status = async (server: ServerProcess, token: string) => (await request(server, 'GET', '/api/v1/nodes', { token })).status;

    const oldToken = await registerNode(a, name, password);
    await eventually(async () => (await status(b, oldToken)) === 200, 'server B to accept the credential registered on A');

    const newToken = await registerNode(b, name, password);
    assert.equal(await status(b, oldToken), 401, 'B, where the node registered again, refuses the old credential at once');
    const started = Date.now();
    await eventually(async () => (await status(a, oldToken)) === 401, 'server A to refuse the replaced credential', 10_000);
    report(t, `A refused the replaced credential ${Date.now() - started} ms after B issued the new one`);
    await eventually(async () => (await status(a, newToken)) === 200, 'server A to accept the new credential', 10_000);
    assert.equal(await status(b, newToken), 200);
    assert.equal(await status(a, oldToken), 401, 'and the old one stays refused');
  });
});

// -------------------------------------------------------------------------------------------------

interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

interface Impostor {
  url: string;
  requests: RecordedRequest[];
  /** TLS handshakes the client gave up on (it did not trust the certificate). */
  refusedHandshakes: number;
  close(): Promise<void>;
}

/**
 * An HTTPS server on 127.0.0.1 with its own CA, recording every request it receives. `/cacerts`
 * answers `servedCa` (its own CA unless told otherwise: a copy of a real cluster's CA, which is
 * public, is what a careful man in the middle would serve); everything else answers 401.
 */
async function startImpostor(servedCa?: string): Promise<Impostor> {
  const ca = await createCertificateAuthority('impostor-ca');
  const serving = await issueCertificate(ca, { commonName: 'impostor', subjectAltNames: ['127.0.0.1', 'localhost'], usage: 'server' });
  const requests: RecordedRequest[] = [];
  const impostor = { url: '', requests, refusedHandshakes: 0, close: async () => undefined } as Impostor;
  const server = https.createServer({ cert: serving.certificatePem, key: serving.privateKeyPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      if (req.method === 'GET' && req.url === '/cacerts') {
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end(servedCa ?? ca.certificatePem);
        return;
      }
      res.writeHead(401, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Unauthorized', message: 'Unauthorized', code: 401 }));
    });
  });
  server.on('tlsClientError', () => impostor.refusedHandshakes++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  impostor.url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  impostor.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return impostor;
}

/** Requests that carried any of the secrets anywhere (path, headers or body). */
function leaks(requests: RecordedRequest[], secrets: string[]): string[] {
  return requests.filter((r) => secrets.some((s) => JSON.stringify(r).includes(s))).map((r) => `${r.method} ${r.url}`);
}

describe('the join token pins the cluster CA: the secret never reaches a server whose CA does not match', () => {
  let cluster: ServerProcess;
  const impostors: Impostor[] = [];
  const impostor = async (servedCa?: string): Promise<Impostor> => {
    const started = await startImpostor(servedCa);
    impostors.push(started);
    return started;
  };

  before(async () => {
    // A real cluster, for a real join token (D10<hash of its CA>::server:<secret>).
    cluster = await startServer();
  });

  after(async () => {
    await cleanupAgents();
    await Promise.all(impostors.map((i) => i.close()));
    await cleanup(cluster?.dataDir ?? '');
  });

  it('a server with another CA: the agent exits 1 naming the mismatch, after one unauthenticated GET /cacerts', async (t) => {
    const fake = await impostor();
    const token = joinToken(cluster);
    const agent = spawnAgent({ server: { url: fake.url, dataDir: cluster.dataDir }, name: 'pinned-a', token });
    const exit = await exitWithin(agent);
    assert.equal(exit.code, 1, `exit code; output:\n${agent.output()}`);
    assert.deepEqual(leaks(fake.requests, [token, joinSecret(cluster)]), [], 'no request carried the token or its secret');
    assert.match(agent.output(), /drover agent: the server's CA certificate does not match the join token \(token pins [0-9a-f]{12}…, server has [0-9a-f]{12}…\): wrong server or wrong token/);
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.url}`), ['GET /cacerts'], 'the impostor got only the CA fetch');
    assert.equal(fake.requests[0]!.headers.authorization, undefined, 'without an Authorization header');
    assert.equal(fake.requests[0]!.body, '', 'and without a body');
    report(t, `impostor saw: ${fake.requests.map((r) => `${r.method} ${r.url}`).join(', ')}; agent: ${agent.output().trim().split('\n').at(-1)}`);
  });

  it('a server serving a copy of the cluster CA without a certificate from it: the agent exits 1, the secret is never sent', async (t) => {
    // The CA certificate is public (GET /cacerts), so the pin alone proves nothing: the TLS
    // handshake against that CA must succeed before the secret goes anywhere.
    const fake = await impostor(cluster.caPem);
    const token = joinToken(cluster);
    const agent = spawnAgent({ server: { url: fake.url, dataDir: cluster.dataDir }, name: 'pinned-b', token });
    const exit = await exitWithin(agent);
    assert.equal(exit.code, 1, `exit code; output:\n${agent.output()}`);
    assert.deepEqual(leaks(fake.requests, [token, joinSecret(cluster)]), [], 'no request carried the token or its secret');
    assert.match(
      agent.output(),
      /drover agent: the server at https:\/\/127\.0\.0\.1:\d+ serves the CA certificate the join token pins but presents a TLS certificate not issued by it \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\): wrong server, or a man in the middle/,
    );
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.url}`), ['GET /cacerts'], 'the impostor got only the unverified CA fetch');
    assert.equal(fake.requests[0]!.headers.authorization, undefined);
    assert.ok(fake.refusedHandshakes >= 1, 'the agent refused the impostor’s certificate in the handshake');
    report(t, `impostor saw: ${fake.requests.map((r) => `${r.method} ${r.url}`).join(', ')}, ${fake.refusedHandshakes} refused handshake(s)`);
  });

  it('control: with a bare secret (no pin) the same impostor does receive the secret, which is why the full token matters', async () => {
    const fake = await impostor();
    const secret = joinSecret(cluster);
    const agent = spawnAgent({ server: { url: fake.url, dataDir: cluster.dataDir }, name: 'unpinned', token: secret });
    const exit = await exitWithin(agent);
    assert.equal(exit.code, 1, `exit code (the impostor answers 401); output:\n${agent.output()}`);
    assert.match(agent.output(), /the join token does not pin the CA; use the full token from `drover token show`/);
    assert.deepEqual(leaks(fake.requests, [secret]), ['POST /drover/v1/register'], 'the recorder sees a leaked secret');
    const registration = fake.requests.find((r) => r.url === '/drover/v1/register')!;
    assert.equal(registration.headers.authorization, `Bearer ${secret}`);
  });
});
