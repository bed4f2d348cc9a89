import { spawn } from 'node:child_process';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import type { ProbeOutcome } from './probe-logic.js';
import type { ProbeHandler } from './run-spec.js';
import type { ExecPlan } from './runtime/exec.js';

/**
 * What one probe run does, for each handler kubelet knows: exec (through the runtime's exec, which
 * the supervisor passes in), httpGet, tcpSocket and grpc (the standard grpc.health.v1 Health/Check).
 * Each resolves to an outcome within the probe's timeout, never rejects, and words its failure as
 * kubelet's events do where it can ("HTTP probe failed with statuscode: 500").
 */

/** How much of a response body or command output a failure message keeps (kubelet's 10 KiB). */
export const MAX_PROBE_OUTPUT = 10 * 1024;
/** kubelet's User-Agent, with the Kubernetes minor Drover speaks. */
export const PROBE_USER_AGENT = 'kube-probe/1.32';

/**
 * The address probes connect to when the probe names no host: the pod's IP, as kubelet's. A pod
 * in its node's network (hostNetwork, the process runtime, no pod network) is reached at the
 * loopback address.
 */
export function podAddress(podIp?: string): string {
  return podIp ?? '127.0.0.1';
}

/** Runs a command in the container; the runtime provides it (process: a child with the container's env). */
export type ProbeExec = (command: string[], timeoutMs: number) => Promise<ExecResult>;

export interface ExecResult {
  /** null when it did not exit by itself (killed at the timeout, or could not start). */
  exitCode: number | null;
  output: string;
  timedOut: boolean;
  /** Set when the command could not be started at all. */
  error?: string;
}

export async function runProbe(handler: ProbeHandler, timeoutSeconds: number, exec: ProbeExec, podIp?: string): Promise<ProbeOutcome> {
  const timeoutMs = Math.max(1, timeoutSeconds) * 1000;
  if ('invalid' in handler) return { ok: false, message: handler.invalid.message };
  if ('exec' in handler) return execProbe(handler.exec.command, timeoutMs, exec);
  if ('httpGet' in handler) return httpProbe(handler.httpGet, timeoutMs, podIp);
  if ('tcpSocket' in handler) return tcpProbe(handler.tcpSocket.host || podAddress(podIp), handler.tcpSocket.port, timeoutMs);
  return grpcProbe(podAddress(podIp), handler.grpc.port, handler.grpc.service ?? '', timeoutMs);
}

async function execProbe(command: string[], timeoutMs: number, exec: ProbeExec): Promise<ProbeOutcome> {
  const result = await exec(command, timeoutMs);
  if (result.error !== undefined) return { ok: false, message: result.error };
  if (result.timedOut) return { ok: false, message: `command ${JSON.stringify(command.join(' '))} timed out` };
  if (result.exitCode === 0) return { ok: true };
  const output = result.output.trim();
  return { ok: false, message: output || `command ${JSON.stringify(command.join(' '))} exited with code ${result.exitCode ?? 'unknown'}` };
}

function hostForUrl(host: string): string {
  return net.isIPv6(host) ? `[${host}]` : host;
}

interface HttpGet {
  scheme: 'HTTP' | 'HTTPS';
  host?: string;
  port: number;
  path: string;
  headers: { name: string; value: string }[];
}

/** httpGet: any status from 200 to 399 passes; redirects are not followed (a 3xx passes, as kubelet's off-host redirects do). */
export function httpProbe(get: HttpGet, timeoutMs: number, podIp?: string): Promise<ProbeOutcome> {
  const host = get.host || podAddress(podIp);
  const path = get.path.startsWith('/') ? get.path : `/${get.path}`;
  const url = `${get.scheme === 'HTTPS' ? 'https' : 'http'}://${hostForUrl(host)}:${get.port}${path}`;
  const headers: Record<string, string> = { 'User-Agent': PROBE_USER_AGENT, Accept: '*/*' };
  for (const { name, value } of get.headers) {
    // A header named twice: kubelet sends both values; Node joins them.
    const existing = Object.keys(headers).find((k) => k.toLowerCase() === name.toLowerCase());
    if (existing && existing !== name) delete headers[existing];
    headers[name] = existing === name ? `${headers[name]}, ${value}` : value;
  }
  return new Promise((resolve) => {
    let settled = false;
    const finish = (outcome: ProbeOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.destroy();
      resolve(outcome);
    };
    const options = { method: 'GET', headers, agent: false as const, rejectUnauthorized: false };
    const request = (get.scheme === 'HTTPS' ? https : http).request(url, options, (response) => {
      // The body is read (up to kubelet's limit) so the connection ends cleanly; kubelet's message does not quote it.
      let size = 0;
      const done = (): void => {
        const status = response.statusCode ?? 0;
        if (status >= 200 && status < 400) finish({ ok: true });
        else finish({ ok: false, message: `HTTP probe failed with statuscode: ${status}` });
      };
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_PROBE_OUTPUT) done();
      });
      response.on('end', done);
      response.on('error', done);
    });
    const timer = setTimeout(
      () => finish({ ok: false, message: `Get ${JSON.stringify(url)}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)` }),
      timeoutMs,
    );
    request.on('error', (error: NodeJS.ErrnoException) => finish({ ok: false, message: `Get ${JSON.stringify(url)}: ${dialError(host, get.port, error)}` }));
    request.end();
  });
}

function dialError(host: string, port: number, error: NodeJS.ErrnoException): string {
  const where = `dial tcp ${hostForUrl(host)}:${port}`;
  if (error.code === 'ECONNREFUSED') return `${where}: connect: connection refused`;
  if (error.code === 'EHOSTUNREACH') return `${where}: connect: no route to host`;
  return `${where}: ${error.message}`;
}

