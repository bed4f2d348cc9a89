import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { it } from 'node:test';
import { NodeRegistry } from '../../src/cluster/node-registry.js';
import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { tempDir } from '../helpers/server.js';

/**
 * The node registry reloads its records when its watch breaks. A datastore that is closing (a
 * server stopping, or giving up on a failed join) must not turn that reload into an unhandled
 * failure that kills the process.
 */
it('a datastore closed under the registry watch is no unhandled rejection, and stop() ends the reloads', async () => {
  const dir = tempDir('registry-reload');
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const datastore = openSqliteDatastore(path.join(dir, 'state.db'));
    const registry = new NodeRegistry(datastore);
    await registry.start();
    await datastore.close();
    // Give the broken watch, its reload and one retry time to fail.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    registry.stop();
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(unhandled.map(String), []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
