import assert from 'node:assert/strict';
import { randomUUID, X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { cleanupAgents, freePort, joinSecret, nodeCaPem, spawnAgent } from '../helpers/agent.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { cleanup, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * Three CAs, so that nothing a node can obtain passes for an API server: the server CA signs only
 * API serving certificates (what kubeconfigs and join tokens pin), the node CA signs agents'
 * serving certificates (only API servers and peers trust it), the client CA signs client
 * certificates (the API servers' to the agents). A node certificate, got with the agent token, is
 * refused as a server certificate by kubectl, @kubernetes/client-node and `drover agent`, none of
 * which sends it a credential. And the log proxy dials only what a node registered.
 */

interface Seen {
  method: string;
  url: string;
  authorization: string | undefined;
  body: string;
}

/** An HTTPS server on 127.0.0.1 with the given certificate that records every request it gets. */
async function impostor(cert: string, key: string, caPem: string): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server = https.createServer({ cert, key }, (req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization, body });
      // Answer like a Drover server would: the (public) cluster CA for /cacerts, else 200 {}.
      res.writeHead(200, { 'Content-Type': req.url === '/cacerts' ? 'text/plain' : 'application/json' });
      res.end(req.url === '/cacerts' ? caPem : '{"kind":"Status","apiVersion":"v1","status":"Success"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `https://127.0.0.1:${port}`,
    seen,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

describe('a node certificate is never a server certificate', () => {
  let server: ServerProcess;
  let fake: Awaited<ReturnType<typeof impostor>>;
  let nodeCert: { cert: string; key: string; nodeCa: string; clientCa: string };

  before(async () => {
    server = await startServer();
    const agentToken = fs.readFileSync(path.join(server.dataDir, 'agent-token'), 'utf8').trim();
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: agentToken.slice(agentToken.lastIndexOf(':') + 1),
      body: { nodeName: 'mallory', nodeId: randomUUID(), password: 'mallory-password-0123456789', addresses: ['127.0.0.1'], agentPort: 1 },
    });
    assert.equal(registration.status, 200, registration.text);
    const body = registration.json as { servingCertificate: string; servingKey: string; nodeCaCertificate: string; clientCaCertificate: string };
    nodeCert = { cert: body.servingCertificate, key: body.servingKey, nodeCa: body.nodeCaCertificate, clientCa: body.clientCaCertificate };
    fake = await impostor(nodeCert.cert, nodeCert.key, server.caPem);
  });

  after(async () => {
    await fake?.close();
    await cleanupAgents();
    await cleanup();
  });

  it('comes from the node CA, names only the node and its registered address, and the three CAs differ', () => {
    const cert = new X509Certificate(nodeCert.cert);
    assert.equal(cert.subject, 'CN=system:node:mallory\nO=system:nodes');
    assert.equal(cert.subjectAltName, 'DNS:mallory, IP Address:127.0.0.1', 'no localhost, no wildcard, no other name');
    assert.ok(cert.checkIssued(new X509Certificate(nodeCert.nodeCa)), 'issued by the node CA');
    assert.equal(nodeCert.nodeCa.trim(), nodeCaPem(server).trim());
    const cas = new Set([server.caPem.trim(), nodeCert.nodeCa.trim(), nodeCert.clientCa.trim()]);
    assert.equal(cas.size, 3, 'server, node and client CAs are three different CAs');
  });

  it('registration refuses addresses that are not IPs (names, wildcards) with 400', async () => {
    const agentToken = fs.readFileSync(path.join(server.dataDir, 'agent-token'), 'utf8').trim();
    for (const addresses of [['*.example.com'], ['localhost'], ['api.cluster.local'], Array.from({ length: 9 }, (_, i) => `10.0.0.${i}`)]) {
      const res = await request(server, 'POST', '/drover/v1/register', {
        token: agentToken.slice(agentToken.lastIndexOf(':') + 1),
        body: { nodeName: 'mallory', nodeId: randomUUID(), password: 'mallory-password-0123456789', addresses },
      });
      assert.equal(res.status, 400, `${JSON.stringify(addresses)}: ${res.text}`);
    }
  });

  it('kubectl with the admin kubeconfig refuses it, and sends it no token', async () => {
    const kubeconfig = path.join(tempDir('impostor-kubeconfig'), 'config');
    fs.writeFileSync(kubeconfig, fs.readFileSync(server.kubeconfig, 'utf8').replace(server.url, fake.url));
    const cacheDir = tempDir('impostor-kubectl-cache');
    const result = await runKubectl(MODERN_KUBECTL, kubeconfig, cacheDir, ['get', 'nodes', '--request-timeout=10s']);
    assert.notEqual(result.code, 0, result.stdout);
    assert.match(result.stderr, /certificate signed by unknown authority|x509/);
    assert.ok(fake.seen.every((s) => s.authorization === undefined), JSON.stringify(fake.seen));
  });

  it('@kubernetes/client-node refuses it, and sends it no token', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(fs.readFileSync(server.kubeconfig, 'utf8').replace(server.url, fake.url));
    await assert.rejects(kc.makeApiClient(k8s.CoreV1Api).listNode(), (error: Error) => {
      assert.match(String(error.message ?? error), /certificate|self.signed|unable to verify|issuer/i);
      return true;
    });
    assert.ok(fake.seen.every((s) => s.authorization === undefined), JSON.stringify(fake.seen));
  });

  it('drover agent with the server join token refuses it and never sends the join secret', async () => {
    const secret = joinSecret(server);
    const agent = spawnAgent({ server: { url: fake.url, dataDir: server.dataDir }, name: 'fooled' });
    const exit = await agent.exited;
    assert.equal(exit.code, 1, agent.output());
    assert.match(agent.output(), /presents a TLS certificate not issued by it/);
    assert.ok(fake.seen.some((s) => s.url === '/cacerts'), 'it asked for the CA, as any server is asked');
    for (const s of fake.seen) {
      assert.ok(!s.authorization?.includes(secret) && !s.body.includes(secret), `the secret reached the impostor: ${JSON.stringify(s)}`);
      assert.notEqual(s.url, '/drover/v1/register');
    }
  });
});

