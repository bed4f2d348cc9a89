import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ImageStore } from '../../src/images/store.js';
import { issueCertificate } from '../../src/security/pki.js';
import {
  agentClientCertificate,
  type AgentProcess,
  cleanupAgents,
  joinSecret,
  killRunningDrover,
  nodeCaPem,
  runDrover,
  startAgent,
} from '../helpers/agent.js';
import { droverFreeEnv, isolateFromDroverEnv } from '../helpers/config-env.js';
import { buildTestImage, sha256, writeOciArchive } from '../helpers/images.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/**
 * The embedded registry's first part (docs/registry.md), with real processes: the
 * `embedded-registry` setting is each node's own (a server's from its own local file, an agent's
 * from its own), a node with it serves its image store on `/v2/` of its agent port to callers
 * holding a node certificate (the one registration issues) or an administrator's, and nobody
 * else; a node without it answers 404 saying so. Advertisements and pulls from peers: registry-peers.test.ts.
 */

const { suiteDir, emptyConfig } = isolateFromDroverEnv('embedded-registry-suite');

after(async () => {
  killRunningDrover();
  await cleanupAgents();
  await cleanup(suiteDir);
});

interface Credential {
  cert: string;
  key: string;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One request to an agent's endpoint, the body kept as bytes (blobs are binary). */
function agentRequest(server: ServerProcess, port: number, urlPath: string, credential: Credential | undefined, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path: urlPath, method, ca: nodeCaPem(server), agent: false, ...(credential ?? {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function errorOf(answer: Answer): { code: string; message: string } {
  assert.equal(answer.headers['content-type'], 'application/json', answer.body.toString());
  const parsed = JSON.parse(answer.body.toString()) as { errors: { code: string; message: string }[] };
  return parsed.errors[0]!;
}

/** The agent port from a process's "agent is running" line (an agent's, or a server's own agent's). */
function agentPortIn(output: string, what: string): number {
  const line = output.split('\n').find((l) => l.includes('agent is running'));
  assert.ok(line, `${what} has not logged "agent is running"`);
  const port = (JSON.parse(line) as { agentPort?: number }).agentPort;
  assert.ok(typeof port === 'number' && port > 0, `no agentPort in ${line}`);
  return port;
}

/** A node's serving certificate as registration issues it, for a node registered by hand: what a peer presents. */
async function nodeCertificate(server: ServerProcess, name: string): Promise<Credential> {
  const res = await request(server, 'POST', '/drover/v1/register', {
    token: joinSecret(server),
    body: { nodeName: name, nodeId: `${name}-id`, password: `${name}-password-0123456789abcdef`, addresses: ['127.0.0.1'] },
  });
  assert.equal(res.status, 200, res.text);
  const body = res.json as { servingCertificate: string; servingKey: string };
  return { cert: body.servingCertificate, key: body.servingKey };
}

describe('embedded-registry: each node’s own setting; a node with it serves its image store over /v2/ to nodes', () => {
  const image = buildTestImage({ name: 'registry.test/team/app:v1', base: 'empty', files: { 'etc/hello': 'hello from the embedded registry\n' }, cmd: ['/bin/hello'] });
  let server: ServerProcess;
  let serving: AgentProcess;
  let plain: AgentProcess;
  let servingPort: number;
  let plainPort: number;
  let serverAgentPort: number;
  let peer: Credential;

  before(async () => {
    // The server's own file turns it on for the server's node only.
    const serverConfig = path.join(suiteDir, 'server.yaml');
    fs.writeFileSync(serverConfig, '# this server only\nembedded-registry: true\n');
    server = await startServer({ embeddedAgent: true, args: ['--node-name', 'reg-server', '-c', serverConfig] });
    serverAgentPort = await eventually(() => (server.output().includes('agent is running') ? agentPortIn(server.output(), 'the server') : undefined), 'the server’s own agent', 60_000);

    // The serving agent: its own file says true, and its store holds the image before it starts.
    const servingDir = tempDir('registry-agent');
    const archive = path.join(suiteDir, 'app.tar');
    writeOciArchive(image, archive);
    await ImageStore.forDataDir(servingDir).importArchive(archive);
    const agentConfig = path.join(suiteDir, 'agent-serving.yaml');
    fs.writeFileSync(agentConfig, 'embedded-registry: true\n');
    serving = await startAgent({ server, name: 'reg-serving', dataDir: servingDir, args: ['-c', agentConfig] });
    plain = await startAgent({ server, name: 'reg-plain', args: ['-c', emptyConfig] });
    servingPort = agentPortIn(serving.output(), 'the serving agent');
    plainPort = agentPortIn(plain.output(), 'the plain agent');
    peer = await nodeCertificate(server, 'reg-peer');
  });

  it('an agent with the setting serves /v2/, a manifest by tag and by digest, and its blobs (bytes hash to their digests) to a node certificate', async () => {
    const version = await agentRequest(server, servingPort, '/v2/', peer);
    assert.equal(version.status, 200, version.body.toString());
    assert.equal(version.headers['docker-distribution-api-version'], 'registry/2.0');

    // The store's name is registry.test/team/app:v1: ns carries the registry host, as containerd sends it to a mirror.
    const byTag = await eventually(async () => {
      const answer = await agentRequest(server, servingPort, '/v2/team/app/manifests/v1?ns=registry.test', peer);
      return answer.status === 200 ? answer : undefined;
    }, 'the imported image served by tag');
    assert.deepEqual(byTag.body, image.manifest);
    assert.equal(sha256(byTag.body), image.digest);
    assert.equal(byTag.headers['docker-content-digest'], image.digest);
    assert.equal(byTag.headers['content-type'], 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(byTag.headers['content-length'], String(image.manifest.length));

    const byDigest = await agentRequest(server, servingPort, `/v2/team/app/manifests/${image.digest}`, peer);
    assert.equal(byDigest.status, 200);
    assert.deepEqual(byDigest.body, image.manifest);

    for (const digest of [image.configDigest, ...image.layers.map((l) => l.digest)]) {
      const blob = await agentRequest(server, servingPort, `/v2/team/app/blobs/${digest}`, peer);
      assert.equal(blob.status, 200, blob.body.toString());
      assert.equal(sha256(blob.body), digest, 'the bytes hash to the digest asked for');
      assert.deepEqual(blob.body, image.blobs.get(digest));
      assert.equal(blob.headers['docker-content-digest'], digest);
      assert.equal(blob.headers['content-length'], String(blob.body.length));
      const head = await agentRequest(server, servingPort, `/v2/team/app/blobs/${digest}`, peer, 'HEAD');
      assert.equal(head.status, 200);
      assert.equal(head.headers['content-length'], String(blob.body.length));
    }

    const missing = await agentRequest(server, servingPort, '/v2/team/app/manifests/v2?ns=registry.test', peer);
    assert.equal(missing.status, 404);
    assert.equal(errorOf(missing).code, 'MANIFEST_UNKNOWN');
    const push = await agentRequest(server, servingPort, '/v2/team/app/manifests/v1', peer, 'PUT');
    assert.equal(push.status, 405, 'no push');
    assert.equal(errorOf(push).code, 'UNSUPPORTED');
    const upload = await agentRequest(server, servingPort, '/v2/team/app/blobs/uploads/', peer, 'POST');
    assert.equal(upload.status, 405, 'no uploads');
  });

  it('only nodes and administrators read it: no certificate, a plain user’s, the API servers’ or one from an unknown CA get 401', async () => {
    const noCert = await agentRequest(server, servingPort, '/v2/', undefined);
    assert.equal(noCert.status, 401);
    assert.equal(errorOf(noCert).code, 'UNAUTHORIZED');
    assert.equal((await agentRequest(server, servingPort, `/v2/team/app/blobs/${image.configDigest}`, undefined)).status, 401, 'no blob without a certificate');
    assert.equal((await agentRequest(server, servingPort, '/v2/', await agentClientCertificate(server, 'user'))).status, 401, 'a user without system:masters');
    assert.equal((await agentRequest(server, servingPort, '/v2/', await agentClientCertificate(server, 'apiserver'))).status, 401, 'the API servers do not pull images');
    const { createCertificateAuthority } = await import('../../src/security/pki.js');
    const strangerCa = await createCertificateAuthority('stranger-ca');
    const stranger = await issueCertificate(strangerCa, { commonName: 'system:node:reg-peer', organization: 'system:nodes', usage: 'peer' });
    const strangerAnswer = await agentRequest(server, servingPort, '/v2/', { cert: stranger.certificatePem, key: stranger.privateKeyPem });
    assert.equal(strangerAnswer.status, 401, 'a node name from an unknown CA is no node');
    const admin = await agentRequest(server, servingPort, '/v2/', await agentClientCertificate(server, 'admin'));
    assert.equal(admin.status, 200, 'an administrator may read (debugging)');
  });

  it('a node certificate opens /v2/ only: not the agent’s logs, health, stats or metrics', async () => {
    for (const urlPath of ['/healthz', '/stats/summary', '/metrics', '/containerLogs/default/p/c']) {
      assert.equal((await agentRequest(server, servingPort, urlPath, peer)).status, 401, urlPath);
    }
    // The same certificate still works where it did: the API servers' is unchanged.
    assert.equal((await agentRequest(server, servingPort, '/healthz', await agentClientCertificate(server, 'apiserver'))).status, 200);
  });

  it('an agent without the setting answers 404 on /v2/, saying embedded-registry is off on this node', async () => {
    const off = await agentRequest(server, plainPort, '/v2/', peer);
    assert.equal(off.status, 404);
    const error = errorOf(off);
    assert.match(error.message, /embedded-registry is off on this node \(reg-plain\)/);
    assert.equal((await agentRequest(server, plainPort, `/v2/team/app/blobs/${image.configDigest}`, peer)).status, 404);
    assert.equal((await agentRequest(server, plainPort, '/v2/', undefined)).status, 401, 'still no anonymous answer');
  });

  it('the server with embedded-registry only in its own local file serves; its agents follow their own files, not the server’s', async () => {
    const onServer = await agentRequest(server, serverAgentPort, '/v2/', peer);
    assert.equal(onServer.status, 200, onServer.body.toString());
    // The agents joined that server and kept their own values: the plain agent stays off.
    assert.equal((await agentRequest(server, plainPort, '/v2/', peer)).status, 404);

    const drift = await eventually(async () => {
      const result = await runDrover(['config', 'drift', '--kubeconfig', server.kubeconfig, '--json'], 30_000, { env: droverFreeEnv({ DROVER_CONFIG_FILE: emptyConfig }), cwd: suiteDir });
      const report = JSON.parse(result.stdout) as { nodes: { id: string }[]; rows: { key: string; scope: string; severity: string; values: Record<string, string> }[] };
      return report.nodes.length === 3 ? { result, report } : undefined;
    }, 'three published node configurations');
    assert.equal(drift.result.code, 0, 'a node-scoped difference is no error');
    const row = drift.report.rows.find((r) => r.key === 'embedded-registry');
    assert.ok(row, JSON.stringify(drift.report.rows));
    assert.equal(row.scope, 'node');
    assert.equal(row.severity, 'info');
    assert.deepEqual(row.values, { 'reg-server/server': 'true', 'reg-serving/agent': 'true', 'reg-plain/agent': 'false' });
  });
});

describe('embedded-registry in drover config show: every source, both commands, every role', () => {
  const show = async (args: string[], env: Record<string, string | undefined> = {}) => {
    // An agent (and a control-plane-only server) needs a server to join and a token: any will do for show.
    const joining = { DROVER_SERVER: 'https://127.0.0.1:1', DROVER_TOKEN: 'K10::server:secret' };
    const result = await runDrover(['config', 'show', '--json', ...args], 30_000, { env: droverFreeEnv({ ...joining, ...env }), cwd: suiteDir });
    assert.equal(result.code, 0, result.stderr);
    const parsed = JSON.parse(result.stdout) as { settings: { key: string; value: string; source: string; scope: string }[] };
    const row = parsed.settings.find((s) => s.key === 'embedded-registry');
    assert.ok(row, result.stdout);
    return row;
  };

  it('default false; file, drop-in, environment and flag, each named as the source', async () => {
    const dir = fs.mkdtempSync(path.join(suiteDir, 'show-'));
    const main = path.join(dir, 'config.yaml');
    fs.writeFileSync(main, '# node\n\nembedded-registry: true\n');
    for (const command of ['--server', '--agent']) {
      const byDefault = await show([command, '-c', emptyConfig]);
      assert.deepEqual([byDefault.value, byDefault.source, byDefault.scope], ['false', 'default', 'node']);
      const fromFile = await show([command, '-c', main]);
      assert.deepEqual([fromFile.value, fromFile.source], ['true', `file:${main}:3`]);
      fs.mkdirSync(`${main}.d`, { recursive: true });
      const dropIn = path.join(`${main}.d`, '10-off.yaml');
      fs.writeFileSync(dropIn, 'embedded-registry: false\n');
      const fromDropIn = await show([command, '-c', main]);
      assert.deepEqual([fromDropIn.value, fromDropIn.source], ['false', `drop-in:${dropIn}:1`]);
      const fromEnv = await show([command, '-c', main], { DROVER_EMBEDDED_REGISTRY: 'true' });
      assert.deepEqual([fromEnv.value, fromEnv.source], ['true', 'env:DROVER_EMBEDDED_REGISTRY']);
      const fromFlag = await show([command, '-c', main, '--embedded-registry'], { DROVER_EMBEDDED_REGISTRY: 'false' });
      assert.deepEqual([fromFlag.value, fromFlag.source], ['true', 'flag:--embedded-registry']);
      fs.rmSync(`${main}.d`, { recursive: true });
    }
    // Valid on every role of a server: etcd-only, control-plane-only, all.
    for (const role of [['--role', 'etcd', '--cluster-init'], ['--role', 'control-plane'], ['--role', 'all']]) {
      // A control-plane-only server joins one: its URL through the environment (config show's --server is the command switch).
      const row = await show(['--server', '-c', main, ...role]);
      assert.deepEqual([row.value, row.source], ['true', `file:${main}:3`], role.join(' '));
    }
  });
});

describe('embedded-registry on a server without an agent', () => {
  it('a server with disable-agent says at start that it serves no images', async () => {
    const server = await startServer({ args: ['--node-name', 'reg-no-agent', '--embedded-registry'] });
    try {
      await eventually(() => server.output().includes('embedded-registry is on but disable-agent is too'), 'the warning', 30_000);
      assert.doesNotMatch(server.output(), /agent is running/, 'no agent runs');
    } finally {
      await server.stop();
    }
  });
});
