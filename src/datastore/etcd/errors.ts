/** How the etcd backend tells etcd's and gRPC's failures apart, and what it reports them as. */

import { DatastoreError } from '../types.js';

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function isCompactedError(error: unknown): boolean {
  return /required revision has been compacted/.test(errorText(error));
}

export function isFutureRevisionError(error: unknown): boolean {
  return /required revision is a future revision/.test(errorText(error));
}

/** Transient cluster conditions worth another try for a read (reads are idempotent). */
export function isTransient(error: unknown): boolean {
  const name = error instanceof Error ? error.constructor.name : '';
  return (
    name === 'GRPCUnavailableError' ||
    neverSent(error) ||
    /leader changed|no leader|request timed out|UNAVAILABLE/i.test(errorText(error))
  );
}

/**
 * Failures that prove the request never reached etcd (no connection, or the client's circuit
 * breaker refused it), so even a write can be retried, on another endpoint if there is one.
 */
export function neverSent(error: unknown): boolean {
  return /No connection established|ECONNREFUSED|circuit breaker is open/i.test(errorText(error));
}

export function wrap(error: unknown, what: string): Error {
  if (error instanceof DatastoreError) return error;
  return new DatastoreError(`etcd ${what} failed: ${errorText(error)}`, { cause: error });
}