describe('the log proxy dials only what a node registered', () => {
  let server: ServerProcess;
  let decoy: net.Server;
  let decoyConnections = 0;

  before(async () => {
    server = await startServer({ handMadeNodes: true });
    decoy = net.createServer((socket) => {
      decoyConnections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => decoy.listen(0, '127.0.0.1', resolve));
  });

  after(async () => {
    await new Promise<void>((resolve) => decoy.close(() => resolve()));
    await cleanup();
  });

  it('a Node status pointing elsewhere is ignored; an unreachable agent is reported without detail', async () => {
    const registeredPort = await freePort(); // nothing listens there: the agent is "down"
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: 'liar', nodeId: randomUUID(), password: 'liar-password-0123456789', addresses: ['127.0.0.1'], agentPort: registeredPort },
    });
    assert.equal(registration.status, 200, registration.text);
    const nodeToken = (registration.json as { token: string }).token;
    const decoyPort = (decoy.address() as net.AddressInfo).port;
    const created = await request(server, 'POST', '/api/v1/nodes', {
      token: nodeToken,
      body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'liar' } },
    });
    assert.equal(created.status, 201, created.text);
    const status = await request(server, 'PATCH', '/api/v1/nodes/liar/status', {
      token: nodeToken,
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { status: { addresses: [{ type: 'InternalIP', address: '127.0.0.1' }], daemonEndpoints: { kubeletEndpoint: { Port: decoyPort } } } },
    });
    assert.equal(status.status, 200, status.text);
    const pod = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'on-liar' }, spec: { nodeName: 'liar', containers: [{ name: 'c', image: 'x', command: ['true'] }] } },
    });
    assert.equal(pod.status, 201, pod.text);
    const logs = await request(server, 'GET', '/api/v1/namespaces/default/pods/on-liar/log');
    assert.equal(logs.status, 503, logs.text);
    const message = (logs.json as { message: string }).message;
    assert.match(message, /^agent unreachable/);
    assert.doesNotMatch(message, /ECONNREFUSED|127\.0\.0\.1|connect|:\d{2,5}/, 'no connection detail relayed');
    assert.equal(decoyConnections, 0, 'the server never dialled the address the Node status claims');
  });
});
