import { Writable } from 'node:stream';
import { ERROR, exitStatus, failureStatus, STDERR, STDOUT } from '../../apiserver/streaming/channels.js';
import type { ChannelPeer } from '../../apiserver/streaming/peers.js';
import { streamContainerLog } from '../pods/logs.js';
import { sendConnected, type SessionChannels } from './exec.js';

/**
 * `kubectl attach` without `-i`: the container's output from now on, taken from its log as the
 * supervisor writes it (stdout and stderr together, as the log holds them), until the instance
 * ends or the client leaves. The container's stdin is not kept open by the supervisor, so `-i` is
 * refused before the upgrade (docs/workloads.md).
 */
export function runAttachSession(dir: string, container: string, peer: ChannelPeer, channels: SessionChannels): void {
  const abort = new AbortController();
  peer.start({ frame: () => undefined, end: () => undefined, close: () => abort.abort() });
  sendConnected(peer, channels);
  const channel = channels.stdout ? STDOUT : STDERR;
  const out = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      void peer.send(channel, chunk).then(() => callback());
    },
  });
  streamContainerLog(dir, container, { follow: true, previous: false, tailLines: 0 }, out, abort.signal).then(
    () => void peer.send(ERROR, Buffer.from(JSON.stringify(exitStatus(0)))).then(() => peer.close()),
    (error: Error) => void peer.send(ERROR, Buffer.from(JSON.stringify(failureStatus(error.message, 400)))).then(() => peer.close()),
  );
}
