import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { SharedInformers } from '../../src/client/shared-informers.js';
import { EVENTS, PODS } from '../../src/client/types.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { FailoverController } from '../../src/controllers/failover.js';
import { NodeLifecycleController } from '../../src/controllers/node-lifecycle.js';
import { FENCING_MARGIN_MS, fencingThresholds } from '../../src/node-protocol/fencing.js';
import { AT_MOST_ONE_ANNOTATION } from '../../src/node-protocol/names.js';
import { advance, type InProcessApi, inProcessApi, InProcessNode } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * The failover controller in-process, beside the node lifecycle controller whose observations it
 * uses, over one set of shared informers, on a FakeClock: when a node's renewals stop, ordinary
 * pods are evicted once it is Unavailable, and a singleton is removed only after fencing-timeout
 * plus the margin, never before.
 */

const RENEW_MS = 1000;
const GRACE_MS = 4000;
const FENCING_MS = 3000;

function pod(name: string, nodeName: string, annotations: Record<string, string> = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', annotations },
    spec: { nodeName, containers: [{ name: 'c', image: 'none', command: ['sleep', '3600'] }] },
  };
}

describe('failover controller on a fake clock', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  let informers: SharedInformers;
  let lifecycle: NodeLifecycleController;
  let failover: FailoverController;

  beforeEach(async () => {
    api = await inProcessApi();
    clock = new FakeClock();
    informers = new SharedInformers(api.client, api.logger);
    const events = new EventRecorder(api.client, 'drover-node-lifecycle', 'test', api.logger, clock);
    lifecycle = new NodeLifecycleController(api.client, events, api.logger, { gracePeriodMs: GRACE_MS, clock, informers });
    failover = new FailoverController(
      api.client,
      lifecycle,
      informers.get(PODS),
      events,
      api.logger,
      {
        defaultTolerationMs: 0,
        fencingTimeoutMs: FENCING_MS,
        fencingMarginMs: FENCING_MARGIN_MS,
        silenceThresholdMs: fencingThresholds(RENEW_MS, FENCING_MS).controllerSilenceMs,
      },
      clock,
    );
  });

  afterEach(async () => {
    failover.stop();
    lifecycle.stop();
    informers.stop();
    await api.close();
  });

  it('evicts ordinary pods once the node is Unavailable, and replaces a singleton only after fencing-timeout + margin', async () => {
    const lost = new InProcessNode(api, clock, 'lost');
    const alive = new InProcessNode(api, clock, 'alive');
    for (const n of [lost, alive]) {
      await n.register();
      await n.renew();
    }
    await api.client.create(PODS, 'default', pod('web', 'lost'));
    await api.client.create(PODS, 'default', pod('single', 'lost', { [AT_MOST_ONE_ANNOTATION]: 'true' }));
    await api.client.create(PODS, 'default', pod('elsewhere', 'alive'));
    await informers.start();
    await lifecycle.start();
    failover.start();

    // The last renewal of `lost` is sent now.
    await lost.renew();
    await advance(clock, GRACE_MS - 250, () => alive.renew());
    const web = await api.client.get(PODS, 'default', 'web');
    assert.ok(web && !web.metadata.deletionTimestamp, 'nothing moves before the node is Unavailable');

    await advance(clock, 750, () => alive.renew());
    await eventually(async () => (await lost.state()) === 'Unavailable', 'lost Unavailable', 5000, 5);
    // Bound to a node, the ordinary pod is deleted gracefully: it waits there for its agent.
    await eventually(async () => (await api.client.get(PODS, 'default', 'web'))?.metadata.deletionTimestamp, 'web marked for deletion', 5000, 5);
    const single = await api.client.get(PODS, 'default', 'single');
    assert.ok(single && !single.metadata.deletionTimestamp, 'the singleton stays while its node may still run it');

    // fencing-timeout + margin from the last renewal: 5 s. At 4.75 s it is still there.
    await advance(clock, FENCING_MS + FENCING_MARGIN_MS - GRACE_MS - 750, () => alive.renew());
    assert.ok(await api.client.get(PODS, 'default', 'single'), 'singleton kept until fencing is certain');
    await advance(clock, 500, () => alive.renew());
    await eventually(async () => !(await api.client.get(PODS, 'default', 'single')), 'singleton removed (grace 0) after fencing-timeout + margin', 5000, 5);
    const elsewhere = await api.client.get(PODS, 'default', 'elsewhere');
    assert.ok(elsewhere && !elsewhere.metadata.deletionTimestamp, 'pods on the live node are untouched');
    const { items } = await api.client.list(EVENTS, 'default');
    assert.ok(items.some((e) => e.reason === 'TaintManagerEviction'));
    assert.ok(items.some((e) => e.reason === 'SingletonFailover'));
  });

  it('a singleton stays while most nodes are silent at once (an outage, not a lost node)', async () => {
    const nodes = ['a', 'b', 'c', 'd'].map((name) => new InProcessNode(api, clock, name));
    for (const n of nodes) {
      await n.register();
      await n.renew();
    }
    await api.client.create(PODS, 'default', pod('single', 'a', { [AT_MOST_ONE_ANNOTATION]: 'true' }));
    await informers.start();
    await lifecycle.start();
    failover.start();
    // Three of four stop at once, for three graces: held Unknown, nothing moves.
    await advance(clock, 3 * GRACE_MS, () => nodes[3]!.renew());
    assert.equal(await nodes[0]!.state(), 'Unknown');
    const single = await api.client.get(PODS, 'default', 'single');
    assert.ok(single && !single.metadata.deletionTimestamp, 'the singleton is neither evicted nor replaced during an outage');
  });

  it('a singleton held by a moment when most nodes were late is replaced later, and its event says why', async () => {
    // A loaded host: while node a is lost, b and c renew 1.75 s apart once (past the 1.5 s
    // controller silence, short of grace/2), so for a moment 3 of 4 nodes are silent at once.
    const nodes = ['a', 'b', 'c', 'd'].map((name) => new InProcessNode(api, clock, name));
    for (const n of nodes) {
      await n.register();
      await n.renew();
    }
    await api.client.create(PODS, 'default', pod('single', 'a', { [AT_MOST_ONE_ANNOTATION]: 'true' }));
    await informers.start();
    await lifecycle.start();
    failover.start();
    const [, b, c, d] = nodes as [InProcessNode, InProcessNode, InProcessNode, InProcessNode];
    const all = async (): Promise<void> => {
      await b.renew();
      await c.renew();
      await d.renew();
    };
    // a's last renewal is at 0; b and c renew until 1 s, skip to 2.75 s (silent over [2.5, 2.75)).
    await advance(clock, 1250, all);
    await advance(clock, 1500, () => d.renew());
    await advance(clock, FENCING_MS + FENCING_MARGIN_MS - 2750 + 1500, all);
    await eventually(async () => (await nodes[0]!.state()) === 'Unavailable', 'a Unavailable', 5000, 5);
    // 6.5 s after a's last renewal, past fencing-timeout + margin (5 s), but within 5 s of the
    // moment most nodes were silent: still held.
    const held = await api.client.get(PODS, 'default', 'single');
    assert.ok(held && !held.metadata.deletionTimestamp, 'the singleton waits out the outage window');
    await advance(clock, 2000, all);
    await eventually(async () => !(await api.client.get(PODS, 'default', 'single')), 'singleton replaced once the window has passed', 5000, 5);
    const event = (await api.client.list(EVENTS, 'default')).items.find((e) => e.reason === 'SingletonFailover');
    assert.match(String(event?.message), /held \d+\.\ds past that because most nodes were silent at once/, String(event?.message));
  });
});
