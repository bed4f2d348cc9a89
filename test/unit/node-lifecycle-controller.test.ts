import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { EVENTS } from '../../src/client/types.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { DatastoreStalls } from '../../src/controllers/datastore-stalls.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { type NodeCondition, nodeCondition } from '../../src/controllers/kube-types.js';
import { NodeLifecycleController } from '../../src/controllers/node-lifecycle.js';
import { RenewalTracker } from '../../src/apiserver/renewal-tracker.js';
import { UNREACHABLE_TAINT } from '../../src/node-protocol/names.js';
import { advance, type InProcessApi, inProcessApi, InProcessNode } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * The node lifecycle controller in-process: real LocalClient on an in-memory SQLite store, nodes
 * played through the client, and time on a FakeClock that only the test moves. Verdicts follow
 * the fake clock alone, so each boundary is checked on both sides without waiting for it.
 */

const GRACE_MS = 4000;

function readyCondition(node: KubeObject | undefined): NodeCondition | undefined {
  return nodeCondition(node, 'Ready');
}

describe('node lifecycle controller on a fake clock', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  let lifecycle: NodeLifecycleController;
  let unavailableAfter: number[];

  beforeEach(async () => {
    api = await inProcessApi();
    clock = new FakeClock();
    unavailableAfter = [];
    const events = new EventRecorder(api.client, 'drover-node-lifecycle', 'test', api.logger, clock);
    lifecycle = new NodeLifecycleController(api.client, events, api.logger, {
      gracePeriodMs: GRACE_MS,
      clock,
      onUnavailable: (seconds) => unavailableAfter.push(seconds),
    });
  });

  afterEach(async () => {
    lifecycle.stop();
    await api.close();
  });

  async function startWith(names: string[]): Promise<InProcessNode[]> {
    const nodes = names.map((name) => new InProcessNode(api, clock, name));
    for (const node of nodes) await node.register();
    for (const node of nodes) await node.renew();
    await lifecycle.start();
    return nodes;
  }

  it('a node whose lease stops being renewed goes Unknown after half the grace and Unavailable after the grace, by the fake clock', async () => {
    const [lost, alive] = await startWith(['lost', 'alive']);
    await advance(clock, 500, () => alive!.renew().then(() => lost!.renew()));
    await eventually(async () => (await lost!.state()) === 'Ready', 'lost Ready while it renews', 5000, 5);
    assert.equal(readyCondition(await lost!.node())?.status, 'True');

    // Renewals stop at this instant (the last one was sent just before the last step).
    await advance(clock, GRACE_MS / 2 - 250, () => alive!.renew());
    assert.equal(await lost!.state(), 'Ready', 'still Ready up to half the grace');
    await advance(clock, 500, () => alive!.renew());
    await eventually(async () => (await lost!.state()) === 'Unknown', 'lost Unknown past half the grace', 5000, 5);
    assert.equal(readyCondition(await lost!.node())?.reason, 'NodeStatusUnknown');
    assert.equal(await alive!.state(), 'Ready', 'the renewing node stays Ready');

    await advance(clock, GRACE_MS / 2 - 500, () => alive!.renew());
    assert.equal(await lost!.state(), 'Unknown', 'not Unavailable before the grace runs out');
    await advance(clock, 500, () => alive!.renew());
    const node = await eventually(async () => {
      const n = await lost!.node();
      return n?.metadata.labels?.['drover.io/state'] === 'Unavailable' ? n : undefined;
    }, 'lost Unavailable past the grace', 5000, 5);
    const taints = (node.spec as { taints?: { key: string; effect: string }[] }).taints ?? [];
    assert.deepEqual(taints.filter((t) => t.key === UNREACHABLE_TAINT).map((t) => t.effect).sort(), ['NoExecute', 'NoSchedule']);
    assert.equal(await alive!.state(), 'Ready');
    assert.equal(unavailableAfter.length, 1);
    assert.ok(unavailableAfter[0]! >= GRACE_MS / 1000 && unavailableAfter[0]! <= GRACE_MS / 1000 + 0.5, `detected after ${unavailableAfter[0]} s of fake time`);
    const { items } = await api.client.list(EVENTS, 'default');
    assert.ok(items.some((e) => e.reason === 'NodeUnavailable' && (e.involvedObject as { name?: string }).name === 'lost'));
  });

  it('a renewal after Unknown brings the node back to Ready, and a wall-clock step changes nothing', async () => {
    const [node] = await startWith(['n']);
    await advance(clock, 500, () => node!.renew());
    await eventually(async () => (await node!.state()) === 'Ready', 'Ready', 5000, 5);
    await advance(clock, GRACE_MS / 2 + 250);
    await eventually(async () => (await node!.state()) === 'Unknown', 'Unknown', 5000, 5);
    // A step of the controller's wall clock (NTP, date -s) is no time passing for a verdict.
    clock.stepWall(60 * 60_000);
    await node!.renew();
    await advance(clock, 500, () => node!.renew());
    await eventually(async () => (await node!.state()) === 'Ready', 'Ready again after a renewal', 5000, 5);
  });

  it('disruption mode: three of four nodes silent at once are held Unknown past the grace, and those still silent after it ends get a fresh grace', async () => {
    const nodes = await startWith(['a', 'b', 'c', 'd']);
    const [a, b, c, d] = nodes as [InProcessNode, InProcessNode, InProcessNode, InProcessNode];
    await advance(clock, 500, async () => {
      for (const n of nodes) await n.renew();
    });
    await eventually(async () => (await Promise.all(nodes.map((n) => n.state()))).every((s) => s === 'Ready'), 'all Ready', 5000, 5);

    // a, b and c stop at once; d keeps renewing. Past the grace, they are held, not Unavailable.
    await advance(clock, GRACE_MS * 2, () => d.renew());
    for (const n of [a, b, c]) {
      assert.equal(await n.state(), 'Unknown', `${n.name} held Unknown`);
      assert.equal(readyCondition(await n.node())?.reason, 'ControlPlaneDisruption');
    }
    const { items } = await api.client.list(EVENTS, 'kube-node-lease');
    assert.equal(items.filter((e) => e.reason === 'ControlPlaneDisruption').length, 1, 'one event when the mode is entered');

    // a and b come back: most nodes renew again, the mode ends. c, still silent, is not judged by
    // the outage's silence: it stays Unknown for a fresh grace, then is Unavailable.
    await advance(clock, 500, async () => {
      for (const n of [a, b, d]) await n.renew();
    });
    await eventually(async () => (await a.state()) === 'Ready' && (await b.state()) === 'Ready', 'a and b Ready', 5000, 5);
    const renewAlive = async (): Promise<void> => {
      for (const n of [a, b, d]) await n.renew();
    };
    await advance(clock, GRACE_MS - 750, renewAlive);
    assert.equal(await c.state(), 'Unknown', 'c within its fresh grace');
    assert.equal(readyCondition(await c.node())?.reason, 'NodeStatusUnknown');
    await advance(clock, 1000, renewAlive);
    await eventually(async () => (await c.state()) === 'Unavailable', 'c Unavailable after its fresh grace', 5000, 5);
    assert.equal(await d.state(), 'Ready');
  });

  it('a node already Unavailable stays Unavailable through a disruption and after it ends: a hold takes no verdict back', async () => {
    const nodes = await startWith(['lost', 'a', 'b', 'c']);
    const [lost, a, b, c] = nodes as [InProcessNode, InProcessNode, InProcessNode, InProcessNode];
    const renewing = (...which: InProcessNode[]) => async (): Promise<void> => {
      for (const n of which) await n.renew();
    };
    await advance(clock, 500, renewing(lost, a, b, c));
    await advance(clock, GRACE_MS + 500, renewing(a, b, c));
    await eventually(async () => (await lost.state()) === 'Unavailable', 'lost Unavailable', 5000, 5);
    // a and b fall silent as well: three of four, a disruption; lost keeps its verdict while it holds.
    const seen: (string | undefined)[] = [];
    await advance(clock, GRACE_MS * 2, async () => {
      await c.renew();
      seen.push(await lost.state());
    });
    assert.equal(await a.state(), 'Unknown', 'a held');
    assert.equal(readyCondition(await a.node())?.reason, 'ControlPlaneDisruption');
    // They come back; the mode ends; lost, still silent, gets no fresh grace.
    await advance(clock, GRACE_MS, async () => {
      await renewing(a, b, c)();
      seen.push(await lost.state());
    });
    await eventually(async () => (await a.state()) === 'Ready' && (await b.state()) === 'Ready', 'a and b Ready', 5000, 5);
    assert.deepEqual([...new Set(seen)], ['Unavailable'], 'lost was never anything but Unavailable');
    assert.equal(readyCondition(await lost.node())?.reason, 'NodeUnavailable');
  });

  it('a renewal still on its way through the server holds the judgement at its arrival; the view that far behind says so, and once it is dropped the silent node is judged', async () => {
    lifecycle.stop();
    const renewals = new RenewalTracker(() => clock.now(), { eventLoopDelay: false });
    const events = new EventRecorder(api.client, 'drover-node-lifecycle', 'test', api.logger, clock);
    lifecycle = new NodeLifecycleController(api.client, events, api.logger, { gracePeriodMs: GRACE_MS, clock, renewals });
    const [slow, alive] = await startWith(['slow', 'alive']);
    await advance(clock, 500, () => alive!.renew().then(() => slow!.renew()));
    await eventually(async () => (await slow!.state()) === 'Ready', 'slow Ready while it renews', 5000, 5);

    // slow's next renewal reaches the server and stays there (a datastore that does not answer):
    // nothing said by slow is missing from the controller's view only because of the server.
    const answered = renewals.arrived('slow');
    assert.equal(renewals.size, 1);
    await advance(clock, 2 * GRACE_MS, () => alive!.renew());
    assert.equal(await slow!.state(), 'Ready', 'judged at the stuck renewal’s arrival, slow has not been silent');
    const { items } = await api.client.list(EVENTS, 'kube-node-lease');
    assert.ok(items.some((e) => e.reason === 'ControlPlaneDisruption' && /reach the controller up to/.test(String(e.message))), 'the view behind by more than half the grace is reported');
    assert.equal(await alive!.state(), 'Ready');

    // The renewal fails (never committed): it is dropped, and slow's silence is judged in full.
    answered();
    assert.equal(renewals.size, 0);
    await advance(clock, 500, () => alive!.renew());
    await eventually(async () => (await slow!.state()) === 'Unavailable', 'slow Unavailable once nothing of it is on its way', 5000, 5);
    assert.equal(await alive!.state(), 'Ready');
  });

  it('a stretch in which the datastore committed nothing (the leader’s own lease write outstanding) is left out of a node’s silence', async () => {
    lifecycle.stop();
    const stalls = new DatastoreStalls(1000);
    const events = new EventRecorder(api.client, 'drover-node-lifecycle', 'test', api.logger, clock);
    lifecycle = new NodeLifecycleController(api.client, events, api.logger, { gracePeriodMs: GRACE_MS, clock, stalls });
    const [quiet, alive] = await startWith(['quiet', 'alive']);
    await advance(clock, 500, () => alive!.renew().then(() => quiet!.renew()));
    await eventually(async () => (await quiet!.state()) === 'Ready', 'quiet Ready while it renews', 5000, 5);

    // quiet's last renewal was just seen; half a second later the datastore stops committing: the
    // leader's lease write sent then is outstanding for 2.5 s, and no node renews meanwhile.
    await advance(clock, 500, () => alive!.renew());
    const sentAt = clock.now();
    stalls.sent(sentAt);
    await advance(clock, 2500);
    stalls.ended(sentAt, clock.now());
    // 5 s of silence, 2.5 s of it the datastore's: late by 2.5 s, so Unknown, not Unavailable.
    await advance(clock, 2000, () => alive!.renew());
    await eventually(async () => (await quiet!.state()) === 'Unknown', `quiet Unknown past half the grace of its own silence (is ${await quiet!.state()}: ${readyCondition(await quiet!.node())?.message})`, 5000, 5);
    await advance(clock, 1000, () => alive!.renew());
    assert.equal(await quiet!.state(), 'Unknown', 'not Unavailable: 6 s silent, but 2.5 s of it nothing could commit');
    // The grace of its own silence runs out 4 s + 2.5 s after its last renewal.
    await advance(clock, 1250, () => alive!.renew());
    const node = await eventually(async () => {
      const n = await quiet!.node();
      return n?.metadata.labels?.['drover.io/state'] === 'Unavailable' ? n : undefined;
    }, 'quiet Unavailable once its own silence passes the grace', 5000, 5);
    assert.match(String(readyCondition(node)?.message), /not counting 2\.5s in which the datastore committed nothing/);
    assert.equal(await alive!.state(), 'Ready');
  });

  it('disruption mode holds verdicts for at most ten graces', async () => {
    const nodes = await startWith(['a', 'b', 'c']);
    await advance(clock, 500, async () => {
      for (const n of nodes) await n.renew();
    });
    // Silent from about 0.5 s, stale (and the mode entered) from about 2.5 s: held until about 42.5 s.
    await advance(clock, 10 * GRACE_MS, undefined, 500);
    for (const n of nodes) assert.equal(await n.state(), 'Unknown', `${n.name} held within the limit`);
    await advance(clock, 4000, undefined, 500);
    await eventually(async () => (await Promise.all(nodes.map((n) => n.state()))).every((s) => s === 'Unavailable'), 'all Unavailable past the limit', 5000, 5);
  });
});
