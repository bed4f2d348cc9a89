import assert from 'node:assert/strict';
import { Duplex, PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import zlib from 'node:zlib';
import {
  closeFrame,
  decodeFrame,
  encodeFrame,
  encodeResize,
  exitCodeOf,
  exitStatus,
  failureStatus,
  negotiate,
  parseResize,
  REMOTE_COMMAND_PROTOCOLS,
} from '../../src/apiserver/streaming/channels.js';
import { agentQuery, parseStreamQuery, type RemoteCommandOptions, resolveStreamTarget } from '../../src/apiserver/streaming/options.js';
import { decodeHeaderBlock, encodeHeaderBlock, SPDY_DICTIONARY, SpdySession, type SpdyStream } from '../../src/apiserver/streaming/spdy.js';
import { ApiError } from '../../src/apiserver/errors.js';
import type { KubeObject } from '../../src/apiserver/objects.js';

/** The channel protocol (v4/v5), the query checks, and the SPDY/3.1 framing of exec, attach and port-forward. */

describe('remote command channels', () => {
  it('frames carry the channel in their first byte, CLOSE names the channel that ended', () => {
    const frame = encodeFrame(1, Buffer.from('hi'));
    assert.deepEqual([...frame], [1, 104, 105]);
    assert.deepEqual(decodeFrame(frame), { channel: 1, data: Buffer.from('hi') });
    assert.deepEqual([...encodeFrame(3)], [3]);
    assert.equal(decodeFrame(Buffer.alloc(0)), undefined);
    assert.deepEqual([...closeFrame(0)], [255, 0]);
  });

  it('negotiates the best protocol both sides have', () => {
    assert.equal(negotiate('v4.channel.k8s.io, v5.channel.k8s.io', REMOTE_COMMAND_PROTOCOLS), 'v5.channel.k8s.io');
    assert.equal(negotiate('v4.channel.k8s.io', REMOTE_COMMAND_PROTOCOLS), 'v4.channel.k8s.io');
    assert.equal(negotiate('channel.k8s.io,base64.channel.k8s.io', REMOTE_COMMAND_PROTOCOLS), undefined);
    assert.equal(negotiate(undefined, REMOTE_COMMAND_PROTOCOLS), undefined);
  });

  it('reads resize messages as kubectl writes them, ignoring torn or absurd ones', () => {
    assert.deepEqual(parseResize(encodeResize({ width: 120, height: 40 })), { width: 120, height: 40 });
    assert.deepEqual(parseResize(Buffer.from('{"Width":80,"Height":24}\n{"Width":100,"Height":30}\n')), { width: 100, height: 30 });
    assert.equal(parseResize(Buffer.from('{"Width":80')), undefined);
    assert.equal(parseResize(Buffer.from('{"Width":0,"Height":24}')), undefined);
    assert.equal(parseResize(Buffer.from('{"Width":-3,"Height":1e9}')), undefined);
  });

  it('the Status on the error channel carries the exit code as kubectl reads it', () => {
    assert.deepEqual(exitStatus(0), { metadata: {}, status: 'Success' });
    const failed = exitStatus(3);
    assert.equal(failed.reason, 'NonZeroExitCode');
    assert.deepEqual(failed.details?.causes, [{ reason: 'ExitCode', message: '3' }]);
    assert.equal(exitCodeOf(failed), 3);
    assert.equal(exitCodeOf(exitStatus(0)), 0);
    assert.equal(exitCodeOf(failureStatus('boom')), undefined);
  });
});

describe('exec, attach and port-forward queries', () => {
  const q = (text: string) => new URLSearchParams(text);
  const refused = (fn: () => unknown, message: RegExp) =>
    assert.throws(fn, (error: unknown) => error instanceof ApiError && error.code === 400 && message.test(error.message));

  it('takes what kubectl sends, and refuses what cannot work with a 400 that says why', () => {
    assert.deepEqual(parseStreamQuery('exec', q('command=sh&command=-c&command=echo+hi&container=c&stdout=true&stderr=true')), {
      kind: 'exec',
      command: ['sh', '-c', 'echo hi'],
      container: 'c',
      stdin: false,
      stdout: true,
      stderr: true,
      tty: false,
    });
    // The Python client sends True; Go's reading of booleans applies.
    assert.equal((parseStreamQuery('exec', q('command=ls&stdout=True')) as { stdout: boolean }).stdout, true);
    refused(() => parseStreamQuery('exec', q('stdout=true')), /at least 1 command/);
    refused(() => parseStreamQuery('exec', q('command=ls')), /at least one of stdin, stdout, stderr/);
    refused(() => parseStreamQuery('exec', q('command=ls&stdout=1&stderr=1&tty=1')), /stderr cannot be requested with tty/);
    refused(() => parseStreamQuery('attach', q('command=ls&stdout=1')), /attach takes no command/);
    refused(() => parseStreamQuery('portforward', q('ports=0')), /not a valid port/);
    refused(() => parseStreamQuery('portforward', q('ports=80x')), /not a valid port/);
    assert.deepEqual(parseStreamQuery('portforward', q('ports=80,8080&ports=443')), { kind: 'portforward', ports: [80, 8080, 443] });
  });

  it('picks the container as kubelet does and refuses pods that cannot be reached', () => {
    const pod = (extra: Record<string, unknown> = {}): KubeObject => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p', namespace: 'default' },
      spec: { nodeName: 'n1', containers: [{ name: 'a' }, { name: 'b' }], ephemeralContainers: [{ name: 'debugger' }], initContainers: [{ name: 'init' }] },
      status: { phase: 'Running' },
      ...extra,
    });
    const exec = parseStreamQuery('exec', q('command=ls&stdout=1')) as RemoteCommandOptions;
    refused(() => resolveStreamTarget(pod(), exec), /a container name must be specified for pod p, choose one of: \[a b\]/);
    assert.equal((resolveStreamTarget(pod(), { ...exec, container: 'b' }) as { container: string }).container, 'b');
    assert.equal((resolveStreamTarget(pod(), { ...exec, container: 'debugger' }) as { container: string }).container, 'debugger');
    refused(() => resolveStreamTarget(pod(), { ...exec, container: 'zz' }), /container zz is not valid for pod p/);
    refused(() => resolveStreamTarget(pod(), { ...exec, container: 'init' }), /is an init container/);
    refused(() => resolveStreamTarget(pod({ status: { phase: 'Succeeded' } }), { ...exec, container: 'a' }), /completed pod; current phase is Succeeded/);
    refused(() => resolveStreamTarget(pod({ spec: { containers: [{ name: 'a' }] } }), exec), /does not have a host assigned/);
    assert.equal(agentQuery({ ...exec, command: ['sh', '-c', 'a b'], tty: true }).toString(), 'command=sh&command=-c&command=a+b&stdout=true&tty=true');
  });
});

