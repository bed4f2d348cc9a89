import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, it } from 'node:test';
import { type FencingState, monoNowMs, writeFencingState } from '../../src/agent/pods/fencing.js';
import { killPodProcesses, launchSupervisor, podDir, processAlive, readRunState } from '../../src/agent/pods/launch.js';
import { type PodRunSpec, writeRunSpec } from '../../src/agent/pods/run-spec.js';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';
import { LAUNCH_CEILING_MS } from '../helpers/pods.js';
import { eventually, tempDir } from '../helpers/server.js';

/**
 * A singleton's supervisor asks its peers over connections it opened before its fencing timeout
 * ran out. On a busy host a fresh TLS handshake per question can outlast the 400 ms a round is
 * given; a peer that does not answer is no evidence of an outage, so a control-plane outage then
 * fenced singletons (seen in test/e2e/control-plane-outage.test.ts at a load average of 20 on two
 * cores: 1 of 3 peers answered). A real supervisor process against fake peer endpoints that count
 * their TLS connections.
 */

const FENCING_TIMEOUT_MS = 1500;
const root = tempDir('fencing-connections');
const servers: https.Server[] = [];
let podDirPath = '';

after(async () => {
  if (podDirPath) killPodProcesses(podDirPath);
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  fs.rmSync(root, { recursive: true, force: true });
});

interface FakePeer {
  name: string;
  url: string;
  /** Monotonic time of each TLS connection's handshake. */
  connections: number[];
  /** Monotonic time of each question, and of the handshake of the connection it came on. */
  questions: { at: number; connectedAt: number }[];
}

let cert = '';
let key = '';
let caFile = '';

before(async () => {
  const ca = await createCertificateAuthority('fencing-connections-ca');
  const leaf = await issueCertificate(ca, { commonName: 'peer', subjectAltNames: ['127.0.0.1'], usage: 'server' });
  caFile = path.join(root, 'ca.crt');
  fs.writeFileSync(caFile, ca.certificatePem);
  cert = leaf.certificatePem;
  key = leaf.privateKeyPem;
});

/** A peer agent's endpoint that says it has been cut off from the control plane for 10 s. */
async function fakePeer(name: string): Promise<FakePeer> {
  const peer: FakePeer = { name, url: '', connections: [], questions: [] };
  const connectedAt = new WeakMap<object, number>();
  const s = https.createServer({ cert, key }, (req, res) => {
    peer.questions.push({ at: monoNowMs(), connectedAt: connectedAt.get(req.socket) ?? -1 });
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ node: name, confirmedAgeMs: 10_000 }));
  });
  s.on('secureConnection', (socket) => {
    const at = monoNowMs();
    connectedAt.set(socket, at);
    peer.connections.push(at);
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  servers.push(s);
  peer.url = `https://127.0.0.1:${(s.address() as AddressInfo).port}`;
  return peer;
}

it('a supervisor opens its peer connections before the fencing timeout and asks over them', async (t) => {
  const peers = [await fakePeer('peer-b'), await fakePeer('peer-c')];
  const fencingFile = path.join(root, 'fencing.json');
  const base: Omit<FencingState, 'confirmedAtMonoMs'> = {
    nodeName: 'self',
    fencingTimeoutMs: FENCING_TIMEOUT_MS,
    peers: peers.map(({ name, url }) => ({ name, url })),
    peerToken: '',
    caFile,
    nodeCount: 3,
  };
  let confirmedAt = monoNowMs();
  writeFencingState(fencingFile, { ...base, confirmedAtMonoMs: confirmedAt });
  // Renewals are confirmed every 100 ms while the pod starts.
  const feeder = setInterval(() => {
    confirmedAt = monoNowMs();
    writeFencingState(fencingFile, { ...base, confirmedAtMonoMs: confirmedAt });
  }, 100);
  const spec: PodRunSpec = {
    uid: randomUUID(),
    namespace: 'default',
    name: 'solo',
    containers: [{ name: 'main', command: ['sh', '-c', 'sleep 60 & wait'], args: [], env: {} }],
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 30,
    atMostOne: true,
    fencingFile,
  };
  podDirPath = podDir(path.join(root, 'agent', 'pods'), spec.uid);
  fs.mkdirSync(podDirPath, { recursive: true });
  writeRunSpec(podDirPath, spec);
  await launchSupervisor(podDirPath, LAUNCH_CEILING_MS);
  await eventually(() => readRunState(podDirPath)?.containers[0]?.state && 'running' in readRunState(podDirPath)!.containers[0]!.state, 'the pod running', 10_000, 20);
  assert.deepEqual(peers.map((p) => p.questions.length), [0, 0], 'no question while renewals are confirmed');

  // Renewals stop: the peers (cut off too) make it an outage, re-asked every half second.
  clearInterval(feeder);
  const deadline = confirmedAt + FENCING_TIMEOUT_MS;
  await eventually(() => readRunState(podDirPath)?.outage, 'the outage recorded', FENCING_TIMEOUT_MS + 5000, 20);
  await eventually(() => peers.every((p) => p.questions.filter((q) => q.at > deadline).length >= 3) || undefined, 'three rounds of questions after the timeout', 10_000, 50);
  const state = readRunState(podDirPath)!;
  assert.equal(state.finished, false, 'the workload keeps running through the outage');
  for (const peer of peers) {
    const first = peer.questions[0]!;
    const deciding = peer.questions.filter((q) => q.at > deadline);
    t.diagnostic(
      `${peer.name}: first question ${first.at - confirmedAt} ms after the last renewal (timeout ${FENCING_TIMEOUT_MS} ms); ` +
        `${peer.questions.length} questions on ${peer.connections.length} connection(s)`,
    );
    assert.ok(first.at < deadline, `${peer.name} was first asked before the fencing timeout ran out (${first.at - confirmedAt} ms)`);
    assert.ok(peer.connections.length < peer.questions.length, `${peer.name}: questions share connections (${peer.questions.length} on ${peer.connections.length})`);
    assert.ok(
      deciding.some((q) => q.connectedAt >= 0 && q.connectedAt < q.at - 100),
      `${peer.name}: a question after the timeout came on a connection made earlier`,
    );
  }
  assert.ok(processAlive(state.supervisorPid));
});
