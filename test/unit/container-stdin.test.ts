import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { after, describe, it } from 'node:test';
import { connectContainerStdin, ContainerStdin, StdinError } from '../../src/agent/pods/stdin.js';

/**
 * The container stdin relay (`kubectl attach -i`), in process over its real unix socket: sessions'
 * bytes reach the running instance, stdinOnce closes it after the first session, a pod dir too
 * long for a socket address still works, and a container without the socket is a typed error.
 */

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-stdin-'));
after(() => fs.rmSync(root, { recursive: true, force: true }));

function collect(stream: PassThrough): { text: () => string; ended: Promise<void> } {
  let text = '';
  stream.on('data', (c: Buffer) => (text += c.toString()));
  return { text: () => text, ended: new Promise((resolve) => stream.once('end', () => resolve())) };
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(check(), what);
}

async function session(dir: string, container: string, data: string): Promise<void> {
  const socket = await connectContainerStdin(dir, container);
  socket.end(data);
  await new Promise((resolve) => socket.once('close', resolve));
}

describe('container stdin relay', () => {
  it('without stdinOnce, every session writes to the same open stdin, under a pod dir too long for a socket path', async () => {
    const dir = path.join(root, 'x'.repeat(120), 'pod');
    fs.mkdirSync(dir, { recursive: true });
    const relay = new ContainerStdin(dir, 'main', false, () => undefined);
    relay.listen();
    try {
      // libuv would cut a long address short and bind somewhere else without a word.
      await until(() => fs.existsSync(path.join(dir, 'stdin', 'main')), 'the socket is bound');
      assert.ok(fs.statSync(path.join(dir, 'stdin', 'main')).isSocket(), 'the socket is in the pod dir');
      assert.deepEqual(fs.readdirSync(root).filter((n) => n.startsWith('xxx') && n.length !== 120), [], 'nothing bound at a cut-short path');
      const stdin = new PassThrough();
      const seen = collect(stdin);
      relay.instanceStarted(stdin);
      await session(dir, 'main', 'one\n');
      await session(dir, 'main', 'two\n');
      await until(() => seen.text() === 'one\ntwo\n', `both sessions arrived: ${JSON.stringify(seen.text())}`);
      assert.ok(stdin.writable, 'stdin stays open');
    } finally {
      relay.close();
    }
  });

  it('with stdinOnce, the first session ends the instance stdin; a restart opens it again', async () => {
    const dir = path.join(root, 'once');
    fs.mkdirSync(dir);
    const relay = new ContainerStdin(dir, 'main', true, () => undefined);
    relay.listen();
    try {
      const first = new PassThrough();
      const seen = collect(first);
      relay.instanceStarted(first);
      await session(dir, 'main', 'only\n');
      await seen.ended;
      assert.equal(seen.text(), 'only\n');
      await session(dir, 'main', 'late\n');
      assert.equal(seen.text(), 'only\n', 'a later session writes nothing');
      const second = new PassThrough();
      const again = collect(second);
      relay.instanceStarted(second);
      await session(dir, 'main', 'restarted\n');
      await again.ended;
      assert.equal(again.text(), 'restarted\n');
    } finally {
      relay.close();
    }
  });

  it("only the supervisor's user reaches a container's stdin: the socket's directory is 0700, even when it was left wider", async () => {
    const dir = path.join(root, 'modes');
    fs.mkdirSync(path.join(dir, 'stdin'), { recursive: true, mode: 0o777 });
    fs.chmodSync(path.join(dir, 'stdin'), 0o777);
    const relay = new ContainerStdin(dir, 'main', false, () => undefined);
    relay.listen();
    try {
      await until(() => fs.existsSync(path.join(dir, 'stdin', 'main')), 'the socket is bound');
      const stat = fs.statSync(path.join(dir, 'stdin'));
      assert.equal(stat.mode & 0o777, 0o700, `mode ${(stat.mode & 0o777).toString(8)}`);
      assert.equal(stat.uid, process.getuid!(), 'owned by the supervisor');
    } finally {
      relay.close();
    }
  });

  it('a container whose stdin is not kept open is a StdinError', async () => {
    await assert.rejects(connectContainerStdin(path.join(root, 'none'), 'main'), (error: unknown) => error instanceof StdinError && /stdin of container main is not open/.test(error.message));
  });
});
