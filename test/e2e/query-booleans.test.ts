/**
 * Boolean query parameters read as kube-apiserver reads them (src/apiserver/query.ts): the
 * parser's table, then a real server answering `watch=True` (the official Python client's
 * spelling) with a watch stream, `allowWatchBookmarks=True` with bookmarks, the bookmark sent
 * just before timeoutSeconds ends a watch, and the `watch-bookmark-interval` setting.
 *
 * Run: node --import tsx --test test/e2e/query-booleans.test.ts
 */
import assert from 'node:assert/strict';
import https from 'node:https';
import { after, before, describe, it } from 'node:test';

import { parseQueryBool, queryBool } from '../../src/apiserver/query.js';
import { runDrover } from '../helpers/agent.js';
import { cleanup, request, type ServerProcess, serverArgs, startServer, tempDir } from '../helpers/server.js';

describe('parseQueryBool: kube-apiserver’s reading of a boolean query value', () => {
  // Upstream (apimachinery's runtime conversion from url.Values): "0" and "false" in any letter
  // case are false; every other value is true, even an empty one. Absent is false.
  const table: [string | null, boolean][] = [
    [null, false],
    ['false', false],
    ['False', false],
    ['FALSE', false],
    ['fAlSe', false],
    ['0', false],
    ['true', true],
    ['True', true],
    ['TRUE', true],
    ['1', true],
    ['', true],
    ['yes', true],
    ['t', true],
    ['f', true],
    ['no', true],
    ['00', true],
    [' false', true],
    ['false ', true],
  ];
  for (const [value, expected] of table) {
    it(`${JSON.stringify(value)} is ${expected}`, () => {
      assert.equal(parseQueryBool(value), expected);
    });
  }

  it('takes the first value of a repeated parameter; a bare name is true', () => {
    assert.equal(queryBool(new URLSearchParams('watch=false&watch=true'), 'watch'), false);
    assert.equal(queryBool(new URLSearchParams('watch=1&watch=0'), 'watch'), true);
    assert.equal(queryBool(new URLSearchParams('watch'), 'watch'), true);
    assert.equal(queryBool(new URLSearchParams('watch='), 'watch'), true);
    assert.equal(queryBool(new URLSearchParams('follow=true'), 'watch'), false);
  });
});

interface Opened {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  lines: unknown[];
  ended: boolean;
}

/**
 * GET a path and read newline-delimited JSON until `until` says so or the response ends (a list
 * is one line; a watch never ends by itself unless timeoutSeconds says so). Fails after a ceiling.
 */
function readLines(
  server: ServerProcess,
  urlPath: string,
  until: (lines: unknown[]) => boolean,
  ceilingMs = 30_000,
): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1',
      port: server.port,
      path: urlPath,
      ca: server.caPem,
      agent: false,
      headers: { Accept: 'application/json', Authorization: `Bearer ${server.token}` },
    });
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`GET ${urlPath}: not done within ${ceilingMs} ms`));
    }, ceilingMs);
    req.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    req.on('response', (res) => {
      const opened: Opened = { status: res.statusCode ?? 0, headers: res.headers, lines: [], ended: false };
      let buffer = '';
      const done = (): void => {
        clearTimeout(timer);
        req.destroy();
        resolve(opened);
      };
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
          opened.lines.push(JSON.parse(buffer.slice(0, nl)));
          buffer = buffer.slice(nl + 1);
        }
        if (until(opened.lines)) done();
      });
      res.on('end', () => {
        if (buffer.trim()) opened.lines.push(JSON.parse(buffer));
        opened.ended = true;
        done();
      });
    });
    req.end();
  });
}

type Event = { type: string; object: { kind: string; apiVersion: string; metadata: { name?: string; resourceVersion: string } } };