/** A minimal SPDY/3 client: what kubectl's spdystream writes, built here with zlib and the dictionary. */
class TestClient {
  private readonly deflate = zlib.createDeflate({ dictionary: SPDY_DICTIONARY });
  private readonly inflate = zlib.createInflate({ dictionary: SPDY_DICTIONARY });
  private received = Buffer.alloc(0);
  readonly toServer = new PassThrough();
  readonly fromServer = new PassThrough();
  readonly transport: Duplex;

  constructor() {
    this.transport = Duplex.from({ readable: this.toServer, writable: this.fromServer });
    this.fromServer.on('data', (chunk: Buffer) => (this.received = Buffer.concat([this.received, chunk])));
  }

  private compress(block: Buffer): Promise<Buffer> {
    return new Promise((resolve) => {
      this.deflate.write(block);
      this.deflate.flush(zlib.constants.Z_SYNC_FLUSH, () => {
        const out: Buffer[] = [];
        for (let c = this.deflate.read() as Buffer | null; c; c = this.deflate.read() as Buffer | null) out.push(c);
        resolve(Buffer.concat(out));
      });
    });
  }

  async synStream(id: number, headers: Record<string, string>, fin = false): Promise<void> {
    const block = await this.compress(encodeHeaderBlock(headers));
    const payload = Buffer.concat([Buffer.from([0, 0, 0, id, 0, 0, 0, 0, 0, 0]), block]);
    const head = Buffer.from([0x80, 3, 0, 1, fin ? 1 : 0, 0, 0, 0]);
    head.writeUIntBE(payload.length, 5, 3);
    this.toServer.write(Buffer.concat([head, payload]));
  }

  data(id: number, bytes: Buffer, fin = false): void {
    const head = Buffer.from([0, 0, 0, id, fin ? 1 : 0, 0, 0, 0]);
    head.writeUIntBE(bytes.length, 5, 3);
    this.toServer.write(Buffer.concat([head, bytes]));
  }

  ping(id: number): void {
    this.toServer.write(Buffer.from([0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, id]));
  }

  /** The frames received so far: control type (or 'data'), stream id, flags, payload. */
  frames(): { type: number | 'data'; id: number; flags: number; payload: Buffer }[] {
    const frames = [];
    let at = 0;
    while (at + 8 <= this.received.length) {
      const length = this.received.readUIntBE(at + 5, 3);
      const control = (this.received[at]! & 0x80) !== 0;
      const payload = this.received.subarray(at + 8, at + 8 + length);
      const type = control ? this.received.readUInt16BE(at + 2) : ('data' as const);
      const id = control ? (length >= 4 && type !== 6 ? payload.readUInt32BE(0) & 0x7fffffff : 0) : this.received.readUInt32BE(at) & 0x7fffffff;
      frames.push({ type, id, flags: this.received[at + 4]!, payload });
      at += 8 + length;
    }
    return frames;
  }

