import 'reflect-metadata';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import * as x509 from '@peculiar/x509';
import {
  type AgentProcess,
  cleanupAgents,
  NodeSampler,
  type NodeCondition,
  type NodeObject,
  spawnAgent,
  startAgent,
  joinToken,
  waitForNode,
  waitForState,
} from '../helpers/agent.js';
import { type EtcdServer, startEtcd } from '../helpers/etcd.js';
import { KUBECTL_1_20, runKubectl } from '../helpers/kubectl.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import {
  addSample,
  CLOCK_SKEW_CLEAR_MS,
  CLOCK_SKEW_THRESHOLD_MS,
  clockSkewCondition as conditionFor,
  emptySamples,
  estimateOffset,
  isSkewed,
  MIN_OFFSET_SAMPLES,
  OFFSET_WINDOW,
} from '../../src/controllers/clock-skew.js';
import {
  CERTIFICATE_BACKDATE_MS,
  createCertificateAuthority,
  ensureServingMaterial,
  issueCertificate,
} from '../../src/security/pki.js';

/**
 * Clocks that disagree. The agents here really run with a skewed clock: libfaketime (Debian's
 * `faketime` package) is preloaded into their process, so Node's Date, and OpenSSL's certificate
 * checks inside Node, see a time minutes off, while CLOCK_MONOTONIC is left alone
 * (FAKETIME_DONT_FAKE_MONOTONIC=1), as on a real host whose RTC drifted. The last suite steps the
 * server's own wall clock while it runs (libfaketime re-reads its offset from a file).
 */

const RENEW_MS = 1000;
const GRACE_MS = 4000;
/**
 * The ceiling node-lifecycle.test.ts holds SIGKILL → Unavailable to (measured: ~3-4.2 s; the
 * figure belongs to bench/detection.ts). A clock step that hid a dead node would hide it for 10 min.
 */
const DETECTION_LIMIT_MS = 5 * GRACE_MS;
const SKEW_MS = 10 * 60 * 1000;
/**
 * Measured offset vs injected skew. The estimate is low by the shortest renewal trip of the last
 * ten (milliseconds); this is generous for a loaded machine, and still tells 600 s from 0 or -600.
 */
const OFFSET_TOLERANCE_MS = 2000;
/** libfaketime's multi-threaded build (Node has threads), from Debian's libfaketime (a dependency of faketime). */
const FAKETIME_LIB = ['/usr/lib/faketime', ...fs.readdirSync('/usr/lib').map((d) => path.join('/usr/lib', d, 'faketime'))]
  .map((dir) => path.join(dir, 'libfaketimeMT.so.1'))
  .find((file) => fs.existsSync(file)) ?? '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';

function report(t: TestContext, message: string): void {
  for (const line of message.trimEnd().split('\n')) t.diagnostic(line);
}

function requireFaketime(): void {
  if (!fs.existsSync(FAKETIME_LIB)) {
    throw new Error(`${FAKETIME_LIB} is missing: install Debian's faketime package (./test.sh does)`);
  }
}