async function createNamespace(server: ServerProcess, name: string): Promise<string> {
  const res = await request(server, 'POST', '/api/v1/namespaces', { body: { metadata: { name } } });
  assert.equal(res.status, 201, res.text);
  return (res.json as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
}

async function createLease(server: ServerProcess, name: string): Promise<string> {
  const res = await request(server, 'POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', { body: { metadata: { name } } });
  assert.equal(res.status, 201, res.text);
  return (res.json as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
}

async function namespacesVersion(server: ServerProcess): Promise<string> {
  return ((await request(server, 'GET', '/api/v1/namespaces')).json as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
}

describe('boolean query parameters over HTTP', () => {
  let fast: ServerProcess;
  let standard: ServerProcess;

  before(async () => {
    [fast, standard] = await Promise.all([
      startServer({ args: ['--watch-bookmark-interval', '200ms'] }),
      startServer(),
    ]);
  });

  after(async () => {
    await cleanup();
  });

  for (const value of ['True', 'true', '1', 'yes', '']) {
    it(`watch=${value} is a watch stream`, async () => {
      const opened = await readLines(fast, `/api/v1/namespaces?watch=${value}`, (lines) => lines.length >= 1);
      assert.equal(opened.status, 200);
      assert.equal(opened.headers['transfer-encoding'], 'chunked');
      const first = opened.lines[0] as Event;
      assert.equal(first.type, 'ADDED', JSON.stringify(first));
      assert.equal(first.object.kind, 'Namespace');
      assert.equal(opened.ended, false, 'the watch stays open');
    });
  }

  it('a bare ?watch is a watch stream too', async () => {
    const opened = await readLines(fast, '/api/v1/namespaces?watch', (lines) => lines.length >= 1);
    assert.equal((opened.lines[0] as Event).type, 'ADDED');
  });

  for (const value of ['False', 'false', 'FALSE', '0']) {
    it(`watch=${value} is a plain list`, async () => {
      const opened = await readLines(fast, `/api/v1/namespaces?watch=${value}`, () => false);
      assert.equal(opened.status, 200);
      assert.equal(opened.ended, true);
      assert.equal((opened.lines[0] as { kind: string }).kind, 'NamespaceList');
    });
  }

  it('allowWatchBookmarks=True (Python’s spelling) gets BOOKMARK events; allowWatchBookmarks=False does not', async () => {
    const rv = await namespacesVersion(fast);
    const lease = await createLease(fast, 'moves-the-revision');
    // A Lease write moves the revision on without an event for a namespace watch: a bookmark reports it.
    const withBookmarks = await readLines(
      fast,
      `/api/v1/namespaces?watch=True&allowWatchBookmarks=True&resourceVersion=${rv}`,
      (lines) => lines.some((l) => (l as Event).type === 'BOOKMARK'),
    );
    const bookmark = withBookmarks.lines.find((l) => (l as Event).type === 'BOOKMARK') as Event;
    const { resourceVersion } = bookmark.object.metadata;
    assert.deepEqual(bookmark.object, { kind: 'Namespace', apiVersion: 'v1', metadata: { resourceVersion } });
    // The server's own writes (leases of its controllers) may have moved the revision further.
    assert.ok(Number(resourceVersion) >= Number(lease), `bookmark at ${resourceVersion}, lease written at ${lease}`);
    // Several 200 ms bookmark intervals, then the server ends the watch.
    const without = await readLines(fast, `/api/v1/namespaces?watch=True&allowWatchBookmarks=False&resourceVersion=${rv}&timeoutSeconds=2`, () => false);
    assert.equal(without.ended, true, 'timeoutSeconds ended the watch');
    assert.deepEqual(without.lines, [], 'no bookmarks unless asked for');
  });

  it('a watch that allows bookmarks gets one 2 s before its timeoutSeconds, then ends cleanly', async () => {
    // The standard server's bookmarks come every 15 s: within a 4 s watch, only the
    // pre-timeout bookmark can report the Lease written after the watch began.
    const rv = await namespacesVersion(standard);
    const added = await createNamespace(standard, 'seen-by-the-watch');
    let lease = '';
    const opened = await readLines(standard, `/api/v1/namespaces?watch=1&allowWatchBookmarks=1&resourceVersion=${rv}&timeoutSeconds=4`, (lines) => {
      if (lines.length === 1 && !lease) void createLease(standard, 'after-the-event').then((v) => (lease = v));
      return false;
    });
    assert.equal(opened.ended, true, 'timeoutSeconds ended the watch');
    const events = opened.lines as Event[];
    assert.deepEqual(
      events.map((e) => e.type),
      ['ADDED', 'BOOKMARK'],
    );
    assert.equal(events[0]!.object.metadata.resourceVersion, added);
    const bookmarked = events[1]!.object.metadata.resourceVersion;
    assert.ok(lease && Number(bookmarked) >= Number(lease), `bookmark at ${bookmarked}, lease written at ${lease}`);
  });

  it('watch-bookmark-interval below 100ms is refused at start', async () => {
    const result = await runDrover(serverArgs(tempDir('bookmark-interval'), { args: ['--watch-bookmark-interval', '50ms'] }));
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /watch-bookmark-interval \(50ms\) must be at least 100ms/);
  });
});
