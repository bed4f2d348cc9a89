import { AsyncLocalStorage } from 'node:async_hooks';
import type { GuardFailedError, WriteGuard } from '../datastore/types.js';
import { ApiError } from './errors.js';

/**
 * The write guard of the calls made inside `withWriteGuard`: every datastore write the object
 * store makes for them carries it (datastore/types.ts, `WriteGuard`). The controllers' fenced
 * client runs each write in its term's guard, the controller lease's key at this server's last
 * renewal, so a write that passed the fence's clock check and then waited (a paused process, a
 * stalled datastore) is refused by the datastore if another server took the lease meanwhile.
 *
 * It travels as async context rather than as a parameter because it belongs to the caller (the
 * leader's term), not to any request: the verbs between the client and the store need not know.
 * Only in-process calls carry it; a request over HTTP has none.
 */
const current = new AsyncLocalStorage<WriteGuard>();

export function withWriteGuard<T>(guard: WriteGuard, write: () => Promise<T>): Promise<T> {
  return current.run(guard, write);
}

/** The guard of the write being made now, if its caller set one. */
export function currentWriteGuard(): WriteGuard | undefined {
  return current.getStore();
}

/** A guarded write refused by the datastore: the guard key moved on (for the controllers: the lease changed). */
export class WriteGuardRefusedError extends ApiError {
  override name = 'WriteGuardRefusedError';
  constructor(readonly refusal: GuardFailedError) {
    super(503, 'ServiceUnavailable', `the write was refused by its guard: ${refusal.guard.key} changed (revision ${refusal.actualModRevision || 'gone'}, the writer expected ${refusal.guard.modRevision})`);
  }
}
