import assert from 'node:assert/strict';
import { describe, it, mock } from 'node:test';
import { containerReadiness, newTracker, probeActive, type ProbeOutcome, type ProbeTracker, recordResult } from '../../src/agent/pods/probe-logic.js';
import { ContainerProbes, updateReadiness } from '../../src/agent/pods/probes.js';
import { containerProbeSpecs, probeEvents } from '../../src/agent/pods/probe-spec.js';
import type { ContainerRunStatus, ProbeKind, ProbeSpec } from '../../src/agent/pods/run-spec.js';

/** Probes as kubelet runs them: thresholds, gating by the startup probe, timing, on a fake clock. */

function spec(fields: Partial<ProbeSpec> = {}): ProbeSpec {
  return {
    handler: { tcpSocket: { port: 1 } },
    initialDelaySeconds: 0,
    periodSeconds: 10,
    timeoutSeconds: 1,
    successThreshold: 1,
    failureThreshold: 3,
    ...fields,
  };
}

const ok: ProbeOutcome = { ok: true };
const bad = (message = 'nope'): ProbeOutcome => ({ ok: false, message });

describe('probe state machine', () => {
  it('starting results: readiness not ready, liveness alive, startup unknown; first due after the initial delay', () => {
    assert.equal(newTracker('readiness', spec(), 0).result, 'failure');
    assert.equal(newTracker('liveness', spec(), 0).result, 'success');
    assert.equal(newTracker('startup', spec(), 0).result, 'unknown');
    assert.equal(newTracker('liveness', spec({ initialDelaySeconds: 5 }), 1000).nextAtMs, 6000);
  });

  it('a readiness result changes only past its thresholds, and the next run is one period after this one began', () => {
    const t = newTracker('readiness', spec({ successThreshold: 2, failureThreshold: 2 }), 0);
    assert.deepEqual(recordResult(t, ok, 0), { changed: false, kill: false });
    assert.equal(t.nextAtMs, 10_000);
    assert.equal(t.result, 'failure', 'one success of two is not ready yet');
    assert.deepEqual(recordResult(t, ok, 10_000), { changed: true, kill: false });
    assert.equal(t.result, 'success');
    assert.deepEqual(recordResult(t, bad('500'), 20_000), { changed: true, kill: false }, 'a new failure streak is a change (its event)');
    assert.equal(t.result, 'success', 'one failure of two keeps it ready');
    assert.deepEqual(recordResult(t, ok, 30_000), { changed: false, kill: false });
    recordResult(t, bad('a'), 40_000);
    assert.deepEqual(recordResult(t, bad('b'), 50_000), { changed: true, kill: false }, 'readiness never kills');
    assert.equal(t.result, 'failure');
    assert.equal(t.failureStreaks, 2);
    assert.equal(t.lastFailure, 'b');
  });

  it('a liveness probe kills at its failure threshold, not before; successes in between reset the count', () => {
    const t = newTracker('liveness', spec({ failureThreshold: 3 }), 0);
    recordResult(t, bad(), 0);
    recordResult(t, bad(), 10_000);
    recordResult(t, ok, 20_000);
    recordResult(t, bad(), 30_000);
    assert.equal(recordResult(t, bad(), 40_000).kill, false);
    const last = recordResult(t, bad('HTTP probe failed with statuscode: 500'), 50_000);
    assert.deepEqual(last, { changed: true, kill: true });
    assert.equal(t.kills, 1);
    assert.equal(t.failureStreaks, 2);
  });

  it('a startup probe gates liveness and readiness; the container is started and then ready only after it passes', () => {
    const trackers = new Map<ProbeKind, ProbeTracker>([
      ['startup', newTracker('startup', spec({ failureThreshold: 30 }), 0)],
      ['liveness', newTracker('liveness', spec(), 0)],
      ['readiness', newTracker('readiness', spec(), 0)],
    ]);
    assert.equal(probeActive('startup', trackers), true);
    assert.equal(probeActive('liveness', trackers), false);
    assert.equal(probeActive('readiness', trackers), false);
    assert.deepEqual(containerReadiness(trackers, true), { started: false, ready: false });
    recordResult(trackers.get('startup')!, bad(), 0);
    assert.equal(trackers.get('startup')!.result, 'unknown', 'under the threshold: still unknown');
    recordResult(trackers.get('startup')!, ok, 1000);
    assert.equal(probeActive('startup', trackers), false, 'never runs again once passed');
    assert.equal(probeActive('liveness', trackers), true);
    assert.deepEqual(containerReadiness(trackers, true), { started: true, ready: false });
    recordResult(trackers.get('readiness')!, ok, 2000);
    assert.deepEqual(containerReadiness(trackers, true), { started: true, ready: true });
    assert.deepEqual(containerReadiness(trackers, false), { started: false, ready: false });
    assert.deepEqual(containerReadiness(new Map(), true), { started: true, ready: true }, 'no probes: ready as soon as it runs');
  });

  it('counts carry over from an earlier instance, so event keys never repeat', () => {
    const t = newTracker('liveness', spec(), 0, { result: 'failure', failureStreaks: 4, kills: 2, lastFailure: 'x' });
    assert.equal(t.result, 'success', 'a new instance starts alive');
    recordResult(t, bad(), 0);
    assert.equal(t.failureStreaks, 5);
  });
});

