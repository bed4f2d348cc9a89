/**
 * The stretches in which the datastore committed nothing, as the leader's lease writes measure
 * them (src/controllers/datastore-stalls.ts): pure arithmetic on the controller's clock.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { DatastoreStalls } from '../../src/controllers/datastore-stalls.js';

describe('datastore stalls', () => {
  it('a write that took no longer than the threshold is no stall', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(0);
    stalls.ended(0, 1000);
    assert.equal(stalls.stalledWithin(0, 5000), 0);
  });

  it('a slow write is a stall from its sending to its end, clipped to the window asked about', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(1000);
    stalls.ended(1000, 3500);
    assert.equal(stalls.stalledWithin(0, 5000), 2500);
    assert.equal(stalls.stalledWithin(2000, 5000), 1500, 'only the part after the last renewal counts');
    assert.equal(stalls.stalledWithin(0, 3000), 2000, 'and none of it after now');
    assert.equal(stalls.stalledWithin(4000, 5000), 0);
  });

  it('a write still outstanding is a stall so far, once it passes the threshold', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(1000);
    assert.equal(stalls.stalledWithin(0, 1800), 0, 'not yet past the threshold');
    assert.equal(stalls.stalledWithin(0, 2600), 1600);
  });

  it('overlapping slow writes count their time once', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(1000);
    stalls.sent(1500);
    stalls.ended(1000, 3000);
    stalls.ended(1500, 4000);
    assert.equal(stalls.stalledWithin(0, 10_000), 3000);
    stalls.sent(6000);
    stalls.ended(6000, 7500);
    assert.equal(stalls.stalledWithin(0, 10_000), 4500, 'two separate stalls add up');
  });

  it('a slow write sent before an earlier-ended one counts from its own sending', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(2000);
    stalls.sent(5000);
    stalls.ended(5000, 10_000);
    stalls.ended(2000, 12_000);
    assert.equal(stalls.stalledWithin(0, 20_000), 10_000, 'the union [2 s, 12 s]');
  });

  it('a write still outstanding covers the gaps between slow writes sent after it', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(4000);
    stalls.sent(5000);
    stalls.ended(5000, 6500);
    stalls.sent(8000);
    stalls.ended(8000, 9500);
    assert.equal(stalls.stalledWithin(0, 10_000), 6000, 'the union [4 s, 10 s]');
    assert.equal(stalls.stalledWithin(7000, 10_000), 3000, 'clipped to the window asked about');
  });

  it('forgets stalls a minute old', () => {
    const stalls = new DatastoreStalls(1000);
    stalls.sent(0);
    stalls.ended(0, 2000);
    stalls.sent(70_000);
    stalls.ended(70_000, 70_100);
    assert.equal(stalls.stalledWithin(0, 70_100), 0);
  });
});
