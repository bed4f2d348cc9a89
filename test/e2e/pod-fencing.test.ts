import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  countPeers,
  judgeOutage,
  isControlPlaneOutage,
  monoNowMs,
  queryPeers,
  writeFencingState,
  type FencingPeer,
  type FencingState,
  type PeerControlPlaneAnswer,
} from '../../src/agent/pods/fencing.js';
import { killPodProcesses, launchSupervisor, liveSupervisor, podDir, processAlive, readRunState, writeRunSpec } from '../../src/agent/pods/launch.js';
import type { PodRunSpec, PodRunState } from '../../src/agent/pods/run-spec.js';
import { createCertificateAuthority, issueCertificate } from '../../src/security/pki.js';
import { always, eventually, tempDir } from '../helpers/server.js';
import { LAUNCH_CEILING_MS } from '../helpers/pods.js';

/**
 * Fencing of atMostOne pods: the pure outage rule, and real supervisors killing (or sparing)
 * their workload as the fencing file goes stale and fake peers report on the control plane.
 *
 * What these tests prove is the order of things: never fenced before the timeout, fenced after it
 * (once, for good), spared through an outage. How soon after the timeout the kill comes is a
 * figure, measured by bench/fencing.ts (docs/benchmarks.md); the tests only hold it to a ceiling
 * a loaded machine cannot miss.
 */

const FENCING_TIMEOUT_MS = 1000;
/** A generous ceiling on "fenced soon after": bench/fencing.ts measures the real figure (~100 ms). */
const FENCE_CEILING_MS = 15_000;
const PEER_TOKEN = 'peer-secret-token';

const root = tempDir('fencing');
const pods: string[] = [];
after(() => {
  for (const dir of pods) killPodProcesses(dir);
  fs.rmSync(root, { recursive: true, force: true });
});

const alive = processAlive;

function runningPid(state: PodRunState | undefined): number | undefined {
  const c = state?.containers[0];
  return c && 'running' in c.state ? c.state.running.pid : undefined;
}

