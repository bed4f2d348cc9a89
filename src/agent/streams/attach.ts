import type net from 'node:net';
import { Writable } from 'node:stream';
import { ERROR, exitStatus, failureStatus, parseResize, RESIZE, STDERR, STDIN, STDOUT, type TerminalSize } from '../../apiserver/streaming/channels.js';
import type { ChannelPeer } from '../../apiserver/streaming/peers.js';
import { streamContainerLog } from '../pods/logs.js';
import { readRunState } from '../pods/run-spec.js';
import { resizeTerminal, sendConnected, type SessionChannels } from './exec.js';

/**
 * `kubectl attach`: the container's output from now on, taken from its log as the supervisor
 * writes it (stdout and stderr together, as the log holds them), until the instance ends or the
 * client leaves. With `-i`, `stdin` is a connection to the container's stdin socket (the
 * supervisor keeps a pipe for containers with `stdin: true`, pods/stdin.ts): channel 0 goes into
 * it, the client closing its stdin half-closes it, and the session's end closes it (which closes
 * the container's stdin under `stdinOnce`). A container with `tty: true` under runc runs on a
 * terminal (pods/runtime/terminal.ts): what is typed is echoed by it into the log, and resizes on
 * channel 4 set its size (`resize`); else resizes are ignored, as kubelet ignores them.
 */
export function runAttachSession(
  dir: string,
  container: string,
  peer: ChannelPeer,
  channels: SessionChannels,
  stdin?: net.Socket,
  resize?: (size: TerminalSize) => boolean,
): void {
  const abort = new AbortController();
  stdin?.on('error', () => undefined);
  // The supervisor closed the socket (the pod finished): nothing more can be written.
  stdin?.on('close', () => peer.resume());
  let retry: NodeJS.Timeout | undefined;
  const applySize = (size: TerminalSize, attempt = 0): void => {
    clearTimeout(retry);
    // A terminal that is not there yet (the instance is starting): try again a little later.
    if (!resize!(size) && attempt < 5) retry = setTimeout(() => applySize(size, attempt + 1), 200 * 2 ** attempt).unref();
  };
  peer.start({
    frame(channel, data) {
      if (channel === RESIZE) {
        const size = resize && parseResize(data);
        if (size) applySize(size);
        return;
      }
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
      clearTimeout(retry);
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

/**
 * Resizes the terminal of a running `tty: true` container: its main process as the supervisor
 * spawned it (script, with the foreground `runc run` on its terminal) is in state.json.
 */
export function resizeContainerTerminal(dir: string, container: string, size: TerminalSize): boolean {
  const run = readRunState(dir);
  const state = [...(run?.containers ?? []), ...(run?.ephemeralContainers ?? [])].find((c) => c.name === container)?.state;
  return state !== undefined && 'running' in state && resizeTerminal(state.running.pid, size);
}
