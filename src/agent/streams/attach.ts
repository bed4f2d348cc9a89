import type net from 'node:net';
import { Writable } from 'node:stream';
import { ERROR, exitStatus, failureStatus, STDERR, STDIN, STDOUT } from '../../apiserver/streaming/channels.js';
import type { ChannelPeer } from '../../apiserver/streaming/peers.js';
import { streamContainerLog } from '../pods/logs.js';
import { sendConnected, type SessionChannels } from './exec.js';

/**
 * `kubectl attach`: the container's output from now on, taken from its log as the supervisor
 * writes it (stdout and stderr together, as the log holds them), until the instance ends or the
 * client leaves. With `-i`, `stdin` is a connection to the container's stdin socket (the
 * supervisor keeps a pipe for containers with `stdin: true`, pods/stdin.ts): channel 0 goes into
 * it, the client closing its stdin half-closes it, and the session's end closes it (which closes
 * the container's stdin under `stdinOnce`). The main process has no terminal: a TTY is not made.
 */
export function runAttachSession(dir: string, container: string, peer: ChannelPeer, channels: SessionChannels, stdin?: net.Socket): void {
  const abort = new AbortController();
  stdin?.on('error', () => undefined);
  // The supervisor closed the socket (the pod finished): nothing more can be written.
  stdin?.on('close', () => peer.resume());
  peer.start({
    frame(channel, data) {
      if (channel !== STDIN || !stdin || !stdin.writable) return;
      if (!stdin.write(data)) {
        peer.pause();
        stdin.once('drain', () => peer.resume());
      }
    },
    end(channel) {
      if (channel === STDIN) stdin?.end();
    },
    close() {
      abort.abort();
      stdin?.destroy();
    },
  });
  sendConnected(peer, channels);
  const channel = channels.stdout ? STDOUT : STDERR;
  const out = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      void peer.send(channel, chunk).then(() => callback());
    },
  });
  const done = (status: object): void => {
    stdin?.destroy();
    void peer.send(ERROR, Buffer.from(JSON.stringify(status))).then(() => peer.close());
  };
  streamContainerLog(dir, container, { follow: true, previous: false, tailLines: 0 }, out, abort.signal).then(
    () => done(exitStatus(0)),
    (error: Error) => done(failureStatus(error.message, 400)),
  );
}
