/**
 * The remote command channel protocol of `kubectl exec`/`attach`/`cp` over WebSocket
 * (`v5.channel.k8s.io`, and `v4.channel.k8s.io` for older clients): every message is binary, its
 * first byte names the channel. 0 stdin, 1 stdout, 2 stderr, 3 error (a metav1.Status JSON that
 * carries the exit code), 4 resize (`{"Width":w,"Height":h}`), and with v5, 255 = "this stream is
 * closed" whose one byte of payload is the channel that ended (`[255, 0]`: stdin reached EOF).
 * Pure: framing, negotiation and the Status documents, nothing that touches a socket.
 */

export const STDIN = 0;
export const STDOUT = 1;
export const STDERR = 2;
export const ERROR = 3;
export const RESIZE = 4;
export const CLOSE = 255;

export const PROTOCOL_V5 = 'v5.channel.k8s.io';
export const PROTOCOL_V4 = 'v4.channel.k8s.io';
/** The remote command protocols served, best first. */
export const REMOTE_COMMAND_PROTOCOLS = [PROTOCOL_V5, PROTOCOL_V4] as const;
export type RemoteCommandProtocol = (typeof REMOTE_COMMAND_PROTOCOLS)[number];

/** Port-forward as kubectl 1.30+ does it over WebSocket: a SPDY/3.1 session tunnelled in binary messages. */
export const PORT_FORWARD_TUNNEL_PROTOCOL = 'SPDY/3.1+portforward.k8s.io';
export const PORT_FORWARD_PROTOCOL = 'portforward.k8s.io';

/** One message: `[channel, ...data]`. */
export function encodeFrame(channel: number, data: Uint8Array = new Uint8Array(0)): Buffer {
  const frame = Buffer.allocUnsafe(data.length + 1);
  frame[0] = channel;
  frame.set(data, 1);
  return frame;
}

export interface Frame {
  channel: number;
  data: Buffer;
}

/** Splits a binary message; an empty one carries no channel and is undefined. */
export function decodeFrame(message: Buffer): Frame | undefined {
  if (message.length === 0) return undefined;
  return { channel: message[0]!, data: message.subarray(1) };
}

/** `[255, channel]`: the sender will write no more on `channel` (v5 only). */
export function closeFrame(channel: number): Buffer {
  return Buffer.from([CLOSE, channel]);
}

/**
 * The subprotocol to answer with from what the client offered (`Sec-WebSocket-Protocol`, a
 * comma-separated list): the first of ours it offered, in our order of preference.
 */
export function negotiate<T extends string>(offered: string | undefined, ours: readonly T[]): T | undefined {
  const theirs = new Set((offered ?? '').split(',').map((p) => p.trim()).filter(Boolean));
  return ours.find((p) => theirs.has(p));
}

export interface TerminalSize {
  width: number;
  height: number;
}

/**
 * A resize message, `{"Width":80,"Height":24}` (kubectl's capitalised keys, a newline after it);
 * several may arrive in one message. The last well-formed one counts; undefined when none is.
 */
export function parseResize(data: Buffer): TerminalSize | undefined {
  let size: TerminalSize | undefined;
  for (const line of data.toString('utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      const value = JSON.parse(line) as { Width?: unknown; Height?: unknown };
      const width = Number(value.Width);
      const height = Number(value.Height);
      if (Number.isInteger(width) && Number.isInteger(height) && width > 0 && height > 0 && width < 65536 && height < 65536) {
        size = { width, height };
      }
    } catch {
      // a torn or foreign message: ignored, as kubelet ignores a resize it cannot decode
    }
  }
  return size;
}

export function encodeResize(size: TerminalSize): Buffer {
  return Buffer.from(`${JSON.stringify({ Width: size.width, Height: size.height })}\n`);
}

/** The metav1.Status written on the error channel (kubelet's shape; `kind`/`apiVersion` are left out as it leaves them out). */
export interface StreamStatus {
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: { causes?: { reason: string; message: string }[] };
  code?: number;
}

/** The Status sent on the error channel when the command ended: Success, or the exit code as kubectl reads it. */
export function exitStatus(exitCode: number): StreamStatus {
  if (exitCode === 0) return { metadata: {}, status: 'Success' };
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: error executing command, exit status ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  };
}

/** A failure that is not an exit code (the command could not start, the container is gone): kubectl prints the message. */
export function failureStatus(message: string, code = 500): StreamStatus {
  return { metadata: {}, status: 'Failure', message, reason: 'InternalError', code };
}

/** The exit code a Status on the error channel carries: 0 for Success, the ExitCode cause, else undefined. */
export function exitCodeOf(status: StreamStatus): number | undefined {
  if (status.status === 'Success') return 0;
  const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
  const code = Number(cause?.message);
  return cause && Number.isInteger(code) ? code : undefined;
}
