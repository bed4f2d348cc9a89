import type { ChildProcess } from 'node:child_process';
import os from 'node:os';
import type { Readable } from 'node:stream';
import { ERROR, exitStatus, failureStatus, parseResize, RESIZE, STDERR, STDIN, STDOUT, type StreamStatus, type TerminalSize } from '../../apiserver/streaming/channels.js';
import type { ChannelPeer } from '../../apiserver/streaming/peers.js';
import { resizeTerminal as resizeScriptTerminal } from '../pods/runtime/terminal.js';

/**
 * The agent's end of one remote command session (exec; attach reuses the pumps): the process's
 * stdout and stderr go out on their channels (only those the client asked for), stdin comes in
 * on channel 0 until the client closes it, resizes on channel 4 reach the terminal, and when the
 * process has exited and its output is drained, its exit status goes out on channel 3 and the
 * session closes. A client that goes away takes the process with it.
 */

export interface SessionChannels {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

const SIGNAL_NUMBERS = os.constants.signals as Record<string, number>;
/** After SIGTERM, a process whose client left gets this long before SIGKILL. */
const KILL_GRACE_MS = 2000;

/** kubelet writes an empty message on the lowest writable channel first: "connected". */
export function sendConnected(peer: ChannelPeer, channels: SessionChannels): void {
  void peer.send(channels.stdout ? STDOUT : channels.stderr ? STDERR : ERROR, Buffer.alloc(0));
}

/** Copies a readable to a channel, pausing it while the peer is behind. Resolves at its end. */
export function pump(source: Readable | null | undefined, peer: ChannelPeer, channel: number, wanted: boolean): Promise<void> {
  return new Promise((resolve) => {
    if (!source) return resolve();
    let inFlight = 0;
    source.on('data', (chunk: Buffer) => {
      if (!wanted) return;
      inFlight++;
      if (inFlight === 16) source.pause();
      void peer.send(channel, chunk).then(() => {
        inFlight--;
        if (inFlight === 15) source.resume();
      });
    });
    source.once('end', () => resolve());
    source.once('close', () => resolve());
    source.once('error', () => resolve());
  });
}

/** The terminal of a session run through util-linux `script` (pods/runtime/terminal.ts) takes the client's size. */
export function resizeTerminal(scriptPid: number | undefined, size: TerminalSize): boolean {
  return resizeScriptTerminal(scriptPid, size.width, size.height);
}

/** Why a command could not start, as the client reads it (runc's wording for a missing binary). */
function startFailure(error: NodeJS.ErrnoException, argv0: string): string {
  if (error.code === 'ENOENT') return `failed to exec in container: exec: "${argv0}": executable file not found or no such file or directory`;
  if (error.code === 'EACCES') return `failed to exec in container: exec: "${argv0}": permission denied`;
  return `failed to exec in container: ${error.message}`;
}

/**
 * Runs the session around a process (spawned here, once the session is up, so that a command that
 * cannot start is reported on the error channel) until it exits or the client leaves.
 */
export function runProcessSession(start: () => ChildProcess, argv0: string, peer: ChannelPeer, channels: SessionChannels): void {
  let child: ChildProcess;
  try {
    child = start();
  } catch (error) {
    peer.start({ frame: () => undefined, end: () => undefined, close: () => undefined });
    sendConnected(peer, channels);
    void peer.send(ERROR, Buffer.from(JSON.stringify(failureStatus((error as Error).message, 400)))).then(() => peer.close());
    return;
  }
  let spawnError: NodeJS.ErrnoException | undefined;
  child.on('error', (error) => (spawnError ??= error));
  let exited = false;
  let pendingSize: TerminalSize | undefined;
  const applySize = (): void => {
    if (pendingSize && channels.tty) resizeTerminal(child.pid, pendingSize);
  };
  peer.start({
    frame(channel, data) {
      if (channel === STDIN && channels.stdin && child.stdin?.writable) {
        if (!child.stdin.write(data)) {
          peer.pause();
          child.stdin.once('drain', () => peer.resume());
        }
      } else if (channel === RESIZE) {
        pendingSize = parseResize(data) ?? pendingSize;
        applySize();
      }
    },
    end(channel) {
      if (channel === STDIN) child.stdin?.end();
    },
    close() {
      if (exited) return;
      // The client left: the command does not outlive its session.
      child.kill('SIGTERM');
      setTimeout(() => !exited && child.kill('SIGKILL'), KILL_GRACE_MS).unref();
    },
  });
  child.stdin?.on('error', () => undefined);
  sendConnected(peer, channels);
  // The terminal appears a moment after script starts: size it again then.
  if (channels.tty) for (const ms of [100, 300, 1000]) setTimeout(applySize, ms).unref();
  const outputs = Promise.all([pump(child.stdout, peer, STDOUT, channels.stdout), pump(child.stderr, peer, STDERR, channels.stderr)]);
  child.once('close', (code, signal) => {
    exited = true;
    void outputs.then(() => {
      let status: StreamStatus;
      if (spawnError && (code === null || code < 0)) {
        status = failureStatus(startFailure(spawnError, argv0));
      } else {
        status = exitStatus(code ?? 128 + (signal ? (SIGNAL_NUMBERS[signal] ?? 0) : 0));
      }
      void peer.send(ERROR, Buffer.from(JSON.stringify(status))).then(() => peer.close());
    });
  });
}