/** Plays the agent: rewrites the fencing file after each "confirmed renewal". */
class FencingFeeder {
  lastConfirmedMono = 0;
  private timer: NodeJS.Timeout | undefined;
  constructor(
    readonly file: string,
    private readonly base: Omit<FencingState, 'confirmedAtMonoMs'>,
  ) {}
  renew(): void {
    this.lastConfirmedMono = monoNowMs();
    writeFencingState(this.file, { ...this.base, confirmedAtMonoMs: this.lastConfirmedMono });
  }
  start(): void {
    this.renew();
    this.timer = setInterval(() => this.renew(), 100);
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

async function startPod(
  name: string,
  fencingFile: string,
  atMostOne: boolean,
): Promise<{ dir: string; pid: number; supervisorPid: number }> {
  const spec: PodRunSpec = {
    uid: randomUUID(),
    namespace: 'default',
    name,
    containers: [{ name: 'main', command: ['sh', '-c', 'echo up; sleep 60 & wait'], args: [], env: {} }],
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 30,
    atMostOne,
    fencingFile,
  };
  const dir = podDir(path.join(root, name, 'agent', 'pods'), spec.uid);
  fs.mkdirSync(dir, { recursive: true });
  writeRunSpec(dir, spec);
  pods.push(dir);
  const supervisorPid = await launchSupervisor(dir, LAUNCH_CEILING_MS);
  const pid = await eventually(() => runningPid(readRunState(dir)), `${name} running`, 10_000, 20);
  return { dir, pid, supervisorPid };
}

/** Polls every 5 ms until the pid is gone; the monotonic time it was first seen gone. */
async function deathTime(pid: number, ceilingMs: number): Promise<number> {
  const deadline = Date.now() + ceilingMs;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new Error(`pid ${pid} still alive after ${ceilingMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return monoNowMs();
}

describe('isControlPlaneOutage', () => {
  const cut = (node: string): PeerControlPlaneAnswer => ({ node, confirmedAgeMs: 5000 });
  const fine = (node: string): PeerControlPlaneAnswer => ({ node, confirmedAgeMs: 200 });
  const timeout = 2000;
  const cases: { name: string; self: number; answers: (PeerControlPlaneAnswer | undefined)[]; nodes: number; outage: boolean }[] = [
    { name: 'single node: this node is the majority', self: 3000, answers: [], nodes: 1, outage: true },
    { name: 'two nodes, peer fine: isolated', self: 3000, answers: [fine('b')], nodes: 2, outage: false },
    { name: 'two nodes, peer cut off too', self: 3000, answers: [cut('b')], nodes: 2, outage: true },
    { name: 'three nodes, no peers answered', self: 3000, answers: [undefined, undefined], nodes: 3, outage: false },
    { name: 'three nodes, one cut off', self: 3000, answers: [cut('b'), undefined], nodes: 3, outage: true },
    { name: 'three nodes, both fine', self: 3000, answers: [fine('b'), fine('c')], nodes: 3, outage: false },
    { name: 'four nodes, one cut off is only half', self: 3000, answers: [cut('b'), fine('c'), fine('d')], nodes: 4, outage: false },
    { name: 'four nodes, two cut off', self: 3000, answers: [cut('b'), cut('c'), undefined], nodes: 4, outage: true },
    { name: 'five nodes, two cut off', self: 3000, answers: [cut('b'), cut('c'), undefined, undefined], nodes: 5, outage: true },
    { name: 'five nodes, one cut off', self: 3000, answers: [cut('b'), undefined, fine('d'), undefined], nodes: 5, outage: false },
    { name: 'a peer counts once however often it answers', self: 3000, answers: [cut('b'), cut('b'), cut('b')], nodes: 5, outage: false },
    { name: 'exactly half the timeout is not cut off', self: 3000, answers: [{ node: 'b', confirmedAgeMs: 1000 }], nodes: 2, outage: false },
    { name: 'nonsense age is no evidence', self: 3000, answers: [{ node: 'b', confirmedAgeMs: Number.NaN }], nodes: 2, outage: false },
    { name: 'this node not cut off itself', self: 500, answers: [cut('b'), cut('c')], nodes: 3, outage: false },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.equal(isControlPlaneOutage(c.self, c.answers, c.nodes, timeout), c.outage);
    });
  }
  it('counts the cut-off nodes, this one included, and the peers on their way there', () => {
    assert.deepEqual(countPeers([cut('b'), fine('c'), undefined, cut('d')], 1000), { cutOff: 3, maybe: 0 });
    assert.deepEqual(countPeers([{ node: 'b', confirmedAgeMs: 700 }, fine('c')], 1000), { cutOff: 1, maybe: 1 });
  });
});

describe('judgeOutage (with an undecided phase)', () => {
  const age = (node: string, confirmedAgeMs: number): PeerControlPlaneAnswer => ({ node, confirmedAgeMs });
  const cutOffMs = 2000;
  const until = 3300;
  const cases: { name: string; self: number; answers: (PeerControlPlaneAnswer | undefined)[]; nodes: number; verdict: string }[] = [
    { name: 'peers past the cut-off: outage', self: 3050, answers: [age('b', 2500), age('c', 2100), age('d', 400)], nodes: 4, verdict: 'outage' },
    { name: 'peers renewing: partition', self: 3050, answers: [age('b', 300), age('c', 900), age('d', 400)], nodes: 4, verdict: 'partition' },
    { name: 'peers silent: partition (no evidence)', self: 3050, answers: [undefined, undefined, undefined], nodes: 4, verdict: 'partition' },
    { name: 'one past, two on their way (they renewed a little after us): undecided', self: 3050, answers: [age('b', 2500), age('c', 1900), age('d', 1500)], nodes: 4, verdict: 'undecided' },
    { name: 'none past, two on their way: undecided early', self: 3050, answers: [age('b', 1800), age('c', 1900), age('d', 300)], nodes: 4, verdict: 'undecided' },
    { name: 'undecided no longer, past the limit: partition', self: 3400, answers: [age('b', 1800), age('c', 1900), age('d', 300)], nodes: 4, verdict: 'partition' },
    { name: 'single node: outage', self: 3050, answers: [], nodes: 1, verdict: 'outage' },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.equal(judgeOutage(c.self, c.answers, c.nodes, cutOffMs, until), c.verdict);
    });
  }
});

describe('fencing atMostOne pods', () => {
  let caFile = '';
  let server: { cert: string; key: string };
  const servers: https.Server[] = [];

  before(async () => {
    const ca = await createCertificateAuthority('fencing-test-ca');
    const leaf = await issueCertificate(ca, { commonName: 'peer', subjectAltNames: ['127.0.0.1'], usage: 'server' });
    caFile = path.join(root, 'ca.crt');
    fs.writeFileSync(caFile, ca.certificatePem);
    server = { cert: leaf.certificatePem, key: leaf.privateKeyPem };
  });
  after(async () => {
    for (const s of servers) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });

  /** A fake peer agent: answers its control-plane view, from `age()`, to callers with the peer token. */
  async function fakePeer(name: string, age: () => number | 'hang'): Promise<FencingPeer & { asked: number }> {
    const peer = { name, url: '', asked: 0 };
    const s = https.createServer({ cert: server.cert, key: server.key }, (req, res) => {
      if (req.url !== '/drover/v1/peer/control-plane' || req.headers.authorization !== `Bearer ${PEER_TOKEN}`) {
        res.writeHead(401).end();
        return;
      }
      peer.asked++;
      const value = age();
      if (value === 'hang') return;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ node: name, confirmedAgeMs: value }));
    });
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    servers.push(s);
    peer.url = `https://127.0.0.1:${(s.address() as AddressInfo).port}`;
    return peer;
  }

  function feeder(file: string, peers: FencingPeer[], nodeCount: number, fencingTimeoutMs = FENCING_TIMEOUT_MS): FencingFeeder {
    return new FencingFeeder(file, {
      nodeName: 'self',
      fencingTimeoutMs,
      peers: peers.map(({ name, url }) => ({ name, url })),
      peerToken: PEER_TOKEN,
      caFile,
      nodeCount,
    });
  }

  /**
   * An atMostOne pod `name` of a 3-node cluster whose renewals stopped while its two peers also
   * report the control plane gone (peer age 10 s, until the test sets `view.age`): an outage,
   * once the supervisor has recorded it.
   */
  async function podInOutage(name: string, peerNames: [string, string], fencingTimeoutMs = FENCING_TIMEOUT_MS) {
    const view = { age: 10_000 };
    const peers = [await fakePeer(peerNames[0], () => view.age), await fakePeer(peerNames[1], () => view.age)];
    const file = path.join(root, `${name}-fencing.json`);
    const feed = feeder(file, peers, 3, fencingTimeoutMs);
    feed.start();
    const pod = await startPod(name, file, true);
    feed.stop();
    const outage = await eventually(() => readRunState(pod.dir)?.outage, 'outage recorded', fencingTimeoutMs + FENCE_CEILING_MS, 20);
    return { view, peers, feed, pod, outage };
  }

  it('kills an atMostOne pod within the timeout once renewals stop, spares the others, and never restarts it', async () => {
    const file = path.join(root, 'isolated-fencing.json');
    const feed = feeder(file, [], 3);
    feed.start();
    const fenced = await startPod('fenced', file, true);
    const spared = await startPod('spared', file, false);
    // Fresh renewals: nothing happens for longer than the timeout (checked throughout).
    await always(() => alive(fenced.pid), 'not fenced while renewals are confirmed', FENCING_TIMEOUT_MS + 500);

    feed.stop();
    const confirmedAt = feed.lastConfirmedMono;
    const diedAt = await deathTime(fenced.pid, FENCING_TIMEOUT_MS + FENCE_CEILING_MS);
    const afterMs = diedAt - confirmedAt;
    console.log(`# fenced ${afterMs} ms after the last confirmed renewal (timeout ${FENCING_TIMEOUT_MS} ms)`);
    assert.ok(afterMs > FENCING_TIMEOUT_MS, `not before the timeout (${afterMs} ms)`);
    assert.ok(afterMs <= FENCING_TIMEOUT_MS + FENCE_CEILING_MS, `fenced after the timeout, within the ceiling (${afterMs} ms)`);

    const state = await eventually(() => {
      const s = readRunState(fenced.dir);
      return s?.finished ? s : undefined;
    }, 'fenced state');
    assert.equal(state.finishReason, 'Fenced');
    const c = state.containers[0]!;
    assert.ok('terminated' in c.state);
    assert.equal(c.state.terminated.reason, 'Fenced');
    assert.match(state.fenced?.message ?? '', /no confirmed lease renewal for \d+ ms \(fencing timeout 1000 ms\); 1 of 3 nodes cut off/);
    await eventually(() => liveSupervisor(fenced.dir) === undefined, 'fenced supervisor exits');
    assert.match(fs.readFileSync(path.join(fenced.dir, 'supervisor.log'), 'utf8'), /"ageMs":\d+.*"cutOff":1.*fencing pod: killed every container/);

    assert.ok(alive(spared.pid), 'a pod without atMostOne is never fenced');
    assert.equal(readRunState(spared.dir)?.finished, false);

    // Renewals come back: the fenced pod stays dead, even when its supervisor is started again.
    // The relaunched supervisor reads the record and exits without starting anything; once it is
    // gone, nothing can start the pod again, so its state is final.
    feed.start();
    const relaunched = await launchSupervisor(fenced.dir, LAUNCH_CEILING_MS);
    await eventually(() => !alive(relaunched), 'the relaunched supervisor to exit at once', 15_000, 20);
    feed.stop();
    const again = readRunState(fenced.dir)!;
    assert.equal(again.finishReason, 'Fenced');
    assert.equal(again.containers[0]!.restartCount, 0);
    assert.ok('terminated' in again.containers[0]!.state);
    assert.deepEqual(fs.readdirSync(path.join(fenced.dir, 'logs/main')), ['0.log'], 'no container instance started after fencing');
    assert.equal(liveSupervisor(fenced.dir), undefined, 'no supervisor left for the fenced pod');
    assert.ok(alive(spared.pid));
    killPodProcesses(spared.dir);
  });

  it('keeps running while a majority reports the control plane gone, fences once peers are fine', async () => {
    const { view, peers, feed, pod, outage } = await podInOutage('outage', ['peer-b', 'peer-c']);
    assert.deepEqual({ cutOff: outage.cutOff, nodeCount: outage.nodeCount }, { cutOff: 3, nodeCount: 3 });
    assert.ok(peers.every((p) => p.asked >= 1), 'both peers were asked with the peer token');

    // Renewals return: outage over; they stop again: outage again, still running.
    feed.start();
    await eventually(() => readRunState(pod.dir)?.outage === undefined, 'outage cleared');
    feed.stop();
    await eventually(() => readRunState(pod.dir)?.outage, 'outage again', FENCING_TIMEOUT_MS + FENCE_CEILING_MS, 20);
    // Through the outage the workload runs (checked throughout 2.5 s, well past the timeout), and
    // the supervisor keeps asking: a partition that follows the outage must be caught.
    const askedBefore = peers[0]!.asked;
    await always(
      () => alive(pod.pid) && readRunState(pod.dir)?.finished === false,
      'the workload keeps running through a control-plane outage',
      2500,
    );
    await eventually(() => peers[0]!.asked - askedBefore >= 2, 'the peers to be asked again during the outage', FENCE_CEILING_MS);

    view.age = 100;
    const switchedAt = monoNowMs();
    const diedAt = await deathTime(pod.pid, FENCE_CEILING_MS);
    console.log(`# fenced ${diedAt - switchedAt} ms after the peers reported the control plane back`);
    const state = await eventually(() => {
      const s = readRunState(pod.dir);
      return s?.finished ? s : undefined;
    }, 'fenced state');
    assert.equal(state.finishReason, 'Fenced');
    assert.equal(state.outage, undefined);
    assert.match(state.fenced?.message ?? '', /1 of 3 nodes cut off \(2 of 2 peers answered\)/);
  });

  it('after an outage, a node whose own renewal comes back a little after its peers\' is not fenced', async () => {
    // The default 3 s timeout: room for the peers to be back and this node's renewal to follow.
    const timeoutMs = 3000;
    const { view, feed, pod } = await podInOutage('late', ['peer-d', 'peer-e'], timeoutMs);
    // The outage ends for the peers first (e.g. etcd restarted, their renewals got through):
    // the supervisor hears it and waits for its own renewal instead of fencing at once.
    view.age = 100;
    const log = (): string => fs.readFileSync(path.join(pod.dir, 'supervisor.log'), 'utf8');
    await eventually(
      () => /the peers reach the control plane again, this node not yet/.test(log()) || !alive(pod.pid) || undefined,
      'the supervisor to hear that the peers are back',
      FENCE_CEILING_MS,
      20,
    );
    assert.ok(alive(pod.pid), `not fenced the moment the peers were back:\n${log()}`);
    feed.start();
    await eventually(() => readRunState(pod.dir)?.outage === undefined, 'outage cleared by the renewal');
    // Renewals flow: the pod runs on, past the fresh timeout the outage's end gave it.
    await always(() => alive(pod.pid) && readRunState(pod.dir)?.finished === false, 'runs on once its renewal is confirmed', timeoutMs + 1000);
    assert.doesNotMatch(log(), /fencing pod/);
    assert.match(log(), /lease renewals confirmed again; control-plane outage over/);
    feed.stop();
    killPodProcesses(pod.dir);
  });

  it('after an outage, fences one fencing timeout after the outage was last heard of if its own renewal stays missing', async () => {
    const timeoutMs = 3000;
    const { view, peers, pod } = await podInOutage('never', ['peer-f', 'peer-g'], timeoutMs);
    const lastOutageAsk = peers[0]!.asked;
    view.age = 100;
    const switchedAt = monoNowMs();
    const diedAt = await deathTime(pod.pid, timeoutMs + FENCE_CEILING_MS);
    // Never later than a timeout after the switch plus a ceiling; never before the peers said they were back.
    console.log(`# fenced ${diedAt - switchedAt} ms after the peers reported the control plane back (timeout ${timeoutMs} ms)`);
    assert.ok(peers[0]!.asked > lastOutageAsk, 'the peers were asked after they were back');
    const state = await eventually(() => {
      const s = readRunState(pod.dir);
      return s?.finished ? s : undefined;
    }, 'fenced state');
    assert.equal(state.finishReason, 'Fenced');
    assert.match(state.fenced?.message ?? '', /1 of 3 nodes cut off \(2 of 2 peers answered\)/);
    assert.match(fs.readFileSync(path.join(pod.dir, 'supervisor.log'), 'utf8'), /the peers reach the control plane again, this node not yet[\s\S]*fencing pod/);
  });

  it('fences when the peers cannot be reached or do not answer in time', async () => {
    const closed = https.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const closedPort = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const silent = await fakePeer('peer-silent', () => 'hang');
    const peers = [{ name: 'peer-gone', url: `https://127.0.0.1:${closedPort}` }, silent];

    // A peer that never answers is given up on (without the query timeout this would hang).
    let ceiling: NodeJS.Timeout | undefined;
    const answers = await Promise.race([
      queryPeers({ nodeName: 'self', confirmedAtMonoMs: 0, fencingTimeoutMs: 1000, peers, peerToken: PEER_TOKEN, caFile, nodeCount: 3 }),
      new Promise<never>((_, reject) => {
        ceiling = setTimeout(() => reject(new Error('queryPeers still waiting on a silent peer')), FENCE_CEILING_MS);
      }),
    ]).finally(() => clearTimeout(ceiling));
    assert.deepEqual(answers, [undefined, undefined]);

    const file = path.join(root, 'unreachable-fencing.json');
    const feed = feeder(file, peers, 3);
    feed.start();
    const pod = await startPod('unreachable', file, true);
    feed.stop();
    const diedAt = await deathTime(pod.pid, FENCING_TIMEOUT_MS + FENCE_CEILING_MS);
    const afterMs = diedAt - feed.lastConfirmedMono;
    console.log(`# with unreachable peers, fenced ${afterMs} ms after the last confirmed renewal`);
    assert.ok(afterMs > FENCING_TIMEOUT_MS, `not before the timeout (${afterMs} ms)`);
    const state = await eventually(() => {
      const s = readRunState(pod.dir);
      return s?.finished ? s : undefined;
    }, 'fenced state');
    assert.equal(state.finishReason, 'Fenced');
    assert.match(state.fenced?.message ?? '', /0 of 2 peers answered/);
  });
});