  inflateReply(payload: Buffer): Promise<Record<string, string>> {
    return new Promise((resolve) => {
      this.inflate.write(payload.subarray(4));
      this.inflate.flush(zlib.constants.Z_SYNC_FLUSH, () => {
        const out: Buffer[] = [];
        for (let c = this.inflate.read() as Buffer | null; c; c = this.inflate.read() as Buffer | null) out.push(c);
        resolve(decodeHeaderBlock(Buffer.concat(out)));
      });
    });
  }
}

async function until<T>(check: () => T | undefined, what: string): Promise<T> {
  for (let i = 0; i < 400; i++) {
    const value = check();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`never: ${what}`);
}

describe('SPDY/3.1 sessions', () => {
  it('header blocks round-trip; several values of a name are joined', () => {
    const block = encodeHeaderBlock({ StreamType: 'stdout', port: '80' });
    assert.deepEqual(decodeHeaderBlock(block), { streamtype: 'stdout', port: '80' });
    const raw = Buffer.concat([Buffer.from([0, 0, 0, 1, 0, 0, 0, 1]), Buffer.from('a'), Buffer.from([0, 0, 0, 3]), Buffer.from('x\0y')]);
    assert.deepEqual(decodeHeaderBlock(raw), { a: 'x,y' });
    assert.throws(() => decodeHeaderBlock(Buffer.from([0, 0, 0, 2, 0, 0, 0, 9])), /truncated/);
  });

  it('accepts streams with their headers, carries data both ways with FIN, answers pings', async () => {
    const client = new TestClient();
    const session = new SpdySession(client.transport);
    const streams: SpdyStream[] = [];
    session.on('stream', (stream: SpdyStream) => {
      streams.push(stream);
      void stream.reply();
    });
    // Two header blocks on one compression context: the second depends on the first.
    await client.synStream(1, { streamtype: 'error', requestid: '0', port: '80' }, true);
    await client.synStream(3, { streamtype: 'data', requestid: '0', port: '80' });
    const [error, data] = await until(() => (streams.length === 2 ? streams : undefined), 'two streams');
    assert.deepEqual(error!.headers, { streamtype: 'error', requestid: '0', port: '80' });
    assert.equal(data!.headers.streamtype, 'data');
    const received: Buffer[] = [];
    data!.on('data', (c: Buffer) => received.push(c));
    let ended = false;
    data!.on('end', () => (ended = true));
    client.data(3, Buffer.from('GET / HTTP/1.0\r\n\r\n'));
    client.data(3, Buffer.alloc(0), true);
    await until(() => (ended ? true : undefined), 'the FIN of stream 3');
    assert.equal(Buffer.concat(received).toString(), 'GET / HTTP/1.0\r\n\r\n');
    data!.end(Buffer.alloc(100_000, 'z'));
    client.ping(7);
    const frames = await until(() => {
      const all = client.frames();
      return all.some((f) => f.type === 'data' && f.flags === 1) && all.some((f) => f.type === 6) ? all : undefined;
    }, 'the reply data with FIN, and the ping answer');
    const replies = frames.filter((f) => f.type === 2);
    assert.deepEqual(replies.map((f) => f.id), [1, 3]);
    assert.deepEqual(await client.inflateReply(replies[0]!.payload), {});
    const body = Buffer.concat(frames.filter((f) => f.type === 'data' && f.id === 3).map((f) => f.payload));
    assert.equal(body.length, 100_000, 'the reply, split into frames, arrives whole');
    assert.ok(frames.filter((f) => f.type === 'data').every((f) => f.payload.length <= 32 * 1024), 'no DATA frame is larger than 32 KiB');
    assert.deepEqual([...frames.find((f) => f.type === 6)!.payload], [0, 0, 0, 7]);
    session.close();
  });

  it('ends the session on a frame of another version, one too large, or a header block that is not zlib', async () => {
    const notZlib = Buffer.concat([Buffer.from([0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]), Buffer.from('nozlib')]);
    for (const bad of [Buffer.from([0x80, 2, 0, 1, 0, 0, 0, 0]), Buffer.from([0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff]), notZlib]) {
      const client = new TestClient();
      const session = new SpdySession(client.transport);
      let closed = false;
      session.on('close', () => (closed = true));
      session.on('protocolError', () => undefined);
      client.toServer.write(bad);
      await until(() => (closed ? true : undefined), 'the session closed');
      assert.ok(client.frames().some((f) => f.type === 7), 'a GOAWAY was sent');
    }
  });
});