describe('a container\'s probes on a fake clock', () => {
  it('runs each probe on its own period from the initial delay, marks it ready, and asks for a kill at the liveness threshold', async () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      let now = 0;
      const runs: { kind: string; at: number }[] = [];
      const results: Record<string, ProbeOutcome[]> = { readiness: [ok], liveness: [ok, bad(), bad()] };
      const kills: string[] = [];
      let changes = 0;
      const probes = new ContainerProbes({
        probes: { readiness: spec({ initialDelaySeconds: 2, periodSeconds: 5 }), liveness: spec({ periodSeconds: 3, failureThreshold: 2, terminationGracePeriodSeconds: 7 }) },
        exec: () => Promise.reject(new Error('not used')),
        startedAtMs: 0,
        now: () => now,
        run: (s) => {
          const kind = s.periodSeconds === 5 ? 'readiness' : 'liveness';
          runs.push({ kind, at: now });
          return Promise.resolve(results[kind]!.shift() ?? ok);
        },
        onChange: () => changes++,
        onKill: (kind, message, grace) => kills.push(`${kind}:${message}:${grace}`),
      });
      const advance = async (ms: number): Promise<void> => {
        for (let i = 0; i < ms; i += 500) {
          now += 500;
          mock.timers.tick(500);
          await new Promise(setImmediate);
        }
      };
      probes.start();
      await advance(0);
      mock.timers.tick(0);
      await new Promise(setImmediate);
      assert.deepEqual(probes.readiness(), { started: true, ready: false });
      await advance(2000);
      assert.deepEqual(probes.readiness(), { started: true, ready: true }, 'ready after the first readiness success at 2 s');
      await advance(5000);
      assert.deepEqual(kills, ['liveness:nope:7'], 'two liveness failures (3 s, 6 s) ask for a kill with the probe grace');
      assert.deepEqual(
        runs.map((r) => `${r.kind}@${r.at}`),
        ['liveness@0', 'readiness@2000', 'liveness@3000', 'liveness@6000'],
      );
      await advance(10_000);
      assert.equal(runs.filter((r) => r.kind === 'liveness').length, 3, 'no probe runs after the kill');
      assert.ok(changes >= 2);
      const status: ContainerRunStatus = { name: 'c', state: { running: { startedAt: 'x', pid: 1 } }, restartCount: 0 };
      updateReadiness(status, probes, true, 'T1');
      assert.equal(status.probes?.liveness?.kills, 1);
      updateReadiness(status, probes, false, 'T2');
      assert.deepEqual([status.ready, status.started, status.readyChangedAt], [false, false, 'T2']);
    } finally {
      mock.timers.reset();
    }
  });
});

describe('probe specs and events for the agent', () => {
  it('defaults, named ports, and an unknown port name that fails the probe with a message', () => {
    const specs = containerProbeSpecs({
      ports: [{ name: 'http', containerPort: 8080 }],
      livenessProbe: { httpGet: { port: 'http', httpHeaders: [{ name: 'X-A', value: 'b' }] }, terminationGracePeriodSeconds: 5 },
      readinessProbe: { tcpSocket: { port: 'nope' }, successThreshold: 2, periodSeconds: 1 },
      startupProbe: { exec: { command: ['true'] }, failureThreshold: 30 },
    });
    assert.deepEqual(specs?.liveness, {
      handler: { httpGet: { scheme: 'HTTP', port: 8080, path: '/', headers: [{ name: 'X-A', value: 'b' }] } },
      initialDelaySeconds: 0,
      periodSeconds: 10,
      timeoutSeconds: 1,
      successThreshold: 1,
      failureThreshold: 3,
      terminationGracePeriodSeconds: 5,
    });
    assert.deepEqual(specs?.readiness?.handler, { invalid: { message: `port "nope" is not a port number, nor the name of one of the container's ports` } });
    assert.equal(specs?.readiness?.successThreshold, 2);
    assert.deepEqual(specs?.startup?.handler, { exec: { command: ['true'] } });
    assert.equal(containerProbeSpecs({ name: 'c' }), undefined);
  });

  it("events in kubelet's words: one Unhealthy per failure streak, one Killing per kill", () => {
    const status: ContainerRunStatus = {
      name: 'main',
      state: { running: { startedAt: 'x', pid: 1 } },
      restartCount: 1,
      probes: { liveness: { result: 'failure', failureStreaks: 2, lastFailure: 'HTTP probe failed with statuscode: 500', kills: 1 } },
    };
    assert.deepEqual(probeEvents(status), [
      { key: 'probe/main/liveness/failed/2', type: 'Warning', reason: 'Unhealthy', message: 'Liveness probe failed: HTTP probe failed with statuscode: 500' },
      { key: 'probe/main/liveness/killed/1', type: 'Normal', reason: 'Killing', message: 'Container main failed liveness probe, will be restarted' },
    ]);
  });
});