/** The environment that gives a process a clock `offset` off (libfaketime syntax: "-10m", "+600"). */
function skewedClock(offset: string): NodeJS.ProcessEnv {
  return { ...process.env, LD_PRELOAD: FAKETIME_LIB, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' };
}

/** libfaketime for a server whose clock a test steps while it runs (see setClock). */
function steppableClock(offsetFile: string): NodeJS.ProcessEnv {
  return { ...process.env, LD_PRELOAD: FAKETIME_LIB, FAKETIME_TIMESTAMP_FILE: offsetFile, FAKETIME_CACHE_DURATION: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' };
}

/** Set the clock offset of processes started with steppableClock(file); libfaketime re-reads it at most every second. */
function setClock(offsetFile: string, offset: string): void {
  // Replaced by rename: a reader never sees the file empty, half-written.
  fs.writeFileSync(`${offsetFile}.new`, `${offset}\n`);
  fs.renameSync(`${offsetFile}.new`, offsetFile);
}

function clockSkewCondition(node: NodeObject): NodeCondition | undefined {
  return node.status?.conditions?.find((c) => c.type === 'ClockSkew');
}

interface EventObject {
  type: string;
  reason: string;
  message: string;
  involvedObject: { kind: string; name: string };
}

async function nodeEvents(server: ServerProcess, node: string, reason: string): Promise<EventObject[]> {
  const res = await request(server, 'GET', '/api/v1/events');
  assert.equal(res.status, 200, res.text);
  return (res.json as { items: EventObject[] }).items.filter(
    (e) => e.reason === reason && e.involvedObject.kind === 'Node' && e.involvedObject.name === node,
  );
}

/** `drover_node_clock_offset_seconds{node="…"}` from the server's /metrics, in ms. */
async function metricOffsets(server: ServerProcess): Promise<Map<string, number>> {
  const res = await request(server, 'GET', '/metrics');
  assert.equal(res.status, 200, `GET /metrics: HTTP ${res.status} ${res.text}`);
  const offsets = new Map<string, number>();
  for (const match of res.text.matchAll(/^drover_node_clock_offset_seconds\{node="([^"]+)"\} (\S+)$/gm)) {
    offsets.set(match[1]!, Number(match[2]) * 1000);
  }
  return offsets;
}

function assertNear(actualMs: number, expectedMs: number, toleranceMs: number, what: string): void {
  assert.ok(
    Math.abs(actualMs - expectedMs) <= toleranceMs,
    `${what}: ${(actualMs / 1000).toFixed(3)} s, expected ${(expectedMs / 1000).toFixed(3)} ± ${toleranceMs / 1000} s`,
  );
}

describe('certificates are back-dated', () => {
  it('the CA, issued leaves and the serving certificate are valid from an hour before they were issued', async () => {
    const dir = tempDir('pki');
    try {
      const before = Date.now();
      const ca = await createCertificateAuthority('test-ca');
      const leaf = await issueCertificate(ca, { commonName: 'system:node:n1', usage: 'server', subjectAltNames: ['n1'] });
      const { serving } = await ensureServingMaterial(path.join(dir, 'tls'), ['localhost']);
      const after = Date.now();
      assert.equal(CERTIFICATE_BACKDATE_MS, 60 * 60 * 1000);
      for (const [what, pem] of [
        ['CA', ca.certificatePem],
        ['leaf', leaf.certificatePem],
        ['serving', serving.certificatePem],
      ] as const) {
        const cert = new x509.X509Certificate(pem);
        // X.509 times have whole seconds.
        const notBefore = cert.notBefore.getTime();
        assert.ok(
          notBefore >= before - CERTIFICATE_BACKDATE_MS - 1000 && notBefore <= after - CERTIFICATE_BACKDATE_MS,
          `${what} notBefore ${cert.notBefore.toISOString()} should be an hour before its issue (${new Date(before).toISOString()})`,
        );
        assert.ok(cert.notAfter.getTime() > after + 300 * 24 * 3600 * 1000, `${what} lifetime counts from the issue time`);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the offset estimate (synthetic renewals)', () => {
  /** A renewal sent at `sentAt` (true time) by a clock `offset` off, arriving `delay` later. */
  const renewal = (sentAt: number, offset: number, delay: number): [number, number] => [sentAt + offset, sentAt + delay];

  it('needs a few samples, then takes the one with the shortest trip: one slow renewal cannot move it', () => {
    const s = emptySamples();
    const delays = [40, 3, 2500, 12, 9];
    delays.forEach((delay, i) => {
      assert.equal(estimateOffset(s), undefined, `no estimate from ${i} samples`);
      addSample(s, ...renewal(1_000_000 + i * 1000, -600_000, delay));
    });
    assert.equal(MIN_OFFSET_SAMPLES, delays.length);
    assert.equal(estimateOffset(s), -600_003);
  });

  it('renewals released together after a stall (each late by up to the stall) leave the estimate alone', () => {
    const s = emptySamples();
    for (let i = 0; i < 5; i++) addSample(s, ...renewal(i * 1000, 0, 5));
    // A 6 s stall: the agent sent a renewal every ~2.3 s (timeout, then the next interval); all arrive at 12 s.
    for (const sentAt of [6000, 8300, 10_600]) addSample(s, sentAt, 12_000);
    assert.equal(estimateOffset(s), -5);
    assert.equal(isSkewed(estimateOffset(s)!, false), false);
  });

  it('follows a step of the node clock within the window', () => {
    const s = emptySamples();
    for (let i = 0; i < OFFSET_WINDOW; i++) addSample(s, ...renewal(i * 1000, 600_000, 5));
    assert.equal(estimateOffset(s), 599_995);
    // NTP steps the node back into line: the old samples age out one renewal at a time.
    for (let i = OFFSET_WINDOW; i < 2 * OFFSET_WINDOW - 1; i++) addSample(s, ...renewal(i * 1000, 0, 5));
    assert.equal(estimateOffset(s), 599_995, 'one old sample is left');
    addSample(s, ...renewal(2 * OFFSET_WINDOW * 1000, 0, 5));
    assert.equal(estimateOffset(s), -5);
  });

  it('True above the threshold, False only below the lower mark, either way', () => {
    assert.equal(CLOCK_SKEW_THRESHOLD_MS, 2000);
    assert.equal(CLOCK_SKEW_CLEAR_MS, 1000);
    for (const sign of [1, -1]) {
      assert.equal(isSkewed(sign * 2000, false), false);
      assert.equal(isSkewed(sign * 2001, false), true);
      assert.equal(isSkewed(sign * 1500, true), true, 'between the marks it stays as it is');
      assert.equal(isSkewed(sign * 1500, false), false);
      assert.equal(isSkewed(sign * 999, true), false);
    }
    assert.deepEqual(
      [conditionFor(-600_024, true).reason, conditionFor(2500, true).reason, conditionFor(20, false).reason],
      ['ClockBehind', 'ClockAhead', 'ClockInSync'],
    );
    assert.match(conditionFor(-600_024, true).message, /^clock is 600\.0 s behind the control plane's/);
    assert.match(conditionFor(2500, true).message, /^clock is 2\.500 s ahead of the control plane's/);
  });
});

describe('agents 10 minutes slow and 10 minutes fast join a new cluster', () => {
  let server: ServerProcess;
  const agents = new Map<string, AgentProcess>();
  const kubectlCache = tempDir('kubectl-cache');
  const skews: [string, number, string][] = [
    ['slow', -SKEW_MS, '-10m'],
    ['fast', SKEW_MS, '+10m'],
    ['ontime', 0, ''],
  ];

  before(async () => {
    requireFaketime();
    // A brand-new cluster: its CA and serving certificate are seconds old, younger than the skew.
    server = await startServer({ args: ['--supervisor-metrics'] });
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(server?.dataDir ?? '', kubectlCache);
  });

  it('they see the faked time (and a server certificate issued seconds ago would not yet be valid without back-dating)', async (t) => {
    // The agent's own log lines carry its clock (Date.now(), as an ISO time).
    const slowAgent = await startAgent({ server, name: 'slow', env: skewedClock('-10m') });
    agents.set('slow', slowAgent);
    const line = slowAgent.output().split('\n').find((l) => l.includes('agent is running'))!;
    const agentTime = Date.parse((JSON.parse(line) as { time: string }).time);
    assertNear(agentTime - Date.now(), -SKEW_MS, 30_000, 'the slow agent’s clock, from its log');
    const serving = new x509.X509Certificate(fs.readFileSync(path.join(server.dataDir, 'server/tls/serving.crt'), 'utf8'));
    const issuedAt = serving.notBefore.getTime() + CERTIFICATE_BACKDATE_MS;
    assert.ok(issuedAt > agentTime, 'the serving certificate was issued after the slow agent’s “now”: only back-dating lets it verify');
    report(t, `slow agent's clock ${((agentTime - Date.now()) / 1000).toFixed(1)} s; serving certificate issued ${((Date.now() - issuedAt) / 1000).toFixed(1)} s ago`);
    const [fast, ontime] = await Promise.all([startAgent({ server, name: 'fast', env: skewedClock('+10m') }), startAgent({ server, name: 'ontime' })]);
    agents.set('fast', fast);
    agents.set('ontime', ontime);
    for (const [name] of skews) await waitForState(server, name, 'Ready');
  });

  it('they stay Ready over several renewals; ClockSkew condition, event and metric show the offset', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      for (const [name, skew] of skews.filter(([, s]) => s !== 0)) {
        const { node } = await waitForNode(server, name, (n) => clockSkewCondition(n)?.status === 'True', 'ClockSkew True', 30_000);
        const condition = clockSkewCondition(node)!;
        assert.equal(condition.reason, skew > 0 ? 'ClockAhead' : 'ClockBehind');
        assert.match(condition.message ?? '', skew > 0 ? /^clock is 6\d\d\.\d s ahead of the control plane's/ : /^clock is 6\d\d\.\d s behind the control plane's/);
        report(t, `${name}: ClockSkew ${condition.reason}: ${condition.message}`);
        const [event] = await eventually(async () => {
          const found = await nodeEvents(server, name, 'ClockSkew');
          return found.length ? found : undefined;
        }, `a ClockSkew event for ${name}`);
        assert.equal(event!.type, 'Warning');
        assert.match(event!.message, new RegExp(`^Node ${name}: clock is 6\\d\\d\\.\\d s ${skew > 0 ? 'ahead of' : 'behind'}`));
      }
      // Several renewal periods after the conditions appeared: the metric, and nobody left Ready.
      const offsets = await eventually(async () => {
        const m = await metricOffsets(server);
        return skews.every(([name]) => m.has(name)) ? m : undefined;
      }, 'a clock offset metric for every node');
      for (const [name, skew] of skews) {
        const measured = offsets.get(name)!;
        report(t, `${name}: injected ${(skew / 1000).toFixed(0)} s, measured ${(measured / 1000).toFixed(3)} s (error ${(measured - skew).toFixed(0)} ms)`);
        assertNear(measured, skew, OFFSET_TOLERANCE_MS, `${name}'s measured offset`);
      }
      const ontime = (await waitForNode(server, 'ontime', () => true, 'present')).node;
      assert.equal(clockSkewCondition(ontime), undefined, 'a node whose clock was never off has no ClockSkew condition');
      assert.deepEqual(await nodeEvents(server, 'ontime', 'ClockSkew'), []);
      await eventually(() => Date.now() >= from + 6 * RENEW_MS && (sampler.rounds.at(-1) ?? 0) >= from + 6 * RENEW_MS, 'six renewal periods of samples');
      for (const [name] of skews) {
        const bad = sampler.violations(name, 'Ready', from);
        assert.ok(sampler.roundsIn(from) >= 10, `enough samples (${sampler.roundsIn(from)})`);
        assert.deepEqual(bad, [], `${name} should have stayed Ready; transitions: ${sampler.transitions(name, from).join(' → ')}`);
      }
    } finally {
      await sampler.stop();
    }
  });

  it('kubectl describe node shows the ClockSkew condition', async () => {
    for (const bin of ['kubectl', ...(fs.existsSync(KUBECTL_1_20) ? [KUBECTL_1_20] : [])]) {
      const out = await runKubectl({ name: bin, bin, legacy: false }, server.kubeconfig, kubectlCache, ['describe', 'node', 'slow']);
      assert.equal(out.code, 0, out.stderr);
      const line = out.stdout.split('\n').find((l) => /^\s+ClockSkew\s+/.test(l));
      assert.ok(line, `${bin}: no ClockSkew row in\n${out.stdout}`);
      assert.match(line, /ClockSkew\s+True\s+.*ClockBehind\s+clock is 6\d\d\.\d s behind/);
    }
  });

  it('SIGKILL of a slow or a fast agent → Unavailable within the usual bound; the others stay Ready', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      for (const name of ['slow', 'fast']) {
        const agent = agents.get(name)!;
        const killedAt = Date.now();
        process.kill(agent.pid, 'SIGKILL');
        assert.equal((await agent.exited).signal, 'SIGKILL');
        const unavailable = await waitForState(server, name, 'Unavailable', GRACE_MS + 10_000);
        const detection = unavailable.at - killedAt;
        report(t, `${name}: Unavailable ${detection} ms after SIGKILL (Unknown first seen at +${(sampler.firstSeen(name, 'Unknown', killedAt) ?? NaN) - killedAt} ms)`);
        assert.ok(detection <= DETECTION_LIMIT_MS, `${name}: Unavailable ${detection} ms after SIGKILL (limit ${DETECTION_LIMIT_MS} ms)`);
      }
      assert.deepEqual(sampler.violations('ontime', 'Ready', from), [], `ontime stays Ready; ${sampler.transitions('ontime', from).join(' → ')}`);
    } finally {
      await sampler.stop();
    }
  });

  it('an agent more than the back-dating behind cannot join, and its log says why', async () => {
    const agent = spawnAgent({ server, name: 'two-hours-slow', env: skewedClock('-2h') });
    try {
      await eventually(() => agent.output().includes('certificate is not yet valid') || agent.hasExited, 'a TLS failure in the agent log', 20_000);
      assert.equal(agent.hasExited, false, `the agent keeps retrying; output:\n${agent.output()}`);
      assert.match(agent.output(), /this host's clock is probably behind by more than an hour; synchronise it \(NTP\)/);
    } finally {
      await agent.stop('SIGKILL');
    }
  });
});

describe("steps of the server's own wall clock", () => {
  let server: ServerProcess;
  const offsetFile = path.join(tempDir('faketime'), 'offset');
  const agents = new Map<string, AgentProcess>();
  const setServerClock = (offset: string): void => setClock(offsetFile, offset);

  before(async () => {
    requireFaketime();
    setServerClock('+0');
    server = await startServer({ args: ['--supervisor-metrics'], env: steppableClock(offsetFile) });
    for (const agent of await Promise.all(['step-a', 'step-b'].map((name) => startAgent({ server, name })))) agents.set(agent.name, agent);
    for (const name of agents.keys()) await waitForState(server, name, 'Ready');
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(server?.dataDir ?? '', path.dirname(offsetFile));
  });

  it('a forward step changes no node state and no leadership; the nodes then read as 10 minutes behind', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      setServerClock('+10m');
      for (const name of agents.keys()) {
        const { node } = await waitForNode(server, name, (n) => clockSkewCondition(n)?.reason === 'ClockBehind', 'ClockSkew ClockBehind', 30_000);
        report(t, `${name}: ${clockSkewCondition(node)!.message}`);
      }
      const offsets = await metricOffsets(server);
      for (const name of agents.keys()) assertNear(offsets.get(name)!, -SKEW_MS, OFFSET_TOLERANCE_MS, `${name}'s offset after the step`);
      for (const name of agents.keys()) {
        assert.deepEqual(sampler.violations(name, 'Ready', from), [], `${name}: ${sampler.transitions(name, from).join(' → ')}`);
      }
      assert.doesNotMatch(server.output(), /stopped being the controller leader/);
      assert.doesNotMatch(server.output(), /controller loop was paused/);
    } finally {
      await sampler.stop();
    }
  });

  it('a node SIGKILLed just before a backward step is not hidden by it: Unavailable within the usual bound', async (t) => {
    const sampler = new NodeSampler(server).start();
    try {
      const from = Date.now();
      const victim = agents.get('step-b')!;
      // The server is frozen across the kill and the step, so that its last sight of step-b is by
      // the old clock and its next look by the new one, whatever libfaketime's re-read delay.
      process.kill(server.pid, 'SIGSTOP');
      let killedAt: number;
      try {
        killedAt = Date.now();
        process.kill(victim.pid, 'SIGKILL');
        assert.equal((await victim.exited).signal, 'SIGKILL');
        setServerClock('+0');
        // Longer than libfaketime's cache (1 s, in whole seconds): the server's first look at the
        // clock after SIGCONT reads the new offset.
        await new Promise((r) => setTimeout(r, 3000));
      } finally {
        process.kill(server.pid, 'SIGCONT');
      }
      const resumedAt = Date.now();
      const unavailable = await waitForState(server, 'step-b', 'Unavailable', DETECTION_LIMIT_MS + 10_000);
      // The server saw its own 3 s pause and restarted every grace at SIGCONT (node-lifecycle.md).
      const detection = unavailable.at - resumedAt;
      report(t, `step-b: Unavailable ${detection} ms after the server resumed (${unavailable.at - killedAt} ms after SIGKILL), its clock stepped back 10 minutes meanwhile`);
      assert.ok(detection <= DETECTION_LIMIT_MS, `Unavailable ${detection} ms after the server resumed (ceiling ${DETECTION_LIMIT_MS} ms)`);
      // The verdict was written by the stepped-back clock: its transition time is the real time.
      const transition = Date.parse(unavailable.node.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime ?? '');
      assertNear(transition, unavailable.at, 60_000, "the Unavailable verdict's transition time (the server's clock when it wrote it)");
      assert.deepEqual(sampler.violations('step-a', 'Ready', from), [], `step-a: ${sampler.transitions('step-a', from).join(' → ')}`);
      // step-a's offset is back near zero and its condition cleared, with one event.
      const { node } = await waitForNode(server, 'step-a', (n) => clockSkewCondition(n)?.status === 'False', 'ClockSkew False again', 30_000);
      report(t, `step-a: ${clockSkewCondition(node)!.message}`);
      const resolved = await nodeEvents(server, 'step-a', 'ClockSkewResolved');
      assert.equal(resolved.length, 1, JSON.stringify(resolved));
      assert.equal(resolved[0]!.type, 'Normal');
    } finally {
      await sampler.stop();
    }
  });
});

describe("controller leadership with a candidate's clock stepped back", () => {
  let etcd: EtcdServer;
  let a: ServerProcess;
  let b: ServerProcess;
  const offsetFile = path.join(tempDir('faketime'), 'offset');
  const dirs = [path.dirname(offsetFile)];

  before(async () => {
    requireFaketime();
    setClock(offsetFile, '+0');
    etcd = await startEtcd();
    const endpoint = etcd.endpoint.replace(/^https?:\/\//, 'etcd://');
    a = await startServer({ args: ['--datastore-endpoint', endpoint, '--node-name', 'lead-a'] });
    dirs.push(a.dataDir);
    b = await startServer({
      args: ['--datastore-endpoint', endpoint, '--node-name', 'lead-b', '--token', joinToken(a)],
      env: steppableClock(offsetFile),
    });
    dirs.push(b.dataDir);
  });

  after(async () => {
    await cleanup(...dirs);
    await etcd?.stop();
  });

  it('the leader is SIGKILLed and the candidate’s clock steps back 10 minutes: it still takes over when the lease runs out', async (t) => {
    await eventually(() => a.output().includes('became the controller leader'), 'server a leading');
    assert.doesNotMatch(b.output(), /became the controller leader/);
    const killedAt = Date.now();
    process.kill(a.pid, 'SIGKILL');
    setClock(offsetFile, '-10m');
    await a.exited;
    // The controller lease lasts 3/4 of the grace (3 s), judged from when b last saw it change.
    await eventually(() => b.output().includes('became the controller leader'), 'server b taking over', 40_000, 100);
    report(t, `b took over ${Date.now() - killedAt} ms after the SIGKILL of the leader, its clock stepped back 10 minutes`);
    // The step really happened: b's log lines carry its clock.
    const line = b.output().split('\n').find((l) => l.includes('became the controller leader'))!;
    assertNear(Date.parse((JSON.parse(line) as { time: string }).time) - Date.now(), -SKEW_MS, 60_000, "b's clock when it took over");
  });
});
