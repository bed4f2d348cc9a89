import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { type PodRunState, writeRunState } from '../../src/agent/pods/run-spec.js';
import { RunStateWatch } from '../../src/agent/pods/state-watch.js';
import { tempDir } from '../helpers/server.js';

/**
 * The agent reports a pod's container state when its supervisor writes state.json, not at the
 * next reconcile pass: RunStateWatch calls back on that write (as the supervisor makes it, a
 * rename over the file), for the dirs it is told to keep and no others.
 */

function state(uid: string): PodRunState {
  const now = new Date().toISOString();
  return { uid, supervisorPid: process.pid, startedAt: now, containers: [], finished: false, updatedAt: now };
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 30_000; // a generous ceiling: inotify is immediate, the machine may not be
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('RunStateWatch', () => {
  it("calls back when a kept pod dir's state.json is written, and not for other files or dropped dirs", async () => {
    const root = tempDir('run-state-watch');
    const a = path.join(root, 'a');
    const b = path.join(root, 'b');
    fs.mkdirSync(a);
    fs.mkdirSync(b);
    let calls = 0;
    const watch = new RunStateWatch(() => calls++);
    try {
      watch.keep([a, b, path.join(root, 'not-there-yet')]);
      writeRunState(a, state('a'));
      await until('the callback for a', () => calls > 0);

      // Another file in the dir is not a state change; a state write after it is (and the callback
      // for the other file would have come first, events being in order).
      const before = calls;
      fs.writeFileSync(path.join(a, 'supervisor.log'), 'x\n');
      writeRunState(b, state('b'));
      await until('the callback for b', () => calls > before);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const afterB = calls;

      watch.keep([b]);
      writeRunState(a, state('a'));
      fs.writeFileSync(path.join(b, 'other'), 'x\n');
      writeRunState(b, state('b'));
      await until('the callback for b again', () => calls > afterB);
      await new Promise((resolve) => setTimeout(resolve, 100));
      // The write to a (dropped) came before b's and would have been seen first.
      assert.equal(calls, afterB + 1, 'only the kept dir b called back, once');
    } finally {
      watch.close();
    }
    const closed = calls;
    writeRunState(b, state('b'));
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(calls, closed, 'nothing after close');
  });
});