/** tcpSocket: passes when a connection opens within the timeout. */
export function tcpProbe(host: string, port: number, timeoutMs: number): Promise<ProbeOutcome> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const finish = (outcome: ProbeOutcome): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => finish({ ok: false, message: `dial tcp ${hostForUrl(host)}:${port}: i/o timeout` }), timeoutMs);
    socket.once('connect', () => finish({ ok: true }));
    socket.once('error', (error: NodeJS.ErrnoException) => finish({ ok: false, message: dialError(host, port, error) }));
  });
}

const GRPC_SERVING_STATUS = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];

/** A protobuf string field 1 (HealthCheckRequest.service), in a gRPC length-prefixed frame. */
function healthCheckFrame(service: string): Buffer {
  const text = Buffer.from(service, 'utf8');
  const length: number[] = [];
  for (let n = text.length; ; n >>>= 7) {
    if (n < 0x80) {
      length.push(n);
      break;
    }
    length.push((n & 0x7f) | 0x80);
  }
  const message = text.length ? Buffer.concat([Buffer.from([0x0a, ...length]), text]) : Buffer.alloc(0);
  const header = Buffer.alloc(5);
  header.writeUInt32BE(message.length, 1);
  return Buffer.concat([header, message]);
}

/** HealthCheckResponse.status (field 1, a varint) from a gRPC frame; 0 (UNKNOWN) when absent. */
function servingStatus(frame: Buffer): number {
  const message = frame.subarray(5);
  for (let i = 0; i < message.length; ) {
    const tag = message[i++]!;
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = message[i++] ?? 0;
      value |= (byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80) || i >= message.length) break;
    }
    if (tag === 0x08) return value;
    if ((tag & 7) === 2) i += value;
  }
  return 0;
}

/** grpc: grpc.health.v1.Health/Check over HTTP/2 without TLS, as kubelet's gRPC probe; SERVING passes. */
export function grpcProbe(host: string, port: number, service: string, timeoutMs: number): Promise<ProbeOutcome> {
  const target = `${hostForUrl(host)}:${port}`;
  return new Promise((resolve) => {
    let settled = false;
    const session = http2.connect(`http://${target}`);
    const finish = (outcome: ProbeOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      session.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => finish({ ok: false, message: `timeout: health rpc did not complete within ${timeoutMs / 1000}s` }), timeoutMs);
    session.on('error', (error: NodeJS.ErrnoException) =>
      finish({ ok: false, message: `timeout: failed to connect service ${JSON.stringify(target)} within ${timeoutMs / 1000}s: ${dialError(host, port, error)}` }),
    );
    const stream = session.request({
      ':method': 'POST',
      ':path': '/grpc.health.v1.Health/Check',
      'content-type': 'application/grpc',
      te: 'trailers',
      'user-agent': PROBE_USER_AGENT,
    });
    const chunks: Buffer[] = [];
    let grpcStatus: string | undefined;
    let grpcMessage = '';
    const headersSeen = (headers: http2.IncomingHttpHeaders): void => {
      if (headers['grpc-status'] !== undefined) grpcStatus = String(headers['grpc-status']);
      if (headers['grpc-message'] !== undefined) grpcMessage = decodeURIComponent(String(headers['grpc-message']));
    };
    stream.on('response', headersSeen);
    stream.on('trailers', headersSeen);
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('error', (error) => finish({ ok: false, message: `error: health rpc probe failed: ${error.message}` }));
    stream.on('end', () => {
      if (grpcStatus !== undefined && grpcStatus !== '0') {
        finish({ ok: false, message: `error: health rpc probe failed: rpc error: code = ${grpcStatus} desc = ${grpcMessage}` });
        return;
      }
      const status = servingStatus(Buffer.concat(chunks));
      if (status === 1) finish({ ok: true });
      else finish({ ok: false, message: `service unhealthy (responded with ${JSON.stringify(GRPC_SERVING_STATUS[status] ?? String(status))})` });
    });
    stream.end(healthCheckFrame(service));
  });
}

/**
 * Exec probes through the runtime's exec (runtime/exec.ts's plan: for processes the command itself
 * with the container's environment and working directory, for runc `runc exec`), as a child of
 * the supervisor in its own process group, killed as a group at the timeout.
 */
export function planExec(plan: (argv: string[]) => ExecPlan): ProbeExec {
  return (command, timeoutMs) =>
    new Promise((resolve) => {
      let output = '';
      let timedOut = false;
      let child;
      try {
        const { file, args, cwd, env } = plan(command);
        child = spawn(file, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
      } catch (error) {
        resolve({ exitCode: null, output: '', timedOut: false, error: (error as Error).message });
        return;
      }
      const collect = (chunk: Buffer): void => {
        if (output.length < MAX_PROBE_OUTPUT) output += chunk.toString('utf8').slice(0, MAX_PROBE_OUTPUT - output.length);
      };
      child.stdout?.on('data', collect);
      child.stderr?.on('data', collect);
      const killGroup = (): void => {
        try {
          if (child.pid) process.kill(-child.pid, 'SIGKILL');
        } catch {
          // gone already
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, timeoutMs);
      child.once('error', (error) => {
        clearTimeout(timer);
        resolve({ exitCode: null, output, timedOut: false, error: error.message });
      });
      child.once('close', (code) => {
        clearTimeout(timer);
        // Whatever the command left in its group goes with it.
        killGroup();
        resolve({ exitCode: code, output, timedOut });
      });
    });
}
