/**
 * Drover through the official Python client (test/helpers/python.ts). The checks themselves are in test/python/client_test.py: watches of
 * nodes and pods from a resourceVersion with timeoutSeconds, bookmarks, a followed pod log, and
 * DynamicClient discovery and CRUD. This file starts the server (with its own agent, so pods run)
 * and fails with the script's output when any check fails.
 *
 * Run: node --import tsx --test test/e2e/python-client.test.ts
 */
import { after, before, describe, it } from 'node:test';

import { assertPythonClient, runPythonClientScript } from '../helpers/python.js';
import { cleanup, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

/** A safety ceiling for the whole script (it takes about 15 s on an idle machine). */
const SCRIPT_CEILING_MS = 300_000;

describe('the official Python client (python3-kubernetes)', () => {
  let server: ServerProcess;

  before(async () => {
    assertPythonClient();
    // Bookmarks every second (the default is 15 s) so the script sees one promptly; hand-made
    // nodes are never judged by the lifecycle controller while the script watches them.
    server = await startServer({ embeddedAgent: true, handMadeNodes: true, args: ['--watch-bookmark-interval', '1s'] });
  });

  after(async () => {
    await cleanup();
  });

  it('watches nodes and pods, gets bookmarks, follows a log and does DynamicClient discovery and CRUD (test/python/client_test.py)', async (t) => {
    const work = tempDir('python-client');
    // Every section ran (a script cut short by an early return would report fewer).
    const { summary } = await runPythonClientScript('client_test.py', [server.kubeconfig, work], {
      minChecks: 55,
      ceilingMs: SCRIPT_CEILING_MS,
      context: () => `--- server output (tail) ---\n${server.output().slice(-4000)}`,
    });
    t.diagnostic(`python checks: ${summary.checks}, watch events: ${String(summary.events)}, script time: ${String(summary.seconds)}s`);
  });
});
