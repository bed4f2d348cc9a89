import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { LEASES } from '../../src/client/types.js';
import { FakeClock } from '../../src/controllers/clock.js';
import { EventRecorder } from '../../src/controllers/events.js';
import { LeaseWitness } from '../../src/controllers/lease-witness.js';
import { NodeLifecycleController } from '../../src/controllers/node-lifecycle.js';
import { NODE_LEASE_NAMESPACE } from '../../src/node-protocol/names.js';
import { advance, type InProcessApi, inProcessApi, InProcessNode } from '../helpers/in-process.js';
import { eventually } from '../helpers/server.js';

/**
 * A server that takes the controller lease over judges a node lost with the old leader from when
 * it saw that node's last renewal (its lease witness), not from its own start; but only silence it
 * heard other renewals through: after a datastore that committed nothing, every node gets a fresh
 * grace. In-process on a FakeClock, with the real object store, informers and controller.
 */

const GRACE_MS = 4000;
const RENEW_MS = 1000;

describe('the lease witness at a takeover', () => {
  let api: InProcessApi;
  let clock: FakeClock;
  let witness: LeaseWitness;
  let lifecycle: NodeLifecycleController;
  let nodes: Record<'lost' | 'a' | 'b', InProcessNode>;

  beforeEach(async () => {
    api = await inProcessApi();
    clock = new FakeClock();
    witness = new LeaseWitness(api.client, clock, api.logger, 2 * RENEW_MS);
    const events = new EventRecorder(api.client, 'drover-node-lifecycle', 'test', api.logger, clock);
    lifecycle = new NodeLifecycleController(api.client, events, api.logger, { gracePeriodMs: GRACE_MS, clock, witness });
    nodes = { lost: new InProcessNode(api, clock, 'lost'), a: new InProcessNode(api, clock, 'a'), b: new InProcessNode(api, clock, 'b') };
    for (const node of Object.values(nodes)) await node.register();
    for (const node of Object.values(nodes)) await node.renew();
    witness.start();
    await eventually(async () => {
      const lease = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'lost');
      return witness.seenAt('lost', lease?.metadata.resourceVersion) !== undefined;
    }, 'the witness has listed the leases');
  });

  afterEach(async () => {
    lifecycle.stop();
    witness.stop();
    await api.close();
  });

  const renew = (...which: InProcessNode[]) => async (): Promise<void> => {
    for (const node of which) await node.renew();
  };
  const state = (node: InProcessNode): Promise<string | undefined> => node.state();

  it('a node silent before the takeover is Unavailable a grace after its last renewal, not a grace after the new leader started', async () => {
    await advance(clock, 1000, renew(nodes.lost, nodes.a, nodes.b), 250);
    const lost = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'lost');
    // It stops renewing (with the old leader's host); the others go on; this server takes over 3 s later.
    await advance(clock, 3000, renew(nodes.a, nodes.b), 250);
    assert.ok(witness.seenAt('lost', lost!.metadata.resourceVersion)! <= clock.now() - 3000, 'the witness vouches for 3 s of silence');
    await lifecycle.start();
    witness.stop();
    await advance(clock, 500, renew(nodes.a, nodes.b), 250);
    assert.notEqual(await state(nodes.lost), 'Unavailable', '3.5 s of silence: within the grace');
    await advance(clock, 1000, renew(nodes.a, nodes.b), 250);
    await eventually(async () => (await state(nodes.lost)) === 'Unavailable', 'lost Unavailable 4.5 s after its last renewal, 1.5 s after the start', 5000, 5);
    assert.equal(await state(nodes.a), 'Ready');
    assert.equal(await state(nodes.b), 'Ready');
  });

  it('after a stretch in which no lease was renewed at all (the datastore, not the nodes), every node gets a fresh grace', async () => {
    await advance(clock, 1000, renew(nodes.lost, nodes.a, nodes.b), 250);
    // Nobody's renewal is committed for 3 s; then this server takes over and the others renew again.
    await advance(clock, 3000, undefined, 250);
    const lost = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'lost');
    const vouched = clock.now() - witness.seenAt('lost', lost!.metadata.resourceVersion)!;
    assert.ok(vouched <= 250, `the stall still open is left out: ${vouched} ms vouched for`);
    await lifecycle.start();
    witness.stop();
    await advance(clock, 3500, renew(nodes.a, nodes.b), 250);
    assert.notEqual(await state(nodes.lost), 'Unavailable', 'a fresh grace from the start: 3.5 s of it');
    await advance(clock, 1000, renew(nodes.a, nodes.b), 250);
    await eventually(async () => (await state(nodes.lost)) === 'Unavailable', 'lost Unavailable once the fresh grace ran out', 5000, 5);
    assert.equal(await state(nodes.a), 'Ready');
  });

  it('a stretch without any renewal in the middle of a node’s silence is left out of it', async () => {
    await advance(clock, 1000, renew(nodes.lost, nodes.a, nodes.b), 250);
    // lost goes silent; the others renew for 1 s, then nothing is committed for 2.5 s, then they renew 1 s more.
    await advance(clock, 1000, renew(nodes.a, nodes.b), 250);
    await advance(clock, 2500, undefined, 250);
    await advance(clock, 1000, renew(nodes.a, nodes.b), 250);
    const lost = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'lost');
    const vouched = clock.now() - witness.seenAt('lost', lost!.metadata.resourceVersion)!;
    // 4.5 s since its last renewal, less the whole stretch between two events (2.5 s and the step before it).
    assert.ok(vouched >= 1500 && vouched <= 2250, `vouched for ${vouched} ms of silence`);
    await lifecycle.start();
    witness.stop();
    await advance(clock, 1500, renew(nodes.a, nodes.b), 250);
    assert.notEqual(await state(nodes.lost), 'Unavailable', 'the stall is not counted: still within the grace');
    await advance(clock, 1000, renew(nodes.a, nodes.b), 250);
    await eventually(async () => (await state(nodes.lost)) === 'Unavailable', 'lost Unavailable once its own silence passed the grace', 5000, 5);
  });

  it('vouches only for the version it saw, and never before its run of renewals began', async () => {
    const first = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'a');
    const seen = witness.seenAt('a', first!.metadata.resourceVersion)!;
    await advance(clock, 500, renew(nodes.a, nodes.b), 250);
    const second = await api.client.get(LEASES, NODE_LEASE_NAMESPACE, 'a');
    assert.equal(witness.seenAt('a', first!.metadata.resourceVersion), undefined, 'an older version is no longer vouched for');
    assert.ok(witness.seenAt('a', second!.metadata.resourceVersion)! > seen);
    assert.equal(witness.seenAt('a', undefined), undefined);
    assert.equal(witness.seenAt('nobody', second!.metadata.resourceVersion), undefined);
    witness.stop();
    assert.equal(witness.seenAt('a', second!.metadata.resourceVersion), undefined, 'a stopped witness knows nothing');
  });
});
