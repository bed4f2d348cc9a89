/**
 * The datastore conformance suite on the SQLite backend, plus the few checks that only make
 * sense for a file-backed store (WAL mode, a hard kill of the writing process).
 *
 * Run: node --import tsx --test test/e2e/datastore-sqlite.test.ts
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { openSqliteDatastore } from '../../src/datastore/sqlite.js';
import { runDatastoreConformance } from '../datastore/conformance.js';

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'drover-ds-'));
}

runDatastoreConformance('sqlite', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'drover.db');
  return {
    store: openSqliteDatastore(file),
    reopen: async () => openSqliteDatastore(file),
    cleanup: async () => fs.rmSync(dir, { recursive: true, force: true }),
  };
});

describe('sqlite datastore specifics', () => {
  it('creates the database file and puts it in WAL mode', async () => {
    const dir = tempDir();
    try {
      const file = path.join(dir, 'nested-name.db');
      const store = openSqliteDatastore(file);
      try {
        await store.create('/k', Buffer.from('v'));
        assert.ok(fs.existsSync(file), 'database file was not created');
        // journal_mode=WAL is persistent in the file, so another connection sees it.
        const db = new Database(file, { readonly: true, fileMustExist: true });
        try {
          assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
        } finally {
          db.close();
        }
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('acknowledged writes survive a hard kill, and their revisions are not reused', async () => {
    const dir = tempDir();
    try {
      const file = path.join(dir, 'drover.db');
      const moduleUrl = pathToFileURL(
        path.join(path.dirname(fileURLToPath(import.meta.url)), '../../src/datastore/sqlite.ts'),
      ).href;
      // A child process writes, reports the revisions it was acknowledged, then is SIGKILLed
      // without closing the store.
      const script = `
        const { openSqliteDatastore } = await import(${JSON.stringify(moduleUrl)});
        const store = openSqliteDatastore(${JSON.stringify(file)});
        const revs = [];
        const a = await store.create('/crash/a', Buffer.from('a1'));
        revs.push(a.modRevision);
        revs.push((await store.update('/crash/a', Buffer.from('a2'), a.modRevision)).modRevision);
        revs.push((await store.create('/crash/b', Buffer.from('b1'))).modRevision);
        revs.push((await store.delete('/crash/b')).modRevision);
        process.stdout.write(JSON.stringify(revs) + '\\n', () => process.kill(process.pid, 'SIGKILL'));
      `;
      const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      assert.equal(child.signal, 'SIGKILL', `child did not die by SIGKILL: ${child.status} ${child.stderr}`);
      const revs = JSON.parse(child.stdout.trim().split('\n').pop() ?? '[]') as number[];
      assert.equal(revs.length, 4, `child output: ${child.stdout} ${child.stderr}`);
      const high = Math.max(...revs);

      const store = openSqliteDatastore(file);
      try {
        assert.ok((await store.currentRevision()) >= high, 'acknowledged revision lost');
        const a = await store.get('/crash/a');
        assert.equal(a?.value.toString(), 'a2');
        assert.equal(a?.modRevision, revs[1]);
        assert.equal(await store.get('/crash/b'), undefined);
        const next = await store.create('/crash/c', Buffer.from('c'));
        assert.ok(next.modRevision > high, `revision ${next.modRevision} reused after crash (had ${high})`);
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
