/**
 * Setting up the etcd backend's connection: the options, their checks (endpoints all http:// or
 * all https://, a certificate with its key), TLS material from files or PEM, and the `etcd3`
 * client with the gRPC and fault-handling settings the backend relies on.
 */

import fs from 'node:fs';

import { circuitBreaker, ConsecutiveBreaker, handleWhen } from 'cockatiel';
import { Etcd3, isRecoverableError, type IOptions } from 'etcd3';

import { DatastoreError } from '../types.js';

export interface EtcdOptions {
  /** Client URLs, e.g. `http://127.0.0.1:2379` or `https://10.0.0.1:2379`. */
  endpoints: string[];
  /** CA bundle for the server certificates: a file path (`caFile`) or PEM (`ca`). */
  caFile?: string;
  ca?: string | Buffer;
  /** Client certificate and key for mutual TLS. */
  certFile?: string;
  cert?: string | Buffer;
  keyFile?: string;
  key?: string | Buffer;
  /**
   * Key namespace: every key is stored under this prefix in etcd, so several datastores can share
   * one etcd. Progress notifications and replays from old revisions then also read keys outside
   * the namespace (their revisions), so the client needs read access to the whole keyspace.
   */
  prefix?: string;
  /** Deadline of every unary call (reads, writes, compaction). Default 30 s. */
  requestTimeoutMs?: number;
  /** How long the shared watch stream may stay broken before every watch fails. Default 30 s. */
  watchRetryTimeoutMs?: number;
  /** Most events kept in memory for watches resuming from a recent revision. Default 10 000. */
  watchCacheEvents?: number;
  /** Most bytes (keys and values) kept in that cache. Default 64 MiB. */
  watchCacheBytes?: number;
}

/** The HTTP/2 window, per stream and per connection: 16 MiB (see `createEtcdClient`). */
const FLOW_CONTROL_WINDOW = 16 * 1024 * 1024;

/** The gRPC channel options of Drover's etcd client (also what bench/etcd-client-cost.ts measures with). */
export const ETCD_GRPC_OPTIONS: NonNullable<IOptions['grpcOptions']> = {
  // Lists of large objects exceed gRPC's default 4 MiB receive limit.
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
  // Notice a dead connection (not just a closed one) under a long-lived watch stream.
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  // HTTP/2 flow control: with the default 64 KiB window, the shared watch stream (every write
  // comes back on it, with its previous value) could carry only ~64 KiB per turn of this busy
  // event loop, and fell seconds behind the writes under load (bench/etcd.ts, docs/benchmarks.md).
  'grpc-node.flow_control_window': FLOW_CONTROL_WINDOW,
};

/** A fault-handling policy that just runs the call once (see `createEtcdClient`). */
const NEVER_ABORTED = new AbortController().signal;
const noRetryPolicy = {
  execute: async <T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T): Promise<T> =>
    fn({ signal: NEVER_ABORTED }),
  onSuccess: () => ({ dispose: () => undefined }),
  onFailure: () => ({ dispose: () => undefined }),
} as unknown as NonNullable<NonNullable<IOptions['faultHandling']>['global']>;

/**
 * Whether a failed call says the connection to that member is bad (so the breaker should skip
 * the member for a while): a recoverable gRPC failure that the member itself did not answer. An
 * answer from etcd ("etcdserver: request timed out", "leader changed", "no leader") proves the
 * member is up: during an election, the member that lost its leader answers the proposals it had
 * forwarded with "request timed out" seconds later, one by one; opening the breaker on each of
 * them made every call of this server fail at once for a second after each (with one endpoint,
 * the usual case, there is no other member to go to), and its nodes' renewals with it.
 */
export function isConnectionFailure(error: unknown): boolean {
  if (!(error instanceof Error) || !isRecoverableError(error)) return false;
  return !/etcdserver:/.test(error.message);
}

/**
 * The per-member breaker: a member whose connection failed is skipped after one failure and
 * tried again after a second. The library's default (three failures, five seconds) kept a
 * restarted member out so long that a quick rolling restart looked like a total outage.
 */
export function hostBreaker(): ReturnType<typeof circuitBreaker> {
  return circuitBreaker(handleWhen(isConnectionFailure), { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(1) });
}

/** The etcd3 client for `options`; throws a {@link DatastoreError} for inconsistent options. */
export function createEtcdClient(options: EtcdOptions): Etcd3 {
  if (!options.endpoints || options.endpoints.length === 0) {
    throw new DatastoreError('etcd: at least one endpoint is required');
  }
  const read = (file: string | undefined, pem: string | Buffer | undefined): Buffer | undefined => {
    if (pem !== undefined) return Buffer.isBuffer(pem) ? pem : Buffer.from(pem);
    return file === undefined ? undefined : fs.readFileSync(file);
  };
  const ca = read(options.caFile, options.ca);
  const cert = read(options.certFile, options.cert);
  const key = read(options.keyFile, options.key);
  const endpoints = options.endpoints.map((e) => e.trim().replace(/\/+$/, ''));
  const https = endpoints.filter((e) => e.startsWith('https://')).length;
  const http = endpoints.filter((e) => e.startsWith('http://')).length;
  if (https > 0 && https !== endpoints.length) {
    throw new DatastoreError('etcd: endpoints must be all http:// or all https://');
  }
  if ((cert === undefined) !== (key === undefined)) {
    throw new DatastoreError('etcd: a client certificate needs its key, and a key its certificate');
  }
  const tls = https > 0 || ca !== undefined || cert !== undefined;
  if (tls && http > 0) {
    throw new DatastoreError('etcd: TLS settings were given, but the endpoints are http://');
  }
  const clientOptions: IOptions = {
    hosts: endpoints,
    grpcOptions: ETCD_GRPC_OPTIONS,
    faultHandling: {
      // No blind retries: a retried write whose first attempt did commit would report a
      // conflict for its own success. Calls retry where that is safe (see `call` in ../etcd.ts).
      global: noRetryPolicy,
      // A short per-member breaker, for connection failures only (see `hostBreaker`).
      host: () => hostBreaker() as unknown as ReturnType<NonNullable<NonNullable<IOptions['faultHandling']>['host']>>,
    },
  };
  if (tls) {
    // etcd3 (and gRPC) take the CA as the root; without one the system roots are used.
    clientOptions.credentials = {
      rootCertificate: ca as Buffer,
      ...(key ? { privateKey: key } : {}),
      ...(cert ? { certChain: cert } : {}),
    };
  }
  return new Etcd3(clientOptions);
}
